//! CSV files: a header line, then one line per row, fields quoted only
//! when they must be.

use std::path::Path;

/// A text field: quoted when it holds a comma, a quote or a line break.
pub fn text(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// A number with `decimals` decimals, or an empty field when it is absent
/// or not finite.
pub fn num(v: Option<f64>, decimals: usize) -> String {
    v.filter(|x| x.is_finite())
        .map(|x| format!("{x:.decimals$}"))
        .unwrap_or_default()
}

/// A file's text: the header, then the rows (their fields already made
/// with [`text`] and [`num`]), each line ended.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = header.join(",");
    out.push('\n');
    for row in rows {
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

/// Writes `text` to `path`, naming the file in the error.
pub fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Writes a CSV file of `header` and `rows` (see [`table`]).
pub fn write_table(path: &Path, header: &[&str], rows: &[Vec<String>]) -> Result<(), String> {
    write(path, &table(header, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_tables() {
        assert_eq!(text("plain"), "plain");
        assert_eq!(text("a,\"b\""), "\"a,\"\"b\"\"\"");
        assert_eq!(num(Some(1.23456), 3), "1.235");
        assert_eq!(num(Some(f64::NAN), 3), "");
        assert_eq!(num(None, 1), "");
        let t = table(&["a", "b"], &[vec!["1".into(), "".into()]]);
        assert_eq!(t, "a,b\n1,\n");
    }
}
