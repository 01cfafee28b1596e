//! Discovery (`getinfo` / `GetInfo`) through the public API: defaults, every
//! class of refusal, tag reservation per configuration, the engine choice,
//! `FI_SOURCE` parsing, and name-server resolution over loopback.
//!
//! No test touches the process environment: configuration comes from
//! `Hints::config` or `Hints::vars`.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::Duration;

use psmrail::config::PsmConfig;
use psmrail::engine::native::NativeEngine;
use psmrail::engine::soft::SoftConfig;
use psmrail::engine::{EngineKind, Epid};
use psmrail::fabric::name_server::NameServer;
use psmrail::fabric::{
    getinfo, AvType, Caps, EngineChoice, EpType, GetInfo, Hints, Info, Mode, MsgOrder,
    ProgressKind, Threading, MSG_BIT, RMA_BIT, SHARED_CONTEXT,
};
use psmrail::ErrorKind;

const TAGS_62: u64 = 0x2AAA_AAAA_AAAA_AAAA;
const TAGS_63: u64 = 0x5555_5555_5555_5555;
const TAGS_64: u64 = 0xAAAA_AAAA_AAAA_AAAA;

/// Hints on the soft engine with the man-page defaults.
fn soft() -> Hints {
    Hints::new()
        .engine(EngineChoice::Soft)
        .config(PsmConfig::default())
}

fn soft_with(am_msg: bool, tagged_rma: bool) -> Hints {
    let cfg = PsmConfig::builder()
        .am_msg(am_msg)
        .tagged_rma(tagged_rma)
        .build()
        .unwrap();
    Hints::new().engine(EngineChoice::Soft).config(cfg)
}

fn one(hints: &Hints) -> Info {
    let mut all = getinfo(Some(hints)).unwrap();
    assert_eq!(all.len(), 1);
    all.remove(0)
}

fn refused(hints: &Hints, needle: &str) {
    let e = getinfo(Some(hints)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoData, "{e}");
    assert!(e.to_string().contains(needle), "{needle:?} not in {e}");
}

#[test]
fn defaults_match_the_c_provider() {
    let info = one(&soft());
    assert_eq!(info.engine, EngineKind::Soft);
    assert_eq!(info.ep_type, EpType::Rdm);
    for c in [
        Caps::TAGGED,
        Caps::MSG,
        Caps::RMA,
        Caps::ATOMIC,
        Caps::MULTI_RECV,
        Caps::TRIGGER,
        Caps::RMA_EVENT,
        Caps::SEND | Caps::RECV | Caps::READ | Caps::WRITE,
        Caps::REMOTE_READ | Caps::REMOTE_WRITE,
        Caps::LOCAL_COMM | Caps::REMOTE_COMM,
    ] {
        assert!(info.caps.contains(c), "{c} missing from {}", info.caps);
    }
    assert!(!info.caps.contains(Caps::DIRECTED_RECV));
    assert_eq!(info.mode, Mode::CONTEXT);
    assert_eq!(info.progress, ProgressKind::Manual);
    assert_eq!(info.av_type, AvType::Unspec);
    assert_eq!(info.inject_size, 64);
    assert_eq!(info.max_msg_size, u64::from(u32::MAX));
    assert_eq!(info.mem_tag_format, TAGS_62);
    assert_eq!(info.src_addr, None);
    assert_eq!(info.dest_addr, None);
    assert!(info.source.is_none());
    assert_eq!(info.tx_attr.iov_limit, 1);
    assert_eq!(info.tx_attr.rma_iov_limit, 1);
    assert_eq!(info.rx_attr.iov_limit, 1);
    assert_eq!(info.tx_attr.msg_order, MsgOrder::PSM);
    assert!(info.tx_attr.msg_order.contains(MsgOrder::SAS));
    assert_eq!(info.tx_attr.comp_order, MsgOrder::empty());
    assert_eq!(info.tx_attr.size, usize::MAX);
    assert_eq!(info.rx_attr.total_buffered_recv, usize::MAX);
    assert_eq!(info.ep_attr.max_order_raw_size, 2032);
    assert_eq!(info.ep_attr.protocol, "FI_PROTO_PSMX");
    assert_eq!(info.threading(), Threading::Completion);
    assert_eq!(info.domain_attr.caps, Caps::LOCAL_COMM | Caps::REMOTE_COMM);
    assert_eq!(info.domain_attr.mr_key_size, 8);
    assert_eq!(info.domain_attr.cq_data_size, 4);
    assert_eq!(info.domain_attr.max_ep_srx_ctx, 0);
    assert_eq!(info.fabric_attr.name, "psm");
    assert_eq!(info.tx_attr.caps, info.caps);
    assert_eq!(info.rx_attr.mode, info.mode);
    assert_eq!(info.config(), &PsmConfig::default());
    assert_eq!(info.soft_config(), &SoftConfig::default());
}

