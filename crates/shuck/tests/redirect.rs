//! The plain-HTTP listener (`--redirect-listen`, issue 61 point 1): every request
//! redirected to https (308, or `--redirect-code`), one connection carrying several, the
//! Location built from one usable Host only (400 otherwise), `--redirect-port`, the code
//! and the addresses following a reload, the client's rules and limits held there, and a real browser sent
//! from http:// to the HTTPS page, which then keeps to https by its HSTS.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::h1origin::H1Origin;
use common::*;

/// Sends `request` on a new connection to `port` and reads until the server closes.
fn exchange(port: u16, request: &str) -> String {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

/// Each answer's status line and Location in `text`.
fn answers(text: &str) -> Vec<(String, Option<String>)> {
    text.split("\r\n\r\n")
        .filter(|h| h.starts_with("HTTP/"))
        .map(|h| {
            let mut lines = h.split("\r\n");
            let status = lines.next().unwrap_or("").to_owned();
            let location = lines
                .find_map(|l| l.strip_prefix("Location: "))
                .map(str::to_owned);
            (status, location)
        })
        .collect()
}

/// shuck in `--http` mode with its configuration file `conf` (a frontend on a fresh port
/// and a plain listener on another added), and the plain port.
fn start(dir: &TempDir, origin: &H1Origin, conf: &str) -> (Shuck, u16, std::path::PathBuf) {
    let (port, plain) = (free_port(), free_port());
    let path = dir.path("shuck.conf");
    let text = format!(
        "http = on\nfrontend = \"[127.0.0.1]:{port}\"\npem-file = \"{}\"\nbackend = \"{}\"\nredirect-listen = \"127.0.0.1:{plain}\"\n{conf}",
        test_cert(),
        origin.spec
    );
    std::fs::write(&path, text).unwrap();
    let shuck = Shuck::start_raw(&["--config", path.to_str().unwrap()], port);
    wait_listening(plain, "the plain listener");
    (shuck, plain, path)
}

#[test]
fn every_request_is_redirected_to_https_and_a_bad_host_is_400() {
    let origin = H1Origin::start(None);
    let dir = TempDir::new("redirect");
    let (shuck, plain, path) = start(&dir, &origin, "redirect-port = 8443\n");

    // Two requests on one connection (keep-alive), the second ending it.
    let got = exchange(
        plain,
        "GET /a/b?c=d HTTP/1.1\r\nHost: www.example.test\r\n\r\n\
         HEAD /e HTTP/1.1\r\nHost: WWW.example.test:80\r\nConnection: close\r\n\r\n",
    );
    let a = answers(&got);
    assert_eq!(a.len(), 2, "{got}");
    assert_eq!(a[0].0, "HTTP/1.1 308 Permanent Redirect", "{got}");
    assert_eq!(
        a[0].1.as_deref(),
        Some("https://www.example.test:8443/a/b?c=d")
    );
    assert_eq!(a[1].1.as_deref(), Some("https://www.example.test:8443/e"));
    // An address for a host; the target's own authority in absolute form.
    let got = exchange(
        plain,
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(
        answers(&got)[0].1.as_deref(),
        Some("https://127.0.0.1:8443/")
    );
    let got = exchange(
        plain,
        "GET http://abs.test/p HTTP/1.1\r\nHost: abs.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(
        answers(&got)[0].1.as_deref(),
        Some("https://abs.test:8443/p")
    );
    // No usable Host: nothing to redirect to.
    for bad in [
        "GET / HTTP/1.0\r\n\r\n",
        "GET / HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: evil.test/x\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a@evil.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: \r\n\r\n",
        "GET x HTTP/1.1\r\nHost: a.test\r\n\r\n",
        "garbage\r\n\r\n",
    ] {
        let got = exchange(plain, bad);
        assert!(got.starts_with("HTTP/1.1 400 "), "{bad:?}: {got}");
    }
    // A body is not read: the answer ends the connection.
    let got = exchange(
        plain,
        "POST /f HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
    );
    assert_eq!(answers(&got).len(), 1, "{got}");
    assert!(got.contains("Connection: close"), "{got}");

    // curl follows it to the frontend (which is on no 8443: the code changes on reload
    // with the port taken out).
    let conf = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        conf.replace(
            "redirect-port = 8443\n",
            &format!("redirect-port = {}\nredirect-code = 301\n", shuck.port),
        ),
    )
    .unwrap();
    shuck.signal("HUP");
    assert!(
        wait_until(Duration::from_secs(10), || {
            let got = exchange(
                plain,
                "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            );
            got.starts_with("HTTP/1.1 301 ")
        }),
        "the code follows a reload: {}",
        shuck.log()
    );
    let out = Command::new("curl")
        .args([
            "-skL",
            "--max-time",
            "10",
            "-w",
            "\n%{url_effective} %{num_redirects}",
        ])
        .arg(format!("http://localhost:{plain}/size/5"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.ends_with(&format!("https://localhost:{}/size/5 1", shuck.port)),
        "{out}"
    );
}

/// A connection carries 1000 requests, and its last answer says so (`Connection: close`),
/// so that a client opens another instead of meeting a bare close.
#[test]
fn the_thousandth_answer_of_a_connection_says_it_closes() {
    let dir = TempDir::new("redirect-keepalive");
    let origin = H1Origin::start(None);
    let (_shuck, plain, _) = start(&dir, &origin, "");
    let request = "GET /k HTTP/1.1\r\nHost: a.example\r\n\r\n".repeat(1001);
    let got = exchange(plain, &request);
    let heads: Vec<&str> = got
        .split("\r\n\r\n")
        .filter(|h| h.starts_with("HTTP/"))
        .collect();
    assert_eq!(
        heads.len(),
        1000,
        "{}",
        &got[got.len().saturating_sub(300)..]
    );
    assert!(heads.iter().all(|h| h.starts_with("HTTP/1.1 308 ")));
    let closing = heads
        .iter()
        .filter(|h| h.contains("\r\nConnection: close"))
        .count();
    assert_eq!(closing, 1);
    assert!(
        heads[999].contains("\r\nConnection: close"),
        "{}",
        heads[999]
    );
}

#[test]
fn the_clients_rules_and_limits_hold_on_the_plain_listener() {
    let origin = H1Origin::start(None);
    let dir = TempDir::new("redirect-limits");
    let (_shuck, plain, _) = start(
        &dir,
        &origin,
        "client-max-conns = 1\nclient-deny = \"127.0.0.2/32\"\n",
    );
    let ask = "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n";
    // One connection held open, answered, kept alive: the next is refused unanswered.
    // (The first tries may meet wait_listening's probe, not yet counted out.)
    let mut held = None;
    assert!(wait_until(Duration::from_secs(5), || {
        let mut c = TcpStream::connect(("127.0.0.1", plain)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = c.write_all(ask.as_bytes());
        let mut buf = [0u8; 512];
        let n = c.read(&mut buf).unwrap_or(0);
        let ok = buf[..n].starts_with(b"HTTP/1.1 308");
        if ok {
            held = Some(c);
        }
        ok
    }));
    let refused = exchange(plain, ask);
    assert!(
        refused.is_empty(),
        "a second connection over the limit: {refused}"
    );
    drop(held);
    assert!(wait_until(Duration::from_secs(5), || exchange(
        plain,
        "GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
    )
    .starts_with("HTTP/1.1 308")));
    // A denied source is never answered.
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(
        &"127.0.0.2:0"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    )
    .unwrap();
    s.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], plain)).into())
        .unwrap();
    let mut denied: TcpStream = s.into();
    denied
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = denied.write_all(ask.as_bytes());
    let mut got = Vec::new();
    let _ = denied.read_to_end(&mut got);
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
}

