//! `fi_endpoint`: RDM and DGRAM endpoints over psmrail's [`Endpoint`]
//! (psm) and [`MrailEndpoint`] (ofi_mrail). Bindings (`fi_ep_bind`) are
//! collected until `fi_enable`, which builds the psmrail endpoint with
//! them; the data path (`msg.rs`, `tagged.rs`) then posts operations with
//! the application's context, whose completions reach the bound queues.
//! Closing frees the psmrail endpoint and releases what it was bound to.
//!
//! `fi_ep_alias` (`FI_ALIAS`) makes another fid over the same endpoint
//! that differs only in its op flags (fi_endpoint(3)): everything but the
//! op flags is the parent's ([`EpObj::base`]), and the parent refuses to
//! close (`-FI_EBUSY`) while an alias is open.

use crate::av::{AvObj, RustAv};
use crate::cntr::CntrObj;
use crate::cq::CqObj;
use crate::domain::{DomainObj, RustDomain};
use crate::drive::Driver;
use crate::entry::{guard, Errno, FiResult};
use crate::info::epid_bytes;
use crate::obj::{self, fi_ops, Children, FiOps, Table};
use crate::sys;
use psmrail::engine::{OpBuffer, PostError};
use psmrail::fabric::{Caps, CounterBind, CqBind, Endpoint, FiAddr, Info};
use psmrail::mrail::{MrailEndpoint, MrailPosted};
use psmrail::ops::{MessageEndpoint, MultiPosted, Posted};
use psmrail::reactor::SourceId;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The psmrail endpoint under a C one.
#[derive(Clone, Debug)]
pub(crate) enum RustEp {
    Psm(Endpoint),
    Mrail(MrailEndpoint),
}

/// A posted operation's handle (for `fi_cancel`).
#[derive(Clone, Debug)]
pub(crate) enum AnyPosted {
    Psm(Posted),
    Mrail(MrailPosted),
    /// A psm multi-receive (`multi_recv.rs`).
    Multi(MultiPosted),
}

fn post_err(e: PostError) -> Errno {
    Errno::from(e.error)
}

impl RustEp {
    pub(crate) fn post_send(&self, dest: FiAddr, buf: OpBuffer, ctx: u64) -> FiResult<()> {
        match self {
            RustEp::Psm(ep) => ep.post_send(dest, buf, ctx).map(|_| ()),
            RustEp::Mrail(ep) => ep.post_send(dest, buf, ctx).map(|_| ()),
        }
        .map_err(post_err)
    }

    pub(crate) fn post_tsend(
        &self,
        dest: FiAddr,
        tag: u64,
        buf: OpBuffer,
        ctx: u64,
    ) -> FiResult<()> {
        match self {
            RustEp::Psm(ep) => ep.post_tsend(dest, tag, buf, ctx).map(|_| ()),
            RustEp::Mrail(ep) => ep.post_tsend(dest, tag, buf, ctx).map(|_| ()),
        }
        .map_err(post_err)
    }

    pub(crate) fn post_recv(&self, buf: OpBuffer, ctx: u64) -> FiResult<AnyPosted> {
        match self {
            RustEp::Psm(ep) => ep.post_recv(buf, ctx).map(AnyPosted::Psm),
            RustEp::Mrail(ep) => ep.post_recv(buf, ctx).map(AnyPosted::Mrail),
        }
        .map_err(post_err)
    }

    /// A receive from `src` only (`FI_DIRECTED_RECV`).
    pub(crate) fn post_recv_from(
        &self,
        src: FiAddr,
        buf: OpBuffer,
        ctx: u64,
    ) -> FiResult<AnyPosted> {
        match self {
            RustEp::Psm(ep) => ep.post_recv_from(src, buf, ctx).map(AnyPosted::Psm),
            RustEp::Mrail(ep) => ep.post_recv_from(src, buf, ctx).map(AnyPosted::Mrail),
        }
        .map_err(post_err)
    }

    /// A tagged receive from `src` only (`FI_DIRECTED_RECV`): ofi_mrail's
    /// (psm offers directed receives of untagged messages only, so a psm
    /// endpoint never has both capabilities).
    pub(crate) fn post_trecv_from(
        &self,
        src: FiAddr,
        buf: OpBuffer,
        tag: u64,
        ignore: u64,
        ctx: u64,
    ) -> FiResult<AnyPosted> {
        match self {
            RustEp::Psm(_) => Err(Errno::OPNOTSUPP),
            RustEp::Mrail(ep) => ep
                .post_trecv_from(src, buf, tag, ignore, ctx)
                .map(AnyPosted::Mrail)
                .map_err(post_err),
        }
    }

