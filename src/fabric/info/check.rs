//! The hint checks of discovery, as a pure function of the hints and two
//! configuration flags, with the C provider's rules (`psmx_getinfo` in
//! `prov/psm/src/psmx_init.c`). Every refusal is `NoData` (the libfabric answer
//! for "this provider cannot give you that") with a message naming the
//! attribute, the value asked and what psm offers.

use super::attr::{MsgOrder, INJECT_SIZE, MAX_MSG_SIZE, PROVIDER_NAME, SHARED_CONTEXT};
use super::hints::Hints;
use crate::fabric::caps::{AvType, Caps, EpType, Mode, ProgressKind, Threading};
use crate::fabric::max_tag;
use crate::fabric::tag_reservation::reserve_for_getinfo;
use crate::{Error, ErrorKind, Result};
use std::time::Duration;

/// Endpoint capabilities psm offers (C's `PSMX_CAPS`, `prov/psm/src/psmx.h`).
pub(crate) const EP_CAPS: Caps = Caps::TAGGED
    .union(Caps::MSG)
    .union(Caps::ATOMIC)
    .union(Caps::RMA)
    .union(Caps::MULTI_RECV)
    .union(Caps::READ)
    .union(Caps::WRITE)
    .union(Caps::SEND)
    .union(Caps::RECV)
    .union(Caps::REMOTE_READ)
    .union(Caps::REMOTE_WRITE)
    .union(Caps::TRIGGER)
    .union(Caps::RMA_EVENT);

/// Domain capabilities psm offers.
pub(crate) const DOMAIN_CAPS: Caps = Caps::LOCAL_COMM.union(Caps::REMOTE_COMM);

/// The first advertised set: everything, with `FI_TAGGED`. Also what an
/// info reports when no caps were asked. (C computed the default in an
/// `int` and so lost `FI_RMA_EVENT`, bit 56; it is kept here.)
pub(crate) const CAPS: Caps = EP_CAPS.union(DOMAIN_CAPS);

/// The second advertised set (`PSMX_CAPS2`): `FI_DIRECTED_RECV` instead of
/// `FI_TAGGED`, since a PSM tag has no room for the source.
pub(crate) const CAPS2: Caps = CAPS.difference(Caps::TAGGED).union(Caps::DIRECTED_RECV);

/// What the checks settled on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settled {
    pub(crate) caps: Caps,
    pub(crate) mode: Mode,
    pub(crate) ep_type: EpType,
    pub(crate) progress: ProgressKind,
    /// Adaptive progress's spin window (zero: none).
    pub(crate) spin: Duration,
    /// Manual progress's idle assist.
    pub(crate) idle_assist: Option<Duration>,
    pub(crate) av_type: AvType,
    pub(crate) threading: Threading,
    pub(crate) reserved: u64,
}

fn refuse(message: String) -> Error {
    Error::new(ErrorKind::NoData, message)
}

/// Checks `hints` against what psm offers, with the configuration's
/// `am_msg` and `tagged_rma`.
///
/// # Errors
/// `NoData` for the first attribute psm cannot provide.
pub(crate) fn check(hints: &Hints, am_msg: bool, tagged_rma: bool) -> Result<Settled> {
    let ep_type = match hints.ep_type {
        EpType::Unspec | EpType::Rdm => EpType::Rdm,
        // Kept as in C: DGRAM endpoints are accepted, as reliable as RDM.
        EpType::Dgram => EpType::Dgram,
        EpType::Msg => {
            return Err(refuse(
                "ep_type FI_EP_MSG is not supported: psm offers FI_EP_RDM and FI_EP_DGRAM \
                 (no connection management)"
                    .into(),
            ))
        }
    };
    check_caps(hints.caps)?;
    check_limits(hints)?;
    check_names(hints)?;
    if hints.threading == Threading::Safe {
        return Err(refuse(
            "threading FI_THREAD_SAFE is not supported: psm offers FI_THREAD_FID, \
             FI_THREAD_ENDPOINT, FI_THREAD_COMPLETION and FI_THREAD_DOMAIN"
                .into(),
        ));
    }
    let asked = (!hints.caps.is_empty()).then_some(hints.caps);
    let tags = reserve_for_getinfo(
        asked,
        CAPS,
        max_tag(hints.mem_tag_format),
        am_msg,
        tagged_rma,
    )?;
    let needs_context =
        tags.caps.contains(Caps::TAGGED) || (tags.caps.contains(Caps::MSG) && !am_msg);
    let mode = if needs_context {
        Mode::CONTEXT
    } else {
        Mode::empty()
    };
    if let Some(supported) = hints.mode {
        if !supported.contains(mode) {
            return Err(refuse(format!(
                "mode FI_CONTEXT is required for caps {} (FI_TAGGED, or FI_MSG while \
                 FI_PSM_AM_MSG=0) but the hints' mode is {supported}",
                tags.caps
            )));
        }
    }
    let (progress, spin) = match (hints.progress, hints.spin) {
        (ProgressKind::Unspec, None) => (ProgressKind::Manual, Duration::ZERO),
        (ProgressKind::Unspec | ProgressKind::Auto, Some(spin)) => (ProgressKind::Auto, spin),
        (ProgressKind::Manual, Some(spin)) => {
            return Err(refuse(format!(
                "a spin window ({spin:?}) needs FI_PROGRESS_AUTO but the hints ask for \
                 FI_PROGRESS_MANUAL"
            )))
        }
        (p, None) => (p, Duration::ZERO),
    };
    let threading = match hints.threading {
        Threading::Unspec => Threading::Completion,
        t => t,
    };
    Ok(Settled {
        caps: tags.caps,
        mode,
        ep_type,
        progress,
        spin,
        idle_assist: hints.idle_assist,
        av_type: hints.av_type,
        threading,
        reserved: tags.reserved,
    })
}

