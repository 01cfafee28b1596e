//! Resolving `FI_OFI_MRAIL_ADDR` items to rail addresses.
//!
//! The configuration layer classifies each item of `FI_OFI_MRAIL_ADDR`
//! ([`RailAddr`]) without touching the system. Before the multi-rail
//! provider opens its rails, each item is turned here into the IPv4 address
//! (and optional port) that the rail's soft-engine endpoint binds to, since a
//! soft-engine endpoint id carries an IPv4 address
//! ([`SoftEpid`](crate::engine::soft::SoftEpid)).
//!
//! | item | resolves to |
//! | --- | --- |
//! | `fi_sockaddr_in://<ipv4>[:<port>]` | that address; port 0 means any port |
//! | an IPv4 literal | that address |
//! | an interface name | the interface's first IPv4 address (`getifaddrs`) |
//! | a host name | the first IPv4 address the system resolver gives |
//! | a word that can be either | the interface if one has that name, else the host (C's order) |
//!
//! Everything else is an error: IPv6 addresses, `fi_sockaddr_in://:<port>`
//! without an address, and `FI_ADDR_STR` formats that are not IP addresses
//! (`fi_addr_psmx2://...` and the like).
//!
//! Error kinds: an item that can never name a rail (wrong family or
//! format, no address) is [`ErrorKind::Inval`]; a name that does not
//! resolve on this machine (no such interface, no IPv4 address on it, an
//! unknown host) is [`ErrorKind::NoData`], the kind libfabric uses when a
//! device is not there. Every message names the item as written and the
//! variable it came from: `FI_OFI_MRAIL_ADDR`, or `FI_OFI_MRAIL_ADDR_STRC`
//! for rails read from the deprecated variable ([`resolve_config_rails`]).
//!
//! Resolution contacts nothing but the local interface table and the
//! system resolver. The lookups go through an internal trait so that the
//! unit tests can exercise every branch with a fake system.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};

use super::{AddrStr, MrailConfig, RailAddr, ADDR_VAR};
use crate::{Error, ErrorKind, Result};

/// One rail's resolved address: the IPv4 address its endpoint binds to and,
/// when the item gave one, the port.
///
/// Displayed as `ip` or `ip:port`:
///
/// ```
/// use psmrail::mrail::resolve::ResolvedRail;
/// use std::net::Ipv4Addr;
///
/// let rail = ResolvedRail { ip: Ipv4Addr::new(198, 18, 0, 1), port: Some(7000) };
/// assert_eq!(rail.to_string(), "198.18.0.1:7000");
/// let rail = ResolvedRail { port: None, ..rail };
/// assert_eq!(rail.to_string(), "198.18.0.1");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResolvedRail {
    /// The IPv4 address of the rail.
    pub ip: Ipv4Addr,
    /// The port to bind, or `None` for any port (an absent port and port 0
    /// both mean any port).
    pub port: Option<u16>,
}

impl fmt::Display for ResolvedRail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.ip),
            None => write!(f, "{}", self.ip),
        }
    }
}

/// Resolves one `FI_OFI_MRAIL_ADDR` item (see the [module docs](self) for
/// the rules), looking interface and host names up on this machine.
///
/// ```
/// use psmrail::config::RailAddr;
/// use psmrail::mrail::resolve::resolve_rail;
/// use psmrail::ErrorKind;
/// use std::net::Ipv4Addr;
///
/// let rail = resolve_rail(&"fi_sockaddr_in://198.18.0.1:7000".parse().unwrap()).unwrap();
/// assert_eq!((rail.ip, rail.port), (Ipv4Addr::new(198, 18, 0, 1), Some(7000)));
///
/// let rail = resolve_rail(&RailAddr::Ip("198.18.1.1".parse().unwrap())).unwrap();
/// assert_eq!((rail.ip, rail.port), (Ipv4Addr::new(198, 18, 1, 1), None));
///
/// let err = resolve_rail(&"fe80::1".parse().unwrap()).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Inval);
/// assert!(err.message().contains("IPv6 is not supported"));
/// ```
pub fn resolve_rail(addr: &RailAddr) -> Result<ResolvedRail> {
    resolve_with(ADDR_VAR, addr, &System)
}

