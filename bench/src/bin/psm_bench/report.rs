//! Results: one [`Row`] per variant, part and size; the CSV and JSON files
//! and the tables printed on stdout.

use crate::jobs::Part;
use psmrail_bench::csv;
use psmrail_bench::units::{fmt_num, size_label};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// The variant every other is compared with in the tables.
pub(crate) const BASELINE: &str = "tokio-tcp";

/// One measurement. Latency rows give half a round trip; bandwidth and
/// rate rows give the time of one window of messages in the `_us`
/// columns, and the throughput of the median window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Row {
    /// Which variant (soft-manual, tokio-tcp, ...).
    pub variant: String,
    /// lat, bw or rate.
    pub part: String,
    /// Bytes per message.
    pub size_bytes: u64,
    /// The median sample, µs.
    pub median_us: Option<f64>,
    /// The 90th percentile, µs.
    pub p90_us: Option<f64>,
    /// The 99th percentile, µs.
    pub p99_us: Option<f64>,
    /// Megabytes (10^6 bytes) per second.
    pub mb_s: Option<f64>,
    /// Messages per second.
    pub msg_s: Option<f64>,
    /// Samples behind the percentiles (round trips, or windows).
    pub samples: u64,
}

/// The CSV header, the row's fields in order.
pub(crate) const CSV_HEADER: &str =
    "variant,part,size_bytes,median_us,p90_us,p99_us,mb_s,msg_s,samples";

impl Row {
    /// The row as one CSV line (no line break).
    pub(crate) fn csv(&self) -> String {
        [
            csv::text(&self.variant),
            csv::text(&self.part),
            self.size_bytes.to_string(),
            csv::num(self.median_us, 3),
            csv::num(self.p90_us, 3),
            csv::num(self.p99_us, 3),
            csv::num(self.mb_s, 3),
            csv::num(self.msg_s, 3),
            self.samples.to_string(),
        ]
        .join(",")
    }

    /// The value the tables and charts show for this row's part: median
    /// µs, MB/s, or messages/s.
    pub(crate) fn headline(&self) -> Option<f64> {
        match self.part.parse::<Part>() {
            Ok(Part::Lat) => self.median_us,
            Ok(Part::Bw) => self.mb_s,
            Ok(Part::Rate) => self.msg_s,
            Err(_) => None,
        }
    }
}

/// The rows as a CSV file's text (header first).
pub(crate) fn csv(rows: &[Row]) -> String {
    let header: Vec<&str> = CSV_HEADER.split(',').collect();
    let lines: Vec<Vec<String>> = rows.iter().map(|r| vec![r.csv()]).collect();
    csv::table(&header, &lines)
}

/// The rows as a JSON array.
pub(crate) fn json(rows: &[Row]) -> Result<String, String> {
    serde_json::to_string_pretty(rows).map_err(|e| format!("JSON: {e}"))
}

/// One table per part: a line per size, a column per variant, each cell
/// the part's headline value and, beside other variants, its ratio to
/// the baseline's ([`BASELINE`]) in the same run.
pub(crate) fn tables(rows: &[Row], variants: &[&str]) -> String {
    let mut out = String::new();
    for part in [Part::Lat, Part::Bw, Part::Rate] {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.part == part.name()).collect();
        if mine.is_empty() {
            continue;
        }
        let cols: Vec<&str> = variants
            .iter()
            .copied()
            .filter(|v| mine.iter().any(|r| r.variant == *v))
            .collect();
        let mut sizes: Vec<u64> = mine.iter().map(|r| r.size_bytes).collect();
        sizes.sort_unstable();
        sizes.dedup();
        let (title, unit) = match part {
            Part::Lat => ("latency: half round trip, median", "µs"),
            Part::Bw => ("bandwidth: median window", "MB/s"),
            Part::Rate => ("message rate: median window", "msg/s"),
        };
        let ratios = if mine.iter().any(|r| r.variant == BASELINE) {
            format!(" (in brackets: the ratio to {BASELINE} in this run)")
        } else {
            String::new()
        };
        let _ = writeln!(out, "\n{title}, {unit}{ratios}");
        let width = 22;
        let _ = write!(out, "{:>9}", "size");
        for c in &cols {
            let _ = write!(out, " {c:>width$}");
        }
        out.push('\n');
        for size in sizes {
            let _ = write!(out, "{:>9}", size_label(size as usize));
            let base = mine
                .iter()
                .find(|r| r.variant == BASELINE && r.size_bytes == size)
                .and_then(|r| r.headline());
            for c in &cols {
                let value = mine
                    .iter()
                    .find(|r| r.variant == *c && r.size_bytes == size)
                    .and_then(|r| r.headline());
                let _ = write!(out, " {:>width$}", cell(value, base, *c == BASELINE));
            }
            out.push('\n');
        }
        if part == Part::Lat {
            let _ = writeln!(out, "latency p90 / p99 (µs)");
            for c in &cols {
                let tails: Vec<String> = mine
                    .iter()
                    .filter(|r| r.variant == *c)
                    .filter_map(|r| {
                        Some(format!(
                            "{} {}/{}",
                            size_label(r.size_bytes as usize),
                            fmt_num(r.p90_us?),
                            fmt_num(r.p99_us?)
                        ))
                    })
                    .collect();
                if !tails.is_empty() {
                    let _ = writeln!(out, "  {c}: {}", tails.join(", "));
                }
            }
        }
    }
    out
}

