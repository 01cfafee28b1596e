//! The tokio adapters (`psmrail::compat`, feature `tokio`): echo over the
//! channel's Stream/Sink, over codec frames (one message per frame) and
//! over the byte stream (`tokio_util::codec::Framed` and raw
//! `AsyncRead`/`AsyncWrite`), with 1 B .. 16 MiB payloads, under tokio's
//! current-thread (manual and adaptive progress) and multi-thread (auto
//! and adaptive progress) runtimes; getinfo inside a runtime choosing
//! adaptive progress; truncation, back-pressure, end of stream, configuration
//! checks, and cancellation (dropping a `Framed` mid-frame).
//!
//! The soft engine runs everything; the mrail provider runs the echoes
//! over two loopback rails; the native engine runs them in a child
//! process (PSM allows one endpoint per process: it talks to itself with
//! crossed tags), skipped when libpsm cannot load unless
//! `PSMRAIL_REQUIRE_NATIVE=1`.
#![cfg(feature = "tokio")]

mod support;
use support::{fabric, payload};

use bytes::{Bytes, BytesMut};
use fabric::Cfg;
use futures::{SinkExt, StreamExt};
use payload::pattern;
// The adapters come with the prelude, the end-of-stream bit from compat.
use psmrail::compat::DEFAULT_EOF_BIT;
use psmrail::fabric::{Caps, FiAddr};
use psmrail::ops::MessageEndpoint;
use psmrail::prelude::{ByteStream, Channel, ChannelConfig, FramedChannel};
use psmrail::reactor::Reactor;
use psmrail::ErrorKind;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::codec::{Framed, LengthDelimitedCodec, LinesCodec};

/// Payload sizes: 1 B .. 16 MiB, across the eager/rendezvous threshold
/// and the byte stream's message size.
const SIZES: [usize; 6] = [1, 100, 65_537, 300_000, 1 << 20, 16 << 20];

/// Messages this large are taken whole (16 MiB plus a codec's header).
const BIG: usize = (16 << 20) + 64;

/// How long a scenario may take before the test calls it hung.
const HANG: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
enum Flavor {
    CurrentThread,
    MultiThread,
}

/// The two runtimes, each with the progress modes it is tested with:
/// adaptive progress (the default under tokio) on both.
const RUNTIMES: [(Flavor, Cfg); 4] = [
    (Flavor::CurrentThread, Cfg::MANUAL_MQ),
    (Flavor::MultiThread, Cfg::AUTO_MQ),
    (Flavor::CurrentThread, Cfg::ADAPTIVE_MQ),
    (Flavor::MultiThread, Cfg::ADAPTIVE_MQ),
];

/// Runs `fut` on a fresh runtime of `flavor`, failing after [`HANG`].
///
/// With manual progress a domain progresses only while one of its
/// operations is polled; a side that has finished (a server that closed)
/// must still progress for what it sent to leave. As an application
/// whose endpoints outlive their last operation would, the runtime runs a
/// task that progresses every manual reactor of `reactors` meanwhile.
fn run<F: Future>(flavor: Flavor, reactors: &[&Reactor], fut: F) -> F::Output {
    let rt = match flavor {
        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread(),
        Flavor::MultiThread => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(2);
            b
        }
    }
    .enable_time()
    .build()
    .expect("runtime");
    let manual: Vec<&Reactor> = reactors.iter().copied().filter(|r| r.is_manual()).collect();
    let pump = async {
        if manual.is_empty() {
            return futures::future::pending().await;
        }
        loop {
            for r in &manual {
                r.progress();
            }
            tokio::task::yield_now().await;
        }
    };
    rt.block_on(async {
        let work = tokio::time::timeout(HANG, fut);
        tokio::select! {
            done = work => done.unwrap_or_else(|_| panic!("{flavor:?}: hung for {HANG:?}")),
            () = pump => unreachable!("the pump never ends"),
        }
    })
}

/// Two sides of a conversation: endpoints `a` and `b` (possibly the same
/// endpoint, then with crossed tags), each with the other's address.
struct Pair<'e, E> {
    a: &'e E,
    a_to_b: FiAddr,
    b: &'e E,
    b_to_a: FiAddr,
    /// One endpoint talking to itself.
    single: bool,
}

impl<E> Clone for Pair<'_, E> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<E> Copy for Pair<'_, E> {}