fn check_caps(caps: Caps) -> Result<()> {
    if caps.difference(CAPS).is_empty() || caps.difference(CAPS2).is_empty() {
        return Ok(());
    }
    if caps.contains(Caps::SHARED_AV) {
        return Err(refuse(format!(
            "caps {caps}: FI_SHARED_AV is not supported by psm"
        )));
    }
    if caps.contains(Caps::DIRECTED_RECV | Caps::TAGGED) {
        return Err(refuse(format!(
            "caps {caps}: FI_DIRECTED_RECV cannot be combined with FI_TAGGED \
             (a PSM tag has no room for the source; directed receive works for FI_MSG)"
        )));
    }
    let outside = caps.difference(CAPS.union(CAPS2));
    Err(refuse(format!(
        "caps {caps}: {outside} not supported by psm (it offers {CAPS}, or {CAPS2})"
    )))
}

fn check_limits(hints: &Hints) -> Result<()> {
    let limit = |name: &str, asked: Option<usize>, max: usize| match asked {
        Some(n) if n > max => Err(refuse(format!(
            "{name} {n} is not supported: psm offers at most {max}"
        ))),
        _ => Ok(()),
    };
    limit("tx_attr.inject_size", hints.inject_size, INJECT_SIZE)?;
    limit("tx_attr.iov_limit", hints.tx_iov_limit, 1)?;
    limit("rx_attr.iov_limit", hints.rx_iov_limit, 1)?;
    limit("tx_attr.rma_iov_limit", hints.rma_iov_limit, 1)?;
    limit("ep_attr.rx_ctx_cnt", hints.rx_ctx_cnt, 1)?;
    if let Some(n) = hints.tx_ctx_cnt.filter(|&n| n > 1 && n != SHARED_CONTEXT) {
        return Err(refuse(format!(
            "ep_attr.tx_ctx_cnt {n} is not supported: psm offers 0, 1 or FI_SHARED_CONTEXT"
        )));
    }
    if let Some(n) = hints.max_msg_size.filter(|&n| n > MAX_MSG_SIZE) {
        return Err(refuse(format!(
            "ep_attr.max_msg_size {n} is not supported: psm carries at most {MAX_MSG_SIZE} bytes"
        )));
    }
    let extra = hints.msg_order.difference(MsgOrder::PSM);
    if !extra.is_empty() {
        return Err(refuse(format!(
            "msg_order {}: {extra} is not guaranteed by psm (it offers {})",
            hints.msg_order,
            MsgOrder::PSM
        )));
    }
    if !hints.comp_order.is_empty() {
        return Err(refuse(format!(
            "comp_order {} is not supported: psm offers FI_ORDER_NONE",
            hints.comp_order
        )));
    }
    Ok(())
}

