//! `FI_OFI_MRAIL_ADDR`: the address of each rail ([`RailAddr`]), parsed
//! without resolving anything.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use super::error::ConfigError;
use super::number::{parse_c_uint, parse_hex, parse_u64, IntProblem};

/// The variable this grammar belongs to.
pub(crate) const VAR: &str = "FI_OFI_MRAIL_ADDR";
const EXPECTED_ADDR: &str = "an FI_ADDR_STR address (<fmt>://...), an IPv4 address as four \
     decimal octets 0-255 without leading zeros, an IPv6 address, a host name or a network \
     interface name";

/// Longest Linux interface name (`IFNAMSIZ - 1`).
const MAX_IFNAME: usize = 15;
/// Longest host name.
const MAX_HOSTNAME: usize = 253;

/// An address in libfabric's `FI_ADDR_STR` form, `<fmt>://<body>` (not to be
/// confused with [`fabric::FiAddr`](crate::fabric::FiAddr), an address
/// vector's handle for a peer), with the
/// body parsed according to its format (`ofi_str_toaddr`, `src/common.c`).
/// Numbers shown as hex are written without a `0x` prefix except in
/// `fi_sockaddr_ib`, where C reads them with `strtol(.., 0)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddrStr {
    /// `fi_sockaddr_in://<ipv4>:<port>`, `fi_sockaddr_in://<ipv4>` or
    /// `fi_sockaddr_in://:<port>` (at least one of the two is present).
    SockaddrIn {
        /// The IPv4 address (any address when absent).
        ip: Option<Ipv4Addr>,
        /// The port (0 when absent).
        port: Option<u16>,
    },
    /// `fi_sockaddr_in6://[<ipv6>]:<port>`, `fi_sockaddr_in6://[<ipv6>]` or
    /// `fi_sockaddr_in6://:<port>` (at least one of the two is present).
    SockaddrIn6 {
        /// The IPv6 address (any address when absent).
        ip: Option<Ipv6Addr>,
        /// The port (0 when absent).
        port: Option<u16>,
    },
    /// `fi_sockaddr_ib://[<gid>]:<pkey>:<port_space>:<scope_id>[:<port>]`;
    /// the numbers are decimal or `0x` hex.
    SockaddrIb {
        /// The GID, written as an IPv6 address.
        gid: Ipv6Addr,
        /// Partition key.
        pkey: u16,
        /// Port space.
        port_space: u16,
        /// Scope id.
        scope_id: u64,
        /// Optional port.
        port: Option<u16>,
    },
    /// `fi_addr_psmx://<epid hex>` (PSM 1.x).
    Psmx(u64),
    /// `fi_addr_psmx2://<hex>:<hex>`.
    Psmx2([u64; 2]),
    /// `fi_addr_psmx3://<hex>:<hex>:<hex>:<hex>`.
    Psmx3([u64; 4]),
    /// `fi_addr_opx://<hex>`.
    Opx(u64),
    /// `fi_addr_efa://[<gid>][:<qpn>[:<qkey>]]` (decimal qpn and qkey; a
    /// qkey needs a qpn).
    Efa {
        /// The GID, written as an IPv6 address.
        gid: Ipv6Addr,
        /// Queue pair number.
        qpn: Option<u16>,
        /// Queue key.
        qkey: Option<u32>,
    },
    /// `fi_addr_ib_ud://<gid>:<qpn>:<lid>:<pkey>:<sl>` (hex numbers; the GID
    /// is an IPv6 address, so the numbers are the last four `:` fields).
    IbUd {
        /// The GID, written as an IPv6 address.
        gid: Ipv6Addr,
        /// Queue pair number.
        qpn: u32,
        /// Local id.
        lid: u16,
        /// Partition key.
        pkey: u16,
        /// Service level.
        sl: u8,
    },
}