#[test]
fn asked_values_are_kept() {
    let h = soft()
        .caps(Caps::TAGGED | Caps::SEND)
        .ep_type(EpType::Dgram)
        .progress(ProgressKind::Auto)
        .av_type(AvType::Table)
        .threading(Threading::Domain);
    let info = one(&h);
    assert_eq!(info.caps, Caps::TAGGED | Caps::SEND);
    assert_eq!(
        info.ep_type,
        EpType::Dgram,
        "DGRAM is kept (reliable like RDM)"
    );
    assert_eq!(info.progress, ProgressKind::Auto);
    assert_eq!(info.domain_attr.control_progress, ProgressKind::Auto);
    assert_eq!(info.av_type, AvType::Table);
    assert_eq!(info.threading(), Threading::Domain);
    assert_eq!(one(&soft().ep_type(EpType::Unspec)).ep_type, EpType::Rdm);
    assert_eq!(one(&soft().ep_type(EpType::Rdm)).ep_type, EpType::Rdm);
    let cfg = SoftConfig {
        unix_sockets: false,
        transmit_batch: 4096,
        ..SoftConfig::default()
    };
    assert_eq!(one(&soft().soft_config(cfg.clone())).soft_config(), &cfg);
}

#[test]
fn every_refusal_is_no_data_naming_the_attribute() {
    let s = soft;
    refused(
        &s().caps(Caps::TAGGED | Caps::MULTICAST),
        "FI_MULTICAST not supported",
    );
    refused(&s().caps(Caps::MSG | Caps::NAMED_RX_CTX), "FI_NAMED_RX_CTX");
    refused(&s().caps(Caps::MSG | Caps::SHARED_AV), "FI_SHARED_AV");
    refused(
        &s().caps(Caps::TAGGED | Caps::DIRECTED_RECV),
        "FI_DIRECTED_RECV cannot be combined with FI_TAGGED",
    );
    refused(&s().ep_type(EpType::Msg), "FI_EP_MSG");
    refused(&s().inject_size(65), "inject_size 65");
    refused(&s().iov_limit(2), "iov_limit 2");
    refused(&s().rx_iov_limit(3), "rx_attr.iov_limit 3");
    refused(&s().rma_iov_limit(2), "rma_iov_limit 2");
    refused(&s().tx_ctx_cnt(2), "tx_ctx_cnt 2");
    refused(&s().rx_ctx_cnt(2), "rx_ctx_cnt 2");
    refused(&s().max_msg_size(1 << 32), "max_msg_size");
    refused(&s().msg_order(MsgOrder::WAS), "FI_ORDER_WAS");
    refused(&s().comp_order(MsgOrder::SAS), "comp_order");
    refused(&s().threading(Threading::Safe), "FI_THREAD_SAFE");
    refused(&s().fabric_name("tcp"), "fabric name");
    refused(&s().domain_name("mlx5_0"), "domain name");
    refused(
        &s().caps(Caps::TAGGED).mode(Mode::empty()),
        "FI_CONTEXT is required",
    );
    refused(
        &s().caps(Caps::MSG).mode(Mode::CONTEXT2),
        "FI_CONTEXT is required",
    );
    // No caps asked: the default caps include FI_TAGGED, which needs it.
    refused(&s().mode(Mode::empty()), "FI_CONTEXT is required");
    refused(
        &s().caps(Caps::MSG).mem_tag_format(TAGS_64),
        "FI_MSG needs tag bit 63",
    );
    refused(
        &s().caps(Caps::RMA).mem_tag_format(TAGS_63),
        "FI_RMA needs tag bit 62",
    );
}

