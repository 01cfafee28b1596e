//! The libfabric objects (fabric, domain, address vector, endpoint) on the
//! soft engine, in-process (several domains in one process), plus one
//! native scenario in a child process.
//!
//! What is checked: the capability rule at endpoint enable (`FI_EBUSY`,
//! `FI_EOPNOTSUPP`) and the slot released at close; tag bits reserved at
//! enable; address-vector map and table semantics (indices, lookups, bad
//! addresses, holes, text form, dead peers); binding rules; closing with a
//! dead peer; the unsupported features (`FI_ENOSYS` naming each); the
//! name-server registration of endpoints; drop orders.
//!
//! The native test needs libpsm (`PSM2_DEVICES=self,shm` is set for its
//! child); without it the test prints why and passes, unless
//! `PSMRAIL_REQUIRE_NATIVE=1`.

mod support;

use psmrail::config::PsmConfig;
use psmrail::engine::soft::epid::SoftEpid;
use psmrail::engine::{EngineKind, Epid};
use psmrail::fabric::name_server::{query, NameServer};
use psmrail::fabric::{
    getinfo, AvAttr, AvType, Caps, CounterAttr, CounterBind, CqAttr, CqBind, Domain, EngineChoice,
    EpType, Fabric, FiAddr, Hints, Info, ProgressKind, Service, MSG_BIT, RMA_BIT,
};
use psmrail::{Error, ErrorKind};
use std::net::{Ipv4Addr, TcpListener};
use std::sync::mpsc;
use std::time::Duration;
use support::peer::{self, Peer};

/// Generous bound for "it returns at all" checks (not a speed check).
const HANG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(300);

fn config() -> PsmConfig {
    PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

fn info_with(hints: Hints) -> Info {
    getinfo(Some(&hints.engine(EngineChoice::Soft)))
        .unwrap()
        .remove(0)
}

fn info() -> Info {
    info_with(Hints::new().config(config()))
}

fn domain_of(info: &Info) -> Domain {
    Fabric::open(info).unwrap().domain(info).unwrap()
}

/// A domain whose own thread progresses it: in-process peers must answer
/// the connection handshake while the other domain blocks in `insert`
/// (across processes each side progresses itself).
fn peer_domain() -> Domain {
    let info = info_with(Hints::new().config(config()).progress(ProgressKind::Auto));
    domain_of(&info)
}

fn domain() -> (Info, Domain) {
    let info = info();
    let d = domain_of(&info);
    (info, d)
}

fn assert_kind<T: std::fmt::Debug>(r: Result<T, Error>, kind: ErrorKind) -> Error {
    let e = r.unwrap_err();
    assert_eq!(e.kind(), kind, "{e}");
    e
}

/// Runs `f` on a thread and fails if it has not returned within [`HANG`].
fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(HANG)
        .unwrap_or_else(|_| panic!("{what} did not return within {HANG:?}"))
}

/// An epid whose TCP port accepts connections but never answers the
/// handshake: connecting to it can only time out.
fn silent_peer() -> (TcpListener, Epid) {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    (
        l,
        SoftEpid::new(Ipv4Addr::LOCALHOST, port, 1)
            .unwrap()
            .to_epid(),
    )
}

// ----- capability rule ----------------------------------------------------------------

