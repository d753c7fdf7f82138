//! One HTTP/2 stream carried as one HTTP/1.1 exchange on a backend connection of its
//! client's: the head written, the body streamed both ways under h2's flow control (never
//! a whole body in memory), trailers and `1xx` answers passed, a WebSocket (extended
//! CONNECT) carried as an `Upgrade` and then relayed. A backend answer that is malformed
//! or cut short ends this stream only: `502` before its head went out, a reset after.

use std::future::{poll_fn, Future};

use bytes::{Buf, Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{Request, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::backends::{BackendConn, Silence, READ_SIZE};
use super::request::{self, Body, Kind, Refusal};
use super::response::{self, Answer, BadAnswer, Dechunk, Framing, Piece};
use super::{Active, Gateway};
use crate::counters::WorkerCounters;

/// Why a stream's exchange ended before the answer's head went to the client.
#[derive(Debug, thiserror::Error)]
enum End {
    /// The client reset the stream (or the connection went).
    #[error("the client reset the stream")]
    ClientReset,
    /// A reused connection that the backend had closed: nothing was answered.
    #[error("the backend closed the connection without an answer")]
    Stale,
    /// The backend's answer cannot be passed on (`502`).
    #[error(transparent)]
    Bad(BadAnswer),
    /// The backend went silent past `--idle-timeout` (`504`).
    #[error("no answer within --idle-timeout")]
    Timeout,
    /// Writing to or reading from the backend failed (`502`).
    #[error("backend connection: {0}")]
    Write(std::io::Error),
}

/// How a stream's answer ended once its head was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Done {
    /// Completely, and the backend connection may carry the next stream.
    Reusable,
    /// The backend connection is not reusable (closed framing, a tunnel, a reset).
    Close,
}

/// Takes a stream in: its request refused at once, or the future that serves it
/// (`respond` answers it). Done before the future is made, so that the request (its
/// fields, a quarter of a kilobyte) is not carried in it.
pub fn accept(
    active: Active,
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
) -> Option<impl Future<Output = ()>> {
    let gw: &Gateway = &active.0;
    let counters = &gw.worker.counters;
    let (parts, body) = req.into_parts();
    let mut head = Vec::with_capacity(512);
    let (framing, kind) = match request::build(&parts, body.is_end_stream(), &gw.fwd, &mut head) {
        Ok(r) => r,
        Err(Refusal::Malformed(why)) => {
            tracing::debug!(
                name: "h2_stream_reset",
                reason = %why,
                client = %gw.client,
                stream = %respond.stream_id().as_u32(),
                "{why}: stream reset",
            );
            respond.send_reset(Reason::PROTOCOL_ERROR);
            WorkerCounters::bump(&counters.http.h2_resets_sent);
            gw.resets.hit();
            return None;
        }
        Err(Refusal::Status(status, why)) => {
            tracing::debug!(
                name: "h2_request_refused",
                reason = %why,
                client = %gw.client,
                "request refused: {why}",
            );
            reply(&mut respond, status);
            return None;
        }
    };
    WorkerCounters::bump(&counters.http.requests_h2);
    Some(serve(active, head, framing, kind, body, respond))
}

/// Serves one stream whose request head is `head`.
async fn serve(
    active: Active,
    head: Vec<u8>,
    framing: Body,
    kind: Kind,
    mut body: RecvStream,
    mut respond: SendResponse<Bytes>,
) {
    let gw: &Gateway = &active.0;
    let mut retried = false;
    loop {
        // An idle connection of this client's, else (boxed, as it is large and rare once
        // the connections are warm) a new one or a wait for one.
        let got = match gw.backends.idle() {
            Some(c) => Ok(c),
            None => {
                let wait = async {
                    tokio::select! {
                        got = gw.backends.get(&gw.worker, gw.idle) => Some(got),
                        _ = poll_fn(|cx| respond.poll_reset(cx)) => None,
                    }
                };
                match Box::pin(wait).await {
                    Some(got) => got,
                    None => return client_reset(gw),
                }
            }
        };
        let mut conn = match got {
            Ok(c) => c,
            Err(e) => {
                if e.is_queue() {
                    tracing::debug!(
                        name: "conn_no_backend_slot",
                        client = %gw.client,
                        error = %e,
                        "no backend slot",
                    );
                } else {
                    tracing::warn!(
                        name: "conn_no_backend",
                        client = %gw.client,
                        error = %e,
                        "no backend could be reached",
                    );
                }
                return reply(&mut respond, StatusCode::SERVICE_UNAVAILABLE);
            }
        };
        // A spawned stream's future is copied whole into its task: the paths with a body
        // or a tunnel are boxed so that the common one, a request without a body, stays
        // small (2.3 KB with all three inline).
        let result = match (kind, framing) {
            (Kind::Upgrade(accept), _) => {
                Box::pin(upgrade(
                    gw,
                    &mut conn,
                    &head,
                    &accept,
                    &mut body,
                    &mut respond,
                ))
                .await
            }
            (_, Body::None) => fetch(gw, &mut conn, &head, kind, &mut respond).await,
            _ => {
                Box::pin(exchange(
                    gw,
                    &mut conn,
                    &head,
                    framing,
                    kind,
                    &mut body,
                    &mut respond,
                ))
                .await
            }
        };
        match result {
            Ok(Done::Reusable) if conn.buf.is_empty() => return gw.backends.put(conn),
            Ok(_) => return,
            Err(End::Stale) if conn.reused && !retried && framing == Body::None => {
                // The backend closed it while idle: the request goes again, on a new one.
                retried = true;
            }
            Err(End::ClientReset) => return client_reset(gw),
            Err(e) => {
                let status = match &e {
                    End::Timeout => StatusCode::GATEWAY_TIMEOUT,
                    _ => StatusCode::BAD_GATEWAY,
                };
                tracing::warn!(
                    name: "h2_backend_error",
                    status = %status,
                    client = %gw.client,
                    backend = %conn.server(),
                    error = %e,
                    "answered {status}",
                );
                return reply(&mut respond, status);
            }
        }
    }
}

/// The client reset the stream: counted, and against the reset limit.
fn client_reset(gw: &Gateway) {
    WorkerCounters::bump(&gw.worker.counters.http.h2_resets_received);
    gw.resets.hit();
}

/// An answer of shuck's own: the status and its reason phrase as the body.
fn reply(respond: &mut SendResponse<Bytes>, status: StatusCode) {
    let text = status.canonical_reason().unwrap_or("");
    let mut resp = Response::new(());
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    h.insert(
        http::header::CONTENT_LENGTH,
        http::HeaderValue::from(text.len()),
    );
    if let Ok(mut tx) = respond.send_response(resp, false) {
        let _ = tx.send_data(Bytes::from_static(text.as_bytes()), true);
    }
}

/// A request without a body: the head, then the answer.
async fn fetch(
    gw: &Gateway,
    conn: &mut BackendConn,
    head: &[u8],
    kind: Kind,
    respond: &mut SendResponse<Bytes>,
) -> Result<Done, End> {
    write_head(conn, head).await?;
    let BackendConn {
        tcp, buf, silence, ..
    } = conn;
    answer(tcp, buf, silence, gw, respond, kind).await
}

/// The backend's answer, passed on to the client.
async fn answer<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    silence: &mut Silence,
    gw: &Gateway,
    respond: &mut SendResponse<Bytes>,
    kind: Kind,
) -> Result<Done, End> {
    let answer = read_head(rd, buf, silence, gw, respond, kind).await?;
    Ok(pass_on(gw, rd, buf, silence, respond, answer).await)
}