    pub(crate) fn post_trecv(
        &self,
        buf: OpBuffer,
        tag: u64,
        ignore: u64,
        ctx: u64,
    ) -> FiResult<AnyPosted> {
        match self {
            RustEp::Psm(ep) => ep.post_trecv(buf, tag, ignore, ctx).map(AnyPosted::Psm),
            RustEp::Mrail(ep) => ep.post_trecv(buf, tag, ignore, ctx).map(AnyPosted::Mrail),
        }
        .map_err(post_err)
    }

    pub(crate) fn inject(&self, dest: FiAddr, data: &[u8]) -> FiResult<()> {
        match self {
            RustEp::Psm(ep) => MessageEndpoint::inject(ep, dest, data),
            RustEp::Mrail(ep) => ep.inject(dest, data),
        }
        .map_err(Errno::from)
    }

    pub(crate) fn tinject(&self, dest: FiAddr, tag: u64, data: &[u8]) -> FiResult<()> {
        match self {
            RustEp::Psm(ep) => MessageEndpoint::tinject(ep, dest, tag, data),
            RustEp::Mrail(ep) => ep.tinject(dest, tag, data),
        }
        .map_err(Errno::from)
    }

    pub(crate) fn inject_size(&self) -> usize {
        match self {
            RustEp::Psm(ep) => MessageEndpoint::inject_size(ep),
            RustEp::Mrail(ep) => ep.inject_size(),
        }
    }

    fn cancel(&self, p: &AnyPosted) -> FiResult<bool> {
        match (self, p) {
            (RustEp::Psm(ep), AnyPosted::Psm(p)) => ep.cancel(p),
            (RustEp::Mrail(ep), AnyPosted::Mrail(p)) => ep.cancel(p),
            (RustEp::Psm(_), AnyPosted::Multi(m)) => m.cancel(),
            _ => return Err(Errno::INVAL),
        }
        .map_err(Errno::from)
    }

    fn name(&self) -> Vec<u8> {
        match self {
            RustEp::Psm(ep) => epid_bytes(&[ep.getname()]),
            RustEp::Mrail(ep) => epid_bytes(ep.getname().rails()),
        }
    }
}

/// What `fi_ep_bind` collected before `fi_enable`.
#[derive(Default)]
struct Binds {
    av: Option<usize>,
    eq: Option<usize>,
    cqs: Vec<(usize, CqBind)>,
    cntrs: Vec<(usize, CounterBind)>,
}

enum State {
    Binding(Binds),
    Enabled(RustEp, Binds),
    Closed,
}

/// A C endpoint.
#[repr(C)]
pub(crate) struct EpObj {
    pub(crate) fid: sys::fid_ep,
    domain: *const DomainObj,
    info: Info,
    state: Mutex<State>,
    /// Posted receives by context, for `fi_cancel` (a context reused by a
    /// later receive replaces the older entry).
    posted: Mutex<HashMap<u64, AnyPosted>>,
    /// `tx_attr.op_flags` / `rx_attr.op_flags` (`FI_GETOPSFLAG`, `FI_SETOPSFLAG`).
    op_flags: Mutex<(u64, u64)>,
    min_multi_recv: Mutex<usize>,
    /// Messages claimed by `FI_PEEK | FI_CLAIM`, by context (`peek.rs`).
    pub(crate) claimed: Mutex<HashMap<u64, crate::peek::AnyClaimed>>,
    /// The driver of RMA and atomics, made at the first (`drive.rs`).
    driver: Mutex<Option<(Arc<Driver>, SourceId)>>,
    /// The endpoint this one is an alias of (`FI_ALIAS`), null for an
    /// endpoint of its own.
    parent: *const EpObj,
    /// Open aliases of this endpoint.
    aliases: Children,
    /// Whether a triggered operation was deferred on it (`trigger.rs`):
    /// its close then runs a progress round, which cancels those still
    /// waiting.
    pub(crate) triggered: AtomicBool,
}

// SAFETY: the domain pointer and the bound objects' addresses are kept
// blocks (never freed); only their atomic counters and locked state are
// touched through them.
unsafe impl Send for EpObj {}
// SAFETY: as above.
unsafe impl Sync for EpObj {}

