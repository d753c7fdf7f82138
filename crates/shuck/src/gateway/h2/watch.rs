//! The client connection as h2 sees it, watched on its way: plaintext bytes counted both
//! ways, and the HTTP/2 frame headers followed (only their 9-byte headers; h2 does the
//! parsing) to know when a header block has begun and not ended, so that
//! `--http-request-timeout` bounds each stream's head as it bounds an HTTP/1.1 head.
//!
//! Writes are gathered, and sent when h2 has done all it can: h2 hands a DATA frame's
//! header and its payload over in separate writes and flushes after each DATA frame,
//! while each write to the TLS stream is a record and a system call of its own. The
//! driver holds a second handle and calls [`Watched::send_gathered`] whenever h2's
//! connection future returns `Pending`, so the answers of all the streams ready at one
//! wake-up leave in one record (up to the record size) and one send. A full buffer and a
//! shutdown send at once.

use std::cell::{Cell, RefCell};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};

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

/// Plaintext gathered before it goes to the TLS stream: four full records, one send (the
/// TLS stream takes that much at once). With one record's worth, the answers of ten
/// streams of 4 KB took three sends, and the kernel's share of each request was 7 %
/// more.
const GATHER: usize = 64 * 1024;

/// A write this large (a full DATA frame) is a record of its own, not copied.
const DIRECT: usize = 16 * 1024;

/// The watched connection: a handle for h2 and one for the driver, to the same wire.
#[derive(Debug)]
pub struct Watched<S>(Rc<RefCell<Wire<S>>>);

#[derive(Debug)]
struct Wire<S> {
    io: S,
    scan: Scan,
    seen: Rc<Seen>,
    /// Plaintext written by h2 and not yet given to `io`.
    out: Vec<u8>,
    /// A send of the gathered bytes failed: the next read or write reports it to h2.
    failed: Option<io::Error>,
    /// A read found nothing since the driver's turn began: h2 polls once a stream taken,
    /// and until the turn ends (no readiness can come within it) each read would only ask
    /// the socket again. The first one registered the task's waker.
    dry: bool,
}

impl<S> Watched<S> {
    /// Watches `io` from the start of the connection, reporting to `seen`.
    pub fn new(io: S, seen: Rc<Seen>) -> Self {
        Watched(Rc::new(RefCell::new(Wire {
            io,
            scan: Scan::Preface(PREFACE),
            seen,
            out: Vec::new(),
            failed: None,
            dry: false,
        })))
    }

    /// A second handle to the same connection (the driver's).
    pub fn handle(&self) -> Self {
        Watched(self.0.clone())
    }

    /// The wire, for the length of one call. h2 and the driver run on one task and never
    /// inside each other's calls, so it is never held twice; if it were, that is an error
    /// of the connection, not a panic.
    fn wire(&self) -> io::Result<std::cell::RefMut<'_, Wire<S>>> {
        self.0
            .try_borrow_mut()
            .map_err(|_| io::Error::other("HTTP/2 connection used twice at once"))
    }

    #[cfg(test)]
    fn follow(&mut self, input: &[u8]) {
        if let Ok(mut w) = self.wire() {
            let Wire { scan, seen, .. } = &mut *w;
            follow(scan, seen, input);
        }
    }
}

