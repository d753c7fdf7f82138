//! The embedded default: a self-signed certificate for localhost, made at start, so that a
//! fresh machine can run shuck with no file at all.

use super::pem::LoadedCert;
use super::TlsError;

/// The names the generated certificate serves.
pub const NAMES: &[&str] = &["localhost", "127.0.0.1", "::1"];

/// Generates an ECDSA P-256 certificate for [`NAMES`].
pub fn generate() -> Result<LoadedCert, TlsError> {
    let fail = |e: rcgen::Error| TlsError::SelfSigned(e.to_string());
    let names: Vec<String> = NAMES.iter().map(|s| s.to_string()).collect();
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(names).map_err(fail)?;
    let pem = format!("{}{}", cert.pem(), signing_key.serialize_pem());
    LoadedCert::from_pem(pem.as_bytes(), "(self-signed)", None)
}
