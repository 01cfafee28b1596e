//! Completion slots: how an operation's future learns its result.
//!
//! An engine endpoint owns a [`CompletionTable`] (behind an `Arc`). Posting
//! an operation takes a slot with [`CompletionTable::insert`] and passes the
//! [`OpKey`] down as the request's context (it round-trips through a `u64`).
//! When the engine sees the operation finish it calls
//! [`complete`](CompletionTable::complete) with the result (typically the
//! owned buffer plus a status); the future calls
//! [`poll_take`](CompletionTable::poll_take) until the value is there, and
//! [`abandon`](CompletionTable::abandon) from its `Drop` if it never got it.
//!
//! The slot protocol and the cancellation rules are documented on
//! [`CompletionTable`].
//!
//! Loom models of these races are in `tests/loom.rs`.

use std::fmt;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering::{AcqRel, Acquire};
use std::task::{Context, Poll, Waker};

use crate::slab::Slab;
use crate::sync::{spin_wait, AtomicU64, UnsafeCell};

const LIVE: u64 = 1 << 0;
const COMPLETE: u64 = 1 << 1;
const ABANDONED: u64 = 1 << 2;
const REGISTERED: u64 = 1 << 3;
const ENG_BUSY: u64 = 1 << 4;
const FUT_BUSY: u64 = 1 << 5;

/// The key of one operation in a [`CompletionTable`]: slot index plus the
/// slot's generation.
///
/// It converts to and from a `u64` (the PSM request context) with
/// [`to_u64`](OpKey::to_u64) / [`from_u64`](OpKey::from_u64). A valid key is
/// never 0, so 0 can stand for "no context". Any `u64` is accepted back:
/// a key that does not name a live slot is simply refused by the table.
///
/// A slot's generation is 32 bits: a stale key could match again only after
/// its slot has been reused 2^32 times while the key was kept.
///
/// ```
/// use psmrail_reactor::{CompletionTable, OpKey};
/// let table = CompletionTable::<u32>::new();
/// let key = table.insert();
/// let raw = key.to_u64();
/// assert_ne!(raw, 0);
/// assert_eq!(OpKey::from_u64(raw), key);
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct OpKey(u64);

impl OpKey {
    fn new(index: u32, generation: u32) -> OpKey {
        OpKey((u64::from(generation) << 32) | u64::from(index))
    }

    /// The key as a `u64` (never 0 for a key made by a table).
    pub const fn to_u64(self) -> u64 {
        self.0
    }

    /// The key back from [`to_u64`](OpKey::to_u64). Any value is accepted;
    /// the table refuses keys that are not live.
    pub const fn from_u64(raw: u64) -> OpKey {
        OpKey(raw)
    }

    /// The slot index.
    pub const fn index(self) -> u32 {
        self.0 as u32
    }

    /// The slot generation (never 0 for a key made by a table).
    pub const fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

impl fmt::Debug for OpKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpKey({}@{})", self.index(), self.generation())
    }
}

/// What [`CompletionTable::status`] knows about a key.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OpStatus {
    /// Live and waiting for the engine.
    Pending,
    /// The engine completed it; the value waits for the future.
    Complete,
    /// The future left before completion; the engine's `complete` will drop
    /// the value and free the slot. An engine may use this to cancel early.
    Abandoned,
    /// Not a live key: never issued, or already taken, or freed.
    Unknown,
}

/// One slot. All cell accesses follow the protocol in the module docs.
struct Slot<T> {
    state: AtomicU64,
    value: UnsafeCell<MaybeUninit<T>>,
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: a slot is shared between threads, but its cells are only touched
// by the one party that holds the matching claim in `state` (see the module
// docs); values are moved in and out whole, never shared, so `T: Send` is
// enough. `Waker` is `Send + Sync`.
unsafe impl<T: Send> Sync for Slot<T> {}

impl<T> Slot<T> {
    fn new() -> Self {
        Slot {
            // Free, generation 1 (keys are never 0).
            state: AtomicU64::new(1 << 32),
            value: UnsafeCell::new(MaybeUninit::uninit()),
            waker: UnsafeCell::new(None),
        }
    }

