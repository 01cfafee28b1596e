//! Who a peer is, as far as its liveness goes: its process (pid and start
//! time) and its host (boot, host name, pid namespace), and how to ask the
//! kernel whether that process still runs.
//!
//! Peers tell each other their [`Identity`] in the watch's hello. For a
//! peer on the same host (and in the same pid namespace) a look at
//! `/proc/<pid>/stat` then tells, without any message, whether its process
//! has exited: the file is gone, the process is a zombie, or the pid now
//! belongs to a younger process (the start time differs).
//!
//! `PSMRAIL_WATCH_HOST`, when set, is mixed into the host hash: processes
//! with different values count as on different hosts (for tests of the
//! keepalive path on one machine, and for hosts that share a boot id and a
//! pid namespace without sharing processes). Its value is a label of text
//! ([`host_label`]); a malformed one keeps domains from opening.

use std::os::unix::fs::MetadataExt;
use std::sync::OnceLock;

use crate::config::{ConfigError, ProcessEnv, VarSource};

/// A process and its host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The process id (never 0).
    pub pid: u32,
    /// When the process started, in clock ticks since boot (field 22 of
    /// `/proc/<pid>/stat`); 0 when unknown.
    pub start: u64,
    /// A hash of the boot id, the host name and the pid namespace; equal
    /// for two processes whose pids mean the same process. 0 when unknown
    /// (never the same host as anyone).
    pub host: u64,
}

/// Bytes of an identity on the wire.
pub(crate) const WIRE_LEN: usize = 24;

impl Identity {
    /// Whether `other`'s pid names a process this process can look at.
    pub(crate) fn same_host(&self, other: &Identity) -> bool {
        self.host != 0 && self.host == other.host
    }

    /// The wire form: pid, start and host, little-endian `u64`s.
    pub(crate) fn encode(&self) -> [u8; WIRE_LEN] {
        let mut out = [0u8; WIRE_LEN];
        out[..8].copy_from_slice(&u64::from(self.pid).to_le_bytes());
        out[8..16].copy_from_slice(&self.start.to_le_bytes());
        out[16..].copy_from_slice(&self.host.to_le_bytes());
        out
    }

    /// Reads the wire form (longer payloads are accepted: later versions
    /// may add fields). `None` for a short payload or a pid that is not a
    /// process id (0 or above `i32::MAX`).
    pub(crate) fn decode(payload: &[u8]) -> Option<Identity> {
        let word = |i: usize| -> Option<u64> {
            let b: [u8; 8] = payload.get(i * 8..i * 8 + 8)?.try_into().ok()?;
            Some(u64::from_le_bytes(b))
        };
        let pid = u32::try_from(word(0)?).ok()?;
        if pid == 0 || pid > i32::MAX as u32 {
            return None;
        }
        Some(Identity {
            pid,
            start: word(1)?,
            host: word(2)?,
        })
    }

    /// This process's identity (read once); `None` where `/proc` cannot
    /// tell the start time (the watch then relies on keepalives alone).
    pub(crate) fn mine() -> Option<Identity> {
        static MINE: OnceLock<Option<Identity>> = OnceLock::new();
        *MINE.get_or_init(|| {
            let pid = std::process::id();
            let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
            let (_, start) = parse_stat(&stat)?;
            Some(Identity {
                pid,
                start,
                host: host_hash().unwrap_or(0),
            })
        })
    }
}

/// FNV-1a, stable across processes (a `RandomState` hash would not be).
fn fnv(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// The environment variable mixed into the host hash (module docs).
pub(crate) const HOST_VAR: &str = "PSMRAIL_WATCH_HOST";

/// Longest [`HOST_VAR`] value (a host name's limit).
const MAX_HOST_LABEL: usize = 255;

/// The value of [`HOST_VAR`] in `vars`, checked: text of 1 to 255 bytes
/// without control characters or whitespace at either end; `None` when
/// unset.
///
/// # Errors
/// A [`ConfigError`] naming [`HOST_VAR`] for any other value (empty,
/// blank, padded, with a control character, not UTF-8, too long).
pub(crate) fn host_label<V: VarSource + ?Sized>(vars: &V) -> Result<Option<String>, ConfigError> {
    crate::config::text::read_text_var(
        vars,
        HOST_VAR,
        MAX_HOST_LABEL,
        "a label of 1 to 255 bytes of text, without control characters or whitespace at \
         either end (processes with different labels count as on different hosts)",
    )
}

/// The boot id, the host name and the pid namespace (device and inode of
/// `/proc/self/ns/pid`: containers on one host share the boot id but not,
/// usually, the pid namespace), and [`HOST_VAR`]. `None` when the boot id
/// or namespace cannot be read, or [`HOST_VAR`] is malformed (domains do
/// not open then: [`host_label`]).
fn host_hash() -> Option<u64> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let ns = std::fs::metadata("/proc/self/ns/pid").ok()?;
    let name = nix::unistd::gethostname().unwrap_or_default();
    let name = name.as_encoded_bytes();
    let mut h = 0xcbf2_9ce4_8422_2325;
    h = fnv(h, boot.trim().as_bytes());
    h = fnv(h, &[0]);
    h = fnv(h, name);
    h = fnv(h, &ns.dev().to_le_bytes());
    h = fnv(h, &ns.ino().to_le_bytes());
    if let Some(label) = host_label(&ProcessEnv).ok()? {
        h = fnv(h, &[1]);
        h = fnv(h, label.as_bytes());
    }
    Some(h.max(1))
}

