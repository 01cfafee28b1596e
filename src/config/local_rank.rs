//! The process's local rank: its index among the job's processes on this
//! node, as told by the launcher's environment.
//!
//! The fixed rail policy sends on rail `local rank mod rails`
//! ([`RailChooser`](crate::mrail::core::rail_choice::RailChooser)), which spreads the
//! processes of a node over the rails. Launchers announce the local rank in
//! different variables; [`local_rank`] looks at the pairs of
//! [`LOCAL_RANK_VARS`] in order, as libfabric's `ofi_get_local_rank_info`
//! does, and uses the first pair whose size variable is a decimal integer
//! above zero. When no pair applies the local rank is 0.
//!
//! Once a size variable has selected its pair, the rank variable must be
//! set to a decimal integer below the size; anything else is a
//! [`ConfigError`] naming the rank variable, rather than a silent 0.

use std::ops::Range;

use super::{ConfigError, VarSource};

/// The `(size, rank)` variable pairs, in the order they are consulted:
/// MPICH/Intel MPI, Open MPI, ParaStation MPI, torchrun, Slurm, oneCCL.
pub const LOCAL_RANK_VARS: [(&str, &str); 6] = [
    ("MPI_LOCALNRANKS", "MPI_LOCALRANKID"),
    ("OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("PSC_MPI_PPN", "PSC_MPI_NODE_RANK"),
    ("LOCAL_WORLD_SIZE", "LOCAL_RANK"),
    ("SLURM_NTASKS_PER_NODE", "SLURM_LOCALID"),
    ("CCL_LOCAL_SIZE", "CCL_LOCAL_RANK"),
];

/// A local rank and where it came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LocalRank {
    /// The local rank (0 when no launcher variable applies).
    pub rank: u32,
    /// The rank variable it was read from, `None` for the default.
    pub from: Option<&'static str>,
}

/// Reads the local rank from `vars` (see the [module](self) documentation).
///
/// ```
/// use psmrail::mrail::core::local_rank::{local_rank, LocalRank};
///
/// let vars = [("SLURM_NTASKS_PER_NODE", "4"), ("SLURM_LOCALID", "3")];
/// assert_eq!(local_rank(&vars)?, LocalRank { rank: 3, from: Some("SLURM_LOCALID") });
///
/// // Open MPI's pair comes before Slurm's.
/// let vars = [("SLURM_NTASKS_PER_NODE", "4"), ("SLURM_LOCALID", "3"),
///             ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"), ("OMPI_COMM_WORLD_LOCAL_RANK", "1")];
/// assert_eq!(local_rank(&vars)?.rank, 1);
///
/// let none: [(&str, &str); 0] = [];
/// assert_eq!(local_rank(&none)?, LocalRank::default());
///
/// let err = local_rank(&[("LOCAL_WORLD_SIZE", "2"), ("LOCAL_RANK", "2")]).unwrap_err();
/// assert_eq!(err.var(), "LOCAL_RANK");
/// # Ok::<(), psmrail::config::ConfigError>(())
/// ```
pub fn local_rank<V: VarSource + ?Sized>(vars: &V) -> Result<LocalRank, ConfigError> {
    for (size_var, rank_var) in LOCAL_RANK_VARS {
        let size = vars
            .var_os(size_var)
            .and_then(|v| v.to_str().and_then(parse_decimal));
        let Some(size) = size.filter(|&n| n > 0) else {
            continue;
        };
        let err = |value: &str, item: Range<usize>, problem: String| {
            ConfigError::new(
                rank_var,
                value,
                item,
                format!("a decimal local rank below {size_var}={size}"),
            )
            .with_problem(problem)
        };
        let Some(raw) = vars.var_os(rank_var) else {
            return Err(err(
                "",
                0..0,
                format!("unset while {size_var}={size} is set"),
            ));
        };
        let text = match raw.into_string() {
            Ok(text) => text,
            Err(raw) => {
                let lossy = raw.to_string_lossy().into_owned();
                let len = lossy.len();
                return Err(err(&lossy, 0..len, "the value is not valid UTF-8".into()));
            }
        };
        let whole = 0..text.len();
        let Some(rank) = parse_decimal(&text) else {
            return Err(err(
                &text,
                whole,
                format!("{text:?} is not a decimal integer"),
            ));
        };
        if rank >= size {
            return Err(err(
                &text,
                whole,
                format!("rank {rank} is not below the local size {size}"),
            ));
        }
        let Ok(rank) = u32::try_from(rank) else {
            return Err(err(&text, whole, format!("rank {rank} is too large")));
        };
        return Ok(LocalRank {
            rank,
            from: Some(rank_var),
        });
    }
    Ok(LocalRank::default())
}

