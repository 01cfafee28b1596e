//! Raw blocking ping-pong through psm-sys, no reactor: the performance floor
//! the higher layers are compared against.
//!
//! The process re-executes itself as the peer (`--peer <epid>`); the two
//! exchange epids through the child's stdout, connect, and bounce messages:
//! the client posts `psm_mq_irecv`, sends with `psm_mq_send` and spins in
//! `psm_mq_wait`; the server mirrors it. Both spin, each pinned to its own
//! core. Printed: the median over repetitions of the half round trip, and
//! the bandwidth `size / half round trip`.
//!
//! ```text
//! PSM2_DEVICES=self,shm cargo run --release -p psm-sys --example raw_pingpong [-- --reps 9 --no-pin]
//! ```

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use psm_sys::{ffi, Affinity, Endpoint, EpAddr, Epid, Mq, OpenOptions, DEFAULT_UUID};

/// (message size, round trips per repetition)
const SIZES: &[(usize, usize)] = &[(8, 200_000), (64 * 1024, 5_000), (4 * 1024 * 1024, 100)];
const TAG_PING: u64 = 0x50;
const TAG_PONG: u64 = 0x51;
const TAG_SYNC: u64 = 0x52;

struct Args {
    reps: usize,
    pin: bool,
    peer: Option<Epid>,
    /// CPU for the peer, chosen by the client (the peer inherits the
    /// client's affinity, so it cannot choose by itself).
    cpu: Option<usize>,
}

fn parse_args() -> Args {
    let mut args = Args {
        reps: 9,
        pin: true,
        peer: None,
        cpu: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--reps" => {
                args.reps = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|r| *r > 0)
                    .expect("--reps N")
            }
            "--no-pin" => args.pin = false,
            "--cpu" => args.cpu = Some(it.next().and_then(|v| v.parse().ok()).expect("--cpu N")),
            "--peer" => {
                let v = it.next().expect("--peer EPID");
                args.peer = Some(Epid(
                    u64::from_str_radix(v.trim_start_matches("0x"), 16).expect("hex epid"),
                ));
            }
            other => {
                eprintln!("unknown argument {other}; usage: raw_pingpong [--reps N] [--no-pin]");
                std::process::exit(2);
            }
        }
    }
    args
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    // SAFETY: reading bits of an initialized set.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

