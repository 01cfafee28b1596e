//! Typed atomics: [`Endpoint::atomic_on`] names a remote `T` once (peer,
//! offset, key) as an [`AtomicTarget`], whose methods (`fetch_add`,
//! `compare_swap`, `read`, ...) take and return `T` values; each returns a
//! [`TypedAtomicOp`], the byte-level call's [`RmaOp`] with the result
//! decoded.
//!
//! # Why a target handle
//! The byte-level calls take seven or eight arguments, four of them
//! integers (`offset`, `key`, and the values) that the compiler cannot
//! tell apart once they are typed numbers. A handle names the remote
//! element once, where it is usually reused (a counter, a lock word, an
//! array of slots), and leaves each operation one or two arguments of type
//! `T` — `counter.fetch_add(1)`, `lock.compare_swap(0, me)` — with the
//! datatype taken from `T`. It is `Copy` and borrows the endpoint only;
//! the futures it returns borrow nothing.
//!
//! # Same checks, same errors
//! Every method goes through the byte-level path of `mod.rs`
//! (`atomic_call`): an op x datatype pair the table rejects, an endpoint
//! without `FI_ATOMIC`, a closed endpoint or too many elements give the
//! errors `atomic`, `fetch_atomic` and `compare_atomic` give, and the
//! operation is posted before the method returns, as theirs is.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::value::AtomicValue;
use super::Call;
use crate::engine::OpBuffer;
use crate::fabric::{Endpoint, FiAddr};
use crate::ops::atomic::{AtomicKind, AtomicOp};
use crate::ops::RmaOp;
use crate::{Error, ErrorKind, Result};

impl Endpoint {
    /// The `T` at `offset` of the region with `key` at `dest`, as a target
    /// of typed atomics: `ep.atomic_on::<u64>(peer, 0, key).fetch_add(1)`.
    /// Nothing is checked or sent here; each operation on the target is
    /// checked and posted when it is called, as the byte-level calls are.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// // The endpoint targets its own region here; a peer's works the same.
    /// let me = av.insert(&[ep.getname()]).remove(0)?;
    /// let mr = domain.register(vec![0u8; 64], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
    /// let counter = ep.atomic_on::<u64>(me, 8, mr.key());
    /// domain.reactor().block_on(async {
    ///     assert_eq!(counter.fetch_add(5).await?, 0);
    ///     assert_eq!(counter.fetch_add(5).await?, 5);
    ///     assert_eq!(counter.read().await?, 10);
    ///     Ok::<_, psmrail::Error>(())
    /// })?;
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    pub fn atomic_on<T: AtomicValue>(
        &self,
        dest: FiAddr,
        offset: u64,
        key: u64,
    ) -> AtomicTarget<'_, T> {
        AtomicTarget {
            ep: self,
            dest,
            offset,
            key,
            _value: PhantomData,
        }
    }
}

