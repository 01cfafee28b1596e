//! Open MPI ping-pong latency over psmrail's libfabric providers, beside
//! Open MPI's own shared-memory path and libfabric's tcp provider, in one
//! run.
//!
//! ```text
//! cargo build --release -p psmrail-fi-psm -p psmrail-fi-mrail
//! cargo run --release -p psmrail-bench --bin mpi_bench
//! ```
//!
//! `bench/mpi/mpi_pingpong.c` is compiled with `mpicc.openmpi` and run by
//! `mpirun.openmpi` on two ranks bound to their own cores, once per
//! variant and round, the variants alternating within each round (these
//! VMs are noisy: a figure is the median over `--rounds` rounds of each
//! round's median half round trip):
//!
//! * `ob1`: Open MPI's default, the ob1 PML over its vader shared-memory
//!   BTL — the baseline every ratio is taken against;
//! * `ofi-tcp`: the cm PML and ofi MTL over libfabric's tcp provider
//!   (`tcp;ofi_rxm`);
//! * `psm-soft`, `psm-native`: over psmrail's psm (Open MPI 4.1 goes
//!   through ofi_rxd over psm's DGRAM endpoints, see
//!   docs/libfabric-provider.md), on the soft and the native engine;
//! * `mrail-soft`: over psmrail's ofi_mrail, one loopback rail, soft
//!   engine (Open MPI's `ofi_tag_1` tag mode).
//!
//! Options: `--sizes 8,65536,1048576`, `--iters N` (round trips per round,
//! default 2000; large sizes take a tenth, at least 50), `--rounds N`
//! (default 5), `--variants ob1,ofi-tcp,...`, `--provider-dir DIR`
//! (default: the folder of this binary, where cargo put the provider
//! libraries).

use clap::Parser;
use psmrail_bench::stats::median_or_zero;
use psmrail_bench::units::{parse_size, size_label};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Parser, Debug)]
#[command(
    about = "Open MPI ping-pong latency over psmrail's providers, beside ob1+vader and ofi tcp"
)]
struct Args {
    /// Message sizes (8, 64k, 1m, ...).
    #[arg(long, value_delimiter = ',', default_value = "8,64k,1m", value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Round trips per round at small sizes.
    #[arg(long, default_value_t = 2000)]
    iters: usize,
    /// Rounds; each variant runs once per round.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Which variants, in order (the first is the ratios' baseline).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ob1,ofi-tcp,psm-soft,psm-native,mrail-soft"
    )]
    variants: Vec<String>,
    /// The folder of libpsmrail_psm_fi.so and libpsmrail_mrail_fi.so.
    #[arg(long)]
    provider_dir: Option<PathBuf>,
}

/// What mpirun is given for a variant: its arguments and the variables it
/// sets and exports to the ranks.
struct Launch {
    args: Vec<String>,
    env: Vec<(String, String)>,
}

/// The mpirun arguments and environment of a variant.
fn variant(name: &str, providers: &Path) -> Result<Launch, String> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let ofi = |prov: &str| {
        s(&[
            "--mca",
            "pml",
            "cm",
            "--mca",
            "mtl",
            "ofi",
            "--mca",
            "mtl_ofi_provider_include",
            prov,
        ])
    };
    let ours = |engine: &str| {
        vec![
            (
                "FI_PROVIDER_PATH".to_string(),
                providers.display().to_string(),
            ),
            ("PSMRAIL_ENGINE".to_string(), engine.to_string()),
            ("PSM2_DEVICES".to_string(), "self,shm".to_string()),
        ]
    };
    let (args, env) = match name {
        "ob1" => (
            s(&["--mca", "pml", "ob1", "--mca", "btl", "self,vader"]),
            vec![],
        ),
        "ofi-tcp" => (ofi("tcp"), vec![]),
        "psm-soft" => (ofi("psm"), ours("soft")),
        "psm-native" => (ofi("psm"), ours("native")),
        "mrail-soft" => {
            let mut a = ofi("ofi_mrail");
            a.extend(s(&["--mca", "mtl_ofi_tag_mode", "ofi_tag_1"]));
            let mut e = ours("soft");
            e.push(("FI_OFI_MRAIL_ADDR".to_string(), "127.0.0.1".to_string()));
            (a, e)
        }
        other => {
            return Err(format!(
                "unknown variant {other:?} (ob1, ofi-tcp, psm-soft, psm-native, mrail-soft)"
            ))
        }
    };
    Ok(Launch { args, env })
}