/// A request with a body: the head, then the body up and the answer down at once (a
/// backend may answer before the body is all sent).
async fn exchange(
    gw: &Gateway,
    conn: &mut BackendConn,
    head: &[u8],
    framing: Body,
    kind: Kind,
    body: &mut RecvStream,
    respond: &mut SendResponse<Bytes>,
) -> Result<Done, End> {
    write_head(conn, head).await?;
    let BackendConn {
        tcp, buf, silence, ..
    } = conn;
    let (mut rd, mut wr) = tcp.split();
    let up = upload(body, &mut wr, framing, gw);
    let down = answer(&mut rd, buf, silence, gw, respond, kind);
    tokio::pin!(up, down);
    let mut sent = false;
    loop {
        tokio::select! {
            r = &mut up, if !sent => match r {
                Ok(()) => sent = true,
                Err(Up::Client) => return Err(End::ClientReset),
                // The backend stopped reading (it may be answering 413): its answer decides.
                Err(Up::Backend(e)) => {
                    tracing::debug!(
                        name: "h2_backend_stopped_reading",
                        client = %gw.client,
                        error = %e,
                        "backend stopped reading the body",
                    );
                    let r = down.await?;
                    return Ok(if r == Done::Reusable { Done::Close } else { r });
                }
            },
            r = &mut down => {
                let done: Done = r?;
                return Ok(if sent { done } else { Done::Close });
            }
        }
    }
}

