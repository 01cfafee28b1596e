//! `mrail_bench sweep`: bandwidth against message size per policy on
//! rigs of equal rails, 8 B latency per policy against a plain psm
//! endpoint, striping over unequal rails with equal and weighted parts,
//! and iperf3 over every rig's rails as the line-rate reference.

use super::pair::{self, Pair, Variant, Who};
use super::rig::{RailRig, MAX_RAILS};
use super::side;
use super::side::{Job, ProviderKind, MAX_WINDOW_BYTES};
use super::Common;
use psmrail_bench::chart::{write_svg, Chart, Series, SeriesLabelPosition, XAxis, YAxis};
use psmrail_bench::csv;
use psmrail_bench::stats::median;
use psmrail_bench::units::{parse_size, positive, size_short as size_label};
use std::process::ExitCode;
use std::time::Duration;

/// The default sizes: 4 KiB to 64 MiB in powers of 4.
const SIZES: [usize; 8] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
];
/// The sizes of `--quick`.
const QUICK_SIZES: [usize; 3] = [16 << 10, 256 << 10, 4 << 20];
/// A streaming window holds about this much, in 4 to 64 messages (4 so
/// that round-robin has a message for each of 4 rails).
const WINDOW_BYTES: usize = 16 << 20;
/// Striping from this size on is expected to reach...
const FLAG_FROM: usize = 1 << 20;
/// ... this fraction of iperf3's sum over the same rails.
const EXPECTED: f64 = 0.9;

/// A policy of every size (`ULONG_MAX:<policy>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Policy {
    Striping,
    RoundRobin,
    Fixed,
}

impl Policy {
    fn name(self) -> &'static str {
        match self {
            Policy::Striping => "striping",
            Policy::RoundRobin => "round-robin",
            Policy::Fixed => "fixed",
        }
    }
}

/// The parts of a sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Part {
    /// Bandwidth against size per policy, on each rig of --rails.
    Bw,
    /// 8 B latency per policy and of a psm endpoint, on each rig of --rails.
    Lat,
    /// Striping over the rails of --unequal: equal parts, configured
    /// weights, learned weights.
    Unequal,
}

/// `mrail_bench sweep`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct SweepArgs {
    /// A smoke test in under 2 minutes: sizes 16k,256k,4m, 3 rounds of
    /// 100 ms, 3 latency rounds of 2000 round trips.
    #[arg(long)]
    quick: bool,
    /// Message sizes of the bandwidth sweeps (comma-separated, k/m
    /// suffixes; default 4k,16k,64k,256k,1m,4m,16m,64m).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    sizes: Option<Vec<usize>>,
    /// The rigs of equal rails, by their number of rails.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    rails: Vec<usize>,
    /// Each equal rail's rate, Mbit/s (0: unshaped).
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// The unequal rig's rail rates, Mbit/s (0: unshaped).
    #[arg(long, value_delimiter = ',', default_value = "1000,2500")]
    unequal: Vec<u32>,
    /// The policies of the equal rigs.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "striping,round-robin,fixed"
    )]
    policies: Vec<Policy>,
    /// What to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "bw,lat,unequal"
    )]
    parts: Vec<Part>,
    /// No iperf3 reference (fractions of it are left out).
    #[arg(long)]
    no_iperf: bool,
    /// iperf3's duration per rig, seconds.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    iperf_secs: u64,
    /// The length of one timed streaming round, ms (default 300; --quick
    /// 100); a round lasts at least one window.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    round_ms: Option<u64>,
    /// Timed rounds per size; the bandwidth is their median (default 5;
    /// --quick 3).
    #[arg(long, value_parser = positive)]
    reps: Option<usize>,
    /// Messages per window (default: 16 MiB worth, 4 to 64).
    #[arg(long, value_parser = positive)]
    window: Option<usize>,
    /// The latency's message size.
    #[arg(long, default_value = "8", value_parser = parse_size)]
    lat_size: usize,
    /// Timed round trips per latency run (default 10000; --quick 2000).
    #[arg(long, value_parser = positive)]
    lat_iters: Option<usize>,
    /// Latency rounds: each runs psm and every policy once, in their own
    /// processes (default 7; --quick 3).
    #[arg(long, value_parser = positive)]
    lat_rounds: Option<usize>,
    /// Seconds without a report after which a measurement is abandoned.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
    #[command(flatten)]
    common: Common,
}