impl EpObj {
    /// The endpoint that holds the state: the parent of an alias, else
    /// this one.
    pub(crate) fn base(&self) -> &EpObj {
        // SAFETY: a parent is a kept block (never freed) of an `EpObj`.
        unsafe { self.parent.as_ref() }.unwrap_or(self)
    }

    /// The address of the endpoint's domain block (a counter given to a
    /// triggered operation must be of the same domain).
    pub(crate) fn domain_addr(&self) -> usize {
        self.base().domain as usize
    }

    /// The psmrail domain of the endpoint's domain.
    pub(crate) fn domain_rust(&self) -> FiResult<RustDomain> {
        // SAFETY: the domain block is kept for the process.
        unsafe { &*self.base().domain }.rust()
    }

    /// `-FI_EINVAL` for a closed alias (its kept block still leads to the
    /// parent).
    fn check_alias(&self) -> FiResult<()> {
        if !self.parent.is_null() && !obj::is_live(self as *const EpObj as usize, sys::FI_CLASS_EP)
        {
            return Err(Errno::INVAL);
        }
        Ok(())
    }

    /// The enabled psmrail endpoint: `-FI_EOPBADSTATE` before `fi_enable`,
    /// `-FI_EINVAL` after close.
    pub(crate) fn rust(&self) -> FiResult<RustEp> {
        self.check_alias()?;
        match &*obj::lock(&self.base().state) {
            State::Enabled(ep, _) => Ok(ep.clone()),
            State::Binding(_) => Err(Errno::OPBADSTATE),
            State::Closed => Err(Errno::INVAL),
        }
    }

    /// Records a posted receive for `fi_cancel`.
    pub(crate) fn remember(&self, ctx: u64, p: AnyPosted) {
        if ctx != 0 {
            obj::lock(&self.base().posted).insert(ctx, p);
        }
    }

    pub(crate) fn tx_op_flags(&self) -> u64 {
        obj::lock(&self.op_flags).0
    }

    /// `rx_attr.op_flags` (`FI_MULTI_RECV` makes `fi_recv` a multi-receive).
    pub(crate) fn rx_op_flags(&self) -> u64 {
        obj::lock(&self.op_flags).1
    }

    /// The endpoint's capabilities (`FI_DIRECTED_RECV` honours sources).
    pub(crate) fn caps(&self) -> Caps {
        self.base().info.caps
    }

    /// The enabled endpoint, its driver of RMA and atomics (`drive.rs`),
    /// and whether its transmit CQ reports only operations asking for a
    /// completion (`FI_SELECTIVE_COMPLETION`).
    pub(crate) fn driven(&self) -> FiResult<(RustEp, Arc<Driver>, bool)> {
        let base = self.base();
        if !std::ptr::eq(base, self) {
            self.check_alias()?;
            return base.driven();
        }
        let (ep, tx) = match &*obj::lock(&self.state) {
            State::Enabled(ep, binds) => (
                ep.clone(),
                binds
                    .cqs
                    .iter()
                    .find(|(_, f)| f.contains(CqBind::TRANSMIT))
                    .copied(),
            ),
            State::Binding(_) => return Err(Errno::OPBADSTATE),
            State::Closed => return Err(Errno::INVAL),
        };
        let selective = tx.is_some_and(|(_, f)| f.contains(CqBind::SELECTIVE_COMPLETION));
        let mut g = obj::lock(&self.driver);
        if let Some((d, _)) = &*g {
            return Ok((ep, d.clone(), selective));
        }
        let cq = match tx {
            Some((c, _)) => Some(live::<CqObj>(c, sys::FI_CLASS_CQ)?.rust()?),
            None => None,
        };
        // SAFETY: the domain block is kept for the process.
        let reactor = match unsafe { &*self.domain }.rust()? {
            RustDomain::Psm(d) => d.reactor().clone(),
            RustDomain::Mrail(d) => d.reactor().clone(),
        };
        let (d, id) = Driver::start(&reactor, cq)?;
        *g = Some((d.clone(), id));
        Ok((ep, d, selective))
    }
}

