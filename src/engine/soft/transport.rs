//! The edge's byte pipes: listeners, streams and the per-connection state
//! ([`Link`]) that sits between a socket and the core.
//!
//! This is the I/O half of the soft engine (the core,
//! [`SoftCore`](super::SoftCore), never sees a socket). Every socket is
//! non-blocking (mio); nothing here waits.
//!
//! # Transports
//!
//! * **TCP** through mio: the listener bound to the endpoint's address (the
//!   address and port its epid carries), streams with `TCP_NODELAY` and,
//!   when configured, larger socket buffers and `TCP_USER_TIMEOUT`.
//! * **Unix-domain sockets** for peers on the same host, when enabled
//!   ([`SoftConfig::unix_sockets`]): each endpoint also listens on the
//!   abstract name `psmrail-soft/<epid in hex>`, and a dialer tries that
//!   name first, falling back to TCP when nothing answers there. Abstract
//!   names belong to the network namespace, so the fast path is taken
//!   exactly when both ends share one (the same host, as far as the epid's
//!   address can tell); the handshake checks the epid and the job either
//!   way. Unix sockets move bulk data at about twice the rate of loopback
//!   TCP and with lower latency.
//! * **Loopback** (the endpoint reaching itself) has no socket at all: two
//!   core connections whose output is appended to each other's input (see
//!   `loopback.rs`).
//!
//! # Reading and writing
//!
//! A [`Link`] keeps an input buffer (socket bytes the core has not
//! consumed: at most one partial frame, so bounded by the largest frame)
//! and an output buffer plus a list of [`PayloadRef`]s (send payloads that
//! go on the wire straight from the operation's buffer). Reads go into the
//! input buffer's spare capacity, or, for the payload of a Data frame the
//! core handed over ([`DirectData`]), straight into the receive buffer.
//! Writes are one gathered `sendmsg` (`MSG_NOSIGNAL`: a peer that is gone
//! is an error, never a `SIGPIPE`) of the output bytes interleaved with
//! the referred payloads. Buffers are reused; in steady state nothing is
//! allocated per message. A link idle for a while gives its buffers back
//! ([`Link::trim_buffers`]); the next read gets memory only once bytes
//! come.
//!
//! Which sockets have something to read is one look at a [`Poller`], a
//! level-triggered epoll set, whose cost is that of the ready sockets.

