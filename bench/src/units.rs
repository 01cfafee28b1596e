//! Sizes and numbers as the programs take them on the command line and
//! print them: byte counts with k, m and g suffixes (powers of 1024),
//! counts of at least 1, epids in hexadecimal, and figures to about 3
//! significant digits.

/// A count of at least 1.
pub fn parse_count(v: &str) -> Result<usize, String> {
    match v.parse() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{v:?}: {e}")),
    }
}

/// An epid in hexadecimal, `0x` optional.
pub fn parse_epid(v: &str) -> Result<u64, String> {
    u64::from_str_radix(v.trim_start_matches("0x"), 16)
        .map_err(|e| format!("{v:?} is not a hexadecimal epid: {e}"))
}

/// A byte count with an optional k, m or g suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<usize, String> {
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
pub fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{s:?}: expected a whole number of 1 or more")),
    }
}

/// A number of seconds, 0 or more.
pub fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x >= 0.0 && x.is_finite() => Ok(x),
        _ => Err(format!("{s:?}: expected a number of seconds")),
    }
}

/// `bytes` as [`parse_size`] takes it: 8, 4k, 64m, or 1.5k when not whole.
pub fn size_short(bytes: usize) -> String {
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

/// `bytes` for people: 8 B, 4 KiB, 1 MiB (1.5 KiB when not whole).
pub fn size_label(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// A number with 3 significant digits or so (no exponent; M for
/// millions).
pub fn fmt_num(x: f64) -> String {
    match x.abs() {
        a if a >= 1e6 => format!("{:.2}M", x / 1e6),
        a if a >= 100.0 => format!("{x:.0}"),
        a if a >= 10.0 => format!("{x:.1}"),
        _ => format!("{x:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_trip() {
        for (text, bytes) in [("8", 8), ("4k", 4096), ("64m", 64 << 20), ("1g", 1 << 30)] {
            assert_eq!(parse_size(text), Ok(bytes));
            assert_eq!(size_short(bytes), text);
        }
        assert_eq!(size_short(1536), "1.5k");
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999999999999g").is_err());
    }

    #[test]
    fn labels_and_numbers() {
        assert_eq!(size_label(8), "8 B");
        assert_eq!(size_label(4096), "4 KiB");
        assert_eq!(size_label(1536), "1.5 KiB");
        assert_eq!(size_label(4 << 20), "4 MiB");
        assert_eq!(fmt_num(1_500_000.0), "1.50M");
        assert_eq!(fmt_num(2.345), "2.35");
        assert_eq!(fmt_num(123.4), "123");
        assert_eq!(positive("3"), Ok(3));
        assert!(positive("0").is_err());
        assert_eq!(seconds("1.5"), Ok(1.5));
        assert!(seconds("-1").is_err());
    }
}