/// Resolves every item of `FI_OFI_MRAIL_ADDR`, in order; the first item
/// that does not resolve is the error.
///
/// ```
/// use psmrail::config::RailAddr;
/// use psmrail::mrail::resolve::resolve_rails;
///
/// let items = RailAddr::parse_list("198.18.0.1,fi_sockaddr_in://198.18.1.1:0").unwrap();
/// let rails = resolve_rails(&items).unwrap();
/// let shown: Vec<String> = rails.iter().map(|r| r.to_string()).collect();
/// assert_eq!(shown, ["198.18.0.1", "198.18.1.1"]);
/// ```
pub fn resolve_rails(addrs: &[RailAddr]) -> Result<Vec<ResolvedRail>> {
    resolve_all(ADDR_VAR, addrs, &System)
}

/// Resolves the rails of `config`, in order, as [`resolve_rails`] does;
/// errors name the variable the rails came from
/// ([`MrailConfig::addr_var`]).
///
/// ```
/// use psmrail::config::MrailConfig;
/// use psmrail::mrail::resolve::resolve_config_rails;
///
/// let config = MrailConfig::from_vars(&[("FI_OFI_MRAIL_ADDR_STRC", "127.0.0.1,fe80::1")])?;
/// let err = resolve_config_rails(&config).unwrap_err();
/// assert!(err.message().starts_with("FI_OFI_MRAIL_ADDR_STRC item \"fe80::1\": "));
/// # Ok::<(), psmrail::config::ConfigError>(())
/// ```
pub fn resolve_config_rails(config: &MrailConfig) -> Result<Vec<ResolvedRail>> {
    resolve_all(config.addr_var(), config.rails(), &System)
}

/// Resolves one item of `var` (any variable in this grammar), looking
/// names up on this machine; errors name `var`.
pub(crate) fn resolve_item(var: &str, addr: &RailAddr) -> Result<ResolvedRail> {
    resolve_with(var, addr, &System)
}

fn resolve_all(var: &str, addrs: &[RailAddr], sys: &dyn Lookup) -> Result<Vec<ResolvedRail>> {
    addrs.iter().map(|a| resolve_with(var, a, sys)).collect()
}

/// What an interface lookup found.
#[derive(Clone, Debug, PartialEq, Eq)]
enum IfaceFound {
    /// The interface's first IPv4 address.
    Ipv4(Ipv4Addr),
    /// The interface exists but has no IPv4 address.
    NoIpv4,
    /// No interface has that name.
    Missing,
    /// The interface table could not be read (the reason).
    Failed(String),
}

/// What a host lookup found.
#[derive(Clone, Debug, PartialEq, Eq)]
enum HostFound {
    /// The first IPv4 address of the host.
    Ipv4(Ipv4Addr),
    /// The name resolves, but only to IPv6 addresses.
    OnlyIpv6,
    /// The name does not resolve (the resolver's reason).
    Unresolved(String),
}

/// The two system lookups resolution needs.
trait Lookup {
    /// Looks up a network interface by name.
    fn interface(&self, name: &str) -> IfaceFound;
    /// Looks up a host name with the system resolver.
    fn host(&self, name: &str) -> HostFound;
}

/// The real system: `getifaddrs` and the system resolver.
struct System;

impl Lookup for System {
    fn interface(&self, name: &str) -> IfaceFound {
        let addrs = match nix::ifaddrs::getifaddrs() {
            Ok(addrs) => addrs,
            Err(e) => return IfaceFound::Failed(format!("getifaddrs failed: {e}")),
        };
        let mut exists = false;
        for entry in addrs.filter(|a| a.interface_name == name) {
            exists = true;
            if let Some(sin) = entry.address.as_ref().and_then(|a| a.as_sockaddr_in()) {
                return IfaceFound::Ipv4(sin.ip());
            }
        }
        if exists {
            IfaceFound::NoIpv4
        } else {
            IfaceFound::Missing
        }
    }

