//! A WebSocket over HTTP/2 (RFC 8441, extended CONNECT; RFC 9220 for HTTP/3) carried as an HTTP/1.1
//! `Upgrade: websocket` to the backend, then relayed both ways.

use bytes::{Bytes, BytesMut};
use http::{Response, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::answer::{pass_on, read_head, read_more, send, BodyEnd};
use super::backends::BackendConn;
use super::front::{Inbound, Outbound, Reset};
use super::outcome::{stalled, write_head, Done, End};
use super::request::Kind;
use super::response::BadAnswer;
use super::Gateway;

/// A WebSocket over HTTP/2 (RFC 8441): an HTTP/1.1 `Upgrade: websocket` to the backend;
/// on its `101` (with the right `Sec-WebSocket-Accept`) the client gets `200` and the
/// stream becomes a relay. Any other answer is passed on as it is.
pub(super) async fn upgrade<I: Inbound, O: Outbound>(
    gw: &Gateway,
    conn: &mut BackendConn,
    head: &[u8],
    accept: &[u8; 28],
    body: &mut I,
    respond: &mut O,
) -> Result<Done, End> {
    write_head(&mut conn.tcp, head).await?;
    let BackendConn {
        tcp, buf, silence, ..
    } = conn;
    let (mut rd, mut wr) = tcp.split();
    let kind = Kind::Upgrade(*accept);
    let mut answer = read_head(&mut rd, buf, silence, gw, respond, kind).await?;
    if answer.status != StatusCode::SWITCHING_PROTOCOLS {
        pass_on(gw, &mut rd, buf, silence, respond, answer).await;
        return Ok(Done::Close);
    }
    match answer.headers.remove("sec-websocket-accept") {
        Some(v) if v.as_bytes() == accept => {}
        _ => {
            return Err(End::Bad(BadAnswer(
                "101 without the right Sec-WebSocket-Accept",
            )))
        }
    }
    let mut ok = Response::new(());
    *ok.headers_mut() = answer.headers;
    if respond.respond(ok, false).is_err() || respond.flush_head(gw.stall).await.is_err() {
        return Err(End::ClientReset);
    }
    if let Err(e) = tunnel(gw, &mut rd, &mut wr, buf, body, respond).await {
        respond.reset(Reset::Cancel);
        if matches!(e, BodyEnd::Stalled) {
            // Counted as every stream is whose client leaves its window shut.
            stalled(gw, respond.id(), "the client's window stayed shut");
        } else {
            tracing::debug!(
                name: "gateway_websocket_ended",
                protocol = gw.version.as_str(),
                client = %gw.client,
                error = %e,
                "WebSocket ended",
            );
        }
    }
    Ok(Done::Close)
}

/// Relays a tunnel's bytes both ways until both sides have ended theirs, or neither side
/// sent anything for `--idle-timeout`.
async fn tunnel<R, W, I, O>(
    gw: &Gateway,
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    body: &mut I,
    tx: &mut O,
) -> Result<(), BodyEnd>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    I: Inbound,
    O: Outbound,
{
    if !buf.is_empty() {
        send(gw, tx, buf.split().freeze(), false).await?;
    }
    let (mut client_open, mut backend_open) = (true, true);
    while client_open || backend_open {
        tokio::select! {
            d = body.data(), if client_open => match d {
                Some(Ok(d)) => {
                    let n = d.len();
                    wr.write_all(&d).await.map_err(BodyEnd::Io)?;
                    body.release(n);
                }
                Some(Err(_)) => return Err(BodyEnd::Client),
                None => {
                    client_open = false;
                    let _ = wr.shutdown().await;
                }
            },
            r = read_more(rd, buf), if backend_open => match r {
                Ok(0) => {
                    backend_open = false;
                    send(gw, tx, Bytes::new(), true).await?;
                }
                Ok(_) => send(gw, tx, buf.split().freeze(), false).await?,
                Err(e) => return Err(BodyEnd::Io(e)),
            },
            () = tokio::time::sleep(gw.idle) => return Err(BodyEnd::Silent),
        }
    }
    Ok(())
}
