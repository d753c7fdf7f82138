//! The choose stage: which backend a connection (TCP mode) or a request (`--http`) goes to.
//! Named backends each have their own pool, preamble and connect timeout; routes choose
//! them by the handshake's server name and, per request, by `Host` and path. Exact names
//! first, then the longest wildcard (`*.example.com` covers every subdomain), then the
//! longest path prefix; else the frontend's backend, else the default (`-b`). Every lookup
//! is a hash probe per label of the name: 10 000 routes cost what one does, and nothing is
//! allocated. A reload builds a new [`Routing`] and swaps it in; connections and HTTP/2
//! streams already under way keep the one they started with.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::pki_types::ServerName;

use crate::backend::balance::{self, Balance, HashKey, Key};
use crate::backend::{Address, Pool, PoolLimits, Server};
use crate::clients::Rules;
use crate::config::{
    BackendEndpoint, BackendSpec, Config, NamedBackend, Preamble, Proto, RouteMatch,
};

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
    /// `--http`: the sticky cookie naming a client's server.
    pub cookie: Option<Box<str>>,
    /// Its servers as configured, to tell at a reload whether they changed.
    spec: String,
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
        let id = balance::server_id(server.name());
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

/// The index of a backend in its [`Routing`].
pub type BackendId = u32;

/// The default backend's index.
pub const DEFAULT: BackendId = 0;

/// Names to backends: exact names, and wildcards keyed by the part after `*.`.
#[derive(Debug, Default)]
struct Names<T> {
    exact: HashMap<Box<str>, T>,
    wildcard: HashMap<Box<str>, T>,
}

impl<T> Names<T> {
    fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty()
    }

    /// The exact match, else the longest wildcard; `name` already lowercase.
    fn find(&self, name: &str) -> Option<&T> {
        let name = name.trim_end_matches('.');
        if let Some(t) = self.exact.get(name) {
            return Some(t);
        }
        let mut rest = name;
        while let Some((_, parent)) = rest.split_once('.') {
            if let Some(t) = self.wildcard.get(parent) {
                return Some(t);
            }
            rest = parent;
        }
        None
    }

    fn entry(&mut self, pattern: &str) -> &mut T
    where
        T: Default,
    {
        match pattern.strip_prefix("*.") {
            Some(base) => self.wildcard.entry(base.into()).or_default(),
            None => self.exact.entry(pattern.into()).or_default(),
        }
    }
}

/// A host's path prefixes, longest first (the empty one, every path, last).
#[derive(Debug, Default)]
struct Paths(Vec<(Box<str>, BackendId, Option<Arc<Rules>>)>);

impl Paths {
    fn find(&self, path: &str) -> Option<(BackendId, Option<&Rules>)> {
        self.0
            .iter()
            .find(|(p, _, _)| path.starts_with(&**p))
            .map(|(_, b, r)| (*b, r.as_deref()))
    }
}

/// Every backend and every route of one configuration.
#[derive(Debug)]
pub struct Routing {
    backends: Vec<Arc<Backend>>,
    /// Each frontend's own backend (`backend = NAME` in its block), by endpoint.
    frontends: HashMap<Box<str>, BackendId>,
    sni: Names<BackendId>,
    hosts: Names<Paths>,
    /// The access rules of server-name routes that have some (`--http`: their requests).
    sni_rules: Names<Arc<Rules>>,
    /// Which preambles some backend writes, by [`preamble_index`].
    preambles: [bool; PREAMBLES],
}

/// How many kinds of preamble there are besides none.
pub const PREAMBLES: usize = 4;

/// A preamble's slot in per-kind tables; `None` for no preamble.
pub fn preamble_index(p: Preamble) -> Option<usize> {
    match p {
        Preamble::None => None,
        Preamble::ProxyV1 => Some(0),
        Preamble::ProxyV2 => Some(1),
        Preamble::WriteIp => Some(2),
        Preamble::PassThrough => Some(3),
    }
}

/// Lowers `name` into `buf` when it has capitals (names from clients may), else returns it.
fn lowercase<'a>(name: &'a str, buf: &'a mut [u8; 256]) -> Option<&'a str> {
    if !name.bytes().any(|b| b.is_ascii_uppercase()) {
        return Some(name);
    }
    let out = buf.get_mut(..name.len())?;
    out.copy_from_slice(name.as_bytes());
    out.make_ascii_lowercase();
    std::str::from_utf8(out).ok()
}

