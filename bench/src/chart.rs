//! SVG line charts: panels of lines (points joined, or dashed reference
//! lines) and vertical marks, two panels per row in one file. The y axis
//! is linear from zero or logarithmic; the x axis reads as sizes (log2 of
//! a byte count), plain numbers or counts.

use crate::units::{fmt_num, size_short};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::Path;

pub use plotters::chart::SeriesLabelPosition;

/// How a chart's x values read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XAxis {
    /// x is log2 of a byte count; whole values are labelled as sizes.
    Log2Bytes,
    /// x is a plain number.
    Linear,
    /// x is a count: only whole values are labelled.
    Count,
}

/// How a chart's y axis is scaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum YAxis {
    /// From zero up, labelled in whole numbers.
    Linear,
    /// Logarithmic over the values' range, labelled with 3 digits or so.
    Log,
}

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    /// Its name in the legend.
    pub name: String,
    /// Its (x, y) points, in x order.
    pub points: Vec<(f64, f64)>,
    /// Dashed, grey and without points (a reference line).
    pub dashed: bool,
    /// Its colour's index in the palette; `None` takes the next unused
    /// one (the same order gives the same colours in every panel).
    pub colour: Option<usize>,
}

impl Series {
    /// A solid line with points, in the next colour.
    pub fn line(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            dashed: false,
            colour: None,
        }
    }
}

/// One panel: a line chart.
#[derive(Clone, Debug)]
pub struct Chart {
    /// The caption above it.
    pub title: String,
    /// How x reads.
    pub x: XAxis,
    /// The x axis's description.
    pub x_desc: String,
    /// How y is scaled.
    pub y: YAxis,
    /// The y axis's description.
    pub y_desc: String,
    /// The lines.
    pub series: Vec<Series>,
    /// Vertical lines at these x values, with their legend names.
    pub marks: Vec<(f64, String)>,
    /// Where the legend goes.
    pub legend: SeriesLabelPosition,
}

/// Writes `charts` as panels of one SVG file, two per row.
pub fn write_svg(path: &Path, charts: &[Chart]) -> Result<(), String> {
    if charts.is_empty() {
        return Err(format!("{}: nothing to plot", path.display()));
    }
    let cols = charts.len().min(2);
    let rows = charts.len().div_ceil(cols);
    let size = (600 * cols as u32, 440 * rows as u32);
    let root = SVGBackend::new(path, size).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    for (area, chart) in root.split_evenly((rows, cols)).iter().zip(charts) {
        draw(area, chart).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawResult<'a> =
    Result<(), DrawingAreaErrorKind<<SVGBackend<'a> as DrawingBackend>::ErrorType>>;

/// The x range of a chart's points and marks, with a margin.
fn x_range(c: &Chart) -> (f64, f64) {
    let xs = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(c.marks.iter().map(|m| m.0));
    let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    match (lo.is_finite(), hi > lo) {
        (false, _) => (0.0, 1.0),
        (true, false) => (lo - 1.0, hi + 1.0),
        (true, true) if c.x == XAxis::Log2Bytes => (lo - 0.3, hi + 0.3),
        (true, true) => (lo - (hi - lo) * 0.03, hi + (hi - lo) * 0.03),
    }
}

/// The y range: from zero (linear) or around the positive values (log),
/// with room above the lines for a legend at the top.
fn y_range(c: &Chart) -> (f64, f64) {
    let ys = || c.series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let top = ys().fold(0.0f64, f64::max);
    let room = match c.legend {
        SeriesLabelPosition::UpperLeft
        | SeriesLabelPosition::UpperMiddle
        | SeriesLabelPosition::UpperRight => 1.5,
        _ => 1.12,
    };
    match c.y {
        YAxis::Linear => (0.0, if top > 0.0 { top * room } else { 1.0 }),
        YAxis::Log => {
            let low = ys().filter(|y| *y > 0.0).fold(f64::INFINITY, f64::min);
            let low = if low.is_finite() { low } else { 1.0 };
            let top = if top > 0.0 { top } else { 1.0 };
            (low * 0.7, top * room.max(1.6))
        }
    }
}

fn draw<'a>(area: &Area<'a>, c: &Chart) -> DrawResult<'a> {
    let (lo, hi) = x_range(c);
    let (bottom, top) = y_range(c);
    let x_label = |x: &f64| match c.x {
        XAxis::Log2Bytes if (x - x.round()).abs() < 1e-6 && (0.0..63.0).contains(x) => {
            size_short(1usize << x.round() as u32)
        }
        XAxis::Linear => plain(*x),
        XAxis::Count if (x - x.round()).abs() < 1e-6 => format!("{x:.0}"),
        XAxis::Log2Bytes | XAxis::Count => String::new(),
    };
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&c.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    match c.y {
        YAxis::Linear => {
            let mut chart = builder.build_cartesian_2d(lo..hi, bottom..top)?;
            chart
                .configure_mesh()
                .x_desc(c.x_desc.as_str())
                .y_desc(c.y_desc.as_str())
                .x_labels(10)
                .x_label_formatter(&x_label)
                .y_label_formatter(&|y| format!("{y:.0}"))
                .draw()?;
            plot(&mut chart, c, (bottom, top))
        }
        YAxis::Log => {
            let mut chart = builder.build_cartesian_2d(lo..hi, (bottom..top).log_scale())?;
            chart
                .configure_mesh()
                .x_desc(c.x_desc.as_str())
                .y_desc(c.y_desc.as_str())
                .x_labels(10)
                .x_label_formatter(&x_label)
                .y_label_formatter(&|y| fmt_num(*y))
                .draw()?;
            plot(&mut chart, c, (bottom, top))
        }
    }
}

