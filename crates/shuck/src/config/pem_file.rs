//! `--pem-file CERT[,key=value...]`: a certificate with what a hitch `pem-file = { }` block
//! says of it (its key in its own file, its OCSP response, its client verification). The
//! same text follows a frontend's `+` (`-f '[*]:443+a.pem,private-key=a.key'`).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::cli::parse_on_off;
use super::ConfigError;

/// Bound on an OCSP response file (they are a few KB).
const MAX_DER: u64 = 1 << 20;
use crate::tls::client_auth::{self, CertVerify, Mode};
use crate::tls::LoadedCert;

/// The keys a `pem-file` block (and so this text) takes besides `cert`.
pub const KEYS: &str =
    "private-key, ocsp-resp-file, ocsp-verify-staple, client-verify, client-verify-ca";

/// One certificate as a `pem-file` block gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PemFile {
    /// The certificate chain (and its key, unless `private_key` is given).
    pub cert: PathBuf,
    /// The private key, in its own file.
    pub private_key: Option<PathBuf>,
    /// An OCSP response (DER) to staple.
    pub ocsp_resp_file: Option<PathBuf>,
    /// Whether a response that does not verify is an error (else: not stapled, warned).
    pub ocsp_verify_staple: Option<bool>,
    /// Client verification for clients served this certificate.
    pub client_verify: Option<Mode>,
    /// The CAs for it.
    pub client_verify_ca: Option<PathBuf>,
}

impl PemFile {
    /// Parses `CERT[,key=value...]`. A file whose own name holds ',' is taken whole when
    /// it exists (hitch reads `pem-file = "a,b.pem"` as a path).
    pub fn parse(spec: &str) -> Result<Self, String> {
        if spec.contains(',') && crate::system::files::is_file(Path::new(spec)) {
            return Ok(PemFile {
                cert: spec.into(),
                ..PemFile::default()
            });
        }
        let mut parts = spec.split(',');
        let cert = parts.next().unwrap_or("").trim();
        if cert.is_empty() {
            return Err(format!("{spec:?}: no certificate file before the options"));
        }
        let mut p = PemFile {
            cert: cert.into(),
            ..PemFile::default()
        };
        for part in parts {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected key=value ({KEYS})"))?;
            let (k, v) = (k.trim(), v.trim());
            if v.is_empty() {
                return Err(format!("{k}: empty value"));
            }
            match k {
                "private-key" => p.private_key = Some(v.into()),
                "ocsp-resp-file" => p.ocsp_resp_file = Some(v.into()),
                "ocsp-verify-staple" => {
                    p.ocsp_verify_staple = Some(parse_on_off(v).map_err(|r| format!("{k}: {r}"))?)
                }
                "client-verify" => {
                    p.client_verify = Some(Mode::parse(v).map_err(|r| format!("{k}: {r}"))?)
                }
                "client-verify-ca" => p.client_verify_ca = Some(v.into()),
                other => return Err(format!("unknown pem-file key {other:?} ({KEYS})")),
            }
        }
        Ok(p)
    }

    /// The text [`PemFile::parse`] reads back, for the configuration file's blocks.
    pub fn render(&self) -> String {
        let mut s = self.cert.display().to_string();
        let mut add = |k: &str, v: String| {
            s.push(',');
            s.push_str(k);
            s.push('=');
            s.push_str(&v);
        };
        if let Some(p) = &self.private_key {
            add("private-key", p.display().to_string());
        }
        if let Some(p) = &self.ocsp_resp_file {
            add("ocsp-resp-file", p.display().to_string());
        }
        if let Some(b) = self.ocsp_verify_staple {
            add("ocsp-verify-staple", if b { "on" } else { "off" }.into());
        }
        if let Some(m) = self.client_verify {
            add("client-verify", m.name().into());
        }
        if let Some(p) = &self.client_verify_ca {
            add("client-verify-ca", p.display().to_string());
        }
        s
    }

    /// Loads the certificate, its key, its staple and its client CAs. `verify_staple` is
    /// the global `--ocsp-verify-staple`, which the block's own setting overrides;
    /// `ocsp_ca` is `--ocsp-verify-ca`.
    pub fn load(
        &self,
        verify_staple: bool,
        ocsp_ca: Option<&Path>,
    ) -> Result<LoadedCert, ConfigError> {
        let mut cert = match &self.private_key {
            Some(key) => LoadedCert::from_files(&self.cert, key)?,
            None => LoadedCert::from_file(&self.cert)?,
        };
        if let Some(der) = &self.ocsp_resp_file {
            let strict = self.ocsp_verify_staple.unwrap_or(verify_staple);
            staple(&mut cert, der, strict.then_some(ocsp_ca), "ocsp-resp-file")?;
        }
        if let Some(mode) = self.client_verify {
            let roots = self
                .client_verify_ca
                .as_deref()
                .map(client_auth::load_roots)
                .transpose()?;
            cert.verify = Some(CertVerify { mode, roots });
        } else if self.client_verify_ca.is_some() {
            tracing::warn!(
                name: "config_client_verify_ca_unused",
                pem_file = %self.cert.display(),
                "pem-file {}: client-verify-ca without client-verify does nothing (as in hitch)",
                self.cert.display(),
            );
        }
        Ok(cert)
    }
}

