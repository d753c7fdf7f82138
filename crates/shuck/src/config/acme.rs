//! `--acme-*`: automatic certificates, checked into [`acme::Settings`].

use std::collections::HashSet;

use base64::Engine;
use rustls::pki_types::DnsName;

use super::endpoint::Endpoint;
use super::{Cli, ConfigError};
use crate::acme::{self, Challenge, KeyType};

/// Bound on the CA and HMAC key files.
const MAX_FILE: u64 = 1024 * 1024;

fn invalid(option: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        option,
        reason: reason.into(),
    }
}

/// The ACME settings, or `None` without `--acme-directory`.
pub(super) fn settings(cli: &Cli) -> Result<Option<acme::Settings>, ConfigError> {
    let Some(directory) = cli.acme_directory.as_deref().filter(|d| !d.is_empty()) else {
        if !cli.acme_domain.is_empty() {
            return Err(invalid(
                "--acme-domain",
                "needs --acme-directory URL (the ACME CA to order from)",
            ));
        }
        return Ok(None);
    };
    let rest = directory
        .strip_prefix("https://")
        .ok_or_else(|| ConfigError::BadAddress {
            option: "--acme-directory",
            value: directory.to_owned(),
            reason: "not an https:// URL (ACME is spoken over HTTPS only)".into(),
        })?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty()
        || directory
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ConfigError::BadAddress {
            option: "--acme-directory",
            value: directory.to_owned(),
            reason: "not a URL with a host".into(),
        });
    }
    if cli.acme_domain.is_empty() {
        return Err(invalid(
            "--acme-directory",
            "needs at least one --acme-domain NAMES (the names of a certificate)",
        ));
    }
    if !cli.acme_agree_tos {
        return Err(invalid(
            "--acme-directory",
            "needs --acme-agree-tos: the CA's terms of service must be agreed to before an account is created",
        ));
    }
    let mut seen = HashSet::new();
    let mut domains = Vec::new();
    for spec in &cli.acme_domain {
        let mut names = Vec::new();
        for name in spec.split(',').map(str::trim) {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if name.is_empty() {
                return Err(invalid("--acme-domain", format!("{spec:?}: an empty name")));
            }
            if name.starts_with("*.") {
                return Err(invalid(
                    "--acme-domain",
                    format!("{name}: a wildcard needs the dns-01 challenge, which shuck does not answer"),
                ));
            }
            if DnsName::try_from(name.as_str()).is_err() || name.parse::<std::net::IpAddr>().is_ok()
            {
                return Err(invalid(
                    "--acme-domain",
                    format!("{name:?} is not a DNS name"),
                ));
            }
            if !seen.insert(name.clone()) {
                return Err(invalid(
                    "--acme-domain",
                    format!("{name} is named twice (each name belongs to one certificate)"),
                ));
            }
            names.push(name);
        }
        domains.push(names);
    }
    let contacts = cli
        .acme_contact
        .iter()
        .map(|c| {
            if c.contains(':') {
                c.clone()
            } else {
                format!("mailto:{c}")
            }
        })
        .collect();
    let challenge = match cli.acme_challenge.as_str() {
        "tls-alpn-01" => Challenge::TlsAlpn01,
        "http-01" => Challenge::Http01,
        other => {
            return Err(invalid(
                "--acme-challenge",
                format!("{other:?} is not tls-alpn-01 or http-01"),
            ))
        }
    };
    let http_listen = match &cli.acme_http_listen {
        None if challenge == Challenge::Http01 && cli.redirect_listen.is_empty() => {
            return Err(invalid(
                "--acme-challenge",
                "http-01 needs --redirect-listen or --acme-http-listen [HOST]:PORT (usually :80), where the CA asks",
            ))
        }
        None => None,
        Some(spec) => {
            let ep = Endpoint::parse("--acme-http-listen", spec)?;
            ep.listen_addrs("--acme-http-listen")?.first().copied()
        }
    };
    let key_type = KeyType::ALL
        .iter()
        .find(|(n, _)| *n == cli.acme_key_type)
        .map(|(_, k)| *k)
        .ok_or_else(|| {
            invalid(
                "--acme-key-type",
                format!(
                    "{:?} is not one of {}",
                    cli.acme_key_type,
                    KeyType::ALL.map(|(n, _)| n).join(", ")
                ),
            )
        })?;
    if let Some(path) = &cli.acme_ca_file {
        super::values::read_ca_file("--acme-ca-file", path)?;
    }
    let eab = match (&cli.acme_eab_kid, &cli.acme_eab_hmac_key) {
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            return Err(invalid(
                "--acme-eab-kid",
                "external account binding needs both --acme-eab-kid and --acme-eab-hmac-key",
            ))
        }
        (Some(kid), Some(path)) => {
            let bad = |reason: String| {
                invalid(
                    "--acme-eab-hmac-key",
                    format!("{}: {reason}", path.display()),
                )
            };
            let text = crate::system::files::read_to_string(path, MAX_FILE, "an HMAC key file")
                .map_err(|e| bad(e.to_string()))?;
            let b64 = text.trim().trim_end_matches('=');
            let key = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(b64)
                .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(b64))
                .map_err(|_| bad("not base64url (the HMAC key as the CA gave it)".into()))?;
            if key.is_empty() {
                return Err(bad("empty".into()));
            }
            Some((kid.clone(), key))
        }
    };
    Ok(Some(acme::Settings {
        directory: directory.to_owned(),
        domains,
        contacts,
        state: cli.acme_state.clone(),
        challenge,
        http_listen,
        ca_file: cli.acme_ca_file.clone(),
        key_type,
        eab,
        farm: None,
    }))
}
