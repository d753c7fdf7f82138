//! HTTP/2 in `--http` mode, end to end: real h2 clients (curl, nghttp, hyperium's h2)
//! through shuck to real HTTP/1.1 backends (nginx, and a recording backend): forwarding
//! headers on every stream, backend connections reused and bounded by maxconn, bodies,
//! trailers and interim answers, a bad answer or a reset ending one stream only, WebSocket
//! over extended CONNECT, ALPN, metrics and the connection log line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use common::h1origin::H1Origin;
use common::h2c;
use common::*;

fn curl_h2(shuck: &Shuck, args: &[&str], path: &str) -> String {
    let url = format!("https://127.0.0.1:{}{path}", shuck.port);
    let out = Command::new("curl")
        .args(["-sk", "--http2", "--max-time", "20"])
        .args(args)
        .arg(&url)
        .output()
        .unwrap();
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    s
}

#[test]
fn nginx_sees_the_client_on_every_stream() {
    if !require("nginx", "nginx")
        || !require("nghttp", "nghttp2-client")
        || !require("curl", "curl")
    {
        return;
    }
    let dir = TempDir::new("h2-nginx");
    let port = free_port();
    let d = dir.0.display();
    let cfg = dir.path("nginx.conf");
    std::fs::write(
        &cfg,
        format!(
            "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\n\
             http {{ log_format fwd '$http_x_forwarded_for|$http_x_forwarded_proto|$request|$http_host';\n\
             access_log {d}/access.log fwd;\n\
             client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n\
             server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"ok\\n\"; }} }} }}\n"
        ),
    )
    .unwrap();
    let mut nginx = Command::new("nginx")
        .args(["-c", cfg.to_str().unwrap(), "-e", &format!("{d}/error.log")])
        .spawn()
        .unwrap();
    wait_listening(port, "nginx");
    let backend = format!("[127.0.0.1]:{port}");
    let shuck = Shuck::start(&["--http", "-b", &backend]);

    // curl: one stream, forged headers of every spelling.
    let out = curl_h2(
        &shuck,
        &[
            "-H",
            "X-Forwarded-For: 6.6.6.6",
            "-H",
            "forwarded: for=6.6.6.6",
            "-w",
            "%{http_version}",
        ],
        "/one",
    );
    assert!(out.ends_with("ok\n2"), "curl over h2: {out}");
    // nghttp: 100 streams at once on one connection.
    let url = format!("https://127.0.0.1:{}/many", shuck.port);
    let out = Command::new("nghttp")
        .args([
            "-n",
            "-s",
            "-m",
            "100",
            "-H",
            "x_forwarded_for: 6.6.6.6",
            &url,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "nghttp: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = nginx.kill();
    let _ = nginx.wait();
    let log = std::fs::read_to_string(dir.path("access.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 101, "{log}");
    for l in &lines {
        let f: Vec<&str> = l.split('|').collect();
        assert_eq!(f[0], "127.0.0.1", "{l}");
        assert_eq!(f[1], "https", "{l}");
        assert!(f[2].ends_with("HTTP/1.1"), "{l}");
        assert_eq!(f[3], format!("127.0.0.1:{}", shuck.port), "{l}");
    }
    assert!(!log.contains("6.6.6.6"));
}

#[tokio::test]
async fn streams_reuse_backend_connections_and_respect_maxconn() {
    let origin = H1Origin::start(None);
    let shuck = Shuck::start(&["--http", "-b", &origin.spec]);
    let (mut send, _conn) = h2c::connect(shuck.addr()).await;
    for i in 0..100 {
        let (status, body) = h2c::get(&mut send, &format!("/seq/{i}")).await.unwrap();
        assert_eq!((status.as_u16(), &body[..]), (200, &b"127.0.0.1"[..]));
    }
    assert_eq!(
        origin.conns.load(Ordering::SeqCst),
        1,
        "100 streams, one after the other, on one backend connection"
    );

    // maxconn 2: 50 streams at once are all answered over at most 2 connections.
    let limited = H1Origin::start(None);
    let spec = format!("{},maxconn=2", limited.spec);
    let shuck = Shuck::start(&["--http", "-b", &spec]);
    let (send, _conn) = h2c::connect(shuck.addr()).await;
    let mut tasks = Vec::new();
    for i in 0..50 {
        let mut s = send.clone();
        tasks.push(tokio::spawn(async move {
            h2c::get(&mut s, &format!("/slow/{}", 20 + i % 3)).await
        }));
    }
    for t in tasks {
        let (status, body) = t.await.unwrap().unwrap();
        assert_eq!((status.as_u16(), &body[..]), (200, &b"slow"[..]));
    }
    assert_eq!(limited.requests().len(), 50);
    assert!(
        limited.max_open.load(Ordering::SeqCst) <= 2,
        "never more than maxconn backend connections"
    );
    assert!(
        limited.conns.load(Ordering::SeqCst) <= 2,
        "connections reused, not reopened"
    );

    // A stream that waits past --queue-timeout gets 503; the one holding the slot is served.
    let one = H1Origin::start(None);
    let spec = format!("{},maxconn=1", one.spec);
    let shuck = Shuck::start(&["--http", "-b", &spec, "--queue-timeout", "500ms"]);
    let (send, _conn) = h2c::connect(shuck.addr()).await;
    let mut s1 = send.clone();
    let slow = tokio::spawn(async move { h2c::get(&mut s1, "/slow/2000").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut s2 = send.clone();
    let (status, _) = h2c::get(&mut s2, "/waits").await.unwrap();
    assert_eq!(status.as_u16(), 503);
    assert_eq!(slow.await.unwrap().unwrap().0.as_u16(), 200);
}

#[tokio::test]
async fn a_dead_server_is_marked_down_and_streams_go_to_the_next() {
    let origin = H1Origin::start(None);
    let dead = format!("[127.0.0.1]:{}", free_port());
    let shuck = Shuck::start(&["--http", "-b", &dead, "-b", &origin.spec]);
    let (mut send, _conn) = h2c::connect(shuck.addr()).await;
    for _ in 0..6 {
        assert_eq!(h2c::get(&mut send, "/").await.unwrap().0.as_u16(), 200);
    }
    assert!(
        shuck.wait_log("marked down", Duration::from_secs(2)),
        "{}",
        shuck.log()
    );
}

#[tokio::test]
async fn bodies_trailers_and_interim_answers_pass() {
    let origin = H1Origin::start(None);
    let shuck = Shuck::start(&[
        "--http",
        "-b",
        &origin.spec,
        "--client-cert-header",
        "X-Client",
    ]);
    let (send, _conn) = h2c::connect(shuck.addr()).await;

    // A body without a length: chunked to the backend, with the client's trailers (the
    // forwarding ones removed).
    let req = http::Request::post("https://localhost/sum")
        .header("x-client", "CN=mallory")
        .body(())
        .unwrap();
    let (resp, mut up) = send
        .clone()
        .ready()
        .await
        .unwrap()
        .send_request(req, false)
        .unwrap();
    for part in [&b"hello "[..], b"h2 ", b"world"] {
        up.send_data(Bytes::copy_from_slice(part), false).unwrap();
    }
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-checksum", "abc".parse().unwrap());
    trailers.insert("x-forwarded-for", "6.6.6.6".parse().unwrap());
    up.send_trailers(trailers).unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = String::from_utf8(h2c::read_body(resp.into_body()).await.unwrap()).unwrap();
    let want = sh_out("printf 'hello h2 world' | sha256sum");
    assert_eq!(
        body,
        format!("14 {}", want.split_whitespace().next().unwrap())
    );
    let seen = origin.requests().pop().unwrap();
    assert_eq!(seen.header("transfer-encoding"), Some("chunked"));
    assert_eq!(
        seen.trailers,
        vec![("x-checksum".to_owned(), "abc".to_owned())]
    );
    assert_eq!(
        seen.header("x-client"),
        None,
        "the client's own certificate header is removed"
    );

    // With a length: passed as it is.
    let send2 = send.clone();
    let req = http::Request::put("https://localhost/sum")
        .header("content-length", "5")
        .body(())
        .unwrap();
    let (resp, mut up) = send2
        .ready()
        .await
        .unwrap()
        .send_request(req, false)
        .unwrap();
    up.send_data(Bytes::from_static(b"12345"), true).unwrap();
    let resp = resp.await.unwrap();
    let body = String::from_utf8(h2c::read_body(resp.into_body()).await.unwrap()).unwrap();
    assert!(body.starts_with("5 "), "{body}");
    assert_eq!(
        origin.requests().pop().unwrap().header("content-length"),
        Some("5")
    );

    // A chunked answer: its body whole, its trailers as h2 trailers, hop fields gone.
    let req = http::Request::get("https://localhost/chunked")
        .body(())
        .unwrap();
    let (resp, _) = send
        .clone()
        .ready()
        .await
        .unwrap()
        .send_request(req, true)
        .unwrap();
    let resp = resp.await.unwrap();
    assert!(resp.headers().get("x-hop").is_none() && resp.headers().get("connection").is_none());
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while let Some(d) = body.data().await {
        got.extend_from_slice(&d.unwrap());
    }
    assert_eq!(got, b"hello world");
    let t = body.trailers().await.unwrap().expect("trailers");
    assert_eq!(t["grpc-status"], "0");
    assert_eq!(t["grpc-message"], "fine");

    // 103 Early Hints passes, then the answer; HEAD, 204 and 304 carry no body.
    let out = curl_h2(&shuck, &["-v"], "/hints");
    assert!(
        out.contains("< HTTP/2 103") && out.contains("< link: </style.css>; rel=preload"),
        "{out}"
    );
    assert!(out.contains("< HTTP/2 200") && out.contains("ok"), "{out}");
    let out = curl_h2(&shuck, &["-I"], "/size/10");
    assert!(
        out.contains("HTTP/2 200") && out.contains("content-length: 10"),
        "{out}"
    );
    let mut s = send.clone();
    for (path, code) in [("/204", 204), ("/304", 304)] {
        let (status, body) = h2c::get(&mut s, path).await.unwrap();
        assert_eq!((status.as_u16(), body.len()), (code, 0));
    }
    // An answer delimited by the backend's close.
    let (status, body) = h2c::get(&mut s, "/close").await.unwrap();
    assert_eq!((status.as_u16(), &body[..]), (200, &b"until close"[..]));
    // Expect: 100-continue gets the backend's 100 and the answer.
    let out = curl_h2(
        &shuck,
        &["-v", "-H", "Expect: 100-continue", "--data-binary", "xyz"],
        "/sum",
    );
    assert!(out.contains("< HTTP/2 100") && out.contains("3 "), "{out}");
}

#[tokio::test]
async fn a_bad_answer_or_a_reset_ends_one_stream_only() {
    let origin = H1Origin::start(None);
    let shuck = Shuck::start(&["--http", "-b", &origin.spec]);
    let (send, conn) = h2c::connect(shuck.addr()).await;
    let mut s = send.clone();
    let slow = tokio::spawn(async move { h2c::get(&mut s, "/slow/400").await });
    let mut s = send.clone();
    // Cut short after its head: the stream is reset.
    let cut = h2c::get(&mut s, "/cut").await.unwrap_err();
    assert_eq!(cut.reason(), Some(h2::Reason::INTERNAL_ERROR), "{cut}");
    // Malformed head (Content-Length with Transfer-Encoding): 502.
    assert_eq!(h2c::get(&mut s, "/bad").await.unwrap().0.as_u16(), 502);
    assert_eq!(slow.await.unwrap().unwrap().0.as_u16(), 200);

    // Three big answers; the client resets the first after its first bytes.
    let mut streams = Vec::new();
    for _ in 0..3 {
        let req = http::Request::get("https://localhost/size/20000000")
            .body(())
            .unwrap();
        let (resp, _) = send
            .clone()
            .ready()
            .await
            .unwrap()
            .send_request(req, true)
            .unwrap();
        streams.push(resp);
    }
    let first = streams.remove(0).await.unwrap();
    let mut body = first.into_body();
    body.data().await.unwrap().unwrap();
    drop(body); // RST_STREAM(CANCEL)
    for resp in streams {
        let body = h2c::read_body(resp.await.unwrap().into_body())
            .await
            .unwrap();
        assert_eq!(body.len(), 20_000_000);
        assert!(body.iter().all(|&b| b == b'x'));
    }
    assert_eq!(h2c::get(&mut s, "/after").await.unwrap().0.as_u16(), 200);
    assert!(!conn.is_finished(), "the connection lives on");
}

#[tokio::test]
async fn websocket_over_h2_becomes_an_upgrade_and_echoes() {
    let origin = H1Origin::start(None);
    let shuck = Shuck::start(&["--http", "-b", &origin.spec]);
    let (mut send, _conn) = h2c::connect(shuck.addr()).await;
    for _ in 0..100 {
        if send.is_extended_connect_protocol_enabled() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        send = send.ready().await.unwrap();
    }
    assert!(
        send.is_extended_connect_protocol_enabled(),
        "SETTINGS_ENABLE_CONNECT_PROTOCOL"
    );
    let mut req = http::Request::connect("https://localhost/ws")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-protocol", "chat")
        .body(())
        .unwrap();
    req.extensions_mut()
        .insert(h2::ext::Protocol::from_static("websocket"));
    let (resp, mut up) = send.send_request(req, false).unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["sec-websocket-protocol"], "chat");
    assert!(resp.headers().get("sec-websocket-accept").is_none());
    let mut down = resp.into_body();
    // A masked text frame "hi", then more: the tunnel carries the bytes as they are.
    let frames: [&[u8]; 2] = [&[0x81, 0x82, 1, 2, 3, 4, b'h' ^ 1, b'i' ^ 2], b"more bytes"];
    for f in frames {
        up.send_data(Bytes::copy_from_slice(f), false).unwrap();
        let mut got = Vec::new();
        while got.len() < f.len() {
            let d = down.data().await.unwrap().unwrap();
            let _ = down.flow_control().release_capacity(d.len());
            got.extend_from_slice(&d);
        }
        assert_eq!(got, f);
    }
    up.send_data(Bytes::new(), true).unwrap();
    while let Some(d) = down.data().await {
        assert!(
            d.unwrap().is_empty(),
            "nothing more after the backend's close"
        );
    }
    let seen = origin.requests().pop().unwrap();
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("GET", "/ws"));
    assert_eq!(seen.header("upgrade"), Some("websocket"));
    assert_eq!(seen.header("connection"), Some("Upgrade"));
    assert_eq!(seen.header("sec-websocket-version"), Some("13"));
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"));

    // With a content-length the backend would wait for a body the tunnel never frames as
    // one, until --idle-timeout: refused at once, as nginx does, and nothing reaches it.
    let before = origin.requests().len();
    let mut req = http::Request::connect("https://localhost/ws")
        .header("sec-websocket-version", "13")
        .header("content-length", "5")
        .body(())
        .unwrap();
    req.extensions_mut()
        .insert(h2::ext::Protocol::from_static("websocket"));
    let mut send = send.ready().await.unwrap();
    let (resp, _up) = send.send_request(req, false).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), resp)
        .await
        .expect("an extended CONNECT with content-length is answered at once")
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(origin.requests().len(), before);
}

/// RFC 9113 calls both malformed, and hyperium's h2 0.4.20 dropped what made them so without a
/// word (vendor/patches/h2/): a fragment in `:path` and a pseudo-header field in trailers.
/// Each resets its stream (`PROTOCOL_ERROR`); the next stream of the connection is served.
#[tokio::test]
async fn malformed_paths_and_trailers_are_refused() {
    use common::h2c::{frame, DATA, END_HEADERS, END_STREAM, HEADERS};
    use tokio::io::AsyncWriteExt;
    let origin = H1Origin::start(None);
    let shuck = Shuck::start(&["--http", "-b", &origin.spec]);
    let mut tls = h2c::raw(shuck.addr(), &[]).await;
    // GET /a#frag
    let get = frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        1,
        &h2c::get_block("/a#frag"),
    );
    tls.write_all(&get).await.unwrap();
    assert_eq!(
        h2c::reset(&mut tls, 1, Duration::from_secs(5)).await,
        Some(1)
    );
    // POST /t with a body, then trailers holding :path.
    let mut post = h2c::get_block("/t");
    post[0] = 0x83; // :method POST
    let mut trailers = vec![0x04, 2];
    trailers.extend_from_slice(b"/x");
    let mut out = frame(HEADERS, END_HEADERS, 3, &post);
    out.extend(frame(DATA, 0, 3, b"body"));
    out.extend(frame(HEADERS, END_STREAM | END_HEADERS, 3, &trailers));
    tls.write_all(&out).await.unwrap();
    assert_eq!(
        h2c::reset(&mut tls, 3, Duration::from_secs(5)).await,
        Some(1)
    );
    // The connection goes on: an ordinary GET is answered.
    let ok = frame(HEADERS, END_STREAM | END_HEADERS, 5, &h2c::get_block("/ok"));
    tls.write_all(&ok).await.unwrap();
    assert_eq!(h2c::reset(&mut tls, 5, Duration::from_secs(5)).await, None);
    let paths: Vec<String> = origin.requests().iter().map(|s| s.path.clone()).collect();
    assert!(!paths.iter().any(|p| p.starts_with("/a")), "{paths:?}");
    assert!(paths.contains(&"/ok".to_string()), "{paths:?}");
}

#[tokio::test]
async fn every_backend_connection_opens_with_the_preamble() {
    let origin = H1Origin::start(None);
    let shuck = Shuck::start(&["--http", "--write-proxy-v1", "-b", &origin.spec]);
    let (send, _conn) = h2c::connect(shuck.addr()).await;
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let mut s = send.clone();
        tasks.push(tokio::spawn(
            async move { h2c::get(&mut s, "/slow/100").await },
        ));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap().0.as_u16(), 200);
    }
    let mut s = send.clone();
    for _ in 0..5 {
        assert_eq!(h2c::get(&mut s, "/").await.unwrap().0.as_u16(), 200);
    }
    let conns = origin.conns.load(Ordering::SeqCst);
    let pre = origin.preambles.lock().unwrap().clone();
    assert!(conns >= 2, "concurrent streams needed several connections");
    assert_eq!(pre.len(), conns, "{pre:?}");
    for p in pre {
        assert!(p.starts_with("PROXY TCP4 127.0.0.1 127.0.0.1 "), "{p}");
    }
    assert_eq!(origin.requests().len(), 10);
}

