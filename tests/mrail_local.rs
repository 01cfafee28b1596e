//! The multi-rail provider in one process, on loopback rails: discovery,
//! addresses, every policy and size, ordering across rails, truncation,
//! matching rules, completion queues and counters, unknown peers, and
//! dropped futures. The same behaviour across real links, in separate
//! processes inside network namespaces, is in `mrail_rig_*.rs`.

mod support;

use psmrail::config::{MrailConfig, PsmConfig, RailAddr};
use psmrail::engine::OpBuffer;
use psmrail::fabric::{
    getinfo, AvAttr, Caps, CompletionFlags, CounterAttr, CounterBind, CqAttr, CqBind, EngineChoice,
    EpType, Hints, ProgressKind, Provider,
};
use psmrail::mrail::{MrailAddr, MrailFabric};
use psmrail::ops::MessageEndpoint;
use psmrail::ErrorKind;
use std::future::Future;
use std::time::Duration;
use support::mrail_nodes::{self, open, MrailNodes};
use support::payload::pattern;

const MSG_TAGGED: Caps = Caps::MSG.union(Caps::TAGGED);
const MANUAL: ProgressKind = ProgressKind::Manual;

fn soft_hints(rails: &str) -> Hints {
    let psm = PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .build()
        .unwrap();
    let cfg = MrailConfig::builder()
        .rails(RailAddr::parse_list(rails).unwrap())
        .build();
    Hints::new()
        .engine(EngineChoice::Soft)
        .config(psm)
        .mrail_config(cfg)
}

#[test]
fn getinfo_offers_ofi_mrail_by_name_and_by_type() {
    let by_name = getinfo(Some(
        &soft_hints("127.0.0.1,127.0.0.1").prov_name("ofi_mrail"),
    ))
    .unwrap()
    .remove(0);
    let typed = getinfo(Some(
        &soft_hints("127.0.0.1,127.0.0.1").provider(Provider::Mrail),
    ))
    .unwrap()
    .remove(0);
    for info in [&by_name, &typed] {
        assert_eq!(info.provider(), Provider::Mrail);
        assert_eq!(info.fabric_attr.prov_name, "ofi_mrail");
        assert_eq!(info.ep_attr.protocol, "FI_PROTO_MRAIL");
        assert_eq!(info.ep_type, EpType::Rdm);
        assert_eq!(info.mem_tag_format, u64::MAX);
        assert_eq!(info.inject_size, 40);
        assert!(info.mode.is_empty(), "no mode bits: {}", info.mode);
        assert!(info.caps.contains(Caps::MSG | Caps::TAGGED));
        let m = info.mrail().unwrap();
        assert_eq!(m.rails.len(), 2);
        assert_eq!(m.rails[1].ip, Some(std::net::Ipv4Addr::LOCALHOST));
        assert_eq!(
            m.policy_table().to_string(),
            "16384:fixed,ULONG_MAX:striping"
        );
    }
    let text = by_name.to_string();
    assert!(text.contains("provider: ofi_mrail"), "{text}");
    // Without asking, discovery gives psm.
    let psm = getinfo(Some(&soft_hints("127.0.0.1"))).unwrap().remove(0);
    assert_eq!(psm.provider(), Provider::Psm);
    assert!(psm.mrail().is_none());
}

#[test]
fn getinfo_names_what_ofi_mrail_does_not_support() {
    let ask = |h: Hints| getinfo(Some(&h.provider(Provider::Mrail))).unwrap_err();
    let cases = [
        (soft_hints("127.0.0.1").caps(Caps::ATOMIC), "atomics"),
        (
            soft_hints("127.0.0.1").caps(Caps::RMA_EVENT),
            "FI_RMA_EVENT",
        ),
        (
            soft_hints("127.0.0.1").caps(Caps::TAGGED | Caps::TRIGGER),
            "triggered",
        ),
        (soft_hints("127.0.0.1").caps(Caps::MULTICAST), "multicast"),
        (
            soft_hints("127.0.0.1").caps(Caps::MSG | Caps::MULTI_RECV),
            "multi-receive",
        ),
        (
            soft_hints("127.0.0.1").ep_type(EpType::Dgram),
            "FI_EP_DGRAM",
        ),
        (soft_hints("127.0.0.1").tx_ctx_cnt(4), "scalable endpoints"),
        (
            soft_hints("127.0.0.1").rx_ctx_cnt(usize::MAX),
            "shared contexts",
        ),
    ];
    for (hints, word) in cases {
        let e = ask(hints);
        assert_eq!(e.kind(), ErrorKind::NoSys, "{e}");
        assert!(e.message().contains(word), "{word}: {e}");
        assert!(e.message().contains("ofi_mrail"), "{e}");
    }
    let e = getinfo(Some(&soft_hints("127.0.0.1").prov_name("verbs"))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoData);
    assert!(e.message().contains("verbs"), "{e}");
}

#[test]
fn getinfo_needs_rails_that_resolve() {
    let psm = PsmConfig::builder().name_server(false).build().unwrap();
    let none = Hints::new()
        .engine(EngineChoice::Soft)
        .config(psm.clone())
        .mrail_config(MrailConfig::builder().build())
        .provider(Provider::Mrail);
    let e = getinfo(Some(&none)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoData);
    assert!(e.message().contains("FI_OFI_MRAIL_ADDR"), "{e}");
    // An interface that does not exist is named in the error.
    let e = getinfo(Some(
        &soft_hints("lo,psmrailnope0").provider(Provider::Mrail),
    ))
    .unwrap_err();
    assert!(e.message().contains("psmrailnope0"), "{e}");
    // The variables are read when the hints carry no configuration.
    let vars = Hints::new()
        .engine(EngineChoice::Soft)
        .config(psm)
        .vars([
            ("FI_OFI_MRAIL_ADDR", "lo,127.0.0.1"),
            ("FI_OFI_MRAIL_CONFIG", "1024:round-robin,-1:striping"),
            ("SLURM_NTASKS_PER_NODE", "4"),
            ("SLURM_LOCALID", "3"),
        ])
        .provider(Provider::Mrail);
    let info = getinfo(Some(&vars)).unwrap().remove(0);
    let m = info.mrail().unwrap();
    assert_eq!(m.rails[0].name, "lo");
    assert_eq!(m.rails[0].ip, Some(std::net::Ipv4Addr::LOCALHOST));
    assert_eq!((m.local_rank, m.fixed_rail), (3, 1));
    assert_eq!(
        m.policy_table().to_string(),
        "1024:round-robin,ULONG_MAX:striping"
    );
}

