//! Checks shared by the cargo-fuzz targets (`fuzz/fuzz_targets/`) and the
//! corpus replay test (`tests/fuzz_corpus.rs`). Not a stable API.
//!
//! Each check takes arbitrary bytes, runs them through the parser both
//! directly and through the environment path (`from_vars`), and panics if an
//! invariant breaks:
//! * both paths agree;
//! * a value that parses displays as text that parses back to the same
//!   value;
//! * an error names the right variable, carries the whole value, and its
//!   item is the text found at its position in that value.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use psmrail_reactor::{CpuSet, CpuTopology};

use super::affinity::{self, AffinitySpec};
use super::error::ConfigError;
use super::mrail::{MrailConfig, CONFIG_VAR};
use super::psm::PsmConfig;
use super::rail_policy::{RailPolicyTable, MAX_ENTRIES};

/// Checks the invariants every [`ConfigError`] must satisfy.
fn check_error(err: &ConfigError, var: &str, text: Option<&str>) {
    assert_eq!(err.var(), var, "error names the wrong variable: {err}");
    if let Some(text) = text {
        assert_eq!(err.value(), text, "error does not carry the whole value");
    }
    let tail = err
        .value()
        .get(err.position()..)
        .unwrap_or_else(|| panic!("position {} is not in the value: {err}", err.position()));
    assert!(
        tail.starts_with(err.item()),
        "item {:?} is not at byte {} of {:?}",
        err.item(),
        err.position(),
        err.value()
    );
    assert!(!err.expected().is_empty());
    let shown = err.to_string();
    assert!(shown.starts_with(var), "{shown}");
    let as_crate: crate::Error = err.clone().into();
    assert_eq!(as_crate.kind(), crate::ErrorKind::Inval);
}

/// The `FI_OFI_MRAIL_CONFIG` check. Returns whether the input parsed.
pub fn check_mrail_config(data: &[u8]) -> bool {
    let vars = [(CONFIG_VAR, OsString::from_vec(data.to_vec()))];
    let via_env = MrailConfig::from_vars(&vars);
    let Ok(text) = std::str::from_utf8(data) else {
        let err = via_env.expect_err("a value that is not UTF-8 must be rejected");
        check_error(&err, CONFIG_VAR, None);
        return false;
    };
    let parsed = text.parse::<RailPolicyTable>();
    match (&parsed, &via_env) {
        (Ok(table), Ok(cfg)) => assert_eq!(cfg.policy_table(), table),
        (Err(a), Err(b)) => assert_eq!(a, b),
        _ => panic!("FromStr and from_vars disagree on {text:?}"),
    }
    match parsed {
        Ok(table) => {
            let shown = table.to_string();
            let again: RailPolicyTable = shown
                .parse()
                .unwrap_or_else(|e| panic!("{shown:?} (from {text:?}) does not parse: {e}"));
            assert_eq!(again, table, "round trip changed {text:?}");
            let entries = table.entries();
            assert!((1..=MAX_ENTRIES).contains(&entries.len()));
            assert!(entries.windows(2).all(|w| w[0].0 < w[1].0), "not ascending");
            for &(max, policy) in entries {
                if let Some(b) = max.bytes() {
                    assert_eq!(table.policy_for(b), policy);
                }
            }
            assert_eq!(
                table.policy_for(u64::MAX),
                entries[entries.len() - 1].1,
                "the last entry must be the catch-all"
            );
            assert_eq!(RailPolicyTable::new(entries.iter().copied()), Ok(table));
            true
        }
        Err(err) => {
            check_error(&err, CONFIG_VAR, Some(text));
            false
        }
    }
}

/// Topologies the affinity check resolves against.
fn topologies() -> [CpuTopology; 3] {
    let all: CpuSet = (0..psmrail_reactor::MAX_CPUS).collect();
    [
        CpuTopology {
            online: psmrail_reactor::MAX_CPUS,
            allowed: all,
        },
        CpuTopology {
            online: 6,
            allowed: [0, 1, 2, 4, 5].into_iter().collect(),
        },
        CpuTopology {
            online: 1,
            allowed: [0].into_iter().collect(),
        },
    ]
}

/// The `FI_PSM_PROG_AFFINITY` check. Returns whether the input parsed.
pub fn check_prog_affinity(data: &[u8]) -> bool {
    let var = affinity::VAR;
    let vars = [(var, OsString::from_vec(data.to_vec()))];
    let topologies = topologies();
    let via_env =
        PsmConfig::builder_from_vars(&vars).and_then(|b| b.topology(topologies[1]).build());
    let Ok(text) = std::str::from_utf8(data) else {
        let err = via_env.expect_err("a value that is not UTF-8 must be rejected");
        check_error(&err, var, None);
        return false;
    };
    let spec = match text.parse::<AffinitySpec>() {
        Ok(spec) => spec,
        Err(err) => {
            check_error(&err, var, Some(text));
            assert_eq!(via_env.err(), Some(err), "FromStr and from_vars disagree");
            return false;
        }
    };
    assert!(!spec.items().is_empty());
    assert_eq!(spec.as_str(), text);
    let shown = spec.to_string();
    let again: AffinitySpec = shown
        .parse()
        .unwrap_or_else(|e| panic!("{shown:?} (from {text:?}) does not parse: {e}"));
    assert_eq!(again, spec, "round trip changed {text:?}");
    assert_eq!(
        AffinitySpec::new(spec.items().iter().copied()),
        Ok(spec.clone())
    );

    for (i, topology) in topologies.iter().enumerate() {
        let resolved = spec.resolve(topology);
        if i == 1 {
            match (&resolved, &via_env) {
                (Ok(set), Ok(cfg)) => assert_eq!(cfg.prog_affinity(), Some(set)),
                (Err(a), Err(b)) => assert_eq!(a, b),
                _ => panic!("resolve and from_vars disagree on {text:?}"),
            }
        }
        match resolved {
            Ok(set) => {
                assert!(!set.is_empty());
                assert!(set.is_subset(&topology.allowed));
                let as_spec = AffinitySpec::from_cpu_set(&set)
                    .unwrap_or_else(|e| panic!("set {set} does not parse: {e}"));
                assert_eq!(as_spec.resolve(&topologies[0]), Ok(set));
                // A resolved set is also valid against itself.
                let own = CpuTopology {
                    online: topology.online,
                    allowed: set,
                };
                assert_eq!(spec.resolve(&own), Ok(set));
            }
            Err(err) => check_error(&err, var, Some(text)),
        }
    }
    true
}