use super::protocol::{ConnId, DirectData, PayloadRef};
use super::shm::path::ShmPath;
use super::SoftConfig;
use crate::engine::Epid;
use bytes::BytesMut;
use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Interest, Registry, Token};
use std::fmt;
use std::io::{self, IoSlice, Read};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Names a link of one endpoint (never reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct LinkId(pub u64);

/// A connected, non-blocking stream socket.
#[derive(Debug)]
pub(crate) enum Stream {
    /// TCP.
    Tcp(TcpStream),
    /// A Unix-domain socket (same-host fast path).
    Unix(UnixStream),
}

/// Where a TCP connect stands.
pub(crate) enum ConnectState {
    /// Still in progress.
    Pending,
    /// Connected.
    Ready,
    /// Failed.
    Failed(io::Error),
}

impl Stream {
    /// The socket's descriptor (for `poll(2)`).
    pub(super) fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }

    /// Reads into the spare capacity of `buf` (reserving `want` bytes
    /// first), at most `want` bytes. `Ok(0)` is end of stream.
    ///
    /// A buffer without memory (an idle link's, trimmed) gets some only
    /// once bytes come: the first look goes through a small buffer on the
    /// stack, so looking at an idle socket allocates nothing.
    pub(super) fn read_buf(&self, buf: &mut BytesMut, want: usize) -> io::Result<usize> {
        if buf.capacity() > 0 || want == 0 {
            return read_spare(self.fd(), buf, want);
        }
        let mut probe = [0u8; PROBE_READ];
        let k = want.min(PROBE_READ);
        let n = self.read_slice(&mut probe[..k])?;
        if n == 0 {
            return Ok(0);
        }
        buf.reserve(want);
        buf.extend_from_slice(&probe[..n]);
        if n < k || n == want {
            return Ok(n);
        }
        match read_spare(self.fd(), buf, want - n) {
            Ok(m) => Ok(n + m),
            // The bytes read first are in; the rest of the story (EOF, an
            // error) comes with the next read.
            Err(_) => Ok(n),
        }
    }

    /// Reads into `dst` (a receive buffer: direct placement).
    pub(super) fn read_slice(&self, dst: &mut [u8]) -> io::Result<usize> {
        loop {
            let r = match self {
                Stream::Tcp(s) => (&*s).read(dst),
                Stream::Unix(s) => (&*s).read(dst),
            };
            match r {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }

    /// One gathered write: `sendmsg` with `MSG_NOSIGNAL`, so that writing
    /// to a peer that is gone is an `EPIPE` error and never raises
    /// `SIGPIPE` (which kills a C program that has not ignored it).
    pub(super) fn write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        use nix::sys::socket::{sendmsg, MsgFlags, UnixAddr};
        use std::os::fd::AsRawFd;
        let fd = match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        };
        loop {
            let r = sendmsg::<UnixAddr>(fd, bufs, &[], MsgFlags::MSG_NOSIGNAL, None)
                .map_err(io::Error::from);
            match r {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }

    /// As [`write_vectored`](Self::write_vectored), passing descriptor
    /// `fd` along with the bytes (`SCM_RIGHTS`, Unix sockets only): the
    /// peer receives it with the first of them. Nothing is passed when
    /// nothing is written (`WouldBlock`).
    pub(super) fn write_vectored_passing(
        &self,
        bufs: &[IoSlice<'_>],
        fd: RawFd,
    ) -> io::Result<usize> {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};
        let Stream::Unix(s) = self else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "descriptors pass over Unix sockets only",
            ));
        };
        let fds = [fd];
        let cmsg = [ControlMessage::ScmRights(&fds)];
        loop {
            let r = sendmsg::<UnixAddr>(s.as_raw_fd(), bufs, &cmsg, MsgFlags::MSG_NOSIGNAL, None)
                .map_err(io::Error::from);
            match r {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }

    /// As [`read_slice`](Self::read_slice), keeping the descriptors a
    /// peer passed with the bytes (`SCM_RIGHTS`; close-on-exec) in
    /// `fds`, at most [`MAX_PASSED_FDS`] there: any beyond are closed.
    pub(super) fn read_slice_taking_fds(
        &self,
        dst: &mut [u8],
        fds: &mut Vec<OwnedFd>,
    ) -> io::Result<usize> {
        use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};
        let Stream::Unix(s) = self else {
            return self.read_slice(dst);
        };
        let mut cmsg = nix::cmsg_space!([RawFd; MAX_PASSED_FDS]);
        loop {
            let mut iov = [io::IoSliceMut::new(dst)];
            let r = recvmsg::<UnixAddr>(
                s.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_CMSG_CLOEXEC,
            );
            let msg = match r {
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
                Ok(m) => m,
            };
            let n = msg.bytes;
            if let Ok(list) = msg.cmsgs() {
                for c in list {
                    if let ControlMessageOwned::ScmRights(raw) = c {
                        for fd in raw {
                            // SAFETY: the kernel just installed `fd` in
                            // this process for us (SCM_RIGHTS): it is open
                            // and nothing else owns it.
                            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
                            if fds.len() < MAX_PASSED_FDS {
                                fds.push(owned);
                            }
                        }
                    }
                }
            }
            return Ok(n);
        }
    }

    /// As [`read_buf`](Self::read_buf), keeping passed descriptors as
    /// [`read_slice_taking_fds`](Self::read_slice_taking_fds) does (at
    /// most 64 KiB per read: such a link is in its first frames).
    pub(super) fn read_buf_taking_fds(
        &self,
        buf: &mut BytesMut,
        want: usize,
        fds: &mut Vec<OwnedFd>,
    ) -> io::Result<usize> {
        let want = want.min(64 << 10);
        let at = buf.len();
        buf.resize(at + want, 0);
        let r = self.read_slice_taking_fds(&mut buf[at..], fds);
        buf.truncate(at + r.as_ref().map_or(0, |n| *n));
        r
    }

    /// The process at the other end of a Unix socket (`SO_PEERCRED`);
    /// `None` for TCP or when the kernel does not say.
    pub(super) fn peer_pid(&self) -> Option<i32> {
        use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
        let Stream::Unix(s) = self else {
            return None;
        };
        getsockopt(s, PeerCredentials)
            .ok()
            .map(|c| c.pid())
            .filter(|p| *p > 0)
    }

    /// Sends one byte, never blocking, never raising `SIGPIPE`: a
    /// wake-up for a peer sleeping on this socket's readiness (the
    /// shared-memory path, whose bytes bypass the socket). A full socket
    /// already holds a wake-up; a gone peer is found by the reads.
    pub(super) fn send_wake(&self) {
        use nix::sys::socket::{send, MsgFlags};
        let _ = send(
            self.fd(),
            &[0],
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
        );
    }

    /// Ends both halves at once: the peer reads EOF now, whatever it has
    /// not read of ours is still there for it.
    pub(super) fn shutdown_both(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }

    /// Ends the write half (the peer reads EOF after our last bytes).
    pub(super) fn shutdown_write(&self) {
        // A socket that is already reset cannot be shut down; nothing to do.
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Write),
            Stream::Unix(s) => s.shutdown(Shutdown::Write),
        };
    }

    /// Reads and drops what the socket holds, at most about `limit`
    /// bytes, through a buffer on the stack: a crowd of closing
    /// connections leaves no buffer memory behind.
    pub(super) fn discard_input(&self, limit: usize) -> Drained {
        let mut scratch = [0u8; DISCARD_READ];
        let mut total = 0;
        while total < limit {
            match self.read_slice(&mut scratch) {
                Ok(0) => return Drained::PeerGone,
                Ok(n) => total += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Drained::Empty,
                // Reset and the like: nothing more will come.
                Err(_) => return Drained::PeerGone,
            }
        }
        Drained::More
    }

    /// Bytes written that the peer's kernel has not acknowledged yet
    /// (TCP; the FIN counts as one). Closing a TCP socket with such bytes
    /// is safe only while the peer sends nothing more: data arriving at a
    /// closed socket makes the kernel reset the connection and drop what
    /// it had not sent. Always 0 for Unix sockets, where a write puts the
    /// bytes straight into the peer's receive queue (they stay readable
    /// after we close), and when the kernel cannot say.
    pub(super) fn unacked(&self) -> usize {
        let Stream::Tcp(s) = self else {
            return 0;
        };
        let mut n: libc::c_int = 0;
        // nix has no call for TIOCOUTQ (only macros that write the same
        // unsafe wrapper).
        // SAFETY: TIOCOUTQ (SIOCOUTQ on a TCP socket) writes one `c_int`
        // through the pointer, which points at a live local `c_int`; the
        // descriptor is an open socket owned by `s` for the call.
        let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut n as *mut libc::c_int) };
        if rc == 0 {
            usize::try_from(n).unwrap_or(0)
        } else {
            0
        }
    }

    /// How a non-blocking connect is doing (Unix sockets connect at once).
    pub(super) fn connect_state(&self) -> ConnectState {
        let Stream::Tcp(s) = self else {
            return ConnectState::Ready;
        };
        match s.take_error() {
            Ok(Some(e)) | Err(e) => return ConnectState::Failed(e),
            Ok(None) => {}
        }
        match s.peer_addr() {
            Ok(_) => ConnectState::Ready,
            Err(e) if e.kind() == io::ErrorKind::NotConnected => ConnectState::Pending,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => ConnectState::Pending,
            Err(e) => ConnectState::Failed(e),
        }
    }

    /// Applies the configured socket options.
    pub(super) fn tune(&self, cfg: &SoftConfig) -> io::Result<()> {
        let sock = match self {
            Stream::Tcp(s) => socket2::SockRef::from(s),
            Stream::Unix(s) => socket2::SockRef::from(s),
        };
        if let Stream::Tcp(s) = self {
            s.set_nodelay(true)?;
            if let Some(t) = cfg.peer_timeout {
                sock.set_tcp_user_timeout(Some(t))?;
            }
        }
        if let Some(size) = cfg.socket_buffer {
            sock.set_send_buffer_size(size)?;
            sock.set_recv_buffer_size(size)?;
        }
        Ok(())
    }

    /// Registers with the auto thread's poll (readable and writable).
    pub(super) fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        let interest = Interest::READABLE | Interest::WRITABLE;
        match self {
            Stream::Tcp(s) => registry.register(s, token, interest),
            Stream::Unix(s) => registry.register(s, token, interest),
        }
    }

    /// Undoes [`register`](Self::register).
    pub(super) fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => registry.deregister(s),
            Stream::Unix(s) => registry.deregister(s),
        }
    }
}

