//! Several services behind one terminator: named backends (`--named-backend`, a
//! `backend = { ... }` block) and the routes that choose them (`--route`, a
//! `route = { ... }` block; a frontend's `backend = NAME`). The command line's `-b` and a
//! top-level `backend = "ADDRESS"` stay the default backend, so a hitch configuration means
//! what it always meant.

use std::path::PathBuf;
use std::time::Duration;

use super::backend::{BackendEndpoint, BackendSpec, Preamble};
use super::cli::parse_on_off;
use super::ConfigError;

/// The name the default backend (`-b`) answers to in routes and metrics.
pub const DEFAULT_BACKEND: &str = "default";

/// The keys of a backend block, for messages.
pub const BACKEND_KEYS: &str = "name, server, write-proxy-v1, write-proxy-v2, write-ip, proxy-proxy, connect-timeout, tls, verify, ca-file, sni, cert, alpn, proto, max-streams, balance, hash-key, hash-balance-factor, cookie";

/// The keys of a route block, for messages.
pub const ROUTE_KEYS: &str = "sni, host, path-prefix, backend, client-allow, client-deny";

/// A backend with a name, its servers and its own way of being reached.
#[derive(Debug, Clone)]
pub struct NamedBackend {
    /// How routes and logs name it.
    pub name: String,
    /// Its servers, as `-b` takes them.
    pub servers: Vec<BackendSpec>,
    /// Its own preamble; `None`: the global one (`--write-proxy-*`, `--write-ip`).
    pub preamble: Option<Preamble>,
    /// Its own connect timeout; `None`: `--backend-connect-timeout`.
    pub connect_timeout: Option<Duration>,
    /// TLS to its servers, when on.
    pub tls: Option<UpstreamTls>,
    /// With `tls`: the client configuration its connections share (built once the whole
    /// configuration is read, so that its files are read with the rest).
    pub tls_client: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// With `proto = auto`: the configuration of its HTTP/1.1 connections, which offer
    /// `http/1.1` alone (so that a server able to speak both speaks HTTP/1.1 on them).
    pub tls_client_h1: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// `--http`: the HTTP version its servers speak (`proto`).
    pub proto: Proto,
    /// `proto = h2`: most streams at once on one shared connection (`max-streams`),
    /// under each server's own `SETTINGS_MAX_CONCURRENT_STREAMS`.
    pub max_streams: usize,
    /// How its servers share the work (`balance`, `hash-key`, `hash-balance-factor`).
    pub balance: crate::backend::balance::Balance,
    /// `--http`: the sticky cookie naming a client's server (`cookie`).
    pub cookie: Option<String>,
}

/// Streams one shared HTTP/2 backend connection carries at most, unless `max-streams`
/// says otherwise (the number most servers announce).
pub const MAX_STREAMS: usize = 100;

/// The HTTP version a backend's servers speak in `--http` mode (`proto` in its block).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Proto {
    /// `http/1.1` (the default): a keep-alive connection per client connection, one
    /// request at a time on each.
    #[default]
    Http1,
    /// `h2`: HTTP/2, with prior knowledge in clear (h2c) or by ALPN over TLS; a worker's
    /// connections to a server are shared by all its clients.
    H2,
    /// `auto` (TLS only): ALPN offers `h2,http/1.1`, and the server's pick is spoken.
    Auto,
}

impl Proto {
    /// As the configuration and the admin API spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Http1 => "http/1.1",
            Proto::H2 => "h2",
            Proto::Auto => "auto",
        }
    }

    /// What ALPN offers over TLS for it; `None`: the block's own `alpn`.
    fn alpn(self) -> Option<&'static [&'static str]> {
        match self {
            Proto::Http1 => None,
            Proto::H2 => Some(&["h2"]),
            Proto::Auto => Some(&["h2", "http/1.1"]),
        }
    }
}

/// `tls = on` in a backend block: how shuck speaks TLS to the servers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamTls {
    /// `verify = required` (the default) or `none`.
    pub verify: bool,
    /// `ca-file`: the anchors; `None`: the system's store.
    pub ca_file: Option<PathBuf>,
    /// `sni`: the name verified and sent; `None`: each server's host.
    pub sni: Option<String>,
    /// `cert`: a PEM file with the client certificate and its key.
    pub cert: Option<PathBuf>,
    /// `alpn`: protocols offered, comma-separated in the block.
    pub alpn: Vec<String>,
}