/// Writes the request head; a reused connection that fails here was closed while idle.
async fn write_head(conn: &mut BackendConn, head: &[u8]) -> Result<(), End> {
    match conn.tcp.write_all(head).await {
        Ok(()) => Ok(()),
        Err(_) if conn.reused => Err(End::Stale),
        Err(e) => Err(End::Write(e)),
    }
}

/// Why the upload stopped.
enum Up {
    /// The client reset the stream.
    Client,
    /// The backend could not take more.
    Backend(std::io::Error),
}

/// The request body to the backend, as it arrives, in the framing the head announced;
/// each DATA frame's window is given back once the backend took its bytes.
async fn upload<W: AsyncWrite + Unpin>(
    body: &mut RecvStream,
    wr: &mut W,
    framing: Body,
    gw: &Gateway,
) -> Result<(), Up> {
    if matches!(framing, Body::None | Body::Tunnel) {
        return Ok(());
    }
    let chunked = framing == Body::Chunked;
    loop {
        let data = match tokio::time::timeout(gw.idle, body.data()).await {
            Err(_) => return Err(Up::Client), // a client that stalls its own body
            Ok(None) => break,
            Ok(Some(Err(_))) => return Err(Up::Client),
            Ok(Some(Ok(d))) => d,
        };
        let n = data.len();
        if n == 0 {
            continue;
        }
        let written = if chunked {
            let size = format!("{n:x}\r\n");
            let mut frame = Buf::chain(Buf::chain(size.as_bytes(), data), &b"\r\n"[..]);
            wr.write_all_buf(&mut frame).await
        } else {
            wr.write_all(&data).await
        };
        written.map_err(Up::Backend)?;
        let _ = body.flow_control().release_capacity(n);
    }
    if chunked {
        let trailers = match tokio::time::timeout(gw.idle, body.trailers()).await {
            Ok(Ok(t)) => t,
            _ => return Err(Up::Client),
        };
        let mut last = b"0\r\n".to_vec();
        for (name, value) in trailers.iter().flatten() {
            if gw.fwd.strips(name.as_str().as_bytes()) || !response::allowed_trailer(name) {
                continue;
            }
            last.extend_from_slice(name.as_str().as_bytes());
            last.extend_from_slice(b": ");
            last.extend_from_slice(value.as_bytes());
            last.extend_from_slice(b"\r\n");
        }
        last.extend_from_slice(b"\r\n");
        wr.write_all(&last).await.map_err(Up::Backend)?;
    }
    Ok(())
}

/// Reads the backend's answer head, passing interim (`1xx`) answers on; watches for the
/// client resetting the stream meanwhile.
async fn read_head<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    silence: &mut Silence,
    gw: &Gateway,
    respond: &mut SendResponse<Bytes>,
    kind: Kind,
) -> Result<Answer, End> {
    let mut got_any = !buf.is_empty();
    loop {
        let parsed = if buf.is_empty() {
            None // the usual first turn: nothing read yet
        } else {
            response::parse(buf, kind, gw.max_head).map_err(End::Bad)?
        };
        if let Some((used, answer)) = parsed {
            buf.advance(used);
            let upgrade_accepted = matches!(kind, Kind::Upgrade(_))
                && answer.status == StatusCode::SWITCHING_PROTOCOLS;
            if answer.status.is_informational() && !upgrade_accepted {
                if answer.status == StatusCode::SWITCHING_PROTOCOLS {
                    return Err(End::Bad(BadAnswer(
                        "101 to a request that asked no upgrade",
                    )));
                }
                let mut interim = Response::new(());
                *interim.status_mut() = answer.status;
                *interim.headers_mut() = answer.headers;
                // A client gone is noticed at the next step.
                let _ = respond.send_informational(interim);
                continue;
            }
            return Ok(answer);
        }
        // The read first: the reset is looked at only while the backend keeps us waiting.
        silence.start();
        let read = tokio::select! {
            biased;
            r = read_more(rd, buf) => Ok(r),
            () = poll_fn(|cx| silence.poll_over(cx)) => Err(()),
            _ = poll_fn(|cx| respond.poll_reset(cx)) => return Err(End::ClientReset),
        };
        match read {
            Err(()) => return Err(End::Timeout),
            Ok(Ok(0)) | Ok(Err(_)) if !got_any => return Err(End::Stale),
            Ok(Ok(0)) => return Err(End::Bad(BadAnswer("closed in the middle of the head"))),
            Ok(Err(e)) => return Err(End::Write(e)),
            Ok(Ok(_)) => got_any = true,
        }
    }
}

