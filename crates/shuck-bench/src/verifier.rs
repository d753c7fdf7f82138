//! A certificate verifier for load and tests: it accepts any certificate but still checks
//! the handshake signatures (a benchmark client skips path building, as the seeds' load
//! generators did; a test asserts *which* certificate was served without building a PKI).
//! It can offer only some signature schemes, to see what a server does with such a client.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Any certificate, with its signatures checked by `provider`'s algorithms.
#[derive(Debug)]
pub struct AnyCertificate {
    provider: Arc<CryptoProvider>,
    /// Offer only these signature schemes (`None`: all the provider verifies).
    only: Option<Vec<SignatureScheme>>,
}

impl AnyCertificate {
    /// Offers every scheme `provider` verifies.
    pub fn new(provider: Arc<CryptoProvider>) -> Self {
        AnyCertificate {
            provider,
            only: None,
        }
    }

    /// Offers only `schemes` (`None`: every scheme).
    pub fn offering(provider: Arc<CryptoProvider>, schemes: Option<Vec<SignatureScheme>>) -> Self {
        AnyCertificate {
            provider,
            only: schemes,
        }
    }
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(m, c, d, algs)
    }

    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(m, c, d, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        match &self.only {
            Some(only) => only.clone(),
            None => self
                .provider
                .signature_verification_algorithms
                .supported_schemes(),
        }
    }
}
