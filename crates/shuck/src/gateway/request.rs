//! An HTTP/2 request as the HTTP/1.1 request head the backend gets, with exactly the
//! hygiene of the HTTP/1.1 path (`h1/request/`): the client's forwarding headers
//! removed under any spelling, ours added. Connection-specific fields and a `TE` other
//! than `trailers` make the request malformed (RFC 9113 §8.2.2); cookie crumbs are joined
//! (§8.2.3); `Host` comes from `:authority` (§8.3.1).

use http::request::Parts;
use http::{header, Method, StatusCode};

use crate::gateway::fields::content_length;
use crate::gateway::fields::Forwarding;

/// Why a request is not passed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Malformed (RFC 9113 §8.1.1): the stream is reset with `PROTOCOL_ERROR`.
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    /// Well-formed but not served: answered with this status.
    #[error("request refused ({0}): {1}")]
    Status(StatusCode, &'static str),
}

/// How the request's body travels to the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// No body (the client ended the stream with its head).
    None,
    /// This many bytes, as the client's `content-length` declared them: the exchange
    /// holds the DATA received to it (RFC 9113 §8.1.1, RFC 9114 §4.1.2), whatever the
    /// version's library checks, so that no byte past it reaches the backend as a request
    /// of its own and none short of it leaves the backend waiting.
    Length(u64),
    /// No length declared: chunked, and the client's trailers follow it; its data held
    /// to the edge policy's limit (`--max-body-bytes`).
    Chunked(crate::gateway::policy::body::Budget),
    /// A WebSocket's bytes after the backend's `101` (extended CONNECT, RFC 8441).
    Tunnel,
}

/// What the answer will be framed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An ordinary request.
    Normal,
    /// `HEAD`: the answer has no body.
    Head,
    /// A WebSocket over extended CONNECT: the backend must answer `101` with this
    /// `Sec-WebSocket-Accept`.
    Upgrade([u8; 28]),
}

/// The GUID of RFC 6455 §1.3, hashed with the key into `Sec-WebSocket-Accept`.
const WS_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Fields that are only meaningful on one HTTP/1.1 connection (RFC 9113 §8.2.2).
pub fn connection_specific(name: &header::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade"
    )
}

/// Where a request's head goes once judged: HTTP/1.1's bytes (`Vec<u8>`) or an HTTP/2
/// backend's fields (`upstream/head.rs`), so that both carry exactly the same fields.
pub trait HeadOut {
    /// The method and the target.
    fn start(&mut self, method: &str, path: &str);
    /// `Host` (HTTP/1.1), `:authority` (HTTP/2).
    fn host(&mut self, host: &[u8]);
    /// A field passed on.
    fn field(&mut self, name: &[u8], value: &[u8]);
    /// A field of the client's passed on as it is.
    fn header(&mut self, name: &http::HeaderName, value: &http::HeaderValue) {
        self.field(name.as_str().as_bytes(), value.as_bytes());
    }
    /// The client's cookie crumbs (RFC 9113 §8.2.3).
    fn cookies<'a>(&mut self, crumbs: impl Iterator<Item = &'a http::HeaderValue>);
    /// The client's `TE: trailers`, which only HTTP/2 passes on (an HTTP/1.1 backend's
    /// answer is read whatever it says).
    fn te_trailers(&mut self) {}
    /// A body without a declared length follows.
    fn chunked(&mut self);
    /// A header rule's field (`--request-header`).
    fn rule(&mut self, r: &crate::config::policy::HeaderRule) {
        self.field(r.lower.as_str().as_bytes(), r.value.as_bytes());
    }
    /// A WebSocket's upgrade with its `Sec-WebSocket-Key`.
    fn upgrade(&mut self, key: &[u8]);
    /// The forwarding headers, ending the head.
    fn end(&mut self, fwd: &Forwarding);
}

impl HeadOut for Vec<u8> {
    fn start(&mut self, method: &str, path: &str) {
        self.extend_from_slice(method.as_bytes());
        self.push(b' ');
        self.extend_from_slice(path.as_bytes());
        self.extend_from_slice(b" HTTP/1.1\r\n");
    }