impl AddrStr {
    /// The format name (`fi_sockaddr_in`, ...), as `Display` writes it.
    pub const fn format_name(&self) -> &'static str {
        match self {
            AddrStr::SockaddrIn { .. } => "fi_sockaddr_in",
            AddrStr::SockaddrIn6 { .. } => "fi_sockaddr_in6",
            AddrStr::SockaddrIb { .. } => "fi_sockaddr_ib",
            AddrStr::Psmx(_) => "fi_addr_psmx",
            AddrStr::Psmx2(_) => "fi_addr_psmx2",
            AddrStr::Psmx3(_) => "fi_addr_psmx3",
            AddrStr::Opx(_) => "fi_addr_opx",
            AddrStr::Efa { .. } => "fi_addr_efa",
            AddrStr::IbUd { .. } => "fi_addr_ib_ud",
        }
    }
}

impl fmt::Display for AddrStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.format_name())?;
        match self {
            AddrStr::SockaddrIn { ip, port } => {
                if let Some(ip) = ip {
                    write!(f, "{ip}")?;
                }
                if let Some(port) = port {
                    write!(f, ":{port}")?;
                }
                Ok(())
            }
            AddrStr::SockaddrIn6 { ip, port } => {
                if let Some(ip) = ip {
                    write!(f, "[{ip}]")?;
                }
                if let Some(port) = port {
                    write!(f, ":{port}")?;
                }
                Ok(())
            }
            AddrStr::SockaddrIb {
                gid,
                pkey,
                port_space,
                scope_id,
                port,
            } => {
                write!(f, "[{gid}]:0x{pkey:x}:0x{port_space:x}:0x{scope_id:x}")?;
                if let Some(port) = port {
                    write!(f, ":{port}")?;
                }
                Ok(())
            }
            AddrStr::Psmx(a) | AddrStr::Opx(a) => write!(f, "{a:x}"),
            AddrStr::Psmx2([a, b]) => write!(f, "{a:x}:{b:x}"),
            AddrStr::Psmx3([a, b, c, d]) => write!(f, "{a:x}:{b:x}:{c:x}:{d:x}"),
            AddrStr::Efa { gid, qpn, qkey } => {
                write!(f, "[{gid}]")?;
                if let Some(qpn) = qpn {
                    write!(f, ":{qpn}")?;
                    if let Some(qkey) = qkey {
                        write!(f, ":{qkey}")?;
                    }
                }
                Ok(())
            }
            AddrStr::IbUd {
                gid,
                qpn,
                lid,
                pkey,
                sl,
            } => write!(f, "{gid}:{qpn:x}:{lid:x}:{pkey:x}:{sl:x}"),
        }
    }
}

