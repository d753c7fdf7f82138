//! Single flags checked into the values a `Config` holds: the log level, the client
//! certificate header's name, CA files, the metrics address, OCSP trust, HTTP/2's limits.

use std::net::{Ipv4Addr, SocketAddr};

use tracing::level_filters::LevelFilter;

use super::{Cli, ConfigError, Endpoint, H2Limits};

/// The effective log level: `-q` wins over `-L`.
pub fn log_level(cli: &Cli) -> LevelFilter {
    if cli.quiet {
        LevelFilter::ERROR
    } else {
        cli.log_level
    }
}

/// Whether `name` is a header that frames or routes a message, or one shuck sets itself,
/// compared as backends compare (case folded, `_` as `-`): a flag that names a header
/// shuck writes or strips may name none of them.
fn is_reserved(name: &str) -> bool {
    let folded = name.to_ascii_lowercase().replace('_', "-");
    [
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
        "proxy-connection",
        "x-forwarded-for",
        "x-forwarded-proto",
        "forwarded",
    ]
    .contains(&folded.as_str())
}

pub(super) fn client_cert_header(cli: &Cli) -> Result<Option<String>, ConfigError> {
    let Some(name) = &cli.client_cert_header else {
        return Ok(None);
    };
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(ConfigError::Invalid {
            option: "--client-cert-header",
            reason: format!("{name:?} is not an HTTP header name"),
        });
    }
    if is_reserved(name) {
        return Err(ConfigError::Invalid {
            option: "--client-cert-header",
            reason: format!("{name} is a header shuck or HTTP already uses; choose another (e.g. X-SSL-Client-Subject)"),
        });
    }
    if !cli.http {
        tracing::warn!(
            name: "config_client_cert_header_ignored",
            "--client-cert-header needs --http; it is ignored",
        );
    }
    if cli.client_verify == crate::tls::client_auth::Mode::None
        && (cli.proxy_client_cert || cli.client_cert_header.is_some())
    {
        tracing::warn!(
            name: "config_client_cert_never_asked",
            "--proxy-client-cert/--client-cert-header: --client-verify is none, so no client certificate is ever asked for",
        );
    }
    Ok(Some(name.clone()))
}

