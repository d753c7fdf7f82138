//! The client's side of TLS, on rustls's unbuffered API: the connection holds record
//! buffers only while bytes are in flight, so an idle connection holds no TLS buffer at all.
//! (rustls's buffered connection keeps a 4 KB receive buffer for its whole life: 40 % of
//! what an idle connection cost.)
//!
//! Reads wait for the socket to be readable before taking a receive buffer; writes encrypt
//! straight into a send buffer. Both are lent by the worker (`proxy::buffers`) and given
//! back once empty.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use rustls::server::{Acceptor, UnbufferedServerConnection};
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncryptError, InsufficientSizeError, UnbufferedStatus,
};
use rustls::{AlertDescription, CommonState, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::buffers::{self, TLS_IN, TLS_OUT};
use super::client_io::ClientIo;

/// First receive buffer: one read's worth, as rustls's own reads.
const READ_SIZE: usize = 4096;
/// Largest receive buffer: a handshake message of 64 KB (rustls's own limit) joined from
/// its records, and one more record.
const MAX_INCOMING: usize = buffers::MAX_SPARE;
/// Most plaintext one write takes: four full records.
const MAX_WRITE: usize = 4 * 16 * 1024;

/// A server-side TLS connection over the client's socket.
pub struct TlsStream {
    io: ClientIo,
    conn: UnbufferedServerConnection,
    /// Received TLS bytes are `incoming[..filled]`; the rest is room for the next read.
    incoming: Vec<u8>,
    filled: usize,
    /// TLS bytes to send are `out[sent..end]`.
    out: Vec<u8>,
    sent: usize,
    end: usize,
    /// Decrypted bytes not read yet, `plain[pos..]`: a record larger than the reader's
    /// buffer, or records met while writing.
    plain: Vec<u8>,
    pos: usize,
    /// The client sent close_notify or closed TCP: reads return end of stream.
    read_done: bool,
    /// close_notify has been queued.
    close_sent: bool,
    /// rustls reported an error: the connection is not processed any more.
    failed: bool,
    /// The server name the client asked for, when it was looked for.
    sni: Option<Box<str>>,
    /// The ClientHello offered ALPN `acme-tls/1` alone (an ACME CA's tls-alpn-01 check).
    acme_alpn: bool,
}

/// What the caller of [`TlsStream::pump`] is after.
enum Want<'a, 'b> {
    /// The end of the handshake.
    Handshake,
    /// Plaintext, into this buffer.
    Read(&'a mut ReadBuf<'b>),
    /// To encrypt these bytes.
    Write(&'a [u8]),
    /// To queue close_notify.
    Close,
}

/// Where [`TlsStream::pump`] stopped.
enum Pumped {
    /// Got what was wanted; for a write, the plaintext bytes taken.
    Done(usize),
    /// More bytes from the client are needed first.
    NeedData,
    /// The client has closed its side: no more plaintext.
    Eof,
}

/// One turn of the record layer, decided while its borrows are alive.
enum Step {
    Continue,
    Return(Pumped),
    /// Writable: done unless the handshake still waits for the client.
    Writable,
    Fail(io::Error),
}

impl TlsStream {
    /// A server connection over `io` with `config`, before any byte is read. The caller
    /// drives the handshake ([`Self::complete_handshake`]), after looking at the server
    /// name if it wishes ([`Self::peek_server_name`]).
    pub fn new(io: ClientIo, config: Arc<ServerConfig>) -> io::Result<Self> {
        let conn = UnbufferedServerConnection::new(config).map_err(tls_error)?;
        Ok(TlsStream {
            io,
            conn,
            incoming: Vec::new(),
            filled: 0,
            out: Vec::new(),
            sent: 0,
            end: 0,
            plain: Vec::new(),
            pos: 0,
            read_done: false,
            close_sent: false,
            failed: false,
            sni: None,
            acme_alpn: false,
        })
    }

    /// Reads the ClientHello far enough to know the server name the client asks for, and
    /// keeps it (see [`Self::sni`]); the bytes stay for the handshake proper.
    pub async fn peek_server_name(&mut self) -> io::Result<Option<&str>> {
        self.sni = self.read_server_name().await?;
        Ok(self.sni.as_deref())
    }

    /// Whether the ClientHello read by [`Self::peek_server_name`] offered ALPN
    /// `acme-tls/1` alone: an ACME CA checking a tls-alpn-01 answer.
    pub fn offers_acme_alpn(&self) -> bool {
        self.acme_alpn
    }

    /// Serves the handshake with `config` instead of the one given to [`Self::new`]: the
    /// certificate the client asked for has a client verification of its own. Only before
    /// the handshake proper (the bytes [`Self::peek_server_name`] read stay for it).
    pub fn reconfigure(&mut self, config: Arc<ServerConfig>) -> io::Result<()> {
        self.conn = UnbufferedServerConnection::new(config).map_err(tls_error)?;
        Ok(())
    }

    /// Refuses the connection before the handshake with a fatal `alert`, in clear (nothing
    /// has been negotiated), and closes it. Best effort: the client may already be gone.
    pub async fn refuse(&mut self, alert: AlertDescription) {
        self.out = vec![21, 3, 3, 0, 2, 2, u8::from(alert)];
        (self.sent, self.end) = (0, self.out.len());
        self.failed = true;
        let _ = poll_fn(|cx| self.poll_send(cx)).await;
        let _ = poll_fn(|cx| Pin::new(&mut self.io).poll_shutdown(cx)).await;
    }

    /// Runs the server side of the handshake to its end, and sends the session tickets
    /// issued as it ends.
    pub async fn complete_handshake(&mut self) -> io::Result<()> {
        loop {
            match self.pump(Want::Handshake) {
                Ok(Pumped::Done(_)) => break,
                Ok(Pumped::NeedData) => {
                    poll_fn(|cx| self.poll_send(cx)).await?;
                    if poll_fn(|cx| self.read_more(cx)).await? == 0 {
                        return Err(closed_early());
                    }
                }
                Ok(Pumped::Eof) => return Err(closed_early()),
                Err(e) => {
                    // The alert rustls queued goes out before the connection is dropped.
                    let _ = poll_fn(|cx| self.poll_send(cx)).await;
                    return Err(e);
                }
            }
        }
        poll_fn(|cx| self.poll_send(cx)).await
    }

    /// The negotiated connection: version, cipher, ALPN, client certificate, resumption.
    pub fn conn(&self) -> &CommonState {
        &self.conn
    }

    /// The server name the client asked for, when it was looked for (see
    /// [`TlsStream::peek_server_name`]).
    pub fn sni(&self) -> Option<&str> {
        self.sni.as_deref()
    }

    /// Heap bytes the connection's own buffers hold now (receive, send, unread
    /// plaintext): none while it idles.
    pub fn buffered(&self) -> usize {
        self.incoming.capacity() + self.out.capacity() + self.plain.capacity()
    }

    /// The TLS bytes received and not yet consumed: before the handshake, the ClientHello
    /// that [`Self::peek_server_name`] read.
    pub fn received(&self) -> &[u8] {
        &self.incoming[..self.filled]
    }

    /// Reads the ClientHello's server name through rustls's own parser, leaving the bytes
    /// in place for the handshake proper. A ClientHello that does not parse gives `None`:
    /// the handshake then meets the same error and answers it with its alert.
    async fn read_server_name(&mut self) -> Result<Option<Box<str>>, io::Error> {
        let mut acceptor = Acceptor::default();
        let mut fed = 0;
        loop {
            while fed < self.filled {
                match acceptor.read_tls(&mut &self.incoming[fed..self.filled]) {
                    Ok(0) | Err(_) => return Ok(None),
                    Ok(n) => fed += n,
                }
            }
            match acceptor.accept() {
                Ok(Some(hello)) => {
                    let hello = hello.client_hello();
                    self.acme_alpn = hello.alpn().is_some_and(|mut offered| {
                        offered.next() == Some(crate::acme::answers::ACME_TLS_ALPN)
                            && offered.next().is_none()
                    });
                    return Ok(hello.server_name().map(Box::from));
                }
                Ok(None) => {}
                Err(_) => return Ok(None),
            }
            if poll_fn(|cx| self.read_more(cx)).await? == 0 {
                return Err(closed_early());
            }
        }
    }

    /// Drives the record layer until `want` is met or it needs the client's bytes.
    fn pump(&mut self, mut want: Want<'_, '_>) -> io::Result<Pumped> {
        if self.failed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "TLS connection failed earlier",
            ));
        }
        loop {
            let UnbufferedStatus { mut discard, state } = self
                .conn
                .process_tls_records(&mut self.incoming[..self.filled]);
            let step = match state {
                Err(e) => Step::Fail(tls_error(e)),
                Ok(ConnectionState::ReadTraffic(mut traffic)) => {
                    let mut step = Step::Continue;
                    while let Some(record) = traffic.next_record() {
                        let record = match record {
                            Ok(r) => r,
                            Err(e) => {
                                step = Step::Fail(tls_error(e));
                                break;
                            }
                        };
                        discard += record.discard;
                        let payload = record.payload;
                        match &mut want {
                            // Straight into the reader's buffer while nothing waits before.
                            Want::Read(rb) if self.plain.len() == self.pos => {
                                let n = payload.len().min(rb.remaining());
                                rb.put_slice(&payload[..n]);
                                self.plain.extend_from_slice(&payload[n..]);
                            }
                            _ => self.plain.extend_from_slice(payload),
                        }
                    }
                    if let (Step::Continue, Want::Read(rb)) = (&step, &want) {
                        if !rb.filled().is_empty() || self.plain.len() > self.pos {
                            step = Step::Return(Pumped::Done(0));
                        }
                    }
                    step
                }
                Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                    match append(&mut self.out, &mut self.end, 256, |buf| {
                        encode.encode(buf).map_err(encode_room)
                    }) {
                        Ok(_) => Step::Continue,
                        Err(e) => Step::Fail(e),
                    }
                }
                // What was encoded is in `out`, sent in order before anything later.
                Ok(ConnectionState::TransmitTlsData(transmit)) => {
                    transmit.done();
                    Step::Continue
                }
                Ok(ConnectionState::WriteTraffic(mut traffic)) => match &want {
                    Want::Handshake => Step::Writable,
                    Want::Read(_) => Step::Return(Pumped::NeedData),
                    Want::Write(data) => {
                        let guess = data.len() + (data.len() / (16 * 1024) + 1) * 64;
                        match append(&mut self.out, &mut self.end, guess, |buf| {
                            traffic.encrypt(data, buf).map_err(encrypt_room)
                        }) {
                            Ok(_) => Step::Return(Pumped::Done(data.len())),
                            Err(e) => Step::Fail(e),
                        }
                    }
                    Want::Close => match append(&mut self.out, &mut self.end, 64, |buf| {
                        traffic.queue_close_notify(buf).map_err(encrypt_room)
                    }) {
                        Ok(_) => Step::Return(Pumped::Done(0)),
                        Err(e) => Step::Fail(e),
                    },
                },
                Ok(ConnectionState::BlockedHandshake) => match want {
                    Want::Handshake | Want::Read(_) => Step::Return(Pumped::NeedData),
                    Want::Close => Step::Return(Pumped::Done(0)),
                    Want::Write(_) => Step::Fail(io::Error::new(
                        io::ErrorKind::NotConnected,
                        "TLS handshake not complete",
                    )),
                },
                Ok(ConnectionState::PeerClosed) => {
                    self.read_done = true;
                    match want {
                        Want::Read(_) => Step::Return(Pumped::Eof),
                        _ => Step::Continue,
                    }
                }
                Ok(ConnectionState::Closed) => {
                    self.read_done = true;
                    match want {
                        Want::Read(_) | Want::Handshake => Step::Return(Pumped::Eof),
                        Want::Close => Step::Return(Pumped::Done(0)),
                        Want::Write(_) => Step::Fail(io::Error::new(
                            io::ErrorKind::BrokenPipe,
                            "TLS connection closed",
                        )),
                    }
                }
                // Early data is not enabled; should a client send it anyway, it is
                // plaintext like any other.
                Ok(ConnectionState::ReadEarlyData(mut early)) => {
                    let mut step = Step::Continue;
                    while let Some(record) = early.next_record() {
                        match record {
                            Ok(r) => {
                                discard += r.discard;
                                self.plain.extend_from_slice(r.payload);
                            }
                            Err(e) => {
                                step = Step::Fail(tls_error(e));
                                break;
                            }
                        }
                    }
                    step
                }
                Ok(_) => Step::Fail(io::Error::other("unexpected TLS connection state")),
            };
            self.discard(discard);
            match step {
                Step::Continue => {}
                Step::Return(p) => return Ok(p),
                Step::Writable if self.conn.is_handshaking() => return Ok(Pumped::NeedData),
                Step::Writable => return Ok(Pumped::Done(0)),
                Step::Fail(e) => {
                    self.queue_alert();
                    return Err(e);
                }
            }
        }
    }

    /// After an error: what rustls still has to send (its fatal alert), into `out`. Only
    /// while it has something: asking again would make it process the bad bytes again.
    fn queue_alert(&mut self) {
        self.failed = true;
        for _ in 0..8 {
            if !self.conn.wants_write() {
                return;
            }
            let UnbufferedStatus { discard, state } = self
                .conn
                .process_tls_records(&mut self.incoming[..self.filled]);
            let encoded = match state {
                Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                    append(&mut self.out, &mut self.end, 64, |buf| {
                        encode.encode(buf).map_err(encode_room)
                    })
                    .is_ok()
                }
                _ => false,
            };
            self.discard(discard);
            if !encoded {
                return;
            }
        }
    }

    /// Drops `n` processed bytes from the front of the receive buffer, and the buffer
    /// itself once empty.
    fn discard(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.incoming.copy_within(n..self.filled, 0);
        self.filled -= n;
        if self.filled == 0 {
            TLS_IN.give_back(std::mem::take(&mut self.incoming));
        }
    }

    /// Reads more of the client's bytes; `Ok(0)` at end of stream. A receive buffer is only
    /// allocated once the socket is readable, so waiting costs no memory.
    fn read_more(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.filled == 0 {
            ready!(self.io.poll_read_ready(cx))?;
        }
        if self.incoming.is_empty() {
            self.incoming = TLS_IN.take();
        }
        if self.filled == self.incoming.len() {
            let len = match self.incoming.len() {
                0 => READ_SIZE,
                n => (n * 2).min(MAX_INCOMING),
            };
            if len == self.incoming.len() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "TLS message larger than 64 KB",
                )));
            }
            self.incoming.resize(len, 0);
        }
        let mut rb = ReadBuf::new(&mut self.incoming[self.filled..]);
        match Pin::new(&mut self.io).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                self.filled += n;
                Poll::Ready(Ok(n))
            }
            other => {
                // Readiness that was not: give the buffer back while waiting.
                if self.filled == 0 {
                    TLS_IN.give_back(std::mem::take(&mut self.incoming));
                }
                other.map_ok(|()| 0)
            }
        }
    }

    /// Sends what `out` holds; frees it once sent.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.end {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.out[self.sent..self.end]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        if !self.out.is_empty() {
            TLS_OUT.give_back(std::mem::take(&mut self.out));
            (self.sent, self.end) = (0, 0);
        }
        Poll::Ready(Ok(()))
    }
}

