//! Upkeep that runs on the clock: deadlines of links, reaping dead
//! links, the periodic sweep (peers down, peers to forget), and handing
//! memory back to the system after a crowd left.

use super::*;

/// Buffer bytes given back by links (idle, or gone) that make the endpoint
/// hand free memory back to the system (at most once a second): one
/// link's first read buffer. Pages such buffers dirtied after the last
/// trim would otherwise stay with the process, free but resident.
const BUFFERS_TRIM_BYTES: usize = FIRST_READ;

impl Inner {
    /// Enforces link `i`'s deadline (`now`: the time, once read).
    pub(super) fn check_deadline(&mut self, i: usize, now: &mut Option<Instant>) {
        let link = &self.links[i];
        let Some(deadline) = link.deadline else {
            return;
        };
        if deadline > *now.get_or_insert_with(Instant::now) {
            return;
        }
        let t = link.timeout;
        match link.phase {
            LinkPhase::Connecting => self.lose(
                i,
                ErrorKind::TimedOut,
                format!("no TCP connection within {t:?}"),
            ),
            LinkPhase::Handshaking => self.lose(
                i,
                ErrorKind::TimedOut,
                format!("no answer to the handshake within {t:?}"),
            ),
            LinkPhase::Draining => self.kill(i),
            LinkPhase::Open | LinkPhase::Dead => self.links[i].deadline = None,
        }
    }

    /// Drops the links that died; whether any went.
    pub(super) fn reap(&mut self) -> bool {
        let mut made = false;
        let prune = !self.dead.is_empty() && !self.shm_links.is_empty();
        // Reaping may kill more (a loopback partner): they go too.
        while let Some(id) = self.dead.pop() {
            let Some(i) = self.slot(id) else {
                continue;
            };
            if self.links[i].phase != LinkPhase::Dead {
                continue;
            }
            made = true;
            self.set_polled(i, Polled::No);
            let mut link = self.links.swap_remove(i);
            let (input, output) = link.buffer_capacity();
            self.freed_buffers += input + output;
            self.slots.remove(&id);
            if let Some(moved) = self.links.get(i) {
                self.slots.insert(moved.id, i);
            }
            if let Some(c) = link.conn {
                self.by_conn.remove(&c);
            }
            if link.registered {
                if let (Some((registry, _)), Pipe::Stream(s)) = (&self.registry, &mut link.pipe) {
                    let _ = s.deregister(registry);
                }
            }
            // What is left to write goes with the socket to the lingerer,
            // unless the transport failed (nothing more reaches the peer)
            // or the link went on without it.
            let failed =
                link.ended.is_some() || link.broken.is_some() || link.peer_gone || link.superseded;
            let output = match &link.pipe {
                Pipe::Stream(_) if !failed && link.has_output() => self.pending_output(&link),
                _ => Vec::new(),
            };
            let handed = !output.is_empty();
            let refs = std::mem::take(&mut link.refs);
            let mut partner = None;
            let mut written = false;
            match link.pipe {
                Pipe::Stream(s) => {
                    // Our last bytes, then EOF; the socket closes once the
                    // peer has them (at once unless some wait to be
                    // written, or TCP has them unacknowledged).
                    let deadline = Instant::now() + self.cfg.linger;
                    let ring = link.shm.take();
                    written = linger::close_when_safe(s, ring, output, link.shut, deadline);
                }
                Pipe::Loopback { partner: p } => partner = Some(p),
            }
            // Sends whose payload went to the lingerer count as written;
            // those of a link that went on are its log's to send again.
            let unsent = (!(link.superseded || (handed && written))).then_some(ErrorKind::Io);
            for r in refs {
                self.release_ref(r.op, unsent);
            }
            if let Some(conn) = link.conn.take() {
                self.core.connection_lost(conn, "the transport was closed");
                self.drain_events();
            }
            if let Some(partner) = partner {
                if let Some(j) = self.slot(partner) {
                    self.links[j].peer_gone = true;
                    self.watch(j);
                }
                self.loopback = None;
            }
        }
        if prune {
            self.prune_shm_links();
        }
        made
    }

    // ----- upkeep ----------------------------------------------------------

