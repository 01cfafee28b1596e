//! RMA on the multi-rail provider, in one process on loopback rails:
//! registration on every rail and raw keys, reads and writes striped over
//! the rails for every length (zero and fewer bytes than rails included),
//! several remote ranges, refusals that leave the target unchanged,
//! `writedata`'s one entry after the last stripe, counters, dropped
//! futures and regions closed under transfers.

mod support;

use psmrail::fabric::{
    Caps, CompletionFlags, CounterAttr, CounterBind, CqAttr, CqBind, MrAccess, ProgressKind,
    RawKey, RAW_KEY_SIZE,
};
use psmrail::mrail::{MrailMemoryRegion, MrailRmaOp};
use psmrail::ops::{RmaEndpoint, RmaIov};
use psmrail::ErrorKind;
use support::mrail_nodes::{self, open, open_with, MrailNodes};
use support::payload::pattern;

const RMA: Caps = Caps::MSG.union(Caps::TAGGED).union(Caps::RMA);
const MANUAL: ProgressKind = ProgressKind::Manual;
const STRIPE_ALL: &str = "ULONG_MAX:striping";
const REGION: usize = 24 << 20;
const RW: MrAccess = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);

/// Node 1's region, filled with `fill`, and node 0's key for it.
fn target(n: &MrailNodes, access: MrAccess, fill: u8) -> (MrailMemoryRegion, u64) {
    let mr = n.nodes[1]
        .domain
        .register(vec![fill; REGION], access, None)
        .unwrap();
    let key = n.nodes[0].domain.map_raw(&mr.raw_key()).unwrap();
    (mr, key)
}

fn region_bytes(mr: &MrailMemoryRegion) -> Vec<u8> {
    let mut all = vec![0u8; mr.len()];
    mr.read_at(0, &mut all).unwrap();
    all
}

fn run(n: &MrailNodes, op: MrailRmaOp) -> (psmrail::Result<()>, Vec<u8>) {
    let (r, buf) = n.drive(op);
    (r, buf.into_vec().unwrap_or_default())
}

#[test]
fn raw_keys_are_every_rails_key_in_rail_order() {
    let n = open(2, 3, STRIPE_ALL, RMA, MANUAL);
    assert_eq!(n.info.domain_attr.mr_key_size, 3 * RAW_KEY_SIZE);
    assert!(n.info.caps.contains(Caps::RMA));
    let d = &n.nodes[1].domain;
    let mr = d.register(vec![0u8; 64], RW, None).unwrap();
    let raw = mr.raw_key();
    assert_eq!(raw.as_bytes().len(), mr.key_size());
    for (i, chunk) in raw.as_bytes().chunks_exact(RAW_KEY_SIZE).enumerate() {
        assert_eq!(
            RawKey::from_bytes(chunk).key().unwrap(),
            mr.rail(i).unwrap().key()
        );
    }
    // A requested key is the key on every rail; taken on one, nothing stays.
    let k7 = d.register(vec![0u8; 8], RW, Some(7)).unwrap();
    assert!((0..3).all(|i| k7.rail(i).unwrap().key() == 7));
    let _held = d
        .rail(2)
        .unwrap()
        .register(vec![0u8; 8], RW, Some(9))
        .unwrap();
    let busy = d.register(vec![0u8; 8], RW, Some(9)).unwrap_err();
    assert_eq!(busy.kind(), ErrorKind::Busy);
    assert!(busy.message().contains("rail 2"), "{busy}");
    assert!(d
        .rail(0)
        .unwrap()
        .register(vec![0u8; 8], RW, Some(9))
        .is_ok());
    // A raw key of the wrong size does not map; unmapping twice fails.
    let short = n.nodes[0].domain.map_raw(&RawKey::from_key(1)).unwrap_err();
    assert_eq!(short.kind(), ErrorKind::Inval);
    let k = n.nodes[0].domain.map_raw(&raw).unwrap();
    n.nodes[0].domain.unmap_key(k).unwrap();
    assert_eq!(
        n.nodes[0].domain.unmap_key(k).unwrap_err().kind(),
        ErrorKind::Inval
    );
}

