//! A backend as routes see it: its servers, how they are reached and what picks one (the
//! key a connection or request brings), and how a configured backend becomes one.

use rustls::pki_types::ServerName;

use crate::backend::balance::{self, Balance, HashKey, Key};
use crate::backend::{Address, Pool, PoolLimits, Server};
use crate::config::{BackendEndpoint, BackendSpec, Config, NamedBackend, Preamble, Proto};

/// One backend: its servers and how they are reached.
#[derive(Debug)]
pub struct Backend {
    /// As routes, logs and metrics name it (`default` for `-b`'s).
    pub name: std::sync::Arc<str>,
    /// Its servers, queues and down-marking.
    pub pool: Pool,
    /// What is written before the client's bytes.
    pub preamble: Preamble,
    /// TLS to its servers, when on.
    pub tls: Option<BackendTls>,
    /// `--http`: the HTTP version its servers speak.
    pub proto: Proto,
    /// `proto = h2`: most streams on one shared connection.
    pub max_streams: usize,
    /// `proto = h2`: the gRPC statuses a call is sent again on (`retry-on`).
    pub retry_on: crate::config::route::GrpcRetryOn,
    /// `--http`: the sticky cookie naming a client's server.
    pub cookie: Option<Box<str>>,
    /// `--http`: its level of the edge's policy.
    pub policy: crate::config::policy::Policy,
    /// Its servers as configured, to tell at a reload whether they changed.
    pub(super) spec: String,
}

impl Backend {
    /// What a connection from `client` brings to the choice of its server (TCP mode, and
    /// a backend whose method reads nothing of a request).
    pub fn key_of_client(&self, client: std::net::IpAddr) -> Key {
        match self.pool.balance() {
            Balance::Hash {
                key: HashKey::Source,
                ..
            } => Key {
                hash: Some(source_hash(client)),
                sticky: None,
            },
            _ => Key::default(),
        }
    }

    /// Whether the choice of its server reads a request (a path, header or cookie).
    pub fn reads_requests(&self) -> bool {
        self.cookie.is_some()
            || matches!(self.pool.balance(), Balance::Hash { key, .. } if *key != HashKey::Source)
    }

    /// What a request from `client` for `path` with `fields` (name, value) brings to the
    /// choice of its server: its key's hash, and the server its sticky cookie names.
    pub fn key_of_request(
        &self,
        client: std::net::IpAddr,
        path: &[u8],
        fields: &[(&[u8], &[u8])],
    ) -> Key {
        let mut key = self.key_of_client(client);
        if !self.reads_requests() {
            return key;
        }
        let cookie = |name: &str| {
            fields
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"))
                .find_map(|(_, v)| cookie_value(v, name.as_bytes()))
        };
        if let Balance::Hash { key: k, .. } = self.pool.balance() {
            key.hash = match k {
                HashKey::Source => key.hash,
                HashKey::Path => {
                    let end = path.iter().position(|&b| b == b'?').unwrap_or(path.len());
                    Some(balance::hash(&path[..end]))
                }
                HashKey::Header(name) => fields
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
                    .map(|(_, v)| balance::hash(v)),
                HashKey::Cookie(name) => cookie(name).map(balance::hash),
            };
        }
        if let Some(name) = &self.cookie {
            key.sticky = cookie(name)
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| u64::from_str_radix(v, 16).ok());
        }
        key
    }

    /// The `Set-Cookie` that pins a client to `server`, when the backend has a sticky
    /// cookie and the request did not already name that server.
    pub fn set_cookie(
        &self,
        key: &Key,
        server: &crate::backend::Server,
    ) -> Option<http::HeaderValue> {
        let name = self.cookie.as_deref()?;
        let id = server.sticky_id();
        if key.sticky == Some(id) {
            return None;
        }
        http::HeaderValue::from_str(&format!("{name}={id:016x}; Path=/; HttpOnly")).ok()
    }
}

