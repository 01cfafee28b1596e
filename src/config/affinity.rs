//! `FI_PSM_PROG_AFFINITY`: the CPU-set grammar, parsed without I/O
//! ([`AffinitySpec`]) and resolved against the CPU topology captured at
//! start-up ([`AffinitySpec::resolve`]).

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use psmrail_reactor::{CpuSet, CpuTopology, MAX_CPUS};

use super::error::ConfigError;
use super::number::{parse_i64, parse_u64, IntProblem};

/// The variable this grammar belongs to.
pub(crate) const VAR: &str = "FI_PSM_PROG_AFFINITY";
const EXPECTED_ITEM: &str = "<start>[:<end>[:<stride>]] with integer core ids";
const EXPECTED_ID: &str = "core ids in -1024..=1023 (CPU_SETSIZE is 1024)";
const EXPECTED_STRIDE: &str = "a stride >= 1";
const EXPECTED_ORDER: &str =
    "<start> <= <end> after normalisation (a negative id counts back from the number of online CPUs)";
const EXPECTED_ALLOWED: &str = "CPUs within the process's allowed CPU set";

/// The smallest core id the grammar accepts (`-CPU_SETSIZE`).
pub const MIN_CORE_ID: i64 = -(MAX_CPUS as i64);
/// The largest core id the grammar accepts (`CPU_SETSIZE - 1`).
pub const MAX_CORE_ID: i64 = MAX_CPUS as i64 - 1;

/// One comma-separated item of an affinity list, exactly as written (so that
/// `Display` reproduces the form: `3`, `3:3` and `3:3:1` are three different
/// items that select the same CPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AffinityItem {
    /// `<start>`: one core.
    Core(i64),
    /// `<start>:<end>`: every core from `start` to `end`.
    Range {
        /// First core.
        start: i64,
        /// Last core (inclusive).
        end: i64,
    },
    /// `<start>:<end>:<stride>`: `start`, `start + stride`, ... up to `end`.
    Strided {
        /// First core.
        start: i64,
        /// Last core considered (inclusive).
        end: i64,
        /// Step between cores (>= 1).
        stride: u64,
    },
}

impl AffinityItem {
    /// The first core id as written.
    pub fn start(&self) -> i64 {
        match *self {
            AffinityItem::Core(start)
            | AffinityItem::Range { start, .. }
            | AffinityItem::Strided { start, .. } => start,
        }
    }

    /// The last core id as written (`start` for a single core).
    pub fn end(&self) -> i64 {
        match *self {
            AffinityItem::Core(end)
            | AffinityItem::Range { end, .. }
            | AffinityItem::Strided { end, .. } => end,
        }
    }

    /// The stride (1 unless written).
    pub fn stride(&self) -> u64 {
        match *self {
            AffinityItem::Strided { stride, .. } => stride,
            _ => 1,
        }
    }
}

impl fmt::Display for AffinityItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AffinityItem::Core(c) => write!(f, "{c}"),
            AffinityItem::Range { start, end } => write!(f, "{start}:{end}"),
            AffinityItem::Strided { start, end, stride } => write!(f, "{start}:{end}:{stride}"),
        }
    }
}

/// A parsed `FI_PSM_PROG_AFFINITY` value: a non-empty list of
/// [`AffinityItem`]s, not yet resolved against the machine.
///
/// Parsing is pure (no I/O) and checks everything that can be checked
/// without knowing the machine; [`resolve`](Self::resolve) applies the
/// negative-id rule and checks the result against the allowed CPU set.
/// Equality compares the items only.
///
/// ```
/// use psmrail::config::AffinitySpec;
/// use psmrail::reactor::CpuTopology;
///
/// let spec: AffinitySpec = "0:3,8,-1".parse().unwrap();
/// assert_eq!(spec.items().len(), 3);
/// assert_eq!(spec.to_string(), "0:3,8,-1");
///
/// let topo = CpuTopology { online: 16, allowed: (0..16).collect() };
/// let set = spec.resolve(&topo).unwrap();
/// assert_eq!(set.to_string(), "0:3,8,15");
///
/// // Every item applies; CPUs outside the allowed set are an error.
/// let small = CpuTopology { online: 4, allowed: (0..4).collect() };
/// let err = spec.resolve(&small).unwrap_err();
/// assert_eq!((err.item(), err.position()), ("8", 4));
///
/// // Values that hung the C provider are plain errors.
/// assert!("2c".parse::<AffinitySpec>().is_err());
/// ```
///
/// Grammar (fi_psm(7)): `<start>[:<end>[:<stride>]][,<start>[:<end>[:<stride>]]]*`.
/// `<start>` and `<end>` are a core id (`>= 0`) or a core id minus the number
/// of online cores (`< 0`, so `-1` is the last core). `<end>` defaults to
/// `<start>` and `<stride>` to 1.
///
/// Where this deliberately differs from the C provider (ARCHITECTURE.md,
/// "Deliberately better"):
/// * every comma-separated item applies (C applied only the first, and hung
///   forever on any value containing `c`, e.g. `abc` or `2c`);
/// * nothing is clamped or skipped: an empty item (`""`, `,,`, a leading or
///   trailing comma), a missing or non-decimal number, more than three fields,
///   a zero or negative stride, `start > end` after normalisation, a core id
///   that overflows or lies outside `-1024..=1023` (`CPU_SETSIZE`), and a CPU
///   outside the process's allowed set are all errors naming the item;
/// * numbers follow the crate's decimal syntax (see [`config`](super), "Numbers").
#[derive(Clone, Debug)]
pub struct AffinitySpec {
    items: Vec<AffinityItem>,
    /// The variable it was read for (errors from `resolve` name it).
    var: &'static str,
    /// The text the items were parsed from.
    text: String,
    /// Byte range of each item in `text`.
    spans: Vec<Range<usize>>,
}