/// Reads one answer (its head, and a body as long as it declares) from `c`.
fn one_answer(c: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                return text;
            }
        }
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&got).into_owned(),
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// A reload moves the plain listener: the new address is bound and answers, the old one
/// accepts no more while a connection open on it goes on being answered; an address that
/// cannot be bound is logged and the others go on.
#[test]
fn the_listen_addresses_follow_a_reload() {
    let origin = H1Origin::start(None);
    let dir = TempDir::new("redirect-reload");
    let (shuck, old, path) = start(&dir, &origin, "");
    let ask = "GET /moved HTTP/1.1\r\nHost: a.test\r\n\r\n";
    let mut live = TcpStream::connect(("127.0.0.1", old)).unwrap();
    live.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    live.write_all(ask.as_bytes()).unwrap();
    assert!(one_answer(&mut live).starts_with("HTTP/1.1 308 "));

    // One address the test holds, so that binding it fails.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let new = free_port();
    let conf = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        conf.replace(
            &format!("redirect-listen = \"127.0.0.1:{old}\"\n"),
            &format!(
                "redirect-listen = \"127.0.0.1:{new}\"\nredirect-listen = \"127.0.0.1:{taken_port}\"\n"
            ),
        ),
    )
    .unwrap();
    shuck.signal("HUP");
    assert!(
        shuck.wait_log("SIGHUP: configuration reloaded", Duration::from_secs(10)),
        "{}",
        shuck.log()
    );
    wait_listening(new, "the plain listener added by the reload");
    let got = exchange(
        new,
        "GET /x?y HTTP/1.1\r\nHost: b.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(
        answers(&got)[0].1.as_deref(),
        Some("https://b.test/x?y"),
        "{got}"
    );
    assert!(
        shuck.log().contains(&format!(
            "--redirect-listen/--acme-http-listen 127.0.0.1:{taken_port}: cannot listen"
        )),
        "{}",
        shuck.log()
    );
    // The old address is closed to new connections (the worker's accept loop gone
    // and the master's copy closed)...
    assert!(
        wait_until(Duration::from_secs(10), || TcpStream::connect((
            "127.0.0.1",
            old
        ))
        .is_err()),
        "the address the reload dropped still accepts"
    );
    // ...while the connection open on it is still answered.
    live.write_all(ask.as_bytes()).unwrap();
    let again = one_answer(&mut live);
    assert!(again.starts_with("HTTP/1.1 308 "), "{again}");
    drop(taken);
}