static EP_FI_OPS: FiOps = FiOps::new(fi_ops(close, Some(bind), Some(control)));
static EP_OPS: Table<sys::fi_ops_ep> = Table::new(sys::fi_ops_ep {
    size: std::mem::size_of::<sys::fi_ops_ep>(),
    cancel: Some(cancel),
    getopt: Some(getopt),
    setopt: Some(setopt),
    tx_ctx: Some(tx_ctx),
    rx_ctx: Some(rx_ctx),
    rx_size_left: Some(rx_size_left),
    tx_size_left: Some(tx_size_left),
});
static CM_OPS: Table<sys::fi_ops_cm> = Table::new(sys::fi_ops_cm {
    size: std::mem::size_of::<sys::fi_ops_cm>(),
    setname: Some(setname),
    getname: Some(getname),
    getpeer: Some(getpeer),
    connect: Some(connect),
    listen: Some(listen),
    accept: Some(accept),
    reject: Some(reject),
    shutdown: Some(shutdown),
    join: Some(join),
});

pub(crate) unsafe extern "C" fn open(
    domain: *mut sys::fid_domain,
    info: *mut sys::fi_info,
    ep: *mut *mut sys::fid_ep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the same contract with no flags.
    unsafe { open2(domain, info, ep, 0, context) }
}

pub(crate) unsafe extern "C" fn open2(
    domain: *mut sys::fid_domain,
    info: *mut sys::fi_info,
    ep: *mut *mut sys::fid_ep,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    guard("fi_endpoint", || {
        // SAFETY: DomainObj is the block type of FI_CLASS_DOMAIN.
        let d: &DomainObj = unsafe { obj::cast(domain.cast(), sys::FI_CLASS_DOMAIN)? };
        if info.is_null() || ep.is_null() {
            return Err(Errno::INVAL);
        }
        if flags != 0 {
            return Err(Errno::BADFLAGS);
        }
        d.rust()?;
        // SAFETY: a valid info (the fi_endpoint contract).
        let c = unsafe { &*info };
        // SAFETY: as above.
        let rinfo = unsafe { crate::info::rust_info(d.which, c)? };
        // SAFETY: attribute pointers of a valid info are null or valid.
        let tx_flags = unsafe { c.tx_attr.as_ref() }.map_or(0, |t| t.op_flags);
        // SAFETY: as above.
        let rx_flags = unsafe { c.rx_attr.as_ref() }.map_or(0, |r| r.op_flags);
        d.children.add();
        let o = obj::make(
            EpObj {
                fid: sys::fid_ep {
                    fid: obj::fid_header(sys::FI_CLASS_EP, context, &EP_FI_OPS),
                    ops: EP_OPS.ptr(),
                    cm: CM_OPS.ptr(),
                    msg: crate::msg::MSG_OPS.ptr(),
                    rma: crate::rma::RMA_OPS.ptr(),
                    tagged: crate::tagged::TAGGED_OPS.ptr(),
                    atomic: crate::atomic::ATOMIC_OPS.ptr(),
                    collective: std::ptr::null_mut(),
                },
                domain: d,
                info: rinfo,
                state: Mutex::new(State::Binding(Binds::default())),
                posted: Mutex::new(HashMap::new()),
                op_flags: Mutex::new((tx_flags, rx_flags)),
                min_multi_recv: Mutex::new(0),
                claimed: Mutex::new(HashMap::new()),
                driver: Mutex::new(None),
                parent: std::ptr::null(),
                aliases: Children::default(),
                triggered: AtomicBool::new(false),
            },
            sys::FI_CLASS_EP,
        );
        // SAFETY: checked non-null.
        unsafe { *ep = o.cast() };
        Ok(0)
    })
}

const CQ_BIND: u64 = (sys::FI_TRANSMIT | sys::FI_RECV) as u64 | sys::FI_SELECTIVE_COMPLETION;
const CNTR_BIND: u64 = (sys::FI_SEND
    | sys::FI_RECV
    | sys::FI_READ
    | sys::FI_WRITE
    | sys::FI_REMOTE_READ
    | sys::FI_REMOTE_WRITE) as u64;

