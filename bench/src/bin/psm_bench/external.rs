//! Other transports' own benchmark programs, run as subprocesses when
//! installed: libfabric's `fi_pingpong` (tcp provider; latency only: it
//! is a ping-pong) and UCX's `ucx_perftest` (`tag_lat`, `tag_bw`). Their
//! output is parsed into the same [`Row`]s. Neither reports percentiles:
//! the `_us` column holds what they print (fi_pingpong's mean half round
//! trip, ucx_perftest's median one-way latency).

use crate::cli::Variant;
use crate::jobs::{Job, Part};
use crate::report::Row;
use psmrail_bench::harness::Placement;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// The port both tools' servers listen on.
const PORT: u16 = 47_592;

/// The command a variant runs, and the Debian package that has it.
pub(crate) fn command(variant: Variant) -> Option<(&'static str, &'static str)> {
    match variant {
        Variant::FiPingpong => Some(("fi_pingpong", "libfabric-bin")),
        Variant::UcxPerftest => Some(("ucx_perftest", "ucx-utils")),
        _ => None,
    }
}

/// `name` on the `PATH`, if there.
pub(crate) fn find(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// A command pinned to `cpu` with `taskset` when that is installed.
fn pinned(program: &PathBuf, cpu: usize) -> Command {
    match find("taskset") {
        Some(taskset) => {
            let mut c = Command::new(taskset);
            c.arg("-c").arg(cpu.to_string()).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// Kills a server that is still running (after a failed client).
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Runs one client against a fresh server; the client's output.
fn pair(
    program: &PathBuf,
    server_args: &[String],
    client_args: &[String],
    at: Placement,
) -> Result<String, String> {
    let name = program.display().to_string();
    let server = pinned(program, at.server)
        .args(server_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting {name}: {e}"))?;
    let mut server = Server(server);
    // The server needs a moment to listen; retry a refused client.
    let mut last = String::new();
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(300));
        let Output {
            status,
            stdout,
            stderr,
        } = pinned(program, at.client)
            .args(client_args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running {name}: {e}"))?;
        if status.success() {
            return Ok(String::from_utf8_lossy(&stdout).into_owned());
        }
        last = format!(
            "{name} {} failed ({status}): {}",
            client_args.join(" "),
            String::from_utf8_lossy(&stderr).trim()
        );
        if let Ok(Some(_)) = server.0.try_wait() {
            break;
        }
    }
    Err(last)
}

/// Runs the jobs `variant` can run (fi_pingpong: lat only); rows in job
/// order, each handed to `on_row` too.
pub(crate) fn run(
    variant: Variant,
    program: &PathBuf,
    jobs: &[Job],
    at: Placement,
    mut on_row: impl FnMut(&Row),
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for job in jobs {
        let row = match variant {
            Variant::FiPingpong if job.part == Part::Lat => {
                let common = vec![
                    "-p".to_owned(),
                    "tcp".to_owned(),
                    "-S".to_owned(),
                    job.size.to_string(),
                    "-I".to_owned(),
                    job.count.to_string(),
                ];
                let mut client = common.clone();
                client.push("127.0.0.1".to_owned());
                let out = pair(program, &common, &client, at)?;
                parse_fi_pingpong(&out, job)?
            }
            Variant::UcxPerftest => {
                let port = vec!["-p".to_owned(), PORT.to_string()];
                let test = if job.part == Part::Lat {
                    "tag_lat"
                } else {
                    "tag_bw"
                };
                let iters = job.count * job.window;
                let mut client = vec!["127.0.0.1".to_owned()];
                client.extend(port.clone());
                client.extend(
                    [
                        "-t",
                        test,
                        "-s",
                        &job.size.to_string(),
                        "-n",
                        &iters.to_string(),
                    ]
                    .map(str::to_owned),
                );
                let out = pair(program, &port, &client, at)?;
                parse_ucx_perftest(&out, job)?
            }
            _ => continue,
        };
        on_row(&row);
        rows.push(row);
    }
    Ok(rows)
}

fn base_row(variant: Variant, job: &Job) -> Row {
    Row {
        variant: variant.name().to_owned(),
        part: job.part.name().to_owned(),
        size_bytes: job.size as u64,
        median_us: None,
        p90_us: None,
        p99_us: None,
        mb_s: None,
        msg_s: None,
        samples: 0,
    }
}

/// fi_pingpong's table: a header naming `usec/xfer` (half a round trip,
/// mean), then one line of values.
pub(crate) fn parse_fi_pingpong(out: &str, job: &Job) -> Result<Row, String> {
    let mut lines = out.lines().map(str::split_whitespace);
    while let Some(header) = lines.next() {
        let header: Vec<&str> = header.collect();
        let Some(col) = header.iter().position(|h| *h == "usec/xfer") else {
            continue;
        };
        let sent = header.iter().position(|h| *h == "#sent");
        let values: Vec<&str> = lines.next().map(Iterator::collect).unwrap_or_default();
        let num = |i: usize| values.get(i).and_then(|v| v.parse::<f64>().ok());
        let us = num(col).ok_or_else(|| format!("fi_pingpong: no usec/xfer in {out:?}"))?;
        return Ok(Row {
            median_us: Some(us),
            samples: sent.and_then(num).map_or(job.count as u64, |n| n as u64),
            ..base_row(Variant::FiPingpong, job)
        });
    }
    Err(format!("fi_pingpong: no results in {out:?}"))
}

/// ucx_perftest's `Final:` line: iterations, then latency (median,
/// average, overall, µs), bandwidth (average, overall, MB/s) and message
/// rate (average, overall, msg/s).
pub(crate) fn parse_ucx_perftest(out: &str, job: &Job) -> Result<Row, String> {
    let line = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("Final:"))
        .ok_or_else(|| format!("ucx_perftest: no Final: line in {out:?}"))?;
    let v: Vec<f64> = line
        .split_whitespace()
        .map(|t| t.trim_matches('|').parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("ucx_perftest: {line:?}: {e}"))?;
    let [iters, lat50, _, _, _, bw, _, rate] = v.as_slice() else {
        return Err(format!("ucx_perftest: {line:?}: expected 8 numbers"));
    };
    let mut row = Row {
        samples: *iters as u64,
        ..base_row(Variant::UcxPerftest, job)
    };
    if job.part == Part::Lat {
        row.median_us = Some(*lat50);
    } else {
        row.mb_s = Some(*bw);
        row.msg_s = Some(*rate);
    }
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(part: Part, size: usize) -> Job {
        Job {
            part,
            size,
            count: 1000,
            window: 1,
        }
    }

    #[test]
    fn fi_pingpong_output() -> Result<(), String> {
        let out =
            "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n\
                   8       1000    =1000    15k         0.03s      0.52      15.33       0.07\n";
        let r = parse_fi_pingpong(out, &job(Part::Lat, 8))?;
        assert_eq!(r.variant, "fi_pingpong");
        assert_eq!(r.median_us, Some(15.33));
        assert_eq!(r.samples, 1000);
        assert!(parse_fi_pingpong("nothing", &job(Part::Lat, 8)).is_err());
        Ok(())
    }

    #[test]
    fn ucx_perftest_output() -> Result<(), String> {
        let out = "+----+\n|    Stage     | # iterations | 50.0%ile | average | overall |\n\
                   [thread 0]  500  1.2  1.3  1.3  6.0  6.0  770000  770000\n\
                   Final:      1000     1.100     1.200     1.250      6.10      6.10    800000    810000\n";
        let r = parse_ucx_perftest(out, &job(Part::Lat, 8))?;
        assert_eq!(r.median_us, Some(1.1));
        assert_eq!(r.mb_s, None);
        assert_eq!(r.samples, 1000);
        let b = parse_ucx_perftest(out, &job(Part::Bw, 8))?;
        assert_eq!(b.mb_s, Some(6.1));
        assert_eq!(b.msg_s, Some(810000.0));
        assert_eq!(b.median_us, None);
        assert!(parse_ucx_perftest("Final: 1 2", &job(Part::Lat, 8)).is_err());
        Ok(())
    }

    #[test]
    fn only_tools_have_commands() {
        assert_eq!(
            command(Variant::FiPingpong).map(|c| c.0),
            Some("fi_pingpong")
        );
        assert_eq!(command(Variant::SoftManual), None);
        assert!(find("definitely-not-a-command-here").is_none());
    }
}
