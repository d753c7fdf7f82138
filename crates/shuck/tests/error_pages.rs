//! Error pages (issue 61 point 4, its first half): `error-page` in place of the body of
//! shuck's own error answers, over HTTP/1.1 and HTTP/2 (curl) and HTTP/3 (aioquic), a
//! route's own page over the global one, the file read again at a reload, and a page that
//! cannot be read refused at load with its name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::json;

const VERSIONS: [&str; 3] = ["HTTP/1.1", "HTTP/2", "HTTP/3"];

/// An answer as the client got it: status, `Content-Type`, the body's length and SHA-256.
#[derive(Debug, PartialEq, Eq)]
struct Got {
    status: u16,
    content_type: Option<String>,
    length: usize,
    sha256: String,
}

fn sha256(bytes: &[u8], dir: &TempDir) -> String {
    let f = dir.path("sha.in");
    std::fs::write(&f, bytes).unwrap();
    let out = sh_out(&format!("sha256sum {}", f.display()));
    out.split_whitespace().next().unwrap_or("").to_owned()
}

fn get(port: u16, version: &str, host: &str, path: &str, dir: &TempDir) -> Got {
    if version == "HTTP/3" {
        let req = json!([[{"raw_headers": [
            [":method", "GET"], [":scheme", "https"], [":authority", host], [":path", path]
        ], "timeout": 10}]]);
        let report = common::h3::h3(port, req, &["--sni", host, "--deadline", "30"]);
        let a = &report["requests"][0];
        return Got {
            status: a["status"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("{report}")),
            content_type: common::h3::header(a, "content-type").map(str::to_owned),
            length: a["length"].as_u64().unwrap_or(0) as usize,
            sha256: a["sha256"].as_str().unwrap_or("").to_owned(),
        };
    }
    let flag = if version == "HTTP/2" {
        "--http2"
    } else {
        "--http1.1"
    };
    let head = dir.path("head.txt");
    let out = Command::new("curl")
        .args(["-sk", flag, "--max-time", "15", "-D"])
        .arg(&head)
        .args(["--connect-to", &format!("{host}:{port}:127.0.0.1:{port}")])
        .arg(format!("https://{host}:{port}{path}"))
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&head).unwrap_or_default();
    let mut lines = text.lines();
    let status = (lines.next().and_then(|l| l.split(' ').nth(1)))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("curl {version} {host}{path}: {text:?}"));
    let content_type = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.trim().to_owned());
    Got {
        status,
        content_type,
        length: out.stdout.len(),
        sha256: sha256(&out.stdout, dir),
    }
}

#[test]
fn shucks_own_errors_carry_the_operators_pages_over_every_version() {
    if !require("curl", "curl") || !common::h3::aioquic() {
        return;
    }
    let dir = TempDir::new("error-pages");
    let (pem, _) = rcgen_cert(
        &dir,
        "site",
        &["localhost", "api.localhost", "deny.localhost"],
        false,
    );
    let page = dir.path("50x.html");
    let html = b"<!doctype html><title>Down</title><p>Back soon.</p>\n";
    std::fs::write(&page, html).unwrap();
    let api_page = dir.path("api.json");
    std::fs::write(&api_page, b"{\"error\":\"unavailable\"}\n").unwrap();
    // Nothing listens on either backend: every request is shuck's own 502 or 503.
    let dead = free_port();
    let port = free_port();
    let conf = dir.path("shuck.conf");
    let write_conf = |extra: &str| {
        let text = format!(
            "http = on\nquic = on\nfrontend = \"[127.0.0.1]:{port}\"\npem-file = \"{pem}\"\n\
             backend = \"127.0.0.1:{dead}\"\n\
             error-page = \"502,503,504 {page}\"\n\
             backend = {{\n name = \"api\"\n server = \"127.0.0.1:{dead}\"\n error-page = \"502,503 {api}\"\n}}\n\
             route = {{\n host = \"api.localhost\"\n backend = \"api\"\n}}\n\
             route = {{\n host = \"deny.localhost\"\n backend = \"api\"\n client-deny = \"127.0.0.0/8\"\n}}\n{extra}",
            pem = pem.display(),
            page = page.display(),
            api = api_page.display(),
        );
        std::fs::write(&conf, text).unwrap();
    };
    write_conf("");
    let shuck = Shuck::start_raw(&["--config", conf.to_str().unwrap()], port);
    let want = |bytes: &[u8], ty: &str| (bytes.len(), sha256(bytes, &dir), ty.to_owned());
    for v in VERSIONS {
        let got = get(port, v, "localhost", "/", &dir);
        assert!(
            matches!(got.status, 502 | 503),
            "{v}: {got:?}\n{}",
            shuck.log()
        );
        let page = want(html, "text/html; charset=utf-8");
        assert_eq!(
            (
                got.length,
                got.sha256.clone(),
                got.content_type.clone().unwrap_or_default()
            ),
            page,
            "{v}"
        );
        // The backend's own level gives its page.
        let got = get(port, v, "api.localhost", "/x", &dir);
        assert!(matches!(got.status, 502 | 503), "{v}: {got:?}");
        let json = want(b"{\"error\":\"unavailable\"}\n", "application/json");
        assert_eq!(
            (got.length, got.sha256, got.content_type.unwrap_or_default()),
            json,
            "{v}"
        );
        // A status no page names keeps shuck's words: 403 for a client a route denies.
        let got = get(port, v, "deny.localhost", "/", &dir);
        assert_eq!(got.status, 403, "{v}: {got:?}");
        assert_eq!(got.content_type.as_deref(), Some("text/plain"), "{v}");
    }
    // The file is read again at a reload.
    let html2 = b"<p>Maintenance until noon.</p>\n";
    std::fs::write(&page, html2).unwrap();
    shuck.signal("HUP");
    assert!(
        wait_until(Duration::from_secs(10), || {
            get(port, "HTTP/1.1", "localhost", "/", &dir).sha256 == sha256(html2, &dir)
        }),
        "{}",
        shuck.log()
    );
    for v in VERSIONS {
        let got = get(port, v, "localhost", "/", &dir);
        assert_eq!(got.sha256, sha256(html2, &dir), "{v}");
    }
    // A page gone at a reload: refused, named, the old one kept.
    std::fs::remove_file(&page).unwrap();
    shuck.signal("HUP");
    assert!(
        shuck.wait_log("50x.html", Duration::from_secs(10)),
        "{}",
        shuck.log()
    );
    let got = get(port, "HTTP/2", "localhost", "/", &dir);
    assert_eq!(got.sha256, sha256(html2, &dir), "the old page was not kept");
}