/// The settings, defaults filled in and checked.
struct Plan {
    sizes: Vec<usize>,
    rails: Vec<usize>,
    rate: u32,
    unequal: Option<Vec<u32>>,
    policies: Vec<Policy>,
    bw: bool,
    lat: bool,
    iperf_secs: Option<u64>,
    round_ms: u64,
    reps: usize,
    window: Option<usize>,
    lat_size: usize,
    lat_iters: usize,
    lat_rounds: usize,
    timeout: Duration,
    auto_progress: bool,
}

impl Plan {
    fn new(a: &SweepArgs) -> Result<Plan, String> {
        let pick = |set: Option<usize>, full: usize, quick: usize| {
            set.unwrap_or(if a.quick { quick } else { full })
        };
        let mut sizes = a.sizes.clone().unwrap_or_else(|| {
            if a.quick {
                QUICK_SIZES.to_vec()
            } else {
                SIZES.to_vec()
            }
        });
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.first() == Some(&0) {
            return Err("--sizes: streaming needs messages of 1 byte or more".into());
        }
        let mut rails = a.rails.clone();
        rails.dedup();
        if let Some(n) = rails.iter().find(|n| !(1..=MAX_RAILS).contains(*n)) {
            return Err(format!(
                "--rails: a rig has 1 to {MAX_RAILS} rails, not {n}"
            ));
        }
        if a.unequal.len() > MAX_RAILS {
            return Err(format!("--unequal: a rig has at most {MAX_RAILS} rails"));
        }
        let mut policies = a.policies.clone();
        policies.dedup();
        let plan = Plan {
            sizes,
            rails,
            rate: a.rate,
            unequal: a.parts.contains(&Part::Unequal).then(|| a.unequal.clone()),
            policies,
            bw: a.parts.contains(&Part::Bw),
            lat: a.parts.contains(&Part::Lat),
            iperf_secs: (!a.no_iperf).then_some(a.iperf_secs),
            round_ms: a.round_ms.unwrap_or(if a.quick { 100 } else { 300 }),
            reps: pick(a.reps, 5, 3),
            window: a.window,
            lat_size: a.lat_size,
            lat_iters: pick(a.lat_iters, 10_000, 2000),
            lat_rounds: pick(a.lat_rounds, 7, 3),
            timeout: Duration::from_secs(a.timeout),
            auto_progress: a.common.auto_progress,
        };
        for &size in &plan.sizes {
            if size.saturating_mul(plan.window(size)) > MAX_WINDOW_BYTES {
                return Err(format!(
                    "a window of {} x {} is more than 1 GiB: a smaller --window",
                    plan.window(size),
                    size_label(size)
                ));
            }
        }
        Ok(plan)
    }

    fn window(&self, size: usize) -> usize {
        self.window
            .unwrap_or_else(|| (WINDOW_BYTES / size.max(1)).clamp(4, 64))
    }

    fn variant(&self, label: &str, policy: Option<Policy>, rates: Option<String>) -> Variant {
        Variant {
            label: label.to_owned(),
            provider: match policy {
                Some(_) => ProviderKind::Mrail,
                None => ProviderKind::Psm,
            },
            policy: policy.map(|p| format!("ULONG_MAX:{}", p.name())),
            rates,
            auto_progress: self.auto_progress,
        }
    }
}

/// A variant of a bandwidth sweep, and whether it should come near
/// iperf3's sum from 1 MiB on.
struct BwVariant {
    variant: Variant,
    line_rate: bool,
}

