//! The edge's HTTP policy (issue 61): header rules on requests and answers, HSTS, body
//! limits, the same over HTTP/1.1 (curl), HTTP/2 (curl) and HTTP/3 (aioquic), on the
//! backend's answers and shuck's own, with the most specific level winning; a rule that
//! could not be written refused at load and at reload.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::h1origin::H1Origin;
use common::shapes::{self, Conn, Fields, Verdict};
use common::*;
use serde_json::json;

const HSTS: &str = "max-age=63072000; includeSubDomains";

/// shuck with `--http --quic` on a fresh port, the rest of its configuration file `conf`.
fn gateway(dir: &TempDir, conf: &str) -> (Shuck, std::path::PathBuf) {
    let port = free_port();
    let path = dir.path("shuck.conf");
    let head = format!("http = on\nquic = on\nfrontend = \"[127.0.0.1]:{port}\"\n");
    std::fs::write(&path, head + conf).unwrap();
    (
        Shuck::start_raw(&["--config", path.to_str().unwrap()], port),
        path,
    )
}

/// An answer's head as the client got it: its status and fields, names lowercase.
#[derive(Debug)]
struct Head {
    status: u16,
    fields: Vec<(String, String)>,
    /// What the client reported, for a failure's message (read through `Debug`).
    #[allow(dead_code)]
    raw: String,
}