unsafe extern "C" fn bind(fid: *mut sys::fid, bfid: *mut sys::fid, flags: u64) -> c_int {
    guard("fi_ep_bind", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::cast(fid, sys::FI_CLASS_EP)? };
        if bfid.is_null() || !e.parent.is_null() {
            // An alias binds nothing: its parent's bindings are its own.
            return Err(Errno::INVAL);
        }
        let class = obj::class_of(bfid as usize).ok_or(Errno::INVAL)?;
        let mut g = obj::lock(&e.state);
        let binds = match &mut *g {
            State::Binding(b) => b,
            State::Enabled(..) => return Err(Errno::OPBADSTATE),
            State::Closed => return Err(Errno::INVAL),
        };
        let addr = bfid as usize;
        match class {
            sys::FI_CLASS_AV => {
                if flags != 0 {
                    return Err(Errno::BADFLAGS);
                }
                if binds.av.is_some() {
                    return Err(Errno::INVAL);
                }
                binds.av = Some(addr);
            }
            sys::FI_CLASS_EQ => {
                if flags != 0 {
                    return Err(Errno::BADFLAGS);
                }
                binds.eq = Some(addr);
            }
            sys::FI_CLASS_CQ => {
                if flags & !CQ_BIND != 0 {
                    return Err(Errno::BADFLAGS);
                }
                if flags & (sys::FI_TRANSMIT | sys::FI_RECV) as u64 == 0 {
                    return Err(Errno::INVAL);
                }
                binds.cqs.push((addr, CqBind::from_bits_truncate(flags)));
            }
            sys::FI_CLASS_CNTR => {
                if flags & !CNTR_BIND != 0 {
                    return Err(Errno::BADFLAGS);
                }
                binds
                    .cntrs
                    .push((addr, CounterBind::from_bits_truncate(flags)));
            }
            sys::FI_CLASS_MR => return Err(Errno::NOSYS),
            _ => return Err(Errno::INVAL),
        }
        Ok(0)
    })
}

/// The psmrail object behind a bound fid that is still open.
fn live<T>(addr: usize, class: u32) -> FiResult<&'static T> {
    // SAFETY: the bound objects' block types match their classes.
    unsafe { obj::cast::<T>(addr as *const sys::fid, class) }
}

fn enable(e: &EpObj) -> FiResult<()> {
    let mut g = obj::lock(&e.state);
    let binds = match std::mem::replace(&mut *g, State::Closed) {
        State::Binding(b) => b,
        other => {
            let enabled = matches!(other, State::Enabled(..));
            *g = other;
            return if enabled { Ok(()) } else { Err(Errno::INVAL) };
        }
    };
    let built = build(e, &binds);
    match built {
        Ok(ep) => {
            // The bound objects may not close while the endpoint uses them.
            if let Some(av) = binds.av {
                if let Ok(a) = live::<AvObj>(av, sys::FI_CLASS_AV) {
                    a.children.add();
                }
            }
            for (cq, _) in &binds.cqs {
                if let Ok(c) = live::<CqObj>(*cq, sys::FI_CLASS_CQ) {
                    c.children.add();
                }
            }
            for (cn, _) in &binds.cntrs {
                if let Ok(c) = live::<CntrObj>(*cn, sys::FI_CLASS_CNTR) {
                    c.children.add();
                }
            }
            *g = State::Enabled(ep, binds);
            Ok(())
        }
        Err(err) => {
            *g = State::Binding(binds);
            Err(err)
        }
    }
}

fn build(e: &EpObj, b: &Binds) -> FiResult<RustEp> {
    // SAFETY: the domain block is kept for the process.
    let d = unsafe { &*e.domain };
    let av = match b.av {
        Some(a) => Some(live::<AvObj>(a, sys::FI_CLASS_AV)?.rust()?),
        None => None,
    };
    let mut cqs = Vec::new();
    for (c, flags) in &b.cqs {
        cqs.push((live::<CqObj>(*c, sys::FI_CLASS_CQ)?.rust()?, *flags));
    }
    let mut cntrs = Vec::new();
    for (c, flags) in &b.cntrs {
        cntrs.push((live::<CntrObj>(*c, sys::FI_CLASS_CNTR)?.rust()?, *flags));
    }
    let min_multi_recv = *obj::lock(&e.min_multi_recv);
    match d.rust()? {
        RustDomain::Psm(dom) => {
            let mut builder = dom.endpoint(&e.info);
            match av {
                Some(RustAv::Psm(av)) => builder = builder.bind_av(&av),
                Some(RustAv::Mrail(_)) => return Err(Errno::INVAL),
                None => {}
            }
            for (cq, flags) in &cqs {
                builder = builder.bind_cq(cq, *flags);
            }
            for (c, flags) in &cntrs {
                builder = builder.bind_counter(c, *flags);
            }
            let ep = builder.enable().map_err(Errno::from)?;
            if min_multi_recv > 0 {
                ep.setopt_min_multi_recv(min_multi_recv)
                    .map_err(Errno::from)?;
            }
            Ok(RustEp::Psm(ep))
        }
        RustDomain::Mrail(dom) => {
            let mut builder = dom.endpoint(&e.info);
            match av {
                Some(RustAv::Mrail(av)) => builder = builder.bind_av(&av),
                Some(RustAv::Psm(_)) => return Err(Errno::INVAL),
                None => {}
            }
            for (cq, flags) in &cqs {
                builder = builder.bind_cq(cq, *flags);
            }
            for (c, flags) in &cntrs {
                builder = builder.bind_counter(c, *flags);
            }
            Ok(RustEp::Mrail(builder.enable().map_err(Errno::from)?))
        }
    }
}

