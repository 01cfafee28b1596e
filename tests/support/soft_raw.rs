//! Raw soft-engine clients for tests that play a peer by hand: the bytes
//! of a handshake, frames decoded from what an endpoint sent, and endpoints
//! progressed on a thread while a test body runs.

use bytes::BytesMut;
use psmrail::engine::soft::wire::{
    encode, Frame, FrameDecoder, FrameLimits, Hello, JobUuid, NEW_LINK, SEAL_LEN,
};
use psmrail::engine::Epid;
use psmrail::reactor::{ProgressSource, Reactor};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// An epid where nothing listens (a loopback port just released).
pub(crate) fn closed_port_epid() -> Epid {
    let port = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    psmrail::engine::soft::SoftEpid::new(std::net::Ipv4Addr::LOCALHOST, port, 1)
        .unwrap()
        .to_epid()
}

/// A dialer's first bytes: Hello of job `uuid` claiming `epid`, and the
/// Session naming a new link `link`.
pub(crate) fn hello_session(uuid: [u8; 16], epid: Epid, link: u64) -> Vec<u8> {
    let mut b = BytesMut::new();
    encode(
        &Frame::Hello(Hello::ours(JobUuid(uuid), epid, FrameLimits::DEFAULT)),
        &mut b,
    );
    encode(&new_link(link), &mut b);
    b.to_vec()
}

/// A dialer's Session naming a new link `link` (a fixed incarnation and
/// key half).
pub(crate) fn new_link(link: u64) -> Frame {
    Frame::Session {
        link,
        resume: NEW_LINK,
        incarnation: 0x0123_4567_89ab_cdef ^ link,
        generation: 0,
        seal: [0x5a; SEAL_LEN],
    }
}

/// Every whole frame of `bytes`.
pub(crate) fn frames(bytes: &[u8]) -> Vec<Frame> {
    let dec = FrameDecoder::new(FrameLimits::DEFAULT);
    let mut b = BytesMut::from(bytes);
    let mut out = Vec::new();
    while let Ok(Some(f)) = dec.decode(&mut b) {
        out.push(f);
    }
    out
}

/// Runs `body` while a thread progresses `sources` (stopped however the
/// body ends, a failed assertion included, so a failure is reported
/// instead of hanging).
pub(crate) fn while_progressed<T>(
    sources: &[Arc<dyn ProgressSource>],
    body: impl FnOnce() -> T,
) -> T {
    let reactor = Reactor::manual();
    for s in sources {
        reactor.add_source(s.clone()).unwrap();
    }
    let stop = AtomicBool::new(false);
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                if !reactor.progress().made() {
                    std::thread::yield_now();
                }
            }
        });
        let _stop = StopOnDrop(&stop);
        body()
    })
}