    fn host(&self, name: &str) -> HostFound {
        match (name, 0).to_socket_addrs() {
            Ok(addrs) => {
                let mut any = false;
                for a in addrs {
                    any = true;
                    if let IpAddr::V4(ip) = a.ip() {
                        return HostFound::Ipv4(ip);
                    }
                }
                if any {
                    HostFound::OnlyIpv6
                } else {
                    HostFound::Unresolved("the resolver returned no address".to_owned())
                }
            }
            Err(e) => HostFound::Unresolved(e.to_string()),
        }
    }
}

/// An error about `item` of `var`.
fn item_error(var: &str, kind: ErrorKind, item: &RailAddr, problem: impl fmt::Display) -> Error {
    Error::new(kind, format!("{var} item \"{item}\": {problem}"))
}

const IPV6_PROBLEM: &str =
    "IPv6 is not supported: a soft-engine endpoint id carries an IPv4 address";

/// Resolves `addr`, an item of `var`, with the lookups of `sys`.
fn resolve_with(var: &str, addr: &RailAddr, sys: &dyn Lookup) -> Result<ResolvedRail> {
    let found = |ip| Ok(ResolvedRail { ip, port: None });
    match addr {
        RailAddr::AddrStr(AddrStr::SockaddrIn { ip: Some(ip), port }) => Ok(ResolvedRail {
            ip: *ip,
            port: port.filter(|&p| p != 0),
        }),
        RailAddr::AddrStr(AddrStr::SockaddrIn { ip: None, .. }) => Err(item_error(
            var,
            ErrorKind::Inval,
            addr,
            "an address is needed, not only a port",
        )),
        RailAddr::AddrStr(AddrStr::SockaddrIn6 { .. }) | RailAddr::Ip(IpAddr::V6(_)) => {
            Err(item_error(var, ErrorKind::Inval, addr, IPV6_PROBLEM))
        }
        RailAddr::AddrStr(other) => Err(item_error(
            var,
            ErrorKind::Inval,
            addr,
            format_args!(
                "{} addresses are not IP addresses; an IPv4 address is needed",
                other.format_name()
            ),
        )),
        RailAddr::Ip(IpAddr::V4(ip)) => found(*ip),
        RailAddr::Interface(name) => match interface_problem(sys, name) {
            Ok(ip) => found(ip),
            Err(problem) => Err(item_error(var, ErrorKind::NoData, addr, problem)),
        },
        RailAddr::Host(name) => match host_problem(sys, name) {
            Ok(ip) => found(ip),
            Err(problem) => Err(item_error(var, ErrorKind::NoData, addr, problem)),
        },
        RailAddr::InterfaceOrHost(name) => {
            let as_interface = match interface_problem(sys, name) {
                Ok(ip) => return found(ip),
                Err(problem) => problem,
            };
            match host_problem(sys, name) {
                Ok(ip) => found(ip),
                Err(as_host) => Err(item_error(
                    var,
                    ErrorKind::NoData,
                    addr,
                    format_args!("neither an interface ({as_interface}) nor a host ({as_host})"),
                )),
            }
        }
    }
}

/// The first IPv4 address of interface `name`, or what went wrong.
fn interface_problem(sys: &dyn Lookup, name: &str) -> Result<Ipv4Addr, String> {
    match sys.interface(name) {
        IfaceFound::Ipv4(ip) => Ok(ip),
        IfaceFound::NoIpv4 => Err(format!("network interface {name:?} has no IPv4 address")),
        IfaceFound::Missing => Err(format!("no network interface named {name:?}")),
        IfaceFound::Failed(why) => Err(format!("cannot look up interface {name:?}: {why}")),
    }
}