/// Most descriptors a link keeps of those a peer passed (a segment's
/// memfd is one; any more are closed as they come).
pub(crate) const MAX_PASSED_FDS: usize = 2;

/// Size of the first look at a socket whose buffer has no memory.
const PROBE_READ: usize = 1024;

/// Size of one read that drops what it reads.
const DISCARD_READ: usize = 16 << 10;

/// What [`Stream::discard_input`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Drained {
    /// Nothing more to read for now.
    Empty,
    /// The limit was reached; more may wait.
    More,
    /// End of stream or an error: the peer sends nothing more.
    PeerGone,
}

/// Reads from `fd` into the spare capacity of `buf`.
///
/// `read(2)` itself, not `nix::unistd::read`: that one takes an
/// initialised `&mut [u8]`, and zeroing the spare capacity before every
/// read would cost what this saves.
fn read_spare(fd: RawFd, buf: &mut BytesMut, want: usize) -> io::Result<usize> {
    buf.reserve(want);
    let spare = buf.spare_capacity_mut();
    let n = spare.len().min(want);
    let ptr = spare.as_mut_ptr();
    loop {
        // SAFETY: `ptr` points at `buf`'s spare capacity, valid for writes
        // of at least `n` bytes (`n <= spare.len()`); read(2) writes at most
        // `n` bytes there and never reads it, so uninitialised memory is
        // fine. `buf` is not touched until the call returns.
        let r = unsafe { libc::read(fd, ptr.cast(), n) };
        if r >= 0 {
            let r = r as usize;
            // SAFETY: read(2) initialised the first `r <= n` bytes after
            // the current length, all within the capacity.
            unsafe { buf.set_len(buf.len() + r) };
            return Ok(r);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// A `pollfd` asking whether `fd` is readable.
pub(crate) fn pollfd(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// `poll(2)` without waiting: how many descriptors have events (their
/// `revents` say which).
///
/// `libc::poll` rather than `nix::poll::poll`, whose `PollFd` borrows
/// each descriptor: the lingerer waits on the descriptors of sockets it
/// keeps behind a lock it releases before waiting (see `poll_for`), and
/// the listeners' look shares the same two helpers.
pub(crate) fn poll_now(fds: &mut [libc::pollfd]) -> io::Result<usize> {
    if fds.is_empty() {
        return Ok(0);
    }
    // SAFETY: `fds` is a live, initialised slice of pollfd structs and its
    // exact length is passed with it; poll(2) only writes their `revents`.
    // Negative descriptors are ignored by the kernel.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `poll(2)` waiting at most `timeout` (interrupted calls count as
/// events: the caller looks again).
pub(crate) fn poll_for(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: as in `poll_now`: a live slice of pollfd structs and its
    // exact length; poll(2) only writes their `revents`.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n >= 0 {
        return Ok(n as usize);
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::Interrupted {
        Ok(0)
    } else {
        Err(e)
    }
}

/// A level-triggered epoll set: which of its sockets have bytes (or EOF,
/// or an error) to read, in one system call that costs what the ready
/// ones cost, however many are idle. Each descriptor carries a token.
pub(crate) struct Poller {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

impl fmt::Debug for Poller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Poller").field("fd", &self.fd).finish()
    }
}

impl Poller {
    /// An empty set reporting at most `batch` ready descriptors per look.
    pub(super) fn new(batch: usize) -> io::Result<Poller> {
        // SAFETY: epoll_create1 takes no pointer; a non-negative result is
        // a new descriptor that nothing else owns.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Poller {
            // SAFETY: `fd` was just created and is owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            events: vec![libc::epoll_event { events: 0, u64: 0 }; batch.max(1)],
        })
    }

    /// Watches `fd` for input, reported with `token`.
    pub(super) fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token)
    }

    /// Stops watching `fd` (nothing happens if it was not watched).
    pub(super) fn delete(&self, fd: RawFd) {
        // An error only means it was not in the set.
        let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, 0);
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `ev` is a live epoll_event the call only reads; both
        // descriptors are open for the duration of the call.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Calls `f` with the token of every ready descriptor, without
    /// waiting: at most the batch per call (epoll hands the others out
    /// next time, round-robin). How many there were.
    pub(super) fn ready(&mut self, mut f: impl FnMut(u64)) -> io::Result<usize> {
        let max = libc::c_int::try_from(self.events.len()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `events` is a live buffer of `max` epoll_event structs
        // that epoll_wait only writes; the epoll descriptor is open.
        let n = unsafe { libc::epoll_wait(self.fd.as_raw_fd(), self.events.as_mut_ptr(), max, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(0)
            } else {
                Err(e)
            };
        }
        let n = n as usize;
        for ev in &self.events[..n] {
            // A copy: the struct is packed on some targets.
            let token = ev.u64;
            f(token);
        }
        Ok(n)
    }
}

/// The abstract Unix-socket name an endpoint listens on.
pub(crate) fn unix_name(epid: Epid) -> io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(format!("psmrail-soft/{:016x}", epid.0))
}

