//! The access log's view of an HTTP/2 or HTTP/3 stream: its answer ([`Logged`], an
//! [`Outbound`] around the version's own) and its body ([`Counted`], an [`Inbound`]) are
//! watched as the core serves them, and the line is written when the answer side is
//! dropped, however the stream ended. Only with `--access-log`: without it the core
//! serves the version's own halves, and none of this is in a stream's way.

use std::cell::{Cell, RefCell, RefMut};
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, Response};

use super::front::{Gone, Inbound, Note, Outbound, Reset, SendError};
use crate::access::record::{micros, wall_us, Said};
use crate::access::request_id::RequestId;
use crate::access::{AccessLog, Cause, Conn, Record, Timings};
use crate::clock::Tick;

/// The request target the client wrote, when the head the core takes carries a route's
/// rewrite of it (HTTP/1.1 through the core: `h1/front/`).
#[derive(Debug, Clone)]
pub struct AskedTarget(pub Box<[u8]>);

/// A connection's log: where its streams' lines go and its part of them, one count a
/// stream (an `Rc`'s, not an `Arc`'s atomic one as well).
#[derive(Debug)]
pub(super) struct ConnLog {
    pub(super) log: Arc<AccessLog>,
    pub(super) conn: Rc<Conn>,
}

/// What the log keeps of one stream until it ends: one allocation, shared by the answer
/// side, which fills in its facts, and the body, which counts into it.
struct Trail {
    bytes_in: Cell<u64>,
    facts: RefCell<Facts>,
}

/// The answer side's part of a [`Trail`]: borrowed only by [`Logged`], never across an
/// await.
struct Facts {
    line: Rc<ConnLog>,
    /// µs since the Unix epoch.
    start_us: u64,
    began: Tick,
    /// What the request said.
    said: Said,
    status: u16,
    head_at: Option<Tick>,
    /// When a head that ended the answer went out: its end too, not read again.
    whole_at: Option<Tick>,
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
    trail: Option<Rc<Trail>>,
    echo: Option<(http::HeaderName, http::HeaderValue)>,
}

/// A stream's body, its bytes counted for the log.
pub(super) struct Counted<I> {
    inner: I,
    trail: Option<Rc<Trail>>,
}