impl Routing {
    /// The routing of `config`; `default` is the default backend's pool (`-b`, or the
    /// built-in origin), the named ones are made here.
    pub fn new(config: &Config, default: Pool) -> Self {
        Self::build(config, default, None)
    }

    /// The routing of `config` after a reload: the default backend's servers stay (a
    /// restart changes them), and a named backend whose servers did not change keeps
    /// them, with their connections, queues and down-marking.
    pub fn reloaded(&self, config: &Config) -> Self {
        let default = self.backends[0]
            .pool
            .sharing(pool_limits(config), 0, Default::default());
        Self::build(config, default, Some(self))
    }

    /// As [`Self::reloaded`], with `default` as the default backend's new servers.
    pub fn reloaded_with(&self, config: &Config, default: Pool) -> Self {
        Self::build(config, default, Some(self))
    }

    fn build(config: &Config, default: Pool, previous: Option<&Routing>) -> Self {
        let limits = pool_limits(config);
        let mut backends = vec![Arc::new(Backend {
            name: crate::config::route::DEFAULT_BACKEND.into(),
            pool: default,
            preamble: config.preamble,
            tls: None,
            proto: Proto::Http1,
            max_streams: crate::config::route::MAX_STREAMS,
            cookie: None,
            spec: String::new(),
        })];
        for (i, b) in config.named_backends.iter().enumerate() {
            let mut new = named(b, config.preamble, limits, i + 1);
            let old = previous.and_then(|p| p.backends.iter().find(|o| o.name == new.name));
            if let Some(old) = old.filter(|o| o.spec == new.spec) {
                new.pool = old
                    .pool
                    .sharing(new.pool.limits(), i + 1, b.balance.clone());
            }
            backends.push(Arc::new(new));
        }
        let id = |name: &str| -> BackendId {
            backends.iter().position(|b| &*b.name == name).unwrap_or(0) as BackendId
            // config::route::check saw every name exist
        };
        let frontends = config
            .frontends
            .iter()
            .filter_map(|f| Some((f.endpoint.to_string().into(), id(f.backend.as_deref()?))))
            .collect();
        let (mut sni, mut hosts) = (Names::default(), Names::<Paths>::default());
        let mut sni_rules = Names::default();
        for r in &config.routes {
            let b = id(&r.backend);
            let rules = r.rules.clone().map(Arc::new);
            match &r.matches {
                RouteMatch::Sni(name) => {
                    *sni.entry(name) = b;
                    if let Some(rules) = rules {
                        *sni_rules.entry(name) = rules;
                    }
                }
                RouteMatch::Host { host, path_prefix } => {
                    let paths = hosts.entry(host);
                    paths.0.push((path_prefix.as_str().into(), b, rules));
                    paths.0.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
                }
            }
        }
        let mut preambles = [false; PREAMBLES];
        for b in &backends {
            if let Some(i) = preamble_index(b.preamble) {
                preambles[i] = true;
            }
        }
        Routing {
            backends,
            frontends,
            sni,
            hosts,
            sni_rules,
            preambles,
        }
    }

    /// Every backend; the default first.
    pub fn backends(&self) -> &[Arc<Backend>] {
        &self.backends
    }

    /// The backend of `id`.
    pub fn backend(&self, id: BackendId) -> &Arc<Backend> {
        self.backends.get(id as usize).unwrap_or(&self.backends[0])
    }

    /// True when a route looks at the handshake's server name.
    pub fn by_name(&self) -> bool {
        !self.sni.is_empty() || !self.hosts.is_empty()
    }

    /// True when some route chooses per request (then a request for a name the
    /// connection's certificate does not cover is misdirected).
    pub fn routes(&self) -> bool {
        self.by_name()
    }

    /// Which preambles some backend writes, by [`preamble_index`].
    pub fn preambles(&self) -> [bool; PREAMBLES] {
        self.preambles
    }

    /// The frontend's own backend, else the default.
    pub fn for_frontend(&self, frontend: &str) -> BackendId {
        if self.frontends.is_empty() {
            return DEFAULT;
        }
        self.frontends.get(frontend).copied().unwrap_or(DEFAULT)
    }