impl<'e, E: MessageEndpoint> Pair<'e, E> {
    fn two(a: &'e E, a_to_b: FiAddr, b: &'e E, b_to_a: FiAddr) -> Self {
        Pair {
            a,
            a_to_b,
            b,
            b_to_a,
            single: false,
        }
    }

    fn single(ep: &'e E, me: FiAddr) -> Self {
        Pair {
            a: ep,
            a_to_b: me,
            b: ep,
            b_to_a: me,
            single: true,
        }
    }

    /// Side A's channel for conversation `tag` (tags `tag` and `tag + 1`
    /// crossed on a single endpoint).
    fn chan_a(&self, tag: u64, cfg: ChannelConfig) -> Channel<'e, E> {
        let cfg = if self.single {
            cfg.recv_tag(tag + 1)
        } else {
            cfg
        };
        Channel::with_config(self.a, self.a_to_b, tag, cfg).expect("channel a")
    }

    /// Side B's channel for conversation `tag`.
    fn chan_b(&self, tag: u64, cfg: ChannelConfig) -> Channel<'e, E> {
        if self.single {
            Channel::with_config(self.b, self.b_to_a, tag + 1, cfg.recv_tag(tag))
        } else {
            Channel::with_config(self.b, self.b_to_a, tag, cfg)
        }
        .expect("channel b")
    }
}

fn big_cfg() -> ChannelConfig {
    ChannelConfig::new().max_message(BIG).recv_depth(2)
}

// ----- scenarios, generic over the endpoint ------------------------------------------

/// Stream/Sink echo of every size: B echoes until A closes, then closes.
async fn channel_echo<E: MessageEndpoint>(p: Pair<'_, E>) {
    let mut a = p.chan_a(10, big_cfg());
    let mut b = p.chan_b(10, big_cfg());
    let server = async {
        let mut n = 0;
        while let Some(msg) = b.next().await {
            b.send(msg.expect("server recv").freeze())
                .await
                .expect("server send");
            n += 1;
        }
        b.close().await.expect("server close");
        n
    };
    let client = async {
        for (i, &len) in SIZES.iter().enumerate() {
            let data = Bytes::from(pattern(len, i as u64));
            a.send(data.clone()).await.expect("client send");
            let back = a.next().await.expect("an echo").expect("client recv");
            assert_eq!(back.len(), len);
            assert!(back[..] == data[..], "{len} B: bytes differ");
        }
        a.close().await.expect("client close");
        assert!(a.next().await.is_none(), "the server's end of stream");
    };
    let (n, ()) = futures::join!(server, client);
    assert_eq!(n, SIZES.len());
}

/// Codec frames (one message each) of every size with
/// `LengthDelimitedCodec`, then lines with `LinesCodec`.
async fn codec_echo<E: MessageEndpoint>(p: Pair<'_, E>) {
    let codec = || {
        LengthDelimitedCodec::builder()
            .max_frame_length(BIG)
            .new_codec()
    };
    let mut a = FramedChannel::new(p.chan_a(20, big_cfg()), codec());
    let mut b = FramedChannel::new(p.chan_b(20, big_cfg()), codec());
    let server = async {
        while let Some(frame) = b.next().await {
            b.send(frame.expect("server decode").freeze())
                .await
                .expect("server send");
        }
        SinkExt::<Bytes>::close(&mut b).await.expect("server close");
    };
    let client = async {
        for (i, &len) in SIZES.iter().enumerate() {
            let data = Bytes::from(pattern(len, 40 + i as u64));
            a.send(data.clone()).await.expect("client send");
            let back = a.next().await.expect("an echo").expect("client decode");
            assert!(back[..] == data[..], "{len} B: bytes differ");
        }
        SinkExt::<Bytes>::close(&mut a).await.expect("client close");
        assert!(a.next().await.is_none());
    };
    futures::join!(server, client);

    let mut a = FramedChannel::new(p.chan_a(30, ChannelConfig::new()), LinesCodec::new());
    let mut b = FramedChannel::new(p.chan_b(30, ChannelConfig::new()), LinesCodec::new());
    for line in ["", "one", "two words", &"x".repeat(100_000)] {
        a.send(line).await.expect("send line");
        assert_eq!(b.next().await.expect("a line").expect("decode"), line);
    }
}