    /// Moves the value out.
    ///
    /// # Safety
    /// The caller holds the value claim (a successful compare-exchange that
    /// saw `COMPLETE` and took `FUT_BUSY` or freed the slot) and reads the
    /// value at most once.
    unsafe fn read_value(&self) -> T {
        // SAFETY: `COMPLETE` was published (Release) after the value was
        // written, the caller's claim (Acquire) synchronises with it, and no
        // one else touches the cell while the claim is held.
        self.value.with(|p| unsafe { (*p).assume_init_read() })
    }
}

/// Free state for the generation after `generation` (0 is skipped).
#[inline]
fn free_state(generation: u32) -> u64 {
    let next = match generation.wrapping_add(1) {
        0 => 1,
        g => g,
    };
    u64::from(next) << 32
}

#[inline]
fn is_live(state: u64, generation: u32) -> bool {
    state & LIVE != 0 && (state >> 32) as u32 == generation
}

/// Result of trying to take a value.
enum Take<T> {
    Ready(T),
    NotReady,
    /// Another future-side call holds the slot right now (only when one key
    /// is used from two threads at once).
    Busy,
    Dead,
}

/// Completion slots for one engine endpoint: a slab of slots with free-list
/// reuse, shared (in an `Arc`) by the engine, which completes operations,
/// and the futures, which wait for them.
///
/// # Cancellation safety (ARCHITECTURE.md, principle 3)
/// A future that is dropped early calls `abandon`. If the engine has not
/// finished, the slot is marked abandoned and keeps its place: the engine's
/// later `complete` drops the value (the buffer the engine was writing into)
/// right there and frees the slot. So an owned buffer always outlives the
/// engine's use of it, and is dropped exactly once.
///
/// # How a slot works
/// Each slot has a state word, a value cell and a waker cell. The state word
/// holds the slot's generation in its high 32 bits and these flags:
///
/// | flag         | meaning                                                      |
/// |--------------|--------------------------------------------------------------|
/// | `LIVE`       | the slot belongs to the op of this generation                |
/// | `COMPLETE`   | the value cell holds the result                              |
/// | `ABANDONED`  | the future side has left (never takes the value)             |
/// | `REGISTERED` | the waker cell holds the waker the engine must wake          |
/// | `ENG_BUSY`   | the engine side owns a cell: the value cell while writing it, the waker cell while taking it after `COMPLETE` |
/// | `FUT_BUSY`   | the future side owns a cell: the waker cell while registering or abandoning, the value cell while reading it |
///
/// Every access to a cell is preceded by a compare-exchange that checks the
/// generation and claims the cell, so a stale or forged key can never touch
/// a cell, and neither can two callers that misuse one key at once. The
/// no-lost-wake-up argument is the usual one: the future clears
/// `REGISTERED` while it edits the waker and sets it again afterwards; the
/// engine publishes `COMPLETE` with one compare-exchange that also reads
/// `REGISTERED`. Whichever of the two comes second sees the other's change:
/// either the engine sees `REGISTERED` and wakes, or the future sees
/// `COMPLETE` and returns `Ready` at once. The slot is freed (generation
/// bumped, index pushed on the free list) by whichever side leaves last.
///
/// Nothing here locks the whole table: after warm-up, `insert`, `complete`
/// and `poll_take` are a few atomic operations on the slot plus one on the
/// free-list head, and allocate nothing.
///
/// # Contract
/// Each key from [`insert`](Self::insert) is completed at most once by the
/// engine, and left exactly once by its future through a successful
/// [`poll_take`](Self::poll_take) / [`try_take`](Self::try_take) or through
/// [`abandon`](Self::abandon). Breaking it (stale keys, double completion,
/// one key polled from two threads at once) is safe: no undefined
/// behaviour, `complete` never panics and hands the value back, and at
/// worst a slot stays in use until the table is dropped.
///
/// ```
/// use std::sync::Arc;
/// use psmrail_reactor::CompletionTable;
///
/// let table = Arc::new(CompletionTable::<Vec<u8>>::new());
/// let key = table.insert();
/// // Engine side, possibly another thread: hand the buffer back.
/// assert!(table.complete(key, vec![1, 2, 3]).is_ok());
/// // Future side.
/// assert_eq!(table.try_take(key), Some(vec![1, 2, 3]));
/// // The key is now stale: a second completion is refused.
/// assert_eq!(table.complete(key, vec![9]), Err(vec![9]));
/// assert!(table.is_empty());
/// ```
pub struct CompletionTable<T: Send> {
    slab: Slab<Slot<T>>,
    _owns: PhantomData<T>,
}

impl<T: Send> Default for CompletionTable<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Send> fmt::Debug for CompletionTable<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionTable")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

#[cold]
#[track_caller]
fn dead_key(key: OpKey) -> ! {
    panic!("{key:?} is not live: its value was already taken or the op was abandoned")
}

impl<T: Send> CompletionTable<T> {
    /// An empty table; allocates on the first `insert`.
    pub fn new() -> Self {
        CompletionTable {
            slab: Slab::new(),
            _owns: PhantomData,
        }
    }