/// What one rig measured.
struct RigResult {
    label: String,
    rates: Vec<u32>,
    /// iperf3 per rail, Mbit/s.
    iperf: Option<Vec<f64>>,
    bw: Vec<BwResult>,
    lat: Vec<LatResult>,
    /// Each policy against psm in the same processes, in alternating
    /// blocks (`--provider both`).
    paired: Vec<LatResult>,
    /// The unequal rig.
    unequal: bool,
}

/// One variant's bandwidth sweep.
struct BwResult {
    name: String,
    /// Whether it should come near iperf3's sum from 1 MiB on.
    line_rate: bool,
    /// The median Mbit/s per size.
    points: Vec<(usize, f64)>,
}

/// One variant's latency rounds.
struct LatResult {
    name: String,
    /// The median half round trip, us.
    us: Option<f64>,
    /// The median of its rounds' ratios to psm's.
    vs_psm: Option<f64>,
    rounds: usize,
}

impl LatResult {
    /// The medians of `us` and `ratios`, `us.len()` samples.
    fn of(name: &str, mut us: Vec<f64>, mut ratios: Vec<f64>) -> LatResult {
        LatResult {
            name: name.to_owned(),
            rounds: us.len(),
            us: median(&mut us),
            vs_psm: median(&mut ratios),
        }
    }
}

impl RigResult {
    fn iperf_sum(&self) -> Option<f64> {
        self.iperf.as_ref().map(|r| r.iter().sum())
    }
}

/// Runs `jobs` in a new pair and hands each report of the client to
/// `each`.
fn measure(
    rig: &RailRig,
    v: &Variant,
    jobs: &[Job],
    timeout: Duration,
    mut each: impl FnMut(&pair::Report) -> Result<(), String>,
) -> Result<(), String> {
    let mut pair = Pair::start(rig, v, jobs, timeout)?;
    while let Some((who, r)) = pair.next(timeout)? {
        if who == Who::Client {
            each(&r)?;
        }
    }
    Ok(())
}

/// The median Mbit/s per size of one variant (what it measured before
/// any failure, and the failure).
fn bandwidth(rig: &RailRig, plan: &Plan, v: &Variant) -> (Vec<(usize, f64)>, Option<String>) {
    let jobs: Vec<Job> = plan
        .sizes
        .iter()
        .map(|&size| Job::Bw {
            size,
            window: plan.window(size),
            round_ms: plan.round_ms,
            reps: plan.reps,
        })
        .collect();
    let mut got: Vec<(usize, Vec<f64>)> = plan.sizes.iter().map(|&s| (s, Vec::new())).collect();
    eprint!("  {:<12}", v.label);
    let r = measure(rig, v, &jobs, plan.timeout, |r| {
        if r.kind != "bw" {
            return Ok(());
        }
        let size = r.num("size")? as usize;
        let mbit = r.num("bytes")? * 8.0 / r.num("secs")? / 1e6;
        if let Some((_, all)) = got.iter_mut().find(|(s, _)| *s == size) {
            all.push(mbit);
            if all.len() == plan.reps {
                let m = median(&mut all.clone()).unwrap_or(0.0);
                eprint!(" {}:{m:.0}", size_label(size));
            }
        }
        Ok(())
    });
    eprintln!();
    let points = got
        .into_iter()
        .filter_map(|(s, mut all)| median(&mut all).map(|m| (s, m)))
        .collect();
    (points, r.err())
}

/// One latency run: the client's median half round trip, us.
fn latency_once(rig: &RailRig, plan: &Plan, v: &Variant) -> Result<f64, String> {
    let job = Job::Lat {
        size: plan.lat_size,
        iters: plan.lat_iters,
    };
    let mut us = None;
    measure(rig, v, &[job], plan.timeout, |r| {
        if r.kind == "lat" {
            us = Some(r.num("half_rtt_ns")? / 1e3);
        }
        Ok(())
    })?;
    us.ok_or_else(|| "the client reported no latency".into())
}