/// One rail's address from `FI_OFI_MRAIL_ADDR`, classified but not
/// resolved (the rules are below).
///
/// ```
/// use psmrail::config::{AddrStr, RailAddr};
///
/// let rails = RailAddr::parse_list(
///     "eth0,10.0.0.2,fi_sockaddr_in://10.0.1.2:7000,node-7.example.org,veth@if3",
/// )
/// .unwrap();
/// assert_eq!(rails[0], RailAddr::InterfaceOrHost("eth0".into()));
/// assert!(matches!(rails[1], RailAddr::Ip(_)));
/// assert!(matches!(rails[2], RailAddr::AddrStr(AddrStr::SockaddrIn { port: Some(7000), .. })));
/// assert_eq!(rails[3], RailAddr::Host("node-7.example.org".into()));
/// assert_eq!(rails[4], RailAddr::Interface("veth@if3".into()));
///
/// let err = RailAddr::parse_list("eth0,,eth1").unwrap_err();
/// assert_eq!((err.item(), err.position()), ("", 5));
/// ```
///
/// fi_mrail(7): "Comma delimited list of individual rail addresses. Each
/// address can be an address in FI_ADDR_STR format, a host name, an IP
/// address, or a netdev interface name." Items are not trimmed (as in C).
///
/// Classification of one item:
/// 1. `<fmt>://<body>` is an `FI_ADDR_STR` address ([`AddrStr`]); `<fmt>` is
///    compared case-insensitively and the body must match that format's
///    grammar exactly (C's `sscanf` ignored trailing text and wrapped
///    out-of-range numbers; psmrail rejects both). The formats libfabric's
///    `ofi_str_toaddr` cannot convert (`fi_addr_gni`, `fi_addr_bgq`,
///    `fi_addr_mlx`, `fi_addr_ucx`, `fi_addr_cxi`: `-FI_ENOSYS` in C) and
///    unknown formats are errors.
/// 2. An IPv4 or IPv6 literal (`10.0.0.1`, `fe80::1`) is [`RailAddr::Ip`].
///    An IPv4 address is a dotted quad: four decimal octets 0-255, without
///    leading zeros, signs or whitespace. C would first look for an
///    interface of that name; no real interface is named like an IP address.
/// 3. A word that reads as a number is an error: an integer in decimal,
///    octal (`010`) or hex (`0x10`), dotted integers that are not a dotted
///    quad (`127.1`, `0177.0.0.1`, `1.2.3.4.5`, `256.0.0.1`), a signed
///    number or a fraction (`-1`, `1.5`, `1e3`). C's resolver reads most of
///    these as IPv4 addresses in `inet_aton`'s forms (`0x10` is 0.0.0.16,
///    `0177.0.0.1` is 127.0.0.1), so they would name an address nobody
///    meant, and they are not names either.
/// 4. Otherwise a bare word. A Linux interface name is 1 to 15 bytes of
///    printable ASCII other than `/` and `:`, and not `.` or `..`; a host
///    name is up to 253 bytes of dot-separated labels of 1 to 63 letters,
///    digits, `-` or `_` (not starting or ending with `-`). A word valid as
///    only one of them is [`RailAddr::Interface`] or [`RailAddr::Host`]; a
///    word valid as both (`eth0`, `ib0`, `node12`) is
///    [`RailAddr::InterfaceOrHost`], which is resolved later
///    **interface-first**, then as a host name, exactly like C's
///    `ofi_str_toaddr`. A word valid as neither is an error.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RailAddr {
    /// An `FI_ADDR_STR` address.
    AddrStr(AddrStr),
    /// An IPv4 or IPv6 literal.
    Ip(IpAddr),
    /// A word that can only be a network interface name.
    Interface(String),
    /// A word that can only be a host name.
    Host(String),
    /// A word that can be either; resolved interface-first, then as a host
    /// name (as C's `ofi_str_toaddr` does).
    InterfaceOrHost(String),
}

impl RailAddr {
    /// Parses a comma-separated list (the `FI_OFI_MRAIL_ADDR` grammar).
    /// An empty value or an empty item is an error.
    pub fn parse_list(value: &str) -> Result<Vec<RailAddr>, ConfigError> {
        parse_list_var(VAR, value)
    }
}

/// Parses a comma-separated list given for `var`.
pub(crate) fn parse_list_var(var: &'static str, value: &str) -> Result<Vec<RailAddr>, ConfigError> {
    let mut out = Vec::new();
    let mut offset = 0;
    for item in value.split(',') {
        let start = offset;
        offset += item.len() + 1;
        let addr = parse_one(var, item).map_err(|e| e.shifted(value, start))?;
        out.push(addr);
    }
    Ok(out)
}

/// Parses one item as its own value (errors at offset 0 of `item`).
fn parse_one(var: &'static str, item: &str) -> Result<RailAddr, ConfigError> {
    let err = |expected: &'static str, problem: String| {
        ConfigError::new(var, item, 0..item.len(), expected).with_problem(problem)
    };
    if item.is_empty() {
        return Err(err(EXPECTED_ADDR, "empty item".to_owned()));
    }
    if let Some((scheme, body)) = item.split_once("://") {
        return parse_fi_addr(scheme, body)
            .map(RailAddr::AddrStr)
            .map_err(|(problem, expected)| err(expected, problem));
    }
    if let Ok(ip) = item.parse::<IpAddr>() {
        return Ok(RailAddr::Ip(ip));
    }
    if reads_as_number(item) {
        return Err(err(
            EXPECTED_ADDR,
            format!(
                "{item:?} reads as a number, not a name (a resolver would take it for an IPv4 \
                 address in inet_aton's hex, octal or short form)"
            ),
        ));
    }
    match (is_ifname(item), is_hostname(item)) {
        (true, true) => Ok(RailAddr::InterfaceOrHost(item.to_owned())),
        (true, false) => Ok(RailAddr::Interface(item.to_owned())),
        (false, true) => Ok(RailAddr::Host(item.to_owned())),
        (false, false) => Err(err(
            EXPECTED_ADDR,
            format!("{item:?} is neither an IP address, a host name nor an interface name"),
        )),
    }
}