/// Reads more of the backend into `buf`.
async fn read_more<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut BytesMut) -> std::io::Result<usize> {
    buf.reserve(READ_SIZE);
    rd.read_buf(buf).await
}

/// Sends the final answer's head and body. Once the head is out, a body cut short or
/// malformed resets the stream (the only way left to tell the client).
///
/// The head goes out before the future is made, so that the answer's fields are not
/// carried in it.
fn pass_on<'a, R: AsyncRead + Unpin>(
    gw: &'a Gateway,
    rd: &'a mut R,
    buf: &'a mut BytesMut,
    silence: &'a mut Silence,
    respond: &mut SendResponse<Bytes>,
    answer: Answer,
) -> impl Future<Output = Done> + 'a {
    let Answer {
        status,
        headers,
        framing,
        keep_alive,
    } = answer;
    let mut resp = Response::new(());
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    let empty = framing == Framing::Empty;
    let sent = respond.send_response(resp, empty);
    let done = if keep_alive {
        Done::Reusable
    } else {
        Done::Close
    };
    async move {
        match sent {
            Ok(tx) if !empty => send_all(gw, rd, buf, silence, tx, framing, done).await,
            Ok(_) => done,
            Err(_) => Done::Close,
        }
    }
}

/// The answer's body, after its head; `done` is what a complete one leaves.
async fn send_all<R: AsyncRead + Unpin>(
    gw: &Gateway,
    rd: &mut R,
    buf: &mut BytesMut,
    silence: &mut Silence,
    mut tx: SendStream<Bytes>,
    framing: Framing,
    done: Done,
) -> Done {
    match send_body(gw, rd, buf, silence, &mut tx, framing).await {
        Ok(()) => done,
        Err(BodyEnd::Client) => {
            client_reset(gw);
            Done::Close
        }
        Err(e) => {
            tracing::warn!(
                name: "h2_backend_answer_cut",
                client = %gw.client,
                error = %e,
                "backend answer cut short: stream reset",
            );
            tx.send_reset(Reason::INTERNAL_ERROR);
            WorkerCounters::bump(&gw.worker.counters.http.h2_resets_sent);
            Done::Close
        }
    }
}

/// Why an answer's body did not reach its end.
#[derive(Debug, thiserror::Error)]
enum BodyEnd {
    /// The client reset the stream or went away.
    #[error("the client reset the stream")]
    Client,
    /// The backend closed before the end.
    #[error("the backend closed before the end of the body")]
    Cut,
    /// The body's framing is broken.
    #[error(transparent)]
    Bad(BadAnswer),
    /// No progress within `--idle-timeout` (backend silent or client window shut).
    #[error("no progress within --idle-timeout")]
    Stalled,
    /// Reading the backend failed.
    #[error("backend connection: {0}")]
    Io(std::io::Error),
}

/// Reads more for a body that is not over yet: none more is a cut.
async fn more_body<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    silence: &mut Silence,
) -> Result<(), BodyEnd> {
    silence.start();
    tokio::select! {
        biased;
        r = read_more(rd, buf) => match r {
            Ok(0) => Err(BodyEnd::Cut),
            Ok(_) => Ok(()),
            Err(e) => Err(BodyEnd::Io(e)),
        },
        () = poll_fn(|cx| silence.poll_over(cx)) => Err(BodyEnd::Stalled),
    }
}

