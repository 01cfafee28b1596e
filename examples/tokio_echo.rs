//! A tokio echo over psmrail: an echo server and a client, each on its own
//! endpoint, talking `tokio_util::codec::Framed<_, LengthDelimitedCodec>`
//! over a [`ByteStream`] exactly as they would over a `TcpStream`.
//!
//! ```text
//! cargo run --features tokio --example tokio_echo
//! ```
//!
//! Runs on the soft engine (no PSM needed) with adaptive progress (what
//! `getinfo` picks inside a tokio runtime: futures spin briefly, then the
//! progress thread wakes them), in one process: two domains, one endpoint each, on a multi-thread
//! tokio runtime. The client sends frames of 1 B to 4 MiB, checks each
//! echo byte for byte, shuts its side down, and the server's stream ends.

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use psmrail::compat::ByteStream;
use psmrail::config::PsmConfig;
use psmrail::fabric::{
    getinfo, AddressVector, AvAttr, Caps, Endpoint, EngineChoice, Fabric, FiAddr, Hints,
};
use psmrail::reactor::AdaptiveProgress;
use std::error::Error;
use std::time::{Duration, Instant};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

/// The tag of the conversation (both directions).
const TAG: u64 = 0x7e;

/// Frame sizes the client sends.
const SIZES: [usize; 6] = [1, 13, 4096, 65_536, 1 << 20, 4 << 20];

/// The server: echoes every frame back until the client shuts down, then
/// shuts down its side. Protocol code as it would be written for TCP.
async fn serve<T>(mut framed: Framed<T, LengthDelimitedCodec>) -> std::io::Result<usize>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut frames = 0;
    while let Some(frame) = framed.next().await {
        framed.send(frame?.freeze()).await?;
        frames += 1;
    }
    SinkExt::<Bytes>::close(&mut framed).await?;
    Ok(frames)
}

fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8))
        .collect()
}

fn main() -> Result<(), Box<dyn Error>> {
    let config = PsmConfig::builder()
        .name_server(false)
        .delay(Duration::ZERO)
        .build()?;
    let hints = Hints::new()
        .caps(Caps::TAGGED)
        .engine(EngineChoice::Soft)
        .spin(AdaptiveProgress::DEFAULT_SPIN)
        .config(config);
    let info = getinfo(Some(&hints))?.remove(0);
    let fabric = Fabric::open(&info)?;
    // Two endpoints, each with its own domain and address vector.
    let mut nodes: Vec<(Endpoint, AddressVector)> = Vec::new();
    for _ in 0..2 {
        let domain = fabric.domain(&info)?;
        let av = domain.av(AvAttr::new())?;
        let ep = domain.endpoint(&info).bind_av(&av).enable()?;
        nodes.push((ep, av));
    }
    // Each side inserts the other's address; inserting connects, so both
    // insert at once.
    let (server_sees_client, client_sees_server) = std::thread::scope(|s| {
        let insert = |from: usize, to: usize| {
            let nodes = &nodes;
            s.spawn(move || nodes[from].1.insert(&[nodes[to].0.getname()]).remove(0))
        };
        let a = insert(0, 1);
        let b = insert(1, 0);
        (a.join(), b.join())
    });
    let to_client: FiAddr = server_sees_client.map_err(|_| "insert thread")??;
    let to_server: FiAddr = client_sees_server.map_err(|_| "insert thread")??;
    let server_ep = nodes[0].0.clone();
    let client_ep = nodes[1].0.clone();
    println!(
        "tokio_echo: soft engine, adaptive progress; server {:?}, client {:?}",
        server_ep.getname(),
        client_ep.getname()
    );

    let rt = tokio::runtime::Runtime::new()?;
    let server = rt.spawn(async move {
        let stream = ByteStream::new(&server_ep, to_client, TAG)?;
        serve(Framed::new(stream, LengthDelimitedCodec::new())).await
    });
    let echoed = rt.block_on(async move {
        let stream = ByteStream::new(&client_ep, to_server, TAG)?;
        let mut framed = Framed::new(stream, LengthDelimitedCodec::new());
        let mut bytes = 0;
        for (i, &len) in SIZES.iter().enumerate() {
            let frame = pattern(len, i as u8);
            let start = Instant::now();
            framed.send(frame.clone()).await?;
            let back = framed.next().await.ok_or("the server closed early")??;
            if back != frame {
                return Err(format!("frame {i} ({len} B) came back different").into());
            }
            println!(
                "  echoed {len:>8} B in {:>8.3} ms, checked",
                start.elapsed().as_secs_f64() * 1e3
            );
            bytes += len;
        }
        SinkExt::<Bytes>::close(&mut framed).await?; // shutdown: the server's stream ends
        if framed.next().await.is_some() {
            return Err("a frame after the server's end of stream".into());
        }
        Ok::<usize, Box<dyn Error>>(bytes)
    })?;
    let frames = rt.block_on(server)??;
    println!(
        "tokio_echo: {frames} frames, {echoed} bytes echoed over Framed<ByteStream, LengthDelimitedCodec>; both sides shut down"
    );
    if frames != SIZES.len() {
        return Err(format!("the server counted {frames} frames").into());
    }
    Ok(())
}
