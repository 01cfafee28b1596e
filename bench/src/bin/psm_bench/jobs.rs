//! What is measured: the parts (latency, bandwidth, message rate), the
//! jobs both peers run in the same order, and the default sweeps and
//! counts. Jobs travel to the peers on their command line as
//! `PART:SIZE:COUNT:WINDOW`.

use psmrail_bench::units;
use std::fmt;
use std::str::FromStr;

/// A kind of measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub(crate) enum Part {
    /// Ping-pong: half a round trip, median / p90 / p99.
    Lat,
    /// Streaming windows of messages, each window acknowledged: MB/s.
    Bw,
    /// Streaming windows of 8-byte messages: messages per second.
    Rate,
}

impl Part {
    /// The name `--parts` takes and the CSV shows.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Part::Lat => "lat",
            Part::Bw => "bw",
            Part::Rate => "rate",
        }
    }
}

impl FromStr for Part {
    type Err = String;

    fn from_str(s: &str) -> Result<Part, String> {
        match s {
            "lat" => Ok(Part::Lat),
            "bw" => Ok(Part::Bw),
            "rate" => Ok(Part::Rate),
            _ => Err(format!("{s:?}: expected lat, bw or rate")),
        }
    }
}

/// One measurement both peers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Job {
    /// What is measured.
    pub part: Part,
    /// Bytes per message.
    pub size: usize,
    /// Timed round trips (`lat`) or timed windows (`bw`, `rate`); a tenth
    /// more run first as warm-up.
    pub count: usize,
    /// Messages per window (1 for `lat`).
    pub window: usize,
}

impl Job {
    /// The untimed round trips or windows before the timed ones.
    pub(crate) fn warmup(&self) -> usize {
        self.count / 10 + 2
    }
}

impl fmt::Display for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Job {
            part,
            size,
            count,
            window,
        } = *self;
        write!(f, "{}:{size}:{count}:{window}", part.name())
    }
}

impl FromStr for Job {
    type Err = String;

    fn from_str(s: &str) -> Result<Job, String> {
        let f: Vec<&str> = s.split(':').collect();
        let [part, size, count, window] = f.as_slice() else {
            return Err(format!("job {s:?}: expected PART:SIZE:COUNT:WINDOW"));
        };
        let num = |t: &str| {
            t.parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("job {s:?}: {t:?} is not a whole number of 1 or more"))
        };
        Ok(Job {
            part: part.parse()?,
            size: num(size)?,
            count: num(count)?,
            window: num(window)?,
        })
    }
}

/// A size with an optional k or m suffix (powers of 1024), 1 byte to
/// [`MAX_SIZE`].
pub(crate) fn parse_size(s: &str) -> Result<usize, String> {
    units::parse_size(s)
        .ok()
        .filter(|n| (1..=MAX_SIZE).contains(n))
        .ok_or_else(|| format!("size {s:?}: expected 1 to 64m bytes, such as 8, 64k or 4m"))
}

/// The largest message size taken.
pub(crate) const MAX_SIZE: usize = 64 << 20;

/// The default latency sizes: 1 B to 1 MiB in powers of 4, and 8 B.
pub(crate) fn lat_sizes() -> Vec<usize> {
    let mut v: Vec<usize> = (0..=10).map(|k| 1usize << (2 * k)).collect();
    v.push(8);
    v.sort_unstable();
    v
}

/// The default bandwidth sizes: 4 KiB to 4 MiB in powers of 4.
pub(crate) fn bw_sizes() -> Vec<usize> {
    (6..=11).map(|k| 1usize << (2 * k)).collect()
}

/// The size of the message-rate part.
pub(crate) const RATE_SIZE: usize = 8;

/// Messages in flight per streaming window: 64 (as the OSU benchmarks),
/// fewer when that would pass 64 MiB.
pub(crate) fn window(size: usize) -> usize {
    (64usize << 20).checked_div(size).unwrap_or(64).clamp(4, 64)
}