/// Wraps a stream's halves for the log (`log`: where lines go and the connection's part of
/// them), its request's facts taken from `parts`, and for the ID its answer carries back.
pub(super) fn watch<I: Inbound, O: Outbound>(
    log: Option<Rc<ConnLog>>,
    echo: Option<(http::HeaderName, http::HeaderValue)>,
    id: Option<RequestId>,
    parts: &Parts,
    body: I,
    respond: O,
) -> (Counted<I>, Logged<O>) {
    let Some(line) = log else {
        return (
            Counted {
                inner: body,
                trail: None,
            },
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
    // HTTP/1.1 through the core: the head is the rewriter's, its path maybe a route's
    // rewrite; the client's is the one asked.
    let asked = parts.extensions.get::<AskedTarget>();
    let mut said = Said::new([
        parts.method.as_str().as_bytes(),
        authority,
        asked.map_or(path, |a| &a.0),
        header(http::header::USER_AGENT),
        header(http::header::REFERER),
        id.as_ref().map_or(&b""[..], RequestId::as_bytes),
    ]);
    if asked.is_some() {
        said.rewritten = Some(path.into());
    }
    let began = Tick::now();
    let trail = Rc::new(Trail {
        bytes_in: Cell::new(0),
        facts: RefCell::new(Facts {
            line,
            start_us: wall_us(began),
            began,
            said,
            status: 0,
            head_at: None,
            whole_at: None,
            bytes_out: 0,
            backend: None,
            server: None,
            retries: 0,
            queue: None,
            connect: None,
            finished: false,
            cause: None,
        }),
    });
    (
        Counted {
            inner: body,
            trail: Some(trail.clone()),
        },
        Logged {
            inner: respond,
            trail: Some(trail),
            echo,
        },
    )
}

impl Facts {
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

fn sent<T>(t: Option<RefMut<'_, Facts>>, r: &Result<T, SendError>) {
    let Some(mut t) = t else { return };
    match r {
        Ok(_) => {}
        Err(SendError::Client) => t.ended(Cause::ClientClosed),
        Err(SendError::Stalled) => t.ended(Cause::ClientTimeout),
    }
}

impl<O> Logged<O> {
    /// The stream's facts, when it is logged.
    fn facts(&self) -> Option<RefMut<'_, Facts>> {
        self.trail.as_ref().map(|t| t.facts.borrow_mut())
    }
}

impl<O: Outbound> Outbound for Logged<O> {
    fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let p = self.inner.poll_reset(cx);
        if let (true, Some(mut t)) = (p.is_ready(), self.facts()) {
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
        let Some(mut t) = self.facts() else {
            return r;
        };
        match r {
            Ok(()) => {
                let now = Tick::now();
                t.status = status;
                t.head_at = Some(now);
                t.whole_at = end.then_some(now);
                t.finished |= end;
            }
            Err(Gone) => t.ended(Cause::ClientClosed),
        }
        r
    }

    async fn flush_head(&mut self, stall: Duration) -> Result<(), SendError> {
        let r = self.inner.flush_head(stall).await;
        sent(self.facts(), &r);
        r
    }

    async fn send(&mut self, data: Bytes, last: bool, stall: Duration) -> Result<(), SendError> {
        let n = data.len() as u64;
        let r = self.inner.send(data, last, stall).await;
        sent(self.facts(), &r);
        if let (true, Some(mut t)) = (r.is_ok(), self.facts()) {
            t.bytes_out += n;
            t.finished |= last;
        }
        r
    }

    async fn trailers(&mut self, trailers: HeaderMap) -> Result<(), Gone> {
        let r = self.inner.trailers(trailers).await;
        if let Some(mut t) = self.facts() {
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
        if let Some(mut t) = self.facts() {
            t.status = resp.status().as_u16();
            t.head_at = Some(Tick::now());
            t.bytes_out += body.len() as u64;
            t.finished = true;
            let cause = own_answer(t.status);
            t.ended(cause);
        }
        self.inner.answer_now(resp, body);
    }

    fn reset(&mut self, why: Reset) {
        if let Some(mut t) = self.facts() {
            if let Some(status) = self.inner.reset_status(why) {
                t.status = status;
                t.head_at = Some(Tick::now());
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
        let Some(mut t) = self.facts() else { return };
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
            Note::Client(ip) => t.said.client = Some(ip),
            Note::Rewritten(p) => t.said.rewritten = Some(p.as_bytes().into()),
        }
    }
}

impl<I: Inbound> Inbound for Counted<I> {
    async fn data(&mut self) -> Option<Result<Bytes, Gone>> {
        let r = self.inner.data().await;
        if let (Some(Ok(b)), Some(t)) = (&r, &self.trail) {
            t.bytes_in.set(t.bytes_in.get() + b.len() as u64);
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
        let Some(trail) = self.trail.take() else {
            return;
        };
        let t = trail.facts.borrow();
        let cause = match t.cause {
            Some(c) => c,
            None if t.finished => Cause::Normal,
            // Dropped under way: the client went (its connection, or the drain deadline).
            None => Cause::ClientClosed,
        };
        t.line.log.log(&Record {
            status: t.status,
            bytes_in: trail.bytes_in.get(),
            bytes_out: t.bytes_out,
            backend: t.backend.as_deref(),
            server: t.server.as_ref().map(|s| s.name()),
            retries: t.retries,
            timings: Timings {
                queue: t.queue.map(micros),
                connect: t.connect.map(micros),
                head: t.head_at.map(|h| h.micros_since(t.began)),
                total: t.whole_at.unwrap_or_else(Tick::now).micros_since(t.began),
            },
            ..t.said.record(&t.line.conn, t.start_us, cause)
        });
    }
}
