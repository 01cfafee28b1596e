//! Checks shared by the cargo-fuzz targets (`fuzz/fuzz_targets/mrail_*.rs`)
//! and the corpus replay test (`tests/fuzz_corpus.rs`). Not a stable API.
//!
//! Each check takes arbitrary bytes, must never panic on them, and asserts
//! invariants (a failed assertion is a bug the fuzzer found):
//! * [`fuzz_header`]: the mrail header decoder and the data tag layout;
//! * [`fuzz_reorder`]: the reorder buffer, driven by a script and compared
//!   with a reference model.

use std::collections::BTreeMap;

use super::core::header::{
    data_tag, decode, split_data_tag, Frame, EAGER_HEADER_LEN, MAX_HEADER_LEN,
};
use super::core::sequence::{Reorder, ReorderError};

/// Decodes `data` as a control frame. Returns whether it decoded.
///
/// Asserts: no panic; a decoded frame's header length is its kind's, a
/// frame other than Eager is exactly `data`, and the frame re-encodes to
/// exactly the header bytes it came from; an error has a message. The
/// first eight bytes, read as a rail tag, also check the data tag layout:
/// a tag that splits is rebuilt exactly by [`data_tag`].
pub fn fuzz_header(data: &[u8]) -> bool {
    if let Some(first) = data.first_chunk::<8>() {
        let tag = u64::from_le_bytes(*first);
        if let Some((recv_id, part)) = split_data_tag(tag) {
            assert_eq!(data_tag(recv_id, part), tag, "data tag {tag:#x}");
        }
    }
    match decode(data) {
        Ok((frame, len)) => {
            assert_eq!(len, frame.header_len());
            if matches!(frame, Frame::Eager { .. }) {
                assert_eq!(len, EAGER_HEADER_LEN);
            } else {
                assert_eq!(len, data.len(), "{frame:?} left bytes over");
            }
            let mut again = [0u8; MAX_HEADER_LEN];
            let n = frame
                .write_to(&mut again)
                .unwrap_or_else(|e| panic!("decoded {frame:?} does not encode: {e}"));
            assert_eq!(
                &again[..n],
                &data[..len],
                "{frame:?} re-encodes differently"
            );
            true
        }
        Err(err) => {
            assert!(!err.to_string().is_empty());
            false
        }
    }
}

/// Half the sequence space.
const HALF: u32 = 1 << 31;

/// The reference the reorder buffer is checked against: sequence numbers
/// counted without wrapping from the first expected one.
struct Model {
    /// The next sequence number, wrapped, and unwrapped.
    expected: u32,
    next: u64,
    held: BTreeMap<u64, u64>,
}

impl Model {
    /// What `accept(seq, item)` must do: `Ok` after storing, or the error.
    fn accept(&mut self, seq: u32, item: u64, window: u32) -> Result<(), ReorderError<u64>> {
        // A signed distance: negative is behind.
        let ahead = seq.wrapping_sub(self.expected);
        if ahead >= HALF {
            return Err(ReorderError::Duplicate(item));
        }
        if ahead >= window {
            return Err(ReorderError::TooFar(item));
        }
        let key = self.next + u64::from(ahead);
        if self.held.contains_key(&key) {
            return Err(ReorderError::Duplicate(item));
        }
        self.held.insert(key, item);
        Ok(())
    }

    fn pop(&mut self) -> Option<(u32, u64)> {
        let item = self.held.remove(&self.next)?;
        let seq = self.expected;
        self.expected = seq.wrapping_add(1);
        self.next += 1;
        Some((seq, item))
    }
}

/// Runs a script against a [`Reorder`] and a reference model.
///
/// `data[0]` picks the first expected sequence number (0, just below the
/// 2^32 wrap, around 2^31, or spread over the space), `data[1]` the
/// window (1 to 64, or `u32::MAX`, which is clamped). Each further byte `b`
/// is one step:
/// * `0xff`: pop one item; `0xfe`: pop every ready item;
/// * `b < 0x80`: accept sequence number `start + b - 16`;
/// * `0x80 <= b < 0xf0`: accept `expected + (b - 0x80) - 8`;
/// * `0xf0 <= b < 0xfe`: accept `expected + 2^31 + (b - 0xf0) - 7`, around
///   the point where "ahead" turns into "behind".
///
/// Asserts: no panic; every accept is classified as the model says and a
/// refused item is handed back unchanged; pops return exactly the model's
/// items, with consecutive sequence numbers, so nothing is delivered out of
/// order or twice; the buffer never holds more than the window.
pub fn fuzz_reorder(data: &[u8]) {
    let [mode, win, script @ ..] = data else {
        return;
    };
    let spread = u32::from(mode >> 2);
    let start = match mode & 3 {
        0 => 0,
        1 => u32::MAX - spread,
        2 => (HALF - 32).wrapping_add(spread),
        _ => spread.wrapping_mul(0x0421_0843),
    };
    let window = if *win == 0xff {
        u32::MAX
    } else {
        u32::from(win % 64) + 1
    };
    let mut reorder = Reorder::with_start(start, window);
    let window = reorder.window();
    assert!((1..=HALF).contains(&window));
    let mut model = Model {
        expected: start,
        next: 0,
        held: BTreeMap::new(),
    };
    let mut last: Option<u32> = None;
    let mut pop = |reorder: &mut Reorder<u64>, model: &mut Model| {
        let got = reorder.pop_ready();
        assert_eq!(got, model.pop(), "pop");
        if let Some((seq, _)) = got {
            if let Some(prev) = last {
                assert_eq!(seq, prev.wrapping_add(1), "delivered out of order");
            }
            last = Some(seq);
        }
        got.is_some()
    };
    for (step, &b) in (0u64..).zip(script) {
        match b {
            0xff => {
                pop(&mut reorder, &mut model);
            }
            0xfe => while pop(&mut reorder, &mut model) {},
            _ => {
                let seq = if b < 0x80 {
                    start.wrapping_add_signed(i32::from(b) - 16)
                } else if b < 0xf0 {
                    model.expected.wrapping_add_signed(i32::from(b - 0x80) - 8)
                } else {
                    model
                        .expected
                        .wrapping_add(HALF)
                        .wrapping_add_signed(i32::from(b - 0xf0) - 7)
                };
                let want = model.accept(seq, step, window);
                let got = reorder.accept(seq, step);
                assert_eq!(got, want, "accept({seq}) at step {step}");
            }
        }
        assert_eq!(reorder.expected(), model.expected);
        assert_eq!(reorder.held(), model.held.len());
        assert!(reorder.held() <= window as usize, "holds beyond the window");
        assert_eq!(
            reorder.has_ready(),
            model.held.contains_key(&model.next),
            "readiness"
        );
    }
    while pop(&mut reorder, &mut model) {}
    assert!(!reorder.has_ready());
}