#[test]
fn second_receiver_of_a_role_is_busy() {
    let (info, d) = domain();
    let tagged = d.endpoint(&info).caps(Caps::TAGGED).enable().unwrap();
    let e = assert_kind(
        d.endpoint(&info).caps(Caps::TAGGED).enable(),
        ErrorKind::Busy,
    );
    assert!(
        e.to_string().contains("tagged receive"),
        "names the role: {e}"
    );
    // Send-only tagged endpoints do not take the role; a msg receiver is
    // another role. (Endpoints are kept: dropping one releases its slot.)
    let _sender = d
        .endpoint(&info)
        .caps(Caps::TAGGED | Caps::SEND)
        .enable()
        .unwrap();
    let _msg = d.endpoint(&info).caps(Caps::MSG).enable().unwrap();
    let e = assert_kind(
        d.endpoint(&info).caps(Caps::MSG | Caps::RECV).enable(),
        ErrorKind::Busy,
    );
    assert!(e.to_string().contains("message receive"), "{e}");
    // RMA and atomic targets, one each; initiators are free.
    let _target = d
        .endpoint(&info)
        .caps(Caps::RMA | Caps::ATOMIC)
        .enable()
        .unwrap();
    let e = assert_kind(d.endpoint(&info).caps(Caps::RMA).enable(), ErrorKind::Busy);
    assert!(e.to_string().contains("RMA target"), "{e}");
    assert_kind(
        d.endpoint(&info)
            .caps(Caps::ATOMIC | Caps::REMOTE_WRITE)
            .enable(),
        ErrorKind::Busy,
    );
    let _initiator = d
        .endpoint(&info)
        .caps(Caps::RMA | Caps::READ | Caps::WRITE)
        .enable()
        .unwrap();
    drop(tagged);
}

#[test]
fn caps_outside_the_domain_are_not_supported() {
    let info = info_with(Hints::new().config(config()).caps(Caps::TAGGED | Caps::MSG));
    let d = domain_of(&info);
    let e = assert_kind(
        d.endpoint(&info).caps(Caps::TAGGED | Caps::RMA).enable(),
        ErrorKind::OpNotSupp,
    );
    assert!(e.to_string().contains("RMA"), "names the cap: {e}");
    // Direction bits are not compared.
    d.endpoint(&info)
        .caps(Caps::TAGGED | Caps::SEND | Caps::RECV)
        .enable()
        .unwrap();
}

#[test]
fn closing_or_dropping_an_endpoint_releases_its_slot() {
    let (info, d) = domain();
    let ep = d.endpoint(&info).caps(Caps::TAGGED).enable().unwrap();
    let clone = ep.clone();
    ep.close().unwrap();
    assert!(clone.is_closed());
    // A second close (through another handle) is fine.
    clone.close().unwrap();
    let ep = d.endpoint(&info).caps(Caps::TAGGED).enable().unwrap();
    drop(ep);
    let ep = d.endpoint(&info).caps(Caps::TAGGED).enable().unwrap();
    assert_kind(
        d.endpoint(&info).caps(Caps::TAGGED).enable(),
        ErrorKind::Busy,
    );
    // Operations on a closed endpoint: bad state.
    let c = ep.clone();
    ep.close().unwrap();
    assert_kind(c.setopt_min_multi_recv(8), ErrorKind::OpBadState);
}

#[test]
fn enable_reserves_tag_bits_per_endpoint() {
    let (info, d) = domain();
    assert_eq!(d.reserved_tag_bits(), 0);
    d.endpoint(&info).caps(Caps::TAGGED).enable().unwrap();
    assert_eq!(d.reserved_tag_bits(), 0);
    let msg = d.endpoint(&info).caps(Caps::MSG).enable().unwrap();
    assert_eq!(d.reserved_tag_bits(), MSG_BIT);
    // The layout only grows.
    msg.close().unwrap();
    assert_eq!(d.reserved_tag_bits(), MSG_BIT);
    d.endpoint(&info).caps(Caps::RMA).enable().unwrap();
    assert_eq!(d.reserved_tag_bits(), MSG_BIT | RMA_BIT);

    // With AM messages and no tagged RMA nothing is reserved.
    let cfg = PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .am_msg(true)
        .tagged_rma(false)
        .build()
        .unwrap();
    let info = info_with(Hints::new().config(cfg));
    let d = domain_of(&info);
    d.endpoint(&info)
        .caps(Caps::MSG | Caps::RMA)
        .enable()
        .unwrap();
    assert_eq!(d.reserved_tag_bits(), 0);
}