/// One run of a `--provider both` pair: the (psm, mrail) medians of its
/// block pairs, ns.
fn paired_once(rig: &RailRig, plan: &Plan, v: &Variant) -> Result<Vec<(f64, f64)>, String> {
    let job = Job::Lat {
        size: plan.lat_size,
        iters: plan.lat_iters,
    };
    let mut pairs = Vec::new();
    measure(rig, v, &[job], plan.timeout, |r| {
        if r.kind == "latpair" {
            pairs.push((r.num("psm_ns")?, r.num("mrail_ns")?));
        }
        Ok(())
    })?;
    if pairs.is_empty() {
        return Err("the client reported no block pair".into());
    }
    Ok(pairs)
}

/// Each policy against psm inside one pair of processes, `lat_rounds`
/// runs each: `us` is the median of the mrail blocks, `vs_psm` the median
/// of every block pair's ratio, `rounds` the number of block pairs.
fn paired_latency(
    rig: &RailRig,
    plan: &Plan,
    variants: &[Variant],
    failures: &mut Vec<String>,
    label: &str,
) -> Vec<LatResult> {
    let mut all: Vec<Vec<(f64, f64)>> = vec![Vec::new(); variants.len()];
    for round in 0..plan.lat_rounds {
        eprint!("  paired round {}/{}:", round + 1, plan.lat_rounds);
        for (v, all) in variants.iter().zip(&mut all) {
            match paired_once(rig, plan, v) {
                Ok(pairs) => {
                    let mut r: Vec<f64> = pairs.iter().map(|(p, m)| m / p).collect();
                    eprint!(" {} {:.3}", v.label, median(&mut r).unwrap_or(0.0));
                    all.extend(pairs);
                }
                Err(e) => {
                    eprint!(" {} failed", v.label);
                    failures.push(format!("{label} paired latency {}: {e}", v.label));
                }
            }
        }
        eprintln!();
    }
    variants
        .iter()
        .zip(&all)
        .map(|(v, pairs)| {
            let us = pairs.iter().map(|(_, m)| m / 1e3).collect();
            LatResult::of(&v.label, us, pairs.iter().map(|(p, m)| m / p).collect())
        })
        .collect()
}

/// Latency rounds, each running every variant once (psm first).
fn latency(
    rig: &RailRig,
    plan: &Plan,
    variants: &[Variant],
    failures: &mut Vec<String>,
    label: &str,
) -> Vec<LatResult> {
    let mut runs: Vec<Vec<Option<f64>>> = vec![Vec::new(); variants.len()];
    for round in 0..plan.lat_rounds {
        eprint!("  latency round {}/{}:", round + 1, plan.lat_rounds);
        for (v, runs) in variants.iter().zip(&mut runs) {
            let r = latency_once(rig, plan, v);
            match &r {
                Ok(us) => eprint!(" {} {us:.2}", v.label),
                Err(e) => {
                    eprint!(" {} failed", v.label);
                    failures.push(format!("{label} latency {}: {e}", v.label));
                }
            }
            runs.push(r.ok());
        }
        eprintln!();
    }
    let base = &runs[0];
    variants
        .iter()
        .zip(&runs)
        .map(|(v, mine)| {
            let values: Vec<f64> = mine.iter().flatten().copied().collect();
            let ratios = mine
                .iter()
                .zip(base)
                .filter_map(|(m, b)| Some((*m)? / (*b)?))
                .collect();
            LatResult::of(&v.label, values, ratios)
        })
        .collect()
}