/// What a route matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RouteMatch {
    /// The server name of the handshake (`sni = "..."`, `*.example.com` allowed); in
    /// `--http` mode also a request's `Host` when no host route took it.
    Sni(String),
    /// `--http`: a request's `Host` or `:authority` (wildcards too) and, optionally, the
    /// start of its path.
    Host {
        /// The host, lowercase, without a port.
        host: String,
        /// The path prefix; empty for every path.
        path_prefix: String,
    },
}

/// One route: what it matches and the backend it chooses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSpec {
    /// What it matches.
    pub matches: RouteMatch,
    /// The backend's name.
    pub backend: String,
    /// `--http`: who may reach it (`client-allow`, `client-deny`; others get 403).
    pub rules: Option<crate::clients::Rules>,
}

fn bad(option: &'static str, spec: &str, reason: String) -> ConfigError {
    ConfigError::BadAddress {
        option,
        value: spec.to_owned(),
        reason,
    }
}

/// `name=NAME;server=ADDRESS[,maxconn=N][,weight=W];...;KEY=VALUE`: a named backend.
pub fn parse_backend(spec: &str) -> Result<NamedBackend, ConfigError> {
    let bad = |reason: String| bad("--named-backend", spec, reason);
    let (mut name, mut servers) = (None, Vec::new());
    let (mut preamble, mut connect_timeout) = (None, None);
    let mut tls: Option<bool> = None;
    let mut up = UpstreamTls {
        verify: true,
        ..UpstreamTls::default()
    };
    let mut tls_keys = Vec::new();
    let mut proto = None;
    let mut max_streams = None;
    let (mut balance, mut hash_key, mut factor, mut cookie) = (None, None, None, None);
    for part in spec.split(';').filter(|s| !s.trim().is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| bad(format!("{part:?}: expected key=value")))?;
        let (k, v) = (k.trim(), v.trim());
        let on_off = |v: &str| parse_on_off(v).map_err(|r| bad(format!("{k}: {r}")));
        match k {
            "name" => name = Some(check_name(v).map_err(&bad)?),
            "server" => servers.push(BackendSpec::parse(v)?),
            "write-proxy-v1" | "write-proxy-v2" | "write-ip" | "proxy-proxy" => {
                let kind = match k {
                    "write-proxy-v1" => Preamble::ProxyV1,
                    "write-proxy-v2" => Preamble::ProxyV2,
                    "write-ip" => Preamble::WriteIp,
                    _ => Preamble::PassThrough,
                };
                match (on_off(v)?, preamble) {
                    (true, Some(p)) if p != Preamble::None && p != kind => return Err(bad(
                        "choose one of write-proxy-v1, write-proxy-v2, write-ip and proxy-proxy"
                            .into(),
                    )),
                    (true, _) => preamble = Some(kind),
                    (false, None) => preamble = Some(Preamble::None),
                    (false, Some(_)) => {}
                }
            }
            "connect-timeout" => {
                let d = super::duration::parse_duration(v).map_err(|r| bad(format!("{k}: {r}")))?;
                if d.is_zero() {
                    return Err(bad(format!("{k}: must be more than 0")));
                }
                connect_timeout = Some(d);
            }
            "tls" => tls = Some(on_off(v)?),
            "verify" => {
                up.verify = match v {
                    "required" => true,
                    "none" => false,
                    _ => return Err(bad(format!("verify: {v:?}: expected required or none"))),
                };
                tls_keys.push(k);
            }
            "ca-file" | "cert" => {
                if v.is_empty() {
                    return Err(bad(format!("{k}: a file is needed")));
                }
                if k == "ca-file" {
                    up.ca_file = Some(v.into());
                } else {
                    up.cert = Some(v.into());
                }
                tls_keys.push(k);
            }
            "sni" => {
                if !is_dns_name(v) {
                    return Err(bad(format!("sni: {v:?}: expected a host name")));
                }
                up.sni = Some(v.to_ascii_lowercase());
                tls_keys.push(k);
            }
            "alpn" => {
                up.alpn = v
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect();
                if up.alpn.iter().any(|p| p.len() > 255) {
                    return Err(bad("alpn: a protocol name is at most 255 bytes".into()));
                }
                tls_keys.push(k);
            }
            "proto" => {
                proto = Some(match v {
                    "http/1.1" => Proto::Http1,
                    "h2" => Proto::H2,
                    "auto" => Proto::Auto,
                    _ => return Err(bad(format!("proto: {v:?}: expected http/1.1, h2 or auto"))),
                })
            }
            "max-streams" => {
                max_streams = Some(
                    v.parse::<usize>()
                        .ok()
                        .filter(|n| (1..=1_000_000).contains(n))
                        .ok_or_else(|| bad(format!("max-streams: {v:?}: expected 1 to 1000000")))?,
                )
            }
            "balance" => {
                if !["roundrobin", "leastconn", "least-requests", "hash"].contains(&v) {
                    return Err(bad(format!(
                        "balance: {v:?}: expected roundrobin, leastconn, least-requests or hash"
                    )));
                }
                balance = Some(v.to_owned());
            }
            "hash-key" => {
                hash_key = Some(
                    crate::backend::balance::HashKey::parse(v)
                        .map_err(|r| bad(format!("hash-key: {r}")))?,
                )
            }
            "hash-balance-factor" => {
                factor = Some(
                    v.parse::<u32>()
                        .ok()
                        .filter(|n| *n == 0 || (100..=10_000).contains(n))
                        .ok_or_else(|| bad(format!("hash-balance-factor: {v:?}: expected 0 (no bound) or a percent from 100 to 10000")))?,
                )
            }
            "cookie" => {
                if v.is_empty()
                    || v.len() > 64
                    || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                {
                    return Err(bad(format!(
                        "cookie: {v:?}: a cookie name of letters, digits, '-', '_' or '.'"
                    )));
                }
                cookie = Some(v.to_owned());
            }
            other => {
                return Err(bad(format!(
                    "unknown key {other:?} in a backend ({BACKEND_KEYS})"
                )))
            }
        }
    }
    let name = name.ok_or_else(|| bad("a named backend needs name = \"...\"".into()))?;
    if servers.is_empty() {
        return Err(bad(format!("backend {name:?} has no server")));
    }
    if tls != Some(true) {
        if let Some(k) = tls_keys.first() {
            return Err(bad(format!(
                "backend {name:?}: {k} needs tls = on (TLS to the backend is off)"
            )));
        }
    }
    let proto = proto.unwrap_or_default();
    use crate::backend::balance::{Balance, HashKey};
    let balance = match balance.as_deref() {
        None | Some("roundrobin") => Balance::RoundRobin,
        Some("leastconn") => Balance::LeastConn,
        Some("least-requests") => Balance::LeastRequests,
        _ => Balance::Hash {
            key: hash_key.clone().unwrap_or(HashKey::Source),
            factor: factor.unwrap_or(0),
        },
    };
    if !matches!(balance, Balance::Hash { .. }) {
        if let Some(k) = [
            ("hash-key", hash_key.is_some()),
            ("hash-balance-factor", factor.is_some()),
        ]
        .iter()
        .find_map(|(k, set)| set.then_some(k))
        {
            return Err(bad(format!("backend {name:?}: {k} needs balance = hash")));
        }
    }
    if max_streams.is_some() && proto != Proto::H2 && proto != Proto::Auto {
        return Err(bad(format!(
            "backend {name:?}: max-streams is for connections shared over HTTP/2: it needs proto = h2 or auto"
        )));
    }
    if proto == Proto::Auto && tls != Some(true) {
        return Err(bad(format!(
            "backend {name:?}: proto = auto chooses by ALPN, which needs tls = on (in clear, say h2 or http/1.1)"
        )));
    }
    if let Some(offer) = proto.alpn().filter(|_| tls == Some(true)) {
        if !up.alpn.is_empty() {
            return Err(bad(format!(
                "backend {name:?}: proto = {} offers ALPN {} itself: leave alpn out",
                proto.as_str(),
                offer.join(",")
            )));
        }
        up.alpn = offer.iter().map(|p| (*p).to_owned()).collect();
    }
    if proto != Proto::Http1 && preamble.is_some_and(|p| p != Preamble::None) {
        return Err(bad(format!(
            "backend {name:?}: proto = {} shares each connection among clients, which a preamble written once per connection cannot describe (the forwarding headers name each request's client)",
            proto.as_str()
        )));
    }
    let tls = (tls == Some(true)).then_some(up);
    if let Some(t) = &tls {
        if let Some(s) = servers
            .iter()
            .find(|s| matches!(s.endpoint, BackendEndpoint::Unix(_)))
        {
            if t.verify && t.sni.is_none() {
                return Err(bad(format!(
                    "backend {name:?}: server {} is a UNIX socket, which has no host name to verify: give sni = \"NAME\"",
                    s.endpoint
                )));
            }
        }
    }
    Ok(NamedBackend {
        name,
        servers,
        preamble,
        connect_timeout,
        tls,
        tls_client: None,
        tls_client_h1: None,
        proto,
        max_streams: max_streams.unwrap_or(MAX_STREAMS),
        balance,
        cookie,
    })
}

