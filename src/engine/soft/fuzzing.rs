//! Entry points for fuzz targets (`fuzz/`): each takes arbitrary bytes,
//! must never panic on them, and checks invariants with assertions (a
//! failed assertion is a bug the fuzzer found).
//!
//! [`seeds`] builds the checked-in corpus: valid streams and hostile ones.

use super::link_key::{LinkEnds, LinkKey, Resumption, Side};
use super::protocol::{ConnId, Event, OpId, SendPayloads, SoftCore};
use super::wire::{
    encode, AmArgs, AmFrame, Frame, FrameDecoder, FrameLimits, Hello, JobUuid, Refuse, RefuseCode,
    HEADER_LEN, MAGIC, PROTOCOL_VERSION,
};
use super::{ProtocolConfig, Role};
use crate::engine::{Epid, TagMatch};
use bytes::{BufMut, Bytes, BytesMut};

/// The job of the cores [`fuzz_handshake`] builds.
pub const FUZZ_UUID: JobUuid = JobUuid(*b"psmrail-fuzzing!");
/// Their own epid.
pub const FUZZ_EPID: Epid = Epid(0x0000_2328_7f00_0001);
/// The epid their dialer expects to reach.
pub const FUZZ_PEER: Epid = Epid(0x0000_2329_7f00_0001);
/// The link-id seed of the fuzzed cores, so that a dialer's link id is
/// known to the inputs ([`fuzz_link`]).
pub const FUZZ_LINK_SEED: u64 = 0x5eed_0f11_4a11_5eed;

/// The link id the fuzzed dialer names (its first connection's).
pub fn fuzz_link() -> u64 {
    super::protocol::link_id(FUZZ_LINK_SEED, super::ConnId(0))
}

/// Small limits, so that hostile lengths just above them are cheap to
/// express.
const SMALL: FrameLimits = FrameLimits {
    max_eager: 64,
    max_chunk: 32,
    max_am_payload: 16,
    max_am_args: 3,
    max_am_handlers: 4,
    max_message: 4096,
};

/// The fuzzed cores' configuration: [`SMALL`] limits, a small budget.
fn fuzz_config() -> ProtocolConfig {
    ProtocolConfig {
        eager_threshold: SMALL.max_eager,
        chunk_size: SMALL.max_chunk,
        max_am_payload: SMALL.max_am_payload,
        max_am_args: SMALL.max_am_args,
        max_am_handlers: SMALL.max_am_handlers,
        max_message: SMALL.max_message,
        unexpected_budget: 1024,
        peer_eager_window: 512,
        peer_rts_window: 2,
        peer_am_window: 2,
        max_queued_sends: 4,
    }
}

/// Chunk sizes 1..=64 from a tiny deterministic generator.
struct Splits(u32);

impl Splits {
    fn next(&mut self) -> usize {
        self.0 = self.0.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        ((self.0 >> 16) % 64) as usize + 1
    }
}

/// Decodes `data[1..]` fed in pseudo-random pieces (`data[0]` seeds the
/// splits and picks the limits).
///
/// Asserts: no panic; every decoded frame re-encodes to exactly the bytes
/// it was decoded from; the input buffer never grows beyond two frames'
/// cap, whatever lengths the input declares.
pub fn fuzz_frame_decoder(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let limits = if seed & 1 == 0 {
        FrameLimits::DEFAULT
    } else {
        SMALL
    };
    let bound = 2 * (HEADER_LEN + limits.max_body() as usize) + 256;
    let dec = FrameDecoder::new(limits);
    let mut splits = Splits(u32::from(seed));
    let mut buf = BytesMut::new();
    let (mut fed, mut consumed) = (0usize, 0usize);
    while fed < stream.len() {
        let n = splits.next().min(stream.len() - fed);
        buf.extend_from_slice(&stream[fed..fed + n]);
        fed += n;
        loop {
            let before = buf.len();
            match dec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    let used = before - buf.len();
                    let mut again = BytesMut::new();
                    encode(&frame, &mut again);
                    assert_eq!(
                        &again[..],
                        &stream[consumed..consumed + used],
                        "{frame:?} re-encodes differently"
                    );
                    assert_eq!(frame.encoded_len(), used);
                    consumed += used;
                }
                Ok(None) => {
                    assert!(buf.capacity() <= bound, "buffer grew to {}", buf.capacity());
                    break;
                }
                Err(_) => return,
            }
        }
    }
}

