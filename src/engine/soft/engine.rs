//! [`SoftEngine`] and its [`SoftConfig`]: the soft engine as the rest of
//! the crate sees it, an [`Engine`] that opens [`SoftEndpoint`]s.
//!
//! The engine itself holds nothing but the configuration; each endpoint
//! owns its listener, its connections and its [`SoftCore`](super::SoftCore)
//! (the sans-IO protocol). See `endpoint.rs` for how the edge drives the
//! core, and `transport.rs` for the sockets.

use super::endpoint::SoftEndpoint;
use super::ProtocolConfig;
use crate::engine::{EndpointOptions, Engine, EngineKind};
use crate::{Error, ErrorKind, Result};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

/// The smallest ring of a shared-memory link ([`SoftConfig::shm_ring`]).
pub const SHM_RING_MIN: usize = 4 << 10;
/// The largest ring of a shared-memory link ([`SoftConfig::shm_ring`]).
pub const SHM_RING_MAX: usize = 1 << 30;

/// How soft endpoints are opened: where they listen, the protocol's sizes,
/// and the edge's timeouts and buffer sizes.
///
/// ```
/// use psmrail::engine::soft::SoftConfig;
/// let mut cfg = SoftConfig::default();
/// cfg.protocol.eager_threshold = 16 << 10;
/// cfg.validate().unwrap();
/// assert_eq!(cfg.bind, std::net::Ipv4Addr::LOCALHOST);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SoftConfig {
    /// The IPv4 address to listen on; it is part of the epid, so it must
    /// be an address peers can reach (not `0.0.0.0`). Default `127.0.0.1`
    /// (this host only); [`bind_named`](Self::bind_named) takes an
    /// interface or host name, and `getinfo` reads `PSMRAIL_SOFT_ADDR`
    /// when the hints carry no soft configuration. IPv4 only: see
    /// [`listen_addr`](crate::config::listen_addr) for why.
    pub bind: Ipv4Addr,
    /// The TCP port; 0 picks a free one per endpoint (the default). A fixed
    /// port allows one open endpoint per address.
    pub port: u16,
    /// The protocol's sizes: eager threshold, chunk size, AM limits,
    /// unexpected-message budget and credit windows.
    pub protocol: ProtocolConfig,
    /// Same-host peers connect over Unix-domain sockets (abstract names
    /// derived from the epid) instead of loopback TCP. Default on.
    pub unix_sockets: bool,
    /// Outgoing TCP connections are bound to [`bind`](Self::bind) as their
    /// source address, so traffic to a peer leaves through the interface
    /// that owns it (an mrail rail must stay on its own link). Default off:
    /// the kernel picks the source address.
    pub dial_from_bind: bool,
    /// An accepted connection whose handshake has not completed after this
    /// long is dropped. Default 10 s.
    pub handshake_timeout: Duration,
    /// How long a connection the protocol closed may take to flush its
    /// last frames and see them safely with the peer (its EOF, or every
    /// byte acknowledged); a socket still unsafe then is held open as long
    /// again by a background thread, so bytes of completed sends are not
    /// dropped under a peer that is slow to read. Default 1 s.
    pub linger: Duration,
    /// `TCP_USER_TIMEOUT`: a peer that acknowledges nothing for this long
    /// is declared dead (its pending operations fail). `None` keeps the
    /// kernel's default (minutes). Default 30 s.
    pub peer_timeout: Option<Duration>,
    /// `SO_SNDBUF` / `SO_RCVBUF` for every socket; `None` (the default)
    /// keeps the kernel's autotuning, which grows further than a fixed size
    /// may without privileges.
    pub socket_buffer: Option<usize>,
    /// Most bytes one transmit batch (one `writev`) gathers. Default 1 MiB.
    pub transmit_batch: usize,
    /// Largest read into a connection's input buffer. Default 1 MiB.
    pub max_read: usize,
    /// Most bytes read from one connection in one progress step, so one
    /// busy peer cannot starve the others. Default 1 MiB.
    pub read_budget: usize,
    /// Most bytes composed for one connection in one progress step (or one
    /// post), so one busy peer cannot starve the others and every step
    /// stays bounded. Default 2 MiB.
    pub write_budget: usize,
    /// A connection whose input holds part of a frame (or the rest of a
    /// Data payload) and completes no frame for this long is closed, as
    /// if its transport had failed: what is pending towards its peer
    /// fails. Such a connection costs the bytes it sent and no more: the
    /// spare room of an input buffer (and the whole buffers of a
    /// connection with no traffic) are released within a fraction of a
    /// second. A frame of the default sizes completes within this time on
    /// any link faster than about 30 KB/s. Default 10 s.
    pub frame_timeout: Duration,
    /// Most connections an endpoint keeps (accepted and dialed, counting
    /// those still in their handshake). A connection arriving when all
    /// are taken makes room, in this order: the oldest accepted
    /// connection still in its handshake is closed; else the connection
    /// idle longest (no bytes either way for a while, nothing in flight
    /// on it) among those of peers the layers above never named (no
    /// `connect` returned them) is closed gracefully (Bye); else the
    /// newcomer is closed at once. Peers named by `connect` keep their
    /// connections. Default 4096.
    pub max_connections: usize,
    /// Most accepted connections still in their handshake. They are
    /// looked at every step only while the endpoint sleeps on socket
    /// readiness (auto progress), every sixteenth step otherwise, through
    /// a poller of their own, so thousands of silent sockets cost the
    /// established peers nothing. When all are taken, those whose Hello
    /// already arrived finish their handshake first; then the oldest one
    /// is closed to make room (a peer's Hello follows its connect at once:
    /// the oldest ones are the ones that stay silent). Default 256.
    pub max_handshaking: usize,
    /// Most connections one peer (one epid) may hold; a handshake beyond
    /// it is answered, then that connection is closed gracefully (Bye),
    /// the peer's other connections untouched. Two endpoints dialing each
    /// other at once make two connections; the endpoint reaching itself
    /// makes two as well. At least 2; default 4.
    pub max_connections_per_peer: usize,
    /// Unexpected messages of a peer that went down (lost its last
    /// connection) stay receivable this long; then they are dropped. They
    /// stop counting against the unexpected budget the peers still here
    /// share as soon as their peer goes (departed peers together hold at
    /// most one budget more, the oldest departure's messages dropped
    /// first beyond it). The peer's coming back within this
    /// time keeps them (and starts the clock afresh when it goes down
    /// again). Rendezvous requests of a peer that went down are dropped
    /// at once: nobody could send their data. Default 60 s.
    pub dead_peer_messages: Duration,
    /// A peer that went down is forgotten after this long, unless a
    /// `connect` returned it (the layers above may name it, as the
    /// address vector does, and keep doing so) or unexpected messages of
    /// it are still waiting (see [`dead_peer_messages`](Self::dead_peer_messages)).
    /// Its [`PeerAddr`](crate::engine::PeerAddr) is never handed out
    /// again: operations naming it fail with `Inval`, and `peer_epid`
    /// answers `None`; a later connection from its epid makes a new
    /// peer. What one peer costs is listed in the endpoint's module
    /// docs. Default 60 s.
    pub forget_peer_after: Duration,
    /// Check that an accepted connection's dialer is the endpoint its
    /// Hello names before answering it: over a Unix socket, it must be the
    /// process listening at that epid's socket name (`SO_PEERCRED`); over
    /// TCP it must come from that epid's address and answer a challenge
    /// sent to that epid's listener (one extra connection and round trip
    /// per new connection). Without it, anyone who knows the job UUID can
    /// claim any epid. Default on.
    pub verify_peers: bool,
    /// A secret every endpoint of the job shares: both sides of every
    /// handshake prove they know it (HMAC-SHA256 challenges), and a side
    /// without it is refused. See [`JobSecret`](super::JobSecret) for what it protects and
    /// what not. `getinfo` fills it from `PSMRAIL_JOB_SECRET`, or the
    /// owner-only file `PSMRAIL_JOB_SECRET_FILE` names, when the hints
    /// give none. Default none.
    pub job_secret: Option<super::JobSecret>,
    /// Same-host peers reached over a Unix socket move their link onto
    /// memory both processes map, after the handshake: a sealed memfd
    /// passed over the socket, one ring each way. The socket stays the
    /// link's life line (its end is the peer's). `getinfo` turns it off
    /// for `PSMRAIL_SOFT_SHM=0`. Default on.
    pub shared_memory: bool,
    /// Bytes of each of a shared-memory link's two rings: a power of two
    /// from 4 KiB to 1 GiB (`PSMRAIL_SOFT_SHM_RING`). Default 1 MiB.
    pub shm_ring: usize,
    /// On a shared-memory link, a rendezvous message of 32 KiB or more is
    /// read by the receiver straight from the sender's buffer
    /// (`process_vm_readv`: one copy, by the kernel) instead of crossing
    /// the ring in two; where the kernel refuses (`kernel.yama.ptrace_scope`
    /// 2 or 3, a container's seccomp filter, another user) the message
    /// comes through the ring. `PSMRAIL_SOFT_SHM_SINGLE_COPY=0` turns it
    /// off. Default on.
    pub shm_single_copy: bool,
}

