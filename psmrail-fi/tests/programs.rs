//! libfabric programs nobody on this team wrote, run against psmrail's
//! provider libraries: the distribution's `fi_info` and `fi_pingpong`
//! (`libfabric-bin`) and the libfabric project's fabtests.
//!
//! The libraries are the ones cargo built beside this test binary
//! (`cargo build -p psmrail-fi-psm -p psmrail-fi-mrail` first; CI does).
//! A missing library or program skips a test with a line saying why,
//! unless `PSMRAIL_REQUIRE_FABTESTS=1` (set in CI), which makes it a
//! failure. Fabtests are found in `PSMRAIL_FABTESTS` (the `bin` folder of
//! a fabtests install). Native-engine runs need `PSMRAIL_REQUIRE_NATIVE=1`
//! (and `PSM2_DEVICES=self,shm`), as the other native tests.
//!
//! Two-process runs (a server, then a client given `127.0.0.1`) hold the
//! machine-wide spin lock, and every process is killed after its timeout,
//! which fails the test.
// Built without libfabric (see build.rs), the crate has no C face to test.
#![cfg(libfabric)]

mod support;

// The multi-rail rig of psmrail's own tests: two network namespaces joined
// by veth rails (root).
#[allow(dead_code)]
#[path = "../../tests/support/rig.rs"]
mod rig;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::{
    assert_pair, pair, require_native, run_pair, spin_lock, text, wait_bounded, with_env, Engine,
    Side, FABTESTS,
};

/// Skips (returns `None`) or, when required, fails.
fn missing(what: &str) -> Option<()> {
    FABTESTS.missing(what)
}

fn provider_dir() -> Option<PathBuf> {
    FABTESTS.provider_dir()
}

/// A program of the distribution on PATH.
fn tool(name: &str) -> Option<PathBuf> {
    FABTESTS.tool(name, "libfabric-bin")
}

/// A fabtests program.
fn fabtest(name: &str) -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("PSMRAIL_FABTESTS") else {
        missing("PSMRAIL_FABTESTS is not set (the bin folder of a fabtests 1.17 install)")?;
        return None;
    };
    let p = Path::new(&dir).join(name);
    if p.is_file() {
        Some(p)
    } else {
        missing(&format!("{} is missing", p.display()))?;
        None
    }
}

const MRAIL_RAILS: (&str, &str) = ("FI_OFI_MRAIL_ADDR", "127.0.0.1,127.0.0.1");
const MRAIL_ONE_RAIL: (&str, &str) = ("FI_OFI_MRAIL_ADDR", "127.0.0.1");

#[test]
fn fi_info_lists_and_keeps_ours() {
    let Some(dir) = provider_dir() else { return };
    let Some(fi_info) = tool("fi_info") else {
        return;
    };
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut c = with_env(Command::new(&fi_info), &dir, Engine::Soft);
        c.args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        wait_bounded(
            c.spawn().expect("spawn fi_info"),
            Duration::from_secs(60),
            "fi_info",
        )
    };
    let listed = run(&["-l"], &[("FI_LOG_LEVEL", "info")]);
    assert!(listed.status.success(), "{}", text(&listed));
    let out = String::from_utf8_lossy(&listed.stdout);
    assert!(
        out.contains("psm:\n    version: 1000.1"),
        "{}",
        text(&listed)
    );
    assert!(
        out.contains("ofi_mrail:\n    version: 1000.1"),
        "{}",
        text(&listed)
    );
    let log = String::from_utf8_lossy(&listed.stderr);
    assert!(log.contains("registering provider: psm (1000.1)"), "{log}");
    assert!(
        log.contains("registering provider: ofi_mrail (1000.1)"),
        "{log}"
    );

    let psm = run(&["-p", "psm"], &[]);
    assert!(psm.status.success(), "{}", text(&psm));
    let out = String::from_utf8_lossy(&psm.stdout);
    // Entries are "provider: <name>" blocks; psm's own are psmrail's
    // (1000.1). ofi_rxd layers over psm's DGRAM endpoints ("psm;ofi_rxd",
    // at its own version 117.0).
    let blocks: Vec<&str> = out.split("provider: ").filter(|b| !b.is_empty()).collect();
    let own: Vec<&&str> = blocks.iter().filter(|b| b.starts_with("psm\n")).collect();
    assert!(!own.is_empty(), "{}", text(&psm));
    for b in &own {
        assert!(
            b.contains("version: 1000.1\n"),
            "psmrail's psm must be the one kept: {}",
            text(&psm)
        );
    }
    assert!(
        blocks.iter().any(|b| b.starts_with("psm;ofi_rxd\n")),
        "ofi_rxd layers over psm's DGRAM endpoints: {}",
        text(&psm)
    );

    let mrail = run(&["-p", "ofi_mrail", "-v"], &[MRAIL_RAILS]);
    assert!(mrail.status.success(), "{}", text(&mrail));
    let out = String::from_utf8_lossy(&mrail.stdout);
    assert!(out.contains("prov_name: ofi_mrail"), "{}", text(&mrail));
    assert!(out.contains("prov_version: 1000.1"), "{}", text(&mrail));
    assert!(out.contains("type: FI_EP_RDM"), "{}", text(&mrail));
}