/// Byte-stream echo of every size: `Framed<ByteStream,
/// LengthDelimitedCodec>` frames, then raw bytes through
/// `tokio::io::copy` with reads smaller than a message.
async fn byte_stream_echo<E: MessageEndpoint>(p: Pair<'_, E>) {
    // 64 KiB messages: a 16 MiB frame is 256 of them.
    let cfg = ChannelConfig::new().max_message(64 * 1024);
    let codec = || {
        LengthDelimitedCodec::builder()
            .max_frame_length(BIG)
            .new_codec()
    };
    let sa = ByteStream::from(p.chan_a(40, cfg.clone()));
    let sb = ByteStream::from(p.chan_b(40, cfg.clone()));
    let mut a = Framed::new(sa, codec());
    let mut b = Framed::new(sb, codec());
    let server = async {
        let mut n = 0;
        while let Some(frame) = b.next().await {
            b.send(frame.expect("server decode").freeze())
                .await
                .expect("server send");
            n += 1;
        }
        SinkExt::<Bytes>::close(&mut b).await.expect("server close");
        n
    };
    let client = async {
        for (i, &len) in SIZES.iter().enumerate() {
            let data = Bytes::from(pattern(len, 80 + i as u64));
            a.send(data.clone()).await.expect("client send");
            let back = a.next().await.expect("an echo").expect("client decode");
            assert!(back[..] == data[..], "{len} B: bytes differ");
        }
        SinkExt::<Bytes>::close(&mut a).await.expect("client close");
        assert!(a.next().await.is_none());
    };
    let (n, ()) = futures::join!(server, client);
    assert_eq!(n, SIZES.len());

    // Raw bytes: the server copies its input to its output; the client
    // writes everything, shuts down, and reads back in odd-sized reads.
    let total: usize = SIZES.iter().sum();
    let data = pattern(total, 7);
    let sa = ByteStream::from(p.chan_a(50, cfg.clone()));
    let sb = ByteStream::from(p.chan_b(50, cfg));
    let (mut br, mut bw) = tokio::io::split(sb);
    let (mut ar, mut aw) = tokio::io::split(sa);
    let server = async {
        let copied = tokio::io::copy(&mut br, &mut bw).await.expect("copy");
        bw.shutdown().await.expect("server shutdown");
        copied
    };
    let writer = async {
        for chunk in SIZES.iter().scan(0, |at, &len| {
            let c = &data[*at..*at + len];
            *at += len;
            Some(c)
        }) {
            aw.write_all(chunk).await.expect("write");
        }
        aw.shutdown().await.expect("client shutdown");
        let e = aw
            .write_all(b"late")
            .await
            .expect_err("write after shutdown");
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe);
    };
    let reader = async {
        let mut back = Vec::with_capacity(total);
        let mut buf = vec![0u8; 1000];
        loop {
            let n = ar.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            back.extend_from_slice(&buf[..n]);
        }
        // End of file stays end of file.
        assert_eq!(ar.read(&mut buf).await.expect("read at eof"), 0);
        back
    };
    let (copied, (), back) = futures::join!(server, writer, reader);
    assert_eq!(copied as usize, total);
    assert_eq!(back.len(), total);
    assert!(back == data, "raw byte stream: bytes differ");
}

fn all_scenarios<E: MessageEndpoint>(flavor: Flavor, reactors: &[&Reactor], p: Pair<'_, E>) {
    run(flavor, reactors, channel_echo(p));
    run(flavor, reactors, codec_echo(p));
    run(flavor, reactors, byte_stream_echo(p));
}

// ----- psm, soft engine ------------------------------------------------------------------

fn soft_pair(cfg: Cfg) -> fabric::Nodes {
    fabric::open(cfg, Caps::TAGGED, 2)
}

fn reactors(n: &fabric::Nodes) -> Vec<&Reactor> {
    n.nodes.iter().map(|x| x.domain.reactor()).collect()
}

#[test]
fn soft_channel_codec_and_byte_stream_echo_both_runtimes() {
    for (flavor, cfg) in RUNTIMES {
        let n = soft_pair(cfg);
        let p = Pair::two(&n[0].ep, n.addr(0, 1), &n[1].ep, n.addr(1, 0));
        all_scenarios(flavor, &reactors(&n), p);
    }
}

