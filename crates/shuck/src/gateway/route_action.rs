//! What a route does to a request it chose, besides sending it to its backend
//! (`config/rewrite.rs`): answer a redirect itself, or send another path. One reading for
//! HTTP/1.1's rewriter and the core's HTTP/2 and HTTP/3 intake.

use super::choose::without_port;
use crate::edge::route::{Routing, Target};

/// A route's verdict on one request.
#[derive(Debug, PartialEq, Eq)]
pub enum Acted {
    /// Sent as it came.
    Pass,
    /// Answered with this redirect code and `Location`; nothing reaches a backend.
    Redirect(u16, String),
    /// Sent with this path and query in place of the client's.
    Rewritten(String),
}

/// What the route of `to` does to a request for `host` (its Host or `:authority`, a port
/// allowed) and `target` (its path and query as the client wrote them, origin form).
pub fn act(routing: &Routing, to: Target, host: Option<&str>, target: &str) -> Acted {
    let Some(action) = to.route.and_then(|r| routing.route_action(r)) else {
        return Acted::Pass;
    };
    if let Some(r) = &action.redirect {
        let host = host.map(without_port).unwrap_or_default();
        return Acted::Redirect(r.code, r.location(&host.to_ascii_lowercase(), target));
    }
    if let Some(rw) = &action.rewrite {
        // The path the route matched (normalized: `//`, dot segments and encoded
        // unreserved bytes as routes read them), so that the prefix removed is the one
        // that chose the route, whatever the client's spelling of it.
        let matched = super::path::for_matching(target);
        let query = target.split_once('?').map(|(_, q)| q);
        if let Some(path) = rw.apply(&matched, query) {
            return Acted::Rewritten(path);
        }
    }
    Acted::Pass
}

/// An HTTP/1.1 answer of shuck's: the redirect, then the connection closes.
pub fn h1_redirect(code: u16, location: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {code} {}\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        crate::config::redirect::reason(code)
    )
    .into_bytes()
}