/// Starts a non-blocking TCP connect; with `from`, the socket is bound to
/// that source address first (any port), so the connection leaves through
/// the interface that owns it.
pub(crate) fn dial_tcp(addr: SocketAddrV4, from: Option<Ipv4Addr>) -> io::Result<Stream> {
    let Some(from) = from else {
        return TcpStream::connect(SocketAddr::V4(addr)).map(Stream::Tcp);
    };
    let socket = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::STREAM.nonblocking(),
        Some(socket2::Protocol::TCP),
    )?;
    socket.bind(&SocketAddr::V4(SocketAddrV4::new(from, 0)).into())?;
    match socket.connect(&SocketAddr::V4(addr).into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let std_stream: std::net::TcpStream = socket.into();
    Ok(Stream::Tcp(TcpStream::from_std(std_stream)))
}

/// Starts a connection to `epid` as an endpoint configured by `cfg`
/// dials: its Unix-socket name first when Unix sockets are on (connected
/// at once, the link starts `Handshaking`), else TCP to its address (the
/// link starts `Connecting`). The error's kind is `ConnRefused` when
/// nothing listens there, `Inval` for an epid that is not a soft one.
pub(crate) fn dial_epid(
    epid: Epid,
    cfg: &SoftConfig,
) -> Result<(Stream, Remote, LinkPhase), (crate::ErrorKind, String)> {
    let target = super::SoftEpid::try_from(epid).map_err(|e| {
        (
            crate::ErrorKind::Inval,
            format!("cannot connect to {epid}: {e}"),
        )
    })?;
    let addr = target.socket_addr();
    if cfg.unix_sockets {
        if let Ok(s) = dial_unix(epid) {
            if let Err(e) = s.tune(cfg) {
                tracing::debug!(error = %e, "soft engine: cannot set socket options");
            }
            return Ok((s, Remote::Unix, LinkPhase::Handshaking));
        }
    }
    let from = cfg.dial_from_bind.then_some(cfg.bind);
    let s = dial_tcp(addr, from).map_err(|e| {
        let kind = match e.kind() {
            io::ErrorKind::ConnectionRefused => crate::ErrorKind::ConnRefused,
            _ => crate::ErrorKind::Io,
        };
        (kind, format!("cannot connect to {epid} at tcp {addr}: {e}"))
    })?;
    Ok((s, Remote::Tcp(addr.into()), LinkPhase::Connecting))
}

