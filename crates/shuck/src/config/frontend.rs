//! `-f [HOST]:PORT[+PEM[,key=value...]...][;key=value...]`: a frontend, with its own
//! certificates (each as `--pem-file` takes it) and TLS settings when it has them.

use std::net::SocketAddr;

use std::sync::Arc;

use rustls::RootCertStore;

use super::cli::parse_on_off;
use super::pem_file::PemFile;
use super::{ConfigError, Endpoint};
use crate::tls::client_auth::{self, Mode};
use crate::tls::{params, LoadedCert, TlsSettings};

/// A frontend: the endpoint as written and the addresses it listens on.
#[derive(Debug, Clone)]
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
    /// Its own client verification (`;client-verify=...`), over the global one.
    pub client_verify: Option<Mode>,
    /// Its own client CAs (`;client-verify-ca=...`).
    pub client_ca: Option<Arc<RootCertStore>>,
    /// The backend its connections go to when no route chooses one (`;backend=NAME`).
    pub backend: Option<String>,
    /// Also serve HTTP/3 over QUIC on its addresses (`--quic`, `;quic=on`).
    pub quic: bool,
    /// Its own access log (`;access-log=TARGET|off`), over `--access-log`.
    pub access_log: Option<crate::access::Own>,
    /// Its own client limits and rules (`;client-max-conns=` and the rest), over the
    /// `--client-*` flags.
    pub clients: super::clients::Own,
    /// `--http`: its level of the edge's policy (header rules, body limit).
    pub policy: super::policy::Policy,
}

/// `[HOST]:PORT[+PEM...][;key=value...]`: a frontend with, optionally, its own
/// certificates and TLS settings (ciphers, ciphersuites, tls-protos, prefer-server-ciphers,
/// sni-nomatch-abort, match-global-certs), as a hitch frontend block gives them.
pub(super) fn parse(
    spec: &str,
    global: &TlsSettings,
    quic_default: bool,
    verify_staple: bool,
    ocsp_ca: Option<&std::path::Path>,
) -> Result<Frontend, ConfigError> {
    let bad = |reason: String| ConfigError::BadAddress {
        option: "--frontend",
        value: spec.to_owned(),
        reason,
    };
    let sections = super::policy::split_spec(spec);
    let mut sections = sections.iter().map(String::as_str);
    let head = sections.next().unwrap_or("");
    let mut parts = head.split('+');
    let endpoint = Endpoint::parse("--frontend", parts.next().unwrap_or(""))?;
    let addrs = endpoint.listen_addrs("--frontend")?;
    let certs = parts
        .map(|p| {
            if p.is_empty() {
                return Err(bad("empty certificate after +".into()));
            }
            PemFile::parse(p)
                .map_err(|reason| bad(format!("certificate {p:?}: {reason}")))?
                .load(verify_staple, ocsp_ca)
        })
        .collect::<Result<Vec<_>, ConfigError>>()?;
    let mut tls: Option<TlsSettings> = None;
    let mut match_global_certs = false;
    let (mut client_verify, mut client_ca) = (None, None);
    let mut backend = None;
    let mut quic = quic_default;
    let mut access_log = None;
    let mut clients = super::clients::Own::default();
    let mut policy = super::policy::Policy::default();
    for setting in sections.filter(|s| !s.trim().is_empty()) {
        let (k, v) = setting
            .split_once('=')
            .ok_or_else(|| bad(format!("{setting:?}: expected key=value")))?;
        let (k, v) = (k.trim(), v.trim());
        let on_off = |v: &str| parse_on_off(v).map_err(|reason| bad(format!("{k}: {reason}")));
        if policy.set(k, v).map_err(&bad)? {
            continue;
        }
        match k {
            "client-verify" => {
                client_verify = Some(Mode::parse(v).map_err(|r| bad(format!("{k}: {r}")))?);
                continue;
            }
            "client-verify-ca" => {
                client_ca = Some(client_auth::load_roots(std::path::Path::new(v))?);
                continue;
            }
            "backend" => {
                backend = Some(v.to_owned());
                continue;
            }
            "quic" => {
                quic = on_off(v)?;
                continue;
            }
            "access-log" => {
                access_log = Some(v.parse().map_err(|r| bad(format!("{k}: {r}")))?);
                continue;
            }
            _ if clients.set(k, v).map_err(|r| bad(format!("{k}: {r}")))? => continue,
            _ => {}
        }
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
                    "unknown frontend setting {other:?} (ciphers, ciphersuites, tls-protos, prefer-server-ciphers, sni-nomatch-abort, match-global-certs, client-verify, client-verify-ca, backend, quic, access-log, client-max-conns, client-conn-rate, client-request-rate, client-allow, client-deny, request-header, response-header, max-body-bytes)"
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
        client_verify,
        client_ca,
        backend,
        quic,
        access_log,
        clients,
        policy,
    })
}