#[test]
fn a_psm_info_does_not_open_an_mrail_fabric() {
    let psm = getinfo(Some(&soft_hints("127.0.0.1"))).unwrap().remove(0);
    let e = MrailFabric::open(&psm).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    assert!(e.message().contains("ofi_mrail"), "{e}");
}

#[test]
fn addresses_round_trip_through_the_av_and_as_text() {
    let n = open(2, 3, "16384:fixed,-1:striping", MSG_TAGGED, MANUAL);
    let a = &n.nodes[0];
    let name = n.nodes[1].ep.getname();
    assert_eq!(name.len(), 3);
    assert_eq!(a.av.lookup(n.addr(0, 1)).unwrap(), name);
    let text = name.to_string();
    assert!(text.starts_with("fi_addr_mrail://"), "{text}");
    assert_eq!(text.parse::<MrailAddr>().unwrap(), name);
    assert_eq!(a.av.straddr(n.addr(0, 1)).unwrap(), text);
    // Inserting the text form connects again and gives a new index.
    let again = a.av.insert_str(&text).unwrap();
    assert_ne!(again, n.addr(0, 1));
    assert_eq!(a.av.lookup(again).unwrap(), name);
    // A wrong number of rails, and garbage, are refused.
    let short = MrailAddr::new(name.rails()[..2].to_vec()).unwrap();
    let e = a.av.insert(&[short]).remove(0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    assert!(a.av.insert_str("fi_addr_mrail://zz").is_err());
    assert!(a.av.lookup(psmrail::fabric::FiAddr(99)).is_err());
}

/// Sends each size from node 0 to node 1 (tagged and untagged) and back,
/// checking every byte.
fn exchange_sizes(n: &MrailNodes, sizes: &[usize]) {
    let (a, b) = (&n.nodes[0].ep, &n.nodes[1].ep);
    for (k, &len) in sizes.iter().enumerate() {
        let seed = k as u64;
        let tag = 0xdead_0000_0000_0000 | k as u64;
        let r = b.trecv(vec![0u8; len], tag, 0);
        let s = a.tsend(n.addr(0, 1), tag, pattern(len, seed));
        let ((sent, _), (got, buf)) = n.drive(async { futures::join!(s, r) });
        assert_eq!(sent.unwrap().len, len);
        let got = got.unwrap();
        assert_eq!((got.len, got.tag, got.source), (len, tag, n.addr(1, 0)));
        assert!(
            buf.as_slice() == pattern(len, seed).as_slice(),
            "tagged {len} B"
        );
        // Untagged, the other way.
        let r = a.recv(vec![0u8; len]);
        let s = b.send(n.addr(1, 0), pattern(len, seed ^ 0x55));
        let ((sent, _), (got, buf)) = n.drive(async { futures::join!(s, r) });
        assert_eq!(sent.unwrap().len, len);
        assert_eq!(got.unwrap().len, len);
        assert!(
            buf.as_slice() == pattern(len, seed ^ 0x55).as_slice(),
            "untagged {len} B"
        );
    }
}

const SIZES: [usize; 12] = [
    0,
    1,
    7,
    40,
    41,
    1000,
    16384,
    16385,
    65536 + 3,
    1 << 20,
    (4 << 20) + 5,
    2,
];

#[test]
fn every_policy_carries_every_size() {
    for policy in [
        "16384:fixed,-1:striping",
        "-1:fixed",
        "-1:round-robin",
        "-1:striping",
        "100:striping,20000:round-robin,-1:striping",
    ] {
        let n = open(2, 3, policy, MSG_TAGGED, MANUAL);
        exchange_sizes(&n, &SIZES);
        let stats = n.nodes[0].ep.stats();
        assert_eq!(
            stats.malformed + stats.unknown_peer + stats.duplicates,
            0,
            "{policy}"
        );
    }
}

#[test]
fn auto_progress_carries_messages_too() {
    let n = open(
        2,
        2,
        "16384:fixed,-1:striping",
        MSG_TAGGED,
        ProgressKind::Auto,
    );
    exchange_sizes(&n, &[8, 20000, 1 << 20]);
}

#[test]
fn striping_spreads_parts_over_every_rail_and_fixed_uses_one() {
    let n = open(2, 3, "16384:fixed,-1:striping", MSG_TAGGED, MANUAL);
    exchange_sizes(&n, &[3 << 20]);
    let s = n.nodes[0].ep.stats();
    assert!(s.rails.iter().all(|r| r.stripes >= 1), "{s:?}");
    assert!(s.rails.iter().all(|r| r.bytes_sent >= 1 << 20), "{s:?}");
    let n = open(2, 3, "-1:fixed", MSG_TAGGED, MANUAL);
    exchange_sizes(&n, &[100, 1 << 20]);
    let s = n.nodes[0].ep.stats();
    let used: Vec<_> = s.rails.iter().map(|r| r.msgs_sent > 0).collect();
    assert_eq!(used.iter().filter(|u| **u).count(), 1, "{s:?}");
    assert!(used[n.nodes[0].ep.fixed_rail()]);
}

#[test]
fn messages_match_in_send_order_across_rails() {
    // Round-robin puts consecutive messages on different rails, and large
    // ones are striped: matching must still follow the send order.
    let n = open(2, 3, "4096:round-robin,-1:striping", MSG_TAGGED, MANUAL);
    let (a, b) = (&n.nodes[0].ep, &n.nodes[1].ep);
    let sizes: Vec<usize> = (0..120)
        .map(|i| match i % 7 {
            0 => 70_000,
            3 => 5000,
            _ => 8 + i,
        })
        .collect();
    n.drive(async {
        let sends: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let mut p = pattern(len, i as u64);
                p[..4].copy_from_slice(&(i as u32).to_le_bytes());
                a.tsend(n.addr(0, 1), 5, p)
            })
            .collect();
        // Receives are posted after every message is on its way: they meet
        // the unexpected queue in order.
        for (i, &len) in sizes.iter().enumerate() {
            let (got, buf) = b.trecv(vec![0u8; 100_000], 5, 0).await;
            let got = got.unwrap();
            assert_eq!(got.len, len, "message {i}");
            let idx = u32::from_le_bytes(buf.as_slice()[..4].try_into().unwrap());
            assert_eq!(idx as usize, i, "out of order");
            let mut want = pattern(len, i as u64);
            want[..4].copy_from_slice(&(i as u32).to_le_bytes());
            assert!(&buf.as_slice()[..len] == want.as_slice());
        }
        for s in sends {
            s.await.0.unwrap();
        }
    });
}

