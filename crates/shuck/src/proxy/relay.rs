//! The relay stage: bytes both ways until both sides have finished, with half-close passed
//! through (a client's close_notify becomes a FIN to the backend, a backend's FIN becomes a
//! close_notify to the client) and an idle timeout over both directions.
//!
//! Both directions are polled in a single task: no split halves, no locks. Reads land in
//! the worker's scratch buffer ([`super::buffers`]) and are written on at once; only bytes
//! a writer cannot take yet are copied into a buffer of the connection's own, freed as soon
//! as it drains, so an idle connection holds no relay buffer at all.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};

use crate::edge::buffers;
use crate::edge::upstream::Closing;
use crate::gateway::h1::request::{Hold, Rejected};
use crate::gateway::h1::{
    self, Exchange, Expired, Http, RequestRewriter, ResponseTracker, Upgrade,
};
use tokio::time::Instant;

/// Which side of the relay failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The TLS client.
    Client,
    /// The plain backend.
    Backend,
}

/// How a relay ended.
#[derive(Debug)]
pub enum RelayEnd {
    /// Both directions reached end of stream.
    Closed,
    /// No byte moved for the idle timeout.
    IdleTimeout,
    /// Reading from or writing to one side failed.
    Error(Side, io::Error),
    /// HTTP mode refused a request (the client is answered 400).
    BadRequest(Rejected),
    /// HTTP mode: a head too slow (answered 408) or no next request in time.
    HttpTimeout(Expired),
    /// HTTP mode: the backend wrote past every answer owed (closed; those bytes withheld).
    Stray,
    /// HTTP mode with routes: the next request goes to this other backend, and the one
    /// connected has answered every request it was sent.
    Switch(crate::edge::route::BackendId),
    /// HTTP mode with routes: the next request names a host the connection's certificate
    /// does not cover (answered 421 once the answers owed are out).
    Misdirected,
    /// HTTP mode: the next request is over the client's request rate (answered 429) or a
    /// route's rules refuse it (403), once the answers owed are out.
    Refused(crate::clients::Refused),
    /// HTTP mode: the next request's route answers it a redirect
    /// ([`crate::gateway::h1::request::RequestRewriter::redirect`]), once the answers owed
    /// are out; the connection closes after it.
    Redirect,
    /// HTTP mode: the backend closed its keep-alive connection between requests; the
    /// client's stays open and its next request gets a new backend connection.
    BackendClosed,
    /// HTTP mode: the backend closed or reset its connection without a byte of the answer
    /// to a request that may go again (idempotent, no body): it goes to a new connection.
    SendAgain,
}

/// What a relay moved and how it ended.
#[derive(Debug)]
pub struct RelayOutcome {
    /// Plaintext bytes from the client to the backend.
    pub client_to_backend: u64,
    /// Plaintext bytes from the backend to the client.
    pub backend_to_client: u64,
    /// Why it stopped.
    pub end: RelayEnd,
}

