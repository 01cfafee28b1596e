//! How long closing a domain takes: `FI_PSM_DELAY`, then the engine's
//! close within `FI_PSM_TIMEOUT`, then (native engine) libpsm2's own
//! `psm_ep_close`, which waits for connected peers.
//!
//! Every scenario runs in child processes of this test binary (PSM allows
//! one endpoint per process): a *closer* opens a native domain, connects to
//! a *peer* in another process, leaves a rendezvous send in flight that the
//! peer never receives, then closes and reports how long that took. The
//! peer stays up (and connected) until the parent has the result. Both
//! progress automatically, so the parent holds the machine-wide spin lock.
//!
//! Without the PSM library the tests print why and pass; with
//! `PSMRAIL_REQUIRE_NATIVE=1` that is a failure. Children get
//! `PSM2_DEVICES=self,shm` unless the variable is set.

mod support;

use psmrail::config::PsmConfig;
use psmrail::fabric::{
    getinfo, AvAttr, Caps, Domain, Endpoint, EngineChoice, Fabric, FiAddr, Hints, Info,
    ProgressKind,
};
use std::time::{Duration, Instant};
use support::peer::{role, ChildIo, Peer};
use support::spin_lock::spin_lock;

/// How long the parent waits for any line of a child.
const LINE: Duration = Duration::from_secs(60);
/// What the closer's timing may exceed its bound by (a loaded 2-core
/// machine; the overshoot measured is about 5 ms).
const SLACK: Duration = Duration::from_millis(400);
/// The close delay, in milliseconds, for the children.
const DELAY_VAR: &str = "PSMRAIL_CLOSE_TEST_DELAY_MS";
/// The close timeout, in milliseconds, for the children.
const TIMEOUT_VAR: &str = "PSMRAIL_CLOSE_TEST_TIMEOUT_MS";
/// Bytes of the send left in flight: far above every eager threshold, so
/// it waits for a receive that never comes.
const STUCK_SEND: usize = 4 << 20;

fn millis_var(name: &str) -> Duration {
    let text = std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    Duration::from_millis(
        text.parse()
            .unwrap_or_else(|e| panic!("{name}={text}: {e}")),
    )
}

/// A native info with automatic progress and the children's close timing.
fn native_info() -> Info {
    let config = PsmConfig::builder()
        .name_server(false)
        .delay(millis_var(DELAY_VAR))
        .timeout(millis_var(TIMEOUT_VAR))
        .build()
        .expect("the test's close timing is within the maxima");
    let hints = Hints::new()
        .engine(EngineChoice::Native)
        .caps(Caps::MSG | Caps::TAGGED)
        .progress(ProgressKind::Auto)
        .config(config);
    getinfo(Some(&hints)).expect("getinfo").remove(0)
}

/// A native domain with one endpoint, connected to the address the parent
/// sends after this side has sent its own.
fn open_connected(io: &mut ChildIo) -> (Domain, Endpoint, FiAddr) {
    let info = native_info();
    let domain = Fabric::open(&info).unwrap().domain(&info).unwrap();
    let av = domain.av(AvAttr::new()).unwrap();
    let ep = domain.endpoint(&info).bind_av(&av).enable().unwrap();
    io.send_line(&format!("addr {}", ep.getname()));
    let line = io.recv_line();
    let peer = av
        .insert_str(line.trim_start_matches("peer "))
        .unwrap_or_else(|e| panic!("connecting to {line:?}: {e}"));
    io.send_line("connected");
    (domain, ep, peer)
}

/// The children's side of every scenario.
fn child(role: &str) {
    let mut io = ChildIo::new();
    match role {
        "alone" => {
            let info = native_info();
            let domain = Fabric::open(&info).unwrap().domain(&info).unwrap();
            let start = Instant::now();
            domain.close().expect("close");
            io.send_line(&format!("closed {}", start.elapsed().as_micros()));
        }
        "closer" => {
            let (domain, ep, peer) = open_connected(&mut io);
            // Posted now; dropping the future leaves it in flight.
            drop(ep.tsend(peer, 7, vec![0x5a; STUCK_SEND]));
            assert_eq!(io.recv_line(), "close");
            let start = Instant::now();
            domain.close().expect("close");
            io.send_line(&format!("closed {}", start.elapsed().as_micros()));
            assert_eq!(io.recv_line(), "bye");
        }
        "peer" => {
            let (_domain, _ep, _peer) = open_connected(&mut io);
            assert_eq!(io.recv_line(), "bye");
        }
        other => panic!("unknown role {other}"),
    }
}

fn child_env(delay: Duration, timeout: Duration) -> Vec<(&'static str, String)> {
    let mut env = vec![
        (DELAY_VAR, delay.as_millis().to_string()),
        (TIMEOUT_VAR, timeout.as_millis().to_string()),
    ];
    if std::env::var_os("PSM2_DEVICES").is_none() {
        env.push(("PSM2_DEVICES", "self,shm".to_owned()));
    }
    env
}

