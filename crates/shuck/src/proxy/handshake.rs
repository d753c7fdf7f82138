//! The handshake stage: read the ClientHello, refuse unknown server names when asked, and
//! complete the TLS handshake, all within the handshake deadline.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_rustls::server::TlsStream;
use tokio_rustls::LazyConfigAcceptor;

use crate::tls::TlsState;

/// Why a handshake did not complete.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The client did not finish within the deadline.
    #[error("handshake timed out after {0:?}")]
    Timeout(Duration),
    /// The client asked for a name no certificate serves, with `--sni-nomatch-abort`.
    #[error("unknown server name {0:?} refused (--sni-nomatch-abort)")]
    UnknownName(String),
    /// TLS or I/O failure (bad ClientHello, alert, reset).
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// A fatal unrecognized_name alert (RFC 8446 §6), as a plaintext record: nothing has been
/// negotiated yet, so the record layer is still in clear.
const UNRECOGNIZED_NAME_ALERT: [u8; 7] = [21, 3, 3, 0, 2, 2, 112];

/// Runs the server side of the handshake on `tcp`.
pub async fn handshake<IO: AsyncRead + AsyncWrite + Unpin>(
    tcp: IO,
    tls: &TlsState,
    timeout: Duration,
) -> Result<TlsStream<IO>, HandshakeError> {
    let run = async {
        let mut start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp).await?;
        if tls.sni_nomatch_abort {
            if let Some(name) = start.client_hello().server_name() {
                if tls.resolver.lookup(name).is_none() {
                    let name = name.to_owned();
                    // Best effort: the client may already be gone.
                    let _ = start.io.write_all(&UNRECOGNIZED_NAME_ALERT).await;
                    let _ = start.io.shutdown().await;
                    return Err(HandshakeError::UnknownName(name));
                }
            }
        }
        Ok(start.into_stream(tls.config.clone()).await?)
    };
    tokio::time::timeout(timeout, run)
        .await
        .unwrap_or(Err(HandshakeError::Timeout(timeout)))
}
