//! The trust anchors an OCSP responder's certificate must chain to when
//! `ocsp-verify-staple` is on: `--ocsp-verify-ca`, else the system's store where OpenSSL (and
//! so hitch) finds it: `SSL_CERT_FILE` and `SSL_CERT_DIR`, else the distribution's bundle.
//! Read through `system/files.rs`, so that a worker rebuilding the configuration (in a
//! chroot, as an unprivileged user) reads the recording of what the master read.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

use crate::tls::MAX_PEM;

/// Why no trust anchors could be had.
#[derive(Debug, thiserror::Error)]
#[error("{place}: {reason}")]
pub struct TrustError {
    /// The file or the store that was read.
    pub place: String,
    /// What is wrong.
    pub reason: String,
}

/// The anchors `ocsp-verify-staple` checks against: an error in `--ocsp-verify-ca` is the
/// configuration's (`Err`); a system store that cannot be read is kept as the reason, for
/// the delegated responders that would need it (`Ok(Err)`).
pub fn anchors(ca_file: Option<&Path>) -> Result<Result<RootCertStore, String>, TrustError> {
    match ca_file {
        Some(_) => roots(ca_file).map(Ok),
        None => Ok(roots(None).map_err(|e| e.to_string())),
    }
}

/// The anchors of `ca_file`, or of the system's store when it is `None`.
pub fn roots(ca_file: Option<&Path>) -> Result<RootCertStore, TrustError> {
    let mut store = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let place = || format!("--ocsp-verify-ca {}", path.display());
            let n = add_file(&mut store, path).map_err(|reason| TrustError {
                place: place(),
                reason,
            })?;
            if n == 0 {
                return Err(TrustError {
                    place: place(),
                    reason: "holds no certificate".into(),
                });
            }
        }
        None => {
            let (files, dirs) = system_places();
            for f in &files {
                let _ = add_file(&mut store, f); // an unreadable bundle is as good as none
            }
            for d in &dirs {
                for (_, f) in crate::system::files::list_files(d).unwrap_or_default() {
                    let _ = add_file(&mut store, &f);
                }
            }
            if store.is_empty() {
                let looked: Vec<String> = files
                    .iter()
                    .chain(&dirs)
                    .map(|p| p.display().to_string())
                    .collect();
                return Err(TrustError {
                    place: "the system's trust store".into(),
                    reason: format!(
                        "no CA certificate found (looked in: {}); give --ocsp-verify-ca or SSL_CERT_FILE",
                        if looked.is_empty() { "nowhere".into() } else { looked.join(", ") }
                    ),
                });
            }
        }
    }
    Ok(store)
}

/// The distributions' bundles, as OpenSSL is built to find them (Debian and Ubuntu first).
const BUNDLES: [&str; 5] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// Where OpenSSL looks: the environment's `SSL_CERT_FILE` and `SSL_CERT_DIR` alone when
/// either is set, else the first distribution bundle that can be read (read, not probed,
/// so that a worker's replay finds the same one).
fn system_places() -> (Vec<PathBuf>, Vec<PathBuf>) {
    let env = |name: &str| std::env::var_os(name).map(PathBuf::from);
    let (file, dir) = (env("SSL_CERT_FILE"), env("SSL_CERT_DIR"));
    if file.is_some() || dir.is_some() {
        return (file.into_iter().collect(), dir.into_iter().collect());
    }
    let found = BUNDLES
        .iter()
        .map(PathBuf::from)
        .find(|p| crate::system::files::is_file(p));
    (found.into_iter().collect(), Vec::new())
}

/// Adds the certificates of a PEM file; how many it held.
fn add_file(store: &mut RootCertStore, path: &Path) -> Result<usize, String> {
    let text =
        crate::system::files::read(path, MAX_PEM, "a PEM file").map_err(|e| e.to_string())?;
    let mut n = 0;
    for cert in CertificateDer::pem_slice_iter(&text) {
        let cert = cert.map_err(|e| format!("malformed PEM: {e}"))?;
        store
            .add(cert)
            .map_err(|e| format!("certificate {} unusable as a CA: {e}", n + 1))?;
        n += 1;
    }
    Ok(n)
}