/// Rails whose engine takes control frames as they arrive still receive
/// those that come by the rail's rendezvous: with a small eager threshold
/// (frames above 256 bytes), and with no eager credit at all (every frame).
#[test]
fn control_frames_by_the_rails_rendezvous_still_arrive() {
    for (threshold, window) in [(256, 4 << 20), (64 << 10, 0)] {
        let mut soft = psmrail::engine::soft::SoftConfig::default();
        soft.protocol.eager_threshold = threshold;
        soft.protocol.peer_eager_window = window;
        let info = mrail_nodes::info(2, "16384:fixed,-1:striping", MSG_TAGGED, MANUAL);
        let hints = Hints::new()
            .engine(EngineChoice::Soft)
            .caps(MSG_TAGGED)
            .progress(MANUAL)
            .config(info.config().clone())
            .mrail_config(info.mrail().unwrap().config().clone())
            .soft_config(soft)
            .prov_name("ofi_mrail");
        let info = getinfo(Some(&hints)).unwrap().remove(0);
        let n = mrail_nodes::open_with(info, 2, |_, _, b| b);
        exchange_sizes(&n, &[0, 8, 300, 16384, 16385, 70_000]);
        // A burst sent before its receives: more frames than the few
        // receives such rails keep posted, small and large interleaved.
        let (a, b) = (&n.nodes[0].ep, &n.nodes[1].ep);
        n.drive(async {
            let sends: Vec<_> = (0..64)
                .map(|i| {
                    a.tsend(
                        n.addr(0, 1),
                        7,
                        pattern(if i % 2 == 0 { 8 } else { 2000 }, i),
                    )
                })
                .collect();
            for i in 0..64u64 {
                let len = if i % 2 == 0 { 8 } else { 2000 };
                let (got, buf) = b.trecv(vec![0u8; 4000], 7, 0).await;
                assert_eq!(got.unwrap().len, len, "message {i}");
                assert!(
                    &buf.as_slice()[..len] == pattern(len, i).as_slice(),
                    "message {i}"
                );
            }
            for s in sends {
                s.await.0.unwrap();
            }
        });
        let stats = b.stats();
        assert_eq!(stats.malformed + stats.unknown_peer + stats.duplicates, 0);
    }
}

#[test]
fn larger_receive_buffers_work_and_smaller_ones_truncate() {
    let n = open(2, 2, "16384:fixed,-1:striping", MSG_TAGGED, MANUAL);
    let (a, b) = (&n.nodes[0].ep, &n.nodes[1].ep);
    for len in [10usize, 100_000, 2 << 20] {
        // Larger buffer: the message's length, its bytes, nothing else.
        let r = b.trecv(vec![0xeeu8; len + 777], 1, 0);
        let s = a.tsend(n.addr(0, 1), 1, pattern(len, 3));
        let ((sent, _), (got, buf)) = n.drive(async { futures::join!(s, r) });
        sent.unwrap();
        assert_eq!(got.unwrap().len, len);
        assert!(&buf.as_slice()[..len] == pattern(len, 3).as_slice());
        assert!(buf.as_slice()[len..].iter().all(|&x| x == 0xee));
        // Smaller buffer: FI_ETRUNC with both lengths, the prefix placed;
        // the sender succeeds.
        let room = len / 2;
        let r = b.recv(vec![0u8; room]);
        let s = a.send(n.addr(0, 1), pattern(len, 4));
        let ((sent, _), (got, buf)) = n.drive(async { futures::join!(s, r) });
        sent.unwrap();
        let e = got.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Trunc);
        let t = e.truncation().unwrap();
        assert_eq!((t.msg_len, t.received), (len as u64, room));
        assert!(buf.as_slice() == &pattern(len, 4)[..room]);
    }
}

#[test]
fn untagged_and_tagged_messages_never_match_each_other() {
    let n = open(2, 2, "16384:fixed,-1:striping", MSG_TAGGED, MANUAL);
    let (a, b) = (&n.nodes[0].ep, &n.nodes[1].ep);
    let tagged_any = b.trecv(vec![0u8; 64], 0, u64::MAX);
    let untagged = b.recv(vec![0u8; 64]);
    let s1 = a.send(n.addr(0, 1), b"plain".to_vec());
    let s2 = a.tsend(n.addr(0, 1), 0, b"tagged".to_vec());
    let (_, _, (t, tb), (u, ub)) = n.drive(async { futures::join!(s1, s2, tagged_any, untagged) });
    assert_eq!(t.unwrap().len, 6);
    assert_eq!(&tb.as_slice()[..6], b"tagged");
    assert_eq!(u.unwrap().len, 5);
    assert_eq!(&ub.as_slice()[..5], b"plain");
}

#[test]
fn tag_and_ignore_bits_and_directed_receives() {
    let n = open(
        3,
        2,
        "16384:fixed,-1:striping",
        MSG_TAGGED | Caps::DIRECTED_RECV,
        MANUAL,
    );
    let (a, b, c) = (&n.nodes[0].ep, &n.nodes[1].ep, &n.nodes[2].ep);
    // Tags use all 64 bits; ignore masks work on them.
    let r = c.trecv(vec![0u8; 8], 0xffff_0000_0000_0000, 0x0000_ffff_ffff_ffff);
    let s = a.tsend(n.addr(0, 2), 0xffff_1234_5678_9abc, b"abcdefgh".to_vec());
    let ((sent, _), (got, _)) = n.drive(async { futures::join!(s, r) });
    sent.unwrap();
    assert_eq!(got.unwrap().tag, 0xffff_1234_5678_9abc);
    // A receive directed at B is not taken by A's message.
    let from_b = c.recv_from(n.addr(2, 1), vec![0u8; 8]);
    let any = c.recv(vec![0u8; 8]);
    let sa = a.send(n.addr(0, 2), b"from a".to_vec());
    let ((sent, _), (got_any, any_buf)) = n.drive(async { futures::join!(sa, any) });
    sent.unwrap();
    assert_eq!(got_any.unwrap().source, n.addr(2, 0));
    assert_eq!(&any_buf.as_slice()[..6], b"from a");
    let sb = b.send(n.addr(1, 2), b"from b".to_vec());
    let ((sent, _), (got_b, b_buf)) = n.drive(async { futures::join!(sb, from_b) });
    sent.unwrap();
    assert_eq!(got_b.unwrap().source, n.addr(2, 1));
    assert_eq!(&b_buf.as_slice()[..6], b"from b");
    // Without FI_DIRECTED_RECV a directed receive is refused.
    let m = open(2, 1, "-1:fixed", MSG_TAGGED, MANUAL);
    let (got, _) = m.drive(m.nodes[0].ep.recv_from(m.addr(0, 1), vec![0u8; 4]));
    assert_eq!(got.unwrap_err().kind(), ErrorKind::OpNotSupp);
}

