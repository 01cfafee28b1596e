//! The rails' network links as the system reports them: the I/O edge of
//! failover's link detection.
//!
//! At enable the endpoint looks up, for each rail's IPv4 address, the
//! interface that carries it (`getifaddrs`). Every [`CHECK_EVERY`] its
//! progress asks [`LinkWatch::sample`] whether each such interface is up
//! with its carrier (`IFF_UP` and `IFF_LOWER_UP`: set down, a veth whose
//! peer went down, a cable pulled, all clear one of them; `IFF_RUNNING`
//! is not used, as the kernel reports a new link's operational state up
//! to a second late while traffic already flows), and feeds the
//! answers to the sans-IO [`RailHealth`](super::core::rail_health::RailHealth).
//! Rails on a loopback interface, or whose interface cannot be found, are
//! not watched (their loss shows as their peers' failures instead).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// How often the links are looked at.
pub(super) const CHECK_EVERY: Duration = Duration::from_millis(50);

/// The rails' interfaces and when to look at them next.
#[derive(Debug)]
pub(crate) struct LinkWatch {
    /// Per rail, the interface to watch.
    ifaces: Vec<Option<String>>,
    next: Instant,
}

impl LinkWatch {
    /// Finds the interfaces of the rails at `ips` (`None`: not an IP
    /// rail).
    pub(crate) fn new(ips: &[Option<Ipv4Addr>]) -> Self {
        let mut ifaces = vec![None; ips.len()];
        if let Ok(addrs) = nix::ifaddrs::getifaddrs() {
            for a in addrs {
                let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) else {
                    continue;
                };
                let loopback = a
                    .flags
                    .contains(nix::net::if_::InterfaceFlags::IFF_LOOPBACK);
                for (i, ip) in ips.iter().enumerate() {
                    if *ip == Some(sin.ip()) && !loopback && ifaces[i].is_none() {
                        ifaces[i] = Some(a.interface_name.clone());
                    }
                }
            }
        }
        LinkWatch {
            ifaces,
            next: Instant::now(),
        }
    }

    /// Whether any rail is watched.
    pub(crate) fn watches_any(&self) -> bool {
        self.ifaces.iter().any(Option::is_some)
    }

    /// Whether it is time to look again.
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.watches_any() && now >= self.next
    }

    /// Per rail: `Some(up)` for a watched rail's link, `None` otherwise.
    /// An interface that is gone counts as down.
    pub(crate) fn sample(&mut self, now: Instant) -> Vec<Option<bool>> {
        self.next = now + CHECK_EVERY;
        let mut up = vec![None; self.ifaces.len()];
        for (i, name) in self.ifaces.iter().enumerate() {
            if name.is_some() {
                up[i] = Some(false);
            }
        }
        let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
            // Nothing to go by: report no change.
            return vec![None; self.ifaces.len()];
        };
        let running =
            nix::net::if_::InterfaceFlags::IFF_UP | nix::net::if_::InterfaceFlags::IFF_LOWER_UP;
        for a in addrs {
            for (i, name) in self.ifaces.iter().enumerate() {
                if name.as_deref() == Some(a.interface_name.as_str()) && a.flags.contains(running) {
                    up[i] = Some(true);
                }
            }
        }
        up
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_unknown_rails_are_not_watched() {
        let mut w = LinkWatch::new(&[
            Some(Ipv4Addr::LOCALHOST),
            None,
            Some(Ipv4Addr::new(198, 19, 255, 254)),
        ]);
        assert!(!w.watches_any());
        assert!(!w.due(Instant::now()));
        assert_eq!(w.sample(Instant::now()), vec![None, None, None]);
    }
}