/// A remote `T` for typed atomics: the element at an offset of a memory
/// region of a peer, from [`Endpoint::atomic_on`]. Each method is one
/// `fi_atomic`, `fi_fetch_atomic` or `fi_compare_atomic` with `T`'s
/// [`DATATYPE`](AtomicValue::DATATYPE), posted before the method returns;
/// its future resolves to a plain `Result` (`()`, the old value, or the
/// old values of a slice).
///
/// Op x datatype pairs the table rejects (`FI_BOR` on `f64`, ...) are
/// refused with `FI_EOPNOTSUPP` before anything is sent, exactly as the
/// byte-level calls refuse them; so are ops of the wrong call kind
/// (`FI_CSWAP` through [`fetch_atomic`](Self::fetch_atomic)).
///
/// ```
/// # use psmrail::config::PsmConfig;
/// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
/// use psmrail::ops::atomic::AtomicOp;
/// # let config = PsmConfig::builder_from_env()?.name_server(false)
/// #     .delay(std::time::Duration::ZERO).build()?;
/// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
/// # let info = getinfo(Some(&hints))?.remove(0);
/// # let fabric = Fabric::open(&info)?;
/// # let domain = fabric.domain(&info)?;
/// # let av = domain.av(AvAttr::new())?;
/// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
/// # let me = av.insert(&[ep.getname()]).remove(0)?;
/// # let _mr = domain.register(vec![0u8; 64], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
/// let x = ep.atomic_on::<f64>(me, 16, 1);
/// domain.reactor().block_on(async {
///     x.write(1.5).await?;
///     assert_eq!(x.fetch_add(2.0).await?, 1.5);
///     assert_eq!(x.read().await?, 3.5);
///     // Bitwise ops take integers only, as the table says.
///     let e = x.fetch_atomic(AtomicOp::Bor, 1.0).await.unwrap_err();
///     assert_eq!(e.kind(), psmrail::ErrorKind::OpNotSupp);
///     Ok::<_, psmrail::Error>(())
/// })?;
/// # Ok::<(), psmrail::Error>(())
/// ```
///
/// # Cancel safety
/// As the byte-level calls: dropping a method's future does not cancel the
/// operation, which runs to completion at the target (the remote value may
/// still change); only its result is lost. See [`TypedAtomicOp`].
pub struct AtomicTarget<'a, T: AtomicValue> {
    ep: &'a Endpoint,
    dest: FiAddr,
    offset: u64,
    key: u64,
    _value: PhantomData<fn() -> T>,
}

impl<T: AtomicValue> Clone for AtomicTarget<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: AtomicValue> Copy for AtomicTarget<'_, T> {}

impl<T: AtomicValue> fmt::Debug for AtomicTarget<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AtomicTarget")
            .field("datatype", &T::DATATYPE)
            .field("dest", &self.dest)
            .field("offset", &self.offset)
            .field("key", &self.key)
            .finish()
    }
}