#[test]
fn completion_queues_and_counters_alone_make_progress() {
    let info = mrail_nodes::info(2, "16384:fixed,-1:striping", MSG_TAGGED, MANUAL);
    let mut cqs = Vec::new();
    let mut counters = Vec::new();
    let n = mrail_nodes::open_with(info, 2, |_, d, b| {
        let cq = d.cq(CqAttr::new()).unwrap();
        let tx = d.counter(CounterAttr::new()).unwrap();
        let rx = d.counter(CounterAttr::new()).unwrap();
        cqs.push(cq.clone());
        counters.push((tx.clone(), rx.clone()));
        b.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)
            .bind_counter(&tx, CounterBind::SEND)
            .bind_counter(&rx, CounterBind::RECV)
    });
    let (a, b) = (&n.nodes[0].ep, &n.nodes[1].ep);
    // Receiver in a thread that only waits on its counter: that must
    // drive its rails (C's mrail counters never did).
    let (_, b_rx) = counters[1].clone();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| b_rx.wait(3, Some(Duration::from_secs(30))));
        b.post_trecv(vec![0u8; 10], 1, 0, 11).unwrap();
        b.post_trecv(vec![0u8; 300_000], 2, 0, 22).unwrap();
        b.post_recv(vec![0u8; 5], 33).unwrap();
        a.post_tsend(n.addr(0, 1), 1, b"0123456789".to_vec(), 1)
            .unwrap();
        a.post_tsend(n.addr(0, 1), 2, pattern(300_000, 9), 2)
            .unwrap();
        a.post_send(n.addr(0, 1), b"hello".to_vec(), 3).unwrap();
        let (a_tx, _) = &counters[0];
        a_tx.wait(3, Some(Duration::from_secs(30))).unwrap();
        waiter.join().unwrap().unwrap();
    });
    // The sender's CQ has its three sends, the receiver's its receives.
    let mut sent = Vec::new();
    while let Some(e) = cqs[0].read().unwrap() {
        assert!(e.flags.contains(CompletionFlags::SEND));
        sent.push(e.context);
    }
    sent.sort();
    assert_eq!(sent, [1, 2, 3]);
    let mut got = Vec::new();
    while let Some(e) = cqs[1].read().unwrap() {
        assert!(e.flags.contains(CompletionFlags::RECV));
        let buf = e.buffer.unwrap();
        match e.context {
            11 => assert_eq!((e.len, e.tag, buf.as_slice()), (10, 1, &b"0123456789"[..])),
            22 => assert!(e.len == 300_000 && buf.as_slice() == pattern(300_000, 9).as_slice()),
            33 => {
                assert_eq!((e.len, buf.as_slice()), (5, &b"hello"[..]));
                assert!(e.flags.contains(CompletionFlags::MSG));
            }
            other => panic!("context {other}"),
        }
        got.push(e.context);
    }
    assert_eq!(got.len(), 3);
    // Injects count at once, exactly once.
    let before = counters[0].0.read();
    a.tinject(n.addr(0, 1), 9, b"tiny").unwrap();
    assert_eq!(counters[0].0.read(), before + 1);
    let e = a.tinject(n.addr(0, 1), 9, &[0u8; 41]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MsgSize);
    // A posted receive can be cancelled: its CQ gets FI_ECANCELED.
    let posted = b.post_trecv(vec![0u8; 4], 77, 0, 44).unwrap();
    assert!(b.cancel(&posted).unwrap());
    let err = cqs[1].readerr().expect("cancelled entry");
    assert_eq!((err.context, err.error.kind()), (44, ErrorKind::Canceled));
    assert_eq!(err.buffer.unwrap().len(), 4);
}

#[test]
fn a_peer_missing_from_the_av_is_counted_never_a_crash() {
    let n = open(2, 2, "16384:fixed,-1:striping", MSG_TAGGED, MANUAL);
    let (a, b) = (&n.nodes[0].ep, &n.nodes[1].ep);
    // B forgets A: A's messages to B are dropped and counted.
    n.nodes[1].av.remove(&[n.addr(1, 0)]).unwrap();
    a.tinject(n.addr(0, 1), 1, b"lost").unwrap();
    // A striped send to B is refused by B (it cannot know who sent it).
    let (sent, buf) = n.drive(a.tsend(n.addr(0, 1), 2, vec![7u8; 200_000]));
    let e = sent.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(e.message().contains("refused"), "{e}");
    assert_eq!(buf.len(), 200_000);
    let stats = n.drive(async {
        loop {
            let s = b.stats();
            if s.unknown_peer >= 2 {
                return s;
            }
            futures::pending!();
        }
    });
    assert_eq!(stats.unknown_peer, 2);
    // B still works with others: A is back once inserted again.
    let again = n.nodes[1].av.insert(&[a.getname()]).remove(0).unwrap();
    let r = b.trecv(vec![0u8; 3], 3, 0);
    let s = a.tsend(n.addr(0, 1), 3, b"yes".to_vec());
    let ((sent, _), (got, _)) = n.drive(async { futures::join!(s, r) });
    sent.unwrap();
    assert_eq!(got.unwrap().source, again);
}

