//! Certificates with a client verification of their own (a `pem-file` block's
//! `client-verify`) over QUIC. On TCP shuck reads the ClientHello first and hands the
//! handshake the chosen certificate's configuration; quinn starts rustls on a single
//! configuration before any ClientHello is read. So QUIC's asks every client for a
//! certificate (without requiring one) and takes any that one of the frontend's verifiers
//! takes; once the handshake is done, the certificate served (by the client's server name)
//! decides: its own verification is applied to what the client sent, and a connection that
//! fails it is closed with the TLS alert TCP would have sent.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::CertifiedKey;
use rustls::{AlertDescription, DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// A client verification (rustls's).
pub type Verifier = Arc<dyn ClientCertVerifier>;

/// Takes a client certificate any of its verifiers takes; asks for one, requires none.
#[derive(Debug)]
pub struct AnyOf(pub Vec<Verifier>);

impl ClientCertVerifier for AnyOf {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let mut last = rustls::Error::General("no client verification configured".into());
        for v in &self.0 {
            match v.verify_client_cert(end_entity, intermediates, now) {
                Ok(ok) => return Ok(ok),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.first()?.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        // The same provider's algorithms in every one: the first's check is theirs.
        self.first()?.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0
            .first()
            .map(|v| v.supported_verify_schemes())
            .unwrap_or_default()
    }
}

impl AnyOf {
    fn first(&self) -> Result<&Verifier, rustls::Error> {
        self.0
            .first()
            .ok_or_else(|| rustls::Error::General("no client verification configured".into()))
    }
}

/// Each certificate's verification, for the check after QUIC's handshake.
#[derive(Debug)]
pub struct QuicClientAuth {
    /// QUIC's rustls configuration: the frontend's, with [`AnyOf`] as its verifier.
    pub config: Arc<rustls::ServerConfig>,
    /// Certificates with their own verification (`None`: none asked).
    pub by_cert: Vec<(Arc<CertifiedKey>, Option<Verifier>)>,
    /// The frontend's, for the other certificates.
    pub default: Option<Verifier>,
}

impl QuicClientAuth {
    /// Whether a client that was served `served` and sent `chain` (leaf first) passes that
    /// certificate's verification; the alert to close with when it does not.
    pub fn check(
        &self,
        served: &Arc<CertifiedKey>,
        chain: Option<&[CertificateDer<'static>]>,
    ) -> Result<(), AlertDescription> {
        let verifier = self
            .by_cert
            .iter()
            .find(|(k, _)| Arc::ptr_eq(k, served))
            .map_or(self.default.as_ref(), |(_, v)| v.as_ref());
        let Some(v) = verifier else {
            return Ok(());
        };
        match chain.and_then(|c| c.split_first()) {
            None if v.client_auth_mandatory() => Err(AlertDescription::CertificateRequired),
            None => Ok(()),
            Some((leaf, rest)) => v
                .verify_client_cert(leaf, rest, UnixTime::now())
                .map(|_| ())
                .map_err(|_| AlertDescription::BadCertificate),
        }
    }
}