/// Copies `client` ⇄ `backend` until both directions end, one fails, or nothing moves for
/// `idle`. Reads land in the worker's scratch buffer; `http` is HTTP mode's state.
pub async fn relay<C, B>(
    client: &mut C,
    backend: &mut B,
    idle: Duration,
    mut http: Option<&mut Http>,
) -> RelayOutcome
where
    C: AsyncRead + Closing,
    B: AsyncRead + Closing,
{
    let mut up = Pump::new();
    let mut down = Pump::new();
    let sleep = tokio::time::sleep(idle);
    tokio::pin!(sleep);
    let mut last_active = Instant::now();

    let end = poll_fn(|cx| {
        buffers::with_scratch(|buf| {
            let mut filter = match http.as_deref_mut() {
                Some(h) => Filter::Request(&mut h.request, &mut h.exchange),
                None => Filter::None,
            };
            let up_step = up.step(
                cx,
                &mut *client,
                &mut *backend,
                buf,
                (Side::Client, Side::Backend),
                &mut filter,
                down.done,
            );
            if let Some(end) = up_step {
                // The request could not be written to a server that died: it goes again
                // when it may (its head is kept whole), else the relay ends.
                let dead = matches!(end, RelayEnd::Error(Side::Backend, _));
                if dead && http.as_deref().is_some_and(|h| h.may_send_again()) {
                    return Poll::Ready(RelayEnd::SendAgain);
                }
                return Poll::Ready(end);
            }
            // A request held for another backend, or none under way: the backend's close
            // ends its direction without closing the client, whose connection moves on.
            down.keep_open = http.as_deref().is_some_and(|h| h.request.held().is_some());
            let mut filter = match http.as_deref_mut() {
                Some(h) => Filter::Response(&mut h.response, &mut h.exchange, &h.request),
                None => Filter::None,
            };
            let down_step = down.step(
                cx,
                &mut *backend,
                &mut *client,
                buf,
                (Side::Backend, Side::Client),
                &mut filter,
                up.done,
            );
            if let Some(h) = http.as_deref() {
                // A server that died (or closed) before answering a request that may go
                // again: another connection gets it, the client sees nothing.
                let failed = matches!(down_step, Some(RelayEnd::Error(Side::Backend, _)));
                if (failed || (down.done && !up.done)) && h.may_send_again() {
                    return Poll::Ready(RelayEnd::SendAgain);
                }
            }
            if let Some(end) = down_step {
                return Poll::Ready(end);
            }
            if down.done && !up.done && up.pending.is_empty() && down.pending.is_empty() {
                // The backend closed between requests (a keep-alive timeout, a restart):
                // the next request goes to a new connection, as HAProxy's do.
                if http.as_deref().is_some_and(Http::at_rest) {
                    return Poll::Ready(RelayEnd::BackendClosed);
                }
            }
            if let Some(h) = http.as_deref() {
                // The backend answered an upgrade: let the request side release what it holds.
                if h.request.is_holding() && h.exchange.upgrade != Upgrade::Awaiting {
                    cx.waker().wake_by_ref();
                }
            }
            if let Some(h) = http.as_deref() {
                // A request held for another backend (or for a 421) goes once every answer
                // owed by this one is out (before a close: the client may have half-closed
                // after it).
                if let Some(hold) = h.request.held() {
                    if h.exchange.pending.is_empty()
                        && h.response.between_messages()
                        && down.pending.is_empty()
                        && up.pending.is_empty()
                    {
                        return Poll::Ready(match hold {
                            Hold::Switch(to) => RelayEnd::Switch(to),
                            Hold::Misdirected => RelayEnd::Misdirected,
                            Hold::Refused(r) => RelayEnd::Refused(r),
                            Hold::Redirect => RelayEnd::Redirect,
                        });
                    }
                }
            }
            if up.done && down.done {
                return Poll::Ready(RelayEnd::Closed);
            }
            if std::mem::take(&mut up.moved) | std::mem::take(&mut down.moved) {
                // Only note the time; the timer is re-armed lazily when it fires, so busy
                // connections do not touch the timer wheel on every read.
                last_active = Instant::now();
            }
            // HTTP mode's deadline, if it waits for a head or the next request; compared with
            // the clock only when the timer fires, like the idle deadline.
            let (untaken, unsent) = (!down.pending.is_empty(), !up.pending.is_empty());
            let http_due = http
                .as_deref()
                .and_then(|h| h.deadline(last_active, untaken, unsent));
            while sleep.as_mut().poll(cx).is_ready() {
                let now = Instant::now();
                if let Some((at, why)) = http_due {
                    if now >= at {
                        return Poll::Ready(RelayEnd::HttpTimeout(why));
                    }
                }
                let deadline = last_active + idle;
                if now >= deadline {
                    return Poll::Ready(RelayEnd::IdleTimeout);
                }
                let next = http_due.map_or(deadline, |(at, _)| at.min(deadline));
                sleep.as_mut().reset(next);
            }
            if let Some((at, _)) = http_due {
                if at < sleep.deadline() {
                    sleep.as_mut().reset(at);
                    cx.waker().wake_by_ref();
                }
            }
            Poll::Pending
        })
    })
    .await;

    RelayOutcome {
        client_to_backend: up.total,
        backend_to_client: down.total,
        end,
    }
}

enum PumpError {
    Read(io::Error),
    Write(io::Error),
    Http(Rejected),
    /// The backend wrote an answer no request asked for.
    Stray,
}

/// What a direction does to the bytes it moves.
enum Filter<'a> {
    /// Nothing: plain relay.
    None,
    /// HTTP mode, client → backend: rewrite request heads.
    Request(&'a mut RequestRewriter, &'a mut Exchange),
    /// HTTP mode, backend → client: watch response framing (the request side read at the
    /// backend's end of stream: whether the client's connection outlives it).
    Response(
        &'a mut ResponseTracker,
        &'a mut Exchange,
        &'a RequestRewriter,
    ),
}

impl Filter<'_> {
    /// Backend → client in HTTP mode, at the backend's end of stream: the client's
    /// connection stays open when every answer owed is complete and no request is under
    /// way (the next one gets a new backend connection), or when the one answer owed has
    /// not begun and its request may go again.
    fn outlives_backend(&self) -> bool {
        let Filter::Response(r, ex, req) = self else {
            return false;
        };
        h1::at_rest(req, r, ex) || h1::may_send_again(req, r, ex)
    }
}