#[test]
fn dropped_and_forgotten_futures_lose_nothing() {
    let n = open(2, 2, "16384:fixed,-1:striping", MSG_TAGGED, MANUAL);
    let (a, b) = (&n.nodes[0].ep, &n.nodes[1].ep);
    // An unmatched receive dropped: withdrawn, the message goes to the
    // next receive.
    drop(b.trecv(vec![0u8; 8], 1, 0));
    let r = b.trecv(vec![0u8; 8], 1, 0);
    let s = a.tsend(n.addr(0, 1), 1, b"12345678".to_vec());
    let ((sent, _), (got, _)) = n.drive(async { futures::join!(s, r) });
    sent.unwrap();
    assert_eq!(got.unwrap().len, 8);
    // Striped transfers dropped mid-way on both sides, and forgotten.
    for round in 0..3u8 {
        let len = 16 << 20;
        let mut r = Box::pin(b.trecv(vec![0u8; len], 2, 0));
        let mut s = Box::pin(a.tsend(n.addr(0, 1), 2, pattern(len, u64::from(round))));
        // A few polls and progress rounds: the transfer gets under way.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        for _ in 0..(5 * round as usize) {
            let _ = r.as_mut().poll(&mut cx);
            let _ = s.as_mut().poll(&mut cx);
            for d in n.domains() {
                d.reactor().progress();
            }
        }
        match round {
            0 => drop((r, s)),
            1 => {
                std::mem::forget(r);
                drop(s);
            }
            _ => {
                drop(r);
                std::mem::forget(s);
            }
        }
        // The endpoints still carry a full exchange afterwards.
        exchange_sizes(&n, &[100, 200_000]);
    }
    // Dropping a send future before it was polled still sends it.
    drop(a.tsend(n.addr(0, 1), 4, pattern(500_000, 1)));
    let (got, buf) = n.drive(b.trecv(vec![0u8; 500_000], 4, 0));
    assert_eq!(got.unwrap().len, 500_000);
    assert!(buf.as_slice() == pattern(500_000, 1).as_slice());
}

#[test]
fn closing_fails_what_is_pending_and_refuses_new_work() {
    let n = open(2, 2, "16384:fixed,-1:striping", MSG_TAGGED, MANUAL);
    let b = n.nodes[1].ep.clone();
    let pending = b.trecv(vec![0u8; 8], 1, 0);
    let posted = n.nodes[1].ep.clone();
    drop(posted);
    b.clone().close().unwrap();
    let (got, buf) = n.drive(pending);
    assert_eq!(got.unwrap_err().kind(), ErrorKind::Canceled);
    assert_eq!(buf.len(), 8);
    let (got, _) = n.drive(b.trecv(vec![0u8; 8], 1, 0));
    assert_eq!(got.unwrap_err().kind(), ErrorKind::OpBadState);
    assert!(b.is_closed());
    b.close().unwrap();
}

#[test]
fn one_mrail_endpoint_per_domain_and_bindings_from_that_domain() {
    let info = mrail_nodes::info(2, "-1:fixed", MSG_TAGGED, MANUAL);
    let d1 = MrailFabric::open(&info).unwrap().domain(&info).unwrap();
    let d2 = MrailFabric::open(&info).unwrap().domain(&info).unwrap();
    let av1 = d1.av(AvAttr::new()).unwrap();
    let av2 = d2.av(AvAttr::new()).unwrap();
    let cq2 = d2.cq(CqAttr::new()).unwrap();
    let e = d1.endpoint(&info).bind_av(&av2).enable().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    let e = d1
        .endpoint(&info)
        .bind_av(&av1)
        .bind_cq(&cq2, CqBind::RECV)
        .enable()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    let e = d1.endpoint(&info).enable().unwrap_err();
    assert!(e.message().contains("address vector"), "{e}");
    let e = d1
        .endpoint(&info)
        .bind_av(&av1)
        .caps(Caps::ATOMIC)
        .enable()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoSys);
    let ep = d1.endpoint(&info).bind_av(&av1).enable().unwrap();
    let e = d1.endpoint(&info).bind_av(&av1).enable().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
    assert_eq!(
        d1.scalable_endpoint(&info).unwrap_err().kind(),
        ErrorKind::NoSys
    );
    assert_eq!(d1.srx_context(&info).unwrap_err().kind(), ErrorKind::NoSys);
    ep.close().unwrap();
    d1.endpoint(&info).bind_av(&av1).enable().unwrap();
}

/// A psm endpoint on the soft engine with its own address in its AV (it
/// talks to itself), with the domain and AV that keep it open.
fn psm_self_endpoint() -> (
    psmrail::fabric::Domain,
    psmrail::fabric::AddressVector,
    psmrail::fabric::Endpoint,
    psmrail::fabric::FiAddr,
) {
    let psm = getinfo(Some(&soft_hints("127.0.0.1"))).unwrap().remove(0);
    let domain = psmrail::fabric::Fabric::open(&psm)
        .unwrap()
        .domain(&psm)
        .unwrap();
    let av = domain.av(AvAttr::new()).unwrap();
    let ep = domain.endpoint(&psm).bind_av(&av).enable().unwrap();
    let me = av.insert(&[ep.getname()]).remove(0).unwrap();
    (domain, av, ep, me)
}

/// The same generic code over a psm endpoint and an mrail endpoint.
#[test]
fn code_generic_over_both_providers() {
    async fn round<E: MessageEndpoint>(
        a: &E,
        b: &E,
        to_b: psmrail::fabric::FiAddr,
        len: usize,
    ) -> Vec<u8> {
        let r = b.trecv(vec![0u8; len], 9, 0);
        let (sent, _) = a.tsend(to_b, 9, pattern(len, 1)).await;
        sent.unwrap();
        let (got, buf) = r.await;
        assert_eq!(got.unwrap().len, len);
        buf.into_vec().unwrap()
    }
    let m = open(2, 2, "16384:fixed,-1:striping", MSG_TAGGED, MANUAL);
    let got = m.drive(round(&m.nodes[0].ep, &m.nodes[1].ep, m.addr(0, 1), 100_000));
    assert_eq!(got, pattern(100_000, 1));
    let (domain, _av, ep, me) = psm_self_endpoint();
    let got = domain.reactor().block_on(round(&ep, &ep, me, 100_000));
    assert_eq!(got, pattern(100_000, 1));
    let _ = OpBuffer::empty();
}