/// Appends what `f` writes to `out[*end..]`, growing `out` to the size `f` asks for
/// (`Err(Some(size))`); `Err(None)` is a failure. `first` is the room tried first.
fn append(
    out: &mut Vec<u8>,
    end: &mut usize,
    first: usize,
    mut f: impl FnMut(&mut [u8]) -> Result<usize, Option<usize>>,
) -> io::Result<()> {
    if out.is_empty() {
        *out = TLS_OUT.take();
    }
    let mut room = first;
    for _ in 0..3 {
        if out.len() < *end + room {
            out.resize(*end + room, 0);
        }
        match f(&mut out[*end..]) {
            Ok(n) => {
                *end += n;
                return Ok(());
            }
            Err(Some(required)) => room = required,
            Err(None) => break,
        }
    }
    Err(io::Error::other("TLS record could not be encoded"))
}

/// The room an encoding asks for, for [`append`].
fn encode_room(e: EncodeError) -> Option<usize> {
    match e {
        EncodeError::InsufficientSize(InsufficientSizeError { required_size }) => {
            Some(required_size)
        }
        _ => None,
    }
}

/// The room an encryption asks for, for [`append`].
fn encrypt_room(e: EncryptError) -> Option<usize> {
    match e {
        EncryptError::InsufficientSize(InsufficientSizeError { required_size }) => {
            Some(required_size)
        }
        _ => None,
    }
}

/// A rustls error as tokio-rustls reports it, so that callers find it with `downcast`.
fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

fn closed_early() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "client closed the connection during the handshake",
    )
}

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
            match this.pump(Want::Read(buf)) {
                Err(e) => break Poll::Ready(Err(e)),
                Ok(Pumped::Done(_)) | Ok(Pumped::Eof) => break Poll::Ready(Ok(())),
                Ok(Pumped::NeedData) => match this.read_more(cx) {
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
        // Alerts, tickets and key updates that reading queued go out as the socket allows.
        let sent = if this.sent < this.end {
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
        // One send buffer at most: a slow client holds back the backend.
        ready!(this.poll_send(cx))?;
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
        if !this.close_sent {
            this.close_sent = true;
            // A connection that failed has nothing to close cleanly: the FIN still goes.
            let _ = this.pump(Want::Close);
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}
