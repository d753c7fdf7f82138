//! A request's body as the core reads it: its bytes off the rewriter's output (a length's
//! worth, or dechunked with its trailers), the client read as more are needed. Flow
//! control is TCP's: what the core does not take is not read.

use bytes::Bytes;
use http::HeaderMap;
use tokio::io::{AsyncRead, AsyncWrite};

use super::head::Framing;
use super::Wire;
use crate::gateway::front::{Gone, Inbound};
use crate::gateway::response::{Dechunk, Piece};

/// Where the body stands.
enum Left {
    /// Taken whole.
    Done,
    /// This many bytes to come.
    Length(u64),
    /// Chunks to come.
    Chunked(Dechunk),
}

/// One request's body.
pub(super) struct Body<'w, 'a, S> {
    wire: &'w Wire<'a, S>,
    left: Left,
    trailers: Option<HeaderMap>,
}

impl<'w, 'a, S> Body<'w, 'a, S> {
    /// The body that follows a head framed so.
    pub(super) fn new(wire: &'w Wire<'a, S>, framing: Framing) -> Self {
        let left = match framing {
            Framing::None => Left::Done,
            Framing::Length(n) => Left::Length(n),
            Framing::Chunked => Left::Chunked(Dechunk::default()),
        };
        Body {
            wire,
            left,
            trailers: None,
        }
    }

    /// The next piece of what the rewriter gave so far: `Ok(None)` when more must be
    /// read, `Err` at the body's end.
    fn piece(&mut self) -> Result<Option<Bytes>, Option<Gone>> {
        let mut buf = self.wire.buf.borrow_mut();
        let piece = match &mut self.left {
            Left::Done => return Err(None),
            Left::Length(_) if buf.is_empty() => return Ok(None),
            Left::Length(left) => {
                let n = (*left).min(buf.len() as u64);
                *left -= n;
                // n is at most buf.len(), a usize.
                buf.split_to(n as usize).freeze()
            }
            Left::Chunked(d) => match d.next(&mut buf) {
                Ok(Piece::Data(b)) => return Ok(Some(b)),
                Ok(Piece::More) => return Ok(None),
                Ok(Piece::End(t)) => {
                    self.trailers = Some(t);
                    self.left = Left::Done;
                    self.wire.turn.borrow_mut().body_done = true;
                    return Err(None);
                }
                // The rewriter checked the framing: never, unless it is wrong.
                Err(_) => return Err(Some(Gone)),
            },
        };
        if let Left::Length(0) = self.left {
            self.left = Left::Done;
            self.wire.turn.borrow_mut().body_done = true;
        }
        Ok(Some(piece))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Inbound for Body<'_, '_, S> {
    async fn data(&mut self) -> Option<Result<Bytes, Gone>> {
        loop {
            match self.piece() {
                Ok(Some(b)) => return Some(Ok(b)),
                Err(None) => return None,
                Err(Some(gone)) => return Some(Err(gone)),
                Ok(None) => {}
            }
            // The client's end, or a refusal of its bytes, before the body's end.
            if self.wire.read_more().await.is_err() {
                return Some(Err(Gone));
            }
        }
    }

    fn release(&mut self, _n: usize) {}

    async fn trailers(&mut self) -> Result<Option<HeaderMap>, Gone> {
        Ok(self.trailers.take().filter(|t| !t.is_empty()))
    }
}
