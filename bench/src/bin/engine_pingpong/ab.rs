//! engine_pingpong's A/B mode: separate runs alternating, their 8 B
//! figures compared per state of the machine ([`psmrail_bench::ab`]).
//!
//! - Builds (`--ab N --ab-builds A,B`): each engine_pingpong build in
//!   turn, N times, each run `--sizes 8 --rounds 3 --phases raw,PHASE`;
//!   per build, the median PHASE/raw of the runs whose raw 8 B took under
//!   0.2 µs (the fast state) and of the others (slow). Any build of this
//!   program will do, older ones too: its table's 8 B row is read.
//! - The public API against the raw floor (`--ab N --ab-pingpong PATH`):
//!   this program's raw phase (one round) and the pingpong example's
//!   native tagged 8 B ping-pong in turn, N times each; the median API/raw
//!   of the pairs where both saw the fast state (raw under 0.2 µs, API
//!   under 0.3 µs), and of those where both saw the slow one.
//!
//! Never run it next to another benchmark or a test run: both sides spin.

use psmrail_bench::ab::{self, Run, State};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What an A/B run alternates.
pub(crate) enum Contenders {
    /// engine_pingpong builds, each comparing `phase` with raw.
    Builds {
        /// The builds' paths.
        builds: Vec<PathBuf>,
        /// The phase's name.
        phase: &'static str,
    },
    /// This program's raw floor against the pingpong example at this path.
    Pingpong(PathBuf),
}

/// A command for one run, with PSM on shared memory unless the
/// environment says otherwise.
fn command(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    if std::env::var_os("PSM2_DEVICES").is_none() {
        cmd.env("PSM2_DEVICES", "self,shm");
    }
    cmd
}

/// The 8 B row's fields `base` and `other` of a run's table.
fn figures(text: &str, base: usize, other: usize) -> Option<(f64, f64)> {
    let row = ab::table_row(text, "8")?;
    Some((ab::field(&row, base)?, ab::field(&row, other)?))
}

/// One run of an engine_pingpong build: raw and `phase` at 8 B, µs.
fn build_run(build: &Path, phase: &str) -> Result<Run, String> {
    let text = ab::stdout_of(command(build).args([
        "--sizes",
        "8",
        "--rounds",
        "3",
        "--phases",
        &format!("raw,{phase}"),
    ]))?;
    let (base_us, other_us) = figures(&text, 1, 2)
        .ok_or_else(|| format!("{} printed no 8 B figures", build.display()))?;
    Ok(Run {
        who: build.display().to_string(),
        base_us,
        other_us,
    })
}

/// One pair: this program's raw floor, then the pingpong example's API
/// figure (its half round trip from the MB/sec column, which has more
/// digits), µs.
fn pingpong_run(pingpong: &Path) -> Result<Run, String> {
    let me = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let raw =
        ab::stdout_of(command(&me).args(["--sizes", "8", "--rounds", "1", "--phases", "raw"]))?;
    let (base_us, _) =
        figures(&raw, 1, 1).ok_or_else(|| "the raw run printed no 8 B figure".to_owned())?;
    let api = ab::stdout_of(command(pingpong).args([
        "--spawn", "--engine", "native", "--tagged", "-S", "8", "-I", "300000",
    ]))?;
    let (_, mb_s) = figures(&api, 5, 5)
        .ok_or_else(|| format!("{} printed no 8 B figure", pingpong.display()))?;
    Ok(Run {
        who: "api".to_owned(),
        base_us,
        other_us: 8.0 / mb_s,
    })
}

/// Runs the contenders in turn `n` times, printing each run, then the
/// summary.
pub(crate) fn main(n: usize, contenders: &Contenders) -> Result<(), String> {
    let mut runs = Vec::new();
    for _ in 0..n {
        match contenders {
            Contenders::Builds { builds, phase } => {
                for b in builds {
                    let r = build_run(b, phase)?;
                    println!("{}", r.line("raw", phase));
                    runs.push(r);
                }
            }
            Contenders::Pingpong(path) => {
                let r = pingpong_run(path)?;
                println!("{}", r.line("raw", "api"));
                runs.push(r);
            }
        }
    }
    let summary = match contenders {
        Contenders::Builds { phase, .. } => ab::summary(&runs, &format!("{phase}/raw"), |r| {
            Some(if r.base_us < 0.2 {
                State::Fast
            } else {
                State::Slow
            })
        }),
        Contenders::Pingpong(_) => ab::summary(&runs, "api/raw", |r| {
            match (r.base_us < 0.2, r.other_us < 0.3) {
                (true, true) => Some(State::Fast),
                (false, false) => Some(State::Slow),
                _ => None,
            }
        }),
    };
    print!("{summary}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_of_a_table() {
        let table = "     size      raw us     fast us\n        8       0.150       0.180\n";
        assert_eq!(figures(table, 1, 2), Some((0.15, 0.18)));
        let pingpong = "   bytes    #sent     #ack    total     time     MB/sec\n       8     1000    =1000      16k    0.01s      40.00\n";
        assert_eq!(figures(pingpong, 5, 5), Some((40.0, 40.0)));
        assert_eq!(figures("nothing", 1, 2), None);
    }
}
