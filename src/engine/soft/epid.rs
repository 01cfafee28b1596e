//! Soft-engine endpoint ids: how to reach an endpoint, packed into an [`Epid`].
//!
//! A soft endpoint listens on one TCP address; several endpoints of one
//! process may share a listener and are told apart by an instance number.
//! All three are packed into the 64 bits of the [`Epid`]:
//!
//! | bits    | field                                        |
//! |---------|----------------------------------------------|
//! | 0..32   | IPv4 address (`u32::from(Ipv4Addr)`)         |
//! | 32..48  | TCP port (never 0)                           |
//! | 48..62  | instance (0 ..= [`MAX_INSTANCE`])            |
//! | 62, 63  | always 0                                     |
//!
//! Bits 62 and 63 stay clear because the layer above carries epids in tags
//! whose two top bits it reserves (`ARCHITECTURE.md`, "Kept as in C": bit 63
//! marks untagged messages, bit 62 long-RMA transfers). The port is never 0,
//! so no soft epid is `Epid(0)`, the value the C provider treats as "no
//! address".
//!
//! ```
//! use psmrail::engine::Epid;
//! use psmrail::engine::soft::SoftEpid;
//! use std::net::Ipv4Addr;
//!
//! let s = SoftEpid::new(Ipv4Addr::new(198, 18, 0, 1), 7000, 3).unwrap();
//! let e: Epid = s.into();
//! let back: Epid = e.to_string().parse().unwrap();
//! assert_eq!(SoftEpid::try_from(back).unwrap(), s);
//! assert_eq!(s.to_string(), "198.18.0.1:7000#3");
//! ```

use crate::engine::Epid;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::str::FromStr;

/// Largest instance number a soft epid can carry (14 bits).
pub const MAX_INSTANCE: u16 = (1 << 14) - 1;

/// The two top bits of an epid, which the layer above reserves.
pub const RESERVED_EPID_BITS: u64 = 0b11 << 62;

/// A soft endpoint's address: IPv4 address, TCP port and instance number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct SoftEpid {
    addr: Ipv4Addr,
    port: u16,
    instance: u16,
}

/// Why a value is not a soft endpoint id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SoftEpidError {
    /// The instance does not fit in 14 bits.
    #[error("instance {0} is too large for a soft epid (at most {MAX_INSTANCE})")]
    InstanceTooLarge(u32),
    /// Port 0 cannot be reached.
    #[error("port 0 cannot be reached: a soft epid needs the listening port")]
    PortZero,
    /// Bit 62 or 63 is set.
    #[error("{0} has bit 62 or 63 set, which soft epids keep clear")]
    ReservedBits(Epid),
    /// The text is neither `a.b.c.d:port#instance` nor an epid.
    #[error("{0:?} is not a soft epid: expected a.b.c.d:port#instance or fi_addr_psmx://<hex>")]
    BadText(String),
}

impl SoftEpid {
    /// Packs an address; errors for port 0 or an instance above
    /// [`MAX_INSTANCE`].
    pub fn new(addr: Ipv4Addr, port: u16, instance: u32) -> Result<Self, SoftEpidError> {
        if port == 0 {
            return Err(SoftEpidError::PortZero);
        }
        if instance > u32::from(MAX_INSTANCE) {
            return Err(SoftEpidError::InstanceTooLarge(instance));
        }
        Ok(SoftEpid {
            addr,
            port,
            instance: instance as u16,
        })
    }

    /// The IPv4 address.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The instance number within the listener.
    pub fn instance(&self) -> u16 {
        self.instance
    }

    /// Address and port together, for dialing.
    pub fn socket_addr(&self) -> SocketAddrV4 {
        SocketAddrV4::new(self.addr, self.port)
    }

    /// The packed 64-bit id.
    pub fn to_epid(self) -> Epid {
        Epid(
            u64::from(u32::from(self.addr))
                | (u64::from(self.port) << 32)
                | (u64::from(self.instance) << 48),
        )
    }

    /// Unpacks an id (the inverse of [`to_epid`](Self::to_epid)).
    pub fn from_epid(epid: Epid) -> Result<Self, SoftEpidError> {
        if epid.0 & RESERVED_EPID_BITS != 0 {
            return Err(SoftEpidError::ReservedBits(epid));
        }
        let addr = Ipv4Addr::from(epid.0 as u32);
        let port = (epid.0 >> 32) as u16;
        let instance = ((epid.0 >> 48) as u16) & MAX_INSTANCE;
        SoftEpid::new(addr, port, u32::from(instance))
    }
}

impl From<SoftEpid> for Epid {
    fn from(s: SoftEpid) -> Epid {
        s.to_epid()
    }
}

