//! HTTP/1.1 as the gateway core's third front (pingora's model: one core, a front per
//! version): the requests of an HTTP/1.1 connection routed to a backend that speaks
//! HTTP/2 (`proto = h2`) are served by the core, as HTTP/2's and HTTP/3's streams are, on
//! the worker's shared backend connections.
//!
//! The connection's rewriter (`request/`) still reads the client, so that HTTP/1.1's wire
//! is judged as on the relay (framing, smuggling, routes, 421, limits, request IDs); its
//! output, a rewritten HTTP/1.1 stream, is taken here one request at a time: the head
//! becomes the core's request (`head.rs`), the body its [`Inbound`](crate::gateway::front::Inbound)
//! (`body.rs`), and the core's answer goes back as HTTP/1.1 (`answer.rs`), in order. A
//! request for another backend ends the run (every answer owed is out by then), and the
//! terminator's loop takes the connection there.

mod answer;
mod body;
mod head;

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::request::{Hold, Rejected};
use super::{Expired, Http};
use crate::backend::Server;
use crate::edge::route::BackendId;
use crate::gateway::front::SendError;
use crate::gateway::logged::AskedTarget;
use crate::gateway::policy::{AnswerRules, Answering};
use crate::gateway::Gateway;

/// How a run of requests through the core ended.
#[derive(Debug)]
pub enum End {
    /// The next request goes to this other backend; every answer owed is out.
    Switch(BackendId),
    /// The next request names a host the connection's certificate does not cover (421).
    Misdirected,
    /// The next request is over the client's limits or a route's rules (429, 403).
    Refused(crate::clients::Refused),
    /// The next request's route answers it a redirect.
    Redirect,
    /// A request the rewriter refused, nothing of its answer begun (400).
    BadRequest(Rejected),
    /// A head too slow (408), or no next request in time.
    Timeout(Expired),
    /// The client closed, or shuck closed after an answer that ends the connection.
    Closed,
    /// Nothing moved for `--idle-timeout`.
    Idle,
}

/// What a run of requests through the core did.
#[derive(Debug)]
pub struct Left {
    /// How it ended.
    pub end: End,
    /// Plaintext bytes read from the client, and written to it.
    pub bytes_in: u64,
    /// See `bytes_in`.
    pub bytes_out: u64,
    /// The server of the last request, for the connection's log line.
    pub server: Option<Arc<Server>>,
}

/// The connection as the halves of each request share it: the client's stream, the
/// rewriter that reads it, and the rewriter's output not yet taken. Borrowed only within
/// one poll, never across a wait.
struct Wire<'a, S> {
    tls: RefCell<&'a mut S>,
    http: RefCell<&'a mut Http>,
    /// The rewriter's output not yet taken: the rest of this request, any after it.
    buf: RefCell<BytesMut>,
    /// The rewriter's output of one read, before it joins `buf`.
    fed: RefCell<Vec<u8>>,
    /// The rewriter refused what followed (or this request's body): told once this
    /// request is answered, and nothing more is read.
    refused: RefCell<Option<Rejected>>,
    /// The client's stream ended (or failed).
    eof: Cell<bool>,
    bytes_in: Cell<u64>,
    bytes_out: Cell<u64>,
    /// The request being served.
    turn: RefCell<Turn>,
    /// The server of the last request.
    server: RefCell<Option<Arc<Server>>>,
    /// `--http-stall-timeout`.
    stall: Duration,
}

/// What one request's halves found.
#[derive(Debug, Default)]
struct Turn {
    /// Its body was taken whole.
    body_done: bool,
    /// Something of an answer went, or is queued.
    answering: bool,
    /// The connection ends after this answer.
    close: bool,
    /// shuck's own answer, written once the core is done.
    queued: Vec<u8>,
}