/// Connects to `epid`'s Unix-socket name; an error when nobody listens
/// there in this network namespace.
pub(crate) fn dial_unix(epid: Epid) -> io::Result<Stream> {
    UnixStream::connect_addr(&unix_name(epid)?).map(Stream::Unix)
}

/// An endpoint's listening sockets.
#[derive(Debug)]
pub(crate) struct Listeners {
    tcp: TcpListener,
    unix: Option<UnixListener>,
}

impl Listeners {
    /// Binds the TCP listener; the address it got (port 0 resolved).
    pub(super) fn bind(addr: SocketAddrV4) -> io::Result<(Listeners, SocketAddrV4)> {
        let tcp = TcpListener::bind(SocketAddr::V4(addr))?;
        let local = match tcp.local_addr()? {
            SocketAddr::V4(a) => a,
            SocketAddr::V6(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "an IPv4 bind gave an IPv6 address",
                ))
            }
        };
        Ok((Listeners { tcp, unix: None }, local))
    }

    /// Adds the Unix-socket listener for `epid`.
    pub(super) fn bind_unix(&mut self, epid: Epid) -> io::Result<()> {
        let std = std::os::unix::net::UnixListener::bind_addr(&unix_name(epid)?)?;
        std.set_nonblocking(true)?;
        self.unix = Some(UnixListener::from_std(std));
        Ok(())
    }

    /// Whether the Unix-socket listener is up.
    pub(super) fn has_unix(&self) -> bool {
        self.unix.is_some()
    }

    /// Whether a connection waits on either listener: one `poll(2)` with
    /// no timeout. An idle `accept(2)` is far dearer (the kernel builds and
    /// tears down a socket file to find the queue empty), so `accept` runs
    /// only after this (or a merged poll, [`poll_now`]) says yes.
    pub(super) fn pending(&self) -> bool {
        let mut fds = [pollfd(-1), pollfd(-1)];
        let n = self.fds(|k, fd| fds[k] = pollfd(fd));
        // On error, say yes: accept reports (or clears) the condition.
        !matches!(poll_now(&mut fds[..n]), Ok(0))
    }

    /// Calls `f` with each listening descriptor and its index; how many.
    pub(super) fn fds(&self, mut f: impl FnMut(usize, RawFd)) -> usize {
        f(0, self.tcp.as_raw_fd());
        match &self.unix {
            Some(u) => {
                f(1, u.as_raw_fd());
                2
            }
            None => 1,
        }
    }

    /// The next pending connection of either listener; `Ok(None)` when
    /// none is waiting.
    pub(super) fn accept(&self) -> io::Result<Option<(Stream, Remote)>> {
        match self.tcp.accept() {
            Ok((s, a)) => return Ok(Some((Stream::Tcp(s), Remote::Tcp(a)))),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        if let Some(u) = &self.unix {
            match u.accept() {
                Ok((s, _)) => return Ok(Some((Stream::Unix(s), Remote::Unix))),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Registers both listeners (readable).
    pub(super) fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        registry.register(&mut self.tcp, token, Interest::READABLE)?;
        if let Some(u) = &mut self.unix {
            registry.register(u, token, Interest::READABLE)?;
        }
        Ok(())
    }

    /// Undoes [`register`](Self::register).
    pub(super) fn deregister(&mut self, registry: &Registry) {
        // Errors only mean "not registered"; the sockets close soon anyway.
        let _ = registry.deregister(&mut self.tcp);
        if let Some(u) = &mut self.unix {
            let _ = registry.deregister(u);
        }
    }
}

/// What is at the other end of a link, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Remote {
    /// A TCP peer.
    Tcp(SocketAddr),
    /// A Unix-socket peer on this host.
    Unix,
    /// This endpoint itself.
    Loopback,
}

impl fmt::Display for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Remote::Tcp(a) => write!(f, "tcp {a}"),
            Remote::Unix => f.write_str("a unix socket on this host"),
            Remote::Loopback => f.write_str("this endpoint (loopback)"),
        }
    }
}

