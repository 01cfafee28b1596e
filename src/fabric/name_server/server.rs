//! [`NameServer`]: the node's name server thread (or, when another process
//! on the node runs it, a handle that registers there), and
//! [`Registration`], one service → epid entry that is removed on drop.
//!
//! The server is one thread running a mio poll loop over its listeners (one
//! per served address, `access.rs`), a waker (so that drop stops it at
//! once) and its connections, each driven by a sans-IO [`Session`] that
//! knows whether its peer is on this host and, when it opens an owning
//! session, owns what it registers (`session.rs`). Unlike C's server,
//! which serves one connection at a time and blocks on it, a client that
//! sends garbage, stalls mid-frame or closes early costs only its own
//! connection: it is closed at the first bad byte, or when
//! [`CONNECTION_TIMEOUT`] passes while it holds no entry. A session that
//! holds entries stays open as long as its process keeps it; when it
//! closes (the process dropped its registrations, exited or was killed),
//! its entries go.
//!
//! Bounds: at most [`MAX_CONNECTIONS`] connections that hold no entry
//! (queries, sessions being opened; more wait in the listen backlog), and
//! at most [`MAX_SESSIONS`] sessions holding at most
//! [`MAX_ENTRIES_PER_SESSION`] entries each (`registry.rs`).

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use super::access::{self, LocalHost};
use super::client::{refusal, ClientSession, Deadline, Server};
use super::port::port_for;
use super::registry::{Owner, Refusal, Registry};
pub use super::registry::{MAX_ENTRIES_PER_SESSION, MAX_SESSIONS};
use super::service::Service;
use super::session::{Session, Step, Then};
use super::wire::{Change, Frame, STATUS_NOT_FOUND};
use crate::config::{JobUuid, NameServerListen};
use crate::engine::soft::{new_nonce, JobSecret};
use crate::engine::Epid;
use crate::{Error, ErrorKind, Result};

/// How long a connection that holds no entry may stay open: a query, or a
/// session being opened, must be complete within it.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// Connections holding no entry served at once; more wait in the listen
/// backlog.
pub const MAX_CONNECTIONS: usize = 256;
/// Bound on one exchange (opening a session, an ADD, a DEL) with another
/// process's server.
pub const UPDATE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest poll sleep, so a lost wake-up still ends the thread.
const IDLE_POLL: Duration = Duration::from_millis(500);
/// Pause after an accept error such as running out of descriptors.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// The waker's token; listener `i` is `Token(1 + i)`, and the connections
/// follow the listeners.
const WAKER: Token = Token(0);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The table stays consistent whatever a panicking holder was doing
    // (every change completes before the guard drops), and so does a
    // client's session state.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The name server of this process: serving, or registering with the
/// node's existing server.
///
/// [`start`](Self::start) binds TCP port [`port_for`]`(uuid)` on
/// `127.0.0.1` (or `::1` if IPv4 cannot be bound), with `SO_REUSEADDR`. If
/// that port is in use, another process on the node serves this job
/// already: this handle then serves nothing, and
/// [`register`](Self::register) registers with that server on localhost,
/// over one connection this handle keeps open while it holds entries
/// there (an *owning session*). So there is one server per node per UUID,
/// and its registrations are lost when the process that owns it exits
/// (fi_psm(7)).
///
/// A serving handle then binds the same port on `::1` and on each address
/// configured on the host's interfaces, each on its own and never the
/// wildcard, so that other nodes can query it
/// ([`listen_addrs`](Self::listen_addrs)). It answers QUERY on all of them.
///
/// # What it trusts
///
/// An entry changes only by its owner: the serving process for its own
/// registrations, otherwise the owning session that added it. Nobody else
/// deletes it, nobody registers over it while it exists, and it goes when
/// its owner does (a session's entries when its connection closes, which
/// the kernel does when the process exits or is killed), so a restarted
/// process registers its service again. C's ADD and DEL (one connection
/// each, no owner) are refused, and so is everything from another host
/// ([`STATUS_NOT_LOCAL`](super::wire::STATUS_NOT_LOCAL)). With a job
/// secret ([`start_with`](Self::start_with)), every ADD and DEL must also
/// prove it, over a nonce fresh for each session, so that a process
/// without the secret registers nothing and a captured request cannot be
/// replayed. Queries stay open to anyone who reaches the server.
///
/// Dropping a serving `NameServer` stops its thread and closes the port
/// promptly.
///
/// ```
/// use std::time::Duration;
/// use psmrail::engine::Epid;
/// use psmrail::fabric::name_server::{query, NameServer, Service};
///
/// let ns = NameServer::start_on("127.0.0.1:0".parse().unwrap()).unwrap();
/// assert!(ns.is_serving());
/// let port = ns.local_addr().port();
///
/// // A second handle on the same address finds it taken and registers there.
/// let other = NameServer::start_on(ns.local_addr()).unwrap();
/// assert!(!other.is_serving());
/// let reg = other.register(12, Epid(0x77)).unwrap();
/// let t = Duration::from_secs(5);
/// assert_eq!(query("127.0.0.1", port, 12, t).unwrap(), (Service::new(12), Epid(0x77)));
/// drop(reg); // DEL
/// assert!(query("127.0.0.1", port, 12, t).is_err());
/// ```
pub struct NameServer {
    addr: SocketAddr,
    listening: Vec<SocketAddr>,
    role: Role,
}