/// The state letter and start time of a `/proc/<pid>/stat` text. The
/// command name (field 2) may hold spaces and parentheses, so fields are
/// counted after its last `)`.
pub(crate) fn parse_stat(text: &str) -> Option<(char, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 3 is the state; the start time is field 22.
    let start = fields.nth(22 - 4)?.parse().ok()?;
    Some((state, start))
}

/// What the kernel says of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProcState {
    /// It runs (or cannot be told apart from running).
    Alive,
    /// No such process.
    Exited,
    /// It exited and its parent has not reaped it yet.
    Zombie,
    /// The pid belongs to a process that started later.
    Reused,
    /// Nothing could be learned.
    Unknown,
}

/// Looks at process `pid`, which started at `start` (0: unknown).
pub(crate) fn check_process(pid: u32, start: u64) -> ProcState {
    if pid == 0 || pid > i32::MAX as u32 {
        // kill(0) or a negative pid would address process groups.
        return ProcState::Unknown;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => judge(parse_stat(&text), start),
        Err(_) => probe(pid),
    }
}

/// The verdict on a parsed stat line.
pub(crate) fn judge(parsed: Option<(char, u64)>, start: u64) -> ProcState {
    match parsed {
        Some(('Z' | 'X' | 'x', _)) => ProcState::Zombie,
        Some((_, s)) if start != 0 && s != start => ProcState::Reused,
        Some(_) => ProcState::Alive,
        None => ProcState::Unknown,
    }
}

/// `kill(pid, 0)`: where `/proc` cannot be read.
fn probe(pid: u32) -> ProcState {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return ProcState::Unknown;
    };
    // No signal: only whether the process exists and may be signalled.
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) | Err(nix::errno::Errno::EPERM) => ProcState::Alive,
        Err(nix::errno::Errno::ESRCH) => ProcState::Exited,
        Err(_) => ProcState::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const STAT: &str =
        "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";

    #[test]
    fn the_signal_probe_tells_live_from_gone() {
        assert_eq!(probe(std::process::id()), ProcState::Alive);
        // Above the kernel's largest pid (2^22): no such process.
        assert_eq!(probe((1 << 22) + 1), ProcState::Exited);
        // Not a pid at all.
        assert_eq!(probe(u32::MAX), ProcState::Unknown);
    }

    #[test]
    fn the_host_hash_is_stable_within_a_process() {
        assert!(host_hash().is_some());
        assert_eq!(host_hash(), host_hash());
    }

    #[test]
    fn the_host_label_is_checked_text() {
        let label = |v: &str| host_label(&[(HOST_VAR, v)]);
        assert_eq!(label("elsewhere"), Ok(Some("elsewhere".to_owned())));
        assert_eq!(host_label(&[("X", "y")]), Ok(None));
        for bad in ["", " ", "a ", " a", "a\nb", "a\u{7f}", &"h".repeat(256)] {
            let e = label(bad).unwrap_err();
            assert_eq!(e.var(), HOST_VAR, "{bad:?}");
            assert_eq!(e.value(), bad);
        }
    }

    #[test]
    fn stat_fields_are_counted_after_the_command() {
        assert_eq!(parse_stat(STAT), Some(('S', 987654)));
        assert_eq!(parse_stat("1 (x) Z"), None, "too few fields");
        assert_eq!(parse_stat("no parenthesis"), None);
        assert_eq!(parse_stat(""), None);
    }

    #[test]
    fn verdicts() {
        assert_eq!(judge(Some(('S', 5)), 5), ProcState::Alive);
        assert_eq!(judge(Some(('R', 5)), 0), ProcState::Alive);
        assert_eq!(judge(Some(('S', 6)), 5), ProcState::Reused);
        assert_eq!(judge(Some(('Z', 5)), 5), ProcState::Zombie);
        assert_eq!(judge(None, 5), ProcState::Unknown);
    }

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        let me = Identity::mine().expect("/proc is readable here");
        assert_eq!(me.pid, std::process::id());
        assert_eq!(check_process(me.pid, me.start), ProcState::Alive);
        assert_eq!(check_process(me.pid, me.start + 1), ProcState::Reused);
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id();
        child.wait().expect("wait");
        // The pid could be reused by now, but not with our start time 1.
        assert_ne!(check_process(pid, 1), ProcState::Alive);
        assert_eq!(check_process(0, 0), ProcState::Unknown);
        assert_eq!(check_process(u32::MAX, 0), ProcState::Unknown);
        assert!(me.same_host(&me));
    }

    #[test]
    fn an_unreaped_child_is_a_zombie() {
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        let (_, start) = parse_stat(&stat).expect("parse");
        let mut state = ProcState::Alive;
        for _ in 0..1000 {
            state = check_process(pid, start);
            if state != ProcState::Alive {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(state, ProcState::Zombie);
        child.wait().expect("wait");
    }

    #[test]
    fn unknown_hosts_are_never_the_same() {
        let a = Identity {
            pid: 1,
            start: 1,
            host: 0,
        };
        assert!(!a.same_host(&a));
    }

    proptest! {
        #[test]
        fn wire_round_trips(pid in 1u32..=i32::MAX as u32, start: u64, host: u64) {
            let id = Identity { pid, start, host };
            prop_assert_eq!(Identity::decode(&id.encode()), Some(id));
            let mut longer = id.encode().to_vec();
            longer.extend_from_slice(&[9; 5]);
            prop_assert_eq!(Identity::decode(&longer), Some(id));
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Some(id) = Identity::decode(&bytes) {
                prop_assert!(id.pid != 0 && id.pid <= i32::MAX as u32);
            }
        }

        #[test]
        fn parse_stat_never_panics(s in ".{0,120}") {
            let _ = parse_stat(&s);
        }
    }
}