/// Endpoints of both providers as trait objects in one table, the
/// operations posted when called (two receives match in the order they
/// were made, whatever order their futures are polled in).
#[test]
fn dyn_endpoints_of_both_providers() {
    use psmrail::ops::DynEndpoint;
    async fn two_in_order(a: &dyn DynEndpoint, b: &dyn DynEndpoint, to_b: psmrail::fabric::FiAddr) {
        let first = b.trecv(vec![0u8; 8].into(), 5, 0);
        let second = b.trecv(vec![0u8; 8].into(), 5, 0);
        for i in 1..=2u8 {
            let (sent, _) = a.tsend(to_b, 5, vec![i; 8].into()).await;
            sent.unwrap();
        }
        // Polled second first: it still holds the second message.
        let (got2, buf2) = second.await;
        let (got1, buf1) = first.await;
        assert_eq!((got1.unwrap().len, got2.unwrap().len), (8, 8));
        assert_eq!(buf1.as_slice(), &[1u8; 8]);
        assert_eq!(buf2.as_slice(), &[2u8; 8]);
        assert!(a.caps().contains(Caps::TAGGED));
        assert!(a.inject_size() > 0);
    }
    let m = open(2, 2, "16384:fixed,-1:striping", MSG_TAGGED, MANUAL);
    let (domain, _av, ep, me) = psm_self_endpoint();
    let table: Vec<(&dyn DynEndpoint, &dyn DynEndpoint, psmrail::fabric::FiAddr)> = vec![
        (&m.nodes[0].ep, &m.nodes[1].ep, m.addr(0, 1)),
        (&ep, &ep, me),
    ];
    m.drive(two_in_order(table[0].0, table[0].1, table[0].2));
    domain
        .reactor()
        .block_on(two_in_order(table[1].0, table[1].1, table[1].2));
}

#[test]
fn weighted_striping_follows_the_rails_rates() {
    // Configured rates: rail 1 three times as fast as rail 0, so it
    // carries three quarters of every striped message.
    let psm = PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .build()
        .unwrap();
    let cfg = MrailConfig::builder()
        .rails(RailAddr::parse_list("127.0.0.1,127.0.0.1").unwrap())
        .rail_rates([1000, 3000])
        .build();
    let hints = Hints::new()
        .provider(Provider::Mrail)
        .engine(EngineChoice::Soft)
        .config(psm)
        .mrail_config(cfg);
    let info = getinfo(Some(&hints)).unwrap().remove(0);
    let n = mrail_nodes::open_with(info, 2, |_, _, b| b);
    exchange_sizes(&n, &[4 << 20, (1 << 20) + 7, 3]);
    let s = n.nodes[0].ep.stats();
    let (r0, r1) = (s.rails[0].bytes_sent, s.rails[1].bytes_sent);
    let share = r1 as f64 / (r0 + r1) as f64;
    assert!(
        (0.70..0.80).contains(&share),
        "rail 1 carried {share:.3} ({r0} / {r1})"
    );
    assert_eq!(s.rails[0].rate_mbit, Some(1000));
    assert_eq!(s.rails[1].rate_mbit, Some(3000));
    // Rates that do not match the rails are refused at discovery.
    let bad = soft_hints("127.0.0.1,127.0.0.1").mrail_config(
        MrailConfig::builder()
            .rails(RailAddr::parse_list("127.0.0.1,127.0.0.1").unwrap())
            .rail_rates([1000])
            .build(),
    );
    let e = getinfo(Some(&bad.provider(Provider::Mrail))).unwrap_err();
    assert!(e.message().contains("PSMRAIL_MRAIL_RATES"), "{e}");
}

#[test]
fn learned_rates_appear_after_striped_traffic() {
    let n = open(2, 2, "16384:fixed,-1:striping", MSG_TAGGED, MANUAL);
    assert!(n.nodes[0]
        .ep
        .stats()
        .rails
        .iter()
        .all(|r| r.rate_mbit.is_none()));
    // A rail's rate needs three samples, each of eight parts or more
    // (or 100 ms of service): 32 messages of 4 MiB give each rail 32
    // parts each way.
    exchange_sizes(&n, &[4 << 20; 32]);
    let s = n.nodes[0].ep.stats();
    assert!(
        s.rails.iter().all(|r| r.rate_mbit.is_some_and(|m| m > 0)),
        "{s:?}"
    );
}

#[test]
fn a_peer_that_goes_away_fails_its_transfers_instead_of_hanging() {
    // A receive whose sender closes in the middle of the transfer, and a
    // send whose receiver closes before answering, both end with FI_EIO.
    let n = open(2, 2, "16384:fixed,-1:striping", MSG_TAGGED, MANUAL);
    let MrailNodes { mut nodes, info } = n;
    let b = nodes.pop().unwrap();
    let a = nodes.pop().unwrap();
    let to_b = a.addrs[1];
    let to_a = b.addrs[0];
    let len = 64 << 20;
    let mut recv = Box::pin(a.ep.trecv(vec![0u8; len], 1, 0));
    let mut send = Box::pin(b.ep.tsend(to_a, 1, pattern(len, 3)));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    // Until the data flows (the receive matched, parts are landing).
    let start = std::time::Instant::now();
    while a.ep.stats().rails.iter().all(|r| r.stripes == 0) {
        assert!(recv.as_mut().poll(&mut cx).is_pending());
        let _ = send.as_mut().poll(&mut cx);
        b.domain.reactor().progress();
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the transfer never started"
        );
    }
    drop(send);
    b.ep.clone().close().unwrap();
    b.domain.clone().close().unwrap();
    let t = std::time::Instant::now();
    let (got, _) = mrail_nodes::drive(std::slice::from_ref(&a.domain), recv);
    let e = got.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    println!("the receive failed after {:?}: {e}", t.elapsed());
    // A send to the closed peer: refused at once or failed, never hanging.
    let (sent, _) = mrail_nodes::drive(
        std::slice::from_ref(&a.domain),
        a.ep.tsend(to_b, 2, vec![1u8; 1 << 20]),
    );
    assert_eq!(sent.unwrap_err().kind(), ErrorKind::Io);
    drop(info);
}

