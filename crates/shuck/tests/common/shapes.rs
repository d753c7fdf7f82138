//! One request shape, sent as it is over HTTP/1.1, HTTP/2 or HTTP/3, and the verdict shuck
//! gave it: the gateway's rules tested alike for the three versions. HTTP/1.1 goes as raw
//! bytes over rustls; HTTP/2 as raw frames with an HPACK block of exactly the fields given
//! (h2's own client refuses to write the malformed ones); HTTP/3 through aioquic
//! (`tests/h3/client.py`, `raw_headers`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::h2c::{frame, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, RST_STREAM, SETTINGS};
use super::{client_config, read_http_head, tls_connect, ClientOpts};

/// The HTTP versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    H1,
    H2,
    H3,
}

pub const ALL: [Proto; 3] = [Proto::H1, Proto::H2, Proto::H3];

/// What shuck did with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Answered with this status (a backend's, or 421, 502...).
    Status(u16),
    /// Refused as malformed: `400` on HTTP/1.1 (or on HTTP/2 and HTTP/3, for a bad Host),
    /// the stream reset (`PROTOCOL_ERROR`, `H3_MESSAGE_ERROR`) on HTTP/2 and HTTP/3.
    Refused,
    /// The TLS handshake failed (a client certificate required and not given).
    NoHandshake,
    /// Nothing within the wait.
    Hung,
    /// Anything else: what happened.
    Other(String),
}

/// How the client connects: its server name (`None`: none sent; an address: none sent
/// either, as clients do) and client certificate.
#[derive(Debug, Clone, Default)]
pub struct Conn {
    pub sni: Option<String>,
    pub cert: Option<PathBuf>,
}

impl Conn {
    pub fn sni(name: &str) -> Conn {
        Conn {
            sni: Some(name.into()),
            cert: None,
        }
    }
}

/// A request as HTTP/2 and HTTP/3 carry it: its fields in order, pseudo-header fields
/// included, and its body (sent in one DATA frame, the stream ended after it).
#[derive(Debug, Clone, Default)]
pub struct Fields {
    pub fields: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
}

impl Fields {
    /// `method`, `https`, `authority`, `path`, then `extra`.
    pub fn request(method: &str, authority: &str, path: &str, extra: &[(&str, &str)]) -> Self {
        let mut fields = vec![
            (":method".into(), method.into()),
            (":scheme".into(), "https".into()),
            (":authority".into(), authority.into()),
            (":path".into(), path.into()),
        ];
        fields.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
        Fields { fields, body: None }
    }

    pub fn raw(fields: &[(&str, &str)]) -> Self {
        Fields {
            fields: fields
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: None,
        }
    }

    pub fn with_body(mut self, body: &[u8]) -> Self {
        self.body = Some(body.to_vec());
        self
    }
}