fn check_names(hints: &Hints) -> Result<()> {
    for (what, name) in [
        ("fabric", &hints.fabric_name),
        ("domain", &hints.domain_name),
    ] {
        if let Some(name) = name.as_deref().filter(|n| *n != PROVIDER_NAME) {
            return Err(refuse(format!(
                "{what} name {name:?} is not offered: psm's is \"{PROVIDER_NAME}\""
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::{MSG_BIT, RMA_BIT};

    fn ok(h: &Hints) -> Settled {
        check(h, false, true).unwrap()
    }

    fn refused(h: &Hints, needle: &str) {
        let e = check(h, false, true).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoData, "{e}");
        assert!(e.to_string().contains(needle), "{needle:?} not in {e}");
    }

    #[test]
    fn defaults() {
        let s = ok(&Hints::new());
        assert_eq!(s.caps, CAPS);
        assert_eq!(s.mode, Mode::CONTEXT);
        assert_eq!(s.ep_type, EpType::Rdm);
        assert_eq!(s.progress, ProgressKind::Manual);
        assert_eq!(s.av_type, AvType::Unspec);
        assert_eq!(s.threading, Threading::Completion);
        assert_eq!(s.reserved, MSG_BIT | RMA_BIT);
    }

    #[test]
    fn advertised_sets() {
        assert!(CAPS.contains(Caps::TAGGED) && !CAPS.contains(Caps::DIRECTED_RECV));
        assert!(!CAPS2.contains(Caps::TAGGED) && CAPS2.contains(Caps::DIRECTED_RECV));
        let s = ok(&Hints::new().caps(Caps::MSG | Caps::DIRECTED_RECV));
        assert_eq!(s.caps, Caps::MSG | Caps::DIRECTED_RECV);
        ok(&Hints::new().caps(CAPS));
        ok(&Hints::new().caps(CAPS2));
    }

    #[test]
    fn refusals_name_the_attribute() {
        refused(&Hints::new().ep_type(EpType::Msg), "FI_EP_MSG");
        refused(
            &Hints::new().caps(Caps::TAGGED | Caps::DIRECTED_RECV),
            "FI_DIRECTED_RECV cannot be combined with FI_TAGGED",
        );
        refused(
            &Hints::new().caps(Caps::MSG | Caps::SHARED_AV),
            "FI_SHARED_AV",
        );
        refused(
            &Hints::new().caps(Caps::MSG | Caps::MULTICAST | Caps::FENCE),
            "FI_MULTICAST | FI_FENCE not supported",
        );
        refused(&Hints::new().inject_size(65), "inject_size 65");
        refused(&Hints::new().iov_limit(2), "tx_attr.iov_limit 2");
        refused(&Hints::new().rx_iov_limit(2), "rx_attr.iov_limit 2");
        refused(&Hints::new().rma_iov_limit(4), "rma_iov_limit 4");
        refused(&Hints::new().tx_ctx_cnt(2), "tx_ctx_cnt 2");
        refused(&Hints::new().rx_ctx_cnt(2), "rx_ctx_cnt 2");
        refused(
            &Hints::new().max_msg_size(1 << 32),
            "max_msg_size 4294967296",
        );
        refused(&Hints::new().msg_order(MsgOrder::SAW), "FI_ORDER_SAW");
        refused(&Hints::new().comp_order(MsgOrder::DATA), "comp_order");
        refused(&Hints::new().fabric_name("verbs"), "fabric name \"verbs\"");
        refused(&Hints::new().domain_name("hfi1_0"), "domain name");
        refused(&Hints::new().threading(Threading::Safe), "FI_THREAD_SAFE");
        refused(
            &Hints::new().caps(Caps::TAGGED).mode(Mode::empty()),
            "mode FI_CONTEXT is required",
        );
        refused(
            &Hints::new().caps(Caps::MSG).mem_tag_format(u64::MAX),
            "FI_MSG needs tag bit 63",
        );
    }

    #[test]
    fn accepted_edges() {
        ok(&Hints::new().inject_size(64).iov_limit(1).rma_iov_limit(1));
        ok(&Hints::new().tx_ctx_cnt(SHARED_CONTEXT).rx_ctx_cnt(0));
        ok(&Hints::new().max_msg_size(MAX_MSG_SIZE));
        ok(&Hints::new()
            .msg_order(MsgOrder::PSM)
            .comp_order(MsgOrder::empty()));
        ok(&Hints::new().fabric_name("psm").domain_name("psm"));
        for t in [
            Threading::Fid,
            Threading::Endpoint,
            Threading::Completion,
            Threading::Domain,
        ] {
            assert_eq!(ok(&Hints::new().threading(t)).threading, t);
        }
        assert_eq!(
            ok(&Hints::new().ep_type(EpType::Dgram)).ep_type,
            EpType::Dgram
        );
        assert_eq!(
            ok(&Hints::new().progress(ProgressKind::Auto)).progress,
            ProgressKind::Auto
        );
        assert_eq!(
            ok(&Hints::new().av_type(AvType::Table)).av_type,
            AvType::Table
        );
    }

    #[test]
    fn context_mode_rule() {
        // Not needed without TAGGED or MQ-carried MSG.
        let s = ok(&Hints::new()
            .caps(Caps::RMA | Caps::ATOMIC)
            .mode(Mode::empty()));
        assert_eq!(s.mode, Mode::empty());
        let s = check(
            &Hints::new().caps(Caps::MSG).mode(Mode::empty()),
            true,
            true,
        )
        .unwrap();
        assert_eq!(
            s.mode,
            Mode::empty(),
            "am_msg: no context needed for FI_MSG"
        );
        let e = check(
            &Hints::new().caps(Caps::MSG).mode(Mode::CONTEXT2),
            false,
            true,
        )
        .unwrap_err();
        assert!(e.to_string().contains("FI_CONTEXT2"), "{e}");
        assert_eq!(ok(&Hints::new().caps(Caps::MSG)).mode, Mode::CONTEXT);
    }

    #[test]
    fn wide_tags_drop_unasked_caps() {
        let s = ok(&Hints::new().mem_tag_format(0xAAAA_AAAA_AAAA_AAAA));
        assert!(!s.caps.contains(Caps::MSG) && !s.caps.contains(Caps::RMA));
        assert_eq!(s.reserved, 0);
        let s = ok(&Hints::new().mem_tag_format(0x5555_5555_5555_5555));
        assert!(s.caps.contains(Caps::MSG) && !s.caps.contains(Caps::RMA));
        assert_eq!(s.reserved, MSG_BIT);
    }
}
