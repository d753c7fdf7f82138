//! Asking a responder: one HTTP/1.0 POST of the DER request (RFC 6960 appendix A), with
//! connect and response timeouts and a bound on the answer. OCSP responders speak plain
//! HTTP; the response is signed, so transport security adds nothing.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Largest response read.
const MAX_RESPONSE: usize = 64 * 1024;

/// Timeouts for talking to responders (`--ocsp-connect-tmo`, `--ocsp-resp-tmo`).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// To connect.
    pub connect: Duration,
    /// For the whole answer.
    pub response: Duration,
}

/// POSTs `request` to `url` (http:// only) and returns the response body.
pub fn post(url: &str, request: &[u8], t: Timeouts) -> Result<Vec<u8>, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// responders are supported"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let with_port = if authority
        .rsplit(':')
        .next()
        .is_some_and(|p| p.parse::<u16>().is_ok())
        && !authority.ends_with(']')
    {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let addr = with_port
        .to_socket_addrs()
        .map_err(|e| format!("{url}: cannot resolve: {e}"))?
        .next()
        .ok_or_else(|| format!("{url}: no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, t.connect)
        .map_err(|e| format!("{url}: cannot connect: {e}"))?;
    let deadline = Instant::now() + t.response;
    s.set_write_timeout(Some(t.response))
        .map_err(|e| e.to_string())?;
    let head = format!(
        "POST {path} HTTP/1.0\r\nHost: {authority}\r\nContent-Type: application/ocsp-request\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        request.len()
    );
    s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(request))
        .map_err(|e| format!("{url}: cannot send: {e}"))?;
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("{url}: no complete answer within {:?}", t.response));
        }
        s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if got.len() > MAX_RESPONSE {
                    return Err(format!("{url}: answer larger than {MAX_RESPONSE} bytes"));
                }
                if let Some(body) = complete_body(&got) {
                    return body;
                }
            }
            Err(e) => return Err(format!("{url}: {e}")),
        }
    }
    complete_body(&got)
        .or_else(|| Some(body_to_end(&got)))
        .unwrap_or_else(|| Err(format!("{url}: truncated answer")))
        .map_err(|e| format!("{url}: {e}"))
}

/// The body once the whole answer is in (by Content-Length), or `None` to read on.
fn complete_body(got: &[u8]) -> Option<Result<Vec<u8>, String>> {
    let end = got.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&got[..end]);
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if status != "200" {
        return Some(Err(format!("HTTP status {status}")));
    }
    let len = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    })?;
    (got.len() >= end + len).then(|| Ok(got[end..end + len].to_vec()))
}

/// Without Content-Length: the body is everything after the head (read to the end).
fn body_to_end(got: &[u8]) -> Result<Vec<u8>, String> {
    let end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no HTTP head")?
        + 4;
    let head = String::from_utf8_lossy(&got[..end]);
    match head.split_whitespace().nth(1) {
        Some("200") => Ok(got[end..].to_vec()),
        other => Err(format!("HTTP status {}", other.unwrap_or("?"))),
    }
}