enum Role {
    Serving {
        table: Arc<Mutex<Registry>>,
        stop: Arc<Stop>,
        thread: Option<JoinHandle<()>>,
    },
    Client {
        link: Arc<Link>,
    },
}

/// How the owner tells the thread to end: the flag, then the waker.
struct Stop {
    flag: AtomicBool,
    waker: Waker,
}

impl NameServer {
    /// Starts (or joins) the name server of the job `uuid` on this node,
    /// without a job secret: loopback and the host's own addresses, as the
    /// type's documentation says.
    ///
    /// Errors: [`ErrorKind::Other`] if no address can be bound for a reason
    /// other than "in use", or the poll or thread cannot be created.
    pub fn start(uuid: &JobUuid) -> Result<NameServer> {
        Self::start_with(uuid, None)
    }

    /// As [`start`](Self::start), with the job's secret if it has one: a
    /// serving handle then carries out only the ADD and DEL that prove it,
    /// and a registering handle proves it with each of its own. (The
    /// fabric passes `PSMRAIL_JOB_SECRET`, as the soft engine uses it.)
    pub fn start_with(uuid: &JobUuid, secret: Option<JobSecret>) -> Result<NameServer> {
        Self::start_on_host(port_for(uuid), secret)
    }

    /// Starts a name server on `addr` (port 0: an ephemeral port, see
    /// [`local_addr`](Self::local_addr)), without a job secret; for tests
    /// and explicit set-ups. An unspecified address (`0.0.0.0` or `[::]`)
    /// stands for the addresses [`start`](Self::start) serves, on `addr`'s
    /// port; nothing is bound to the wildcard. If `addr` is in use, the
    /// handle registers with the server there (on loopback when `addr` is
    /// unspecified).
    pub fn start_on(addr: SocketAddr) -> Result<NameServer> {
        Self::start_on_with(addr, None)
    }

    /// As [`start_on`](Self::start_on), with a job secret as
    /// [`start_with`](Self::start_with) takes it.
    pub fn start_on_with(addr: SocketAddr, secret: Option<JobSecret>) -> Result<NameServer> {
        if addr.ip().is_unspecified() {
            return Self::start_on_host(addr.port(), secret);
        }
        Self::bind_or_join(
            &[addr.ip()],
            addr.port(),
            LocalHost::new(access::host_addrs()),
            Server::at(addr.to_string(), vec![addr]),
            secret,
        )
    }

    /// Starts (or joins) the name server of the job `uuid` on this node,
    /// listening where `listen` says: loopback, plus the addresses it
    /// names (or every address of the host). What the fabric calls, with
    /// [`Info::name_server_listen`](crate::fabric::Info::name_server_listen).
    ///
    /// Errors: as [`start`](Self::start).
    pub fn start_listening(
        uuid: &JobUuid,
        secret: Option<JobSecret>,
        listen: &NameServerListen,
    ) -> Result<NameServer> {
        let port = port_for(uuid);
        match listen {
            NameServerListen::Everywhere => Self::start_on_host(port, secret),
            NameServerListen::Loopback => {
                Self::serve_locally(port, secret, &[], access::host_addrs())
            }
            NameServerListen::LoopbackAnd(ips) => {
                let ips: Vec<IpAddr> = ips.iter().copied().map(IpAddr::V4).collect();
                Self::serve_locally(port, secret, &ips, access::host_addrs())
            }
        }
    }

    /// Serves `port` on loopback and the host's addresses.
    fn start_on_host(port: u16, secret: Option<JobSecret>) -> Result<NameServer> {
        let host = access::host_addrs();
        Self::serve_locally(port, secret, &host.clone(), host)
    }

