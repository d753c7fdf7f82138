//! `-f [HOST]:PORT[+PEM...][;key=value...]`: a frontend, with its own certificates and TLS
//! settings when it has them.

use std::net::SocketAddr;

use super::cli::parse_on_off;
use super::{ConfigError, Endpoint};
use crate::tls::{params, LoadedCert, TlsSettings};

/// A frontend: the endpoint as written and the addresses it listens on.
#[derive(Debug)]
pub struct Frontend {
    /// As the operator wrote it, for messages.
    pub endpoint: Endpoint,
    /// Where to bind.
    pub addrs: Vec<SocketAddr>,
    /// Certificates of this frontend only (`-f HOST:PORT+cert.pem`, or a frontend block's
    /// pem-file); empty: the global ones.
    pub certs: Vec<LoadedCert>,
    /// Also serve the global certificates (by SNI) besides its own.
    pub match_global_certs: bool,
    /// TLS settings of this frontend when they differ from the global ones
    /// (`;ciphers=...;tls-protos=...`, or a frontend block's keys).
    pub tls: Option<TlsSettings>,
}

/// `[HOST]:PORT[+PEM...][;key=value...]`: a frontend with, optionally, its own
/// certificates and TLS settings (ciphers, ciphersuites, tls-protos, prefer-server-ciphers,
/// sni-nomatch-abort, match-global-certs), as a hitch frontend block gives them.
pub(super) fn parse(spec: &str, global: &TlsSettings) -> Result<Frontend, ConfigError> {
    let bad = |reason: String| ConfigError::BadAddress {
        option: "--frontend",
        value: spec.to_owned(),
        reason,
    };
    let mut sections = spec.split(';');
    let head = sections.next().unwrap_or("");
    let mut parts = head.split('+');
    let endpoint = Endpoint::parse("--frontend", parts.next().unwrap_or(""))?;
    let addrs = endpoint.listen_addrs("--frontend")?;
    let certs = parts
        .map(|p| {
            if p.is_empty() {
                return Err(bad("empty certificate after +".into()));
            }
            Ok(LoadedCert::from_file(std::path::Path::new(p))?)
        })
        .collect::<Result<Vec<_>, ConfigError>>()?;
    let mut tls: Option<TlsSettings> = None;
    let mut match_global_certs = false;
    for setting in sections.filter(|s| !s.trim().is_empty()) {
        let (k, v) = setting
            .split_once('=')
            .ok_or_else(|| bad(format!("{setting:?}: expected key=value")))?;
        let (k, v) = (k.trim(), v.trim());
        let on_off = |v: &str| parse_on_off(v).map_err(|reason| bad(format!("{k}: {reason}")));
        let t = tls.get_or_insert_with(|| global.clone());
        match k {
            "ciphers" | "ciphersuites" => {
                let (tls12, tls13): (Vec<_>, Vec<_>) = t
                    .suites
                    .iter()
                    .partition(|s| s.version() == &rustls::version::TLS12);
                let what = format!("frontend {} {k}", endpoint);
                let (tls12, tls13) = if k == "ciphers" {
                    let kept = params::parse_tls12_ciphers(v)?;
                    (kept.warn(&what, params::CIPHERS_DROPPED), tls13)
                } else {
                    let kept = params::parse_tls13_suites(v)?;
                    (tls12, kept.warn(&what, params::CIPHERS_DROPPED))
                };
                t.suites = tls13.into_iter().chain(tls12).collect();
            }
            "tls-protos" => {
                t.versions = params::parse_protocols(v)?.warn(
                    &format!("frontend {endpoint} tls-protos"),
                    params::PROTOCOLS_DROPPED,
                )
            }
            "prefer-server-ciphers" => t.prefer_server_ciphers = on_off(v)?,
            "sni-nomatch-abort" => t.sni_nomatch_abort = on_off(v)?,
            "match-global-certs" => match_global_certs = on_off(v)?,
            other => {
                return Err(bad(format!(
                    "unknown frontend setting {other:?} (ciphers, ciphersuites, tls-protos, prefer-server-ciphers, sni-nomatch-abort, match-global-certs)"
                )))
            }
        }
    }
    if match_global_certs && certs.is_empty() {
        return Err(bad(
            "match-global-certs needs certificates of the frontend's own".into(),
        ));
    }
    Ok(Frontend {
        endpoint,
        addrs,
        certs,
        match_global_certs,
        tls,
    })
}
