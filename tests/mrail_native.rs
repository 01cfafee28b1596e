//! The multi-rail provider on the native engine (real libpsm, over shared
//! memory here): the library opens one PSM endpoint per process, so a
//! one-rail mrail endpoint works and more rails are refused with a message
//! saying why.
//!
//! Without the library the tests print `SKIPPED` (and fail with
//! `PSMRAIL_REQUIRE_NATIVE=1`, as in CI). The exchange runs between two
//! processes (children of the test binary), which spin while they wait.

mod support;

use psmrail::config::{MrailConfig, PsmConfig, RailAddr};
use psmrail::fabric::FiAddr;
use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Hints, Provider};
use psmrail::mrail::{MrailDomain, MrailEndpoint, MrailFabric};
use psmrail::ErrorKind;
use std::time::Duration;
use support::payload::pattern;
use support::peer::{role, ChildIo, Peer};
use support::spin_lock::spin_lock;

const LINE: Duration = Duration::from_secs(60);

fn hints(rails: &str) -> Hints {
    let psm = PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let cfg = MrailConfig::builder()
        .rails(RailAddr::parse_list(rails).unwrap())
        .build();
    Hints::new()
        .provider(Provider::Mrail)
        .engine(EngineChoice::Native)
        .caps(Caps::MSG | Caps::TAGGED)
        .config(psm)
        .mrail_config(cfg)
}

#[test]
fn several_native_rails_are_refused_with_the_reason() {
    if !support::native::available() {
        return;
    }
    let e = getinfo(Some(&hints("hfi1_0,hfi1_1"))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoData, "{e}");
    assert!(e.message().contains("one PSM endpoint per process"), "{e}");
    assert!(e.message().contains("soft engine"), "{e}");
    let info = getinfo(Some(&hints("hfi1_0"))).unwrap().remove(0);
    assert_eq!(info.mrail().unwrap().rails[0].ip, None);
}

/// Side "a" sends each size tagged and receives it back untagged; side
/// "b" answers. Every byte, length, tag and source is checked.
fn exchange(side: &str, domain: &MrailDomain, ep: &MrailEndpoint, peer: FiAddr, sizes: &[usize]) {
    let r = domain.reactor();
    for (k, &len) in sizes.iter().enumerate() {
        let (tag, back) = (k as u64, 100 + k as u64);
        if side == "a" {
            let (sent, _) = r.block_on(ep.tsend(peer, tag, pattern(len, tag)));
            sent.unwrap();
            let (got, buf) = r.block_on(ep.recv(vec![0u8; len]));
            let got = got.unwrap();
            assert_eq!((got.len, got.source), (len, peer));
            assert!(
                buf.as_slice() == pattern(len, back).as_slice(),
                "{len} B back"
            );
        } else {
            let (got, buf) = r.block_on(ep.trecv(vec![0u8; len], tag, 0));
            let got = got.unwrap();
            assert_eq!((got.len, got.tag, got.source), (len, tag, peer));
            assert!(buf.as_slice() == pattern(len, tag).as_slice(), "{len} B");
            let (sent, _) = r.block_on(ep.send(peer, pattern(len, back)));
            sent.unwrap();
        }
    }
}

/// One side: opens a one-rail native mrail endpoint, trades addresses with
/// the parent, then receives and answers three messages (eager, and two
/// large ones, tagged and untagged).
fn child(side: &str) {
    let mut io = ChildIo::new();
    let info = getinfo(Some(&hints("hfi1_0"))).unwrap().remove(0);
    assert_eq!(info.engine, psmrail::engine::EngineKind::Native);
    let domain = MrailFabric::open(&info).unwrap().domain(&info).unwrap();
    let av = domain.av(AvAttr::new()).unwrap();
    let ep = domain.endpoint(&info).bind_av(&av).enable().unwrap();
    io.send_line(&format!("addr {}", ep.getname()));
    let peer_text = io.recv_line();
    let peer = av
        .insert_str(peer_text.trim_start_matches("peer "))
        .unwrap();
    exchange(side, &domain, &ep, peer, &[8, 100_000, 3 << 20]);
    io.send_line("done");
    // Wait for the parent before closing, so the peer is not torn down
    // under the other side's last completion.
    let _ = io.recv_line();
}