    fn host(&mut self, host: &[u8]) {
        self.extend_from_slice(b"Host: ");
        self.extend_from_slice(host);
        self.extend_from_slice(b"\r\n");
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.extend_from_slice(name);
        self.extend_from_slice(b": ");
        self.extend_from_slice(value);
        self.extend_from_slice(b"\r\n");
    }

    fn cookies<'a>(&mut self, crumbs: impl Iterator<Item = &'a http::HeaderValue>) {
        // The crumbs become one field again, joined by "; ".
        for (i, c) in crumbs.enumerate() {
            self.extend_from_slice(if i == 0 { b"Cookie: " } else { b"; " });
            self.extend_from_slice(c.as_bytes());
        }
        self.extend_from_slice(b"\r\n");
    }

    fn chunked(&mut self) {
        self.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }

    fn rule(&mut self, r: &crate::config::policy::HeaderRule) {
        // HTTP/1.1 writes the name as the operator did.
        self.field(r.name.as_bytes(), r.value.as_bytes());
    }

    fn upgrade(&mut self, key: &[u8]) {
        self.extend_from_slice(b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ");
        self.extend_from_slice(key);
        self.extend_from_slice(b"\r\n");
    }

    fn end(&mut self, fwd: &Forwarding) {
        self.extend_from_slice(fwd.lines.as_bytes());
    }
}

