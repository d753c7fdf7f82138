//! The client's TCP stream, with room for bytes already read before TLS starts (what
//! followed a PROXY header received with `--proxy-proxy`). Without such bytes it is the
//! socket itself, at the cost of one branch per read.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A client connection: the socket and bytes to replay before it.
#[derive(Debug)]
pub struct ClientIo {
    tcp: TcpStream,
    /// Read ahead of TLS; served first. Empty (unallocated) in the common case.
    prefix: Vec<u8>,
    pos: usize,
}

impl ClientIo {
    /// The socket, nothing read ahead.
    pub fn new(tcp: TcpStream) -> Self {
        ClientIo {
            tcp,
            prefix: Vec::new(),
            pos: 0,
        }
    }

    /// The socket, with `prefix` to be read first.
    pub fn with_prefix(tcp: TcpStream, prefix: Vec<u8>) -> Self {
        ClientIo {
            tcp,
            prefix,
            pos: 0,
        }
    }

    /// Ready once a read would find bytes (or end of stream, or an error).
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.pos < self.prefix.len() {
            return Poll::Ready(Ok(()));
        }
        self.tcp.poll_read_ready(cx)
    }
}

impl AsyncRead for ClientIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.pos < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.pos);
            buf.put_slice(&this.prefix[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == this.prefix.len() {
                this.prefix = Vec::new();
                this.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}