    /// Runs the upkeep when it is due (`now`: the time, if the step read
    /// it already).
    pub(super) fn maybe_sweep(&mut self, now: Option<Instant>) {
        let now = now.unwrap_or_else(Instant::now);
        if now >= self.next_sweep {
            self.sweep(now);
        }
    }

    /// The upkeep, every [`SWEEP_EVERY`] while steps run (module docs,
    /// "Resources"): closes connections stalled mid-frame and accepted
    /// ones past their handshake timeout, trims the buffers of idle links,
    /// lists every link that needs a look (so nothing waits on a missed
    /// hint for longer than this), drops the unexpected messages of peers
    /// down for long and forgets such peers, and gives back memory.
    pub(super) fn sweep(&mut self, now: Instant) {
        // A long gap means nobody drove the endpoint: nothing could
        // arrive meanwhile, so stall clocks start afresh.
        let gap = now.duration_since(self.last_sweep) > 10 * SWEEP_EVERY;
        self.last_sweep = now;
        self.next_sweep = now + SWEEP_EVERY;
        let mut stalled = Vec::new();
        let mut expired = Vec::new();
        for i in 0..self.links.len() {
            let watch = self.needs_watch(i);
            let epoch = self.epoch;
            let link = &mut self.links[i];
            let stream = link.stream().is_some();
            match link.phase {
                LinkPhase::Open if stream && link.mid_frame() => match link.stall {
                    Some((since, frames)) if frames == link.frames && !gap => {
                        if now.duration_since(since) >= self.cfg.frame_timeout {
                            stalled.push(link.id);
                        }
                    }
                    _ => link.stall = Some((now, link.frames)),
                },
                LinkPhase::Open => link.stall = None,
                LinkPhase::Handshaking
                    if link.polled == Polled::Cold && link.deadline.is_some_and(|d| d <= now) =>
                {
                    expired.push(link.id);
                }
                _ => {}
            }
            // Idle for a whole period: its buffers go.
            if stream && link.is_live() && link.active + 1 < epoch {
                self.freed_buffers += link.trim_buffers();
                if let Some(c) = link.conn {
                    self.core.release_connection_memory(c);
                }
            }
            if watch {
                self.watch(i);
            }
        }
        let t = self.cfg.frame_timeout;
        for id in stalled {
            if let Some(i) = self.slot(id) {
                self.stats.stalled += 1;
                self.lose(
                    i,
                    ErrorKind::TimedOut,
                    format!("no complete frame within {t:?}"),
                );
            }
        }
        for id in expired {
            if let Some(i) = self.slot(id) {
                self.check_deadline(i, &mut Some(now));
            }
        }
        self.epoch += 1;
        self.expire_peers(now);
        self.release_memory();
    }

    /// Drops the unexpected messages of peers down for
    /// `SoftConfig::dead_peer_messages`, and forgets peers down for
    /// `forget_peer_after`.
    pub(super) fn expire_peers(&mut self, now: Instant) {
        let (messages, forget) = (self.cfg.dead_peer_messages, self.cfg.forget_peer_after);
        while let Some(&(since, peer)) = self.down_messages.front() {
            if since.checked_add(messages).is_none_or(|due| due > now) {
                break;
            }
            self.down_messages.pop_front();
            if self.down.get(&peer) != Some(&since) {
                // It came back since (and may have gone down again).
                continue;
            }
            let n = self.core.drop_unexpected_from(peer);
            if n > 0 {
                self.stats.dropped_unexpected += n as u64;
                tracing::debug!(
                    ?peer,
                    messages = n,
                    "soft engine: dropped the unexpected messages of a peer down for {messages:?}"
                );
            }
            self.settle_down(peer, since, now);
        }
        while let Some(&(since, peer)) = self.down_forget.front() {
            if since.checked_add(forget).is_none_or(|due| due > now) {
                break;
            }
            self.down_forget.pop_front();
            if self.down.get(&peer) == Some(&since) {
                self.settle_down(peer, since, now);
            }
        }
    }