/// `x` with at most 3 decimals, without trailing zeros (axis steps such
/// as 0.2 add up to 1.4000000000000001).
fn plain(x: f64) -> String {
    let text = format!("{x:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

/// Draws the series, the marks (from `y.0` to `y.1`) and the legend,
/// whatever the y axis's scale.
fn plot<'a, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, Y>>,
    c: &Chart,
    y: (f64, f64),
) -> DrawResult<'a>
where
    Y: Ranged<ValueType = f64>,
{
    let mut next = (0..).filter(|i| !c.series.iter().any(|s| s.colour == Some(*i)));
    for s in &c.series {
        // Reference lines are grey, the others take their own colour or
        // the palette's next.
        let style = if s.dashed {
            BLACK.mix(0.45).stroke_width(2)
        } else {
            let i = s.colour.or_else(|| next.next()).unwrap_or(0);
            Palette99::pick(i).stroke_width(2)
        };
        let drawn = if s.dashed {
            chart.draw_series(DashedLineSeries::new(s.points.clone(), 8, 5, style))?
        } else {
            chart.draw_series(PointSeries::of_element(
                s.points.clone(),
                3,
                style.filled(),
                &|xy, size, st| Circle::new(xy, size, st),
            ))?;
            chart.draw_series(LineSeries::new(s.points.clone(), style))?
        };
        drawn
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
    }
    for (x, name) in &c.marks {
        let style = Palette99::pick(next.next().unwrap_or(0)).stroke_width(1);
        chart
            .draw_series(DashedLineSeries::new(
                vec![(*x, y.0), (*x, y.1)],
                4,
                4,
                style,
            ))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
    }
    chart
        .configure_series_labels()
        .position(c.legend.clone())
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(y: YAxis) -> Chart {
        Chart {
            title: "t".into(),
            x: XAxis::Log2Bytes,
            x_desc: "size".into(),
            y,
            y_desc: "us".into(),
            series: vec![
                Series::line("a", vec![(3.0, 2.0), (12.0, 40.0)]),
                Series {
                    dashed: true,
                    ..Series::line("ref", vec![(3.0, 50.0), (12.0, 50.0)])
                },
            ],
            marks: vec![(6.0, "mark".into())],
            legend: SeriesLabelPosition::UpperLeft,
        }
    }

    #[test]
    fn ranges() {
        let c = chart(YAxis::Linear);
        assert_eq!(x_range(&c), (2.7, 12.3));
        assert_eq!(y_range(&c), (0.0, 75.0));
        let (lo, hi) = y_range(&chart(YAxis::Log));
        assert!((lo - 1.4).abs() < 1e-9 && hi > 50.0, "{lo} {hi}");
    }

    #[test]
    fn plain_numbers() {
        assert_eq!(plain(1.4000000000000001), "1.4");
        assert_eq!(plain(2.0), "2");
        assert_eq!(plain(-0.0001), "0");
        assert_eq!(plain(0.125), "0.125");
    }

    #[test]
    fn writes_both_scales() -> Result<(), String> {
        let path = std::env::temp_dir().join(format!("chart-test-{}.svg", std::process::id()));
        let got = write_svg(&path, &[chart(YAxis::Linear), chart(YAxis::Log)]);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = std::fs::remove_file(&path);
        got?;
        assert!(text.contains("<svg") && text.contains("mark"));
        assert!(write_svg(&path, &[]).is_err());
        Ok(())
    }
}