fn spawn(test: &str, role: &str, env: &[(&'static str, String)]) -> Peer {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Peer::spawn(test, role, &env)
}

fn parse_closed(line: &str) -> Duration {
    let us = line
        .strip_prefix("closed ")
        .unwrap_or_else(|| panic!("expected `closed <µs>`, got {line:?}"));
    Duration::from_micros(us.parse().unwrap())
}

/// How long a native domain alone in its process takes to close.
fn close_alone(test: &str, delay: Duration, timeout: Duration) -> Duration {
    let mut alone = spawn(test, "alone", &child_env(delay, timeout));
    let took = parse_closed(&alone.recv_line(LINE));
    assert!(alone.wait(LINE).success(), "{test}: the child failed");
    took
}

/// A closer and a peer, connected both ways, the closer's send stuck in
/// flight.
fn connected_pair(test: &str, delay: Duration, timeout: Duration) -> (Peer, Peer) {
    let env = child_env(delay, timeout);
    let mut closer = spawn(test, "closer", &env);
    let mut peer = spawn(test, "peer", &env);
    let closer_addr = closer.recv_line(LINE);
    let peer_addr = peer.recv_line(LINE);
    closer.send_line(&format!("peer {}", peer_addr.trim_start_matches("addr ")));
    peer.send_line(&format!("peer {}", closer_addr.trim_start_matches("addr ")));
    assert_eq!(closer.recv_line(LINE), "connected");
    assert_eq!(peer.recv_line(LINE), "connected");
    (closer, peer)
}

/// How long a native domain connected to a live peer, with a send stuck in
/// flight towards it, takes to close.
fn close_connected(test: &str, delay: Duration, timeout: Duration) -> Duration {
    let (mut closer, mut peer) = connected_pair(test, delay, timeout);
    closer.send_line("close");
    let took = parse_closed(&closer.recv_line(LINE));
    closer.send_line("bye");
    peer.send_line("bye");
    assert!(closer.wait(LINE).success(), "{test}: the closer failed");
    assert!(peer.wait(LINE).success(), "{test}: the peer failed");
    eprintln!("{test}: delay {delay:?}, timeout {timeout:?}: close took {took:?}");
    took
}

/// As [`close_connected`], with the peer killed (no disconnect, nothing
/// answers) before the close.
fn close_after_peer_died(test: &str, delay: Duration, timeout: Duration) -> Duration {
    let (mut closer, peer) = connected_pair(test, delay, timeout);
    peer.kill();
    std::thread::sleep(Duration::from_millis(100));
    closer.send_line("close");
    let took = parse_closed(&closer.recv_line(LINE));
    closer.send_line("bye");
    assert!(closer.wait(LINE).success(), "{test}: the closer failed");
    eprintln!("{test}: dead peer, delay {delay:?}, timeout {timeout:?}: close took {took:?}");
    took
}

/// Plays the child's part when this process is one; otherwise takes the
/// spin lock for the parent's part. `None` in a child or when the library
/// is missing.
fn parent() -> Option<support::spin_lock::SpinLock> {
    if let Some(r) = role() {
        child(&r);
        return None;
    }
    if !support::native::available() {
        return None;
    }
    Some(spin_lock())
}

/// Without connected peers, `psm_ep_close` does not wait: a domain with
/// no close delay closes at once, whatever its timeout.
#[test]
fn native_close_without_peers_is_prompt() {
    const TEST: &str = "native_close_without_peers_is_prompt";
    let Some(_lock) = parent() else { return };
    for timeout in [Duration::ZERO, Duration::from_secs(2)] {
        let took = close_alone(TEST, Duration::ZERO, timeout);
        assert!(
            took < Duration::from_millis(500),
            "timeout {timeout:?}: close took {took:?}"
        );
    }
}

/// `FI_PSM_TIMEOUT=0` skips the graceful phase, and `psm_ep_close` gets
/// no time: libpsm2 still waits its floor of 1 s for a connected peer
/// (2 s if the close were forced), and the close returns within it, with a
/// send stuck in flight.
#[test]
fn native_close_with_zero_timeout_is_bounded_by_libpsm2s_floor() {
    const TEST: &str = "native_close_with_zero_timeout_is_bounded_by_libpsm2s_floor";
    let Some(_lock) = parent() else { return };
    let took = close_connected(TEST, Duration::ZERO, Duration::ZERO);
    assert!(took < Duration::from_secs(1) + SLACK, "close took {took:?}");
}

/// With a timeout of a second or more, the whole close (delay, graceful
/// phase and `psm_ep_close`) fits in `FI_PSM_DELAY + FI_PSM_TIMEOUT`, even
/// with a send that never finishes and a connected peer that never
/// disconnects.
#[test]
fn native_close_fits_in_delay_plus_timeout() {
    const TEST: &str = "native_close_fits_in_delay_plus_timeout";
    let Some(_lock) = parent() else { return };
    for (delay, timeout) in [
        (Duration::ZERO, Duration::from_secs(1)),
        (Duration::from_secs(1), Duration::from_secs(2)),
    ] {
        let took = close_connected(TEST, delay, timeout);
        assert!(took >= delay, "the delay was slept: {took:?}");
        assert!(
            took < delay + timeout + SLACK,
            "delay {delay:?} + timeout {timeout:?}: close took {took:?}"
        );
    }
}

/// With a peer that died: `FI_PSM_TIMEOUT=0` closes within libpsm2's
/// floor for connected peers (1 s), and a non-zero timeout within
/// `FI_PSM_DELAY + FI_PSM_TIMEOUT`.
#[test]
fn native_close_with_a_dead_peer_fits_its_bound() {
    const TEST: &str = "native_close_with_a_dead_peer_fits_its_bound";
    let Some(_lock) = parent() else { return };
    let took = close_after_peer_died(TEST, Duration::ZERO, Duration::ZERO);
    assert!(
        took < Duration::from_secs(1) + SLACK,
        "FI_PSM_TIMEOUT=0: close took {took:?}"
    );
    let (delay, timeout) = (Duration::from_secs(1), Duration::from_secs(2));
    let took = close_after_peer_died(TEST, delay, timeout);
    assert!(
        took < delay + timeout + SLACK,
        "delay {delay:?} + timeout {timeout:?}: close took {took:?}"
    );
}
