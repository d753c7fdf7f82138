//! Loading a PEM file as stud and hitch take it: the certificate chain and its private key in
//! one file, in any order, other sections (DH parameters) ignored.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use rustls::pki_types::pem::{self, SectionKind};
use rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer,
};
use rustls::sign::CertifiedKey;

use super::{TlsError, MAX_PEM};

/// A certificate ready to serve, with what SNI needs to know of it.
#[derive(Debug, Clone)]
pub struct LoadedCert {
    /// Where it came from, for messages.
    pub source: String,
    /// The chain and signing key, as rustls serves them.
    pub key: Arc<CertifiedKey>,
    /// DNS names it serves (SANs, or the CN when there is no DNS SAN), lowercase;
    /// wildcards kept as `*.example.com`.
    pub names: Vec<String>,
    /// End of validity of the leaf certificate.
    pub not_after: Option<SystemTime>,
    /// A checked OCSP response to staple (`--ocsp-resp-file`).
    pub ocsp: Option<Vec<u8>>,
    /// Client verification of this certificate's own (a `pem-file` block's
    /// `client-verify`), over the frontend's and the global one.
    pub verify: Option<super::client_auth::CertVerify>,
}

/// The sections of a PEM text shuck uses: certificates and private keys.
struct Sections {
    chain: Vec<CertificateDer<'static>>,
    keys: Vec<PrivateKeyDer<'static>>,
    /// A passphrase-protected key was met.
    encrypted: bool,
}

fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    crate::system::files::read(path, MAX_PEM, "a PEM file").map_err(|e| TlsError::ReadPem {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

fn sections(data: &[u8], path: &Path) -> Result<Sections, TlsError> {
    let mut chain: Vec<CertificateDer<'static>> = Vec::new();
    let mut keys: Vec<PrivateKeyDer<'static>> = Vec::new();
    let mut rd: &[u8] = data;
    loop {
        match pem::from_buf(&mut rd) {
            Ok(Some((SectionKind::Certificate, der))) => chain.push(der.into()),
            Ok(Some((SectionKind::RsaPrivateKey, der))) => {
                keys.push(PrivatePkcs1KeyDer::from(der).into())
            }
            Ok(Some((SectionKind::PrivateKey, der))) => {
                keys.push(PrivatePkcs8KeyDer::from(der).into())
            }
            Ok(Some((SectionKind::EcPrivateKey, der))) => {
                keys.push(PrivateSec1KeyDer::from(der).into())
            }
            Ok(Some(_)) => {} // DH parameters, CRLs, public keys: not ours to use
            Ok(None) => break,
            Err(e) => {
                return Err(TlsError::BadPem {
                    path: path.to_owned(),
                    reason: e.to_string(),
                });
            }
        }
    }
    let text = String::from_utf8_lossy(data);
    let encrypted =
        text.contains("ENCRYPTED PRIVATE KEY") || text.contains("Proc-Type: 4,ENCRYPTED");
    Ok(Sections {
        chain,
        keys,
        encrypted,
    })
}

impl LoadedCert {
    /// Reads and checks one PEM file.
    pub fn from_file(path: &Path) -> Result<Self, TlsError> {
        Self::from_pem(&read_file(path)?, &path.display().to_string(), Some(path))
    }

    /// Reads a certificate chain from `cert` and its private key from `key` (hitch's
    /// `private-key` in a `pem-file` block); a key in `cert` is then not used.
    pub fn from_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let certs = sections(&read_file(cert)?, cert)?;
        let keys = sections(&read_file(key)?, key)?;
        Self::assemble(certs.chain, keys, key, &cert.display().to_string(), cert)
    }

    /// Parses PEM text; `source` names it in messages.
    pub fn from_pem(data: &[u8], source: &str, path: Option<&Path>) -> Result<Self, TlsError> {
        let path: PathBuf = path.map(Path::to_owned).unwrap_or_else(|| source.into());
        let mut found = sections(data, &path)?;
        let chain = std::mem::take(&mut found.chain);
        Self::assemble(chain, found, &path, source, &path)
    }

    /// Checks a chain (from `path`) and the keys of `found` (read from `key_path`) and
    /// makes them one.
    fn assemble(
        chain: Vec<CertificateDer<'static>>,
        found: Sections,
        key_path: &Path,
        source: &str,
        path: &Path,
    ) -> Result<Self, TlsError> {
        let Sections {
            mut keys,
            encrypted,
            ..
        } = found;
        let key_path = key_path.to_owned();
        if encrypted {
            return Err(TlsError::EncryptedKey { path: key_path });
        }
        if chain.is_empty() {
            return Err(TlsError::NoCertificate {
                path: path.to_owned(),
            });
        }
        let key_der = match keys.len() {
            0 => return Err(TlsError::NoKey { path: key_path }),
            1 => keys.remove(0),
            n => {
                return Err(TlsError::ManyKeys {
                    path: key_path,
                    count: n,
                })
            }
        };
        let signer =
            rustls::crypto::aws_lc_rs::sign::any_supported_type(&key_der).map_err(|e| {
                TlsError::BadKey {
                    path: key_path.clone(),
                    reason: e.to_string(),
                }
            })?;
        let (names, not_after) =
            leaf_facts(&chain[0]).map_err(|reason| TlsError::BadCertificate {
                path: path.to_owned(),
                reason,
            })?;
        crate::system::files::warn_if_exposed(&key_path, "a private key");
        let key = CertifiedKey::new(chain, signer);
        key.keys_match().map_err(|_| TlsError::KeyMismatch {
            path: path.to_owned(),
        })?;
        Ok(LoadedCert {
            source: source.to_owned(),
            key: Arc::new(key),
            names,
            not_after,
            ocsp: None,
            verify: None,
        })
    }

    /// True when the leaf certificate's validity has ended.
    pub fn is_expired(&self, now: SystemTime) -> bool {
        self.not_after.is_some_and(|t| t < now)
    }
}

/// The names a leaf certificate serves and when it expires.
pub(crate) fn leaf_facts(
    der: &CertificateDer<'_>,
) -> Result<(Vec<String>, Option<SystemTime>), String> {
    use x509_parser::prelude::*;
    let (_, cert) = X509Certificate::from_der(der.as_ref()).map_err(|e| e.to_string())?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for gn in &san.value.general_names {
            if let GeneralName::DNSName(n) = gn {
                names.push(n.to_ascii_lowercase());
            }
        }
    }
    if names.is_empty() {
        for cn in cert.subject().iter_common_name() {
            if let Ok(s) = cn.as_str() {
                names.push(s.to_ascii_lowercase());
            }
        }
    }
    let ts = cert.validity().not_after.timestamp();
    let not_after = u64::try_from(ts)
        .ok()
        .map(|s| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s));
    Ok((names, not_after))
}
