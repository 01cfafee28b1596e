//! The PMI-2 wire protocol, sans I/O: what a process and MPICH's hydra
//! (or Slurm with `--mpi=pmi2`) exchange over `PMI_FD` once the process
//! opened with `cmd=init pmi_version=2 pmi_subversion=0` (a PMI-1 line,
//! answered by one, [`INIT`] and [`check_init`]).
//!
//! Every later message is a frame: its length as 6 ASCII characters
//! (decimal, space-padded), then that many bytes of `cmd=<name>;` and
//! `key=value;` attributes. The PMI-2 specification escapes a `;` inside
//! a value as `;;`; hydra does not unescape it (a value cut at the `;`
//! comes back, measured with MPICH 4.0), so [`encode`] refuses `;` in
//! what it sends and [`FrameDecoder`] reads `;;` as `;` in what it gets.
//! [`Request`] is what psmrail asks, [`Reply::from_message`] checks an
//! answer against it. `pmi2_client.rs` is the I/O edge.
//!
//! ```
//! use psmrail::bootstrap::pmi2_wire::{encode, FrameDecoder, Reply, Request};
//!
//! let put = Request::KvsPut { key: "ep-3".into(), value: "0a1b".into() };
//! assert_eq!(encode(&put)?, b"    32cmd=kvs-put;key=ep-3;value=0a1b;");
//! let mut d = FrameDecoder::default();
//! d.push(b"    26cmd=kvs-put-response;rc=0;");
//! let answer = d.next_message().unwrap()?;
//! assert_eq!(Reply::from_message(&put, &answer)?, Reply::Done);
//! # Ok::<(), psmrail::Error>(())
//! ```

use super::pmi_wire::Message;
use crate::{Error, ErrorKind, Result};

/// The opening line (PMI-1 syntax) that asks for PMI-2.
pub const INIT: &[u8] = b"cmd=init pmi_version=2 pmi_subversion=0\n";

/// The longest frame body either side may send (hydra's longest value is
/// 1,024 bytes; a frame carries a key and a command besides).
pub const MAX_FRAME: usize = 64 * 1024;

/// Width of the length prefix.
const PREFIX: usize = 6;

/// What psmrail asks of the process manager after [`INIT`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `fullinit`: this process's rank as the launcher gave it
    /// (`PMI_RANK`); answered with the rank and the job's size.
    FullInit {
        /// `PMI_RANK`, or none when the launcher gave none.
        rank: Option<usize>,
    },
    /// `job-getid`: the job's id.
    JobGetId,
    /// `kvs-put`: stores `value` under `key`, readable by all after a fence.
    KvsPut {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// `kvs-fence`: waits until every process entered it; puts before it
    /// are readable after it.
    KvsFence,
    /// `kvs-get`: the value some process put under `key`.
    KvsGet {
        /// The job's id, as `job-getid` gave it.
        jobid: String,
        /// The key.
        key: String,
    },
    /// `info-getjobattr`: a fact about the job (e.g.
    /// `PMI_process_mapping`).
    JobAttr {
        /// The attribute's name.
        key: String,
    },
    /// `finalize`: the process is done with the manager.
    Finalize,
}

/// The manager's answer to a [`Request`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `kvs-put-response`, `kvs-fence-response`, `finalize-response`.
    Done,
    /// `fullinit-response`.
    FullInit {
        /// This process's rank.
        rank: usize,
        /// The job's size.
        size: usize,
    },
    /// `job-getid-response`.
    JobId(String),
    /// `kvs-get-response` or `info-getjobattr-response`: the value, or
    /// `None` when `found=FALSE`.
    Value(Option<String>),
}

fn wire_error(what: String) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("PMI-2: the process manager sent {what}"),
    )
}