type Problem = (String, &'static str);

fn parse_fi_addr(scheme: &str, body: &str) -> Result<AddrStr, Problem> {
    const UNSUPPORTED: [&str; 5] = [
        "fi_addr_gni",
        "fi_addr_bgq",
        "fi_addr_mlx",
        "fi_addr_ucx",
        "fi_addr_cxi",
    ];
    const KNOWN: &str = "an FI_ADDR_STR format: fi_sockaddr_in, fi_sockaddr_in6, fi_sockaddr_ib, \
         fi_addr_psmx, fi_addr_psmx2, fi_addr_psmx3, fi_addr_opx, fi_addr_efa or fi_addr_ib_ud";
    let is = |name: &str| scheme.eq_ignore_ascii_case(name);
    let (result, expected): (Result<AddrStr, String>, &'static str) = if is("fi_sockaddr_in") {
        (
            parse_sin(body),
            "fi_sockaddr_in://<ipv4>[:<port>] or fi_sockaddr_in://:<port>",
        )
    } else if is("fi_sockaddr_in6") {
        (
            parse_sin6(body),
            "fi_sockaddr_in6://[<ipv6>][:<port>] or fi_sockaddr_in6://:<port>",
        )
    } else if is("fi_sockaddr_ib") {
        (
            parse_sib(body),
            "fi_sockaddr_ib://[<gid>]:<pkey>:<port_space>:<scope_id>[:<port>]",
        )
    } else if is("fi_addr_psmx") {
        (
            hex_fields::<1>(body).map(|[a]| AddrStr::Psmx(a)),
            "fi_addr_psmx://<hex>",
        )
    } else if is("fi_addr_psmx2") {
        (
            hex_fields::<2>(body).map(AddrStr::Psmx2),
            "fi_addr_psmx2://<hex>:<hex>",
        )
    } else if is("fi_addr_psmx3") {
        (
            hex_fields::<4>(body).map(AddrStr::Psmx3),
            "fi_addr_psmx3://<hex>:<hex>:<hex>:<hex>",
        )
    } else if is("fi_addr_opx") {
        (
            hex_fields::<1>(body).map(|[a]| AddrStr::Opx(a)),
            "fi_addr_opx://<hex>",
        )
    } else if is("fi_addr_efa") {
        (parse_efa(body), "fi_addr_efa://[<gid>][:<qpn>[:<qkey>]]")
    } else if is("fi_addr_ib_ud") {
        (
            parse_ib_ud(body),
            "fi_addr_ib_ud://<gid>:<qpn>:<lid>:<pkey>:<sl> (hex numbers)",
        )
    } else if UNSUPPORTED.iter().any(|u| is(u)) {
        return Err((
            format!(
                "{} addresses cannot be converted (libfabric returns FI_ENOSYS)",
                scheme.to_ascii_lowercase()
            ),
            KNOWN,
        ));
    } else {
        return Err((format!("unknown FI_ADDR_STR format {scheme:?}"), KNOWN));
    };
    result.map_err(|problem| (problem, expected))
}

fn int_in<T: TryFrom<u64>>(
    what: &str,
    text: &str,
    parsed: Result<u64, IntProblem>,
) -> Result<T, String> {
    let n = parsed.map_err(|p| match p {
        IntProblem::Empty => format!("the {what} is missing"),
        p => format!("{what}: {p}"),
    })?;
    T::try_from(n).map_err(|_| format!("{what} {text} is out of range"))
}

fn port(text: &str) -> Result<u16, String> {
    int_in("port", text, parse_u64(text))
}

fn ipv6(what: &str, text: &str) -> Result<Ipv6Addr, String> {
    text.parse()
        .map_err(|_| format!("{what} {text:?} is not an IPv6 address"))
}

fn parse_sin(body: &str) -> Result<AddrStr, String> {
    if let Some(p) = body.strip_prefix(':') {
        return Ok(AddrStr::SockaddrIn {
            ip: None,
            port: Some(port(p)?),
        });
    }
    let (ip_text, port_text) = match body.split_once(':') {
        Some((ip, p)) => (ip, Some(p)),
        None => (body, None),
    };
    if ip_text.is_empty() {
        return Err("the address is missing".to_owned());
    }
    let ip = ip_text
        .parse::<Ipv4Addr>()
        .map_err(|_| format!("{ip_text:?} is not an IPv4 address"))?;
    Ok(AddrStr::SockaddrIn {
        ip: Some(ip),
        port: port_text.map(port).transpose()?,
    })
}

/// Splits `[<inside>]<rest>`.
fn bracketed(body: &str) -> Result<(&str, &str), String> {
    let inner = body
        .strip_prefix('[')
        .ok_or_else(|| "expected '[' before the address".to_owned())?;
    inner
        .split_once(']')
        .ok_or_else(|| "no closing ']' after the address".to_owned())
}

fn parse_sin6(body: &str) -> Result<AddrStr, String> {
    if let Some(p) = body.strip_prefix(':') {
        return Ok(AddrStr::SockaddrIn6 {
            ip: None,
            port: Some(port(p)?),
        });
    }
    let (ip_text, rest) = bracketed(body)?;
    let ip = ipv6("address", ip_text)?;
    let port = match rest {
        "" => None,
        r => Some(port(
            r.strip_prefix(':')
                .ok_or_else(|| format!("unexpected {r:?} after ']'"))?,
        )?),
    };
    Ok(AddrStr::SockaddrIn6 { ip: Some(ip), port })
}

fn parse_sib(body: &str) -> Result<AddrStr, String> {
    let (gid_text, rest) = bracketed(body)?;
    let gid = ipv6("GID", gid_text)?;
    let rest = rest
        .strip_prefix(':')
        .ok_or_else(|| "expected ':<pkey>' after the GID".to_owned())?;
    let fields: Vec<&str> = rest.split(':').collect();
    if !(3..=4).contains(&fields.len()) {
        return Err(format!(
            "{} ':'-separated numbers after the GID, expected 3 or 4",
            fields.len()
        ));
    }
    Ok(AddrStr::SockaddrIb {
        gid,
        pkey: int_in("pkey", fields[0], parse_c_uint(fields[0]))?,
        port_space: int_in("port space", fields[1], parse_c_uint(fields[1]))?,
        scope_id: int_in("scope id", fields[2], parse_c_uint(fields[2]))?,
        port: fields
            .get(3)
            .map(|p| int_in("port", p, parse_c_uint(p)))
            .transpose()?,
    })
}

fn hex_fields<const N: usize>(body: &str) -> Result<[u64; N], String> {
    let fields: Vec<&str> = body.split(':').collect();
    if fields.len() != N {
        return Err(format!(
            "{} ':'-separated hex numbers, expected {N}",
            fields.len()
        ));
    }
    let mut out = [0u64; N];
    for (slot, text) in out.iter_mut().zip(&fields) {
        *slot = int_in("hex number", text, parse_hex(text))?;
    }
    Ok(out)
}

fn parse_efa(body: &str) -> Result<AddrStr, String> {
    let (gid_text, rest) = bracketed(body)?;
    let gid = ipv6("GID", gid_text)?;
    if rest.is_empty() {
        return Ok(AddrStr::Efa {
            gid,
            qpn: None,
            qkey: None,
        });
    }
    let rest = rest
        .strip_prefix(':')
        .ok_or_else(|| format!("unexpected {rest:?} after ']'"))?;
    let (qpn_text, qkey_text) = match rest.split_once(':') {
        Some((a, b)) => (a, Some(b)),
        None => (rest, None),
    };
    Ok(AddrStr::Efa {
        gid,
        qpn: Some(int_in("qpn", qpn_text, parse_u64(qpn_text))?),
        qkey: qkey_text
            .map(|t| int_in("qkey", t, parse_u64(t)))
            .transpose()?,
    })
}

fn parse_ib_ud(body: &str) -> Result<AddrStr, String> {
    let mut parts = body.rsplitn(5, ':');
    let (Some(sl), Some(pkey), Some(lid), Some(qpn), Some(gid)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err("expected <gid>:<qpn>:<lid>:<pkey>:<sl>".to_owned());
    };
    Ok(AddrStr::IbUd {
        gid: ipv6("GID", gid)?,
        qpn: int_in("qpn", qpn, parse_hex(qpn))?,
        lid: int_in("lid", lid, parse_hex(lid))?,
        pkey: int_in("pkey", pkey, parse_hex(pkey))?,
        sl: int_in("sl", sl, parse_hex(sl))?,
    })
}

/// Whether `s` reads as a number rather than a name: with an optional
/// sign, a decimal number with a fraction or an exponent (`1.5`, `1e3`,
/// `.5`), or dot-separated integers in C's forms (decimal, octal with a
/// leading `0`, hex after `0x`), however many (`16`, `0x10`, `010`,
/// `127.1`, `0177.0.0.1`, `1.2.3.4.5`). `getaddrinfo` reads most of these
/// as IPv4 addresses (`inet_aton`: `0x10` is 0.0.0.16), and no host or
/// interface is named so; a real dotted quad never gets here (it parsed as
/// an IP address).
fn reads_as_number(s: &str) -> bool {
    fn unsigned(t: &str) -> &str {
        t.strip_prefix(['+', '-']).unwrap_or(t)
    }
    let body = unsigned(s);
    if !body.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return false;
    }
    let float = |t: &str| t.starts_with(|c: char| c.is_ascii_digit()) && t.parse::<f64>().is_ok();
    let c_integer = |t: &str| match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()),
    };
    if body.parse::<f64>().is_ok() {
        return true;
    }
    let labels = || body.split('.').map(unsigned);
    labels().any(|l| !l.is_empty()) && labels().all(|l| l.is_empty() || c_integer(l) || float(l))
}