#[test]
fn endpoint_accessors_and_options() {
    let (info, d) = domain();
    let ep = d
        .endpoint(&info)
        .caps(Caps::TAGGED)
        .ep_type(EpType::Dgram)
        .enable()
        .unwrap();
    assert_eq!(ep.getname(), d.epid());
    assert_eq!(ep.caps(), Caps::TAGGED);
    assert_eq!(ep.ep_type(), EpType::Dgram);
    assert!(ep.domain().same(&d));
    assert_eq!(ep.info().caps, info.caps);
    assert_eq!(ep.min_multi_recv(), 0, "C default");
    ep.setopt_min_multi_recv(4096).unwrap();
    assert_eq!(ep.min_multi_recv(), 4096);
    // Without a name server no service is registered.
    assert_eq!(ep.service(), 0);
    let unspec = d
        .endpoint(&info)
        .caps(Caps::MSG)
        .ep_type(EpType::Unspec)
        .enable()
        .unwrap();
    assert_eq!(unspec.ep_type(), EpType::Rdm);
}

// ----- binding ------------------------------------------------------------------------

#[test]
fn binding_objects_of_another_domain_is_invalid() {
    let (info, a) = domain();
    let b = domain_of(&info);
    let cq_b = b.cq(CqAttr::new()).unwrap();
    let cntr_b = b.counter(CounterAttr::new()).unwrap();
    let av_b = b.av(AvAttr::new()).unwrap();
    let e = assert_kind(
        a.endpoint(&info).bind_cq(&cq_b, CqBind::TRANSMIT).enable(),
        ErrorKind::Inval,
    );
    assert!(e.to_string().contains("another domain"), "{e}");
    assert_kind(
        a.endpoint(&info)
            .bind_counter(&cntr_b, CounterBind::SEND)
            .enable(),
        ErrorKind::Inval,
    );
    assert_kind(a.endpoint(&info).bind_av(&av_b).enable(), ErrorKind::Inval);
    // The same objects bind fine to their own domain.
    b.endpoint(&info)
        .bind_cq(&cq_b, CqBind::TRANSMIT | CqBind::RECV)
        .bind_counter(&cntr_b, CounterBind::SEND | CounterBind::RECV)
        .bind_av(&av_b)
        .enable()
        .unwrap();
}

#[test]
fn binding_twice_or_without_direction_is_invalid() {
    let (info, d) = domain();
    let cq = d.cq(CqAttr::new()).unwrap();
    let cq2 = d.cq(CqAttr::new()).unwrap();
    let c = d.counter(CounterAttr::new()).unwrap();
    let av = d.av(AvAttr::new()).unwrap();
    assert_kind(
        d.endpoint(&info)
            .bind_cq(&cq, CqBind::TRANSMIT)
            .bind_cq(&cq2, CqBind::TRANSMIT | CqBind::RECV)
            .enable(),
        ErrorKind::Inval,
    );
    assert_kind(
        d.endpoint(&info)
            .bind_cq(&cq, CqBind::SELECTIVE_COMPLETION)
            .enable(),
        ErrorKind::Inval,
    );
    assert_kind(
        d.endpoint(&info)
            .bind_counter(&c, CounterBind::empty())
            .enable(),
        ErrorKind::Inval,
    );
    assert_kind(
        d.endpoint(&info)
            .bind_counter(&c, CounterBind::SEND)
            .bind_counter(&c, CounterBind::SEND | CounterBind::READ)
            .enable(),
        ErrorKind::Inval,
    );
    assert_kind(
        d.endpoint(&info).bind_av(&av).bind_av(&av).enable(),
        ErrorKind::Inval,
    );
    // Separate queues per direction are fine.
    d.endpoint(&info)
        .bind_cq(&cq, CqBind::TRANSMIT)
        .bind_cq(&cq2, CqBind::RECV | CqBind::SELECTIVE_COMPLETION)
        .enable()
        .unwrap();
}