impl SoftConfig {
    /// The defaults (see each field).
    pub const DEFAULT: SoftConfig = SoftConfig {
        bind: Ipv4Addr::LOCALHOST,
        port: 0,
        protocol: ProtocolConfig::DEFAULT,
        unix_sockets: true,
        dial_from_bind: false,
        handshake_timeout: Duration::from_secs(10),
        linger: Duration::from_secs(1),
        peer_timeout: Some(Duration::from_secs(30)),
        socket_buffer: None,
        transmit_batch: 1 << 20,
        max_read: 1 << 20,
        read_budget: 1 << 20,
        write_budget: 2 << 20,
        frame_timeout: Duration::from_secs(10),
        max_connections: 4096,
        max_handshaking: 256,
        max_connections_per_peer: 4,
        dead_peer_messages: Duration::from_secs(60),
        forget_peer_after: Duration::from_secs(60),
        verify_peers: true,
        job_secret: None,
        shared_memory: true,
        shm_ring: 1 << 20,
        shm_single_copy: true,
    };

    /// This configuration listening at `spec`: an IPv4 address, an
    /// interface name, a host name or `fi_sockaddr_in://<ipv4>[:<port>]`
    /// (the forms of `PSMRAIL_SOFT_ADDR`, resolved now; a port there sets
    /// [`port`](Self::port)).
    ///
    /// ```
    /// use psmrail::engine::soft::SoftConfig;
    /// use std::net::Ipv4Addr;
    ///
    /// let cfg = SoftConfig::default().bind_named("lo")?;
    /// assert_eq!(cfg.bind, Ipv4Addr::LOCALHOST);
    /// let cfg = SoftConfig::default().bind_named("fi_sockaddr_in://127.0.0.1:7301")?;
    /// assert_eq!((cfg.bind, cfg.port), (Ipv4Addr::LOCALHOST, 7301));
    /// assert!(SoftConfig::default().bind_named("::1").is_err());
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Errors
    /// `Inval` for a malformed, IPv6 or unreachable address; `NoData`
    /// for a name that does not resolve here.
    pub fn bind_named(mut self, spec: &str) -> Result<SoftConfig> {
        let at = crate::config::listen_addr::resolve_listen_addr("SoftConfig::bind_named", spec)?;
        self.bind = at.ip;
        if let Some(port) = at.port {
            self.port = port;
        }
        Ok(self)
    }

