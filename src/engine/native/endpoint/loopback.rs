//! Active messages an endpoint sends to itself: queued by the endpoint
//! and delivered here, where PSM (the TrueScale build) does not loop them
//! back.

use super::*;

impl NativeEndpoint {
    /// Delivers queued loopback AMs (TrueScale).
    pub(super) fn run_loopback(&self, inner: &mut Inner) -> bool {
        let source = inner
            .peers
            .by_epid
            .get(&self.epid)
            .map_or(PeerAddr(0), |v| PeerAddr(*v));
        let mut made = false;
        // Replies queued by handlers run in the same step, bounded.
        for _ in 0..HARVEST_BUDGET {
            if inner.loopback.is_empty() {
                break;
            }
            let batch = std::mem::take(&mut inner.loopback);
            for msg in batch {
                made = true;
                let Some(handler) = inner.handlers.get(usize::from(msg.handler.0)).cloned() else {
                    continue;
                };
                let am = AmMessage {
                    source,
                    args: &msg.args,
                    payload: &msg.payload,
                };
                if msg.is_reply {
                    handler.on_reply(am);
                } else {
                    let mut reply = LoopbackReply {
                        queue: &mut inner.loopback,
                        limits: self.limits,
                        registered: inner.handlers.len(),
                        replied: false,
                    };
                    handler.on_request(am, &mut reply);
                }
            }
        }
        made
    }
}
