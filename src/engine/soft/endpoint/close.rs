//! Closing: a graceful close (every peer says Bye, receives that matched
//! nothing are cancelled) bounded by a timeout, then the forced rest;
//! dropping an endpoint closes it the same way.

use super::*;

impl Inner {
    /// Whether a graceful close has nothing left to wait for.
    pub(super) fn quiesced(&self) -> bool {
        self.core.stats().connections == 0 && self.links.iter().all(|l| l.phase == LinkPhase::Dead)
    }

    /// Ends everything at once: transports closed, pending operations
    /// failed (`Io` towards peers, `Canceled` for the rest), buffers handed
    /// back.
    pub(crate) fn force_close(&mut self) {
        // From here on no link waits for a new transport.
        self.closed = true;
        self.abandon_all("the endpoint closed");
        for i in 0..self.links.len() {
            if self.links[i].conn.is_some() {
                self.lose(i, ErrorKind::Io, "the endpoint closed".to_owned());
            }
            self.kill(i);
        }
        self.reap();
        for id in self.ops.ids() {
            if self.core.cancel(id) {
                continue;
            }
            self.finish(id, MqStatus::failed(0, ErrorKind::Canceled));
        }
        self.drain_events();
        if let Some(mut l) = self.listeners.take() {
            if let Some((registry, _)) = &self.registry {
                l.deregister(registry);
            }
        }
        self.dial_errors.clear();
        self.closed = true;
    }
}

impl Inner {
    /// Starts a graceful close: every peer says Bye once its traffic is
    /// done, connections still in their handshake end, receives that
    /// matched nothing complete `Canceled`.
    pub(super) fn begin_close(&mut self) {
        self.core.shutdown();
        for id in self.ops.ids() {
            if self.ops.get(id).is_some_and(|e| e.kind == OpKind::Recv) {
                self.core.cancel(id);
            }
        }
        self.drain_events();
        self.begin_round();
        self.transmit_all();
    }

    /// One step of a graceful close begun at `start`; forces the rest once
    /// everything is said or `timeout` passed. Whether the step did
    /// anything (or finished).
    pub(super) fn close_step(&mut self, start: Instant, timeout: Duration) -> bool {
        let made = self.step(false);
        if self.quiesced() || start.elapsed() >= timeout {
            self.force_close();
            return true;
        }
        made
    }
}

/// Dropping an endpoint that was not closed closes it gracefully within
/// the `close_timeout` it was opened with (driving its own progress, as
/// `close` does), then forces what is left.
impl Drop for SoftEndpoint {
    fn drop(&mut self) {
        let g = match self.inner.get_mut() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if g.closed {
            return;
        }
        let start = Instant::now();
        g.begin_close();
        while !g.closed {
            if !g.close_step(start, g.close_timeout) {
                std::thread::sleep(IDLE_WAIT);
            }
        }
    }
}