fn pin_to(cpu: usize) -> bool {
    // SAFETY: cpu_set_t is plain data; zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (it came from allowed_cpus).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}

fn open() -> Endpoint {
    // PSM must not re-pin the thread we pinned ourselves.
    let options = OpenOptions {
        affinity: Some(Affinity::Skip),
        ..OpenOptions::default()
    };
    let mut ep = match Endpoint::open(&DEFAULT_UUID, &options) {
        Ok(ep) => ep,
        Err(e) => {
            eprintln!("cannot open a PSM endpoint: {e}");
            std::process::exit(1);
        }
    };
    ep.init_mq(ffi::PSM_MQ_ORDERMASK_ALL).expect("psm_mq_init");
    ep
}

fn connect(ep: &Endpoint, peer: Epid) -> EpAddr {
    let results = ep
        .connect(&[peer], Some(Duration::from_secs(30)))
        .expect("psm_ep_connect");
    match &results[0] {
        Ok(addr) => *addr,
        Err(e) => panic!("connect to {peer}: {e}"),
    }
}

/// One round trip as the client: pre-post the pong receive, send, wait.
fn client_round(mq: &Mq<'_>, peer: EpAddr, out: &[u8], inb: &mut [u8]) {
    // SAFETY: `inb` is exclusively borrowed until the wait below completes the request.
    let mut req =
        unsafe { mq.irecv(TAG_PONG, !0, 0, inb.as_mut_ptr(), inb.len(), 0) }.expect("irecv");
    mq.send(peer, 0, TAG_PING, out).expect("send");
    mq.wait(&mut req).expect("wait");
}

fn client(args: &Args) {
    let cpus = allowed_cpus();
    let pinned = args.pin && cpus.len() >= 2 && pin_to(cpus[0]);
    let ep = open();
    let lib = ep.library();
    let exe = std::env::current_exe().expect("own path");
    let mut child_cmd = Command::new(exe);
    child_cmd
        .arg("--peer")
        .arg(format!("{:#x}", ep.epid().0))
        .arg("--reps")
        .arg(args.reps.to_string());
    if pinned {
        child_cmd.arg("--cpu").arg(cpus[1].to_string());
    } else {
        child_cmd.arg("--no-pin");
    }
    let mut child = child_cmd
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the peer");
    let mut lines = BufReader::new(child.stdout.take().expect("peer stdout"));
    let peer_epid = loop {
        let mut line = String::new();
        if lines.read_line(&mut line).expect("read the peer") == 0 {
            panic!("the peer exited before sending its epid");
        }
        if let Some(v) = line.trim().strip_prefix("EPID=") {
            break Epid(u64::from_str_radix(v.trim_start_matches("0x"), 16).expect("hex epid"));
        }
    };
    let peer = connect(&ep, peer_epid);
    let mq = ep.mq().unwrap();
    let mut sync = [0u8; 1];
    mq.send(peer, 0, TAG_SYNC, b"s").unwrap();
    mq.recv(TAG_SYNC, !0, &mut sync).unwrap();

    println!(
        "raw PSM ping-pong: {} build ({}), 2 processes, both spinning, {}",
        lib.build(),
        lib.resolved_path()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        if pinned {
            format!("pinned to CPUs {} and {}", cpus[0], cpus[1])
        } else {
            "not pinned".into()
        }
    );
    println!(
        "{:>10} {:>12} {:>12} {:>12} {:>12}",
        "size", "half-RTT us", "(best)", "GB/s", "(best)"
    );
    for &(size, iters) in SIZES {
        let out: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let mut inb = vec![0u8; size];
        for _ in 0..iters / 10 + 1 {
            client_round(&mq, peer, &out, &mut inb);
        }
        let mut halves: Vec<f64> = (0..args.reps)
            .map(|_| {
                let start = Instant::now();
                for _ in 0..iters {
                    client_round(&mq, peer, &out, &mut inb);
                }
                start.elapsed().as_secs_f64() / (2 * iters) as f64
            })
            .collect();
        assert!(inb == out, "the pong payload differs at {size} B");
        halves.sort_by(f64::total_cmp);
        let median = halves[halves.len() / 2];
        let best = halves[0];
        println!(
            "{:>10} {:>12.3} {:>12.3} {:>12.2} {:>12.2}",
            size,
            median * 1e6,
            best * 1e6,
            size as f64 / median / 1e9,
            size as f64 / best / 1e9
        );
    }
    // Final handshake, then both close at the same time: a graceful close
    // waits for the peer's disconnect, so the peer must be in PSM too.
    mq.recv(TAG_SYNC, !0, &mut sync).unwrap();
    ep.close(Some(Duration::from_secs(5))).expect("close");
    let status = child.wait().expect("wait for the peer");
    assert!(status.success(), "the peer failed: {status}");
}

fn server(args: &Args, client_epid: Epid) {
    // Die with the client instead of spinning forever if it is killed.
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag on this process.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    if let (true, Some(cpu)) = (args.pin, args.cpu) {
        pin_to(cpu);
    }
    let ep = open();
    println!("EPID={:#x}", ep.epid().0);
    std::io::stdout().flush().unwrap();
    let peer = connect(&ep, client_epid);
    let mq = ep.mq().unwrap();
    let mut sync = [0u8; 1];
    mq.recv(TAG_SYNC, !0, &mut sync).unwrap();
    mq.send(peer, 0, TAG_SYNC, b"s").unwrap();
    for &(size, iters) in SIZES {
        // Two buffers: the next ping's receive is posted before the pong is
        // sent, so pings never arrive unexpected.
        let mut bufs = [vec![0u8; size], vec![0u8; size]];
        let rounds = iters / 10 + 1 + iters * args.reps;
        let (first, _) = bufs.split_at_mut(1);
        // SAFETY: bufs[0] is only touched through the request, completed in the loop.
        let mut req =
            unsafe { mq.irecv(TAG_PING, !0, 0, first[0].as_mut_ptr(), size, 0) }.expect("irecv");
        for round in 0..rounds {
            mq.wait(&mut req).expect("wait");
            let (filled, spare) = if round % 2 == 0 {
                let (a, b) = bufs.split_at_mut(1);
                (&a[0], &mut b[0])
            } else {
                let (a, b) = bufs.split_at_mut(1);
                (&b[0], &mut a[0])
            };
            if round + 1 < rounds {
                // SAFETY: `spare` is not used again until this request completes
                // (the next iteration's wait).
                req = unsafe { mq.irecv(TAG_PING, !0, 0, spare.as_mut_ptr(), size, 0) }
                    .expect("irecv");
            }
            // Reply with what arrived.
            mq.send(peer, 0, TAG_PONG, filled).expect("send");
        }
    }
    mq.send(peer, 0, TAG_SYNC, b"d").unwrap();
    ep.close(Some(Duration::from_secs(5))).expect("close");
}

fn main() {
    let args = parse_args();
    match args.peer {
        Some(client_epid) => server(&args, client_epid),
        None => client(&args),
    }
}