impl<'a, S: AsyncRead + AsyncWrite + Unpin> Wire<'a, S> {
    /// Reads the client once through the rewriter; its output joins `buf`.
    async fn read_more(&self) -> io::Result<()> {
        if self.eof.get() || self.refused.borrow().is_some() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        poll_fn(|cx| {
            crate::edge::buffers::with_scratch(|scratch| {
                let mut rb = ReadBuf::new(scratch);
                let polled = Pin::new(&mut **self.tls.borrow_mut()).poll_read(cx, &mut rb);
                match polled {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Err(e)) => {
                        self.eof.set(true);
                        Poll::Ready(Err(e))
                    }
                    Poll::Ready(Ok(())) if rb.filled().is_empty() => {
                        self.eof.set(true);
                        Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()))
                    }
                    Poll::Ready(Ok(())) => {
                        let input = rb.filled();
                        self.bytes_in.set(self.bytes_in.get() + input.len() as u64);
                        let mut http = self.http.borrow_mut();
                        let h = &mut **http;
                        let mut fed = self.fed.borrow_mut();
                        fed.clear();
                        let r = h.request.feed(input, &mut fed, &mut h.exchange);
                        self.buf.borrow_mut().extend_from_slice(&fed);
                        if let Err(e) = r {
                            *self.refused.borrow_mut() = Some(e);
                        }
                        Poll::Ready(Ok(()))
                    }
                }
            })
        })
        .await
    }

    /// Writes `bytes` and flushes them, within `--http-stall-timeout`.
    async fn write_all(&self, mut bytes: &[u8]) -> Result<(), SendError> {
        let write = async {
            while !bytes.is_empty() {
                let n = poll_fn(|cx| Pin::new(&mut **self.tls.borrow_mut()).poll_write(cx, bytes))
                    .await?;
                if n == 0 {
                    return Err(io::ErrorKind::WriteZero.into());
                }
                bytes = &bytes[n..];
                self.bytes_out.set(self.bytes_out.get() + n as u64);
            }
            poll_fn(|cx| Pin::new(&mut **self.tls.borrow_mut()).poll_flush(cx)).await
        };
        match tokio::time::timeout(self.stall, write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(SendError::Client),
            Err(_) => Err(SendError::Stalled),
        }
    }

    /// The next request off the rewriter's output, reading the client as it needs; what
    /// ends the run instead (a request held for another backend, refused, a timeout).
    async fn next_request(&self, idle: Duration) -> Result<head::Message, End> {
        let start = Instant::now();
        loop {
            {
                let mut buf = self.buf.borrow_mut();
                if !buf.is_empty() {
                    // The rewriter writes whole heads: a part is only ever a bug's.
                    match head::parse(&buf) {
                        Ok(Some((n, msg))) => {
                            let _ = buf.split_to(n);
                            return Ok(msg);
                        }
                        Ok(None) => return Err(End::BadRequest(Rejected("a head cut short"))),
                        Err(e) => return Err(End::BadRequest(e)),
                    }
                }
            }
            if let Some(e) = self.refused.borrow_mut().take() {
                return Err(End::BadRequest(e));
            }
            if self.eof.get() {
                return Err(End::Closed);
            }
            match self.http.borrow().request.held() {
                Some(Hold::Switch(b)) => return Err(End::Switch(b)),
                Some(Hold::Misdirected) => return Err(End::Misdirected),
                Some(Hold::Refused(r)) => return Err(End::Refused(r)),
                Some(Hold::Redirect) => return Err(End::Redirect),
                None => {}
            }
            let due = self.http.borrow().deadline(start, false, false);
            let deadline = due.map_or(start + idle, |(at, _)| at.min(start + idle));
            if tokio::time::timeout_at(deadline, self.read_more())
                .await
                .is_err()
            {
                return Err(match due {
                    Some((at, why)) if at <= deadline => End::Timeout(why),
                    _ => End::Idle,
                });
            }
        }
    }

    /// The request just taken leaves the rewriter's books: the answers it owes, the IDs
    /// it echoes and the lines it logs are the core's for it; the answer rules of the
    /// route the rewriter chose for it, and the target the client wrote when that route
    /// rewrote it (for the core's log line), given back.
    fn took(&self) -> (AnswerRules, Option<AskedTarget>) {
        let mut http = self.http.borrow_mut();
        let ex = &mut http.exchange;
        ex.pending.pop_front();
        ex.ids.pop_front();
        let asked = ex.log.as_ref().and_then(|l| l.taken_by_core());
        let rules = ex.answers.pop_front().unwrap_or_default();
        (rules, asked.map(AskedTarget))
    }

    /// close_notify, within `--http-stall-timeout`.
    async fn shutdown(&self) {
        let close = poll_fn(|cx| Pin::new(&mut **self.tls.borrow_mut()).poll_shutdown(cx));
        let _ = tokio::time::timeout(self.stall, close).await;
    }
}

/// Serves the client's requests through the core, `first` (the rewriter's output so far:
/// a whole head, maybe more) first, until one goes to another backend or the connection
/// ends. `gw` is made for the backend the requests go to (its `fallback`, no routes: the
/// rewriter routed them).
pub async fn serve<S>(gw: Rc<Gateway>, tls: &mut S, http: &mut Http, first: Vec<u8>) -> Left
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let wire = Wire {
        tls: RefCell::new(tls),
        http: RefCell::new(http),
        buf: RefCell::new(BytesMut::from(&first[..])),
        fed: RefCell::new(Vec::new()),
        refused: RefCell::new(None),
        eof: Cell::new(false),
        bytes_in: Cell::new(0),
        bytes_out: Cell::new(0),
        turn: RefCell::new(Turn::default()),
        server: RefCell::new(None),
        stall: gw.stall,
    };
    drop(first);
    let mut id = 0;
    let end = loop {
        let msg = match wire.next_request(gw.idle).await {
            Ok(m) => m,
            Err(e) => break e,
        };
        let (rules, asked) = wire.took();
        let mut msg = msg;
        if let Some(a) = asked {
            msg.parts.extensions.insert(a);
        }
        id += 1;
        let end_stream = msg.framing == head::Framing::None;
        *wire.turn.borrow_mut() = Turn {
            body_done: end_stream,
            ..Turn::default()
        };
        let body = body::Body::new(&wire, msg.framing);
        // The edge policy's answer phase, for the route the rewriter chose (the core,
        // told only the backend, applies none of it to these requests).
        let answer = Answering::new(answer::Answer::new(&wire, &msg, id), rules);
        let active = gw.stream_opened();
        if let Some(stream) = crate::gateway::accept(active, msg.parts, end_stream, body, answer) {
            stream.await;
        }
        let turn = wire.turn.take();
        if !turn.queued.is_empty() && wire.write_all(&turn.queued).await.is_err() {
            break End::Closed;
        }
        // The body's own fault, before any answer: 400, as the relay says it.
        if !turn.answering {
            if let Some(e) = wire.refused.borrow_mut().take() {
                break End::BadRequest(e);
            }
        }
        let hostile = gw.resets.flood().is_some();
        if turn.close || msg.close || !turn.body_done || hostile || wire.eof.get() {
            // Unread body bytes would be read as the next request; a client that asked
            // to close, or an answer that ends the connection: close_notify after it.
            wire.shutdown().await;
            break End::Closed;
        }
    };
    Left {
        end,
        bytes_in: wire.bytes_in.get(),
        bytes_out: wire.bytes_out.get(),
        server: wire.server.take(),
    }
}
