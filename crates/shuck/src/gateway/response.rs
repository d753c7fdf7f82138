//! A backend's HTTP/1.1 answer read for an HTTP/2 stream: the head becomes an h2 response
//! without its connection-specific fields, and the body's framing (length, chunked, or
//! until close) is followed and taken off, chunk trailers becoming h2 trailers.

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::request::Kind;
use crate::gateway::fields::{connection_field, content_length, ConnectionField};

/// Why a backend's answer cannot be passed on (the stream gets 502, or a reset once its
/// head has gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("backend answer malformed: {0}")]
pub struct BadAnswer(pub &'static str);

/// How the answer's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (`HEAD`, `1xx`, `204`, `304`, `Content-Length: 0`).
    Empty,
    /// This many bytes.
    Length(u64),
    /// Chunked.
    Chunked,
    /// Until the backend closes (the connection is not reused).
    UntilClose,
}

/// An answer's head.
#[derive(Debug)]
pub struct Answer {
    /// Its status.
    pub status: StatusCode,
    /// Its fields, connection-specific ones removed.
    pub headers: HeaderMap,
    /// How its body is delimited.
    pub framing: Framing,
    /// The backend keeps the connection open after it.
    pub keep_alive: bool,
}

/// Most fields in an answer head.
const MAX_FIELDS: usize = 128;

/// Parses an answer head at the start of `buf`: `None` until it is whole (then call again
/// with more), else the head's length and the answer. `max` bounds the head.
pub fn parse(buf: &[u8], kind: Kind, max: usize) -> Result<Option<(usize, Answer)>, BadAnswer> {
    // Left uninitialised: setting 128 empty fields cost more than parsing a short head.
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut resp = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut resp,
        buf,
        &mut fields,
    );
    let used = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > max => {
            return Err(BadAnswer("head over --max-header-bytes"))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(BadAnswer("too many fields")),
        Err(_) => return Err(BadAnswer("not an HTTP/1.x answer head")),
    };
    if used > max {
        return Err(BadAnswer("head over --max-header-bytes"));
    }
    let code = resp.code.unwrap_or(0);
    let status = StatusCode::from_u16(code).map_err(|_| BadAnswer("bad status code"))?;
    let http11 = resp.version == Some(1);
    let mut length: Option<u64> = None;
    let mut te: Option<bool> = None; // Some(chunked is last)
                                     // Fields the Connection field names are this hop's too.
    let ConnectionField {
        mut keep_alive,
        nominated,
        ..
    } = connection_field(resp.headers, http11);
    let mut headers = HeaderMap::with_capacity(resp.headers.len());
    for f in resp.headers.iter() {
        // Named once (lower case, a standard name found by its length): the checks below
        // then compare names, not bytes.
        let name =
            HeaderName::from_bytes(f.name.as_bytes()).map_err(|_| BadAnswer("bad field name"))?;
        if name == header::CONTENT_LENGTH {
            let v = content_length(f.value.trim_ascii()).ok_or(BadAnswer("bad Content-Length"))?;
            if length.is_some_and(|l| l != v) {
                return Err(BadAnswer("conflicting Content-Length"));
            }
            length = Some(v);
        } else if name == header::TRANSFER_ENCODING {
            let last = f.value.rsplit(|&b| b == b',').next().unwrap_or(b"");
            te = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            continue;
        }
        if name == header::CONNECTION
            || name == header::UPGRADE
            || name == "keep-alive"
            || name == "proxy-connection"
            || nominated
                .iter()
                .any(|c| name.as_str().as_bytes().eq_ignore_ascii_case(c))
        {
            continue;
        }
        let value = HeaderValue::from_bytes(f.value).map_err(|_| BadAnswer("bad field value"))?;
        headers.append(name, value);
    }
    if te.is_some() && length.is_some() {
        // RFC 9112 §6.3: a smuggling attempt or a broken backend; either way, not trusted.
        return Err(BadAnswer("both Content-Length and Transfer-Encoding"));
    }
    let no_body = kind == Kind::Head
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let framing = match (no_body, te, length) {
        (true, ..) => Framing::Empty,
        (_, Some(true), _) => Framing::Chunked,
        (_, Some(false), _) => Framing::UntilClose,
        (_, None, Some(0)) => Framing::Empty,
        (_, None, Some(n)) => Framing::Length(n),
        (_, None, None) => Framing::UntilClose,
    };
    if framing == Framing::UntilClose {
        keep_alive = false;
    }
    if status == StatusCode::NO_CONTENT || status.is_informational() {
        headers.remove(http::header::CONTENT_LENGTH);
    }
    Ok(Some((
        used,
        Answer {
            status,
            headers,
            framing,
            keep_alive,
        },
    )))
}

/// A chunked body taken apart as it arrives.
#[derive(Debug, Default)]
pub struct Dechunk(Step);

#[derive(Debug, Default)]
enum Step {
    /// A chunk-size line.
    #[default]
    Size,
    /// This many bytes of chunk data left.
    Data(u64),
    /// The CRLF after chunk data.
    DataEnd,
    /// The trailer section.
    Trailers,
}

/// What [`Dechunk::next`] found.
#[derive(Debug)]
pub enum Piece {
    /// Body bytes.
    Data(Bytes),
    /// More input is needed.
    More,
    /// The body ended, with these trailers (empty when none).
    End(HeaderMap),
}

/// Longest chunk-size line or trailer section.
const MAX_FRAMING: usize = 16 * 1024;

