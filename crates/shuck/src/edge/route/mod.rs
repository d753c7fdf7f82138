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

mod backend;

use backend::named;
pub use backend::{pool_limits, server, server_label, Backend, BackendTls};

use crate::backend::Pool;
use crate::clients::Rules;
use crate::config::{Config, Preamble, Proto, RouteMatch};

/// The index of a backend in its [`Routing`].
pub type BackendId = u32;

/// The index of a route in its [`Routing`].
pub type RouteId = u32;

/// What a route holds besides its match and backend, for `--http`'s requests.
#[derive(Debug, Default)]
struct Route {
    /// Who may reach it (`client-allow`, `client-deny`).
    rules: Option<Rules>,
    /// Its level of the edge's policy.
    policy: crate::config::policy::Policy,
    /// A redirect it answers, or the path it sends rewritten (none: `None`).
    action: Option<Box<crate::config::rewrite::RouteAction>>,
}

/// Where a request was sent: its backend, and the route that chose it (none: the
/// connection's frontend or the default chose).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The backend.
    pub backend: BackendId,
    /// The route.
    pub route: Option<RouteId>,
}

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
struct Paths(Vec<(Box<str>, BackendId, RouteId)>);

impl Paths {
    fn find(&self, path: &str) -> Option<(BackendId, RouteId)> {
        self.0
            .iter()
            .find(|(p, _, _)| path.starts_with(&**p))
            .map(|(_, b, r)| (*b, *r))
    }
}

/// Every backend and every route of one configuration.
#[derive(Debug)]
pub struct Routing {
    backends: Vec<Arc<Backend>>,
    /// Each frontend's own backend (`backend = NAME` in its block), by endpoint.
    frontends: HashMap<Box<str>, BackendId>,
    sni: Names<(BackendId, RouteId)>,
    hosts: Names<Paths>,
    /// Every route's rules and policy, by [`RouteId`].
    routes: Vec<Route>,
    /// The global level of the edge's policy (`--request-header` and the rest).
    policy: crate::config::policy::Policy,
    /// Each frontend's own level, by endpoint, for those that give one.
    frontend_policy: HashMap<Box<str>, Arc<crate::config::policy::Policy>>,
    /// Whether any level gives a policy: without one, requests skip it at once.
    any_policy: bool,
    /// Which preambles some backend writes, by [`preamble_index`].
    preambles: [bool; PREAMBLES],
    /// `--http-refuse-encoded-slashes`.
    pub refuse_encoded_slashes: bool,
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
            retry_on: Default::default(),
            cookie: None,
            policy: Default::default(),
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
        let mut routes = Vec::with_capacity(config.routes.len());
        for (i, r) in config.routes.iter().enumerate() {
            let b = id(&r.backend);
            let route = i as RouteId;
            routes.push(Route {
                rules: r.rules.clone(),
                policy: r.policy.clone(),
                action: r.action.any().then(|| Box::new(r.action.clone())),
            });
            match &r.matches {
                RouteMatch::Sni(name) => *sni.entry(name) = (b, route),
                RouteMatch::Host { host, path_prefix } => {
                    let paths = hosts.entry(host);
                    paths.0.push((path_prefix.as_str().into(), b, route));
                    paths.0.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
                }
            }
        }
        let frontend_policy: HashMap<Box<str>, Arc<crate::config::policy::Policy>> = config
            .frontends
            .iter()
            .filter(|f| !f.policy.is_empty())
            .map(|f| (f.endpoint.to_string().into(), Arc::new(f.policy.clone())))
            .collect();
        let any_policy = config.policy.request.is_some()
            || config.policy.response.is_some()
            || config.policy.max_body.is_some_and(|m| m.is_some())
            || config.policy.error_pages.is_some()
            || config.policy.maintenance_page.is_some()
            || !frontend_policy.is_empty()
            || backends.iter().any(|b| !b.policy.is_empty())
            || routes.iter().any(|r| !r.policy.is_empty());
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
            routes,
            policy: config.policy.clone(),
            frontend_policy,
            any_policy,
            preambles,
            refuse_encoded_slashes: config.limits.http_refuse_encoded_slashes,
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
        if let Some(&(b, _)) = sni
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
    /// With it, the route that took it; `None` when no route takes it (then the
    /// connection's own backend does, under its route: [`Self::sni_route`]).
    pub fn for_request(&self, host: &str, path: &str) -> Option<(BackendId, RouteId)> {
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
        self.sni.find(host).copied()
    }

    /// The server-name route that chose a connection asking for `sni`, if one did: its
    /// requests that no route takes (no `Host`, an address, a name no route has) are held
    /// to its rules and policy.
    pub fn sni_route(&self, sni: Option<&str>) -> Option<RouteId> {
        let mut buf = [0u8; 256];
        let sni = lowercase(sni?, &mut buf)?;
        self.sni.find(sni).map(|&(_, r)| r)
    }

    /// The access rules of route `route`, if it has some.
    pub fn route_rules(&self, route: RouteId) -> Option<&Rules> {
        self.routes.get(route as usize)?.rules.as_ref()
    }

    /// What `route` does besides choosing its backend, when it does anything: a redirect,
    /// a path rewritten.
    pub fn route_action(&self, route: RouteId) -> Option<&crate::config::rewrite::RouteAction> {
        self.routes.get(route as usize)?.action.as_deref()
    }

    /// Whether some level gives a policy (else requests skip it at once).
    pub fn has_policy(&self) -> bool {
        self.any_policy
    }

    /// The frontend `endpoint`'s own level of the policy, when it gives one.
    pub fn frontend_policy(&self, endpoint: &str) -> Option<Arc<crate::config::policy::Policy>> {
        if self.frontend_policy.is_empty() {
            return None;
        }
        self.frontend_policy.get(endpoint).cloned()
    }

    /// The levels of the policy over a request sent to `to` through a frontend whose own
    /// level is `frontend`: the most specific first (route, backend, frontend, global).
    pub fn levels<'a>(
        &'a self,
        to: Target,
        frontend: Option<&'a crate::config::policy::Policy>,
    ) -> [Option<&'a crate::config::policy::Policy>; 4] {
        [
            to.route
                .and_then(|r| self.routes.get(r as usize))
                .map(|r| &r.policy),
            Some(&self.backend(to.backend).policy),
            frontend,
            Some(&self.policy),
        ]
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
            paths.0.push((p.into(), b, 0));
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