#[test]
fn accepted_limits() {
    one(&soft()
        .inject_size(64)
        .iov_limit(1)
        .rma_iov_limit(1)
        .tx_ctx_cnt(SHARED_CONTEXT)
        .rx_ctx_cnt(1)
        .max_msg_size(u64::from(u32::MAX))
        .msg_order(MsgOrder::SAS | MsgOrder::RAW)
        .fabric_name("psm")
        .domain_name("psm"));
    one(&soft().tx_ctx_cnt(0).rx_ctx_cnt(0).inject_size(0));
    // Mode not needed without TAGGED / MQ-carried MSG.
    let info = one(&soft().caps(Caps::RMA | Caps::ATOMIC).mode(Mode::empty()));
    assert_eq!(info.mode, Mode::empty());
    // DIRECTED_RECV works without TAGGED (the second advertised set).
    let info = one(&soft().caps(Caps::MSG | Caps::DIRECTED_RECV | Caps::RECV));
    assert_eq!(info.caps, Caps::MSG | Caps::DIRECTED_RECV | Caps::RECV);
}

#[test]
fn tag_reservation_per_config() {
    // (am_msg, tagged_rma) -> mem_tag_format with default caps.
    for (am_msg, tagged_rma, format) in [
        (false, true, TAGS_62),
        (false, false, TAGS_63),
        (true, true, TAGS_62),
        (true, false, TAGS_64),
    ] {
        let info = one(&soft_with(am_msg, tagged_rma));
        assert_eq!(
            info.mem_tag_format, format,
            "am_msg={am_msg} tagged_rma={tagged_rma}"
        );
        assert!(info.caps.contains(Caps::MSG | Caps::RMA | Caps::TAGGED));
    }
    // Caps without MSG/RMA leave the whole tag space.
    let info = one(&soft().caps(Caps::TAGGED | Caps::ATOMIC));
    assert_eq!(info.mem_tag_format, TAGS_64);
    let info = one(&soft().caps(Caps::TAGGED | Caps::MSG));
    assert_eq!(info.mem_tag_format, TAGS_63);
    // am_msg: untagged messages need no context and no tag bit.
    let info = one(&soft_with(true, false).caps(Caps::MSG).mode(Mode::empty()));
    assert_eq!((info.mode, info.mem_tag_format), (Mode::empty(), TAGS_64));
}

#[test]
fn wide_tag_hint_drops_unasked_caps() {
    let info = one(&soft().mem_tag_format(TAGS_64));
    assert!(
        !info.caps.intersects(Caps::MSG | Caps::RMA),
        "{}",
        info.caps
    );
    assert!(info.caps.contains(Caps::TAGGED));
    assert_eq!(info.mem_tag_format, TAGS_64);
    let info = one(&soft().mem_tag_format(TAGS_63));
    assert!(info.caps.contains(Caps::MSG) && !info.caps.contains(Caps::RMA));
    assert_eq!(info.mem_tag_format, TAGS_63);
    // A narrow hint keeps both.
    let info = one(&soft().caps(Caps::MSG | Caps::RMA).mem_tag_format(0xFFFF));
    assert_eq!(info.mem_tag_format, TAGS_62);
    assert_eq!(
        psmrail::fabric::max_tag(info.mem_tag_format),
        !(MSG_BIT | RMA_BIT)
    );
}