/// fi_pingpong over `prov`, every size, data checked.
fn pingpong(prov: &str, ep: &str, engine: Engine, env: &[(&str, &str)], port: &str) {
    let Some(dir) = provider_dir() else { return };
    let Some(pp) = tool("fi_pingpong") else {
        return;
    };
    let args = ["-p", prov, "-e", ep, "-v", "-I", "20", "-S", "all"];
    // The server listens on `port` (-B), the client connects to it (-P).
    let out = assert_pair(
        &format!("fi_pingpong -p {prov} -e {ep} ({engine:?})"),
        pair(
            &pp,
            &args,
            &["-B", port],
            &["-P", port, "127.0.0.1"],
            &dir,
            engine,
            env,
        ),
    );
    // The result table: one row per size, up to fi_pingpong's largest.
    assert!(out.contains("bytes"), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("1m ")),
        "no 1 MiB row:\n{out}"
    );
}

#[test]
fn fi_pingpong_psm_soft_rdm() {
    pingpong("psm", "rdm", Engine::Soft, &[], "47611");
}

#[test]
fn fi_pingpong_psm_soft_dgram() {
    pingpong("psm", "dgram", Engine::Soft, &[], "47612");
}

#[test]
fn fi_pingpong_mrail_soft_two_rails() {
    pingpong("ofi_mrail", "rdm", Engine::Soft, &[MRAIL_RAILS], "47613");
}

#[test]
fn fi_pingpong_psm_native() {
    if !require_native() {
        eprintln!("skipped: the native engine runs with PSMRAIL_REQUIRE_NATIVE=1");
        return;
    }
    pingpong("psm", "rdm", Engine::Native, &[], "47614");
    pingpong("psm", "dgram", Engine::Native, &[], "47615");
}

#[test]
fn fi_pingpong_mrail_native() {
    if !require_native() {
        eprintln!("skipped: the native engine runs with PSMRAIL_REQUIRE_NATIVE=1");
        return;
    }
    // One PSM endpoint per process: one rail.
    pingpong(
        "ofi_mrail",
        "rdm",
        Engine::Native,
        &[MRAIL_ONE_RAIL],
        "47616",
    );
}