impl Head {
    fn all(&self, name: &str) -> Vec<&str> {
        (self.fields.iter())
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// curl's answer to `path` with `Host: host` over `version` (`--http1.1`, `--http2`).
fn curl(port: u16, version: &str, host: &str, path: &str, extra: &[&str]) -> Head {
    let out = Command::new("curl")
        .args([
            "-sk",
            version,
            "--max-time",
            "10",
            "-D",
            "-",
            "-o",
            "/dev/null",
        ])
        .args(["--connect-to", &format!("{host}:{port}:127.0.0.1:{port}")])
        .args(extra)
        .arg(format!("https://{host}:{port}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // The last head (a 100 Continue's comes first).
    let head = text.trim_end().rsplit("\r\n\r\n").next().unwrap_or("");
    let mut lines = head.lines();
    let status = (lines.next().unwrap_or("").split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let fields = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Head {
        status,
        fields,
        raw: text,
    }
}

/// aioquic's answer to `path` at `authority`.
fn h3(port: u16, authority: &str, path: &str, extra: &[(&str, &str)]) -> Head {
    let mut fields = vec![
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", authority),
        (":path", path),
    ];
    // HTTP/3 field names are lowercase (RFC 9114 §4.2).
    let extra: Vec<(String, &str)> = extra
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), *v))
        .collect();
    fields.extend(extra.iter().map(|(n, v)| (n.as_str(), *v)));
    let req = json!([[{"raw_headers": fields, "timeout": 5}]]);
    let report = common::h3::h3(port, req, &["--sni", "localhost", "--deadline", "30"]);
    let a = &report["requests"][0];
    let status = a["status"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let fields = (a["headers"].as_array().into_iter().flatten())
        .filter_map(|h| Some((h[0].as_str()?.to_owned(), h[1].as_str()?.to_owned())))
        .collect();
    Head {
        status,
        fields,
        raw: report.to_string(),
    }
}

/// The three versions' answers to the same request.
fn every_version(port: u16, host: &str, path: &str, header: Option<(&str, &str)>) -> Vec<Head> {
    let curl_extra: Vec<String> = header
        .map(|(n, v)| vec!["-H".to_owned(), format!("{n}: {v}")])
        .unwrap_or_default();
    let curl_extra: Vec<&str> = curl_extra.iter().map(String::as_str).collect();
    let authority = format!("{host}:{port}");
    vec![
        curl(port, "--http1.1", host, path, &curl_extra),
        curl(port, "--http2", host, path, &curl_extra),
        h3(port, &authority, path, header.as_slice()),
    ]
}

const VERSIONS: [&str; 3] = ["HTTP/1.1", "HTTP/2", "HTTP/3"];

/// Global rules and HSTS on the backend's answers and shuck's own (503 from a backend
/// that refuses connections, 421 for a name the certificate lacks), request rules on what
/// the backend gets, and a route's own rules replacing the global ones (nginx's
/// inheritance), over HTTP/1.1, HTTP/2 and HTTP/3 alike.
#[test]
fn header_rules_and_hsts_over_every_version() {
    if !require("curl", "curl") || !common::h3::aioquic() {
        return;
    }
    let dir = TempDir::new("edge-headers");
    let (pem, _) = rcgen_cert(
        &dir,
        "site",
        &["localhost", "api.localhost", "down.localhost"],
        false,
    );
    let (other, _) = rcgen_cert(&dir, "other", &["other.test"], false);
    let origin = H1Origin::start(None);
    let api = H1Origin::start(None);
    let dead = free_port(); // nothing listens there: shuck's own 503
    let conf = format!(
        "pem-file = \"{other}\"\npem-file = \"{pem}\"\n\
         backend = \"127.0.0.1:{o}\"\n\
         hsts = \"{HSTS}\"\n\
         response-header = \"X-Frame-Options: DENY\"\n\
         response-header = \"-Server\"\n\
         response-header = \"+Via: 1.1 shuck\"\n\
         response-header = \"?X-Kept: ours\"\n\
         response-header = \"Cache-Control: no-store; private\"\n\
         request-header = \"X-Env: prod\"\n\
         request-header = \"-X-Debug\"\n\
         request-header = \"?X-Trace: fresh\"\n\
         backend = {{\n name = \"api\"\n server = \"127.0.0.1:{a}\"\n}}\n\
         backend = {{\n name = \"down\"\n server = \"127.0.0.1:{dead}\"\n}}\n\
         route = {{\n host = \"api.localhost\"\n backend = \"api\"\n response-header = \"X-Route: api\"\n request-header = \"X-Env: api\"\n}}\n\
         route = {{ host = \"down.localhost\" backend = \"down\" }}\n",
        pem = shapes::s(&pem),
        o = origin.port,
        a = api.port,
        other = shapes::s(&other),
    );
    let (shuck, _) = gateway(&dir, &conf);
    let port = shuck.port;

    // The backend's answer: set, deleted, added, kept (its own ?-field), HSTS.
    let forged = Some(("X-Env", "forged"));
    for (v, h) in VERSIONS
        .iter()
        .zip(every_version(port, "localhost", "/branded", forged))
    {
        assert_eq!(h.status, 200, "{v}: {h:?}");
        assert_eq!(h.all("strict-transport-security"), [HSTS], "{v}: {h:?}");
        assert_eq!(h.all("x-frame-options"), ["DENY"], "{v}: {h:?}");
        assert!(h.all("server").is_empty(), "{v}: {h:?}");
        assert_eq!(h.all("via"), ["1.1 shuck"], "{v}: {h:?}");
        assert_eq!(h.all("x-kept"), ["theirs"], "{v}: {h:?}");
        assert_eq!(h.all("cache-control"), ["no-store; private"], "{v}: {h:?}");
    }
    // No SNI and an address for a Host (curl sends none for an IP): the connection's,
    // here the global, rules all the same.
    for (v, h) in VERSIONS
        .iter()
        .zip(every_version(port, "127.0.0.1", "/branded", None))
    {
        assert_eq!(h.status, 200, "{v}: {h:?}");
        assert_eq!(h.all("x-frame-options"), ["DENY"], "{v}: {h:?}");
        assert_eq!(h.all("strict-transport-security"), [HSTS], "{v}: {h:?}");
    }
    // What the backend got: X-Env set (the client's dropped), X-Debug gone, X-Trace the
    // client's when it sent one, ours when not.
    for (n, v) in [("X-Debug", "1"), ("X-Trace", "mine")] {
        for h in every_version(port, "localhost", "/seen", Some((n, v))) {
            assert_eq!(h.status, 200);
        }
    }
    let seen = origin.requests();
    assert_eq!(seen.len(), 12, "{seen:?}");
    for s in &seen {
        assert!(s.header("x-debug").is_none(), "{s:?}");
        assert!(s.all("x-env") == ["prod"], "{s:?}");
    }
    let traces: Vec<Vec<&str>> = seen.iter().map(|s| s.all("x-trace")).collect();
    assert_eq!(
        traces.iter().filter(|t| *t == &["mine"]).count(),
        3,
        "{traces:?}"
    );
    assert_eq!(
        traces.iter().filter(|t| *t == &["fresh"]).count(),
        9,
        "{traces:?}"
    );

    // A route's own rules replace the global ones of their direction; HSTS stays.
    for (v, h) in VERSIONS
        .iter()
        .zip(every_version(port, "api.localhost", "/branded", None))
    {
        assert_eq!(h.status, 200, "{v}: {h:?}");
        assert_eq!(h.all("x-route"), ["api"], "{v}: {h:?}");
        assert_eq!(h.all("x-frame-options"), ["SAMEORIGIN"], "{v}: {h:?}");
        assert_eq!(h.all("server"), ["origin/1.0"], "{v}: {h:?}");
        assert_eq!(h.all("strict-transport-security"), [HSTS], "{v}: {h:?}");
    }
    assert!(api.requests().iter().all(|s| s.all("x-env") == ["api"]));

    // shuck's own answers get the rules too: a backend that refuses (503) and a name the
    // certificate that served the connection lacks (421: `Host: other.test` where the SNI
    // was localhost).
    let misdirected = || {
        let host = ["-H", "Host: other.test"];
        vec![
            curl(port, "--http1.1", "localhost", "/", &host),
            curl(port, "--http2", "localhost", "/", &host),
            h3(port, "other.test", "/", &[]),
        ]
    };
    for (host, want) in [("down.localhost", [503; 3]), ("other.test", [421; 3])] {
        let answers = if host == "other.test" {
            misdirected()
        } else {
            every_version(port, host, "/", None)
        };
        for ((v, h), want) in VERSIONS.iter().zip(answers).zip(want) {
            assert_eq!(h.status, want, "{v} {host}: {h:?}");
            assert_eq!(
                h.all("strict-transport-security"),
                [HSTS],
                "{v} {host}: {h:?}"
            );
            assert_eq!(h.all("x-frame-options"), ["DENY"], "{v} {host}: {h:?}");
        }
    }
}

/// A rule that frames the message, names a forwarding field shuck owns, or holds CR, LF
/// or NUL is refused with its reason, on the command line and in a file (with its line);
/// at a reload the old rules stay.
#[test]
fn a_rule_that_could_not_be_written_is_refused_at_load_and_at_reload() {
    if !require("curl", "curl") || !common::h3::aioquic() {
        return;
    }
    for (flag, rule, says) in [
        ("--response-header", "X-A: a\r\nX-B: b", "control bytes"),
        (
            "--response-header",
            "Content-Length: 5",
            "frames the message",
        ),
        (
            "--request-header",
            "X-Forwarded-For: 1.2.3.4",
            "shuck writes X-Forwarded-For",
        ),
        ("--request-header", ":path: /admin", "not a field name"),
        ("--hsts", "includeSubDomains", "max-age=N is needed"),
        ("--max-body-bytes", "ten", "expected bytes"),
    ] {
        let (code, err) = run_to_exit(&["--http", "-b", "127.0.0.1:9", flag, rule]);
        assert_eq!(code, Some(1), "{flag} {rule:?}: {err}");
        assert!(err.contains(says), "{flag} {rule:?}: {err}");
    }
    let (code, err) = run_to_exit(&["-b", "127.0.0.1:9", "--hsts", "max-age=5"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("needs --http"), "{err}");

    let dir = TempDir::new("edge-reload");
    let (pem, _) = rcgen_cert(&dir, "site", &["localhost"], false);
    let origin = H1Origin::start(None);
    let good = format!(
        "backend = \"127.0.0.1:{}\"\nresponse-header = \"X-Rule: one\"\npem-file = \"{}\"\n",
        origin.port,
        shapes::s(&pem),
    );
    let (shuck, path) = gateway(&dir, &good);
    let port = shuck.port;
    let first = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        curl(port, "--http2", "localhost", "/", &[]).all("x-rule"),
        ["one"]
    );
    // In a file (a string's \n is a line feed): refused, its line named, the old rules kept.
    let bad_rule = first.replace("X-Rule: one", "X-Rule: two\\nX-Evil: 1");
    std::fs::write(&path, &bad_rule).unwrap();
    shuck.signal("HUP");
    assert!(
        shuck.wait_log("control bytes", Duration::from_secs(5)),
        "{}",
        shuck.log()
    );
    assert!(shuck.log().contains("line 5"), "{}", shuck.log());
    for h in every_version(port, "localhost", "/", None) {
        assert_eq!(h.all("x-rule"), ["one"], "{h:?}");
    }
    // A good reload changes them without a restart.
    std::fs::write(&path, first.replace("X-Rule: one", "X-Rule: two")).unwrap();
    shuck.signal("HUP");
    assert!(wait_until(Duration::from_secs(5), || {
        curl(port, "--http1.1", "localhost", "/", &[]).all("x-rule") == ["two"]
    }));
    for h in every_version(port, "localhost", "/", None) {
        assert_eq!(h.all("x-rule"), ["two"], "{h:?}");
    }
}

/// A body one byte over its limit, declared or not, over each version: 413, and nothing
/// of it (declared) or not all of it (undeclared) reaches the backend; at the limit it
/// passes. A route's own limit wins over the global one.
#[test]
fn a_body_one_byte_over_its_limit_is_refused_over_every_version() {
    if !common::h3::aioquic() {
        return;
    }
    let dir = TempDir::new("edge-body");
    let (pem, _) = rcgen_cert(&dir, "site", &["localhost", "small.localhost"], false);
    let origin = H1Origin::start(None);
    let conf = format!(
        "pem-file = \"{pem}\"\nbackend = \"127.0.0.1:{o}\"\n\
         max-body-bytes = 100\n\
         backend = {{\n name = \"small\"\n server = \"127.0.0.1:{o}\"\n}}\n\
         route = {{ host = \"small.localhost\" backend = \"small\" max-body-bytes = 10 }}\n",
        pem = shapes::s(&pem),
        o = origin.port,
    );
    let (shuck, _) = gateway(&dir, &conf);
    let (port, addr) = (shuck.port, shuck.addr());
    let conn = Conn::sni("localhost");
    let body = |n: usize| vec![b'x'; n];
    for (host, limit) in [("localhost", 100), ("small.localhost", 10)] {
        let authority = format!("{host}:{port}");
        for (n, want) in [(limit, 200), (limit + 1, 413)] {
            // Declared.
            let h1 = format!(
                "POST /sum HTTP/1.1\r\nHost: {authority}\r\nContent-Length: {n}\r\n\r\n{}",
                String::from_utf8(body(n)).unwrap()
            );
            let len = n.to_string();
            let declared = Fields::request("POST", &authority, "/sum", &[("content-length", &len)])
                .with_body(&body(n));
            let undeclared = Fields::request("POST", &authority, "/sum", &[]).with_body(&body(n));
            let chunked = format!(
                "POST /sum HTTP/1.1\r\nHost: {authority}\r\nTransfer-Encoding: chunked\r\n\r\n{n:x}\r\n{}\r\n0\r\n\r\n",
                String::from_utf8(body(n)).unwrap()
            );
            let verdicts = [
                ("h1 declared", shapes::h1(addr, &conn, h1.as_bytes())),
                ("h1 chunked", shapes::h1(addr, &conn, chunked.as_bytes())),
                ("h2 declared", shapes::h2(addr, &conn, &declared)),
                ("h2 undeclared", shapes::h2(addr, &conn, &undeclared)),
            ]
            .into_iter()
            .chain(["h3 declared", "h3 undeclared"].into_iter().zip(shapes::h3(
                port,
                &conn,
                &[declared.clone(), undeclared.clone()],
            )));
            for (what, v) in verdicts {
                assert_eq!(v, Verdict::Status(want), "{what}, {n} bytes to {host}");
            }
        }
    }
    // Nothing over a limit was taken whole by the backend: every body it read is within.
    let seen = origin.requests();
    assert!(
        seen.iter().all(|s| s.body_len <= 100),
        "{:?}",
        seen.iter().map(|s| s.body_len).collect::<Vec<_>>()
    );
    // The six at each limit passed whole (two hosts), and no declared one over it came.
    let whole = |n| seen.iter().filter(|s| s.body_len == n).count();
    assert_eq!((whole(100), whole(10)), (6, 6), "{seen:?}");
}

/// HTTP/1.1 requests served through the core (to a `proto = h2` backend, nghttpd): the
/// route the rewriter chose gives their answer rules and body limit, each rule applied
/// once, as for HTTP/2's and HTTP/3's requests to the same route.
#[test]
fn http1_requests_through_the_core_keep_their_routes_policy() {
    if !require("curl", "curl") || !common::h3::aioquic() {
        return;
    }
    let dir = TempDir::new("edge-h1-core");
    let Some((_nghttpd, h2c)) = nghttpd(&dir) else {
        return;
    };
    std::fs::write(dir.path("index.html"), "hello\n").unwrap();
    let (pem, _) = rcgen_cert(&dir, "site", &["localhost", "a.localhost"], false);
    let conf = format!(
        "pem-file = \"{pem}\"\n\
         backend = \"{h2c}\"\n\
         response-header = \"X-Frame-Options: DENY\"\n\
         backend = {{\n name = \"h\"\n server = \"{h2c}\"\n proto = \"h2\"\n}}\n\
         route = {{\n host = \"a.localhost\"\n backend = \"h\"\n response-header = \"+Via: route-a\"\n max-body-bytes = 10\n}}\n",
        pem = shapes::s(&pem),
    );
    let (shuck, _) = gateway(&dir, &conf);
    let port = shuck.port;
    for (v, h) in VERSIONS
        .iter()
        .zip(every_version(port, "a.localhost", "/index.html", None))
    {
        assert_eq!(h.status, 200, "{v}: {h:?}");
        assert_eq!(h.all("via"), ["route-a"], "{v}: {h:?}");
        assert!(h.all("x-frame-options").is_empty(), "{v}: {h:?}");
    }
    // The route's body limit, through the core over HTTP/1.1 too.
    let addr = shuck.addr();
    let conn = Conn::sni("a.localhost");
    let authority = format!("a.localhost:{port}");
    for (n, want) in [(10, 200), (11, 413)] {
        let raw = format!(
            "POST /index.html HTTP/1.1\r\nHost: {authority}\r\nContent-Length: {n}\r\n\r\n{}",
            "x".repeat(n)
        );
        let chunked = format!(
            "POST /index.html HTTP/1.1\r\nHost: {authority}\r\nTransfer-Encoding: chunked\r\n\r\n{n:x}\r\n{}\r\n0\r\n\r\n",
            "x".repeat(n)
        );
        for (what, req) in [("declared", raw), ("chunked", chunked)] {
            let v = shapes::h1(addr, &conn, req.as_bytes());
            assert_eq!(v, Verdict::Status(want), "HTTP/1.1 {what}, {n} bytes");
        }
    }
}