impl PartialEq for AffinitySpec {
    fn eq(&self, other: &Self) -> bool {
        self.items == other.items
    }
}

impl Eq for AffinitySpec {}

impl AffinitySpec {
    /// A spec from items, validated exactly as if their `Display` form had
    /// been parsed (an empty list is an "empty item" error).
    ///
    /// ```
    /// use psmrail::config::{AffinityItem, AffinitySpec};
    /// let spec = AffinitySpec::new([AffinityItem::Range { start: 0, end: 3 }]).unwrap();
    /// assert_eq!(spec.to_string(), "0:3");
    /// assert!(AffinitySpec::new([AffinityItem::Core(5000)]).is_err());
    /// ```
    pub fn new(items: impl IntoIterator<Item = AffinityItem>) -> Result<Self, ConfigError> {
        let text = items
            .into_iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        AffinitySpec::parse_var(VAR, &text)
    }

    /// The spec selecting exactly `set` (runs folded into ranges, as
    /// `CpuSet`'s `Display` writes them). An empty set is an error: there is
    /// no empty affinity.
    pub fn from_cpu_set(set: &CpuSet) -> Result<Self, ConfigError> {
        AffinitySpec::parse_var(VAR, &set.to_string())
    }

    /// The items, in the order written.
    pub fn items(&self) -> &[AffinityItem] {
        &self.items
    }

    /// The text the spec was parsed from (for a spec built from items or a
    /// set, their `Display` form).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Parses `value` given for `var`.
    pub(crate) fn parse_var(var: &'static str, value: &str) -> Result<Self, ConfigError> {
        let mut items = Vec::new();
        let mut spans = Vec::new();
        let mut offset = 0;
        for text in value.split(',') {
            let span = offset..offset + text.len();
            offset = span.end + 1;
            let item = parse_item(text).map_err(|(problem, expected)| {
                let e = ConfigError::new(var, value, span.clone(), expected);
                match problem {
                    Some(p) => e.with_problem(p),
                    None => e,
                }
            })?;
            items.push(item);
            spans.push(span);
        }
        Ok(AffinitySpec {
            items,
            var,
            text: value.to_owned(),
            spans,
        })
    }

    /// Resolves the spec against `topology`: negative ids become
    /// `id + online`, every item contributes `start, start + stride, ... <= end`,
    /// and every resulting CPU must be in `topology.allowed`.
    ///
    /// Errors name the item: an id that normalises below 0, `start > end`
    /// after normalisation, or a CPU outside the allowed set. The result is
    /// never empty.
    pub fn resolve(&self, topology: &CpuTopology) -> Result<CpuSet, ConfigError> {
        let online = i128::try_from(topology.online).unwrap_or(i128::MAX);
        let mut set = CpuSet::new();
        for (item, span) in self.items.iter().zip(&self.spans) {
            let err = |expected: &'static str, problem: String| {
                ConfigError::new(self.var, &self.text, span.clone(), expected).with_problem(problem)
            };
            let normalise = |id: i64| -> Result<i128, ConfigError> {
                let id = i128::from(id);
                let cpu = if id < 0 { id + online } else { id };
                if cpu < 0 {
                    Err(err(
                        EXPECTED_ALLOWED,
                        format!(
                            "core id {id} is before the first core ({} CPUs are online)",
                            topology.online
                        ),
                    ))
                } else {
                    Ok(cpu)
                }
            };
            let start = normalise(item.start())?;
            let end = normalise(item.end())?;
            if start > end {
                return Err(err(
                    EXPECTED_ORDER,
                    format!(
                        "start {} (CPU {start}) > end {} (CPU {end}) with {} CPUs online",
                        item.start(),
                        item.end(),
                        topology.online
                    ),
                ));
            }
            // `allowed` only holds ids < MAX_CPUS, so this loop ends at the
            // latest one step past MAX_CPUS.
            let stride = i128::from(item.stride());
            let mut cpu = start;
            while cpu <= end {
                let id = usize::try_from(cpu).unwrap_or(usize::MAX);
                if !topology.allowed.contains(id) {
                    return Err(err(
                        EXPECTED_ALLOWED,
                        format!(
                            "CPU {cpu} is not in the process's allowed CPU set {}",
                            topology.allowed
                        ),
                    ));
                }
                set.insert(id);
                cpu += stride;
            }
        }
        Ok(set)
    }
}

