//! Client certificates (`--client-verify`, `--client-verify-ca`): whether to ask for one,
//! which CAs vouch for it, and what of it is passed on to the backend.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use super::TlsError;
use super::MAX_PEM;

/// What to ask of clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Ask nothing.
    #[default]
    None,
    /// Ask; a client without a certificate is still served, one with a bad one is not.
    Optional,
    /// A certificate from the CAs is required.
    Required,
}

impl Mode {
    /// Parses hitch's values.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "off" => Ok(Mode::None),
            "optional" => Ok(Mode::Optional),
            "required" | "require" | "on" => Ok(Mode::Required),
            _ => Err(format!("{s:?} is not none, optional or required")),
        }
    }

    /// hitch's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Optional => "optional",
            Mode::Required => "required",
        }
    }
}

/// The CAs client certificates must chain to.
#[derive(Debug, Clone)]
pub struct ClientAuth {
    /// Optional or required.
    pub mode: Mode,
    /// The trusted CAs.
    pub roots: Arc<RootCertStore>,
}

/// A certificate's own client verification (hitch's `client-verify` in a `pem-file`
/// block): its mode, and its CAs when it names them (else the frontend's are used).
#[derive(Debug, Clone)]
pub struct CertVerify {
    /// What to ask of clients that reach this certificate.
    pub mode: Mode,
    /// The block's `client-verify-ca`, loaded.
    pub roots: Option<Arc<RootCertStore>>,
}

impl ClientAuth {
    /// Client verification in `mode` by `roots`; `None` when `mode` is none or no CA is
    /// known (the configuration checks that one is whenever the mode asks for it).
    pub fn new(mode: Mode, roots: Option<Arc<RootCertStore>>) -> Option<Self> {
        match (mode, roots) {
            (Mode::None, _) | (_, None) => None,
            (mode, Some(roots)) => Some(ClientAuth { mode, roots }),
        }
    }

    /// The rustls verifier.
    pub fn verifier(
        &self,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
        let b = WebPkiClientVerifier::builder_with_provider(self.roots.clone(), provider);
        let b = if self.mode == Mode::Optional {
            b.allow_unauthenticated()
        } else {
            b
        };
        b.build()
            .map_err(|e| TlsError::Rustls(format!("client verification: {e}")))
    }
}

/// Reads a PEM file of CA certificates (`--client-verify-ca`).
pub fn load_roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let bad = |reason: String| TlsError::ClientCa {
        path: path.to_owned(),
        reason,
    };
    let text =
        crate::system::files::read(path, MAX_PEM, "a PEM file").map_err(|e| bad(e.to_string()))?;
    let mut roots = RootCertStore::empty();
    let mut n = 0;
    for cert in CertificateDer::pem_slice_iter(&text) {
        let cert = cert.map_err(|e| bad(format!("malformed PEM: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| bad(format!("certificate {} unusable as a CA: {e}", n + 1)))?;
        n += 1;
    }
    if n == 0 {
        return Err(bad("holds no certificate".into()));
    }
    Ok(Arc::new(roots))
}

/// The subject of a client's certificate: the whole name (RFC 4514 style) and its CN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// E.g. `CN=alice, O=Example`.
    pub name: String,
    /// The first common name, if any.
    pub cn: Option<String>,
}

impl Subject {
    /// Reads it from the leaf certificate (already verified by rustls); control
    /// characters are replaced so the text is safe in a header.
    pub fn of(der: &[u8]) -> Option<Self> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let clean = |s: String| -> String {
            s.chars()
                .map(|c| if c.is_control() { '?' } else { c })
                .collect()
        };
        let subject = cert.subject();
        let name = clean(subject.to_string());
        let cn = subject
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(|s| clean(s.to_owned()));
        Some(Subject { name, cn })
    }
}
