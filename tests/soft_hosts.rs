//! Two hosts configured by the environment alone: `PSMRAIL_SOFT_ADDR`
//! names the interface each soft endpoint listens on, and a client on
//! the other host finds the server through the server's name server by
//! the server's address, as `fi_pingpong <host>` does. Without the
//! variables, the engine and the name server stay on loopback: a client
//! on another host finds no name server, and `PSMRAIL_NAME_SERVER_ADDR`
//! opens it where it names.
//!
//! The hosts are the two network namespaces of the rail rig (root; the
//! tests print `skipped: <reason>` and pass without it), joined by one
//! veth rail, 198.18.0.1 in host A and 198.18.0.2 in host B.

mod support;

use std::time::Duration;

use psmrail::engine::soft::SoftEpid;
use psmrail::engine::{Epid, OpBuffer};
use psmrail::fabric::{AvAttr, Caps, EngineChoice, Fabric, GetInfo, Hints};
use support::peer::{role, say, Peer};
use support::rig::RailRig;
use support::spin_lock::spin_lock;

/// The service the server registers under.
const SERVICE: u32 = 4711;
const LINE: Duration = Duration::from_secs(30);

fn hints() -> Hints {
    Hints::new().caps(Caps::MSG).engine(EngineChoice::Soft)
}

/// The child's part: `server` registers and answers one message;
/// `client` looks the server up at `SERVER_NODE`, sends it its own
/// address and waits for the answer; `lookup` only looks up, and says
/// what it found.
fn child(role: &str) {
    let hints = hints();
    let node = std::env::var("SERVER_NODE").unwrap_or_default();
    let request = GetInfo::new().hints(&hints).service(SERVICE);
    let request = match role {
        "server" => request.source(true),
        _ => request.node(&node),
    };
    let info = match request.run() {
        Ok(mut infos) => infos.remove(0),
        Err(e) => return say(&format!("err {:?} {e}", e.kind())),
    };
    if role == "lookup" {
        let found = info
            .dest_addr
            .map(|e| SoftEpid::from_epid(e).expect("a soft epid"));
        return say(&format!("found {}", found.expect("a dest_addr").addr()));
    }
    let fabric = Fabric::open(&info).expect("fabric");
    let domain = fabric.domain(&info).expect("domain");
    let av = domain.av(AvAttr::new()).expect("av");
    let ep = domain
        .endpoint(&info)
        .bind_av(&av)
        .enable()
        .expect("endpoint");
    let me = SoftEpid::from_epid(ep.getname()).expect("a soft epid");
    say(&format!("bound {}", me.addr()));
    let reactor = domain.reactor().clone();
    if role == "server" {
        let (r, buf) = reactor.block_on(ep.recv(OpBuffer::from(vec![0u8; 8])));
        let got = r.expect("the client's address");
        let client = Epid(u64::from_le_bytes(
            buf.as_slice()[..got.len].try_into().expect("8 bytes"),
        ));
        let to = av.insert(&[client]).remove(0).expect("insert the client");
        let (r, _) = reactor.block_on(ep.send(to, b"pong".to_vec()));
        r.expect("the answer");
        say("answered");
    } else {
        let server = info.dest_addr.expect("the name server's answer");
        let to = av.insert(&[server]).remove(0).expect("insert the server");
        let (r, _) = reactor.block_on(ep.send(to, ep.getname().0.to_le_bytes().to_vec()));
        r.expect("send the address");
        let (r, buf) = reactor.block_on(ep.recv(OpBuffer::from(vec![0u8; 8])));
        let got = r.expect("the answer");
        say(&format!(
            "got {}",
            String::from_utf8_lossy(&buf.as_slice()[..got.len])
        ));
    }
    // Let the last frames leave before the process exits.
    std::thread::sleep(Duration::from_millis(200));
}

