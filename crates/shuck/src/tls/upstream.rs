//! TLS to a backend (`tls = on` in a backend block): the rustls client configuration a
//! backend's connections share, so that they resume one another's sessions (rustls's
//! in-memory client session cache; a new client connection costs no new full handshake to
//! the backend). Verification is against `ca-file` or the system's store unless
//! `verify = none`; a client certificate is sent when `cert` names one.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};

use super::pem::LoadedCert;
use super::TlsError;

/// What a backend block says of TLS to its servers.
#[derive(Debug, Clone, Copy)]
pub struct Upstream<'a> {
    /// Verify the server's certificate.
    pub verify: bool,
    /// The anchors; `None`: the system's store.
    pub ca_file: Option<&'a Path>,
    /// The client certificate and key, when the backend asks for one.
    pub cert: Option<&'a Path>,
    /// ALPN protocols offered.
    pub alpn: &'a [String],
}

/// Sessions kept per backend configuration (rustls's default is 256).
const SESSIONS: usize = 1024;

/// The client configuration of a backend's connections.
pub fn client_config(up: Upstream<'_>) -> Result<Arc<ClientConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(format!("TLS to the backend: {e}")))?;
    let builder = if up.verify {
        let roots = match up.ca_file {
            Some(path) => (*super::client_auth::load_roots(path)?).clone(),
            None => super::ocsp::trust::roots(None).map_err(|e| {
                TlsError::Rustls(format!("TLS to the backend: the system's trust store: {e}"))
            })?,
        };
        builder.with_root_certificates(roots)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
    };
    let mut config = match up.cert {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let c = LoadedCert::from_file(path)?;
            builder.with_client_cert_resolver(Arc::new(Always(c.key)))
        }
    };
    config.alpn_protocols = up.alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    config.resumption = rustls::client::Resumption::in_memory_sessions(SESSIONS);
    Ok(Arc::new(config))
}

/// The name a server is verified by and sent as SNI: `sni`, else its host.
pub fn server_name(sni: Option<&str>, host: &str) -> Result<ServerName<'static>, TlsError> {
    let name = sni.unwrap_or(host);
    ServerName::try_from(name.to_owned()).map_err(|e| {
        TlsError::Rustls(format!(
            "TLS to the backend: {name:?} is not a server name: {e}"
        ))
    })
}

/// The one client certificate a backend asks for.
#[derive(Debug)]
struct Always(Arc<CertifiedKey>);

impl ResolvesClientCert for Always {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.0.key.choose_scheme(sigschemes)?;
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// `verify = none`: any certificate is taken (the operator said so, and shuck warned at
/// start); the handshake's signatures are still checked, so the peer holds the key of the
/// certificate it sent.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