impl<T: AtomicValue> AtomicTarget<'_, T> {
    /// `fi_atomic` `FI_SUM`: adds `value` to the target (integers wrap).
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// let mr = domain.register(vec![0u8; 8], MrAccess::REMOTE_WRITE, Some(1))?;
    /// domain.reactor().block_on(ep.atomic_on::<i32>(me, 4, 1).add(-3))?;
    /// let mut now = [0u8; 4];
    /// mr.read_at(4, &mut now)?;
    /// assert_eq!(i32::from_ne_bytes(now), -3);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Cancel safety
    /// As [`TypedAtomicOp`]: dropping the future does not cancel the add.
    pub fn add(&self, value: T) -> TypedAtomicOp<()> {
        self.atomic(AtomicOp::Sum, value)
    }

    /// `fi_fetch_atomic` `FI_SUM`: adds `value` to the target; the value
    /// before the add.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// # let _mr = domain.register(vec![0u8; 8], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
    /// let ticket = ep.atomic_on::<u64>(me, 0, 1);
    /// let r = domain.reactor();
    /// assert_eq!(r.block_on(ticket.fetch_add(1))?, 0);
    /// assert_eq!(r.block_on(ticket.fetch_add(1))?, 1);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Cancel safety
    /// As [`TypedAtomicOp`]: dropping the future does not cancel the add;
    /// the old value is lost.
    pub fn fetch_add(&self, value: T) -> TypedAtomicOp<T> {
        self.fetch_atomic(AtomicOp::Sum, value)
    }

    /// `fi_fetch_atomic` `FI_MIN`: the target becomes `value` if `value` is
    /// smaller; the value before.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// # let _mr = domain.register(vec![0u8; 8], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
    /// let low = ep.atomic_on::<i16>(me, 0, 1);
    /// let r = domain.reactor();
    /// assert_eq!(r.block_on(low.fetch_min(-5))?, 0);
    /// assert_eq!(r.block_on(low.fetch_min(7))?, -5); // kept
    /// assert_eq!(r.block_on(low.read())?, -5);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Cancel safety
    /// As [`TypedAtomicOp`]: dropping the future does not cancel the
    /// operation; the old value is lost.
    pub fn fetch_min(&self, value: T) -> TypedAtomicOp<T> {
        self.fetch_atomic(AtomicOp::Min, value)
    }

    /// `fi_fetch_atomic` `FI_MAX`: the target becomes `value` if `value` is
    /// larger; the value before.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// # let _mr = domain.register(vec![0u8; 8], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
    /// let high = ep.atomic_on::<f32>(me, 0, 1);
    /// let r = domain.reactor();
    /// assert_eq!(r.block_on(high.fetch_max(2.5))?, 0.0);
    /// assert_eq!(r.block_on(high.fetch_max(-1.0))?, 2.5); // kept
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Cancel safety
    /// As [`TypedAtomicOp`]: dropping the future does not cancel the
    /// operation; the old value is lost.
    pub fn fetch_max(&self, value: T) -> TypedAtomicOp<T> {
        self.fetch_atomic(AtomicOp::Max, value)
    }

    /// `fi_atomic` `FI_ATOMIC_WRITE`: stores `value` in the target.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// let mr = domain.register(vec![0u8; 8], MrAccess::REMOTE_WRITE, Some(1))?;
    /// domain.reactor().block_on(ep.atomic_on::<u16>(me, 2, 1).write(0xbeef))?;
    /// let mut now = [0u8; 2];
    /// mr.read_at(2, &mut now)?;
    /// assert_eq!(u16::from_ne_bytes(now), 0xbeef);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Cancel safety
    /// As [`TypedAtomicOp`]: dropping the future does not cancel the write.
    pub fn write(&self, value: T) -> TypedAtomicOp<()> {
        self.atomic(AtomicOp::AtomicWrite, value)
    }

    /// `fi_fetch_atomic` `FI_ATOMIC_READ`: the target's value (nothing is
    /// sent but the request). Needs `FI_REMOTE_WRITE` on the region, as
    /// every fetch does.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// let mr = domain.register(vec![0u8; 8], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
    /// mr.write_at(0, &(-42i64).to_ne_bytes())?;
    /// assert_eq!(domain.reactor().block_on(ep.atomic_on::<i64>(me, 0, 1).read())?, -42);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Cancel safety
    /// As [`TypedAtomicOp`]: dropping the future loses the value only.
    pub fn read(&self) -> TypedAtomicOp<T> {
        self.fetch(AtomicOp::AtomicRead, &[], 1, one::<T>)
    }

    /// `fi_fetch_atomic` `FI_ATOMIC_WRITE`: stores `value` in the target;
    /// the value it replaced.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// # let _mr = domain.register(vec![0u8; 8], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
    /// let slot = ep.atomic_on::<u8>(me, 0, 1);
    /// let r = domain.reactor();
    /// assert_eq!(r.block_on(slot.swap(7))?, 0);
    /// assert_eq!(r.block_on(slot.swap(9))?, 7);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Cancel safety
    /// As [`TypedAtomicOp`]: dropping the future does not cancel the swap;
    /// the old value is lost.
    pub fn swap(&self, value: T) -> TypedAtomicOp<T> {
        self.fetch_atomic(AtomicOp::AtomicWrite, value)
    }

    /// `fi_compare_atomic` `FI_CSWAP`: stores `value` if the target equals
    /// `compare` (IEEE `==` for floats: NaN equals nothing); the value
    /// before, which equals `compare` exactly when the swap happened. The
    /// compare value comes first, as in `std`'s `compare_exchange`.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// # let _mr = domain.register(vec![0u8; 8], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
    /// let lock = ep.atomic_on::<u32>(me, 0, 1);
    /// let r = domain.reactor();
    /// assert_eq!(r.block_on(lock.compare_swap(0, 17))?, 0); // taken
    /// assert_eq!(r.block_on(lock.compare_swap(0, 18))?, 17); // busy: unchanged
    /// assert_eq!(r.block_on(lock.read())?, 17);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Cancel safety
    /// As [`TypedAtomicOp`]: dropping the future does not cancel the
    /// operation (the swap may still happen); the old value is lost.
    pub fn compare_swap(&self, compare: T, value: T) -> TypedAtomicOp<T> {
        self.compare_atomic(AtomicOp::Cswap, compare, value)
    }

    /// `fi_atomic` with any op of that call (`FI_MIN` ... `FI_BXOR`,
    /// `FI_ATOMIC_WRITE`) and `value` as the operand.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// use psmrail::ops::atomic::AtomicOp;
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// # let _mr = domain.register(vec![0u8; 8], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
    /// let flags = ep.atomic_on::<u8>(me, 0, 1);
    /// let r = domain.reactor();
    /// r.block_on(flags.atomic(AtomicOp::Bor, 0b0101))?;
    /// r.block_on(flags.atomic(AtomicOp::Band, 0b0110))?;
    /// assert_eq!(r.block_on(flags.read())?, 0b0100);
    /// // FI_ATOMIC_READ fetches: not an op of fi_atomic.
    /// let e = r.block_on(flags.atomic(AtomicOp::AtomicRead, 0)).unwrap_err();
    /// assert_eq!(e.kind(), psmrail::ErrorKind::OpNotSupp);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Cancel safety
    /// As [`TypedAtomicOp`]: dropping the future does not cancel the
    /// operation.
    pub fn atomic(&self, op: AtomicOp, value: T) -> TypedAtomicOp<()> {
        self.plain(op, &T::slice_to_ne_bytes(&[value]))
    }

    /// `fi_fetch_atomic` with any op of that call (`FI_MIN` ... `FI_BXOR`,
    /// `FI_ATOMIC_READ`, `FI_ATOMIC_WRITE`) and `value` as the operand (not
    /// sent for `FI_ATOMIC_READ`); the value before.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// use psmrail::ops::atomic::AtomicOp;
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// # let _mr = domain.register(vec![0u8; 8], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
    /// let x = ep.atomic_on::<i32>(me, 0, 1);
    /// let r = domain.reactor();
    /// r.block_on(x.write(3))?;
    /// assert_eq!(r.block_on(x.fetch_atomic(AtomicOp::Prod, -4))?, 3);
    /// assert_eq!(r.block_on(x.fetch_atomic(AtomicOp::AtomicRead, 0))?, -12);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Cancel safety
    /// As [`TypedAtomicOp`]: dropping the future does not cancel the
    /// operation; the old value is lost.
    pub fn fetch_atomic(&self, op: AtomicOp, value: T) -> TypedAtomicOp<T> {
        self.fetch(op, &T::slice_to_ne_bytes(&[value]), 1, one::<T>)
    }

    /// `fi_compare_atomic` with any op of that call (`FI_CSWAP` ...
    /// `FI_MSWAP`): `compare` is the compare value, `value` the operand
    /// (the compare value first, as in [`compare_swap`](Self::compare_swap);
    /// the byte-level `compare_atomic` takes the operand first, as
    /// `fi_compare_atomic` does); the value before.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// use psmrail::ops::atomic::AtomicOp;
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// # let _mr = domain.register(vec![0u8; 8], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
    /// let best = ep.atomic_on::<f64>(me, 0, 1);
    /// let r = domain.reactor();
    /// r.block_on(best.write(10.0))?;
    /// // FI_CSWAP_GT: store 4.0 if 12.0 > the target.
    /// assert_eq!(r.block_on(best.compare_atomic(AtomicOp::CswapGt, 12.0, 4.0))?, 10.0);
    /// assert_eq!(r.block_on(best.read())?, 4.0);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Cancel safety
    /// As [`TypedAtomicOp`]: dropping the future does not cancel the
    /// operation (the swap may still happen); the old value is lost.
    pub fn compare_atomic(&self, op: AtomicOp, compare: T, value: T) -> TypedAtomicOp<T> {
        let operand = T::slice_to_ne_bytes(&[value]);
        let compare = T::slice_to_ne_bytes(&[compare]);
        self.compare(op, &operand, &compare, 1, one::<T>)
    }

    /// [`atomic`](Self::atomic) on `values.len()` consecutive elements from
    /// the target on: element `i` gets `op` with `values[i]`. At most
    /// [`Endpoint::atomic_valid`] elements (atomics are never chunked).
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// use psmrail::ops::atomic::AtomicOp;
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// # let _mr = domain.register(vec![0u8; 64], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
    /// let histogram = ep.atomic_on::<u32>(me, 0, 1);
    /// let r = domain.reactor();
    /// r.block_on(histogram.atomic_slice(AtomicOp::Sum, &[1, 0, 2, 5]))?;
    /// assert_eq!(r.block_on(histogram.read_slice(4))?, [1, 0, 2, 5]);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Cancel safety
    /// As [`TypedAtomicOp`]: dropping the future does not cancel the
    /// operation.
    pub fn atomic_slice(&self, op: AtomicOp, values: &[T]) -> TypedAtomicOp<()> {
        self.plain(op, &T::slice_to_ne_bytes(values))
    }

    /// [`fetch_atomic`](Self::fetch_atomic) on `values.len()` consecutive
    /// elements from the target on; the values before. At most
    /// [`Endpoint::fetch_atomic_valid`] elements.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// use psmrail::ops::atomic::AtomicOp;
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// # let _mr = domain.register(vec![0u8; 64], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
    /// let v = ep.atomic_on::<i64>(me, 0, 1);
    /// let r = domain.reactor();
    /// assert_eq!(r.block_on(v.fetch_atomic_slice(AtomicOp::Sum, &[3, -3]))?, [0, 0]);
    /// assert_eq!(r.block_on(v.fetch_atomic_slice(AtomicOp::Max, &[1, 1]))?, [3, -3]);
    /// assert_eq!(r.block_on(v.read_slice(2))?, [3, 1]);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Cancel safety
    /// As [`TypedAtomicOp`]: dropping the future does not cancel the
    /// operation; the old values are lost.
    pub fn fetch_atomic_slice(&self, op: AtomicOp, values: &[T]) -> TypedAtomicOp<Vec<T>> {
        let operand = T::slice_to_ne_bytes(values);
        self.fetch(op, &operand, values.len(), T::vec_from_ne_bytes)
    }

    /// [`compare_atomic`](Self::compare_atomic) on consecutive elements from
    /// the target on: element `i` with `compare[i]` and `values[i]` (the
    /// two slices have the same length); the values before. At most
    /// [`Endpoint::compare_atomic_valid`] elements.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// use psmrail::ops::atomic::AtomicOp;
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// # let _mr = domain.register(vec![0u8; 64], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
    /// let slots = ep.atomic_on::<u16>(me, 0, 1);
    /// let r = domain.reactor();
    /// // Slot 0 holds 0 and is swapped; slot 1 does not hold 5 and is kept.
    /// let old = r.block_on(slots.compare_atomic_slice(AtomicOp::Cswap, &[0, 5], &[8, 9]))?;
    /// assert_eq!(old, [0, 0]);
    /// assert_eq!(r.block_on(slots.read_slice(2))?, [8, 0]);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Errors (in the future)
    /// As the byte-level call: `Inval` when `compare` and `values` differ
    /// in length.
    ///
    /// # Cancel safety
    /// As [`TypedAtomicOp`]: dropping the future does not cancel the
    /// operation; the old values are lost.
    pub fn compare_atomic_slice(
        &self,
        op: AtomicOp,
        compare: &[T],
        values: &[T],
    ) -> TypedAtomicOp<Vec<T>> {
        let operand = T::slice_to_ne_bytes(values);
        let compare = T::slice_to_ne_bytes(compare);
        self.compare(op, &operand, &compare, values.len(), T::vec_from_ne_bytes)
    }

    /// `fi_fetch_atomic` `FI_ATOMIC_READ` of `count` consecutive elements
    /// from the target on. At most [`Endpoint::fetch_atomic_valid`]
    /// elements.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// let mr = domain.register(vec![0u8; 16], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
    /// mr.write_at(4, &[1, 2, 3])?;
    /// let bytes = ep.atomic_on::<u8>(me, 3, 1);
    /// assert_eq!(domain.reactor().block_on(bytes.read_slice(4))?, [0, 1, 2, 3]);
    /// // Zero elements is not an atomic.
    /// let e = domain.reactor().block_on(bytes.read_slice(0)).unwrap_err();
    /// assert_eq!(e.kind(), psmrail::ErrorKind::Inval);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    ///
    /// # Cancel safety
    /// As [`TypedAtomicOp`]: dropping the future loses the values only.
    pub fn read_slice(&self, count: usize) -> TypedAtomicOp<Vec<T>> {
        self.fetch(AtomicOp::AtomicRead, &[], count, T::vec_from_ne_bytes)
    }

    fn call<'c>(
        &self,
        kind: AtomicKind,
        op: AtomicOp,
        operand: &'c [u8],
        compare: &'c [u8],
    ) -> Call<'c> {
        Call {
            kind,
            op,
            dt: T::DATATYPE,
            dest: self.dest,
            operand,
            compare,
            offset: self.offset,
            key: self.key,
        }
    }

    /// A plain atomic: the element count is the operand's, nothing comes
    /// back (the buffer handed back is empty).
    fn plain(&self, op: AtomicOp, operand: &[u8]) -> TypedAtomicOp<()> {
        let call = self.call(AtomicKind::Write, op, operand, &[]);
        TypedAtomicOp::new(self.ep.atomic_call(call, OpBuffer::empty()), |_| Some(()))
    }

    /// A fetch atomic of `count` elements, the result decoded by `decode`.
    fn fetch<O>(
        &self,
        op: AtomicOp,
        operand: &[u8],
        count: usize,
        decode: fn(&[u8]) -> Option<O>,
    ) -> TypedAtomicOp<O> {
        let call = self.call(AtomicKind::Fetch, op, operand, &[]);
        TypedAtomicOp::new(self.ep.atomic_call(call, result::<T>(count)), decode)
    }

    /// A compare atomic of `count` elements, the result decoded by `decode`.
    fn compare<O>(
        &self,
        op: AtomicOp,
        operand: &[u8],
        compare: &[u8],
        count: usize,
        decode: fn(&[u8]) -> Option<O>,
    ) -> TypedAtomicOp<O> {
        let call = self.call(AtomicKind::Compare, op, operand, compare);
        TypedAtomicOp::new(self.ep.atomic_call(call, result::<T>(count)), decode)
    }
}