/// The first IPv4 address of host `name`, or what went wrong.
fn host_problem(sys: &dyn Lookup, name: &str) -> Result<Ipv4Addr, String> {
    match sys.host(name) {
        HostFound::Ipv4(ip) => Ok(ip),
        HostFound::OnlyIpv6 => Err(format!(
            "host {name:?} has only IPv6 addresses; {IPV6_PROBLEM}"
        )),
        HostFound::Unresolved(why) => Err(format!("host name {name:?} does not resolve: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake system: interfaces and hosts from tables.
    struct Fake {
        interfaces: Vec<(&'static str, IfaceFound)>,
        hosts: Vec<(&'static str, HostFound)>,
    }

    impl Lookup for Fake {
        fn interface(&self, name: &str) -> IfaceFound {
            self.interfaces
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(IfaceFound::Missing, |(_, f)| f.clone())
        }

        fn host(&self, name: &str) -> HostFound {
            self.hosts.iter().find(|(n, _)| *n == name).map_or(
                HostFound::Unresolved("unknown name".to_owned()),
                |(_, f)| f.clone(),
            )
        }
    }

    const IP1: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const IP2: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);

    fn fake() -> Fake {
        Fake {
            interfaces: vec![
                ("rail0", IfaceFound::Ipv4(IP1)),
                ("both", IfaceFound::Ipv4(IP1)),
                ("bare0", IfaceFound::NoIpv4),
                (
                    "broken",
                    IfaceFound::Failed("getifaddrs failed: EIO".to_owned()),
                ),
            ],
            hosts: vec![
                ("node1", HostFound::Ipv4(IP2)),
                ("both", HostFound::Ipv4(IP2)),
                ("v6only", HostFound::OnlyIpv6),
            ],
        }
    }

    fn item(s: &str) -> RailAddr {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    const VAR: &str = ADDR_VAR;

    fn ok(addr: RailAddr) -> ResolvedRail {
        resolve_with(VAR, &addr, &fake()).unwrap_or_else(|e| panic!("{addr}: {e}"))
    }

    /// The error for `addr`, checked to name the variable and the item.
    fn err(addr: RailAddr, kind: ErrorKind) -> String {
        let e = resolve_with(VAR, &addr, &fake()).expect_err(&addr.to_string());
        assert_eq!(e.kind(), kind, "{e}");
        let msg = e.message().to_owned();
        assert!(
            msg.starts_with(&format!("{VAR} item \"{addr}\": ")),
            "{msg}"
        );
        msg
    }

    #[test]
    fn sockaddr_in_gives_its_address_and_port() {
        let r = ok(item("fi_sockaddr_in://198.18.0.1:7000"));
        assert_eq!(
            r,
            ResolvedRail {
                ip: IP1,
                port: Some(7000)
            }
        );
        assert_eq!(ok(item("fi_sockaddr_in://198.18.0.1:0")).port, None);
        assert_eq!(ok(item("fi_sockaddr_in://198.18.0.1")).port, None);
    }

    #[test]
    fn sockaddr_in_without_an_address_is_invalid() {
        let msg = err(item("fi_sockaddr_in://:7000"), ErrorKind::Inval);
        assert!(msg.contains("an address is needed"), "{msg}");
    }

    #[test]
    fn ip_literals() {
        assert_eq!(
            ok(item("198.18.1.1")),
            ResolvedRail {
                ip: IP2,
                port: None
            }
        );
        for s in [
            "fe80::1",
            "fi_sockaddr_in6://[fe80::1]:7000",
            "fi_sockaddr_in6://:7",
        ] {
            let msg = err(item(s), ErrorKind::Inval);
            assert!(msg.contains(IPV6_PROBLEM), "{msg}");
        }
    }

    #[test]
    fn other_formats_are_not_ip_rails() {
        for (s, fmt) in [
            ("fi_addr_psmx2://1:2", "fi_addr_psmx2"),
            ("fi_addr_psmx://1f", "fi_addr_psmx"),
            ("fi_sockaddr_ib://[fe80::1]:1:2:3", "fi_sockaddr_ib"),
            ("fi_addr_efa://[fe80::1]", "fi_addr_efa"),
        ] {
            let msg = err(item(s), ErrorKind::Inval);
            assert!(
                msg.contains(&format!("{fmt} addresses are not IP addresses")),
                "{msg}"
            );
        }
    }

    #[test]
    fn interfaces() {
        assert_eq!(ok(RailAddr::Interface("rail0".into())).ip, IP1);
        let msg = err(RailAddr::Interface("nope0".into()), ErrorKind::NoData);
        assert!(
            msg.contains("no network interface named \"nope0\""),
            "{msg}"
        );
        let msg = err(RailAddr::Interface("bare0".into()), ErrorKind::NoData);
        assert!(msg.contains("\"bare0\" has no IPv4 address"), "{msg}");
        let msg = err(RailAddr::Interface("broken".into()), ErrorKind::NoData);
        assert!(msg.contains("getifaddrs failed"), "{msg}");
    }

    #[test]
    fn hosts() {
        assert_eq!(ok(RailAddr::Host("node1".into())).ip, IP2);
        let msg = err(RailAddr::Host("v6only".into()), ErrorKind::NoData);
        assert!(msg.contains("host \"v6only\" has only IPv6"), "{msg}");
        let msg = err(RailAddr::Host("unknown-node".into()), ErrorKind::NoData);
        assert!(
            msg.contains("\"unknown-node\" does not resolve: unknown name"),
            "{msg}"
        );
    }

    #[test]
    fn interface_or_host_tries_the_interface_first() {
        assert_eq!(ok(RailAddr::InterfaceOrHost("both".into())).ip, IP1);
        assert_eq!(ok(RailAddr::InterfaceOrHost("rail0".into())).ip, IP1);
        assert_eq!(ok(RailAddr::InterfaceOrHost("node1".into())).ip, IP2);
        let msg = err(RailAddr::InterfaceOrHost("bare0".into()), ErrorKind::NoData);
        assert!(msg.contains("has no IPv4 address"), "{msg}");
        assert!(msg.contains("\"bare0\" does not resolve"), "{msg}");
        let msg = err(RailAddr::InterfaceOrHost("eth9".into()), ErrorKind::NoData);
        assert!(msg.contains("no network interface named \"eth9\""), "{msg}");
        assert!(msg.contains("host name \"eth9\" does not resolve"), "{msg}");
    }

    #[test]
    fn a_list_stops_at_the_first_bad_item() {
        let items = RailAddr::parse_list("198.18.0.1,fe80::1,198.18.1.1").unwrap();
        let e = resolve_rails(&items).unwrap_err();
        assert!(e.message().contains("\"fe80::1\""), "{e}");
        let items = RailAddr::parse_list("198.18.0.1,fi_sockaddr_in://198.18.1.1:9").unwrap();
        assert_eq!(
            resolve_rails(&items).unwrap(),
            [
                ResolvedRail {
                    ip: IP1,
                    port: None
                },
                ResolvedRail {
                    ip: IP2,
                    port: Some(9)
                }
            ]
        );
    }

    #[test]
    fn errors_name_the_variable_the_rails_came_from() {
        let items = RailAddr::parse_list("node1,fe80::1").unwrap();
        let e = resolve_all("FI_OFI_MRAIL_ADDR_STRC", &items, &fake()).unwrap_err();
        assert_eq!(
            e.message(),
            format!("FI_OFI_MRAIL_ADDR_STRC item \"fe80::1\": {IPV6_PROBLEM}")
        );
        let config =
            MrailConfig::from_vars(&[("FI_OFI_MRAIL_ADDR_STRC", "psmrail-none0")]).unwrap();
        let e = resolve_config_rails(&config).unwrap_err();
        assert!(
            e.message()
                .starts_with("FI_OFI_MRAIL_ADDR_STRC item \"psmrail-none0\": "),
            "{e}"
        );
    }

    #[test]
    fn the_real_system_resolves_loopback() {
        let lo = resolve_rail(&RailAddr::InterfaceOrHost("lo".into())).unwrap();
        assert_eq!(
            lo,
            ResolvedRail {
                ip: Ipv4Addr::LOCALHOST,
                port: None
            }
        );
        let lo = resolve_rail(&RailAddr::Interface("lo".into())).unwrap();
        assert_eq!(lo.ip, Ipv4Addr::LOCALHOST);
        let host = resolve_rail(&RailAddr::Host("localhost".into())).unwrap();
        assert!(host.ip.is_loopback(), "{host}");
        let e = resolve_rail(&RailAddr::Interface("psmrail-none0".into())).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoData);
        assert!(
            e.message()
                .contains("no network interface named \"psmrail-none0\""),
            "{e}"
        );
    }
}
