//! Several services behind one terminator: named backends (`--named-backend`, a
//! `backend = { ... }` block) and the routes that choose them (`--route`, a
//! `route = { ... }` block; a frontend's `backend = NAME`). The command line's `-b` and a
//! top-level `backend = "ADDRESS"` stay the default backend, so a hitch configuration means
//! what it always meant.

use super::named_backend::{bad, check_name, is_dns_name};
pub use super::named_backend::{
    parse_backend, GrpcRetryOn, NamedBackend, Proto, UpstreamTls, BACKEND_KEYS, MAX_STREAMS,
};
use super::ConfigError;

/// The name the default backend (`-b`) answers to in routes and metrics.
pub const DEFAULT_BACKEND: &str = "default";

/// The keys of a route block, for messages.
pub const ROUTE_KEYS: &str =
    "sni, host, path-prefix, backend, client-allow, client-deny, request-header, response-header, max-body-bytes, error-page, maintenance-page, redirect, redirect-code, strip-prefix, replace-prefix";

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
    /// `--http`: its level of the edge's policy (header rules, body limit).
    pub policy: super::policy::Policy,
    /// `--http`: a redirect it answers, or the path it sends rewritten.
    pub action: super::rewrite::RouteAction,
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

/// `sni=NAME;backend=B` or `host=NAME[;path-prefix=/P];backend=B`: a route.
pub fn parse_route(spec: &str) -> Result<RouteSpec, ConfigError> {
    let bad = |reason: String| bad("--route", spec, reason);
    let (mut sni, mut host, mut prefix, mut backend) = (None, None, None, None);
    let mut rules: Option<crate::clients::Rules> = None;
    let mut policy = super::policy::Policy::default();
    let (mut redirect, mut code, mut strip, mut replace) = (None, None, false, None);
    let parts = super::policy::split_spec(spec);
    for part in &parts {
        if part.trim().is_empty() {
            continue;
        }
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| bad(format!("{part:?}: expected key=value")))?;
        let (k, v) = (k.trim(), v.trim());
        if policy.set(k, v).map_err(&bad)? {
            continue;
        }
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
            "redirect" => redirect = Some(super::rewrite::Redirect::parse(v).map_err(&bad)?),
            "redirect-code" => {
                let c = super::redirect::parse_code(v).map_err(|r| format!("redirect-code: {r}"));
                code = Some(c.map_err(&bad)?);
            }
            "strip-prefix" => {
                strip =
                    super::cli::parse_on_off(v).map_err(|r| bad(format!("strip-prefix: {r}")))?
            }
            "replace-prefix" => {
                replace = Some(super::rewrite::parse_replacement(v).map_err(&bad)?);
            }
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
    let action = route_action(
        redirect,
        code,
        strip,
        replace,
        prefix.as_deref(),
        host.is_some(),
    )
    .map_err(&bad)?;
    let backend = match (backend, &action.redirect) {
        (Some(_), Some(_)) => return Err(bad(
            "a route that redirects sends nothing to a backend: give redirect or backend, not both"
                .into(),
        )),
        // Never used: the route answers every request it takes itself.
        (None, Some(_)) => DEFAULT_BACKEND.to_owned(),
        (b, None) => {
            b.ok_or_else(|| bad("a route needs backend = \"NAME\" (or redirect = \"URL\")".into()))?
        }
    };
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
        policy,
        action,
    })
}

/// A route's `redirect`, `redirect-code`, `strip-prefix` and `replace-prefix`, checked
/// together: a rewrite replaces the route's `path-prefix`, which only a host route has.
fn route_action(
    redirect: Option<super::rewrite::Redirect>,
    code: Option<u16>,
    strip: bool,
    replace: Option<String>,
    prefix: Option<&str>,
    host: bool,
) -> Result<super::rewrite::RouteAction, String> {
    let redirect = match (redirect, code) {
        (None, Some(_)) => return Err("redirect-code goes with redirect = \"URL\"".into()),
        (Some(mut r), c) => {
            r.code = c.unwrap_or(r.code);
            Some(r)
        }
        (None, None) => None,
    };
    if (redirect.is_some() || strip || replace.is_some()) && !host {
        return Err(
            "redirect, strip-prefix and replace-prefix go with host (a request's), not with sni"
                .into(),
        );
    }
    let to = match (strip, replace) {
        (true, Some(_)) => return Err("strip-prefix or replace-prefix, not both".into()),
        (true, None) => Some("/".to_owned()),
        (false, r) => r,
    };
    let rewrite = match (to, prefix) {
        (Some(_), _) if redirect.is_some() => return Err(
            "a route that redirects sends no path: strip-prefix and replace-prefix go with backend"
                .into(),
        ),
        (Some(_), None) => {
            return Err(
                "strip-prefix and replace-prefix replace the route's path-prefix: give one".into(),
            )
        }
        (Some(to), Some(p)) => Some(super::rewrite::PathRewrite {
            prefix: p.to_owned(),
            to,
        }),
        (None, _) => None,
    };
    Ok(super::rewrite::RouteAction { redirect, rewrite })
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
        if !http && r.action.any() {
            return Err(ConfigError::Nth {
                option: "--route",
                index: i,
                reason:
                    "redirect, strip-prefix and replace-prefix act on requests: they need --http"
                        .into(),
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
        let to = match &r.action.redirect {
            Some(rd) => format!("redirect {} {}", rd.code, rd.template()),
            None => r.backend.clone(),
        };
        lines.push(format!("route: {what} -> {to}"));
        if let Some(rw) = &r.action.rewrite {
            lines.push(format!("  path sent: {}* as {}*", rw.prefix, rw.to));
        }
        // The rules it ends up with: its own, else its backend's, else the global ones
        // (a frontend's own replace the global ones on its connections).
        let backend = config.named_backends.iter().find(|b| b.name == r.backend);
        let level = |pick: fn(&super::policy::Policy) -> bool| {
            [
                Some(&r.policy),
                backend.map(|b| &b.policy),
                Some(&config.policy),
            ]
            .into_iter()
            .flatten()
            .find(|p| pick(p))
        };
        let rules =
            |name: &str, rules: Option<&super::policy::HeaderRules>, lines: &mut Vec<String>| {
                for rule in rules.into_iter().flat_map(|r| r.0.iter()) {
                    lines.push(format!("  {name} {}", rule.written()));
                }
            };
        let request = level(|p| p.request.is_some()).and_then(|p| p.request.as_deref());
        rules("request-header", request, &mut lines);
        let response = level(|p| p.response.is_some()).and_then(|p| p.response.as_deref());
        rules("response-header", response, &mut lines);
        if let Some(Some(n)) = level(|p| p.max_body.is_some()).and_then(|p| p.max_body) {
            lines.push(format!("  max-body-bytes {n}"));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::backend::Preamble;
    use std::time::Duration;

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
                policy: Default::default(),
                action: Default::default(),
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
