//! How a stream's exchange with its backend ended, shared by the request's side
//! (`stream.rs`), the answer's (`answer.rs`) and a tunnel's (`tunnel.rs`).

use bytes::Bytes;
use http::{Response, StatusCode};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::front::{Outbound, Reset};
use super::response::BadAnswer;
use super::Gateway;

/// Why a stream's exchange ended before the answer's head went to the client.
#[derive(Debug, thiserror::Error)]
pub(super) enum End {
    /// The client reset the stream (or the connection went).
    #[error("the client reset the stream")]
    ClientReset,
    /// The backend closed the connection after the request was written, answering none of
    /// it (on a reused one: closed while idle, or on taking the request).
    #[error("the backend closed the connection without an answer")]
    Stale,
    /// A connection that failed before any byte of the request was written (reused: closed
    /// while idle; new: its server died since the connect), and the system's word for it.
    #[error("the backend connection was closed before the request was written{}", why(.0))]
    Unsent(Option<std::io::Error>),
    /// The client sent nothing of its request body for `--http-stall-timeout` (the stream
    /// is reset).
    #[error("the request body stopped arriving")]
    Stalled,
    /// The request's body is longer or shorter than its `content-length` (the stream is
    /// reset as malformed, the backend connection closed).
    #[error("the request body is not its content-length")]
    BadLength,
    /// The request's body ran past the edge policy's limit (`413`, or a reset once the
    /// answer began; the backend connection closed).
    #[error("{}", crate::gateway::policy::body::TOO_LARGE)]
    TooLarge,
    /// The backend's answer cannot be passed on (`502`).
    #[error(transparent)]
    Bad(BadAnswer),
    /// The backend went silent past `--idle-timeout` (`504`).
    #[error("no answer within --idle-timeout")]
    Timeout,
    /// The backend answered an early request `425 Too Early`: it goes again after the
    /// handshake.
    #[error("the backend answered 425 Too Early")]
    TooEarly,
    /// Writing to or reading from the backend failed (`502`).
    #[error("backend connection: {0}")]
    Write(std::io::Error),
}

/// `: ` and the system's error, when there is one.
fn why(e: &Option<std::io::Error>) -> String {
    e.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
}

/// How a stream's answer ended once its head was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Done {
    /// Completely, and the backend connection may carry the next stream.
    Reusable,
    /// The backend connection is not reusable (closed framing, a tunnel, a reset).
    Close,
    /// Ended before the answer was whole (the client's window stayed shut, the client
    /// reset, the backend cut it): the connection is not reused, and the stream does not
    /// count as answered, so that stalls in a row stay in a row.
    Cut,
}

/// The client reset the stream: counted, and against the reset limit.
pub(super) fn client_reset(gw: &Gateway) {
    gw.count_reset_received();
    gw.resets.hit();
}

/// A stream reset (`CANCEL`, by the caller) for making no progress for
/// `--http-stall-timeout` while shuck waited on its client (`why`): logged and counted; its
/// backend connection is closed.
pub(super) fn stalled(gw: &Gateway, stream: u64, why: &str) {
    tracing::debug!(
        name: "gateway_stream_stalled",
        protocol = gw.version.as_str(),
        client = %gw.client,
        stream = stream,
        "{why} for --http-stall-timeout: stream reset",
    );
    gw.count_reset_sent();
    gw.count_stalled();
    gw.resets.stalled();
}

/// Writes the request head. A failure of the first write means nothing of the request
/// reached the backend ([`End::Unsent`]: it may go again whatever its method), on a reused
/// connection the backend closed while idle as on a new one to a server that died since its
/// connect; one later means the backend took part of it ([`End::Stale`]).
pub(super) async fn write_head<W: AsyncWrite + Unpin>(
    conn: &mut W,
    head: &[u8],
) -> Result<(), End> {
    let first = match conn.write(head).await {
        Ok(0) => return Err(End::Unsent(None)),
        Err(e) => return Err(End::Unsent(Some(e))),
        Ok(n) => n,
    };
    conn.write_all(&head[first..]).await.map_err(|_| End::Stale)
}

