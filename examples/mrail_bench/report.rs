//! Sizes, medians, CSV files and SVG charts.

use plotters::prelude::*;
use std::path::Path;

pub(crate) use plotters::chart::SeriesLabelPosition;

/// A size with an optional k, m or g suffix (powers of 1024).
pub(crate) fn parse_size(s: &str) -> Result<usize, String> {
    let (num, shift) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 10),
        Some('m' | 'M') => (&s[..s.len() - 1], 20),
        Some('g' | 'G') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("size {s:?}: expected a byte count such as 8, 64k or 4m"))
}

/// A whole number of 1 or more.
pub(crate) fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{s:?}: expected a whole number of 1 or more")),
    }
}

/// A number of seconds, 0 or more.
pub(crate) fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x >= 0.0 && x.is_finite() => Ok(x),
        _ => Err(format!("{s:?}: expected a number of seconds")),
    }
}

/// `bytes` as `parse_size` takes it: 8, 4k, 64m, or 1.5k when not whole.
pub(crate) fn size_label(bytes: usize) -> String {
    const UNITS: [&str; 4] = ["", "k", "m", "g"];
    let mut unit = 0;
    let mut whole = bytes;
    while unit + 1 < UNITS.len() && whole >= 1024 && whole % 1024 == 0 {
        whole /= 1024;
        unit += 1;
    }
    if whole < 1024 || unit + 1 == UNITS.len() {
        return format!("{whole}{}", UNITS[unit]);
    }
    let mut v = whole as f64;
    while unit + 1 < UNITS.len() && v >= 1024.0 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1}{}", UNITS[unit])
}

/// The median (the mean of the middle two for an even count), or `None`
/// for no values. Sorts `v`.
pub(crate) fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// An optional number as a CSV field (empty when absent).
pub(crate) fn field(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(String::new, |v| format!("{v:.decimals$}"))
}

/// Writes a CSV file: the header, then the rows (fields must not need
/// quoting).
pub(crate) fn write_csv(path: &Path, header: &[&str], rows: &[Vec<String>]) -> Result<(), String> {
    let mut text = header.join(",");
    text.push('\n');
    for row in rows {
        text.push_str(&row.join(","));
        text.push('\n');
    }
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// How a chart's x values read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum XAxis {
    /// x is log2 of a byte count; whole values are labelled as sizes.
    Log2Bytes,
    /// x is a plain number.
    Linear,
    /// x is a count: only whole values are labelled.
    Count,
}

/// One line of a chart.
#[derive(Clone, Debug)]
pub(crate) struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Dashed and without points (a reference line).
    pub dashed: bool,
}

/// One panel: a line chart.
#[derive(Clone, Debug)]
pub(crate) struct Chart {
    pub title: String,
    pub x: XAxis,
    pub x_desc: String,
    pub y_desc: String,
    pub series: Vec<Series>,
    /// Vertical lines at these x values, with their legend names.
    pub marks: Vec<(f64, String)>,
    pub legend: SeriesLabelPosition,
}

/// Writes `charts` as panels of one SVG file, two per row.
pub(crate) fn write_svg(path: &Path, charts: &[Chart]) -> Result<(), String> {
    if charts.is_empty() {
        return Err(format!("{}: nothing to plot", path.display()));
    }
    let cols = charts.len().min(2);
    let rows = charts.len().div_ceil(cols);
    let size = (600 * cols as u32, 420 * rows as u32);
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

fn draw<'a>(area: &Area<'a>, c: &Chart) -> DrawResult<'a> {
    let xs = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(c.marks.iter().map(|m| m.0));
    let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    let (lo, hi) = match (lo.is_finite(), hi > lo) {
        (false, _) => (0.0, 1.0),
        (true, false) => (lo - 1.0, hi + 1.0),
        (true, true) => (lo - (hi - lo) * 0.03, hi + (hi - lo) * 0.03),
    };
    let top = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    // Room above the lines for a legend at the top.
    let room = match c.legend {
        SeriesLabelPosition::UpperLeft
        | SeriesLabelPosition::UpperMiddle
        | SeriesLabelPosition::UpperRight => 1.5,
        _ => 1.12,
    };
    let top = if top > 0.0 { top * room } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(&c.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(lo..hi, 0.0..top)?;
    let x_label = |x: &f64| match c.x {
        XAxis::Log2Bytes if (x - x.round()).abs() < 1e-6 && (0.0..63.0).contains(x) => {
            size_label(1usize << x.round() as u32)
        }
        XAxis::Linear => format!("{x}"),
        XAxis::Count if (x - x.round()).abs() < 1e-6 => format!("{x:.0}"),
        XAxis::Log2Bytes | XAxis::Count => String::new(),
    };
    chart
        .configure_mesh()
        .x_desc(c.x_desc.as_str())
        .y_desc(c.y_desc.as_str())
        .x_labels(10)
        .x_label_formatter(&x_label)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    let mut colors = 0..;
    for s in &c.series {
        // Reference lines are grey, the others take the palette's colours
        // in turn (the same order gives the same colours in every panel).
        let style = if s.dashed {
            BLACK.mix(0.45).stroke_width(2)
        } else {
            Palette99::pick(colors.next().unwrap_or(0)).stroke_width(2)
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
        let style = Palette99::pick(colors.next().unwrap_or(0)).stroke_width(1);
        chart
            .draw_series(DashedLineSeries::new(
                vec![(*x, 0.0), (*x, top)],
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

    #[test]
    fn sizes_round_trip() {
        for (text, bytes) in [("8", 8), ("4k", 4096), ("64m", 64 << 20), ("1g", 1 << 30)] {
            assert_eq!(parse_size(text), Ok(bytes));
            assert_eq!(size_label(bytes), text);
        }
        assert_eq!(size_label(1536), "1.5k");
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999999999999g").is_err());
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