#[test]
fn striped_writes_and_reads_of_every_length() {
    for rails in [2, 4] {
        let n = open(2, rails, STRIPE_ALL, RMA, MANUAL);
        let (mr, key) = target(&n, RW, 0);
        let ep = &n.nodes[0].ep;
        let peer = n.addr(0, 1);
        for (i, len) in [0usize, 1, 2, 3, 5, 4096, 100_001, (4 << 20) + 3]
            .into_iter()
            .enumerate()
        {
            let offset = 7 + i * 11;
            let data = pattern(len, i as u64);
            let (r, back) = run(&n, ep.write(peer, data.clone(), offset as u64, key));
            r.unwrap_or_else(|e| panic!("{rails} rails, write of {len}: {e}"));
            assert_eq!(back, data, "the buffer comes back whole");
            let mut landed = vec![0u8; len];
            mr.read_at(offset, &mut landed).unwrap();
            assert!(landed == data, "{rails} rails: write of {len} bytes");
            let (r, got) = run(&n, ep.read(peer, vec![0u8; len], offset as u64, key));
            r.unwrap_or_else(|e| panic!("{rails} rails, read of {len}: {e}"));
            assert!(got == data, "{rails} rails: read of {len} bytes");
        }
        let stats = ep.stats();
        assert!(
            stats.rails.iter().all(|r| r.stripes > 0),
            "every rail carried stripes: {stats:?}"
        );
    }
}

#[test]
fn writemsg_and_readmsg_cover_several_ranges_in_order() {
    let n = open(2, 2, STRIPE_ALL, RMA, MANUAL);
    let (mr, key) = target(&n, RW, 0);
    let ep = &n.nodes[0].ep;
    let peer = n.addr(0, 1);
    let ranges = [(0u64, 1000u64), (5000, 300_000), (1 << 20, 7), (2 << 20, 0)];
    let iovs: Vec<RmaIov> = ranges
        .iter()
        .map(|&(offset, len)| RmaIov { offset, len, key })
        .collect();
    let total: u64 = ranges.iter().map(|r| r.1).sum();
    let data = pattern(total as usize, 3);
    let (r, _) = run(&n, ep.writemsg(peer, data.clone(), &iovs, None));
    r.unwrap();
    let mut at = 0usize;
    for (offset, len) in ranges {
        let mut landed = vec![0u8; len as usize];
        mr.read_at(offset as usize, &mut landed).unwrap();
        assert!(
            landed[..] == data[at..at + len as usize],
            "range at {offset}"
        );
        at += len as usize;
    }
    let (r, got) = run(&n, ep.readmsg(peer, vec![0u8; total as usize], &iovs));
    r.unwrap();
    assert!(got == data);
    // Ranges that do not add up to the buffer are refused at the call.
    let (r, _) = run(&n, ep.writemsg(peer, vec![0u8; 10], &iovs[..1], None));
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Inval);
    let (r, _) = run(&n, ep.readmsg(peer, vec![0u8; 10], &[]));
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Inval);
}

#[test]
fn refused_writes_change_no_byte_of_the_target() {
    let n = open(2, 2, STRIPE_ALL, RMA, MANUAL);
    let ep = &n.nodes[0].ep;
    let peer = n.addr(0, 1);
    let (mr, key) = target(&n, RW, 0xAA);
    let before = region_bytes(&mr);
    let big = pattern(4 << 20, 9);
    let expect_eacces = |what: &str, r: psmrail::Result<()>| {
        let e = r.expect_err(what);
        assert_eq!(e.kind(), ErrorKind::Access, "{what}: {e}");
        assert!(
            region_bytes(&mr) == before,
            "{what}: the target is unchanged"
        );
    };
    // Past the end: the first stripe alone would fit. The error names
    // the write as posted (not the zero-length check that found it).
    let at = (REGION - 1000) as u64;
    let (r, _) = run(&n, ep.write(peer, big.clone(), at, key));
    let e = r.as_ref().unwrap_err().to_string();
    assert!(
        e.contains(&format!("write of {} bytes at offset {at:#x}", 4 << 20)),
        "names the operation's length and offset: {e}"
    );
    assert!(!e.contains("of 0 bytes"), "{e}");
    expect_eacces("range past the end", r);
    // A remote offset whose end overflows.
    let (r, _) = run(&n, ep.write(peer, big.clone(), u64::MAX - 10, key));
    expect_eacces("overflowing range", r);
    // A key never mapped here.
    let (r, _) = run(&n, ep.write(peer, big.clone(), 0, key + 1000));
    expect_eacces("unmapped key", r);
    // A key good on rail 0 and unknown on rail 1.
    let mut mixed = mr.raw_key().as_bytes().to_vec();
    mixed[RAW_KEY_SIZE..].copy_from_slice(&0xdead_u64.to_le_bytes());
    let mixed = n.nodes[0]
        .domain
        .map_raw(&RawKey::from_bytes(&mixed))
        .unwrap();
    let (r, _) = run(&n, ep.write(peer, big.clone(), 0, mixed));
    let e = r.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Access, "{e}");
    assert!(e.message().contains("rail 1"), "names the rail: {e}");
    // writemsg whose last range lies past the end.
    let iovs = [
        RmaIov {
            offset: 0,
            len: 2 << 20,
            key,
        },
        RmaIov {
            offset: REGION as u64 - 10,
            len: 2 << 20,
            key,
        },
    ];
    let (r, _) = run(&n, ep.writemsg(peer, big.clone(), &iovs, Some(1)));
    expect_eacces("writemsg past the end", r);
    assert!(region_bytes(&mr) == before, "the target is unchanged");
    // Without the right.
    let (ro, ro_key) = target(&n, MrAccess::REMOTE_READ, 0x55);
    let (r, _) = run(&n, ep.write(peer, big.clone(), 0, ro_key));
    expect_eacces("read-only region", r);
    assert!(region_bytes(&ro).iter().all(|&b| b == 0x55));
    // A closed region.
    mr.close();
    let (r, _) = run(&n, ep.write(peer, big, 0, key));
    expect_eacces("closed region", r);
    let (r, _) = run(&n, ep.read(peer, vec![0u8; 1 << 20], 0, key));
    expect_eacces("read of a closed region", r);
    assert!(region_bytes(&mr) == before, "the target is unchanged");
}

