//! The access log's view of an HTTP/2 or HTTP/3 stream: its answer ([`Logged`], an
//! [`Outbound`] around the version's own) and its body ([`Counted`], an [`Inbound`]) are
//! watched as the core serves them, and the line is written when the answer side is
//! dropped, however the stream ended. Only with `--access-log`: without it the core
//! serves the version's own halves, and none of this is in a stream's way.

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, Response};

use super::front::{Gone, Inbound, Note, Outbound, Reset, SendError};
use crate::access::record::{micros, wall_clock, Said};
use crate::access::request_id::RequestId;
use crate::access::{AccessLog, Cause, Conn, Record, Timings};

/// What the log keeps of one stream until it ends.
struct Trail {
    log: Arc<AccessLog>,
    conn: Rc<Conn>,
    start: SystemTime,
    began: Instant,
    /// What the request said.
    said: Said,
    status: u16,
    head_at: Option<Instant>,
    bytes_in: Rc<Cell<u64>>,
    bytes_out: u64,
    backend: Option<Arc<str>>,
    server: Option<Arc<crate::backend::Server>>,
    retries: u32,
    queue: Option<Duration>,
    connect: Option<Duration>,
    finished: bool,
    cause: Option<Cause>,
}

/// A stream's answer side, watched for the log (when there is one) and carrying the
/// request's ID back (`--request-id-response`).
pub(super) struct Logged<O> {
    inner: O,
    trail: Option<Box<Trail>>,
    echo: Option<(http::HeaderName, http::HeaderValue)>,
}

/// A stream's body, its bytes counted for the log.
pub(super) struct Counted<I> {
    inner: I,
    count: Rc<Cell<u64>>,
}

/// Wraps a stream's halves for the log (`log`: where lines go and the connection's part of
/// them), its request's facts taken from `parts`, and for the ID its answer carries back.
pub(super) fn watch<I: Inbound, O: Outbound>(
    log: Option<(Arc<AccessLog>, Rc<Conn>)>,
    echo: Option<(http::HeaderName, http::HeaderValue)>,
    id: Option<RequestId>,
    parts: &Parts,
    body: I,
    respond: O,
) -> (Counted<I>, Logged<O>) {
    let count = Rc::new(Cell::new(0));
    let Some((log, conn)) = log else {
        return (
            Counted { inner: body, count },
            Logged {
                inner: respond,
                trail: None,
                echo,
            },
        );
    };
    let header = |name| parts.headers.get(name).map_or(&b""[..], |v| v.as_bytes());
    let authority = parts
        .uri
        .authority()
        .map(|a| a.as_str().as_bytes())
        .unwrap_or_else(|| header(http::header::HOST));
    let path = parts
        .uri
        .path_and_query()
        .map_or(&b""[..], |p| p.as_str().as_bytes());
    let said = Said::new([
        parts.method.as_str().as_bytes(),
        authority,
        path,
        header(http::header::USER_AGENT),
        header(http::header::REFERER),
        id.as_ref().map_or(&b""[..], RequestId::as_bytes),
    ]);
    let began = Instant::now();
    let trail = Box::new(Trail {
        log,
        conn,
        start: wall_clock(began),
        began,
        said,
        status: 0,
        head_at: None,
        bytes_in: count.clone(),
        bytes_out: 0,
        backend: None,
        server: None,
        retries: 0,
        queue: None,
        connect: None,
        finished: false,
        cause: None,
    });
    (
        Counted { inner: body, count },
        Logged {
            inner: respond,
            trail: Some(trail),
            echo,
        },
    )
}

impl Trail {
    /// The first cause seen is the one logged.
    fn ended(&mut self, cause: Cause) {
        self.cause.get_or_insert(cause);
    }
}

/// What an answer of shuck's own says of how the request ended.
pub(super) fn own_answer(status: u16) -> Cause {
    match status {
        400 => Cause::BadRequest,
        408 => Cause::RequestTimeout,
        421 => Cause::Misdirected,
        403 | 429 => Cause::Refused,
        502 => Cause::BackendReset,
        503 => Cause::BackendRefused,
        504 => Cause::BackendTimeout,
        _ => Cause::Normal,
    }
}

fn sent<T>(t: Option<&mut Trail>, r: &Result<T, SendError>) {
    let Some(t) = t else { return };
    match r {
        Ok(_) => {}
        Err(SendError::Client) => t.ended(Cause::ClientClosed),
        Err(SendError::Stalled) => t.ended(Cause::ClientTimeout),
    }
}