#[test]
fn soft_single_endpoint_with_crossed_tags() {
    let n = fabric::open(Cfg::MANUAL_MQ, Caps::TAGGED, 1);
    let me = n[0].av.insert(&[n[0].ep.getname()]).remove(0).unwrap();
    run(
        Flavor::CurrentThread,
        &reactors(&n),
        channel_echo(Pair::single(&n[0].ep, me)),
    );
}

/// The server in a task of its own on the multi-thread runtime (the
/// endpoint moved in as a clone, the channel made in the task).
#[test]
fn soft_spawned_server_on_the_multi_thread_runtime() {
    let n = soft_pair(Cfg::AUTO_MQ);
    let server_ep = n[1].ep.clone();
    let to_client = n.addr(1, 0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let server = rt.spawn(async move {
        let s = ByteStream::new(&server_ep, to_client, 5).unwrap();
        let mut f = Framed::new(s, LinesCodec::new());
        let mut n = 0;
        while let Some(line) = f.next().await {
            f.send(line.unwrap().to_uppercase()).await.unwrap();
            n += 1;
        }
        n
    });
    rt.block_on(async {
        let s = ByteStream::new(&n[0].ep, n.addr(0, 1), 5).unwrap();
        let mut f = Framed::new(s, LinesCodec::new());
        for word in ["alpha", "beta", "gamma"] {
            f.send(word).await.unwrap();
            assert_eq!(f.next().await.unwrap().unwrap(), word.to_uppercase());
        }
        SinkExt::<String>::close(&mut f).await.unwrap();
    });
    assert_eq!(rt.block_on(server).unwrap(), 3);
}

#[test]
fn a_message_larger_than_the_posted_receives_is_ftrunc_and_the_stream_goes_on() {
    for (flavor, cfg) in RUNTIMES {
        let n = soft_pair(cfg);
        let p = Pair::two(&n[0].ep, n.addr(0, 1), &n[1].ep, n.addr(1, 0));
        run(flavor, &reactors(&n), async {
            let mut a = p.chan_a(60, ChannelConfig::new());
            let mut b = p.chan_b(60, ChannelConfig::new().max_message(1000));
            a.send(Bytes::from(pattern(1001, 1))).await.unwrap();
            a.send(Bytes::from(pattern(1000, 2))).await.unwrap();
            let e = b.next().await.unwrap().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Trunc, "{e}");
            let t = e.truncation().expect("both lengths");
            assert_eq!((t.msg_len, t.received), (1001, 1000));
            let next = b.next().await.unwrap().unwrap();
            assert!(next[..] == pattern(1000, 2)[..]);
            // Through the byte stream the same error is InvalidData, and
            // the stream stays broken (bytes are missing).
            let mut sa = ByteStream::from(p.chan_a(61, ChannelConfig::new().max_message(2000)));
            let mut sb = ByteStream::from(p.chan_b(61, ChannelConfig::new().max_message(1000)));
            sa.write_all(&pattern(1500, 3)).await.unwrap();
            sa.flush().await.unwrap();
            let mut buf = [0u8; 10];
            let e = sb.read(&mut buf).await.unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
            let inner = e.get_ref().and_then(|e| e.downcast_ref::<psmrail::Error>());
            assert_eq!(inner.map(|e| e.kind()), Some(ErrorKind::Trunc));
            sa.write_all(b"more").await.unwrap();
            let e = sb.read(&mut buf).await.unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        });
    }
}

/// With the default configuration (256 KiB receives), what the stream
/// yields holds about what the message needs: a small message is a copy
/// of its own length (its receive buffer goes to the next receive), one
/// over half a receive comes in its buffer; a long run of both, mixed,
/// arrives intact and in order, whatever buffers went round.
#[test]
fn received_messages_hold_what_they_need_and_buffers_go_round() {
    for (flavor, cfg) in RUNTIMES {
        let n = soft_pair(cfg);
        let p = Pair::two(&n[0].ep, n.addr(0, 1), &n[1].ep, n.addr(1, 0));
        run(flavor, &reactors(&n), async {
            let mut a = p.chan_a(62, ChannelConfig::new());
            let mut b = p.chan_b(62, ChannelConfig::new());
            let max = b.max_message();
            let sizes = [8, 1000, max / 2, max / 2 + 1, max, 0, 64 << 10];
            for round in 0..40u64 {
                for (i, &len) in sizes.iter().enumerate() {
                    a.feed(Bytes::from(pattern(len, round << 8 | i as u64)))
                        .await
                        .unwrap();
                }
                a.flush().await.unwrap();
                for (i, &len) in sizes.iter().enumerate() {
                    let got = b.next().await.unwrap().unwrap();
                    assert!(
                        got[..] == pattern(len, round << 8 | i as u64)[..],
                        "{len} B"
                    );
                    if 2 * len <= max {
                        assert!(
                            got.capacity() <= len.max(64),
                            "{len} B kept {}",
                            got.capacity()
                        );
                    } else {
                        assert!(got.capacity() <= max);
                    }
                }
            }
        });
    }
}

