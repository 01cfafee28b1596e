//! Where the name server listens and who may change its table, decided
//! without I/O from the host's addresses and a connection's peer address.
//!
//! * **Listening.** [`listen_ips`]: the loopback addresses (`127.0.0.1`,
//!   then `::1`) and every address configured on the host's interfaces when
//!   the server starts (`getifaddrs`), each bound on its own, never the
//!   wildcard. Loopback serves the node's own processes; the interface
//!   addresses serve the clients of other nodes, which query the host name
//!   or address they know the node by (what a soft engine's `bind` address
//!   or a native engine's node name is). IPv6 link-local addresses are left
//!   out (binding one needs its interface), and so are other loopback
//!   addresses such as the `127.0.1.1` some distributions give the host
//!   name: query `localhost` or an interface address instead. Addresses
//!   added after the start are not served.
//! * **Changing the table.** Registrations are considered only from an
//!   [`Origin::Local`] peer ([`LocalHost::origin`]): one whose address is
//!   loopback or one of the host's own. A TCP peer cannot claim such a
//!   source address from another host, since the handshake's answer would
//!   never reach it. Being local is not enough: which local process may
//!   change which entry is the owning sessions' rule (`session.rs`,
//!   `registry.rs`). QUERY is answered whatever the origin.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Where a connection comes from, as far as registrations go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// This host: ADD and DEL are carried out.
    Local,
    /// Another host: ADD and DEL are refused, QUERY is answered.
    Remote,
}

/// The addresses that count as this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LocalHost {
    /// Every loopback address (`127.0.0.0/8`, `::1`) counts.
    loopback: bool,
    /// The host's own addresses, canonical (no IPv4-mapped IPv6).
    addrs: Vec<IpAddr>,
}

impl LocalHost {
    /// Loopback plus `addrs` (the host's own addresses).
    pub(crate) fn new(addrs: impl IntoIterator<Item = IpAddr>) -> LocalHost {
        let mut addrs: Vec<IpAddr> = addrs.into_iter().map(|a| a.to_canonical()).collect();
        addrs.sort();
        addrs.dedup();
        LocalHost {
            loopback: true,
            addrs,
        }
    }

    /// Exactly `addrs`, without the rest of the loopback range: lets a test
    /// on loopback play a foreign peer from another loopback address.
    #[cfg(test)]
    pub(crate) fn exactly(addrs: impl IntoIterator<Item = IpAddr>) -> LocalHost {
        LocalHost {
            loopback: false,
            ..LocalHost::new(addrs)
        }
    }

    /// Where a connection from `peer` comes from.
    pub(crate) fn origin(&self, peer: IpAddr) -> Origin {
        let peer = peer.to_canonical();
        if (self.loopback && peer.is_loopback()) || self.addrs.contains(&peer) {
            Origin::Local
        } else {
            Origin::Remote
        }
    }
}

/// The addresses configured on the host's interfaces now (every family
/// the server speaks); empty, with a warning, if the system cannot say.
pub(crate) fn host_addrs() -> Vec<IpAddr> {
    let found = match nix::ifaddrs::getifaddrs() {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(
                "name server: cannot list the host's addresses ({e}); serving loopback only"
            );
            return Vec::new();
        }
    };
    found
        .filter_map(|entry| {
            let a = entry.address?;
            if let Some(v4) = a.as_sockaddr_in() {
                Some(IpAddr::V4(v4.ip()))
            } else {
                a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
            }
        })
        .collect()
}

/// What a server binds, in order: `127.0.0.1`, `::1`, then each of
/// `host` that can be bound on its own and is not loopback (no wildcard,
/// multicast, broadcast or IPv6 link-local address), without repeats.
pub(crate) fn listen_ips(host: &[IpAddr]) -> Vec<IpAddr> {
    let mut ips = vec![
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ];
    for ip in host.iter().map(|a| a.to_canonical()) {
        let usable = match ip {
            IpAddr::V4(v4) => {
                !(v4.is_loopback() || v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast())
            }
            IpAddr::V6(v6) => {
                !(v6.is_loopback()
                    || v6.is_unspecified()
                    || v6.is_multicast()
                    || v6.is_unicast_link_local())
            }
        };
        if usable && !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    ips
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_and_own_addresses_are_local() {
        let host = LocalHost::new([ip("198.18.0.1"), ip("fd00::1")]);
        for peer in [
            "127.0.0.1",
            "127.3.2.1",
            "::1",
            "198.18.0.1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:198.18.0.1",
        ] {
            assert_eq!(host.origin(ip(peer)), Origin::Local, "{peer}");
        }
    }

    #[test]
    fn other_addresses_are_remote() {
        let host = LocalHost::new([ip("198.18.0.1"), ip("fd00::1")]);
        for peer in [
            "198.18.0.2",
            "198.19.255.254",
            "fd00::2",
            "0.0.0.0",
            "::",
            "::ffff:198.18.0.2",
        ] {
            assert_eq!(host.origin(ip(peer)), Origin::Remote, "{peer}");
        }
        // With no address of its own, only loopback is the host.
        assert_eq!(LocalHost::new([]).origin(ip("198.18.0.1")), Origin::Remote);
    }

    #[test]
    fn exactly_leaves_the_rest_of_loopback_out() {
        let host = LocalHost::exactly([ip("127.0.0.1")]);
        assert_eq!(host.origin(ip("127.0.0.1")), Origin::Local);
        assert_eq!(host.origin(ip("127.0.0.2")), Origin::Remote);
    }

    #[test]
    fn listens_on_loopback_then_the_hosts_addresses_never_the_wildcard() {
        let host = [
            ip("127.0.0.1"),
            ip("198.18.0.1"),
            ip("::1"),
            ip("fd00::1"),
            ip("fe80::1"),
            ip("0.0.0.0"),
            ip("224.0.0.1"),
            ip("198.18.0.1"),
            ip("127.0.1.1"),
        ];
        assert_eq!(
            listen_ips(&host),
            [ip("127.0.0.1"), ip("::1"), ip("198.18.0.1"), ip("fd00::1")]
        );
        assert_eq!(listen_ips(&[]), [ip("127.0.0.1"), ip("::1")]);
    }
}
