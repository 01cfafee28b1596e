//! The PMI-2 client: the I/O edge over [`pmi2_wire`](super::pmi2_wire),
//! on the socket the process manager handed over in `PMI_FD` (MPICH's
//! hydra answers PMI-2 there when the process opens with it; Slurm's
//! `--mpi=pmi2` speaks only PMI-2).
//!
//! The start is the PMI-1 `init` line asking for version 2, then
//! `fullinit` (rank and size come from the manager, not the environment)
//! and `job-getid`. Each call then sends one frame and waits for its
//! answer, at most the client's timeout, like the PMI-1 client.
//!
//! ```no_run
//! use psmrail::bootstrap::Pmi2Client;
//! use std::time::Duration;
//!
//! // Started as `PSMRAIL_PMI_VERSION=2 mpiexec.hydra -n 2 ./program`.
//! let mut pmi = Pmi2Client::from_env(Duration::from_secs(30)).expect("PMI_FD set")?;
//! pmi.put(&format!("ep-{}", pmi.rank()), "0a1b")?;
//! pmi.fence()?;
//! let peer = (pmi.rank() + 1) % pmi.size();
//! println!("{}", pmi.get(&format!("ep-{peer}"))?);
//! # Ok::<(), psmrail::Error>(())
//! ```

use super::pmi2_wire::{check_init, encode, FrameDecoder, Reply, Request, INIT};
use super::pmi_socket::{socket_from_fd_text, PmiSocket};
use super::pmi_wire::LineDecoder;
use super::process_mapping::local_rank_and_size;
use crate::{Error, ErrorKind, Result};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// A process's PMI-2 connection to its process manager.
#[derive(Debug)]
pub struct Pmi2Client {
    socket: PmiSocket,
    decoder: FrameDecoder,
    rank: usize,
    size: usize,
    jobid: String,
    finalized: bool,
}

impl Pmi2Client {
    /// Connects over the socket numbered by `PMI_FD`, naming the rank in
    /// `PMI_RANK` if set. `None` when `PMI_FD` is unset; an error naming
    /// `PMI_FD` when it is not a socket.
    ///
    /// Takes ownership of the descriptor: call it once per process.
    pub fn from_env(timeout: Duration) -> Option<Result<Pmi2Client>> {
        let raw = std::env::var("PMI_FD").ok()?;
        let rank = std::env::var("PMI_RANK")
            .ok()
            .and_then(|r| r.trim().parse().ok());
        Some(socket_from_fd_text(&raw).and_then(|s| Self::connect(s, rank, timeout)))
    }

    /// Runs the start of the protocol over `socket` (any stream socket to
    /// a PMI-2 manager).
    pub fn connect(
        socket: UnixStream,
        rank: Option<usize>,
        timeout: Duration,
    ) -> Result<Pmi2Client> {
        let mut socket = PmiSocket::new(socket, timeout);
        socket.send(INIT)?;
        let mut lines = LineDecoder::default();
        let opened = socket.receive(|bytes| {
            lines.push(bytes);
            lines.next_message()
        })??;
        check_init(&opened)?;
        let mut c = Pmi2Client {
            socket,
            decoder: FrameDecoder::default(),
            rank: 0,
            size: 0,
            jobid: String::new(),
            finalized: false,
        };
        if let Reply::FullInit { rank, size } = c.call(&Request::FullInit { rank })? {
            (c.rank, c.size) = (rank, size);
        }
        if let Reply::JobId(id) = c.call(&Request::JobGetId)? {
            c.jobid = id;
        }
        Ok(c)
    }

    /// This process's rank, as the manager gave it.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many processes the job has.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The job's id.
    pub fn jobid(&self) -> &str {
        &self.jobid
    }