    /// A table with room for at least `n` operations before it grows.
    ///
    /// ```
    /// let t = psmrail_reactor::CompletionTable::<()>::with_capacity(100);
    /// assert!(t.capacity() >= 100);
    /// assert!(t.is_empty());
    /// ```
    pub fn with_capacity(n: usize) -> Self {
        let table = Self::new();
        let keys: Vec<u32> = (0..n).map(|_| table.slab.alloc(Slot::new)).collect();
        for index in keys.into_iter().rev() {
            table.slab.push_free(index);
        }
        table
    }

    #[inline]
    fn slot(&self, key: OpKey) -> Option<&Slot<T>> {
        self.slab.get(key.index())
    }

    /// Takes a slot for a new operation (state: pending). Reuses a freed
    /// slot when there is one; allocates only when every slot is in use.
    ///
    /// ```
    /// use psmrail_reactor::{CompletionTable, OpStatus};
    /// let table = CompletionTable::<u8>::new();
    /// let a = table.insert();
    /// assert_eq!(table.status(a), OpStatus::Pending);
    /// table.complete(a, 1).unwrap();
    /// assert_eq!(table.try_take(a), Some(1));
    /// // The freed slot is reused under a new generation.
    /// let b = table.insert();
    /// assert_eq!(b.index(), a.index());
    /// assert_ne!(b, a);
    /// ```
    #[inline]
    pub fn insert(&self) -> OpKey {
        let (index, slot) = self.slab.alloc_get(Slot::new);
        // We own the slot: it came off the free list, where only its last
        // user put it, after setting the free state (the next generation).
        let free = slot.state.load(Acquire);
        debug_assert_eq!(free & !(u64::from(u32::MAX) << 32), 0);
        slot.state
            .store(free | LIVE, std::sync::atomic::Ordering::Release);
        OpKey::new(index, (free >> 32) as u32)
    }