/// How a link moves bytes.
#[derive(Debug)]
pub(crate) enum Pipe {
    /// A socket.
    Stream(Stream),
    /// The other half of the endpoint's own loopback pair.
    Loopback {
        /// The partner link, whose input this link's output goes to.
        partner: LinkId,
    },
}

/// Which [`Poller`] of its endpoint watches a link's socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Polled {
    /// None: the link is looked at directly (connecting, draining,
    /// loopback) or is gone.
    No,
    /// The set every step looks at: connections past their handshake
    /// and the ones this endpoint dialed.
    Hot,
    /// The set of accepted connections still in their handshake, looked
    /// at less often.
    Cold,
    /// Sockets of links whose input comes through shared memory: only
    /// their end (or a wake-up byte) comes there, looked at as often as
    /// the cold set.
    Lifeline,
}

/// Where a link is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LinkPhase {
    /// TCP connect in progress (dialer).
    Connecting,
    /// Connected; the core's handshake runs.
    Handshaking,
    /// The core's connection is established.
    Open,
    /// The core closed the connection: flushing its last bytes, then
    /// shutting down and waiting (a little) for the peer's EOF.
    Draining,
    /// Gone; removed at the end of the progress step.
    Dead,
}

/// One transport connection and its buffers (see the module docs).
#[derive(Debug)]
pub(crate) struct Link {
    pub id: LinkId,
    pub pipe: Pipe,
    pub remote: Remote,
    /// The core's connection, until it is forgotten.
    pub conn: Option<ConnId>,
    pub phase: LinkPhase,
    /// Bytes read and not yet consumed by the core.
    pub input: BytesMut,
    /// Bytes to write, with `refs` interleaved.
    pub output: BytesMut,
    /// Send payloads that go between `output`'s bytes (`at` relative to
    /// the current start of `output`).
    pub refs: Vec<PayloadRef>,
    /// A Data payload being read straight into a receive buffer.
    pub direct: Option<DirectData>,
    /// Connect / handshake / drain deadline.
    pub deadline: Option<Instant>,
    /// The timeout the deadline came from (for messages).
    pub timeout: Duration,
    /// Dialer: the epid dialed.
    pub expect: Option<Epid>,
    /// A `connect` call waits for this dial's outcome.
    pub awaited: bool,
    /// How much the next read into `input` asks for.
    pub read_size: usize,
    /// The other side is gone (EOF seen, loopback partner closed).
    pub peer_gone: bool,
    /// The write half is shut down (draining).
    pub shut: bool,
    /// A write failed with this error: nothing more is written; what the
    /// peer sent before is still read (the endpoint's `salvage`).
    pub broken: Option<String>,
    /// Reading ended (EOF or a read error, and why): the link is lost once
    /// the peer's other links were read (the endpoint's `salvage`).
    pub ended: Option<(crate::ErrorKind, String)>,
    /// Registered with the auto thread's poll.
    pub registered: bool,
    /// Bytes composed for it this round (see `SoftConfig::write_budget`).
    pub round_out: usize,
    /// Its socket may have bytes (or EOF) to read this step.
    pub readable: bool,
    /// The endpoint's poller set watching the socket.
    pub polled: Polled,
    /// Listed for a look every step (connecting, draining, output the
    /// socket did not take yet, ...).
    pub watched: bool,
    /// The round `round_out` counts for.
    pub round: u64,
    /// The step that last serviced it (one service per step).
    pub stamp: u32,
    /// Frames completed on it so far (whole frames decoded, direct
    /// payloads placed): its input is progressing.
    pub frames: u64,
    /// Since when its input has held part of a frame with no frame
    /// completed, and the frame count then (`SoftConfig::frame_timeout`).
    pub stall: Option<(Instant, u64)>,
    /// The endpoint's sweep period in which bytes last moved on it.
    pub active: u64,
    /// A reconnection attempt for this detached connection: the dial
    /// that resumes it, or (`probe`) a look at whether its peer still
    /// listens.
    pub resumes: Option<ConnId>,
    /// The attempt only probes the peer's listener.
    pub probe: bool,
    /// Its connection's link went on without it (detached or resumed
    /// elsewhere): its unwritten output is not the peer's any more, and
    /// dropping it fails no send (the link's log sends it again).
    pub superseded: bool,
    /// It carries the identity Challenge for this accepted connection
    /// (`verify.rs`).
    pub challenge: Option<ConnId>,
    /// Its shared-memory path (same-host Unix links): offered (dialer),
    /// accepted (acceptor), and which directions moved onto it.
    pub shm: Option<Box<ShmPath>>,
    /// Reads keep descriptors the peer passes along (an accepted Unix
    /// link that may be offered a segment).
    pub take_fds: bool,
    /// Descriptors the peer passed, until its offer takes them.
    pub passed_fds: Vec<OwnedFd>,
    /// The socket of a link whose input moved to shared memory reached
    /// its end: the link ends once the ring is empty.
    pub socket_done: bool,
}