fn cell(value: Option<f64>, base: Option<f64>, is_base: bool) -> String {
    match (value, base) {
        (None, _) => "-".to_owned(),
        (Some(v), Some(b)) if !is_base && b > 0.0 => {
            let r = v / b;
            let digits = if r < 0.1 { 3 } else { 2 };
            format!("{} ({r:.digits$}x)", fmt_num(v))
        }
        (Some(v), _) => fmt_num(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lat(variant: &str, median: f64) -> Row {
        Row {
            variant: variant.to_owned(),
            part: "lat".to_owned(),
            size_bytes: 8,
            median_us: Some(median),
            p90_us: Some(median * 1.5),
            p99_us: Some(median * 2.0),
            mb_s: None,
            msg_s: None,
            samples: 1000,
        }
    }

    #[test]
    fn csv_rows() {
        let r = lat("soft-manual", 4.5);
        assert_eq!(r.csv(), "soft-manual,lat,8,4.500,6.750,9.000,,,1000");
        let text = csv(&[r]);
        assert_eq!(text.lines().next(), Some(CSV_HEADER));
        assert_eq!(text.lines().count(), 2);
        assert_eq!(CSV_HEADER.split(',').count(), 9);
        let odd = Row {
            variant: "a,\"b\"".to_owned(),
            mb_s: Some(f64::NAN),
            ..lat("x", 1.0)
        };
        assert!(odd.csv().starts_with("\"a,\"\"b\"\"\",lat,8,"));
        assert!(odd.csv().ends_with(",,,1000"));
    }

    #[test]
    fn json_rows_round_trip() -> Result<(), String> {
        let rows = vec![
            lat("tokio-tcp", 10.0),
            Row {
                part: "bw".to_owned(),
                mb_s: Some(1234.5),
                msg_s: Some(300.0),
                ..lat("soft-auto", 2.0)
            },
        ];
        let text = json(&rows)?;
        let back: Vec<Row> = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        assert_eq!(back, rows);
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        let first = &v[0];
        for key in CSV_HEADER.split(',') {
            assert!(first.get(key).is_some(), "{key} missing");
        }
        assert_eq!(first["mb_s"], serde_json::Value::Null);
        Ok(())
    }

    #[test]
    fn tables_show_ratios_to_the_baseline() {
        let rows = vec![lat("tokio-tcp", 10.0), lat("soft-manual", 5.0)];
        let t = tables(&rows, &["soft-manual", "tokio-tcp"]);
        assert!(t.contains("5.00 (0.50x)"), "{t}");
        assert!(t.contains("10.0"), "{t}");
        let tiny = tables(
            &[lat("tokio-tcp", 100.0), lat("x", 0.5)],
            &["x", "tokio-tcp"],
        );
        assert!(tiny.contains("0.50 (0.005x)"), "{tiny}");
        assert!(t.contains("soft-manual: 8 B 7.50/10.0"), "{t}");
        assert!(!t.contains("bandwidth"));
    }

    #[test]
    fn headline_values() {
        let r = lat("x", 3.0);
        assert_eq!(r.headline(), Some(3.0));
        let bw = Row {
            part: "bw".to_owned(),
            mb_s: Some(7.0),
            ..lat("x", 3.0)
        };
        assert_eq!(bw.headline(), Some(7.0));
    }
}