/// An answer of shuck's own: the status and its reason phrase as the body, or to a gRPC
/// call (`grpc`) a trailers-only answer with the status's gRPC code. Sent without
/// waiting: a client whose window is shut gets it as the window opens, or not at all.
pub(super) fn reply<O: Outbound>(respond: &mut O, status: StatusCode, grpc: bool) {
    reply_with(respond, status, grpc, None);
}

/// [`reply`] with one more header.
pub(super) fn reply_with<O: Outbound>(
    respond: &mut O,
    status: StatusCode,
    grpc: bool,
    extra: Option<(http::HeaderName, http::HeaderValue)>,
) {
    let text = status.canonical_reason().unwrap_or("");
    if grpc {
        // Its status is 200: the log is told why shuck answered, as it reads a status.
        let cause = super::logged::own_answer(status.as_u16());
        respond.note(super::front::Note::Failed(cause));
        let mut resp = super::grpc::trailers_only(super::grpc::Code::of(status), text);
        if let Some((name, value)) = extra {
            resp.headers_mut().insert(name, value);
        }
        return respond.answer_now(resp, Bytes::new());
    }
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
    if let Some((name, value)) = extra {
        h.insert(name, value);
    }
    respond.answer_now(resp, Bytes::from_static(text.as_bytes()));
}

/// A request body over the edge policy's limit: `413` when no answer began, else the
/// stream is reset (`CANCEL`, `H3_REQUEST_CANCELLED`). The caller drops the backend
/// connection, which had part of the body.
pub(super) fn too_large<O: Outbound>(gw: &Gateway, respond: &mut O, grpc: bool) {
    tracing::debug!(
        name: "gateway_body_too_large",
        protocol = gw.version.as_str(),
        client = %gw.client,
        "request refused: {}",
        crate::gateway::policy::body::TOO_LARGE,
    );
    if respond.began() {
        respond.reset(super::front::Reset::Cancel);
    } else {
        reply(respond, StatusCode::PAYLOAD_TOO_LARGE, grpc);
    }
}

/// A malformed request (RFC 9113 §8.1.1, RFC 9114 §4.1.2): its stream reset
/// (`PROTOCOL_ERROR`, `H3_MESSAGE_ERROR`), counted against the reset limit. A backend
/// connection it had is dropped by the caller, never reused.
pub(super) fn malformed<O: Outbound>(gw: &Gateway, respond: &mut O, why: &str) {
    tracing::debug!(
        name: "gateway_stream_reset",
        protocol = gw.version.as_str(),
        reason = %why,
        client = %gw.client,
        stream = respond.id(),
        "{why}: stream reset",
    );
    respond.reset(Reset::Malformed);
    gw.count_reset_sent();
    gw.resets.hit();
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::{TcpListener, TcpStream};

    /// A connection and the far end of it, on loopback.
    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("address");
        let (near, far) = tokio::join!(TcpStream::connect(addr), l.accept());
        (near.expect("connect"), far.expect("accept").0)
    }

    #[tokio::test]
    async fn a_head_whose_first_write_fails_is_unsent_on_a_new_connection_too() {
        // A server that died between the connect and the request: its end reset.
        let (mut near, far) = pair().await;
        socket2::SockRef::from(&far)
            .set_linger(Some(std::time::Duration::ZERO))
            .expect("linger");
        drop(far);
        // Ready once the reset has arrived; nothing is read, so the error stays for the write.
        near.readable().await.expect("readable");
        let got = write_head(&mut near, b"GET / HTTP/1.1\r\n\r\n").await;
        assert!(matches!(got, Err(End::Unsent(Some(_)))), "{got:?}");
        // The 502's log line says what the system said.
        let said = got.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            said.starts_with("the backend connection was closed before the request was written: "),
            "{said}"
        );
    }

    #[tokio::test]
    async fn a_head_written_whole_reaches_the_backend() {
        let (mut near, mut far) = pair().await;
        let head = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n";
        write_head(&mut near, head).await.expect("written");
        let mut got = vec![0; head.len()];
        tokio::io::AsyncReadExt::read_exact(&mut far, &mut got)
            .await
            .expect("read");
        assert_eq!(got, head);
    }
}