fn rig() -> Option<RailRig> {
    match RailRig::new(1) {
        Ok(rig) => Some(rig),
        Err(reason) => {
            println!("skipped: {reason}");
            None
        }
    }
}

#[test]
fn hosts_named_by_interface_find_each_other_through_the_name_server() {
    if let Some(r) = role() {
        return child(&r);
    }
    let Some(rig) = rig() else { return };
    let _lock = spin_lock();
    let test = "hosts_named_by_interface_find_each_other_through_the_name_server";
    let before = rig.link_bytes(rig.b(), rig.b_if(0));
    let mut server = Peer::spawn_in(
        rig.a(),
        test,
        "server",
        &[("PSMRAIL_SOFT_ADDR", rig.a_if(0))],
    );
    assert_eq!(server.recv_line(LINE), format!("bound {}", rig.a_ip(0)));
    let node = rig.a_ip(0).to_string();
    let mut client = Peer::spawn_in(
        rig.b(),
        test,
        "client",
        &[("PSMRAIL_SOFT_ADDR", rig.b_if(0)), ("SERVER_NODE", &node)],
    );
    assert_eq!(client.recv_line(LINE), format!("bound {}", rig.b_ip(0)));
    assert_eq!(client.recv_line(LINE), "got pong");
    assert_eq!(server.recv_line(LINE), "answered");
    assert!(client.wait(LINE).success(), "the client failed");
    assert!(server.wait(LINE).success(), "the server failed");
    let after = rig.link_bytes(rig.b(), rig.b_if(0));
    assert!(
        after.rx > before.rx && after.tx > before.tx,
        "the rail carried nothing: {before:?} -> {after:?}"
    );
}

#[test]
fn by_default_the_engine_and_the_name_server_stay_on_loopback() {
    if let Some(r) = role() {
        return child(&r);
    }
    let Some(rig) = rig() else { return };
    let _lock = spin_lock();
    let test = "by_default_the_engine_and_the_name_server_stay_on_loopback";
    let node = rig.a_ip(0).to_string();
    let lookup = |env: &[(&str, &str)]| {
        let mut server = Peer::spawn_in(rig.a(), test, "server", env);
        let bound = server.recv_line(LINE);
        let mut looker = Peer::spawn_in(rig.b(), test, "lookup", &[("SERVER_NODE", &node)]);
        let found = looker.recv_line(LINE);
        assert!(looker.wait(LINE).success(), "the lookup failed");
        server.kill();
        (bound, found)
    };

    let (bound, found) = lookup(&[]);
    assert_eq!(bound, "bound 127.0.0.1");
    assert!(
        found.starts_with("err NoData") && found.contains(&format!("{node}:")),
        "no name server listens on host A's rail unasked: {found}"
    );

    // Asked, the name server listens on the rail (the endpoint it
    // serves still only on loopback).
    let (bound, found) = lookup(&[("PSMRAIL_NAME_SERVER_ADDR", rig.a_if(0))]);
    assert_eq!(bound, "bound 127.0.0.1");
    assert_eq!(found, "found 127.0.0.1");
}

#[test]
fn a_malformed_address_variable_is_refused_with_its_name() {
    for (var, value) in [
        ("PSMRAIL_SOFT_ADDR", "0x10"),
        ("PSMRAIL_SOFT_ADDR", "fe80::1"),
        ("PSMRAIL_SOFT_ADDR", "psmrail-no-such-if0"),
        ("PSMRAIL_NAME_SERVER_ADDR", "lo,"),
    ] {
        let e = GetInfo::new()
            .hints(&hints().vars([(var, value)]))
            .run()
            .expect_err(value);
        assert!(e.to_string().contains(var), "{var}={value}: {e}");
    }
    let info = GetInfo::new()
        .hints(&hints().vars([("PSMRAIL_SOFT_ADDR", "lo")]))
        .run()
        .unwrap();
    assert_eq!(info[0].soft_config().bind, std::net::Ipv4Addr::LOCALHOST);
}
