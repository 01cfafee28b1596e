//! `mrail_bench timeline`: a striped stream for a while, its throughput
//! per 100 ms as the receiver saw it, with one rail optionally taken down
//! and brought back up on the way.

use super::pair::{self, Got, Pair, Variant, Who};
use super::side::{Job, ProviderKind, MAX_WINDOW_BYTES};
use super::Common;
use psmrail_bench::chart::{write_svg, Chart, Series, SeriesLabelPosition, XAxis, YAxis};
use psmrail_bench::csv;
use psmrail_bench::units::{parse_size, positive, seconds, size_short as size_label};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The exit status of a stream that stalled.
const STALLED: u8 = 3;

/// `mrail_bench timeline`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct TimelineArgs {
    /// Rails of the rig.
    #[arg(long, default_value_t = 2, value_parser = positive)]
    rails: usize,
    /// Each rail's rate, Mbit/s (0: unshaped).
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// Each rail's own rate (comma-separated Mbit/s, 0: unshaped),
    /// instead of --rails and --rate.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["rails", "rate"])]
    rates: Option<Vec<u32>>,
    /// How long the client streams, seconds.
    #[arg(long, default_value_t = 10.0, value_parser = seconds)]
    secs: f64,
    /// Message size.
    #[arg(long, default_value = "256k", value_parser = parse_size)]
    size: usize,
    /// Messages in flight: the client sends a window of them, the server
    /// answers once all have landed (a window's messages land together,
    /// so a window of more than a few ms makes the intervals uneven).
    #[arg(long, default_value_t = 4, value_parser = positive)]
    window: usize,
    /// `FI_OFI_MRAIL_CONFIG` of both sides.
    #[arg(long, default_value = "ULONG_MAX:striping")]
    policy: String,
    /// Takes --down-rail down this many seconds into the stream (`ip link
    /// set <veth> down` in host A).
    #[arg(long, value_parser = seconds)]
    down_at: Option<f64>,
    /// Brings it back up this many seconds into the stream.
    #[arg(long, value_parser = seconds, requires = "down_at")]
    up_at: Option<f64>,
    /// The rail --down-at takes down.
    #[arg(long, default_value_t = 0)]
    down_rail: usize,
    /// Seconds past the stream's planned end after which it counts as
    /// stalled: both sides are stopped and the program exits with 3.
    #[arg(long, default_value_t = 10.0, value_parser = seconds)]
    timeout: f64,
    /// Nothing striped before the stream (the pair is checked with one
    /// byte, not a message of --size), so that striping starts cold:
    /// equal parts until the rails' rates are learned. Prints what the
    /// rails carried in the stream's first 200 ms and first second.
    #[arg(long)]
    cold: bool,
    /// No iperf3 reference before the stream.
    #[arg(long)]
    no_iperf: bool,
    /// iperf3's duration, seconds.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    iperf_secs: u64,
    #[command(flatten)]
    common: Common,
}

/// How the stream ended.
enum End {
    Finished,
    /// Not finished by the deadline.
    Stalled,
    Failed(String),
}

/// The link changes still to make: (seconds into the stream, up).
fn link_plan(a: &TimelineArgs, rails: usize) -> Result<Vec<(f64, bool)>, String> {
    let Some(down) = a.down_at else {
        return Ok(Vec::new());
    };
    if a.down_rail >= rails {
        return Err(format!(
            "--down-rail {}: the rig has rails 0 to {}",
            a.down_rail,
            rails - 1
        ));
    }
    if down >= a.secs {
        return Err(format!("--down-at {down}: the stream lasts {} s", a.secs));
    }
    let mut plan = vec![(down, false)];
    if let Some(up) = a.up_at {
        if up <= down {
            return Err(format!("--up-at {up}: not after --down-at {down}"));
        }
        plan.push((up, true));
    }
    Ok(plan)
}

/// One `@@ tick` of the server: seconds since the stream started, bytes
/// received, and each interface's received bytes.
struct Tick {
    t: f64,
    bytes: f64,
    rx: Vec<(String, f64)>,
}

/// Adds the interval from `prev` to `now` to `ticks` and `wire`; the
/// interfaces' figures as text.
fn record(
    prev: &Tick,
    now: &Tick,
    ticks: &mut Vec<(f64, f64)>,
    wire: &mut Vec<(String, Vec<(f64, f64)>)>,
) -> Option<String> {
    let dt = now.t - prev.t;
    if dt <= 0.0 {
        return None;
    }
    let mbit = |from: f64, to: f64| (to - from).max(0.0) * 8.0 / dt / 1e6;
    ticks.push((now.t, mbit(prev.bytes, now.bytes)));
    let mut text = String::new();
    for (name, n) in &now.rx {
        let Some((_, before)) = prev.rx.iter().find(|(k, _)| k == name) else {
            continue;
        };
        let m = mbit(*before, *n);
        text.push_str(&format!(" {name} {m:>5.0}"));
        match wire.iter_mut().find(|(k, _)| k == name) {
            Some((_, points)) => points.push((now.t, m)),
            None => wire.push((name.clone(), vec![(now.t, m)])),
        }
    }
    Some(text)
}