#[test]
fn alpn_decides_the_protocol() {
    if !require("curl", "curl") {
        return;
    }
    let origin = H1Origin::start(None);
    // --http and no --alpn-protos: h2 and http/1.1 offered, h2 served.
    let shuck = Shuck::start(&["--http", "-b", &origin.spec]);
    assert!(curl_h2(&shuck, &["-w", "|%{http_version}"], "/").ends_with("127.0.0.1|2"));
    let out = curl_h2(&shuck, &["--http1.1", "-w", "|%{http_version}"], "/");
    assert!(out.ends_with("127.0.0.1|1.1"), "{out}");
    // --alpn-protos without h2: HTTP/1.1 only.
    let shuck = Shuck::start(&["--http", "--alpn-protos", "http/1.1", "-b", &origin.spec]);
    assert!(curl_h2(&shuck, &["-w", "|%{http_version}"], "/").ends_with("|1.1"));
    // Without --http, h2 is relayed as bytes: the backend speaks it itself.
    let echo = Origin::echo();
    let shuck = Shuck::start(&["--alpn-protos", "h2", "-b", &echo.addr()]);
    let mut c = tls_connect(
        shuck.addr(),
        &ClientOpts {
            alpn: vec![b"h2".to_vec()],
            ..ClientOpts::default()
        },
    )
    .unwrap();
    assert_eq!(c.conn.alpn_protocol(), Some(&b"h2"[..]));
    use std::io::{Read, Write};
    c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    let mut back = [0u8; 24];
    c.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
}

