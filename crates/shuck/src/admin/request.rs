//! One admin API request: its head read with httparse, its body by `Content-Length`
//! (no chunked bodies: `curl` and `shuck ctl` send a length), and what it asks for.

pub use crate::backend::Admin;

/// The largest request head.
pub const MAX_HEAD: usize = 16 * 1024;
/// The largest body: a certificate chain and its key.
pub const MAX_BODY: usize = crate::tls::cert_store::MAX_PEM;

/// A request read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// GET, POST, PUT, DELETE.
    pub method: String,
    /// The path, without its query.
    pub path: String,
    /// The query string, when there is one.
    pub query: Option<String>,
    /// `Authorization: Bearer …`'s token.
    pub bearer: Option<String>,
    /// The body.
    pub body: Vec<u8>,
}

/// Why a request is refused before it is looked at; each is a 4xx.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Not HTTP/1.x.
    #[error("malformed request head: {0}")]
    Malformed(String),
    /// A head over [`MAX_HEAD`].
    #[error("request head over {MAX_HEAD} bytes")]
    HeadTooLarge,
    /// A body over [`MAX_BODY`].
    #[error("request body of {0} bytes: at most {MAX_BODY}")]
    BodyTooLarge(usize),
    /// A body without a length.
    #[error("a body needs Content-Length (chunked bodies are not taken)")]
    LengthRequired,
}

impl RequestError {
    /// The status it is answered with.
    pub fn status(&self) -> u16 {
        match self {
            RequestError::Malformed(_) => 400,
            RequestError::HeadTooLarge => 431,
            RequestError::BodyTooLarge(_) => 413,
            RequestError::LengthRequired => 411,
        }
    }
}

/// A request's head, read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Its length in bytes: the body starts there.
    pub len: usize,
    /// The method.
    pub method: String,
    /// The target, as sent.
    pub target: String,
    /// `Content-Length`, 0 when absent.
    pub body_len: usize,
    /// `Authorization: Bearer …`'s token.
    pub bearer: Option<String>,
}

/// Reads a request's head from the bytes received so far: `Ok(None)` while it is
/// incomplete. Stricter than httparse alone: every line ends in CRLF, and Content-Length
/// is digits only, so that no two readers could see two lengths.
pub fn head(buf: &[u8]) -> Result<Option<Head>, RequestError> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
            return Err(RequestError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(RequestError::Malformed("more than 32 header fields".into()))
        }
        Err(e) => return Err(RequestError::Malformed(e.to_string())),
    };
    if head_len > MAX_HEAD {
        return Err(RequestError::HeadTooLarge);
    }
    let bare_lf = buf[..head_len]
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'\n' && (i == 0 || buf[i - 1] != b'\r'));
    if bare_lf {
        return Err(RequestError::Malformed("a line not ended by CRLF".into()));
    }
    let mut length = None;
    let mut bearer = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value)
                .ok()
                .map(str::trim)
                .filter(|v| !v.is_empty() && v.len() <= 18 && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<usize>().ok())
                .ok_or_else(|| RequestError::Malformed("bad Content-Length".into()))?;
            if length.is_some_and(|l| l != v) {
                return Err(RequestError::Malformed("two Content-Length values".into()));
            }
            length = Some(v);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(RequestError::LengthRequired);
        } else if h.name.eq_ignore_ascii_case("authorization") {
            let v = std::str::from_utf8(h.value).unwrap_or("");
            if let Some((scheme, token)) = v.trim().split_once(' ') {
                if scheme.eq_ignore_ascii_case("bearer") {
                    bearer = Some(token.trim().to_owned());
                }
            }
        }
    }
    let body_len = length.unwrap_or(0);
    if body_len > MAX_BODY {
        return Err(RequestError::BodyTooLarge(body_len));
    }
    Ok(Some(Head {
        len: head_len,
        method: req.method.unwrap_or("").to_owned(),
        target: req.path.unwrap_or("/").to_owned(),
        body_len,
        bearer,
    }))
}

