//! No hidden blocking on the async path: inside a current-thread tokio
//! runtime, a task ticking every millisecond keeps ticking (no gap over
//! [`MAX_GAP`]) while an address vector's `insert_async` waits for a peer
//! that never answers, while `close_async` of an endpoint or a domain
//! sleeps its `FI_PSM_DELAY`, and while the last handle of a domain is
//! dropped on the runtime's thread; the waits themselves still happen (the
//! connect timeout, the delay). A dropped insert future records nothing;
//! the async forms give what the blocking forms give; `getinfo`'s probe of
//! the PSM library runs once per process.
//!
//! The soft engine runs in this process; the native engine's scenarios run
//! in child processes of this test binary (PSM allows one endpoint per
//! process), skipped when libpsm cannot load unless
//! `PSMRAIL_REQUIRE_NATIVE=1`.

mod support;

use futures::FutureExt;
use psmrail::config::PsmConfig;
use psmrail::engine::soft::SoftEpid;
use psmrail::engine::Epid;
use psmrail::fabric::{
    getinfo, AvAttr, AvType, Caps, Domain, EngineChoice, Fabric, Hints, Info, ProgressKind,
};
use psmrail::ErrorKind;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::peer::{role, ChildIo, Peer};

/// The longest a 1 ms ticker may go without a tick (the machine is a
/// loaded 2-core one: 50 ms is far above scheduling noise, far below the
/// waits under test).
const MAX_GAP: Duration = Duration::from_millis(50);
/// How long the parent waits for a child's line.
const LINE: Duration = Duration::from_secs(60);

fn soft_info(delay: Duration) -> Info {
    let config = PsmConfig::builder_from_env()
        .unwrap()
        .name_server(false)
        .delay(delay)
        .build()
        .unwrap();
    let hints = Hints::new()
        .engine(EngineChoice::Soft)
        .caps(Caps::MSG | Caps::TAGGED)
        .progress(ProgressKind::Manual)
        .config(config);
    getinfo(Some(&hints)).unwrap().remove(0)
}

fn soft_domain(delay: Duration) -> (Info, Domain) {
    let info = soft_info(delay);
    let domain = Fabric::open(&info).unwrap().domain(&info).unwrap();
    (info, domain)
}

/// An epid whose TCP port accepts connections but never answers the
/// handshake: connecting to it can only time out.
fn silent_peer() -> (TcpListener, Epid) {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let epid = SoftEpid::new(Ipv4Addr::LOCALHOST, port, 1)
        .unwrap()
        .to_epid();
    (l, epid)
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// Runs `work` on `rt` beside a task ticking every millisecond; gives
/// `work`'s output, how long it took, and the longest gap between ticks
/// while it ran.
fn with_ticker<F: std::future::Future>(
    rt: &tokio::runtime::Runtime,
    work: F,
) -> (F::Output, Duration, Duration) {
    rt.block_on(async {
        let gap = Arc::new(AtomicU64::new(0));
        let theirs = gap.clone();
        let ticker = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(1));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last = Instant::now();
            loop {
                every.tick().await;
                let now = Instant::now();
                let us = now.duration_since(last).as_micros() as u64;
                theirs.fetch_max(us, Ordering::Relaxed);
                last = now;
            }
        });
        // The ticker runs before the work starts.
        tokio::time::sleep(Duration::from_millis(10)).await;
        gap.store(0, Ordering::Relaxed);
        let start = Instant::now();
        let out = work.await;
        let took = start.elapsed();
        // One more tick: a gap that ends only after the work counts too.
        tokio::time::sleep(Duration::from_millis(5)).await;
        ticker.abort();
        let gap = Duration::from_micros(gap.load(Ordering::Relaxed));
        (out, took, gap)
    })
}

// ----- soft engine -------------------------------------------------------------------

#[test]
fn insert_async_to_a_silent_peer_keeps_the_runtime_ticking() {
    let (_info, domain) = soft_domain(Duration::ZERO);
    let timeout = Duration::from_millis(1500);
    let av = domain.av(AvAttr::new().connect_timeout(timeout)).unwrap();
    let (_listener, silent) = silent_peer();
    let rt = current_thread();
    let (results, took, gap) = with_ticker(&rt, av.insert_async(&[silent]));
    assert_eq!(results.len(), 1);
    let e = results.into_iter().next().unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
    assert!(
        took >= timeout - Duration::from_millis(100),
        "took {took:?}"
    );
    assert!(
        gap < MAX_GAP,
        "the ticker was starved for {gap:?} of {took:?}"
    );
    assert_eq!(av.count(), 0, "a map keeps no failed insertion");
}