/// `--access-log` has a line for each plain-HTTP request, as nginx's port-80 server
/// writes one: the redirect, a request without a usable Host, one over its rate.
#[test]
fn each_plain_request_has_its_access_log_line() {
    let origin = H1Origin::start(None);
    let dir = TempDir::new("redirect-log");
    let log = dir.path("access.log");
    let conf = format!(
        "access-log = \"{}\"\naccess-log-format = \"json\"\nclient-request-rate = \"1/m,burst=2\"\n",
        log.display()
    );
    let (_shuck, plain, _) = start(&dir, &origin, &conf);
    let got = exchange(
        plain,
        "GET /logged?q=1 HTTP/1.1\r\nHost: a.test\r\nUser-Agent: tester/1\r\nReferer: http://r.test/\r\n\r\n\
         GET / HTTP/1.1\r\n\r\n",
    );
    assert_eq!(answers(&got).len(), 2, "{got}");
    let line = log_line(&log, |v| v["request_uri"] == "/logged?q=1")
        .unwrap_or_else(|| panic!("no line: {:?}", std::fs::read_to_string(&log)));
    assert_eq!(line["status"], 308, "{line}");
    assert_eq!(line["host"], "a.test", "{line}");
    assert_eq!(line["request_method"], "GET", "{line}");
    assert_eq!(line["http_user_agent"], "tester/1", "{line}");
    assert_eq!(line["http_referer"], "http://r.test/", "{line}");
    assert_eq!(line["remote_addr"], "127.0.0.1", "{line}");
    assert_eq!(
        line["frontend"],
        format!("http://127.0.0.1:{plain}"),
        "{line}"
    );
    assert_eq!(line["server_protocol"], "HTTP/1.1", "{line}");
    assert!(line["body_bytes_sent"].as_u64().is_some(), "{line}");
    let bad = log_line(&log, |v| v["status"] == 400).expect("the 400's line");
    assert_eq!(bad["request_uri"], "/", "{bad}");
    assert_eq!(bad["cause"], "bad_request", "{bad}");
    // The rate (two in a minute, and wait_listening's probe made none): the third is 429.
    let third = exchange(
        plain,
        "GET /over HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
    );
    assert!(third.starts_with("HTTP/1.1 429 "), "{third}");
    let over = log_line(&log, |v| v["request_uri"] == "/over").expect("the 429's line");
    assert_eq!(over["status"], 429, "{over}");
    assert_eq!(over["cause"], "refused", "{over}");
}

#[test]
fn redirect_flags_are_checked() {
    for (args, needle) in [
        (&["--redirect-code", "200"][..], "is not a redirect code"),
        (&["--redirect-code", "302"][..], "no plain HTTP listener"),
        (&["--redirect-port", "0"][..], "--redirect-port"),
        (&["--redirect-listen", "nowhere"][..], "--redirect-listen"),
        (
            &[
                "--redirect-listen",
                "127.0.0.1:1080",
                "--redirect-listen",
                "127.0.0.1:1080",
            ][..],
            "given twice",
        ),
    ] {
        let (code, out) = run_to_exit(args);
        assert_ne!(code, Some(0), "{args:?}");
        assert!(out.contains(needle), "{args:?}: {out}");
    }
}

