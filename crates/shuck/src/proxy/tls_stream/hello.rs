//! The handshake phase of a [`TlsStream`]: looking at the ClientHello, refusing a client
//! with an alert in clear, and running the handshake to its end.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use rustls::server::UnbufferedServerConnection;
use rustls::{AlertDescription, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{tls_error, Pumped, TlsStream, Want};
use crate::proxy::record_guard::Refused;
use crate::tls::hello::Peek;

impl TlsStream {
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
        self.queue_alert_in_clear(alert);
        self.failed = true;
        self.close_after_alert().await;
    }

    /// Puts a fatal `alert` in a plaintext record as all there is to send (before any
    /// ServerHello nothing else may go out, and nothing is encrypted yet).
    pub(super) fn queue_alert_in_clear(&mut self, alert: AlertDescription) {
        self.out = vec![21, 3, 3, 0, 2, 2, u8::from(alert)];
        (self.sent, self.end) = (0, self.out.len());
    }

    /// Sends the alert queued in `out`, closes the sending side, and reads what the
    /// client is still sending until it closes too, briefly and bounded: closing with its
    /// bytes unread would reset the connection, and a reset can destroy the alert before
    /// the client reads it.
    async fn close_after_alert(&mut self) {
        const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(1);
        const DRAIN_BYTES: usize = 256 * 1024;
        if poll_fn(|cx| self.poll_send(cx)).await.is_err() {
            return;
        }
        let _ = poll_fn(|cx| Pin::new(&mut self.io).poll_shutdown(cx)).await;
        let drain = async {
            let mut scratch = [0u8; 4096];
            let mut drained = 0;
            while drained < DRAIN_BYTES {
                let mut rb = ReadBuf::new(&mut scratch);
                match poll_fn(|cx| Pin::new(&mut self.io).poll_read(cx, &mut rb)).await {
                    Ok(()) if !rb.filled().is_empty() => drained += rb.filled().len(),
                    _ => break,
                }
            }
        };
        let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
    }

    /// After an I/O error during the handshake: a refusal of shuck's own gets its alert
    /// sent; the error is handed back either way.
    async fn refuse_if_ours(&mut self, e: io::Error) -> io::Error {
        if let Some(r) = Refused::of(&e) {
            self.refuse(r.alert).await;
        }
        e
    }

    /// Runs the server side of the handshake to its end. What it issues as it ends goes
    /// out at once, except TLS 1.3's session tickets when the client's first request came
    /// with its Finished: they then leave with the first answer, in its write and packet.
    pub async fn complete_handshake(&mut self) -> io::Result<()> {
        loop {
            match self.pump(Want::Handshake) {
                Ok(Pumped::Done(_)) => break,
                Ok(Pumped::NeedData) => {
                    poll_fn(|cx| self.poll_send(cx)).await?;
                    match poll_fn(|cx| self.read_more(cx)).await {
                        Ok(0) => return Err(closed_early()),
                        Ok(_) => {}
                        Err(e) => return Err(self.refuse_if_ours(e).await),
                    }
                }
                Ok(Pumped::Eof) => return Err(closed_early()),
                Err(e) if Refused::of(&e).is_some() => return Err(self.refuse_if_ours(e).await),
                Err(e) => {
                    // The alert rustls queued goes out before the connection is dropped.
                    self.close_after_alert().await;
                    return Err(e);
                }
            }
        }
        // In TLS 1.3 all that is left to send now is tickets (TLS 1.2's last flight is
        // handshake, and the client waits for it).
        let request_in_hand = self.filled > 0 || self.plain.len() > self.pos;
        if request_in_hand && self.conn.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3)
        {
            self.held = self.sent < self.end;
            return Ok(());
        }
        poll_fn(|cx| self.poll_send(cx)).await
    }

    /// Reads the ClientHello's server name through rustls's own parser, leaving the bytes
    /// in place for the handshake proper. A ClientHello that does not parse gives `None`:
    /// the handshake then meets the same error and answers it with its alert.
    async fn read_server_name(&mut self) -> Result<Option<Box<str>>, io::Error> {
        loop {
            match crate::tls::hello::peek(&self.incoming[..self.filled]) {
                Peek::Hello {
                    server_name,
                    acme_alpn,
                } => {
                    self.acme_alpn = acme_alpn;
                    return Ok(server_name);
                }
                // rustls answers what is not a ClientHello.
                Peek::NotAHello => return Ok(None),
                Peek::Incomplete => {}
            }
            match poll_fn(|cx| self.read_more(cx)).await {
                Ok(0) => return Err(closed_early()),
                Ok(_) => {}
                Err(e) => return Err(self.refuse_if_ours(e).await),
            }
        }
    }
}

/// The certificate resolver found nothing to serve: `tls::sni` declines a certificate whose
/// key cannot sign with any scheme the client offers (rustls would find out only after
/// its ServerHello).
pub(super) fn no_usable_certificate(e: &io::Error) -> bool {
    e.get_ref()
        .and_then(|i| i.downcast_ref::<rustls::Error>())
        .is_some_and(
            |e| matches!(e, rustls::Error::General(m) if m == crate::tls::sni::NOTHING_RESOLVED),
        )
}

/// The alert RFC 8446 and rustls give a message that does not decode.
pub(super) fn invalid_message_alert(e: &io::Error) -> Option<AlertDescription> {
    match e.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::InvalidMessage(m) => Some(AlertDescription::from(*m)),
        _ => None,
    }
}

fn closed_early() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "client closed the connection during the handshake",
    )
}
