//! The operations (`design.md`, `src/ops/`): every data transfer is a
//! future.
//!
//! # Shape
//! Methods on [`Endpoint`](crate::fabric::Endpoint) post the operation to
//! the engine *before they return* — so a receive can be posted ahead of
//! its send and awaited later, and sends leave in call order — and return a
//! future ([`SendOp`], [`RecvOp`]) that resolves to
//! `(Result<T>, OpBuffer)`: buffers are moved in and handed back whatever
//! happened (owned-buffer style, as tokio-uring and monoio), so a failure
//! never loses memory. Any executor can drive them (`futures::executor`,
//! tokio current-thread or multi-thread, [`Reactor::block_on`]).
//!
//! # Progress
//! The domain's reactor makes progress. In manual mode (the provider's
//! default, as the man page requires) polling an operation's future runs a
//! progress round and, while it is pending, wakes its task again at once:
//! awaiting busy-polls like `fi_cq_read` in a loop. In auto mode the
//! progress thread completes operations and wakes their tasks.
//!
//! # Cancellation and `FI_CONTEXT`
//! `FI_CONTEXT`'s guarantee — the provider's per-operation state stays
//! valid until the operation completes — holds by construction: that state
//! is the operation's completion slot in the reactor, not memory the caller
//! lends. Dropping a future at any point is safe: an unmatched receive is
//! cancelled; a send or a matched receive leaves its buffer in the reactor
//! until the engine has finished with it, then the buffer is freed.
//! `mem::forget` of a future is safe too (the slot and buffer are then kept
//! until the domain closes). [`RecvOp::cancel`] is `fi_cancel`: the receive
//! completes with `FI_ECANCELED`.
//!
//! # Completions, CQs and counters
//! A future delivers its own completion. Counters bound to the endpoint
//! count completions (and errors) as their futures observe them; injects
//! count at once. Completion queues receive the completions of operations
//! posted the libfabric way, with a context ([`Endpoint::post_trecv`] and
//! friends, returning a [`Posted`] handle for `fi_cancel`).
//!
//! [`Reactor::block_on`]: crate::reactor::Reactor::block_on
//! [`Endpoint::post_trecv`]: crate::fabric::Endpoint::post_trecv

pub(crate) mod am_msg;
pub mod atomic;
mod atomic_ops;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod gen_slab;
mod inject;
mod msg;
mod multi_recv;
mod outcome;
mod pending;
mod post;
mod recv;
pub mod rma;
mod rma_ops;
pub(crate) mod rma_transport;
mod send;
mod submit;
mod tagged;
mod trigger_list;
pub(crate) mod triggered;

pub use multi_recv::{MultiRecv, MultiRecvBuffer, MultiRecvEvent};
pub use outcome::{OpOutput, Received, Sent};
pub use post::Posted;
pub use recv::RecvOp;
pub use rma_ops::{RmaIov, RmaOp};
pub use send::SendOp;
pub use tagged::{PeekFlags, Peeked};
pub use trigger_list::TriggerList;
pub use triggered::Triggered;
