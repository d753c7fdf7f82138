//! The client's side of TLS, on rustls's unbuffered API: the connection holds record
//! buffers only while bytes are in flight, so an idle connection holds no TLS buffer at all.
//! (rustls's buffered connection keeps a 4 KB receive buffer for its whole life: 40 % of
//! what an idle connection cost.)
//!
//! Reads wait for the socket to be readable before taking a receive buffer; writes encrypt
//! straight into a send buffer. Both are lent by the worker (`edge::buffers`) and given
//! back once empty.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncryptError, InsufficientSizeError, UnbufferedStatus,
};
use rustls::{AlertDescription, CommonState, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::client_io::ClientIo;
use super::record_guard::{RecordGuard, Refused};
use crate::edge::buffers::{self, TLS_IN, TLS_OUT};

mod hello;
mod plaintext;

use hello::{invalid_message_alert, no_usable_certificate};

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
    /// Checks the client's plaintext records while the handshake runs.
    guard: RecordGuard,
    /// Something was sent to the client (a plaintext alert is then no longer right).
    spoke: bool,
    /// `out` holds session tickets kept for the first write (reads do not send them).
    held: bool,
    /// rustls took all it could from `incoming[..filled]` and asked for more: until bytes
    /// come, a read goes straight to the socket. (h2 tries a read at each of its polls,
    /// several a stream: asking rustls again each time cost 2 % of the gateway's work.)
    starved: bool,
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
            guard: RecordGuard::default(),
            spoke: false,
            held: false,
            starved: false,
        })
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

    /// Drives the record layer until `want` is met or it needs the client's bytes.
    fn pump(&mut self, mut want: Want<'_, '_>) -> io::Result<Pumped> {
        if self.failed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "TLS connection failed earlier",
            ));
        }
        self.starved = false;
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
                Step::Fail(e) if no_usable_certificate(&e) => {
                    // Before any ServerHello: the alert goes out in clear (refused by the
                    // caller), not rustls's access_denied.
                    self.failed = true;
                    return Err(Refused {
                        alert: AlertDescription::HandshakeFailure,
                        why: "no signature algorithm the client offers fits the certificate",
                    }
                    .into_io());
                }
                Step::Fail(e) => {
                    self.queue_alert();
                    if self.end == self.sent && !self.spoke {
                        // rustls queues no alert for a message its deframer refuses (one
                        // over 64 KB, say): before anything was sent, it goes out in clear.
                        if let Some(alert) = invalid_message_alert(&e) {
                            self.queue_alert_in_clear(alert);
                        }
                    }
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
                return Poll::Ready(Err(if self.conn.is_handshaking() {
                    Refused {
                        alert: AlertDescription::DecodeError,
                        why: "a handshake message larger than 64 KB",
                    }
                    .into_io()
                } else {
                    io::Error::new(io::ErrorKind::InvalidData, "TLS message larger than 64 KB")
                }));
            }
            self.incoming.resize(len, 0);
        }
        let mut rb = ReadBuf::new(&mut self.incoming[self.filled..]);
        match Pin::new(&mut self.io).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                if self.conn.is_handshaking() {
                    let fresh = &self.incoming[self.filled..self.filled + n];
                    if let Err(r) = self.guard.scan(fresh) {
                        return Poll::Ready(Err(r.into_io()));
                    }
                }
                self.filled += n;
                self.starved &= n == 0;
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
            self.spoke = true;
        }
        if !self.out.is_empty() {
            TLS_OUT.give_back(std::mem::take(&mut self.out));
            (self.sent, self.end) = (0, 0);
        }
        self.held = false;
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