    /// Serves `port` on loopback and those of `also` that can be bound on
    /// their own ([`access::listen_ips`]); registrations are taken from
    /// loopback and `host`, the host's own addresses.
    fn serve_locally(
        port: u16,
        secret: Option<JobSecret>,
        also: &[IpAddr],
        host: Vec<IpAddr>,
    ) -> Result<NameServer> {
        // C sends to "localhost" and tries what it resolves to; the two
        // loopback addresses are that without depending on /etc/hosts.
        let local = Server::at(
            format!("localhost:{port}"),
            vec![
                SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
                SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
            ],
        );
        Self::bind_or_join(
            &access::listen_ips(also),
            port,
            LocalHost::new(host),
            local,
            secret,
        )
    }

    /// Binds `ips` on `port`. The first address that binds decides: in use
    /// means another process serves (register with `existing`); once it is
    /// bound (port 0 resolved), the others are served on the same port, or
    /// skipped with a log line.
    fn bind_or_join(
        ips: &[IpAddr],
        mut port: u16,
        local: LocalHost,
        existing: Server,
        secret: Option<JobSecret>,
    ) -> Result<NameServer> {
        let mut listeners = Vec::new();
        let mut last = None;
        for &ip in ips {
            let addr = SocketAddr::new(ip, port);
            match TcpListener::bind(addr) {
                Ok(listener) => {
                    if listeners.is_empty() {
                        if let Ok(bound) = listener.local_addr() {
                            port = bound.port();
                        }
                    }
                    listeners.push(listener);
                }
                // C's rule: in use means a peer runs the server; stop there.
                Err(e) if listeners.is_empty() && e.kind() == io::ErrorKind::AddrInUse => {
                    tracing::info!(
                        "name server: {addr} is in use; registering with the server at {}",
                        existing.what()
                    );
                    return Ok(NameServer {
                        addr: existing.first_addr().unwrap_or(addr),
                        listening: Vec::new(),
                        role: Role::Client {
                            link: Arc::new(Link::new(existing, secret)),
                        },
                    });
                }
                Err(e) if listeners.is_empty() => last = Some((addr, e)),
                // E.g. no IPv6 on this host.
                Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => {
                    tracing::debug!("name server: not serving on {addr}: {e}");
                }
                Err(e) => tracing::warn!("name server: not serving on {addr}: {e}"),
            }
        }
        if !listeners.is_empty() {
            return Self::serve(listeners, local, secret);
        }
        match last {
            Some((addr, e)) => Err(Error::with_source(
                ErrorKind::Other,
                format!("name server: cannot listen on {addr}"),
                e,
            )),
            None => Err(Error::new(
                ErrorKind::Inval,
                "name server: no address to listen on",
            )),
        }
    }

    fn serve(
        mut listeners: Vec<TcpListener>,
        local: LocalHost,
        secret: Option<JobSecret>,
    ) -> Result<NameServer> {
        let setup = |what: &str, e: io::Error| {
            Error::with_source(ErrorKind::Other, format!("name server: {what}"), e)
        };
        let listening = listeners
            .iter()
            .map(TcpListener::local_addr)
            .collect::<io::Result<Vec<SocketAddr>>>()
            .map_err(|e| setup("reading the bound address", e))?;
        let addr = listening[0];
        let poll = Poll::new().map_err(|e| setup("creating the poll", e))?;
        for (i, listener) in listeners.iter_mut().enumerate() {
            poll.registry()
                .register(listener, Token(1 + i), Interest::READABLE)
                .map_err(|e| setup("registering a listener", e))?;
        }
        let waker =
            Waker::new(poll.registry(), WAKER).map_err(|e| setup("creating the waker", e))?;
        let stop = Arc::new(Stop {
            flag: AtomicBool::new(false),
            waker,
        });
        let table = Arc::new(Mutex::new(Registry::new()));
        let authenticated = secret.is_some();
        let event_loop = EventLoop {
            poll,
            first_connection: 1 + listeners.len(),
            listeners,
            local,
            secret,
            table: Arc::clone(&table),
            stop: Arc::clone(&stop),
            conns: Vec::new(),
            transient: 0,
            next_id: 1,
            backlogged: false,
            accept_retry: None,
        };
        let thread = thread::Builder::new()
            .name("psmrail-ns".into())
            .spawn(move || event_loop.run())
            .map_err(|e| setup("starting the thread", e))?;
        tracing::info!(
            "name server: serving on {listening:?}{}",
            if authenticated {
                "; registrations must prove the job secret"
            } else {
                ""
            }
        );
        Ok(NameServer {
            addr,
            listening,
            role: Role::Serving {
                table,
                stop,
                thread: Some(thread),
            },
        })
    }