struct NoPayloads;

impl SendPayloads for NoPayloads {
    fn payload(&self, _: OpId) -> Option<&[u8]> {
        None
    }
}

/// Feeds `data` as the first bytes a fresh acceptor, then a fresh dialer,
/// receive from their peer (in two pieces, split where `data[0]` says),
/// driving the whole core: handshake, then whatever frames follow.
///
/// Asserts: no panic; a connection is only established by a Hello (or
/// HelloAck) of this job, version and magic at the start of `data`;
/// placements (events and payloads taken over with `take_direct`) stay
/// inside the posted receive; the unexpected queue and credit stay within
/// the budget; everything the core transmits decodes.
///
/// Then `data` is fed twice more: as what a stranger sends to the
/// listener of a core dialing [`FUZZ_PEER`] (a Proof answers only a
/// Challenge from the peer's address naming the dial's link, at most
/// once), and as a resumption of link [`FUZZ_RESUMED_LINK`], detached at an
/// acceptor (the link resumes only for a Session proving its key with a
/// new generation, and is untouched otherwise).
pub fn fuzz_handshake(data: &[u8]) {
    let config = fuzz_config();
    let split = data
        .first()
        .map_or(0, |b| usize::from(*b) % (data.len() + 1));
    for role in [Role::Acceptor, Role::Dialer { expect: FUZZ_PEER }] {
        let Ok(mut core) = SoftCore::new(config.clone(), FUZZ_EPID, FUZZ_UUID) else {
            return;
        };
        core.set_link_seed(FUZZ_LINK_SEED);
        let conn = core.open_connection(role);
        let recv_cap = 40;
        let _ = core.recv(TagMatch::ANY, recv_cap, OpId(1));
        let mut out = BytesMut::new();
        core.poll_transmit(conn, &mut out, 1 << 16, &NoPayloads);
        let mut input = BytesMut::new();
        let mut connected = false;
        // A Data payload the core handed over (`take_direct`), as the edge
        // reads it: straight into the receive buffer.
        let mut direct: Option<super::DirectData> = None;
        for mut part in [&data[..split], &data[split..]] {
            if let Some(d) = direct.as_mut() {
                let n = d.len.min(part.len());
                assert!(
                    d.op == OpId(1) && d.offset + d.len <= recv_cap,
                    "direct outside the receive"
                );
                core.direct_data(conn, n);
                d.offset += n;
                d.len -= n;
                part = &part[n..];
                if d.len == 0 {
                    direct = None;
                }
            }
            input.extend_from_slice(part);
            if direct.is_none() && core.handle_input(conn, &mut input).is_ok() && !input.is_empty()
            {
                direct = core.take_direct(conn, &mut input).ok().flatten();
            }
            while let Some(ev) = core.poll_event() {
                match ev {
                    Event::Connected { epid, .. } => {
                        connected = true;
                        if let Role::Dialer { expect } = role {
                            assert_eq!(epid, expect);
                        }
                    }
                    Event::Place { op, offset, bytes } => {
                        assert_eq!(op, OpId(1));
                        assert!(
                            offset + bytes.len() <= recv_cap,
                            "placed outside the receive"
                        );
                    }
                    Event::AmRequest { token, .. } => {
                        let _ = core
                            .am_reply(token, 0, &[1], b"r")
                            .map_err(|(t, _)| core.am_done(t));
                    }
                    _ => {}
                }
            }
            let s = core.stats();
            assert!(
                s.unexpected_bytes - s.departed_bytes + s.granted_eager <= config.unexpected_budget
            );
            core.poll_transmit(conn, &mut out, 1 << 16, &NoPayloads);
        }
        if connected {
            let want = match role {
                Role::Acceptor => 0x01,
                Role::Dialer { .. } => 0x02,
            };
            assert_eq!(
                data.first(),
                Some(&want),
                "connected without a handshake frame"
            );
            assert_eq!(&data[HEADER_LEN..HEADER_LEN + 8], &MAGIC);
            assert_eq!(
                data[HEADER_LEN + 8..HEADER_LEN + 10],
                PROTOCOL_VERSION.to_le_bytes()
            );
            assert_eq!(&data[HEADER_LEN + 10..HEADER_LEN + 26], &FUZZ_UUID.0);
        }
        let dec = FrameDecoder::new(FrameLimits::DEFAULT);
        while let Some(f) = dec.decode(&mut out).expect("the core's own output decodes") {
            drop(f);
        }
    }
    fuzz_challenge(data, &config);
    fuzz_resumption(data, &config);
}

