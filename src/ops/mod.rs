//! The operations (`ARCHITECTURE.md`, "Layers": `src/ops/`): every data
//! transfer is a future.
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
//! The futures (and the [`MultiRecv`] stream) borrow their endpoint, as
//! quinn's and tokio's I/O futures borrow their connection or socket: an
//! operation costs no reference-count round trip, and an endpoint cannot be
//! dropped under its pending operations. The endpoint itself keeps its
//! domain alive, so the fabric, domain and AV handles may go first. To
//! await operations in a spawned task, move a clone of the endpoint (a
//! cheap handle) into it:
//!
//! ```
//! # use psmrail::config::PsmConfig;
//! # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints};
//! # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
//! #     .delay(std::time::Duration::ZERO).build().unwrap();
//! # let hints = Hints::new().caps(Caps::TAGGED).engine(EngineChoice::Soft).config(config);
//! # let info = getinfo(Some(&hints)).unwrap().remove(0);
//! # let fabric = Fabric::open(&info).unwrap();
//! # let domain = fabric.domain(&info).unwrap();
//! # let av = domain.av(AvAttr::new()).unwrap();
//! # let ep = domain.endpoint(&info).bind_av(&av).enable().unwrap();
//! # let me = av.insert(&[ep.getname()]).remove(0).unwrap();
//! let task_ep = ep.clone();
//! let task = std::thread::spawn(move || {
//!     // The receive borrows `task_ep`, which the task owns.
//!     let (got, buf) = futures::executor::block_on(task_ep.trecv(vec![0u8; 5], 7, 0));
//!     (got.map(|r| r.len), buf)
//! });
//! let (sent, _) = futures::executor::block_on(ep.tsend(me, 7, b"hello".to_vec()));
//! sent.unwrap();
//! let (got, buf) = task.join().unwrap();
//! assert_eq!(got.unwrap(), 5);
//! assert_eq!(buf.as_slice(), b"hello");
//! ```
//!
//! Dropping the endpoint under a pending operation does not compile (the
//! same setup as above; the only error is the borrow):
//!
//! ```compile_fail,E0505
//! # use psmrail::config::PsmConfig;
//! # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints};
//! # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
//! #     .delay(std::time::Duration::ZERO).build().unwrap();
//! # let hints = Hints::new().caps(Caps::TAGGED).engine(EngineChoice::Soft).config(config);
//! # let info = getinfo(Some(&hints)).unwrap().remove(0);
//! # let fabric = Fabric::open(&info).unwrap();
//! # let domain = fabric.domain(&info).unwrap();
//! # let av = domain.av(AvAttr::new()).unwrap();
//! # let ep = domain.endpoint(&info).bind_av(&av).enable().unwrap();
//! let recv = ep.trecv(vec![0u8; 5], 7, 0);
//! drop(ep); // error[E0505]: cannot move out of `ep` because it is borrowed
//! drop(recv);
//! ```
//!
//! # Progress
//! The domain's reactor makes progress. In manual mode (the provider's
//! default, as the man page requires) polling an operation's future runs a
//! progress round and, while it is pending, wakes its task again at once:
//! awaiting busy-polls like `fi_cq_read` in a loop. In auto mode the
//! progress thread completes operations and wakes their tasks. In
//! adaptive mode (the default inside a tokio runtime) a future does the
//! former for a short window, then the latter.
//!
//! # Code for both providers
//! [`MessageEndpoint`] and [`RmaEndpoint`] are the operations of a psm
//! and an mrail endpoint as traits, for generic code; [`DynEndpoint`] is
//! the message operations as a trait object, for code that picks its
//! provider at run time.
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
//! # Tracing and statistics
//! Every operation has a `tracing` span at TRACE level (`psm.op`; the
//! multi-rail endpoint's are `mrail.op`) with its kind, peer, tag and
//! length, from its post to its completion or its future's drop, ending
//! with an event that gives the outcome (`op_span` in the source).
//! With no subscriber interested that costs one relaxed load per
//! operation. What operations did is counted per endpoint:
//! [`Endpoint::stats`](crate::fabric::Endpoint::stats).
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

pub mod atomic;
mod atomic_ops;
pub(crate) mod claim;
pub(crate) mod deferred;
mod dyn_endpoint;
mod inject;
mod message_endpoint;
mod msg;
pub(crate) mod multi_post;
mod multi_recv;
pub(crate) mod op_span;
mod outcome;
mod pending;
mod post;
mod recv;
mod rma_endpoint;
mod rma_ops;
mod send;
mod submit;
mod tagged;
mod trigger_list;
pub(crate) mod triggered;

pub use claim::Claimed;
pub use dyn_endpoint::DynEndpoint;
pub use message_endpoint::MessageEndpoint;
pub use multi_post::MultiPosted;
pub use multi_recv::{MultiRecv, MultiRecvBuffer, MultiRecvEvent};
pub use outcome::{OpOutput, OpOutputExt, Received, Sent};
pub use post::Posted;
pub use recv::RecvOp;
pub(crate) use rma_endpoint::impl_rma_endpoint;
pub use rma_endpoint::RmaEndpoint;
pub use rma_ops::{RmaIov, RmaOp};
pub use send::SendOp;
pub use tagged::{PeekFlags, Peeked};
pub use trigger_list::TriggerList;
pub use triggered::Triggered;