/// A PEM file of CA certificates for a TLS client of shuck's (`--shared-store-ca`,
/// `--acme-ca-file`), checked here, where the error can name the option and the file (the
/// client parses it again).
pub(super) fn read_ca_file(
    option: &'static str,
    path: &std::path::Path,
) -> Result<Vec<u8>, ConfigError> {
    use rustls::pki_types::pem::PemObject;
    let bad = |reason: String| ConfigError::Invalid {
        option,
        reason: format!("{}: {reason}", path.display()),
    };
    let pem =
        crate::system::files::read(path, 1 << 20, "a CA file").map_err(|e| bad(e.to_string()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| bad(format!("malformed PEM: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| bad(format!("a certificate unusable as a CA: {e}")))?;
    }
    if roots.is_empty() {
        return Err(bad("holds no certificate".into()));
    }
    Ok(pem)
}

pub(super) fn stats_addr(cli: &Cli) -> Result<Option<SocketAddr>, ConfigError> {
    let Some(spec) = &cli.stats else {
        return Ok(None);
    };
    if let Ok(port) = spec.trim().parse::<u16>() {
        if port == 0 {
            return Err(ConfigError::BadAddress {
                option: "--stats",
                value: spec.clone(),
                reason: "the port must be a number from 1 to 65535".into(),
            });
        }
        return Ok(Some(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)));
    }
    let ep = Endpoint::parse("--stats", spec)?;
    let addrs = ep.listen_addrs("--stats")?;
    Ok(addrs.first().copied())
}

/// `--ocsp-dir` with `--ocsp-verify-staple`: the anchors a fetched response's delegated
/// responder must chain to, as for a response given by file (a system store that cannot be
/// read is kept as the reason such a response is refused; a bad `--ocsp-verify-ca` is an
/// error now).
pub(super) fn ocsp_trust(
    cli: &Cli,
) -> Result<Option<crate::tls::ocsp::manager::Anchors>, ConfigError> {
    if !cli.ocsp_verify_staple {
        return Ok(None);
    }
    crate::tls::ocsp::trust::anchors(cli.ocsp_verify_ca.as_deref())
        .map(|a| Some(a.map(std::sync::Arc::new)))
        .map_err(|e| ConfigError::Invalid {
            option: "--ocsp-verify-staple",
            reason: format!("the trust anchors for --ocsp-dir's responses cannot be read: {e}"),
        })
}

/// Checks the HTTP/2 limits: each within what RFC 9113 allows and a proxy can honour.
/// `--quic-retry`'s value.
pub fn parse_quic_retry(s: &str) -> Result<super::QuicRetry, String> {
    use super::QuicRetry;
    match s.to_ascii_lowercase().as_str() {
        "always" => Ok(QuicRetry::Always),
        "never" | "off" => Ok(QuicRetry::Never),
        n => n
            .parse::<u32>()
            .ok()
            .filter(|&n| n > 0)
            .map(QuicRetry::Above)
            .ok_or_else(|| {
                format!("{s:?} is not always, never or a number of new connections a second (1 or more)")
            }),
    }
}

/// `--h3-*` and `--alt-svc-max-age`, checked.
pub(super) fn h3_limits(cli: &Cli) -> Result<super::H3Limits, ConfigError> {
    if !(1..=10_000).contains(&cli.h3_max_concurrent_streams) {
        return Err(ConfigError::Invalid {
            option: "--h3-max-concurrent-streams",
            reason: format!(
                "{} is not between 1 and 10000",
                cli.h3_max_concurrent_streams
            ),
        });
    }
    if cli.quic_early_data && cli.session_cache == 0 {
        return Err(ConfigError::Invalid {
            option: "--quic-early-data",
            reason: "0-RTT is accepted only with single-use tickets kept in the session cache, \
                     and --session-cache is 0"
                .into(),
        });
    }
    Ok(super::H3Limits {
        max_concurrent_streams: cli.h3_max_concurrent_streams,
        stream_window: 1 << 20,
        max_incoming: 4096,
        alt_svc_max_age: cli.alt_svc_max_age,
        retry: cli.quic_retry,
        early_data: cli.quic_early_data,
        mtu_discovery: cli.quic_mtu_discovery,
        migration: cli.quic_migration,
    })
}

pub(super) fn h2_limits(cli: &Cli) -> Result<H2Limits, ConfigError> {
    for (option, value, lo, hi) in [
        (
            "--h2-max-concurrent-streams",
            cli.h2_max_concurrent_streams,
            1,
            65_535,
        ),
        ("--h2-max-resets", cli.h2_max_resets, 1, 1_000_000),
        (
            "--http-max-backend-conns",
            cli.http_max_backend_conns,
            1,
            65_535,
        ),
        // RFC 9113 §6.5.2: at most 2^31-1; 16 times it must still fit the connection's.
        (
            "--h2-initial-window-size",
            cli.h2_initial_window_size,
            1024,
            (1 << 27) - 1,
        ),
    ] {
        if !(lo..=hi).contains(&value) {
            return Err(ConfigError::Invalid {
                option,
                reason: format!("{value} is out of range: {lo} to {hi}"),
            });
        }
    }
    Ok(H2Limits {
        max_concurrent_streams: cli.h2_max_concurrent_streams,
        max_resets: cli.h2_max_resets,
        initial_window: cli.h2_initial_window_size,
        max_backend_conns: cli.http_max_backend_conns,
    })
}

/// `--access-log`, the frontends' own, and the flags that shape them; those flags without
/// any access log are an error, not silently nothing.
pub(super) fn access_log(
    cli: &Cli,
    frontends: &[super::Frontend],
) -> Result<Option<crate::access::Settings>, ConfigError> {
    use crate::access::{Format, Policy, Settings};
    let policy = Policy {
        format: cli.access_log_format.clone(),
        errors_only: cli.access_log_errors_only,
        sample: cli.access_log_sample,
    };
    let own = frontends.iter().filter_map(|f| f.access_log.as_ref());
    if let Some(settings) = Settings::new(cli.access_log.as_ref(), own, policy.clone()) {
        return Ok(Some(settings));
    }
    let given = [
        ("--access-log-format", policy.format != Format::Combined),
        ("--access-log-errors-only", policy.errors_only),
        ("--access-log-sample", policy.sample != 1),
    ];
    match given.iter().find(|g| g.1) {
        Some((option, _)) => Err(ConfigError::Invalid {
            option,
            reason: "needs --access-log (where the lines go)".into(),
        }),
        None => Ok(None),
    }
}

/// `--trusted-proxies`: the peers whose forwarding fields name their requests' clients
/// (HTTP mode's).
pub(super) fn trusted_proxies(
    cli: &Cli,
) -> Result<Option<std::sync::Arc<crate::clients::CidrList>>, ConfigError> {
    if cli.trusted_proxies.is_empty() {
        return Ok(None);
    }
    let bad = |reason: String| ConfigError::Invalid {
        option: "--trusted-proxies",
        reason,
    };
    if !cli.http {
        return Err(bad(
            "needs --http (it reads each request's X-Forwarded-For; in TCP mode a proxy's PROXY header gives the client: --proxy-proxy)".into(),
        ));
    }
    let mut trusted = crate::clients::CidrList::default();
    for v in &cli.trusted_proxies {
        trusted
            .0
            .extend(crate::clients::CidrList::parse_value(v).map_err(bad)?.0);
    }
    if trusted.0.is_empty() {
        return Err(bad("no address in it (a file emptied?)".into()));
    }
    Ok(Some(std::sync::Arc::new(trusted)))
}

/// `--request-id-header` and `--request-id-response`: HTTP mode's, the second only with the
/// first.
pub(super) fn request_id(
    cli: &Cli,
) -> Result<Option<std::sync::Arc<crate::access::request_id::Spec>>, ConfigError> {
    match (&cli.request_id_header, cli.request_id_response) {
        (None, false) => Ok(None),
        (None, true) => Err(ConfigError::Invalid {
            option: "--request-id-response",
            reason: "needs --request-id-header (the header the ID goes in)".into(),
        }),
        (Some(_), _) if !cli.http => Err(ConfigError::Invalid {
            option: "--request-id-header",
            reason: "needs --http (a TCP relay has no requests)".into(),
        }),
        (Some(name), _) if is_reserved(name) => Err(ConfigError::Invalid {
            option: "--request-id-header",
            reason: format!(
                "{name} is a header shuck or HTTP already uses; choose another (e.g. X-Request-ID)"
            ),
        }),
        (Some(name), _)
            if cli
                .client_cert_header
                .as_deref()
                .is_some_and(|c| c.to_ascii_lowercase().replace('_', "-") == *name) =>
        {
            Err(ConfigError::Invalid {
                option: "--request-id-header",
                reason: format!("{name} is --client-cert-header's too; give each its own"),
            })
        }
        (Some(name), respond) => {
            let trusted = trusted_proxies(cli)?
                .map(|t| (*t).clone())
                .unwrap_or_default();
            Ok(Some(std::sync::Arc::new(crate::access::request_id::Spec {
                name: name.clone(),
                respond,
                trusted,
            })))
        }
    }
}

/// The global level of the edge's policy (`--request-header`, `--response-header`,
/// `--max-body-bytes`); `--hsts` and they need `--http`.
pub(super) fn global_policy(cli: &Cli) -> Result<super::policy::Policy, ConfigError> {
    use super::policy::{Direction, Policy};
    let given = [
        ("--request-header", !cli.request_header.is_empty()),
        ("--response-header", !cli.response_header.is_empty()),
        ("--hsts", cli.hsts.is_some()),
        ("--max-body-bytes", cli.max_body_bytes.0.is_some()),
        ("--error-page", !cli.error_page.is_empty()),
        ("--maintenance-page", cli.maintenance_page.is_some()),
    ];
    if let Some((option, _)) = given.iter().find(|(_, g)| *g).filter(|_| !cli.http) {
        return Err(ConfigError::Invalid {
            option,
            reason: "needs --http (a TCP relay has no requests to apply it to)".into(),
        });
    }
    let mut p = Policy {
        max_body: Some(cli.max_body_bytes.0),
        ..Policy::default()
    };
    for (option, list, dir) in [
        ("--request-header", &cli.request_header, Direction::Request),
        (
            "--response-header",
            &cli.response_header,
            Direction::Response,
        ),
    ] {
        for rule in list {
            let key = if dir == Direction::Request {
                "request-header"
            } else {
                "response-header"
            };
            p.set(key, rule)
                .map_err(|reason| ConfigError::Invalid { option, reason })?;
        }
    }
    if let Some(page) = &cli.maintenance_page {
        p.set("maintenance-page", page)
            .map_err(|reason| ConfigError::Invalid {
                option: "--maintenance-page",
                reason,
            })?;
    }
    for page in &cli.error_page {
        p.set("error-page", page)
            .map_err(|reason| ConfigError::Invalid {
                option: "--error-page",
                reason,
            })?;
    }
    check_policy_names(cli, &p).map_err(|reason| ConfigError::Invalid {
        option: "--request-header",
        reason,
    })?;
    Ok(p)
}

/// Each level's own policy: only in `--http` mode, and no request rule writing a field
/// another option owns (the error names the level).
pub(super) fn policy_levels(
    cli: &Cli,
    frontends: &[super::Frontend],
    backends: &[super::NamedBackend],
    routes: &[super::RouteSpec],
) -> Result<(), ConfigError> {
    let levels = (frontends
        .iter()
        .map(|f| (format!("frontend {}", f.endpoint), &f.policy)))
    .chain(
        backends
            .iter()
            .map(|b| (format!("backend {}", b.name), &b.policy)),
    )
    .chain(
        routes
            .iter()
            .enumerate()
            .map(|(i, r)| (format!("route {}", i + 1), &r.policy)),
    );
    for (what, p) in levels {
        if p.is_empty() {
            continue;
        }
        if !cli.http {
            return Err(ConfigError::Invalid {
                option: "--http",
                reason: format!(
                    "{what} gives {}, which needs --http (a TCP relay has no requests)",
                    super::policy::POLICY_KEYS
                ),
            });
        }
        check_policy_names(cli, p).map_err(|reason| ConfigError::Invalid {
            option: "request-header",
            reason: format!("{what}: {reason}"),
        })?;
    }
    Ok(())
}

/// A request rule may not write the fields shuck writes by other options (the request's
/// ID, the client certificate's subject): the backend would get two claims.
pub(super) fn check_policy_names(cli: &Cli, p: &super::policy::Policy) -> Result<(), String> {
    let Some(rules) = &p.request else {
        return Ok(());
    };
    let folded = |s: &str| s.to_ascii_lowercase().replace('_', "-");
    let owned: Vec<(String, &str)> = [
        cli.request_id_header
            .as_deref()
            .map(|n| (folded(n), "--request-id-header")),
        cli.client_cert_header
            .as_deref()
            .map(|n| (folded(n), "--client-cert-header")),
    ]
    .into_iter()
    .flatten()
    .collect();
    for r in &rules.0 {
        if let Some((_, by)) = owned.iter().find(|(n, _)| *n == r.lower.as_str()) {
            return Err(format!("{}: shuck writes it itself ({by})", r.name));
        }
    }
    Ok(())
}