    /// Stores `value` under `key`; others see it after the next
    /// [`fence`](Self::fence). `FI_EINVAL` for text that cannot travel.
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        let req = Request::KvsPut {
            key: key.into(),
            value: value.into(),
        };
        self.call(&req).map(drop)
    }

    /// Waits until every process of the job entered the fence.
    pub fn fence(&mut self) -> Result<()> {
        self.call(&Request::KvsFence).map(drop)
    }

    /// The value some process put under `key` before the last fence;
    /// `FI_ENODATA` when none did.
    pub fn get(&mut self, key: &str) -> Result<String> {
        let req = Request::KvsGet {
            jobid: self.jobid.clone(),
            key: key.into(),
        };
        self.value(&req)?
            .ok_or_else(|| Error::new(ErrorKind::NoData, format!("PMI-2: nobody put {key:?}")))
    }

    /// A job attribute (`info-getjobattr`), if the manager has it.
    pub fn job_attr(&mut self, key: &str) -> Result<Option<String>> {
        self.value(&Request::JobAttr { key: key.into() })
    }

    /// This rank's index on its node and the node's rank count, from the
    /// job's `PMI_process_mapping`; `None` when the manager gives none or
    /// one psmrail cannot read.
    pub fn local_rank_and_size(&mut self) -> Option<(usize, usize)> {
        let mapping = self.job_attr("PMI_process_mapping").ok()??;
        local_rank_and_size(&mapping, self.size, self.rank)
    }

    /// Tells the manager this process is done with it (also on drop).
    pub fn finalize(&mut self) -> Result<()> {
        if self.finalized {
            return Ok(());
        }
        self.finalized = true;
        self.call(&Request::Finalize).map(drop)
    }

    fn value(&mut self, req: &Request) -> Result<Option<String>> {
        match self.call(req)? {
            Reply::Value(v) => Ok(v),
            other => Err(Error::new(
                ErrorKind::Io,
                format!("PMI-2: {req:?} answered by {other:?}"),
            )),
        }
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

impl Drop for Pmi2Client {
    fn drop(&mut self) {
        let _ = self.finalize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A manager that answers the init line, then each frame from a
    /// script (checking its command); then closes.
    fn manager(
        script: Vec<(&'static str, &'static str)>,
    ) -> (UnixStream, std::thread::JoinHandle<()>) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            let mut s = theirs;
            let mut buf = [0u8; 512];
            let mut got = Vec::new();
            while !got.ends_with(b"\n") {
                let n = s.read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            assert_eq!(got, INIT);
            s.write_all(b"cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n")
                .unwrap();
            let mut d = FrameDecoder::default();
            for (want, answer) in script {
                let m = loop {
                    if let Some(m) = d.next_message() {
                        break m.unwrap();
                    }
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        return;
                    }
                    d.push(&buf[..n]);
                };
                assert_eq!(m.cmd, want);
                if !answer.is_empty() {
                    s.write_all(format!("{:>6}{answer}", answer.len()).as_bytes())
                        .unwrap();
                }
            }
            // Silent, until the client closes.
            while s.read(&mut buf).is_ok_and(|n| n > 0) {}
        });
        (ours, t)
    }

    #[test]
    fn a_scripted_manager_is_talked_to_in_order() {
        let (sock, t) = manager(vec![
            ("fullinit", "cmd=fullinit-response;rank=1;size=4;rc=0;"),
            ("job-getid", "cmd=job-getid-response;jobid=kvs_9;rc=0;"),
            ("kvs-put", "cmd=kvs-put-response;rc=0;"),
            ("kvs-fence", "cmd=kvs-fence-response;rc=0;"),
            (
                "kvs-get",
                "cmd=kvs-get-response;found=TRUE;value=cafe;rc=0;",
            ),
            ("kvs-get", "cmd=kvs-get-response;found=FALSE;rc=0;"),
            (
                "info-getjobattr",
                "cmd=info-getjobattr-response;found=TRUE;value=(vector,(0,2,2));rc=0;",
            ),
            ("finalize", "cmd=finalize-response;rc=0;"),
        ]);
        let mut c = Pmi2Client::connect(sock, Some(1), Duration::from_secs(5)).unwrap();
        assert_eq!((c.rank(), c.size(), c.jobid()), (1, 4, "kvs_9"));
        c.put("ep-1", "cafe").unwrap();
        c.fence().unwrap();
        assert_eq!(c.get("ep-1").unwrap(), "cafe");
        assert_eq!(c.get("nobody").unwrap_err().kind(), ErrorKind::NoData);
        assert_eq!(c.local_rank_and_size(), Some((1, 2)));
        c.finalize().unwrap();
        drop(c);
        t.join().unwrap();
    }

    #[test]
    fn a_silent_manager_is_an_error_in_bounded_time() {
        let (sock, t) = manager(vec![("fullinit", "")]);
        let start = std::time::Instant::now();
        let e = Pmi2Client::connect(sock, None, Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
        assert!(start.elapsed() < Duration::from_secs(5));
        t.join().unwrap();
    }
}
