//! Where a process listens for peers on other hosts: the soft engine's
//! address (`PSMRAIL_SOFT_ADDR`) and the name server's
//! (`PSMRAIL_NAME_SERVER_ADDR`).
//!
//! Both take the address forms of `FI_OFI_MRAIL_ADDR` ([`RailAddr`](super::RailAddr)): an
//! IPv4 address (`198.18.0.1`), an interface name (`eth0`: its first
//! IPv4 address), a host name (`node12`: the first IPv4 address the
//! system resolver gives), or `fi_sockaddr_in://<ipv4>[:<port>]`; a word
//! that can be an interface or a host is tried as an interface first.
//! Names are resolved when `getinfo` reads the variable, and every error
//! names the variable and the item.
//!
//! **IPv4 only.** A soft-engine endpoint id is the 64-bit PSM epid: the
//! IPv4 address (32 bits), the port (16) and an instance number (16) fill
//! it, so an IPv6 address cannot be carried. On a network with IPv6 only,
//! give the hosts an IPv4 address on the fabric's interface (any private
//! range; the engine never routes), or use the native engine over PSM's
//! own device.
//!
//! ```
//! use psmrail::config::{listen_addr, NameServerListen};
//! use std::net::Ipv4Addr;
//!
//! let soft = listen_addr::soft_addr_from_vars(&[("PSMRAIL_SOFT_ADDR", "lo")])?.unwrap();
//! assert_eq!(soft.ip, Ipv4Addr::LOCALHOST);
//!
//! let e = listen_addr::soft_addr_from_vars(&[("PSMRAIL_SOFT_ADDR", "::1")]).unwrap_err();
//! assert!(e.to_string().contains("PSMRAIL_SOFT_ADDR"), "{e}");
//! assert!(e.to_string().contains("IPv6 is not supported"), "{e}");
//!
//! let ns = listen_addr::name_server_from_vars(&[("PSMRAIL_NAME_SERVER_ADDR", "*")])?;
//! assert_eq!(ns, Some(NameServerListen::Everywhere));
//! # Ok::<(), psmrail::Error>(())
//! ```

use std::net::Ipv4Addr;

use super::env::read_var;
use super::rail_addr::parse_list_var;
use super::rail_resolve::{resolve_item, ResolvedRail};
use super::VarSource;
use crate::{Error, ErrorKind, Result};

/// `PSMRAIL_SOFT_ADDR`: the address soft endpoints listen on, which their
/// epids carry (default `127.0.0.1`: this host only).
pub const SOFT_ADDR_VAR: &str = "PSMRAIL_SOFT_ADDR";

/// `PSMRAIL_NAME_SERVER_ADDR`: where the name server listens besides
/// loopback: a list of addresses, or `*` for every address of the host.
pub const NAME_SERVER_ADDR_VAR: &str = "PSMRAIL_NAME_SERVER_ADDR";

/// What every error of this module ends with.
const EXPECTED: &str = "expected one IPv4 address (a dotted quad), interface name or host name \
     of this host, or fi_sockaddr_in://<ipv4>[:<port>]";

/// `e` with what was expected.
fn expecting(e: Error, also: &str) -> Error {
    Error::new(e.kind(), format!("{}; {EXPECTED}{also}", e.message()))
}

/// Where the name server of a node listens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NameServerListen {
    /// Loopback (`127.0.0.1`, `::1`) and these addresses: processes of
    /// other hosts can look names up at these addresses only. The
    /// default is loopback alone, plus the soft engine's address when it
    /// is not a loopback one.
    #[default]
    Loopback,
    /// Loopback and the given IPv4 addresses.
    LoopbackAnd(Vec<Ipv4Addr>),
    /// Loopback and every address of the host's interfaces (each bound on
    /// its own, never the wildcard): `PSMRAIL_NAME_SERVER_ADDR=*`.
    Everywhere,
}

impl NameServerListen {
    /// The default for a soft engine listening on `soft_bind`: loopback,
    /// and `soft_bind` when peers on other hosts can reach it there.
    pub fn for_soft_bind(soft_bind: Ipv4Addr) -> NameServerListen {
        if soft_bind.is_loopback() {
            NameServerListen::Loopback
        } else {
            NameServerListen::LoopbackAnd(vec![soft_bind])
        }
    }
}

/// Resolves `spec`, one address for `var` (see the [module docs](self)).
///
/// # Errors
/// `Inval` for a malformed item, a list, IPv6 or an address peers cannot
/// reach (`0.0.0.0`, broadcast, multicast); `NoData` for a name that does
/// not resolve here. The message names `var` and the item.
pub fn resolve_listen_addr(var: &'static str, spec: &str) -> Result<ResolvedRail> {
    let items = parse_list_var(var, spec).map_err(Error::from)?;
    let [item] = items.as_slice() else {
        return Err(Error::new(
            ErrorKind::Inval,
            format!(
                "{var}={spec:?}: one address, not a list of {}; {EXPECTED}",
                items.len()
            ),
        ));
    };
    let found = resolve_item(var, item).map_err(|e| expecting(e, ""))?;
    if found.ip.is_unspecified() || found.ip.is_broadcast() || found.ip.is_multicast() {
        return Err(Error::new(
            ErrorKind::Inval,
            format!(
                "{var} item {spec:?}: {} cannot be reached by peers; {EXPECTED}",
                found.ip
            ),
        ));
    }
    Ok(found)
}