#[test]
fn insert_service_async_keeps_the_runtime_ticking() {
    // The name-server query to a port that accepts and never answers.
    let (_info, domain) = soft_domain(Duration::ZERO);
    let timeout = Duration::from_millis(800);
    let av = domain.av(AvAttr::new().connect_timeout(timeout)).unwrap();
    let rt = current_thread();
    let (result, took, gap) = with_ticker(&rt, av.insert_service_async("192.0.2.1", 7u32));
    assert!(result.is_err());
    assert!(
        gap < MAX_GAP,
        "the ticker was starved for {gap:?} of {took:?}"
    );
}

#[test]
fn a_dropped_insert_records_nothing() {
    let (_info, domain) = soft_domain(Duration::ZERO);
    let timeout = Duration::from_millis(600);
    for av_type in [AvType::Table, AvType::Map] {
        let av = domain
            .av(AvAttr::new().av_type(av_type).connect_timeout(timeout))
            .unwrap();
        let (_listener, silent) = silent_peer();
        let mut insert = av.insert_async(&[silent, domain.epid()]);
        // Polled once (its connect starts), then dropped mid-way.
        assert!((&mut insert).now_or_never().is_none());
        drop(insert);
        // Its thread ends within the connect timeout; nothing was recorded.
        std::thread::sleep(timeout + Duration::from_millis(500));
        assert_eq!(av.count(), 0, "{av_type:?}: no entry, no index, no hole");
        assert_eq!(av.addr_of_epid(silent), None);
        assert_eq!(av.addr_of_epid(domain.epid()), None);
        // The AV goes on: the next insert takes the first index.
        let me = av.insert(&[domain.epid()]).remove(0).unwrap();
        assert_eq!(av.lookup(me).unwrap(), domain.epid());
        if av_type == AvType::Table {
            assert_eq!(me.0, 0);
        }
        assert_eq!(av.count(), 1);
    }
    // Dropped before its first poll: nothing starts.
    let av = domain.av(AvAttr::new()).unwrap();
    drop(av.insert_async(&[domain.epid()]));
    assert_eq!(av.count(), 0);
}

#[test]
fn async_inserts_give_what_the_blocking_ones_give() {
    let (_info, domain) = soft_domain(Duration::ZERO);
    let me = domain.epid();
    let nobody = support::soft_raw::closed_port_epid();
    for av_type in [AvType::Table, AvType::Map] {
        for lazy in [false, true] {
            let attr = AvAttr::new()
                .av_type(av_type)
                .lazy_connect(lazy)
                .connect_timeout(Duration::from_secs(2));
            let sync_av = domain.av(attr.clone()).unwrap();
            let async_av = domain.av(attr).unwrap();
            let batch = [me, nobody, me];
            let sync: Vec<_> = sync_av.insert(&batch);
            let asynced = futures::executor::block_on(async_av.insert_async(&batch));
            assert_eq!(sync.len(), asynced.len());
            for (s, a) in sync.iter().zip(&asynced) {
                match (s, a) {
                    (Ok(s), Ok(a)) => {
                        assert_eq!(sync_av.lookup(*s).unwrap(), async_av.lookup(*a).unwrap());
                        if av_type == AvType::Table {
                            assert_eq!(s, a);
                        }
                    }
                    (Err(s), Err(a)) => assert_eq!(s.kind(), a.kind(), "{s} / {a}"),
                    _ => panic!("{av_type:?} lazy {lazy}: {s:?} vs {a:?}"),
                }
            }
            assert_eq!(sync_av.count(), async_av.count());
            let text = me.to_string();
            let s = sync_av
                .insert_str(&text)
                .map(|a| sync_av.lookup(a).unwrap());
            let a = futures::executor::block_on(async_av.insert_str_async(&text))
                .map(|a| async_av.lookup(a).unwrap());
            assert_eq!(s.unwrap(), a.unwrap());
            let bad = futures::executor::block_on(async_av.insert_str_async("zz"));
            assert_eq!(bad.unwrap_err().kind(), ErrorKind::Inval);
        }
    }
    // After the domain closed: the blocking form's error, at once.
    let av = domain.av(AvAttr::new()).unwrap();
    domain.close().unwrap();
    let r = futures::executor::block_on(av.insert_async(&[me]));
    assert_eq!(r[0].as_ref().unwrap_err().kind(), ErrorKind::OpBadState);
}