/// The frames at the start of `data` that decode.
fn leading_frames(data: &[u8]) -> Vec<Frame> {
    let dec = FrameDecoder::new(FrameLimits::DEFAULT);
    let mut b = BytesMut::from(data);
    let mut v = Vec::new();
    while let Ok(Some(f)) = dec.decode(&mut b) {
        v.push(f);
    }
    v
}

/// `data` as what a stranger sends to the listener of a core that is
/// dialing [`FUZZ_PEER`] on link [`fuzz_link`]: a Proof goes out on that
/// dial only for a Challenge from the peer's address naming that link,
/// and at most one.
fn fuzz_challenge(data: &[u8], config: &ProtocolConfig) {
    let Ok(mut core) = SoftCore::new(config.clone(), FUZZ_EPID, FUZZ_UUID) else {
        return;
    };
    core.set_link_seed(FUZZ_LINK_SEED);
    let dial = core.open_connection(Role::Dialer { expect: FUZZ_PEER });
    let mut out = BytesMut::new();
    core.poll_transmit(dial, &mut out, 1 << 16, &NoPayloads);
    let accepted = core.open_connection(Role::Acceptor);
    let mut input = BytesMut::from(data);
    let _ = core.handle_input(accepted, &mut input);
    while core.poll_event().is_some() {}
    let mut proof = BytesMut::new();
    core.poll_transmit(dial, &mut proof, 1 << 16, &NoPayloads);
    let proofs = leading_frames(&proof)
        .into_iter()
        .filter(|f| matches!(f, Frame::Proof { .. }))
        .count();
    // The peer's address is what counts (another instance there may
    // answer a stale epid).
    let place = |e: Epid| super::SoftEpid::try_from(e).ok().map(|s| s.socket_addr());
    let genuine = matches!(
        leading_frames(data).first(),
        Some(Frame::Challenge { from, link, .. })
            if place(*from) == place(FUZZ_PEER) && *link == fuzz_link()
    );
    assert!(proofs <= usize::from(genuine), "{proofs} Proofs answered");
}

/// The link the resumption check of [`fuzz_handshake`] has its acceptor
/// hold with [`FUZZ_PEER`].
pub const FUZZ_RESUMED_LINK: u64 = 0x7e57_11e5_0000_0077;

/// An acceptor core holding link [`FUZZ_RESUMED_LINK`] with
/// [`FUZZ_PEER`], detached, and the link's key.
fn detached_acceptor(config: &ProtocolConfig) -> Option<(SoftCore, ConnId, LinkKey)> {
    let mut core = SoftCore::new(config.clone(), FUZZ_EPID, FUZZ_UUID).ok()?;
    core.set_link_seed(FUZZ_LINK_SEED);
    let conn = core.open_connection(Role::Acceptor);
    let mut input = BytesMut::from(
        &frames(&[
            Frame::Hello(hello(FUZZ_UUID, FUZZ_PEER)),
            new_session(FUZZ_RESUMED_LINK),
        ])[..],
    );
    core.handle_input(conn, &mut input).ok()?;
    while core.poll_event().is_some() {}
    let mut out = BytesMut::new();
    core.poll_transmit(conn, &mut out, 1 << 16, &NoPayloads);
    let half = leading_frames(&out).into_iter().find_map(|f| match f {
        Frame::Session { seal, .. } => Some(seal),
        _ => None,
    })?;
    let key = LinkKey::derive(
        None,
        &LinkEnds {
            link: FUZZ_RESUMED_LINK,
            dialer_epid: FUZZ_PEER.0,
            acceptor_epid: FUZZ_EPID.0,
            dialer_half: FUZZ_PEER_HALF,
            acceptor_half: half,
        },
    );
    core.detach(conn).then_some((core, conn, key))
}

