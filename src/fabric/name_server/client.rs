//! The client side: [`query`] a node's name server (what `fi_getinfo`
//! does with a node and no `FI_SOURCE`), and the ADD/DEL a non-serving
//! process sends to its node's server. Blocking std sockets, every step
//! bounded by one overall deadline.
//!
//! Errors follow C's single answer (`-FI_ENODATA`) where the caller can do
//! nothing but try elsewhere, and are sharper where that helps:
//! [`ErrorKind::NoData`] when the host does not resolve, nothing listens
//! there or the service is not registered; [`ErrorKind::TimedOut`] when the
//! deadline passes; [`ErrorKind::Io`] when the server breaks the protocol.
//! Every message names the server as `host:port`.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::service::Service;
use super::wire::{Reply, Request, HEADER_LEN, MAX_FRAME_LEN, STATUS_NOT_LOCAL};
use crate::engine::Epid;
use crate::{Error, ErrorKind, Result};

/// Resolves `service` on the name server of `host` (a host name or an IP
/// literal; `[::1]` brackets are accepted) at `port`, within `timeout`.
///
/// Returns the registered service (the real one when `service` is 0, the
/// wildcard) and its endpoint's id. Each address the host resolves to is
/// tried in turn, as C does.
///
/// Errors: [`ErrorKind::NoData`] if the host does not resolve, no server
/// answers, or the service is not registered (C: `-FI_ENODATA`);
/// [`ErrorKind::TimedOut`] if `timeout` passes first;
/// [`ErrorKind::Io`] for a malformed reply. Name resolution itself cannot
/// be interrupted; its time counts against `timeout`.
///
/// ```
/// use std::time::Duration;
/// use psmrail::engine::Epid;
/// use psmrail::fabric::name_server::{query, NameServer, Service};
/// use psmrail::ErrorKind;
///
/// let ns = NameServer::start_on("127.0.0.1:0".parse().unwrap()).unwrap();
/// let port = ns.local_addr().port();
/// let _reg = ns.register(7, Epid(0x2a)).unwrap();
/// let t = Duration::from_secs(5);
/// assert_eq!(query("localhost", port, 7, t).unwrap(), (Service::new(7), Epid(0x2a)));
/// assert_eq!(query("127.0.0.1", port, 0, t).unwrap(), (Service::new(7), Epid(0x2a)));
/// let err = query("127.0.0.1", port, 8, t).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::NoData);
/// assert!(err.message().contains(&format!("127.0.0.1:{port}")));
/// ```
pub fn query(
    host: &str,
    port: u16,
    service: impl Into<Service>,
    timeout: Duration,
) -> Result<(Service, Epid)> {
    let service = service.into().get();
    let deadline = Deadline::after(timeout);
    let server = Server::resolve(host, port)?;
    query_server(&server, service, &deadline).map(|(s, epid)| (Service::new(s), epid))
}

/// A name server's printable `host:port` and the addresses to try.
#[derive(Clone, Debug)]
pub(crate) struct Server {
    what: String,
    addrs: Vec<SocketAddr>,
}

impl Server {
    /// `host:port` resolved (IP literals without a lookup).
    pub(crate) fn resolve(host: &str, port: u16) -> Result<Server> {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let what = if bare.contains(':') {
            format!("[{bare}]:{port}")
        } else {
            format!("{bare}:{port}")
        };
        let addrs: Vec<SocketAddr> = match (bare, port).to_socket_addrs() {
            Ok(a) => a.collect(),
            Err(e) => {
                return Err(Error::with_source(
                    ErrorKind::NoData,
                    format!("name server {what}: the host does not resolve"),
                    e,
                ))
            }
        };
        if addrs.is_empty() {
            return Err(Error::new(
                ErrorKind::NoData,
                format!("name server {what}: the host resolves to no address"),
            ));
        }
        Ok(Server { what, addrs })
    }

    /// Given addresses, printed as `what`.
    pub(crate) fn at(what: String, addrs: Vec<SocketAddr>) -> Server {
        Server { what, addrs }
    }

    /// The printable `host:port`.
    pub(crate) fn what(&self) -> &str {
        &self.what
    }

