//! The TLS side of a configuration: protocol and cipher choices, ticket keys, the
//! certificates (`--pem-file`, `--pem-dir`, the self-signed default) and their OCSP
//! responses, and what each frontend serves with.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::{Cli, Config, ConfigError, Frontend};
use crate::session::tickets::TicketKeys;
use crate::tls::{params, LoadedCert, TlsSettings};

/// The global TLS settings.
pub(super) fn settings(cli: &Cli) -> Result<TlsSettings, ConfigError> {
    // hitch's deprecated switches stand for protocol lists (--tls-protos gives way to them).
    let (option, protos) = if cli.ssl {
        ("--ssl", params::SSL_SWITCH_PROTOS)
    } else if cli.tls {
        ("--tls", params::TLS_SWITCH_PROTOS)
    } else {
        ("--tls-protos", cli.tls_protos.as_str())
    };
    let versions = params::parse_protocols(protos)?.warn(option, params::PROTOCOLS_DROPPED);
    let (default12, default13) = params::default_suites();
    let tls12 = match &cli.ciphers {
        Some(s) => params::parse_tls12_ciphers(s)?.warn("--ciphers", params::CIPHERS_DROPPED),
        None => default12,
    };
    let tls13 = match &cli.ciphersuites {
        Some(s) => params::parse_tls13_suites(s)?.warn("--ciphersuites", params::CIPHERS_DROPPED),
        None => default13,
    };
    let groups = match &cli.ecdh_curve {
        Some(s) => params::parse_groups(s)?,
        None => rustls::crypto::aws_lc_rs::DEFAULT_KX_GROUPS.to_vec(),
    };
    let alpn = match &cli.alpn_protos {
        Some(s) => params::parse_alpn(s)?,
        None => Vec::new(),
    };
    let tickets_on = cli.tickets && !cli.no_tickets;
    let tickets = match (&cli.ticket_keys, tickets_on) {
        (_, false) => None,
        (Some(path), true) => Some(Arc::new(TicketKeys::from_file(path, cli.session_timeout)?)),
        (None, true) => Some(Arc::new(TicketKeys::rotating(
            cli.ticket_rotate,
            cli.session_timeout,
        )?)),
    };
    if cli.ticket_keys.is_some() && !tickets_on {
        tracing::warn!("--ticket-keys is ignored: tickets are off");
    }
    Ok(TlsSettings {
        session_cache: cli.session_cache,
        session_timeout: cli.session_timeout,
        tickets,
        versions,
        suites: tls13.into_iter().chain(tls12).collect(),
        groups,
        alpn,
        prefer_server_ciphers: cli.prefer_server_ciphers,
        sni_nomatch_abort: cli.sni_nomatch_abort,
        ocsp: None,
        client_auth: crate::tls::client_auth::ClientAuth::load(
            cli.client_verify,
            cli.client_verify_ca.as_deref(),
        )?,
    })
}

/// `--ocsp-resp-file PEM=DER`: checks each response against its certificate and keeps the
/// good ones for stapling; a bad response is logged and not stapled.
pub(super) fn attach_ocsp_files(cli: &Cli, certs: &mut [LoadedCert]) -> Result<(), ConfigError> {
    for spec in &cli.ocsp_resp_file {
        let bad = |reason: String| ConfigError::Invalid {
            option: "--ocsp-resp-file",
            reason: format!("{spec:?}: {reason}"),
        };
        let (pem, der_path) = spec.rsplit_once('=').ok_or_else(|| {
            bad("expected PEM=DER (a certificate file and its OCSP response)".into())
        })?;
        let cert = certs
            .iter_mut()
            .find(|c| c.source == pem)
            .ok_or_else(|| bad(format!("{pem} is not one of the certificates given")))?;
        let der =
            std::fs::read(der_path).map_err(|e| bad(format!("cannot read {der_path}: {e}")))?;
        let chain = &cert.key.cert;
        let (Some(leaf), Some(issuer)) = (chain.first(), chain.get(1)) else {
            tracing::warn!(certificate = %pem, "OCSP response {der_path} not stapled: the issuer is not in the PEM file, so the response cannot be checked");
            continue;
        };
        match crate::tls::ocsp::verify::verify(&der, leaf, issuer, SystemTime::now()) {
            Ok(_) => {
                tracing::info!(certificate = %pem, "stapling the OCSP response {der_path}");
                cert.ocsp = Some(der);
            }
            Err(e) => {
                tracing::warn!(certificate = %pem, "OCSP response {der_path} not stapled: {e}")
            }
        }
    }
    Ok(())
}