/// The fabtests that must pass on psm (each: program and arguments).
const PSM_PAIRS: &[&str] = &[
    "fi_rdm_pingpong -v -S all -I 10",
    "fi_rdm_tagged_pingpong -v -S all -I 10",
    "fi_rdm_cntr_pingpong -v -S all -I 10",
    "fi_rdm_tagged_bw -v -S all -I 10",
    "fi_dgram_pingpong -v -S all -I 10",
    "fi_rdm",
    "fi_rdm -U",
    "fi_dgram",
    "fi_av_xfer -e rdm",
    "fi_av_xfer -e dgram",
    "fi_recv_cancel -e rdm -V",
    "fi_unexpected_msg -e rdm -I 10",
    "fi_msg_inject -A inject -v",
    "fi_msg_inject -N -A inject -v",
    "fi_msg_inject -A inj_complete -v",
    "fi_msg_inject -N -A inj_complete -v",
    "fi_bw -e rdm -v -T 1",
    "fi_bw -e rdm -v -T 1 -U",
    "fi_rdm_multi_client -C 10 -I 5",
    "fi_multi_recv -e rdm -v",
    "fi_multi_recv -e rdm -v -M",
    "fi_rdm_tagged_peek",
    "fi_rma_bw -e rdm -o write -v -S all -I 10",
    "fi_rma_bw -e rdm -o read -v -S all -I 10",
    "fi_rma_bw -e rdm -o writedata -v -I 100",
    // 8 MiB writes, 64 in flight to one range: each remote CQ data entry
    // follows its bytes.
    "fi_rma_bw -e rdm -o writedata -v -S 8388608 -I 100",
    "fi_rdm_rma_event",
    "fi_rdm_rma_trigger",
    "fi_multi_mr -e rdm -V",
    "fi_rdm_atomic -o all -I 10",
];

/// The fabtests that must pass on ofi_mrail over two loopback rails (soft
/// engine). Addresses go out of band (`-E`): mrail peers have no name
/// server.
const MRAIL_PAIRS: &[&str] = &[
    "fi_rdm_pingpong -E -v -S all -I 10",
    "fi_rdm_tagged_pingpong -E -v -S all -I 10",
    "fi_rdm_cntr_pingpong -E -v -S all -I 10",
    "fi_rdm_tagged_bw -E -v -S all -I 10",
    "fi_rdm -E",
    "fi_recv_cancel -E -e rdm -V",
    "fi_bw -E -e rdm -v -T 1",
    "fi_rdm_tagged_peek -E",
];

/// runfabtests.sh's unit tests that run on psm (one process each).
const PSM_UNITS: &[&str] = &[
    "fi_getinfo_test -s 127.0.0.1 127.0.0.1",
    "fi_dom_test -n 2",
    "fi_eq_test",
    "fi_cq_test",
    "fi_mr_test",
    "fi_cntr_test",
];

fn fabtests_pairs(prov: &str, list: &[&str], engine: Engine, env: &[(&str, &str)]) {
    let Some(dir) = provider_dir() else { return };
    for entry in list {
        let mut words = entry.split_whitespace();
        let name = words.next().expect("a program");
        let Some(program) = fabtest(name) else { return };
        let mut args: Vec<&str> = words.collect();
        args.extend(["-p", prov, "-s", "127.0.0.1"]);
        assert_pair(
            &format!("{entry} -p {prov} ({engine:?})"),
            pair(&program, &args, &[], &["127.0.0.1"], &dir, engine, env),
        );
    }
}