/// Judges `req` and writes its head to `out` (HTTP/1.1's bytes, or an HTTP/2 backend's
/// fields). `end_stream`: the client sent no body. `sent_path`: the path and query sent in
/// place of the client's (a route's rewrite; the client's is judged all the same).
pub fn build<H: HeadOut>(
    req: &Parts,
    end_stream: bool,
    fwd: &Forwarding,
    id: Option<&crate::access::request_id::RequestId>,
    rules: Option<&crate::config::policy::HeaderRules>,
    sent_path: Option<&str>,
    out: &mut H,
) -> Result<(Body, Kind), Refusal> {
    let mut rules = crate::gateway::policy::RequestRules::new(rules);
    let protocol = req.extensions.get::<h2::ext::Protocol>();
    let (method, kind) = match (&req.method, protocol) {
        // Extended CONNECT (RFC 8441, RFC 9220), or HTTP/1.1's GET with its Upgrade
        // (`h1/front/head.rs`).
        (&Method::CONNECT | &Method::GET, Some(p))
            if p.as_str().eq_ignore_ascii_case("websocket") =>
        {
            ("GET", Kind::Upgrade([0; 28]))
        }
        (&Method::CONNECT, Some(_)) => {
            return Err(Refusal::Status(
                StatusCode::NOT_IMPLEMENTED,
                "only the websocket protocol is carried",
            ))
        }
        (&Method::CONNECT, None) => {
            return Err(Refusal::Status(
                StatusCode::METHOD_NOT_ALLOWED,
                "CONNECT is not supported",
            ))
        }
        (&Method::HEAD, _) => ("HEAD", Kind::Head),
        (m, _) => (m.as_str(), Kind::Normal),
    };
    let path = req
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .filter(|p| !p.is_empty())
        .ok_or(Refusal::Malformed("no :path"))?;
    if path != "*" && !path.starts_with('/') {
        return Err(Refusal::Malformed(":path is not an absolute path"));
    }
    if path == "*" && req.method != Method::OPTIONS {
        return Err(Refusal::Malformed(":path * outside OPTIONS"));
    }
    out.start(method, sent_path.unwrap_or(path));
    // What the HTTP/1.1 path refuses in a Host is refused here too (400).
    let checked = |value: &[u8]| {
        crate::http_host::parse(value)
            .map(|_| ())
            .map_err(|_| Refusal::Status(StatusCode::BAD_REQUEST, "a bad :authority or Host"))
    };
    // One Host at most, and the same name as :authority when both are given (RFC 9113
    // §8.3.1, RFC 9114 §4.3.1): a backend must not read a name other than the one routed.
    let mut hosts = req.headers.get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(Refusal::Malformed("more than one Host"));
    }
    match (req.uri.authority(), host) {
        (Some(a), _) if a.as_str().contains('@') => {
            return Err(Refusal::Malformed(":authority holds userinfo"))
        }
        (Some(a), Some(h)) if a.as_str().as_bytes() != h.as_bytes() => {
            return Err(Refusal::Malformed(":authority and Host differ"))
        }
        (Some(a), _) => {
            checked(a.as_str().as_bytes())?;
            out.host(a.as_str().as_bytes())
        }
        (None, Some(h)) => {
            checked(h.as_bytes())?;
            out.host(h.as_bytes())
        }
        (None, None) => {
            return Err(Refusal::Status(
                StatusCode::BAD_REQUEST,
                "neither :authority nor Host",
            ))
        }
    }

    let mut length: Option<u64> = None;
    let mut cookies = 0;
    for (name, value) in &req.headers {
        if connection_specific(name) {
            return Err(Refusal::Malformed("a connection-specific header field"));
        }
        match name.as_str() {
            "te" if value.as_bytes().eq_ignore_ascii_case(b"trailers") => {
                out.te_trailers();
                continue;
            }
            "te" => return Err(Refusal::Malformed("TE other than trailers")),
            "host" => continue, // from :authority, or written above
            "cookie" => {
                cookies += 1; // written below, as one field
                continue;
            }
            "content-length" => {
                let Some(v) = content_length(value.as_bytes()) else {
                    return Err(Refusal::Malformed("bad content-length"));
                };
                if length.is_some_and(|l| l != v) {
                    return Err(Refusal::Malformed("conflicting content-length"));
                }
                if length.is_some() {
                    continue;
                }
                length = Some(v);
            }
            // A WebSocket's handshake fields are the backend connection's own.
            "sec-websocket-key" | "sec-websocket-version" if protocol.is_some() => continue,
            _ => {}
        }
        if fwd.strips(name.as_str().as_bytes()) {
            continue; // the client's own claims: never passed on
        }
        if fwd.is_request_id(name.as_str().as_bytes()) {
            continue; // the request's ID, written below
        }
        if !rules.is_empty() && !rules.keeps(name.as_str().as_bytes()) {
            continue; // a rule's own value, written below
        }
        out.header(name, value);
    }
    if cookies > 0 {
        out.cookies(req.headers.get_all(header::COOKIE).iter());
    }

    let body = match kind {
        // The backend would wait for a body that, in a tunnel, never comes as one (nginx: 400).
        Kind::Upgrade(_) if length.is_some() => {
            return Err(Refusal::Status(
                StatusCode::BAD_REQUEST,
                "content-length in an extended CONNECT",
            ))
        }
        Kind::Upgrade(_) => Body::Tunnel,
        // A body declared and none sent would hold the backend waiting for it.
        _ if end_stream && length.is_some_and(|n| n > 0) => {
            return Err(Refusal::Malformed("content-length with no body"))
        }
        _ if end_stream => Body::None,
        _ => match length {
            Some(n) => Body::Length(n),
            None => {
                out.chunked();
                Body::Chunked(Default::default())
            }
        },
    };
    let kind = match kind {
        Kind::Upgrade(_) => {
            let key = websocket_key();
            out.upgrade(key.as_bytes());
            Kind::Upgrade(websocket_accept(key.as_bytes()))
        }
        k => k,
    };
    if let (Some(id), Some(spec)) = (id, &fwd.request_id) {
        out.field(spec.name.as_bytes(), id.as_bytes());
    }
    rules.finish(|r| out.rule(r));
    out.end(fwd);
    Ok((body, kind))
}

/// A fresh `Sec-WebSocket-Key`: 16 random bytes in base64 (RFC 6455 §4.1).
fn websocket_key() -> String {
    use base64::Engine;
    let mut raw = [0u8; 16];
    // The key only has to differ between handshakes; a failing RNG leaves zeros, which the
    // backend accepts just the same.
    let _ = aws_lc_rs::rand::fill(&mut raw);
    base64::engine::general_purpose::STANDARD.encode(raw)
}