impl TryFrom<Epid> for SoftEpid {
    type Error = SoftEpidError;
    fn try_from(e: Epid) -> Result<Self, SoftEpidError> {
        SoftEpid::from_epid(e)
    }
}

impl fmt::Display for SoftEpid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}#{}", self.addr, self.port, self.instance)
    }
}

impl FromStr for SoftEpid {
    type Err = SoftEpidError;

    /// Parses `a.b.c.d:port#instance` (`#instance` optional, default 0) or
    /// an epid's text form (`fi_addr_psmx://<hex>`, `0x<hex>`).
    fn from_str(s: &str) -> Result<Self, SoftEpidError> {
        let bad = || SoftEpidError::BadText(s.to_owned());
        if let Some((host, rest)) = s.split_once(':') {
            if let Ok(addr) = host.parse::<Ipv4Addr>() {
                let (port, inst) = match rest.split_once('#') {
                    Some((p, i)) => (p, i),
                    None => (rest, "0"),
                };
                let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
                if !digits(port) || !digits(inst) {
                    return Err(bad());
                }
                let port: u16 = port.parse().map_err(|_| bad())?;
                let inst: u32 = inst.parse().map_err(|_| bad())?;
                return SoftEpid::new(addr, port, inst);
            }
        }
        let epid: Epid = s.parse().map_err(|_| bad())?;
        SoftEpid::from_epid(epid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_is_as_documented() {
        let s = SoftEpid::new(Ipv4Addr::new(10, 0, 0, 1), 0x1234, 5).unwrap();
        assert_eq!(s.to_epid(), Epid(0x0005_1234_0a00_0001));
        let max = SoftEpid::new(Ipv4Addr::BROADCAST, u16::MAX, u32::from(MAX_INSTANCE)).unwrap();
        assert_eq!(max.to_epid().0, (1 << 62) - 1);
        assert_eq!(max.to_epid().0 & RESERVED_EPID_BITS, 0);
    }

    #[test]
    fn rejects_what_cannot_be_packed() {
        let a = Ipv4Addr::LOCALHOST;
        assert_eq!(SoftEpid::new(a, 0, 0), Err(SoftEpidError::PortZero));
        assert_eq!(
            SoftEpid::new(a, 1, 1 << 14),
            Err(SoftEpidError::InstanceTooLarge(1 << 14))
        );
        for bits in [1u64 << 62, 1 << 63] {
            let e = Epid(bits | (1 << 32));
            assert_eq!(SoftEpid::try_from(e), Err(SoftEpidError::ReservedBits(e)));
        }
        assert_eq!(SoftEpid::try_from(Epid(0)), Err(SoftEpidError::PortZero));
    }

    #[test]
    fn text_forms() {
        let s: SoftEpid = "127.0.0.1:9000#2".parse().unwrap();
        assert_eq!(
            (s.addr(), s.port(), s.instance()),
            (Ipv4Addr::LOCALHOST, 9000, 2)
        );
        assert_eq!(s.socket_addr().to_string(), "127.0.0.1:9000");
        let s0: SoftEpid = "127.0.0.1:9000".parse().unwrap();
        assert_eq!(s0.instance(), 0);
        let via_epid: SoftEpid = s.to_epid().to_string().parse().unwrap();
        assert_eq!(via_epid, s);
        for bad in [
            "",
            "1.2.3.4",
            "1.2.3.4:",
            "1.2.3.4:0",
            "1.2.3.4:65536",
            "1.2.3.4:80#",
            "1.2.3.4:80#16384",
            "1.2.3.4:+80",
            "fi_addr_psmx://c000000000000001",
            "host:80",
        ] {
            assert!(bad.parse::<SoftEpid>().is_err(), "{bad:?} parsed");
        }
    }

    proptest! {
        #[test]
        fn packs_round_trip(ip: u32, port in 1u16.., inst in 0u32..=u32::from(MAX_INSTANCE)) {
            let s = SoftEpid::new(Ipv4Addr::from(ip), port, inst).unwrap();
            let e = s.to_epid();
            prop_assert_eq!(e.0 & RESERVED_EPID_BITS, 0);
            prop_assert_ne!(e.0, 0);
            prop_assert_eq!(SoftEpid::try_from(e).unwrap(), s);
            let text: Epid = e.to_string().parse().unwrap();
            prop_assert_eq!(SoftEpid::try_from(text).unwrap(), s);
            prop_assert_eq!(s.to_string().parse::<SoftEpid>().unwrap(), s);
        }

        #[test]
        fn every_clear_epid_with_a_port_unpacks(v in 0u64..(1 << 62)) {
            let r = SoftEpid::try_from(Epid(v));
            prop_assert_eq!(r.is_ok(), (v >> 32) as u16 != 0);
            if let Ok(s) = r {
                prop_assert_eq!(s.to_epid(), Epid(v));
            }
        }
    }
}
