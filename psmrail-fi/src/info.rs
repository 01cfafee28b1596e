//! Discovery across the boundary: C `fi_info` hints become psmrail
//! [`Hints`] and a [`GetInfo`] request, and the [`Info`] answers become
//! C `fi_info` lists that libfabric's `fi_freeinfo` frees (every piece is
//! allocated with the C allocator, through `fi_dupinfo` and `strdup`).
//!
//! The way back, [`rust_info`], rebuilds the psmrail `Info` an object
//! opens from the C `fi_info` the application hands to `fi_domain` or
//! `fi_endpoint` (which may be a copy of ours, changed): the same
//! discovery runs again on it as hints, and the source it carries comes
//! back from its `src_addr`.
//!
//! Addresses are `FI_ADDR_PSMX`: the 8-byte endpoint id for psm, the
//! rails' ids in rail order for `ofi_mrail`. An info answered with
//! `FI_SOURCE` carries the unit, port and service asked for in a
//! [`SourceRecord`] as its `src_addr`, as C's psm provider carries its
//! source name.

use crate::entry::{Errno, FiResult};
use crate::provider::{Which, PROVIDER_VERSION};
use crate::sys;
use psmrail::engine::Epid;
use psmrail::fabric::{
    AvType, Caps, EpType, GetInfo, Hints, Info, Mode, MsgOrder, ProgressKind, Provider, Service,
    SourceName, Threading,
};
use std::ffi::{c_char, c_void, CString};
use std::ptr;
use std::time::Duration;

/// The `src_addr` of an info answered with `FI_SOURCE`: what the endpoint
/// will bind to and register with the name server.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SourceRecord {
    magic: u64,
    unit: i32,
    port: i32,
    service: u32,
    /// 1 when the record came from `FI_SOURCE` (0: any source).
    reserved: u32,
}

impl SourceRecord {
    const MAGIC: u64 = u64::from_le_bytes(*b"psmr-src");
}

/// `strdup` of `s` (C memory, freed by `fi_freeinfo`).
pub(crate) fn c_strdup(s: &str) -> FiResult<*mut c_char> {
    let c = CString::new(s).map_err(|_| Errno::INVAL)?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let p = unsafe { libc::strdup(c.as_ptr()) };
    if p.is_null() {
        return Err(Errno::NOMEM);
    }
    Ok(p)
}

/// `bytes` copied into `malloc`ed memory.
fn c_bytes(bytes: &[u8]) -> FiResult<*mut c_void> {
    // SAFETY: malloc of a non-zero size; checked below.
    let p = unsafe { libc::malloc(bytes.len().max(1)) };
    if p.is_null() {
        return Err(Errno::NOMEM);
    }
    // SAFETY: `p` holds at least `bytes.len()` bytes and does not overlap.
    unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast::<u8>(), bytes.len()) };
    Ok(p)
}

/// The bytes of an endpoint-id address (8 bytes per id, native order).
pub(crate) fn epid_bytes(ids: &[Epid]) -> Vec<u8> {
    ids.iter().flat_map(|e| e.0.to_ne_bytes()).collect()
}

/// Endpoint ids out of address bytes (a multiple of 8 bytes).
pub(crate) fn epids_of(bytes: &[u8]) -> Option<Vec<Epid>> {
    if bytes.is_empty() || bytes.len() % 8 != 0 {
        return None;
    }
    Some(
        bytes
            .chunks_exact(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                Epid(u64::from_ne_bytes(b))
            })
            .collect(),
    )
}