/// The resumption fields a dialer holding `key` sends for generation 1.
fn resumption(core: &SoftCore, generation: u64) -> Resumption {
    Resumption {
        link: FUZZ_RESUMED_LINK,
        resume: 0,
        generation,
        dialer_incarnation: FUZZ_PEER_INCARNATION,
        acceptor_incarnation: core.incarnation(),
    }
}

/// `data` as a resumption of a detached link: the link resumes only for a
/// Session that proves the link's key with a new generation; whatever
/// else comes, the link stays as it was, waiting (unless a new link of
/// another incarnation of the peer replaced it).
fn fuzz_resumption(data: &[u8], config: &ProtocolConfig) {
    let Some((mut core, conn, key)) = detached_acceptor(config) else {
        return;
    };
    let accepted = core.open_connection(Role::Acceptor);
    let mut input = BytesMut::from(data);
    let _ = core.handle_input(accepted, &mut input);
    let (mut resumed, mut replaced) = (false, false);
    while let Some(ev) = core.poll_event() {
        match ev {
            Event::Resumed { conn: c, .. } => {
                assert_eq!(c, conn, "another connection resumed");
                resumed = true;
            }
            // A new link from the peer's epid naming another incarnation
            // (a new process there) ends the old one's links.
            Event::Connected { conn: c, .. } if c == accepted => replaced = true,
            _ => {}
        }
    }
    if resumed {
        let proven = leading_frames(data).iter().any(|f| match f {
            Frame::Session {
                link,
                resume,
                incarnation,
                generation,
                seal,
            } => {
                let r = Resumption {
                    link: *link,
                    resume: *resume,
                    generation: *generation,
                    dialer_incarnation: *incarnation,
                    acceptor_incarnation: core.incarnation(),
                };
                *generation > 0 && key.check(Side::Dialer, &r, seal)
            }
            _ => false,
        });
        assert!(proven, "resumed without a proof of the link key");
    } else if !replaced {
        assert!(
            matches!(
                core.connection_phase(conn),
                Some(super::ConnPhase::Detached)
            ),
            "a failed resumption touched the link"
        );
    }
}

/// Hello + Session resuming [`fuzz_resumption`]'s link with
/// `generation`, its seal right (`proven`) or not.
fn resume_seed(generation: u64, proven: bool) -> Vec<u8> {
    let Some((core, _, key)) = detached_acceptor(&fuzz_config()) else {
        return Vec::new();
    };
    let r = resumption(&core, generation);
    let mut seal = key.seal(Side::Dialer, &r);
    if !proven {
        seal[0] ^= 1;
    }
    frames(&[
        Frame::Hello(hello(FUZZ_UUID, FUZZ_PEER)),
        Frame::Session {
            link: r.link,
            resume: r.resume,
            incarnation: r.dialer_incarnation,
            generation,
            seal,
        },
    ])
}

fn frames(fs: &[Frame]) -> Vec<u8> {
    let mut b = BytesMut::new();
    for f in fs {
        encode(f, &mut b);
    }
    b.to_vec()
}

fn header(kind: u8, flags: u8, reserved: u16, len: u32) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.put_u8(kind);
    b.put_u8(flags);
    b.put_u16_le(reserved);
    b.put_u32_le(len);
    b.to_vec()
}

/// The incarnation the fuzzed peer names.
pub const FUZZ_PEER_INCARNATION: u64 = 0x1ca2_7a71_0f0f_0001;

/// The fuzzed peer's half of its new links' keys.
const FUZZ_PEER_HALF: [u8; super::wire::SEAL_LEN] = [0x5a; super::wire::SEAL_LEN];

/// The peer's Session naming new link `link` (its key half fixed).
fn new_session(link: u64) -> Frame {
    Frame::Session {
        link,
        resume: super::wire::NEW_LINK,
        incarnation: FUZZ_PEER_INCARNATION,
        generation: 0,
        seal: FUZZ_PEER_HALF,
    }
}

