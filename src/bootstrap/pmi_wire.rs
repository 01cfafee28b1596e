//! The PMI-1 wire protocol, sans I/O: the text commands a process and its
//! launcher's process manager (MPICH's hydra `mpiexec`, Slurm with
//! `--mpi=pmi2` in its PMI-1 mode) exchange over the socket the launcher
//! hands over in `PMI_FD`.
//!
//! A message is one line: space-separated `key=value` attributes ending
//! in `\n`, the first of them `cmd=<name>`. The process asks, the manager
//! answers, one request at a time. [`Request`] is what psmrail asks,
//! [`encode`] writes it, [`LineDecoder`] cuts the manager's bytes into
//! [`Message`]s, and [`Reply::from_message`] checks one against the
//! request it answers. Nothing here touches a socket; `pmi_client.rs` is
//! the edge.
//!
//! ```
//! use psmrail::bootstrap::pmi_wire::{encode, LineDecoder, Reply, Request};
//!
//! let put = Request::Put { kvsname: "kvs_7_0".into(), key: "ep-3".into(), value: "0a1b".into() };
//! assert_eq!(encode(&put)?, b"cmd=put kvsname=kvs_7_0 key=ep-3 value=0a1b\n");
//! let mut d = LineDecoder::default();
//! d.push(b"cmd=put_result rc=0 msg=success\n");
//! let answer = d.next_message().unwrap()?;
//! assert_eq!(Reply::from_message(&put, &answer)?, Reply::Done);
//! # Ok::<(), psmrail::Error>(())
//! ```

use crate::{Error, ErrorKind, Result};

/// The longest line either side may send (the manager's `vallen_max` is
/// 1,024 bytes in hydra; a line carries a key and a name besides).
pub const MAX_LINE: usize = 4096;

/// What psmrail asks of the process manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `init`: the first message, naming protocol version 1.1.
    Init,
    /// `get_maxes`: the longest key-value space name, key and value.
    GetMaxes,
    /// `get_my_kvsname`: the job's key-value space.
    GetMyKvsname,
    /// `put`: stores `value` under `key` (visible to others after a
    /// barrier).
    Put {
        /// The job's key-value space.
        kvsname: String,
        /// The key (no spaces, `=` or newlines).
        key: String,
        /// The value (no spaces, `=` or newlines).
        value: String,
    },
    /// `barrier_in`: waits until every process of the job entered it.
    Barrier,
    /// `get`: the value another process put under `key`.
    Get {
        /// The job's key-value space.
        kvsname: String,
        /// The key.
        key: String,
    },
    /// `finalize`: the process is done with the manager.
    Finalize,
}

/// The manager's answer to a [`Request`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `response_to_init`, `put_result`, `barrier_out`, `finalize_ack`.
    Done,
    /// `maxes`.
    Maxes {
        /// Longest key-value space name.
        kvsname: usize,
        /// Longest key.
        key: usize,
        /// Longest value.
        value: usize,
    },
    /// `my_kvsname`.
    Kvsname(String),
    /// `get_result` with a value.
    Value(String),
}

/// One line of the protocol: its command and attributes, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The `cmd` attribute.
    pub cmd: String,
    /// Every other attribute.
    pub attrs: Vec<(String, String)>,
}

impl Message {
    /// The value of attribute `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Parses one line (without its `\n`).
    pub fn parse(line: &[u8]) -> Result<Message> {
        let text = std::str::from_utf8(line)
            .map_err(|_| wire_error("a line that is not UTF-8".to_string()))?;
        let mut cmd = None;
        let mut attrs = Vec::new();
        for word in text.split(' ').filter(|w| !w.is_empty()) {
            let (k, v) = word
                .split_once('=')
                .ok_or_else(|| wire_error(format!("{word:?} is no key=value attribute")))?;
            if k.is_empty() {
                return Err(wire_error(format!("{word:?} has no key")));
            }
            if k == "cmd" && cmd.is_none() {
                cmd = Some(v.to_string());
            } else {
                attrs.push((k.to_string(), v.to_string()));
            }
        }
        let cmd = cmd.ok_or_else(|| wire_error(format!("{text:?} has no cmd")))?;
        Ok(Message { cmd, attrs })
    }
}

fn wire_error(what: String) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("PMI: the process manager sent {what}"),
    )
}

/// Checks that `what`'s `text` can travel as one attribute value.
fn word(what: &str, text: &str) -> Result<()> {
    if text.is_empty()
        || text
            .bytes()
            .any(|b| b == b' ' || b == b'=' || b < 0x20 || b == 0x7f)
    {
        return Err(Error::new(
            ErrorKind::Inval,
            format!(
                "PMI: the {what} {text:?} must be non-empty printable text without spaces or '='"
            ),
        ));
    }
    Ok(())
}

