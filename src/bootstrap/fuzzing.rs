//! Entry points for the PMI-1 and PMI-2 fuzz targets and their corpus
//! replay (`psmrail::hooks::bootstrap`); not part of the API.

use super::pmi2_wire::{self, FrameDecoder};
use super::pmi_wire::{encode, LineDecoder, Message, Reply, Request};

/// A decoder of the manager's bytes into messages, either wire.
trait Decode: Default {
    fn push(&mut self, bytes: &[u8]);
    fn next_message(&mut self) -> Option<crate::Result<Message>>;
}

impl Decode for LineDecoder {
    fn push(&mut self, bytes: &[u8]) {
        LineDecoder::push(self, bytes)
    }
    fn next_message(&mut self) -> Option<crate::Result<Message>> {
        LineDecoder::next_message(self)
    }
}

impl Decode for FrameDecoder {
    fn push(&mut self, bytes: &[u8]) {
        FrameDecoder::push(self, bytes)
    }
    fn next_message(&mut self) -> Option<crate::Result<Message>> {
        FrameDecoder::next_message(self)
    }
}

/// `data` decoded whole, after checking that reads of 1, 2 and 7 bytes
/// decode alike.
fn decoded_however_cut<D: Decode>(data: &[u8]) -> Vec<crate::Result<Message>> {
    let whole = messages::<D>(data, data.len().max(1));
    for cut in [1, 2, 7] {
        let parts = messages::<D>(data, cut);
        assert_eq!(
            parts.iter().map(|m| m.is_ok()).collect::<Vec<_>>(),
            whole.iter().map(|m| m.is_ok()).collect::<Vec<_>>(),
            "reads of {cut} B decode otherwise"
        );
    }
    whole
}

/// Decodes `data` as bytes from a process manager, cut into reads of
/// every size from 1 byte up, and checks each message against every
/// request. Never panics; whether every line was a message (and there was
/// at least one), the same however the reads were cut.
pub fn check_pmi_reply(data: &[u8]) -> bool {
    let whole = decoded_however_cut::<LineDecoder>(data);
    let requests = [
        Request::Init,
        Request::GetMaxes,
        Request::GetMyKvsname,
        Request::Put {
            kvsname: "kvs".into(),
            key: "k".into(),
            value: "v".into(),
        },
        Request::Barrier,
        Request::Get {
            kvsname: "kvs".into(),
            key: "k".into(),
        },
        Request::Finalize,
    ];
    for m in whole.iter().flatten() {
        assert!(m.attrs.iter().all(|(k, _)| !k.is_empty()));
        let answered = requests
            .iter()
            .filter(|r| Reply::from_message(r, m).is_ok())
            .count();
        assert!(answered <= 1, "{m:?} answers {answered} requests");
        // What a manager says can be said back: no request line breaks
        // on a value taken from it.
        if let Some(v) = m.get("value") {
            let put = Request::Put {
                kvsname: "kvs".into(),
                key: "k".into(),
                value: v.into(),
            };
            if let Ok(line) = encode(&put) {
                let back = Message::parse(&line[..line.len() - 1]).unwrap();
                assert_eq!(back.get("value"), Some(v));
            }
        }
    }
    !whole.is_empty() && whole.iter().all(Result::is_ok)
}

/// Like [`check_pmi_reply`], for PMI-2 frames: never panics, decodes
/// alike however reads are cut, no frame answers two requests, and a
/// value taken from the manager travels back in a put unchanged (or is
/// refused).
pub fn check_pmi2_reply(data: &[u8]) -> bool {
    use pmi2_wire::{encode, parse_body, Reply, Request};
    let whole = decoded_however_cut::<FrameDecoder>(data);
    let requests = [
        Request::FullInit { rank: Some(0) },
        Request::JobGetId,
        Request::KvsPut {
            key: "k".into(),
            value: "v".into(),
        },
        Request::KvsFence,
        Request::KvsGet {
            jobid: "j".into(),
            key: "k".into(),
        },
        Request::JobAttr { key: "k".into() },
        Request::Finalize,
    ];
    for m in whole.iter().flatten() {
        assert!(m.attrs.iter().all(|(k, _)| !k.is_empty()));
        let answered: Vec<_> = requests
            .iter()
            .filter(|r| Reply::from_message(r, m).is_ok())
            .collect();
        assert!(answered.len() <= 1, "{m:?} answers {answered:?}");
        if let Some(v) = m.get("value") {
            let put = Request::KvsPut {
                key: "k".into(),
                value: v.into(),
            };
            if let Ok(frame) = encode(&put) {
                let back = parse_body(&frame[6..]).unwrap();
                assert_eq!(back.get("value"), Some(v));
            }
        }
    }
    !whole.is_empty() && whole.iter().all(Result::is_ok)
}

fn messages<D: Decode>(data: &[u8], cut: usize) -> Vec<crate::Result<Message>> {
    let mut d = D::default();
    let mut out = Vec::new();
    for part in data.chunks(cut) {
        d.push(part);
        while let Some(m) = d.next_message() {
            let failed = m.is_err();
            out.push(m);
            if failed {
                return out;
            }
        }
    }
    out
}
