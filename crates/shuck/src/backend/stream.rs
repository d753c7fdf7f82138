//! A connection to a backend server: TCP, or a UNIX-domain socket (hitch 1.7's
//! `backend = "/path"`, the usual way beside Varnish). The data path sees one reader and
//! writer either way.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// An open backend connection.
#[derive(Debug)]
pub enum BackendStream {
    /// Over TCP (`[HOST]:PORT`).
    Tcp(TcpStream),
    /// Over a UNIX-domain stream socket (`/path`).
    Unix(UnixStream),
}

impl AsyncRead for BackendStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            BackendStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            BackendStream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for BackendStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            BackendStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            BackendStream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            BackendStream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            BackendStream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            BackendStream::Tcp(s) => s.is_write_vectored(),
            BackendStream::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            BackendStream::Tcp(s) => Pin::new(s).poll_flush(cx),
            BackendStream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            BackendStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            BackendStream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

impl BackendStream {
    /// Ready once the socket may be read (or has closed); registers `cx` until then.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            BackendStream::Tcp(s) => s.poll_read_ready(cx),
            BackendStream::Unix(s) => s.poll_read_ready(cx),
        }
    }

    /// Whether tokio has seen the socket readable (or closed) since a read last found it
    /// empty: an atomic load, no system call and no registration.
    pub fn seen_readable(&self) -> bool {
        let probe = || Ok(());
        match self {
            BackendStream::Tcp(s) => s.try_io(tokio::io::Interest::READABLE, probe).is_ok(),
            BackendStream::Unix(s) => s.try_io(tokio::io::Interest::READABLE, probe).is_ok(),
        }
    }

    /// Reads what is there without waiting (`WouldBlock` when nothing is).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            BackendStream::Tcp(s) => s.try_read(buf),
            BackendStream::Unix(s) => s.try_read(buf),
        }
    }

    /// Its reading and writing halves, to use at once (no lock, no allocation: both
    /// borrow the one socket).
    pub fn split(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
        match self {
            BackendStream::Tcp(s) => {
                let (r, w) = s.split();
                (ReadHalf::Tcp(r), WriteHalf::Tcp(w))
            }
            BackendStream::Unix(s) => {
                let (r, w) = s.split();
                (ReadHalf::Unix(r), WriteHalf::Unix(w))
            }
        }
    }
}

/// The reading half of a [`BackendStream`].
#[derive(Debug)]
pub enum ReadHalf<'a> {
    /// Of a TCP connection.
    Tcp(tokio::net::tcp::ReadHalf<'a>),
    /// Of a UNIX socket.
    Unix(tokio::net::unix::ReadHalf<'a>),
}

/// The writing half of a [`BackendStream`].
#[derive(Debug)]
pub enum WriteHalf<'a> {
    /// Of a TCP connection.
    Tcp(tokio::net::tcp::WriteHalf<'a>),
    /// Of a UNIX socket.
    Unix(tokio::net::unix::WriteHalf<'a>),
}

impl AsyncRead for ReadHalf<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            ReadHalf::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            WriteHalf::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(s) => Pin::new(s).poll_flush(cx),
            WriteHalf::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            WriteHalf::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
