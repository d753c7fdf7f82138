//! `--http` with routes, or with a certificate of its own client verification: each
//! request's backend, by its `Host` (or `:authority`) and path, and the requests that are
//! misdirected (RFC 9110 §15.5.20). One rule for HTTP/1.1, HTTP/2 and HTTP/3: a request's
//! Host must be a name the connection's certificate serves, the default certificate
//! included (a name no certificate has is the default's). So a client served one
//! certificate (by its SNI, or by sending none) never reaches the routes or the client
//! verification of another's names: the certificate that served the connection was the one
//! whose `client-verify` the handshake applied. Without routes and without such
//! certificates, no request is looked at.

use std::sync::Arc;

use rustls::sign::CertifiedKey;

use crate::edge::route::{BackendId, RouteId, Routing, Target};
use crate::tls::sni::SniResolver;
use crate::tls::TlsState;

/// What a request's head says of where it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// To this backend, by this route.
    Backend(Target),
    /// Nowhere: its name is not the connection's (answered 421).
    Misdirected,
    /// Nowhere: its route's access rules refuse the client (answered 403, counted).
    Forbidden,
    /// Nowhere: its path holds an encoded slash or backslash, and
    /// `--http-refuse-encoded-slashes` refuses them (answered 400).
    EncodedSlash,
}

/// Why a path with an encoded separator is refused.
pub const ENCODED_SLASH: &str =
    "an encoded slash or backslash in the path (--http-refuse-encoded-slashes)";

/// One connection's routing of requests.
#[derive(Debug)]
pub struct Chooser {
    routing: Arc<Routing>,
    /// The connection's own backend (its server name's route, its frontend's, the default).
    fallback: BackendId,
    /// The frontend's certificates at the handshake, by name.
    resolver: Arc<SniResolver>,
    /// The certificate the connection was served: its SNI's, else the default.
    served: Arc<CertifiedKey>,
    /// The client, for routes' access rules, and where their refusals are counted.
    client: std::net::IpAddr,
    /// The server-name route that chose `fallback`, if one did.
    fallback_route: Option<RouteId>,
    clients: Arc<crate::clients::Clients>,
}

impl Chooser {
    /// Whether a connection's requests must be looked at: with routes, or when a
    /// certificate has a client verification of its own (whose names a client served
    /// another certificate must not reach).
    pub fn wanted(routing: &Routing, tls: &TlsState) -> bool {
        routing.routes() || !tls.by_cert.is_empty()
    }

    /// Routing for a connection whose own backend is `fallback` and which asked for `sni`
    /// (resolved against `resolver`, the frontend's certificates at the handshake).
    pub fn new(
        routing: Arc<Routing>,
        fallback: BackendId,
        resolver: &Arc<SniResolver>,
        sni: Option<&str>,
        client: (std::net::IpAddr, &Arc<crate::clients::Clients>),
    ) -> Self {
        Chooser {
            fallback_route: routing.sni_route(sni),
            routing,
            fallback,
            served: resolver.choose(sni).clone(),
            resolver: resolver.clone(),
            client: client.0,
            clients: client.1.clone(),
        }
    }

    /// The server-name route that chose the connection's own backend, if one did.
    pub fn fallback_route(&self) -> Option<RouteId> {
        self.fallback_route
    }

    /// The routing this connection started with.
    pub fn routing(&self) -> &Arc<Routing> {
        &self.routing
    }

    /// Where a request for `host` (its `Host` or `:authority`, a port allowed) and `path`
    /// goes. Without a host (HTTP/1.0 in origin form), the connection's backend.
    pub fn choose(&self, host: Option<&str>, path: &str) -> Choice {
        self.choose_for(host, path, self.client)
    }