/// Reads a request from the bytes received so far: `Ok(None)` while it is incomplete.
pub fn parse(buf: &[u8]) -> Result<Option<Request>, RequestError> {
    let Some(head) = head(buf)? else {
        return Ok(None);
    };
    let Some(body) = buf.get(head.len..head.len + head.body_len) else {
        return Ok(None);
    };
    if !head.target.starts_with('/') {
        return Err(RequestError::Malformed(
            "the target must be a path (origin form)".into(),
        ));
    }
    let (path, query) = match head.target.split_once('?') {
        Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
        None => (head.target.clone(), None),
    };
    Ok(Some(Request {
        method: head.method,
        path,
        query,
        bearer: head.bearer,
        body: body.to_vec(),
    }))
}

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `GET /status`.
    Status,
    /// `POST /reload`.
    Reload,
    /// `GET /backends`.
    Backends,
    /// `PUT /backends/{backend}/servers/{server}`.
    SetServer {
        /// The backend's name (`default` for `-b`'s).
        backend: String,
        /// The server's name.
        server: String,
        /// What to set.
        change: ServerChange,
    },
    /// `GET /certificates`.
    Certificates,
    /// `PUT /certificates/{name}` with the PEM.
    PutCertificate {
        /// Its name.
        name: String,
        /// The chain and key.
        pem: Vec<u8>,
    },
    /// `DELETE /certificates/{name}`.
    DeleteCertificate {
        /// Its name.
        name: String,
    },
    /// `POST /tickets/rotate`.
    RotateTickets,
    /// `GET /sessions`.
    Sessions,
    /// `GET /clients?top=N`.
    Clients {
        /// Rows of the busiest clients.
        top: usize,
    },
    /// `POST /clients/ban`.
    Ban(crate::clients::bans::Ban),
    /// `DELETE /clients/ban/BLOCK` (the block's `/` as is or as `%2F`).
    Unban(crate::clients::Cidr),
}

/// The server name of a [`Call::SetServer`] that sets every server of its backend
/// (`PUT /backends/{backend}`).
pub const EVERY_SERVER: &str = "*";

/// A `PUT /backends/…/servers/…` body: a state, a weight, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerChange {
    /// The state to set.
    pub state: Option<Admin>,
    /// The weight to set (1 to 1000).
    pub weight: Option<u32>,
}

/// Why a request names nothing the API does; `status` is its 4xx.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// 400, 404 or 405.
    pub status: u16,
    /// Why.
    pub reason: String,
}

fn refused(status: u16, reason: impl Into<String>) -> Refused {
    Refused {
        status,
        reason: reason.into(),
    }
}