unsafe extern "C" fn control(fid: *mut sys::fid, command: c_int, arg: *mut c_void) -> c_int {
    guard("fi_control(ep)", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::cast(fid, sys::FI_CLASS_EP)? };
        match command as u32 {
            sys::FI_ENABLE => enable(e.base()).map(|()| 0),
            // SAFETY: FI_ALIAS takes a `struct fi_alias` (null refused).
            sys::FI_ALIAS => unsafe { alias(e, arg.cast()) }.map(|()| 0),
            sys::FI_GETOPSFLAG | sys::FI_SETOPSFLAG => {
                let p = arg.cast::<u64>();
                if p.is_null() {
                    return Err(Errno::INVAL);
                }
                // SAFETY: FI_*OPSFLAG take a u64 in and out.
                let v = unsafe { *p };
                let mut g = obj::lock(&e.op_flags);
                let slot = if v & sys::FI_RECV as u64 != 0 {
                    &mut g.1
                } else if v & sys::FI_TRANSMIT as u64 != 0 {
                    &mut g.0
                } else {
                    return Err(Errno::INVAL);
                };
                let dir = (sys::FI_TRANSMIT | sys::FI_RECV) as u64;
                if command as u32 == sys::FI_GETOPSFLAG {
                    // SAFETY: as above.
                    unsafe { *p = *slot | (v & dir) };
                } else {
                    *slot = v & !dir;
                }
                Ok(0)
            }
            _ => Err(Errno::NOSYS),
        }
    })
}

/// `FI_ALIAS`: a new fid over `e`'s endpoint whose transmit or receive op
/// flags (the one `FI_TRANSMIT` or `FI_RECV` in `fi_alias.flags` names)
/// are the rest of those flags; the other side's are `e`'s.
///
/// # Safety
/// `arg` is null or a valid `struct fi_alias` whose `fid` is null or
/// writable.
unsafe fn alias(e: &EpObj, arg: *mut sys::fi_alias) -> FiResult<()> {
    // SAFETY: the caller's promise.
    let a = unsafe { arg.as_ref() }.ok_or(Errno::INVAL)?;
    if a.fid.is_null() {
        return Err(Errno::INVAL);
    }
    let (tx, rx) = ((sys::FI_TRANSMIT as u64), (sys::FI_RECV as u64));
    let dir = a.flags & (tx | rx);
    if dir != tx && dir != rx {
        // fi_endpoint(3): one of the two, not both.
        return Err(Errno::INVAL);
    }
    let base = e.base();
    if matches!(&*obj::lock(&base.state), State::Closed) {
        return Err(Errno::INVAL);
    }
    let (mut txf, mut rxf) = *obj::lock(&e.op_flags);
    if dir == tx {
        txf = a.flags & !dir;
    } else {
        rxf = a.flags & !dir;
    }
    base.aliases.add();
    let o = obj::make(
        EpObj {
            fid: sys::fid_ep {
                fid: obj::fid_header(sys::FI_CLASS_EP, base.fid.fid.context, &EP_FI_OPS),
                ..base.fid
            },
            domain: base.domain,
            info: base.info.clone(),
            state: Mutex::new(State::Closed),
            posted: Mutex::new(HashMap::new()),
            op_flags: Mutex::new((txf, rxf)),
            min_multi_recv: Mutex::new(0),
            claimed: Mutex::new(HashMap::new()),
            driver: Mutex::new(None),
            parent: base,
            aliases: Children::default(),
            triggered: AtomicBool::new(false),
        },
        sys::FI_CLASS_EP,
    );
    // SAFETY: checked non-null; writable by the contract.
    unsafe { *a.fid = o.cast() };
    Ok(())
}