#[tokio::test]
async fn metrics_and_log_name_the_protocol() {
    let origin = H1Origin::start(None);
    let stats = free_port();
    let stats_s = stats.to_string();
    let shuck = Shuck::start(&[
        "--http",
        "-b",
        &origin.spec,
        "--stats",
        &stats_s,
        "--log-connections",
        "-n",
        "1",
    ]);
    {
        let (mut send, conn) = h2c::connect(shuck.addr()).await;
        for _ in 0..7 {
            assert_eq!(h2c::get(&mut send, "/").await.unwrap().0.as_u16(), 200);
        }
        // An answer cut short: shuck resets the stream, and counts it.
        assert!(h2c::get(&mut send, "/cut").await.is_err());
        drop(send);
        let _ = conn.await;
    }
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    use std::io::Write;
    c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    let mut got = Vec::new();
    while !got.ends_with(b"127.0.0.1") {
        let mut b = [0u8; 256];
        let n = std::io::Read::read(&mut c, &mut b).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&b[..n]);
    }
    drop(c);
    assert!(
        shuck.wait_log("protocol=\"h2\"", Duration::from_secs(5)),
        "{}",
        shuck.log()
    );
    assert!(shuck.wait_log("streams=", Duration::from_secs(1)));
    assert!(
        shuck.wait_log("protocol=\"http/1.1\"", Duration::from_secs(5)),
        "{}",
        shuck.log()
    );
    let (_, body) = scrape(stats, "/metrics");
    assert_eq!(
        sample(&body, "shuck_http_requests_total{protocol=\"h2\"}"),
        8.0,
        "{body}"
    );
    assert_eq!(
        sample(&body, "shuck_http_requests_total{protocol=\"http/1.1\"}"),
        1.0
    );
    assert_eq!(sample(&body, "shuck_h2_connections_total"), 1.0);
    assert!(
        sample(&body, "shuck_h2_streams_reset_total{by=\"shuck\"}") >= 1.0,
        "{body}"
    );
    assert!(
        body.contains("shuck_h2_goaway_total{reason=\"enhance_your_calm\"}"),
        "{body}"
    );
}

