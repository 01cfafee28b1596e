//! The PMI-1 client: the I/O edge over [`pmi_wire`](super::pmi_wire), on
//! the socket the process manager handed over in `PMI_FD`.
//!
//! Every call sends one request and waits for its answer, at most the
//! client's timeout (a barrier waits for the slowest process of the job,
//! so give it what the job's start-up may take). The client is blocking:
//! bootstrap runs once, before the job's traffic; from async code, run it
//! where blocking is allowed (`tokio::task::spawn_blocking`).

use super::pmi_socket::{socket_from_fd_text, PmiSocket};
use super::pmi_wire::{encode, LineDecoder, Reply, Request};
use crate::{Error, ErrorKind, Result};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// A process's PMI-1 connection to its process manager.
#[derive(Debug)]
pub struct PmiClient {
    socket: PmiSocket,
    decoder: LineDecoder,
    kvsname: String,
    /// The manager's longest value (`vallen_max`).
    max_value: usize,
    /// The manager's longest key (`keylen_max`).
    max_key: usize,
    finalized: bool,
}

impl PmiClient {
    /// Connects over the socket numbered by `PMI_FD`: `init`, then the
    /// manager's limits and the job's key-value space. `None` when
    /// `PMI_FD` is unset; an error naming `PMI_FD` when it is not a
    /// descriptor number or not a socket.
    ///
    /// Takes ownership of the descriptor: call it once per process.
    pub fn from_env(timeout: Duration) -> Option<Result<PmiClient>> {
        let raw = std::env::var("PMI_FD").ok()?;
        Some(Self::from_fd_text(&raw, timeout))
    }

    fn from_fd_text(raw: &str, timeout: Duration) -> Result<PmiClient> {
        Self::connect(socket_from_fd_text(raw)?, timeout)
    }

    /// Runs the start of the protocol over `socket` (any stream socket to
    /// a PMI-1 manager).
    pub fn connect(socket: UnixStream, timeout: Duration) -> Result<PmiClient> {
        let mut c = PmiClient {
            socket: PmiSocket::new(socket, timeout),
            decoder: LineDecoder::default(),
            kvsname: String::new(),
            max_value: 0,
            max_key: 0,
            finalized: false,
        };
        c.call(&Request::Init)?;
        if let Reply::Maxes { key, value, .. } = c.call(&Request::GetMaxes)? {
            c.max_key = key;
            c.max_value = value;
        }
        if let Reply::Kvsname(name) = c.call(&Request::GetMyKvsname)? {
            c.kvsname = name;
        }
        Ok(c)
    }

    /// The job's key-value space.
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// The longest value the manager stores.
    pub fn max_value(&self) -> usize {
        self.max_value
    }

    /// Stores `value` under `key`; others see it after the next
    /// [`barrier`](Self::barrier). `FI_EINVAL` for a key or value the
    /// manager cannot take (too long, or with spaces or `=`).
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        if key.len() > self.max_key || value.len() > self.max_value {
            return Err(Error::new(
                ErrorKind::Inval,
                format!(
                    "PMI: key {key:?} ({} B) or value ({} B) longer than the manager takes ({} B, {} B)",
                    key.len(),
                    value.len(),
                    self.max_key,
                    self.max_value
                ),
            ));
        }
        let req = Request::Put {
            kvsname: self.kvsname.clone(),
            key: key.into(),
            value: value.into(),
        };
        self.call(&req).map(drop)
    }

    /// Waits until every process of the job entered the barrier.
    pub fn barrier(&mut self) -> Result<()> {
        self.call(&Request::Barrier).map(drop)
    }

    /// The value some process put under `key` before the last barrier;
    /// `FI_ENODATA` when none did.
    pub fn get(&mut self, key: &str) -> Result<String> {
        let req = Request::Get {
            kvsname: self.kvsname.clone(),
            key: key.into(),
        };
        match self.call(&req)? {
            Reply::Value(v) => Ok(v),
            other => Err(Error::new(
                ErrorKind::Io,
                format!("PMI: get answered by {other:?}"),
            )),
        }
    }

    /// Tells the manager this process is done with it (also on drop).
    pub fn finalize(&mut self) -> Result<()> {
        if self.finalized {
            return Ok(());
        }
        self.finalized = true;
        self.call(&Request::Finalize).map(drop)
    }

    /// Sends `req` and waits for its answer.
    fn call(&mut self, req: &Request) -> Result<Reply> {
        self.socket.send(&encode(req)?)?;
        let decoder = &mut self.decoder;
        let msg = self.socket.receive(|bytes| {
            decoder.push(bytes);
            decoder.next_message()
        })??;
        Reply::from_message(req, &msg)
    }
}