/// Whether `s` can name a Linux network interface (`dev_valid_name`,
/// restricted to printable ASCII).
fn is_ifname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_IFNAME
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':')
}

/// Whether `s` is a syntactically valid host name (RFC 1123 labels, with
/// `_` tolerated as resolvers do).
fn is_hostname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_HOSTNAME
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl FromStr for RailAddr {
    type Err = ConfigError;

    /// Parses one address; errors are reported against `FI_OFI_MRAIL_ADDR`.
    /// A comma is not part of any address, so `"a,b"` is an error here
    /// (use [`RailAddr::parse_list`]).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_one(VAR, s)
    }
}

impl fmt::Display for RailAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RailAddr::AddrStr(a) => write!(f, "{a}"),
            RailAddr::Ip(ip) => write!(f, "{ip}"),
            RailAddr::Interface(s) | RailAddr::Host(s) | RailAddr::InterfaceOrHost(s) => {
                f.write_str(s)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(s: &str) -> RailAddr {
        let a: RailAddr = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(a.to_string().parse::<RailAddr>().unwrap(), a, "{s}");
        a
    }

    #[test]
    fn every_format_parses_and_round_trips() {
        for s in [
            "fi_sockaddr_in://10.0.0.1:80",
            "fi_sockaddr_in://10.0.0.1",
            "fi_sockaddr_in://:80",
            "FI_SOCKADDR_IN://10.0.0.1:0",
            "fi_sockaddr_in6://[fe80::1]:80",
            "fi_sockaddr_in6://[::]",
            "fi_sockaddr_in6://:80",
            "fi_sockaddr_ib://[fe80::1]:0xffff:0x2:0x0",
            "fi_sockaddr_ib://[fe80::1]:65535:2:0:7471",
            "fi_addr_psmx://1f2e",
            "fi_addr_psmx2://0x1:ff",
            "fi_addr_psmx3://1:2:3:4",
            "fi_addr_opx://0xdeadbeef",
            "fi_addr_efa://[fe80::1]",
            "fi_addr_efa://[fe80::1]:5",
            "fi_addr_efa://[fe80::1]:5:4294967295",
            "fi_addr_ib_ud://fe80::1:1a:2b:ffff:f",
            "fi_addr_ib_ud://:::1:2:3:4",
        ] {
            assert!(matches!(round_trip(s), RailAddr::AddrStr(_)), "{s}");
        }
    }

    #[test]
    fn words_are_classified() {
        assert_eq!(round_trip("eth0"), RailAddr::InterfaceOrHost("eth0".into()));
        assert_eq!(
            round_trip("eth0.100"),
            RailAddr::InterfaceOrHost("eth0.100".into())
        );
        assert_eq!(
            round_trip("veth@if3"),
            RailAddr::Interface("veth@if3".into())
        );
        assert_eq!(
            round_trip("a-very-long-host-name"),
            RailAddr::Host("a-very-long-host-name".into())
        );
        assert!(matches!(round_trip("::1"), RailAddr::Ip(IpAddr::V6(_))));
        assert!(matches!(
            round_trip("127.0.0.1"),
            RailAddr::Ip(IpAddr::V4(_))
        ));
    }

    #[test]
    fn bad_addresses() {
        for s in [
            "fi_sockaddr_in://",
            "fi_sockaddr_in://300.0.0.1",
            "fi_sockaddr_in://10.0.0.1:65536",
            "fi_sockaddr_in://10.0.0.1:80/x",
            "fi_sockaddr_in6://fe80::1",
            "fi_sockaddr_in6://[fe80::1",
            "fi_sockaddr_in6://[fe80::1]x",
            "fi_sockaddr_ib://[fe80::1]:0x10000:0:0",
            "fi_addr_psmx2://1",
            "fi_addr_psmx3://1:2:3:g",
            "fi_addr_efa://[fe80::1]:70000",
            "fi_addr_ib_ud://fe80::1:1:2:3",
            "fi_addr_ib_ud://fe80::1:1:2:3:100",
            "fi_addr_mlx://1",
            "foo://bar",
            "://x",
            "-eth0.example.org-",
            "has space",
            "a/b",
            "é",
        ] {
            assert!(s.parse::<RailAddr>().is_err(), "{s}");
        }
    }

    #[test]
    fn words_that_read_as_numbers_are_refused() {
        for s in [
            "0x10",
            "0X1f",
            "0x",
            "010",
            "16",
            "0",
            "127.1",
            "127.0.1",
            "0177.0.0.1",
            "0x7f.0.0.1",
            "1.2.3.4.5",
            "256.0.0.1",
            "1.2.3.04",
            "1.2.3.-4",
            "1.5",
            "1.",
            ".5",
            "1e3",
            "1.5e2",
            "-1",
            "+1",
            "-1.5",
            "-0x10",
            "18446744073709551616",
        ] {
            let e = s.parse::<RailAddr>().unwrap_err();
            assert_eq!(e.item(), s);
            assert!(e.problem().unwrap().contains("reads as a number"), "{e}");
        }
        // Names that merely start with a digit, or contain digits, stay names.
        for s in [
            "1a",
            "3com.example",
            "123.example.org",
            "0xg",
            "1-2",
            "eth0",
            "e1000",
            "-x",
        ] {
            assert!(s.parse::<RailAddr>().is_ok(), "{s}");
        }
        assert!(!reads_as_number("."));
        assert!(!reads_as_number(".."));
        assert!(!reads_as_number("inf"));
        assert!(!reads_as_number("nan"));
    }
}