/// `PSMRAIL_SOFT_ADDR` from `vars`, resolved (`None` when unset).
///
/// # Errors
/// As [`resolve_listen_addr`]; a value that is not UTF-8 is `Inval`.
pub fn soft_addr_from_vars<V: VarSource + ?Sized>(vars: &V) -> Result<Option<ResolvedRail>> {
    match read_var(vars, SOFT_ADDR_VAR).map_err(Error::from)? {
        None => Ok(None),
        Some(spec) => resolve_listen_addr(SOFT_ADDR_VAR, &spec).map(Some),
    }
}

/// `PSMRAIL_NAME_SERVER_ADDR` from `vars` (`None` when unset): `*`, or a
/// list of addresses in the forms of the [module docs](self), each
/// resolved.
///
/// # Errors
/// The first item that is malformed or does not resolve, named with the
/// variable.
pub fn name_server_from_vars<V: VarSource + ?Sized>(vars: &V) -> Result<Option<NameServerListen>> {
    let Some(spec) = read_var(vars, NAME_SERVER_ADDR_VAR).map_err(Error::from)? else {
        return Ok(None);
    };
    if spec == "*" {
        return Ok(Some(NameServerListen::Everywhere));
    }
    let items = parse_list_var(NAME_SERVER_ADDR_VAR, &spec).map_err(Error::from)?;
    let mut ips = Vec::with_capacity(items.len());
    for item in &items {
        let ip = resolve_item(NAME_SERVER_ADDR_VAR, item)
            .map_err(|e| expecting(e, " each, or * alone for every address of the host"))?
            .ip;
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    Ok(Some(NameServerListen::LoopbackAnd(ips)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soft(value: &str) -> Result<Option<ResolvedRail>> {
        soft_addr_from_vars(&[(SOFT_ADDR_VAR, value)])
    }

    #[test]
    fn every_form_of_one_address() {
        let lo = Ipv4Addr::LOCALHOST;
        assert_eq!(soft("127.0.0.1").unwrap().unwrap().ip, lo);
        assert_eq!(soft("lo").unwrap().unwrap().ip, lo);
        assert_eq!(soft("localhost").unwrap().unwrap().ip, lo);
        let with_port = soft("fi_sockaddr_in://127.0.0.1:7300").unwrap().unwrap();
        assert_eq!((with_port.ip, with_port.port), (lo, Some(7300)));
        assert_eq!(soft_addr_from_vars(&[("OTHER", "x")]).unwrap(), None);
    }

    #[test]
    fn malformed_or_unreachable_values_name_the_variable() {
        for (value, kind, says) in [
            ("", ErrorKind::Inval, "empty item"),
            ("0x10", ErrorKind::Inval, "reads as a number"),
            ("::1", ErrorKind::Inval, "IPv6 is not supported"),
            ("fi_sockaddr_in6://[::1]:5", ErrorKind::Inval, "IPv6"),
            ("0.0.0.0", ErrorKind::Inval, "cannot be reached by peers"),
            ("224.0.0.1", ErrorKind::Inval, "cannot be reached by peers"),
            (
                "127.0.0.1,lo",
                ErrorKind::Inval,
                "one address, not a list of 2",
            ),
            (
                "psmrail-no-such-if0",
                ErrorKind::NoData,
                "psmrail-no-such-if0",
            ),
            ("fi_addr_psmx://1234", ErrorKind::Inval, "not IP addresses"),
        ] {
            let e = soft(value).expect_err(value);
            assert_eq!(e.kind(), kind, "{value}: {e}");
            let text = e.to_string();
            assert!(text.contains(SOFT_ADDR_VAR), "{value}: {text}");
            assert!(text.contains(says), "{value}: {text}");
        }
    }

    #[test]
    fn the_name_server_listens_where_asked() {
        let ns = |v: &str| name_server_from_vars(&[(NAME_SERVER_ADDR_VAR, v)]);
        assert_eq!(ns("*").unwrap(), Some(NameServerListen::Everywhere));
        assert_eq!(
            ns("lo,127.0.0.1,198.18.0.1").unwrap(),
            Some(NameServerListen::LoopbackAnd(vec![
                Ipv4Addr::LOCALHOST,
                Ipv4Addr::new(198, 18, 0, 1)
            ]))
        );
        assert_eq!(name_server_from_vars(&[("OTHER", "*")]).unwrap(), None);
        for bad in ["", "*,lo", "::1", "psmrail-no-such-if0"] {
            let e = ns(bad).expect_err(bad);
            assert!(e.to_string().contains(NAME_SERVER_ADDR_VAR), "{bad}: {e}");
        }
        assert_eq!(
            NameServerListen::for_soft_bind(Ipv4Addr::LOCALHOST),
            NameServerListen::Loopback
        );
        assert_eq!(
            NameServerListen::for_soft_bind(Ipv4Addr::new(198, 18, 0, 1)),
            NameServerListen::LoopbackAnd(vec![Ipv4Addr::new(198, 18, 0, 1)])
        );
    }
}