/// A non-negative decimal integer: ASCII digits, no sign, no leading zero
/// other than `0` itself (C's base-detecting parsers would read `010` as
/// octal), fitting a u64.
fn parse_decimal(text: &str) -> Option<u64> {
    let digits_only = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits_only || (text.len() > 1 && text.starts_with('0')) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn every_pair_is_read() {
        for (size, rank) in LOCAL_RANK_VARS {
            let vars = [(size, "8"), (rank, "5")];
            assert_eq!(
                local_rank(&vars[..]),
                Ok(LocalRank {
                    rank: 5,
                    from: Some(rank)
                })
            );
        }
    }

    #[test]
    fn earlier_pairs_win() {
        let mut vars: Vec<(&str, &str)> = Vec::new();
        for (i, (size, rank)) in LOCAL_RANK_VARS.iter().enumerate().rev() {
            vars.push((size, "10"));
            vars.push((rank, ["0", "1", "2", "3", "4", "5"][i]));
            assert_eq!(local_rank(&vars).unwrap().rank, i as u32);
        }
    }

    #[test]
    fn sizes_that_do_not_parse_are_skipped() {
        for size in ["0", "", "x", "-1", "+2", "02", " 2", "99999999999999999999"] {
            let vars = [
                ("MPI_LOCALNRANKS", size),
                ("MPI_LOCALRANKID", "junk"),
                ("CCL_LOCAL_SIZE", "3"),
                ("CCL_LOCAL_RANK", "2"),
            ];
            assert_eq!(
                local_rank(&vars),
                Ok(LocalRank {
                    rank: 2,
                    from: Some("CCL_LOCAL_RANK")
                }),
                "{size:?}"
            );
        }
        let vars = [("MPI_LOCALRANKID", "3")];
        assert_eq!(local_rank(&vars), Ok(LocalRank::default()));
    }

    #[test]
    fn bad_ranks_name_the_rank_variable() {
        let cases = [
            (None, "unset"),
            (Some("x1"), "not a decimal integer"),
            (Some("-1"), "not a decimal integer"),
            (Some("01"), "not a decimal integer"),
            (Some("4"), "not below"),
            (Some("99999999999999999999"), "not a decimal integer"),
        ];
        for (rank, problem) in cases {
            let mut vars = vec![("PSC_MPI_PPN", "4")];
            if let Some(r) = rank {
                vars.push(("PSC_MPI_NODE_RANK", r));
            }
            let err = local_rank(&vars).unwrap_err();
            assert_eq!(err.var(), "PSC_MPI_NODE_RANK");
            assert_eq!(err.value(), rank.unwrap_or(""));
            assert!(err.problem().unwrap().contains(problem), "{err}");
            assert!(err.expected().contains("PSC_MPI_PPN=4"), "{err}");
        }
        let big = [
            ("LOCAL_WORLD_SIZE", "8589934592"),
            ("LOCAL_RANK", "4294967296"),
        ];
        assert!(local_rank(&big)
            .unwrap_err()
            .to_string()
            .contains("too large"));
        let raw = [
            ("LOCAL_WORLD_SIZE", OsString::from("2")),
            ("LOCAL_RANK", OsString::from_vec(vec![0xff])),
        ];
        let err = local_rank(&raw).unwrap_err();
        assert!(err.problem().unwrap().contains("UTF-8"));
    }

    proptest! {
        #[test]
        fn never_panics(size in ".{0,6}", rank in ".{0,6}", pair in 0usize..6) {
            let (s, r) = LOCAL_RANK_VARS[pair];
            let vars = [(s, size.clone()), (r, rank.clone())];
            match local_rank(&vars) {
                Ok(lr) => {
                    if lr.from.is_some() {
                        prop_assert_eq!(lr.rank.to_string(), rank);
                        prop_assert!(u64::from(lr.rank) < size.parse::<u64>().unwrap());
                    }
                }
                Err(e) => {
                    prop_assert_eq!(e.var(), r);
                    prop_assert_eq!(e.value(), rank);
                }
            }
        }

        #[test]
        fn valid_pairs_are_read(size in 1u64..1000, rank in 0u64..1000, pair in 0usize..6) {
            let (s, r) = LOCAL_RANK_VARS[pair];
            let vars = [(s, size.to_string()), (r, rank.to_string())];
            let got = local_rank(&vars);
            if rank < size {
                prop_assert_eq!(got, Ok(LocalRank { rank: rank as u32, from: Some(r) }));
            } else {
                prop_assert!(got.is_err());
            }
        }
    }
}