/// Parses one item; on error returns (problem, expected).
fn parse_item(text: &str) -> Result<AffinityItem, (Option<String>, &'static str)> {
    if text.is_empty() {
        return Err((Some("empty item".to_owned()), EXPECTED_ITEM));
    }
    let fields: Vec<&str> = text.split(':').collect();
    if fields.len() > 3 {
        return Err((
            Some(format!("{} ':'-separated fields, at most 3", fields.len())),
            EXPECTED_ITEM,
        ));
    }
    let id = |name: &str, field: &str| -> Result<i64, (Option<String>, &'static str)> {
        let v = parse_i64(field).map_err(|p| (Some(describe(name, &p)), EXPECTED_ITEM))?;
        if !(MIN_CORE_ID..=MAX_CORE_ID).contains(&v) {
            return Err((Some(format!("{name} {v} is out of range")), EXPECTED_ID));
        }
        Ok(v)
    };
    let start = id("start", fields[0])?;
    let Some(end_text) = fields.get(1) else {
        return Ok(AffinityItem::Core(start));
    };
    let end = id("end", end_text)?;
    // Same sign: normalisation adds the same offset to both, so the order
    // is already known.
    if (start < 0) == (end < 0) && start > end {
        return Err((Some(format!("start {start} > end {end}")), EXPECTED_ORDER));
    }
    let Some(stride_text) = fields.get(2) else {
        return Ok(AffinityItem::Range { start, end });
    };
    let stride = match parse_u64(stride_text) {
        Ok(0) => return Err((Some("stride 0 (zero stride)".to_owned()), EXPECTED_STRIDE)),
        Ok(s) => s,
        Err(IntProblem::Negative(t)) => {
            return Err((Some(format!("stride {t} is negative")), EXPECTED_STRIDE))
        }
        Err(p) => return Err((Some(describe("stride", &p)), EXPECTED_ITEM)),
    };
    Ok(AffinityItem::Strided { start, end, stride })
}

fn describe(name: &str, problem: &IntProblem) -> String {
    match problem {
        IntProblem::Empty => format!("{name} is missing"),
        other => format!("{name}: {other}"),
    }
}

impl FromStr for AffinitySpec {
    type Err = ConfigError;

    /// Parses the grammar; errors are reported against `FI_PSM_PROG_AFFINITY`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AffinitySpec::parse_var(VAR, s)
    }
}

impl fmt::Display for AffinitySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, item) in self.items.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{item}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(online: usize, allowed: &[usize]) -> CpuTopology {
        CpuTopology {
            online,
            allowed: allowed.iter().copied().collect(),
        }
    }

    #[test]
    fn forms_are_kept() {
        for s in ["3", "3:3", "3:3:1", "-1", "-4:-1:2", "0:1023:1023", "-1024"] {
            assert_eq!(s.parse::<AffinitySpec>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn mixed_signs_are_checked_at_resolve() {
        let spec: AffinitySpec = "3:-1".parse().unwrap();
        let all: Vec<usize> = (0..8).collect();
        assert_eq!(spec.resolve(&topo(8, &all)).unwrap().to_string(), "3:7");
        let err = spec.resolve(&topo(2, &all)).unwrap_err();
        assert!(
            err.to_string().contains("start 3 (CPU 3) > end -1 (CPU 1)"),
            "{err}"
        );
        let err = "-9"
            .parse::<AffinitySpec>()
            .unwrap()
            .resolve(&topo(8, &all))
            .unwrap_err();
        assert!(err.to_string().contains("before the first core"), "{err}");
    }

    #[test]
    fn stride_skips_disallowed_cpus() {
        let spec: AffinitySpec = "0:6:2".parse().unwrap();
        let set = spec.resolve(&topo(8, &[0, 2, 4, 6])).unwrap();
        assert_eq!(set.to_string(), "0,2,4,6");
    }

    #[test]
    fn huge_topologies_do_not_hang_or_panic() {
        let spec: AffinitySpec = "0:-1,-1024".parse().unwrap();
        let t = CpuTopology {
            online: usize::MAX,
            allowed: (0..4).collect(),
        };
        assert!(spec.resolve(&t).is_err());
    }
}
