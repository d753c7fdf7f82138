//! The block keys, `pem-file = { ... }`, `frontend = { ... }`, `backend = { ... }` and
//! `route = { ... }`, turned into the command-line specs of `--pem-file`, `--frontend`,
//! `--named-backend` and `--route`.

use std::path::Path;

use super::super::cli::parse_on_off;
use super::super::pem_file::{self, PemFile};
use super::{protocol_key, Entry, FileError, Value};

/// `pem-file = "x.pem"` or `pem-file = { cert = "x.pem" private-key = ... }`.
pub(super) fn pem_value(
    v: &Value,
    line: usize,
    err: &dyn Fn(usize, String) -> FileError,
) -> Result<PemFile, FileError> {
    let b = match v {
        Value::Scalar(s) => {
            return Ok(PemFile {
                cert: s.into(),
                ..PemFile::default()
            })
        }
        Value::Block(b) => b,
    };
    let mut p = PemFile::default();
    let mut cert = None;
    for e in b {
        let Value::Scalar(s) = &e.value else {
            return Err(err(
                e.line,
                format!("{} takes a value, not a {{ }} block", e.key),
            ));
        };
        if s.contains(',') && e.key != "cert" {
            return Err(err(
                e.line,
                format!("{}: ',' is not allowed in the value", e.key),
            ));
        }
        let on_off = |s: &str| parse_on_off(s).map_err(|r| err(e.line, format!("{}: {r}", e.key)));
        match e.key.as_str() {
            "cert" => cert = Some(s.clone()),
            "private-key" => p.private_key = Some(s.into()),
            "ocsp-resp-file" => p.ocsp_resp_file = Some(s.into()),
            "ocsp-verify-staple" => p.ocsp_verify_staple = Some(on_off(s)?),
            "client-verify" => {
                p.client_verify = Some(
                    crate::tls::client_auth::Mode::parse(s)
                        .map_err(|r| err(e.line, format!("client-verify: {r}")))?,
                )
            }
            "client-verify-ca" => p.client_verify_ca = Some(s.into()),
            k => {
                return Err(err(
                    e.line,
                    format!(
                        "unknown key {k:?} in a pem-file block (cert, {})",
                        pem_file::KEYS
                    ),
                ))
            }
        }
    }
    let cert = cert.ok_or_else(|| err(line, "pem-file block without cert".into()))?;
    if cert.contains(',') && b.len() > 1 {
        return Err(err(
            line,
            format!(
                "pem-file {cert:?}: a certificate path with ',' cannot take options; rename it"
            ),
        ));
    }
    p.cert = cert.into();
    Ok(p)
}

