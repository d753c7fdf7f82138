//! The `--stats` endpoint: a minimal HTTP/1.1 server for Prometheus scrapes, `GET /metrics`
//! in the OpenMetrics text format. It runs on the main thread's runtime, off the workers'.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{exposition, Sources};

/// Longest request head read.
const MAX_HEAD: usize = 4096;
/// Time a scraper has to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts scrapes until the process ends.
pub async fn serve(listener: TcpListener, sources: Arc<Sources>) {
    loop {
        match listener.accept().await {
            Ok((s, _)) => {
                tokio::spawn(answer(s, sources.clone()));
            }
            Err(e) => {
                tracing::warn!(name: "stats_accept_failed", error = %e, "--stats: cannot accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn answer(mut s: TcpStream, sources: Arc<Sources>) {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 512];
    let read = tokio::time::timeout(READ_TIMEOUT, async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        true
    })
    .await;
    if !matches!(read, Ok(true)) {
        return;
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or(&[]);
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (parts.next().unwrap_or(&[]), parts.next().unwrap_or(&[]));
    let path = path.split(|&b| b == b'?').next().unwrap_or(&[]);
    let (status, ctype, body) = match (method, path) {
        (b"GET" | b"HEAD", b"/metrics") => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            exposition::render(&sources),
        ),
        (b"GET" | b"HEAD", b"/") => (
            "200 OK",
            "text/plain; charset=utf-8",
            "shuck: metrics are at /metrics\n".to_owned(),
        ),
        (b"GET" | b"HEAD", _) => ("404 Not Found", "text/plain", "not found\n".to_owned()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_owned(),
        ),
    };
    let mut resp = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != b"HEAD" {
        resp.extend_from_slice(body.as_bytes());
    }
    let _ = tokio::time::timeout(READ_TIMEOUT, s.write_all(&resp)).await;
    let _ = s.shutdown().await;
}