/// Chromium (headless) opens `http://hsts.test:PLAIN/`: the plain listener sends it to the
/// HTTPS frontend, whose page (nginx's, through shuck over HTTP/2) carries shuck's HSTS.
/// The same profile then asks for `http://hsts.test:PORT/second.html`, the frontend's own
/// port in plain HTTP, which only the HSTS it noted makes Chromium ask in https: a fresh
/// profile cannot load it.
#[test]
fn a_browser_is_redirected_then_keeps_to_https_by_hsts() {
    if !require("chromium", "chromium")
        || !require("nginx", "nginx")
        || !require("openssl", "openssl")
    {
        return;
    }
    let dir = TempDir::new("redirect-browser");
    let www = dir.path("www");
    std::fs::create_dir_all(&www).unwrap();
    let (port, plain, stats) = (free_port(), free_port(), free_port());
    std::fs::write(
        www.join("index.html"),
        "<!doctype html><title>first</title><p id=first>first</p>\n",
    )
    .unwrap();
    std::fs::write(
        www.join("second.html"),
        "<!doctype html><title>second</title><p id=second>second</p>\n\
         <script>document.write('<p id=proto>' + location.protocol + '</p>')</script>\n",
    )
    .unwrap();
    let (_nginx, nginx_port) = static_nginx(&dir, &www);
    // A certificate for the name: HSTS is noted for names, never for addresses.
    let (pem, _) = openssl_cert(&dir, "hsts", Key::EcP256, &["hsts.test"]);
    let pem = pem.to_str().unwrap().to_owned();
    let backend = format!("[127.0.0.1]:{nginx_port}");
    let (listen, redirect_port) = (format!("127.0.0.1:{plain}"), port.to_string());
    let (stats_arg, frontend) = (format!("127.0.0.1:{stats}"), format!("[127.0.0.1]:{port}"));
    let shuck = Shuck::start_raw(
        &[
            "--http",
            "-b",
            &backend,
            "--redirect-listen",
            &listen,
            "--redirect-port",
            &redirect_port,
            "--hsts",
            "max-age=600",
            "--stats",
            &stats_arg,
            "-f",
            &frontend,
            &pem,
        ],
        port,
    );
    wait_listening(plain, "the plain listener");

    let pin = spki_pin(&pem);
    let browse = |profile: &str, url: String| {
        let out = Command::new("timeout")
            .arg("60")
            .arg("chromium")
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--host-resolver-rules=MAP hsts.test 127.0.0.1",
                &format!("--ignore-certificate-errors-spki-list={pin}"),
                &format!("--user-data-dir={}", dir.path(profile).display()),
                "--virtual-time-budget=5000",
                "--dump-dom",
                &url,
            ])
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            format!("{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr)),
        )
    };
    let (dom, why) = browse("profile", format!("http://hsts.test:{plain}/index.html"));
    assert!(
        dom.contains("<p id=\"first\">first</p>"),
        "the redirect to the page: {dom}\n{why}\n{}",
        shuck.log()
    );
    let second = format!("http://hsts.test:{port}/second.html");
    let (dom, why) = browse("profile", second.clone());
    assert!(
        dom.contains("<p id=\"second\">second</p>") && dom.contains("<p id=\"proto\">https:</p>"),
        "HSTS sends the second page to https: {dom}\n{why}"
    );
    // Without the HSTS noted, the same address is plain HTTP to a TLS port.
    let (dom, _) = browse("fresh", second);
    assert!(!dom.contains("id=\"second\""), "{dom}");

    // One redirect by the listener; the pages came over HTTP/2 through the frontend.
    let (_, body) = scrape(stats, "/metrics");
    assert_eq!(
        sample(&body, "shuck_redirect_answers_total{kind=\"redirect\"}"),
        1.0,
        "{body}"
    );
    assert!(sample(&body, "shuck_http_requests_total{protocol=\"h2\"}") >= 2.0);
    let log = std::fs::read_to_string(dir.path("access.log")).unwrap();
    assert!(
        log.contains("GET /index.html") && log.contains("GET /second.html"),
        "{log}"
    );
}