    /// Checks every field; the error names the one at fault.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::new(ErrorKind::Inval, what));
        self.protocol.validate()?;
        if self.bind.is_unspecified() || self.bind.is_broadcast() || self.bind.is_multicast() {
            return bad(format!(
                "soft engine configuration: bind address {} cannot be reached by peers; \
                 give the address of one interface (the epid carries it)",
                self.bind
            ));
        }
        for (name, v) in [
            ("transmit_batch", self.transmit_batch),
            ("max_read", self.max_read),
            ("read_budget", self.read_budget),
            ("write_budget", self.write_budget),
            ("max_connections", self.max_connections),
            ("max_handshaking", self.max_handshaking),
        ] {
            if v == 0 {
                return bad(format!(
                    "soft engine configuration: {name} must be at least 1"
                ));
            }
        }
        if self.max_connections_per_peer < 2 {
            return bad(format!(
                "soft engine configuration: max_connections_per_peer ({}) must be at least 2 \
                 (crossed dials and the endpoint reaching itself make two connections)",
                self.max_connections_per_peer
            ));
        }
        if self.frame_timeout.is_zero() {
            return bad("soft engine configuration: frame_timeout must not be zero".into());
        }
        if self.socket_buffer == Some(0) {
            return bad("soft engine configuration: socket_buffer must be at least 1".into());
        }
        if !self.shm_ring.is_power_of_two()
            || !(SHM_RING_MIN..=SHM_RING_MAX).contains(&self.shm_ring)
        {
            return bad(format!(
                "soft engine configuration: shm_ring ({}) must be a power of two from {} to {}",
                self.shm_ring, SHM_RING_MIN, SHM_RING_MAX
            ));
        }
        Ok(())
    }
}