impl Dechunk {
    /// Takes the next piece off `buf`.
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<Piece, BadAnswer> {
        loop {
            match self.0 {
                Step::Size => match httparse::parse_chunk_size(buf) {
                    Ok(httparse::Status::Complete((used, size))) => {
                        let _ = buf.split_to(used);
                        self.0 = if size == 0 {
                            Step::Trailers
                        } else {
                            Step::Data(size)
                        };
                    }
                    Ok(httparse::Status::Partial) if buf.len() > MAX_FRAMING => {
                        return Err(BadAnswer("chunk-size line too long"))
                    }
                    Ok(httparse::Status::Partial) => return Ok(Piece::More),
                    Err(_) => return Err(BadAnswer("bad chunk size")),
                },
                Step::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Piece::More);
                    }
                    let n = left.min(buf.len() as u64) as usize;
                    self.0 = if left == n as u64 {
                        Step::DataEnd
                    } else {
                        Step::Data(left - n as u64)
                    };
                    return Ok(Piece::Data(buf.split_to(n).freeze()));
                }
                Step::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Piece::More);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(BadAnswer("chunk data not followed by CRLF"));
                    }
                    let _ = buf.split_to(2);
                    self.0 = Step::Size;
                }
                Step::Trailers => {
                    if buf.starts_with(b"\r\n") {
                        let _ = buf.split_to(2);
                        return Ok(Piece::End(HeaderMap::new()));
                    }
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        if buf.len() > MAX_FRAMING {
                            return Err(BadAnswer("trailer section too long"));
                        }
                        return Ok(Piece::More);
                    };
                    let section = buf.split_to(end + 4);
                    return trailers(&section).map(Piece::End);
                }
            }
        }
    }
}

/// A trailer section as h2 trailers: fields that frame or route a message may not be
/// trailers (RFC 9110 §6.5.1), and are dropped.
fn trailers(section: &[u8]) -> Result<HeaderMap, BadAnswer> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    match httparse::parse_headers(section, &mut fields) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(BadAnswer("bad trailer section")),
    }
    let mut map = HeaderMap::new();
    for f in fields.iter().take_while(|f| !f.name.is_empty()) {
        let name = HeaderName::from_bytes(f.name.as_bytes())
            .map_err(|_| BadAnswer("bad trailer field name"))?;
        if !allowed_trailer(&name) {
            continue;
        }
        let value =
            HeaderValue::from_bytes(f.value).map_err(|_| BadAnswer("bad trailer field value"))?;
        map.append(name, value);
    }
    Ok(map)
}

/// Whether a field may travel as a trailer.
pub fn allowed_trailer(name: &HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "content-length"
            | "transfer-encoding"
            | "host"
            | "te"
            | "trailer"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "upgrade"
            | "content-encoding"
            | "content-type"
            | "content-range"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(head: &str, kind: Kind) -> Result<Answer, BadAnswer> {
        parse(head.as_bytes(), kind, 16 * 1024).map(|a| a.expect("whole head").1)
    }

    #[test]
    fn heads_and_framing() {
        let a = answer(
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nX-End: 2\r\n\r\n",
            Kind::Normal,
        )
        .unwrap();
        assert_eq!(a.framing, Framing::Length(3));
        assert!(a.keep_alive);
        assert!(a.headers.get("x-hop").is_none() && a.headers.get("keep-alive").is_none());
        assert_eq!(a.headers["x-end"], "2");
        let a = answer(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            Kind::Normal,
        )
        .unwrap();
        assert_eq!(a.framing, Framing::Chunked);
        assert!(a.headers.get("transfer-encoding").is_none());
        let a = answer("HTTP/1.0 200 OK\r\n\r\n", Kind::Normal).unwrap();
        assert_eq!((a.framing, a.keep_alive), (Framing::UntilClose, false));
        let a = answer("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", Kind::Head).unwrap();
        assert_eq!(a.framing, Framing::Empty);
        let a = answer(
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
            Kind::Normal,
        )
        .unwrap();
        assert_eq!(a.framing, Framing::Empty);
        let a = answer(
            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n",
            Kind::Normal,
        )
        .unwrap();
        assert!(!a.keep_alive);
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Le", Kind::Normal, 100)
            .unwrap()
            .is_none());
    }

    #[test]
    fn bad_answers() {
        for (head, why) in [
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                "both",
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                "conflicting",
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                "Content-Length",
            ),
            ("SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP"),
        ] {
            let e = answer(head, Kind::Normal).unwrap_err();
            assert!(e.0.contains(why), "{head:?}: {e}");
        }
        let long = format!("HTTP/1.1 200 OK\r\nX: {}", "a".repeat(200));
        assert!(parse(long.as_bytes(), Kind::Normal, 100).is_err());
    }

    #[test]
    fn dechunks_with_trailers_in_any_pieces() {
        let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nGrpc-Status: 0\r\nContent-Length: 9\r\n\r\nNEXT";
        for step in [1, 2, 7, body.len()] {
            let mut d = Dechunk::default();
            let mut buf = BytesMut::new();
            let mut data = Vec::new();
            let mut end = None;
            for part in body.chunks(step) {
                buf.extend_from_slice(part);
                loop {
                    match d.next(&mut buf).unwrap() {
                        Piece::Data(b) => data.extend_from_slice(&b),
                        Piece::More => break,
                        Piece::End(t) => {
                            end = Some(t);
                            break;
                        }
                    }
                }
                if end.is_some() {
                    break;
                }
            }
            assert_eq!(data, b"hello world");
            let t = end.expect("the body ends");
            assert_eq!(t["grpc-status"], "0");
            assert!(t.get("content-length").is_none());
        }
        let mut d = Dechunk::default();
        let mut buf = BytesMut::from(&b"3\r\nabcXX"[..]);
        assert!(matches!(d.next(&mut buf), Ok(Piece::Data(_))));
        assert!(d.next(&mut buf).is_err());
    }
}