#[test]
fn codec_bytes_that_are_no_frame_are_an_error_and_decoding_goes_on() {
    let n = soft_pair(Cfg::MANUAL_MQ);
    let p = Pair::two(&n[0].ep, n.addr(0, 1), &n[1].ep, n.addr(1, 0));
    run(Flavor::CurrentThread, &reactors(&n), async {
        let mut raw = p.chan_a(70, ChannelConfig::new());
        let mut b = FramedChannel::new(
            p.chan_b(70, ChannelConfig::new()),
            LengthDelimitedCodec::new(),
        );
        // A header announcing 10 bytes, followed by 2.
        raw.send(Bytes::from_static(&[0, 0, 0, 10, 1, 2]))
            .await
            .unwrap();
        // Two frames in one message: both come out.
        raw.send(Bytes::from_static(&[
            0, 0, 0, 1, b'x', 0, 0, 0, 2, b'y', b'z',
        ]))
        .await
        .unwrap();
        let e = b.next().await.unwrap().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::Other, "{e}");
        assert!(e.to_string().contains("bytes remaining"), "{e}");
        // LengthDelimitedCodec keeps the header it read: start it afresh.
        *b.codec_mut() = LengthDelimitedCodec::new();
        assert_eq!(&b.next().await.unwrap().unwrap()[..], b"x");
        assert_eq!(&b.next().await.unwrap().unwrap()[..], b"yz");
        raw.close().await.unwrap();
        assert!(b.next().await.is_none());
    });
}

#[test]
fn sink_back_pressure_bounds_the_sends_in_flight() {
    let n = soft_pair(Cfg::MANUAL_MQ);
    let p = Pair::two(&n[0].ep, n.addr(0, 1), &n[1].ep, n.addr(1, 0));
    run(Flavor::CurrentThread, &reactors(&n), async {
        let mut a = p.chan_a(80, ChannelConfig::new().sends_in_flight(2));
        let len = 1 << 20;
        // Nobody receives tag 80 yet: rendezvous sends cannot finish.
        let mut posted = 0;
        let mut ready_pending = false;
        for i in 0..4u64 {
            let ready = futures::poll!(futures::future::poll_fn(|cx| {
                futures::Sink::<Bytes>::poll_ready(std::pin::Pin::new(&mut a), cx)
            }));
            match ready {
                std::task::Poll::Ready(r) => {
                    r.unwrap();
                    a.start_send_msg(pattern(len, i)).unwrap();
                    posted += 1;
                }
                std::task::Poll::Pending => {
                    ready_pending = true;
                    break;
                }
            }
            assert!(a.sends_in_flight() <= 2);
            tokio::task::yield_now().await;
        }
        // 1 MiB sends are rendezvous: without a receiver none finishes, so
        // poll_ready turns pending at the third.
        assert!(ready_pending && posted == 2, "posted {posted}");
        assert_eq!(a.sends_in_flight(), 2);
        // Sending without poll_ready when full is FI_EAGAIN, not a panic.
        let e = a.start_send_msg(vec![1u8]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Again);
        // The receiver comes: everything arrives, in order.
        let mut b = p.chan_b(80, ChannelConfig::new().max_message(len));
        let recv = async {
            for i in 0..posted {
                let m = b.next().await.unwrap().unwrap();
                assert!(m[..] == pattern(len, i)[..], "message {i}");
            }
        };
        let flush = async { a.flush().await.unwrap() };
        futures::join!(recv, flush);
        assert_eq!(a.sends_in_flight(), 0);
    });
}

