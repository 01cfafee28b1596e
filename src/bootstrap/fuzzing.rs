//! Entry points for the PMI fuzz target and its corpus replay
//! (`psmrail::hooks::bootstrap`); not part of the API.

use super::pmi_wire::{encode, LineDecoder, Message, Reply, Request};

/// Decodes `data` as bytes from a process manager, cut into reads of
/// every size from 1 byte up, and checks each message against every
/// request. Never panics; whether every line was a message (and there was
/// at least one), the same however the reads were cut.
pub fn check_pmi_reply(data: &[u8]) -> bool {
    let whole = messages(data, data.len().max(1));
    for cut in [1, 2, 7] {
        let parts = messages(data, cut);
        assert_eq!(
            parts.iter().map(|m| m.is_ok()).collect::<Vec<_>>(),
            whole.iter().map(|m| m.is_ok()).collect::<Vec<_>>(),
            "reads of {cut} B decode otherwise"
        );
    }
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

fn messages(data: &[u8], cut: usize) -> Vec<crate::Result<Message>> {
    let mut d = LineDecoder::default();
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