    /// The first address tried.
    pub(crate) fn first_addr(&self) -> Option<SocketAddr> {
        self.addrs.first().copied()
    }
}

/// An instant every step of one exchange must finish by.
pub(crate) struct Deadline {
    at: Instant,
    total: Duration,
}

impl Deadline {
    /// `timeout` from now (capped far in the future rather than overflow).
    pub(crate) fn after(timeout: Duration) -> Deadline {
        const FAR: Duration = Duration::from_secs(365 * 24 * 3600);
        let now = Instant::now();
        let at = now
            .checked_add(timeout)
            .unwrap_or_else(|| now + FAR.min(timeout));
        Deadline { at, total: timeout }
    }

    /// Time left, or the timeout error naming `server` and what it did not
    /// do in time.
    fn remaining(&self, server: &Server, doing: &str) -> Result<Duration> {
        let left = self.at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(self.expired(server, doing))
        } else {
            Ok(left)
        }
    }

    fn expired(&self, server: &Server, doing: &str) -> Error {
        Error::new(
            ErrorKind::TimedOut,
            format!(
                "name server {}: no {doing} within {:?}",
                server.what, self.total
            ),
        )
    }
}

fn io_error(server: &Server, doing: &str, e: io::Error) -> Error {
    Error::with_source(
        ErrorKind::Io,
        format!("name server {}: {doing} failed", server.what),
        e,
    )
}

/// Whether `e` only means "not yet" (a socket timeout or a signal).
fn is_retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Connects to the first address that accepts.
fn connect(server: &Server, deadline: &Deadline) -> Result<TcpStream> {
    let mut last: Option<io::Error> = None;
    for addr in &server.addrs {
        let left = deadline.remaining(server, "connection")?;
        match TcpStream::connect_timeout(addr, left) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) if e.kind() == io::ErrorKind::TimedOut => {
            Err(deadline.expired(server, "connection"))
        }
        Some(e) => Err(Error::with_source(
            ErrorKind::NoData,
            format!("name server {}: no server answers there", server.what),
            e,
        )),
        None => Err(Error::new(
            ErrorKind::NoData,
            format!("name server {}: no address to connect to", server.what),
        )),
    }
}

fn write_all(s: &mut TcpStream, bytes: &[u8], server: &Server, d: &Deadline) -> Result<()> {
    let mut sent = 0;
    while sent < bytes.len() {
        let left = d.remaining(server, "room to send the command")?;
        s.set_write_timeout(Some(left))
            .map_err(|e| io_error(server, "setting a write timeout", e))?;
        match s.write(&bytes[sent..]) {
            Ok(0) => {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "name server {}: connection closed while sending",
                        server.what
                    ),
                ))
            }
            Ok(n) => sent += n,
            Err(e) if is_retry(&e) => {}
            Err(e) => return Err(io_error(server, "sending the command", e)),
        }
    }
    Ok(())
}

/// One read that returns data or end of stream (0), retrying timeouts
/// until the deadline.
fn read_some(
    s: &mut TcpStream,
    buf: &mut [u8],
    server: &Server,
    d: &Deadline,
    doing: &str,
) -> Result<usize> {
    loop {
        let left = d.remaining(server, doing)?;
        s.set_read_timeout(Some(left))
            .map_err(|e| io_error(server, "setting a read timeout", e))?;
        match s.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if is_retry(&e) => {}
            Err(e) => return Err(io_error(server, "receiving", e)),
        }
    }
}

/// Fills `buf`, or fails naming how much of `part` arrived.
fn read_exact(
    s: &mut TcpStream,
    buf: &mut [u8],
    server: &Server,
    d: &Deadline,
    part: &str,
) -> Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let n = read_some(s, &mut buf[got..], server, d, "answer")?;
        if n == 0 {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "name server {}: connection closed after {got} of the {} bytes of the {part}",
                    server.what,
                    buf.len()
                ),
            ));
        }
        got += n;
    }
    Ok(())
}