/// The `Sec-WebSocket-Accept` a backend must answer `key` with (RFC 6455 §4.2.2).
pub fn websocket_accept(key: &[u8]) -> [u8; 28] {
    use base64::Engine;
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(key);
    ctx.update(WS_GUID);
    let mut out = [0u8; 28];
    let n = base64::engine::general_purpose::STANDARD
        .encode_slice(ctx.finish().as_ref(), &mut out)
        .unwrap_or(0);
    debug_assert_eq!(n, 28);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(req: http::Request<()>, end_stream: bool) -> Result<(String, Body), Refusal> {
        let fwd = Forwarding::new("203.0.113.5".parse().unwrap(), Some(("X-Client", None)));
        let (parts, ()) = req.into_parts();
        let mut out = Vec::new();
        let (body, _) = build(&parts, end_stream, &fwd, None, None, None, &mut out)?;
        Ok((String::from_utf8(out).unwrap(), body))
    }

    #[test]
    fn hygiene_of_the_http1_path() {
        let req = http::Request::get("https://example.test/a?b=1")
            .header("x_forwarded_for", "6.6.6.6")
            .header("X-Forwarded-Proto", "http")
            .header("forwarded", "for=6.6.6.6")
            .header("x-client", "CN=mallory")
            .header("cookie", "a=1")
            .header("accept", "*/*")
            .header("cookie", "b=2")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (h, body) = head(req, true).unwrap();
        assert_eq!(
            h,
            "GET /a?b=1 HTTP/1.1\r\nHost: example.test\r\naccept: */*\r\nCookie: a=1; b=2\r\nX-Forwarded-For: 203.0.113.5\r\nX-Forwarded-Proto: https\r\n\r\n"
        );
        assert_eq!(body, Body::None);
    }

    #[test]
    fn framing_follows_the_client() {
        let post = || http::Request::post("https://a.test/up");
        let (h, body) = head(
            post().header("content-length", "5").body(()).unwrap(),
            false,
        )
        .unwrap();
        assert!(h.contains("content-length: 5\r\n"), "{h}");
        assert_eq!(body, Body::Length(5));
        let (h, body) = head(post().body(()).unwrap(), false).unwrap();
        assert!(h.contains("Transfer-Encoding: chunked\r\n"), "{h}");
        assert!(matches!(body, Body::Chunked(_)));
    }

    #[test]
    fn malformed_and_refused() {
        for (req, want) in [
            (
                http::Request::get("https://a.test/").header("connection", "close"),
                Refusal::Malformed("a connection-specific header field"),
            ),
            (
                http::Request::get("https://a.test/").header("te", "gzip"),
                Refusal::Malformed("TE other than trailers"),
            ),
            (
                http::Request::get("https://a.test/")
                    .header("content-length", "1")
                    .header("content-length", "2"),
                Refusal::Malformed("conflicting content-length"),
            ),
            (
                http::Request::get("/x"),
                Refusal::Status(StatusCode::BAD_REQUEST, "neither :authority nor Host"),
            ),
            (
                http::Request::connect("a.test:443"),
                Refusal::Status(StatusCode::METHOD_NOT_ALLOWED, "CONNECT is not supported"),
            ),
        ] {
            assert_eq!(head(req.body(()).unwrap(), true).unwrap_err(), want);
        }
    }

    #[test]
    fn websocket_becomes_an_upgrade() {
        let mut req = http::Request::connect("https://a.test/chat")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-protocol", "chat")
            .body(())
            .unwrap();
        req.extensions_mut()
            .insert(h2::ext::Protocol::from_static("websocket"));
        let (h, body) = head(req, false).unwrap();
        assert!(
            h.starts_with("GET /chat HTTP/1.1\r\nHost: a.test\r\n"),
            "{h}"
        );
        assert!(
            h.contains("Upgrade: websocket\r\nConnection: Upgrade\r\n"),
            "{h}"
        );
        assert_eq!(h.matches("Sec-WebSocket-Version").count(), 1, "{h}");
        assert!(h.contains("sec-websocket-protocol: chat\r\n"), "{h}");
        assert_eq!(body, Body::Tunnel);
        let mut req = http::Request::connect("https://a.test/chat")
            .header("content-length", "5")
            .body(())
            .unwrap();
        req.extensions_mut()
            .insert(h2::ext::Protocol::from_static("websocket"));
        assert!(matches!(
            head(req, false),
            Err(Refusal::Status(StatusCode::BAD_REQUEST, _))
        ));
        // RFC 6455's own example.
        assert_eq!(
            &websocket_accept(b"dGhlIHNhbXBsZSBub25jZQ=="),
            b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }
}