#[test]
fn endpoint_close_async_keeps_the_runtime_ticking_and_still_lingers() {
    let delay = Duration::from_secs(1);
    let (info, domain) = soft_domain(delay);
    let ep = domain.endpoint(&info).caps(Caps::TAGGED).enable().unwrap();
    // The endpoint holds the domain's last handle: its close closes it.
    drop(domain);
    let rt = current_thread();
    let (result, took, gap) = with_ticker(&rt, ep.close_async());
    result.unwrap();
    assert!(took >= delay, "FI_PSM_DELAY is still given: took {took:?}");
    assert!(
        gap < MAX_GAP,
        "the ticker was starved for {gap:?} of {took:?}"
    );
}

#[test]
fn domain_close_async_keeps_the_runtime_ticking_and_still_lingers() {
    let delay = Duration::from_secs(1);
    let (info, domain) = soft_domain(delay);
    let ep = domain.endpoint(&info).caps(Caps::TAGGED).enable().unwrap();
    let rt = current_thread();
    let (result, took, gap) = with_ticker(&rt, domain.close_async());
    result.unwrap();
    assert!(took >= delay, "FI_PSM_DELAY is still given: took {took:?}");
    assert!(
        gap < MAX_GAP,
        "the ticker was starved for {gap:?} of {took:?}"
    );
    assert!(ep.is_closed(), "every handle sees the close");
    // The sync form agrees: closing again is Ok at once.
    let start = Instant::now();
    ep.domain().close().unwrap();
    assert!(start.elapsed() < Duration::from_millis(100));
}

#[test]
fn a_dropped_close_async_still_closes() {
    let delay = Duration::from_millis(300);
    let (info, domain) = soft_domain(delay);
    let ep = domain.endpoint(&info).caps(Caps::TAGGED).enable().unwrap();
    let mut close = domain.clone().close_async();
    assert!((&mut close).now_or_never().is_none());
    drop(close);
    assert!(ep.is_closed());
    // Unpolled: nothing happens, only the handle goes.
    let (_info, other) = soft_domain(Duration::ZERO);
    drop(other.clone().close_async());
    assert!(other.av(AvAttr::new()).is_ok());
}