impl<O: Outbound> Outbound for Logged<O> {
    fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let p = self.inner.poll_reset(cx);
        if let (true, Some(t)) = (p.is_ready(), self.trail.as_mut()) {
            t.ended(Cause::ClientClosed);
        }
        p
    }

    fn informational(&mut self, resp: Response<()>) -> impl Future<Output = ()> {
        self.inner.informational(resp)
    }

    fn respond(&mut self, mut resp: Response<()>, end: bool) -> Result<(), Gone> {
        if let Some((name, value)) = &self.echo {
            resp.headers_mut().insert(name.clone(), value.clone());
        }
        let status = resp.status().as_u16();
        let r = self.inner.respond(resp, end);
        let Some(t) = self.trail.as_mut() else {
            return r;
        };
        match r {
            Ok(()) => {
                t.status = status;
                t.head_at = Some(Instant::now());
                t.finished |= end;
            }
            Err(Gone) => t.ended(Cause::ClientClosed),
        }
        r
    }

    async fn flush_head(&mut self, stall: Duration) -> Result<(), SendError> {
        let r = self.inner.flush_head(stall).await;
        sent(self.trail.as_deref_mut(), &r);
        r
    }

    async fn send(&mut self, data: Bytes, last: bool, stall: Duration) -> Result<(), SendError> {
        let n = data.len() as u64;
        let r = self.inner.send(data, last, stall).await;
        sent(self.trail.as_deref_mut(), &r);
        if let (true, Some(t)) = (r.is_ok(), self.trail.as_mut()) {
            t.bytes_out += n;
            t.finished |= last;
        }
        r
    }

    async fn trailers(&mut self, trailers: HeaderMap) -> Result<(), Gone> {
        let r = self.inner.trailers(trailers).await;
        if let Some(t) = self.trail.as_mut() {
            match r {
                Ok(()) => t.finished = true,
                Err(Gone) => t.ended(Cause::ClientClosed),
            }
        }
        r
    }

    fn answer_now(&mut self, mut resp: Response<()>, body: Bytes) {
        if let Some((name, value)) = &self.echo {
            resp.headers_mut().insert(name.clone(), value.clone());
        }
        if let Some(t) = self.trail.as_mut() {
            t.status = resp.status().as_u16();
            t.head_at = Some(Instant::now());
            t.bytes_out += body.len() as u64;
            t.finished = true;
            t.ended(own_answer(t.status));
        }
        self.inner.answer_now(resp, body);
    }

    fn reset(&mut self, why: Reset) {
        if let Some(t) = self.trail.as_mut() {
            if let Some(status) = self.inner.reset_status(why) {
                t.status = status;
                t.head_at = Some(Instant::now());
            }
            t.ended(match why {
                Reset::Malformed => Cause::BadRequest,
                Reset::Cancel => Cause::ClientTimeout,
                Reset::Internal => Cause::AnswerCut,
            });
        }
        self.inner.reset(why);
    }

    fn id(&self) -> u64 {
        self.inner.id()
    }

    fn noting(&self) -> bool {
        self.trail.is_some() || self.inner.noting()
    }

    fn note(&mut self, note: Note<'_>) {
        if self.inner.noting() {
            self.inner.note(note.clone());
        }
        let Some(t) = self.trail.as_mut() else { return };
        match note {
            Note::Backend(name) => t.backend = Some(name.clone()),
            Note::Connection {
                server,
                waited,
                connect,
            } => {
                t.server = Some(server);
                t.queue = Some(waited.saturating_sub(connect));
                t.connect = Some(connect);
            }
            Note::Retry => t.retries += 1,
            Note::Failed(cause) => t.ended(cause),
        }
    }
}

impl<I: Inbound> Inbound for Counted<I> {
    async fn data(&mut self) -> Option<Result<Bytes, Gone>> {
        let r = self.inner.data().await;
        if let Some(Ok(b)) = &r {
            self.count.set(self.count.get() + b.len() as u64);
        }
        r
    }

    fn release(&mut self, n: usize) {
        self.inner.release(n);
    }

    fn trailers(&mut self) -> impl Future<Output = Result<Option<HeaderMap>, Gone>> {
        self.inner.trailers()
    }
}

impl<O> Drop for Logged<O> {
    fn drop(&mut self) {
        let Some(t) = self.trail.as_deref_mut() else {
            return;
        };
        let cause = match t.cause {
            Some(c) => c,
            None if t.finished => Cause::Normal,
            // Dropped under way: the client went (its connection, or the drain deadline).
            None => Cause::ClientClosed,
        };
        t.log.log(&Record {
            status: t.status,
            bytes_in: t.bytes_in.get(),
            bytes_out: t.bytes_out,
            backend: t.backend.as_deref(),
            server: t.server.as_ref().map(|s| s.name()),
            retries: t.retries,
            timings: Timings {
                queue: t.queue.map(micros),
                connect: t.connect.map(micros),
                head: t.head_at.map(|h| micros(h - t.began)),
                total: micros(t.began.elapsed()),
            },
            ..t.said.record(&t.conn, t.start, cause)
        });
    }
}
