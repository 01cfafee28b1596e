//! psm_bench's SVG file: two panels side by side, latency (median half
//! round trip, log scale) and bandwidth (MB/s) against message size (log2
//! scale), one line per variant in the same colour in both. Drawn by
//! [`psmrail_bench::chart`].

use crate::report::Row;
use psmrail_bench::chart::{self, Chart, Series, SeriesLabelPosition, XAxis, YAxis};
use std::path::Path;

/// The points of `part` per variant, in `variants` order (variants
/// without any left out; each keeps its colour).
fn series(rows: &[Row], variants: &[&str], part: &str) -> Vec<Series> {
    variants
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let mut points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.variant == *v && r.part == part && r.size_bytes > 0)
                .filter_map(|r| {
                    let y = r.headline().filter(|y| *y > 0.0 && y.is_finite())?;
                    Some(((r.size_bytes as f64).log2(), y))
                })
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            (!points.is_empty()).then(|| Series {
                colour: Some(i),
                ..Series::line(*v, points)
            })
        })
        .collect()
}

/// Writes the two charts of `rows` to `path`.
pub(crate) fn write_svg(path: &Path, rows: &[Row], variants: &[&str]) -> Result<(), String> {
    let lat = series(rows, variants, "lat");
    let bw = series(rows, variants, "bw");
    if lat.is_empty() && bw.is_empty() {
        return Err(format!(
            "{}: no latency or bandwidth rows to plot",
            path.display()
        ));
    }
    let panel = |title: &str, y: YAxis, y_desc: &str, series: Vec<Series>| Chart {
        title: title.to_owned(),
        x: XAxis::Log2Bytes,
        x_desc: "message size (bytes)".to_owned(),
        y,
        y_desc: y_desc.to_owned(),
        series,
        marks: Vec::new(),
        legend: SeriesLabelPosition::UpperLeft,
    };
    chart::write_svg(
        path,
        &[
            panel(
                "latency: half round trip, median",
                YAxis::Log,
                "µs (log scale)",
                lat,
            ),
            panel("bandwidth: median window", YAxis::Linear, "MB/s", bw),
        ],
    )
}