#[cfg(feature = "tokio")]
#[test]
fn dropping_the_last_handle_on_a_runtime_thread_does_not_sleep() {
    let delay = Duration::from_secs(1);
    let (info, domain) = soft_domain(delay);
    let ep = domain.endpoint(&info).caps(Caps::TAGGED).enable().unwrap();
    let before = psmrail::hooks::lingering_domains();
    let rt = current_thread();
    let ((), took, gap) = with_ticker(&rt, async move {
        drop(ep);
        drop(domain);
    });
    assert!(took < MAX_GAP, "the drop took {took:?}");
    assert!(gap < MAX_GAP, "the ticker was starved for {gap:?}");
    // The delay is still given, on a thread of its own.
    std::thread::sleep(delay / 2);
    assert_eq!(psmrail::hooks::lingering_domains(), before + 1);
    let deadline = Instant::now() + delay + Duration::from_secs(5);
    while psmrail::hooks::lingering_domains() > before {
        assert!(
            Instant::now() < deadline,
            "the background close did not end"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn dropping_the_last_handle_outside_a_runtime_still_lingers_there() {
    let delay = Duration::from_millis(300);
    let (_info, domain) = soft_domain(delay);
    let start = Instant::now();
    drop(domain);
    assert!(start.elapsed() >= delay, "took {:?}", start.elapsed());
}

#[test]
fn getinfo_probes_the_psm_library_once_per_process() {
    let hints = Hints::new().engine(EngineChoice::Auto);
    let _ = getinfo(Some(&hints));
    let start = Instant::now();
    for _ in 0..10 {
        let _ = getinfo(Some(&hints));
    }
    let each = start.elapsed() / 10;
    assert!(each < Duration::from_millis(10), "getinfo took {each:?}");
}

// ----- native engine, in child processes ---------------------------------------------

fn native_info(delay: Duration) -> Info {
    let config = PsmConfig::builder()
        .name_server(false)
        .delay(delay)
        .build()
        .unwrap();
    let hints = Hints::new()
        .engine(EngineChoice::Native)
        .caps(Caps::MSG | Caps::TAGGED)
        .config(config);
    getinfo(Some(&hints)).unwrap().remove(0)
}

/// The children's side: one native scenario, reported as
/// `done <took µs> <gap µs>`.
fn child(role: &str) {
    let mut io = ChildIo::new();
    let delay = Duration::from_secs(1);
    let info = native_info(delay);
    let domain = Fabric::open(&info).unwrap().domain(&info).unwrap();
    let rt = current_thread();
    let (took, gap) = match role {
        "insert" => {
            let av = domain.av(AvAttr::new()).unwrap();
            let sync_av = domain.av(AvAttr::new().av_type(AvType::Table)).unwrap();
            let me = domain.epid();
            let (results, took, gap) = with_ticker(&rt, av.insert_async(&[me, me]));
            let sync = sync_av.insert(&[me, me]);
            for (a, s) in results.iter().zip(&sync) {
                assert_eq!(
                    av.lookup(*a.as_ref().unwrap()).unwrap(),
                    sync_av.lookup(*s.as_ref().unwrap()).unwrap()
                );
            }
            (took, gap)
        }
        "endpoint_close" => {
            let ep = domain.endpoint(&info).caps(Caps::TAGGED).enable().unwrap();
            drop(domain);
            let (r, took, gap) = with_ticker(&rt, ep.close_async());
            r.unwrap();
            assert!(took >= delay, "took {took:?}");
            (took, gap)
        }
        "domain_close" => {
            let (r, took, gap) = with_ticker(&rt, domain.close_async());
            r.unwrap();
            assert!(took >= delay, "took {took:?}");
            (took, gap)
        }
        #[cfg(feature = "tokio")]
        "drop" => {
            let ((), took, gap) = with_ticker(&rt, async move { drop(domain) });
            assert!(psmrail::hooks::lingering_domains() == 1);
            let deadline = Instant::now() + Duration::from_secs(10);
            while psmrail::hooks::lingering_domains() > 0 {
                assert!(
                    Instant::now() < deadline,
                    "the background close did not end"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            (took, gap)
        }
        other => panic!("unknown role {other}"),
    };
    io.send_line(&format!("done {} {}", took.as_micros(), gap.as_micros()));
}

fn native(test: &str, role_name: &str) -> Option<(Duration, Duration)> {
    if let Some(r) = role() {
        child(&r);
        return None;
    }
    if !support::native::available() {
        return None;
    }
    let mut env = vec![];
    if std::env::var_os("PSM2_DEVICES").is_none() {
        env.push(("PSM2_DEVICES", "self,shm"));
    }
    let mut peer = Peer::spawn(test, role_name, &env);
    let line = peer.recv_line(LINE);
    assert!(peer.wait(LINE).success(), "{test}: the child failed");
    let mut words = line
        .split(' ')
        .skip(1)
        .map(|w| Duration::from_micros(w.parse().unwrap_or_else(|e| panic!("{line:?}: {e}"))));
    let (took, gap) = (words.next().unwrap(), words.next().unwrap());
    eprintln!("{test}: took {took:?}, longest gap between ticks {gap:?}");
    Some((took, gap))
}

#[test]
fn native_insert_async_keeps_the_runtime_ticking() {
    let Some((_, gap)) = native("native_insert_async_keeps_the_runtime_ticking", "insert") else {
        return;
    };
    assert!(gap < MAX_GAP, "the ticker was starved for {gap:?}");
}

#[test]
fn native_endpoint_close_async_keeps_the_runtime_ticking() {
    let test = "native_endpoint_close_async_keeps_the_runtime_ticking";
    let Some((_, gap)) = native(test, "endpoint_close") else {
        return;
    };
    assert!(gap < MAX_GAP, "the ticker was starved for {gap:?}");
}

#[test]
fn native_domain_close_async_keeps_the_runtime_ticking() {
    let test = "native_domain_close_async_keeps_the_runtime_ticking";
    let Some((_, gap)) = native(test, "domain_close") else {
        return;
    };
    assert!(gap < MAX_GAP, "the ticker was starved for {gap:?}");
}

#[cfg(feature = "tokio")]
#[test]
fn native_dropping_the_last_handle_on_a_runtime_thread_does_not_sleep() {
    let test = "native_dropping_the_last_handle_on_a_runtime_thread_does_not_sleep";
    let Some((took, gap)) = native(test, "drop") else {
        return;
    };
    assert!(took < MAX_GAP, "the drop took {took:?}");
    assert!(gap < MAX_GAP, "the ticker was starved for {gap:?}");
}
