//! Opening connected endpoints of the public API in one process, on the
//! soft engine, and driving their futures.
//!
//! Each endpoint gets its own domain (a domain holds one engine endpoint,
//! and one tagged receiver at most), its own address vector, and every
//! other endpoint inserted in that AV. Inserting connects, which needs
//! both sides to progress, so [`open_with`] inserts from one thread per
//! node at once.
//!
//! [`drive`] runs a future on the calling thread while making progress on
//! every manual domain it is given (a receiver must progress for a large
//! send to finish), and panics after [`HANG_LIMIT`] instead of hanging.
//!
//! ```ignore
//! let nodes = fabric::open(Cfg::MANUAL_MQ, Caps::MSG | Caps::TAGGED, 2);
//! let r = nodes[1].ep.trecv(vec![0u8; 5], 7, 0);
//! let s = nodes[0].ep.tsend(nodes.addr(0, 1), 7, b"hello".to_vec());
//! let (sent, got) = nodes.drive(async { futures::join!(s, r) });
//! ```
#![allow(dead_code)]

use psmrail::config::PsmConfig;
use psmrail::fabric::{
    getinfo, AddressVector, AvAttr, Caps, CompletionQueue, CqEntry, CqErrEntry, Domain, Endpoint,
    EndpointBuilder, EngineChoice, Fabric, FiAddr, Hints, Info, ProgressKind,
};
use psmrail::ErrorKind;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// How long [`drive`] waits before calling the test hung.
pub(crate) const HANG_LIMIT: Duration = Duration::from_secs(60);

/// A test configuration: progress mode and the untagged-message path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cfg {
    /// `FI_PROGRESS_MANUAL` or `FI_PROGRESS_AUTO` (progress thread).
    pub progress: ProgressKind,
    /// `FI_PSM_AM_MSG`: untagged messages over active messages.
    pub am_msg: bool,
    /// Adaptive progress's spin window (`Hints::spin`), with auto progress.
    pub spin: Option<Duration>,
}

impl Cfg {
    /// Manual progress, untagged messages on the MQ.
    pub(crate) const MANUAL_MQ: Cfg = Cfg {
        progress: ProgressKind::Manual,
        am_msg: false,
        spin: None,
    };
    /// Manual progress, untagged messages over AM.
    pub(crate) const MANUAL_AM: Cfg = Cfg {
        progress: ProgressKind::Manual,
        am_msg: true,
        spin: None,
    };
    /// Auto progress, untagged messages on the MQ.
    pub(crate) const AUTO_MQ: Cfg = Cfg {
        progress: ProgressKind::Auto,
        am_msg: false,
        spin: None,
    };
    /// Auto progress, untagged messages over AM.
    pub(crate) const AUTO_AM: Cfg = Cfg {
        progress: ProgressKind::Auto,
        am_msg: true,
        spin: None,
    };
    /// Adaptive progress (auto progress with a 500 µs spin window, the
    /// default under tokio), untagged messages on the MQ.
    pub(crate) const ADAPTIVE_MQ: Cfg = Cfg {
        progress: ProgressKind::Auto,
        am_msg: false,
        spin: Some(Duration::from_micros(500)),
    };
    /// Every configuration.
    pub(crate) const ALL: [Cfg; 4] = [Cfg::MANUAL_MQ, Cfg::MANUAL_AM, Cfg::AUTO_MQ, Cfg::AUTO_AM];
    /// One configuration per progress mode (for tests where the untagged
    /// path does not matter).
    pub(crate) const PROGRESS: [Cfg; 2] = [Cfg::MANUAL_MQ, Cfg::AUTO_MQ];

    /// Whether progress is manual.
    pub(crate) fn is_manual(self) -> bool {
        self.progress == ProgressKind::Manual
    }
}

/// Hints for `cfg` with `caps` on the soft engine: no name server, no
/// close delay, no graceful-close wait (so dropping a domain is quick).
pub(crate) fn hints(cfg: Cfg, caps: Caps) -> Hints {
    let config = PsmConfig::builder()
        .name_server(false)
        .am_msg(cfg.am_msg)
        .delay(Duration::ZERO)
        .timeout(Duration::ZERO)
        .build()
        .expect("test PsmConfig");
    let hints = Hints::new()
        .caps(caps)
        .engine(EngineChoice::Soft)
        .progress(cfg.progress)
        .config(config);
    match cfg.spin {
        Some(spin) => hints.spin(spin),
        None => hints,
    }
}

/// The first info for [`hints`].
pub(crate) fn info(cfg: Cfg, caps: Caps) -> Info {
    getinfo(Some(&hints(cfg, caps))).expect("getinfo").remove(0)
}

/// One endpoint with its own domain and AV.
#[derive(Debug)]
pub(crate) struct Node {
    /// The endpoint.
    pub ep: Endpoint,
    /// Its address vector (holding every other node).
    pub av: AddressVector,
    /// Its domain.
    pub domain: Domain,
}