/// How many round trips and windows, and how long.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Counts {
    /// Round trips of messages up to 16 KiB (fewer above, in proportion,
    /// and never below `min_iters`).
    pub iters: usize,
    /// The fewest round trips of any size.
    pub min_iters: usize,
    /// Bytes each bandwidth measurement streams, about.
    pub bw_bytes: usize,
    /// Timed windows of the message-rate part.
    pub rate_windows: usize,
}

impl Counts {
    /// The counts of a full run, or of `--quick`; `iters` replaces the
    /// round trips of small messages.
    pub(crate) fn new(quick: bool, iters: Option<usize>) -> Counts {
        let mut c = if quick {
            Counts {
                iters: 1_000,
                min_iters: 50,
                bw_bytes: 64 << 20,
                rate_windows: 200,
            }
        } else {
            Counts {
                iters: 20_000,
                min_iters: 200,
                bw_bytes: 2 << 30,
                rate_windows: 3_000,
            }
        };
        if let Some(n) = iters {
            c.iters = n;
            c.min_iters = c.min_iters.min(n);
        }
        c
    }
}

/// The jobs of `parts` (in the order lat, bw, rate), over `sizes` when
/// given, else the default sweeps.
pub(crate) fn plan(parts: &[Part], sizes: Option<&[usize]>, c: Counts) -> Vec<Job> {
    let mut parts = parts.to_vec();
    parts.sort_unstable();
    parts.dedup();
    let mut jobs = Vec::new();
    for part in parts {
        match part {
            Part::Lat => {
                for &size in sizes.map_or(&lat_sizes()[..], |s| s) {
                    let scaled = c.iters.saturating_mul(16 << 10) / size.max(16 << 10);
                    jobs.push(Job {
                        part,
                        size,
                        count: scaled.max(c.min_iters).max(1),
                        window: 1,
                    });
                }
            }
            Part::Bw => {
                for &size in sizes.map_or(&bw_sizes()[..], |s| s) {
                    let window = window(size);
                    let count = (c.bw_bytes / (window * size)).clamp(10, 2_000);
                    jobs.push(Job {
                        part,
                        size,
                        count,
                        window,
                    });
                }
            }
            Part::Rate => jobs.push(Job {
                part,
                size: RATE_SIZE,
                count: c.rate_windows,
                window: window(RATE_SIZE),
            }),
        }
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_round_trip_through_text() {
        let j = Job {
            part: Part::Bw,
            size: 4096,
            count: 30,
            window: 64,
        };
        assert_eq!(j.to_string(), "bw:4096:30:64");
        assert_eq!("bw:4096:30:64".parse::<Job>(), Ok(j));
        assert!("bw:4096:30".parse::<Job>().is_err());
        assert!("lat:0:30:1".parse::<Job>().is_err());
        assert!("xx:1:1:1".parse::<Job>().is_err());
    }

    #[test]
    fn default_sweeps() {
        let lat = lat_sizes();
        assert_eq!(lat.first(), Some(&1));
        assert_eq!(lat.last(), Some(&(1 << 20)));
        assert!(lat.contains(&8) && lat.contains(&4) && lat.contains(&16));
        assert_eq!(
            bw_sizes(),
            [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20]
        );
        assert_eq!(window(8), 64);
        assert_eq!(window(4 << 20), 16);
    }

    #[test]
    fn plans_scale_counts() {
        let c = Counts::new(true, None);
        let jobs = plan(&[Part::Rate, Part::Lat], Some(&[8, 1 << 20]), c);
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs[0].part, Part::Lat);
        assert_eq!(jobs[0].count, 1_000);
        assert_eq!(jobs[1].count, 50);
        assert_eq!(jobs[2].part, Part::Rate);
        let c = Counts::new(false, Some(10));
        assert_eq!(plan(&[Part::Lat], Some(&[8]), c)[0].count, 10);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert!(parse_size("0").is_err());
        assert!(parse_size("1g").is_err());
        assert!(parse_size("x").is_err());
    }
}
