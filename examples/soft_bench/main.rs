//! Soft engine benchmark: ping-pong half round trip and streaming
//! bandwidth on loopback, client and server in two processes pinned to
//! different cores, in one run beside a hand-written tokio TCP baseline.
//!
//! ```sh
//! cargo run --release --example soft_bench                # everything
//! cargo run --release --example soft_bench -- --quick     # fewer iterations
//! cargo run --release --example soft_bench -- tokio soft-manual
//! cargo run --release --example soft_bench -- --help
//! ```
//!
//! Options: `--quick` (a tenth of the iterations), and the transports to
//! measure as arguments (`tokio`, `soft-manual`, `soft-auto`; all three
//! when none is named, always in that order). The server side is this
//! program re-executed with `--serve <transport>`.
//!
//! Ping-pong: 8 B, 4 KiB, 64 KiB, half round trip (median of the
//! per-iteration round trips, halved). Streaming: 64 KiB, 1 MiB, 4 MiB,
//! batches of 64 messages in flight acknowledged by one small message;
//! bandwidth = 64 × size / median batch time.

mod soft;
mod tokio_tcp;

use clap::Parser;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Messages in flight per streaming batch.
pub const IN_FLIGHT: usize = 64;

/// One measured shape.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// `iters` round trips of `size` bytes.
    PingPong { size: usize, iters: usize },
    /// `batches` batches of `IN_FLIGHT` messages of `size` bytes.
    Stream { size: usize, batches: usize },
}

/// The samples of one shape.
#[derive(Debug)]
pub struct Measure {
    shape: Shape,
    samples: Vec<Duration>,
}

impl Measure {
    /// Sorts the samples.
    pub fn new(shape: Shape, mut samples: Vec<Duration>) -> Measure {
        samples.sort();
        Measure { shape, samples }
    }

    fn median(&self) -> Duration {
        self.samples[self.samples.len() / 2]
    }

    fn cell(&self) -> String {
        match self.shape {
            Shape::PingPong { .. } => format!("{:.2} us", self.median().as_secs_f64() * 1e6 / 2.0),
            Shape::Stream { size, .. } => {
                let bytes = (size * IN_FLIGHT) as f64;
                format!("{:.2} GB/s", bytes / self.median().as_secs_f64() / 1e9)
            }
        }
    }
}

fn shapes(quick: bool) -> Vec<Shape> {
    let scale = if quick { 10 } else { 1 };
    vec![
        Shape::PingPong {
            size: 8,
            iters: 20_000 / scale,
        },
        Shape::PingPong {
            size: 4096,
            iters: 10_000 / scale,
        },
        Shape::PingPong {
            size: 65536,
            iters: 4_000 / scale,
        },
        Shape::Stream {
            size: 65536,
            batches: 400 / scale,
        },
        Shape::Stream {
            size: 1 << 20,
            batches: 60 / scale.min(6),
        },
        Shape::Stream {
            size: 4 << 20,
            batches: 20 / scale.min(4),
        },
    ]
}

fn label(shape: &Shape) -> String {
    match *shape {
        Shape::PingPong { size, .. } => format!("ping-pong {}", human(size)),
        Shape::Stream { size, .. } => format!("stream {}", human(size)),
    }
}

fn human(size: usize) -> String {
    match size {
        s if s >= 1 << 20 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

fn pin(cpu: usize) {
    let set: psmrail::reactor::CpuSet = [cpu].into_iter().collect();
    if let Err(e) = psmrail::reactor::pin_current_thread(&set) {
        eprintln!("warning: cannot pin to CPU {cpu}: {e}");
    }
}

/// The transports measured, in the order they run.
const TRANSPORTS: [&str; 3] = ["tokio", "soft-manual", "soft-auto"];

/// One of [`TRANSPORTS`].
fn parse_transport(v: &str) -> Result<&'static str, String> {
    TRANSPORTS
        .iter()
        .copied()
        .find(|t| *t == v)
        .ok_or_else(|| format!("{v:?}: expected tokio, soft-manual or soft-auto"))
}

/// Soft engine benchmark: ping-pong half round trip and streaming
/// bandwidth on loopback, client and server in two processes pinned to
/// different cores, beside a hand-written tokio TCP baseline.
#[derive(Parser, Debug)]
#[command(name = "soft_bench", args_override_self = true)]
struct Args {
    /// Fewer iterations (a tenth, fewer for the large streams).
    #[arg(long)]
    quick: bool,
    /// Server mode (run by the benchmark itself): serve this transport.
    #[arg(long, value_name = "TRANSPORT", value_parser = parse_transport, hide = true)]
    serve: Option<&'static str>,
    /// Transports to measure: tokio, soft-manual, soft-auto (default:
    /// all three; they always run in that order).
    #[arg(value_name = "TRANSPORT", value_parser = parse_transport)]
    transports: Vec<&'static str>,
}

fn server(transport: &str) {
    let announce = |addr: String| {
        println!("ADDR {addr}");
        std::io::stdout().flush().unwrap();
    };
    match transport {
        "tokio" => tokio_tcp::serve(announce),
        "soft-manual" => soft::serve(false, announce),
        "soft-auto" => soft::serve(true, announce),
        other => unreachable!("unknown transport {other}"),
    }
}

fn client(transport: &str, addr: &str, shapes: &[Shape]) -> Vec<Measure> {
    match transport {
        "tokio" => tokio_tcp::client(addr, shapes),
        "soft-manual" => soft::client(false, addr, shapes),
        "soft-auto" => soft::client(true, addr, shapes),
        other => unreachable!("unknown transport {other}"),
    }
}

fn main() {
    let args = Args::parse();
    if let Some(transport) = args.serve {
        pin(1);
        server(transport);
        return;
    }
    // Those named, in TRANSPORTS order, each once; all when none is.
    let transports: Vec<&str> = TRANSPORTS
        .iter()
        .copied()
        .filter(|t| args.transports.is_empty() || args.transports.contains(t))
        .collect();
    pin(0);
    let shapes = shapes(args.quick);
    let mut columns = Vec::new();
    for t in &transports {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--serve", t])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn server");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let addr = loop {
            let line = lines.next().expect("server exited").expect("read");
            if let Some(a) = line.strip_prefix("ADDR ") {
                break a.to_owned();
            }
        };
        eprintln!("measuring {t} (server at {addr}) ...");
        columns.push(client(t, &addr, &shapes));
        let _ = child.wait();
    }
    print!("{:<18}", "median");
    for t in &transports {
        print!("{t:>16}");
    }
    println!();
    for (i, shape) in shapes.iter().enumerate() {
        print!("{:<18}", label(shape));
        for col in &columns {
            print!("{:>16}", col[i].cell());
        }
        println!();
    }
}