impl Call {
    /// What `req` asks for.
    pub fn of(req: &Request) -> Result<Call, Refused> {
        let parts: Vec<&str> = req.path.split('/').skip(1).collect();
        let m = req.method.as_str();
        let only = |allowed: &str, call: Call| {
            if m == allowed {
                Ok(call)
            } else {
                Err(refused(405, format!("{} takes {allowed} only", req.path)))
            }
        };
        match parts.as_slice() {
            ["status"] => only("GET", Call::Status),
            ["reload"] => only("POST", Call::Reload),
            ["backends"] => only("GET", Call::Backends),
            ["certificates"] => only("GET", Call::Certificates),
            ["tickets", "rotate"] => only("POST", Call::RotateTickets),
            ["sessions"] => only("GET", Call::Sessions),
            ["clients"] => {
                let top = match req
                    .query
                    .as_deref()
                    .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("top=")))
                {
                    None => super::clients::DEFAULT_TOP,
                    Some(n) => n
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=10_000).contains(n))
                        .ok_or_else(|| refused(400, format!("top={n}: give 1 to 10000")))?,
                };
                only("GET", Call::Clients { top })
            }
            ["clients", "ban"] if m != "POST" => {
                Err(refused(405, format!("{} takes POST only", req.path)))
            }
            ["clients", "ban"] => {
                let Strict(v) = serde_json::from_slice(&req.body)
                    .map_err(|e| refused(400, format!("the body is not JSON: {e}")))?;
                let ban = super::clients::ban_of(&v, crate::clock::unix_ms())
                    .map_err(|e| refused(400, e))?;
                only("POST", Call::Ban(ban))
            }
            ["clients", "ban", rest @ ..] if !rest.is_empty() => {
                let block = unescape(&rest.join("/"))?;
                let block = block.parse().map_err(|e: String| refused(400, e))?;
                only("DELETE", Call::Unban(block))
            }
            // Every server of it: `server` is `*`, which no server's name is.
            ["backends", backend] => {
                let change = server_change(&req.body)?;
                if change.weight.is_some() {
                    return Err(refused(
                        400,
                        "a backend takes a state; a weight is a server's",
                    ));
                }
                only(
                    "PUT",
                    Call::SetServer {
                        backend: unescape(backend)?,
                        server: EVERY_SERVER.into(),
                        change,
                    },
                )
            }
            ["backends", backend, "servers", server] => {
                let change = server_change(&req.body)?;
                only(
                    "PUT",
                    Call::SetServer {
                        backend: unescape(backend)?,
                        server: unescape(server)?,
                        change,
                    },
                )
            }
            ["certificates", name] => {
                let name = unescape(name)?;
                if !crate::tls::cert_store::valid_name(&name) {
                    return Err(refused(
                        400,
                        crate::tls::cert_store::StoreError::BadName(name).to_string(),
                    ));
                }
                match m {
                    "PUT" => Ok(Call::PutCertificate {
                        name,
                        pem: req.body.clone(),
                    }),
                    "DELETE" => Ok(Call::DeleteCertificate { name }),
                    _ => Err(refused(405, format!("{} takes PUT or DELETE", req.path))),
                }
            }
            _ => Err(refused(404, format!("no such resource: {}", req.path))),
        }
    }

    /// True for what changes nothing (logged at debug rather than info).
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            Call::Status
                | Call::Backends
                | Call::Certificates
                | Call::Sessions
                | Call::Clients { .. }
        )
    }
}

/// `%XX` in a path segment (server names may be addresses: `%5B::1%5D:80`).
fn unescape(seg: &str) -> Result<String, Refused> {
    let b = seg.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| refused(400, format!("bad %-escape in {seg:?}")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| refused(400, format!("{seg:?} is not UTF-8")))
}

/// A JSON value none of whose objects names a key twice: serde_json keeps the last of
/// two, so `{"state":"maint","state":"ready"}` would mean what a reader of the first did not
/// expect.
struct Strict(serde_json::Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(out.into())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.contains_key(&k) {
                return Err(serde::de::Error::custom(format!("the key {k:?} twice")));
            }
            let Strict(v) = map.next_value()?;
            out.insert(k, v);
        }
        Ok(out.into())
    }
}

