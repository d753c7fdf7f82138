//! A named backend (`--named-backend`, a `backend = { ... }` block): its servers, its
//! preamble and connect timeout, TLS to it, the HTTP version it speaks (`proto`) and how
//! its servers share the work (`balance`, `hash-key`, `hash-balance-factor`, `cookie`).

use std::path::PathBuf;
use std::time::Duration;

use super::backend::{BackendEndpoint, BackendSpec, Preamble};
use super::cli::parse_on_off;
use super::ConfigError;

/// The keys of a backend block, for messages.
pub const BACKEND_KEYS: &str = "name, server, write-proxy-v1, write-proxy-v2, write-ip, proxy-proxy, connect-timeout, tls, verify, ca-file, sni, cert, alpn, proto, max-streams, retry-on, balance, hash-key, hash-balance-factor, cookie, request-header, response-header, max-body-bytes, error-page, maintenance-page";

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
    /// `proto = h2`: the gRPC statuses of a trailers-only answer on which a call is sent
    /// again (`retry-on`, Envoy's `retry_on`); none unless asked.
    pub retry_on: GrpcRetryOn,
    /// How its servers share the work (`balance`, `hash-key`, `hash-balance-factor`).
    pub balance: crate::backend::balance::Balance,
    /// `--http`: the sticky cookie naming a client's server (`cookie`).
    pub cookie: Option<String>,
    /// `--http`: its level of the edge's policy (header rules, body limit).
    pub policy: super::policy::Policy,
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

/// The gRPC statuses on which a call answered trailers-only is sent again (`retry-on`):
/// a set of codes, one bit each. A status says nothing of whether the server ran the call,
/// so nothing is retried on one unless the operator says the backend's calls bear it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GrpcRetryOn(u32);

impl GrpcRetryOn {
    /// The names `retry-on` takes, Envoy's for `retry_on`'s gRPC conditions, and their codes.
    pub const NAMES: [(&'static str, u8); 5] = [
        ("cancelled", 1),
        ("deadline-exceeded", 4),
        ("resource-exhausted", 8),
        ("internal", 13),
        ("unavailable", 14),
    ];

    /// `retry-on`'s comma-separated names.
    pub fn parse(v: &str) -> Result<GrpcRetryOn, String> {
        let mut set = 0u32;
        for name in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let Some((_, code)) = Self::NAMES
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
            else {
                let names: Vec<&str> = Self::NAMES.iter().map(|(n, _)| *n).collect();
                return Err(format!(
                    "{name:?} is not a gRPC status shuck retries on (expected {})",
                    names.join(", ")
                ));
            };
            set |= 1 << code;
        }
        if set == 0 {
            return Err("name at least one gRPC status".into());
        }
        Ok(GrpcRetryOn(set))
    }

    /// Whether a `grpc-status` value is one of the set.
    pub fn holds(self, status: &[u8]) -> bool {
        let code = match status {
            [d] if d.is_ascii_digit() => d - b'0',
            [a, b] if a.is_ascii_digit() && b.is_ascii_digit() => (a - b'0') * 10 + (b - b'0'),
            _ => return false,
        };
        code < 32 && self.0 & (1 << code) != 0
    }

    /// Whether it names no status.
    pub fn is_empty(self) -> bool {
        self.0 == 0
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
    let mut retry_on = None;
    let (mut balance, mut hash_key, mut factor, mut cookie) = (None, None, None, None);
    let mut policy = super::policy::Policy::default();
    let parts = super::policy::split_spec(spec);
    for part in &parts {
        if part.trim().is_empty() {
            continue;
        }
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| bad(format!("{part:?}: expected key=value")))?;
        let (k, v) = (k.trim(), v.trim());
        let on_off = |v: &str| parse_on_off(v).map_err(|r| bad(format!("{k}: {r}")));
        if policy.set(k, v).map_err(&bad)? {
            continue;
        }
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
            "retry-on" => {
                retry_on = Some(GrpcRetryOn::parse(v).map_err(|r| bad(format!("retry-on: {r}")))?)
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
    if retry_on.is_some() && proto != Proto::H2 && proto != Proto::Auto {
        return Err(bad(format!(
            "backend {name:?}: retry-on names gRPC statuses, which come over HTTP/2: it needs proto = h2 or auto"
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
        retry_on: retry_on.unwrap_or_default(),
        balance,
        cookie,
        policy,
    })
}

pub(super) fn bad(option: &'static str, spec: &str, reason: String) -> ConfigError {
    ConfigError::BadAddress {
        option,
        value: spec.to_owned(),
        reason,
    }
}

/// A backend's name: letters, digits, `-`, `_` and `.`, as HAProxy's.
pub(super) fn check_name(v: &str) -> Result<String, String> {
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

/// Letters, digits, `-`, `_` and dots, not empty: a name a handshake or a `Host` can carry.
pub(super) fn is_dns_name(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 253
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::GrpcRetryOn;

    #[test]
    fn retry_on_names_grpc_statuses() {
        let r = GrpcRetryOn::parse("unavailable, Cancelled").unwrap();
        assert!(r.holds(b"14") && r.holds(b"1"));
        assert!(!r.holds(b"0") && !r.holds(b"4") && !r.holds(b"114") && !r.holds(b""));
        assert!(GrpcRetryOn::parse("").is_err());
        let e = GrpcRetryOn::parse("unavailable,5xx").unwrap_err();
        assert!(e.contains("\"5xx\"") && e.contains("unavailable"), "{e}");
        assert!(GrpcRetryOn::default().is_empty());
    }
}