/// The line that sends `req` (with its `\n`); `FI_EINVAL` for a key or
/// value that cannot travel, or a line longer than [`MAX_LINE`].
pub fn encode(req: &Request) -> Result<Vec<u8>> {
    let line = match req {
        Request::Init => "cmd=init pmi_version=1 pmi_subversion=1".to_string(),
        Request::GetMaxes => "cmd=get_maxes".to_string(),
        Request::GetMyKvsname => "cmd=get_my_kvsname".to_string(),
        Request::Put {
            kvsname,
            key,
            value,
        } => {
            word("key-value space name", kvsname)?;
            word("key", key)?;
            word("value", value)?;
            format!("cmd=put kvsname={kvsname} key={key} value={value}")
        }
        Request::Barrier => "cmd=barrier_in".to_string(),
        Request::Get { kvsname, key } => {
            word("key-value space name", kvsname)?;
            word("key", key)?;
            format!("cmd=get kvsname={kvsname} key={key}")
        }
        Request::Finalize => "cmd=finalize".to_string(),
    };
    if line.len() >= MAX_LINE {
        return Err(Error::new(
            ErrorKind::Inval,
            format!("PMI: a {} B line is longer than {MAX_LINE} B", line.len()),
        ));
    }
    let mut bytes = line.into_bytes();
    bytes.push(b'\n');
    Ok(bytes)
}

/// Cuts the manager's bytes into lines, at most [`MAX_LINE`] long.
#[derive(Debug, Default)]
pub struct LineDecoder {
    buf: Vec<u8>,
}

impl LineDecoder {
    /// Takes bytes read from the manager.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message, if one arrived: `FI_EIO` for a line
    /// that is no message, or for more than [`MAX_LINE`] bytes without an
    /// end of line (then the decoder is of no further use).
    pub fn next_message(&mut self) -> Option<Result<Message>> {
        match self.buf.iter().position(|&b| b == b'\n') {
            Some(end) => {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                Some(Message::parse(&line[..end]))
            }
            None if self.buf.len() > MAX_LINE => Some(Err(wire_error(format!(
                "{} B without an end of line",
                self.buf.len()
            )))),
            None => None,
        }
    }
}