#[test]
fn configuration_is_checked() {
    let n = fabric::open(Cfg::MANUAL_MQ, Caps::TAGGED, 1);
    let ep = &n[0].ep;
    let bad = [
        (1, ChannelConfig::new().recv_depth(0)),
        (1, ChannelConfig::new().sends_in_flight(0)),
        (1, ChannelConfig::new().max_message(0)),
        (1, ChannelConfig::new().max_message(usize::MAX)),
        (1, ChannelConfig::new().eof_bit(0)),
        (1, ChannelConfig::new().eof_bit(3)),
        (DEFAULT_EOF_BIT | 1, ChannelConfig::new()),
        (1, ChannelConfig::new().recv_tag(DEFAULT_EOF_BIT)),
    ];
    for (tag, cfg) in bad {
        let e = Channel::with_config(ep, FiAddr(0), tag, cfg.clone()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval, "{cfg:?}: {e}");
    }
    let ok = Channel::with_config(ep, FiAddr(0), 1, ChannelConfig::new().eof_bit(1 << 40));
    assert!(ok.is_ok());
}

// ----- cancellation --------------------------------------------------------------------

/// Counts the live owners of tracked send buffers.
#[derive(Clone, Default)]
struct Live(Arc<AtomicUsize>);

struct Tracked(Vec<u8>, Live);

impl AsRef<[u8]> for Tracked {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.1 .0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Live {
    fn bytes(&self, v: Vec<u8>) -> Bytes {
        self.0.fetch_add(1, Ordering::SeqCst);
        Bytes::from_owner(Tracked(v, self.clone()))
    }
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Dropping a sending channel (and a `send` future) mid-way: every
/// message acknowledged (flushed) and every message posted arrives whole
/// and in order, every send buffer is freed, and the dropped channel's
/// receives no longer take messages of the tag.
#[test]
fn dropping_a_channel_mid_send_loses_nothing_posted_and_frees_every_buffer() {
    for (flavor, cfg) in RUNTIMES {
        let n = soft_pair(cfg);
        let p = Pair::two(&n[0].ep, n.addr(0, 1), &n[1].ep, n.addr(1, 0));
        let live = Live::default();
        run(flavor, &reactors(&n), async {
            let mut b = p.chan_b(90, big_cfg());
            let mut a = p.chan_a(90, big_cfg().sends_in_flight(4));
            for i in 0..3u64 {
                a.send(live.bytes(pattern(1000, i))).await.unwrap(); // acknowledged
            }
            let big = live.bytes(pattern(16 << 20, 9));
            {
                // Poll the send once (posted, not finished), then drop it.
                let mut send = a.send(big);
                let _ = futures::poll!(&mut send);
            }
            drop(a);
            for i in 0..3u64 {
                let m = b.next().await.unwrap().unwrap();
                assert!(m[..] == pattern(1000, i)[..], "acknowledged message {i}");
            }
            let m = b.next().await.unwrap().unwrap();
            assert!(
                m[..] == pattern(16 << 20, 9)[..],
                "the posted 16 MiB message"
            );
            // The dropped channel's receives were cancelled: a message for
            // its tag goes to a new receive on its endpoint.
            b.send(Bytes::from_static(b"after")).await.unwrap();
            let (got, buf) = p.a.trecv(vec![0u8; 16], 90, 0).await;
            assert_eq!(got.unwrap().len, 5);
            assert_eq!(&buf.as_slice()[..5], b"after");
        });
        // Every send buffer came back to us or was freed by the reactor.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while live.count() != 0 && std::time::Instant::now() < deadline {
            n.progress();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(live.count(), 0, "{flavor:?}: send buffers leaked");
    }
}

/// Dropping a `tokio_util::codec::Framed` over a byte stream in the middle
/// of a frame: the frames acknowledged before it arrive whole, the partial
/// frame never comes out as a frame, and the conversation's tag is free
/// again on both endpoints.
#[test]
fn dropping_a_framed_byte_stream_mid_frame_keeps_acknowledged_frames() {
    for (flavor, cfg) in RUNTIMES {
        let n = soft_pair(cfg);
        let p = Pair::two(&n[0].ep, n.addr(0, 1), &n[1].ep, n.addr(1, 0));
        run(flavor, &reactors(&n), async {
            let small = ChannelConfig::new()
                .max_message(64 * 1024)
                .sends_in_flight(2);
            let codec = || {
                LengthDelimitedCodec::builder()
                    .max_frame_length(BIG)
                    .new_codec()
            };
            let mut rx = Framed::new(ByteStream::from(p.chan_b(100, small.clone())), codec());
            let mut tx = Framed::new(ByteStream::from(p.chan_a(100, small)), codec());
            for i in 0..3u64 {
                tx.send(Bytes::from(pattern(70_000, i))).await.unwrap();
            }
            {
                // Write part of a 4 MiB frame: the window holds two 64 KiB
                // messages, so the send cannot finish in one poll.
                let mut send = tx.send(Bytes::from(pattern(4 << 20, 9)));
                assert!(futures::poll!(&mut send).is_pending());
            }
            drop(tx);
            for i in 0..3u64 {
                let f = rx.next().await.unwrap().unwrap();
                assert!(f[..] == pattern(70_000, i)[..], "acknowledged frame {i}");
            }
            // The partial frame never completes.
            let more = tokio::time::timeout(Duration::from_millis(300), rx.next()).await;
            assert!(more.is_err(), "a frame out of a partial frame");
            drop(rx);
            // Both endpoints' receives for the tag are gone: raw messages
            // reach new receives, both ways.
            let (s, _) = p.a.tsend(p.a_to_b, 100, b"to b".to_vec()).await;
            s.unwrap();
            let (got, buf) = p.b.trecv(vec![0u8; 8], 100, 0).await;
            assert_eq!(got.unwrap().len, 4);
            assert_eq!(&buf.as_slice()[..4], b"to b");
            let (s, _) = p.b.tsend(p.b_to_a, 100, b"to a".to_vec()).await;
            s.unwrap();
            let (got, buf) = p.a.trecv(vec![0u8; 8], 100, 0).await;
            assert_eq!(got.unwrap().len, 4);
            assert_eq!(&buf.as_slice()[..4], b"to a");
        });
    }
}

/// Dropping the `next()` future of a stream loses nothing: the message is
/// handed out by the next call.
#[test]
fn a_dropped_next_future_loses_nothing() {
    let n = soft_pair(Cfg::MANUAL_MQ);
    let p = Pair::two(&n[0].ep, n.addr(0, 1), &n[1].ep, n.addr(1, 0));
    run(Flavor::CurrentThread, &reactors(&n), async {
        let mut a = p.chan_a(110, ChannelConfig::new());
        let mut b = p.chan_b(110, ChannelConfig::new());
        for _ in 0..3 {
            let mut next = b.next();
            assert!(futures::poll!(&mut next).is_pending());
        }
        a.send(Bytes::from_static(b"kept")).await.unwrap();
        let got: BytesMut = b.next().await.unwrap().unwrap();
        assert_eq!(&got[..], b"kept");
    });
}

/// Runs `f` inside a current-thread tokio runtime, as code in an async
/// `main` would (discovery there picks adaptive progress by default).
fn inside_a_runtime<T>(f: impl FnOnce() -> T) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async { f() })
}