    /// Whether this handle runs the server (false: another process does,
    /// and registrations go there).
    pub fn is_serving(&self) -> bool {
        matches!(self.role, Role::Serving { .. })
    }

    /// The address served on (the first of
    /// [`listen_addrs`](Self::listen_addrs), loopback unless `start_on`
    /// named another), or (when not serving) the address of the server
    /// registrations go to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every address served on, [`local_addr`](Self::local_addr) first;
    /// empty when another process serves.
    pub fn listen_addrs(&self) -> &[SocketAddr] {
        &self.listening
    }

    /// Registers `service` → `epid` on the node's server; dropping the
    /// returned [`Registration`] removes it (C: ADD at `fi_endpoint`, DEL at
    /// `fi_close`). The entry is this process's: no other process removes
    /// or replaces it, and it goes when this process exits.
    ///
    /// Unlike C, the outcome is known: another process's server answers
    /// every ADD of a session. All of a handle's registrations with another
    /// process's server share its session: if an exchange on it fails (the
    /// server went away, or did not answer within [`UPDATE_TIMEOUT`]), the
    /// session is closed, the server drops every entry it held, and the
    /// next `register` opens a new one.
    ///
    /// Errors: [`ErrorKind::Inval`] for service 0 (the query wildcard);
    /// [`ErrorKind::Busy`] if the service is registered already;
    /// [`ErrorKind::NoMem`] if the table (or this process's share of it)
    /// is full; when another process serves, [`ErrorKind::Access`] if it
    /// refuses this process (another host, or no or another job secret),
    /// [`ErrorKind::OpNotSupp`] if it has no owning sessions (C's server),
    /// and the errors of [`query`](super::query) within [`UPDATE_TIMEOUT`].
    pub fn register(&self, service: impl Into<Service>, epid: Epid) -> Result<Registration> {
        let service = service.into().get();
        if service == 0 {
            return Err(Error::new(
                ErrorKind::Inval,
                "name server: service 0 is the query wildcard; register a non-zero service",
            ));
        }
        let target = match &self.role {
            Role::Serving { table, .. } => {
                lock(table)
                    .add(service, epid, Owner::Server)
                    .map_err(|r| refused(&self.addr.to_string(), service, epid, r))?;
                Target::Local(Arc::clone(table))
            }
            Role::Client { link } => {
                let generation = link.add(service, epid)?;
                Target::Remote {
                    link: Arc::clone(link),
                    generation,
                }
            }
        };
        Ok(Registration {
            service,
            epid,
            target: Some(target),
        })
    }
}

fn refused(server: &str, service: u32, epid: Epid, r: Refusal) -> Error {
    let kind = match r {
        Refusal::NotLocal | Refusal::NoProof | Refusal::BadProof | Refusal::NotOwner => {
            ErrorKind::Access
        }
        Refusal::Taken(_) => ErrorKind::Busy,
        Refusal::Full | Refusal::SessionFull => ErrorKind::NoMem,
        Refusal::NeedsSession => ErrorKind::OpNotSupp,
        Refusal::Wildcard | Refusal::Unknown | Refusal::OtherEpid(_) => ErrorKind::Inval,
    };
    Error::new(
        kind,
        format!("name server {server}: cannot register service {service} as {epid}: {r}"),
    )
}

impl Drop for NameServer {
    fn drop(&mut self) {
        if let Role::Serving { stop, thread, .. } = &mut self.role {
            stop.flag.store(true, Ordering::Release);
            if let Err(e) = stop.waker.wake() {
                // The thread still sees the flag within IDLE_POLL.
                tracing::debug!("name server: waking the thread failed: {e}");
            }
            if let Some(t) = thread.take() {
                if t.join().is_err() {
                    tracing::warn!("name server: the server thread panicked");
                }
            }
        }
    }
}

impl fmt::Debug for NameServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NameServer")
            .field("addr", &self.addr)
            .field("serving", &self.is_serving())
            .finish()
    }
}

/// A registering handle's owning session with another process's server,
/// shared by the handle and its registrations: opened at the first
/// [`NameServer::register`], closed (so the server drops nothing that
/// matters) when its last entry is removed.
struct Link {
    server: Server,
    secret: Option<JobSecret>,
    state: Mutex<LinkState>,
}

