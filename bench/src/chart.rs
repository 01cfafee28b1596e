//! The SVG file: two charts side by side, latency (median half round
//! trip, log scale) and bandwidth (MB/s) against message size (log2
//! scale), one line per variant.

use crate::jobs::size_label;
use crate::report::Row;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::Path;

/// One line: a variant's (log2 size, value) points.
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
}

/// The points of `part` per variant, in `variants` order (variants
/// without any left out).
fn series(rows: &[Row], variants: &[&str], part: &str) -> Vec<Series> {
    variants
        .iter()
        .filter_map(|v| {
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
                name: (*v).to_owned(),
                points,
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
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    let root = SVGBackend::new(path, (1200, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (left, right) = root.split_horizontally(600);
    draw(
        &left,
        "latency: half round trip, median",
        "µs (log scale)",
        &lat,
        variants,
        true,
    )
    .map_err(|e| err(&e))?;
    draw(
        &right,
        "bandwidth: median window",
        "MB/s",
        &bw,
        variants,
        false,
    )
    .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawResult<'a> =
    Result<(), DrawingAreaErrorKind<<SVGBackend<'a> as DrawingBackend>::ErrorType>>;

/// The x range of some series, with a margin.
fn x_range(series: &[Series]) -> (f64, f64) {
    let (lo, hi) = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
    if !lo.is_finite() {
        (0.0, 1.0)
    } else {
        (lo - 0.3, hi + 0.3)
    }
}

fn label_x(x: &f64) -> String {
    if (x - x.round()).abs() < 1e-6 && (0.0..40.0).contains(x) {
        size_label(1usize << x.round() as u32)
            .replace(" KiB", "K")
            .replace(" MiB", "M")
            .replace(" B", "")
    } else {
        String::new()
    }
}

fn draw<'a>(
    area: &Area<'a>,
    title: &str,
    y_desc: &str,
    series: &[Series],
    variants: &[&str],
    log_y: bool,
) -> DrawResult<'a> {
    let (lo, hi) = x_range(series);
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (ymin, ymax) = ys.fold((f64::INFINITY, 0.0f64), |(a, b), y| (a.min(y), b.max(y)));
    let ymin = if ymin.is_finite() { ymin } else { 1.0 };
    let ymax = if ymax > 0.0 { ymax } else { 1.0 };
    let colour = |name: &str| {
        let i = variants.iter().position(|v| *v == name).unwrap_or(0);
        Palette99::pick(i).stroke_width(2)
    };
    if log_y {
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(lo..hi, (ymin * 0.7..ymax * 1.6).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("message size (bytes)")
            .y_desc(y_desc)
            .x_labels(12)
            .x_label_formatter(&label_x)
            .y_label_formatter(&|y| crate::report::fmt_num(*y))
            .draw()?;
        plot(&mut chart, series, &colour)
    } else {
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(lo..hi, 0.0..ymax * 1.15)?;
        chart
            .configure_mesh()
            .x_desc("message size (bytes)")
            .y_desc(y_desc)
            .x_labels(12)
            .x_label_formatter(&label_x)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()?;
        plot(&mut chart, series, &colour)
    }
}

/// Draws each series (points and a line, labelled in the legend) and the
/// legend, whatever the y axis's scale.
fn plot<'a, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, Y>>,
    series: &[Series],
    colour: &dyn Fn(&str) -> ShapeStyle,
) -> DrawResult<'a>
where
    Y: Ranged<ValueType = f64>,
{
    for s in series {
        let style = colour(&s.name);
        chart.draw_series(PointSeries::of_element(
            s.points.clone(),
            3,
            style.filled(),
            &|xy, size, st| Circle::new(xy, size, st),
        ))?;
        chart
            .draw_series(LineSeries::new(s.points.clone(), style))?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
}