/// `frontend = { host = "..." port = "..." pem-file = ... }` as `[HOST]:PORT+PEM+PEM`.
pub(super) fn frontend_block(
    path: &Path,
    b: &[Entry],
    err: &dyn Fn(usize, String) -> FileError,
    notes: &mut Vec<String>,
) -> Result<String, FileError> {
    let (mut host, mut port, mut pems) = (None, None, Vec::new());
    let mut settings = Vec::new();
    let mut protocols: Option<(String, usize)> = None;
    let first_line = b.first().map_or(0, |e| e.line);
    for e in b {
        match (e.key.as_str(), &e.value) {
            ("host", Value::Scalar(s)) => host = Some(s.clone()),
            ("port", Value::Scalar(s)) => port = Some(s.clone()),
            ("pem-file", v) => {
                let pem = pem_value(v, e.line, err)?.render();
                if pem.contains(['+', ';']) {
                    return Err(err(e.line, format!("frontend pem-file {pem:?}: '+' and ';' are not allowed in a frontend's certificate paths")));
                }
                pems.push(pem)
            }
            (k @ ("tls" | "ssl" | "tls-protos"), Value::Scalar(v)) => {
                let Some(protos) = protocol_key((path, e.line), k, v, &mut protocols, notes)
                    .map_err(|reason| err(e.line, format!("frontend {reason}")))?
                else {
                    continue;
                };
                crate::tls::params::parse_protocols(&protos)
                    .map_err(|reason| err(e.line, format!("frontend {k}: {reason}")))?;
                settings.push(format!(";tls-protos={protos}"));
            }
            (
                k @ ("ciphers"
                | "ciphersuites"
                | "prefer-server-ciphers"
                | "sni-nomatch-abort"
                | "match-global-certs"
                | "client-verify"
                | "client-verify-ca"
                | "backend"
                | "quic"
                | "access-log"
                | "client-max-conns"
                | "client-conn-rate"
                | "client-request-rate"
                | "client-allow"
                | "client-deny"
                | "request-header"
                | "response-header"
                | "max-body-bytes"
                | "error-page"
                | "maintenance-page"),
                Value::Scalar(v),
            ) => {
                if v.contains(';') && !k.ends_with("-header") {
                    return Err(err(e.line, format!("{k}: ';' is not allowed in the value")));
                }
                // Check the value here, where its line is known.
                let checked = match k {
                    "ciphers" => crate::tls::params::parse_tls12_ciphers(v).map(|_| ()).map_err(|e| e.to_string()),
                    "ciphersuites" => crate::tls::params::parse_tls13_suites(v).map(|_| ()).map_err(|e| e.to_string()),
                    "client-verify" => crate::tls::client_auth::Mode::parse(v).map(drop),
                    "client-verify-ca" | "backend" => Ok(()),
                    "access-log" => v.parse::<crate::access::Own>().map(drop),
                    k if crate::config::clients::KEYS.contains(&k) => {
                        crate::config::clients::check_key(k, v)
                    }
                    k @ ("request-header" | "response-header" | "max-body-bytes" | "error-page"
                    | "maintenance-page") => {
                        crate::config::policy::Policy::default().set(k, v).map(drop)
                    }
                    _ => parse_on_off(v).map(drop),
                };
                checked.map_err(|reason| err(e.line, format!("frontend {k}: {reason}")))?;
                settings.push(format!(";{k}={}", crate::config::policy::escape_spec(v)));
            }
            (k, _) => {
                return Err(err(
                    e.line,
                    format!("unknown key {k:?} in a frontend block (host, port, pem-file, tls, ssl, tls-protos, ciphers, ciphersuites, prefer-server-ciphers, sni-nomatch-abort, match-global-certs, client-verify, client-verify-ca, backend, quic, access-log, client-max-conns, client-conn-rate, client-request-rate, client-allow, client-deny, request-header, response-header, max-body-bytes, error-page, maintenance-page)"),
                ))
            }
        }
    }
    let port = port.ok_or_else(|| err(first_line, "frontend block without port".into()))?;
    let host = host.unwrap_or_else(|| "*".into());
    let host = if host.is_empty() {
        "*".to_owned()
    } else {
        host
    };
    let mut spec = format!("[{host}]:{port}");
    for p in pems {
        spec.push('+');
        spec.push_str(&p);
    }
    for s in settings {
        spec.push_str(&s);
    }
    Ok(spec)
}

/// A `backend = { ... }` or `route = { ... }` block as `key=value;key=value`, each value
/// checked for the separator; `check` then parses the whole (an error names the block's
/// first line, or the key's own when the key alone is at fault).
pub(super) fn keyed_block(
    what: &str,
    b: &[Entry],
    line: usize,
    keys: &str,
    err: &dyn Fn(usize, String) -> FileError,
) -> Result<String, FileError> {
    let mut spec = String::new();
    for e in b {
        let Value::Scalar(v) = &e.value else {
            return Err(err(
                e.line,
                format!("{} takes a value, not a {{ }} block", e.key),
            ));
        };
        if e.key.contains(['=', ';']) {
            return Err(err(e.line, format!("{}: not a key", e.key)));
        }
        if !keys.split(", ").any(|k| k == e.key) {
            return Err(err(
                e.line,
                format!("unknown key {:?} in a {what} block ({keys})", e.key),
            ));
        }
        if !spec.is_empty() {
            spec.push(';');
        }
        spec.push_str(&e.key);
        spec.push('=');
        // A value's ';' (a header rule's) is escaped: the spec's parts are split on the
        // others.
        spec.push_str(&crate::config::policy::escape_spec(v));
    }
    if spec.is_empty() {
        return Err(err(line, format!("an empty {what} block")));
    }
    Ok(spec)
}
