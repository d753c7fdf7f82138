//! What the gateway core asks of one request stream of an HTTP version: its body coming in
//! ([`Inbound`]) and its answer going out ([`Outbound`]), under that version's flow
//! control. HTTP/2 implements them over h2's stream halves (`h2/stream.rs`), HTTP/3
//! over h3's (`h3/stream.rs`).

use std::future::Future;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Response};

/// Why shuck ends a stream before its answer is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reset {
    /// The request is malformed (h2 `PROTOCOL_ERROR`, h3 `H3_MESSAGE_ERROR`).
    Malformed,
    /// Given up on: no progress from the client, a tunnel ended (h2 `CANCEL`, h3
    /// `H3_REQUEST_CANCELLED`).
    Cancel,
    /// The backend's answer broke after its head went out (h2 `INTERNAL_ERROR`, h3
    /// `H3_INTERNAL_ERROR`).
    Internal,
}

/// The client reset the stream, or its connection went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the client reset the stream or went away")]
pub struct Gone;

/// Why body bytes did not reach the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The client reset the stream or the connection went.
    Client,
    /// The client's window stayed shut for the stall timeout.
    Stalled,
}

/// What the core tells a stream's answer side of the exchange behind it, for the access
/// log (`gateway/log.rs`); the versions' own halves take no note.
#[derive(Debug, Clone)]
pub enum Note<'a> {
    /// The backend chosen.
    Backend(&'a std::sync::Arc<str>),
    /// A backend connection to `server`, had after `waited` (0 for an idle one).
    Connection {
        /// The server.
        server: std::sync::Arc<crate::backend::Server>,
        /// The wait for a slot and the connect.
        waited: Duration,
        /// Of it, the connect (0 for an idle connection); the rest was a queue.
        connect: Duration,
    },
    /// The request goes again on a new connection.
    Retry,
    /// shuck gives up on the exchange, for this reason.
    Failed(crate::access::Cause),
    /// `--trusted-proxies`: the client the trusted peer named.
    Client(std::net::IpAddr),
    /// Its route's rewrite sent this path and query instead of the client's.
    Rewritten(&'a str),
}

/// The request's body, as the client sends it.
pub trait Inbound {
    /// Its next bytes: `None` at its end, `Err` once the client reset the stream.
    fn data(&mut self) -> impl Future<Output = Option<Result<Bytes, Gone>>>;
    /// The backend took `n` bytes of it: the client may send as many more.
    fn release(&mut self, n: usize);
    /// Its trailers, once the body has ended (`Err`: the client reset the stream).
    fn trailers(&mut self) -> impl Future<Output = Result<Option<HeaderMap>, Gone>>;
}

/// The answer, as the client gets it.
pub trait Outbound {
    /// Ready once the client has given up on the stream (looked at while the backend keeps
    /// the answer waiting).
    fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<()>;
    /// An interim (`1xx`) answer; a client gone is noticed at the next step.
    fn informational(&mut self, resp: Response<()>) -> impl Future<Output = ()>;
    /// The final answer's head; `end`: no body follows. Taken at once (h2 sends it now,
    /// so that the answer's fields are not carried in a future);
    /// [`flush_head`](Outbound::flush_head) tells whether it went.
    fn respond(&mut self, resp: Response<()>, end: bool) -> Result<(), Gone>;
    /// Waits until the head taken by [`respond`](Outbound::respond) is sent, at most
    /// `stall` for the client's window (HTTP/3's heads are flow-controlled as its data is).
    fn flush_head(&mut self, stall: Duration) -> impl Future<Output = Result<(), SendError>>;
    /// Body bytes after the head, never ahead of the client's window; `last` ends the
    /// stream with them (empty `data` with `last` ends it). `stall`: the longest wait for
    /// the window to open.
    fn send(
        &mut self,
        data: Bytes,
        last: bool,
        stall: Duration,
    ) -> impl Future<Output = Result<(), SendError>>;
    /// Trailers after the body, ending the stream.
    fn trailers(&mut self, trailers: HeaderMap) -> impl Future<Output = Result<(), Gone>>;
    /// A whole short answer of shuck's own (`503`, `421`...), sent without waiting.
    fn answer_now(&mut self, resp: Response<()>, body: Bytes);
    /// Ends the stream at once.
    fn reset(&mut self, why: Reset);
    /// The status a [`reset`](Outbound::reset) for `why` would be answered with instead,
    /// for the log: HTTP/1.1, which has no reset, answers `400` or `408` when no answer
    /// had begun.
    fn reset_status(&self, _why: Reset) -> Option<u16> {
        None
    }
    /// The stream's number, for logs.
    fn id(&self) -> u64;
    /// Told what the exchange behind the answer did (the access log's).
    fn note(&mut self, _note: Note<'_>) {}
    /// Whether [`note`](Outbound::note) is heard: the core times nothing for nobody.
    fn noting(&self) -> bool {
        false
    }
    /// Whether a final answer's head was given ([`respond`](Outbound::respond) or
    /// [`answer_now`](Outbound::answer_now)); only the core's outermost wrapper
    /// (`policy::Answering`) keeps count.
    fn began(&self) -> bool {
        false
    }
}

/// How the wait for a request body's next piece ended, short of a piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyWait {
    /// The client reset the stream.
    Client,
    /// Nothing came within the wait (`--http-stall-timeout`).
    Stalled,
    /// The body ran past its `content-length`, or ended short of it.
    Length,
    /// The body ran past the edge policy's limit (`--max-body-bytes`).
    TooLarge,
}

/// The body's next piece within `wait` (`None` at its end), counted against what its
/// `content-length` left (`left`): a body longer or shorter than declared never passes.
pub async fn next_piece<I: Inbound>(
    body: &mut I,
    wait: Duration,
    left: &mut Option<u64>,
    budget: &mut crate::gateway::policy::body::Budget,
) -> Result<Option<Bytes>, BodyWait> {
    loop {
        let data = match tokio::time::timeout(wait, body.data()).await {
            Err(_) => return Err(BodyWait::Stalled),
            Ok(None) if left.is_some_and(|n| n > 0) => return Err(BodyWait::Length),
            Ok(None) => return Ok(None),
            Ok(Some(Err(Gone))) => return Err(BodyWait::Client),
            Ok(Some(Ok(d))) => d,
        };
        if data.is_empty() {
            continue;
        }
        if let Some(left) = left {
            *left = left
                .checked_sub(data.len() as u64)
                .ok_or(BodyWait::Length)?;
        }
        budget
            .take(data.len() as u64)
            .map_err(|_| BodyWait::TooLarge)?;
        return Ok(Some(data));
    }
}

/// The body's trailers once it ended, within `wait`.
pub async fn trailers_within<I: Inbound>(
    body: &mut I,
    wait: Duration,
) -> Result<Option<HeaderMap>, BodyWait> {
    match tokio::time::timeout(wait, body.trailers()).await {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(Gone)) => Err(BodyWait::Client),
        Err(_) => Err(BodyWait::Stalled),
    }
}
