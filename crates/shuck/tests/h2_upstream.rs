//! HTTP/2 backends (`proto = h2`) before a real HTTP/2 server, nghttpd (Debian's
//! nghttp2-server) in clear with prior knowledge: HTTP/2 and HTTP/3 clients reach it with
//! the request hygiene of every backend (a body longer or shorter than declared never
//! passes), HTTP/1.1 clients too (`h1_to_h2.rs`), the streams of many client
//! connections share the configured connections, and a backend's configuration errors are
//! named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};

use common::shapes::{self, Conn, Fields, Verdict};
use common::*;

/// shuck with `--http --quic` before backend `h` (`proto=h2`, `keys` after it), every host
/// routed to it.
fn gateway(server: &str, keys: &str, extra: &[&str]) -> Shuck {
    let backend = format!("--named-backend=name=h;server={server};proto=h2{keys}");
    let mut args = vec![
        "--http",
        "--quic",
        "-b",
        "127.0.0.1:1",
        &backend,
        "--route=host=localhost;backend=h",
        "--route=host=127.0.0.1;backend=h",
    ];
    args.extend_from_slice(extra);
    Shuck::start(&args)
}

fn get(path: &str) -> Fields {
    Fields::request("GET", "localhost", path, &[])
}

fn post(path: &str, extra: &[(&str, &str)]) -> Fields {
    Fields::request("POST", "localhost", path, extra)
}

#[test]
fn http2_and_http3_clients_reach_an_h2c_backend_with_the_same_hygiene() {
    let dir = TempDir::new("nghttpd");
    std::fs::write(dir.path("index.html"), "served over h2c\n").unwrap();
    let Some((_server, h2c)) = nghttpd(&dir) else {
        return;
    };
    let s = gateway(&h2c, "", &[]);
    let addr = s.addr();
    let body = sh_out(&format!(
        "curl -sk --http2 --resolve localhost:{p}:127.0.0.1 https://localhost:{p}/index.html",
        p = s.port
    ));
    assert_eq!(body, "served over h2c\n");
    let echoed = sh_out(&format!(
        "curl -sk --http2 --data-binary 'up and back' --resolve localhost:{p}:127.0.0.1 https://localhost:{p}/index.html",
        p = s.port
    ));
    assert_eq!(echoed, "up and back");
    let smuggled = "hello0\r\n\r\nGET /evil HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let conn = Conn::sni("localhost");
    let cases = [
        ("a GET", get("/index.html"), Verdict::Status(200)),
        (
            "a body of its content-length",
            post("/index.html", &[("content-length", "5")]).with_body(b"hello"),
            Verdict::Status(200),
        ),
        (
            "a body longer than its content-length",
            post("/index.html", &[("content-length", "5")]).with_body(smuggled.as_bytes()),
            Verdict::Refused,
        ),
        (
            "a body shorter than its content-length",
            post("/index.html", &[("content-length", "60")]).with_body(b"hello"),
            Verdict::Refused,
        ),
        (
            "a content-length and no body",
            Fields::request(
                "GET",
                "localhost",
                "/index.html",
                &[("content-length", "60")],
            ),
            Verdict::Refused,
        ),
        (
            "no :authority and no Host",
            Fields::raw(&[(":method", "GET"), (":scheme", "https"), (":path", "/")]),
            Verdict::Refused,
        ),
        (
            "a connection-specific field",
            Fields::request("GET", "localhost", "/", &[("connection", "close")]),
            Verdict::Refused,
        ),
    ];
    let h3_ok = common::h3::aioquic();
    for (what, req, want) in &cases {
        assert_eq!(
            &shapes::h2(addr, &conn, req),
            want,
            "HTTP/2: {what}\n{}",
            s.log()
        );
        if h3_ok {
            let got = shapes::h3(s.port, &conn, std::slice::from_ref(req));
            assert_eq!(&got[0], want, "HTTP/3: {what}\n{}", s.log());
        }
    }
    // HTTP/1.1 clients reach it too, through the core (tests/h1_to_h2.rs for the rest).
    let out = sh_out(&format!(
        "curl -sk --http1.1 --resolve localhost:{p}:127.0.0.1 https://localhost:{p}/index.html",
        p = s.port
    ));
    assert_eq!(out, "served over h2c\n");
}

fn backend_conns(server: &str) -> usize {
    sh_out(&format!("ss -tnH state established dst {server}"))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}

