//! gRPC as the gateway sees it (gRPC over HTTP/2, `PROTOCOL-HTTP2.md`): a call is known by
//! its `content-type`; its `grpc-timeout` is the call's deadline; and an answer shuck gives
//! itself (no server up, a timeout, a refusal) is what gRPC clients read, a trailers-only
//! answer with `grpc-status` and `grpc-message`, as Envoy gives, instead of an HTML status
//! a gRPC client reports as a bare `UNKNOWN`.

use std::time::Duration;

use http::{HeaderMap, HeaderValue, Response, StatusCode};

/// gRPC's status codes shuck answers with (`grpc/status.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Code {
    /// The call's deadline passed.
    DeadlineExceeded = 4,
    /// Refused by an access rule.
    PermissionDenied = 7,
    /// No such method (a 404).
    Unimplemented = 12,
    /// A malformed request (a 400).
    Internal = 13,
    /// No server could take or finish the call; a client may try again.
    Unavailable = 14,
    /// Anything else.
    Unknown = 2,
}

impl Code {
    /// The code for an HTTP status shuck would have answered, as gRPC maps them
    /// (`http-grpc-status-mapping.md`): 429, 502, 503 and 504 are `UNAVAILABLE`.
    pub fn of(status: StatusCode) -> Code {
        match status.as_u16() {
            400 => Code::Internal,
            403 => Code::PermissionDenied,
            404 => Code::Unimplemented,
            429 | 502..=504 => Code::Unavailable,
            _ => Code::Unknown,
        }
    }
}

/// True when `headers` are a gRPC call's (`content-type: application/grpc[+proto|;...]`).
pub fn is_call(headers: &HeaderMap) -> bool {
    headers.get(http::header::CONTENT_TYPE).is_some_and(|v| {
        let v = v.as_bytes();
        v.len() >= 16
            && v[..16].eq_ignore_ascii_case(b"application/grpc")
            && matches!(v.get(16), None | Some(b'+' | b';'))
    })
}

/// The call's `grpc-timeout` (`1*8DIGIT` and a unit of `HMSmun`), if given and valid; a
/// malformed one sets no deadline here, and is passed on for the server to judge.
pub fn timeout(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get("grpc-timeout")?.as_bytes();
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n.checked_mul(3600)?),
        b'M' => Duration::from_secs(n.checked_mul(60)?),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A trailers-only answer (one HEADERS frame ending the stream): status 200 with
/// `grpc-status` and `grpc-message` (printable ASCII: nothing to percent-encode).
pub fn trailers_only(code: Code, message: &'static str) -> Response<()> {
    let mut resp = Response::new(());
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert("grpc-status", HeaderValue::from(code as u16));
    h.insert("grpc-message", HeaderValue::from_static(message));
    resp
}

/// The trailers that end an answer whose head already went: `grpc-status` and
/// `grpc-message`.
pub fn trailers(code: Code, message: &'static str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("grpc-status", HeaderValue::from(code as u16));
    h.insert("grpc-message", HeaderValue::from_static(message));
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn a_call_is_known_by_its_content_type() {
        for (ct, call) in [
            ("application/grpc", true),
            ("application/grpc+proto", true),
            ("Application/GRPC;charset=x", true),
            ("application/grpc-web", false),
            ("application/grpcx", false),
            ("application/json", false),
        ] {
            assert_eq!(is_call(&headers(&[("content-type", ct)])), call, "{ct}");
        }
        assert!(!is_call(&HeaderMap::new()));
    }

    #[test]
    fn grpc_timeout_in_each_unit_and_malformed() {
        let t = |v: &'static str| timeout(&headers(&[("grpc-timeout", v)]));
        assert_eq!(t("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(t("3M"), Some(Duration::from_secs(180)));
        assert_eq!(t("10S"), Some(Duration::from_secs(10)));
        assert_eq!(t("250m"), Some(Duration::from_millis(250)));
        assert_eq!(t("99999999u"), Some(Duration::from_micros(99_999_999)));
        assert_eq!(t("5n"), Some(Duration::from_nanos(5)));
        for bad in ["", "S", "123456789S", "10s", "-1S", "1.5S", "10"] {
            assert_eq!(t(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn statuses_map_as_grpc_says() {
        assert_eq!(Code::of(StatusCode::SERVICE_UNAVAILABLE), Code::Unavailable);
        assert_eq!(Code::of(StatusCode::GATEWAY_TIMEOUT), Code::Unavailable);
        assert_eq!(Code::of(StatusCode::TOO_MANY_REQUESTS), Code::Unavailable);
        assert_eq!(Code::of(StatusCode::FORBIDDEN), Code::PermissionDenied);
        assert_eq!(Code::of(StatusCode::MISDIRECTED_REQUEST), Code::Unknown);
        let r = trailers_only(Code::Unavailable, "no server is up");
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["grpc-status"], "14");
    }
}