struct LinkState {
    session: Option<ClientSession>,
    /// Sessions opened so far: a registration keeps the number of its own,
    /// and its entry went with that session if another one is open now.
    generation: u64,
    /// Entries the open session holds.
    held: usize,
}

impl Link {
    fn new(server: Server, secret: Option<JobSecret>) -> Link {
        Link {
            server,
            secret,
            state: Mutex::new(LinkState {
                session: None,
                generation: 0,
                held: 0,
            }),
        }
    }

    /// ADD over the session (opened first if none is): the number of the
    /// session that holds the entry. A session left from earlier that
    /// turns out broken (its server went away) is replaced once.
    fn add(&self, service: u32, epid: Epid) -> Result<u64> {
        let d = Deadline::after(UPDATE_TIMEOUT);
        let mut st = lock(&self.state);
        let mut retried = false;
        loop {
            let (fresh, mut session) = match st.session.take() {
                Some(session) => (false, session),
                None => {
                    let session = ClientSession::open(&self.server, &d)?;
                    st.generation += 1;
                    st.held = 0;
                    (true, session)
                }
            };
            let outcome = session.change(
                &self.server,
                self.secret.as_ref(),
                Change::Add,
                service,
                epid,
                &d,
            );
            match outcome {
                Ok(Ok(())) => {
                    st.session = Some(session);
                    st.held += 1;
                    return Ok(st.generation);
                }
                Ok(Err(status)) => {
                    st.session = Some(session);
                    st.close_if_idle();
                    let what = format!("register service {service} as {epid}");
                    return Err(refusal(&self.server, &what, status));
                }
                // The session is dropped: the server removes what it held.
                Err(e) if fresh || retried => return Err(e),
                Err(e) => {
                    tracing::debug!("name server: {e}; opening a new session");
                    retried = true;
                }
            }
        }
    }

    /// DEL over session `generation`.
    fn del(&self, service: u32, epid: Epid, generation: u64) -> Result<()> {
        let mut st = lock(&self.state);
        let session = if st.generation == generation {
            st.session.take()
        } else {
            None
        };
        let Some(mut session) = session else {
            return Err(Error::new(
                ErrorKind::NoData,
                format!(
                    "name server {}: the session that registered service {service} has \
                     closed, and the server removed its entries with it",
                    self.server.what()
                ),
            ));
        };
        let outcome = session.change(
            &self.server,
            self.secret.as_ref(),
            Change::Del,
            service,
            epid,
            &Deadline::after(UPDATE_TIMEOUT),
        );
        match outcome {
            Ok(Ok(())) => {
                st.session = Some(session);
                st.held = st.held.saturating_sub(1);
                st.close_if_idle();
                Ok(())
            }
            Ok(Err(status)) => {
                st.session = Some(session);
                if status == STATUS_NOT_FOUND {
                    // Not there (any more): not held either.
                    st.held = st.held.saturating_sub(1);
                }
                st.close_if_idle();
                let what = format!("remove service {service} ({epid})");
                Err(refusal(&self.server, &what, status))
            }
            // The session is dropped with its entries.
            Err(e) => Err(e),
        }
    }
}

impl LinkState {
    /// A session that holds nothing is closed: the server would close it
    /// after [`CONNECTION_TIMEOUT`] anyway.
    fn close_if_idle(&mut self) {
        if self.held == 0 {
            self.session = None;
        }
    }
}

/// One service → epid entry on the node's name server; dropping it sends
/// the DEL (or, in the serving process, removes the entry directly).
pub struct Registration {
    service: u32,
    epid: Epid,
    target: Option<Target>,
}

enum Target {
    Local(Arc<Mutex<Registry>>),
    Remote { link: Arc<Link>, generation: u64 },
}

impl Registration {
    /// The registered service.
    pub fn service(&self) -> Service {
        Service::new(self.service)
    }

    /// The registered endpoint id.
    pub fn epid(&self) -> Epid {
        self.epid
    }

    /// Whether removing the entry is a round trip to another process's
    /// server (which may take up to [`UPDATE_TIMEOUT`]), not a change of
    /// this process's own table.
    pub(crate) fn is_remote(&self) -> bool {
        matches!(self.target, Some(Target::Remote { .. }))
    }

    /// Removes the entry now, reporting failure (drop ignores it).
    ///
    /// Errors: [`ErrorKind::Inval`] if the entry is gone; when another
    /// process serves, [`ErrorKind::NoData`] if that server closed this
    /// process's session (its process has exited: the entry went with
    /// it), and the errors of [`query`](super::query) within
    /// [`UPDATE_TIMEOUT`].
    pub fn unregister(mut self) -> Result<()> {
        self.remove()
    }