#[test]
fn a_page_that_cannot_be_read_or_a_code_that_is_not_an_error_is_refused() {
    let dir = TempDir::new("error-pages-bad");
    let page = dir.path("p.html");
    std::fs::write(&page, "x").unwrap();
    let big = dir.path("big.html");
    std::fs::write(&big, vec![b'x'; (1 << 20) + 1]).unwrap();
    for (value, says) in [
        (
            "502 /nonexistent/50x.html".to_owned(),
            "/nonexistent/50x.html",
        ),
        (format!("302 {}", page.display()), "not an error status"),
        (format!("502 {}", big.display()), "1 MiB").clone(),
        (page.display().to_string(), "expected CODES PATH"),
    ] {
        let (code, err) = run_to_exit(&["--http", "-b", "127.0.0.1:9", "--error-page", &value]);
        assert_eq!(code, Some(1), "{value}: {err}");
        let says = if says == "1 MiB" { "1048576" } else { says };
        assert!(err.contains(says), "{value}: {err}");
    }
    let (code, err) = run_to_exit(&[
        "--http",
        "-b",
        "127.0.0.1:9",
        "--maintenance-page",
        "/nonexistent/maint.html",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--maintenance-page") && err.contains("/nonexistent/maint.html"),
        "{err}"
    );
    let ok = format!("502 {}", page.display());
    let (code, err) = run_to_exit(&["-b", "127.0.0.1:9", "--error-page", &ok]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("needs --http"), "{err}");
}

/// `intercept`: the backend's own answers with those statuses get the page too (its
/// length, chunked or not, replaced), over every version, and an HTTP/1.1 connection goes
/// on after one with its next answer whole.
#[test]
fn an_intercepting_page_replaces_the_backends_own_error_answers() {
    if !require("curl", "curl") || !common::h3::aioquic() {
        return;
    }
    let dir = TempDir::new("error-pages-intercept");
    let page = dir.path("5xx.html");
    let html = b"<p>Something broke; we are on it.</p>\n";
    std::fs::write(&page, html).unwrap();
    let origin = common::h1origin::H1Origin::start(None);
    let shuck = Shuck::start(&[
        "--http",
        "--quic",
        "-b",
        &origin.spec,
        "--error-page",
        &format!("502,503 {} intercept", page.display()),
    ]);
    let want = (html.len(), sha256(html, &dir));
    for v in VERSIONS {
        for (path, status) in [("/502", 502), ("/503-chunked", 503)] {
            let got = get(shuck.port, v, "localhost", path, &dir);
            assert_eq!(got.status, status, "{v} {path}: {}", shuck.log());
            assert_eq!((got.length, got.sha256.clone()), want, "{v} {path}");
            assert_eq!(
                got.content_type.as_deref(),
                Some("text/html; charset=utf-8")
            );
        }
        // Answers it does not name pass as they are.
        let got = get(shuck.port, v, "localhost", "/size/5", &dir);
        assert_eq!((got.status, got.length), (200, 5), "{v}");
    }
    // One HTTP/1.1 connection: an intercepted chunked answer, then the next one whole.
    let out = Command::new("curl")
        .args(["-sk", "--http1.1", "--max-time", "10"])
        .args([
            "--connect-to",
            &format!("localhost:{0}:127.0.0.1:{0}", shuck.port),
        ])
        .arg(format!("https://localhost:{}/503-chunked", shuck.port))
        .arg(format!("https://localhost:{}/size/7", shuck.port))
        .arg(format!("https://localhost:{}/502", shuck.port))
        .output()
        .unwrap();
    let mut expected = html.to_vec();
    expected.extend_from_slice(&out.stdout[html.len()..html.len() + 7]);
    expected.extend_from_slice(html);
    assert_eq!(
        out.stdout.len(),
        2 * html.len() + 7,
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(out.stdout, expected);
    let seen = origin.seen.lock().unwrap();
    let last: Vec<(usize, &str)> = seen
        .iter()
        .rev()
        .take(3)
        .map(|s| (s.conn, s.path.as_str()))
        .collect();
    let paths: Vec<&str> = last.iter().rev().map(|l| l.1).collect();
    assert_eq!(paths, ["/503-chunked", "/size/7", "/502"], "{last:?}");
    // The three went over one backend connection: its framing was followed past each.
    assert!(last.iter().all(|l| l.0 == last[0].0), "{last:?}");
}
