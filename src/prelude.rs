//! The names most programs use, in one import: `use psmrail::prelude::*;`.
//!
//! Discovery and the objects ([`getinfo`], [`Hints`], [`Fabric`],
//! [`Domain`], [`AddressVector`], [`Endpoint`], queues, counters, memory
//! regions), the mrail provider's counterparts, the operation traits that
//! let code be generic over both providers ([`MessageEndpoint`],
//! [`RmaEndpoint`], [`DynEndpoint`]), the buffer type every operation
//! takes and hands back ([`OpBuffer`]), the atomic enums, and the crate's
//! error types; with feature `tokio`, the tokio adapters (`Channel`,
//! `ChannelConfig`, `FramedChannel`, `ByteStream`). Each name stays where
//! it is documented (`fabric`, `ops`, `mrail`, `engine`, `compat`); this
//! module only gathers them.
//!
//! ```
//! use psmrail::prelude::*;
//!
//! // A soft-engine endpoint sends a tagged message to itself.
//! let hints = Hints::new().engine(EngineChoice::Soft).caps(Caps::TAGGED);
//! let info = getinfo(Some(&hints))?.remove(0);
//! let domain = Fabric::open(&info)?.domain(&info)?;
//! let av = domain.av(AvAttr::new())?;
//! let ep = domain.endpoint(&info).bind_av(&av).enable()?;
//! let me: FiAddr = av.insert(&[ep.getname()]).remove(0)?;
//! let buf: OpBuffer = vec![0u8; 5].into();
//! let reactor = domain.reactor().clone();
//! let (got, buf) = reactor.block_on(async {
//!     let recv = ep.trecv(buf, 7, 0);
//!     ep.tsend(me, 7, b"hello".to_vec()).await.into_result()?;
//!     Ok::<_, Error>(recv.await)
//! })?;
//! assert_eq!((got?.len, buf.as_slice()), (5, &b"hello"[..]));
//! # Ok::<(), psmrail::Error>(())
//! ```

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use crate::compat::{ByteStream, Channel, ChannelConfig, FramedChannel};
pub use crate::engine::{Epid, OpBuffer, PostError};
pub use crate::fabric::{
    getinfo, AddressVector, AvAttr, Caps, CompletionFlags, CompletionQueue, Counter, CounterAttr,
    CounterBind, CqAttr, CqBind, CqEntry, Domain, Endpoint, EngineChoice, EpType, Fabric, FiAddr,
    Hints, Info, MemoryRegion, MrAccess, ProgressKind,
};
pub use crate::mrail::{MrailAv, MrailDomain, MrailEndpoint, MrailFabric};
pub use crate::ops::atomic::{AtomicDatatype, AtomicOp};
pub use crate::ops::{DynEndpoint, MessageEndpoint, OpOutputExt, RmaEndpoint};
pub use crate::{Error, ErrorKind, Result};