/// The mean of `mbit` over the intervals ending in `(from, to]`.
fn mean(ticks: &[(f64, f64)], from: f64, to: f64) -> Option<f64> {
    let within: Vec<f64> = ticks
        .iter()
        .filter(|(t, _)| *t > from + 1e-9 && *t <= to + 1e-9)
        .map(|(_, m)| *m)
        .collect();
    (!within.is_empty()).then(|| within.iter().sum::<f64>() / within.len() as f64)
}

/// The mean over the intervals ending in `(from, to]` of what every
/// interface received together.
fn wire_mean(wire: &[(String, Vec<(f64, f64)>)], from: f64, to: f64) -> Option<f64> {
    let mut sums: Vec<(f64, f64)> = Vec::new();
    for (_, points) in wire {
        for &(t, m) in points {
            match sums.iter_mut().find(|(u, _)| (*u - t).abs() < 1e-9) {
                Some((_, sum)) => *sum += m,
                None => sums.push((t, m)),
            }
        }
    }
    mean(&sums, from, to)
}

/// `mrail_bench timeline`.
pub(crate) fn main(a: &TimelineArgs) -> Result<ExitCode, String> {
    let rates = a.rates.clone().unwrap_or_else(|| vec![a.rate; a.rails]);
    let mut pending = link_plan(a, rates.len())?;
    if a.secs <= 0.0 {
        return Err("--secs: a stream of 0 s".into());
    }
    if a.size == 0 || a.size.saturating_mul(a.window) > MAX_WINDOW_BYTES {
        return Err(format!(
            "--size {} x --window {}: 1 byte to 1 GiB in flight",
            a.size, a.window
        ));
    }
    let label = pair::rig_label(&rates);
    eprintln!("rig {label}: building");
    let rig = pair::build_rig(&rates)?;
    let iperf = if a.no_iperf {
        None
    } else {
        eprintln!("  iperf3, {} s", a.iperf_secs);
        let each = pair::iperf(&rig, a.iperf_secs)?;
        let text: Vec<String> = each.iter().map(|r| format!("{r:.0}")).collect();
        let sum: f64 = each.iter().sum();
        println!(
            "iperf3, one stream per rail at once: {} = {sum:.0} Mbit/s",
            text.join(" + ")
        );
        Some(sum)
    };
    let variant = Variant {
        label: "stream".into(),
        provider: ProviderKind::Mrail,
        policy: Some(a.policy.clone()),
        rates: None,
        auto_progress: a.common.auto_progress,
    };
    let job = Job::Stream {
        size: a.size,
        window: a.window,
        secs: a.secs,
        cold: a.cold,
    };
    let timeout = Duration::from_secs_f64(a.timeout.max(1.0));
    let mut pair = Pair::start(&rig, &variant, &[job], timeout)?;
    loop {
        match pair.next_within(timeout)? {
            Got::Report(Who::Server, r) if r.kind == "start" => break,
            Got::Report(..) => {}
            Got::Quiet => return Err("the stream did not start".into()),
            Got::Done => return Err("both sides exited before the stream started".into()),
        }
    }
    let t0 = Instant::now();
    println!(
        "{label}: messages of {}, {} in flight, for {} s, policy {}",
        size_label(a.size),
        a.window,
        a.secs,
        a.policy
    );
    let scale = iperf.unwrap_or(rates.iter().map(|&r| f64::from(r)).sum());
    let deadline = a.secs + a.timeout;
    let mut prev: Option<Tick> = None;
    // Mbit/s per interval: received by the server, and on each of its
    // interfaces (the rails, headers included).
    let mut ticks: Vec<(f64, f64)> = Vec::new();
    let mut wire: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    let mut marks = Vec::new();
    let mut sent = None;
    let end = loop {
        let now = t0.elapsed().as_secs_f64();
        if let Some(&(at, up)) = pending.first() {
            if now >= at {
                pending.remove(0);
                let state = if up { "up" } else { "down" };
                if let Err(e) = pair::set_link(&rig, a.down_rail, up) {
                    break End::Failed(e);
                }
                println!("{now:>6.2} s  rail {} {state}", a.down_rail);
                marks.push((now, format!("rail {} {state}", a.down_rail)));
                continue;
            }
        }
        if now >= deadline {
            break End::Stalled;
        }
        let next = pending.first().map_or(deadline, |e| e.0.min(deadline));
        let wait = Duration::from_secs_f64((next - now).clamp(0.001, 0.5));
        match pair.next_within(wait) {
            Ok(Got::Report(Who::Server, r)) if r.kind == "tick" => {
                let tick = match (r.num("ms"), r.num("bytes")) {
                    (Ok(ms), Ok(bytes)) => Tick {
                        t: ms / 1e3,
                        bytes,
                        rx: r.prefixed("rx."),
                    },
                    (Err(e), _) | (_, Err(e)) => break End::Failed(e),
                };
                if let Some(line) = prev
                    .as_ref()
                    .and_then(|p| record(p, &tick, &mut ticks, &mut wire))
                {
                    let mbit = ticks.last().map_or(0.0, |t| t.1);
                    let bar = "#".repeat(((mbit / scale) * 40.0).round().clamp(0.0, 50.0) as usize);
                    println!("{:>6.1} s {mbit:>7.0} Mbit/s |{line} | {bar}", tick.t);
                }
                prev = Some(tick);
            }
            Ok(Got::Report(Who::Client, r)) if r.kind == "stream" => {
                if let (Ok(b), Ok(s)) = (r.num("bytes"), r.num("secs")) {
                    sent = Some(b * 8.0 / s / 1e6);
                }
            }
            Ok(Got::Report(..) | Got::Quiet) => {}
            Ok(Got::Done) => break End::Finished,
            Err(e) => break End::Failed(e),
        }
    };
    let stopped_at = t0.elapsed().as_secs_f64();
    drop(pair);
    drop(rig);

    println!();
    let of = |m: f64| iperf.map_or(String::new(), |s| format!(" ({:.2} of iperf3)", m / s));
    if let Some(m) = sent {
        println!("whole stream: {m:.0} Mbit/s{}", of(m));
    }
    if a.cold {
        for (name, to) in [("first 200 ms", 0.2), ("first second", 1.0)] {
            if let Some(m) = wire_mean(&wire, 0.0, to) {
                println!("on the rails, {name}: {m:.0} Mbit/s mean{}", of(m));
            }
        }
    }
    if let Some(down) = a.down_at {
        let up = a.up_at;
        let phases = [
            ("before the rail went down", 0.0, down),
            ("rail down", down, up.unwrap_or(f64::INFINITY)),
            (
                "after it came back",
                up.unwrap_or(f64::INFINITY),
                f64::INFINITY,
            ),
        ];
        for (name, from, to) in phases {
            if let Some(m) = mean(&ticks, from, to) {
                println!("{name}: {m:.0} Mbit/s mean{}", of(m));
            }
        }
    }
    if let Some(path) = &a.common.csv {
        let rows: Vec<Vec<String>> = ticks
            .iter()
            .map(|(t, m)| vec![format!("{t:.1}"), format!("{m:.1}")])
            .collect();
        csv::write_table(path, &["time_s", "mbit_s"], &rows)?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &a.common.svg {
        let mut series = vec![Series::line("received", ticks.clone())];
        series.extend(
            wire.iter()
                .map(|(name, points)| Series::line(format!("{name} (wire)"), points.clone())),
        );
        if let Some(sum) = iperf {
            series.push(Series {
                dashed: true,
                ..Series::line(
                    "iperf3 (sum)",
                    vec![(0.0, sum), (a.secs.max(stopped_at), sum)],
                )
            });
        }
        let chart = Chart {
            title: format!("{}: throughput per 100 ms", pair::rig_title(&rates)),
            x: XAxis::Linear,
            x_desc: "time since the stream started (s)".into(),
            y: YAxis::Linear,
            y_desc: "Mbit/s".into(),
            series,
            marks,
            legend: SeriesLabelPosition::LowerLeft,
        };
        write_svg(path, &[chart])?;
        println!("wrote {}", path.display());
    }
    match end {
        End::Finished => Ok(ExitCode::SUCCESS),
        End::Stalled => {
            let last = ticks
                .iter()
                .rev()
                .find(|(_, m)| *m > 0.0)
                .map_or(0.0, |(t, _)| *t);
            println!(
                "stalled: the last bytes landed {last:.1} s into the stream, which had not \
                 finished {:.0} s after its planned end ({} s); both sides were stopped",
                a.timeout, a.secs
            );
            Ok(ExitCode::from(STALLED))
        }
        End::Failed(e) => {
            println!("failed {stopped_at:.1} s into the stream: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}
