//! A set of CPU ids, and the process's allowed set captured once.
//!
//! [`CpuSet`] is what `FI_PSM_PROG_AFFINITY` parses into and what the auto
//! progress thread is pinned to. It is a plain fixed-size bit set (no
//! allocation, `Copy`) covering the ids a Linux `cpu_set_t` can hold.

use std::fmt;
use std::sync::OnceLock;

/// Number of CPU ids a [`CpuSet`] can hold (`CPU_SETSIZE` on Linux).
pub const MAX_CPUS: usize = 1024;

const WORDS: usize = MAX_CPUS / 64;

/// A set of CPU ids in `0..MAX_CPUS`.
///
/// `Display` writes the set in the `FI_PSM_PROG_AFFINITY` grammar, with runs
/// of consecutive ids folded into `start:end`, so the text parses back to the
/// same set.
///
/// ```
/// use psmrail_reactor::CpuSet;
/// let set: CpuSet = [0, 1, 2, 5].into_iter().collect();
/// assert_eq!(set.to_string(), "0:2,5");
/// assert!(set.contains(5) && !set.contains(4));
/// assert_eq!(set.len(), 4);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CpuSet {
    words: [u64; WORDS],
}

impl CpuSet {
    /// The empty set.
    pub const fn new() -> Self {
        CpuSet { words: [0; WORDS] }
    }

    /// Adds `cpu`; returns `false` (and changes nothing) when `cpu >= MAX_CPUS`.
    pub fn insert(&mut self, cpu: usize) -> bool {
        if cpu >= MAX_CPUS {
            return false;
        }
        self.words[cpu / 64] |= 1 << (cpu % 64);
        true
    }

    /// Removes `cpu` if present.
    pub fn remove(&mut self, cpu: usize) {
        if cpu < MAX_CPUS {
            self.words[cpu / 64] &= !(1 << (cpu % 64));
        }
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: usize) -> bool {
        cpu < MAX_CPUS && self.words[cpu / 64] & (1 << (cpu % 64)) != 0
    }

    /// Number of ids in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The ids in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..MAX_CPUS).filter(move |&c| self.contains(c))
    }

    /// Ids in `self` but not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        let mut out = *self;
        for (w, o) in out.words.iter_mut().zip(other.words.iter()) {
            *w &= !o;
        }
        out
    }

    /// Whether every id of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.difference(other).is_empty()
    }

    /// The largest id in the set, if any.
    pub fn max(&self) -> Option<usize> {
        (0..WORDS)
            .rev()
            .find(|&i| self.words[i] != 0)
            .map(|i| i * 64 + 63 - self.words[i].leading_zeros() as usize)
    }
}

impl FromIterator<usize> for CpuSet {
    /// Collects ids; ids `>= MAX_CPUS` are ignored (use [`CpuSet::insert`]
    /// to detect them).
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        let mut set = CpuSet::new();
        for cpu in iter {
            set.insert(cpu);
        }
        set
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut ids = self.iter().peekable();
        while let Some(start) = ids.next() {
            let mut end = start;
            while ids.peek() == Some(&(end + 1)) {
                end = ids.next().unwrap_or(end);
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if end == start {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}:{end}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

/// What the affinity grammar is resolved against: the number of online CPUs
/// (for negative ids, `id - online`) and the CPUs this process may run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuTopology {
    /// Online CPUs (`sysconf(_SC_NPROCESSORS_ONLN)`); negative ids count back from it.
    pub online: usize,
    /// The process's allowed set (`sched_getaffinity` at capture time).
    pub allowed: CpuSet,
}

impl CpuTopology {
    /// The topology captured the first time any code in this process asked
    /// for it. Capture it early (psmrail does so when reading its
    /// configuration): PSM may change the process affinity when it opens an
    /// endpoint.
    pub fn captured() -> &'static CpuTopology {
        static TOPOLOGY: OnceLock<CpuTopology> = OnceLock::new();
        TOPOLOGY.get_or_init(CpuTopology::read_now)
    }

    /// Reads the topology of the calling thread now.
    pub fn read_now() -> CpuTopology {
        let allowed = current_thread_affinity().unwrap_or_else(|_| {
            // Without sched_getaffinity, fall back to every online CPU.
            (0..online_cpus()).collect()
        });
        let online = online_cpus().max(allowed.max().map_or(1, |m| m + 1));
        CpuTopology { online, allowed }
    }
}

fn online_cpus() -> usize {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN) {
        Ok(Some(n)) if n >= 1 => n as usize,
        _ => 1,
    }
}

/// The calling thread's CPU affinity (`sched_getaffinity(0)`).
pub fn current_thread_affinity() -> std::io::Result<CpuSet> {
    let raw = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))?;
    let mut set = CpuSet::new();
    for cpu in 0..MAX_CPUS.min(nix::sched::CpuSet::count()) {
        if raw.is_set(cpu)? {
            set.insert(cpu);
        }
    }
    Ok(set)
}

/// Pins the calling thread to `set` (`sched_setaffinity(0)`).
pub fn pin_current_thread(set: &CpuSet) -> std::io::Result<()> {
    if set.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "cannot pin a thread to an empty CPU set",
        ));
    }
    let mut raw = nix::sched::CpuSet::new();
    for cpu in set.iter() {
        raw.set(cpu)?;
    }
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &raw)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_folds_runs() {
        let set: CpuSet = [3, 0, 1, 2, 7, 9, 10].into_iter().collect();
        assert_eq!(set.to_string(), "0:3,7,9:10");
        assert_eq!(CpuSet::new().to_string(), "");
        let one: CpuSet = [1023].into_iter().collect();
        assert_eq!(one.to_string(), "1023");
        assert_eq!(one.max(), Some(1023));
    }

    #[test]
    fn insert_out_of_range_is_refused() {
        let mut set = CpuSet::new();
        assert!(!set.insert(MAX_CPUS));
        assert!(set.is_empty());
        assert!(!set.contains(MAX_CPUS));
    }

    #[test]
    fn captured_topology_is_sane() {
        let topo = CpuTopology::captured();
        assert!(!topo.allowed.is_empty());
        assert!(topo.allowed.max().unwrap() < topo.online);
    }

    #[test]
    fn pin_and_read_back() {
        let topo = CpuTopology::read_now();
        let first = topo.allowed.iter().next().unwrap();
        let only: CpuSet = [first].into_iter().collect();
        std::thread::spawn(move || {
            pin_current_thread(&only).unwrap();
            assert_eq!(current_thread_affinity().unwrap(), only);
        })
        .join()
        .unwrap();
        assert!(pin_current_thread(&CpuSet::new()).is_err());
    }
}