/// `--quic` where it can be served: HTTP/3 is HTTP (`--http`), and QUIC is TLS 1.3 only.
pub(super) fn check_quic(
    frontends: &[Frontend],
    global: &TlsSettings,
    http: bool,
) -> Result<(), ConfigError> {
    for fe in frontends.iter().filter(|f| f.quic) {
        if !http {
            return Err(ConfigError::Invalid {
                option: "--quic",
                reason: format!(
                    "frontend {}: QUIC carries HTTP/3 only, which needs --http (HTTP mode)",
                    fe.endpoint
                ),
            });
        }
        let tls = fe.tls.as_ref().unwrap_or(global);
        if !tls
            .versions
            .iter()
            .any(|v| v.version == rustls::ProtocolVersion::TLSv1_3)
        {
            return Err(ConfigError::Invalid {
                option: "--quic",
                reason: format!(
                    "frontend {}: QUIC needs TLS 1.3, and its tls-protos leaves it out",
                    fe.endpoint
                ),
            });
        }
        if tls
            .suites
            .iter()
            .all(|s| s.version() != &rustls::version::TLS13)
        {
            return Err(ConfigError::Invalid {
                option: "--quic",
                reason: format!(
                    "frontend {}: QUIC needs a TLS 1.3 cipher suite, and its ciphersuites names none",
                    fe.endpoint
                ),
            });
        }
    }
    Ok(())
}

/// What a listening address takes of the port space: an IPv4 or IPv6 address, or every
/// address of a family (`0.0.0.0`; `[::]`, which is dual-stack, takes both).
#[derive(PartialEq, Eq, Hash, Clone, Copy)]
enum Claim {
    Addr(std::net::IpAddr, u16),
    AnyV4(u16),
    AnyV6(u16),
}

fn claims(addr: SocketAddr) -> Vec<Claim> {
    let port = addr.port();
    let ip = match addr.ip() {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
        v4 => v4,
    };
    match ip {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => vec![Claim::AnyV4(port)],
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => {
            vec![Claim::AnyV4(port), Claim::AnyV6(port)]
        }
        ip => vec![Claim::Addr(ip, port)],
    }
}

/// Two frontends listening on the same address (`[*]:443` twice, `[*]:443` and
/// `[0.0.0.0]:443`, `[127.0.0.1]:443` and `[::ffff:127.0.0.1]:443`) are an error, as in
/// hitch ("redundant frontend"): shuck's listeners share ports with `SO_REUSEPORT`, so the
/// kernel would split clients between the two silently.
pub(super) fn check_unique(frontends: &[Frontend]) -> Result<(), ConfigError> {
    let mut seen: std::collections::HashMap<Claim, &Frontend> = std::collections::HashMap::new();
    for fe in frontends {
        for addr in &fe.addrs {
            for c in claims(*addr) {
                if let Some(first) = seen.insert(c, fe) {
                    if !std::ptr::eq(first, fe) {
                        return Err(ConfigError::Invalid {
                            option: "--frontend",
                            reason: format!(
                                "{} and {} both listen on {addr} (a redundant frontend, as hitch says); give each address once",
                                first.endpoint, fe.endpoint
                            ),
                        });
                    }
                }
            }
        }
    }
    Ok(())
}
