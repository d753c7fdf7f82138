//! HTTP/1.1 clients before backends that speak HTTP/2 (`proto = h2`): their requests enter
//! the gateway core as HTTP/2's and HTTP/3's do, through real servers (nghttpd in clear,
//! grpcio) and real clients (curl, raw HTTP/1.1 over rustls): bodies of a length and
//! chunked both ways, keep-alive and pipelining, the hygiene of every request (a body
//! shorter than declared, no Host, an address for a name), a connection that moves between
//! an HTTP/1.1 and an HTTP/2 backend request by request, gRPC's trailers in a chunked
//! answer's trailer section (in clear and over TLS to the backend), and one access log line
//! per request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

use common::shapes::{self, Conn, Verdict};
use common::*;

/// An answer read off an HTTP/1.1 connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
    /// A chunked body's trailer section, as its lines.
    trailers: Vec<String>,
}

impl Answer {
    fn field(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

/// Reads one answer (its body by its length, chunked, or to the close); `head` says
/// whether it answers a HEAD.
fn read_answer(r: &mut impl BufRead, head: bool) -> Option<Answer> {
    let text = read_http_head(r)?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let mut a = Answer {
        status,
        head: text,
        body: Vec::new(),
        trailers: Vec::new(),
    };
    if head || status == 204 || status == 304 {
        return Some(a);
    }
    if a.field("transfer-encoding").is_some_and(|v| v == "chunked") {
        loop {
            let mut line = String::new();
            r.read_line(&mut line).ok()?;
            let size = usize::from_str_radix(line.trim(), 16).ok()?;
            if size == 0 {
                break;
            }
            let mut chunk = vec![0; size + 2];
            r.read_exact(&mut chunk).ok()?;
            a.body.extend_from_slice(&chunk[..size]);
        }
        loop {
            let mut line = String::new();
            r.read_line(&mut line).ok()?;
            if line == "\r\n" {
                break;
            }
            a.trailers.push(line.trim_end().to_owned());
        }
    } else if let Some(n) = a.field("content-length") {
        a.body = vec![0; n.parse().ok()?];
        r.read_exact(&mut a.body).ok()?;
    } else {
        r.read_to_end(&mut a.body).ok()?;
    }
    Some(a)
}

/// A TLS connection to shuck, as `localhost`.
fn connect(s: &Shuck) -> BufReader<Client> {
    let opts = ClientOpts {
        sni: Some("localhost".into()),
        no_resumption: true,
        ..ClientOpts::default()
    };
    let c = tls_connect(s.addr(), &opts).unwrap();
    c.sock
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    BufReader::new(c)
}

fn send(c: &mut BufReader<Client>, raw: &str) {
    c.get_mut().write_all(raw.as_bytes()).unwrap();
    c.get_mut().flush().unwrap();
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n")
}

#[test]
fn http1_clients_reach_an_h2c_backend_through_the_core() {
    let dir = TempDir::new("nghttpd");
    std::fs::write(dir.path("index.html"), "served over h2c\n").unwrap();
    let Some((_server, h2c)) = nghttpd(&dir) else {
        return;
    };
    let log = dir.path("access.log");
    let backend = format!("--named-backend=name=h;server={h2c};proto=h2");
    let log_arg = format!("--access-log={}", log.display());
    let s = Shuck::start(&[
        "--http",
        "-n",
        "1",
        "--http-stall-timeout",
        "1",
        "-b",
        "127.0.0.1:1",
        &backend,
        "--route=sni=localhost;backend=h",
        "--route=host=localhost;backend=h",
        "--route=host=127.0.0.1;backend=h",
        &log_arg,
        "--access-log-format=json",
    ]);
    let curl = |args: &str| {
        sh_out(&format!(
            "curl -sk --http1.1 --resolve localhost:{p}:127.0.0.1 {args}",
            p = s.port
        ))
    };
    let url = format!("https://localhost:{}/index.html", s.port);
    let mut requests = 0;
    assert_eq!(curl(&url), "served over h2c\n", "{}", s.log());
    // Bodies of a length and chunked, each echoed back.
    assert_eq!(
        curl(&format!("--data-binary 'up and back' {url}")),
        "up and back"
    );
    let chunked = format!("-H 'Transfer-Encoding: chunked' --data-binary 'in chunks' {url}");
    assert_eq!(curl(&chunked), "in chunks");
    // HEAD: the length, no body.
    let head = curl(&format!("-I {url}"));
    assert!(
        head.starts_with("HTTP/1.1 200") && head.contains("content-length: 16"),
        "{head}"
    );
    // Two requests, one connection.
    let connects = curl(&format!(
        "-o /dev/null -o /dev/null -w '%{{num_connects}} ' {url} {url}"
    ));
    assert_eq!(
        connects.trim(),
        "1 0",
        "the second request reused the connection"
    );
    requests += 6;

    // Keep-alive and pipelining on one connection: answers in order, bodies whole.
    let mut c = connect(&s);
    send(&mut c, &get("/index.html"));
    let a = read_answer(&mut c, false).unwrap();
    assert_eq!((a.status, &a.body[..]), (200, &b"served over h2c\n"[..]));
    let post = "POST /index.html HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello";
    let chunks = "POST /index.html HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
    send(&mut c, &format!("{post}{chunks}{}", get("/index.html")));
    let bodies: Vec<Vec<u8>> = (0..3)
        .map(|_| read_answer(&mut c, false).unwrap().body)
        .collect();
    assert_eq!(bodies, [&b"hello"[..], b"abcde", b"served over h2c\n"]);
    requests += 4;
    // A body longer than its Content-Length: what follows is read as the next request and
    // refused (400, the connection closed), never passed on (nghttpd would answer /evil
    // 404). The POST before it is answered first when its bytes were read apart from the
    // rest, else refused with them.
    let mut c = connect(&s);
    let smuggled = "POST /index.html HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello0\r\n\r\nGET /evil HTTP/1.1\r\nHost: localhost\r\n\r\n";
    send(&mut c, smuggled);
    let mut a = read_answer(&mut c, false).unwrap();
    if a.status == 200 {
        assert_eq!(a.body, b"hello");
        requests += 1;
        a = read_answer(&mut c, false).unwrap();
    }
    assert_eq!(a.status, 400, "{a:?}");
    let mut rest = Vec::new();
    assert_eq!(
        c.read_to_end(&mut rest).unwrap_or(0),
        0,
        "closed after the 400"
    );
    requests += 1;
    let mut c = connect(&s);
    // HTTP/1.0: the answer framed by its length, the connection closed after it.
    send(
        &mut c,
        "GET /index.html HTTP/1.0\r\nHost: localhost\r\n\r\n",
    );
    let a = read_answer(&mut c, false).unwrap();
    assert_eq!(a.status, 200);
    assert_eq!(a.field("connection").as_deref(), Some("close"));
    let mut rest = Vec::new();
    assert_eq!(c.read_to_end(&mut rest).unwrap_or(0), 0, "closed after it");
    requests += 1;

    // The same hygiene as on every path, for missing and unknown input.
    let addr = s.addr();
    let by_name = Conn::sni("localhost");
    let cases: [(&str, &Conn, String, Verdict); 7] = [
        ("a GET", &by_name, get("/index.html"), Verdict::Status(200)),
        (
            "no SNI, an address for Host",
            &Conn::default(),
            "GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".into(),
            Verdict::Status(200),
        ),
        (
            "no Host in HTTP/1.1",
            &by_name,
            "GET /index.html HTTP/1.1\r\n\r\n".into(),
            Verdict::Refused,
        ),
        (
            "no Host in HTTP/1.0",
            &by_name,
            "GET /index.html HTTP/1.0\r\n\r\n".into(),
            Verdict::Refused,
        ),
        (
            "a body shorter than declared",
            &by_name,
            "POST /index.html HTTP/1.1\r\nHost: localhost\r\nContent-Length: 60\r\n\r\nhello".into(),
            Verdict::Status(408),
        ),
        (
            "Content-Length and Transfer-Encoding",
            &by_name,
            "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".into(),
            Verdict::Refused,
        ),
        (
            "a WebSocket",
            &by_name,
            "GET /ws HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n".into(),
            Verdict::Status(501),
        ),
    ];
    for (what, conn, raw, want) in &cases {
        let got = shapes::h1(addr, conn, raw.as_bytes());
        assert_eq!(&got, want, "HTTP/1.1: {what}\n{}", s.log());
    }
    // A line each, the rewriter's refusals (no Host, both framings) too.
    requests += cases.len();

    // One line per request the core served, each with its status and backend.
    std::thread::sleep(Duration::from_millis(300));
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let said: Vec<String> = (lines.iter())
        .map(|l| {
            format!(
                "{} {} {} {}",
                l["request_method"], l["request_uri"], l["status"], l["cause"]
            )
        })
        .collect();
    assert_eq!(lines.len(), requests, "{said:#?}");
    for l in &lines {
        assert_eq!(l["server_protocol"], "HTTP/1.1", "{l}");
        // Refused before its route's verdict, a head has no backend on its line.
        assert!(l["backend"] == "h" || l["status"] == 400, "{l}");
    }
    let statuses: Vec<u64> = lines
        .iter()
        .map(|l| l["status"].as_u64().unwrap())
        .collect();
    // Not 200: the longer body's 400, no Host in HTTP/1.1 and in HTTP/1.0, both framings,
    // the shorter body's 408 and the WebSocket's 501.
    assert_eq!(
        statuses.iter().filter(|&&s| s == 200).count(),
        requests - 6,
        "{said:#?}"
    );
    for status in [400, 408, 501] {
        assert!(statuses.contains(&status), "{status}\n{said:#?}");
    }

    // No server up: 503, as on every path.
    drop(_server);
    std::thread::sleep(Duration::from_millis(200));
    let got = shapes::h1(addr, &by_name, get("/index.html").as_bytes());
    assert_eq!(got, Verdict::Status(503), "{}", s.log());
}

#[test]
fn one_connection_moves_between_http1_and_http2_backends() {
    let dir = TempDir::new("nghttpd");
    std::fs::write(dir.path("index.html"), "from h2\n").unwrap();
    let Some((_server, h2c)) = nghttpd(&dir) else {
        return;
    };
    let plain = Origin::http("from h1\n");
    let h2 = format!("--named-backend=name=h;server={h2c};proto=h2");
    let h1 = format!("--named-backend=name=p;server={}", plain.addr());
    let s = Shuck::start(&[
        "--http",
        "-n",
        "1",
        "-b",
        "127.0.0.1:1",
        &h2,
        &h1,
        "--route=host=localhost;path-prefix=/plain;backend=p",
        "--route=host=localhost;backend=h",
    ]);
    let order = [
        "/index.html",
        "/plain/a",
        "/index.html",
        "/plain/b",
        "/index.html",
    ];
    let want: Vec<&[u8]> = order
        .iter()
        .map(|p| match p.starts_with("/plain") {
            true => &b"from h1\n"[..],
            false => &b"from h2\n"[..],
        })
        .collect();
    // One request at a time.
    let mut c = connect(&s);
    for (path, want) in order.iter().zip(&want) {
        send(&mut c, &get(path));
        let a = read_answer(&mut c, false).unwrap_or_else(|| panic!("{path}\n{}", s.log()));
        assert_eq!((a.status, &a.body[..]), (200, *want), "{path}");
    }
    // All at once: answered in order, each by its own backend.
    let mut c = connect(&s);
    let all: String = order.iter().map(|p| get(p)).collect();
    send(&mut c, &all);
    for (path, want) in order.iter().zip(&want) {
        let a = read_answer(&mut c, false).unwrap_or_else(|| panic!("{path}\n{}", s.log()));
        assert_eq!((a.status, &a.body[..]), (200, *want), "pipelined {path}");
    }
    // Each return to the HTTP/1.1 backend opens a connection to it (the relay's way).
    assert_eq!(plain.accepted.load(std::sync::atomic::Ordering::SeqCst), 4);
}

#[test]
fn grpc_trailers_reach_an_http1_client_in_its_chunked_answer() {
    if !common::grpc::grpcio() {
        return;
    }
    let pki = common::grpc::pki();
    let plain = common::grpc::Server::start("a", None, None);
    let tls = common::grpc::Server::start("a", Some((pki.cert.as_ref(), pki.key.as_ref())), None);
    let tls_keys = format!(";proto=h2;tls=on;ca-file={};sni=localhost", pki.cert);
    // In clear (h2c), and over TLS to the backend (ALPN h2).
    for (server, keys) in [(&plain, ";proto=h2"), (&tls, tls_keys.as_str())] {
        calls_over_http1(&pki, server, keys);
    }
}

/// gRPC calls over raw HTTP/1.1 through shuck to `server` (its backend block's `keys`).
fn calls_over_http1(pki: &common::grpc::Pki, server: &common::grpc::Server, keys: &str) {
    let s = common::grpc::shuck(
        pki,
        &[server],
        keys,
        &["--request-id-header=x-request-id", "--request-id-response"],
    );
    let call = |c: &mut BufReader<Client>, method: &str, msg: &[u8], extra: &str| {
        let mut body = vec![0];
        body.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        body.extend_from_slice(msg);
        let head = format!(
            "POST /test.Echo/{method} HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/grpc\r\nTE: trailers\r\nContent-Length: {}\r\n{extra}\r\n",
            body.len()
        );
        let mut raw = head.into_bytes();
        raw.extend_from_slice(&body);
        c.get_mut().write_all(&raw).unwrap();
        read_answer(c, false).unwrap_or_else(|| panic!("{method}\n{}", s.log()))
    };
    let mut c = connect(&s);
    let a = call(&mut c, "Trailers", b"x", "");
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.field("transfer-encoding").as_deref(), Some("chunked"));
    assert_eq!(a.field("x-initial").as_deref(), Some("i1"));
    assert_eq!(&a.body[5..], b"with trailers");
    assert!(a.trailers.contains(&"grpc-status: 0".to_owned()), "{a:?}");
    assert!(a.trailers.contains(&"x-trailer: t1".to_owned()), "{a:?}");
    // What the server was told: the forwarding fields, the request's ID (the one the
    // answer carries back), nothing of HTTP/1.1's connection.
    let a = call(
        &mut c,
        "Headers",
        b"",
        "X-Forwarded-For: 6.6.6.6\r\nConnection: keep-alive, x-gone\r\nx-gone: 1\r\n",
    );
    let seen: serde_json::Value = serde_json::from_slice(&a.body[5..]).unwrap();
    assert_eq!(seen["x-forwarded-for"], "127.0.0.1", "{seen}");
    assert_eq!(seen["x-forwarded-proto"], "https", "{seen}");
    assert!(
        seen.get("x-gone").is_none() && seen.get("connection").is_none(),
        "{seen}"
    );
    let id = a
        .field("x-request-id")
        .expect("the request's ID comes back");
    assert_eq!(seen["x-request-id"], id, "{seen}");
    // The server's own status, in the trailers.
    let a = call(&mut c, "Status", b"nope", "");
    assert!(
        a.trailers.iter().any(|t| t == "grpc-status: 5")
            || a.field("grpc-status").as_deref() == Some("5"),
        "{a:?}"
    );
}