/// A zeroed result buffer for `count` elements of `T` (saturating: a count
/// that large is refused by the byte-level checks before any use).
fn result<T: AtomicValue>(count: usize) -> OpBuffer {
    OpBuffer::from(vec![0u8; count.saturating_mul(T::DATATYPE.size())])
}

/// One element out of a fetched result.
fn one<T: AtomicValue>(bytes: &[u8]) -> Option<T> {
    T::from_ne_slice(bytes)
}

/// The future of a typed atomic ([`AtomicTarget`]'s methods): the
/// byte-level call's [`RmaOp`], posted when the method returned, whose
/// result bytes become `O` — `()` for a plain atomic, the old `T` for a
/// fetch or compare, a `Vec<T>` for the slice forms. Errors are the
/// byte-level call's.
///
/// ```
/// # use psmrail::config::PsmConfig;
/// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints, MrAccess};
/// use psmrail::ops::atomic::TypedAtomicOp;
/// # let config = PsmConfig::builder_from_env()?.name_server(false)
/// #     .delay(std::time::Duration::ZERO).build()?;
/// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
/// # let info = getinfo(Some(&hints))?.remove(0);
/// # let fabric = Fabric::open(&info)?;
/// # let domain = fabric.domain(&info)?;
/// # let av = domain.av(AvAttr::new())?;
/// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
/// # let me = av.insert(&[ep.getname()]).remove(0)?;
/// # let _mr = domain.register(vec![0u8; 8], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, Some(1))?;
/// let counter = ep.atomic_on::<u64>(me, 0, 1);
/// // Posted now, in call order; awaited later, in any order.
/// let first: TypedAtomicOp<u64> = counter.fetch_add(1);
/// let second = counter.fetch_add(1);
/// let r = domain.reactor();
/// assert_eq!((r.block_on(second)?, r.block_on(first)?), (1, 0));
/// # Ok::<(), psmrail::Error>(())
/// ```
///
/// # Cancel safety
/// Dropping the future does not cancel the operation: it runs to
/// completion at the target (the remote value may still change), and its
/// buffers stay inside the reactor until the transfer is done, then they
/// are freed; only the result is lost. `mem::forget` is safe too. The
/// future holds no borrow: it may outlive its [`AtomicTarget`].
#[must_use = "the operation runs anyway; await the future for its result"]
pub struct TypedAtomicOp<O> {
    op: RmaOp,
    decode: fn(&[u8]) -> Option<O>,
}