/// A backend's name: letters, digits, `-`, `_` and `.`, as HAProxy's.
fn check_name(v: &str) -> Result<String, String> {
    if v.is_empty()
        || v.len() > 64
        || !v
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(format!(
            "name {v:?}: 1 to 64 letters, digits, '-', '_' or '.'"
        ));
    }
    Ok(v.to_owned())
}

/// A server name or host to match: lowercase, at most one leading `*.`.
fn check_pattern(key: &str, v: &str) -> Result<String, String> {
    let lower = v.trim().to_ascii_lowercase();
    let bare = lower.strip_prefix("*.").unwrap_or(&lower);
    if bare.contains(':') {
        return Err(format!("{key} {v:?}: give the name without a port"));
    }
    if !is_dns_name(bare) {
        return Err(format!(
            "{key} {v:?}: expected a host name, or *.NAME for its subdomains"
        ));
    }
    Ok(lower)
}

/// Letters, digits, `-`, `_` and dots, not empty: a name a handshake or a `Host` can carry.
fn is_dns_name(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 253
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// `sni=NAME;backend=B` or `host=NAME[;path-prefix=/P];backend=B`: a route.
pub fn parse_route(spec: &str) -> Result<RouteSpec, ConfigError> {
    let bad = |reason: String| bad("--route", spec, reason);
    let (mut sni, mut host, mut prefix, mut backend) = (None, None, None, None);
    let mut rules: Option<crate::clients::Rules> = None;
    for part in spec.split(';').filter(|s| !s.trim().is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| bad(format!("{part:?}: expected key=value")))?;
        let (k, v) = (k.trim(), v.trim());
        match k {
            "sni" => sni = Some(check_pattern(k, v).map_err(&bad)?),
            "host" => host = Some(check_pattern(k, v).map_err(&bad)?),
            "path-prefix" => {
                if !v.starts_with('/') || v.bytes().any(|b| b <= b' ' || b == 0x7f) {
                    return Err(bad(format!(
                        "path-prefix {v:?}: a path starting with /, without spaces"
                    )));
                }
                prefix = Some(v.to_owned());
            }
            "backend" => backend = Some(check_name(v).map_err(&bad)?),
            "client-allow" | "client-deny" => {
                let list = crate::clients::CidrList::parse_value(v)
                    .map_err(|r| bad(format!("{k}: {r}")))?;
                let r = rules.get_or_insert_with(Default::default);
                if k == "client-allow" {
                    r.allow = list;
                } else {
                    r.deny = list;
                }
            }
            other => {
                return Err(bad(format!(
                    "unknown key {other:?} in a route ({ROUTE_KEYS})"
                )))
            }
        }
    }
    let backend = backend.ok_or_else(|| bad("a route needs backend = \"NAME\"".into()))?;
    let matches = match (sni, host, prefix) {
        (Some(_), Some(_), _) => {
            return Err(bad(
                "a route matches sni or host, not both (give two routes)".into(),
            ))
        }
        (Some(_), None, Some(_)) => {
            return Err(bad(
                "path-prefix goes with host (a request's), not with sni".into(),
            ))
        }
        (Some(s), None, None) => RouteMatch::Sni(s),
        (None, Some(host), p) => RouteMatch::Host {
            host,
            path_prefix: p.unwrap_or_default(),
        },
        (None, None, _) => {
            return Err(bad("a route needs sni = \"NAME\" or host = \"NAME\"".into()))
        }
    };
    Ok(RouteSpec {
        matches,
        backend,
        rules,
    })
}