#[test]
fn configuration_comes_from_vars_when_not_given() {
    let h = Hints::new().vars(vec![
        ("PSMRAIL_ENGINE", "soft"),
        ("FI_PSM_AM_MSG", "1"),
        ("FI_PSM_TAGGED_RMA", "0"),
    ]);
    let info = one(&h);
    assert_eq!(info.engine, EngineKind::Soft);
    assert!(info.config().am_msg() && !info.config().tagged_rma());
    assert_eq!(info.mem_tag_format, TAGS_64);
    // A malformed FI_PSM_* value is Inval naming the variable.
    let e =
        getinfo(Some(&Hints::new().vars(vec![
            ("PSMRAIL_ENGINE", "soft"),
            ("FI_PSM_AM_MSG", "maybe"),
        ])))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    assert!(e.to_string().contains("FI_PSM_AM_MSG"), "{e}");
    // An explicit config wins over the vars.
    let h = Hints::new()
        .vars(vec![("PSMRAIL_ENGINE", "soft"), ("FI_PSM_AM_MSG", "1")])
        .config(PsmConfig::default());
    assert!(!one(&h).config().am_msg());
}

fn native_usable() -> bool {
    NativeEngine::load().is_ok()
}

#[test]
fn engine_choice() {
    let expected_auto = if native_usable() {
        EngineKind::Native
    } else {
        EngineKind::Soft
    };
    let cfg = PsmConfig::default;
    // Hints choose.
    assert_eq!(one(&soft()).engine, EngineKind::Soft);
    let auto = Hints::new().engine(EngineChoice::Auto).config(cfg());
    assert_eq!(one(&auto).engine, expected_auto);
    // PSMRAIL_ENGINE chooses when the hints do not (case-insensitive).
    let by_var = |v: &'static str| Hints::new().config(cfg()).vars(vec![("PSMRAIL_ENGINE", v)]);
    assert_eq!(one(&by_var("SOFT")).engine, EngineKind::Soft);
    assert_eq!(one(&by_var("auto")).engine, expected_auto);
    // Unset: auto.
    let unset: Vec<(&str, &str)> = Vec::new();
    assert_eq!(
        one(&Hints::new().config(cfg()).vars(unset)).engine,
        expected_auto
    );
    // Hints win over the variable, even a malformed one.
    let h = Hints::new()
        .config(cfg())
        .engine(EngineChoice::Soft)
        .vars(vec![("PSMRAIL_ENGINE", "bogus")]);
    assert_eq!(one(&h).engine, EngineKind::Soft);
    // Malformed variable: Inval naming it.
    for bad in ["psm", "", " soft", "native,soft"] {
        let e = getinfo(Some(&by_var(bad))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval, "{bad:?}");
        assert!(e.to_string().contains("PSMRAIL_ENGINE"), "{e}");
    }
    // Native asked: Native, or NoData carrying the load error.
    for h in [
        Hints::new().config(cfg()).engine(EngineChoice::Native),
        by_var("native"),
    ] {
        match NativeEngine::load() {
            Ok(_) => assert_eq!(one(&h).engine, EngineKind::Native),
            Err(load) => {
                let e = getinfo(Some(&h)).unwrap_err();
                assert_eq!(e.kind(), ErrorKind::NoData);
                let text = e.to_string();
                assert!(text.contains("native engine was asked for"), "{text}");
                assert!(
                    text.contains(&load.to_string().replace("FI_ENODATA: ", "")),
                    "{text} lacks {load}"
                );
            }
        }
    }
}