// ----- unsupported features -------------------------------------------------------------

#[test]
fn unsupported_features_are_nosys_naming_the_feature() {
    let (info, d) = domain();
    let fabric = Fabric::open(&info).unwrap();
    let ep = d.endpoint(&info).caps(Caps::MSG).enable().unwrap();
    let dest = FiAddr(0);
    let checks: Vec<(&str, Error)> = vec![
        (
            "scalable endpoints",
            d.scalable_endpoint(&info).unwrap_err(),
        ),
        ("shared receive contexts", d.srx_context(&info).unwrap_err()),
        (
            "passive endpoints",
            fabric.passive_endpoint(&info).unwrap_err(),
        ),
        ("fi_connect", ep.connect(d.epid()).unwrap_err()),
        ("fi_accept", ep.accept().unwrap_err()),
        ("fi_shutdown", ep.shutdown().unwrap_err()),
        ("fi_senddata", ep.senddata(dest, b"x", 1).unwrap_err()),
        ("fi_injectdata", ep.injectdata(dest, b"x", 1).unwrap_err()),
        ("fi_tsenddata", ep.tsenddata(dest, 2, b"x", 1).unwrap_err()),
        (
            "fi_tinjectdata",
            ep.tinjectdata(dest, 2, b"x", 1).unwrap_err(),
        ),
        (
            "event queues",
            d.endpoint(&info).bind_eq().enable().unwrap_err(),
        ),
        (
            "FI_EP_MSG",
            d.endpoint(&info).ep_type(EpType::Msg).enable().unwrap_err(),
        ),
    ];
    let mut messages = std::collections::HashSet::new();
    for (feature, e) in checks {
        assert_eq!(e.kind(), ErrorKind::NoSys, "{feature}: {e}");
        assert!(e.to_string().contains(feature), "{feature}: {e}");
        assert!(messages.insert(e.to_string()), "distinct: {e}");
    }
}

// ----- address vectors ------------------------------------------------------------------

#[test]
fn av_map_gives_one_opaque_address_per_peer() {
    let (_info, a) = domain();
    let b = peer_domain();
    let av = a.av(AvAttr::new()).unwrap();
    assert_eq!(av.av_type(), AvType::Map, "Unspec opens a map");
    let r = av.insert(&[a.epid(), b.epid(), a.epid()]);
    let addrs: Vec<FiAddr> = r.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(addrs[0], addrs[2], "the same epid, the same address");
    assert_ne!(addrs[0], addrs[1]);
    assert_eq!(av.count(), 2);
    // Again later: still the same address.
    assert_eq!(av.insert(&[b.epid()]).remove(0).unwrap(), addrs[1]);
    assert_eq!(av.lookup(addrs[0]).unwrap(), a.epid());
    assert_eq!(av.lookup(addrs[1]).unwrap(), b.epid());
    assert_eq!(av.straddr(addrs[1]).unwrap(), b.epid().to_string());
    assert_eq!(av.addr_of_epid(b.epid()), Some(addrs[1]));
    // Map addresses are not indices, and not valid in another AV.
    for bad in [FiAddr(0), FiAddr(1), FiAddr::UNSPEC, FiAddr(addrs[1].0 + 1)] {
        assert_kind(av.lookup(bad), ErrorKind::Inval);
    }
    let other = a.av(AvAttr::new().av_type(AvType::Map)).unwrap();
    other.insert(&[a.epid(), b.epid()]);
    for &x in &addrs {
        assert_kind(other.lookup(x), ErrorKind::Inval);
    }
    // A failed insertion takes no address.
    let e = assert_kind(
        av.insert(&[support::soft_raw::closed_port_epid()])
            .remove(0),
        ErrorKind::ConnRefused,
    );
    assert!(e.to_string().contains("cannot insert"), "{e}");
    assert_eq!(av.count(), 2);
    // Remove is a no-op that succeeds (as C); the address stays valid.
    av.remove(&addrs).unwrap();
    assert_eq!(av.lookup(addrs[0]).unwrap(), a.epid());
}