async fn send_body<R: AsyncRead + Unpin>(
    gw: &Gateway,
    rd: &mut R,
    buf: &mut BytesMut,
    silence: &mut Silence,
    tx: &mut SendStream<Bytes>,
    framing: Framing,
) -> Result<(), BodyEnd> {
    let end = |tx: &mut SendStream<Bytes>| {
        tx.send_data(Bytes::new(), true)
            .map_err(|_| BodyEnd::Client)
    };
    match framing {
        Framing::Empty => end(tx),
        Framing::Length(mut left) => loop {
            if buf.is_empty() {
                more_body(rd, buf, silence).await?;
            }
            let n = left.min(buf.len() as u64) as usize;
            left -= n as u64;
            // The last bytes carry END_STREAM: no empty DATA frame after them.
            send(gw, tx, buf.split_to(n).freeze(), left == 0).await?;
            if left == 0 {
                return Ok(());
            }
        },
        Framing::Chunked => {
            let mut chunks = Dechunk::default();
            loop {
                match chunks.next(buf).map_err(BodyEnd::Bad)? {
                    Piece::Data(d) => send(gw, tx, d, false).await?,
                    Piece::More => more_body(rd, buf, silence).await?,
                    Piece::End(t) if t.is_empty() => return end(tx),
                    Piece::End(t) => return tx.send_trailers(t).map_err(|_| BodyEnd::Client),
                }
            }
        }
        Framing::UntilClose => loop {
            if buf.is_empty() {
                match more_body(rd, buf, silence).await {
                    Err(BodyEnd::Cut) => return end(tx),
                    r => r?,
                }
            }
            send(gw, tx, buf.split().freeze(), false).await?;
        },
    }
}

/// Sends `data` on the stream as the client's window allows, never ahead of it: what a
/// client that never opens its window costs is bounded by one read. `last`: the stream
/// ends with these bytes.
async fn send(
    gw: &Gateway,
    tx: &mut SendStream<Bytes>,
    mut data: Bytes,
    last: bool,
) -> Result<(), BodyEnd> {
    while !data.is_empty() {
        tx.reserve_capacity(data.len());
        let granted = loop {
            let c = tx.capacity();
            if c > 0 {
                break c;
            }
            match tokio::time::timeout(gw.idle, poll_fn(|cx| tx.poll_capacity(cx))).await {
                Err(_) => return Err(BodyEnd::Stalled),
                Ok(None) | Ok(Some(Err(_))) => return Err(BodyEnd::Client),
                Ok(Some(Ok(_))) => {}
            }
        };
        let part = data.split_to(granted.min(data.len()));
        tx.send_data(part, last && data.is_empty())
            .map_err(|_| BodyEnd::Client)?;
    }
    Ok(())
}

/// A WebSocket over HTTP/2 (RFC 8441): an HTTP/1.1 `Upgrade: websocket` to the backend;
/// on its `101` (with the right `Sec-WebSocket-Accept`) the client gets `200` and the
/// stream becomes a relay. Any other answer is passed on as it is.
async fn upgrade(
    gw: &Gateway,
    conn: &mut BackendConn,
    head: &[u8],
    accept: &[u8; 28],
    body: &mut RecvStream,
    respond: &mut SendResponse<Bytes>,
) -> Result<Done, End> {
    write_head(conn, head).await?;
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
    let Ok(mut tx) = respond.send_response(ok, false) else {
        return Err(End::ClientReset);
    };
    if let Err(e) = tunnel(gw, &mut rd, &mut wr, buf, body, &mut tx).await {
        tracing::debug!(
            name: "h2_websocket_ended",
            client = %gw.client,
            error = %e,
            "WebSocket over h2 ended",
        );
        tx.send_reset(Reason::CANCEL);
    }
    Ok(Done::Close)
}

/// Relays a tunnel's bytes both ways until both sides have ended theirs, or neither side
/// sent anything for `--idle-timeout`.
async fn tunnel<R, W>(
    gw: &Gateway,
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    body: &mut RecvStream,
    tx: &mut SendStream<Bytes>,
) -> Result<(), BodyEnd>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
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
                    let _ = body.flow_control().release_capacity(n);
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
                    tx.send_data(Bytes::new(), true).map_err(|_| BodyEnd::Client)?;
                }
                Ok(_) => send(gw, tx, buf.split().freeze(), false).await?,
                Err(e) => return Err(BodyEnd::Io(e)),
            },
            () = tokio::time::sleep(gw.idle) => return Err(BodyEnd::Stalled),
        }
    }
    Ok(())
}
