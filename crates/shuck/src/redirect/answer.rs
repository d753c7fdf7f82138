//! The answer the plain-HTTP listener gives one request head: an ACME http-01 token's key
//! authorization when ACME is on, else a redirect to the same URL in https, or 400 when
//! the request names no host that may be reflected into a `Location`.

use std::fmt::Write as _;

use crate::gateway::choose::split_target;

/// Where http-01's answers live.
const ACME_PREFIX: &str = "/.well-known/acme-challenge/";

/// How the listener answers (`--redirect-code`, `--redirect-port`, ACME on or off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// The redirect's status: 301, 302, 303, 307 or 308.
    pub code: u16,
    /// The port written in the `Location` (none: https's own, 443).
    pub port: Option<u16>,
    /// Whether http-01 tokens are answered (ACME is on).
    pub acme: bool,
}

/// What the answer asks of the connection after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// The next request may follow.
    KeepAlive,
    /// The connection ends (the client asked, HTTP/1.0, a body that is not read, an error).
    Close,
}

/// How a head was answered, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A redirect.
    Redirect,
    /// An http-01 token's answer (or its 404).
    Acme,
    /// A request refused (400, 431).
    Bad,
}

/// Answers the head in `head` into `out` (appended), or returns `None` while it is
/// incomplete and there is room for more (`full`: there is none).
pub fn respond(head: &[u8], full: bool, s: Settings, out: &mut Vec<u8>) -> Option<(After, Kind)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => Some(answer(&req, s, out)),
        Ok(httparse::Status::Partial) if !full => None,
        Ok(httparse::Status::Partial) => {
            plain(out, 431, "Request Header Fields Too Large", "");
            Some((After::Close, Kind::Bad))
        }
        Err(_) => {
            plain(out, 400, "Bad Request", "");
            Some((After::Close, Kind::Bad))
        }
    }
}

