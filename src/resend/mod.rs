//! The resend machinery: what a sender keeps until its peer acknowledges
//! it, so that it can send it again over a new path, and how a receiver
//! knows what it already has.
//!
//! One piece, used wherever a path can break under live traffic:
//!
//! * the soft engine numbers every byte a connection carries after its
//!   handshake; when the transport resets, the connection is resumed on a
//!   new one and each side sends again what the other had not consumed
//!   ([`ResendLog`] of frame bytes and payload references, positions in
//!   bytes);
//! * a multi-rail sender numbers its messages per peer; what a rail that
//!   died had not delivered goes again on a surviving rail (a
//!   [`ResendLog`] of messages, positions in messages), and the receiver
//!   drops what arrives twice ([`ReceiveCursor`]).
//!
//! Both types are plain data (no I/O, no clocks), and take hostile input
//! (an acknowledgement of what was never sent, a resume point in the
//! past) as errors, never panics.

mod cursor;
mod log;

pub use cursor::{Accept, ReceiveCursor};
pub use log::{AckError, ResendLog};