/// `len` bytes at `p`, or `None` for null / zero.
///
/// # Safety
/// `p` is null or valid for reads of `len` bytes.
unsafe fn bytes_at<'a>(p: *const c_void, len: usize) -> Option<&'a [u8]> {
    if p.is_null() || len == 0 {
        return None;
    }
    // SAFETY: the caller's promise.
    Some(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// What a C info says beyond what [`Hints`] carry.
#[derive(Debug, Default)]
pub(crate) struct Extra {
    src: Option<Vec<u8>>,
    dest: Option<Vec<u8>>,
    /// The hints asked for the legacy `FI_MR_SCALABLE` mode by name.
    mr_scalable: bool,
    /// The hints asked for automatic control progress.
    ctrl_auto: bool,
    /// The hints' `tx_attr.op_flags` and `rx_attr.op_flags`, which the
    /// answers carry (as libfabric's utility providers do): an endpoint
    /// opened with such an info uses them as its default flags
    /// (`FI_MULTI_RECV` for `fi_recv`).
    op_flags: (u64, u64),
    /// The hints' `mr_mode` lacks `FI_MR_RAW`, which ofi_mrail's RMA needs
    /// (fi_mrail(7)).
    no_raw: bool,
    /// The remote CQ data size the hints ask for.
    cq_data_size: usize,
}

fn ep_type_of(t: sys::fi_ep_type) -> FiResult<EpType> {
    Ok(match t {
        sys::FI_EP_UNSPEC => EpType::Unspec,
        sys::FI_EP_RDM => EpType::Rdm,
        sys::FI_EP_DGRAM => EpType::Dgram,
        sys::FI_EP_MSG => EpType::Msg,
        _ => return Err(Errno::NODATA),
    })
}

fn progress_of(p: sys::fi_progress) -> FiResult<ProgressKind> {
    Ok(match p {
        sys::FI_PROGRESS_UNSPEC => ProgressKind::Unspec,
        sys::FI_PROGRESS_MANUAL => ProgressKind::Manual,
        sys::FI_PROGRESS_AUTO => ProgressKind::Auto,
        _ => return Err(Errno::NODATA),
    })
}

fn threading_of(t: sys::fi_threading) -> FiResult<Threading> {
    Ok(match t {
        sys::FI_THREAD_UNSPEC => Threading::Unspec,
        sys::FI_THREAD_SAFE => Threading::Safe,
        sys::FI_THREAD_FID => Threading::Fid,
        sys::FI_THREAD_DOMAIN => Threading::Domain,
        sys::FI_THREAD_COMPLETION => Threading::Completion,
        sys::FI_THREAD_ENDPOINT => Threading::Endpoint,
        _ => return Err(Errno::NODATA),
    })
}

fn av_type_of(t: sys::fi_av_type) -> FiResult<AvType> {
    Ok(match t {
        sys::FI_AV_UNSPEC => AvType::Unspec,
        sys::FI_AV_MAP => AvType::Map,
        sys::FI_AV_TABLE => AvType::Table,
        _ => return Err(Errno::NODATA),
    })
}

/// The name a provider name in hints must match. A core provider (psm)
/// is named first, followed by what a utility provider layered over it
/// adds: its own name, or `^name` for one that must not be layered again
/// (`psm;^ofi_rxd` is how ofi_rxd asks for its core infos). The
/// multi-rail utility provider is the last of a layered `core;ofi_mrail`.
fn prov_name_matches(which: Which, name: &str) -> bool {
    let ours = which.name().to_str().unwrap_or_default();
    let mut names = name.split(';').filter(|n| !n.starts_with('^'));
    match which {
        Which::Psm => {
            names.next().is_some_and(|n| n.eq_ignore_ascii_case(ours)) && names.next().is_none()
        }
        Which::Mrail => names
            .next_back()
            .is_some_and(|n| n.eq_ignore_ascii_case(ours)),
    }
}

/// How long a manual-progress domain of the C face may go without a
/// progress round before its idle assist runs one
/// ([`Hints::idle_assist`]): libfabric programs block outside the library
/// (fabtests on their control socket) while a peer's first message to
/// them connects, and a connect is answered from this process's progress.
const IDLE_ASSIST: Duration = Duration::from_millis(5);

/// Hints out of a C info.
///
/// # Safety
/// `c` is a valid `fi_info` whose attribute pointers are null or valid.
pub(crate) unsafe fn hints_from_c(which: Which, c: &sys::fi_info) -> FiResult<(Hints, Extra)> {
    let caps = Caps::from_bits_retain(c.caps);
    if !c_face_caps(which).contains(caps) {
        return Err(Errno::NODATA);
    }
    let mut h = Hints::new().caps(caps).idle_assist(IDLE_ASSIST);
    let mut extra = Extra::default();
    if which == Which::Mrail {
        h = h.provider(Provider::Mrail);
    }
    if c.mode != 0 {
        h = h.mode(Mode::from_bits_retain(c.mode));
    }
    match c.addr_format {
        sys::FI_FORMAT_UNSPEC | sys::FI_ADDR_PSMX => {}
        _ => return Err(Errno::NODATA),
    }
    // SAFETY: the caller's promise for addresses and attributes.
    unsafe {
        extra.src = bytes_at(c.src_addr, c.src_addrlen).map(<[u8]>::to_vec);
        extra.dest = bytes_at(c.dest_addr, c.dest_addrlen).map(<[u8]>::to_vec);
        if let Some(ep) = c.ep_attr.as_ref() {
            h = h.ep_type(ep_type_of(ep.type_)?);
            if ep.mem_tag_format != 0 {
                h = h.mem_tag_format(ep.mem_tag_format);
            }
            if ep.max_msg_size != 0 {
                h = h.max_msg_size(ep.max_msg_size as u64);
            }
            if ep.tx_ctx_cnt != 0 {
                h = h.tx_ctx_cnt(ep.tx_ctx_cnt);
            }
            if ep.rx_ctx_cnt != 0 {
                h = h.rx_ctx_cnt(ep.rx_ctx_cnt);
            }
        }
        extra.op_flags = (
            c.tx_attr.as_ref().map_or(0, |t| t.op_flags),
            c.rx_attr.as_ref().map_or(0, |r| r.op_flags),
        );
        if let Some(tx) = c.tx_attr.as_ref() {
            if tx.inject_size != 0 {
                h = h.inject_size(tx.inject_size);
            }
            if tx.iov_limit != 0 {
                h = h.tx_iov_limit(tx.iov_limit);
            }
            if tx.rma_iov_limit != 0 {
                h = h.rma_iov_limit(tx.rma_iov_limit);
            }
            if tx.msg_order != 0 {
                h = h.msg_order(MsgOrder::from_bits_retain(tx.msg_order));
            }
            if tx.comp_order != 0 {
                h = h.comp_order(MsgOrder::from_bits_retain(tx.comp_order));
            }
        }
        if let Some(rx) = c.rx_attr.as_ref() {
            // One ordering for both sides: what either asks must hold.
            let tx_order = c.tx_attr.as_ref().map_or(0, |t| t.msg_order);
            if rx.msg_order != 0 {
                h = h.msg_order(MsgOrder::from_bits_retain(rx.msg_order | tx_order));
            }
            if rx.iov_limit != 0 {
                h = h.rx_iov_limit(rx.iov_limit);
            }
        }
        if let Some(d) = c.domain_attr.as_ref() {
            let mut data = progress_of(d.data_progress)?;
            // Control progress rides on data progress: asking for it
            // automatic runs the progress thread (as C's psm does).
            if progress_of(d.control_progress)? == ProgressKind::Auto {
                extra.ctrl_auto = true;
                match data {
                    ProgressKind::Unspec | ProgressKind::Auto => data = ProgressKind::Auto,
                    ProgressKind::Manual => {}
                }
            }
            extra.cq_data_size = d.cq_data_size;
            if !Caps::from_bits_retain(d.caps)
                .difference(Caps::LOCAL_COMM | Caps::REMOTE_COMM)
                .is_empty()
            {
                return Err(Errno::NODATA);
            }
            h = h
                .threading(threading_of(d.threading)?)
                .progress(data)
                .av_type(av_type_of(d.av_type)?);
            // ofi_mrail's discovery checks names against its rails'
            // (psm's); its own names are the info's, not a choice.
            if let (Which::Psm, Some(name)) = (which, crate::provider::opt_str(d.name)?) {
                h = h.domain_name(name);
            }
            match d.mr_mode as u32 {
                sys::FI_MR_BASIC => return Err(Errno::NODATA),
                sys::FI_MR_SCALABLE => extra.mr_scalable = true,
                m => extra.no_raw = m & sys::FI_MR_RAW == 0,
            }
            if which == Which::Mrail && extra.no_raw && caps.intersects(RMA_CAPS) {
                return Err(Errno::NODATA);
            }
        }
        if let Some(f) = c.fabric_attr.as_ref() {
            if let (Which::Psm, Some(name)) = (which, crate::provider::opt_str(f.name)?) {
                h = h.fabric_name(name);
            }
            if let Some(name) = crate::provider::opt_str(f.prov_name)? {
                if !prov_name_matches(which, name) {
                    return Err(Errno::NODATA);
                }
            }
        }
    }
    Ok((h, extra))
}

/// Applies the addresses of a C info (or hints) to an answer.
fn apply_addrs(which: Which, info: &mut Info, extra: &Extra) {
    if let Some(src) = &extra.src {
        if let Some(rec) = source_record(src) {
            if rec.reserved != 0 {
                info.source = Some(SourceName {
                    node: String::new(),
                    unit: (rec.unit >= 0).then_some(rec.unit as u32),
                    port: (rec.port > 0).then_some(rec.port as u32),
                    service: Service::new(rec.service),
                });
            }
        } else if which == Which::Psm {
            if let Some([id]) = epids_of(src).as_deref() {
                info.src_addr = Some(*id);
            }
        }
    }
    if which == Which::Psm {
        if let Some(dest) = &extra.dest {
            if let Some([id]) = epids_of(dest).as_deref() {
                info.dest_addr = Some(*id);
            }
        }
    }
}

fn source_record(bytes: &[u8]) -> Option<SourceRecord> {
    if bytes.len() != std::mem::size_of::<SourceRecord>() {
        return None;
    }
    // SAFETY: the length is the record's; read_unaligned copies plain
    // integers, every bit pattern of which is valid.
    let rec = unsafe { ptr::read_unaligned(bytes.as_ptr().cast::<SourceRecord>()) };
    (rec.magic == SourceRecord::MAGIC).then_some(rec)
}

/// The capabilities the C face carries: messages, tagged messages, RMA,
/// atomics, multi-receive buffers, directed receives and triggered
/// operations (`trigger.rs`).
pub(crate) const C_FACE_CAPS: Caps = Caps::MSG
    .union(Caps::TAGGED)
    .union(RMA_CAPS)
    .union(Caps::ATOMIC)
    .union(Caps::SEND)
    .union(Caps::RECV)
    .union(Caps::SOURCE)
    .union(Caps::LOCAL_COMM)
    .union(Caps::REMOTE_COMM)
    .union(Caps::MULTI_RECV)
    .union(Caps::DIRECTED_RECV)
    .union(Caps::TRIGGER);

/// What the C face carries for `which`: ofi_mrail's Rust endpoint has no
/// multi-receive and no triggered operations.
pub(crate) fn c_face_caps(which: Which) -> Caps {
    match which {
        Which::Psm => C_FACE_CAPS,
        Which::Mrail => C_FACE_CAPS.difference(Caps::MULTI_RECV.union(Caps::TRIGGER)),
    }
}

/// RMA and its refinements.
const RMA_CAPS: Caps = Caps::RMA
    .union(Caps::READ)
    .union(Caps::WRITE)
    .union(Caps::REMOTE_READ)
    .union(Caps::REMOTE_WRITE)
    .union(Caps::RMA_EVENT);

/// What a `tx_attr.caps` may hold (fi_getinfo(3): the primary transmit
/// capabilities and their modifiers and secondaries).
const TX_CAPS: Caps = Caps::MSG
    .union(Caps::RMA)
    .union(Caps::TAGGED)
    .union(Caps::ATOMIC)
    .union(Caps::MULTICAST)
    .union(Caps::NAMED_RX_CTX)
    .union(Caps::HMEM)
    .union(Caps::COLLECTIVE)
    .union(Caps::SEND)
    .union(Caps::READ)
    .union(Caps::WRITE)
    .union(Caps::TRIGGER)
    .union(Caps::FENCE)
    .union(Caps::RMA_PMEM);

/// What an `rx_attr.caps` may hold.
const RX_CAPS: Caps = Caps::MSG
    .union(Caps::RMA)
    .union(Caps::TAGGED)
    .union(Caps::ATOMIC)
    .union(Caps::DIRECTED_RECV)
    .union(Caps::VARIABLE_MSG)
    .union(Caps::HMEM)
    .union(Caps::COLLECTIVE)
    .union(Caps::RECV)
    .union(Caps::REMOTE_READ)
    .union(Caps::REMOTE_WRITE)
    .union(Caps::RMA_PMEM)
    .union(Caps::SOURCE)
    .union(Caps::SOURCE_ERR)
    .union(Caps::RMA_EVENT)
    .union(Caps::MULTI_RECV)
    .union(Caps::TRIGGER);

/// Leaves out of an answer what the C face does not carry (ofi_mrail's
/// RMA for an application without `FI_MR_RAW`), and keeps each side's
/// capabilities to that side's.
fn mask_caps(which: Which, info: &mut Info, extra: &Extra) {
    info.caps &= c_face_caps(which);
    if which == Which::Mrail && extra.no_raw {
        info.caps -= RMA_CAPS;
    }
    info.tx_attr.caps &= info.caps & TX_CAPS;
    info.rx_attr.caps &= info.caps & RX_CAPS;
}

/// Runs discovery for a C `fi_getinfo` and answers the C list.
///
/// # Safety
/// `hints` is null or a valid `fi_info` (attribute pointers null or valid).
pub(crate) unsafe fn getinfo(
    which: Which,
    version: u32,
    node: Option<&str>,
    service: Option<&str>,
    flags: u64,
    hints: Option<&sys::fi_info>,
) -> FiResult<*mut sys::fi_info> {
    let (h, extra) = match hints {
        // SAFETY: the caller's promise.
        Some(c) => unsafe { hints_from_c(which, c)? },
        None => (
            match which {
                Which::Psm => Hints::new(),
                Which::Mrail => Hints::new().provider(Provider::Mrail),
            },
            Extra::default(),
        ),
    };
    let source = flags & sys::FI_SOURCE != 0 || (node.is_none() && service.is_some());
    let mut req = GetInfo::new().hints(&h);
    if which == Which::Psm {
        if let Some(n) = node {
            req = req.node(n);
        }
        if let Some(s) = service {
            req = req.service_text(s);
        }
        req = req.source(source);
    }
    let answers = req.run().map_err(Errno::from)?;
    let mut head: *mut sys::fi_info = ptr::null_mut();
    let mut tail: *mut sys::fi_info = ptr::null_mut();
    for mut info in answers {
        if info.domain_attr.cq_data_size < extra.cq_data_size {
            continue;
        }
        mask_caps(which, &mut info, &extra);
        apply_addrs(which, &mut info, &extra);
        let c = match to_c(which, version, &info, &extra) {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: a list we built from fi_dupinfo.
                unsafe { sys::fi_freeinfo(head) };
                return Err(e);
            }
        };
        if tail.is_null() {
            head = c;
        } else {
            // SAFETY: `tail` is the last info we built.
            unsafe { (*tail).next = c };
        }
        tail = c;
    }
    if head.is_null() {
        return Err(Errno::NODATA);
    }
    Ok(head)
}

/// The C info of a psmrail answer.
fn to_c(which: Which, version: u32, info: &Info, extra: &Extra) -> FiResult<*mut sys::fi_info> {
    // SAFETY: fi_dupinfo(NULL) allocates an info with every attribute.
    let c = unsafe { sys::fi_dupinfo(ptr::null()) };
    if c.is_null() {
        return Err(Errno::NOMEM);
    }
    // SAFETY: `c` came from fi_dupinfo; if filling fails it is freed.
    match unsafe { fill(which, version, info, extra, &mut *c) } {
        Ok(()) => Ok(c),
        Err(e) => {
            // SAFETY: as above.
            unsafe { sys::fi_freeinfo(c) };
            Err(e)
        }
    }
}

/// # Safety
/// `c` is a fresh info from `fi_dupinfo(NULL)` (every attribute allocated).
unsafe fn fill(
    which: Which,
    version: u32,
    info: &Info,
    extra: &Extra,
    c: &mut sys::fi_info,
) -> FiResult<()> {
    c.caps = info.caps.bits();
    c.mode = info.mode.bits();
    c.addr_format = sys::FI_ADDR_PSMX;
    if let Some(src) = info.src_addr {
        let b = epid_bytes(&[src]);
        c.src_addr = c_bytes(&b)?;
        c.src_addrlen = b.len();
    } else {
        // Without FI_SOURCE: any unit, port and service (read back as no
        // source), so that every info has a source address.
        let rec = match &info.source {
            Some(s) => SourceRecord {
                magic: SourceRecord::MAGIC,
                unit: s.unit.map_or(-1, |u| u as i32),
                port: s.port.map_or(0, |p| p as i32),
                service: s.service.get(),
                reserved: 1,
            },
            None => SourceRecord {
                magic: SourceRecord::MAGIC,
                unit: -1,
                port: 0,
                service: 0,
                reserved: 0,
            },
        };
        // SAFETY: a plain repr(C) record of integers, viewed as its bytes.
        let b = unsafe {
            std::slice::from_raw_parts(
                (&rec as *const SourceRecord).cast::<u8>(),
                std::mem::size_of::<SourceRecord>(),
            )
        };
        c.src_addr = c_bytes(b)?;
        c.src_addrlen = b.len();
    }
    if let Some(dest) = info.dest_addr {
        let b = epid_bytes(&[dest]);
        c.dest_addr = c_bytes(&b)?;
        c.dest_addrlen = b.len();
    }
    let ep_type = match info.ep_type {
        EpType::Dgram => sys::FI_EP_DGRAM,
        EpType::Msg => sys::FI_EP_MSG,
        _ => sys::FI_EP_RDM,
    };
    // SAFETY: fi_dupinfo(NULL) allocated every attribute structure.
    let (tx, rx, ep, dom, fab) = unsafe {
        (
            &mut *c.tx_attr,
            &mut *c.rx_attr,
            &mut *c.ep_attr,
            &mut *c.domain_attr,
            &mut *c.fabric_attr,
        )
    };
    tx.caps = info.tx_attr.caps.bits();
    tx.mode = info.tx_attr.mode.bits();
    tx.msg_order = info.tx_attr.msg_order.bits();
    tx.comp_order = info.tx_attr.comp_order.bits();
    tx.inject_size = info.inject_size;
    tx.size = info.tx_attr.size;
    tx.iov_limit = info.tx_attr.iov_limit;
    tx.rma_iov_limit = info.tx_attr.rma_iov_limit;
    rx.caps = info.rx_attr.caps.bits();
    rx.mode = info.rx_attr.mode.bits();
    rx.msg_order = info.rx_attr.msg_order.bits();
    rx.comp_order = info.rx_attr.comp_order.bits();
    rx.total_buffered_recv = info.rx_attr.total_buffered_recv;
    rx.size = info.rx_attr.size;
    rx.iov_limit = info.rx_attr.iov_limit;
    (tx.op_flags, rx.op_flags) = extra.op_flags;
    ep.type_ = ep_type;
    ep.protocol = match which {
        Which::Psm => sys::FI_PROTO_PSMX,
        Which::Mrail => sys::FI_PROTO_MRAIL,
    };
    ep.protocol_version = 1;
    ep.max_msg_size = info.max_msg_size as usize;
    ep.msg_prefix_size = info.ep_attr.msg_prefix_size;
    ep.max_order_raw_size = info.ep_attr.max_order_raw_size;
    ep.max_order_war_size = info.ep_attr.max_order_war_size;
    ep.max_order_waw_size = info.ep_attr.max_order_waw_size;
    ep.mem_tag_format = info.mem_tag_format;
    ep.tx_ctx_cnt = info.ep_attr.tx_ctx_cnt;
    ep.rx_ctx_cnt = info.ep_attr.rx_ctx_cnt;
    let d = &info.domain_attr;
    dom.name = c_strdup(d.name)?;
    dom.threading = match d.threading {
        Threading::Safe => sys::FI_THREAD_SAFE,
        Threading::Fid => sys::FI_THREAD_FID,
        Threading::Domain => sys::FI_THREAD_DOMAIN,
        Threading::Endpoint => sys::FI_THREAD_ENDPOINT,
        _ => sys::FI_THREAD_COMPLETION,
    };
    let progress = |p: ProgressKind| match p {
        ProgressKind::Auto => sys::FI_PROGRESS_AUTO,
        _ => sys::FI_PROGRESS_MANUAL,
    };
    dom.control_progress = if extra.ctrl_auto {
        sys::FI_PROGRESS_AUTO
    } else {
        progress(d.control_progress)
    };
    dom.data_progress = progress(info.progress);
    dom.resource_mgmt = sys::FI_RM_ENABLED;
    dom.av_type = match info.av_type {
        AvType::Table => sys::FI_AV_TABLE,
        AvType::Map => sys::FI_AV_MAP,
        AvType::Unspec => sys::FI_AV_UNSPEC,
    };
    dom.mr_mode = mr_mode(which, version, info, extra.mr_scalable) as i32;
    dom.mr_key_size = d.mr_key_size;
    // Carried by RMA writes with data (fi_psm(7): not by sends).
    dom.cq_data_size = d.cq_data_size;
    dom.cq_cnt = d.cq_cnt;
    dom.ep_cnt = d.ep_cnt;
    dom.tx_ctx_cnt = d.tx_ctx_cnt;
    dom.rx_ctx_cnt = d.rx_ctx_cnt;
    dom.max_ep_tx_ctx = d.max_ep_tx_ctx;
    dom.max_ep_rx_ctx = d.max_ep_rx_ctx;
    dom.max_ep_stx_ctx = d.max_ep_stx_ctx;
    dom.max_ep_srx_ctx = d.max_ep_srx_ctx;
    dom.cntr_cnt = d.cntr_cnt;
    dom.mr_iov_limit = d.mr_iov_limit;
    dom.caps = d.caps.bits();
    dom.mr_cnt = d.mr_cnt;
    fab.name = c_strdup(info.fabric_attr.name)?;
    // The core names the provider (and prefixes a core name for layered
    // utility providers): ours stays null.
    fab.prov_name = ptr::null_mut();
    fab.prov_version = PROVIDER_VERSION;
    fab.api_version = version;
    Ok(())
}

/// The memory-registration mode: psm needs none of the mode bits
/// (`FI_MR_SCALABLE` for callers of the 1.4 API or hints naming it);
/// ofi_mrail's keys are raw composites of its rails' (`FI_MR_RAW`) when it
/// offers RMA.
fn mr_mode(which: Which, version: u32, info: &Info, mr_scalable: bool) -> u32 {
    if version < sys::fi_version_of(1, 5) || mr_scalable {
        return sys::FI_MR_SCALABLE;
    }
    match which {
        Which::Mrail if info.caps.intersects(Caps::RMA) => sys::FI_MR_RAW,
        _ => 0,
    }
}

/// The psmrail info an object opens from a C info (see the module docs).
///
/// # Safety
/// `c` is a valid `fi_info` (attribute pointers null or valid).
pub(crate) unsafe fn rust_info(which: Which, c: &sys::fi_info) -> FiResult<Info> {
    // SAFETY: the caller's promise.
    let (h, extra) = unsafe { hints_from_c(which, c)? };
    let mut info = GetInfo::new()
        .hints(&h)
        .run()
        .map_err(Errno::from)?
        .into_iter()
        .next()
        .ok_or(Errno::NODATA)?;
    mask_caps(which, &mut info, &extra);
    apply_addrs(which, &mut info, &extra);
    Ok(info)
}

#[cfg(test)]
mod prov_name_tests {
    use super::*;

    #[test]
    fn a_core_name_with_exclusions_is_psm() {
        assert!(prov_name_matches(Which::Psm, "psm"));
        assert!(prov_name_matches(Which::Psm, "PSM"));
        assert!(prov_name_matches(Which::Psm, "psm;^ofi_rxd"));
        assert!(!prov_name_matches(Which::Psm, "psm;ofi_rxd"));
        assert!(!prov_name_matches(Which::Psm, "psm2"));
        assert!(!prov_name_matches(Which::Psm, "^psm"));
        assert!(!prov_name_matches(Which::Psm, ""));
    }

    #[test]
    fn mrail_is_the_last_layer() {
        assert!(prov_name_matches(Which::Mrail, "ofi_mrail"));
        assert!(prov_name_matches(Which::Mrail, "psm;ofi_mrail"));
        assert!(prov_name_matches(Which::Mrail, "psm;ofi_mrail;^ofi_rxd"));
        assert!(!prov_name_matches(Which::Mrail, "psm"));
        assert!(!prov_name_matches(Which::Mrail, "ofi_mrail;ofi_rxd"));
    }
}
