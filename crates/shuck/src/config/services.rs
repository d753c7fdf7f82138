//! The services of a configuration read as a whole: each named backend and route parsed
//! (an error names which one, so that the file's line is found), TLS to a backend built,
//! and every name they use resolved against the backends and frontends; the plain-HTTP
//! listener's flags (`--redirect-*`), checked against `--acme-http-listen`.

use super::backend::{self, BackendTarget, Preamble};
use super::route::{self, NamedBackend, RouteSpec};
use super::{Cli, ConfigError, Frontend};

/// The named backends and the routes, each checked (an error names which of them, so that
/// the file's line can be found), and every name they use resolved.
pub(super) fn resolve(
    cli: &Cli,
    frontends: &[Frontend],
    global: Preamble,
) -> Result<(Vec<NamedBackend>, Vec<RouteSpec>), ConfigError> {
    fn nth(option: &'static str, index: usize, e: ConfigError) -> ConfigError {
        let reason = match e {
            ConfigError::BadAddress {
                reason, option: o, ..
            } if o == option => reason,
            other => other.to_string(),
        };
        ConfigError::Nth {
            option,
            index,
            reason,
        }
    }
    let backends = cli
        .named_backends
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let b = route::parse_backend(s).map_err(|e| nth("--named-backend", i, e))?;
            let mut b = b;
            if let Some(t) = &b.tls {
                let up = crate::tls::upstream::Upstream {
                    verify: t.verify,
                    ca_file: t.ca_file.as_deref(),
                    cert: t.cert.as_deref(),
                    alpn: &t.alpn,
                };
                let client = crate::tls::upstream::client_config(up)
                    .map_err(|e| nth("--named-backend", i, e.into()))?;
                if b.proto == route::Proto::Auto {
                    let h1 = ["http/1.1".to_owned()];
                    let up = crate::tls::upstream::Upstream { alpn: &h1, ..up };
                    b.tls_client_h1 = Some(
                        crate::tls::upstream::client_config(up)
                            .map_err(|e| nth("--named-backend", i, e.into()))?,
                    );
                }
                for s in &b.servers {
                    crate::tls::upstream::server_name(t.sni.as_deref(), &s.host()).map_err(|e| {
                        nth("--named-backend", i, ConfigError::Invalid {
                            option: "sni",
                            reason: format!("backend {}: server {}: {e}; give sni = \"NAME\"", b.name, s.endpoint),
                        })
                    })?;
                }
                if !t.verify {
                    tracing::warn!(
                        name: "config_backend_unverified",
                        backend = %b.name,
                        "backend {}: verify = none: its servers' certificates are not checked (anyone on the path can stand in for them)",
                        b.name,
                    );
                }
                b.tls_client = Some(client);
            }
            let p = b.preamble.unwrap_or(global);
            if b.proto != route::Proto::Http1 {
                let reason = if !cli.http {
                    Some(format!("backend {}: proto = {} is spoken by the HTTP gateway: it needs --http", b.name, b.proto.as_str()))
                } else if p != Preamble::None {
                    Some(format!("backend {}: proto = {} shares each connection among clients, which the global preamble (--write-proxy-v1/-v2, --write-ip, --proxy-proxy) cannot describe: turn it off in the block (write-proxy-v2 = off)", b.name, b.proto.as_str()))
                } else {
                    None
                };
                if let Some(reason) = reason {
                    return Err(nth("--named-backend", i, ConfigError::Invalid { option: "proto", reason }));
                }
            }
            if !cli.http {
                let http_only = match &b.balance {
                    crate::backend::balance::Balance::Hash { key, .. } if *key != crate::backend::balance::HashKey::Source => Some(format!("hash-key = {}", key.describe())),
                    _ => b.cookie.as_ref().map(|_| "cookie".to_owned()),
                };
                if let Some(what) = http_only {
                    return Err(nth("--named-backend", i, ConfigError::Invalid {
                        option: "balance",
                        reason: format!("backend {}: {what} reads requests: it needs --http (in TCP mode, hash-key = source)", b.name),
                    }));
                }
            }
            let target = BackendTarget::Servers(b.servers.clone());
            backend::check_preamble(p, &target).map_err(|e| nth("--named-backend", i, e))?;
            if p == Preamble::PassThrough && !cli.proxy_proxy {
                return Err(nth(
                    "--named-backend",
                    i,
                    ConfigError::Invalid {
                        option: "proxy-proxy",
                        reason: format!("backend {}: passing the client's PROXY header on needs --proxy-proxy (the header is read from the client side)", b.name),
                    },
                ));
            }
            Ok(b)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let routes = cli
        .routes
        .iter()
        .enumerate()
        .map(|(i, s)| route::parse_route(s).map_err(|e| nth("--route", i, e)))
        .collect::<Result<Vec<_>, _>>()?;
    let fronts: Vec<(String, Option<&str>)> = frontends
        .iter()
        .map(|f| (f.endpoint.to_string(), f.backend.as_deref()))
        .collect();
    route::check(&backends, &routes, &fronts, cli.http)?;
    Ok((backends, routes))
}

/// The plain-HTTP listener's flags; `acme_http` is `--acme-http-listen`'s address, when given.
pub(super) fn redirect(
    cli: &Cli,
    acme_http: Option<std::net::SocketAddr>,
) -> Result<super::redirect::Redirect, ConfigError> {
    let mut listen = Vec::new();
    for spec in &cli.redirect_listen {
        let ep = super::endpoint::Endpoint::parse("--redirect-listen", spec)?;
        for addr in ep.listen_addrs("--redirect-listen")? {
            if Some(addr) == acme_http {
                return Err(ConfigError::Invalid {
                    option: "--acme-http-listen",
                    reason: format!(
                        "{addr} is also a --redirect-listen address, which answers http-01 itself: give it once"
                    ),
                });
            }
            if listen.contains(&addr) {
                return Err(ConfigError::Invalid {
                    option: "--redirect-listen",
                    reason: format!("{addr} given twice"),
                });
            }
            listen.push(addr);
        }
    }
    let given = cli.redirect_code.is_some() || cli.redirect_port.is_some();
    if given && listen.is_empty() && acme_http.is_none() {
        return Err(ConfigError::Invalid {
            option: if cli.redirect_code.is_some() {
                "--redirect-code"
            } else {
                "--redirect-port"
            },
            reason: "no plain HTTP listener to redirect from: give --redirect-listen [HOST]:PORT"
                .into(),
        });
    }
    Ok(super::redirect::Redirect {
        listen,
        code: cli.redirect_code.unwrap_or(308),
        port: cli.redirect_port,
    })
}
