//! The watch's three active messages: one argument word and, for hellos,
//! the sender's [`Identity`] as payload.
//!
//! | packet | as | payload | answer |
//! |---|---|---|---|
//! | `Hello` | request | the sender's identity (empty if unknown) | a `Hello` reply with ours |
//! | `Hello` | reply | the replier's identity | none |
//! | `Bye` | request | none | none: the sender's endpoint is closing |
//!
//! One word is within what any PSM carries (2 arguments, 256 bytes), so the
//! watch works wherever AM does.

use super::identity::{Identity, WIRE_LEN};

/// The fixed high half of the word: "PWCH".
const MAGIC: u64 = 0x5057_4348 << 32;
/// Protocol version (bits 8..16).
const VERSION: u64 = 1;
const HELLO: u64 = 1;
const BYE: u64 = 2;

/// A watch packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Packet {
    /// "I am here", with the sender's identity if it knows it.
    Hello(Option<Identity>),
    /// "My endpoint is closing."
    Bye,
}

impl Packet {
    /// The argument word and the payload bytes.
    pub(crate) fn encode(&self) -> (u64, Vec<u8>) {
        match self {
            Packet::Hello(id) => (
                MAGIC | VERSION << 8 | HELLO,
                id.map_or_else(Vec::new, |i| i.encode().to_vec()),
            ),
            Packet::Bye => (MAGIC | VERSION << 8 | BYE, Vec::new()),
        }
    }

    /// Reads a packet; the reason when it is not one of ours. A hello whose
    /// payload is not an identity is a hello without one.
    pub(crate) fn decode(args: &[u64], payload: &[u8]) -> Result<Packet, &'static str> {
        let &word = args.first().ok_or("no argument")?;
        if word & (u64::from(u32::MAX) << 32) != MAGIC {
            return Err("not a watch packet");
        }
        if (word >> 8) & 0xff != VERSION {
            return Err("another protocol version");
        }
        match word & 0xff {
            HELLO => Ok(Packet::Hello(
                (payload.len() >= WIRE_LEN)
                    .then(|| Identity::decode(payload))
                    .flatten(),
            )),
            BYE if payload.is_empty() => Ok(Packet::Bye),
            BYE => Err("a bye with a payload"),
            _ => Err("an unknown packet kind"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trips() {
        let id = Identity {
            pid: 7,
            start: 8,
            host: 9,
        };
        for p in [Packet::Hello(Some(id)), Packet::Hello(None), Packet::Bye] {
            let (w, payload) = p.encode();
            assert_eq!(Packet::decode(&[w], &payload), Ok(p));
        }
    }

    #[test]
    fn foreign_words_are_refused() {
        let (w, _) = Packet::Bye.encode();
        assert!(Packet::decode(&[], &[]).is_err());
        assert!(Packet::decode(&[0], &[]).is_err());
        assert!(Packet::decode(&[w ^ (1 << 8)], &[]).is_err(), "version");
        assert!(Packet::decode(&[w | 0x7f], &[]).is_err(), "kind");
        assert!(Packet::decode(&[w], &[1]).is_err(), "bye payload");
        let (h, _) = Packet::Hello(None).encode();
        assert_eq!(Packet::decode(&[h], &[1, 2]), Ok(Packet::Hello(None)));
    }

    proptest! {
        #[test]
        fn decode_never_panics(args in proptest::collection::vec(any::<u64>(), 0..3),
                               payload in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = Packet::decode(&args, &payload);
        }
    }
}
