//! `--http` with routes: each request's backend, by its `Host` (or `:authority`) and path,
//! and the requests that are misdirected (RFC 9110 §15.5.20): a name the connection's
//! certificate does not cover, as when a browser coalesces two names on one connection and
//! the certificate served for the first does not cover the second. Shared by HTTP/1.1 and
//! HTTP/2; without routes no request is looked at.

use std::sync::Arc;

use rustls::sign::CertifiedKey;

use crate::proxy::route::{BackendId, Routing};
use crate::tls::sni::SniResolver;

/// What a request's head says of where it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// To this backend.
    Backend(BackendId),
    /// Nowhere: its name is not the connection's (answered 421).
    Misdirected,
}

/// One connection's routing of requests.
#[derive(Debug)]
pub struct Chooser {
    routing: Arc<Routing>,
    /// The connection's own backend (its server name's route, its frontend's, the default).
    fallback: BackendId,
    /// The certificate served because the client asked for its name, with the index that
    /// chose it; `None` when the default was served (no name, or one no certificate has).
    served: Option<(Arc<SniResolver>, Arc<CertifiedKey>)>,
}

impl Chooser {
    /// Routing for a connection whose own backend is `fallback` and which asked for `sni`
    /// (resolved against `resolver`, the frontend's certificates at the handshake).
    pub fn new(
        routing: Arc<Routing>,
        fallback: BackendId,
        resolver: &Arc<SniResolver>,
        sni: Option<&str>,
    ) -> Self {
        let served = sni
            .and_then(|n| resolver.lookup(n))
            .map(|k| (resolver.clone(), k.clone()));
        Chooser {
            routing,
            fallback,
            served,
        }
    }

    /// The routing this connection started with.
    pub fn routing(&self) -> &Arc<Routing> {
        &self.routing
    }

    /// Where a request for `host` (its `Host` or `:authority`, a port allowed) and `path`
    /// goes. Without a host (HTTP/1.0), the connection's backend.
    pub fn choose(&self, host: Option<&str>, path: &str) -> Choice {
        let Some(host) = host.map(without_port) else {
            return Choice::Backend(self.fallback);
        };
        if let Some((resolver, served)) = &self.served {
            let covered = resolver
                .lookup(host)
                .is_some_and(|k| Arc::ptr_eq(k, served));
            if !covered {
                return Choice::Misdirected;
            }
        }
        Choice::Backend(self.routing.for_request(self.fallback, host, path))
    }
}

/// `host[:port]` less its port (an IP literal keeps its brackets).
fn without_port(authority: &str) -> &str {
    match crate::http_host::parse(authority.as_bytes()) {
        Ok(a) => a.host,
        Err(_) => authority,
    }
}

/// The path of a request target: itself in origin form, what follows the authority in
/// absolute form.
pub fn path_of(target: &str) -> &str {
    match target.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => target,
    }
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
}
