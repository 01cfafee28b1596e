//! tokio and tokio-util adapters (feature `tokio`): psmrail's message
//! operations as the traits tokio code is written against.
//!
//! The fabric carries messages, tagged, between endpoints; tokio code
//! expects streams of items, sinks, codecs and byte streams. This module
//! is the bridge, above the operations ([`crate::ops`]) and generic over
//! [`MessageEndpoint`](crate::ops::MessageEndpoint), so every adapter
//! works over a psm [`Endpoint`](crate::fabric::Endpoint) and an mrail
//! [`MrailEndpoint`](crate::mrail::MrailEndpoint) alike:
//!
//! * [`Channel`] — one conversation (endpoint, peer, tag) as a
//!   `futures::Stream` of received messages and a `futures::Sink` of
//!   messages to send, with receives posted ahead, a bounded number of
//!   sends in flight, and an end-of-stream marker sent on close.
//! * [`FramedChannel`] — typed frames over a channel with any
//!   `tokio_util::codec` encoder/decoder, one message per frame.
//! * [`ByteStream`] — `tokio::io::AsyncRead + AsyncWrite` over a channel,
//!   for protocol code written for a socket (`tokio_util::codec::Framed`,
//!   HTTP/1, ...); `tokio_util::compat` turns it into a `futures::io`
//!   stream.
//! * [`io_error`] — `From<psmrail::Error> for std::io::Error`, so `?`
//!   works in tokio code.
//!
//! The adapters run on any executor: they only poll the operations'
//! futures, which make progress themselves (manual progress), are woken
//! by the progress thread (auto progress), or first make progress
//! themselves and then are woken (adaptive progress).
//! `examples/tokio_echo.rs` runs a `Framed<ByteStream,
//! LengthDelimitedCodec>` echo server and client.
//!
//! # Calls that wait
//!
//! Operations are futures, but some object calls wait for the network or
//! for time, as their C counterparts do; each says so in a "Blocking"
//! section. In async code use their async forms, which wait on a thread
//! of their own and park no executor thread:
//!
//! | blocking form | waits for | async form |
//! |---|---|---|
//! | [`AddressVector::insert`](crate::fabric::AddressVector::insert), `insert_str`, `insert_service` | the connect (30 s at most by default) | [`insert_async`](crate::fabric::AddressVector::insert_async), `insert_str_async`, `insert_service_async` |
//! | [`Endpoint::close`](crate::fabric::Endpoint::close), [`Domain::close`](crate::fabric::Domain::close) | `FI_PSM_DELAY` (1 s by default), then the engine's close | [`Endpoint::close_async`](crate::fabric::Endpoint::close_async), [`Domain::close_async`](crate::fabric::Domain::close_async) |
//!
//! Dropping a domain's last handle on a runtime thread does not wait
//! there: its delay and engine close go to a thread of their own (the
//! domain's docs, "Where a close waits"); await `close_async` before the
//! process exits to be sure its peers get the delay. `getinfo` loads the
//! PSM library once per process (about 100 ms, the first call only).
//!
//! ```
//! # use psmrail::config::PsmConfig;
//! # use psmrail::fabric::{getinfo, AvAttr, EngineChoice, Fabric, Hints};
//! # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
//! #     .delay(std::time::Duration::from_millis(10)).build().unwrap();
//! # let hints = Hints::new().engine(EngineChoice::Soft).config(config);
//! # let info = getinfo(Some(&hints))?.remove(0);
//! let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! rt.block_on(async {
//!     let domain = Fabric::open(&info)?.domain(&info)?;
//!     let av = domain.av(AvAttr::new())?;
//!     let ep = domain.endpoint(&info).bind_av(&av).enable()?;
//!     let me = av.insert_async(&[ep.getname()]).await.remove(0)?;
//!     # let _ = me;
//!     ep.close_async().await?;
//!     domain.close_async().await
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Progress under tokio
//!
//! `getinfo` called inside a tokio runtime with the progress model left
//! unset answers **adaptive progress**: auto progress with a spin window
//! ([`Hints::spin`](crate::fabric::Hints::spin), default
//! [`AdaptiveProgress::DEFAULT_SPIN`](crate::reactor::AdaptiveProgress::DEFAULT_SPIN)).
//! A pending operation makes progress itself for up to 500 µs after its
//! thread's last completion, then sleeps until the progress thread — asleep
//! on the soft engine's sockets, or on its interval for the native engine —
//! wakes it. So a ping-pong keeps manual progress's latency, and a task
//! awaiting a message that does not come costs under 1 % of a core on the
//! soft engine (the native engine: the cost of the interval, about 3 % at
//! the default 1000 µs) instead of a whole executor worker (`BENCHMARKING.md`, "Progress modes"). Why
//! not manual progress, C's default: a pending future busy-polls, so every
//! awaiting task holds a worker at 100 %, and a side that has finished its
//! last operation (a server that closed its channel) no longer progresses
//! at all, so its last messages may never leave. Ask for
//! `ProgressKind::Manual` explicitly to get it anyway, and then keep a task
//! calling `domain.reactor().progress()` while the endpoint lives.
//!
//! Adapters borrow their endpoint, like the operations do. In a spawned
//! task, move a clone of the endpoint into the task and make the adapter
//! there:
//!
//! ```
//! # use psmrail::config::PsmConfig;
//! # use psmrail::fabric::{getinfo, AvAttr, EngineChoice, Fabric, Hints};
//! # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
//! #     .delay(std::time::Duration::ZERO).build().unwrap();
//! # let hints = Hints::new().engine(EngineChoice::Soft).config(config);
//! # let info = getinfo(Some(&hints))?.remove(0);
//! # let domain = Fabric::open(&info)?.domain(&info)?;
//! # let av = domain.av(AvAttr::new())?;
//! # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
//! # let me = av.insert(&[ep.getname()]).remove(0)?;
//! use futures::{SinkExt, StreamExt};
//! use psmrail::compat::{Channel, ChannelConfig};
//!
//! let rt = tokio::runtime::Runtime::new()?;
//! let server_ep = ep.clone();
//! let server = rt.spawn(async move {
//!     // Echoes every message until the client closes.
//!     let mut ch = Channel::with_config(&server_ep, me, 2, ChannelConfig::new().recv_tag(1))?;
//!     while let Some(msg) = ch.next().await {
//!         ch.send(msg?.freeze()).await?;
//!     }
//!     ch.close().await
//! });
//! rt.block_on(async {
//!     let mut ch = Channel::with_config(&ep, me, 1, ChannelConfig::new().recv_tag(2))?;
//!     ch.send(b"ping".to_vec().into()).await?;
//!     assert_eq!(ch.next().await.transpose()?.as_deref(), Some(&b"ping"[..]));
//!     ch.close().await?;
//!     assert!(ch.next().await.is_none()); // the server closed too
//!     Ok::<(), psmrail::Error>(())
//! })?;
//! rt.block_on(server)??;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod byte_stream;
pub mod channel;
pub mod codec;
pub mod io_error;
mod ring;

pub use byte_stream::ByteStream;
pub use channel::{Channel, ChannelConfig, DEFAULT_EOF_BIT};
pub use codec::FramedChannel;
pub use io_error::io_error_kind;