    /// As [`Self::choose`], for a request whose client is `client` (`--trusted-proxies`:
    /// the one a trusted peer named), whom routes' rules judge.
    pub fn choose_for(&self, host: Option<&str>, path: &str, client: std::net::IpAddr) -> Choice {
        let Some(host) = host.map(without_port) else {
            return self.judged(self.fallback, self.fallback_route, "-", client);
        };
        // One certificate serves every name: nothing to look up.
        let only = self.resolver.all().len() == 1;
        if !only && !Arc::ptr_eq(self.resolver.choose(Some(host)), &self.served) {
            return Choice::Misdirected;
        }
        if self.routing.refuse_encoded_slashes && super::path::has_encoded_separator(path) {
            return Choice::EncodedSlash;
        }
        let path = super::path::for_matching(path);
        match self.routing.for_request(host, &path) {
            Some((b, route)) => self.judged(b, Some(route), host, client),
            None => self.judged(self.fallback, self.fallback_route, host, client),
        }
    }

    /// `backend`, unless the rules of `route`, which chose it, refuse `client`.
    fn judged(
        &self,
        backend: BackendId,
        route: Option<RouteId>,
        host: &str,
        client: std::net::IpAddr,
    ) -> Choice {
        let rules = route.and_then(|r| self.routing.route_rules(r));
        if !rules.is_some_and(|r| r.denies(client)) {
            return Choice::Backend(Target { backend, route });
        }
        self.clients.route_denied();
        tracing::debug!(
            name: "request_route_denied",
            client = %client,
            host,
            "a request for a route whose rules refuse the client: 403",
        );
        Choice::Forbidden
    }
}

/// `host[:port]` less its port (an IP literal keeps its brackets).
pub fn without_port(authority: &str) -> &str {
    match crate::http_host::parse(authority.as_bytes()) {
        Ok(a) => a.host,
        Err(_) => authority,
    }
}

/// An HTTP/1.1 request target taken apart (RFC 9112 §3.2): its authority in absolute form
/// (`scheme://authority/path`), and its path. Only a target that starts with a scheme is
/// absolute: a `://` later in an origin-form target (in its query) is part of its path.
pub fn split_target(target: &str) -> (Option<&str>, &str) {
    if target.starts_with('/') {
        return (None, target);
    }
    let Some((scheme, rest)) = target.split_once("://") else {
        return (None, target);
    };
    let is_scheme = scheme
        .as_bytes()
        .first()
        .is_some_and(u8::is_ascii_alphabetic)
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !is_scheme {
        return (None, target);
    }
    match rest.find(['/', '?', '#']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (Some(&rest[..i]), &rest[i..]),
        Some(i) => (Some(&rest[..i]), "/"),
        None => (Some(rest), "/"),
    }
}

/// The path of a request target: itself in origin form, what follows the authority in
/// absolute form.
pub fn path_of(target: &str) -> &str {
    split_target(target).1
}

/// The answer to a misdirected request.
pub const MISDIRECTED: &[u8] =
    b"HTTP/1.1 421 Misdirected Request\r\nContent-Type: text/plain\r\nContent-Length: 20\r\nConnection: close\r\n\r\nMisdirected Request\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_ports() {
        assert_eq!(path_of("/a/b?c"), "/a/b?c");
        assert_eq!(path_of("http://h:1/x/y"), "/x/y");
        assert_eq!(path_of("http://h"), "/");
        assert_eq!(without_port("a.example.com:8443"), "a.example.com");
        assert_eq!(without_port("[::1]:1"), "[::1]");
        let text = std::str::from_utf8(MISDIRECTED).unwrap();
        let (_, b) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(b.len(), 20);
    }

    #[test]
    fn a_scheme_later_in_the_target_is_its_query() {
        assert_eq!(split_target("/admin/x?u=://h/"), (None, "/admin/x?u=://h/"));
        assert_eq!(split_target("/pub?u=://h/api/"), (None, "/pub?u=://h/api/"));
        assert_eq!(split_target("x?u=://h/api/"), (None, "x?u=://h/api/"));
        assert_eq!(split_target("HTTP://h:8/a?b"), (Some("h:8"), "/a?b"));
        assert_eq!(split_target("http://h?q=/a"), (Some("h"), "/"));
        assert_eq!(split_target("*"), (None, "*"));
    }
}