#[test]
fn discovery_inside_a_runtime_picks_adaptive_progress() {
    use psmrail::fabric::{getinfo, ProgressKind};
    use psmrail::reactor::{AdaptiveProgress, ProgressMode};
    let hints = fabric::hints(Cfg::MANUAL_MQ, Caps::TAGGED).progress(ProgressKind::Unspec);
    // Outside a runtime: manual, as in C.
    let outside = getinfo(Some(&hints)).unwrap().remove(0);
    assert_eq!(outside.progress, ProgressKind::Manual);
    assert!(outside.spin.is_zero());
    // Inside: auto progress with the default spin window, and the domain
    // runs adaptive progress.
    let inside = inside_a_runtime(|| getinfo(Some(&hints)))
        .unwrap()
        .remove(0);
    assert_eq!(inside.progress, ProgressKind::Auto);
    assert_eq!(inside.spin, AdaptiveProgress::DEFAULT_SPIN);
    assert!(format!("{inside}").contains("spin: 500 us"), "{inside}");
    let n = fabric::open_info(Cfg::ADAPTIVE_MQ, inside, 1, |_, _, b| b);
    match n[0].domain.reactor().mode() {
        ProgressMode::Adaptive(a) => assert_eq!(a.spin, AdaptiveProgress::DEFAULT_SPIN),
        other => panic!("expected adaptive progress, got {other:?}"),
    }
    // What the caller asks for wins, inside a runtime too.
    let manual = inside_a_runtime(|| getinfo(Some(&hints.clone().progress(ProgressKind::Manual))));
    assert_eq!(manual.unwrap()[0].progress, ProgressKind::Manual);
    let auto = inside_a_runtime(|| getinfo(Some(&hints.clone().progress(ProgressKind::Auto))));
    assert!(
        auto.unwrap()[0].spin.is_zero(),
        "explicit auto: futures sleep at once"
    );
    // FI_PSM_PROG_THREAD=0 forbids the thread: the domain stays manual.
    let no_thread = psmrail::config::PsmConfig::builder()
        .name_server(false)
        .prog_thread(false)
        .build()
        .unwrap();
    let info = inside_a_runtime(|| getinfo(Some(&hints.clone().config(no_thread))))
        .unwrap()
        .remove(0);
    let n = fabric::open_info(Cfg::MANUAL_MQ, info, 1, |_, _, b| b);
    assert!(n[0].domain.reactor().is_manual());
}