    /// The backend of a connection to `frontend` that asked for `sni`, and what chose it
    /// (for its log line): a server-name route (`sni`), the frontend's backend
    /// (`frontend`), or the default (`default`).
    pub fn for_connection(&self, frontend: &str, sni: Option<&str>) -> (BackendId, &'static str) {
        let mut buf = [0u8; 256];
        if let Some(&b) = sni
            .and_then(|n| lowercase(n, &mut buf))
            .and_then(|n| self.sni.find(n))
        {
            return (b, "sni");
        }
        match self.for_frontend(frontend) {
            DEFAULT => (DEFAULT, "default"),
            b => (b, "frontend"),
        }
    }

    /// `--http`: the backend for a request to `host` (no port) and `path`, on a
    /// connection whose own choice is `fallback` (see [`Self::for_connection`]): host routes,
    /// then server-name routes by the host, then the connection's.
    /// With it, the route's access rules, when it has some; `None` when no route takes it
    /// (then the connection's own backend does, under its rules: [`Self::sni_rules`]).
    pub fn for_request(&self, host: &str, path: &str) -> Option<(BackendId, Option<&Rules>)> {
        let mut buf = [0u8; 256];
        let host = lowercase(host, &mut buf)?;
        if let Some(b) = self
            .hosts
            .exact
            .get(host.trim_end_matches('.'))
            .and_then(|p| p.find(path))
        {
            return Some(b);
        }
        let mut rest = host.trim_end_matches('.');
        while let Some((_, parent)) = rest.split_once('.') {
            if let Some(b) = self.hosts.wildcard.get(parent).and_then(|p| p.find(path)) {
                return Some(b);
            }
            rest = parent;
        }
        let b = *self.sni.find(host)?;
        Some((b, self.sni_rules.find(host).map(|r| &**r)))
    }

    /// The access rules of the server-name route that chose a connection asking for `sni`,
    /// if it has some: its requests that no route takes (no `Host`, an address, a name
    /// no route has) are held to them.
    pub fn sni_rules(&self, sni: Option<&str>) -> Option<Arc<Rules>> {
        let mut buf = [0u8; 256];
        let sni = lowercase(sni?, &mut buf)?;
        self.sni_rules.find(sni).cloned()
    }
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

fn named(b: &NamedBackend, global: Preamble, mut limits: PoolLimits, slot: usize) -> Backend {
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
        cookie: b.cookie.as_deref().map(Into::into),
        spec,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(pairs: &[(&str, BackendId)]) -> Names<BackendId> {
        let mut n = Names::default();
        for &(p, b) in pairs {
            *n.entry(p) = b;
        }
        n
    }

    #[test]
    fn exact_names_then_the_longest_wildcard() {
        let n = names(&[
            ("api.example.com", 1),
            ("*.example.com", 2),
            ("*.eu.example.com", 3),
        ]);
        assert_eq!(n.find("api.example.com"), Some(&1));
        assert_eq!(n.find("www.example.com"), Some(&2));
        assert_eq!(n.find("a.b.example.com"), Some(&2));
        assert_eq!(n.find("x.eu.example.com"), Some(&3));
        assert_eq!(n.find("example.com"), None);
        assert_eq!(n.find("api.example.com."), Some(&1));
        assert_eq!(n.find("example.org"), None);
    }

    #[test]
    fn paths_longest_prefix_first() {
        let mut hosts = Names::<Paths>::default();
        for (p, b) in [("", 1), ("/assets/", 2), ("/assets/big/", 3)] {
            let paths = hosts.entry("static.example.com");
            paths.0.push((p.into(), b, None));
            paths.0.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        }
        let p = hosts.find("static.example.com").unwrap();
        let b = |path| p.find(path).map(|t| t.0);
        assert_eq!(b("/assets/big/x.png"), Some(3));
        assert_eq!(b("/assets/x.png"), Some(2));
        assert_eq!(b("/"), Some(1));
    }

    #[test]
    fn capitals_are_lowered_without_allocating() {
        let mut buf = [0u8; 256];
        assert_eq!(
            lowercase("API.Example.COM", &mut buf),
            Some("api.example.com")
        );
        let long = "A".repeat(300);
        assert_eq!(lowercase(&long, &mut buf), None);
    }
}