/// Builds a rig of `rates`, runs iperf3, the bandwidth sweeps of `bw` and,
/// with `lat`, the latency rounds; prints its tables.
fn run_rig(
    plan: &Plan,
    rates: &[u32],
    bw: &[BwVariant],
    lat: bool,
    failures: &mut Vec<String>,
) -> Result<RigResult, String> {
    let label = pair::rig_label(rates);
    eprintln!("rig {label}: building");
    let rig = pair::build_rig(rates)?;
    let mut res = RigResult {
        label: label.clone(),
        rates: rates.to_vec(),
        iperf: None,
        bw: Vec::new(),
        lat: Vec::new(),
        paired: Vec::new(),
        unequal: false,
    };
    if let Some(secs) = plan.iperf_secs {
        eprintln!("  iperf3, {secs} s");
        match pair::iperf(&rig, secs) {
            Ok(r) => res.iperf = Some(r),
            Err(e) => failures.push(format!("{label} iperf3: {e}")),
        }
    }
    for v in bw {
        let (points, err) = bandwidth(&rig, plan, &v.variant);
        if let Some(e) = err {
            failures.push(format!("{label} bandwidth {}: {e}", v.variant.label));
        }
        res.bw.push(BwResult {
            name: v.variant.label.clone(),
            line_rate: v.line_rate,
            points,
        });
    }
    if lat {
        let mut variants = vec![plan.variant("psm", None, None)];
        variants.extend(
            plan.policies
                .iter()
                .map(|&p| plan.variant(p.name(), Some(p), None)),
        );
        res.lat = latency(&rig, plan, &variants, failures, &label);
        let both: Vec<Variant> = plan
            .policies
            .iter()
            .map(|&p| Variant {
                provider: ProviderKind::Both,
                ..plan.variant(p.name(), Some(p), None)
            })
            .collect();
        res.paired = paired_latency(&rig, plan, &both, failures, &label);
    }
    drop(rig);
    println!("\n== {label}: {}", pair::rig_title(rates));
    print_rig(plan, &res);
    Ok(res)
}

fn print_rig(plan: &Plan, res: &RigResult) {
    let sum = res.iperf_sum();
    if let (Some(each), Some(sum)) = (&res.iperf, sum) {
        let each: Vec<String> = each.iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "iperf3, one stream per rail at once: {} = {sum:.0} Mbit/s",
            each.join(" + ")
        );
    }
    if !res.bw.is_empty() {
        println!(
            "bandwidth, Mbit/s, median of {} rounds{}:",
            plan.reps,
            if sum.is_some() {
                " (fraction of iperf3's sum; ! below 0.9 where line rate is due)"
            } else {
                ""
            }
        );
        print!("{:>8}", "size");
        for v in &res.bw {
            print!("  {:>15}", v.name);
        }
        println!();
        for &size in &plan.sizes {
            print!("{:>8}", size_label(size));
            for v in &res.bw {
                let cell = match v.points.iter().find(|p| p.0 == size) {
                    None => "-".to_owned(),
                    Some(&(_, mbit)) => match sum {
                        None => format!("{mbit:.0}"),
                        Some(sum) => {
                            let f = mbit / sum;
                            let flag = if v.line_rate && size >= FLAG_FROM && f < EXPECTED {
                                "!"
                            } else {
                                " "
                            };
                            format!("{mbit:.0} ({f:.2}){flag}")
                        }
                    },
                };
                print!("  {cell:>15}");
            }
            println!();
        }
    }
    if !res.lat.is_empty() {
        println!(
            "{} B half round trip, us: median of {} rounds (each variant in its own \
             processes, in turn); ratio: median of each round's ratio to psm",
            plan.lat_size, plan.lat_rounds
        );
        for v in &res.lat {
            let us = v.us.map_or("-".to_owned(), |u| format!("{u:.2}"));
            let ratio = v.vs_psm.map_or(String::new(), |r| format!("{r:.3} x psm"));
            println!(
                "  {:<12} {us:>8}  {ratio:<12} ({} rounds)",
                v.name, v.rounds
            );
        }
    }
    if !res.paired.is_empty() {
        println!(
            "same, each policy and psm in one pair of processes, alternating blocks of {} \
             round trips; ratio: median of each block's to the psm block before it",
            plan.lat_iters / side::BLOCK_PAIRS
        );
        for v in &res.paired {
            let us = v.us.map_or("-".to_owned(), |u| format!("{u:.2}"));
            let ratio = v.vs_psm.map_or(String::new(), |r| format!("{r:.3} x psm"));
            println!(
                "  {:<12} {us:>8}  {ratio:<12} ({} block pairs)",
                v.name, v.rounds
            );
        }
    }
}