unsafe extern "C" fn close(fid: *mut sys::fid) -> c_int {
    guard("fi_close(ep)", || {
        crate::entry::without_sigpipe(|| {
            // SAFETY: EpObj is the block type of FI_CLASS_EP.
            let e: &EpObj = unsafe { obj::cast(fid, sys::FI_CLASS_EP)? };
            if !e.parent.is_null() {
                // An alias: only its fid goes.
                e.base().aliases.remove();
                obj::retire(fid as usize);
                return Ok(0);
            }
            if e.aliases.any() {
                // fi_endpoint(3): every alias closes before its endpoint.
                return Err(Errno::BUSY);
            }
            let old = std::mem::replace(&mut *obj::lock(&e.state), State::Closed);
            obj::lock(&e.posted).clear();
            obj::lock(&e.claimed).clear();
            // Operations in flight run on; their completions are not reported.
            if let Some((d, id)) = obj::lock(&e.driver).take() {
                d.stop(id);
            }
            let r = match old {
                State::Enabled(ep, binds) => {
                    let r = match ep {
                        RustEp::Psm(ep) => ep.close(),
                        RustEp::Mrail(ep) => ep.close(),
                    };
                    if e.triggered.load(Ordering::Acquire) {
                        crate::trigger::cancel_waiting(e);
                    }
                    if let Some(av) = binds.av {
                        if let Ok(a) = live::<AvObj>(av, sys::FI_CLASS_AV) {
                            a.children.remove();
                        }
                    }
                    for (cq, _) in &binds.cqs {
                        if let Ok(c) = live::<CqObj>(*cq, sys::FI_CLASS_CQ) {
                            c.children.remove();
                        }
                    }
                    for (cn, _) in &binds.cntrs {
                        if let Ok(c) = live::<CntrObj>(*cn, sys::FI_CLASS_CNTR) {
                            c.children.remove();
                        }
                    }
                    // The endpoint is closed whatever the name server
                    // said (its entry may outlive it, for a server that
                    // has itself gone): fi_close succeeds, as in C, and the
                    // reason is logged.
                    if let Err(e) = r {
                        crate::entry::log_info(&format!("fi_close(ep): {e}"));
                    }
                    Ok(())
                }
                State::Binding(_) => Ok(()),
                State::Closed => return Err(Errno::INVAL),
            };
            // SAFETY: the domain block is kept for the process.
            unsafe { (*e.domain).children.remove() };
            obj::retire(fid as usize);
            r.map(|()| 0)
        })
    })
}

unsafe extern "C" fn cancel(fid: *mut sys::fid, context: *mut c_void) -> isize {
    guard("fi_cancel", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::cast::<EpObj>(fid, sys::FI_CLASS_EP)? }.base();
        let ep = e.rust()?;
        let Some(p) = obj::lock(&e.posted).remove(&(context as u64)) else {
            return Err(Errno::NOENT);
        };
        if ep.cancel(&p)? {
            Ok(0)
        } else {
            Err(Errno::NOENT)
        }
    })
}

unsafe extern "C" fn getopt(
    fid: *mut sys::fid,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut usize,
) -> c_int {
    guard("fi_getopt", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::cast::<EpObj>(fid, sys::FI_CLASS_EP)? }.base();
        if level as u32 != sys::FI_OPT_ENDPOINT {
            return Err(Errno(sys::FI_ENOPROTOOPT));
        }
        if optname as u32 != sys::FI_OPT_MIN_MULTI_RECV {
            return Err(Errno(sys::FI_ENOPROTOOPT));
        }
        if optval.is_null() || optlen.is_null() {
            return Err(Errno::INVAL);
        }
        // SAFETY: checked non-null; the contract makes both writable.
        if unsafe { *optlen } < std::mem::size_of::<usize>() {
            return Err(Errno::TOOSMALL);
        }
        let v = match e.rust() {
            Ok(RustEp::Psm(ep)) => ep.min_multi_recv(),
            _ => *obj::lock(&e.min_multi_recv),
        };
        // SAFETY: as above; the value is a size_t.
        unsafe {
            optval.cast::<usize>().write_unaligned(v);
            *optlen = std::mem::size_of::<usize>();
        }
        Ok(0)
    })
}

unsafe extern "C" fn setopt(
    fid: *mut sys::fid,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: usize,
) -> c_int {
    guard("fi_setopt", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::cast::<EpObj>(fid, sys::FI_CLASS_EP)? }.base();
        if level as u32 != sys::FI_OPT_ENDPOINT {
            return Err(Errno(sys::FI_ENOPROTOOPT));
        }
        if optname as u32 != sys::FI_OPT_MIN_MULTI_RECV {
            return Err(Errno(sys::FI_ENOPROTOOPT));
        }
        if optval.is_null() || optlen != std::mem::size_of::<usize>() {
            return Err(Errno::INVAL);
        }
        // SAFETY: checked non-null and sized: a size_t.
        let v = unsafe { optval.cast::<usize>().read_unaligned() };
        if let Ok(RustEp::Psm(ep)) = e.rust() {
            ep.setopt_min_multi_recv(v).map_err(Errno::from)?;
        }
        *obj::lock(&e.min_multi_recv) = v;
        Ok(0)
    })
}