impl Reply {
    /// Checks that `msg` answers `req`, and reads it: `FI_EIO` for the
    /// answer to another command or a malformed one, `FI_ENODATA` for a
    /// `get` of a key nobody put, `FI_EIO` for any other failure the
    /// manager reports (with its message).
    pub fn from_message(req: &Request, msg: &Message) -> Result<Reply> {
        let expect = match req {
            Request::Init => "response_to_init",
            Request::GetMaxes => "maxes",
            Request::GetMyKvsname => "my_kvsname",
            Request::Put { .. } => "put_result",
            Request::Barrier => "barrier_out",
            Request::Get { .. } => "get_result",
            Request::Finalize => "finalize_ack",
        };
        if msg.cmd != expect {
            return Err(wire_error(format!(
                "cmd={} where cmd={expect} was due",
                msg.cmd
            )));
        }
        if let Some(rc) = msg.get("rc") {
            if rc != "0" {
                let why = msg.get("msg").unwrap_or("no reason given");
                let kind = if matches!(req, Request::Get { .. }) {
                    ErrorKind::NoData
                } else {
                    ErrorKind::Io
                };
                return Err(Error::new(
                    kind,
                    format!("PMI: {expect} failed (rc={rc}: {why})"),
                ));
            }
        }
        let need = |key: &str| {
            msg.get(key)
                .ok_or_else(|| wire_error(format!("cmd={expect} without {key}")))
        };
        let number = |key: &str| -> Result<usize> {
            let v = need(key)?;
            v.parse()
                .map_err(|_| wire_error(format!("{key}={v:?}, which is no length")))
        };
        Ok(match req {
            Request::Init => {
                let version = need("pmi_version")?;
                if version != "1" {
                    return Err(wire_error(format!("PMI version {version}, not 1")));
                }
                Reply::Done
            }
            Request::GetMaxes => Reply::Maxes {
                kvsname: number("kvsname_max")?,
                key: number("keylen_max")?,
                value: number("vallen_max")?,
            },
            Request::GetMyKvsname => Reply::Kvsname(need("kvsname")?.to_string()),
            Request::Get { .. } => Reply::Value(need("value")?.to_string()),
            Request::Put { .. } | Request::Barrier | Request::Finalize => Reply::Done,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &str) -> Message {
        let mut d = LineDecoder::default();
        d.push(line.as_bytes());
        d.next_message().unwrap().unwrap()
    }

    #[test]
    fn requests_are_the_lines_hydra_reads() {
        let get = Request::Get {
            kvsname: "kvs_1_0".into(),
            key: "k".into(),
        };
        assert_eq!(
            encode(&Request::Init).unwrap(),
            b"cmd=init pmi_version=1 pmi_subversion=1\n"
        );
        assert_eq!(encode(&Request::Barrier).unwrap(), b"cmd=barrier_in\n");
        assert_eq!(encode(&get).unwrap(), b"cmd=get kvsname=kvs_1_0 key=k\n");
        assert_eq!(encode(&Request::Finalize).unwrap(), b"cmd=finalize\n");
    }

    #[test]
    fn keys_and_values_that_cannot_travel_are_refused() {
        for bad in ["", "a b", "a=b", "a\nb", "tab\there"] {
            let put = Request::Put {
                kvsname: "kvs".into(),
                key: "k".into(),
                value: bad.into(),
            };
            let e = encode(&put).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Inval, "{bad:?}");
        }
        let long = Request::Put {
            kvsname: "kvs".into(),
            key: "k".into(),
            value: "v".repeat(MAX_LINE),
        };
        assert_eq!(encode(&long).unwrap_err().kind(), ErrorKind::Inval);
    }

    #[test]
    fn answers_are_read_and_checked_against_their_request() {
        let get = Request::Get {
            kvsname: "kvs".into(),
            key: "k".into(),
        };
        assert_eq!(
            Reply::from_message(
                &get,
                &answer("cmd=get_result rc=0 msg=success value=00ff\n")
            )
            .unwrap(),
            Reply::Value("00ff".into())
        );
        let missing =
            Reply::from_message(&get, &answer("cmd=get_result rc=-1 msg=key_not_found\n"));
        let e = missing.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoData);
        assert!(e.to_string().contains("key_not_found"), "{e}");
        assert_eq!(
            Reply::from_message(
                &Request::GetMaxes,
                &answer("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n")
            )
            .unwrap(),
            Reply::Maxes {
                kvsname: 256,
                key: 64,
                value: 1024
            }
        );
        // The answer to another request, or one without what it must say.
        let wrong = Reply::from_message(&Request::Barrier, &answer("cmd=put_result rc=0\n"));
        assert_eq!(wrong.unwrap_err().kind(), ErrorKind::Io);
        let bare = Reply::from_message(&Request::GetMyKvsname, &answer("cmd=my_kvsname\n"));
        assert_eq!(bare.unwrap_err().kind(), ErrorKind::Io);
        let v2 = Reply::from_message(
            &Request::Init,
            &answer("cmd=response_to_init pmi_version=2 rc=0\n"),
        );
        assert_eq!(v2.unwrap_err().kind(), ErrorKind::Io);
        let nan = Reply::from_message(
            &Request::GetMaxes,
            &answer("cmd=maxes kvsname_max=x keylen_max=1 vallen_max=1\n"),
        );
        assert_eq!(nan.unwrap_err().kind(), ErrorKind::Io);
    }

    #[test]
    fn the_decoder_cuts_lines_wherever_reads_end_and_bounds_them() {
        let mut d = LineDecoder::default();
        let stream = b"cmd=barrier_out\ncmd=my_kvsname kvsname=kvs_9_0\n";
        for b in stream.chunks(3) {
            d.push(b);
        }
        assert_eq!(d.next_message().unwrap().unwrap().cmd, "barrier_out");
        let m = d.next_message().unwrap().unwrap();
        assert_eq!(m.get("kvsname"), Some("kvs_9_0"));
        assert!(d.next_message().is_none());
        d.push(&[b'x'; MAX_LINE + 1]);
        assert_eq!(d.next_message().unwrap().unwrap_err().kind(), ErrorKind::Io);
        for junk in ["no_equals\n", "=v\n", "key=v\n", "\u{ff}\n"] {
            let mut d = LineDecoder::default();
            d.push(junk.as_bytes());
            assert_eq!(
                d.next_message().unwrap().unwrap_err().kind(),
                ErrorKind::Io,
                "{junk:?}"
            );
        }
        let mut d = LineDecoder::default();
        d.push(&[0xff, b'\n']);
        assert_eq!(d.next_message().unwrap().unwrap_err().kind(), ErrorKind::Io);
    }
}
