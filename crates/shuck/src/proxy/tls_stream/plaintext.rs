//! A [`TlsStream`] as tokio's reader and writer of plaintext.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Pumped, TlsStream, Want, MAX_WRITE};
use crate::edge::upstream::Closing;

impl AsyncRead for TlsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pos < this.plain.len() {
            let n = buf.remaining().min(this.plain.len() - this.pos);
            buf.put_slice(&this.plain[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == this.plain.len() {
                this.plain = Vec::new();
                this.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        if this.read_done || buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let result = loop {
            let pumped = if this.starved {
                Pumped::NeedData
            } else {
                match this.pump(Want::Read(buf)) {
                    Ok(Pumped::NeedData) => {
                        this.starved = true;
                        Pumped::NeedData
                    }
                    Ok(p) => p,
                    Err(e) => break Poll::Ready(Err(e)),
                }
            };
            match pumped {
                Pumped::Done(_) | Pumped::Eof => break Poll::Ready(Ok(())),
                Pumped::NeedData => match this.read_more(cx) {
                    Poll::Pending => break Poll::Pending,
                    Poll::Ready(Ok(0)) => {
                        this.read_done = true;
                        // TCP closed without close_notify: end of stream, reported as
                        // tokio-rustls reports it.
                        break Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "peer closed connection without sending TLS close_notify",
                        )));
                    }
                    Poll::Ready(Ok(_)) => {}
                    Poll::Ready(Err(e)) => break Poll::Ready(Err(e)),
                },
            }
        };
        if this.plain.len() > this.pos {
            // More plaintext than the buffer took: served by the next read.
            cx.waker().wake_by_ref();
        }
        // Alerts, tickets and key updates that reading queued go out as the socket allows;
        // tickets held for the first answer wait for it.
        let sent = if this.sent < this.end && !this.held {
            this.poll_send(cx)
        } else {
            Poll::Ready(Ok(()))
        };
        match (result, sent) {
            (Poll::Pending, Poll::Ready(Err(e))) => Poll::Ready(Err(e)),
            (r, _) => r,
        }
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        // One send buffer at most: a slow client holds back the backend. Held tickets are
        // not waited for: they go in this write's send.
        if this.held {
            this.held = false;
        } else {
            ready!(this.poll_send(cx))?;
        }
        let had_plain = this.plain.len() > this.pos;
        let take = &data[..data.len().min(MAX_WRITE)];
        let n = match this.pump(Want::Write(take)) {
            Ok(Pumped::Done(n)) => n,
            Ok(_) => {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "TLS connection cannot send",
                )))
            }
            Err(e) => {
                let _ = this.poll_send(cx);
                return Poll::Ready(Err(e));
            }
        };
        if !had_plain && this.plain.len() > this.pos {
            // Records arrived while writing: wake the task so that a read takes them.
            cx.waker().wake_by_ref();
        }
        // Sent now if the socket takes it; otherwise by the next write or flush.
        if let Poll::Ready(Err(e)) = this.poll_send(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_close_notify(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

impl Closing for TlsStream {
    /// close_notify, without TCP's half-close: the socket's close sends the FIN.
    fn poll_close_last(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_close_notify(cx)
    }
}

impl TlsStream {
    /// Queues close_notify once and sends what is queued.
    fn poll_close_notify(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.close_sent {
            self.close_sent = true;
            // A connection that failed has nothing to close cleanly: the FIN still goes.
            let _ = self.pump(Want::Close);
        }
        self.poll_send(cx)
    }
}