impl Drop for PmiClient {
    fn drop(&mut self) {
        let _ = self.finalize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::time::Instant;

    /// A manager that answers from a script: each request line it reads
    /// is checked and answered with the scripted line; then it closes, or
    /// with `hang` keeps the connection open until the client closes it.
    fn manager(
        script: Vec<(&'static str, &'static str)>,
        hang: bool,
    ) -> (UnixStream, std::thread::JoinHandle<()>) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            let mut s = theirs;
            let mut d = LineDecoder::default();
            let mut buf = [0u8; 512];
            for (want, answer) in script {
                let got = loop {
                    if let Some(m) = d.next_message() {
                        break m.unwrap();
                    }
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        return;
                    }
                    d.push(&buf[..n]);
                };
                assert_eq!(got.cmd, want);
                if !answer.is_empty() {
                    s.write_all(answer.as_bytes()).unwrap();
                }
            }
            while hang && s.read(&mut buf).is_ok_and(|n| n > 0) {}
        });
        (ours, t)
    }

    const START: [(&str, &str); 3] = [
        (
            "init",
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
        ),
        (
            "get_maxes",
            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
        ),
        ("get_my_kvsname", "cmd=my_kvsname kvsname=kvs_42_0\n"),
    ];

    #[test]
    fn a_scripted_manager_is_talked_to_in_order() {
        let mut script = START.to_vec();
        script.extend([
            ("put", "cmd=put_result rc=0 msg=success\n"),
            ("barrier_in", "cmd=barrier_out\n"),
            ("get", "cmd=get_result rc=0 msg=success value=cafe\n"),
            ("get", "cmd=get_result rc=-1 msg=key_not_found\n"),
            ("finalize", "cmd=finalize_ack\n"),
        ]);
        let (sock, t) = manager(script, false);
        let mut c = PmiClient::connect(sock, Duration::from_secs(5)).unwrap();
        assert_eq!(c.kvsname(), "kvs_42_0");
        assert_eq!(c.max_value(), 1024);
        c.put("ep-0", "cafe").unwrap();
        assert_eq!(
            c.put("ep-0", &"v".repeat(1025)).unwrap_err().kind(),
            ErrorKind::Inval
        );
        c.barrier().unwrap();
        assert_eq!(c.get("ep-0").unwrap(), "cafe");
        assert_eq!(c.get("nobody").unwrap_err().kind(), ErrorKind::NoData);
        c.finalize().unwrap();
        drop(c);
        t.join().unwrap();
    }

    #[test]
    fn a_silent_or_vanished_manager_is_an_error_in_bounded_time() {
        // Answers init, then says nothing to get_maxes.
        let (sock, t) = manager(vec![START[0], ("get_maxes", "")], true);
        let start = Instant::now();
        let e = PmiClient::connect(sock, Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
        assert!(start.elapsed() < Duration::from_secs(5));
        t.join().unwrap();
        // Closes after init.
        let (sock, t) = manager(vec![START[0]], false);
        let e = PmiClient::connect(sock, Duration::from_secs(5)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io, "{e}");
        t.join().unwrap();
    }

    #[test]
    fn pmi_fd_that_is_no_socket_is_refused_by_name() {
        for bad in ["", "x", "-1", "99999"] {
            let e = PmiClient::from_fd_text(bad, Duration::from_secs(1)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Inval);
            assert!(e.to_string().contains("PMI_FD"), "{e}");
        }
        // A descriptor that is open but a file.
        let f = std::fs::File::open("/proc/self/status").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let e = PmiClient::from_fd_text(&fd.to_string(), Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().contains("not an open socket"), "{e}");
    }
}