#[test]
fn fabtests_unit_psm() {
    let Some(dir) = provider_dir() else { return };
    for entry in PSM_UNITS {
        let mut words = entry.split_whitespace();
        let name = words.next().expect("a program");
        let Some(program) = fabtest(name) else { return };
        // Under the lock the pairs take: a unit program's fabric may serve
        // the job's name server (the first process of the job on the node
        // does), and a pair's server registering there would lose its
        // entry when the unit program exits.
        let _lock = spin_lock();
        let mut c = with_env(Command::new(program), &dir, Engine::Soft);
        c.args(words).args(["-p", "psm"]);
        let out = wait_bounded(c.spawn().expect("spawn"), Duration::from_secs(90), entry);
        assert!(out.status.success(), "{entry}: {}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stdout.contains("FAIL"), "{entry}: {}", text(&out));
        for case in MUST_PASS.iter().filter(|(p, _)| *p == name) {
            let line = format!("Running {} ", case.1);
            let passed = stdout
                .lines()
                .any(|l| l.starts_with(&line) && l.ends_with("PASS!"));
            assert!(passed, "{entry}: {} did not pass: {}", case.1, text(&out));
        }
    }
}

/// Unit cases that must run and pass (not be skipped), by program: the
/// file-descriptor wait objects and `fi_cq_signal`.
const MUST_PASS: &[(&str, &str)] = &[
    ("fi_eq_test", "eq_wait_fd_poll"),
    ("fi_eq_test", "eq_wait_fd_sread"),
    ("fi_eq_test", "eq_wait_sread_peek"),
    ("fi_cq_test", "cq_signal"),
];

#[test]
fn fabtests_mrail_soft_two_rails() {
    fabtests_pairs("ofi_mrail", MRAIL_PAIRS, Engine::Soft, &[MRAIL_RAILS]);
}

/// [`MRAIL_PAIRS`] between two hosts: the server in namespace A, the
/// client in B, each given its own ends of two veth rails as
/// `FI_OFI_MRAIL_ADDR`; the out-of-band connection goes over rail 0. Both
/// rails must carry the bytes (their interface counters).
#[test]
fn fabtests_mrail_soft_two_veth_rails() {
    let Some(dir) = provider_dir() else { return };
    let rig = match rig::RailRig::new(2) {
        Ok(rig) => rig,
        Err(reason) => {
            missing(&format!("no rail rig for ofi_mrail: {reason}"));
            return;
        }
    };
    let before: Vec<u64> = (0..2)
        .map(|r| rig.link_bytes(rig.b(), rig.b_if(r)).rx)
        .collect();
    let (a_src, b_src) = (rig.a_ip(0).to_string(), rig.b_ip(0).to_string());
    for entry in MRAIL_PAIRS {
        let mut words = entry.split_whitespace();
        let name = words.next().expect("a program");
        let Some(program) = fabtest(name) else { return };
        let args: Vec<&str> = words.collect();
        let mk = |side: Side, more: &[&str]| {
            let (ns, rails, src) = match side {
                Side::Server => (rig.a(), rig.mrail_addr_a(), &a_src),
                Side::Client => (rig.b(), rig.mrail_addr_b(), &b_src),
            };
            let mut c = with_env(rig.command_in(ns, &program), &dir, Engine::Soft);
            c.args(&args)
                .args(["-p", "ofi_mrail", "-s", src])
                .args(more)
                .env("FI_OFI_MRAIL_ADDR", rails);
            c
        };
        assert_pair(
            &format!("{entry} -p ofi_mrail over two veth rails"),
            run_pair(Duration::from_millis(800), mk, &[], &[&a_src]),
        );
    }
    for (rail, was) in before.iter().enumerate() {
        let got = rig.link_bytes(rig.b(), rig.b_if(rail)).rx - was;
        eprintln!("rail {rail}: {got} bytes into host B");
        assert!(
            got > 64 << 20,
            "rail {rail} carried {got} bytes into host B over the whole list"
        );
    }
}

#[test]
fn fabtests_psm_soft() {
    fabtests_pairs("psm", PSM_PAIRS, Engine::Soft, &[]);
}

/// Left out on the native engine: a process that closes its endpoint and
/// opens another cannot reach the same server again (the second client's
/// first send cannot connect), which `fi_rdm_multi_client`'s sequential
/// clients do.
const NATIVE_EXCLUDED: &[&str] = &["fi_rdm_multi_client -C 10 -I 5"];

#[test]
fn fabtests_psm_native() {
    if !require_native() {
        eprintln!("skipped: the native engine runs with PSMRAIL_REQUIRE_NATIVE=1");
        return;
    }
    let list: Vec<&str> = PSM_PAIRS
        .iter()
        .copied()
        .filter(|t| !NATIVE_EXCLUDED.contains(t))
        .collect();
    fabtests_pairs("psm", &list, Engine::Native, &[]);
}
