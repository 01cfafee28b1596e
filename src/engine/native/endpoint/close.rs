//! Closing: the share of the timeout kept for `psm_ep_close`, and the
//! close itself (operations cancelled, peers told, PSM's endpoint shut).

use super::*;

impl NativeEndpoint {
    /// What a non-zero close timeout keeps back for `psm_ep_close` itself:
    /// libpsm2 waits for connected peers at least [`PSM2_CLOSE_MIN_WAIT`]
    /// however little time it is given, so the graceful phase ends that
    /// much early and the whole close fits in the timeout. Nothing for the
    /// `self` device alone (no peers to wait for) or TrueScale (whose wait
    /// does not depend on the time it is given).
    pub(super) fn psm_close_reserve(&self, timeout: Duration) -> Duration {
        if self.self_only || self.lib.build() != PsmBuild::Psm2Compat {
            return Duration::ZERO;
        }
        timeout.min(PSM2_CLOSE_MIN_WAIT)
    }

    /// The closing sequence; see the module docs. Works on a poisoned
    /// endpoint too: PSM's resources are released either way.
    pub(super) fn close_inner(&self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let graceful_until = timeout.saturating_sub(self.psm_close_reserve(timeout));
        {
            let mut g = self.lock_any().ok_or_else(reentry_error)?;
            if g.ep.is_none() {
                return Ok(());
            }
            g.closing = true;
            self.post_unposted(&mut g);
            // Receives that matched nothing end now.
            for entry in g.ops.iter_mut().filter(|e| e.kind == OpKind::Recv) {
                // SAFETY: the endpoint is open (checked above, lock held)
                // and the request is live (in the table).
                let cancelled = unsafe { self.raw.cancel(&entry.req) };
                if matches!(cancelled, Ok(true)) {
                    entry.kind = OpKind::CancelledRecv;
                }
            }
        }
        // Let the rest finish, within the timeout (less what psm_ep_close
        // will take).
        loop {
            let mut g = self.lock_any().ok_or_else(reentry_error)?;
            let made = self.step(&mut g);
            if g.ops.is_empty() || start.elapsed() >= graceful_until {
                break;
            }
            drop(g);
            if !made {
                std::thread::sleep(IDLE_WAIT);
            }
        }
        let mut g = self.lock_any().ok_or_else(reentry_error)?;
        let Some(ep) = g.ep.take() else {
            return Ok(());
        };
        // One psm_ep_close, graceful with what is left (the reserve, when
        // requests kept the graceful phase busy). libpsm2 waits for
        // connected peers to disconnect: a graceful close for what it is
        // given, but between 1 s and 2 s; a forced one up to 2 s.
        let left = timeout.saturating_sub(start.elapsed());
        let graceful = if timeout.is_zero() {
            // At once, as far as libpsm2 lets it: with connected peers it
            // waits for them 1 s at least when asked for a graceful close
            // of any length, and 2 s when forced, so the shortest close is
            // a graceful one given nothing. (TrueScale's PSM waits the same
            // either way; it is forced there, as asked.)
            (self.lib.build() == PsmBuild::Psm2Compat && !self.self_only)
                .then_some(Duration::from_nanos(1))
        } else {
            Some(left.max(Duration::from_nanos(1)))
        };
        let closed = ep
            .close(graceful)
            .map_err(|e| map_psm_error(e, "psm_ep_close"));
        // PSM is done with every buffer now.
        let inner = &mut *g;
        inner.keys.release_all(&self.completions);
        for entry in inner.ops.drain() {
            let error = match entry.kind {
                OpKind::Send => ErrorKind::Io,
                OpKind::Recv | OpKind::CancelledRecv => ErrorKind::Canceled,
            };
            let _ = self.completions.complete(
                entry.key,
                MqCompletion {
                    status: MqStatus::failed(entry.tag, error),
                    buffer: entry.buffer,
                },
            );
        }
        inner.peers = Peers::default();
        inner.loopback.clear();
        closed
    }
}