    /// A peer down since `since` whose time came: forgotten when it may
    /// be; its record goes once nothing more is due for it.
    pub(super) fn settle_down(&mut self, peer: PeerAddr, since: Instant, now: Instant) {
        let due = |t: Duration| since.checked_add(t).map(|d| d <= now);
        let forget = due(self.cfg.forget_peer_after);
        if forget == Some(true) && !self.named.contains(&peer) && self.core.forget_peer(peer) {
            if let Ok(mut map) = self.peer_epids.write() {
                map.remove(&peer);
            }
            self.down.remove(&peer);
            self.stats.forgotten_peers += 1;
            return;
        }
        // `None`: never due.
        let waiting = |d: Option<bool>| d == Some(false);
        if !waiting(forget) && !waiting(due(self.cfg.dead_peer_messages)) {
            self.down.remove(&peer);
        }
    }

    /// Gives back memory that maps, queues and buffers kept from a past
    /// load (an attack's connections, forgotten peers).
    pub(super) fn release_memory(&mut self) {
        fn roomy(cap: usize, len: usize) -> bool {
            cap > 4 * len + 64
        }
        self.core.release_memory();
        if roomy(self.handshakes.len(), 2 * self.cold_links) {
            let keep: VecDeque<LinkId> = self
                .handshakes
                .iter()
                .copied()
                .filter(|id| {
                    self.link_index(*id)
                        .is_some_and(|i| self.links[i].polled == Polled::Cold)
                })
                .collect();
            self.handshakes = keep;
        }
        if roomy(self.by_conn.len(), self.links.len()) {
            let links = &self.links;
            let slots = &self.slots;
            self.by_conn.retain(|c, id| {
                slots
                    .get(id)
                    .and_then(|&i| links.get(i))
                    .is_some_and(|l| l.conn == Some(*c))
            });
        }
        macro_rules! shrink {
            ($($x:expr),*) => {$(
                if roomy($x.capacity(), $x.len()) {
                    $x.shrink_to_fit();
                }
            )*};
        }
        shrink!(
            self.slots,
            self.by_conn,
            self.hot_links,
            self.down,
            self.handshakes,
            self.down_messages,
            self.down_forget,
            self.links,
            self.watch,
            self.dead,
            self.todo,
            self.hints,
            self.detached,
            self.named,
            self.released
        );
        let roomy_epids = self
            .peer_epids
            .read()
            .is_ok_and(|m| roomy(m.capacity(), m.len()));
        if roomy_epids {
            if let Ok(mut map) = self.peer_epids.write() {
                map.shrink_to_fit();
            }
        }
        // Freed memory stays with the allocator, scattered among what is
        // still in use, unless it is handed back: after the endpoint let
        // go of at least half of what it held (links, peers, unexpected
        // messages, counted alike), it is, and again each second while
        // what the crowd left behind is dropped.
        let core = self.core.stats();
        let load = self.links.len()
            + core.peers
            + self.down.len()
            + (core.unexpected_bytes >> 16) as usize;
        self.load_high = self.load_high.max(load);
        let now = Instant::now();
        if self.load_high >= 64 && 2 * load <= self.load_high {
            self.load_high = load;
            let settle = self.cfg.dead_peer_messages.max(self.cfg.forget_peer_after);
            self.trim_until = now.checked_add(settle + Duration::from_secs(1));
            self.trim(now, load);
        } else if self.trim_until.is_some_and(|t| now <= t)
            && now.duration_since(self.last_trim) >= Duration::from_secs(1)
        {
            if load < self.trim_load {
                // The crowd's last records are still going: so does the
                // trimming, until a second after they are gone.
                self.trim_until = now.checked_add(Duration::from_secs(2));
            }
            self.trim(now, load);
        } else if self.freed_buffers >= BUFFERS_TRIM_BYTES
            && now.duration_since(self.last_trim) >= Duration::from_secs(1)
        {
            // Links gave back a read buffer's worth or more: freed after
            // the last trim, its pages would stay with the process.
            self.trim(now, load);
        }
    }

    /// Has the allocator's free memory handed back to the system at the
    /// end of this progress call, outside the state's lock.
    pub(super) fn trim(&mut self, now: Instant, load: usize) {
        self.last_trim = now;
        self.trim_load = load;
        self.freed_buffers = 0;
        self.stats.memory_trims += 1;
        self.give_back_due = true;
    }
}