impl<S: AsyncWrite + Unpin> Watched<S> {
    /// Ends the driver's turn, called whenever h2 waits: the next turn reads the socket
    /// again, and what h2 wrote since the last time is sent. A send that has to wait
    /// wakes the task when the socket takes more; one that fails is kept for h2's next
    /// read or write, and the task woken to make it.
    pub fn send_gathered(&self, cx: &mut Context<'_>) {
        let Ok(mut w) = self.wire() else { return };
        w.dry = false;
        if w.out.is_empty() || w.failed.is_some() {
            return;
        }
        if let Poll::Ready(Err(e)) = w.poll_drain(cx) {
            w.failed = Some(e);
            cx.waker().wake_by_ref();
        }
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
                let ends_head = in_block && flags & END_HEADERS != 0;
                // A block that begins and ends in these bytes (the usual request) needs no
                // deadline: no clock read, no wake of the driver.
                let whole = ends_head && input.len() >= len;
                if in_block && !whole && seen.head_since.get().is_none() {
                    seen.head_since.set(Some(Instant::now()));
                    seen.head_started.notify_one();
                }
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
        let mut w = self.wire()?;
        if let Some(e) = w.failed.take() {
            return Poll::Ready(Err(e));
        }
        if w.dry {
            return Poll::Pending;
        }
        let before = buf.filled().len();
        let Poll::Ready(read) = Pin::new(&mut w.io).poll_read(cx, buf) else {
            w.dry = true;
            return Poll::Pending;
        };
        read?;
        let Wire { scan, seen, .. } = &mut *w;
        let new = &buf.filled()[before..];
        seen.bytes_in.set(seen.bytes_in.get() + new.len() as u64);
        follow(scan, seen, new);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> Wire<S> {
    /// Gives what was gathered to `io`.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut done = 0;
        while done < self.out.len() {
            match Pin::new(&mut self.io).poll_write(cx, &self.out[done..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => done += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    self.out.drain(..done);
                    return Poll::Pending;
                }
            }
        }
        // Given back, so that an idle connection holds no gather buffer.
        self.out = Vec::new();
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut w = self.wire()?;
        if let Some(e) = w.failed.take() {
            return Poll::Ready(Err(e));
        }
        // What was gathered goes first when this does not fit, or goes by itself.
        if buf.len() >= DIRECT || w.out.len() + buf.len() > GATHER {
            ready!(w.poll_drain(cx))?;
        }
        let n = if buf.len() >= DIRECT {
            // Large enough to be a record of its own: no copy.
            ready!(Pin::new(&mut w.io).poll_write(cx, buf))?
        } else {
            if w.out.capacity() == 0 {
                w.out.reserve_exact(GATHER);
            }
            w.out.extend_from_slice(buf);
            buf.len()
        };
        w.seen.bytes_out.set(w.seen.bytes_out.get() + n as u64);
        Poll::Ready(Ok(n))
    }

    /// What was gathered is sent by the driver's [`Watched::send_gathered`] once h2 has
    /// nothing more to write, so that the streams answered at one wake-up share a record.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut w = self.wire()?;
        if w.out.is_empty() {
            Pin::new(&mut w.io).poll_flush(cx)
        } else {
            Poll::Ready(Ok(()))
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut w = self.wire()?;
        ready!(w.poll_drain(cx))?;
        Pin::new(&mut w.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
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
        // A whole block in one read opens no deadline; one cut after its frame header does.
        let whole = [0, 0, 1, HEADERS, END_HEADERS, 0, 0, 0, 3, 0x82];
        w.follow(&whole);
        assert!(seen.head_since.get().is_none());
        w.follow(&whole[..9]);
        assert!(
            seen.head_since.get().is_some(),
            "its block is still to come"
        );
        w.follow(&whole[9..]);
        assert!(seen.head_since.get().is_none());
    }

    /// Records each write it is given, as the TLS stream would make each a record; counts
    /// the reads asked of it, none of which finds anything.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>, usize);

    impl AsyncRead for Writes {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            self.get_mut().1 += 1;
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_read_that_found_nothing_is_not_asked_again_until_the_next_turn() {
        let driver = Watched::new(Writes::default(), Rc::new(Seen::default()));
        let mut h2 = driver.handle();
        let asked = |d: &Watched<Writes>| d.0.borrow().io.1;
        std::future::poll_fn(|cx| {
            let mut bytes = [0u8; 16];
            for _ in 0..3 {
                let mut buf = ReadBuf::new(&mut bytes);
                assert!(Pin::new(&mut h2).poll_read(cx, &mut buf).is_pending());
            }
            assert_eq!(asked(&driver), 1, "one read of the socket a turn");
            driver.send_gathered(cx);
            let mut buf = ReadBuf::new(&mut bytes);
            assert!(Pin::new(&mut h2).poll_read(cx, &mut buf).is_pending());
            assert_eq!(asked(&driver), 2, "the next turn reads again");
            Poll::Ready(())
        })
        .await;
    }

    impl AsyncWrite for Writes {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.get_mut().0.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn writes(w: &Watched<Writes>) -> Vec<Vec<u8>> {
        w.0.borrow().io.0.clone()
    }

    #[tokio::test]
    async fn writes_are_gathered_until_the_driver_sends_them() {
        use tokio::io::AsyncWriteExt;
        let seen = Rc::new(Seen::default());
        let driver = Watched::new(Writes::default(), seen.clone());
        let mut h2 = driver.handle();
        // Two streams' frames, each header and payload apart, flushed after each as h2 does.
        for part in [&b"head-1"[..], b"data-1", b"head-2", b"data-2"] {
            h2.write_all(part).await.unwrap();
            h2.flush().await.unwrap();
        }
        assert!(writes(&driver).is_empty(), "nothing goes before h2 waits");
        std::future::poll_fn(|cx| {
            driver.send_gathered(cx);
            Poll::Ready(())
        })
        .await;
        assert_eq!(writes(&driver), vec![b"head-1data-1head-2data-2".to_vec()]);
        assert_eq!(seen.bytes_out.get(), 24);
        // A write of a whole record goes as it is, after what was gathered before it.
        h2.write_all(b"x").await.unwrap();
        let big = vec![7u8; DIRECT];
        h2.write_all(&big).await.unwrap();
        let w = writes(&driver);
        assert_eq!(w.len(), 3);
        assert_eq!((w[1].as_slice(), w[2].len()), (&b"x"[..], DIRECT));
        // Several streams' answers, more than a record in all, leave in one send.
        for _ in 0..3 {
            h2.write_all(&[5u8; 10 * 1024]).await.unwrap();
        }
        std::future::poll_fn(|cx| {
            driver.send_gathered(cx);
            Poll::Ready(())
        })
        .await;
        assert_eq!(writes(&driver).last().map(Vec::len), Some(30 * 1024));
        assert_eq!(writes(&driver).len(), 4);
        // A shutdown sends what is left.
        h2.write_all(b"bye").await.unwrap();
        h2.shutdown().await.unwrap();
        assert_eq!(writes(&driver).last().map(Vec::as_slice), Some(&b"bye"[..]));
    }
}