/// Checks the manager's answer to [`INIT`] (a PMI-1 line): `FI_EIO` when
/// it refuses, or answers with another version.
pub fn check_init(msg: &Message) -> Result<()> {
    if msg.cmd != "response_to_init" {
        return Err(wire_error(format!(
            "cmd={} where cmd=response_to_init was due",
            msg.cmd
        )));
    }
    if msg.get("rc") != Some("0") || msg.get("pmi_version") != Some("2") {
        return Err(Error::new(
            ErrorKind::Io,
            format!(
                "PMI-2: the process manager does not speak PMI-2 (pmi_version={}, rc={})",
                msg.get("pmi_version").unwrap_or("none"),
                msg.get("rc").unwrap_or("none")
            ),
        ));
    }
    Ok(())
}

/// Checks that `what`'s `text` can travel as one attribute value.
fn word(what: &str, text: &str) -> Result<()> {
    if text.is_empty()
        || text
            .bytes()
            .any(|b| b == b';' || b == b'=' || b < 0x20 || b == 0x7f)
    {
        return Err(Error::new(
            ErrorKind::Inval,
            format!(
                "PMI-2: the {what} {text:?} must be non-empty printable text without ';' or '='"
            ),
        ));
    }
    Ok(())
}

/// The frame that sends `req`; `FI_EINVAL` for a key or value that cannot
/// travel, or a body longer than [`MAX_FRAME`].
pub fn encode(req: &Request) -> Result<Vec<u8>> {
    let body = match req {
        Request::FullInit { rank } => match rank {
            Some(r) => format!("cmd=fullinit;pmirank={r};threaded=FALSE;"),
            None => "cmd=fullinit;threaded=FALSE;".to_string(),
        },
        Request::JobGetId => "cmd=job-getid;".to_string(),
        Request::KvsPut { key, value } => {
            word("key", key)?;
            word("value", value)?;
            format!("cmd=kvs-put;key={key};value={value};")
        }
        Request::KvsFence => "cmd=kvs-fence;".to_string(),
        Request::KvsGet { jobid, key } => {
            word("job id", jobid)?;
            word("key", key)?;
            format!("cmd=kvs-get;jobid={jobid};srcid=-1;key={key};")
        }
        Request::JobAttr { key } => {
            word("attribute", key)?;
            format!("cmd=info-getjobattr;key={key};")
        }
        Request::Finalize => "cmd=finalize;".to_string(),
    };
    if body.len() > MAX_FRAME {
        return Err(Error::new(
            ErrorKind::Inval,
            format!(
                "PMI-2: a {} B frame is longer than {MAX_FRAME} B",
                body.len()
            ),
        ));
    }
    let mut frame = format!("{:>width$}", body.len(), width = PREFIX).into_bytes();
    frame.extend_from_slice(body.as_bytes());
    Ok(frame)
}

/// Parses one frame body: `cmd=<name>;` first, then `key=value;`
/// attributes, `;;` standing for a `;` inside a value.
pub fn parse_body(body: &[u8]) -> Result<Message> {
    let text =
        std::str::from_utf8(body).map_err(|_| wire_error("a frame that is not UTF-8".into()))?;
    let mut attrs = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once('=')
            .ok_or_else(|| wire_error(format!("{rest:?}, which is no key=value attribute")))?;
        if key.is_empty() || key.contains(';') {
            return Err(wire_error(format!("{rest:?}, an attribute without a key")));
        }
        // The value runs to the first `;` not doubled.
        let mut value = String::new();
        let mut chars = after.char_indices().peekable();
        let end = loop {
            match chars.next() {
                None => {
                    return Err(wire_error(format!(
                        "{rest:?}, an attribute without its ';'"
                    )))
                }
                Some((i, ';')) => {
                    if let Some(&(_, ';')) = chars.peek() {
                        chars.next();
                        value.push(';');
                    } else {
                        break i;
                    }
                }
                Some((_, c)) => value.push(c),
            }
        };
        attrs.push((key.to_string(), value));
        rest = &after[end + 1..];
    }
    let mut attrs = attrs.into_iter();
    match attrs.next() {
        Some((k, cmd)) if k == "cmd" => Ok(Message {
            cmd,
            attrs: attrs.collect(),
        }),
        _ => Err(wire_error(format!(
            "{text:?}, which does not start with cmd="
        ))),
    }
}

/// Cuts the manager's bytes into frames, at most [`MAX_FRAME`] long.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
}

