//! The relay stage: bytes both ways until both sides have finished, with half-close passed
//! through (a client's close_notify becomes a FIN to the backend, a backend's FIN becomes a
//! close_notify to the client) and an idle timeout over both directions.
//!
//! One buffer per direction, polled in a single task: no split halves, no locks.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// Size of each direction's buffer: one TLS record of plaintext.
const BUF_SIZE: usize = 16 * 1024;

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
/// `idle`.
pub async fn relay<C, B>(client: &mut C, backend: &mut B, idle: Duration) -> RelayOutcome
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let mut up = Pump::new();
    let mut down = Pump::new();
    let sleep = tokio::time::sleep(idle);
    tokio::pin!(sleep);
    let mut last_active = Instant::now();

    let end = poll_fn(|cx| {
        let mut active = false;
        let up_step = up.step(
            cx,
            &mut *client,
            &mut *backend,
            Side::Client,
            Side::Backend,
            &mut active,
        );
        if let Some(end) = up_step {
            return Poll::Ready(end);
        }
        let down_step = down.step(
            cx,
            &mut *backend,
            &mut *client,
            Side::Backend,
            Side::Client,
            &mut active,
        );
        if let Some(end) = down_step {
            return Poll::Ready(end);
        }
        if up.done && down.done {
            return Poll::Ready(RelayEnd::Closed);
        }
        if active {
            // Only note the time; the timer is re-armed lazily when it fires, so busy
            // connections do not touch the timer wheel on every read.
            last_active = Instant::now();
        }
        while sleep.as_mut().poll(cx).is_ready() {
            let deadline = last_active + idle;
            if Instant::now() >= deadline {
                return Poll::Ready(RelayEnd::IdleTimeout);
            }
            sleep.as_mut().reset(deadline);
        }
        Poll::Pending
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
}

/// One direction of the relay.
struct Pump {
    buf: Box<[u8]>,
    /// Start of the bytes read but not yet written.
    pos: usize,
    /// End of the bytes read.
    cap: usize,
    /// The reader reached end of stream.
    eof: bool,
    /// Bytes written since the last flush.
    need_flush: bool,
    /// Reader finished and the writer was shut down.
    done: bool,
    /// Bytes moved.
    total: u64,
}

impl Pump {
    fn new() -> Self {
        Pump {
            buf: vec![0u8; BUF_SIZE].into_boxed_slice(),
            pos: 0,
            cap: 0,
            eof: false,
            need_flush: false,
            done: false,
            total: 0,
        }
    }

    /// Advances this direction unless it is done; `Some` when the relay must end because
    /// reading from side `from` or writing to side `to` failed.
    fn step<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        r: &mut R,
        w: &mut W,
        from: Side,
        to: Side,
        active: &mut bool,
    ) -> Option<RelayEnd>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        if self.done {
            return None;
        }
        match self.poll_copy(cx, Pin::new(r), Pin::new(w), active) {
            Poll::Ready(Ok(())) => {
                self.done = true;
                None
            }
            Poll::Ready(Err(PumpError::Read(e))) => Some(RelayEnd::Error(from, e)),
            Poll::Ready(Err(PumpError::Write(e))) => Some(RelayEnd::Error(to, e)),
            Poll::Pending => None,
        }
    }

    fn poll_copy<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        mut r: Pin<&mut R>,
        mut w: Pin<&mut W>,
        active: &mut bool,
    ) -> Poll<Result<(), PumpError>>
    where
        R: AsyncRead + ?Sized,
        W: AsyncWrite + ?Sized,
    {
        loop {
            if self.pos == self.cap && !self.eof {
                let mut rb = ReadBuf::new(&mut self.buf);
                match r.as_mut().poll_read(cx, &mut rb) {
                    Poll::Pending => {
                        // A TLS writer may hold encrypted bytes it could not send yet.
                        if self.need_flush {
                            ready!(w.as_mut().poll_flush(cx)).map_err(PumpError::Write)?;
                            self.need_flush = false;
                        }
                        return Poll::Pending;
                    }
                    // A client that closes TCP without close_notify: treat as end of stream,
                    // as every terminator does; the backend sees a FIN.
                    Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        self.eof = true;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(PumpError::Read(e))),
                    Poll::Ready(Ok(())) => {
                        let n = rb.filled().len();
                        if n == 0 {
                            self.eof = true;
                        } else {
                            self.pos = 0;
                            self.cap = n;
                            *active = true;
                        }
                    }
                }
            }
            while self.pos < self.cap {
                let n = ready!(w.as_mut().poll_write(cx, &self.buf[self.pos..self.cap]))
                    .map_err(PumpError::Write)?;
                if n == 0 {
                    return Poll::Ready(Err(PumpError::Write(io::ErrorKind::WriteZero.into())));
                }
                self.pos += n;
                self.total += n as u64;
                self.need_flush = true;
            }
            if self.eof {
                ready!(w.as_mut().poll_shutdown(cx)).map_err(PumpError::Write)?;
                return Poll::Ready(Ok(()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn copies_both_ways_with_half_close() {
        let (mut client, mut proxy_c) = duplex(64 * 1024);
        let (mut proxy_b, mut backend) = duplex(64 * 1024);
        let relay =
            tokio::spawn(
                async move { relay(&mut proxy_c, &mut proxy_b, Duration::from_secs(5)).await },
            );
        let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let d2 = data.clone();
        let writer = tokio::spawn(async move {
            client.write_all(&d2).await.unwrap();
            client.shutdown().await.unwrap();
            let mut back = Vec::new();
            client.read_to_end(&mut back).await.unwrap();
            back
        });
        let mut got = Vec::new();
        backend.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, data);
        backend.write_all(b"after half-close").await.unwrap();
        backend.shutdown().await.unwrap();
        assert_eq!(writer.await.unwrap(), b"after half-close");
        let out = relay.await.unwrap();
        assert!(matches!(out.end, RelayEnd::Closed));
        assert_eq!(out.client_to_backend, data.len() as u64);
        assert_eq!(out.backend_to_client, 16);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_timeout_fires_only_without_traffic() {
        let (mut client, mut proxy_c) = duplex(1024);
        let (mut proxy_b, _backend) = duplex(1024);
        let relay = tokio::spawn(async move {
            relay(&mut proxy_c, &mut proxy_b, Duration::from_secs(10)).await
        });
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_secs(6)).await;
            client.write_all(b"x").await.unwrap();
        }
        let start = Instant::now();
        let out = relay.await.unwrap();
        assert!(matches!(out.end, RelayEnd::IdleTimeout));
        assert!(start.elapsed() >= Duration::from_secs(9));
        assert_eq!(out.client_to_backend, 5);
    }
}
