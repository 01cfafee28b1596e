//! Applying the core's events: placing bytes, completing operations,
//! running AM handlers (and their one reply), connections opened and
//! closed.

use super::*;

impl Inner {
    /// Applies every event the core has queued.
    pub(crate) fn drain_events(&mut self) {
        while let Some(ev) = self.core.poll_event() {
            match ev {
                Event::Place { op, offset, bytes } => {
                    let dst = self
                        .ops
                        .get_mut(op)
                        .and_then(|e| e.buffer.as_mut_slice())
                        .and_then(|b| b.get_mut(offset..offset + bytes.len()));
                    match dst {
                        Some(d) => d.copy_from_slice(&bytes),
                        None => tracing::error!(
                            ?op,
                            offset,
                            len = bytes.len(),
                            "soft engine: Place outside its receive buffer"
                        ),
                    }
                }
                Event::Complete { op, status } => match self.ops.get_mut(op) {
                    Some(e) if e.refs > 0 => e.parked = Some(status),
                    _ => self.finish(op, status),
                },
                Event::Connected { conn, peer, epid } => self.on_connected(conn, peer, epid),
                Event::Resumed { conn, replaced } => self.on_resumed(conn, replaced),
                Event::Verify { conn, epid } => self.on_verify(conn, epid),
                Event::ShmOffered { conn, segment_len } => self.on_shm_offered(conn, segment_len),
                Event::ShmPeerMoved { conn } => self.on_shm_peer_moved(conn),
                Event::ShmDeclined { conn } => self.on_shm_declined(conn),
                Event::Pull {
                    conn,
                    token,
                    op,
                    addr,
                    len,
                } => self.on_pull(conn, token, op, addr, len),
                Event::ConnectionClosed { conn, error } => self.on_closed(conn, error),
                Event::PeerDown { peer, epid, error } => {
                    tracing::debug!(?peer, %epid, %error, "soft engine: peer down");
                    self.on_peer_down(peer);
                }
                Event::AmRequest {
                    token,
                    source,
                    handler,
                    args,
                    payload,
                } => {
                    let Some(h) = self.handlers.get(usize::from(handler)).cloned() else {
                        tracing::warn!(
                            handler,
                            "soft engine: AM request for an unregistered handler"
                        );
                        self.core.am_done(token);
                        continue;
                    };
                    let mut reply = Replier {
                        core: &mut self.core,
                        token: Some(token),
                    };
                    {
                        let _scope = HandlerScope::enter(self.id);
                        h.on_request(
                            AmMessage {
                                source,
                                args: args.as_slice(),
                                payload: &payload,
                            },
                            &mut reply,
                        );
                    }
                    if let Some(token) = reply.token.take() {
                        self.core.am_done(token);
                    }
                }
                Event::Hooked { source, payload } => {
                    if let Some(h) = &self.tag_hook {
                        let _scope = HandlerScope::enter(self.id);
                        h.on_message(source, &payload);
                    }
                }
                Event::AmReply {
                    source,
                    handler,
                    args,
                    payload,
                } => {
                    let Some(h) = self.handlers.get(usize::from(handler)).cloned() else {
                        tracing::warn!(
                            handler,
                            "soft engine: AM reply for an unregistered handler"
                        );
                        continue;
                    };
                    let _scope = HandlerScope::enter(self.id);
                    h.on_reply(AmMessage {
                        source,
                        args: args.as_slice(),
                        payload: &payload,
                    });
                }
            }
        }
    }

    /// Hands op's buffer back with its status.
    pub(crate) fn finish(&mut self, op: OpId, status: MqStatus) {
        if let Some(e) = self.ops.remove(op) {
            // A refused key means the slot is gone (a bug above us); the
            // buffer is dropped here either way.
            let _ = self.completions.complete(
                e.key,
                MqCompletion {
                    status,
                    buffer: e.buffer,
                },
            );
        }
    }

    /// A connection completed its handshake: it joins the connections
    /// every step looks at, unless its peer has all the connections it
    /// may hold (`SoftConfig::max_connections_per_peer`).
    pub(super) fn on_connected(&mut self, conn: ConnId, peer: PeerAddr, epid: Epid) {
        if let Ok(mut map) = self.peer_epids.write() {
            map.insert(peer, epid);
        }
        self.down.remove(&peer);
        let Some(i) = self.conn_index(conn) else {
            return;
        };
        let link = &mut self.links[i];
        link.phase = LinkPhase::Open;
        link.deadline = None;
        if link.polled == Polled::Cold {
            link.read_size = FIRST_READ;
        }
        if link.stream().is_some() {
            self.set_polled(i, Polled::Hot);
        }
        if self.core.peer_connections(peer) > self.cfg.max_connections_per_peer {
            tracing::debug!(?peer, %epid, "soft engine: too many connections from one peer; closing the newest");
            self.stats.evicted += 1;
            self.core.close_connection(conn);
            return;
        }
        self.offer_shm(i, conn);
    }

