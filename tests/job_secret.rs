//! The optional job secret (`PSMRAIL_JOB_SECRET`, `SoftConfig::job_secret`)
//! authenticates every soft-engine handshake both ways: endpoints sharing
//! it connect; an endpoint without it, or with another one, is refused on
//! either side of the connection; a raw client that knows the job UUID
//! but not the secret gets a challenge and never a HelloAck. The secret
//! comes from the variable or from a private file `PSMRAIL_JOB_SECRET_FILE`
//! names, and one that is malformed or too short is refused unseen.

mod support;
use support::soft_raw;

use bytes::BytesMut;
use psmrail::config::FnVars;
use psmrail::engine::soft::wire::{encode, Frame, RefuseCode};
use psmrail::engine::soft::{JobSecret, SoftConfig, SoftEndpoint, SoftEngine, SoftEpid};
use psmrail::engine::{EndpointOptions, Engine, EngineEndpoint, OpBuffer, SendMode, TagMatch};
use psmrail::fabric::{getinfo, EngineChoice, Hints};
use psmrail::reactor::ProgressSource;
use psmrail::ErrorKind;
use soft_raw::{frames, hello_session, while_progressed};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

const JOB: [u8; 16] = *b"secret-tests!!!!";

fn secret(s: &str) -> Option<JobSecret> {
    Some(JobSecret::new(s.as_bytes().to_vec()).unwrap())
}

fn open(unix: bool, secret: Option<JobSecret>) -> Arc<SoftEndpoint> {
    SoftEngine::new(SoftConfig {
        unix_sockets: unix,
        handshake_timeout: Duration::from_secs(2),
        job_secret: secret,
        ..SoftConfig::default()
    })
    .unwrap()
    .open(&EndpointOptions {
        uuid: JOB,
        unit: None,
        port: None,
        close_timeout: Duration::from_secs(1),
    })
    .unwrap()
}

/// Progresses `a` and `b` on a thread while `body` runs.
fn driven<T>(a: &Arc<SoftEndpoint>, b: &Arc<SoftEndpoint>, body: impl FnOnce() -> T) -> T {
    let (sa, sb): (Arc<dyn ProgressSource>, Arc<dyn ProgressSource>) = (a.clone(), b.clone());
    while_progressed(&[sa, sb], body)
}

/// `a` connects to `b`: the result of the connect.
fn connect(a: &Arc<SoftEndpoint>, b: &Arc<SoftEndpoint>) -> psmrail::Result<()> {
    driven(a, b, || {
        let peer = a.connect(&[b.epid()], Duration::from_secs(5)).remove(0)?;
        // A message proves the link works.
        let (rk, sk) = (b.completions().insert(), a.completions().insert());
        b.irecv(TagMatch::exact(1), OpBuffer::from(vec![0u8; 6]), rk)
            .map_err(|e| e.error)?;
        a.isend(
            peer,
            1,
            SendMode::Standard,
            OpBuffer::from(b"secret".to_vec()),
            sk,
        )
        .map_err(|e| e.error)?;
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(c) = b.completions().try_take(rk) {
                assert_eq!(c.buffer.as_slice(), b"secret");
                return Ok(());
            }
            assert!(Instant::now() < end, "the message did not arrive");
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

#[test]
fn endpoints_sharing_the_secret_connect_over_tcp_and_unix_sockets() {
    for unix in [false, true] {
        let a = open(unix, secret("sixteen bytes at least"));
        let b = open(unix, secret("sixteen bytes at least"));
        connect(&a, &b).unwrap_or_else(|e| panic!("unix {unix}: {e}"));
    }
}

#[test]
fn a_missing_or_other_secret_is_refused_on_either_side() {
    let cases = [
        (
            secret("sixteen bytes at least"),
            None,
            "dialer has, acceptor lacks",
        ),
        (
            None,
            secret("sixteen bytes at least"),
            "acceptor has, dialer lacks",
        ),
        (
            secret("sixteen bytes at least"),
            secret("another secret entirely"),
            "two secrets",
        ),
    ];
    for (dialer, acceptor, what) in cases {
        let a = open(false, dialer);
        let b = open(false, acceptor);
        let e = connect(&a, &b).expect_err(what);
        assert_eq!(e.kind(), ErrorKind::ConnRefused, "{what}: {e}");
        assert!(e.to_string().contains("job secret"), "{what}: {e}");
    }
}

#[test]
fn a_raw_client_without_the_secret_gets_a_challenge_and_no_answer() {
    let target = open(false, secret("sixteen bytes at least"));
    let other = open(false, None);
    driven(&target, &other, || {
        let addr = SoftEpid::try_from(target.epid()).unwrap().socket_addr();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let claimed = SoftEpid::new(Ipv4Addr::LOCALHOST, 1, 1).unwrap().to_epid();
        s.write_all(&hello_session(JOB, claimed, 5)).unwrap();
        let got = read_for(&mut s, Duration::from_millis(500));
        assert!(matches!(&got[..], [Frame::AuthChallenge { .. }]), "{got:?}");
        // A made-up proof is refused.
        let mut b = BytesMut::new();
        encode(
            &Frame::AuthProof {
                nonce: [1; 16],
                mac: [2; 32],
            },
            &mut b,
        );
        s.write_all(&b).unwrap();
        let got = read_for(&mut s, Duration::from_secs(2));
        assert!(
            matches!(got.last(), Some(Frame::Refuse(r)) if r.code == RefuseCode::Auth),
            "{got:?}"
        );
        assert!(!got.iter().any(|f| matches!(f, Frame::HelloAck(_))));
    });
}

fn read_for(s: &mut TcpStream, d: Duration) -> Vec<Frame> {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 1024];
    let end = Instant::now() + d;
    while Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(_) => continue,
        }
    }
    frames(&bytes)
}