    /// Engine side: stores `value` as the result of `key` and wakes the
    /// waiting task, if any.
    ///
    /// If the future abandoned the op, `value` is dropped here and the slot
    /// is freed (this is how a buffer outlives the engine's use of it), and
    /// the result is `Ok(())` too.
    ///
    /// A key that is not live (stale, forged, already completed) is
    /// refused: the value comes back in `Err` and nothing else changes.
    /// Never panics (a panicking waker aside).
    pub fn complete(&self, key: OpKey, value: T) -> Result<(), T> {
        let Some(slot) = self.slot(key) else {
            return Err(value);
        };
        let gen = key.generation();
        let mut s = slot.state.load(Acquire);
        // Claim the value cell.
        loop {
            if !is_live(s, gen) || s & (COMPLETE | ENG_BUSY) != 0 {
                return Err(value);
            }
            if s & ABANDONED != 0 {
                // Nobody will take the value: free the slot, drop the value.
                match slot
                    .state
                    .compare_exchange(s, free_state(gen), AcqRel, Acquire)
                {
                    Ok(_) => {
                        self.release(key.index(), slot);
                        drop(value);
                        return Ok(());
                    }
                    Err(actual) => {
                        s = actual;
                        continue;
                    }
                }
            }
            match slot
                .state
                .compare_exchange(s, s | ENG_BUSY, AcqRel, Acquire)
            {
                Ok(_) => {
                    s |= ENG_BUSY;
                    break;
                }
                Err(actual) => s = actual,
            }
        }
        // SAFETY: we hold ENG_BUSY and COMPLETE is clear, so we own the value
        // cell (the future side reads it only after COMPLETE); it holds no
        // value (a slot's value is written once per generation).
        slot.value.with_mut(|p| unsafe {
            (*p).write(value);
        });
        // Publish COMPLETE; keep ENG_BUSY if we have a waker to take.
        let wake = loop {
            if s & ABANDONED != 0 {
                // The future left while we were writing: we own everything.
                // SAFETY: we wrote the value above and, with the slot
                // now free and off the list, are its only user.
                match unsafe { self.free_taking(key.index(), slot, s, gen) } {
                    Ok(value) => {
                        drop(value);
                        return Ok(());
                    }
                    Err(actual) => {
                        s = actual;
                        continue;
                    }
                }
            }
            let registered = s & REGISTERED != 0;
            let new = if registered {
                (s & !REGISTERED) | COMPLETE
            } else {
                (s & !ENG_BUSY) | COMPLETE
            };
            match slot.state.compare_exchange(s, new, AcqRel, Acquire) {
                Ok(_) => {
                    s = new;
                    break registered;
                }
                Err(actual) => s = actual,
            }
        };
        if !wake {
            return Ok(());
        }
        // SAFETY: we saw REGISTERED and cleared it while setting COMPLETE,
        // keeping ENG_BUSY: the future side stored its waker before setting
        // REGISTERED (Release; our CAS was Acquire) and never touches the
        // waker cell once COMPLETE is set; the slot cannot be freed while
        // ENG_BUSY is held.
        let waker = slot.waker.with_mut(|p| unsafe { (*p).take() });
        // Leave; free the slot if the future already took the value and left.
        loop {
            let (new, free) = if s & ABANDONED != 0 {
                (free_state(gen), true)
            } else {
                (s & !ENG_BUSY, false)
            };
            match slot.state.compare_exchange(s, new, AcqRel, Acquire) {
                Ok(_) => {
                    if free {
                        self.release(key.index(), slot);
                    }
                    break;
                }
                Err(actual) => s = actual,
            }
        }
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// Future side: takes the value (freeing the slot) if the op is
    /// complete; otherwise registers `cx`'s waker (replacing the stored one
    /// only if it would not wake the same task) and returns `Pending`.
    ///
    /// # Panics
    /// If `key` is not live: its value was already taken, or it was
    /// abandoned, or it never came from this table. Like polling a future
    /// after it returned `Ready`, that is a bug in the caller.
    ///
    /// ```
    /// use std::task::{Context, Poll};
    /// use psmrail_reactor::CompletionTable;
    ///
    /// let table = CompletionTable::<&str>::new();
    /// let key = table.insert();
    /// let waker = futures::task::noop_waker();
    /// let mut cx = Context::from_waker(&waker);
    /// assert_eq!(table.poll_take(key, &mut cx), Poll::Pending); // waker stored
    /// table.complete(key, "done").unwrap();                      // waker woken
    /// assert_eq!(table.poll_take(key, &mut cx), Poll::Ready("done"));
    /// ```
    pub fn poll_take(&self, key: OpKey, cx: &mut Context<'_>) -> Poll<T> {
        let Some(slot) = self.slot(key) else {
            dead_key(key)
        };
        let gen = key.generation();
        let mut s = slot.state.load(Acquire);
        loop {
            if !is_live(s, gen) || s & ABANDONED != 0 {
                dead_key(key)
            }
            if s & COMPLETE != 0 {
                match self.take_complete(key, slot, s) {
                    Take::Ready(value) => return Poll::Ready(value),
                    Take::Dead => dead_key(key),
                    Take::Busy | Take::NotReady => {
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                }
            }
            if s & FUT_BUSY != 0 {
                // The same key is being used from another thread right now.
                // Ask to be polled again rather than wait here.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let claimed = (s | FUT_BUSY) & !REGISTERED;
            match slot.state.compare_exchange(s, claimed, AcqRel, Acquire) {
                Ok(_) => {
                    s = claimed;
                    break;
                }
                Err(actual) => s = actual,
            }
        }
        // We own the waker cell: REGISTERED is clear (the engine will not
        // read it) and FUT_BUSY keeps other future-side calls out.
        let guard = ReleaseOnUnwind { slot, gen };
        // SAFETY: see above; the claim was made with Acquire, so the last
        // writer of the cell (a previous registration or the engine's take)
        // happened before.
        let stale = slot.waker.with_mut(|p| unsafe {
            let cell = &mut *p;
            match cell {
                Some(w) if w.will_wake(cx.waker()) => None,
                _ => cell.replace(cx.waker().clone()),
            }
        });
        std::mem::forget(guard);
        loop {
            if s & COMPLETE != 0 {
                // The engine completed while we held the waker cell. It saw
                // REGISTERED clear, so it did not keep ENG_BUSY: take the
                // value now.
                debug_assert_eq!(s & ENG_BUSY, 0);
                // SAFETY: COMPLETE seen (Acquire) and the slot is
                // now ours alone.
                match unsafe { self.free_taking(key.index(), slot, s, gen) } {
                    Ok(value) => {
                        drop(stale);
                        return Poll::Ready(value);
                    }
                    Err(actual) => s = actual,
                }
            } else {
                let new = (s & !FUT_BUSY) | REGISTERED;
                match slot.state.compare_exchange(s, new, AcqRel, Acquire) {
                    Ok(_) => {
                        drop(stale);
                        return Poll::Pending;
                    }
                    Err(actual) => s = actual,
                }
            }
        }
    }

    /// Future side, without a waker: the value if the op is complete (the
    /// slot is freed), else `None`. Also `None` for a key that is not live.
    pub fn try_take(&self, key: OpKey) -> Option<T> {
        match self.take(key) {
            Take::Ready(value) => Some(value),
            _ => None,
        }
    }

    /// Future side, used by helpers that must tell "not yet" from "dead".
    fn take(&self, key: OpKey) -> Take<T> {
        let Some(slot) = self.slot(key) else {
            return Take::Dead;
        };
        let s = slot.state.load(Acquire);
        self.take_complete(key, slot, s)
    }

    /// Like [`try_take`](Self::try_take), but panics on a dead key (for the
    /// manual-mode helper, which would otherwise spin forever).
    pub(crate) fn try_take_live(&self, key: OpKey) -> Option<T> {
        match self.take(key) {
            Take::Ready(value) => Some(value),
            Take::NotReady | Take::Busy => None,
            Take::Dead => dead_key(key),
        }
    }

    /// Takes the value if `s` (a fresh load) says the op is complete.
    fn take_complete(&self, key: OpKey, slot: &Slot<T>, mut s: u64) -> Take<T> {
        let gen = key.generation();
        loop {
            if !is_live(s, gen) || s & ABANDONED != 0 {
                return Take::Dead;
            }
            if s & COMPLETE == 0 {
                return Take::NotReady;
            }
            if s & FUT_BUSY != 0 {
                return Take::Busy;
            }
            if s & ENG_BUSY == 0 {
                // The engine is done with the slot: take it whole.
                // SAFETY: COMPLETE seen with Acquire; the slot is
                // free and off the list, so it is ours alone.
                match unsafe { self.free_taking(key.index(), slot, s, gen) } {
                    Ok(value) => {
                        return Take::Ready(value);
                    }
                    Err(actual) => s = actual,
                }
            } else {
                // The engine is still taking the waker: claim the value
                // cell; whoever leaves last frees the slot.
                match slot
                    .state
                    .compare_exchange(s, s | FUT_BUSY, AcqRel, Acquire)
                {
                    Ok(_) => {
                        s |= FUT_BUSY;
                        // SAFETY: COMPLETE seen with Acquire; FUT_BUSY keeps
                        // every other future-side call away from the value,
                        // and the engine never touches it after COMPLETE.
                        let value = unsafe { slot.read_value() };
                        self.leave_after_take(key, slot, s);
                        return Take::Ready(value);
                    }
                    Err(actual) => s = actual,
                }
            }
        }
    }

    /// Drops our FUT_BUSY claim after reading the value; frees the slot if
    /// the engine has left, else marks the future side gone (ABANDONED) so
    /// the engine frees it.
    fn leave_after_take(&self, key: OpKey, slot: &Slot<T>, mut s: u64) {
        let gen = key.generation();
        loop {
            let (new, free) = if s & ENG_BUSY != 0 {
                ((s & !FUT_BUSY) | ABANDONED, false)
            } else {
                (free_state(gen), true)
            };
            match slot.state.compare_exchange(s, new, AcqRel, Acquire) {
                Ok(_) => {
                    if free {
                        self.release(key.index(), slot);
                    }
                    return;
                }
                Err(actual) => s = actual,
            }
        }
    }

    /// Future side, from `Drop`: gives up on `key`.
    ///
    /// If the value is already there it is returned (the caller drops it or
    /// recycles it) and the slot is freed. Otherwise the slot is marked
    /// abandoned, its waker is dropped, and the engine's later
    /// [`complete`](Self::complete) drops the value and frees the slot.
    /// `None` also for a key that is not live.
    ///
    /// ```
    /// use psmrail_reactor::{CompletionTable, OpStatus};
    /// let table = CompletionTable::<String>::new();
    /// let key = table.insert();
    /// assert_eq!(table.abandon(key), None);          // engine not done yet
    /// assert_eq!(table.status(key), OpStatus::Abandoned);
    /// assert!(table.complete(key, "buffer".into()).is_ok()); // dropped here
    /// assert!(table.is_empty());
    /// ```
    pub fn abandon(&self, key: OpKey) -> Option<T> {
        let slot = self.slot(key)?;
        let gen = key.generation();
        let mut s = slot.state.load(Acquire);
        loop {
            if !is_live(s, gen) || s & ABANDONED != 0 {
                return None;
            }
            if s & COMPLETE != 0 {
                match self.take_complete(key, slot, s) {
                    Take::Ready(value) => return Some(value),
                    Take::Dead => return None,
                    Take::Busy | Take::NotReady => {
                        spin_wait();
                        s = slot.state.load(Acquire);
                        continue;
                    }
                }
            }
            if s & FUT_BUSY != 0 {
                // Only when the key is misused from two threads at once; the
                // other call holds the claim for a few instructions.
                spin_wait();
                s = slot.state.load(Acquire);
                continue;
            }
            let claimed = (s | FUT_BUSY) & !REGISTERED;
            match slot.state.compare_exchange(s, claimed, AcqRel, Acquire) {
                Ok(_) => {
                    s = claimed;
                    break;
                }
                Err(actual) => s = actual,
            }
        }
        // SAFETY: FUT_BUSY held with REGISTERED clear: the waker cell is ours.
        let stale = slot.waker.with_mut(|p| unsafe { (*p).take() });
        loop {
            if s & COMPLETE != 0 {
                // Completed meanwhile (without waking: REGISTERED was clear,
                // so ENG_BUSY is clear too).
                // SAFETY: COMPLETE seen with Acquire; slot is ours.
                match unsafe { self.free_taking(key.index(), slot, s, gen) } {
                    Ok(value) => {
                        drop(stale);
                        return Some(value);
                    }
                    Err(actual) => s = actual,
                }
            } else {
                let new = (s & !FUT_BUSY) | ABANDONED;
                match slot.state.compare_exchange(s, new, AcqRel, Acquire) {
                    Ok(_) => {
                        drop(stale);
                        return None;
                    }
                    Err(actual) => s = actual,
                }
            }
        }
    }

    /// Engine and future side at once: the engine finished `key` itself and
    /// handed the result straight to the future (a manual-mode fast path,
    /// where the future's own poll harvests its operation); frees the slot,
    /// which never receives a value.
    ///
    /// Cheaper than [`complete`](Self::complete) followed by
    /// [`try_take`](Self::try_take): one compare-exchange on the slot and the
    /// push on the free list, and the value is never moved through the
    /// table. A stored waker is dropped. The caller must make sure the
    /// engine will not complete `key` any more (it removed the operation
    /// from its own books first); if the engine did complete it anyway, that
    /// value is returned (the key counts as taken) rather than lost. `None`
    /// for a key that is not live or was abandoned (an abandoned key stays
    /// the engine's to free).
    ///
    /// ```
    /// use psmrail_reactor::{CompletionTable, OpStatus};
    /// let table = CompletionTable::<u32>::new();
    /// let key = table.insert();
    /// // ...the engine hands the operation's result to its future directly...
    /// assert_eq!(table.retire(key), None);
    /// assert_eq!(table.status(key), OpStatus::Unknown);
    /// assert!(table.complete(key, 1).is_err(), "the key is spent");
    /// assert!(table.is_empty());
    /// ```
    pub fn retire(&self, key: OpKey) -> Option<T> {
        let slot = self.slot(key)?;
        let gen = key.generation();
        let mut s = slot.state.load(Acquire);
        loop {
            if !is_live(s, gen) || s & ABANDONED != 0 {
                return None;
            }
            if s & COMPLETE != 0 {
                match self.take_complete(key, slot, s) {
                    Take::Ready(value) => return Some(value),
                    Take::Dead => return None,
                    Take::Busy | Take::NotReady => {}
                }
            } else if s & (ENG_BUSY | FUT_BUSY) == 0 {
                // Pending and unclaimed: nobody else may touch a cell, so
                // freeing it here makes this side its only user.
                match slot
                    .state
                    .compare_exchange(s, free_state(gen), AcqRel, Acquire)
                {
                    Ok(_) => {
                        self.release(key.index(), slot);
                        return None;
                    }
                    Err(actual) => {
                        s = actual;
                        continue;
                    }
                }
            }
            // A claim is held: the engine is writing a value (it completed
            // after all), or the key is misused from another thread. Both
            // last a few instructions.
            spin_wait();
            s = slot.state.load(Acquire);
        }
    }

    /// As [`retire`](Self::retire), but instead of freeing the slot, hands
    /// it straight to a new operation: the slot's next key (pending), or
    /// `None` when `key` is not a plain pending key (stale, completed,
    /// abandoned, a waker registered, a claim held). Then nothing changed,
    /// and [`retire`](Self::retire) is the way to leave.
    ///
    /// One compare-exchange, and the free list is never touched: an engine
    /// that completes operations on its fast path can keep the renewed keys
    /// for its next posts, so neither the retirement nor the next
    /// [`insert`](Self::insert) costs the free list's atomics. `key` is
    /// spent as by `retire`: every call with it is refused from then on.
    ///
    /// ```
    /// use psmrail_reactor::{CompletionTable, OpStatus};
    /// let table = CompletionTable::<u32>::new();
    /// let old = table.insert();
    /// let new = table.renew(old).unwrap();
    /// assert_eq!(new.index(), old.index());
    /// assert_eq!(table.status(old), OpStatus::Unknown);
    /// assert_eq!(table.status(new), OpStatus::Pending);
    /// assert!(table.complete(old, 1).is_err(), "the old key is spent");
    /// table.complete(new, 2).unwrap();
    /// assert_eq!(table.renew(new), None, "completed: not renewable");
    /// assert_eq!(table.try_take(new), Some(2));
    /// assert!(table.is_empty());
    /// ```
    #[inline]
    pub fn renew(&self, key: OpKey) -> Option<OpKey> {
        let slot = self.slot(key)?;
        let gen = key.generation();
        let pending = (u64::from(gen) << 32) | LIVE;
        let next = free_state(gen) | LIVE;
        // Only the exact pending state: no flag means no value, no waker
        // and no claim, so the slot changes hands with nothing in its cells
        // (a stale key's calls fail on the generation from here on).
        slot.state
            .compare_exchange(pending, next, AcqRel, Acquire)
            .ok()?;
        Some(OpKey::new(key.index(), (next >> 32) as u32))
    }

    /// Frees the slot if its state is still `s` (generation `gen`) and
    /// takes the value it holds; `Err` with the actual state otherwise.
    ///
    /// # Safety
    /// The value cell must hold this generation's value (COMPLETE seen with
    /// Acquire, or written by the caller), and no other side may touch the
    /// cell once the state is free.
    unsafe fn free_taking(&self, index: u32, slot: &Slot<T>, s: u64, gen: u32) -> Result<T, u64> {
        slot.state
            .compare_exchange(s, free_state(gen), AcqRel, Acquire)?;
        // SAFETY: the caller's contract, and the free state we just set
        // makes this side the slot's only user.
        let value = unsafe { slot.read_value() };
        self.release(index, slot);
        Ok(value)
    }

    /// Frees a slot whose state the caller has just set to free (so the
    /// caller is its only user): drops the waker, recycles the index.
    fn release(&self, index: u32, slot: &Slot<T>) {
        // SAFETY: the caller's compare-exchange to the free state succeeded,
        // so no claim is held by anyone else and no key is live for it.
        let waker = slot.waker.with_mut(|p| unsafe { (*p).take() });
        self.slab.push_free(index);
        // Run foreign code only after the slot is back in circulation.
        drop(waker);
    }

    /// What the table knows about `key` right now.
    #[inline]
    pub fn status(&self, key: OpKey) -> OpStatus {
        if self.is_pending(key) {
            return OpStatus::Pending;
        }
        self.status_slow(key)
    }

    /// Whether `key` is [`Pending`](OpStatus::Pending): live, neither
    /// completed nor abandoned. The check an engine makes before it posts
    /// an operation under `key`, kept small for that hot path.
    ///
    /// ```
    /// use psmrail_reactor::CompletionTable;
    /// let table = CompletionTable::<u8>::new();
    /// let key = table.insert();
    /// assert!(table.is_pending(key));
    /// table.complete(key, 1).unwrap();
    /// assert!(!table.is_pending(key));
    /// ```
    #[inline]
    pub fn is_pending(&self, key: OpKey) -> bool {
        self.slot(key).is_some_and(|slot| {
            let s = slot.state.load(Acquire);
            // Live under this generation, and none of the later flags.
            s & (LIVE | COMPLETE | ABANDONED) == LIVE && (s >> 32) as u32 == key.generation()
        })
    }

    #[cold]
    fn status_slow(&self, key: OpKey) -> OpStatus {
        let Some(slot) = self.slot(key) else {
            return OpStatus::Unknown;
        };
        let s = slot.state.load(Acquire);
        if !is_live(s, key.generation()) {
            OpStatus::Unknown
        } else if s & ABANDONED != 0 {
            if s & COMPLETE != 0 {
                // Taken; the engine is about to free it.
                OpStatus::Unknown
            } else {
                OpStatus::Abandoned
            }
        } else if s & COMPLETE != 0 {
            OpStatus::Complete
        } else {
            OpStatus::Pending
        }
    }

    /// Slots allocated (live or free). Grows only when every slot is in use;
    /// never shrinks.
    pub fn capacity(&self) -> usize {
        self.slab.capacity()
    }

    fn count(&self, pred: impl Fn(u64) -> bool) -> usize {
        self.slab
            .iter()
            .filter(|slot| pred(slot.state.load(Acquire)))
            .count()
    }

    /// Slots in use: pending, complete (value not yet taken) or abandoned
    /// (waiting for the engine). Scans the table: O(capacity), for
    /// diagnostics and tests, not for hot paths.
    pub fn len(&self) -> usize {
        self.count(|s| s & LIVE != 0)
    }

    /// Whether no slot is in use (O(capacity), like [`len`](Self::len)).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Operations the engine has not completed yet, abandoned ones included
    /// (O(capacity)).
    pub fn pending(&self) -> usize {
        self.count(|s| s & LIVE != 0 && s & COMPLETE == 0)
    }

    /// Operations abandoned by their future and not yet completed by the
    /// engine: the buffers the table is keeping alive (O(capacity)).
    pub fn abandoned(&self) -> usize {
        self.count(|s| s & LIVE != 0 && s & COMPLETE == 0 && s & ABANDONED != 0)
    }
}

impl<T: Send> Drop for CompletionTable<T> {
    fn drop(&mut self) {
        for slot in self.slab.iter() {
            let s = slot.state.load(Acquire);
            if s & LIVE != 0 && s & COMPLETE != 0 && s & ABANDONED == 0 {
                // SAFETY: `&mut self`: no other access. A live, complete slot
                // whose future has not left still holds its value (the
                // taker frees or marks ABANDONED in the same step).
                slot.value.with_mut(|p| unsafe { (*p).assume_init_drop() });
            }
        }
        // Wakers are dropped with the slots when the slab drops.
    }
}

/// Releases a FUT_BUSY claim if registering a waker panics (a foreign
/// `Waker::clone`), so the slot stays usable (its future will abandon it).
struct ReleaseOnUnwind<'a, T> {
    slot: &'a Slot<T>,
    gen: u32,
}

impl<T> Drop for ReleaseOnUnwind<'_, T> {
    fn drop(&mut self) {
        let mut s = self.slot.state.load(Acquire);
        while is_live(s, self.gen) && s & FUT_BUSY != 0 {
            match self
                .slot
                .state
                .compare_exchange(s, s & !FUT_BUSY, AcqRel, Acquire)
            {
                Ok(_) => return,
                Err(actual) => s = actual,
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