/// Sends `raw` (a whole HTTP/1.1 request, body included) on a new connection; the first
/// answer's verdict. `400` is [`Verdict::Refused`].
pub fn h1(addr: SocketAddr, conn: &Conn, raw: &[u8]) -> Verdict {
    let opts = ClientOpts {
        sni: conn.sni.clone(),
        client_pem: conn.cert.clone(),
        no_resumption: true,
        ..ClientOpts::default()
    };
    let mut c = match tls_connect(addr, &opts) {
        Ok(c) => c,
        Err(_) => return Verdict::NoHandshake,
    };
    c.sock
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    if c.write_all(raw).and_then(|()| c.flush()).is_err() {
        return Verdict::NoHandshake;
    }
    let mut r = BufReader::new(c);
    // A handshake refused under TLS 1.3 (a client certificate required) shows at the
    // first read.
    match r.fill_buf() {
        Err(e) => {
            let e: Result<(), _> = Err(e);
            return match super::alert_of(&e) {
                Some(_) => Verdict::NoHandshake,
                None => Verdict::Other(format!("{e:?}")),
            };
        }
        Ok([]) => return Verdict::Other("closed without an answer".into()),
        Ok(_) => {}
    }
    match read_http_head(&mut r) {
        Some(head) => {
            let status: u16 = head
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            // Read the body, so that a second answer (a smuggled request's) is not taken
            // for this one's.
            let len = head
                .lines()
                .find_map(|l| {
                    let (n, v) = l.split_once(':')?;
                    n.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            let mut body = vec![0; len];
            let _ = r.read_exact(&mut body);
            if status == 400 {
                Verdict::Refused
            } else {
                Verdict::Status(status)
            }
        }
        None => Verdict::Other("no answer head".into()),
    }
}

/// Sends `req` as stream 1 of a new HTTP/2 connection; its verdict.
pub fn h2(addr: SocketAddr, conn: &Conn, req: &Fields) -> Verdict {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(h2_async(addr, conn, req))
}

async fn h2_async(addr: SocketAddr, conn: &Conn, req: &Fields) -> Verdict {
    let cfg = client_config(&ClientOpts {
        sni: conn.sni.clone(),
        client_pem: conn.cert.clone(),
        alpn: vec![b"h2".to_vec()],
        no_resumption: true,
        ..ClientOpts::default()
    });
    let name = conn.sni.clone().unwrap_or_else(|| "localhost".into());
    let name = rustls::pki_types::ServerName::try_from(name).unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut tls = match tokio_rustls::TlsConnector::from(cfg)
        .connect(name, tcp)
        .await
    {
        Ok(t) => t,
        Err(_) => return Verdict::NoHandshake,
    };
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    let mut enc = hpack::Encoder::new();
    let block = enc.encode(req.fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
    let end = if req.body.is_some() { 0 } else { END_STREAM };
    out.extend(frame(HEADERS, END_HEADERS | end, 1, &block));
    if let Some(b) = &req.body {
        out.extend(frame(DATA, END_STREAM, 1, b));
    }
    if tls.write_all(&out).await.is_err() {
        return Verdict::NoHandshake;
    }
    let mut dec = hpack::Decoder::new();
    let read = async {
        loop {
            let mut h = [0u8; 9];
            if let Err(e) = tls.read_exact(&mut h).await {
                let e: Result<(), _> = Err(e);
                return match super::alert_of(&e) {
                    Some(_) => Verdict::NoHandshake,
                    None => Verdict::Other("the connection ended".into()),
                };
            }
            let n = (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
            let mut p = vec![0u8; n];
            if tls.read_exact(&mut p).await.is_err() {
                return Verdict::Other("the connection ended in a frame".into());
            }
            let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
            match h[3] {
                SETTINGS if h[4] & 1 == 0 => {
                    let _ = tls.write_all(&frame(SETTINGS, 1, 0, &[])).await;
                }
                GOAWAY => return Verdict::Other("GOAWAY".into()),
                RST_STREAM if stream == 1 => {
                    let code = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
                    return if code == 1 {
                        Verdict::Refused
                    } else {
                        Verdict::Other(format!("RST_STREAM {code}"))
                    };
                }
                HEADERS if stream == 1 => {
                    // No padding or priority from shuck's h2.
                    let Ok(fields) = dec.decode(&p) else {
                        return Verdict::Other("an HPACK block not decoded".into());
                    };
                    let status = fields
                        .iter()
                        .find(|(n, _)| n == b":status")
                        .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse::<u16>().ok());
                    match status {
                        Some(400) => return Verdict::Refused,
                        Some(s) if s >= 200 => return Verdict::Status(s),
                        Some(_) => {}
                        None => return Verdict::Other("an answer without :status".into()),
                    }
                }
                _ => {}
            }
        }
    };
    let verdict = tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .unwrap_or(Verdict::Hung);
    let _ = tls.shutdown().await;
    verdict
}

/// Sends each of `reqs` on one HTTP/3 connection (in turn); their verdicts. A handshake
/// that fails gives [`Verdict::NoHandshake`] for each.
pub fn h3(port: u16, conn: &Conn, reqs: &[Fields]) -> Vec<Verdict> {
    let groups: Vec<serde_json::Value> = reqs
        .iter()
        .map(|r| {
            let mut j = json!({"raw_headers": r.fields, "timeout": 5});
            if let Some(b) = &r.body {
                j["body"] = json!(String::from_utf8(b.clone()).unwrap());
            }
            json!([j])
        })
        .collect();
    let sni = conn.sni.clone().unwrap_or_default();
    let mut extra = vec!["--sni".to_owned(), sni, "--deadline".into(), "30".into()];
    if let Some(c) = &conn.cert {
        extra.extend(["--cert".into(), c.display().to_string()]);
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let report = super::h3::h3(port, json!(groups), &extra);
    let Some(answers) = report["requests"].as_array() else {
        return vec![Verdict::NoHandshake; reqs.len()];
    };
    answers
        .iter()
        .map(|a| match (&a["status"], &a["reset"]) {
            (serde_json::Value::String(s), _) => match s.parse::<u16>() {
                Ok(400) => Verdict::Refused,
                Ok(s) => Verdict::Status(s),
                Err(_) => Verdict::Other(format!("status {s}")),
            },
            (_, serde_json::Value::Number(n)) if n.as_u64() == Some(0x10e) => Verdict::Refused,
            (_, serde_json::Value::String(t)) if t == "timeout" => Verdict::Hung,
            (_, r) => Verdict::Other(format!("reset {r}")),
        })
        .collect()
}

/// A PEM path as a string.
pub fn s(p: &Path) -> String {
    p.display().to_string()
}