#[test]
fn the_secret_comes_from_the_environment_and_bad_values_are_named() {
    let hints = |value: &'static str| {
        Hints::new()
            .engine(EngineChoice::Soft)
            .vars(FnVars(move |name: &str| {
                (name == "PSMRAIL_JOB_SECRET").then(|| value.to_owned())
            }))
    };
    let info = getinfo(Some(&hints("a secret of the whole job")))
        .unwrap()
        .remove(0);
    assert_eq!(
        info.soft_config().job_secret,
        secret("a secret of the whole job")
    );
    let e = getinfo(Some(&hints("short"))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inval);
    assert!(e.to_string().contains("PSMRAIL_JOB_SECRET"), "{e}");
    // Not printed.
    assert!(!format!("{:?}", info.soft_config()).contains("whole job"));
}

/// A file in the temporary directory with `contents` and `mode`, removed
/// when dropped.
struct SecretFile(std::path::PathBuf);

impl SecretFile {
    fn new(name: &str, contents: &[u8], mode: u32) -> SecretFile {
        use std::os::unix::fs::PermissionsExt;
        let path =
            std::env::temp_dir().join(format!("psmrail-job-secret-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        SecretFile(path)
    }

    fn path(&self) -> String {
        self.0.to_str().unwrap().to_owned()
    }
}

impl Drop for SecretFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn the_secret_can_come_from_a_private_file() {
    let read = |vars: Vec<(&'static str, String)>| {
        let hints = Hints::new().engine(EngineChoice::Soft).vars(vars);
        getinfo(Some(&hints)).map(|mut i| i.remove(0).soft_config().job_secret.clone())
    };
    let file = SecretFile::new("ok", b"a secret of the whole job\n", 0o600);
    assert_eq!(
        read(vec![("PSMRAIL_JOB_SECRET_FILE", file.path())]).unwrap(),
        secret("a secret of the whole job")
    );
    // Both ways at once, a file others may read, a file too short: refused,
    // naming the file's variable and never showing the secret.
    let open = SecretFile::new("open", b"a secret of the whole job", 0o644);
    let short = SecretFile::new("short", b"whole job\n", 0o600);
    for vars in [
        vec![
            ("PSMRAIL_JOB_SECRET", "a secret of the whole job".to_owned()),
            ("PSMRAIL_JOB_SECRET_FILE", file.path()),
        ],
        vec![("PSMRAIL_JOB_SECRET_FILE", open.path())],
        vec![("PSMRAIL_JOB_SECRET_FILE", short.path())],
        vec![("PSMRAIL_JOB_SECRET_FILE", "/nonexistent/secret".to_owned())],
        vec![("PSMRAIL_JOB_SECRET_FILE", String::new())],
    ] {
        let e = read(vars.clone()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval, "{vars:?}: {e}");
        let text = e.to_string();
        assert!(
            text.contains("PSMRAIL_JOB_SECRET_FILE="),
            "{vars:?}: {text}"
        );
        assert!(!text.contains("whole job"), "{vars:?}: {text}");
    }
}

#[test]
fn a_secret_shorter_than_sixteen_bytes_is_refused_without_being_shown() {
    let vars = |v: &'static str| vec![("PSMRAIL_JOB_SECRET", v)];
    assert!(JobSecret::from_vars(&vars("sixteen bytes!!!"))
        .unwrap()
        .is_some());
    for short in ["", "x", "fifteen bytes!!"] {
        let e = JobSecret::from_vars(&vars(short)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval);
        assert!(
            e.to_string()
                .contains("PSMRAIL_JOB_SECRET (value withheld)"),
            "{e}"
        );
        assert!(e.to_string().contains("at least 16 bytes"), "{e}");
        assert!(short.len() < 4 || !e.to_string().contains(short), "{e}");
    }
}
