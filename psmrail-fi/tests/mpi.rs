//! Open MPI over psmrail: the distribution's Open MPI (`openmpi-bin`,
//! `libopenmpi-dev`) runs `tests/mpi/mpi_check.c` under `mpirun` with the
//! `cm` PML and the `ofi` MTL, libfabric finding psmrail's provider
//! libraries through `FI_PROVIDER_PATH`: point-to-point messages of every
//! size to 4 MiB, wildcard receives, probe, matched probe, synchronous
//! sends, cancel, all pairs at once and collectives, on 2 and 4 ranks of
//! this host.
//!
//! Open MPI 4.1's `mtl ofi` asks for `FI_TAGGED` with `FI_DIRECTED_RECV`.
//! psm cannot offer the two together (a PSM tag has no room for the
//! source, fi_psm(7)), so libfabric layers its ofi_rxd utility provider
//! over psm's DGRAM endpoints (`psm;ofi_rxd`). ofi_mrail matches above
//! its rails and offers both: Open MPI runs on it directly, its probes
//! and matched probes being mrail peeks and claims. Without rails the job
//! ends with Open MPI's error, not a crash.
//!
//! The provider libraries are the ones cargo built beside this test
//! binary (`cargo build -p psmrail-fi-psm -p psmrail-fi-mrail` first). A
//! missing Open MPI skips a test with a line saying why, unless
//! `PSMRAIL_REQUIRE_MPI=1` (set in CI). Every run holds the machine-wide
//! spin lock (Open MPI's ranks poll) and is killed after its timeout,
//! which fails the test.
// Built without libfabric (see build.rs), the crate has no C face to test.
#![cfg(libfabric)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;
use support::{spin_lock, text, wait_bounded, with_env, Engine, MPI};

/// `mpi_check`, compiled once by Open MPI's compiler wrapper.
fn mpi_check() -> Option<PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cc = MPI.tool("mpicc.openmpi", "libopenmpi-dev")?;
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi/mpi_check.c");
            let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi_check");
            let built = Command::new(cc)
                .args(["-O2", "-Wall", "-Werror", "-o"])
                .arg(&out)
                .arg(&src)
                .output()
                .expect("run mpicc.openmpi");
            assert!(built.status.success(), "mpicc: {}", text(&built));
            Some(out)
        })
        .clone()
}

/// One `mpirun` of `mpi_check` on `ranks` ranks over `prov`.
fn mpirun(
    prov: &str,
    engine: Engine,
    ranks: usize,
    env: &[(&str, &str)],
    mca: &[(&str, &str)],
) -> Option<Output> {
    let dir = MPI.provider_dir()?;
    let run = MPI.tool("mpirun.openmpi", "openmpi-bin")?;
    let prog = mpi_check()?;
    let mut c = with_env(Command::new(run), &dir, engine);
    c.args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(ranks.to_string())
        .args(["--mca", "pml", "cm", "--mca", "mtl", "ofi"])
        .args(["--mca", "mtl_ofi_provider_include", prov])
        // Log which providers libfabric registered and which fabric opened.
        .args(["-x", "FI_LOG_LEVEL=info"]);
    for (k, v) in mca {
        c.args(["--mca", k, v]);
    }
    for var in ["FI_PROVIDER_PATH", "PSMRAIL_ENGINE", "PSM2_DEVICES"] {
        c.args(["-x", var]);
    }
    for (k, v) in env {
        c.arg("-x").arg(format!("{k}={v}"));
    }
    c.arg(&prog);
    let _lock = spin_lock();
    let child = c.spawn().expect("spawn mpirun.openmpi");
    Some(wait_bounded(child, Duration::from_secs(180), "mpirun"))
}

