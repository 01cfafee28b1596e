//! The lingerer: sockets that outlive their link until the peer has every
//! byte we sent.
//!
//! A link is done when its connection closed (or its endpoint closed), but
//! its bytes may not have reached the peer yet, typically because the peer
//! is not reading right now (with manual progress it may be waiting for
//! the very call that is closing us):
//!
//! * frames still in the link's output buffer, when the close ran out of
//!   time before the socket took them; sends among them were reported
//!   complete (eager messages complete once composed);
//! * bytes in the kernel that a TCP peer has not acknowledged. Closing a
//!   TCP socket then is safe only while the peer sends nothing more: data
//!   arriving at a closed TCP socket makes the kernel reset the connection
//!   and drop what it had not yet sent (RFC 1122, 4.2.2.13), and a peer
//!   catching up on our bytes may well write before it reads our EOF
//!   (credit, its own sends).
//!
//! Such a socket is handed to the lingerer instead of being closed: one
//! thread for the process, started when there is something to hold and
//! ending when there is not. It writes the rest of the output as the
//! socket takes it, shuts the write half down (the peer reads our last
//! bytes, then EOF), reads and drops what the peer still sends, and closes
//! the socket once closing is safe ([`safe_to_close`]), a write fails (the
//! peer is gone), or its deadline (the endpoint's `SoftConfig::linger`)
//! passed.
//!
//! A Unix-domain socket lingers only for output it still has to write: a
//! write puts the bytes straight into the peer's receive queue, where they
//! stay readable after we close. A link whose output moved to shared
//! memory lingers with its segment: the rest goes into the ring as the
//! peer makes room (looked at every tick, the peer woken as on the link),
//! then the socket's write half is shut down, which the peer reads as the
//! end once it emptied the ring (the segment stays mapped on its side).

use super::shm::path::ShmPath;
use super::transport::{poll_for, Drained, Stream};
use std::io::{self, IoSlice};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often the lingerer looks at acknowledgements (which wake no
/// `poll`) when nothing else happens.
const TICK: Duration = Duration::from_millis(5);
/// The lingerer's stack: its loop polls sockets and reads what a peer
/// still sends into a scratch buffer on the stack, far below the 2 MiB a thread gets by default, which the C library
/// keeps mapped for reuse after the thread ends.
const LINGER_STACK: usize = 256 << 10;
/// Most bytes dropped from one socket per look.
const DISCARD_LIMIT: usize = 1 << 20;

/// A socket held until its peer has our bytes.
struct Held {
    stream: Stream,
    /// The link's shared-memory path, when its output went there.
    ring: Option<Box<ShmPath>>,
    /// Bytes still to write, then shut down.
    output: Vec<u8>,
    written: usize,
    shut: bool,
    /// The peer's EOF was read (no use polling for input).
    eof: bool,
    deadline: Instant,
}

impl Held {
    /// Moves it on (write, shut down, drop input); whether it is done
    /// and may be closed.
    fn advance(&mut self) -> bool {
        if Instant::now() >= self.deadline {
            return true;
        }
        while self.written < self.output.len() {
            let rest = [IoSlice::new(&self.output[self.written..])];
            let r = match self.ring.as_mut() {
                Some(ring) => ring.write_vectored(&rest),
                None => self.stream.write_vectored(&rest),
            };
            if let Some(ring) = &self.ring {
                if ring.peer_waits_for_bytes() {
                    self.stream.send_wake();
                }
            }
            match r {
                Ok(0) => break,
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                // The peer is gone: nothing more can reach it.
                Err(_) => return true,
            }
        }
        if self.written < self.output.len() {
            // Drop the peer's input meanwhile: a peer blocked on writing
            // to us may be what keeps it from reading. Its EOF says
            // nothing about its reading, so go on writing.
            if !self.eof {
                self.eof = self.stream.discard_input(DISCARD_LIMIT) == Drained::PeerGone;
            }
            return false;
        }
        if !self.shut {
            self.stream.shutdown_write();
            self.shut = true;
        }
        safe_to_close(&self.stream)
    }

    /// What to wait for.
    fn events(&self) -> libc::c_short {
        let mut events = 0;
        if !self.eof {
            events |= libc::POLLIN;
        }
        if self.written < self.output.len() && self.ring.is_none() {
            // (Room in a ring wakes no poll: the tick looks again.)
            events |= libc::POLLOUT;
        }
        events
    }
}

struct State {
    held: Vec<Held>,
    /// The lingerer thread runs (and will look at `held` again).
    running: bool,
}

static STATE: Mutex<State> = Mutex::new(State {
    held: Vec::new(),
    running: false,
});

fn state() -> MutexGuard<'static, State> {
    // The state stays consistent whatever panicked while holding it.
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `stream` (all its output written, its write half shut down)
/// may be closed without risking the bytes it carried: the peer closed
/// its side or is gone, or nothing is unacknowledged and nothing unread.
/// Drops the input it finds.
pub(crate) fn safe_to_close(stream: &Stream) -> bool {
    match stream.discard_input(DISCARD_LIMIT) {
        Drained::PeerGone => true,
        Drained::More => false,
        Drained::Empty => stream.unacked() == 0,
    }
}

/// Closes `stream` once `output` (bytes still to write, whole frames
/// after the last partly written one) is written, its write half is shut
/// down (unless `shut` says it is) and closing is safe, at the latest at
/// `deadline`: at once when all that is true now, else in the lingerer.
/// `false` when a write failed (the peer is gone) with output left.
/// With `ring` the output goes there, not to the socket (a link whose
/// output moved to shared memory).
pub(crate) fn close_when_safe(
    stream: Stream,
    ring: Option<Box<ShmPath>>,
    output: Vec<u8>,
    shut: bool,
    deadline: Instant,
) -> bool {
    let mut held = Held {
        stream,
        ring: ring.filter(|r| r.writes),
        output,
        written: 0,
        shut,
        eof: false,
        deadline,
    };
    if held.advance() {
        return held.written == held.output.len();
    }
    let mut st = state();
    st.held.push(held);
    if !st.running {
        match std::thread::Builder::new()
            .name("psmrail-soft-linger".into())
            .stack_size(LINGER_STACK)
            .spawn(run)
        {
            Ok(_) => st.running = true,
            Err(e) => {
                // No thread: close now, as if the deadline had passed.
                tracing::warn!(error = %e, "soft engine: cannot start the lingerer thread");
                let held = st.held.pop();
                return held.is_some_and(|h| h.written == h.output.len());
            }
        }
    }
    true
}

/// The lingerer thread: moves every held socket on, closes the finished
/// ones, and waits for input, room to write or the next tick; ends when
/// none is left.
fn run() {
    let mut fds = Vec::new();
    loop {
        {
            let mut st = state();
            st.held.retain_mut(|h| !h.advance());
            if st.held.is_empty() {
                st.running = false;
                // A crowd of closing connections (an attack's) must not
                // leave its list's capacity behind for good.
                st.held = Vec::new();
                return;
            }
            fds.clear();
            fds.extend(st.held.iter().map(|h| libc::pollfd {
                fd: h.stream.fd(),
                events: h.events(),
                revents: 0,
            }));
        }
        // Only this thread closes held sockets, so the descriptors stay
        // valid outside the lock; sockets added meanwhile are looked at
        // next time round.
        if poll_for(&mut fds, TICK).is_err() {
            std::thread::sleep(TICK);
        }
    }
}
