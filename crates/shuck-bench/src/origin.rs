//! `shuck-bench origin`: a lean keep-alive HTTP/1.1 origin. `GET /<size>` (`/0`, `/1k`,
//! `/100k`, `/1m`, or bytes) answers 200 with that many bytes from one static buffer, so the
//! origin costs a header write and a few large writes per request and is never the
//! bottleneck.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use shuck::origin::size::parse_size;

const CHUNK: usize = 256 * 1024;
const MAX_HEAD: usize = 16 * 1024;

/// Serves forever on `addr` with `threads` runtime threads (1: a single-threaded runtime);
/// with `h2c`, HTTP/2 in clear (`origin_h2.rs`).
pub fn run(addr: SocketAddr, threads: usize, h2c: bool) -> anyhow::Result<()> {
    let rt = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    };
    rt.block_on(async move {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("origin: cannot listen on {addr}"))?;
        eprintln!("origin listening on {}", listener.local_addr()?);
        if h2c {
            return crate::origin_h2::serve(listener).await;
        }
        serve(listener).await
    })
}

/// Accepts and serves on `listener` until the process ends.
pub async fn serve(listener: TcpListener) -> anyhow::Result<()> {
    let body: Arc<[u8]> = (0..CHUNK)
        .map(|i| b'a' + (i % 26) as u8)
        .collect::<Vec<u8>>()
        .into();
    loop {
        let (s, _) = match listener.accept().await {
            Ok(x) => x,
            Err(_) => {
                // Out of descriptors under a huge idle test: pause rather than spin.
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                continue;
            }
        };
        let body = body.clone();
        tokio::spawn(async move {
            let _ = conn(s, body).await;
        });
    }
}

async fn conn(mut s: TcpStream, body: Arc<[u8]>) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    let mut buf = vec![0u8; 4096];
    let mut filled = 0;
    loop {
        // Read one request head.
        let (end, size, close) = loop {
            if let Some(end) = buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                let (size, close) = parse_request(&buf[..end + 4]);
                break (end + 4, size, close);
            }
            if filled == buf.len() {
                if buf.len() >= MAX_HEAD {
                    s.write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await?;
                    return Ok(());
                }
                buf.resize(buf.len() * 2, 0);
            }
            let n = s.read(&mut buf[filled..]).await?;
            if n == 0 {
                return Ok(());
            }
            filled += n;
        };
        buf.copy_within(end..filled, 0);
        filled -= end;
        let Some(size) = size else {
            s.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                .await?;
            continue;
        };
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {size}\r\ncontent-type: application/octet-stream\r\n\r\n");
        if size > 0 && size <= 16 * 1024 {
            // One write for small objects: one TLS record downstream, no extra packets.
            let mut msg = Vec::with_capacity(head.len() + size);
            msg.extend_from_slice(head.as_bytes());
            msg.extend_from_slice(&body[..size]);
            s.write_all(&msg).await?;
        } else {
            s.write_all(head.as_bytes()).await?;
            let mut left = size;
            while left > 0 {
                let n = left.min(CHUNK);
                s.write_all(&body[..n]).await?;
                left -= n;
            }
        }
        if close {
            return Ok(());
        }
    }
}

/// The requested size (from the path) and whether the client asked to close.
fn parse_request(head: &[u8]) -> (Option<usize>, bool) {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {
            let size = req.path.and_then(|p| parse_size(p.trim_start_matches('/')));
            let close = req.headers.iter().any(|h| {
                h.name.eq_ignore_ascii_case("connection") && h.value.eq_ignore_ascii_case(b"close")
            });
            (size, close)
        }
        _ => (None, true),
    }
}