/// Lines about what looks off: line-rate variants below 0.9 of iperf3's
/// sum from 1 MiB on, and the ceiling of equal parts on unequal rails.
fn notes(results: &[RigResult]) -> Vec<String> {
    let mut out = Vec::new();
    for res in results {
        let Some(sum) = res.iperf_sum() else { continue };
        for v in res.bw.iter().filter(|v| v.line_rate) {
            for &(size, mbit) in &v.points {
                if size >= FLAG_FROM && mbit < EXPECTED * sum {
                    out.push(format!(
                        "{} {} {}: {mbit:.0} Mbit/s = {:.2} x iperf3's {sum:.0}, below {EXPECTED}",
                        res.label,
                        v.name,
                        size_label(size),
                        mbit / sum
                    ));
                }
            }
        }
        if let (true, Some(each)) = (res.unequal, &res.iperf) {
            let slowest = each.iter().copied().fold(f64::INFINITY, f64::min);
            let ceiling = slowest * each.len() as f64;
            out.push(format!(
                "{}: equal parts alone finish with the slowest rail, at most {} x \
                 {slowest:.0} = {ceiling:.0} Mbit/s ({:.2} of iperf3's sum); above that, \
                 the fast rail took the slow rail's waiting parts",
                res.label,
                each.len(),
                ceiling / sum
            ));
        }
    }
    out
}

/// One line of the CSV file (see [`CSV_HEADER`]).
#[derive(Default)]
struct CsvRow<'a> {
    section: &'a str,
    variant: &'a str,
    size: Option<usize>,
    mbit: Option<f64>,
    of_iperf: Option<f64>,
    us: Option<f64>,
    vs_psm: Option<f64>,
    samples: usize,
}

impl CsvRow<'_> {
    fn fields(&self, res: &RigResult) -> Vec<String> {
        let rates: Vec<String> = res.rates.iter().map(u32::to_string).collect();
        vec![
            self.section.to_owned(),
            res.label.clone(),
            rates.join("+"),
            self.variant.to_owned(),
            self.size.map_or_else(String::new, |s| s.to_string()),
            csv::num(self.mbit, 1),
            csv::num(self.of_iperf, 3),
            csv::num(self.us, 3),
            csv::num(self.vs_psm, 3),
            self.samples.to_string(),
        ]
    }
}

const CSV_HEADER: [&str; 10] = [
    "section",
    "rig",
    "rail_mbit",
    "variant",
    "size_bytes",
    "mbit_s",
    "of_iperf",
    "half_rtt_us",
    "vs_psm",
    "samples",
];

fn csv_rows(plan: &Plan, results: &[RigResult]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for res in results {
        let sum = res.iperf_sum();
        let names: Vec<String> = (0..res.rates.len()).map(|i| format!("rail{i}")).collect();
        let each = res.iperf.iter().flatten().zip(&names);
        let sum_row = sum.map(|s| (s, "sum"));
        for (mbit, name) in each.map(|(m, n)| (*m, n.as_str())).chain(sum_row) {
            let row = CsvRow {
                section: "iperf",
                variant: name,
                mbit: Some(mbit),
                samples: 1,
                ..CsvRow::default()
            };
            rows.push(row.fields(res));
        }
        for v in &res.bw {
            for &(size, mbit) in &v.points {
                let row = CsvRow {
                    section: if res.unequal { "unequal" } else { "bw" },
                    variant: &v.name,
                    size: Some(size),
                    mbit: Some(mbit),
                    of_iperf: sum.map(|s| mbit / s),
                    samples: plan.reps,
                    ..CsvRow::default()
                };
                rows.push(row.fields(res));
            }
        }
        let lat = res.lat.iter().map(|v| ("lat", v));
        for (section, v) in lat.chain(res.paired.iter().map(|v| ("lat_paired", v))) {
            let row = CsvRow {
                section,
                variant: &v.name,
                size: Some(plan.lat_size),
                us: v.us,
                vs_psm: v.vs_psm,
                samples: v.rounds,
                ..CsvRow::default()
            };
            rows.push(row.fields(res));
        }
    }
    rows
}