fn hello(uuid: JobUuid, epid: Epid) -> Hello {
    Hello::ours(uuid, epid, FrameLimits::DEFAULT)
}

/// Named seed inputs.
pub type Seeds = Vec<(&'static str, Vec<u8>)>;

/// A seed corpus: `(name, bytes)` for [`fuzz_frame_decoder`] and
/// [`fuzz_handshake`] (in that order).
pub fn seeds() -> (Seeds, Seeds) {
    let am = |handler, args: &[u64], p: &'static [u8]| AmFrame {
        handler,
        args: AmArgs::new(args).expect("few args"),
        payload: Bytes::from_static(p),
    };
    let eager = |tag, p: &'static [u8]| Frame::Eager {
        tag,
        payload: Bytes::from_static(p),
    };
    let with = |seed: u8, body: Vec<u8>| {
        let mut v = vec![seed];
        v.extend(body);
        v
    };
    let ok_hello = hello(FUZZ_UUID, FUZZ_PEER);
    let every_kind = frames(&[
        Frame::Hello(ok_hello.clone()),
        Frame::HelloAck(ok_hello.clone()),
        Frame::Refuse(Refuse {
            code: RefuseCode::UuidMismatch,
            version: 1,
            uuid: FUZZ_UUID,
        }),
        new_session(7),
        Frame::Ack { received: 40 },
        Frame::Credit {
            eager_bytes: 4096,
            rts: 8,
            am: 2,
        },
        eager(7, b"hello"),
        Frame::Rts {
            msg_id: 1,
            tag: 9,
            len: 100,
        },
        Frame::Cts {
            msg_id: 1,
            token: 0,
            len: 100,
        },
        Frame::Data {
            token: 0,
            offset: 0,
            payload: Bytes::from_static(b"0123456789"),
        },
        Frame::AmRequest(am(1, &[1, 2, 3], b"req")),
        Frame::AmReply(am(2, &[6], b"rep")),
        Frame::Bye,
    ]);
    let frame_seeds = vec![
        ("every-kind-default", with(0, every_kind.clone())),
        ("every-kind-small", with(1, every_kind.clone())),
        ("every-kind-other-splits", with(0x42, every_kind.clone())),
        ("empty-eager", with(0, frames(&[eager(0, b"")]))),
        (
            "max-small-eager",
            with(
                1,
                frames(&[Frame::Eager {
                    tag: 1,
                    payload: Bytes::from(vec![0xaa; 64]),
                }]),
            ),
        ),
        (
            "over-small-eager",
            with(
                1,
                frames(&[Frame::Eager {
                    tag: 1,
                    payload: Bytes::from(vec![0xaa; 65]),
                }]),
            ),
        ),
        ("huge-length", with(0, header(0x10, 0, 0, u32::MAX))),
        ("huge-data-length", with(0, header(0x13, 0, 0, 0x8000_0000))),
        ("unknown-kind", with(0, header(0x55, 0, 0, 0))),
        ("flags-set", with(0, header(0x7f, 0x01, 0, 0))),
        ("reserved-set", with(0, header(0x7f, 0, 0x100, 0))),
        (
            "bye-with-body",
            with(0, [header(0x7f, 0, 0, 1), vec![0]].concat()),
        ),
        (
            "truncated-hello",
            with(0, frames(&[Frame::Hello(ok_hello.clone())])[..30].to_vec()),
        ),
        (
            "short-rts",
            with(0, [header(0x11, 0, 0, 8), vec![0; 8]].concat()),
        ),
        (
            "empty-data",
            with(0, [header(0x13, 0, 0, 16), vec![0; 16]].concat()),
        ),
        (
            "am-too-many-args",
            with(
                1,
                [header(0x20, 0, 0, 4 + 32), vec![0, 0, 4, 0], vec![0; 32]].concat(),
            ),
        ),
        (
            "am-args-past-body",
            with(0, [header(0x21, 0, 0, 4), vec![0, 0, 2, 0]].concat()),
        ),
        (
            "refuse-bad-code",
            with(0, [header(0x03, 0, 0, 19), vec![9], vec![0; 18]].concat()),
        ),
        (
            "http-garbage",
            with(0, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ),
        (
            "many-small-frames",
            with(3, frames(&vec![eager(1, b"x"); 40])),
        ),
        (
            "shm-exchange",
            with(
                0,
                frames(&[
                    Frame::ShmOffer {
                        segment_len: (2 << 20) + 4096,
                    },
                    Frame::ShmSwitch,
                    Frame::ShmDecline,
                ]),
            ),
        ),
        (
            "shm-offer-short",
            with(0, [header(0x0b, 0, 0, 4), vec![0; 4]].concat()),
        ),
    ];

    let mut bad_uuid = hello(JobUuid([0; 16]), FUZZ_PEER);
    bad_uuid.limits = FrameLimits::DEFAULT;
    let mut v2 = hello(FUZZ_UUID, FUZZ_PEER);
    v2.version = PROTOCOL_VERSION + 1;
    let mut bad_magic = hello(FUZZ_UUID, FUZZ_PEER);
    bad_magic.magic = *b"PSMRAIL2";
    let credit = Frame::Credit {
        eager_bytes: 1024,
        rts: 4,
        am: 4,
    };
    let hs = |kind_ack: bool, rest: &[Frame]| {
        let first = if kind_ack {
            Frame::HelloAck(hello(FUZZ_UUID, FUZZ_PEER))
        } else {
            Frame::Hello(hello(FUZZ_UUID, FUZZ_PEER))
        };
        let session = new_session(fuzz_link());
        let mut v = frames(&[first, session]);
        v.extend(frames(rest));
        v
    };
    let handshake_seeds = vec![
        ("hello", hs(false, &[])),
        ("hello-ack", hs(true, &[])),
        ("hello-then-eager", hs(false, &[eager(3, b"payload")])),
        (
            "hello-then-traffic",
            hs(
                false,
                &[
                    credit.clone(),
                    eager(1, b"a"),
                    Frame::Rts {
                        msg_id: 0,
                        tag: 2,
                        len: 50,
                    },
                    Frame::AmRequest(am(1, &[1], b"x")),
                ],
            ),
        ),
        (
            "ack-then-traffic",
            hs(
                true,
                &[credit.clone(), Frame::AmReply(am(0, &[], b"")), Frame::Bye],
            ),
        ),
        (
            "hello-then-data-unknown-token",
            hs(
                false,
                &[Frame::Data {
                    token: 3,
                    offset: 0,
                    payload: Bytes::from_static(b"zz"),
                }],
            ),
        ),
        (
            "hello-then-cts-unknown",
            hs(
                false,
                &[Frame::Cts {
                    msg_id: 0,
                    token: 0,
                    len: 0,
                }],
            ),
        ),
        (
            "hello-then-eager-flood",
            hs(
                false,
                &vec![
                    Frame::Eager {
                        tag: 0,
                        payload: Bytes::from(vec![1; 60])
                    };
                    12
                ],
            ),
        ),
        (
            "hello-then-rts-flood",
            hs(
                false,
                &vec![
                    Frame::Rts {
                        msg_id: 0,
                        tag: 0,
                        len: 10
                    };
                    4
                ],
            ),
        ),
        (
            "hello-then-am-flood",
            hs(false, &vec![Frame::AmRequest(am(0, &[], b"")); 4]),
        ),
        (
            "hello-twice",
            hs(false, &[Frame::Hello(hello(FUZZ_UUID, FUZZ_PEER))]),
        ),
        (
            "hello-then-ack-beyond",
            hs(false, &[Frame::Ack { received: 1 << 40 }]),
        ),
        (
            "resume-unknown-link",
            frames(&[
                Frame::Hello(hello(FUZZ_UUID, FUZZ_PEER)),
                Frame::Session {
                    link: 99,
                    resume: 0,
                    incarnation: FUZZ_PEER_INCARNATION,
                    generation: 1,
                    seal: [0; super::wire::SEAL_LEN],
                },
            ]),
        ),
        (
            "ack-other-link",
            frames(&[
                Frame::HelloAck(hello(FUZZ_UUID, FUZZ_PEER)),
                new_session(fuzz_link() ^ 1),
            ]),
        ),
        (
            "hello-without-session",
            frames(&[Frame::Hello(hello(FUZZ_UUID, FUZZ_PEER)), eager(1, b"x")]),
        ),
        ("other-uuid", frames(&[Frame::Hello(bad_uuid.clone())])),
        ("other-uuid-ack", frames(&[Frame::HelloAck(bad_uuid)])),
        ("other-version", frames(&[Frame::Hello(v2.clone())])),
        ("other-version-ack", frames(&[Frame::HelloAck(v2)])),
        ("bad-magic", frames(&[Frame::Hello(bad_magic)])),
        (
            "refused",
            frames(&[Frame::Refuse(Refuse {
                code: RefuseCode::UuidMismatch,
                version: 1,
                uuid: JobUuid([3; 16]),
            })]),
        ),
        (
            "wrong-epid-ack",
            frames(&[Frame::HelloAck(hello(
                FUZZ_UUID,
                Epid(0x0000_0001_0a00_0001),
            ))]),
        ),
        ("truncated-hello", hs(false, &[])[..40].to_vec()),
        (
            "challenge-genuine",
            frames(&[Frame::Challenge {
                nonce: 0x0bad_cafe,
                from: FUZZ_PEER,
                link: fuzz_link(),
            }]),
        ),
        (
            "challenge-forged-link",
            frames(&[Frame::Challenge {
                nonce: 0x0bad_cafe,
                from: FUZZ_PEER,
                link: fuzz_link() ^ 0x40,
            }]),
        ),
        ("resume-proven", resume_seed(1, true)),
        ("resume-unproven", resume_seed(1, false)),
        ("resume-generation-zero", resume_seed(0, true)),
        ("eager-first", frames(&[eager(1, b"too early")])),
        ("huge-length", header(0x01, 0, 0, u32::MAX)),
        (
            "garbage",
            b"\x00\xff\x13\x37 definitely not a hello".to_vec(),
        ),
    ];
    (frame_seeds, handshake_seeds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::PathBuf;

    fn seed_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus")
    }

    #[test]
    fn seeds_and_hostile_inputs_run_clean() {
        let (frame_seeds, handshake_seeds) = seeds();
        assert!(frame_seeds.len() >= 20 && handshake_seeds.len() >= 20);
        for (_, s) in &frame_seeds {
            fuzz_frame_decoder(s);
            // Every seed also as a handshake stream, and vice versa.
            fuzz_handshake(&s[1..]);
        }
        for (_, s) in &handshake_seeds {
            fuzz_handshake(s);
            for seed in [0u8, 1, 0x81] {
                let mut v = vec![seed];
                v.extend_from_slice(s);
                fuzz_frame_decoder(&v);
            }
        }
        // Every prefix of every stream (truncation anywhere).
        for (_, s) in handshake_seeds.iter().take(6) {
            for n in 0..s.len() {
                fuzz_handshake(&s[..n]);
            }
        }
        fuzz_frame_decoder(&[]);
        fuzz_handshake(&[]);
    }

    #[test]
    fn valid_handshake_seeds_do_connect() {
        // The invariants of fuzz_handshake are not vacuous: these connect.
        let (_, hs) = seeds();
        let get = |name: &str| {
            hs.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        for (name, role) in [
            ("hello-then-traffic", Role::Acceptor),
            ("ack-then-traffic", Role::Dialer { expect: FUZZ_PEER }),
        ] {
            let mut core = SoftCore::new(ProtocolConfig::DEFAULT, FUZZ_EPID, FUZZ_UUID).unwrap();
            core.set_link_seed(FUZZ_LINK_SEED);
            let conn = core.open_connection(role);
            let mut input = BytesMut::from(&get(name)[..]);
            let _ = core.handle_input(conn, &mut input);
            let mut connected = false;
            while let Some(ev) = core.poll_event() {
                match ev {
                    Event::Connected { .. } => connected = true,
                    Event::AmRequest { token, .. } => core.am_done(token),
                    _ => {}
                }
            }
            assert!(connected, "{name}");
        }
    }

    #[test]
    fn the_proven_resumption_seed_resumes_and_the_others_do_not() {
        // fuzz_resumption's invariants are not vacuous.
        for (generation, proven, want) in [(1, true, true), (1, false, false), (0, true, false)] {
            let (mut core, conn, _) = detached_acceptor(&fuzz_config()).unwrap();
            let accepted = core.open_connection(Role::Acceptor);
            let mut input = BytesMut::from(&resume_seed(generation, proven)[..]);
            let _ = core.handle_input(accepted, &mut input);
            let mut resumed = false;
            while let Some(ev) = core.poll_event() {
                resumed |= matches!(ev, Event::Resumed { conn: c, .. } if c == conn);
            }
            assert_eq!(resumed, want, "generation {generation}, proven {proven}");
        }
    }

    #[test]
    fn decoder_fuzz_checks_reencoding() {
        // A stream that decodes must pass; the assertion inside is live.
        let (fs, _) = seeds();
        let (_, every) = fs.iter().find(|(n, _)| *n == "every-kind-default").unwrap();
        let dec = FrameDecoder::new(FrameLimits::DEFAULT);
        let mut b = BytesMut::from(&every[1..]);
        let mut n = 0;
        while dec.decode(&mut b).unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, 13);
        fuzz_frame_decoder(every);
    }

    #[derive(Debug, Clone)]
    enum Mutation {
        Flip(usize, u8),
        Insert(usize, u8),
        Remove(usize),
        Truncate(usize),
    }

    fn mutate(mut v: Vec<u8>, ms: &[Mutation]) -> Vec<u8> {
        for m in ms {
            let n = v.len().max(1);
            match *m {
                Mutation::Flip(i, x) if !v.is_empty() => v[i % n] ^= x,
                Mutation::Insert(i, x) => v.insert(i % (v.len() + 1), x),
                Mutation::Remove(i) if !v.is_empty() => {
                    v.remove(i % n);
                }
                Mutation::Truncate(i) => v.truncate(i % (v.len() + 1)),
                _ => {}
            }
        }
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// A poor man's fuzzer until cargo-fuzz runs: mutated seeds and
        /// plain random bytes never panic and keep the invariants.
        #[test]
        fn mutated_seeds_keep_the_invariants(
            which in 0usize..64,
            ms in proptest::collection::vec(
                prop_oneof![
                    (0usize..4096, 1u8..).prop_map(|(i, x)| Mutation::Flip(i, x)),
                    (0usize..4096, any::<u8>()).prop_map(|(i, x)| Mutation::Insert(i, x)),
                    (0usize..4096).prop_map(Mutation::Remove),
                    (0usize..4096).prop_map(Mutation::Truncate),
                ],
                0..6,
            ),
            random in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let (fs, hs) = seeds();
            let f = &fs[which % fs.len()].1;
            let h = &hs[which % hs.len()].1;
            fuzz_frame_decoder(&mutate(f.clone(), &ms));
            fuzz_handshake(&mutate(h.clone(), &ms));
            fuzz_frame_decoder(&random);
            fuzz_handshake(&random);
        }
    }

    /// Writes the corpus to `fuzz/corpus/{soft_frame,soft_handshake}/`:
    /// `cargo test -p psmrail --lib write_fuzz_seeds -- --ignored`.
    #[test]
    #[ignore]
    fn write_fuzz_seeds() {
        let (fs, hs) = seeds();
        for (dir, set) in [("soft_frame", fs), ("soft_handshake", hs)] {
            let d = seed_dir().join(dir);
            std::fs::create_dir_all(&d).unwrap();
            for (i, (name, bytes)) in set.iter().enumerate() {
                std::fs::write(d.join(format!("{i:02}-{name}")), bytes).unwrap();
            }
        }
    }

    #[test]
    fn checked_in_seeds_match_the_generator() {
        let (fs, hs) = seeds();
        for (dir, set) in [("soft_frame", fs), ("soft_handshake", hs)] {
            let d = seed_dir().join(dir);
            assert!(d.is_dir(), "seed corpus {} is missing", d.display());
            for (i, (name, bytes)) in set.iter().enumerate() {
                let on_disk = std::fs::read(d.join(format!("{i:02}-{name}"))).unwrap();
                assert_eq!(&on_disk, bytes, "{dir}/{name}");
            }
        }
    }
}