/// One mpirun of the ping-pong: the median half round trip (µs) per size.
fn run_once(
    prog: &Path,
    name: &str,
    providers: &Path,
    args: &Args,
    size: usize,
) -> Result<f64, String> {
    let Launch { args: mca, env } = variant(name, providers)?;
    let iters = if size >= 65536 {
        (args.iters / 10).max(50)
    } else {
        args.iters
    };
    let mut c = Command::new("mpirun.openmpi");
    c.args([
        "--allow-run-as-root",
        "-np",
        "2",
        "--bind-to",
        "core",
        "--map-by",
        "core",
    ])
    .args(&mca)
    .env_remove("FI_PROVIDER_PATH");
    for (k, v) in &env {
        c.env(k, v).args(["-x", k]);
    }
    c.arg(prog)
        .arg(iters.to_string())
        .arg("3")
        .arg(size.to_string());
    let out = c.output().map_err(|e| format!("mpirun.openmpi: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{name}: mpirun failed ({}):\n{text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4 && f[0] == "size" && f[2] == "median_us")
                .then(|| f[3].parse::<f64>().ok())?
        })
        .next()
        .ok_or_else(|| format!("{name}: no figure in the output:\n{text}"))
}

fn compile(out_dir: &Path) -> Result<PathBuf, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi/mpi_pingpong.c");
    let prog = out_dir.join("mpi_pingpong");
    let st = Command::new("mpicc.openmpi")
        .args(["-O2", "-o"])
        .arg(&prog)
        .arg(&src)
        .status()
        .map_err(|e| format!("mpicc.openmpi (apt-get install libopenmpi-dev): {e}"))?;
    if !st.success() {
        return Err(format!("mpicc.openmpi failed on {}", src.display()));
    }
    Ok(prog)
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let here = exe
        .parent()
        .ok_or("no folder for this binary")?
        .to_path_buf();
    let providers = args.provider_dir.clone().unwrap_or_else(|| here.clone());
    for lib in ["libpsmrail_psm_fi.so", "libpsmrail_mrail_fi.so"] {
        if !providers.join(lib).is_file() {
            return Err(format!(
                "{lib} is not in {} (cargo build --release -p psmrail-fi-psm -p psmrail-fi-mrail)",
                providers.display()
            ));
        }
    }
    for v in &args.variants {
        variant(v, &providers)?;
    }
    let prog = compile(&here)?;
    // figures[(variant, size)] = one median per round
    let mut figures: BTreeMap<(usize, usize), Vec<f64>> = BTreeMap::new();
    for round in 0..args.rounds {
        for (vi, v) in args.variants.iter().enumerate() {
            for &size in &args.sizes {
                let us = run_once(&prog, v, &providers, &args, size)?;
                eprintln!("round {round}: {v} {}: {us:.2} µs", size_label(size));
                figures.entry((vi, size)).or_default().push(us);
            }
        }
    }
    println!(
        "median half round trip over {} rounds (µs; ratio to {})",
        args.rounds, args.variants[0]
    );
    print!("{:>8}", "size");
    for v in &args.variants {
        print!(" | {v:>18}");
    }
    println!();
    for &size in &args.sizes {
        print!("{:>8}", size_label(size));
        let base = median_or_zero(figures[&(0, size)].clone());
        for vi in 0..args.variants.len() {
            let m = median_or_zero(figures[&(vi, size)].clone());
            print!(
                " | {:>9.2} ({:>5.2}x)",
                m,
                if base > 0.0 { m / base } else { 0.0 }
            );
        }
        println!();
    }
    Ok(())
}
