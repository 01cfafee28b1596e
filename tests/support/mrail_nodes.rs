//! Opening connected mrail endpoints in one process, on the soft engine
//! with loopback rails, and driving their futures.
//!
//! Each node gets its own mrail domain (N rails on `127.0.0.1`, each rail
//! its own port), its own address vector with every other node inserted
//! (from one thread per node, since inserting connects every rail and
//! both sides must progress), and an endpoint. [`MrailNodes::drive`] runs
//! a future while progressing every manual domain, and panics after
//! [`HANG_LIMIT`] instead of hanging.
#![allow(dead_code)]

use psmrail::config::{MrailConfig, PsmConfig, RailAddr, RailPolicyTable};
use psmrail::fabric::{getinfo, AvAttr, Caps, EngineChoice, FiAddr, Hints, Info, ProgressKind};
use psmrail::mrail::{MrailAv, MrailDomain, MrailEndpoint, MrailEndpointBuilder, MrailFabric};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// How long [`MrailNodes::drive`] waits before calling the test hung.
pub(crate) const HANG_LIMIT: Duration = Duration::from_secs(60);

/// One node: its domain, address vector and endpoint.
pub(crate) struct Node {
    pub domain: MrailDomain,
    pub av: MrailAv,
    pub ep: MrailEndpoint,
    /// `addrs[j]`: node j's address in this node's AV.
    pub addrs: Vec<FiAddr>,
}

/// Connected nodes.
pub(crate) struct MrailNodes {
    pub nodes: Vec<Node>,
    pub info: Info,
}

/// The info for `rails` loopback rails with `policy` (an
/// `FI_OFI_MRAIL_CONFIG` value), `caps` and `progress`.
pub(crate) fn info(rails: usize, policy: &str, caps: Caps, progress: ProgressKind) -> Info {
    let psm = PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let list = vec!["127.0.0.1"; rails].join(",");
    let table: RailPolicyTable = policy.parse().expect("policy");
    let mrail = MrailConfig::builder()
        .rails(RailAddr::parse_list(&list).unwrap())
        .policy_table(table)
        .build();
    let hints = Hints::new()
        .engine(EngineChoice::Soft)
        .caps(caps)
        .progress(progress)
        .config(psm)
        .mrail_config(mrail)
        .prov_name("ofi_mrail");
    getinfo(Some(&hints)).expect("getinfo").remove(0)
}

/// `n` connected nodes over `rails` loopback rails with `policy`.
pub(crate) fn open(
    n: usize,
    rails: usize,
    policy: &str,
    caps: Caps,
    progress: ProgressKind,
) -> MrailNodes {
    open_with(info(rails, policy, caps, progress), n, |_, _, b| b)
}

/// `n` connected nodes from `info`; `build(i, domain, builder)` adjusts
/// node `i`'s endpoint before it is enabled (its AV is bound already).
pub(crate) fn open_with(
    info: Info,
    n: usize,
    mut build: impl FnMut(usize, &MrailDomain, MrailEndpointBuilder) -> MrailEndpointBuilder,
) -> MrailNodes {
    let mut parts = Vec::new();
    for i in 0..n {
        let domain = MrailFabric::open(&info).unwrap().domain(&info).unwrap();
        let av = domain.av(AvAttr::new()).unwrap();
        let b = domain.endpoint(&info).bind_av(&av);
        let ep = build(i, &domain, b).enable().unwrap();
        parts.push((domain, av, ep));
    }
    let names: Vec<_> = parts.iter().map(|(_, _, ep)| ep.getname()).collect();
    let addrs: Vec<Vec<FiAddr>> = std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .iter()
            .map(|(_, av, _)| {
                let names = names.clone();
                s.spawn(move || {
                    av.insert(&names)
                        .into_iter()
                        .map(|r| r.expect("insert"))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let nodes = parts
        .into_iter()
        .zip(addrs)
        .map(|((domain, av, ep), addrs)| Node {
            domain,
            av,
            ep,
            addrs,
        })
        .collect();
    MrailNodes { nodes, info }
}

impl MrailNodes {
    /// Node `from`'s address for node `to`.
    pub(crate) fn addr(&self, from: usize, to: usize) -> FiAddr {
        self.nodes[from].addrs[to]
    }

    /// The domains.
    pub(crate) fn domains(&self) -> Vec<MrailDomain> {
        self.nodes.iter().map(|n| n.domain.clone()).collect()
    }

    /// Runs `fut` while progressing every manual domain.
    pub(crate) fn drive<F: Future>(&self, fut: F) -> F::Output {
        drive(&self.domains(), fut)
    }
}

struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `fut` on this thread, progressing the manual `domains` between
/// polls.
pub(crate) fn drive<F: Future>(domains: &[MrailDomain], fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let start = Instant::now();
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        let mut manual = false;
        for d in domains {
            if d.reactor().is_manual() {
                d.reactor().progress();
                manual = true;
            }
        }
        if manual {
            std::thread::yield_now();
        } else {
            std::thread::park_timeout(Duration::from_millis(20));
        }
        assert!(
            start.elapsed() < HANG_LIMIT,
            "drive: hung for {HANG_LIMIT:?}"
        );
    }
}
