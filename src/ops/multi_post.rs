//! `FI_MULTI_RECV` posted the libfabric way: one block receives many
//! untagged messages, each reported to the receive CQ with the block's
//! context, its own place in the block (the entry's buffer is the window
//! the message filled) and its length; the entry after which less than the
//! endpoint's minimum stays free carries [`CompletionFlags::MULTI_RECV`]:
//! the block is released.
//!
//! It is the multi-receive of [`Endpoint::multi_recv`] (`multi_recv.rs`:
//! the same checks, window and release rule) with a context instead of a
//! stream: each part is a receive posted with a context (`post.rs`) whose
//! route, after pushing its entry, has the next part posted over the space
//! left. That post cannot run inside the route (it runs inside the
//! engine's progress, with the engine's lock held), so it is queued for the
//! domain's next progress round (`deferred.rs`); messages arriving in
//! between wait in the engine's unexpected queue, as with the stream.
//!
//! Several blocks posted on one endpoint are filled one after the other,
//! in posting order, as fi_msg(3) has it: only the first has a receive in
//! the engine; the next one's first receive is posted when the first is
//! released (the engine matches posted receives in posting order, so a
//! block whose next part were posted behind another block's receive would
//! lose its turn).
//!
//! An error (cancellation, truncation, a closed endpoint) ends the
//! multi-receive: its error entry carries `FI_MULTI_RECV` too.

use super::multi_recv::{check_block, released, rest_of};
use super::outcome::OpName;
use super::post::Posted;
use crate::engine::StableRegion;
use crate::fabric::{CompletionFlags, CqErrEntry, Direction, Endpoint, EndpointCore};
use crate::{Error, ErrorKind, Result};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// Where a multi-receive is.
#[derive(Debug, Default)]
struct Progressing {
    /// Bytes of the block already filled.
    offset: usize,
    /// Parts completed so far (a receive's handle is kept only while no
    /// part completed since it was posted).
    parts: u64,
    /// The receive over the rest, while one is posted.
    current: Option<Posted>,
    /// Released, failed or cancelled: nothing more is posted.
    done: bool,
    /// `cancel` came while no receive was posted: the next post reports
    /// the cancellation instead.
    cancel: bool,
}

/// The shared state of one multi-receive posted with a context.
pub(crate) struct MultiState {
    /// Weak: the endpoint's queue of multi-receives holds this state.
    ep: Weak<EndpointCore>,
    block: Arc<dyn StableRegion>,
    context: u64,
    min: usize,
    at: Mutex<Progressing>,
}

