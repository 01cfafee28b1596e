//! Replays the fuzz seed corpus (`fuzz/corpus/<target>/`) through the same
//! checks the cargo-fuzz targets run, so an ordinary `cargo test` exercises
//! it. Seeds named `valid-*` must parse and `invalid-*` must be rejected;
//! any other file (e.g. a minimised crash added later) only has to pass the
//! checks.

use std::fs;
use std::path::PathBuf;

use psmrail::hooks::config::{check_mrail_config, check_prog_affinity};

fn replay(target: &str, check: fn(&[u8]) -> bool) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join("corpus")
        .join(target);
    let mut entries: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    entries.sort();
    let (mut valid, mut invalid) = (0, 0);
    for path in &entries {
        let data = fs::read(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy();
        let parsed = check(&data);
        if name.starts_with("valid-") {
            assert!(parsed, "{target}/{name} ({data:?}) should parse");
            valid += 1;
        } else if name.starts_with("invalid-") {
            assert!(!parsed, "{target}/{name} ({data:?}) should be rejected");
            invalid += 1;
        }
    }
    assert!(
        entries.len() >= 15,
        "{target}: only {} seeds",
        entries.len()
    );
    assert!(
        valid >= 5 && invalid >= 10,
        "{target}: {valid} valid, {invalid} invalid seeds"
    );
}

#[test]
fn mrail_config_corpus() {
    replay("mrail_config", check_mrail_config);
}

#[test]
fn prog_affinity_corpus() {
    replay("prog_affinity", check_prog_affinity);
}

/// The soft engine's seeds have no valid/invalid naming: each must run
/// through its check (which asserts the decoder's invariants) without panic.
fn replay_soft(target: &str, check: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join("corpus")
        .join(target);
    let mut n = 0;
    for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        check(&fs::read(&path).unwrap());
        n += 1;
    }
    assert!(n >= 15, "{target}: only {n} seeds");
}

#[test]
fn soft_frame_corpus() {
    replay_soft("soft_frame", psmrail::hooks::soft::fuzz_frame_decoder);
}

#[test]
fn soft_handshake_corpus() {
    replay_soft("soft_handshake", psmrail::hooks::soft::fuzz_handshake);
}

#[test]
fn shm_ring_corpus() {
    replay_soft("shm_ring", psmrail::hooks::shm::fuzz_shm_ring);
}

#[test]
fn name_server_frame_corpus() {
    replay(
        "name_server_frame",
        psmrail::hooks::name_server::check_frame,
    );
}

#[test]
fn peer_packets_corpus() {
    replay("peer_packets", psmrail::hooks::packets::check_peer_packet);
}

#[test]
fn mrail_frame_corpus() {
    replay("mrail_frame", psmrail::hooks::mrail::fuzz_header);
}

#[test]
fn mrail_reorder_corpus() {
    replay_soft("mrail_reorder", psmrail::hooks::mrail::fuzz_reorder);
}

#[test]
fn pmi_reply_corpus() {
    replay("pmi_reply", psmrail::hooks::bootstrap::check_pmi_reply);
}

#[test]
fn pmi2_reply_corpus() {
    replay("pmi2_reply", psmrail::hooks::bootstrap::check_pmi2_reply);
}