// ----- mrail -----------------------------------------------------------------------------

#[test]
fn mrail_loopback_rails_echo_both_runtimes() {
    use psmrail::fabric::ProgressKind;
    use support::mrail_nodes;
    // `Unspec`: discovery runs inside a runtime and picks adaptive progress.
    for (flavor, progress) in [
        (Flavor::CurrentThread, ProgressKind::Manual),
        (Flavor::MultiThread, ProgressKind::Auto),
        (Flavor::CurrentThread, ProgressKind::Unspec),
    ] {
        let n = inside_a_runtime(|| {
            mrail_nodes::open(2, 2, "16384:fixed,-1:striping", Caps::TAGGED, progress)
        });
        if progress == ProgressKind::Unspec {
            assert!(n.nodes[0].domain.reactor().mode().spin().is_some());
        }
        let p = Pair::two(&n.nodes[0].ep, n.addr(0, 1), &n.nodes[1].ep, n.addr(1, 0));
        let rs: Vec<&Reactor> = n.nodes.iter().map(|x| x.domain.reactor()).collect();
        all_scenarios(flavor, &rs, p);
    }
}

// ----- native engine -----------------------------------------------------------------

/// The echoes over real PSM, in a child process (one endpoint per
/// process: it talks to itself with crossed tags).
#[test]
fn native_echo_in_a_child_process() {
    use psmrail::config::PsmConfig;
    use psmrail::fabric::{getinfo, AvAttr, EngineChoice, Fabric, Hints, ProgressKind};
    use support::peer::{self, Peer};
    let test = "native_echo_in_a_child_process";
    if peer::role().is_none() {
        if !support::native::available() {
            return;
        }
        let mut env = vec![];
        if std::env::var_os("PSM2_DEVICES").is_none() {
            env.push(("PSM2_DEVICES", "self,shm"));
        }
        let child = Peer::spawn(test, "solo", &env);
        assert!(
            child.wait(HANG * 3).success(),
            "{test} failed in its process"
        );
        return;
    }
    for (flavor, progress) in [
        (Flavor::CurrentThread, ProgressKind::Manual),
        (Flavor::MultiThread, ProgressKind::Auto),
        (Flavor::MultiThread, ProgressKind::Unspec),
    ] {
        let config = PsmConfig::builder()
            .name_server(false)
            .delay(Duration::ZERO)
            .build()
            .unwrap();
        let hints = Hints::new()
            .caps(Caps::TAGGED)
            .engine(EngineChoice::Native)
            .progress(progress)
            .config(config);
        let info = match inside_a_runtime(|| getinfo(Some(&hints))) {
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
        let fabric = Fabric::open(&info).unwrap();
        let domain = fabric.domain(&info).unwrap();
        let av = domain.av(AvAttr::new()).unwrap();
        let ep = domain.endpoint(&info).bind_av(&av).enable().unwrap();
        let me = av.insert(&[ep.getname()]).remove(0).unwrap();
        if progress == ProgressKind::Unspec {
            assert!(
                domain.reactor().mode().spin().is_some(),
                "adaptive under tokio"
            );
        }
        all_scenarios(flavor, &[domain.reactor()], Pair::single(&ep, me));
        drop(ep);
        drop(av);
        drop(domain);
        drop(fabric);
    }
}