/// Smallest read into an input buffer.
pub(crate) const MIN_READ: usize = 4096;
/// First read size of a new link.
pub(crate) const FIRST_READ: usize = 64 << 10;

impl Link {
    /// A link over `pipe` in `phase`.
    pub(super) fn new(id: LinkId, pipe: Pipe, remote: Remote, phase: LinkPhase) -> Link {
        Link {
            id,
            pipe,
            remote,
            conn: None,
            phase,
            input: BytesMut::new(),
            output: BytesMut::new(),
            refs: Vec::new(),
            direct: None,
            deadline: None,
            timeout: Duration::ZERO,
            expect: None,
            awaited: false,
            read_size: FIRST_READ,
            peer_gone: false,
            shut: false,
            broken: None,
            ended: None,
            registered: false,
            round_out: 0,
            readable: true,
            polled: Polled::No,
            watched: false,
            round: 0,
            stamp: 0,
            frames: 0,
            stall: None,
            active: 0,
            resumes: None,
            probe: false,
            superseded: false,
            challenge: None,
            shm: None,
            take_fds: false,
            passed_fds: Vec::new(),
            socket_done: false,
        }
    }

    /// The socket, unless this is a loopback half.
    pub(super) fn stream(&self) -> Option<&Stream> {
        match &self.pipe {
            Pipe::Stream(s) => Some(s),
            Pipe::Loopback { .. } => None,
        }
    }

    /// Whether bytes wait to be written.
    pub(super) fn has_output(&self) -> bool {
        !self.output.is_empty() || !self.refs.is_empty()
    }

    /// Whether the link still carries (or is about to carry) a core
    /// connection.
    pub(super) fn is_live(&self) -> bool {
        matches!(
            self.phase,
            LinkPhase::Connecting | LinkPhase::Handshaking | LinkPhase::Open
        )
    }

