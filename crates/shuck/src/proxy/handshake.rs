//! The handshake stage: read the ClientHello, refuse unknown server names when asked, and
//! complete the TLS handshake, all within the handshake deadline. The policy lives here;
//! [`TlsStream`] only offers the means (peek the name, send an alert, run the handshake).

use std::io;
use std::time::Duration;

use rustls::AlertDescription;

use super::client_io::ClientIo;
use super::tls_stream::TlsStream;

use crate::counters::{FailReason, Failure};
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

impl HandshakeError {
    /// How to count it: a reason, or the TLS alert sent or received.
    pub fn failure(&self) -> Failure {
        match self {
            HandshakeError::Timeout(_) => Failure::Reason(FailReason::Timeout),
            HandshakeError::UnknownName(_) => Failure::Reason(FailReason::SniNomatch),
            HandshakeError::Io(e) => {
                if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                    return match tls {
                        rustls::Error::AlertReceived(a) => Failure::AlertReceived(u8::from(*a)),
                        other => Failure::AlertSent(u8::from(alert_for(other))),
                    };
                }
                match e.kind() {
                    io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe => Failure::Reason(FailReason::Closed),
                    _ => Failure::Reason(FailReason::Other),
                }
            }
        }
    }
}

/// The fatal alert rustls sends for an error (its own mapping, for the common cases).
fn alert_for(e: &rustls::Error) -> AlertDescription {
    use rustls::Error as E;
    match e {
        E::InvalidMessage(_) => AlertDescription::DecodeError,
        E::PeerIncompatible(rustls::PeerIncompatible::ServerDoesNotSupportTls12Or13)
        | E::PeerIncompatible(rustls::PeerIncompatible::SupportedVersionsExtensionRequired) => {
            AlertDescription::ProtocolVersion
        }
        E::PeerIncompatible(_) => AlertDescription::HandshakeFailure,
        E::PeerMisbehaved(_) => AlertDescription::IllegalParameter,
        E::NoApplicationProtocol => AlertDescription::NoApplicationProtocol,
        E::NoCertificatesPresented => AlertDescription::CertificateRequired,
        E::InvalidCertificate(_) => AlertDescription::BadCertificate,
        E::DecryptError => AlertDescription::DecryptError,
        E::InappropriateMessage { .. } | E::InappropriateHandshakeMessage { .. } => {
            AlertDescription::UnexpectedMessage
        }
        _ => AlertDescription::InternalError,
    }
}

/// Runs the server side of the handshake on `io` within `timeout`; `want_sni` keeps the
/// server name the client asked for.
pub async fn handshake(
    io: ClientIo,
    tls: &TlsState,
    timeout: Duration,
    want_sni: bool,
) -> Result<TlsStream, HandshakeError> {
    tokio::time::timeout(timeout, accept(io, tls, want_sni))
        .await
        .unwrap_or(Err(HandshakeError::Timeout(timeout)))
}

/// The handshake without a deadline. With `want_sni` (or `--sni-nomatch-abort`, or
/// certificates with a client verification of their own) the ClientHello's server name is
/// read first: a name no certificate serves is refused with unrecognized_name when
/// `--sni-nomatch-abort` asks for it, and the certificate chosen brings its own
/// configuration when it has one.
pub async fn accept(
    io: ClientIo,
    tls: &TlsState,
    want_sni: bool,
) -> Result<TlsStream, HandshakeError> {
    let mut s = TlsStream::new(io, tls.config.clone())?;
    if want_sni || tls.sni_nomatch_abort || !tls.by_cert.is_empty() {
        let name = s.peek_server_name().await?;
        if let Some(name) = name {
            if tls.sni_nomatch_abort && tls.resolver.lookup(name).is_none() {
                let name = name.to_owned();
                s.refuse(AlertDescription::UnrecognisedName).await;
                return Err(HandshakeError::UnknownName(name));
            }
        }
        if let Some(config) = tls.config_for(tls.resolver.choose(name)) {
            let config = config.clone();
            s.reconfigure(config)?;
        }
    }
    s.complete_handshake().await?;
    Ok(s)
}