impl std::fmt::Debug for MultiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiState")
            .field("context", &self.context)
            .field("len", &self.block.len())
            .field("min", &self.min)
            .finish()
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl MultiState {
    fn lock(&self) -> MutexGuard<'_, Progressing> {
        relock(&self.at)
    }

    fn endpoint(&self) -> Option<Endpoint> {
        self.ep.upgrade().map(|core| Endpoint { core })
    }

    /// A part completed (from its route, inside progress): moves past its
    /// `len` bytes; whether the block is released now (also after an
    /// error, which ends the multi-receive).
    pub(crate) fn advance(&self, ok: bool, len: usize) -> bool {
        let mut at = self.lock();
        at.current = None;
        at.parts += 1;
        if !ok {
            at.done = true;
            return true;
        }
        at.offset += len;
        let gone = released(self.block.len() - at.offset, self.min);
        at.done = gone;
        gone
    }

    /// After a part's entry (from its route, inside progress): at the
    /// domain's next progress round, the next part is posted, or, once
    /// released, the endpoint's next block starts.
    pub(crate) fn delivered(self: &Arc<Self>, released: bool) {
        let Some(core) = self.ep.upgrade() else {
            return;
        };
        // The queue exists (made at `post_multi_recv`); a closed domain
        // has no more rounds, and its endpoint's receives are over anyway.
        if let Ok(d) = core.domain().deferred() {
            let me = self.clone();
            d.push(Box::new(move || match released {
                true => me.finish(),
                false => me.post_next(),
            }));
            core.domain().reactor().notify();
        }
    }

    /// Over: leaves the endpoint's queue; the next block starts.
    fn finish(self: Arc<Self>) {
        let Some(core) = self.ep.upgrade() else {
            return;
        };
        let next = {
            let mut queue = relock(&core.multi_recvs);
            if queue.front().is_some_and(|m| Arc::ptr_eq(m, &self)) {
                queue.pop_front();
            }
            queue.front().cloned()
        };
        if let Some(next) = next {
            next.post_next();
        }
    }

    /// Posts the receive over the rest of the block (outside engine
    /// locks); a failure or a cancellation that came meanwhile is reported
    /// and ends it.
    fn post_next(self: Arc<Self>) {
        if let Err(error) = self.post_part() {
            self.report(error);
            self.finish();
        }
    }

    /// Posts the receive over the rest of the block; `Ok` also when it is
    /// over already.
    fn post_part(self: &Arc<Self>) -> Result<()> {
        let (offset, parts) = {
            let mut at = self.lock();
            if at.done {
                return Ok(());
            }
            if at.cancel {
                at.done = true;
                return Err(cancelled());
            }
            (at.offset, at.parts)
        };
        let fail = |e: Error| {
            self.lock().done = true;
            e
        };
        let ep = self.endpoint().ok_or_else(|| fail(cancelled()))?;
        let (op, _, kind) = ep
            .recv(rest_of(&self.block, offset))
            .into_posted()
            .map_err(|e| fail(e.error))?;
        let posted = op.route_part(
            self.context,
            OpName::MultiRecv,
            Some(kind),
            Some(self.clone()),
        );
        let mut at = self.lock();
        // Unless that part completed already (its route ran in the post).
        if at.parts == parts && !at.done {
            at.current = Some(posted);
            if at.cancel {
                drop(at);
                let _ = ep.cancel(&posted);
            }
        }
        Ok(())
    }

    /// An error entry for the multi-receive (it ends; the block is released).
    fn report(&self, error: Error) {
        let Some(core) = self.ep.upgrade() else {
            return;
        };
        if let Some(cq) = core.cq(Direction::Recv) {
            cq.push_err(CqErrEntry {
                context: self.context,
                flags: CompletionFlags::RECV | CompletionFlags::MSG | CompletionFlags::MULTI_RECV,
                len: 0,
                buffer: None,
                olen: 0,
                tag: 0,
                data: 0,
                error,
                prov_errno: CqErrEntry::PROV_INTERNAL,
            });
        }
    }
}

fn cancelled() -> Error {
    Error::new(ErrorKind::Canceled, "multi-recv: cancelled (fi_cancel)")
}

/// A handle on a multi-receive posted with a context
/// ([`Endpoint::post_multi_recv`]), for [`cancel`](Self::cancel).
#[derive(Clone, Debug)]
pub struct MultiPosted(Arc<MultiState>);

impl MultiPosted {
    /// Cancels the multi-receive (`fi_cancel`): the receive over the space
    /// left completes with `FI_ECANCELED` (an error entry with the context
    /// and `FI_MULTI_RECV`), and nothing more is received into the block.
    /// `Ok(false)` when it was over already or a message is being received
    /// into it right now.
    ///
    /// # Errors
    /// Those of [`Endpoint::cancel`].
    pub fn cancel(&self) -> Result<bool> {
        let m = &self.0;
        let Some(ep) = m.endpoint() else {
            return Ok(false);
        };
        {
            let mut at = m.lock();
            if at.done {
                return Ok(false);
            }
            if let Some(p) = at.current {
                drop(at);
                // Without the state's lock: the engine's completion takes it.
                return ep.cancel(&p);
            }
            // No receive posted: the next post reports the cancellation
            // (the first block, between two parts) ...
            at.cancel = true;
        }
        // ... or, waiting behind another block, it is reported now.
        let waiting = {
            let mut queue = relock(&ep.core.multi_recvs);
            let at = queue.iter().position(|q| Arc::ptr_eq(q, m));
            match at {
                Some(i) if i > 0 => queue.remove(i).is_some(),
                _ => false,
            }
        };
        if waiting {
            m.lock().done = true;
            m.report(cancelled());
        }
        Ok(true)
    }