impl<O> fmt::Debug for TypedAtomicOp<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedAtomicOp")
            .field("op", &self.op)
            .finish_non_exhaustive()
    }
}

impl<O> TypedAtomicOp<O> {
    fn new(op: RmaOp, decode: fn(&[u8]) -> Option<O>) -> Self {
        TypedAtomicOp { op, decode }
    }

    /// Whether the call failed before anything was sent (an unsupported
    /// op x datatype pair, a missing capability, a closed endpoint, ...);
    /// the future then resolves to that error at once.
    ///
    /// ```
    /// # use psmrail::config::PsmConfig;
    /// # use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, Fabric, Hints};
    /// use psmrail::ops::atomic::AtomicOp;
    /// # let config = PsmConfig::builder_from_env()?.name_server(false)
    /// #     .delay(std::time::Duration::ZERO).build()?;
    /// # let hints = Hints::new().caps(Caps::ATOMIC).engine(EngineChoice::Soft).config(config);
    /// # let info = getinfo(Some(&hints))?.remove(0);
    /// # let fabric = Fabric::open(&info)?;
    /// # let domain = fabric.domain(&info)?;
    /// # let av = domain.av(AvAttr::new())?;
    /// # let ep = domain.endpoint(&info).bind_av(&av).enable()?;
    /// # let me = av.insert(&[ep.getname()]).remove(0)?;
    /// let op = ep.atomic_on::<f32>(me, 0, 1).fetch_atomic(AtomicOp::Bxor, 1.0);
    /// assert!(op.is_failed());
    /// let e = domain.reactor().block_on(op).unwrap_err();
    /// assert_eq!(e.kind(), psmrail::ErrorKind::OpNotSupp);
    /// # Ok::<(), psmrail::Error>(())
    /// ```
    pub fn is_failed(&self) -> bool {
        self.op.is_failed()
    }
}

impl<O> Future for TypedAtomicOp<O> {
    type Output = Result<O>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (result, buffer) = std::task::ready!(Pin::new(&mut this.op).poll(cx));
        result?;
        let bytes = buffer.as_slice();
        Poll::Ready((this.decode)(bytes).ok_or_else(|| {
            Error::new(
                ErrorKind::Other,
                format!(
                    "a typed atomic's result of {} bytes is not a whole number of elements",
                    bytes.len()
                ),
            )
        }))
    }
}