#[test]
fn writedata_reports_once_after_every_stripe_landed() {
    let info = mrail_nodes::info(2, STRIPE_ALL, RMA, MANUAL);
    let mut cqs = Vec::new();
    let mut counters = Vec::new();
    let n = open_with(info, 2, |i, d, b| {
        let cq = d.cq(CqAttr::default()).unwrap();
        cqs.push(cq.clone());
        let b = b.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV);
        if i == 0 {
            let w = d.counter(CounterAttr::default()).unwrap();
            let r = d.counter(CounterAttr::default()).unwrap();
            counters.push(w.clone());
            counters.push(r.clone());
            b.bind_counter(&w, CounterBind::WRITE)
                .bind_counter(&r, CounterBind::READ)
        } else {
            b
        }
    });
    let (mr, key) = target(&n, RW, 0);
    let ep = &n.nodes[0].ep;
    let peer = n.addr(0, 1);
    let len = 8 << 20;
    let data = pattern(len, 5);
    let (r, _) = run(&n, ep.writedata(peer, data.clone(), 64, key, 0xfeed_beef));
    r.unwrap();
    let cq = &cqs[1];
    let entry = n.drive(async {
        loop {
            if let Some(e) = cq.read().unwrap() {
                return e;
            }
            futures::pending!();
        }
    });
    assert_eq!(entry.data, 0xfeed_beef);
    assert_eq!(entry.len, len);
    assert_eq!(
        entry.flags,
        CompletionFlags::REMOTE_WRITE | CompletionFlags::RMA | CompletionFlags::REMOTE_CQ_DATA
    );
    assert_eq!(entry.source, n.addr(1, 0));
    let mut landed = vec![0u8; len];
    mr.read_at(64, &mut landed).unwrap();
    assert!(landed == data, "every byte is there when the entry is");
    // One entry for the whole write, none for a plain write.
    let (r, _) = run(&n, ep.write(peer, data, 64, key));
    r.unwrap();
    for d in n.domains() {
        d.reactor().progress();
    }
    assert!(cq.read().unwrap().is_none());
    // The counters count operations, not stripes.
    let (r, _) = run(&n, ep.read(peer, vec![0u8; len], 64, key));
    r.unwrap();
    let (r, _) = run(&n, ep.write(peer, vec![0u8; 16], REGION as u64, key));
    assert!(r.is_err());
    let (w, rd) = (&counters[0], &counters[1]);
    assert_eq!((w.read(), w.read_err()), (2, 1));
    assert_eq!((rd.read(), rd.read_err()), (1, 0));
}

