//! The connect stage's result: a backend connection in clear, or in TLS when the backend's
//! block says `tls = on` (tokio-rustls over the same socket, after the PROXY header as
//! HAProxy sends it). The relay and the HTTP/2 gateway read and write it alike.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::backend::balance::Key;
use crate::backend::{self, BackendStream, ConnectError, Lease, Picker, Server};

use super::route::{Backend, BackendTls};

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Upstream::Plain(s) => s.fmt(f),
            Upstream::Tls(_) => f.write_str("Upstream::Tls"),
        }
    }
}

/// An open backend connection.
pub enum Upstream {
    /// In clear.
    Plain(BackendStream),
    /// In TLS. In a `RefCell` so that its two halves can be used at once from one task
    /// ([`Upstream::split`]): each borrow lasts one poll, and one task's polls never
    /// overlap, so a borrow never meets another.
    Tls(Box<RefCell<TlsStream<BackendStream>>>),
}

impl Upstream {
    /// True when in clear (the preamble and the first bytes can then go in one write).
    pub fn is_plain(&self) -> bool {
        matches!(self, Upstream::Plain(_))
    }

    /// The socket under it.
    fn socket(&self) -> Option<&BackendStream> {
        match self {
            Upstream::Plain(s) => Some(s),
            Upstream::Tls(_) => None,
        }
    }

    /// Whether the socket was seen readable since a read last found it empty (an atomic
    /// load). A TLS connection is always looked at ([`Upstream::poll_idle`]).
    pub fn seen_readable(&self) -> bool {
        self.socket().is_none_or(BackendStream::seen_readable)
    }

    /// What an idle connection says when asked without waiting: `Ready(true)` closed,
    /// `Ready(false)` bytes nobody asked for, `Pending` quiet (`cx` registered). Over TLS
    /// the records are read: a session ticket is taken in quietly, data is stray.
    pub fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut probe = [0u8; 64];
        match self {
            Upstream::Plain(tcp) => loop {
                match tcp.poll_read_ready(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(_)) => return Poll::Ready(true),
                    Poll::Ready(Ok(())) => match tcp.try_read(&mut probe) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {} // cleared: ask again
                        Ok(0) | Err(_) => return Poll::Ready(true),
                        Ok(_) => return Poll::Ready(false),
                    },
                }
            },
            Upstream::Tls(t) => {
                let mut rb = ReadBuf::new(&mut probe);
                match Pin::new(t.get_mut()).poll_read(cx, &mut rb) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Ok(())) => Poll::Ready(rb.filled().is_empty()),
                    Poll::Ready(Err(_)) => Poll::Ready(true),
                }
            }
        }
    }

    /// Its reading and writing halves, to use at once (no lock, no allocation).
    pub fn split(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
        match self {
            Upstream::Plain(s) => {
                let (r, w) = s.split();
                (ReadHalf::Plain(r), WriteHalf::Plain(w))
            }
            Upstream::Tls(t) => (ReadHalf::Tls(t), WriteHalf::Tls(t)),
        }
    }
}