/// `client`'s hash for `hash-key = source`: its address's bytes.
fn source_hash(client: std::net::IpAddr) -> u64 {
    match client.to_canonical() {
        std::net::IpAddr::V4(a) => balance::hash(&a.octets()),
        std::net::IpAddr::V6(a) => balance::hash(&a.octets()),
    }
}

/// The value of cookie `name` in a `Cookie` field's `a=1; b=2`.
fn cookie_value<'a>(field: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    field.split(|&b| b == b';').find_map(|pair| {
        let pair = pair.trim_ascii();
        let eq = pair.iter().position(|&b| b == b'=')?;
        (pair[..eq].trim_ascii() == name).then(|| pair[eq + 1..].trim_ascii())
    })
}

/// TLS to a backend's servers: the connector (one client configuration, so sessions
/// resume across connections) and the name each server is verified by.
#[derive(Debug)]
pub struct BackendTls {
    /// Its client configuration (and so its session cache).
    pub config: std::sync::Arc<rustls::ClientConfig>,
    /// `proto = auto`: the configuration of its HTTP/1.1 connections (ALPN `http/1.1`
    /// alone); `None`: `config` for every connection.
    pub h1: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// Each server's name (by the server's own name, as the pool gives it), in order.
    pub names: Vec<(Box<str>, ServerName<'static>)>,
}

/// The pool settings a backend takes from the global flags.
pub fn pool_limits(config: &Config) -> PoolLimits {
    let l = &config.limits;
    PoolLimits {
        connect_timeout: l.connect_timeout,
        queue_timeout: l.queue_timeout,
        queue_size: l.queue_size,
        retry_after: l.retry_after,
        retries: l.retries,
    }
}

/// A server's name in logs and metrics: its `name=`, else its address.
pub fn server_label(spec: &BackendSpec) -> String {
    spec.name
        .clone()
        .unwrap_or_else(|| spec.endpoint.to_string())
}

/// A server of `spec`, with its health check.
pub fn server(spec: &BackendSpec) -> Server {
    let address = match &spec.endpoint {
        BackendEndpoint::Tcp(_) => Address::Tcp(spec.addrs.clone()),
        BackendEndpoint::Unix(path) => Address::Unix(path.clone()),
    };
    let server = Server::new(server_label(spec), address, spec.maxconn, spec.weight);
    match &spec.check {
        Some(c) => server.with_check(c.clone()),
        None => server,
    }
}

/// Named backend `b` as routes see it (its pool in slot `slot`).
pub(super) fn named(
    b: &NamedBackend,
    global: Preamble,
    mut limits: PoolLimits,
    slot: usize,
) -> Backend {
    if let Some(t) = b.connect_timeout {
        limits.connect_timeout = t;
    }
    // Everything that makes its servers what they are (addresses, maxconn, weight, name,
    // check): a reload that changes none of it keeps them.
    let spec = format!("{:?}", b.servers);
    let tls = b.tls_client.as_ref().map(|client| BackendTls {
        config: client.clone(),
        h1: b.tls_client_h1.clone(),
        names: b
            .servers
            .iter()
            .filter_map(|s| {
                let sni = b.tls.as_ref().and_then(|t| t.sni.as_deref());
                // Checked when the configuration was read (config::named).
                let name = crate::tls::upstream::server_name(sni, &s.host()).ok()?;
                Some((server_label(s).into(), name))
            })
            .collect(),
    });
    Backend {
        name: b.name.as_str().into(),
        pool: Pool::new(b.servers.iter().map(server).collect(), limits)
            .with_slot(slot)
            .with_balance(b.balance.clone()),
        preamble: b.preamble.unwrap_or(global),
        tls,
        proto: b.proto,
        max_streams: b.max_streams,
        retry_on: b.retry_on,
        cookie: b.cookie.as_deref().map(Into::into),
        policy: b.policy.clone(),
        spec,
    }
}