#[test]
fn remote_counters_and_missing_caps_are_refused() {
    let info = mrail_nodes::info(2, STRIPE_ALL, RMA, MANUAL);
    let n = open(1, 2, STRIPE_ALL, RMA, MANUAL);
    let d = &n.nodes[0].domain;
    let c = d.counter(CounterAttr::default()).unwrap();
    let e = d
        .endpoint(&info)
        .bind_av(&n.nodes[0].av)
        .bind_counter(&c, CounterBind::REMOTE_WRITE)
        .enable()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoSys, "{e}");
    assert!(e.message().contains("FI_RMA_EVENT"), "{e}");
    // An endpoint without FI_RMA cannot start RMA.
    let msg = open(2, 2, STRIPE_ALL, Caps::MSG | Caps::TAGGED, MANUAL);
    let mr = msg.nodes[1]
        .domain
        .register(vec![0u8; 64], RW, None)
        .unwrap();
    let key = msg.nodes[0].domain.map_raw(&mr.raw_key()).unwrap();
    let op = msg.nodes[0].ep.write(msg.addr(0, 1), vec![1u8; 8], 0, key);
    assert!(op.is_failed());
    let (r, buf) = msg.drive(op);
    assert_eq!(r.unwrap_err().kind(), ErrorKind::OpNotSupp);
    assert_eq!(buf.len(), 8, "the buffer comes back");
}

#[test]
fn dropped_futures_and_regions_closed_under_transfers_lose_nothing() {
    let n = open(2, 2, STRIPE_ALL, RMA, MANUAL);
    let (mr, key) = target(&n, RW, 0);
    let ep = &n.nodes[0].ep;
    let peer = n.addr(0, 1);
    // Dropped at once (checks in flight), then dropped mid-stripes.
    drop(ep.write(peer, pattern(8 << 20, 1), 0, key));
    drop(ep.read(peer, vec![0u8; 8 << 20], 0, key));
    let mut op = Box::pin(ep.write(peer, pattern(8 << 20, 2), 0, key));
    for _ in 0..50 {
        let _ = futures::FutureExt::now_or_never(op.as_mut());
        for d in n.domains() {
            d.reactor().progress();
        }
    }
    drop(op);
    // A region closed under a striped write: the write completes (the
    // memory lives on) and later ones are refused.
    let op = ep.write(peer, pattern(8 << 20, 3), 0, key);
    mr.close();
    let (r, _) = run(&n, op);
    if let Err(e) = r {
        assert_eq!(e.kind(), ErrorKind::Access, "{e}");
    }
    let (r, _) = run(&n, ep.write(peer, vec![1u8; 8], 0, key));
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Access);
    // The endpoint still works.
    let (mr2, key2) = target(&n, RW, 0);
    let (r, _) = run(&n, ep.write(peer, pattern(1 << 20, 4), 0, key2));
    r.unwrap();
    let mut got = vec![0u8; 1 << 20];
    mr2.read_at(0, &mut got).unwrap();
    assert!(got == pattern(1 << 20, 4));
}

/// One write-then-read, on any provider's endpoint.
async fn write_read<E: RmaEndpoint>(
    ep: &E,
    peer: psmrail::fabric::FiAddr,
    key: u64,
    data: Vec<u8>,
) -> psmrail::Result<Vec<u8>> {
    let len = data.len();
    let (w, _) = ep.write(peer, data, 100, key).await;
    w?;
    let (r, buf) = ep.read(peer, vec![0u8; len], 100, key).await;
    r?;
    Ok(buf.into_vec().unwrap())
}

#[test]
fn rma_code_generic_over_both_providers() {
    // mrail: a peer's mapped raw key.
    let n = open(2, 2, STRIPE_ALL, RMA, MANUAL);
    let (_mr, key) = target(&n, RW, 0);
    let data = pattern(1 << 20, 8);
    let back = n
        .drive(write_read(&n.nodes[0].ep, n.addr(0, 1), key, data.clone()))
        .unwrap();
    assert!(back == data);
    // psm: the region's key, the same function.
    let config = psmrail::config::PsmConfig::builder()
        .name_server(false)
        .delay(std::time::Duration::ZERO)
        .build()
        .unwrap();
    let hints = psmrail::fabric::Hints::new()
        .engine(psmrail::fabric::EngineChoice::Soft)
        .caps(Caps::MSG | Caps::RMA)
        .config(config);
    let info = psmrail::fabric::getinfo(Some(&hints)).unwrap().remove(0);
    let domain = psmrail::fabric::Fabric::open(&info)
        .unwrap()
        .domain(&info)
        .unwrap();
    let av = domain.av(psmrail::fabric::AvAttr::new()).unwrap();
    let ep = domain.endpoint(&info).bind_av(&av).enable().unwrap();
    let me = av.insert(&[ep.getname()]).remove(0).unwrap();
    let mr = domain.register(vec![0u8; 2 << 20], RW, None).unwrap();
    let back = domain
        .reactor()
        .block_on(write_read(
            &ep,
            me,
            domain.map_raw(&mr.raw_key()).unwrap(),
            data.clone(),
        ))
        .unwrap();
    assert!(back == data);
}