#[test]
fn streams_of_fifty_clients_share_the_configured_connections() {
    if !require("h2load", "nghttp2-client") || !require("ss", "iproute2") {
        return;
    }
    let dir = TempDir::new("nghttpd");
    std::fs::write(dir.path("index.html"), "x".repeat(1000)).unwrap();
    let Some((_server, h2c)) = nghttpd(&dir) else {
        return;
    };
    // One worker: 50 streams at once over connections of 10 streams each.
    let s = gateway(&h2c, ";max-streams=10", &["-n", "1"]);
    let out = sh_out(&format!(
        "h2load -c 50 -m 1 -n 2000 https://127.0.0.1:{}/index.html",
        s.port
    ));
    assert!(
        out.contains("2000 succeeded, 0 failed"),
        "{out}\n{}",
        s.log()
    );
    let conns = backend_conns(&h2c);
    assert!(
        (1..=5).contains(&conns),
        "{conns} backend connections for 50 streams at most, 10 per connection\n{out}"
    );
}

#[test]
fn a_backends_http2_settings_are_checked() {
    for (spec, http, want) in [
        ("proto=h3", true, "expected http/1.1, h2 or auto"),
        ("proto=auto", true, "needs tls = on"),
        ("max-streams=5", true, "needs proto = h2 or auto"),
        ("proto=h2;max-streams=0", true, "expected 1 to 1000000"),
        ("proto=h2;write-proxy-v2=on", true, "shares each connection"),
        ("proto=h2;tls=on;alpn=h2", true, "leave alpn out"),
        ("proto=h2", false, "it needs --http"),
    ] {
        let spec = format!("name=b;server=127.0.0.1:9;{spec}");
        let (code, out) = test_backend(&spec, if http { &["--http"] } else { &[] });
        assert_ne!(code, Some(0), "{spec}: accepted\n{out}");
        assert!(out.contains(want), "{spec}: {out}");
    }
    // The global PROXY header cannot describe a shared connection either.
    let spec = "name=b;server=127.0.0.1:9;proto=h2";
    let (code, out) = test_backend(spec, &["--http", "--write-proxy-v2"]);
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("write-proxy-v2 = off"), "{out}");
}

#[test]
fn proto_auto_speaks_http1_to_a_server_that_chooses_it() {
    if !require("nginx", "nginx") {
        return;
    }
    // nginx over TLS without http2: ALPN gives http/1.1.
    let dir = TempDir::new("auto");
    let (both, _) = rcgen_cert(&dir, "origin", &["localhost"], false);
    let pem = std::fs::read_to_string(&both).unwrap();
    let at = pem.find("-----BEGIN PRIVATE KEY").unwrap();
    let (cert, key) = (dir.path("cert.pem"), dir.path("key.pem"));
    std::fs::write(&cert, &pem[..at]).unwrap();
    std::fs::write(&key, &pem[at..]).unwrap();
    let port = free_port();
    let conf = dir.path("nginx.conf");
    let d = dir.0.display();
    std::fs::write(
        &conf,
        format!(
            "daemon off; master_process off; pid {d}/nginx.pid; error_log {d}/error.log;\n\
             events {{}}\n\
             http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d}; \
             fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n\
             server {{ listen 127.0.0.1:{port} ssl; ssl_certificate {c}; ssl_certificate_key {k};\n\
             location / {{ return 200 \"nginx over $server_protocol\\n\"; }} }} }}\n",
            c = cert.display(),
            k = key.display()
        ),
    )
    .unwrap();
    let child = Command::new("nginx")
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _nginx = Proc(child);
    wait_listening(port, "nginx");
    let backend = format!(
        "--named-backend=name=h;server=127.0.0.1:{port};proto=auto;tls=on;ca-file={};sni=localhost",
        cert.display()
    );
    let s = Shuck::start(&[
        "--http",
        "-b",
        "127.0.0.1:1",
        &backend,
        "--route=host=localhost;backend=h",
    ]);
    for version in ["--http2", "--http2", "--http1.1"] {
        let out = sh_out(&format!(
            "curl -sk {version} --resolve localhost:{p}:127.0.0.1 https://localhost:{p}/",
            p = s.port
        ));
        assert_eq!(out, "nginx over HTTP/1.1\n", "{version}\n{}", s.log());
    }
}

