//! Discovery of the multi-rail provider: what `getinfo` answers when the
//! hints ask for `ofi_mrail` (by [`Provider`] or by `prov_name`).
//!
//! The answer is a psm info (the rails are psm endpoints and share its
//! configuration and engine choice) turned into the description of one
//! logical RDM endpoint over N rails, as C's `mrail_get_info` turns rail
//! 0's info into the mrail one (`prov/mrail/src/mrail_init.c`):
//!
//! * capabilities: `FI_MSG`, `FI_TAGGED` (with `FI_SEND`, `FI_RECV`,
//!   `FI_DIRECTED_RECV`, `FI_SOURCE`) and `FI_RMA` (with `FI_READ`,
//!   `FI_WRITE`, `FI_REMOTE_READ`, `FI_REMOTE_WRITE`). What fi_mrail(7)
//!   lists as unsupported — atomics, scalable endpoints, shared contexts,
//!   multicast, triggered operations — and `FI_EP_DGRAM` are `FI_ENOSYS`
//!   errors naming the feature, as is `FI_RMA_EVENT`;
//! * memory-region keys are raw: every rail's 8-byte key in rail order, so
//!   `mr_key_size` is 8 × the rails; remote CQ data is 8 bytes;
//! * the rails: `FI_OFI_MRAIL_ADDR` (or the deprecated
//!   `FI_OFI_MRAIL_ADDR_STRC`, or the hints' [`MrailConfig`]), each item
//!   resolved to an IPv4 address for the soft engine (an error names the
//!   item that does not resolve). No rails is `FI_ENODATA`, as in C. The
//!   native engine opens one PSM endpoint per process on these machines, so
//!   it serves a one-rail mrail endpoint, and more rails are an error
//!   saying so;
//! * the user tag space is the whole 64 bits (the mrail header carries the
//!   tag; the rails' own tags are the provider's), the inject size is the
//!   rails' minus the mrail header, the protocol `FI_PROTO_MRAIL`;
//! * the fixed rail of this process is `local rank mod N`.

use super::attr::{Info, INJECT_SIZE};
use super::hints::Hints;
use super::mrail_attr::{MrailAttr, Provider, RailAttr};
use crate::config::{MrailConfig, VarSource};
use crate::engine::EngineKind;
use crate::fabric::caps::{Caps, EpType, Mode};
use crate::{Error, ErrorKind, Result};

/// The capabilities an mrail endpoint offers.
pub(crate) const MRAIL_CAPS: Caps = Caps::MSG
    .union(Caps::TAGGED)
    .union(Caps::SEND)
    .union(Caps::RECV)
    .union(Caps::DIRECTED_RECV)
    .union(Caps::SOURCE)
    .union(Caps::LOCAL_COMM)
    .union(Caps::REMOTE_COMM)
    .union(MRAIL_RMA_CAPS);

/// The RMA capabilities: operations striped over the rails.
pub(crate) const MRAIL_RMA_CAPS: Caps = Caps::RMA
    .union(Caps::READ)
    .union(Caps::WRITE)
    .union(Caps::REMOTE_READ)
    .union(Caps::REMOTE_WRITE);

/// The size of the mrail header in front of an eager message; the rails'
/// inject size less this is the mrail inject size.
pub(crate) const MRAIL_EAGER_HEADER: usize = 24;

/// Most rails one mrail endpoint may have (a rail index fits the stripe
/// masks of the wire header).
pub(crate) const MAX_RAILS: usize = 16;

/// Features fi_mrail(7) does not support, each with the capability bits
/// that ask for it.
const UNSUPPORTED: [(Caps, &str); 5] = [
    (Caps::ATOMIC, "atomics (FI_ATOMIC)"),
    (
        Caps::RMA_EVENT,
        "remote RMA events and counters (FI_RMA_EVENT)",
    ),
    (Caps::MULTICAST, "multicast (FI_MULTICAST)"),
    (Caps::TRIGGER, "triggered operations (FI_TRIGGER)"),
    (Caps::MULTI_RECV, "multi-receive buffers (FI_MULTI_RECV)"),
];

/// `FI_ENOSYS` naming a feature the multi-rail provider does not support.
pub(crate) fn mrail_unsupported(feature: &str) -> Error {
    Error::new(
        ErrorKind::NoSys,
        format!("the ofi_mrail provider does not support {feature} (fi_mrail(7))"),
    )
}

/// Whether the hints ask for the multi-rail provider.
pub(super) fn wants_mrail(hints: &Hints) -> Result<bool> {
    if let Some(p) = hints.provider {
        return Ok(p == Provider::Mrail);
    }
    match &hints.prov_name {
        Some(name) => Ok(name.parse::<Provider>()? == Provider::Mrail),
        None => Ok(false),
    }
}

