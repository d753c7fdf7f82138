//! What the fields of a request head may hold, and which the client may not set: the
//! forwarding headers shuck writes (`Forwarding`, shared by the three versions), the names removed under
//! any spelling, a `Host` that is `uri-host[:port]`, a trailer section checked as a head.

use std::net::IpAddr;

/// Why a request was refused (answered 400 and closed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad request: {0}")]
pub struct Rejected(pub &'static str);

/// Why a request whose body has a transfer coding shuck does not decode is refused: it
/// is answered `501` (RFC 9112 §6.1, as nginx does), not `400`.
pub const UNSUPPORTED_CODING: &str = "a transfer coding other than chunked";

impl Rejected {
    /// The status it is answered with: `501` for [`UNSUPPORTED_CODING`], `413` for a body
    /// over its limit, else `400`.
    pub fn status(&self) -> u16 {
        if self.0 == UNSUPPORTED_CODING {
            501
        } else if self.0 == crate::gateway::policy::body::TOO_LARGE {
            413
        } else {
            400
        }
    }
}

/// The forwarding headers of one client connection, made once, and the extra header name
/// the client may not set; shared by the HTTP/1.1 and HTTP/2 paths.
#[derive(Debug, Clone)]
pub struct Forwarding {
    /// `X-Forwarded-For`, `X-Forwarded-Proto` (and the certificate header), then the
    /// empty line that ends a head.
    pub lines: String,
    /// `--client-cert-header`'s name.
    pub strip: Option<String>,
    /// `--request-id-header`: the client's header is replaced by the request's ID.
    pub request_id: Option<std::sync::Arc<crate::access::request_id::Spec>>,
    /// `lines` as HTTP/2 fields, made at the first request to an HTTP/2 backend.
    fields: std::cell::OnceCell<Vec<(http::HeaderName, http::HeaderValue)>>,
}

impl Forwarding {
    /// For a client at `ip`; with `cert_header`, that header carries the client
    /// certificate's subject (or is only removed when the client sent none).
    pub fn new(ip: IpAddr, cert_header: Option<(&str, Option<&str>)>) -> Self {
        let mut lines = format!(
            "X-Forwarded-For: {}\r\nX-Forwarded-Proto: https\r\n",
            ip.to_canonical()
        );
        let mut strip = None;
        if let Some((name, subject)) = cert_header {
            if let Some(subject) = subject {
                lines.push_str(&format!("{name}: {subject}\r\n"));
            }
            strip = Some(name.to_owned());
        }
        lines.push_str("\r\n");
        Forwarding {
            lines,
            strip,
            request_id: None,
            fields: std::cell::OnceCell::new(),
        }
    }

    /// The forwarding headers as fields (an HTTP/2 backend's), made once.
    pub fn fields(&self) -> &[(http::HeaderName, http::HeaderValue)] {
        self.fields.get_or_init(|| {
            self.lines
                .split("\r\n")
                .filter_map(|line| {
                    let (name, value) = line.split_once(": ")?;
                    Some((
                        http::HeaderName::from_bytes(name.as_bytes()).ok()?,
                        http::HeaderValue::from_str(value).ok()?,
                    ))
                })
                .collect()
        })
    }

    /// With `--request-id-header`.
    pub fn with_request_id(
        mut self,
        spec: Option<std::sync::Arc<crate::access::request_id::Spec>>,
    ) -> Self {
        self.request_id = spec;
        self
    }

    /// The same for a request whose client is `ip` (`--trusted-proxies`: the client a
    /// trusted proxy named), not the connection's peer.
    pub fn for_client(&self, ip: IpAddr) -> Self {
        let rest = self.lines.split_once("\r\n").map_or("\r\n", |(_, r)| r);
        Forwarding {
            lines: format!("X-Forwarded-For: {}\r\n{rest}", ip.to_canonical()),
            strip: self.strip.clone(),
            request_id: self.request_id.clone(),
            fields: std::cell::OnceCell::new(),
        }
    }

    /// Whether the client's header `name` must be removed.
    pub fn strips(&self, name: &[u8]) -> bool {
        is_forwarding(name, self.strip.as_deref())
    }

    /// Whether the client's header `name` is the request ID's (`--request-id-header`),
    /// compared as [`same_field`] compares.
    pub fn is_request_id(&self, name: &[u8]) -> bool {
        is_request_id(name, self.request_id.as_deref())
    }
}

/// Whether `name` is `spec`'s request ID header, compared as [`same_field`] compares: a
/// client's `X_Request_ID` is the backend's `X-Request-ID` too.
pub(super) fn is_request_id(name: &[u8], spec: Option<&crate::access::request_id::Spec>) -> bool {
    spec.is_some_and(|s| same_field(name, s.name.as_bytes()))
}

/// Whether header names `name` and `want` are one field to a backend: case folded, and
/// `_` read as `-` (CGI, WSGI and PHP turn `X_Forwarded_For` into `HTTP_X_FORWARDED_FOR`
/// like the real one).
pub(super) fn same_field(name: &[u8], want: &[u8]) -> bool {
    let fold = |b: u8| {
        if b == b'_' {
            b'-'
        } else {
            b.to_ascii_lowercase()
        }
    };
    name.len() == want.len() && name.iter().zip(want).all(|(&a, &b)| fold(a) == fold(b))
}

/// Whether `name` is one of the forwarding headers shuck sets (or `--client-cert-header`),
/// compared as backends do ([`same_field`]).
pub(super) fn is_forwarding(name: &[u8], strip: Option<&str>) -> bool {
    let folds = |want: &[u8]| same_field(name, want);
    folds(b"x-forwarded-for")
        || folds(b"x-forwarded-proto")
        || folds(b"forwarded")
        || strip.is_some_and(|s| folds(s.as_bytes()))
}

/// Most fields in a trailer section.
const MAX_TRAILER_FIELDS: usize = 64;

/// The trailer section without the forwarding fields a client may not set (they would be
/// merged into the headers by some backends). It is checked as a head is: every line a
/// field (no NUL, no control byte), and no field that frames the message.
pub(super) fn filter_trailer(
    trailer: &[u8],
    strip: Option<&str>,
    out: &mut Vec<u8>,
) -> Result<(), Rejected> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_TRAILER_FIELDS];
    match httparse::parse_headers(trailer, &mut fields) {
        Ok(httparse::Status::Complete((len, parsed))) if len == trailer.len() => {
            let framing = ["content-length", "transfer-encoding"];
            if parsed
                .iter()
                .any(|f| framing.iter().any(|n| f.name.eq_ignore_ascii_case(n)))
            {
                return Err(Rejected(
                    "Content-Length or Transfer-Encoding in a trailer section",
                ));
            }
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Rejected("more than 64 fields in a trailer section"))
        }
        _ => return Err(Rejected("a malformed trailer field")),
    }
    for line in trailer.split_inclusive(|&b| b == b'\n') {
        let name = line
            .split(|&b| b == b':')
            .next()
            .unwrap_or(b"")
            .trim_ascii();
        if line.contains(&b':') && is_forwarding(name, strip) {
            continue;
        }
        out.extend_from_slice(line);
    }
    Ok(())
}