#[test]
fn soft_config_is_validated_for_the_soft_engine() {
    let cfg = SoftConfig {
        bind: Ipv4Addr::UNSPECIFIED,
        ..SoftConfig::default()
    };
    let e = getinfo(Some(&soft().soft_config(cfg))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    assert!(e.to_string().contains("bind address"), "{e}");
}

#[test]
fn fi_source_node_gives_unit_port_service() {
    let h = soft();
    let run = |node: &str, service: Option<&str>| {
        let mut r = GetInfo::new().node(node).source(true).hints(&h);
        if let Some(s) = service {
            r = r.service_text(s);
        }
        r.run()
    };
    let info = run("anything:2:1", Some("99")).unwrap().remove(0);
    let src = info.source.clone().unwrap();
    assert_eq!(
        (src.unit, src.port, src.service.get()),
        (Some(2), Some(1), 99)
    );
    assert_eq!(src.node, "anything:2:1");
    assert_eq!(info.dest_addr, None, "FI_SOURCE never asks the name server");
    let src = run("host:-1:0", None).unwrap().remove(0).source.unwrap();
    assert_eq!((src.unit, src.port, src.service.get()), (None, None, 0));
    let src = run("host", None).unwrap().remove(0).source.unwrap();
    assert_eq!((src.unit, src.port), (None, None));
    for (node, service, needle) in [
        ("h:x:1", None, "unit"),
        ("h:1:256", None, "port"),
        ("h:010:1", None, "leading zero"),
        ("h:1:2:3", None, "too many"),
        ("h:1:1", Some("abc"), "service \"abc\""),
        ("h:1:1", Some("4294967296"), "service"),
    ] {
        let e = run(node, service).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval, "{node} {service:?}");
        assert!(e.to_string().contains(needle), "{needle:?} not in {e}");
    }
    // FI_SOURCE without a node: the service alone.
    let info = GetInfo::new()
        .service_text("5")
        .source(true)
        .hints(&h)
        .run()
        .unwrap();
    assert_eq!(info[0].source.as_ref().unwrap().service, 5);
}

#[test]
fn node_resolves_through_the_name_server() {
    let ns = NameServer::start_on(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap();
    let port = ns.local_addr().port();
    let epid = Epid(0x1234_5678_9abc);
    let _reg = ns.register(7, epid).unwrap();
    let h = soft();
    let ask = |service: &str| {
        GetInfo::new()
            .node("127.0.0.1")
            .service_text(service)
            .hints(&h)
            .name_server_port(port)
            .timeout(Duration::from_secs(10))
            .run()
    };
    let info = ask("7").unwrap().remove(0);
    assert_eq!(info.dest_addr, Some(epid));
    assert!(info.source.is_none());
    // Service 0 is the wildcard: any registered endpoint.
    assert_eq!(ask("0").unwrap()[0].dest_addr, Some(epid));
    // Unknown service: NoData naming node and service.
    let e = ask("8").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoData);
    let text = e.to_string();
    assert!(
        text.contains("\"127.0.0.1\"") && text.contains("service 8"),
        "{text}"
    );
    // A malformed service is Inval before any lookup.
    assert_eq!(ask("seven").unwrap_err().kind(), ErrorKind::Inval);
}

#[test]
fn name_server_unreachable_is_no_data() {
    // A loopback port with nothing listening any more.
    let port = {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        l.local_addr().unwrap().port()
    };
    let h = soft();
    let e = GetInfo::new()
        .node("127.0.0.1")
        .hints(&h)
        .name_server_port(port)
        .timeout(Duration::from_secs(5))
        .run()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoData, "{e}");
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
}

#[test]
fn display_is_fi_info_like() {
    let info = one(&soft().caps(Caps::MSG | Caps::TAGGED));
    let short = info.to_string();
    for line in [
        "provider: psm",
        "    fabric: psm",
        "    domain: psm",
        "    type: FI_EP_RDM",
        "    protocol: FI_PROTO_PSMX",
        "    engine: soft",
        "    caps: FI_MSG | FI_TAGGED",
        "    mode: FI_CONTEXT",
        "    mem_tag_format: 0x5555555555555555",
        "    inject_size: 64",
    ] {
        assert!(short.lines().any(|l| l == line), "{line:?} not in\n{short}");
    }
    let long = format!("{info:#}");
    for line in [
        "    caps: [ FI_MSG, FI_TAGGED ]",
        "        iov_limit: 1",
        "        comp_order: [ ]",
        "        threading: FI_THREAD_COMPLETION",
        "        max_msg_size: 4294967295",
        "        caps: [ FI_LOCAL_COMM, FI_REMOTE_COMM ]",
    ] {
        assert!(long.lines().any(|l| l == line), "{line:?} not in\n{long}");
    }
    assert!(long.len() > short.len());
}
