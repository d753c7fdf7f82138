//! The client connection as h2 sees it, watched on its way: plaintext bytes counted both
//! ways, and the HTTP/2 frame headers followed (only their 9-byte headers; h2 does the
//! parsing) to know when a header block has begun and not ended, so that
//! `--http-request-timeout` bounds each stream's head as it bounds an HTTP/1.1 head.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// What the driver reads of the watched connection.
#[derive(Debug, Default)]
pub struct Seen {
    /// Plaintext bytes from the client.
    pub bytes_in: Cell<u64>,
    /// Plaintext bytes to the client.
    pub bytes_out: Cell<u64>,
    /// When the header block being received began; `None` between blocks.
    pub head_since: Cell<Option<Instant>>,
    /// Woken when a header block begins, so the driver arms its deadline.
    pub head_started: Notify,
}

/// The connection preface's length (RFC 9113 §3.4).
const PREFACE: usize = 24;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;

#[derive(Debug)]
enum Scan {
    /// Bytes of the preface left.
    Preface(usize),
    /// A frame header, `got` bytes of it so far.
    Header { got: usize, bytes: [u8; 9] },
    /// Payload bytes left of the current frame; `ends_head` when it closes a header block.
    Payload { left: usize, ends_head: bool },
}

/// The watched connection.
#[derive(Debug)]
pub struct Watched<S> {
    io: S,
    scan: Scan,
    seen: Rc<Seen>,
}

impl<S> Watched<S> {
    /// Watches `io` from the start of the connection, reporting to `seen`.
    pub fn new(io: S, seen: Rc<Seen>) -> Self {
        Watched {
            io,
            scan: Scan::Preface(PREFACE),
            seen,
        }
    }

    #[cfg(test)]
    fn follow(&mut self, input: &[u8]) {
        follow(&mut self.scan, &self.seen, input);
    }
}

/// Follows the frame headers in bytes just read.
fn follow(scan: &mut Scan, seen: &Seen, mut input: &[u8]) {
    while !input.is_empty() {
        match scan {
            Scan::Preface(left) => {
                let n = (*left).min(input.len());
                *left -= n;
                input = &input[n..];
                if *left == 0 {
                    *scan = Scan::Header {
                        got: 0,
                        bytes: [0; 9],
                    };
                }
            }
            Scan::Header { got, bytes } => {
                let n = (9 - *got).min(input.len());
                bytes[*got..*got + n].copy_from_slice(&input[..n]);
                *got += n;
                input = &input[n..];
                if *got < 9 {
                    return;
                }
                let len = usize::from(bytes[0]) << 16
                    | usize::from(bytes[1]) << 8
                    | usize::from(bytes[2]);
                let (kind, flags) = (bytes[3], bytes[4]);
                let in_block = kind == HEADERS || kind == CONTINUATION;
                if in_block && seen.head_since.get().is_none() {
                    seen.head_since.set(Some(Instant::now()));
                    seen.head_started.notify_one();
                }
                let ends_head = in_block && flags & END_HEADERS != 0;
                *scan = Scan::Payload {
                    left: len,
                    ends_head,
                };
                payload_done(scan, seen);
            }
            Scan::Payload { left, .. } => {
                let n = (*left).min(input.len());
                *left -= n;
                input = &input[n..];
                payload_done(scan, seen);
            }
        }
    }
}

/// At a payload's end: the next frame header, and the end of a header block.
fn payload_done(scan: &mut Scan, seen: &Seen) {
    if let Scan::Payload { left: 0, ends_head } = *scan {
        if ends_head {
            seen.head_since.set(None);
        }
        *scan = Scan::Header {
            got: 0,
            bytes: [0; 9],
        };
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let Watched { io, scan, seen } = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            let new = &buf.filled()[before..];
            seen.bytes_in.set(seen.bytes_in.get() + new.len() as u64);
            follow(scan, seen, new);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            me.seen.bytes_out.set(me.seen.bytes_out.get() + n as u64);
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_header_block_is_open_until_end_headers() {
        let seen = Rc::new(Seen::default());
        let mut w = Watched::new(tokio::io::empty(), seen.clone());
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        let settings = [0, 0, 0, 0x4, 0, 0, 0, 0, 0];
        w.follow(preface);
        w.follow(&settings);
        assert!(seen.head_since.get().is_none());
        // HEADERS without END_HEADERS, 3 bytes of block, given a byte at a time.
        let headers = [0, 0, 3, HEADERS, 0x1, 0, 0, 0, 1, 0x82, 0x86, 0x84];
        for b in headers {
            w.follow(&[b]);
        }
        assert!(seen.head_since.get().is_some(), "the block goes on");
        let cont = [0, 0, 1, CONTINUATION, END_HEADERS, 0, 0, 0, 1, 0x41];
        w.follow(&cont[..9]);
        assert!(
            seen.head_since.get().is_some(),
            "its payload is still to come"
        );
        w.follow(&cont[9..]);
        assert!(seen.head_since.get().is_none());
        // A DATA frame does not open a block.
        w.follow(&[0, 0, 2, 0x0, 0x1, 0, 0, 0, 1, b'h', b'i']);
        assert!(seen.head_since.get().is_none());
    }
}