/// Sends a QUERY and reads the ACK.
pub(crate) fn query_server(server: &Server, service: u32, d: &Deadline) -> Result<(u32, Epid)> {
    let mut s = connect(server, d)?;
    write_all(&mut s, &Request::Query { service }.encode(), server, d)?;
    let mut buf = [0u8; MAX_FRAME_LEN];
    read_exact(&mut s, &mut buf[..HEADER_LEN], server, d, "reply header")?;
    let malformed = |e| {
        Error::with_source(
            ErrorKind::Io,
            format!("name server {}: malformed reply", server.what),
            e,
        )
    };
    let len = Reply::frame_len(&buf[..HEADER_LEN]).map_err(malformed)?;
    read_exact(&mut s, &mut buf[HEADER_LEN..len], server, d, "reply")?;
    match Reply::decode(&buf[..len]).map_err(malformed)? {
        Reply::Found { service, epid } => Ok((service, epid)),
        Reply::NotFound { status } => Err(Error::new(
            ErrorKind::NoData,
            format!(
                "name server {}: service {service} is not registered (status {status})",
                server.what
            ),
        )),
    }
}

/// Sends an ADD or DEL and waits until the server closes the connection,
/// which it does once the command is carried out (C's server too), so the
/// change is visible to the next query.
///
/// Errors besides [`query`]'s: [`ErrorKind::Access`] if the server refused
/// the command because it does not come from the server's host (an ACK of
/// status [`STATUS_NOT_LOCAL`]); [`ErrorKind::Io`] for any other answer.
pub(crate) fn update_server(server: &Server, request: &Request, d: &Deadline) -> Result<()> {
    let mut s = connect(server, d)?;
    write_all(&mut s, &request.encode(), server, d)?;
    let mut answer = [0u8; HEADER_LEN];
    let mut got = 0;
    let doing = format!("close after {}", request.op());
    while got < answer.len() {
        let left = d.remaining(server, &doing)?;
        s.set_read_timeout(Some(left))
            .map_err(|e| io_error(server, "setting a read timeout", e))?;
        match s.read(&mut answer[got..]) {
            Ok(0) => break,
            // A reset is a close too: the server had nothing more to say.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
            Ok(n) => got += n,
            Err(e) if is_retry(&e) => {}
            Err(e) => return Err(io_error(server, "waiting for the close", e)),
        }
    }
    if got == 0 {
        return Ok(());
    }
    if Reply::decode(&answer[..got])
        == Ok(Reply::NotFound {
            status: STATUS_NOT_LOCAL,
        })
    {
        return Err(Error::new(
            ErrorKind::Access,
            format!(
                "name server {}: refused the {}: it accepts registrations only from its own \
                 host",
                server.what,
                request.op()
            ),
        ));
    }
    Err(Error::new(
        ErrorKind::Io,
        format!(
            "name server {}: answered a {} (the protocol has no reply to it)",
            server.what,
            request.op()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_forms() {
        let s = Server::resolve("127.0.0.1", 9).unwrap();
        assert_eq!(s.what(), "127.0.0.1:9");
        assert_eq!(s.addrs, vec!["127.0.0.1:9".parse::<SocketAddr>().unwrap()]);
        let s = Server::resolve("[::1]", 9).unwrap();
        assert_eq!(s.what(), "[::1]:9");
        assert_eq!(s.addrs, vec!["[::1]:9".parse::<SocketAddr>().unwrap()]);
        let s = Server::resolve("::1", 9).unwrap();
        assert_eq!(s.what(), "[::1]:9");
    }

    #[test]
    fn unresolvable_host_is_nodata() {
        // A NUL byte fails before any lookup, so nothing is contacted.
        let e = Server::resolve("bad\0host", 9).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoData);
        assert!(e.message().contains("bad\0host:9"), "{e}");
    }

    #[test]
    fn zero_timeout_times_out_before_connecting() {
        let s = Server::resolve("127.0.0.1", 9).unwrap();
        let e = query_server(&s, 1, &Deadline::after(Duration::ZERO)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        assert!(e.message().contains("127.0.0.1:9"), "{e}");
    }

    #[test]
    fn huge_timeout_does_not_overflow() {
        let d = Deadline::after(Duration::MAX);
        let s = Server::resolve("127.0.0.1", 9).unwrap();
        assert!(d.remaining(&s, "x").unwrap() > Duration::from_secs(3600));
    }
}
