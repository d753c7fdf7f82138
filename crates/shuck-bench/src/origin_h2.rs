//! `shuck-bench origin --h2c`: a lean HTTP/2 origin in clear with prior knowledge, for
//! gateways' HTTP/2 backends (shuck's `proto = h2`, HAProxy's `proto h2`, nginx's
//! `grpc_pass`). `GET /<size>` answers 200 with that many bytes, as the HTTP/1.1 origin; a
//! gRPC call (`content-type: application/grpc`) is answered with its own message and
//! `grpc-status: 0` in trailers: an echo service any method name reaches, so that ghz's
//! `bench.Echo/Unary` (`bench/peers/echo.proto`) measures the gateway and not the server.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use tokio::net::{TcpListener, TcpStream};

use shuck::origin::size::parse_size;

const CHUNK: usize = 256 * 1024;

/// Accepts and serves HTTP/2 in clear on `listener` until the process ends.
pub async fn serve(listener: TcpListener) -> anyhow::Result<()> {
    let body: Arc<Bytes> = Arc::new(
        (0..CHUNK)
            .map(|i| b'a' + (i % 26) as u8)
            .collect::<Vec<u8>>()
            .into(),
    );
    loop {
        let Ok((s, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            continue;
        };
        let body = body.clone();
        tokio::spawn(async move {
            let _ = conn(s, body).await;
        });
    }
}

async fn conn(s: TcpStream, body: Arc<Bytes>) -> anyhow::Result<()> {
    s.set_nodelay(true)?;
    let mut h2 = h2::server::Builder::new()
        .max_concurrent_streams(1000)
        .initial_window_size(1 << 20)
        .initial_connection_window_size(8 << 20)
        .handshake::<_, Bytes>(s)
        .await?;
    while let Some(r) = h2.accept().await {
        let (req, respond) = r?;
        let body = body.clone();
        tokio::spawn(async move {
            let _ = stream(req, respond, body).await;
        });
    }
    Ok(())
}

async fn stream(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    body: Arc<Bytes>,
) -> anyhow::Result<()> {
    let grpc = req
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    let path = req.uri().path().to_owned();
    let mut rx = req.into_body();
    let mut got = Vec::new();
    while let Some(d) = rx.data().await {
        let d = d?;
        let _ = rx.flow_control().release_capacity(d.len());
        if grpc {
            got.extend_from_slice(&d);
        }
    }
    if grpc {
        let mut resp = Response::new(());
        resp.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/grpc"));
        let mut tx = respond.send_response(resp, false)?;
        tx.send_data(Bytes::from(got), false)?;
        let mut t = HeaderMap::new();
        t.insert("grpc-status", HeaderValue::from_static("0"));
        tx.send_trailers(t)?;
        return Ok(());
    }
    let Some(size) = parse_size(path.trim_start_matches('/')) else {
        let mut resp = Response::new(());
        *resp.status_mut() = StatusCode::NOT_FOUND;
        respond.send_response(resp, true)?;
        return Ok(());
    };
    let mut resp = Response::new(());
    resp.headers_mut()
        .insert("content-length", HeaderValue::from(size));
    let mut tx = respond.send_response(resp, size == 0)?;
    let mut left = size;
    while left > 0 {
        let n = left.min(CHUNK);
        tx.reserve_capacity(n);
        let cap = match std::future::poll_fn(|cx| tx.poll_capacity(cx)).await {
            Some(Ok(c)) => c.min(n),
            _ => return Ok(()),
        };
        if cap == 0 {
            continue;
        }
        left -= cap;
        tx.send_data(body.slice(..cap), left == 0)?;
    }
    Ok(())
}