#[test]
fn av_table_gives_indices_and_keeps_holes() {
    let (_info, a) = domain();
    let b = peer_domain();
    let av = a
        .av(AvAttr::new()
            .av_type(AvType::Table)
            .connect_timeout(Duration::from_secs(10)))
        .unwrap();
    let dead = support::soft_raw::closed_port_epid();
    let r = av.insert(&[a.epid(), dead, b.epid(), a.epid()]);
    assert_eq!(r[0].as_ref().unwrap(), &FiAddr(0));
    assert_eq!(r[1].as_ref().unwrap_err().kind(), ErrorKind::ConnRefused);
    assert_eq!(
        r[2].as_ref().unwrap(),
        &FiAddr(2),
        "the index advanced past the hole"
    );
    assert_eq!(
        r[3].as_ref().unwrap(),
        &FiAddr(3),
        "duplicates get their own index"
    );
    assert_eq!(av.count(), 4);
    assert_eq!(av.lookup(FiAddr(2)).unwrap(), b.epid());
    assert_eq!(av.lookup(FiAddr(3)).unwrap(), a.epid());
    let e = assert_kind(av.lookup(FiAddr(1)), ErrorKind::Inval);
    assert!(
        e.to_string().contains(&dead.to_string()),
        "names the hole's epid: {e}"
    );
    assert_kind(av.lookup(FiAddr(4)), ErrorKind::Inval);
    assert_kind(av.lookup(FiAddr::UNSPEC), ErrorKind::Inval);
    // The next insert continues after the last index.
    assert_eq!(av.insert(&[b.epid()]).remove(0).unwrap(), FiAddr(4));
    // The reverse lookup gives the first index of an epid.
    assert_eq!(av.addr_of_epid(a.epid()), Some(FiAddr(0)));
    assert_eq!(av.addr_of_epid(dead), None);
}

#[test]
fn av_insert_str_parses_the_psmx_form() {
    let (_info, d) = domain();
    let av = d.av(AvAttr::new().av_type(AvType::Table)).unwrap();
    let text = d.epid().to_string();
    assert!(text.starts_with("fi_addr_psmx://"));
    assert_eq!(av.insert_str(&text).unwrap(), FiAddr(0));
    assert_eq!(av.lookup(FiAddr(0)).unwrap(), d.epid());
    for bad in [
        "",
        "fi_addr_psmx://",
        "fi_addr_psmx://zz",
        "tcp://1.2.3.4",
        "12345678901234567",
    ] {
        let e = assert_kind(av.insert_str(bad), ErrorKind::Inval);
        assert!(
            e.to_string().contains(&format!("{bad:?}")),
            "names the text: {e}"
        );
    }
    assert_eq!(av.count(), 1, "nothing inserted for bad text");
}

#[test]
fn av_insert_of_a_silent_peer_times_out() {
    let (_info, d) = domain();
    let av = d
        .av(AvAttr::new().av_type(AvType::Table).connect_timeout(SHORT))
        .unwrap();
    let (_listener, silent) = silent_peer();
    let r = returns("insert", move || av.insert(&[silent]).remove(0));
    let e = assert_kind(r, ErrorKind::TimedOut);
    assert!(
        e.to_string().contains(&silent.to_string()),
        "names the epid: {e}"
    );
}

