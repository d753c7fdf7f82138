//! The built-in origin: a tiny HTTP/1.1 server on a loopback port, used when no backend is
//! given so that a fresh machine sees shuck answer at once. It is not a web server: it reads
//! request heads, skips bodies, and answers `GET /N` (`/4k`, `/1m`: [`size`]) with N bytes,
//! as shuck-bench's origin does so that `shuck-bench load` measures something, and any other
//! request with a short text page.

pub mod size;

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Largest request head it reads before answering 431 and closing.
const MAX_HEAD: usize = 16 * 1024;

/// Starts the origin on its own thread; returns the address it listens on.
pub fn start() -> std::io::Result<SocketAddr> {
    let std_listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    std_listener.set_nonblocking(true)?;
    let addr = std_listener.local_addr()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("shuck-origin".into())
        .spawn(move || {
            rt.block_on(async move {
                let listener = match TcpListener::from_std(std_listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(
                            name: "origin_cannot_listen",
                            error = %e,
                            "built-in origin cannot listen",
                        );
                        return;
                    }
                };
                loop {
                    if let Ok((s, _)) = listener.accept().await {
                        tokio::spawn(serve(s));
                    }
                }
            })
        })?;
    Ok(addr)
}

async fn serve(mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    let mut buf = Vec::with_capacity(1024);
    loop {
        let head_end = loop {
            if let Some(i) = find_head_end(&buf) {
                break i;
            }
            if buf.len() > MAX_HEAD {
                let _ = s.write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n").await;
                return;
            }
            let mut chunk = [0u8; 4096];
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        let parsed = req.parse(&buf[..head_end]);
        let (close, body_len, path) = match parsed {
            Ok(httparse::Status::Complete(_)) => {
                let mut close = req.version == Some(0);
                let mut len = 0usize;
                for h in req.headers.iter() {
                    if h.name.eq_ignore_ascii_case("connection") {
                        close = h.value.eq_ignore_ascii_case(b"close");
                    } else if h.name.eq_ignore_ascii_case("content-length") {
                        len = std::str::from_utf8(h.value)
                            .ok()
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                    }
                }
                (close, len, req.path.unwrap_or("/").to_owned())
            }
            _ => {
                let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n").await;
                return;
            }
        };
        buf.drain(..head_end);
        // Skip the request body.
        let mut left = body_len;
        let take = left.min(buf.len());
        buf.drain(..take);
        left -= take;
        while left > 0 {
            let mut chunk = [0u8; 4096];
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let used = n.min(left);
                    left -= used;
                    buf.extend_from_slice(&chunk[used..n]);
                }
            }
        }
        let sent = match size::parse_size(path.trim_start_matches('/')) {
            Some(n) => answer_bytes(&mut s, n, close).await,
            None => {
                let body = format!("shuck is running. This page comes from its built-in origin (no --backend given); you asked for {path}. GET /N answers N bytes (/4k, /1m).\n");
                let head = head(body.len(), "text/plain; charset=utf-8", close);
                s.write_all(format!("{head}{body}").as_bytes()).await
            }
        };
        if sent.is_err() || close {
            return;
        }
    }
}

fn head(len: usize, content_type: &str, close: bool) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {len}\r\n{}\r\n",
        if close { "connection: close\r\n" } else { "" },
    )
}

/// `n` bytes of `x`, from one static block (no buffer of the object's size).
async fn answer_bytes(s: &mut TcpStream, n: usize, close: bool) -> std::io::Result<()> {
    static BLOCK: [u8; 16 * 1024] = [b'x'; 16 * 1024];
    s.write_all(head(n, "application/octet-stream", close).as_bytes())
        .await?;
    let mut left = n;
    while left > 0 {
        let k = left.min(BLOCK.len());
        s.write_all(&BLOCK[..k]).await?;
        left -= k;
    }
    Ok(())
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}