#[test]
fn shared_connections_close_when_idle_and_when_a_ping_goes_unanswered() {
    if !require("ss", "iproute2") {
        return;
    }
    let dir = TempDir::new("nghttpd");
    std::fs::write(dir.path("index.html"), "up\n").unwrap();
    let Some((server, h2c)) = nghttpd(&dir) else {
        return;
    };
    let get = |s: &Shuck| {
        sh_out(&format!(
            "curl -sk --http2 --resolve localhost:{p}:127.0.0.1 https://localhost:{p}/index.html",
            p = s.port
        ))
    };
    // Idle for --http-keepalive-timeout: closed at the driver's next look (every 10 s).
    let quick = gateway(&h2c, "", &["--http-keepalive-timeout", "1"]);
    assert_eq!(get(&quick), "up\n");
    assert_eq!(backend_conns(&h2c), 1);
    assert!(
        wait_until(std::time::Duration::from_secs(25), || backend_conns(&h2c)
            == 0),
        "the idle connection was never closed"
    );
    drop(quick);
    // A server that stops answering (stopped: the kernel still holds the connection): its
    // PING goes unanswered, the connection is dropped, and once it answers again a new
    // one serves.
    let s = gateway(&h2c, "", &[]);
    assert_eq!(get(&s), "up\n");
    let pid = server.0.id().to_string();
    sh(&format!("kill -STOP {pid}"));
    let dead = s.wait_log("did not answer a PING", std::time::Duration::from_secs(30));
    sh(&format!("kill -CONT {pid}"));
    assert!(dead, "no PING was found unanswered: {}", s.log());
    assert_eq!(get(&s), "up\n");
}

/// An HTTP/2 server in clear (hyperium's h2, the library shuck's HTTP/2 is), that refuses
/// the first `refuse` streams it is sent (`REFUSED_STREAM`, RFC 9113 §8.7) and echoes the
/// body of every other; the bodies it refused and echoed are kept, in order.
fn refusing_server(refuse: usize) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::sync::{Arc, Mutex};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let left = std::rc::Rc::new(std::cell::Cell::new(refuse));
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (left, seen) = (left.clone(), seen.clone());
                tokio::task::spawn_local(async move {
                    let Ok(mut conn) = h2::server::handshake(tcp).await else {
                        return;
                    };
                    while let Some(Ok((req, mut respond))) = conn.accept().await {
                        let (left, seen) = (left.clone(), seen.clone());
                        tokio::task::spawn_local(async move {
                            let body = common::h2c::read_body(req.into_body())
                                .await
                                .unwrap_or_default();
                            let body = String::from_utf8_lossy(&body).into_owned();
                            if left.get() > 0 {
                                left.set(left.get() - 1);
                                seen.lock().unwrap().push(format!("refused {body}"));
                                respond.send_reset(h2::Reason::REFUSED_STREAM);
                                return;
                            }
                            seen.lock().unwrap().push(format!("echoed {body}"));
                            let resp = http::Response::new(());
                            if let Ok(mut tx) = respond.send_response(resp, false) {
                                let _ = tx.send_data(bytes::Bytes::from(body), true);
                            }
                        });
                    }
                });
            }
        });
    });
    (port, log)
}

#[test]
fn a_refused_stream_goes_again_with_its_body_whatever_its_method() {
    let (port, seen) = refusing_server(2);
    let s = gateway(&format!("127.0.0.1:{port}"), "", &["--retries", "3"]);
    for (version, body) in [("--http2", "from h2"), ("--http1.1", "from h1")] {
        let out = sh_out(&format!(
            "curl -sk {version} -X POST --data-binary '{body}' --resolve localhost:{p}:127.0.0.1 https://localhost:{p}/up",
            p = s.port
        ));
        assert_eq!(out, body, "{version}\n{}", s.log());
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            "refused from h2",
            "refused from h2",
            "echoed from h2",
            "echoed from h1"
        ],
        "each POST refused twice then served once, its body whole"
    );
}

/// An HTTP/2 server in clear that, as grpc-go's and grpc-java's `MaxConnectionAge` do,
/// sends GOAWAY on each connection as its first stream comes (so every stream is at or
/// below its last stream: processed), and answers every call trailers-only with
/// `grpc-status: 14`; the calls it was sent, counted.
fn going_away_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let seen = seen.clone();
                tokio::task::spawn_local(async move {
                    let Ok(mut conn) = h2::server::handshake(tcp).await else {
                        return;
                    };
                    while let Some(Ok((req, mut respond))) = conn.accept().await {
                        conn.graceful_shutdown();
                        seen.fetch_add(1, Ordering::SeqCst);
                        tokio::task::spawn_local(async move {
                            let _ = common::h2c::read_body(req.into_body()).await;
                            let resp = http::Response::builder()
                                .header("content-type", "application/grpc")
                                .header("grpc-status", "14")
                                .header("grpc-message", "going away")
                                .body(())
                                .unwrap();
                            let _ = respond.send_response(resp, true);
                        });
                    }
                });
            }
        });
    });
    (port, calls)
}