#[test]
fn objects_of_a_closed_domain_are_bad_state() {
    let (info, d) = domain();
    let av = d.av(AvAttr::new()).unwrap();
    let cq = d.cq(CqAttr::new()).unwrap();
    let me = d.epid();
    let addr = av.insert(&[me]).remove(0).unwrap();
    let keep = d.clone();
    d.close().unwrap();
    assert_kind(av.insert(&[me]).remove(0), ErrorKind::OpBadState);
    assert_kind(keep.av(AvAttr::new()), ErrorKind::OpBadState);
    assert_kind(keep.cq(CqAttr::new()), ErrorKind::OpBadState);
    assert_kind(keep.counter(CounterAttr::new()), ErrorKind::OpBadState);
    // Not "another domain's queue": the domain is closed.
    assert_kind(
        keep.endpoint(&info).bind_cq(&cq, CqBind::TRANSMIT).enable(),
        ErrorKind::OpBadState,
    );
    // Lookups still answer: the entries are plain data.
    assert_eq!(av.lookup(addr).unwrap(), me);
}

// ----- closing --------------------------------------------------------------------------

#[test]
fn domain_close_with_a_dead_peer_returns() {
    let (info, a) = domain();
    let b = peer_domain();
    let av = a.av(AvAttr::new()).unwrap();
    av.insert(&[b.epid()]).remove(0).unwrap();
    let ep = a.endpoint(&info).bind_av(&av).enable().unwrap();
    // The peer goes away first.
    b.close().unwrap();
    returns("domain close", move || a.close()).unwrap();
    assert!(ep.is_closed());
    assert_kind(ep.setopt_min_multi_recv(1), ErrorKind::OpBadState);
}

#[test]
fn forced_close_with_zero_timeout() {
    let cfg = PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .timeout(Duration::ZERO)
        .build()
        .unwrap();
    let a = domain_of(&info_with(Hints::new().config(cfg.clone())));
    let b = domain_of(&info_with(
        Hints::new().config(cfg).progress(ProgressKind::Auto),
    ));
    a.av(AvAttr::new())
        .unwrap()
        .insert(&[b.epid()])
        .remove(0)
        .unwrap();
    returns("forced close", move || {
        a.close().unwrap();
        b.close().unwrap();
    });
}

#[test]
fn objects_outlive_their_handles_in_any_drop_order() {
    let (info, d) = domain();
    let cq = d.cq(CqAttr::new()).unwrap();
    let av = d.av(AvAttr::new()).unwrap();
    let addr = av.insert(&[d.epid()]).remove(0).unwrap();
    let ep = d
        .endpoint(&info)
        .bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)
        .bind_av(&av)
        .enable()
        .unwrap();
    let epid = d.epid();
    // The application drops the domain and fabric handles first.
    drop(d);
    assert_eq!(ep.getname(), epid);
    assert_eq!(ep.av().unwrap().lookup(addr).unwrap(), epid);
    assert!(!ep.is_closed());
    drop(av);
    drop(cq);
    // The last handle closes everything, quietly.
    returns("last drop", move || drop(ep));
}

#[test]
fn auto_progress_domain_runs_a_thread() {
    let info = info_with(Hints::new().config(config()).progress(ProgressKind::Auto));
    let d = domain_of(&info);
    assert!(!d.reactor().is_manual());
    assert!(d.reactor().auto_thread().is_some());
    // FI_PSM_PROG_THREAD=0: no thread even when auto progress is asked.
    let cfg = PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .prog_thread(false)
        .build()
        .unwrap();
    let info = info_with(Hints::new().config(cfg).progress(ProgressKind::Auto));
    assert!(domain_of(&info).reactor().is_manual());
    let (_, manual) = domain();
    assert!(manual.reactor().is_manual());
    assert_eq!(manual.engine_kind(), EngineKind::Soft);
}

// ----- name server ----------------------------------------------------------------------

