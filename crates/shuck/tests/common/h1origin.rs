//! A recording HTTP/1.1 backend for the HTTP/2 gateway's tests: it keeps every request it
//! got (its connection, head, body length and digest, trailers), counts connections open at
//! once, and answers by path with what a test needs (sizes, files, chunked bodies with
//! trailers, interim answers, cut and malformed answers, slow answers, a WebSocket echo), and
//! misbehaves on cue (bytes after an answer, a request taken and closed on, an idle
//! connection closed after a keep-alive timeout of its own).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// One request as the backend saw it.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// Which connection (0, 1, ...) carried it.
    pub conn: usize,
    pub method: String,
    pub path: String,
    /// Fields, names lowercased, in order.
    pub headers: Vec<(String, String)>,
    pub body_len: u64,
    /// `sha256sum` of the body, for `/sum`.
    pub body_sha: String,
    /// Trailer fields of a chunked body.
    pub trailers: Vec<(String, String)>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// The backend.
pub struct H1Origin {
    pub port: u16,
    /// `[127.0.0.1]:PORT`, for `-b`.
    pub spec: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    /// PROXY lines, by connection.
    pub preambles: Arc<Mutex<Vec<String>>>,
    /// Connections accepted.
    pub conns: Arc<AtomicUsize>,
    /// Most connections open at once.
    pub max_open: Arc<AtomicUsize>,
    /// Connections open now.
    pub open: Arc<AtomicUsize>,
}

struct Shared {
    seen: Arc<Mutex<Vec<Seen>>>,
    preambles: Arc<Mutex<Vec<String>>>,
    open: Arc<AtomicUsize>,
    max_open: Arc<AtomicUsize>,
    file: Option<PathBuf>,
    /// Closes a connection idle this long between requests.
    keepalive: Option<Duration>,
    /// `/flaky/...` paths already taken once (and closed on).
    flaky: Mutex<std::collections::HashSet<String>>,
}

impl H1Origin {
    /// Starts the backend; `file` is served at `/file`.
    pub fn start(file: Option<PathBuf>) -> H1Origin {
        Self::start_with(file, None)
    }

