//! The handshake stage: read the ClientHello, refuse unknown server names when asked, and
//! complete the TLS handshake, all within the handshake deadline. The policy lives here;
//! [`TlsStream`] only offers the means (peek the name, send an alert, run the handshake).

use std::io;
use std::time::Duration;

use rustls::AlertDescription;

use super::client_io::ClientIo;
use super::record_guard::Refused;
use super::tls_stream::TlsStream;

use crate::counters::{FailReason, Failure};
use crate::session::store::SharedStore;
use crate::session::SessionCache;
use crate::tls::{hello, TlsState};

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
    /// Not a client: an ACME CA checked the tls-alpn-01 answer for this name, and got it.
    #[error("ACME tls-alpn-01 challenge for {0} answered")]
    AcmeAnswered(String),
}

impl HandshakeError {
    /// How to count it: a reason, or the TLS alert sent or received.
    pub fn failure(&self) -> Failure {
        match self {
            HandshakeError::Timeout(_) => Failure::Reason(FailReason::Timeout),
            HandshakeError::UnknownName(_) => Failure::Reason(FailReason::SniNomatch),
            HandshakeError::AcmeAnswered(_) => Failure::Reason(FailReason::Other),
            HandshakeError::Io(e) => {
                if let Some(r) = Refused::of(e) {
                    return Failure::AlertSent(u8::from(r.alert));
                }
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

/// Why a handshake failed, in an operator's words, and the deliberate difference from
/// hitch behind it when there is one; `None` for a client that merely went away or
/// timed out (logged at debug only: health checks and port scans do that).
pub fn reason(e: &HandshakeError) -> Option<(String, Option<&'static str>)> {
    use rustls::{CertificateError as C, Error as E, PeerIncompatible as P};
    let tls = match e {
        HandshakeError::UnknownName(n) => {
            return Some((
                format!("unknown server name {n:?} (sni-nomatch-abort)"),
                None,
            ))
        }
        HandshakeError::Timeout(_) | HandshakeError::AcmeAnswered(_) => return None,
        HandshakeError::Io(io) => {
            if let Some(r) = Refused::of(io) {
                return Some((format!("{}; sent {:?}", r.why, r.alert), None));
            }
            io.get_ref()?.downcast_ref::<rustls::Error>()?
        }
    };
    Some(match tls {
        // A ClientHello without signature_algorithms is from before TLS 1.2.
        E::PeerIncompatible(
            P::ServerDoesNotSupportTls12Or13
            | P::SupportedVersionsExtensionRequired
            | P::SignatureAlgorithmsExtensionRequired,
        ) => (
            "protocol version: the client offers only SSLv3 to TLSv1.1".into(),
            Some("SSLv3 to TLSv1.1 are not served (insecure)"),
        ),
        // A client offering only CBC, DHE or static RSA suites sends no ECDHE group either.
        E::PeerIncompatible(P::NoCipherSuitesInCommon | P::NoKxGroupsInCommon) => (
            "no shared cipher (or key exchange group)".into(),
            Some("CBC, RC4, DHE and static RSA suites are not served (insecure)"),
        ),
        E::InvalidCertificate(C::UnknownIssuer) => {
            ("client certificate from an unknown CA".into(), None)
        }
        E::InvalidCertificate(c) if format!("{c:?}").contains("UnsupportedCertVersion") => (
            "client certificate is X.509 v1".into(),
            Some("X.509 v1 client certificates are refused (webpki takes v3 only)"),
        ),
        E::InvalidCertificate(c) => (format!("bad client certificate: {c:?}"), None),
        E::NoCertificatesPresented => (
            "no client certificate (client-verify required)".into(),
            None,
        ),
        E::AlertReceived(a) => (format!("the client sent the alert {a:?}"), None),
        other => (other.to_string(), None),
    })
}

/// Logs why a handshake failed, at info with the client's address (hitch's operators see
/// these without debug logging); at most [`FAILURES_PER_SECOND`] lines a second over all
/// workers, so a flood cannot fill the disk: the lines left out are counted in the next.
pub fn log_failure(client: std::net::SocketAddr, e: &HandshakeError) {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    static SECOND: AtomicU64 = AtomicU64::new(0);
    static LOGGED: AtomicU64 = AtomicU64::new(0);
    static LEFT_OUT: AtomicU64 = AtomicU64::new(0);
    let Some((why, deliberate)) = reason(e) else {
        tracing::debug!(name: "handshake_failed", client = %client, error = %e, "handshake failed");
        return;
    };
    let now = crate::clock::unix_ms() / 1000;
    if SECOND.swap(now, Relaxed) != now {
        LOGGED.store(0, Relaxed);
    }
    if LOGGED.fetch_add(1, Relaxed) >= FAILURES_PER_SECOND {
        LEFT_OUT.fetch_add(1, Relaxed);
        return;
    }
    let left_out = LEFT_OUT.swap(0, Relaxed);
    let more = if left_out > 0 {
        format!(" ({left_out} more failures not logged)")
    } else {
        String::new()
    };
    match deliberate {
        Some(d) => {
            tracing::info!(
                name: "handshake_failed",
                reason = %why,
                deliberate = %d,
                more = %more,
                client = %client,
                "handshake failed: {why}; {d}, a deliberate difference from hitch{more}",
            )
        }
        None => {
            tracing::info!(
                name: "handshake_failed",
                reason = %why,
                more = %more,
                client = %client,
                "handshake failed: {why}{more}",
            )
        }
    }
}

/// Most handshake failures logged per second (see [`log_failure`]).
pub const FAILURES_PER_SECOND: u64 = 20;

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

/// `--shared-store`: what the ClientHello offers to resume and the cache lacks is fetched
/// from the store first (within `--shared-store-timeout`), so that rustls finds it.
async fn prefetch(s: &TlsStream, tls: &TlsState, store: &SharedStore, cache: &SessionCache) {
    let Some(offered) = hello::resumable(s.received(), tls.resumes) else {
        return;
    };
    if offered.is_empty() {
        return;
    }
    store
        .prefetch(cache, offered.session_id.as_deref(), &offered.tickets)
        .await;
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
    let store = tls.store.as_deref().zip(tls.cache.as_deref());
    let answers = crate::acme::answers::answers();
    let acme = answers.pending();
    if want_sni || tls.sni_nomatch_abort || !tls.by_cert.is_empty() || store.is_some() || acme {
        s.peek_server_name().await?;
        let challenge = acme && s.offers_acme_alpn();
        let name = s.sni();
        if let Some((name, answer)) = name
            .filter(|_| challenge)
            .and_then(|n| Some((n.to_owned(), answers.tls_alpn(n)?)))
        {
            // RFC 8737: the handshake is the answer; nothing follows it.
            s.reconfigure(answer)?;
            s.complete_handshake().await?;
            return Err(HandshakeError::AcmeAnswered(name));
        }
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
        if let Some((store, cache)) = store {
            prefetch(&s, tls, store, cache).await;
        }
    }
    s.complete_handshake().await?;
    Ok(s)
}