/// One direction of the relay.
struct Pump {
    /// Bytes read but not yet taken by the writer; unallocated while none are waiting.
    pending: Vec<u8>,
    /// How much of `pending` has been written.
    pos: usize,
    /// The reader reached end of stream.
    eof: bool,
    /// Bytes written since the last flush.
    need_flush: bool,
    /// Reader finished and the writer was shut down.
    done: bool,
    /// Bytes moved.
    total: u64,
    /// Bytes were read since the relay last looked (for the idle timeout).
    moved: bool,
    /// HTTP mode: the backend wrote an answer nobody asked for; the relay ends once what
    /// came before it is written.
    stray: bool,
    /// At end of stream, the writer is flushed but not closed (a request waits to go to
    /// another backend over the same client connection).
    keep_open: bool,
}

impl Pump {
    fn new() -> Self {
        Pump {
            pending: Vec::new(),
            pos: 0,
            eof: false,
            need_flush: false,
            done: false,
            total: 0,
            moved: false,
            stray: false,
            keep_open: false,
        }
    }

    /// Advances this direction unless it is done; `Some` when the relay must end because
    /// reading from side `sides.0` or writing to side `sides.1` failed. `last`: the other
    /// direction has ended, so this one's end is the relay's.
    #[allow(clippy::too_many_arguments)]
    fn step<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        r: &mut R,
        w: &mut W,
        scratch: &mut [u8],
        sides: (Side, Side),
        filter: &mut Filter<'_>,
        last: bool,
    ) -> Option<RelayEnd>
    where
        R: AsyncRead + Unpin,
        W: Closing,
    {
        if self.done {
            return None;
        }
        match self.poll_copy(cx, Pin::new(r), Pin::new(w), scratch, filter, last) {
            Poll::Ready(Ok(())) => {
                self.done = true;
                None
            }
            Poll::Ready(Err(PumpError::Read(e))) => Some(RelayEnd::Error(sides.0, e)),
            Poll::Ready(Err(PumpError::Write(e))) => Some(RelayEnd::Error(sides.1, e)),
            Poll::Ready(Err(PumpError::Http(e))) => Some(RelayEnd::BadRequest(e)),
            Poll::Ready(Err(PumpError::Stray)) => Some(RelayEnd::Stray),
            Poll::Pending => None,
        }
    }

    fn poll_copy<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        mut r: Pin<&mut R>,
        mut w: Pin<&mut W>,
        scratch: &mut [u8],
        filter: &mut Filter<'_>,
        last: bool,
    ) -> Poll<Result<(), PumpError>>
    where
        R: AsyncRead + ?Sized,
        W: Closing + ?Sized,
    {
        loop {
            if let Filter::Request(rw, ex) = filter {
                if rw.is_holding() && ex.upgrade != Upgrade::Awaiting {
                    rw.feed(&[], &mut self.pending, ex)
                        .map_err(PumpError::Http)?;
                }
            }
            // Bytes left over from an earlier read go first.
            while self.pos < self.pending.len() {
                let n = ready!(w.as_mut().poll_write(cx, &self.pending[self.pos..]))
                    .map_err(PumpError::Write)?;
                self.wrote(n)?;
                self.pos += n;
            }
            if !self.pending.is_empty() {
                self.pending = Vec::new();
                self.pos = 0;
            }
            if self.stray {
                ready!(w.as_mut().poll_flush(cx)).map_err(PumpError::Write)?;
                return Poll::Ready(Err(PumpError::Stray));
            }
            if self.eof {
                if self.keep_open || filter.outlives_backend() {
                    ready!(w.as_mut().poll_flush(cx)).map_err(PumpError::Write)?;
                    return Poll::Ready(Ok(()));
                }
                let closed = if last {
                    w.as_mut().poll_close_last(cx)
                } else {
                    w.as_mut().poll_shutdown(cx)
                };
                ready!(closed).map_err(PumpError::Write)?;
                return Poll::Ready(Ok(()));
            }

            let mut rb = ReadBuf::new(scratch);
            match r.as_mut().poll_read(cx, &mut rb) {
                Poll::Pending => {
                    // A TLS writer may hold encrypted bytes it could not send yet.
                    if self.need_flush {
                        ready!(w.as_mut().poll_flush(cx)).map_err(PumpError::Write)?;
                        self.need_flush = false;
                    }
                    return Poll::Pending;
                }
                // A client that closes TCP without close_notify: treat as end of stream, as
                // every terminator does; the backend sees a FIN.
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    self.eof = true;
                    continue;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(PumpError::Read(e))),
                Poll::Ready(Ok(())) => {}
            }
            let n = rb.filled().len();
            if n == 0 {
                self.eof = true;
                continue;
            }
            self.moved = true;
            match filter {
                Filter::None => {}
                Filter::Response(t, ex, _) if t.rewrites(ex) => {
                    // `--quic`, `--request-id-response`, a sticky cookie, the edge policy:
                    // answers' heads change, so the bytes go through `pending` (the plain
                    // path below is the one without them).
                    let seen = t.rewrite(&scratch[..n], ex, &mut self.pending);
                    if seen.is_err() {
                        self.stray = true;
                    }
                    self.pos = 0;
                    continue;
                }
                Filter::Response(t, ex, _) => {
                    if let Err(at) = t.observe(&scratch[..n], ex) {
                        // What came before them goes out; they, and the connection, do not.
                        if at > 0 {
                            self.pending.extend_from_slice(&scratch[..at]);
                            self.pos = 0;
                        }
                        self.stray = true;
                        continue;
                    }
                }
                Filter::Request(rw, ex) => {
                    // The rewritten bytes differ from those read: they go through `pending`.
                    rw.feed(&scratch[..n], &mut self.pending, ex)
                        .map_err(PumpError::Http)?;
                    self.pos = 0;
                    continue;
                }
            }
            let mut off = 0;
            while off < n {
                match w.as_mut().poll_write(cx, &scratch[off..n]) {
                    Poll::Ready(Ok(k)) => {
                        self.wrote(k)?;
                        off += k;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(PumpError::Write(e))),
                    Poll::Pending => {
                        // The writer is full: keep the rest until it drains.
                        self.pending.extend_from_slice(&scratch[off..n]);
                        return Poll::Pending;
                    }
                }
            }
        }
    }

    fn wrote(&mut self, n: usize) -> Result<(), PumpError> {
        if n == 0 {
            return Err(PumpError::Write(io::ErrorKind::WriteZero.into()));
        }
        self.total += n as u64;
        self.need_flush = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt};

    impl Closing for tokio::io::DuplexStream {}

    #[tokio::test]
    async fn copies_both_ways_with_half_close() {
        let (mut client, mut proxy_c) = duplex(64 * 1024);
        let (mut proxy_b, mut backend) = duplex(64 * 1024);
        let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let client_side = async {
            client.write_all(&data).await.unwrap();
            client.shutdown().await.unwrap();
            let mut back = Vec::new();
            client.read_to_end(&mut back).await.unwrap();
            back
        };
        let backend_side = async {
            let mut got = Vec::new();
            backend.read_to_end(&mut got).await.unwrap();
            backend.write_all(b"after half-close").await.unwrap();
            backend.shutdown().await.unwrap();
            got
        };
        let (out, back, got) = tokio::join!(
            relay(&mut proxy_c, &mut proxy_b, Duration::from_secs(5), None),
            client_side,
            backend_side
        );
        assert_eq!(got, data);
        assert_eq!(back, b"after half-close");
        assert!(matches!(out.end, RelayEnd::Closed));
        assert_eq!(out.client_to_backend, data.len() as u64);
        assert_eq!(out.backend_to_client, 16);
    }

    #[tokio::test]
    async fn a_slow_writer_keeps_every_byte_in_order() {
        // A tiny pipe towards the backend forces partial writes and pending bytes.
        let (mut client, mut proxy_c) = duplex(64 * 1024);
        let (mut proxy_b, mut backend) = duplex(100);
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        let client_side = async {
            client.write_all(&data).await.unwrap();
            client.shutdown().await.unwrap();
            let mut sink = Vec::new();
            client.read_to_end(&mut sink).await.unwrap();
        };
        let backend_side = async {
            let mut got = Vec::new();
            let mut chunk = [0u8; 333];
            loop {
                tokio::task::yield_now().await;
                let n = backend.read(&mut chunk).await.unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&chunk[..n]);
            }
            backend.shutdown().await.unwrap();
            got
        };
        let (out, (), got) = tokio::join!(
            relay(&mut proxy_c, &mut proxy_b, Duration::from_secs(5), None),
            client_side,
            backend_side
        );
        assert!(got == data, "bytes lost or reordered");
        assert!(matches!(out.end, RelayEnd::Closed));
    }

    #[tokio::test]
    async fn idle_timeout_fires_only_without_traffic() {
        // Real time, with margins a loaded machine keeps: a write every 100 ms holds off an
        // idle timeout of a second, which then fires a second after the last.
        let (mut client, mut proxy_c) = duplex(1024);
        let (mut proxy_b, _backend) = duplex(1024);
        let start = Instant::now();
        let client_side = async {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                client.write_all(b"x").await.unwrap();
            }
            client
        };
        let (out, _client) = tokio::join!(
            relay(&mut proxy_c, &mut proxy_b, Duration::from_secs(1), None),
            client_side
        );
        assert!(matches!(out.end, RelayEnd::IdleTimeout));
        assert!(
            start.elapsed() >= Duration::from_millis(1400),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(out.client_to_backend, 5);
    }
}
