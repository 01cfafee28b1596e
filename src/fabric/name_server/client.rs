//! The client side: [`query`] a node's name server (what `fi_getinfo`
//! does with a node and no `FI_SOURCE`), and the owning session
//! ([`ClientSession`]) over which a non-serving process sends its ADD and
//! DEL to its node's server. Blocking std sockets, every step bounded by
//! one overall deadline.
//!
//! Errors follow C's single answer (`-FI_ENODATA`) where the caller can do
//! nothing but try elsewhere, and are sharper where that helps:
//! [`ErrorKind::NoData`] when the host does not resolve, nothing listens
//! there or the service is not registered; [`ErrorKind::TimedOut`] when the
//! deadline passes; [`ErrorKind::Io`] when the server breaks the protocol.
//! Every message names the server as `host:port`.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::num::NonZeroI32;
use std::time::{Duration, Instant};

use super::proof::Transcript;
use super::service::Service;
use super::wire::{self, Change, Reply, Request, HEADER_LEN, MAX_FRAME_LEN, NONCE_LEN};
use crate::engine::soft::{JobSecret, JOB_SECRET_VAR};
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
        other => Err(Error::new(
            ErrorKind::Io,
            format!(
                "name server {}: answered a QUERY with a session's {other:?}",
                server.what
            ),
        )),
    }
}

/// Reads one reply frame; `closed` is the error for a connection that
/// ends before its first byte.
fn read_reply(
    s: &mut TcpStream,
    server: &Server,
    d: &Deadline,
    closed: impl FnOnce() -> Error,
) -> Result<Reply> {
    let mut buf = [0u8; MAX_FRAME_LEN];
    let n = read_some(s, &mut buf[..HEADER_LEN], server, d, "answer")?;
    if n == 0 {
        return Err(closed());
    }
    read_exact(s, &mut buf[n..HEADER_LEN], server, d, "reply header")?;
    let malformed = |e| {
        Error::with_source(
            ErrorKind::Io,
            format!("name server {}: malformed reply", server.what),
            e,
        )
    };
    let len = Reply::frame_len(&buf[..HEADER_LEN]).map_err(malformed)?;
    read_exact(s, &mut buf[HEADER_LEN..len], server, d, "reply")?;
    Reply::decode(&buf[..len]).map_err(malformed)
}

/// Whether `e` is a failed send or receive (not a timeout, not a
/// malformed reply): on a session to the host's own server, the server
/// closed it.
fn is_broken(e: &Error) -> bool {
    e.kind() == ErrorKind::Io && std::error::Error::source(e).is_some_and(|s| s.is::<io::Error>())
}

/// A process's owning session with a name server: the connection it keeps
/// open while it holds entries there (they go when it closes), with the
/// server's nonce and the number of the next request.
pub(crate) struct ClientSession {
    stream: TcpStream,
    nonce: [u8; NONCE_LEN],
    seq: u64,
}

impl ClientSession {
    /// Connects, sends HELLO and reads the CHALLENGE.
    ///
    /// Errors besides [`query`]'s: [`ErrorKind::Access`] if the server
    /// refuses sessions from this host; [`ErrorKind::OpNotSupp`] if it
    /// closes without a challenge (a server without owning sessions: C's,
    /// or an older psmrail's).
    pub(crate) fn open(server: &Server, d: &Deadline) -> Result<ClientSession> {
        let mut stream = connect(server, d)?;
        write_all(&mut stream, &Request::Hello.encode(), server, d)?;
        let reply = read_reply(&mut stream, server, d, || {
            Error::new(
                ErrorKind::OpNotSupp,
                format!(
                    "name server {}: closed the connection without answering HELLO: it has no \
                     owning sessions (a C provider's server, or an older psmrail's), and \
                     psmrail registers only over one",
                    server.what
                ),
            )
        })?;
        match reply {
            Reply::Challenge { nonce } => Ok(ClientSession {
                stream,
                nonce,
                seq: 0,
            }),
            Reply::Refused { status } => Err(refusal(server, "open a session", status)),
            other => Err(Error::new(
                ErrorKind::Io,
                format!(
                    "name server {}: answered HELLO with {other:?}, not a CHALLENGE",
                    server.what
                ),
            )),
        }
    }

