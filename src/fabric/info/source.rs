//! Parsing of discovery's `node` and `service` texts (fi_getinfo(3); C:
//! `psmx_getinfo` in `prov/psm/src/psmx_init.c`): with
//! `FI_SOURCE`, node is `anything:unit:port` naming the local device; the
//! service is the name-server service number in both forms.
//!
//! Numbers are decimal, with the rules of the `FI_PSM_*` parsers: no sign
//! (except `-1`, "any unit"), no leading zeros, no spaces, no junk. C read
//! them with `%i` (so `010` was octal 8) and ignored what it could not
//! parse; here a malformed text is an `Inval` error naming it.

use super::attr::SourceName;
use crate::fabric::name_server::Service;
use crate::{Error, ErrorKind, Result};

fn invalid(what: &str, text: &str, problem: &str) -> Error {
    Error::new(ErrorKind::Inval, format!("{what} {text:?}: {problem}"))
}

/// A decimal without sign or leading zero, at most `max`.
fn decimal(text: &str, max: u64) -> std::result::Result<u64, String> {
    if text.is_empty() {
        return Err("a number is missing".into());
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text:?} is not a decimal number"));
    }
    if text.len() > 1 && text.starts_with('0') {
        return Err(format!(
            "{text:?} has a leading zero (C would have read it as octal)"
        ));
    }
    match text.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(format!("{text:?} is larger than {max}")),
    }
}

/// The service number: empty or absent is 0 (any).
///
/// # Errors
/// `Inval` unless the text is a decimal `u32`.
pub(crate) fn parse_service(service: Option<&str>) -> Result<u32> {
    match service {
        None | Some("") => Ok(0),
        Some(text) => decimal(text, u64::from(u32::MAX))
            .map(|n| n as u32)
            .map_err(|p| invalid("service", text, &format!("{p}; expected a decimal u32"))),
    }
}

/// Parses a `FI_SOURCE` node, `anything[:unit[:port]]`: unit `-1` or
/// absent means any unit, port `0` or absent any port (port at most 255).
///
/// # Errors
/// `Inval` for a malformed unit or port, or more than three fields.
pub(crate) fn parse_source(node: Option<&str>, service: u32) -> Result<SourceName> {
    let text = node.unwrap_or("");
    let mut fields = text.splitn(4, ':');
    let _anything = fields.next();
    let expected = "expected anything:unit:port with a decimal unit (-1 for any) and port (0 for any, at most 255)";
    let unit = match fields.next() {
        None | Some("-1") => None,
        Some(u) => Some(
            decimal(u, u64::from(u32::MAX >> 1))
                .map_err(|p| invalid("FI_SOURCE node", text, &format!("unit: {p}; {expected}")))?
                as u32,
        ),
    };
    let port = match fields.next() {
        None | Some("0") => None,
        Some(p) => Some(
            decimal(p, 255)
                .map_err(|e| invalid("FI_SOURCE node", text, &format!("port: {e}; {expected}")))?
                as u32,
        ),
    };
    if fields.next().is_some() {
        return Err(invalid(
            "FI_SOURCE node",
            text,
            &format!("too many ':'-separated fields; {expected}"),
        ));
    }
    Ok(SourceName {
        node: text.to_owned(),
        unit,
        port,
        service: Service::new(service),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(node: &str) -> Result<SourceName> {
        parse_source(Some(node), 0)
    }

    #[test]
    fn fields() {
        let s = src("host:1:2").unwrap();
        assert_eq!((s.unit, s.port, s.service.get()), (Some(1), Some(2), 0));
        assert_eq!(s.node, "host:1:2");
        let s = src("anything:-1:0").unwrap();
        assert_eq!((s.unit, s.port), (None, None));
        let s = src("host").unwrap();
        assert_eq!((s.unit, s.port), (None, None));
        let s = src(":0").unwrap();
        assert_eq!((s.unit, s.port), (Some(0), None));
        let s = src("h:3:255").unwrap();
        assert_eq!(s.port, Some(255));
        let s = parse_source(None, parse_service(Some("77")).unwrap()).unwrap();
        assert_eq!((s.node.as_str(), s.service.get()), ("", 77));
    }

    #[test]
    fn malformed() {
        for (node, needle) in [
            ("h:x:1", "unit: \"x\" is not a decimal"),
            ("h::1", "unit: a number is missing"),
            ("h:01:1", "leading zero"),
            ("h:0x1:1", "not a decimal"),
            ("h:-2:1", "unit: \"-2\""),
            ("h:1:256", "port: \"256\" is larger than 255"),
            ("h:1:-1", "port"),
            ("h:1: 2", "port"),
            ("h:1:2:3", "too many"),
            ("h:99999999999:0", "larger than"),
        ] {
            let e = src(node).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Inval, "{node}");
            let text = e.to_string();
            assert!(text.contains(needle), "{needle:?} not in {text}");
            assert!(text.contains("FI_SOURCE node"), "{text}");
        }
    }

    #[test]
    fn services() {
        assert_eq!(parse_service(None).unwrap(), 0);
        assert_eq!(parse_service(Some("")).unwrap(), 0);
        assert_eq!(parse_service(Some("4294967295")).unwrap(), u32::MAX);
        for bad in ["4294967296", "-1", "1a", "007", " 1"] {
            let e = parse_service(Some(bad)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Inval, "{bad}");
            assert!(e.to_string().starts_with("FI_EINVAL: service"), "{e}");
        }
        let e = parse_service(Some("x")).unwrap_err();
        assert!(e.to_string().contains("service \"x\""), "{e}");
    }
}
