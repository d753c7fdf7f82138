//! The TLS side of a configuration: protocol and cipher choices, ticket keys, the
//! certificates (`--pem-file`, `--pem-dir`, the self-signed default) and their OCSP
//! responses, and what each frontend serves with.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use super::{Cli, Config, ConfigError, Frontend};
use crate::session::tickets::TicketKeys;
use crate::tls::{params, LoadedCert, TlsSettings};

/// The global TLS settings.
pub(super) fn settings(cli: &Cli) -> Result<TlsSettings, ConfigError> {
    let versions = params::parse_protocols(&cli.tls_protos)?;
    let (default12, default13) = params::default_suites();
    let tls12 = match &cli.ciphers {
        Some(s) => params::parse_tls12_ciphers(s)?,
        None => default12,
    };
    let tls13 = match &cli.ciphersuites {
        Some(s) => params::parse_tls13_suites(s)?,
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
    pub fn frontend_tls<'a>(&'a self, fe: &'a Frontend) -> (TlsSettings, Vec<&'a LoadedCert>) {
        let mut s = fe.tls.clone().unwrap_or_else(|| self.tls.clone());
        s.tickets = self.tls.tickets.clone();
        s.ocsp = self.tls.ocsp.clone();
        s.client_auth = self.tls.client_auth.clone();
        let mut certs: Vec<&LoadedCert> = fe.certs.iter().collect();
        if certs.is_empty() || fe.match_global_certs {
            certs.extend(self.certs.iter());
        }
        (s, certs)
    }
}

/// The global certificates, and whether the self-signed default stands in for them.
pub(super) fn load_certs(cli: &Cli) -> Result<(Vec<LoadedCert>, bool), ConfigError> {
    let mut paths: Vec<PathBuf> = cli.pem_files.clone();
    if let Some(dir) = &cli.pem_dir {
        let bad = |reason: String| ConfigError::PemDir {
            path: dir.clone(),
            reason,
        };
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| bad(e.to_string()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "pem"))
            .collect();
        if found.is_empty() {
            return Err(bad("holds no *.pem file".into()));
        }
        found.sort();
        paths.extend(found);
    }
    if paths.is_empty() {
        return Ok((vec![crate::tls::selfsigned::generate()?], true));
    }
    let certs = paths
        .iter()
        .map(|p| LoadedCert::from_file(p))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((certs, false))
}