/// Runs `mpi_check` over `prov` on each of `ranks`; each run must pass
/// on psmrail's library (registered at its version 1000.1) and open
/// `fabric`.
fn check(
    prov: &str,
    engine: Engine,
    ranks: &[usize],
    env: &[(&str, &str)],
    mca: &[(&str, &str)],
    fabric: &str,
) {
    if engine == Engine::Native && !support::require_native() {
        eprintln!("skipped: the native engine is not required (PSMRAIL_REQUIRE_NATIVE=1)");
        return;
    }
    for &ranks in ranks {
        let Some(out) = mpirun(prov, engine, ranks, env, mca) else {
            return;
        };
        let what = format!("mpi_check over {prov} ({engine:?}, {ranks} ranks)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stdout.contains(&format!("mpi_check: ok {ranks}")),
            "{what}: {}",
            text(&out)
        );
        let registered = format!(
            "registering provider: {} (1000.1)",
            prov.split(';').next().unwrap_or(prov)
        );
        assert!(
            stderr.contains(&registered),
            "{what}: psmrail's library was not loaded: {}",
            text(&out)
        );
        assert!(
            stderr.contains(&format!("Opened fabric: {fabric}")),
            "{what}: no {fabric} fabric opened: {}",
            text(&out)
        );
    }
}

/// Open MPI without remote CQ data in its tags (`ofi_tag_1`: the source
/// rank travels in the tag).
const TAG_1: (&str, &str) = ("mtl_ofi_tag_mode", "ofi_tag_1");

/// psm through ofi_rxd: synchronous sends are left out (see mpi_check.c).
const NO_SSEND: (&str, &str) = ("MPI_CHECK_NO_SSEND", "1");

/// psm through ofi_rxd: matched probes are left out (ofi_rxd's claim; see
/// mpi_check.c).
const NO_MPROBE: (&str, &str) = ("MPI_CHECK_NO_MPROBE", "1");

#[test]
fn open_mpi_over_psm_soft() {
    check(
        "psm",
        Engine::Soft,
        &[2, 4],
        &[NO_SSEND, NO_MPROBE],
        &[],
        "psm",
    );
}

/// Two and four ranks: at `MPI_Finalize` the ranks close while others still
/// talk to them (libpsm2 reads its freed AM handler table for what arrives
/// during `psm2_ep_close`; psm-sys's close guard keeps that harmless).
#[test]
fn open_mpi_over_psm_native() {
    check(
        "psm",
        Engine::Native,
        &[2, 4],
        &[NO_SSEND, NO_MPROBE],
        &[],
        "psm",
    );
}

/// ofi_mrail over two loopback rails (soft engine): Open MPI's probes are
/// mrail peeks, its matched probes mrail claims, and its directed
/// receives mrail's.
#[test]
fn open_mpi_over_mrail_soft_two_rails() {
    let env = [("FI_OFI_MRAIL_ADDR", "127.0.0.1,127.0.0.1")];
    check(
        "ofi_mrail",
        Engine::Soft,
        &[2, 4],
        &env,
        &[TAG_1],
        "ofi_mrail_fabric",
    );
}

/// ofi_mrail on the native engine: one rail (one native endpoint per
/// process here, docs/native-engine.md).
#[test]
fn open_mpi_over_mrail_native_one_rail() {
    let env = [("FI_OFI_MRAIL_ADDR", "127.0.0.1")];
    check(
        "ofi_mrail",
        Engine::Native,
        &[2, 4],
        &env,
        &[TAG_1],
        "ofi_mrail_fabric",
    );
}

/// Without rails, a job over ofi_mrail ends with Open MPI's error (no
/// provider), and nothing crashes.
#[test]
fn open_mpi_over_mrail_without_rails_ends_with_open_mpis_error() {
    let env = [("FI_OFI_MRAIL_ADDR", "")];
    let Some(out) = mpirun("ofi_mrail", Engine::Soft, 2, &env, &[TAG_1]) else {
        return;
    };
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        !all.contains("Segmentation fault") && !all.contains("signal 11"),
        "{all}"
    );
    assert!(all.contains("PML cm cannot be selected"), "{all}");
}