fn charts(plan: &Plan, results: &[RigResult]) -> Vec<Chart> {
    let log2 = |size: usize| (size as f64).log2();
    let mut charts = Vec::new();
    for res in results.iter().filter(|r| !r.bw.is_empty()) {
        let mut series: Vec<Series> = res
            .bw
            .iter()
            .map(|v| {
                let points = v.points.iter().map(|&(s, m)| (log2(s), m)).collect();
                Series::line(v.name.clone(), points)
            })
            .collect();
        if let (Some(sum), Some(first), Some(last)) =
            (res.iperf_sum(), plan.sizes.first(), plan.sizes.last())
        {
            series.push(Series {
                dashed: true,
                ..Series::line(
                    "iperf3 (sum)",
                    vec![(log2(*first), sum), (log2(*last), sum)],
                )
            });
        }
        charts.push(Chart {
            title: format!(
                "{}{}",
                pair::rig_title(&res.rates),
                if res.unequal { ", striping" } else { "" }
            ),
            x: XAxis::Log2Bytes,
            x_desc: "message size (bytes)".into(),
            y: YAxis::Linear,
            y_desc: "Mbit/s".into(),
            series,
            marks: Vec::new(),
            legend: SeriesLabelPosition::UpperLeft,
        });
    }
    let lat: Vec<&RigResult> = results.iter().filter(|r| !r.lat.is_empty()).collect();
    if let Some(first) = lat.first() {
        let series = first
            .lat
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let points = lat
                    .iter()
                    .filter_map(|r| Some((r.rates.len() as f64, r.lat.get(i)?.us?)))
                    .collect();
                Series::line(v.name.clone(), points)
            })
            .collect();
        charts.push(Chart {
            title: format!("{} B half round trip (median)", plan.lat_size),
            x: XAxis::Count,
            x_desc: format!("rails of {}", pair::rate_text(plan.rate)),
            y: YAxis::Linear,
            y_desc: "µs".into(),
            series,
            marks: Vec::new(),
            legend: SeriesLabelPosition::UpperLeft,
        });
    }
    charts
}

/// `mrail_bench sweep`.
pub(crate) fn main(args: &SweepArgs) -> Result<ExitCode, String> {
    let plan = Plan::new(args)?;
    let mut failures = Vec::new();
    let mut results = Vec::new();
    let equal: Vec<BwVariant> = if plan.bw {
        std::iter::once((plan.variant("psm", None, None), false))
            .chain(
                plan.policies
                    .iter()
                    .map(|&p| (plan.variant(p.name(), Some(p), None), p == Policy::Striping)),
            )
            .map(|(variant, line_rate)| BwVariant { variant, line_rate })
            .collect()
    } else {
        Vec::new()
    };
    if plan.bw || plan.lat {
        for &n in &plan.rails {
            let rates = vec![plan.rate; n];
            results.push(run_rig(&plan, &rates, &equal, plan.lat, &mut failures)?);
        }
    }
    if let Some(rates) = &plan.unequal {
        let list = |r: &[u32]| r.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let same = vec![rates[0]; rates.len()];
        let striping = Some(Policy::Striping);
        let unequal = [
            ("equal", Some(list(&same))),
            ("weighted", Some(list(rates))),
            ("learned", None),
        ]
        .map(|(name, r)| BwVariant {
            variant: plan.variant(name, striping, r),
            line_rate: name != "equal",
        });
        let mut res = run_rig(&plan, rates, &unequal, false, &mut failures)?;
        res.unequal = true;
        results.push(res);
    }
    let notes = notes(&results);
    if !notes.is_empty() {
        println!("\n== notes");
        for n in &notes {
            println!("- {n}");
        }
    }
    if let Some(path) = &args.common.csv {
        csv::write_table(path, &CSV_HEADER, &csv_rows(&plan, &results))?;
        println!("\nwrote {}", path.display());
    }
    if let Some(path) = &args.common.svg {
        write_svg(path, &charts(&plan, &results))?;
        println!("wrote {}", path.display());
    }
    if failures.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    println!("\n== failures");
    for f in &failures {
        println!("- {f}");
    }
    Ok(ExitCode::FAILURE)
}