#[test]
fn endpoints_register_with_the_name_server() {
    let ns = NameServer::start_on("127.0.0.1:0".parse().unwrap()).unwrap();
    let info = info();
    let fabric = Fabric::open_with_name_server(&info, ns).unwrap();
    let port = fabric.name_server_addr().unwrap().port();
    let d = fabric.domain(&info).unwrap();
    let t = Duration::from_secs(5);

    // An explicit service.
    let ep = d
        .endpoint(&info)
        .caps(Caps::TAGGED)
        .service(4242)
        .enable()
        .unwrap();
    assert_eq!(ep.service(), 4242);
    assert_eq!(
        query("127.0.0.1", port, 4242, t).unwrap(),
        (Service::new(4242), d.epid())
    );

    // A generated one: the process id in the upper half, as C.
    let gen = d.endpoint(&info).caps(Caps::MSG).enable().unwrap();
    let s = gen.service();
    assert_ne!(s, 0);
    assert_eq!(s.get() >> 16, std::process::id() & 0x7fff);
    assert_eq!(query("127.0.0.1", port, s, t).unwrap(), (s, d.epid()));

    // The same service twice: the second endpoint works, unregistered.
    let dup = d
        .endpoint(&info)
        .caps(Caps::TAGGED | Caps::SEND)
        .service(4242)
        .enable()
        .unwrap();
    assert!(!dup.is_closed());

    // Another domain inserts by service through the name server (this
    // one answers the handshake from a thread meanwhile).
    let other = fabric.domain(&info).unwrap();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let reactor = d.reactor().clone();
    let progress = std::thread::spawn(move || {
        while stop_rx.try_recv().is_err() {
            reactor.progress();
            std::thread::yield_now();
        }
    });
    let av = other
        .av(AvAttr::new().connect_timeout(Duration::from_secs(5)))
        .unwrap();
    let addr = av.insert_service("127.0.0.1", 4242).unwrap();
    assert_eq!(av.lookup(addr).unwrap(), d.epid());
    assert_kind(av.insert_service("127.0.0.1", 777), ErrorKind::NoData);
    stop_tx.send(()).unwrap();
    progress.join().unwrap();

    // Close: DEL.
    ep.close().unwrap();
    assert_kind(query("127.0.0.1", port, 4242, t), ErrorKind::NoData);
    drop(gen);
    assert_kind(query("127.0.0.1", port, s, t), ErrorKind::NoData);
}

// ----- native -----------------------------------------------------------------------

/// The objects over real PSM, in a child process (PSM allows one endpoint
/// per process): a second domain is busy, an AV reaches the endpoint
/// itself, closing with a zero delay works.
#[test]
fn native_domain_in_a_child_process() {
    let test = "native_domain_in_a_child_process";
    if peer::role().is_none() {
        if !support::native::available() {
            return;
        }
        let mut env = vec![];
        if std::env::var_os("PSM2_DEVICES").is_none() {
            env.push(("PSM2_DEVICES", "self,shm"));
        }
        let child = Peer::spawn(test, "solo", &env);
        assert!(child.wait(HANG).success(), "{test} failed in its process");
        return;
    }
    let hints = Hints::new().engine(EngineChoice::Native).config(config());
    let info = match getinfo(Some(&hints)) {
        Ok(mut v) => v.remove(0),
        Err(e) => {
            assert!(
                !support::native::required(),
                "PSMRAIL_REQUIRE_NATIVE=1 but {e}"
            );
            eprintln!("SKIPPED: {e}");
            return;
        }
    };
    assert_eq!(info.engine, EngineKind::Native);
    let fabric = Fabric::open(&info).unwrap();
    let d = fabric.domain(&info).unwrap();
    assert_eq!(d.engine_kind(), EngineKind::Native);
    assert_kind(fabric.domain(&info), ErrorKind::Busy);
    let av = d.av(AvAttr::new().av_type(AvType::Table)).unwrap();
    assert_eq!(av.insert(&[d.epid()]).remove(0).unwrap(), FiAddr(0));
    assert_kind(av.lookup(FiAddr(1)), ErrorKind::Inval);
    let ep = d
        .endpoint(&info)
        .caps(Caps::TAGGED)
        .bind_av(&av)
        .enable()
        .unwrap();
    assert_kind(
        d.endpoint(&info).caps(Caps::TAGGED).enable(),
        ErrorKind::Busy,
    );
    ep.close().unwrap();
    d.close().unwrap();
}
