//! [`RmaEndpoint`]: the RMA operations (`FI_RMA`) of both providers as one
//! trait, so that code can be written once for a psm [`Endpoint`] and an
//! mrail [`MrailEndpoint`](crate::mrail::MrailEndpoint), as
//! [`MessageEndpoint`](super::MessageEndpoint) does for messages.
//!
//! The methods keep the names, argument order and `(Result, buffer)`
//! outputs of the endpoints' own methods (which they call). Keys are what
//! each provider's RMA calls take: a psm region's key, or for mrail the
//! key [`MrailDomain::map_raw`](crate::mrail::MrailDomain::map_raw) gave
//! for the peer's raw key.
//!
//! ```
//! use psmrail::fabric::FiAddr;
//! use psmrail::ops::RmaEndpoint;
//!
//! /// Writes `data` at `offset` of the peer's region and reads it back.
//! async fn round_trip<E: RmaEndpoint>(ep: &E, peer: FiAddr, key: u64, data: Vec<u8>) -> psmrail::Result<Vec<u8>> {
//!     let len = data.len();
//!     let (written, _) = ep.write(peer, data, 64, key).await;
//!     written?;
//!     let (read, buf) = ep.read(peer, vec![0u8; len], 64, key).await;
//!     read?;
//!     Ok(buf.into_vec().unwrap())
//! }
//! # use psmrail::config::PsmConfig;
//! # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
//! # let config = PsmConfig::builder_from_env().unwrap().name_server(false)
//! #     .delay(std::time::Duration::ZERO).build().unwrap();
//! # let hints = Hints::new().engine(EngineChoice::Soft).caps(Caps::MSG | Caps::RMA).config(config);
//! # let info = getinfo(Some(&hints))?.remove(0);
//! # let domain = Fabric::open(&info)?.domain(&info)?;
//! # let av = domain.av(AvAttr::new())?;
//! # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
//! # let me = av.insert(&[ep.getname()]).remove(0)?;
//! let mr = domain.register(vec![0u8; 4096], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, None)?;
//! // A psm endpoint writing to its own region; an mrail endpoint works the same.
//! let back = domain.reactor().block_on(round_trip(&ep, me, mr.key(), b"rma".to_vec()))?;
//! assert_eq!(back, b"rma");
//! # Ok::<(), psmrail::Error>(())
//! ```

use super::{OpOutput, RmaIov, RmaOp};
use crate::engine::OpBuffer;
use crate::fabric::{Endpoint, FiAddr};
use std::future::Future;

/// The RMA operations of an endpoint, awaited as futures. See the module
/// docs for an example generic over the two providers.
pub trait RmaEndpoint {
    /// What an RMA call returns: resolves to the result and the buffer.
    type RmaFuture: Future<Output = OpOutput<()>>;

    /// `fi_write`: writes `buf` to `remote_offset` of the region with `key`
    /// at `dest`.
    fn write(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
    ) -> Self::RmaFuture;

    /// `fi_writedata`: [`write`](Self::write) with remote CQ data.
    fn writedata(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
        data: u64,
    ) -> Self::RmaFuture;

    /// `fi_read`: fills `buf` from `remote_offset` of the region with `key`
    /// at `dest`.
    fn read(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote_offset: u64,
        key: u64,
    ) -> Self::RmaFuture;

    /// `fi_writemsg`: writes `buf`, in order, to the remote ranges.
    fn writemsg(
        &self,
        dest: FiAddr,
        buf: impl Into<OpBuffer>,
        remote: &[RmaIov],
        data: Option<u64>,
    ) -> Self::RmaFuture;

    /// `fi_readmsg`: fills `buf`, in order, from the remote ranges.
    fn readmsg(&self, dest: FiAddr, buf: impl Into<OpBuffer>, remote: &[RmaIov])
        -> Self::RmaFuture;
}

/// Implements [`RmaEndpoint`] for an endpoint type by calling its own
/// methods of the same names, which return `$fut`.
macro_rules! impl_rma_endpoint {
    ($ty:ty, $fut:ty) => {
        impl $crate::ops::RmaEndpoint for $ty {
            type RmaFuture = $fut;

            fn write(
                &self,
                dest: $crate::fabric::FiAddr,
                buf: impl Into<$crate::engine::OpBuffer>,
                remote_offset: u64,
                key: u64,
            ) -> $fut {
                <$ty>::write(self, dest, buf, remote_offset, key)
            }

            fn writedata(
                &self,
                dest: $crate::fabric::FiAddr,
                buf: impl Into<$crate::engine::OpBuffer>,
                remote_offset: u64,
                key: u64,
                data: u64,
            ) -> $fut {
                <$ty>::writedata(self, dest, buf, remote_offset, key, data)
            }

            fn read(
                &self,
                dest: $crate::fabric::FiAddr,
                buf: impl Into<$crate::engine::OpBuffer>,
                remote_offset: u64,
                key: u64,
            ) -> $fut {
                <$ty>::read(self, dest, buf, remote_offset, key)
            }

            fn writemsg(
                &self,
                dest: $crate::fabric::FiAddr,
                buf: impl Into<$crate::engine::OpBuffer>,
                remote: &[$crate::ops::RmaIov],
                data: Option<u64>,
            ) -> $fut {
                <$ty>::writemsg(self, dest, buf, remote, data)
            }

            fn readmsg(
                &self,
                dest: $crate::fabric::FiAddr,
                buf: impl Into<$crate::engine::OpBuffer>,
                remote: &[$crate::ops::RmaIov],
            ) -> $fut {
                <$ty>::readmsg(self, dest, buf, remote)
            }
        }
    };
}
pub(crate) use impl_rma_endpoint;

impl_rma_endpoint!(Endpoint, RmaOp);
