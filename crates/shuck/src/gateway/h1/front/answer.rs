//! The core's answer written as HTTP/1.1: its head with the framing the client reads (the
//! backend's length, else chunked, else to the close for HTTP/1.0), interim answers, the
//! body, trailers in the chunked body's trailer section. shuck's own answers end the
//! connection, as the relay's do.

use std::io::Write as _;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite};

use super::head::Message;
use super::Wire;
use crate::gateway::front::{Gone, Note, Outbound, Reset, SendError};
use crate::gateway::h1::{BAD_REQUEST, REQUEST_TIMEOUT};
use crate::gateway::request::connection_specific;

/// How the body follows the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    /// No head yet.
    Unsent,
    /// None (`HEAD`, `204`, `304`, or an empty answer with its length 0).
    Bodiless,
    /// As long as the backend said.
    Length,
    /// Chunked, trailers at its end.
    Chunked,
    /// Until the close (an HTTP/1.0 client, no length given).
    Close,
}

/// One request's answer.
pub(super) struct Answer<'w, 'a, S> {
    wire: &'w Wire<'a, S>,
    head: bool,
    http10: bool,
    close: bool,
    out: Out,
    /// The head, until it goes.
    pending: Vec<u8>,
    id: u64,
}

impl<'w, 'a, S> Answer<'w, 'a, S> {
    /// The answer to `msg`, the connection's `id`th request.
    pub(super) fn new(wire: &'w Wire<'a, S>, msg: &Message, id: u64) -> Self {
        Answer {
            wire,
            head: msg.head,
            http10: msg.http10,
            close: msg.close,
            out: Out::Unsent,
            pending: Vec::new(),
            id,
        }
    }
}

/// The status line and the fields, without what is this connection's own.
fn write_head(out: &mut Vec<u8>, status: StatusCode, fields: &HeaderMap) {
    let _ = write!(
        out,
        "HTTP/1.1 {} {}\r\n",
        status.as_str(),
        status.canonical_reason().unwrap_or("")
    );
    for (name, value) in fields {
        if connection_specific(name) {
            continue;
        }
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
}

fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

impl<S: AsyncRead + AsyncWrite + Unpin> Outbound for Answer<'_, '_, S> {
    fn poll_reset(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        // HTTP/1.1 has no reset: a client gone is found by the next write.
        Poll::Pending
    }

    async fn informational(&mut self, resp: Response<()>) {
        // HTTP/1.0 knows none; a 101 is the tunnel's, which this path does not carry.
        if self.http10 || resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            return;
        }
        let mut b = Vec::new();
        write_head(&mut b, resp.status(), resp.headers());
        b.extend_from_slice(b"\r\n");
        let _ = self.wire.write_all(&b).await;
    }

    fn respond(&mut self, resp: Response<()>, end: bool) -> Result<(), Gone> {
        let status = resp.status();
        let length = resp.headers().contains_key(header::CONTENT_LENGTH);
        let bodiless =
            self.head || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
        self.out = match (bodiless, length, end) {
            (true, _, _) => Out::Bodiless,
            (false, true, _) => Out::Length,
            (false, false, true) => Out::Bodiless,
            (false, false, false) if self.http10 => Out::Close,
            (false, false, false) => Out::Chunked,
        };
        let b = &mut self.pending;
        write_head(b, status, resp.headers());
        match self.out {
            Out::Chunked => field(b, b"transfer-encoding", b"chunked"),
            Out::Bodiless if !length && !self.head && status != StatusCode::NOT_MODIFIED => {
                field(b, b"content-length", b"0")
            }
            _ => {}
        }
        if self.close || self.out == Out::Close {
            field(b, b"connection", b"close");
            self.wire.turn.borrow_mut().close = true;
        } else if self.http10 {
            field(b, b"connection", b"keep-alive");
        }
        b.extend_from_slice(b"\r\n");
        self.wire.turn.borrow_mut().answering = true;
        Ok(())
    }

    async fn flush_head(&mut self, _stall: Duration) -> Result<(), SendError> {
        let head = std::mem::take(&mut self.pending);
        self.wire.write_all(&head).await
    }

    async fn send(&mut self, data: Bytes, last: bool, _stall: Duration) -> Result<(), SendError> {
        let mut b = std::mem::take(&mut self.pending);
        match self.out {
            Out::Chunked => {
                if !data.is_empty() {
                    let _ = write!(b, "{:x}\r\n", data.len());
                    b.extend_from_slice(&data);
                    b.extend_from_slice(b"\r\n");
                }
                if last {
                    b.extend_from_slice(b"0\r\n\r\n");
                }
            }
            Out::Length | Out::Close if b.is_empty() => return self.wire.write_all(&data).await,
            Out::Length | Out::Close => b.extend_from_slice(&data),
            Out::Bodiless | Out::Unsent => {}
        }
        if b.is_empty() {
            return Ok(());
        }
        self.wire.write_all(&b).await
    }

    async fn trailers(&mut self, trailers: HeaderMap) -> Result<(), Gone> {
        if self.out != Out::Chunked {
            // A length, or the close, frames this body: no trailer section to carry them.
            return Ok(());
        }
        let mut b = std::mem::take(&mut self.pending);
        b.extend_from_slice(b"0\r\n");
        for (name, value) in &trailers {
            field(&mut b, name.as_str().as_bytes(), value.as_bytes());
        }
        b.extend_from_slice(b"\r\n");
        self.wire.write_all(&b).await.map_err(|_| Gone)
    }

    fn answer_now(&mut self, resp: Response<()>, body: Bytes) {
        let mut b = Vec::new();
        write_head(&mut b, resp.status(), resp.headers());
        if !resp.headers().contains_key(header::CONTENT_LENGTH) {
            let _ = write!(b, "content-length: {}\r\n", body.len());
        }
        b.extend_from_slice(b"connection: close\r\n\r\n");
        if !self.head {
            b.extend_from_slice(&body);
        }
        let mut turn = self.wire.turn.borrow_mut();
        turn.queued = b;
        turn.answering = true;
        turn.close = true;
    }

    fn reset(&mut self, why: Reset) {
        let answer = self.reset_status(why);
        let mut turn = self.wire.turn.borrow_mut();
        turn.close = true;
        turn.answering = true;
        turn.queued = match answer {
            Some(400) => BAD_REQUEST.to_vec(),
            Some(_) => REQUEST_TIMEOUT.to_vec(),
            // The answer is cut: the close tells the client.
            None => Vec::new(),
        };
    }

    fn reset_status(&self, why: Reset) -> Option<u16> {
        if self.wire.turn.borrow().answering {
            return None;
        }
        match why {
            Reset::Malformed => Some(400),
            // Before any answer, only a body that stopped arriving is given up on.
            Reset::Cancel => Some(408),
            Reset::Internal => None,
        }
    }

    fn id(&self) -> u64 {
        self.id
    }

    fn noting(&self) -> bool {
        true
    }

    fn note(&mut self, note: Note<'_>) {
        if let Note::Connection { server, .. } = note {
            *self.wire.server.borrow_mut() = Some(server);
        }
    }
}