impl Config {
    /// The TLS settings and certificates a frontend serves with. Session cache, ticket
    /// keys, OCSP staples and client verification are the process's.
    /// The certificates come in hitch's order with the index of the default: the frontend's
    /// own (its last is its default), then the global ones when it has none or
    /// match-global-certs is on (the global default when it has none).
    pub fn frontend_tls<'a>(
        &'a self,
        fe: &'a Frontend,
    ) -> (TlsSettings, Vec<&'a LoadedCert>, usize) {
        let mut s = fe.tls.clone().unwrap_or_else(|| self.tls.clone());
        s.tickets = self.tls.tickets.clone();
        s.ocsp = self.tls.ocsp.clone();
        s.client_auth = self.tls.client_auth.clone();
        let mut certs: Vec<&LoadedCert> = fe.certs.iter().collect();
        let default = match certs.len() {
            0 => self.default_cert,
            n => n - 1,
        };
        if certs.is_empty() || fe.match_global_certs {
            certs.extend(self.certs.iter());
        }
        (s, certs, default)
    }
}

/// The global certificates in hitch's order (the PEM files given, then `--pem-dir`'s in name
/// order), the index of the default one, and whether the self-signed default stands in.
/// As in hitch, the last PEM file given is the default; without one, the first of
/// `--pem-dir`.
pub(super) fn load_certs(cli: &Cli) -> Result<(Vec<LoadedCert>, usize, bool), ConfigError> {
    let mut certs = cli
        .pem_files
        .iter()
        .map(|p| LoadedCert::from_file(p))
        .collect::<Result<Vec<_>, _>>()?;
    let explicit = certs.len();
    if let Some(dir) = &cli.pem_dir {
        certs.extend(pem_dir(dir, cli.pem_dir_glob.as_deref())?);
    } else if cli.pem_dir_glob.is_some() {
        tracing::warn!("--pem-dir-glob does nothing without --pem-dir");
    }
    if certs.is_empty() {
        return Ok((vec![crate::tls::selfsigned::generate()?], 0, true));
    }
    Ok((certs, explicit.saturating_sub(1), false))
}

/// `--pem-dir`: every regular file (symbolic links are not followed, as hitch), or those
/// matching `glob`, in name order; a file that is not a certificate and its key is skipped
/// with a warning.
fn pem_dir(dir: &Path, glob: Option<&str>) -> Result<Vec<LoadedCert>, ConfigError> {
    let bad = |reason: String| ConfigError::PemDir {
        path: dir.to_owned(),
        reason,
    };
    let pattern = glob
        .map(glob::Pattern::new)
        .transpose()
        .map_err(|e| ConfigError::Invalid {
            option: "--pem-dir-glob",
            reason: format!("{:?}: {e}", glob.unwrap_or_default()),
        })?;
    let mut files: Vec<(std::ffi::OsString, PathBuf)> = std::fs::read_dir(dir)
        .map_err(|e| bad(e.to_string()))?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| {
            pattern
                .as_ref()
                .is_none_or(|p| p.matches(&e.file_name().to_string_lossy()))
        })
        .map(|e| (e.file_name(), e.path()))
        .collect();
    files.sort();
    let mut certs = Vec::new();
    for (_, path) in files {
        match LoadedCert::from_file(&path) {
            Ok(c) => certs.push(c),
            Err(e) => tracing::warn!("--pem-dir: skipping {}: {e}", path.display()),
        }
    }
    if certs.is_empty() {
        return Err(bad(match glob {
            Some(g) => format!("no file matching {g:?} holds a certificate and its key"),
            None => "no file holds a certificate and its key".into(),
        }));
    }
    Ok(certs)
}