/// Checks the OCSP response in `der_path` against `cert` and keeps it for stapling. With
/// `strict` (hitch's `ocsp-verify-staple`: `Some`, holding `--ocsp-verify-ca`), one that does
/// not verify is an error, and a delegated responder must chain to a trusted root; else it
/// is not stapled and the log says why.
pub fn staple(
    cert: &mut LoadedCert,
    der_path: &Path,
    strict: Option<Option<&Path>>,
    option: &'static str,
) -> Result<(), ConfigError> {
    let anchors = match strict {
        Some(ca) => {
            Some(
                crate::tls::ocsp::trust::anchors(ca).map_err(|e| ConfigError::Invalid {
                    option,
                    reason: format!(
                    "ocsp-verify-staple is on for {}, and its trust anchors cannot be read: {e}",
                    der_path.display()
                ),
                })?,
            )
        }
        None => None,
    };
    let strict = strict.is_some();
    let pem = cert.source.clone();
    let what = format!("OCSP response {} for {pem}", der_path.display());
    let refuse = |reason: String| -> Result<(), ConfigError> {
        if strict {
            Err(ConfigError::Invalid {
                option,
                reason: format!("{what} does not verify (ocsp-verify-staple is on): {reason}"),
            })
        } else {
            tracing::warn!(
                name: "ocsp_file_not_stapled",
                what = %what,
                reason = %reason,
                certificate = %pem,
                "{what} not stapled: {reason}",
            );
            Ok(())
        }
    };
    let der = crate::system::files::read(der_path, MAX_DER, "an OCSP response").map_err(|e| {
        ConfigError::Invalid {
            option,
            reason: format!("cannot read {}: {e}", der_path.display()),
        }
    })?;
    let chain = &cert.key.cert;
    let (Some(leaf), Some(issuer)) = (chain.first(), chain.get(1)) else {
        return refuse(
            "the issuer is not in the PEM file, so the response cannot be checked".into(),
        );
    };
    let trust = anchors.as_ref().map(|a| crate::tls::ocsp::verify::Trust {
        roots: a.as_ref().map_err(String::as_str),
        chain: &chain[1..],
    });
    match crate::tls::ocsp::verify::verify(&der, leaf, issuer, SystemTime::now(), trust) {
        Ok(_) => {
            tracing::info!(
                name: "ocsp_file_stapled",
                what = %what,
                certificate = %pem,
                "stapling the {what}",
            );
            cert.ocsp = Some(der);
            Ok(())
        }
        // hitch's check at load is signature, certificate and status, not time: a response
        // past its nextUpdate is only not stapled (--ocsp-dir fetches a fresh one).
        Err(e @ crate::tls::ocsp::verify::OcspError::Stale(_)) => {
            tracing::warn!(
                name: "ocsp_file_stale",
                what = %what,
                error = %e,
                certificate = %pem,
                "{what} not stapled: {e}; with --ocsp-dir a fresh response is fetched",
            );
            Ok(())
        }
        Err(e) => refuse(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let p = PemFile::parse(
            "/a.pem,private-key=/a.key,ocsp-resp-file=/a.der,ocsp-verify-staple=yes,client-verify=optional,client-verify-ca=/ca.pem",
        )
        .unwrap();
        assert_eq!(p.private_key.as_deref(), Some(Path::new("/a.key")));
        assert_eq!(p.ocsp_verify_staple, Some(true));
        assert_eq!(p.client_verify, Some(Mode::Optional));
        assert_eq!(PemFile::parse(&p.render()).unwrap(), p);
        assert_eq!(PemFile::parse("/b.pem").unwrap().render(), "/b.pem");
    }

    #[test]
    fn an_existing_file_with_a_comma_is_a_path() {
        let path = std::env::temp_dir().join(format!("shuck-{},comma.pem", std::process::id()));
        std::fs::write(&path, "x").unwrap();
        let spec = path.to_str().unwrap();
        let p = PemFile::parse(spec);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(p.unwrap().cert, path);
        assert!(PemFile::parse("/no/such,dir.pem").is_err());
    }

    #[test]
    fn errors_name_the_key() {
        for (spec, needle) in [
            ("", "no certificate"),
            ("/a.pem,colour=red", "colour"),
            ("/a.pem,private-key", "key=value"),
            ("/a.pem,client-verify=sometimes", "sometimes"),
            ("/a.pem,ocsp-verify-staple=perhaps", "perhaps"),
        ] {
            let e = PemFile::parse(spec).unwrap_err();
            assert!(e.contains(needle), "{spec}: {e}");
        }
    }
}