/// A node of `info` whose address vector connects at first use.
fn lazy_node(
    info: &psmrail::fabric::Info,
) -> (
    psmrail::mrail::MrailDomain,
    psmrail::mrail::MrailAv,
    psmrail::mrail::MrailEndpoint,
) {
    let domain = MrailFabric::open(info).unwrap().domain(info).unwrap();
    let av = domain.av(AvAttr::new().lazy_connect(true)).unwrap();
    let ep = domain.endpoint(info).bind_av(&av).enable().unwrap();
    (domain, av, ep)
}

/// An address vector that connects at first use (`AvAttr::lazy_connect`):
/// inserting dials nothing, so it returns at once whatever the peer does;
/// an inject before a rail serves the peer answers `Again`; the first
/// message each way connects every rail, and every size then goes through
/// with its source named; an address whose endpoint is gone fails the
/// send with `FI_EIO` within `FI_PSM_TIMEOUT` instead of hanging.
#[test]
fn a_lazy_av_connects_each_peer_at_its_first_use() {
    let info = mrail_nodes::info(2, "16384:fixed,-1:striping", MSG_TAGGED, MANUAL);
    let node = || lazy_node(&info);
    let (da, ava, a) = node();
    let (db, avb, b) = node();
    let (dc, _, c) = node();
    let gone = c.getname();
    c.close().unwrap();
    dc.close().unwrap();
    // Inserted from this one thread, nobody progressing: nothing waits.
    let t = std::time::Instant::now();
    let to_b = ava.insert(&[b.getname()]).remove(0).unwrap();
    let to_a = avb.insert(&[a.getname()]).remove(0).unwrap();
    let to_gone = ava.insert(&[gone]).remove(0).unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "lazy inserts took {:?}",
        t.elapsed()
    );
    assert_eq!(ava.lookup(to_b).unwrap(), b.getname());
    let e = a.tinject(to_b, 1, b"early").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Again, "{e}");
    assert!(e.message().contains("connecting"), "{e}");
    let domains = [da.clone(), db.clone()];
    for (k, &len) in SIZES.iter().enumerate() {
        let tag = 0x1a2e_0000 | k as u64;
        let r = b.trecv(vec![0u8; len], tag, 0);
        let s = a.tsend(to_b, tag, pattern(len, k as u64));
        let ((sent, _), (got, buf)) = mrail_nodes::drive(&domains, async { futures::join!(s, r) });
        assert_eq!(sent.unwrap().len, len);
        let got = got.unwrap();
        assert_eq!((got.len, got.source), (len, to_a));
        assert!(
            buf.as_slice() == pattern(len, k as u64).as_slice(),
            "{len} B"
        );
        let r = a.recv(vec![0u8; len]);
        let s = b.send(to_a, pattern(len, !(k as u64)));
        let ((sent, _), (got, buf)) = mrail_nodes::drive(&domains, async { futures::join!(s, r) });
        assert_eq!(sent.unwrap().len, len);
        assert_eq!(got.unwrap().source, to_b);
        assert!(
            buf.as_slice() == pattern(len, !(k as u64)).as_slice(),
            "{len} B back"
        );
    }
    // Every rail connected on the way, both sides: striped sizes used both.
    for ep in [&a, &b] {
        let stripes: Vec<u64> = ep.stats().rails.iter().map(|r| r.stripes).collect();
        assert!(
            stripes.iter().all(|&n| n > 0),
            "stripes per rail {stripes:?}"
        );
    }
    let t = std::time::Instant::now();
    let (sent, _) = mrail_nodes::drive(&domains, a.send(to_gone, vec![5u8; 64]));
    let e = sent.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

/// A send to a peer of a lazy address vector that no rail has reached
/// yet waits for its first connects as long as the vector's connect
/// timeout allows, not only `FI_PSM_TIMEOUT` (2 s here): a job's first
/// all-to-all, every rank dialing every other at once, takes longer than
/// that on a loaded host. The peer makes no progress for 3.5 s, so its
/// handshakes wait; the send is still pending then, and completes once
/// the peer progresses.
#[test]
fn a_first_connect_slower_than_the_psm_timeout_still_delivers() {
    let info = mrail_nodes::info(2, "16384:fixed,-1:striping", MSG_TAGGED, MANUAL);
    let node = || lazy_node(&info);
    let (da, ava, a) = node();
    let (db, avb, b) = node();
    let to_b = ava.insert(&[b.getname()]).remove(0).unwrap();
    avb.insert(&[a.getname()]).remove(0).unwrap();
    let mut send = std::pin::pin!(a.tsend(to_b, 7, pattern(4096, 7)));
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_millis(3500) {
        if let std::task::Poll::Ready((r, _)) = send.as_mut().poll(&mut cx) {
            panic!(
                "the send ended after {:?} while its first connects were under way: {r:?}",
                t.elapsed()
            );
        }
        da.reactor().progress();
        std::thread::sleep(Duration::from_millis(1));
    }
    let recv = b.trecv(vec![0u8; 4096], 7, 0);
    let ((sent, _), (got, buf)) = mrail_nodes::drive(&[da.clone(), db.clone()], async {
        futures::join!(send, recv)
    });
    assert_eq!(sent.unwrap().len, 4096);
    assert_eq!(got.unwrap().len, 4096);
    assert!(buf.as_slice() == pattern(4096, 7).as_slice());
}

/// What a node's CQ reported: entries and error entries, by context.
#[derive(Default)]
struct Seen {
    ok: Vec<psmrail::fabric::CqEntry>,
    err: Vec<psmrail::fabric::CqErrEntry>,
}

/// Reads every node's CQ (which progresses its domain) until `done` holds
/// for what they reported, or 30 s.
fn collect(
    cqs: &[psmrail::fabric::CompletionQueue],
    seen: &mut [Seen],
    done: impl Fn(&[Seen]) -> bool,
) {
    let start = std::time::Instant::now();
    while !done(seen) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no completion came"
        );
        for (cq, s) in cqs.iter().zip(seen.iter_mut()) {
            match cq.read() {
                Ok(Some(e)) => s.ok.push(e),
                Ok(None) => {}
                Err(_) => s.err.push(cq.readerr().expect("an error entry")),
            }
        }
    }
}

/// One progress round of every node's domain.
fn progress_all(cqs: &[psmrail::fabric::CompletionQueue]) {
    for cq in cqs {
        let _ = cq.progress();
    }
}

fn has(s: &Seen, ctx: u64) -> bool {
    s.ok.iter().any(|e| e.context == ctx) || s.err.iter().any(|e| e.context == ctx)
}

