//! A/B comparisons of separate runs on a noisy machine: programs run in
//! turn, again and again, each run giving a baseline figure and the figure
//! compared with it; the summary gives, per contender and per state of
//! the machine, the median of the runs' ratios and every ratio.
//!
//! The virtual machines these benchmarks run on switch between a fast and
//! a slow state from one process pair to the next, so only runs that saw
//! the same state are pooled; the caller says which state a run saw.

use crate::stats::median;
use std::fmt::Write as _;
use std::process::Command;

/// One run of a contender.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// Which contender ran (a program's path, or a name).
    pub who: String,
    /// The baseline figure, µs.
    pub base_us: f64,
    /// The figure compared with the baseline, µs.
    pub other_us: f64,
}

impl Run {
    /// `other_us / base_us`.
    pub fn ratio(&self) -> f64 {
        self.other_us / self.base_us
    }

    /// The run as one line of output: both figures and their ratio.
    pub fn line(&self, base: &str, other: &str) -> String {
        format!(
            "{} {base} {:.3} {other} {:.3} {other}/{base} {:.3}",
            self.who,
            self.base_us,
            self.other_us,
            self.ratio()
        )
    }
}

/// The machine's state during a run, when it can be told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// The faster state.
    Fast,
    /// The slower state.
    Slow,
}

impl State {
    /// The name the summary prints.
    pub fn name(self) -> &'static str {
        match self {
            State::Fast => "fast",
            State::Slow => "slow",
        }
    }
}

/// Runs `cmd` to its end; its standard output, or why it failed (its
/// standard error included).
pub fn stdout_of(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("starting {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!(
            "{:?} failed ({}): {}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The whitespace-separated fields of the first line of `text` whose
/// first field is `first` (a table's row).
pub fn table_row<'a>(text: &'a str, first: &str) -> Option<Vec<&'a str>> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.first() == Some(&first))
}

/// Field `i` of a table row as a number.
pub fn field(row: &[&str], i: usize) -> Option<f64> {
    row.get(i)?.parse().ok()
}

/// Per contender (in the order they first ran) and state, a line: the
/// median of the ratios of the runs that saw that state, how many, and
/// each ratio in ascending order. `what` names the ratio (`fast/raw`);
/// runs whose state is `None` are left out.
pub fn summary(runs: &[Run], what: &str, state: impl Fn(&Run) -> Option<State>) -> String {
    let mut who: Vec<&str> = Vec::new();
    for r in runs {
        if !who.contains(&r.who.as_str()) {
            who.push(&r.who);
        }
    }
    let mut out = String::new();
    for w in who {
        for st in [State::Fast, State::Slow] {
            let mut ratios: Vec<f64> = runs
                .iter()
                .filter(|r| r.who == w && state(r) == Some(st))
                .map(Run::ratio)
                .collect();
            let Some(m) = median(&mut ratios) else {
                continue;
            };
            let each: Vec<String> = ratios.iter().map(|r| format!("{r:.3}")).collect();
            let _ = writeln!(
                out,
                "{w} {} state: median {what} {m:.3} over {} runs: {}",
                st.name(),
                ratios.len(),
                each.join(" ")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(who: &str, base: f64, other: f64) -> Run {
        Run {
            who: who.to_owned(),
            base_us: base,
            other_us: other,
        }
    }

    #[test]
    fn rows_and_fields() {
        let text = "     size   raw us  fast us\n        8    0.150    0.180\n";
        let row = table_row(text, "8");
        assert_eq!(row, Some(vec!["8", "0.150", "0.180"]));
        let row = row.unwrap_or_default();
        assert_eq!(field(&row, 1), Some(0.15));
        assert_eq!(field(&row, 7), None);
        assert_eq!(table_row(text, "9"), None);
    }

    #[test]
    fn medians_per_contender_and_state() {
        let runs = [
            run("a", 0.1, 0.12),
            run("b", 0.1, 0.15),
            run("a", 0.1, 0.13),
            run("b", 0.3, 0.36),
            run("a", 0.1, 0.11),
        ];
        let s = summary(&runs, "x/raw", |r| {
            Some(if r.base_us < 0.2 {
                State::Fast
            } else {
                State::Slow
            })
        });
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(
            lines,
            [
                "a fast state: median x/raw 1.200 over 3 runs: 1.100 1.200 1.300",
                "b fast state: median x/raw 1.500 over 1 runs: 1.500",
                "b slow state: median x/raw 1.200 over 1 runs: 1.200",
            ]
        );
        assert_eq!(summary(&runs, "x", |_| None), "");
        assert_eq!(
            runs[0].line("raw", "fast"),
            "a raw 0.100 fast 0.120 fast/raw 1.200"
        );
    }
}
