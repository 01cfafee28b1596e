//! Checking who dials: the edge's half of the identity check.
//!
//! An accepted connection's Hello claims an epid. Before the core answers
//! it (`Event::Verify`), the edge checks the claim with what only the real
//! endpoint has ([`SoftConfig::verify_peers`](super::SoftConfig::verify_peers),
//! on by default):
//!
//! * **Unix sockets**: the kernel names the dialing process
//!   (`SO_PEERCRED`); the edge connects to the claimed epid's socket name
//!   and asks the kernel who listens there. The two must be one process.
//!   Both processes are looked at while their sockets are open, so a
//!   process id cannot have been reused in between.
//! * **TCP**: the connection must come from the claimed epid's address,
//!   and the edge sends a Challenge (a random value, and the id of the
//!   link being checked) to the epid's listener on a connection of its
//!   own; the real endpoint, which is dialing us on that link, answers
//!   with a Proof on the connection being checked. A stranger never sees
//!   the value, and a Challenge it forges names no link the endpoint
//!   dials: it is dropped. The check ends with the handshake's
//!   timeout at the latest.
//!
//! A claim that fails is refused with its own reason and touches nothing
//! of the real endpoint's: its connections, operations and standing stay
//! as they were.

use super::endpoint::Inner;
use super::protocol::ConnId;
use super::transport::{dial_tcp, dial_unix, Link, LinkPhase, Pipe, Polled, Remote, Stream};
use super::wire::{encode, Frame};
use super::SoftEpid;
use crate::engine::Epid;
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use std::time::Instant;

impl Inner {
    /// The core asks whether the dialer of `conn` is `epid`.
    pub(crate) fn on_verify(&mut self, conn: ConnId, epid: Epid) {
        let Some(i) = self.conn_index(conn) else {
            return;
        };
        let outcome = match self.links[i].remote {
            Remote::Loopback => Ok(()),
            Remote::Unix => self.same_process(i, epid),
            Remote::Tcp(from) => match SoftEpid::try_from(epid) {
                Err(e) => Err(format!("{epid} is not a soft epid: {e}")),
                Ok(claimed) if *claimed.socket_addr().ip() != from_ip(&from) => Err(format!(
                    "the connection comes from {from}, but {epid} lives at {}",
                    claimed.socket_addr()
                )),
                Ok(claimed) => {
                    self.challenge(conn, claimed);
                    return;
                }
            },
        };
        self.core.verified(conn, outcome);
        self.drain_events();
    }

    /// Whether the process behind link `i` listens at `epid`'s socket
    /// name.
    fn same_process(&self, i: usize, epid: Epid) -> Result<(), String> {
        let Some(Stream::Unix(dialer)) = self.links[i].stream() else {
            return Err("not a Unix socket".to_owned());
        };
        let dialer = getsockopt(dialer, PeerCredentials)
            .map_err(|e| format!("SO_PEERCRED of the connection: {e}"))?;
        let listener = match dial_unix(epid) {
            Ok(Stream::Unix(s)) => s,
            Ok(_) => return Err("no Unix listener".to_owned()),
            Err(e) => return Err(format!("nothing listens at {epid}'s socket name: {e}")),
        };
        let owner = getsockopt(&listener, PeerCredentials)
            .map_err(|e| format!("SO_PEERCRED of {epid}'s listener: {e}"))?;
        if dialer.pid() != owner.pid() {
            return Err(format!(
                "process {} dialed, but {epid} belongs to process {}",
                dialer.pid(),
                owner.pid()
            ));
        }
        Ok(())
    }

    /// Sends the Challenge for `conn` to `claimed`'s listener.
    fn challenge(&mut self, conn: ConnId, claimed: SoftEpid) {
        let nonce = super::protocol::random_seed();
        let addr = claimed.socket_addr();
        let Some(link_id) = self.core.connection_link(conn) else {
            return;
        };
        let stream = match dial_tcp(addr, self.cfg.dial_from_bind.then_some(self.cfg.bind)) {
            Ok(s) => s,
            Err(e) => {
                self.core
                    .verified(conn, Err(format!("cannot reach {addr} to check: {e}")));
                self.drain_events();
                return;
            }
        };
        self.core.expect_proof(conn, nonce);
        let id = self.new_link_id();
        let mut link = Link::new(
            id,
            Pipe::Stream(stream),
            Remote::Tcp(addr.into()),
            LinkPhase::Connecting,
        );
        encode(
            &Frame::Challenge {
                nonce,
                from: self.core.epid(),
                link: link_id,
            },
            &mut link.output,
        );
        link.challenge = Some(conn);
        link.timeout = self.cfg.handshake_timeout;
        link.deadline = Instant::now().checked_add(link.timeout);
        let i = self.push_link(link);
        self.set_polled(i, Polled::No);
        self.watch(i);
    }

    /// A Challenge's connection is up: its frame goes out, then the
    /// connection closes as a finished one does (`drain_link`).
    pub(crate) fn challenge_connected(&mut self, i: usize) {
        let link = &mut self.links[i];
        link.phase = LinkPhase::Draining;
        link.deadline = Instant::now().checked_add(self.cfg.linger);
        self.watch(i);
    }
}

fn from_ip(addr: &std::net::SocketAddr) -> std::net::Ipv4Addr {
    match addr {
        std::net::SocketAddr::V4(a) => *a.ip(),
        std::net::SocketAddr::V6(a) => a
            .ip()
            .to_ipv4_mapped()
            .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
    }
}