/// The length of the head at the start of `buf`, once it is whole.
pub fn head_len(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn answer(req: &httparse::Request<'_, '_>, s: Settings, out: &mut Vec<u8>) -> (After, Kind) {
    let target = req.path.unwrap_or("");
    let (authority, path) = split_target(target);
    let after = after(req);
    if s.acme {
        if let Some(token) = path.strip_prefix(ACME_PREFIX) {
            match crate::acme::answers::answers().http(token) {
                Some(key_auth) => {
                    tracing::info!(name: "http01_answered", "answered an ACME http-01 challenge");
                    plain(out, 200, "OK", &key_auth);
                }
                None => plain(out, 404, "Not Found", ""),
            }
            return (After::Close, Kind::Acme);
        }
    }
    // One Host, a plain host name or address, as --http mode takes it (the target's own
    // authority in absolute form, RFC 9112 §3.2.2): nothing else is reflected.
    let mut hosts = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"));
    let host = match (authority, hosts.next(), hosts.next()) {
        (_, _, Some(_)) => None,
        (Some(a), _, None) => Some(a.as_bytes()),
        (None, Some(h), None) => Some(h.value),
        (None, None, _) => None,
    };
    let host = host
        .and_then(|h| crate::http_host::parse(h).ok())
        .filter(|a| a.is_plain_name())
        .map(|a| a.host);
    match host {
        Some(host) if path.starts_with('/') => {
            // Lowercase, as nginx's $host.
            let host = host.to_ascii_lowercase();
            let code = s.code;
            let _ = write!(
                Bytes(out),
                "HTTP/1.1 {code} {}\r\nLocation: https://{host}",
                crate::config::redirect::reason(code)
            );
            if let Some(port) = s.port.filter(|&p| p != 443) {
                let _ = write!(Bytes(out), ":{port}");
            }
            out.extend_from_slice(path.as_bytes());
            out.extend_from_slice(b"\r\nContent-Length: 0\r\n");
            if after == After::Close {
                out.extend_from_slice(b"Connection: close\r\n");
            }
            out.extend_from_slice(b"\r\n");
            (after, Kind::Redirect)
        }
        _ => {
            plain(out, 400, "Bad Request", "");
            (After::Close, Kind::Bad)
        }
    }
}

/// Whether the connection may carry another request after this one: HTTP/1.1 without
/// `Connection: close`, HTTP/1.0 with `keep-alive`, and no body (one is never read).
fn after(req: &httparse::Request<'_, '_>) -> After {
    let mut keep = req.version == Some(1);
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("connection") {
            for t in h.value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if t.eq_ignore_ascii_case(b"close") {
                    return After::Close;
                }
                if t.eq_ignore_ascii_case(b"keep-alive") {
                    keep = true;
                }
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding")
            || (h.name.eq_ignore_ascii_case("content-length") && h.value.trim_ascii() != b"0")
        {
            return After::Close;
        }
    }
    if keep {
        After::KeepAlive
    } else {
        After::Close
    }
}

/// A text answer that ends the connection.
pub fn plain(out: &mut Vec<u8>, code: u16, reason: &str, body: &str) {
    let _ = write!(
        Bytes(out),
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// `write!` into a byte buffer.
struct Bytes<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Settings = Settings {
        code: 308,
        port: None,
        acme: true,
    };

    fn answer(head: &str, s: Settings) -> (String, After) {
        let mut out = Vec::new();
        let (after, _) = respond(head.as_bytes(), false, s, &mut out).unwrap();
        (String::from_utf8(out).unwrap(), after)
    }

    #[test]
    fn only_one_plain_host_is_reflected() {
        let (moved, after) = answer("GET /x?y HTTP/1.1\r\nHost: a.test:80\r\n\r\n", S);
        assert!(moved.starts_with("HTTP/1.1 308 Permanent Redirect\r\n"));
        assert!(
            moved.contains("Location: https://a.test/x?y\r\n"),
            "{moved}"
        );
        assert_eq!(after, After::KeepAlive);
        let (moved, _) = answer("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", S);
        assert!(moved.contains("Location: https://[::1]/\r\n"), "{moved}");
        for host in [
            "Host: a.test\r\nHost: b.test",
            "Host: evil.test/x",
            "Host: a@b",
            "Host: a,b",
            "Host: a b",
            "Host: a%2fb",
            "Host: a:99999",
            "Host: [::1",
            "Host: ",
            "X: no host",
        ] {
            let (got, after) = answer(&format!("GET / HTTP/1.1\r\n{host}\r\n\r\n"), S);
            assert!(got.starts_with("HTTP/1.1 400"), "{host}: {got}");
            assert_eq!(after, After::Close);
        }
    }

    #[test]
    fn the_code_the_port_and_absolute_form() {
        let s = Settings {
            code: 301,
            port: Some(8443),
            acme: false,
        };
        let (moved, _) = answer("GET http://b.test/p HTTP/1.1\r\nHost: b.test\r\n\r\n", s);
        assert!(moved.starts_with("HTTP/1.1 301 Moved Permanently\r\n"));
        assert!(
            moved.contains("Location: https://b.test:8443/p\r\n"),
            "{moved}"
        );
        // ACME off: the challenge's path is redirected like any other.
        let (moved, _) = answer(
            "GET /.well-known/acme-challenge/t HTTP/1.1\r\nHost: b.test\r\n\r\n",
            s,
        );
        assert!(
            moved.contains("/.well-known/acme-challenge/t\r\n"),
            "{moved}"
        );
        // ACME on: an unknown token is 404.
        let (got, _) = answer(
            "GET /.well-known/acme-challenge/t HTTP/1.1\r\nHost: b.test\r\n\r\n",
            S,
        );
        assert!(got.starts_with("HTTP/1.1 404"), "{got}");
    }

    #[test]
    fn what_ends_the_connection() {
        for (head, after) in [
            (
                "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
                After::Close,
            ),
            ("GET / HTTP/1.0\r\nHost: a\r\n\r\n", After::Close),
            (
                "GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
                After::KeepAlive,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n",
                After::Close,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
                After::Close,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
                After::KeepAlive,
            ),
        ] {
            let (got, a) = answer(head, S);
            assert_eq!(a, after, "{head}");
            assert_eq!(
                got.contains("Connection: close"),
                after == After::Close,
                "{got}"
            );
        }
        // HTTP/1.0 without a Host names nothing to send it to.
        let (got, _) = answer("GET / HTTP/1.0\r\n\r\n", S);
        assert!(got.starts_with("HTTP/1.1 400"), "{got}");
        let mut out = Vec::new();
        assert!(respond(b"GET / HTTP/1.1\r\nHo", false, S, &mut out).is_none());
        assert!(respond(b"GET / HTTP/1.1\r\nHo", true, S, &mut out).is_some());
        assert!(String::from_utf8(out).unwrap().starts_with("HTTP/1.1 431"));
    }
}