#[test]
fn h2_settings_are_checked_and_read_from_the_file() {
    for (flag, value) in [
        ("--h2-max-concurrent-streams", "0"),
        ("--h2-max-resets", "0"),
        ("--h2-initial-window-size", "100"),
        ("--h2-initial-window-size", "2147483647"),
        ("--http-max-backend-conns", "0"),
        ("--http-max-backend-conns", "65536"),
    ] {
        let (code, err) = run_to_exit(&["--http", flag, value, "--test"]);
        assert_eq!(code, Some(1), "{flag} {value}: {err}");
        assert!(err.contains(flag) && err.contains("out of range"), "{err}");
    }
    let (code, err) = run_to_exit(&["--http", "--http-stall-timeout", "0", "--test"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--http-stall-timeout") && err.contains("more than 0"),
        "{err}"
    );
    let (code, err) = run_to_exit(&["--http", "--h2-max-concurrent-streams", "many"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--h2-max-concurrent-streams"), "{err}");
    // The same keys in a configuration file; a bad value is named with its line.
    let dir = TempDir::new("h2-conf");
    let conf = dir.path("shuck.conf");
    let (pem, _) = openssl_cert(&dir, "c", Key::EcP256, &["c.test"]);
    std::fs::write(&conf, format!("http = on\nh2-max-concurrent-streams = 7\nh2-max-resets = 5\nh2-initial-window-size = 1048576\nhttp-stall-timeout = 5\nhttp-max-backend-conns = 8\npem-file = \"{}\"\n", pem.display())).unwrap();
    let (code, err) = run_to_exit(&["--config", conf.to_str().unwrap(), "--test"]);
    assert_eq!(code, Some(0), "{err}");
    for key in [
        "h2-max-resets",
        "http-max-backend-conns",
        "http-stall-timeout",
    ] {
        std::fs::write(&conf, format!("http = on\n{key} = lots\n")).unwrap();
        let (code, err) = run_to_exit(&["--config", conf.to_str().unwrap(), "--test"]);
        assert_ne!(code, Some(0));
        assert!(err.contains("line 2") && err.contains(key), "{err}");
    }
}

#[tokio::test]
async fn the_concurrent_stream_limit_is_announced_and_kept() {
    let origin = H1Origin::start(None);
    let shuck = Shuck::start(&[
        "--http",
        "-b",
        &origin.spec,
        "--h2-max-concurrent-streams",
        "3",
    ]);
    let (mut send, _conn) = h2c::connect(shuck.addr()).await;
    // One exchange first: shuck's SETTINGS are then known to the client, which waits for a
    // free stream instead of opening a fourth (that shuck would refuse, REFUSED_STREAM).
    assert_eq!(h2c::get(&mut send, "/").await.unwrap().0.as_u16(), 200);
    assert_eq!(send.current_max_send_streams(), 3);
    let mut tasks = Vec::new();
    for _ in 0..9 {
        let mut s = send.clone();
        tasks.push(tokio::spawn(
            async move { h2c::get(&mut s, "/slow/200").await },
        ));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap().0.as_u16(), 200);
    }
    assert!(
        origin.max_open.load(Ordering::SeqCst) <= 3,
        "never more than 3 streams at once"
    );
    assert_eq!(origin.requests().len(), 10);
}