    /// As [`H1Origin::start`]; a connection idle for `keepalive` between two requests is
    /// closed, as a backend's keep-alive timeout closes it.
    pub fn start_with(file: Option<PathBuf>, keepalive: Option<Duration>) -> H1Origin {
        let l = super::fresh_listener();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let preambles = Arc::new(Mutex::new(Vec::new()));
        let conns = Arc::new(AtomicUsize::new(0));
        let max_open = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let shared = Arc::new(Shared {
            seen: seen.clone(),
            preambles: preambles.clone(),
            open: open.clone(),
            max_open: max_open.clone(),
            file,
            keepalive,
            flaky: Mutex::new(Default::default()),
        });
        let count = conns.clone();
        thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { continue };
                // An answer's head and body are two writes: without this, Nagle holds the
                // body until the proxy's delayed ACK (40 ms), and the origin is the weak link.
                let _ = s.set_nodelay(true);
                let id = count.fetch_add(1, Ordering::SeqCst);
                let shared = shared.clone();
                thread::spawn(move || {
                    let now = shared.open.fetch_add(1, Ordering::SeqCst) + 1;
                    shared.max_open.fetch_max(now, Ordering::SeqCst);
                    let _ = serve(s, id, &shared);
                    shared.open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        H1Origin {
            port,
            spec: format!("[127.0.0.1]:{port}"),
            seen,
            preambles,
            conns,
            max_open,
            open,
        }
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(s: TcpStream, id: usize, shared: &Shared) -> io::Result<()> {
    let mut r = BufReader::new(s.try_clone()?);
    let mut w = s;
    let mut first = true;
    loop {
        let mut line = String::new();
        w.set_read_timeout(shared.keepalive)?;
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        w.set_read_timeout(None)?;
        if first && line.starts_with("PROXY ") {
            shared
                .preambles
                .lock()
                .unwrap()
                .push(line.trim_end().to_owned());
            line.clear();
            if r.read_line(&mut line)? == 0 {
                return Ok(());
            }
        }
        first = false;
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_owned();
        let path = parts.next().unwrap_or("").to_owned();
        let mut seen = Seen {
            conn: id,
            method,
            path,
            ..Seen::default()
        };
        loop {
            let mut h = String::new();
            if r.read_line(&mut h)? == 0 {
                return Ok(());
            }
            if h == "\r\n" {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                seen.headers
                    .push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
        }
        let expect = seen.header("expect").is_some();
        if expect {
            w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        // The body, into sha256sum for /sum and counted otherwise.
        let mut sink: Box<dyn Write> = Box::new(io::sink());
        let mut sum = None;
        if seen.path.starts_with("/sum") {
            let mut child = Command::new("sha256sum")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()?;
            sink = Box::new(child.stdin.take().unwrap());
            sum = Some(child);
        }
        if let Some(n) = seen.header("content-length") {
            let n: u64 = n.parse().unwrap_or(0);
            seen.body_len = io::copy(&mut (&mut r).take(n), &mut sink)?;
        } else if seen
            .header("transfer-encoding")
            .is_some_and(|t| t.contains("chunked"))
        {
            loop {
                let mut size = String::new();
                r.read_line(&mut size)?;
                let n = u64::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| io::Error::other("bad chunk size"))?;
                if n == 0 {
                    break;
                }
                seen.body_len += io::copy(&mut (&mut r).take(n), &mut sink)?;
                let mut crlf = [0u8; 2];
                r.read_exact(&mut crlf)?;
            }
            loop {
                let mut t = String::new();
                r.read_line(&mut t)?;
                if t == "\r\n" || t.is_empty() {
                    break;
                }
                if let Some((n, v)) = t.split_once(':') {
                    seen.trailers
                        .push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
                }
            }
        }
        drop(sink);
        if let Some(child) = sum {
            let out = child.wait_with_output()?;
            seen.body_sha = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_owned();
        }
        let path = seen.path.clone();
        let xff = seen.header("x-forwarded-for").unwrap_or("-").to_owned();
        let head = seen.method == "HEAD";
        let body_len = seen.body_len;
        let sha = seen.body_sha.clone();
        let ws_key = seen.header("sec-websocket-key").map(str::to_owned);
        let early = seen.header("early-data") == Some("1");
        shared.seen.lock().unwrap().push(seen);
        let ok = |w: &mut TcpStream, body: &str| {
            let h = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
            w.write_all(h.as_bytes())?;
            if !head {
                w.write_all(body.as_bytes())?;
            }
            Ok::<(), io::Error>(())
        };
        match path.as_str() {
            p if p.starts_with("/size/") => {
                let n: u64 = p[6..].parse().unwrap_or(0);
                let h = format!("HTTP/1.1 200 OK\r\ncontent-length: {n}\r\n\r\n");
                w.write_all(h.as_bytes())?;
                if !head {
                    io::copy(&mut io::repeat(b'x').take(n), &mut w)?;
                }
            }
            "/file" => {
                let mut f = std::fs::File::open(shared.file.as_ref().unwrap())?;
                let n = f.metadata()?.len();
                let h = format!("HTTP/1.1 200 OK\r\ncontent-length: {n}\r\n\r\n");
                w.write_all(h.as_bytes())?;
                io::copy(&mut f, &mut w)?;
            }
            "/sum" => ok(&mut w, &format!("{body_len} {sha}"))?,
            "/chunked" => w.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\ngrpc-status: 0\r\ngrpc-message: fine\r\n\r\n")?,
            "/hints" => w.write_all(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")?,
            "/204" => w.write_all(b"HTTP/1.1 204 No Content\r\n\r\n")?,
            // The backend's own errors, for error pages that intercept them.
            "/502" => w.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\norigin 502\n")?,
            "/503-chunked" => w.write_all(b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n7\r\norigin \r\n4\r\n503\n\r\n0\r\n\r\n")?,
            // An answer with fields of its own, for the edge policy's answer rules.
            "/branded" => w.write_all(b"HTTP/1.1 200 OK\r\nServer: origin/1.0\r\nX-Frame-Options: SAMEORIGIN\r\nX-Kept: theirs\r\ncontent-length: 2\r\n\r\nok")?,
            // RFC 8470: a request that came in early data is refused until it comes again.
            "/too-early" if early => {
                w.write_all(b"HTTP/1.1 425 Too Early\r\ncontent-length: 0\r\n\r\n")?
            }
            // A complete answer, and a moment later bytes nobody asked for: a body to HEAD
            // after its head, a whole second answer after a GET's.
            "/stray" => {
                w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")?;
                if !head {
                    w.write_all(b"ok")?;
                }
                thread::sleep(Duration::from_millis(200));
                w.write_all(if head {
                    b"ok"
                } else {
                    b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstray"
                })?;
            }
            // More body than its Content-Length, in the same write.
            "/short" => w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA")?,
            // Taken and closed on without an answer the first time, answered after.
            p if p.starts_with("/flaky/") => {
                if shared.flaky.lock().unwrap().insert(p.to_owned()) {
                    return Ok(());
                }
                ok(&mut w, "flaky")?;
            }
            "/304" => w.write_all(b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n")?,
            // No PHP here: what scanners probe for is not found.
            p if p.ends_with(".php") => {
                w.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")?
            }
            "/cut" => {
                w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")?;
                return Ok(());
            }
            "/bad" => {
                w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n")?;
                return Ok(());
            }
            "/close" => {
                w.write_all(b"HTTP/1.0 200 OK\r\n\r\nuntil close")?;
                return Ok(());
            }
            p if p.starts_with("/slow/") => {
                thread::sleep(Duration::from_millis(p[6..].parse().unwrap_or(100)));
                ok(&mut w, "slow")?;
            }
            "/ws" => {
                let Some(key) = ws_key else {
                    return w.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
                };
                let accept = ws_accept(&key);
                let h = format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: chat\r\n\r\n");
                w.write_all(h.as_bytes())?;
                // Echo: the bytes of the tunnel, whatever they are.
                let mut buf = [0u8; 16384];
                loop {
                    let n = r.read(&mut buf)?;
                    if n == 0 {
                        return Ok(());
                    }
                    w.write_all(&buf[..n])?;
                }
            }
            _ => ok(&mut w, &xff)?,
        }
    }
}

/// `Sec-WebSocket-Accept` for `key` (RFC 6455 §4.2.2).
pub fn ws_accept(key: &str) -> String {
    use base64::Engine;
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(key.as_bytes());
    ctx.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    base64::engine::general_purpose::STANDARD.encode(ctx.finish().as_ref())
}
