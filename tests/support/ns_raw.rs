//! Raw name-server clients for tests that speak its wire by hand: a
//! connection to a server's port and what the server sends on it.

use std::io::{self, Read};
use std::net::TcpStream;
use std::time::Duration;

/// How long a raw client waits for the server: a generous bound for
/// anything that should succeed (never a speed claim).
pub(crate) const T: Duration = Duration::from_secs(20);

/// A connection to the name server on `port` of loopback.
pub(crate) fn raw(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s
}

/// Everything the server sends until it closes the connection.
pub(crate) fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("the server did not close the connection: {e}"),
        }
    }
}
