//! [`Service`]: the name under which an endpoint registers with the name
//! server, and which a client asks for.
//!
//! A service is a number in the name server's table, **not** a TCP port.
//! Service 0 ([`Service::ANY`]) is the wildcard: an endpoint opened with it
//! gets a generated service, and a query for it is answered with some
//! registered endpoint. Everything that names a service takes this type
//! (getinfo, the endpoint builder, the address vector, the name server);
//! `fi_getinfo`'s text form parses into it ([`str::parse`]), with the
//! error naming the text.

use crate::Error;
use std::fmt;
use std::str::FromStr;

/// A name-server service number (see the module docs).
///
/// ```
/// use psmrail::fabric::Service;
///
/// let s: Service = "7".parse()?;
/// assert_eq!(s, Service::new(7));
/// assert_eq!(s, 7);
/// assert_eq!(s.to_string(), "7");
/// assert!(Service::ANY.is_any());
/// assert!("".parse::<Service>()?.is_any()); // as fi_getinfo's absent service
/// assert!("-1".parse::<Service>().is_err());
/// # Ok::<(), psmrail::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Service(u32);

impl Service {
    /// Service 0: any (a generated one when registering, any registered
    /// endpoint when asking).
    pub const ANY: Service = Service(0);

    /// The service numbered `n`.
    pub const fn new(n: u32) -> Service {
        Service(n)
    }

    /// Its number.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// Whether this is [`Service::ANY`].
    pub const fn is_any(self) -> bool {
        self.0 == 0
    }
}

impl From<u32> for Service {
    fn from(n: u32) -> Service {
        Service(n)
    }
}

impl From<Service> for u32 {
    fn from(s: Service) -> u32 {
        s.0
    }
}

impl PartialEq<u32> for Service {
    fn eq(&self, other: &u32) -> bool {
        self.0 == *other
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Parses `fi_getinfo`'s service text: a decimal `u32` without sign or
/// leading zero (C would read that as octal); the empty text is
/// [`Service::ANY`].
///
/// # Errors
/// `Inval` naming the text, for anything else.
impl FromStr for Service {
    type Err = Error;

    fn from_str(text: &str) -> Result<Service, Error> {
        crate::fabric::info::source::parse_service(Some(text)).map(Service)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn parses_decimal_u32_and_the_empty_wildcard() {
        assert_eq!("0".parse::<Service>().unwrap(), Service::ANY);
        assert_eq!("".parse::<Service>().unwrap(), Service::ANY);
        assert_eq!("4294967295".parse::<Service>().unwrap(), u32::MAX);
        assert_eq!("42".parse::<Service>().unwrap(), 42);
        for bad in ["4294967296", "-1", "+1", " 1", "1 ", "0x10", "seven", "042"] {
            let e = bad.parse::<Service>().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Inval, "{bad}");
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn converts_and_prints_its_number() {
        let s = Service::from(9);
        assert_eq!(u32::from(s), 9);
        assert_eq!(s.get(), 9);
        assert_eq!(format!("{s}"), "9");
        assert!(!s.is_any());
    }
}