impl Default for SoftConfig {
    fn default() -> Self {
        SoftConfig::DEFAULT
    }
}

/// The soft engine: PSM's queues in pure Rust, over the process itself,
/// Unix-domain sockets and TCP.
///
/// Open endpoints with [`Engine::open`], add them to a
/// [`Reactor`](crate::reactor::Reactor) (they are progress sources), and
/// connect them by epid:
///
/// ```
/// use psmrail::engine::soft::SoftEngine;
/// use psmrail::engine::{Engine, EngineEndpoint, EndpointOptions, OpBuffer, SendMode, TagMatch};
/// use psmrail::reactor::Reactor;
/// use std::future::poll_fn;
/// use std::time::Duration;
///
/// let engine = SoftEngine::default();
/// let options = EndpointOptions {
///     uuid: *b"doc-example-job!",
///     unit: None,
///     port: None,
///     close_timeout: Duration::from_secs(1),
/// };
/// let a = engine.open(&options)?;
/// let b = engine.open(&options)?;
/// let reactor = Reactor::manual();
/// reactor.add_source(a.clone())?;
/// reactor.add_source(b.clone())?;
///
/// // `connect` drives its own endpoint's progress while it waits; the
/// // other side must progress too, so each connects from its own thread
/// // (as two processes would).
/// let (peer_b, peer_a) = std::thread::scope(|s| {
///     let other = s.spawn(|| b.connect(&[a.epid()], Duration::from_secs(5)).remove(0));
///     let mine = a.connect(&[b.epid()], Duration::from_secs(5)).remove(0);
///     (mine, other.join().unwrap())
/// });
/// let (peer_b, _peer_a) = (peer_b?, peer_a?);
///
/// let (rt, st) = (b.completions().clone(), a.completions().clone());
/// let (rk, sk) = (rt.insert(), st.insert());
/// b.irecv(TagMatch::exact(42), OpBuffer::from(vec![0u8; 5]), rk).unwrap();
/// a.isend(peer_b, 42, SendMode::Standard, OpBuffer::from(b"hello".to_vec()), sk).unwrap();
///
/// let sent = reactor.block_on(poll_fn(|cx| reactor.poll_completion(&st, sk, cx)));
/// let got = reactor.block_on(poll_fn(|cx| reactor.poll_completion(&rt, rk, cx)));
/// assert_eq!(sent.status.error, None);
/// assert_eq!((got.status.tag, got.status.nbytes), (42, 5));
/// assert_eq!(got.buffer.as_slice(), b"hello");
/// assert_eq!(got.status.source.and_then(|p| b.peer_epid(p)), Some(a.epid()));
///
/// a.close(Duration::from_secs(1))?;
/// b.close(Duration::from_secs(1))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct SoftEngine {
    config: Arc<SoftConfig>,
}

impl SoftEngine {
    /// An engine opening endpoints with `config` (checked here).
    pub fn new(config: SoftConfig) -> Result<SoftEngine> {
        config.validate()?;
        Ok(SoftEngine {
            config: Arc::new(config),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SoftConfig {
        &self.config
    }
}

impl Engine for SoftEngine {
    type Endpoint = SoftEndpoint;

    fn kind(&self) -> EngineKind {
        EngineKind::Soft
    }

    /// Opens an endpoint listening on the configured address. The soft
    /// engine has no devices: `unit` and `port` of the options are ignored.
    fn open(&self, options: &EndpointOptions) -> Result<Arc<SoftEndpoint>> {
        SoftEndpoint::open(&self.config, options).map(Arc::new)
    }
}