/// The body of a server change: `{"state": …, "weight": …}`, at least one of them.
fn server_change(body: &[u8]) -> Result<ServerChange, Refused> {
    let Strict(v) = serde_json::from_slice(body)
        .map_err(|e| refused(400, format!("the body is not JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| refused(400, "the body must be a JSON object"))?;
    let mut change = ServerChange::default();
    for (k, v) in obj {
        match k.as_str() {
            "state" => {
                let s = v.as_str().and_then(Admin::parse).ok_or_else(|| {
                    refused(400, "state must be \"ready\", \"drain\" or \"maint\"")
                })?;
                change.state = Some(s);
            }
            "weight" => {
                let w = v
                    .as_u64()
                    .filter(|w| (1..=1000).contains(w))
                    .ok_or_else(|| refused(400, "weight must be from 1 to 1000"))?;
                change.weight = Some(w as u32);
            }
            other => return Err(refused(400, format!("unknown field {other:?}"))),
        }
    }
    if change.state.is_none() && change.weight.is_none() {
        return Err(refused(400, "give \"state\", \"weight\" or both"));
    }
    Ok(change)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(raw: &str) -> Request {
        parse(raw.as_bytes()).unwrap().unwrap()
    }

    #[test]
    fn requests_are_read_whole() {
        assert_eq!(parse(b"GET /status HTTP/1.1\r\nHost: x\r\n"), Ok(None));
        let r = req("PUT /backends/api/servers/a%3A1 HTTP/1.1\r\nContent-Length: 17\r\nAuthorization: Bearer t0k\r\n\r\n{\"state\":\"drain\"}");
        assert_eq!(r.bearer.as_deref(), Some("t0k"));
        assert_eq!(
            Call::of(&r),
            Ok(Call::SetServer {
                backend: "api".into(),
                server: "a:1".into(),
                change: ServerChange {
                    state: Some(Admin::Drain),
                    weight: None
                }
            })
        );
        assert_eq!(
            parse(b"PUT /x HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"),
            Ok(None)
        );
    }

    #[test]
    fn client_calls_are_read_and_their_errors_named() {
        let call = |raw: &str| Call::of(&req(raw));
        assert_eq!(
            call("GET /clients?top=3 HTTP/1.1\r\n\r\n"),
            Ok(Call::Clients { top: 3 })
        );
        assert_eq!(
            call("GET /clients?top=0 HTTP/1.1\r\n\r\n")
                .unwrap_err()
                .status,
            400
        );
        // The method first: a GET with no body is 405, not a complaint about the body.
        assert_eq!(
            call("GET /clients/ban HTTP/1.1\r\n\r\n")
                .unwrap_err()
                .status,
            405
        );
        let body = r#"{"block":"192.0.2.0/24"}"#;
        let post = format!(
            "POST /clients/ban HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        assert!(matches!(call(&post), Ok(Call::Ban(b)) if b.block.to_string() == "192.0.2.0/24"));
        let dup = r#"{"block":"192.0.2.1","block":"192.0.2.2"}"#;
        let post = format!(
            "POST /clients/ban HTTP/1.1\r\nContent-Length: {}\r\n\r\n{dup}",
            dup.len()
        );
        assert_eq!(call(&post).unwrap_err().status, 400);
        for path in ["/clients/ban/192.0.2.0/24", "/clients/ban/192.0.2.0%2F24"] {
            assert_eq!(
                call(&format!("DELETE {path} HTTP/1.1\r\n\r\n")),
                Ok(Call::Unban("192.0.2.0/24".parse().unwrap()))
            );
        }
    }

    #[test]
    fn bad_requests_get_their_status() {
        let status = |raw: &str| match parse(raw.as_bytes()) {
            Err(e) => e.status(),
            Ok(Some(r)) => Call::of(&r).map(|_| 200).unwrap_or_else(|e| e.status),
            Ok(None) => 0,
        };
        assert_eq!(status("GARBAGE\r\n\r\n"), 400);
        assert_eq!(status("GET /nope HTTP/1.1\r\n\r\n"), 404);
        assert_eq!(status("DELETE /status HTTP/1.1\r\n\r\n"), 405);
        assert_eq!(
            status("POST /reload HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            411
        );
        assert_eq!(
            status("PUT /certificates/a HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n"),
            413
        );
        assert_eq!(status("PUT /certificates/..%2Fx HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(
            status("PUT /backends/a/servers/b HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"),
            400
        );
        assert_eq!(
            status(
                "PUT /backends/a/servers/b HTTP/1.1\r\nContent-Length: 14\r\n\r\n{\"weight\":0}  "
            ),
            400
        );
        assert_eq!(status("GET http://x/status HTTP/1.1\r\n\r\n"), 400);
        // Issue 45, finding 8: what another reader could take two ways.
        let dup = r#"{"state":"maint","state":"ready"}"#;
        let put = |body: &str| {
            format!(
                "PUT /backends/a/servers/b HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        assert_eq!(status(&put(dup)), 400, "a key twice");
        assert_eq!(status(&put(r#"{"state":"maint","weight":3}"#)), 200);
        assert_eq!(status(&put(r#"[{"a":1,"a":2}]"#)), 400);
        assert_eq!(
            status("PUT /backends/a/servers/b HTTP/1.1\r\nContent-Length: +2\r\n\r\n{}"),
            400
        );
        assert_eq!(status("GET /status HTTP/1.1\nHost: x\n\n"), 400, "LF alone");
        assert_eq!(
            status(&format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_HEAD + 1))),
            431
        );
    }
}