unsafe extern "C" fn tx_ctx(
    _: *mut sys::fid_ep,
    _: c_int,
    _: *mut sys::fi_tx_attr,
    _: *mut *mut sys::fid_ep,
    _: *mut c_void,
) -> c_int {
    Errno::NOSYS.ret()
}

unsafe extern "C" fn rx_ctx(
    _: *mut sys::fid_ep,
    _: c_int,
    _: *mut sys::fi_rx_attr,
    _: *mut *mut sys::fid_ep,
    _: *mut c_void,
) -> c_int {
    Errno::NOSYS.ret()
}

unsafe extern "C" fn rx_size_left(ep: *mut sys::fid_ep) -> isize {
    guard("fi_rx_size_left", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block::<EpObj, _>(ep)? }.base();
        e.rust()?;
        Ok(e.info.rx_attr.size as isize)
    })
}

unsafe extern "C" fn tx_size_left(ep: *mut sys::fid_ep) -> isize {
    guard("fi_tx_size_left", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::block::<EpObj, _>(ep)? }.base();
        e.rust()?;
        Ok(e.info.tx_attr.size as isize)
    })
}

unsafe extern "C" fn setname(_: *mut sys::fid, _: *mut c_void, _: usize) -> c_int {
    // An endpoint's address is the engine's (psm cannot choose one).
    Errno::NOSYS.ret()
}

unsafe extern "C" fn getname(fid: *mut sys::fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard("fi_getname", || {
        // SAFETY: EpObj is the block type of FI_CLASS_EP.
        let e: &EpObj = unsafe { obj::cast::<EpObj>(fid, sys::FI_CLASS_EP)? }.base();
        if addrlen.is_null() {
            return Err(Errno::INVAL);
        }
        let name = match e.rust() {
            Ok(ep) => ep.name(),
            Err(Errno::OPBADSTATE) => {
                // SAFETY: the domain block is kept for the process.
                match unsafe { &*e.domain }.rust()? {
                    RustDomain::Psm(d) => epid_bytes(&[d.epid()]),
                    RustDomain::Mrail(d) => epid_bytes(
                        &(0..d.rails())
                            .filter_map(|i| d.rail(i).map(|r| r.epid()))
                            .collect::<Vec<_>>(),
                    ),
                }
            }
            Err(other) => return Err(other),
        };
        // SAFETY: checked non-null; read-write by the contract.
        let room = unsafe { *addrlen };
        // SAFETY: as above.
        unsafe { *addrlen = name.len() };
        if room < name.len() {
            return Err(Errno::TOOSMALL);
        }
        if addr.is_null() {
            return Err(Errno::INVAL);
        }
        // SAFETY: `addr` holds `room` >= name.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), addr.cast(), name.len()) };
        Ok(0)
    })
}

unsafe extern "C" fn getpeer(_: *mut sys::fid_ep, _: *mut c_void, _: *mut usize) -> c_int {
    Errno::NOSYS.ret()
}

unsafe extern "C" fn connect(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: *const c_void,
    _: usize,
) -> c_int {
    Errno::NOSYS.ret()
}

unsafe extern "C" fn listen(_: *mut sys::fid_pep) -> c_int {
    Errno::NOSYS.ret()
}

unsafe extern "C" fn accept(_: *mut sys::fid_ep, _: *const c_void, _: usize) -> c_int {
    Errno::NOSYS.ret()
}

unsafe extern "C" fn reject(
    _: *mut sys::fid_pep,
    _: *mut sys::fid,
    _: *const c_void,
    _: usize,
) -> c_int {
    Errno::NOSYS.ret()
}

unsafe extern "C" fn shutdown(_: *mut sys::fid_ep, _: u64) -> c_int {
    Errno::NOSYS.ret()
}

unsafe extern "C" fn join(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: u64,
    _: *mut *mut sys::fid_mc,
    _: *mut c_void,
) -> c_int {
    Errno::NOSYS.ret()
}
