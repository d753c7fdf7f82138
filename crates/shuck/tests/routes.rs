//! Several services behind one shuck: named backends chosen by frontend, by server name
//! and, with --http, per request by Host and path (HTTP/1.1 keep-alive and HTTP/2), 421 for
//! a name the connection's certificate does not cover, configuration errors with their
//! line, and a reload that changes backends and routes under load.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::h1origin::H1Origin;
use common::*;

/// A GET over a fresh TLS connection asking for `sni`: the body (the test origins keep
/// their connections open).
fn get_body(addr: std::net::SocketAddr, sni: &str) -> String {
    let c = tls_connect(
        addr,
        &ClientOpts {
            sni: Some(sni.into()),
            ..ClientOpts::default()
        },
    )
    .unwrap();
    let mut r = BufReader::new(c);
    r.get_mut()
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    String::from_utf8(read_answer(&mut r).1).unwrap()
}

/// One answer of a keep-alive connection: its status and body (by Content-Length).
fn read_answer(r: &mut impl BufRead) -> (u16, Vec<u8>) {
    let head = read_http_head(r).expect("an answer");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let len = head
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    (status, body)
}

#[test]
fn frontends_and_server_names_choose_the_backend() {
    let (a, b, c, d) = (
        Origin::http("A"),
        Origin::http("B"),
        Origin::http("C"),
        Origin::http("D"),
    );
    let (p1, p2, stats) = (free_port(), free_port(), free_port());
    let dir = TempDir::new("routes");
    let conf = dir.path("shuck.conf");
    std::fs::write(
        &conf,
        format!(
            r#"
pem-file = "{cert}"
backend = "{d}"
frontend = {{
    host = "127.0.0.1"
    port = "{p1}"
    backend = "a"
}}
frontend = "[127.0.0.1]:{p2}"
backend = {{
    name = "a"
    server = "{a}"
}}
backend = {{
    name = "b"
    server = "{b},weight=2"
}}
backend = {{
    name = "c"
    server = "{c}"
    connect-timeout = "2s"
}}
route = {{
    sni = "api.test"
    backend = "b"
}}
route = {{ sni = "*.web.test" backend = "c" }}
stats = "{stats}"
"#,
            cert = test_cert(),
            a = a.addr(),
            b = b.addr(),
            c = c.addr(),
            d = d.addr(),
        ),
    )
    .unwrap();
    let conf_s = conf.to_str().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shuck"))
        .args(["--config", conf_s, "--test"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = String::from_utf8_lossy(&out.stdout);
    for line in [
        "backend a: ",
        "route: frontend [127.0.0.1]:",
        "route: sni api.test -> b",
        "route: sni *.web.test -> c",
    ] {
        assert!(out.contains(line), "{line} in {out}");
    }
    let shuck = Shuck::start_raw(&["--config", conf_s], p1);
    wait_listening(p2, "the second frontend");
    let fe1: std::net::SocketAddr = format!("127.0.0.1:{p1}").parse().unwrap();
    let fe2: std::net::SocketAddr = format!("127.0.0.1:{p2}").parse().unwrap();
    // The frontend's backend, whatever the name (no route on it applies before its own?
    // routes do: a name route wins over the frontend's backend).
    assert_eq!(get_body(fe1, "localhost"), "A");
    assert_eq!(get_body(fe1, "api.test"), "B");
    // The second frontend: exact name, wildcards at any depth, else the default.
    assert_eq!(get_body(fe2, "api.test"), "B");
    assert_eq!(get_body(fe2, "API.Test"), "B");
    assert_eq!(get_body(fe2, "x.web.test"), "C");
    assert_eq!(get_body(fe2, "a.b.web.test"), "C");
    assert_eq!(get_body(fe2, "web.test"), "D");
    assert_eq!(get_body(fe2, "localhost"), "D");
    let (_, body) = scrape(stats, "/metrics");
    for (backend, server) in [("a", a.addr()), ("b", b.addr()), ("default", d.addr())] {
        let series = format!("shuck_backend_up{{backend=\"{backend}\",server=\"{server}\"}}");
        assert_eq!(sample(&body, &series), 1.0, "{body}");
    }
    drop(shuck);
}

#[test]
fn an_unknown_name_is_refused_with_sni_nomatch_abort_and_the_log_names_the_route() {
    let (b, d) = (Origin::http("B"), Origin::http("D"));
    let dir = TempDir::new("routes-abort");
    let (cert, _) = rcgen_cert(&dir, "api", &["api.test"], false);
    let named = format!("name=b;server={}", b.addr());
    let shuck = Shuck::start(&[
        "--sni-nomatch-abort",
        "--log-connections",
        "-b",
        &d.addr(),
        "--named-backend",
        &named,
        "--route",
        "sni=api.test;backend=b",
        cert.to_str().unwrap(),
    ]);
    assert_eq!(get_body(shuck.addr(), "api.test"), "B");
    let refused = tls_connect(
        shuck.addr(),
        &ClientOpts {
            sni: Some("unknown.test".into()),
            ..ClientOpts::default()
        },
    );
    assert_eq!(
        alert_of(&refused),
        Some(rustls::AlertDescription::UnrecognisedName)
    );
    assert!(
        shuck.wait_log("route=\"sni\"", Duration::from_secs(5)),
        "{}",
        shuck.log()
    );
    let log = shuck.log();
    let line = log
        .lines()
        .find(|l| l.contains("connection closed"))
        .unwrap();
    assert!(
        line.contains("backend=b ") && line.contains("sni=\"api.test\""),
        "{line}"
    );
}

#[test]
fn a_route_to_a_backend_that_does_not_exist_names_its_line() {
    let dir = TempDir::new("routes-bad");
    let conf = dir.path("bad.conf");
    for (text, line, needle) in [
        (
            "pem-file = \"CERT\"\nbackend = { name = \"api\" server = \"[127.0.0.1]:1\" }\n\nroute = { sni = \"a.test\" backend = \"www\" }\n",
            4,
            "route to backend \"www\", which does not exist (backends: default, api)",
        ),
        (
            "pem-file = \"CERT\"\nfrontend = { port = \"1\" backend = \"nope\" }\n",
            2,
            "backend \"nope\" does not exist",
        ),
        (
            "pem-file = \"CERT\"\nbackend = {\n name = \"api\"\n}\n",
            2,
            "has no server",
        ),
        (
            "pem-file = \"CERT\"\nbackend = { name = \"a\" server = \"[127.0.0.1]:1\" }\nbackend = { name = \"a\" server = \"[127.0.0.1]:2\" }\n",
            3,
            "a second backend named \"a\"",
        ),
        (
            "pem-file = \"CERT\"\nroute = { host = \"a.test\" backend = \"default\" }\n",
            2,
            "needs --http",
        ),
        (
            "pem-file = \"CERT\"\n\nbackend = { name = \"s\" server = \"[127.0.0.1]:1\" tls = on ca-file = \"/nonexistent/ca.pem\" }\n",
            3,
            "/nonexistent/ca.pem",
        ),
        (
            "pem-file = \"CERT\"\nroute = {\n sni = \"a.test\"\n weight = 2\n}\n",
            4,
            "unknown key \"weight\" in a route block",
        ),
    ] {
        std::fs::write(&conf, text.replace("CERT", test_cert())).unwrap();
        let (code, out) = run_to_exit(&["--config", conf.to_str().unwrap(), "--test"]);
        assert_ne!(code, Some(0), "{text}: {out}");
        assert!(out.contains(&format!("bad.conf line {line}")), "{text}: {out}");
        assert!(out.contains(needle), "{text}: {out}");
    }
}

/// Two names on one certificate (as browsers coalesce), a third on its own.
fn routed_http(dir: &TempDir) -> (Shuck, H1Origin, H1Origin, H1Origin, u16) {
    let (api, stat, def) = (
        H1Origin::start(None),
        H1Origin::start(None),
        H1Origin::start(None),
    );
    let (both, _) = rcgen_cert(dir, "both", &["a.test", "b.test"], false);
    let (other, _) = rcgen_cert(dir, "other", &["c.test"], false);
    let stats = free_port();
    let stats_s = stats.to_string();
    let api_b = format!("name=api;server={};write-proxy-v1=on", api.spec);
    let stat_b = format!("name=static;server={}", stat.spec);
    let shuck = Shuck::start(&[
        "--http",
        "--alpn-protos",
        "h2,http/1.1",
        "--pem-file",
        other.to_str().unwrap(),
        "--pem-file",
        both.to_str().unwrap(),
        "-b",
        &def.spec,
        "--named-backend",
        &api_b,
        "--named-backend",
        &stat_b,
        "--route",
        "host=a.test;backend=api",
        "--route",
        "host=b.test;path-prefix=/assets/;backend=static",
        "--stats",
        &stats_s,
    ]);
    (shuck, api, stat, def, stats)
}

#[test]
fn http11_requests_of_one_connection_reach_their_backends() {
    let dir = TempDir::new("routes-h1");
    let (shuck, api, stat, def, stats) = routed_http(&dir);
    let opts = ClientOpts {
        sni: Some("a.test".into()),
        ..ClientOpts::default()
    };
    let c = tls_connect(shuck.addr(), &opts).unwrap();
    let mut r = BufReader::new(c);
    for (host, path) in [
        ("a.test", "/size/1"),
        ("b.test", "/assets/size/2"),
        ("b.test", "/size/3"),
        ("A.TEST:443", "/size/4"),
    ] {
        let req =
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n");
        r.get_mut().write_all(req.as_bytes()).unwrap();
        let (status, _) = read_answer(&mut r);
        assert!(status == 200 || status == 404, "{host}{path}: {status}");
    }
    let paths = |o: &H1Origin| {
        o.requests()
            .iter()
            .map(|s| s.path.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(paths(&api), ["/size/1", "/size/4"]);
    assert_eq!(paths(&stat), ["/assets/size/2"]);
    assert_eq!(paths(&def), ["/size/3"]);
    for o in [&api, &stat, &def] {
        for s in o.requests() {
            assert_eq!(s.all("x-forwarded-for"), ["127.0.0.1"], "{s:?}");
        }
    }
    // The api backend's own preamble, on its connections only.
    assert!(api
        .preambles
        .lock()
        .unwrap()
        .iter()
        .all(|p| p.starts_with("PROXY TCP4 127.0.0.1 ")));
    assert!(!api.preambles.lock().unwrap().is_empty());
    assert!(stat.preambles.lock().unwrap().iter().all(|p| p.is_empty()));

    // Pipelined requests for two backends, then the client's half-close: both answered.
    let mut c2 = tls_connect(shuck.addr(), &opts).unwrap();
    c2.write_all(
        b"GET /size/7 HTTP/1.1\r\nHost: a.test\r\n\r\nGET /assets/size/8 HTTP/1.1\r\nHost: b.test\r\n\r\n",
    )
    .unwrap();
    c2.conn.send_close_notify();
    c2.flush().unwrap();
    let mut r2 = BufReader::new(c2);
    assert_eq!(read_answer(&mut r2), (200, b"x".repeat(7)));
    let (status, body) = read_answer(&mut r2);
    assert_eq!(status, 200);
    assert_eq!(
        body, b"127.0.0.1",
        "the default answer is the X-Forwarded-For seen"
    );
    assert!(paths(&stat).contains(&"/assets/size/8".to_owned()));

    // A name the connection's certificate does not cover: 421, after the answer before it.
    r.get_mut()
        .write_all(
            b"GET /size/5 HTTP/1.1\r\nHost: a.test\r\n\r\nGET /x HTTP/1.1\r\nHost: c.test\r\n\r\n",
        )
        .unwrap();
    let (status, body) = read_answer(&mut r);
    assert_eq!((status, body.len()), (200, 5));
    let (status, _) = read_answer(&mut r);
    assert_eq!(status, 421);
    assert!(!paths(&def).contains(&"/x".to_owned()));
    let (_, m) = scrape(stats, "/metrics");
    assert!(
        sample(&m, "shuck_http_backend_switches_total") >= 3.0,
        "{m}"
    );
    assert_eq!(sample(&m, "shuck_http_misdirected_total"), 1.0, "{m}");
}

#[test]
fn h2_streams_of_one_connection_reach_their_backends() {
    let dir = TempDir::new("routes-h2");
    let (shuck, api, stat, def, stats) = routed_http(&dir);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cfg = client_config(&ClientOpts {
            alpn: vec![b"h2".to_vec()],
            sni: Some("a.test".into()),
            ..ClientOpts::default()
        });
        let tcp = tokio::net::TcpStream::connect(shuck.addr()).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(cfg)
            .connect(
                rustls::pki_types::ServerName::try_from("a.test").unwrap(),
                tcp,
            )
            .await
            .unwrap();
        let (send, conn) = h2::client::handshake(tls).await.unwrap();
        let driver = tokio::spawn(conn);
        let mut send = send.ready().await.unwrap();
        for (authority, path, want) in [
            ("a.test", "/size/1", 200),
            ("b.test", "/assets/size/2", 200),
            ("b.test", "/size/3", 200),
            ("c.test", "/size/4", 421),
            ("a.test", "/size/5", 200),
        ] {
            let req = http::Request::get(format!("https://{authority}{path}"))
                .body(())
                .unwrap();
            let (resp, _) = send.send_request(req, true).unwrap();
            let resp = resp.await.unwrap();
            assert_eq!(resp.status().as_u16(), want, "{authority}{path}");
            let _ = common::h2c::read_body(resp.into_body()).await;
            send = send.ready().await.unwrap();
        }
        drop(send);
        let _ = tokio::time::timeout(Duration::from_secs(2), driver).await;
    });
    let paths = |o: &H1Origin| {
        o.requests()
            .iter()
            .map(|s| s.path.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(paths(&api), ["/size/1", "/size/5"]);
    assert_eq!(paths(&stat), ["/assets/size/2"]);
    assert_eq!(paths(&def), ["/size/3"]);
    let (_, m) = scrape(stats, "/metrics");
    assert_eq!(sample(&m, "shuck_http_misdirected_total"), 1.0, "{m}");
}

#[test]
fn a_reload_changes_backends_and_routes_without_failing_a_connection() {
    let (a, b, c) = (Origin::http("A"), Origin::http("B"), Origin::http("C"));
    let e = Origin::http("E");
    let port = free_port();
    let dir = TempDir::new("routes-reload");
    let conf = dir.path("shuck.conf");
    let write = |default: &Origin, routes: &str| {
        std::fs::write(
            &conf,
            format!(
                "pem-file = \"{}\"\nfrontend = \"[127.0.0.1]:{port}\"\nbackend = \"{}\"\n{routes}",
                test_cert(),
                default.addr()
            ),
        )
        .unwrap()
    };
    write(&a, &format!(
        "backend = {{ name = \"b\" server = \"{}\" }}\nbackend = {{ name = \"c\" server = \"{}\" }}\nroute = {{ sni = \"b.test\" backend = \"b\" }}\nroute = {{ sni = \"c.test\" backend = \"c\" }}\n",
        b.addr(),
        c.addr()
    ));
    let shuck = Shuck::start_raw(&["--config", conf.to_str().unwrap()], port);
    assert_eq!(get_body(shuck.addr(), "b.test"), "B");
    assert_eq!(get_body(shuck.addr(), "c.test"), "C");
    assert_eq!(get_body(shuck.addr(), "new.test"), "A");

    // Clients keep coming while the reload happens: none of them may fail.
    let stop = Arc::new(AtomicBool::new(false));
    let (done, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let addr = shuck.addr();
    let load: Vec<_> = (0..2)
        .map(|i| {
            let (stop, done, failed) = (stop.clone(), done.clone(), failed.clone());
            thread::spawn(move || {
                let started = Instant::now();
                while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(20) {
                    let sni = if i == 0 { "b.test" } else { "other.test" };
                    let body = std::panic::catch_unwind(|| get_body(addr, sni)).unwrap_or_default();
                    if body == "B" || body == "A" || body == "E" {
                        done.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    // c removed, a route added for new.test to b, the default backend moved (-b's servers
    // follow a reload too).
    write(&e, &format!(
        "backend = {{ name = \"b\" server = \"{}\" }}\nroute = {{ sni = \"b.test\" backend = \"b\" }}\nroute = {{ sni = \"new.test\" backend = \"b\" }}\n",
        b.addr()
    ));
    shuck.signal("HUP");
    assert!(
        shuck.wait_log(
            "backends (default, b) and 2 route(s)",
            Duration::from_secs(10)
        ),
        "{}",
        shuck.log()
    );
    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.join().unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0, "{}", shuck.log());
    assert!(done.load(Ordering::Relaxed) > 10);
    assert_eq!(get_body(shuck.addr(), "new.test"), "B");
    assert_eq!(get_body(shuck.addr(), "c.test"), "E");
    assert!(
        !shuck.log().contains("restart shuck to apply"),
        "{}",
        shuck.log()
    );
}

/// Issue 45, point 9: a keep-alive client alternating Hosts between two backends that
/// close after each answer (HTTP/1.0 servers, as Python's http.server) gets every answer.
#[test]
fn alternating_hosts_before_closing_backends_get_every_answer() {
    // Answers one request as an HTTP/1.0 server does, then closes.
    let closing = |body: &'static str| {
        Origin::start(move |s| {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut w = s;
            if read_http_head(&mut r).is_none() {
                return;
            }
            let resp = format!(
                "HTTP/1.0 200 OK\r\nServer: SimpleHTTP/0.6\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = w.write_all(resp.as_bytes());
        })
    };
    let (a, b) = (closing("from a"), closing("from b"));
    let dir = TempDir::new("routes-alternate");
    let (both, _) = rcgen_cert(&dir, "both", &["a.test", "b.test"], false);
    let a_b = format!("name=a;server={}", a.addr());
    let b_b = format!("name=b;server={}", b.addr());
    let shuck = Shuck::start(&[
        "--http",
        "--pem-file",
        both.to_str().unwrap(),
        "-b",
        &a.addr(),
        "--named-backend",
        &a_b,
        "--named-backend",
        &b_b,
        "--route",
        "host=a.test;backend=a",
        "--route",
        "host=b.test;backend=b",
    ]);
    let opts = ClientOpts {
        sni: Some("a.test".into()),
        ..ClientOpts::default()
    };
    for run in 0..20 {
        let c = tls_connect(shuck.addr(), &opts).unwrap();
        let mut r = BufReader::new(c);
        for host in ["a.test", "b.test", "a.test", "b.test"] {
            let req = format!("GET /{run} HTTP/1.1\r\nHost: {host}\r\n\r\n");
            r.get_mut().write_all(req.as_bytes()).unwrap();
            let (status, body) = read_answer(&mut r);
            assert_eq!(status, 200, "run {run}, {host}");
            let want = format!("from {}", &host[..1]);
            assert_eq!(String::from_utf8(body).unwrap(), want, "run {run}");
        }
    }
}

/// Issue 60, point 12: `%2F` is no separator when routes match (`/admin%2Fx` is not under
/// `/admin/`, as HAProxy reads it); `--http-refuse-encoded-slashes` refuses such a path
/// (and `%5C`, `\`) with 400 over HTTP/1.1, HTTP/2 and HTTP/3, for a backend that would
/// decode it.
#[test]
fn encoded_slashes_are_refused_when_asked() {
    use common::shapes::{self, Conn, Fields, Verdict};
    let origin = H1Origin::start(None);
    let start = |extra: &[&str]| {
        let mut args = vec![
            "--http",
            "--quic",
            "-b",
            &origin.spec,
            "--named-backend=name=admin;server=127.0.0.1:1",
            "--route=host=localhost;path-prefix=/admin/;backend=admin",
        ];
        args.extend_from_slice(extra);
        Shuck::start(&args)
    };
    let status = |s: &Shuck, version: &str, path: &str| {
        sh_out(&format!(
            "curl -sk {version} --path-as-is -o /dev/null -w '%{{http_code}}' --resolve localhost:{p}:127.0.0.1 'https://localhost:{p}{path}'",
            p = s.port
        ))
    };
    let s = start(&[]);
    for v in ["--http1.1", "--http2"] {
        // Not the admin route: the default backend answers it.
        assert_eq!(status(&s, v, "/admin%2Fx"), "200", "{v}");
        assert_eq!(status(&s, v, "/admin/x"), "503", "{v}: the admin route");
    }
    drop(s);
    let s = start(&["--http-refuse-encoded-slashes"]);
    for v in ["--http1.1", "--http2"] {
        for p in ["/admin%2Fx", "/a%2fb", "/a%5Cb", "/a%5cb?q"] {
            assert_eq!(status(&s, v, p), "400", "{v} {p}\n{}", s.log());
        }
        assert_eq!(
            status(&s, v, "/plain?x=%2F"),
            "200",
            "{v}: a query may hold one"
        );
    }
    let conn = Conn::sni("localhost");
    let req = Fields::request("GET", "localhost", "/admin%2Fx", &[]);
    // The shapes client reads a 400 as its Refused.
    let refused = |v: &Verdict| matches!(v, Verdict::Status(400) | Verdict::Refused);
    let got = shapes::h2(s.addr(), &conn, &req);
    assert!(refused(&got), "{got:?}");
    let raw = Fields::request("GET", "localhost", "/a\\b", &[]);
    let got = shapes::h2(s.addr(), &conn, &raw);
    assert!(refused(&got), "{got:?}");
    if common::h3::aioquic() {
        let got = shapes::h3(s.port, &conn, std::slice::from_ref(&req));
        assert!(refused(&got[0]), "{got:?}");
    }
    let (code, out) = run_to_exit(&["--http-refuse-encoded-slashes=maybe", "--test"]);
    assert_ne!(code, Some(0));
    assert!(out.contains("--http-refuse-encoded-slashes"), "{out}");
}
