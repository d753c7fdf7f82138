//! HTTP/2 clients for the gateway's tests: hyperium's h2 over tokio-rustls for what a
//! well-behaved client does (trailers, resets, extended CONNECT), and a raw frame writer
//! for what a hostile one does (rapid resets, CONTINUATION floods, a shut window).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::{client_config, ClientOpts};

/// A TLS connection to shuck that negotiated h2.
pub async fn tls_h2(addr: SocketAddr) -> TlsStream<TcpStream> {
    let cfg: Arc<rustls::ClientConfig> = client_config(&ClientOpts {
        alpn: vec![b"h2".to_vec()],
        no_resumption: true,
        ..ClientOpts::default()
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let tls = TlsConnector::from(cfg)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(
        tls.get_ref().1.alpn_protocol(),
        Some(&b"h2"[..]),
        "h2 negotiated"
    );
    tls
}

/// An h2 client connection; its driver runs on the test's runtime.
pub async fn connect(
    addr: SocketAddr,
) -> (
    h2::client::SendRequest<Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tls = tls_h2(addr).await;
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 22)
        .handshake(tls)
        .await
        .unwrap();
    let driver = tokio::spawn(conn);
    (send.ready().await.unwrap(), driver)
}

/// A GET to `path`; returns the status and body (or the stream's error).
pub async fn get(
    send: &mut h2::client::SendRequest<Bytes>,
    path: &str,
) -> Result<(http::StatusCode, Vec<u8>), h2::Error> {
    let req = http::Request::get(format!("https://localhost{path}"))
        .body(())
        .unwrap();
    let (resp, _) = send.clone().ready().await?.send_request(req, true)?;
    let resp = resp.await?;
    let status = resp.status();
    let body = read_body(resp.into_body()).await?;
    Ok((status, body))
}

/// Reads a response body to its end, giving the window back as it goes.
pub async fn read_body(mut body: h2::RecvStream) -> Result<Vec<u8>, h2::Error> {
    let mut out = Vec::new();
    while let Some(d) = body.data().await {
        let d = d?;
        let _ = body.flow_control().release_capacity(d.len());
        out.extend_from_slice(&d);
    }
    Ok(out)
}

// ---------------------------------------------------------------- raw frames

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const CONTINUATION: u8 = 0x9;
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

/// One frame's bytes.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK block for `GET /` of `localhost` (static table entries and one literal).
pub fn get_block(path: &str) -> Vec<u8> {
    // :method GET, :scheme https, then :path and :authority as literals without indexing.
    let mut b = vec![0x82, 0x87];
    b.push(0x04);
    b.push(path.len() as u8);
    b.extend_from_slice(path.as_bytes());
    b.push(0x01);
    b.push(9);
    b.extend_from_slice(b"localhost");
    b
}

/// A raw connection: preface and SETTINGS (with `settings`, id/value pairs) sent.
pub async fn raw(addr: SocketAddr, settings: &[(u16, u32)]) -> TlsStream<TcpStream> {
    let mut tls = tls_h2(addr).await;
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    let mut p = Vec::new();
    for (id, v) in settings {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    out.extend(frame(SETTINGS, 0, 0, &p));
    tls.write_all(&out).await.unwrap();
    // The server's SETTINGS, acknowledged now: an ACK sent later could fall inside a
    // header block a test leaves open, which is a protocol error of the test's own.
    loop {
        let mut h = [0u8; 9];
        tls.read_exact(&mut h).await.unwrap();
        let n = (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
        let mut p = vec![0u8; n];
        tls.read_exact(&mut p).await.unwrap();
        if h[3] == SETTINGS && h[4] & 1 == 0 {
            tls.write_all(&frame(SETTINGS, 1, 0, &[])).await.unwrap();
            return tls;
        }
    }
}

/// One frame: its 9-byte header and its payload; `None` at the connection's end.
async fn read_frame(tls: &mut TlsStream<TcpStream>) -> Option<([u8; 9], Vec<u8>)> {
    let mut h = [0u8; 9];
    tls.read_exact(&mut h).await.ok()?;
    let n = (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
    let mut p = vec![0u8; n];
    tls.read_exact(&mut p).await.ok()?;
    Some((h, p))
}

/// Reads frames until a GOAWAY (its error code) or the end of the connection (`None`),
/// at most `within`; SETTINGS are acknowledged on the way.
pub async fn goaway(tls: &mut TlsStream<TcpStream>, within: Duration) -> Option<u32> {
    let read = async {
        loop {
            let (h, p) = read_frame(tls).await?;
            match h[3] {
                GOAWAY if p.len() >= 8 => {
                    return Some(u32::from_be_bytes([p[4], p[5], p[6], p[7]]))
                }
                SETTINGS if h[4] & 1 == 0 => {
                    let _ = tls.write_all(&frame(SETTINGS, 1, 0, &[])).await;
                }
                _ => {}
            }
        }
    };
    tokio::time::timeout(within, read).await.ok().flatten()
}

/// Reads frames until stream `id` ends (a frame of it with END_STREAM), at most `within`;
/// a GOAWAY or the connection's end before that fails the test.
pub async fn answered(tls: &mut TlsStream<TcpStream>, id: u32, within: Duration) {
    let read = async {
        loop {
            let (h, _) = read_frame(tls).await.expect("the connection ended");
            assert_ne!(h[3], GOAWAY, "GOAWAY before stream {id} ended");
            if h[4] & END_STREAM != 0 && h[5..9] == id.to_be_bytes() {
                return;
            }
        }
    };
    tokio::time::timeout(within, read)
        .await
        .unwrap_or_else(|_| panic!("stream {id} not answered within {within:?}"));
}

/// Reads frames until stream `id` is reset (the RST_STREAM's error code) or ends without one
/// (`None`), at most `within`; a GOAWAY or the connection's end first fails the test.
pub async fn reset(tls: &mut TlsStream<TcpStream>, id: u32, within: Duration) -> Option<u32> {
    let read = async {
        loop {
            let (h, p) = read_frame(tls).await.expect("the connection ended");
            assert_ne!(h[3], GOAWAY, "GOAWAY before stream {id} ended");
            if h[5..9] != id.to_be_bytes() {
                continue;
            }
            if h[3] == RST_STREAM && p.len() == 4 {
                return Some(u32::from_be_bytes([p[0], p[1], p[2], p[3]]));
            }
            if h[4] & END_STREAM != 0 {
                return None;
            }
        }
    };
    tokio::time::timeout(within, read)
        .await
        .unwrap_or_else(|_| panic!("stream {id} neither reset nor ended within {within:?}"))
}