#[test]
fn a_grpc_call_a_server_answered_after_its_goaway_is_sent_once_unless_retry_on_asks() {
    use std::sync::atomic::Ordering;
    let (port, calls) = going_away_server();
    let call = Fields {
        body: Some(b"\0\0\0\0\0".to_vec()),
        ..Fields::request(
            "POST",
            "localhost",
            "/test.Echo/Unary",
            &[("content-type", "application/grpc"), ("te", "trailers")],
        )
    };
    let curl = |port: u16, version: &str| {
        sh_out(&format!(
            "curl -sk {version} -o /dev/null -D - -H 'content-type: application/grpc' --data-binary @/dev/null --resolve localhost:{port}:127.0.0.1 https://localhost:{port}/test.Echo/Unary"
        ))
    };
    let conn = Conn::sni("localhost");
    let h3_ok = common::h3::aioquic();
    // HAProxy's and nginx's way: the server processed it (at or below the GOAWAY's last
    // stream), so it goes once, and the client reads the server's status.
    let s = gateway(&format!("127.0.0.1:{port}"), "", &["--retries", "3"]);
    for version in ["--http2", "--http1.1"] {
        let before = calls.load(Ordering::SeqCst);
        let head = curl(s.port, version);
        assert!(
            head.contains("grpc-status: 14"),
            "{version}: {head}\n{}",
            s.log()
        );
        assert_eq!(
            calls.load(Ordering::SeqCst) - before,
            1,
            "{version}: sent once"
        );
    }
    let before = calls.load(Ordering::SeqCst);
    assert_eq!(shapes::h2(s.addr(), &conn, &call), Verdict::Status(200));
    if h3_ok {
        assert_eq!(
            shapes::h3(s.port, &conn, std::slice::from_ref(&call)),
            [Verdict::Status(200)]
        );
    }
    let want = if h3_ok { 2 } else { 1 };
    assert_eq!(
        calls.load(Ordering::SeqCst) - before,
        want,
        "each sent once"
    );
    drop(s);
    // Asked for (Envoy's retry_on): sent again up to --retries times, then the server's
    // status is the client's.
    let s = gateway(
        &format!("127.0.0.1:{port}"),
        ";retry-on=unavailable",
        &["--retries", "2"],
    );
    for version in ["--http2", "--http1.1"] {
        let before = calls.load(Ordering::SeqCst);
        let head = curl(s.port, version);
        assert!(
            head.contains("grpc-status: 14"),
            "{version}: {head}\n{}",
            s.log()
        );
        assert_eq!(
            calls.load(Ordering::SeqCst) - before,
            3,
            "{version}: 1 + 2 tries"
        );
    }
    if h3_ok {
        let before = calls.load(Ordering::SeqCst);
        assert_eq!(
            shapes::h3(s.port, &conn, std::slice::from_ref(&call)),
            [Verdict::Status(200)]
        );
        assert_eq!(
            calls.load(Ordering::SeqCst) - before,
            3,
            "HTTP/3: 1 + 2 tries"
        );
    }
    // A status it does not name is passed on at once.
    drop(s);
    let s = gateway(
        &format!("127.0.0.1:{port}"),
        ";retry-on=cancelled",
        &["--retries", "2"],
    );
    let before = calls.load(Ordering::SeqCst);
    curl(s.port, "--http2");
    assert_eq!(calls.load(Ordering::SeqCst) - before, 1);
    let (code, out) = test_backend(
        "name=g;server=127.0.0.1:1;retry-on=unavailable",
        &["--http"],
    );
    assert_ne!(code, Some(0));
    assert!(
        out.contains("retry-on") && out.contains("proto = h2"),
        "{out}"
    );
    let (code, out) = test_backend(
        "name=g;server=127.0.0.1:1;proto=h2;retry-on=5xx",
        &["--http"],
    );
    assert_ne!(code, Some(0));
    assert!(out.contains("\"5xx\""), "{out}");
}