    /// Sends one ADD or DEL, with the proof of `secret` if there is one,
    /// and reads its ACK: `Ok(Ok(()))` if it was carried out, `Ok(Err)`
    /// with the server's status if it was refused (the session goes on).
    ///
    /// Errors (the session is then unusable): [`ErrorKind::NoData`] if the
    /// server closed it (its process may have exited), the others of
    /// [`query`].
    pub(crate) fn change(
        &mut self,
        server: &Server,
        secret: Option<&JobSecret>,
        change: Change,
        service: u32,
        epid: Epid,
        d: &Deadline,
    ) -> Result<std::result::Result<(), NonZeroI32>> {
        let proof = secret.map(|secret| {
            Transcript {
                nonce: self.nonce,
                seq: self.seq,
                change,
                service,
                epid,
            }
            .prove(secret)
        });
        self.seq = self.seq.wrapping_add(1);
        let request = Request::Session {
            change,
            service,
            epid,
            proof,
        };
        let gone = || {
            Error::new(
                ErrorKind::NoData,
                format!(
                    "name server {}: the server closed this process's session (has the \
                     serving process exited?); its entries went with it",
                    server.what
                ),
            )
        };
        let sent = write_all(&mut self.stream, &request.encode(), server, d);
        let reply = match sent {
            Ok(()) => read_reply(&mut self.stream, server, d, gone),
            Err(e) => Err(e),
        };
        match reply {
            Ok(Reply::Done) => Ok(Ok(())),
            Ok(Reply::Refused { status }) => Ok(Err(status)),
            Ok(other) => Err(Error::new(
                ErrorKind::Io,
                format!(
                    "name server {}: answered a session's {} with {other:?}",
                    server.what,
                    change.op()
                ),
            )),
            Err(e) if is_broken(&e) => Err(Error::with_source(
                ErrorKind::NoData,
                gone().message().to_owned(),
                e,
            )),
            Err(e) => Err(e),
        }
    }
}

/// The error for a refused `what` ("register service 5 as ...", "open a
/// session") from a server's status.
pub(crate) fn refusal(server: &Server, what: &str, status: NonZeroI32) -> Error {
    let (kind, why) = match status {
        wire::STATUS_NOT_LOCAL => (
            ErrorKind::Access,
            "it accepts registrations only from its own host".to_owned(),
        ),
        wire::STATUS_NO_PROOF => (
            ErrorKind::Access,
            format!("it requires the job secret ({JOB_SECRET_VAR}) and this process has none"),
        ),
        wire::STATUS_BAD_PROOF => (
            ErrorKind::Access,
            format!(
                "it rejected this process's proof of the job secret ({JOB_SECRET_VAR}): the \
                 two have different secrets"
            ),
        ),
        wire::STATUS_NOT_OWNER => (
            ErrorKind::Access,
            "another process registered the service; only its owner removes it".to_owned(),
        ),
        wire::STATUS_TAKEN => (
            ErrorKind::Busy,
            "the service is already registered".to_owned(),
        ),
        wire::STATUS_NOT_FOUND => (
            ErrorKind::Inval,
            "the service is not registered to this endpoint".to_owned(),
        ),
        wire::STATUS_WILDCARD => (
            ErrorKind::Inval,
            "service 0 is the query wildcard".to_owned(),
        ),
        wire::STATUS_FULL => (ErrorKind::NoMem, "its table is full".to_owned()),
        wire::STATUS_SESSION_FULL => (
            ErrorKind::NoMem,
            "this process holds its share of entries already, or the server holds all the \
             sessions it keeps"
                .to_owned(),
        ),
        wire::STATUS_NEEDS_SESSION => (
            ErrorKind::OpNotSupp,
            "it registers only over owning sessions".to_owned(),
        ),
        other => (
            ErrorKind::Io,
            format!("it answered the unknown status {other}"),
        ),
    };
    Error::new(
        kind,
        format!("name server {}: cannot {what}: {why}", server.what),
    )
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