    fn remove(&mut self) -> Result<()> {
        let (service, epid) = (self.service, self.epid);
        match self.target.take() {
            None => Ok(()),
            Some(Target::Local(table)) => {
                lock(&table).del(service, epid, Owner::Server).map_err(|r| {
                    Error::new(
                        ErrorKind::Inval,
                        format!("name server: cannot remove service {service} ({epid}): {r}"),
                    )
                })
            }
            Some(Target::Remote { link, generation }) => link.del(service, epid, generation),
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            tracing::debug!("name server: {e}");
        }
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("service", &self.service)
            .field("epid", &self.epid)
            .field("local", &matches!(self.target, Some(Target::Local(_))))
            .finish()
    }
}

/// One accepted connection.
struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    session: Session,
    /// The reply, how much of it is sent, and what follows it.
    out: Option<(Frame, usize, Then)>,
    /// Whether its session holds entries (then it has no deadline).
    holding: bool,
    deadline: Option<Instant>,
}

impl Conn {
    /// Reads, carries out and answers as far as the socket allows. Returns
    /// whether the connection is finished (close it).
    fn drive(&mut self, table: &Mutex<Registry>) -> bool {
        loop {
            if let Some((frame, sent, then)) = &mut self.out {
                match self.stream.write(&frame[*sent..]) {
                    Ok(0) => return true,
                    Ok(n) => {
                        *sent += n;
                        if *sent >= frame.len() {
                            if *then == Then::Close {
                                return true;
                            }
                            self.out = None;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        tracing::debug!("name server: {}: sending the reply: {e}", self.peer);
                        return true;
                    }
                }
                continue;
            }
            match self.stream.read(self.session.unfilled()) {
                Ok(0) => {
                    if self.session.is_open() {
                        tracing::debug!("name server: {}: session closed", self.peer);
                    } else {
                        tracing::debug!(
                            "name server: {} closed after {} bytes, before a complete command",
                            self.peer,
                            self.session.received()
                        );
                    }
                    return true;
                }
                Ok(n) => {
                    let mut table = lock(table);
                    let step = self.session.filled(n, &mut table);
                    self.holding = table.held_by(self.session.id()) > 0;
                    drop(table);
                    match step {
                        Ok(Step::More) => {}
                        Ok(Step::Done {
                            request,
                            reply,
                            outcome,
                            then,
                        }) => {
                            match outcome {
                                Ok(()) => {
                                    tracing::debug!("name server: {}: {request:?}", self.peer)
                                }
                                Err(r) if r.is_suspicious() => tracing::info!(
                                    "name server: {}: {request:?} refused: {r}",
                                    self.peer
                                ),
                                Err(r) => tracing::debug!(
                                    "name server: {}: {request:?} refused: {r}",
                                    self.peer
                                ),
                            }
                            self.out = Some((reply, 0, then));
                        }
                        Err(e) => {
                            tracing::debug!("name server: {}: bad command: {e}", self.peer);
                            return true;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!("name server: {}: receiving: {e}", self.peer);
                    return true;
                }
            }
        }
    }
}

/// The server thread's state.
struct EventLoop {
    poll: Poll,
    /// Listener `i` has `Token(1 + i)`.
    listeners: Vec<TcpListener>,
    /// Who may register.
    local: LocalHost,
    /// What registrations must prove, if anything.
    secret: Option<JobSecret>,
    table: Arc<Mutex<Registry>>,
    stop: Arc<Stop>,
    /// The token of connection slot 0 (after the listeners').
    first_connection: usize,
    /// Slot `i` is token `first_connection + i`.
    conns: Vec<Option<Conn>>,
    /// Connections whose session holds no entry.
    transient: usize,
    /// The owner id of the next connection's session.
    next_id: u64,
    /// Accepting stopped at [`MAX_CONNECTIONS`] with connections possibly
    /// still queued (the edge-triggered listener will not say so again).
    backlogged: bool,
    accept_retry: Option<Instant>,
}

impl EventLoop {
    fn run(mut self) {
        let mut events = Events::with_capacity(64);
        while !self.stop.flag.load(Ordering::Acquire) {
            let timeout = self.next_timeout();
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::warn!("name server: poll failed, stopping: {e}");
                return;
            }
            for ev in events.iter() {
                match ev.token() {
                    // The flag is checked at the top of the loop.
                    WAKER => {}
                    Token(t) if t < self.first_connection => self.accept(),
                    Token(t) => self.drive(t - self.first_connection),
                }
            }
            self.expire();
            let now = Instant::now();
            if self.accept_retry.is_some_and(|t| t <= now) {
                self.accept_retry = None;
                self.accept();
            }
            if self.backlogged && self.transient < MAX_CONNECTIONS {
                self.accept();
            }
        }
    }

    fn next_timeout(&self) -> Duration {
        let now = Instant::now();
        self.conns
            .iter()
            .flatten()
            .filter_map(|c| c.deadline)
            .chain(self.accept_retry)
            .map(|t| t.saturating_duration_since(now))
            .fold(IDLE_POLL, Duration::min)
    }

    /// Accepts what waits on every listener (they are edge-triggered, so
    /// each is drained), up to [`MAX_CONNECTIONS`] holding no entry.
    fn accept(&mut self) {
        self.backlogged = false;
        for i in 0..self.listeners.len() {
            loop {
                if self.transient >= MAX_CONNECTIONS {
                    self.backlogged = true;
                    return;
                }
                match self.listeners[i].accept() {
                    Ok((stream, peer)) => self.add(stream, peer),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                        ) => {}
                    Err(e) => {
                        // E.g. out of descriptors: the connection stays queued.
                        tracing::debug!("name server: accept failed: {e}");
                        self.accept_retry = Some(Instant::now() + ACCEPT_RETRY);
                        break;
                    }
                }
            }
        }
    }

    fn add(&mut self, mut stream: TcpStream, peer: SocketAddr) {
        let slot = match self.conns.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        let token = Token(self.first_connection + slot);
        if let Err(e) = self.poll.registry().register(
            &mut stream,
            token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::debug!("name server: {peer}: registering: {e}");
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        let origin = self.local.origin(peer.ip());
        self.conns[slot] = Some(Conn {
            stream,
            peer,
            session: Session::new(origin, id, new_nonce(), self.secret.clone()),
            out: None,
            holding: false,
            deadline: Some(Instant::now() + CONNECTION_TIMEOUT),
        });
        self.transient += 1;
    }

    fn drive(&mut self, slot: usize) {
        let Some(Some(conn)) = self.conns.get_mut(slot) else {
            return;
        };
        let was_holding = conn.holding;
        let finished = conn.drive(&self.table);
        match (was_holding, conn.holding) {
            (false, true) => {
                conn.deadline = None;
                self.transient -= 1;
            }
            (true, false) => {
                conn.deadline = Some(Instant::now() + CONNECTION_TIMEOUT);
                self.transient += 1;
            }
            _ => {}
        }
        if finished {
            self.close(slot);
        }
    }

    fn close(&mut self, slot: usize) {
        if let Some(mut conn) = self.conns.get_mut(slot).and_then(Option::take) {
            // Closing the descriptor would drop it from epoll anyway; this
            // keeps mio's bookkeeping exact.
            let _ = self.poll.registry().deregister(&mut conn.stream);
            let removed = lock(&self.table).end_session(conn.session.id());
            if removed > 0 {
                tracing::debug!(
                    "name server: {}: session closed; its {removed} entries removed",
                    conn.peer
                );
            }
            if !conn.holding {
                self.transient -= 1;
            }
        }
    }

    fn expire(&mut self) {
        let now = Instant::now();
        for slot in 0..self.conns.len() {
            let Some(conn) = &self.conns[slot] else {
                continue;
            };
            if conn.deadline.is_some_and(|d| d <= now) {
                tracing::debug!(
                    "name server: {}: no complete command within {CONNECTION_TIMEOUT:?} \
                     ({} bytes) and no entry held; closing",
                    conn.peer,
                    conn.session.received()
                );
                self.close(slot);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::name_server::query;
    use crate::fabric::name_server::wire::{
        Reply, Request, STATUS_NEEDS_SESSION, STATUS_NOT_LOCAL,
    };
    use socket2::{Domain, Socket, Type};
    use std::net::TcpStream as StdStream;

    const T: Duration = Duration::from_secs(20);

    /// A server on 127.0.0.1 for which only `host` is this host, so that a
    /// client bound to another loopback address plays another host.
    fn server_trusting(host: &[IpAddr]) -> (NameServer, SocketAddr) {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let ns = NameServer::bind_or_join(
            &[ip],
            0,
            LocalHost::exactly(host.iter().copied()),
            Server::at("unused".into(), Vec::new()),
            None,
        )
        .unwrap();
        assert!(ns.is_serving());
        let addr = ns.local_addr();
        (ns, addr)
    }

    /// Sends `request` from `source` and returns everything answered
    /// before the server closed.
    fn exchange(source: Ipv4Addr, server: SocketAddr, request: Request) -> Vec<u8> {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        socket.bind(&SocketAddr::from((source, 0)).into()).unwrap();
        socket.connect_timeout(&server.into(), T).unwrap();
        let mut s: StdStream = socket.into();
        s.set_read_timeout(Some(T)).unwrap();
        assert_eq!(s.local_addr().unwrap().ip(), IpAddr::V4(source));
        s.write_all(&request.encode()).unwrap();
        let mut got = Vec::new();
        match s.read_to_end(&mut got) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("the server did not close: {e}"),
        }
        got
    }

    #[test]
    fn registrations_from_a_foreign_address_are_refused_on_a_real_socket() {
        let (ns, addr) = server_trusting(&[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
        let local = Ipv4Addr::LOCALHOST;
        let stranger = Ipv4Addr::new(127, 0, 0, 2);
        let port = addr.port();
        let _mine = ns.register(5, Epid(0x55)).unwrap();
        let not_local = Reply::NotFound {
            status: STATUS_NOT_LOCAL,
        }
        .encode();
        // The stranger's DEL then ADD would redirect service 5.
        for request in [
            Request::Del {
                service: 5,
                epid: Epid(0x55),
            },
            Request::Add {
                service: 5,
                epid: Epid(0xbad),
            },
            Request::Add {
                service: 6,
                epid: Epid(0xbad),
            },
        ] {
            assert_eq!(
                exchange(stranger, addr, request),
                not_local.as_bytes(),
                "{request:?}"
            );
        }
        // Nor may it open a session.
        let refused = Reply::Refused {
            status: STATUS_NOT_LOCAL,
        };
        assert_eq!(
            exchange(stranger, addr, Request::Hello),
            refused.encode().as_bytes()
        );
        assert_eq!(
            query("127.0.0.1", port, 5, T).unwrap(),
            (Service::new(5), Epid(0x55))
        );
        assert_eq!(
            query("127.0.0.1", port, 6, T).unwrap_err().kind(),
            ErrorKind::NoData
        );
        // The stranger may still query.
        let found = Reply::decode(&exchange(stranger, addr, Request::Query { service: 5 }));
        assert_eq!(
            found,
            Ok(Reply::Found {
                service: 5,
                epid: Epid(0x55)
            })
        );
        // The host's C-style ADD is refused too (it names no owner) ...
        let add = Request::Add {
            service: 6,
            epid: Epid(0x66),
        };
        let needs_session = Reply::NotFound {
            status: STATUS_NEEDS_SESSION,
        };
        assert_eq!(
            exchange(local, addr, add),
            needs_session.encode().as_bytes()
        );
        // ... and its sessions register.
        let other = NameServer::start_on(addr).unwrap();
        let _theirs = other.register(6, Epid(0x66)).unwrap();
        assert_eq!(
            query("127.0.0.1", port, 6, T).unwrap(),
            (Service::new(6), Epid(0x66))
        );
    }

    #[test]
    fn a_refused_registration_is_an_access_error_for_the_client() {
        // The client connects from 127.0.0.1, so the refusing server here
        // counts no address as its host.
        let (_strict, addr) = server_trusting(&[]);
        let handle = NameServer::start_on(addr).unwrap();
        assert!(!handle.is_serving());
        let e = handle.register(1, Epid(1)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Access, "{e}");
        assert!(e.message().contains("only from its own host"), "{e}");
        assert!(e.message().contains(&addr.to_string()), "{e}");
        assert_eq!(
            query("127.0.0.1", addr.port(), 1, T).unwrap_err().kind(),
            ErrorKind::NoData
        );
    }

    #[test]
    fn a_session_holding_entries_outlives_the_connection_timeout() {
        let (_ns, addr) = server_trusting(&[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
        let handle = NameServer::start_on(addr).unwrap();
        let reg = handle.register(3, Epid(0x33)).unwrap();
        thread::sleep(CONNECTION_TIMEOUT * 2);
        assert_eq!(
            query("127.0.0.1", addr.port(), 3, T).unwrap(),
            (Service::new(3), Epid(0x33))
        );
        // The session is still open: the DEL goes over it.
        let again = handle.register(4, Epid(0x44)).unwrap();
        reg.unregister().unwrap();
        again.unregister().unwrap();
        assert_eq!(
            query("127.0.0.1", addr.port(), 3, T).unwrap_err().kind(),
            ErrorKind::NoData
        );
    }
}