/// Checks names across backends, routes and frontends: unique backend names, and every
/// route and frontend naming one that exists. `frontends` gives each frontend's endpoint
/// and the backend it names.
pub fn check(
    backends: &[NamedBackend],
    routes: &[RouteSpec],
    frontends: &[(String, Option<&str>)],
    http: bool,
) -> Result<(), ConfigError> {
    for (i, b) in backends.iter().enumerate() {
        if b.name == DEFAULT_BACKEND {
            return Err(ConfigError::Nth {
                option: "--named-backend",
                index: i,
                reason: format!("{DEFAULT_BACKEND:?} is the name of the default backend (-b, backend = \"ADDRESS\"); choose another"),
            });
        }
        if let Some(j) = backends[..i].iter().position(|o| o.name == b.name) {
            return Err(ConfigError::Nth {
                option: "--named-backend",
                index: i,
                reason: format!(
                    "a second backend named {:?} (the first is backend {})",
                    b.name,
                    j + 1
                ),
            });
        }
    }
    let exists = |n: &str| n == DEFAULT_BACKEND || backends.iter().any(|b| b.name == n);
    let known = || {
        std::iter::once(DEFAULT_BACKEND)
            .chain(backends.iter().map(|b| b.name.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // Tens of thousands of routes are checked in one pass.
    let mut seen = std::collections::HashMap::new();
    for (i, r) in routes.iter().enumerate() {
        if !exists(&r.backend) {
            return Err(ConfigError::Nth {
                option: "--route",
                index: i,
                reason: format!(
                    "route to backend {:?}, which does not exist (backends: {})",
                    r.backend,
                    known()
                ),
            });
        }
        if !http && r.rules.is_some() {
            return Err(ConfigError::Nth {
                option: "--route",
                index: i,
                reason: "client-allow and client-deny on a route answer requests 403: they need --http (in TCP mode, give them to the frontend)".into(),
            });
        }
        if !http && matches!(r.matches, RouteMatch::Host { .. }) {
            return Err(ConfigError::Nth {
                option: "--route",
                index: i,
                reason:
                    "a host route chooses per request: it needs --http (without it, route by sni)"
                        .into(),
            });
        }
        if let Some(j) = seen.insert(&r.matches, i) {
            return Err(ConfigError::Nth {
                option: "--route",
                index: i,
                reason: format!(
                    "the same match as route {} (each name and path prefix routes once)",
                    j + 1
                ),
            });
        }
    }
    for (i, (fe, b)) in frontends.iter().enumerate() {
        if let Some(b) = b {
            if !exists(b) {
                return Err(ConfigError::Nth {
                    option: "--frontend",
                    index: i,
                    reason: format!(
                        "frontend {fe}: backend {b:?} does not exist (backends: {})",
                        known()
                    ),
                });
            }
        }
    }
    Ok(())
}

/// What `--test` lists: each route and where it goes.
pub fn describe(config: &super::Config) -> Vec<String> {
    let mut lines = Vec::new();
    for b in &config.named_backends {
        let servers: Vec<String> = b.servers.iter().map(|s| s.endpoint.to_string()).collect();
        lines.push(format!("backend {}: {}", b.name, servers.join(", ")));
    }
    for f in &config.frontends {
        if let Some(b) = &f.backend {
            lines.push(format!("route: frontend {} -> {b}", f.endpoint));
        }
    }
    for r in &config.routes {
        let what = match &r.matches {
            RouteMatch::Sni(n) => format!("sni {n}"),
            RouteMatch::Host { host, path_prefix } if path_prefix.is_empty() => {
                format!("host {host}")
            }
            RouteMatch::Host { host, path_prefix } => format!("host {host} path {path_prefix}*"),
        };
        lines.push(format!("route: {what} -> {}", r.backend));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_parse_with_their_own_settings() {
        let b = parse_backend(
            "name=api;server=[127.0.0.1]:8080,maxconn=100,weight=2;server=/run/api.sock;write-proxy-v2=on;connect-timeout=2s",
        )
        .unwrap();
        assert_eq!(b.name, "api");
        assert_eq!(b.servers.len(), 2);
        assert_eq!(b.servers[0].maxconn, Some(100));
        assert_eq!(b.preamble, Some(Preamble::ProxyV2));
        assert_eq!(b.connect_timeout, Some(Duration::from_secs(2)));
        assert!(b.tls.is_none());
        let t = parse_backend("name=s;server=[127.0.0.1]:443;tls=on;ca-file=/ca.pem;alpn=http/1.1")
            .unwrap()
            .tls
            .unwrap();
        assert!(t.verify);
        assert_eq!(t.alpn, ["http/1.1"]);
        let off = parse_backend("name=s;server=[127.0.0.1]:1;write-proxy-v2=off").unwrap();
        assert_eq!(off.preamble, Some(Preamble::None));
        for (spec, needle) in [
            ("server=[127.0.0.1]:1", "needs name"),
            ("name=a", "has no server"),
            ("name=a b;server=[127.0.0.1]:1", "letters, digits"),
            (
                "name=a;server=[127.0.0.1]:1;colour=red",
                "unknown key \"colour\"",
            ),
            ("name=a;server=[127.0.0.1]:1;verify=none", "needs tls = on"),
            (
                "name=a;server=[127.0.0.1]:1;tls=on;verify=maybe",
                "required or none",
            ),
            ("name=a;server=/run/a.sock;tls=on", "give sni"),
            (
                "name=a;server=[127.0.0.1]:1;write-ip=on;write-proxy-v1=on",
                "choose one",
            ),
            (
                "name=a;server=[127.0.0.1]:1;connect-timeout=0s",
                "more than 0",
            ),
            ("name=a;server=nowhere", "--backend"),
        ] {
            let e = parse_backend(spec).unwrap_err().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
    }

    #[test]
    fn routes_parse_and_refuse_what_cannot_match() {
        assert_eq!(
            parse_route("sni=*.Example.com;backend=web").unwrap(),
            RouteSpec {
                matches: RouteMatch::Sni("*.example.com".into()),
                backend: "web".into(),
                rules: None,
            }
        );
        assert_eq!(
            parse_route("host=static.example.com;path-prefix=/assets/;backend=static")
                .unwrap()
                .matches,
            RouteMatch::Host {
                host: "static.example.com".into(),
                path_prefix: "/assets/".into()
            }
        );
        for (spec, needle) in [
            ("sni=a.example.com", "needs backend"),
            ("backend=x", "needs sni"),
            ("sni=a;host=b;backend=x", "not both"),
            ("sni=a;path-prefix=/x;backend=x", "goes with host"),
            ("host=a;path-prefix=x;backend=x", "starting with /"),
            ("sni=a.*.com;backend=x", "*.NAME"),
            ("host=a.com:443;backend=x", "without a port"),
            ("sni=a;backend=x;weight=2", "unknown key"),
            ("host=a;backend=x;client-deny=10.0.0.0/40", "client-deny"),
        ] {
            let e = parse_route(spec).unwrap_err().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
    }

    #[test]
    fn names_must_resolve() {
        let api = parse_backend("name=api;server=[127.0.0.1]:1").unwrap();
        let r = |s: &str| parse_route(s).unwrap();
        check(
            std::slice::from_ref(&api),
            &[r("sni=a;backend=api"), r("sni=b;backend=default")],
            &[],
            false,
        )
        .unwrap();
        let e = check(
            std::slice::from_ref(&api),
            &[r("sni=a;backend=api"), r("sni=b;backend=www")],
            &[],
            false,
        )
        .unwrap_err();
        assert!(matches!(e, ConfigError::Nth { index: 1, .. }), "{e}");
        assert!(
            e.to_string()
                .contains("\"www\", which does not exist (backends: default, api)"),
            "{e}"
        );
        let e = check(&[api.clone(), api.clone()], &[], &[], false).unwrap_err();
        assert!(
            e.to_string().contains("second backend named \"api\""),
            "{e}"
        );
        let e = check(&[], &[r("host=a;backend=default")], &[], false).unwrap_err();
        assert!(e.to_string().contains("needs --http"), "{e}");
        let e = check(
            &[],
            &[r("sni=a;backend=default;client-allow=10.0.0.0/8")],
            &[],
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("they need --http"), "{e}");
        let e = check(
            &[],
            &[r("sni=a;backend=default"), r("sni=A;backend=default")],
            &[],
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("same match as route 1"), "{e}");
        let e = check(&[api], &[], &[("[*]:1".into(), Some("web"))], false).unwrap_err();
        assert!(
            e.to_string().contains("frontend [*]:1: backend \"web\""),
            "{e}"
        );
    }
}