/// Checks what only the multi-rail provider refuses, and gives the hints
/// the psm checks should see for the rails (capabilities within
/// [`MRAIL_CAPS`], RDM, no tag format or inject size of the user's: those
/// are the mrail endpoint's, checked here).
pub(super) fn rail_hints(hints: &Hints) -> Result<Hints> {
    for (bits, feature) in UNSUPPORTED {
        if hints.caps.intersects(bits) {
            return Err(mrail_unsupported(feature));
        }
    }
    let other = hints.caps.difference(MRAIL_CAPS);
    if !other.is_empty() {
        return Err(mrail_unsupported(&format!("the capabilities {other}")));
    }
    match hints.ep_type {
        EpType::Unspec | EpType::Rdm => {}
        t => {
            return Err(mrail_unsupported(&format!(
                "endpoint type {t} (only FI_EP_RDM)"
            )))
        }
    }
    if hints.tx_ctx_cnt == Some(super::attr::SHARED_CONTEXT)
        || hints.rx_ctx_cnt == Some(super::attr::SHARED_CONTEXT)
    {
        return Err(mrail_unsupported("shared contexts (FI_SHARED_CONTEXT)"));
    }
    if hints.tx_ctx_cnt.is_some_and(|n| n > 1) || hints.rx_ctx_cnt.is_some_and(|n| n > 1) {
        return Err(mrail_unsupported(
            "scalable endpoints (more than one context)",
        ));
    }
    let inject = INJECT_SIZE - MRAIL_EAGER_HEADER;
    if let Some(n) = hints.inject_size.filter(|&n| n > inject) {
        return Err(Error::new(
            ErrorKind::NoData,
            format!("inject_size {n} is not supported: ofi_mrail injects at most {inject} bytes"),
        ));
    }
    let mut rail = hints.clone();
    // The rails carry tagged messages only; directed receives and sources
    // are the mrail layer's own matching.
    rail.caps = requested_caps(hints).difference(Caps::DIRECTED_RECV | Caps::SOURCE);
    if !rail.caps.intersects(Caps::MSG | Caps::TAGGED) {
        rail.caps |= Caps::MSG | Caps::TAGGED;
    }
    rail.ep_type = EpType::Rdm;
    rail.mode = None;
    rail.mem_tag_format = 0;
    rail.inject_size = None;
    Ok(rail)
}

/// The capabilities the hints ask for (`FI_MSG | FI_TAGGED` when none).
fn requested_caps(hints: &Hints) -> Caps {
    if hints.caps.is_empty() {
        Caps::MSG | Caps::TAGGED
    } else {
        hints.caps
    }
}

/// Turns the psm answer `info` into the multi-rail one.
pub(super) fn into_mrail(mut info: Info, hints: &Hints, vars: &dyn VarSource) -> Result<Info> {
    let config = match &hints.mrail {
        Some(c) => c.clone(),
        None => MrailConfig::from_vars(vars)?,
    };
    if config.rails().is_empty() {
        return Err(Error::new(
            ErrorKind::NoData,
            "ofi_mrail: no rails: set FI_OFI_MRAIL_ADDR to a comma-separated list of rail \
             addresses (IP addresses, host or interface names, fi_sockaddr_in://...)",
        ));
    }
    let n = config.rails().len();
    let var = config.addr_var();
    if n > MAX_RAILS {
        return Err(Error::new(
            ErrorKind::NoData,
            format!("ofi_mrail: {n} rails in {var}; at most {MAX_RAILS} are supported"),
        ));
    }
    let rails = match info.engine {
        EngineKind::Native if n > 1 => {
            return Err(Error::new(
                ErrorKind::NoData,
                format!(
                    "ofi_mrail: {var} names {n} rails, but the native engine opens \
                     one PSM endpoint per process on this machine (the PSM library gives every \
                     endpoint of a process the same epid), so it serves one rail; use the soft \
                     engine for several rails"
                ),
            ))
        }
        EngineKind::Native => config
            .rails()
            .iter()
            .map(|r| RailAttr {
                name: r.to_string(),
                ip: None,
                port: None,
            })
            .collect(),
        EngineKind::Soft => {
            let resolved = crate::config::rail_resolve::resolve_config_rails(&config)?;
            config
                .rails()
                .iter()
                .zip(resolved)
                .map(|(r, a)| RailAttr {
                    name: r.to_string(),
                    ip: Some(a.ip),
                    port: a.port,
                })
                .collect::<Vec<_>>()
        }
    };
    if let Some(rates) = config.rail_rates() {
        if let Some(bad) = rates
            .iter()
            .find(|&&r| r == 0 || r > crate::config::MAX_RAIL_RATE)
        {
            return Err(Error::new(
                ErrorKind::Inval,
                format!(
                    "ofi_mrail: {} (set in code) includes {bad} Mbit/s; expected rates from 1 \
                     to {} Mbit/s",
                    crate::config::MRAIL_RATES_VAR,
                    crate::config::MAX_RAIL_RATE
                ),
            ));
        }
        if rates.len() != n {
            return Err(Error::new(
                ErrorKind::Inval,
                format!(
                    "ofi_mrail: {} gives {} rates for the {n} rails of {var}",
                    crate::config::MRAIL_RATES_VAR,
                    rates.len()
                ),
            ));
        }
    }
    let rank = crate::config::local_rank::local_rank(vars)?;
    let fixed_rail = (rank.rank as usize) % n;
    // No mode bits: the mrail layer keeps its own per-operation state (C:
    // "mrail provider doesn't allow pass-through of any mode bits").
    info.mode = Mode::empty();
    info.tx_attr.mode = Mode::empty();
    info.rx_attr.mode = Mode::empty();
    info.mem_tag_format = u64::MAX;
    info.inject_size = INJECT_SIZE - MRAIL_EAGER_HEADER;
    info.ep_type = EpType::Rdm;
    info.caps = requested_caps(hints).intersection(MRAIL_CAPS);
    // Every rail's key, concatenated in rail order (FI_MR_RAW style).
    info.domain_attr.mr_key_size = n * crate::fabric::RAW_KEY_SIZE;
    // The mrail layer carries remote CQ data in its own frame.
    info.domain_attr.cq_data_size = 8;
    info.tx_attr.caps = info.caps;
    info.rx_attr.caps = info.caps;
    info.ep_attr.protocol = "FI_PROTO_MRAIL";
    info.fabric_attr.prov_name = Provider::Mrail.name();
    info.fabric_attr.name = "ofi_mrail_fabric";
    info.domain_attr.name = "ofi_mrail_domain";
    info.mrail = Some(MrailAttr {
        rails,
        local_rank: rank.rank,
        fixed_rail,
        config,
    });
    Ok(info)
}
