//! The TLS side of a configuration: protocol and cipher choices, ticket keys, the
//! certificates (`--pem-file`, `--pem-dir`, the self-signed default) and their OCSP
//! responses, and what each frontend serves with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;

use super::pem_file::{self, PemFile};
use super::{Cli, Config, ConfigError, Frontend};
use crate::session::tickets::TicketKeys;
use crate::tls::client_auth::{ClientAuth, Mode};
use crate::tls::{params, LoadedCert, TlsSettings};

/// The global TLS settings; `client_ca` is `--client-verify-ca`, loaded.
pub(super) fn settings(
    cli: &Cli,
    client_ca: Option<Arc<RootCertStore>>,
) -> Result<TlsSettings, ConfigError> {
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
        Some(s) => {
            let alpn = params::parse_alpn(s)?;
            tracing::info!(
                name: "config_npn_not_offered",
                "--alpn-protos: offered by ALPN only; NPN (obsolete, and not in rustls) is not offered, a deliberate difference from hitch",
            );
            alpn
        }
        // --http terminates HTTP/2 too: offer it, as HAProxy's `alpn h2,http/1.1` does.
        None if cli.http => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
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
        tracing::warn!(
            name: "config_ticket_keys_ignored",
            "--ticket-keys is ignored: tickets are off",
        );
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
        client_auth: match (cli.client_verify, client_ca) {
            (Mode::None, _) => None,
            (_, None) => {
                return Err(ConfigError::Invalid {
                    option: "--client-verify",
                    reason: "needs --client-verify-ca FILE (the CAs that sign client certificates)"
                        .into(),
                })
            }
            (mode, roots) => ClientAuth::new(mode, roots),
        },
    })
}

/// `--ocsp-resp-file PEM=DER`: checks each response against its certificate and keeps the
/// good ones for stapling (see [`pem_file::staple`]).
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
        let strict = cli
            .ocsp_verify_staple
            .then_some(cli.ocsp_verify_ca.as_deref());
        pem_file::staple(cert, Path::new(der_path), strict, "--ocsp-resp-file")?;
    }
    Ok(())
}

/// What a frontend serves with (see [`Config::frontend_tls`]).
#[derive(Debug)]
pub struct FrontendTls<'a> {
    /// Its TLS settings, with its client verification.
    pub settings: TlsSettings,
    /// Its certificates in hitch's order.
    pub certs: Vec<&'a LoadedCert>,
    /// The index in `certs` of the one served when no name matches.
    pub default: usize,
    /// The certificates with a client verification of their own (an index in `certs`),
    /// and that verification (`None`: ask for no certificate).
    pub by_cert: Vec<(usize, Option<ClientAuth>)>,
}

impl Config {
    /// The TLS settings and certificates a frontend serves with. Session cache, ticket
    /// keys and OCSP staples are the process's; client verification is the certificate's
    /// own, else the frontend's, else the global one, as in hitch.
    /// The certificates come in hitch's order with the index of the default: the frontend's
    /// own (its last is its default), then the global ones when it has none or
    /// match-global-certs is on (the global default when it has none).
    pub fn frontend_tls<'a>(&'a self, fe: &'a Frontend) -> FrontendTls<'a> {
        let mut s = fe.tls.clone().unwrap_or_else(|| self.tls.clone());
        s.tickets = self.tls.tickets.clone();
        s.ocsp = self.tls.ocsp.clone();
        let (mode, ca) = self.frontend_client(fe);
        s.client_auth = ClientAuth::new(mode, ca.clone());
        let mut certs: Vec<&LoadedCert> = fe.certs.iter().collect();
        let default = match certs.len() {
            0 => self.default_cert,
            n => n - 1,
        };
        if certs.is_empty() || fe.match_global_certs {
            certs.extend(self.certs.iter());
        }
        let by_cert = certs
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let v = c.verify.as_ref()?;
                Some((
                    i,
                    ClientAuth::new(v.mode, v.roots.clone().or_else(|| ca.clone())),
                ))
            })
            .collect();
        FrontendTls {
            settings: s,
            certs,
            default,
            by_cert,
        }
    }

    /// A frontend's client verification mode and CAs: its own, else the global ones.
    fn frontend_client(&self, fe: &Frontend) -> (Mode, Option<Arc<RootCertStore>>) {
        (
            fe.client_verify.unwrap_or(self.client_verify),
            fe.client_ca.clone().or_else(|| self.client_ca.clone()),
        )
    }

    /// Every client verification that asks for a certificate has CAs to check it by (its
    /// own, its frontend's or the global ones), as hitch requires.
    pub(super) fn check_client_cas(&self) -> Result<(), ConfigError> {
        for fe in &self.frontends {
            let (mode, ca) = self.frontend_client(fe);
            if mode != Mode::None && ca.is_none() {
                return Err(ConfigError::Invalid {
                    option: "--frontend",
                    reason: format!(
                        "{}: client-verify {} needs a client-verify-ca (the frontend's or the global one)",
                        fe.endpoint,
                        mode.name()
                    ),
                });
            }
            for c in self.frontend_tls(fe).certs {
                let Some(v) = &c.verify else { continue };
                if v.mode != Mode::None && v.roots.is_none() && ca.is_none() {
                    return Err(ConfigError::Invalid {
                        option: "--pem-file",
                        reason: format!(
                            "{}: client-verify {} needs a client-verify-ca (its own, its frontend's {} or the global one)",
                            c.source,
                            v.mode.name(),
                            fe.endpoint
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}

/// The global certificates in hitch's order (`--pem-file`s, which a configuration file's
/// pem-file keys become, then the positional PEM files, then `--pem-dir`'s in name order),
/// the index of the default one, and whether the self-signed default stands in. As in
/// hitch, the last PEM file given is the default; without one, the first of `--pem-dir`.
pub(super) fn load_certs(cli: &Cli) -> Result<(Vec<LoadedCert>, usize, bool), ConfigError> {
    let mut certs = Vec::new();
    for spec in &cli.pem_file {
        let p = PemFile::parse(spec).map_err(|reason| ConfigError::Invalid {
            option: "--pem-file",
            reason,
        })?;
        certs.push(p.load(cli.ocsp_verify_staple, cli.ocsp_verify_ca.as_deref())?);
    }
    for p in &cli.pem_files {
        certs.push(LoadedCert::from_file(p)?);
    }
    let explicit = certs.len();
    if let Some(dir) = &cli.pem_dir {
        certs.extend(pem_dir(dir, cli.pem_dir_glob.as_deref())?);
    } else if cli.pem_dir_glob.is_some() {
        tracing::warn!(
            name: "config_pem_dir_glob_unused",
            "--pem-dir-glob does nothing without --pem-dir",
        );
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
    let files: Vec<(std::ffi::OsString, PathBuf)> = crate::system::files::list_files(dir)
        .map_err(|e| bad(e.to_string()))?
        .into_iter()
        .filter(|(name, _)| {
            pattern
                .as_ref()
                .is_none_or(|p| p.matches(&name.to_string_lossy()))
        })
        .collect();
    let mut certs = Vec::new();
    for (_, path) in files {
        match LoadedCert::from_file(&path) {
            Ok(c) => certs.push(c),
            Err(e) => {
                tracing::warn!(
                    name: "config_pem_dir_skipped",
                    error = %e,
                    path = %path.display(),
                    "--pem-dir: skipping {}: {e}",
                    path.display(),
                )
            }
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