/// A `Content-Length` value as a number: ASCII digits only, at most 18 of them (no sign,
/// no space inside, no overflow); shared by the HTTP/1.1 and HTTP/2 paths, requests and
/// answers.
pub(crate) fn content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 18 {
        return None;
    }
    v.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
    })
}

/// Why a Host value is refused, for the log.
pub(crate) fn host_refused(e: crate::http_host::HostError) -> Rejected {
    use crate::http_host::HostError as H;
    Rejected(match e {
        H::BadCharacter => "a Host holding a character no host may hold",
        H::BadLiteral => "a Host with a bad IP literal",
        H::BadPort => "a Host with a bad port",
    })
}

/// RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host, a valid uri-host[:port]; no
/// request has two; a target in absolute form names the same authority as Host. Returns
/// the request's authority, if any (checked: ASCII, `uri-host[:port]`): its Host, else (an
/// HTTP/1.0 request in absolute form) its target's, so that such a request is routed and
/// checked for 421 by the name it asks for, as any other.
pub(super) fn check_host<'h>(
    target: &'h str,
    version: u8,
    headers: &[httparse::Header<'h>],
) -> Result<Option<&'h [u8]>, Rejected> {
    let mut hosts = headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"));
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(Rejected("more than one Host header"));
    }
    let (authority, _) = crate::gateway::choose::split_target(target);
    let Some(host) = host else {
        if version == 1 {
            return Err(Rejected("no Host header in an HTTP/1.1 request"));
        }
        return match authority {
            Some(a) => {
                crate::http_host::parse(a.as_bytes()).map_err(host_refused)?;
                Ok(Some(a.as_bytes()))
            }
            None => Ok(None),
        };
    };
    crate::http_host::parse(host.value).map_err(host_refused)?;
    let value = host.value.trim_ascii();
    if authority.is_some_and(|a| !a.as_bytes().eq_ignore_ascii_case(value)) {
        return Err(Rejected(
            "the absolute-form target and Host name different authorities",
        ));
    }
    Ok(Some(value))
}

/// What a message's `Connection` fields say (RFC 9110 §7.6.1, RFC 9112 §9.3).
#[derive(Debug)]
pub struct ConnectionField<'a> {
    /// The connection persists after this message: HTTP/1.1's default unless `close`,
    /// HTTP/1.0's only with `keep-alive`.
    pub keep_alive: bool,
    /// `upgrade` is named.
    pub upgrade: bool,
    /// Every token named: the fields they name are this hop's own, never passed on.
    pub nominated: Vec<&'a [u8]>,
}

/// Reads the `Connection` fields of a head httparse read (`http11`: its version is 1.1).
pub fn connection_field<'a>(fields: &[httparse::Header<'a>], http11: bool) -> ConnectionField<'a> {
    let mut c = ConnectionField {
        keep_alive: http11,
        upgrade: false,
        nominated: Vec::new(),
    };
    for f in fields
        .iter()
        .filter(|f| f.name.eq_ignore_ascii_case("connection"))
    {
        for t in f.value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
            if t.eq_ignore_ascii_case(b"close") {
                c.keep_alive = false;
            } else if t.eq_ignore_ascii_case(b"keep-alive") {
                c.keep_alive |= !http11;
            } else if t.eq_ignore_ascii_case(b"upgrade") {
                c.upgrade = true;
            }
            if !t.is_empty() {
                c.nominated.push(t);
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_is_digits_only() {
        assert_eq!(content_length(b"0"), Some(0));
        assert_eq!(content_length(b"007"), Some(7));
        assert_eq!(
            content_length(b"999999999999999999"),
            Some(999_999_999_999_999_999)
        );
        for bad in [
            &b""[..],
            b"1000000000000000000",
            b"+1",
            b"-1",
            b"1 2",
            b" 1",
            b"0x10",
            b"1,1",
        ] {
            assert_eq!(
                content_length(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