/// Connected nodes; index them (`nodes[i]`) for their endpoint.
#[derive(Debug)]
pub(crate) struct Nodes {
    /// The info they were opened with.
    pub info: Info,
    /// The configuration.
    pub cfg: Cfg,
    /// The nodes. Declared before the fabric so they drop first.
    pub nodes: Vec<Node>,
    addrs: Vec<Vec<FiAddr>>,
    /// The fabric.
    pub fabric: Fabric,
}

impl std::ops::Index<usize> for Nodes {
    type Output = Node;
    fn index(&self, i: usize) -> &Node {
        &self.nodes[i]
    }
}

impl Nodes {
    /// The address of node `to` in node `from`'s AV (`from != to`).
    pub(crate) fn addr(&self, from: usize, to: usize) -> FiAddr {
        assert_ne!(from, to, "a node has no entry for itself");
        self.addrs[from][to]
    }

    /// Every node's domain.
    pub(crate) fn domains(&self) -> Vec<Domain> {
        self.nodes.iter().map(|n| n.domain.clone()).collect()
    }

    /// [`drive`] with every node's domain.
    pub(crate) fn drive<F: Future>(&self, fut: F) -> F::Output {
        drive(&self.domains(), fut)
    }

    /// The next entry of `cq` (success or error), progressing every
    /// manual domain meanwhile; panics after the hang limit.
    pub(crate) fn next_entry(&self, cq: &CompletionQueue) -> Result<CqEntry, CqErrEntry> {
        let start = Instant::now();
        loop {
            if let Some(e) = cq.readerr() {
                return Err(e);
            }
            match cq.read() {
                Ok(Some(e)) => return Ok(e),
                Ok(None) => {}
                Err(e) => assert_eq!(e.kind(), ErrorKind::Avail, "cq read: {e}"),
            }
            self.progress();
            std::thread::yield_now();
            assert!(start.elapsed() < HANG_LIMIT, "no CQ entry came");
        }
    }

    /// Runs one progress round on every manual domain.
    pub(crate) fn progress(&self) {
        for n in &self.nodes {
            if n.domain.reactor().is_manual() {
                n.domain.reactor().progress();
            }
        }
    }
}

/// `n` connected nodes with the info's endpoints (caps `caps`).
pub(crate) fn open(cfg: Cfg, caps: Caps, n: usize) -> Nodes {
    open_with(cfg, caps, n, |_, _, b| b)
}

/// `n` connected nodes; `build(i, domain, builder)` adjusts node `i`'s
/// endpoint before it is enabled (its AV is bound already), e.g. to bind a
/// CQ made from `domain` or to narrow the caps.
pub(crate) fn open_with(
    cfg: Cfg,
    caps: Caps,
    n: usize,
    build: impl FnMut(usize, &Domain, EndpointBuilder) -> EndpointBuilder,
) -> Nodes {
    open_info(cfg, info(cfg, caps), n, build)
}

/// [`open_with`] from an info of the caller's (e.g. from [`hints`] with
/// another `PsmConfig`); `cfg` should describe it.
pub(crate) fn open_info(
    cfg: Cfg,
    info: Info,
    n: usize,
    mut build: impl FnMut(usize, &Domain, EndpointBuilder) -> EndpointBuilder,
) -> Nodes {
    let fabric = Fabric::open(&info).expect("fabric");
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let domain = fabric.domain(&info).expect("domain");
        let av = domain.av(AvAttr::new()).expect("av");
        let builder = domain.endpoint(&info).bind_av(&av);
        let ep = build(i, &domain, builder).enable().expect("enable");
        nodes.push(Node { ep, av, domain });
    }
    let names: Vec<_> = nodes.iter().map(|n| n.ep.getname()).collect();
    let addrs = std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let names = &names;
                s.spawn(move || {
                    let others: Vec<_> = (0..names.len())
                        .filter(|&j| j != i)
                        .map(|j| names[j])
                        .collect();
                    let mut got = node.av.insert(&others).into_iter();
                    (0..names.len())
                        .map(|j| {
                            if j == i {
                                FiAddr::UNSPEC
                            } else {
                                got.next().expect("one result per epid").expect("av insert")
                            }
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("insert thread"))
            .collect()
    });
    Nodes {
        info,
        cfg,
        nodes,
        addrs,
        fabric,
    }
}

struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `fut` to completion on this thread, running a progress round on
/// every manual domain of `domains` between polls (auto domains progress
/// on their own). Panics after [`HANG_LIMIT`].
pub(crate) fn drive<F: Future>(domains: &[Domain], fut: F) -> F::Output {
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

/// Polls `fut` once with a waker that does nothing.
pub(crate) fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    std::pin::Pin::new(fut).poll(&mut cx)
}