#[test]
fn a_one_rail_native_mrail_endpoint_carries_messages_between_processes() {
    const TEST: &str = "a_one_rail_native_mrail_endpoint_carries_messages_between_processes";
    if let Some(side) = role() {
        child(&side);
        return;
    }
    if !support::native::available() {
        return;
    }
    let _lock = spin_lock();
    let (mut a, mut b, addr_a, addr_b) = spawn_sides(TEST);
    a.send_line(&format!("peer {addr_b}"));
    b.send_line(&format!("peer {addr_a}"));
    finish_sides(a, b);
}

/// Sides "a" and "b" of `test`, and the addresses each opened.
fn spawn_sides(test: &str) -> (Peer, Peer, String, String) {
    let env = [("PSM2_DEVICES", "self,shm")];
    let mut a = Peer::spawn(test, "a", &env);
    let mut b = Peer::spawn(test, "b", &env);
    let addr = |p: &mut Peer| {
        let line = p.recv_line(LINE);
        assert!(line.starts_with("addr fi_addr_mrail://"), "{line}");
        line.trim_start_matches("addr ").to_owned()
    };
    let (addr_a, addr_b) = (addr(&mut a), addr(&mut b));
    (a, b, addr_a, addr_b)
}

/// Both sides said "done": they may close, and exit cleanly.
fn finish_sides(mut a: Peer, mut b: Peer) {
    assert_eq!(a.recv_line(LINE), "done");
    assert_eq!(b.recv_line(LINE), "done");
    a.send_line("bye");
    b.send_line("bye");
    assert!(a.wait(LINE).success());
    assert!(b.wait(LINE).success());
}

/// One side of [`inserting_lazily_needs_nothing_from_a_peer_that_waits_elsewhere`]:
/// inserts the peer into a lazy address vector, says so, then blocks on
/// its pipe (progressing nothing) until the parent says "go", as a
/// libfabric program blocks on its control socket after its insert; then
/// one message each way, eager and large.
fn lazy_child(side: &str) {
    let mut io = ChildIo::new();
    let info = getinfo(Some(&hints("hfi1_0"))).unwrap().remove(0);
    let domain = MrailFabric::open(&info).unwrap().domain(&info).unwrap();
    let attr = AvAttr::new()
        .lazy_connect(true)
        .connect_timeout(Duration::from_secs(5));
    let av = domain.av(attr).unwrap();
    let ep = domain.endpoint(&info).bind_av(&av).enable().unwrap();
    io.send_line(&format!("addr {}", ep.getname()));
    let peer_text = io.recv_line();
    let peer = av
        .insert_str(peer_text.trim_start_matches("peer "))
        .unwrap();
    io.send_line("inserted");
    assert_eq!(io.recv_line(), "go");
    exchange(side, &domain, &ep, peer, &[8, 3 << 20]);
    io.send_line("done");
    let _ = io.recv_line();
}

/// A native connect is answered from the peer's own progress. With the
/// rails connected at insert, the second side's insert waited for a peer
/// that, done with its own insert, blocked elsewhere (fi_pingpong's control
/// socket) and timed out; an address vector that connects at first use
/// inserts at once, and the first messages connect the rail.
#[test]
fn inserting_lazily_needs_nothing_from_a_peer_that_waits_elsewhere() {
    const TEST: &str = "inserting_lazily_needs_nothing_from_a_peer_that_waits_elsewhere";
    if let Some(side) = role() {
        lazy_child(&side);
        return;
    }
    if !support::native::available() {
        return;
    }
    let _lock = spin_lock();
    let (mut a, mut b, addr_a, addr_b) = spawn_sides(TEST);
    // b inserts first and then waits on its pipe; a inserts after that.
    b.send_line(&format!("peer {addr_a}"));
    assert_eq!(b.recv_line(LINE), "inserted");
    a.send_line(&format!("peer {addr_b}"));
    assert_eq!(a.recv_line(LINE), "inserted");
    a.send_line("go");
    b.send_line("go");
    finish_sides(a, b);
}