fn entry(s: &Seen, ctx: u64) -> &psmrail::fabric::CqEntry {
    s.ok.iter().find(|e| e.context == ctx).expect("an entry")
}

#[test]
fn peeks_claims_discards_and_directed_receives_posted_with_contexts() {
    use psmrail::ops::PeekFlags;
    let info = mrail_nodes::info(
        2,
        "16384:fixed,-1:striping",
        MSG_TAGGED | Caps::DIRECTED_RECV,
        MANUAL,
    );
    let mut cqs = Vec::new();
    let n = mrail_nodes::open_with(info, 3, |_, d, b| {
        let cq = d.cq(CqAttr::new()).unwrap();
        cqs.push(cq.clone());
        b.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)
    });
    let mut seen: Vec<Seen> = (0..3).map(|_| Seen::default()).collect();
    let (a, b, c) = (&n.nodes[0].ep, &n.nodes[1].ep, &n.nodes[2].ep);
    let (from_a, from_b) = (n.addr(2, 0), n.addr(2, 1));
    const BIG: usize = 300_000;
    // Nothing queued: FI_ENOMSG.
    assert!(c
        .post_tpeek(None, 5, 0, PeekFlags::empty(), 1)
        .unwrap()
        .is_none());
    let e = cqs[2].readerr().expect("an FI_ENOMSG entry");
    assert_eq!((e.context, e.error.kind()), (1, ErrorKind::NoMsg));
    // A small and a large message from A, a small one from B, all tag 5/6.
    a.post_tsend(n.addr(0, 2), 5, pattern(10, 1), 101).unwrap();
    a.post_tsend(n.addr(0, 2), 6, pattern(BIG, 2), 102).unwrap();
    b.post_tsend(n.addr(1, 2), 5, pattern(10, 3), 201).unwrap();
    // Peek the large one until it is there: it stays queued.
    let mut ctx = 10;
    let peeked = loop {
        ctx += 1;
        if c.tpeek_from(None, 6, 0).unwrap().is_some() {
            assert!(c
                .post_tpeek(None, 6, 0, PeekFlags::empty(), ctx)
                .unwrap()
                .is_none());
            break entry_now(&cqs[2], ctx);
        }
        progress_all(&cqs);
    };
    assert_eq!((peeked.len, peeked.tag, peeked.source), (BIG, 6, from_a));
    // Claim B's small message by its source, receive exactly it.
    let claimed = loop {
        if let Some(cl) = c.tclaim_from(Some(from_b), 5, 0).unwrap() {
            break cl;
        }
        progress_all(&cqs);
    };
    assert_eq!(
        (claimed.peeked().len, claimed.peeked().source),
        (10, from_b)
    );
    c.post_trecv_claimed(claimed, vec![0u8; 16], 20).unwrap();
    // Claim the large one (still at A) and receive it striped.
    let large = c
        .post_tpeek(None, 6, 0, PeekFlags::CLAIM, 21)
        .unwrap()
        .expect("the large message");
    assert!(
        c.tpeek_from(None, 6, 0).unwrap().is_none(),
        "claimed: off the queue"
    );
    c.post_trecv_claimed(large, vec![0u8; BIG], 22).unwrap();
    // Discard A's small one with the peek itself.
    let _ = c
        .post_tpeek(Some(from_a), 5, 0, PeekFlags::DISCARD, 23)
        .unwrap();
    collect(&cqs, &mut seen, |s| {
        has(&s[2], 20) && has(&s[2], 21) && has(&s[2], 22) && has(&s[2], 23) && has(&s[0], 102)
    });
    let e = entry(&seen[2], 20);
    assert_eq!((e.len, e.tag, e.source), (10, 5, from_b));
    assert_eq!(
        &e.buffer.as_ref().unwrap().as_slice()[..10],
        pattern(10, 3).as_slice()
    );
    let e = entry(&seen[2], 22);
    assert_eq!((e.len, e.source), (BIG, from_a));
    assert!(e.buffer.as_ref().unwrap().as_slice() == pattern(BIG, 2).as_slice());
    assert!(entry(&seen[2], 23).buffer.is_none());
    assert!(c.tpeek_from(None, 5, !0).unwrap().is_none(), "nothing left");
    // A large message claimed and discarded: its sender still completes.
    a.post_tsend(n.addr(0, 2), 7, pattern(BIG, 4), 103).unwrap();
    let gone = loop {
        if let Some(cl) = c.tclaim_from(None, 7, 0).unwrap() {
            break cl;
        }
        progress_all(&cqs);
    };
    c.discard_claimed(gone, 24);
    collect(&cqs, &mut seen, |s| has(&s[2], 24) && has(&s[0], 103));
    assert!(
        seen[0].ok.iter().any(|e| e.context == 103),
        "the sender completed"
    );
    // Context-posted directed receives: B's message only, then A's.
    c.post_trecv_from(from_b, vec![0u8; 16], 9, 0, 30).unwrap();
    a.post_tsend(n.addr(0, 2), 9, b"from a".to_vec(), 104)
        .unwrap();
    b.post_tsend(n.addr(1, 2), 9, b"from b".to_vec(), 202)
        .unwrap();
    collect(&cqs, &mut seen, |s| has(&s[2], 30));
    let e = entry(&seen[2], 30);
    assert_eq!(&e.buffer.as_ref().unwrap().as_slice()[..6], b"from b");
    c.post_recv_from(from_a, vec![0u8; 16], 31).unwrap();
    c.post_trecv_from(from_a, vec![0u8; 16], 9, 0, 32).unwrap();
    a.post_send(n.addr(0, 2), b"untagged".to_vec(), 105)
        .unwrap();
    collect(&cqs, &mut seen, |s| has(&s[2], 31) && has(&s[2], 32));
    assert_eq!(
        &entry(&seen[2], 32).buffer.as_ref().unwrap().as_slice()[..6],
        b"from a"
    );
    assert_eq!(entry(&seen[2], 31).len, 8);
}

/// The entry `ctx` a peek just pushed to `cq`.
fn entry_now(cq: &psmrail::fabric::CompletionQueue, ctx: u64) -> psmrail::fabric::CqEntry {
    loop {
        let e = cq.read().unwrap().expect("the peek's entry");
        if e.context == ctx {
            return e;
        }
    }
}