    /// Accounts for `n` bytes written: advances the output and the
    /// references; pushes the op of every reference written in full to
    /// `released`.
    pub(super) fn consume(&mut self, mut n: usize, released: &mut Vec<super::protocol::OpId>) {
        use bytes::Buf;
        while n > 0 {
            let next_ref = self.refs.first().map_or(self.output.len(), |r| r.at);
            if next_ref > 0 {
                let k = n.min(next_ref);
                self.output.advance(k);
                for r in &mut self.refs {
                    r.at -= k;
                }
                n -= k;
                continue;
            }
            let Some(r) = self.refs.first_mut() else {
                break;
            };
            let k = n.min(r.range.len());
            r.range.start += k;
            n -= k;
            if r.range.is_empty() {
                released.push(self.refs.remove(0).op);
            }
        }
        if self.output.is_empty() && self.refs.is_empty() {
            // Lets the next reserve reuse the whole allocation.
            self.output.clear();
        }
    }

    /// Bytes of memory its buffers hold.
    pub(super) fn buffer_capacity(&self) -> (usize, usize) {
        (self.input.capacity(), self.output.capacity())
    }

    /// Whether its input holds part of a frame: bytes the core has not
    /// consumed, or the rest of a Data payload being placed.
    pub(super) fn mid_frame(&self) -> bool {
        !self.input.is_empty() || self.direct.is_some()
    }

    /// Lets go of buffer memory an idle link does not need: an empty
    /// buffer's allocation, a partial frame's spare room (the decoder
    /// reserves the whole frame as soon as its header is in; it reserves
    /// again when more bytes come). Not while a Data payload is being
    /// placed, whose bytes bypass the input buffer.
    /// Answers how many bytes of capacity went.
    pub(super) fn trim_buffers(&mut self) -> usize {
        let before = self.input.capacity() + self.output.capacity();
        if self.direct.is_none() {
            if self.input.is_empty() {
                if self.input.capacity() > 0 {
                    self.input = BytesMut::new();
                    self.read_size = FIRST_READ;
                }
            } else if self.input.capacity() > self.input.len() + MIN_READ {
                self.input = BytesMut::from(&self.input[..]);
            }
        }
        if !self.has_output() {
            if self.output.capacity() > 0 {
                self.output = BytesMut::new();
            }
            if self.refs.capacity() > 0 {
                self.refs = Vec::new();
            }
        }
        before.saturating_sub(self.input.capacity() + self.output.capacity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::soft::OpId;
    use std::io::Write;

    #[test]
    fn consume_walks_output_and_references() {
        let mut l = Link::new(
            LinkId(1),
            Pipe::Loopback { partner: LinkId(2) },
            Remote::Loopback,
            LinkPhase::Open,
        );
        l.output.extend_from_slice(b"aaaabbbb");
        l.refs.push(PayloadRef {
            at: 4,
            op: OpId(7),
            range: 10..20,
        });
        l.refs.push(PayloadRef {
            at: 8,
            op: OpId(8),
            range: 0..5,
        });
        let mut released = Vec::new();
        l.consume(2, &mut released);
        assert_eq!((&l.output[..], l.refs[0].at), (&b"aabbbb"[..], 2));
        l.consume(5, &mut released); // "aa" + 3 payload bytes
        assert_eq!(l.refs[0].range, 13..20);
        assert!(released.is_empty());
        l.consume(7 + 4, &mut released); // rest of ref 7, then "bbbb"
        assert_eq!(released, vec![OpId(7)]);
        assert_eq!(l.refs[0].at, 0);
        l.consume(5, &mut released);
        assert_eq!(released, vec![OpId(7), OpId(8)]);
        assert!(!l.has_output());
    }

    #[test]
    fn reads_land_in_spare_capacity() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        let a = Stream::Unix(UnixStream::from_std(a));
        let mut buf = BytesMut::from(&b"xy"[..]);
        let e = a.read_buf(&mut buf, 16).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        (&b).write_all(b"hello").unwrap();
        assert_eq!(a.read_buf(&mut buf, 3).unwrap(), 3);
        assert_eq!(&buf[..], b"xyhel");
        assert_eq!(a.read_buf(&mut buf, 100).unwrap(), 2);
        assert_eq!(&buf[..], b"xyhello");
        drop(b);
        assert_eq!(a.read_buf(&mut buf, 100).unwrap(), 0);
    }
}
