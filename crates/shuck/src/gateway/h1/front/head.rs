//! A request of the rewriter's output as the gateway core takes it: HTTP/1.1's
//! connection-specific fields become what they mean (the body's framing, whether the
//! connection ends after the answer, a WebSocket's upgrade named as HTTP/2 names it),
//! the rest goes as fields, and the core judges the request as it judges HTTP/2's and
//! HTTP/3's.

use http::header::{HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Uri};

use crate::gateway::fields::{connection_field, content_length, Rejected};

/// Most fields of a rewritten head: the client's (the rewriter allows 128) and those it
/// adds (forwarding, the request's ID).
const MAX_FIELDS: usize = 160;

/// How a request's body follows its head in the rewriter's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// None.
    None,
    /// This many bytes.
    Length(u64),
    /// Chunked, trailers after it.
    Chunked,
}

/// One request taken off the rewriter's output.
#[derive(Debug)]
pub(super) struct Message {
    /// What the core judges.
    pub parts: Parts,
    /// Its body's framing.
    pub framing: Framing,
    /// The client asked for the connection to end after the answer (`Connection: close`,
    /// HTTP/1.0 without `keep-alive`).
    pub close: bool,
    /// `HEAD`: the answer has no body, whatever its fields say.
    pub head: bool,
    /// An HTTP/1.0 client: no chunked answer, no interim answers.
    pub http10: bool,
}

/// The head at the start of `buf`, and its length; `None` while it is incomplete.
pub(super) fn parse(buf: &[u8]) -> Result<Option<(usize, Message)>, Rejected> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut fields);
    let n = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Rejected("a request head the core cannot read")),
    };
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(Rejected("malformed request line"));
    };
    let http10 = version == 0;
    let method = Method::from_bytes(method.as_bytes()).map_err(|_| Rejected("bad method"))?;
    let head = method == Method::HEAD;
    let mut out = Request::new(());
    // Absolute-form: the rewriter held its authority to Host's; the core gets the path.
    let (uri, authority) = target_of(target)?;
    *out.uri_mut() = uri;

    // What Connection names is this connection's (RFC 9110 §7.6.1): never passed on.
    let connection = connection_field(req.headers, !http10);
    let close = !connection.keep_alive;
    let mut upgrade = connection.upgrade;
    let mut framing = Framing::None;
    let mut host = false;
    let headers = out.headers_mut();
    for f in req.headers.iter() {
        let name =
            HeaderName::from_bytes(f.name.as_bytes()).map_err(|_| Rejected("bad field name"))?;
        match name.as_str() {
            "connection" | "keep-alive" | "proxy-connection" | "http2-settings" => continue,
            // The rewriter passed chunked as the last coding only.
            "transfer-encoding" => {
                framing = Framing::Chunked;
                continue;
            }
            "upgrade" => {
                let mut tokens = f.value.split(|&b| b == b',').map(<[u8]>::trim_ascii);
                upgrade &= tokens.any(|t| t.eq_ignore_ascii_case(b"websocket"));
                continue;
            }
            // Only `trailers` has a meaning beyond this connection.
            "te" => {
                let mut tokens = f.value.split(|&b| b == b',').map(<[u8]>::trim_ascii);
                if tokens.any(|t| t.eq_ignore_ascii_case(b"trailers")) {
                    headers.append(http::header::TE, HeaderValue::from_static("trailers"));
                }
                continue;
            }
            "content-length" => {
                let n =
                    content_length(f.value.trim_ascii()).ok_or(Rejected("bad Content-Length"))?;
                if n > 0 {
                    framing = Framing::Length(n);
                }
            }
            "host" => host = true,
            _ if connection
                .nominated
                .iter()
                .any(|t| t.eq_ignore_ascii_case(f.name.as_bytes())) =>
            {
                continue;
            }
            _ => {}
        }
        let value = HeaderValue::from_bytes(f.value).map_err(|_| Rejected("bad field value"))?;
        headers.append(name, value);
    }
    if let (false, Some(a)) = (host, authority) {
        let value = HeaderValue::from_bytes(a.as_bytes()).map_err(|_| Rejected("bad target"))?;
        headers.insert(http::header::HOST, value);
    }
    if upgrade {
        // A WebSocket, named as HTTP/2 names one (RFC 8441): the core decides.
        out.extensions_mut()
            .insert(h2::ext::Protocol::from_static("websocket"));
    }
    *out.method_mut() = method;
    let (parts, ()) = out.into_parts();
    let msg = Message {
        parts,
        framing,
        close,
        head,
        http10,
    };
    Ok(Some((n, msg)))
}

/// The target as the core's URI (origin-form, or `*`), and an absolute-form's authority.
fn target_of(target: &str) -> Result<(Uri, Option<&str>), Rejected> {
    if target.starts_with('/') || target == "*" {
        let uri = target.parse().map_err(|_| Rejected("bad request target"))?;
        return Ok((uri, None));
    }
    let (authority, path) = crate::gateway::choose::split_target(target);
    let path = if path.is_empty() { "/" } else { path };
    let uri = path.parse().map_err(|_| Rejected("bad request target"))?;
    Ok((uri, authority))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(head: &str) -> Message {
        let (n, m) = parse(head.as_bytes()).unwrap().unwrap();
        assert_eq!(n, head.len());
        m
    }

    #[test]
    fn connection_fields_become_what_they_mean() {
        let m = parsed(
            "POST /up HTTP/1.1\r\nHost: a.test\r\nConnection: close, x-secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\nTE: gzip, trailers\r\nTransfer-Encoding: chunked\r\nX-Forwarded-For: 192.0.2.1\r\n\r\n",
        );
        assert!(m.close && !m.http10 && !m.head);
        assert_eq!(m.framing, Framing::Chunked);
        let h = &m.parts.headers;
        assert!(h.get("x-secret").is_none() && h.get("keep-alive").is_none());
        assert!(h.get("transfer-encoding").is_none() && h.get("connection").is_none());
        assert_eq!(h["te"], "trailers");
        assert_eq!(h["host"], "a.test");
        assert_eq!(h["x-forwarded-for"], "192.0.2.1");
    }

    #[test]
    fn lengths_versions_and_targets() {
        let m = parsed("GET http://a.test:8443/x?y HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
        assert!(m.close && m.http10);
        assert_eq!(m.framing, Framing::None);
        assert_eq!(m.parts.uri, "/x?y");
        assert_eq!(m.parts.headers["host"], "a.test:8443");
        let m = parsed("PUT / HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 7\r\n\r\n");
        assert!(!m.close);
        assert_eq!(m.framing, Framing::Length(7));
        let m = parsed(
            "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        );
        assert!(m.parts.extensions.get::<h2::ext::Protocol>().is_some());
        let m = parsed("GET /x HTTP/1.1\r\nHost: a\r\nUpgrade: foo\r\n\r\n");
        assert!(m.parts.extensions.get::<h2::ext::Protocol>().is_none());
        assert!(parse(b"GET / HTTP/1.1\r\nHost: a\r\n").unwrap().is_none());
    }
}