    /// A peer went down: its unexpected messages and then itself are due
    /// to go (`SoftConfig::dead_peer_messages`, `forget_peer_after`).
    pub(super) fn on_peer_down(&mut self, peer: PeerAddr) {
        let now = Instant::now();
        self.down.insert(peer, now);
        if now.checked_add(self.cfg.dead_peer_messages).is_some() {
            self.down_messages.push_back((now, peer));
        }
        if now.checked_add(self.cfg.forget_peer_after).is_some() {
            self.down_forget.push_back((now, peer));
        }
    }

    /// The core closed `conn`: flush its last frames, forget it, let the
    /// transport drain.
    pub(super) fn on_closed(&mut self, conn: ConnId, error: Option<ConnError>) {
        let Some(i) = self.conn_index(conn) else {
            self.core.connection_lost(conn, "no transport");
            return;
        };
        // Sends whose buffers the peer may read itself (single copies)
        // fail with the events that follow this one: the peer must see
        // the end first, so that a read racing with their hand-back is
        // known to it as failed (`on_pull`). A graceful close has none
        // (it waited for every send) and keeps its last frames.
        if error.is_some() {
            self.revoke_pulls(i);
        }
        match self.links[i].pipe {
            Pipe::Stream(_) => {
                let link = &mut self.links[i];
                let before = link.refs.len();
                self.core.poll_transmit_vectored(
                    conn,
                    &mut link.output,
                    &mut link.refs,
                    self.cfg.transmit_batch,
                    &self.ops,
                );
                for r in &link.refs[before..] {
                    if let Some(e) = self.ops.get_mut(r.op) {
                        e.refs += 1;
                    }
                }
            }
            Pipe::Loopback { partner } => {
                if let Some(j) = self.link_index(partner) {
                    let mut input = std::mem::take(&mut self.links[j].input);
                    let limit = input.len() + self.cfg.transmit_batch;
                    self.core.poll_transmit(conn, &mut input, limit, &self.ops);
                    self.links[j].input = input;
                }
            }
        }
        self.core.connection_lost(conn, "closed by the protocol");
        self.by_conn.remove(&conn);
        let link = &mut self.links[i];
        let dialing = link.phase == LinkPhase::Handshaking;
        link.conn = None;
        link.direct = None;
        if dialing && link.awaited {
            let target = link
                .expect
                .map_or_else(|| "?".to_owned(), |e| e.to_string());
            let remote = link.remote;
            let e = match error {
                Some(ConnError::Handshake(HandshakeError::WrongEpid { expected, got })) => {
                    Error::new(
                        ErrorKind::ConnRefused,
                        format!(
                            "soft engine: connecting to {expected} at {remote}: another endpoint ({got}) \
                             answers there now; {expected} is gone"
                        ),
                    )
                }
                Some(e) => Error::with_source(
                    e.kind(),
                    format!("soft engine: connecting to {target} at {remote}: {e}"),
                    e,
                ),
                None => Error::new(
                    ErrorKind::Io,
                    format!("soft engine: connecting to {target} at {remote}: closed during the handshake"),
                ),
            };
            self.dial_errors.push((link.id, e));
        }
        match link.pipe {
            Pipe::Stream(_) => {
                link.phase = LinkPhase::Draining;
                link.timeout = self.cfg.linger;
                link.deadline = Instant::now().checked_add(self.cfg.linger);
                self.set_polled(i, Polled::No);
                self.watch(i);
            }
            Pipe::Loopback { .. } => self.kill(i),
        }
    }

    // ----- connecting ------------------------------------------------------
}

/// The reply channel handed to an AM handler.
struct Replier<'a> {
    core: &'a mut SoftCore,
    token: Option<AmToken>,
}

impl AmReply for Replier<'_> {
    fn reply(&mut self, handler: AmHandlerId, args: &[u64], payload: &[u8]) -> Result<()> {
        let Some(token) = self.token.take() else {
            return Err(Error::new(
                ErrorKind::Inval,
                "soft engine: an AM request is answered at most once",
            ));
        };
        match self.core.am_reply(token, handler.0, args, payload) {
            Ok(()) => Ok(()),
            Err((token, e)) => {
                self.token = Some(token);
                Err(e)
            }
        }
    }
}