/// Connects to one of `backend`'s servers (chosen by its method for `key`): in clear (the caller writes `preamble` with
/// its first bytes), or, with TLS, `preamble` written first and the handshake made within
/// the connect timeout. A server whose handshake fails (a certificate that does not
/// verify, expired, for another name) is marked down with the reason and counted, and the
/// next server is tried, as for a refused connection.
pub async fn open(
    backend: &Backend,
    picker: &Picker,
    preamble: Option<&[u8]>,
    key: &Key,
) -> Result<(Upstream, Lease), ConnectError> {
    let Some(tls) = &backend.tls else {
        let (s, lease) = backend.pool.connect(picker, key).await?;
        return Ok((Upstream::Plain(s), lease));
    };
    let limits = backend.pool.limits();
    let mut last = None;
    for _ in 0..backend.pool.servers().len().min(limits.retries + 1) {
        let (s, lease) = backend.pool.connect(picker, key).await?;
        let config = tls.h1.as_ref().unwrap_or(&tls.config);
        match secure(backend, tls, config, lease.server(), s, preamble).await {
            Ok(t) => return Ok((t, lease)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| backend::ConnectError::Handshake {
        to: backend.name.to_string(),
        reason: "no server".into(),
    }))
}

/// Connects to `server` of `backend` (its slot already taken), in TLS when the backend
/// says so, without a preamble (a connection its clients share); the protocol ALPN
/// agreed on comes with it. A failure marks the server down.
pub async fn dial(
    backend: &Backend,
    server: &Server,
    picker: &Picker,
) -> Result<(Upstream, Option<Vec<u8>>), ConnectError> {
    let s = backend.pool.dial(server, picker).await?;
    match &backend.tls {
        None => Ok((Upstream::Plain(s), None)),
        Some(tls) => {
            let t = secure(backend, tls, &tls.config, server, s, None).await?;
            let alpn = match &t {
                Upstream::Tls(t) => t.borrow().get_ref().1.alpn_protocol().map(<[u8]>::to_vec),
                Upstream::Plain(_) => None,
            };
            Ok((t, alpn))
        }
    }
}

/// TLS over `s` to `server`, after `preamble`, within the connect timeout. A failure marks
/// the server down, counted and logged with its reason.
async fn secure(
    backend: &Backend,
    tls: &BackendTls,
    config: &std::sync::Arc<rustls::ClientConfig>,
    server: &Server,
    mut s: BackendStream,
    preamble: Option<&[u8]>,
) -> Result<Upstream, ConnectError> {
    let limits = backend.pool.limits();
    let to = || server.name().to_owned();
    if let Some(p) = preamble {
        s.write_all(p)
            .await
            .map_err(|source| ConnectError::io(to(), source))?;
    }
    let name = tls
        .names
        .iter()
        .find(|(n, _)| **n == *server.name())
        .map(|(_, name)| name.clone());
    let Some(name) = name else {
        return Err(ConnectError::Handshake {
            to: to(),
            reason: "no server name to verify".into(),
        });
    };
    let handshake = TlsConnector::from(config.clone()).connect(name, s);
    let reason = match tokio::time::timeout(limits.connect_timeout, handshake).await {
        Ok(Ok(t)) => return Ok(Upstream::Tls(Box::new(RefCell::new(t)))),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no TLS handshake within {:?}", limits.connect_timeout),
    };
    server.stats.handshake_failures.fetch_add(1, Relaxed);
    server.mark_down(limits.retry_after);
    tracing::warn!(
        name: "backend_tls_failed",
        backend = %backend.name,
        server = %server.name(),
        error = %reason,
        retry_after = ?limits.retry_after,
        "TLS to the backend failed: {reason}; marked down for {:?}",
        limits.retry_after,
    );
    Err(ConnectError::Handshake { to: to(), reason })
}

impl AsyncRead for Upstream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Upstream::Tls(t) => Pin::new(t.get_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Upstream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Upstream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Upstream::Tls(t) => Pin::new(t.get_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Upstream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Upstream::Tls(t) => Pin::new(t.get_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Upstream::Plain(s) => s.is_write_vectored(),
            Upstream::Tls(_) => true,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Plain(s) => Pin::new(s).poll_flush(cx),
            Upstream::Tls(t) => Pin::new(t.get_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Upstream::Tls(t) => Pin::new(t.get_mut()).poll_shutdown(cx),
        }
    }
}

impl Closing for Upstream {
    fn poll_close_last(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Plain(s) => Pin::new(s).poll_close_last(cx),
            // close_notify, as TLS asks of the side that ends.
            Upstream::Tls(t) => Pin::new(t.get_mut()).poll_shutdown(cx),
        }
    }
}

/// The reading half of an [`Upstream`].
#[derive(Debug)]
pub enum ReadHalf<'a> {
    /// In clear.
    Plain(backend::ReadHalf<'a>),
    /// In TLS.
    Tls(&'a RefCell<TlsStream<BackendStream>>),
}

/// The writing half of an [`Upstream`].
#[derive(Debug)]
pub enum WriteHalf<'a> {
    /// In clear.
    Plain(backend::WriteHalf<'a>),
    /// In TLS.
    Tls(&'a RefCell<TlsStream<BackendStream>>),
}

impl AsyncRead for ReadHalf<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Plain(r) => Pin::new(r).poll_read(cx, buf),
            ReadHalf::Tls(t) => Pin::new(&mut *t.borrow_mut()).poll_read(cx, buf),
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
            WriteHalf::Plain(w) => Pin::new(w).poll_write(cx, buf),
            WriteHalf::Tls(t) => Pin::new(&mut *t.borrow_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Plain(w) => Pin::new(w).poll_flush(cx),
            WriteHalf::Tls(t) => Pin::new(&mut *t.borrow_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Plain(w) => Pin::new(w).poll_shutdown(cx),
            WriteHalf::Tls(t) => Pin::new(&mut *t.borrow_mut()).poll_shutdown(cx),
        }
    }
}

/// A side the relay writes to. When a direction ends after the other one, both sockets
/// are closed next, and the close sends the FIN: that side is then ended without a
/// `shutdown` system call ([`Closing::poll_close_last`]).
pub trait Closing: AsyncWrite + Unpin {
    /// Ends what this side is sent, as the relay's last act before the socket is closed:
    /// what its protocol needs (TLS: close_notify), not the half-close.
    fn poll_close_last(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_shutdown(cx)
    }
}

impl Closing for crate::backend::BackendStream {
    fn poll_close_last(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}