impl FrameDecoder {
    /// Takes bytes read from the manager.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message, if one arrived: `FI_EIO` for a length
    /// prefix that is no number or above [`MAX_FRAME`], or a body that is
    /// no message (then the decoder is of no further use).
    pub fn next_message(&mut self) -> Option<Result<Message>> {
        if self.buf.len() < PREFIX {
            return None;
        }
        let prefix = String::from_utf8_lossy(&self.buf[..PREFIX]).into_owned();
        let len = match prefix.trim().parse::<usize>() {
            Ok(n) if n <= MAX_FRAME => n,
            _ => {
                return Some(Err(wire_error(format!(
                    "the length prefix {prefix:?}, which is no length up to {MAX_FRAME}"
                ))))
            }
        };
        if self.buf.len() < PREFIX + len {
            return None;
        }
        let frame: Vec<u8> = self.buf.drain(..PREFIX + len).collect();
        Some(parse_body(&frame[PREFIX..]))
    }
}

impl Reply {
    /// Checks that `msg` answers `req`, and reads it: `FI_EIO` for the
    /// answer to another command, a malformed one, or a failure the
    /// manager reports (`rc` other than 0, with its `errmsg`).
    pub fn from_message(req: &Request, msg: &Message) -> Result<Reply> {
        let expect = match req {
            Request::FullInit { .. } => "fullinit-response",
            Request::JobGetId => "job-getid-response",
            Request::KvsPut { .. } => "kvs-put-response",
            Request::KvsFence => "kvs-fence-response",
            Request::KvsGet { .. } => "kvs-get-response",
            Request::JobAttr { .. } => "info-getjobattr-response",
            Request::Finalize => "finalize-response",
        };
        if msg.cmd != expect {
            return Err(wire_error(format!(
                "cmd={} where cmd={expect} was due",
                msg.cmd
            )));
        }
        match msg.get("rc") {
            Some("0") => {}
            rc => {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "PMI-2: {expect} failed (rc={}: {})",
                        rc.unwrap_or("none"),
                        msg.get("errmsg").unwrap_or("no reason given")
                    ),
                ))
            }
        }
        let need = |key: &str| {
            msg.get(key)
                .ok_or_else(|| wire_error(format!("cmd={expect} without {key}")))
        };
        let number = |key: &str| -> Result<usize> {
            let v = need(key)?;
            v.parse()
                .map_err(|_| wire_error(format!("{key}={v:?}, which is no number")))
        };
        Ok(match req {
            Request::FullInit { .. } => Reply::FullInit {
                rank: number("rank")?,
                size: number("size")?,
            },
            Request::JobGetId => Reply::JobId(need("jobid")?.to_string()),
            Request::KvsGet { .. } | Request::JobAttr { .. } => match need("found")? {
                "TRUE" => Reply::Value(Some(need("value")?.to_string())),
                "FALSE" => Reply::Value(None),
                other => return Err(wire_error(format!("found={other:?}"))),
            },
            Request::KvsPut { .. } | Request::KvsFence | Request::Finalize => Reply::Done,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(frame: &str) -> Message {
        let mut d = FrameDecoder::default();
        d.push(frame.as_bytes());
        d.next_message().unwrap().unwrap()
    }

    fn framed(body: &str) -> String {
        format!("{:>6}{body}", body.len())
    }

    #[test]
    fn requests_are_the_frames_hydra_reads() {
        assert_eq!(
            encode(&Request::FullInit { rank: Some(3) }).unwrap(),
            framed("cmd=fullinit;pmirank=3;threaded=FALSE;").as_bytes()
        );
        assert_eq!(encode(&Request::KvsFence).unwrap(), b"    14cmd=kvs-fence;");
        let get = Request::KvsGet {
            jobid: "kvs_1_0".into(),
            key: "k".into(),
        };
        assert_eq!(
            encode(&get).unwrap(),
            framed("cmd=kvs-get;jobid=kvs_1_0;srcid=-1;key=k;").as_bytes()
        );
    }

    #[test]
    fn keys_and_values_that_cannot_travel_are_refused() {
        for bad in ["", "a;b", "a=b", "a\nb"] {
            let put = Request::KvsPut {
                key: "k".into(),
                value: bad.into(),
            };
            assert_eq!(
                encode(&put).unwrap_err().kind(),
                ErrorKind::Inval,
                "{bad:?}"
            );
        }
        let long = Request::KvsPut {
            key: "k".into(),
            value: "v".repeat(MAX_FRAME),
        };
        assert_eq!(encode(&long).unwrap_err().kind(), ErrorKind::Inval);
    }

    #[test]
    fn answers_hydra_sends_are_read_and_checked() {
        // As MPICH 4.0's hydra answers (recorded with a shell client).
        let full = answer(&framed(
            "cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=1;size=2;appnum=0;\
             debugged=FALSE;pmiverbose=FALSE;rc=0;",
        ));
        assert_eq!(
            Reply::from_message(&Request::FullInit { rank: Some(1) }, &full).unwrap(),
            Reply::FullInit { rank: 1, size: 2 }
        );
        let get = Request::KvsGet {
            jobid: "j".into(),
            key: "k".into(),
        };
        let found = answer(&framed("cmd=kvs-get-response;found=TRUE;value=v;rc=0;"));
        assert_eq!(
            Reply::from_message(&get, &found).unwrap(),
            Reply::Value(Some("v".into()))
        );
        let missing = answer(&framed("cmd=kvs-get-response;found=FALSE;rc=0;"));
        assert_eq!(
            Reply::from_message(&get, &missing).unwrap(),
            Reply::Value(None)
        );
        let attr = answer(&framed(
            "cmd=info-getjobattr-response;found=TRUE;value=(vector,(0,1,1));rc=0;",
        ));
        assert_eq!(
            Reply::from_message(
                &Request::JobAttr {
                    key: "PMI_process_mapping".into()
                },
                &attr
            )
            .unwrap(),
            Reply::Value(Some("(vector,(0,1,1))".into()))
        );
        let failed = answer(&framed("cmd=kvs-fence-response;rc=1;errmsg=gone;"));
        let e = Reply::from_message(&Request::KvsFence, &failed).unwrap_err();
        assert!(e.to_string().contains("gone"), "{e}");
        let wrong = Reply::from_message(&Request::KvsFence, &found);
        assert_eq!(wrong.unwrap_err().kind(), ErrorKind::Io);
    }

    #[test]
    fn the_init_line_must_grant_version_2() {
        let line = |l: &str| Message::parse(l.as_bytes()).unwrap();
        check_init(&line(
            "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0",
        ))
        .unwrap();
        for bad in [
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0",
            "cmd=response_to_init pmi_version=2 rc=-1",
            "cmd=barrier_out",
        ] {
            assert_eq!(
                check_init(&line(bad)).unwrap_err().kind(),
                ErrorKind::Io,
                "{bad}"
            );
        }
    }

    #[test]
    fn the_decoder_cuts_frames_wherever_reads_end_and_bounds_them() {
        let stream = format!(
            "{}{}",
            framed("cmd=kvs-fence-response;rc=0;"),
            framed("cmd=kvs-get-response;found=TRUE;value=a;;b;rc=0;")
        );
        let mut d = FrameDecoder::default();
        for b in stream.as_bytes().chunks(4) {
            d.push(b);
        }
        assert_eq!(d.next_message().unwrap().unwrap().cmd, "kvs-fence-response");
        assert_eq!(d.next_message().unwrap().unwrap().get("value"), Some("a;b"));
        assert!(d.next_message().is_none());
        for junk in [
            "abcdef".to_string(),
            format!("{:>6}", MAX_FRAME + 1),
            framed("cmd=x"),
            framed("value=1;"),
            framed("cmd=x;novalue;"),
            framed("=v;"),
        ] {
            let mut d = FrameDecoder::default();
            d.push(junk.as_bytes());
            d.push(&[b' '; 8]);
            match d.next_message() {
                Some(m) => assert_eq!(m.unwrap_err().kind(), ErrorKind::Io, "{junk:?}"),
                None => panic!("{junk:?} decoded to nothing"),
            }
        }
    }
}