    /// The context it was posted with.
    pub fn context(&self) -> u64 {
        self.0.context
    }
}

impl Endpoint {
    /// Posts a multi-receive of untagged messages into `block` whose
    /// completions go to the endpoint's receive CQ with `context`
    /// (`fi_recv` with `FI_MULTI_RECV`; see the module docs of
    /// `multi_post.rs`). Needs `FI_MSG`, `FI_MULTI_RECV` and `FI_RECV` (or
    /// no direction bits); the block must hold at least the endpoint's
    /// minimum ([`Endpoint::min_multi_recv`], at least 1 byte).
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::*;
    /// # use psmrail::ops::MultiRecvBuffer;
    /// # use std::sync::Arc;
    /// # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build().unwrap();
    /// # let hints = Hints::new().caps(Caps::MSG | Caps::MULTI_RECV)
    /// #     .engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints)).unwrap().remove(0);
    /// # let fabric = Fabric::open(&info).unwrap();
    /// # let domain = fabric.domain(&info).unwrap();
    /// # let av = domain.av(AvAttr::new()).unwrap();
    /// # let cq = domain.cq(CqAttr::new()).unwrap();
    /// let ep = domain.endpoint(&info).bind_av(&av)
    ///     .bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).enable().unwrap();
    /// ep.setopt_min_multi_recv(4).unwrap();
    /// let me = av.insert(&[ep.getname()]).remove(0).unwrap();
    /// let block = Arc::new(MultiRecvBuffer::new(10));
    /// ep.post_multi_recv(block.clone(), 9).unwrap();
    /// for word in [b"one!", b"two!"] {
    ///     ep.post_send(me, word.to_vec(), 1).unwrap();
    /// }
    /// let mut got = Vec::new();
    /// while got.len() < 2 {
    ///     let e = cq.sread(None).unwrap();
    ///     if e.context == 9 {
    ///         got.push((e.buffer.unwrap().offset(), e.len, e.flags));
    ///     }
    /// }
    /// // Each message at its own place; 2 bytes (< 4) left: released.
    /// assert_eq!((got[0].0, got[0].1), (0, 4));
    /// assert_eq!((got[1].0, got[1].1), (4, 4));
    /// assert!(got[1].2.contains(CompletionFlags::MULTI_RECV));
    /// assert!(!got[0].2.contains(CompletionFlags::MULTI_RECV));
    /// ```
    ///
    /// # Errors
    /// `FI_EOPNOTSUPP` without those caps, `FI_EINVAL` for a block under
    /// the minimum, and the errors of [`recv`](Self::recv).
    ///
    /// # Cancel safety
    /// Not a future: the multi-receive runs until the block is released,
    /// an error ends it, or [`MultiPosted::cancel`]; the block is kept
    /// (shared) until then.
    pub fn post_multi_recv(
        &self,
        block: Arc<dyn StableRegion>,
        context: u64,
    ) -> Result<MultiPosted> {
        let min = check_block(self, block.len())?;
        // Made now, outside engine locks, for the routes to queue on.
        self.core.domain().deferred()?;
        let state = Arc::new(MultiState {
            ep: Arc::downgrade(&self.core),
            block,
            context,
            min,
            at: Mutex::new(Progressing::default()),
        });
        let first = {
            let mut queue = relock(&self.core.multi_recvs);
            queue.push_back(state.clone());
            queue.len() == 1
        };
        if first {
            if let Err(e) = state.post_part() {
                // Never received anything: it leaves the queue unreported.
                relock(&self.core.multi_recvs).retain(|q| !Arc::ptr_eq(q, &state));
                return Err(e);
            }
        }
        Ok(MultiPosted(state))
    }
}
