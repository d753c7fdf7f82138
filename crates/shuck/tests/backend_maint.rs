//! A whole backend in maintenance (issue 61 point 4, its second half): `shuck ctl maint
//! BACKEND` and `PUT /backends/{name}` answer its requests 503 with `Retry-After` and its
//! `maintenance-page` (over its 503 `error-page`), over HTTP/1.1 and HTTP/2 (curl) and
//! HTTP/3 (aioquic), without a reload; during an h2load run no request is lost; `ready`
//! undoes it, and `--admin-state` keeps it across a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::h1origin::H1Origin;
use common::*;
use serde_json::json;

const VERSIONS: [&str; 3] = ["HTTP/1.1", "HTTP/2", "HTTP/3"];

/// Status, `Retry-After` and body of a GET of `/` at `host` over `version`.
fn get(port: u16, version: &str, host: &str) -> (u16, Option<String>, String) {
    if version == "HTTP/3" {
        let req = json!([[{"raw_headers": [
            [":method", "GET"], [":scheme", "https"], [":authority", host], [":path", "/"]
        ], "timeout": 10}]]);
        let report = common::h3::h3(port, req, &["--sni", host, "--deadline", "30"]);
        let a = &report["requests"][0];
        let status = a["status"].as_str().and_then(|s| s.parse().ok());
        let retry = common::h3::header(a, "retry-after").map(str::to_owned);
        let sha = a["sha256"].as_str().unwrap_or("").to_owned();
        return (status.unwrap_or_else(|| panic!("{report}")), retry, sha);
    }
    let flag = if version == "HTTP/2" {
        "--http2"
    } else {
        "--http1.1"
    };
    let out = Command::new("curl")
        .args(["-sk", flag, "--max-time", "15", "-i"])
        .args(["--connect-to", &format!("{host}:{port}:127.0.0.1:{port}")])
        .arg(format!("https://{host}:{port}/"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = (lines.next().and_then(|l| l.split(' ').nth(1)))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("curl {version}: {text:?}"));
    let retry = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.eq_ignore_ascii_case("retry-after"))
        .map(|(_, v)| v.trim().to_owned());
    (status, retry, body.to_owned())
}

fn ctl(sock: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args(["ctl", "--socket", sock.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        out.status.code(),
        text + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn a_backend_in_maintenance_answers_503_with_its_page_until_it_is_ready() {
    if !require("curl", "curl") || !require("h2load", "nghttp2-client") || !common::h3::aioquic() {
        return;
    }
    let dir = TempDir::new("backend-maint");
    let (pem, _) = rcgen_cert(&dir, "site", &["localhost", "api.localhost"], false);
    let page = dir.path("maint.html");
    let html = "<p>Down for maintenance.</p>\n";
    std::fs::write(&page, html).unwrap();
    // The backend's 503 page for other causes: the maintenance page wins over it.
    let down = dir.path("down.html");
    std::fs::write(&down, "<p>Down.</p>\n").unwrap();
    let sha = sh_out(&format!("sha256sum {}", page.display()));
    let sha = sha.split_whitespace().next().unwrap().to_owned();
    let (api1, api2, web) = (
        H1Origin::start(None),
        H1Origin::start(None),
        H1Origin::start(None),
    );
    let sock = dir.path("admin.sock");
    let state = dir.path("state.json");
    let port = free_port();
    let conf = dir.path("shuck.conf");
    std::fs::write(
        &conf,
        format!(
            "http = on\nquic = on\nfrontend = \"[127.0.0.1]:{port}\"\npem-file = \"{pem}\"\n\
             backend = \"127.0.0.1:{web}\"\nadmin-socket = \"{sock}\"\nadmin-state = \"{state}\"\n\
             backend = {{\n name = \"api\"\n server = \"127.0.0.1:{a1}\"\n server = \"127.0.0.1:{a2}\"\n error-page = \"503 {down}\"\n maintenance-page = \"{page}\"\n}}\n\
             route = {{\n host = \"api.localhost\"\n backend = \"api\"\n}}\n",
            pem = pem.display(),
            web = web.port,
            sock = sock.display(),
            state = state.display(),
            a1 = api1.port,
            a2 = api2.port,
            page = page.display(),
            down = down.display(),
        ),
    )
    .unwrap();
    let args = ["--config", conf.to_str().unwrap()];
    let shuck = Shuck::start_raw(&args, port);
    for v in VERSIONS {
        assert_eq!(get(port, v, "api.localhost").0, 200, "{v}: {}", shuck.log());
    }
    // h2load's clients keep asking while the backend goes into maintenance: every answer
    // is 200 or the 503 page, none fails.
    let url = format!("https://127.0.0.1:{port}/");
    let load = std::thread::spawn(move || {
        Command::new("h2load")
            .args([
                "-c",
                "4",
                "-m",
                "4",
                "-D",
                "4",
                "-H",
                ":authority: api.localhost",
            ])
            .args(["--connect-to", "127.0.0.1"])
            .arg(url)
            .output()
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(1500));
    let (code, out) = ctl(&sock, &["maint", "api"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.contains(": maint")).count(),
        2,
        "{out}"
    );
    let load = load.join().unwrap();
    let report = String::from_utf8_lossy(&load.stdout);
    // h2load counts a 5xx as failed: every request done, none errored or timed out, each
    // a 2xx or (once in maintenance) a 5xx.
    let number = |line: &str, word: &str| -> u64 {
        let line = report.lines().find(|l| l.starts_with(line)).unwrap_or("");
        let at = line.find(word).unwrap_or_else(|| panic!("{report}"));
        let n = line[..at]
            .trim_end()
            .rsplit([' ', ','])
            .next()
            .unwrap_or("");
        n.parse().unwrap_or_else(|_| panic!("{word} in {line:?}"))
    };
    let (total, done) = (number("requests:", "total"), number("requests:", "done"));
    assert!(total > 100 && done == total, "{report}");
    assert_eq!(number("requests:", "errored"), 0, "{report}");
    assert_eq!(number("requests:", "timeout"), 0, "{report}");
    let (ok, five) = (
        number("status codes:", "2xx"),
        number("status codes:", "5xx"),
    );
    assert_eq!(ok + five, done, "{report}");
    assert!(ok > 0 && five > 0, "{report}");
    for v in VERSIONS {
        let (status, retry, body) = get(port, v, "api.localhost");
        assert_eq!(status, 503, "{v}");
        assert_eq!(retry.as_deref(), Some("60"), "{v}");
        if v == "HTTP/3" {
            assert_eq!(body, sha, "{v}");
        } else {
            assert_eq!(body, html, "{v}");
        }
        // The other backend is not in maintenance.
        assert_eq!(get(port, v, "localhost").0, 200, "{v}");
    }
    // A restart keeps it (--admin-state).
    drop(shuck);
    let shuck = Shuck::start_raw(&args, port);
    assert!(
        wait_until(Duration::from_secs(10), || get(
            port,
            "HTTP/2",
            "api.localhost"
        )
        .0 == 503),
        "{}",
        shuck.log()
    );
    let (code, out) = ctl(&sock, &["ready", "api"]);
    assert_eq!(code, Some(0), "{out}");
    for v in VERSIONS {
        assert_eq!(get(port, v, "api.localhost").0, 200, "{v}");
    }
    // A backend that does not exist is named.
    let (code, out) = ctl(&sock, &["maint", "nope"]);
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("no backend \"nope\""), "{out}");
}
