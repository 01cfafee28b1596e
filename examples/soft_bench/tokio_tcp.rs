//! The baseline: what a Rust user writes by hand with tokio — a
//! current-thread runtime, one `TcpStream`, `write_all` / `read_exact`.

use super::{Measure, Shape};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Serves one client: echoes ping-pong messages, acknowledges stream
/// batches with one byte. Prints the listening port first.
pub(crate) fn serve(announce: impl FnOnce(String)) {
    runtime().block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        announce(listener.local_addr().expect("addr").port().to_string());
        let (mut s, _) = listener.accept().await.expect("accept");
        s.set_nodelay(true).expect("nodelay");
        let mut buf = vec![0u8; 4 << 20];
        loop {
            // Each command: kind (1 byte), size (u32), count (u32).
            let mut head = [0u8; 9];
            if s.read_exact(&mut head).await.is_err() {
                return; // client done
            }
            let size = u32::from_le_bytes(head[1..5].try_into().unwrap()) as usize;
            let count = u32::from_le_bytes(head[5..9].try_into().unwrap()) as usize;
            match head[0] {
                b'p' => {
                    for _ in 0..count {
                        s.read_exact(&mut buf[..size]).await.expect("read");
                        s.write_all(&buf[..size]).await.expect("write");
                    }
                }
                b's' => {
                    for _ in 0..count {
                        for _ in 0..super::IN_FLIGHT {
                            s.read_exact(&mut buf[..size]).await.expect("read");
                        }
                        s.write_all(&[1]).await.expect("ack");
                    }
                }
                _ => return,
            }
        }
    });
}

/// Runs the client side against `port`, one measurement per shape.
pub(crate) fn client(port: &str, shapes: &[Shape]) -> Vec<Measure> {
    runtime().block_on(async {
        let mut s = TcpStream::connect(format!("127.0.0.1:{port}"))
            .await
            .expect("connect");
        s.set_nodelay(true).expect("nodelay");
        let mut out = Vec::new();
        let mut buf = vec![0xa5u8; 4 << 20];
        for shape in shapes {
            let (kind, size, iters) = match *shape {
                Shape::PingPong { size, iters } => (b'p', size, iters),
                Shape::Stream { size, batches } => (b's', size, batches),
            };
            let mut head = [kind, 0, 0, 0, 0, 0, 0, 0, 0];
            head[1..5].copy_from_slice(&(size as u32).to_le_bytes());
            head[5..9].copy_from_slice(&(iters as u32).to_le_bytes());
            s.write_all(&head).await.expect("command");
            let mut samples = Vec::with_capacity(iters);
            for _ in 0..iters {
                let t = Instant::now();
                match kind {
                    b'p' => {
                        s.write_all(&buf[..size]).await.expect("write");
                        s.read_exact(&mut buf[..size]).await.expect("read");
                    }
                    _ => {
                        for _ in 0..super::IN_FLIGHT {
                            s.write_all(&buf[..size]).await.expect("write");
                        }
                        let mut ack = [0u8; 1];
                        s.read_exact(&mut ack).await.expect("ack");
                    }
                }
                samples.push(t.elapsed());
            }
            out.push(Measure::new(*shape, samples));
        }
        out
    })
}
