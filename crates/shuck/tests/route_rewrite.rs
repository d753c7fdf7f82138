//! A route's redirects and rewrites (issue 61 point 3): `redirect` answered by shuck with
//! its template filled in, `strip-prefix` and `replace-prefix` on the path sent, the
//! prefix matched as routes read paths (`//`, `..`, `%2F`), the log keeping both paths;
//! over HTTP/1.1 and HTTP/2 (curl) and HTTP/3 (aioquic). Bad keys refused with reasons.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::h1origin::H1Origin;
use common::*;
use serde_json::{json, Value};

const VERSIONS: [&str; 3] = ["HTTP/1.1", "HTTP/2", "HTTP/3"];

/// The status and `Location` of a GET of `path` at `host` over `version`, the path sent
/// as it is, and whether the answer had `Strict-Transport-Security` and the route's own
/// `X-Route`.
fn ask(port: u16, version: &str, host: &str, path: &str) -> (u16, Option<String>, (bool, bool)) {
    if version == "HTTP/3" {
        let req = json!([[{"raw_headers": [
            [":method", "GET"], [":scheme", "https"], [":authority", host], [":path", path]
        ], "timeout": 5}]]);
        let report = common::h3::h3(port, req, &["--sni", host, "--deadline", "30"]);
        let a = &report["requests"][0];
        let status = a["status"].as_str().and_then(|s| s.parse().ok());
        let location = common::h3::header(a, "location").map(str::to_owned);
        let hsts = common::h3::header(a, "strict-transport-security").is_some();
        let routed = common::h3::header(a, "x-route").is_some();
        return (
            status.unwrap_or_else(|| panic!("{report}")),
            location,
            (hsts, routed),
        );
    }
    let flag = if version == "HTTP/2" {
        "--http2"
    } else {
        "--http1.1"
    };
    let out = Command::new("curl")
        .args(["-sk", flag, "--path-as-is", "--max-time", "10", "-D", "-"])
        .args(["-o", "/dev/null"])
        .args(["--connect-to", &format!("{host}:{port}:127.0.0.1:{port}")])
        .arg(format!("https://{host}:{port}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let status = (lines.next().and_then(|l| l.split(' ').nth(1)))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("curl {version} {host}{path}: {text:?}"));
    let fields: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let location = (fields.iter().find(|(n, _)| n == "location")).map(|(_, v)| v.clone());
    let hsts = fields.iter().any(|(n, _)| n == "strict-transport-security");
    let routed = fields.iter().any(|(n, _)| n == "x-route");
    (status, location, (hsts, routed))
}

/// The paths `origin` was sent, in order.
fn paths(origin: &H1Origin) -> Vec<String> {
    let seen = origin.seen.lock().unwrap();
    seen.iter().map(|s| s.path.clone()).collect()
}

/// The access log's (request_uri, upstream_uri) for the request the client sent as `path`.
fn logged(log: &std::path::Path, host: &str, path: &str) -> Option<(Value, Value)> {
    let line = log_line(log, |v| {
        v["request_uri"] == path && v["host"].as_str().is_some_and(|h| h.starts_with(host))
    })?;
    Some((line["request_uri"].clone(), line["upstream_uri"].clone()))
}

#[test]
fn routes_redirect_and_rewrite_over_every_version() {
    if !require("curl", "curl") || !common::h3::aioquic() {
        return;
    }
    let dir = TempDir::new("route-rewrite");
    let names = ["localhost", "www.localhost", "old.localhost"];
    let (pem, _) = rcgen_cert(&dir, "site", &names, false);
    let api = H1Origin::start(None);
    let other = H1Origin::start(None);
    let log = dir.path("access.log");
    let port = free_port();
    let conf = format!(
        "http = on\nquic = on\nfrontend = \"[127.0.0.1]:{port}\"\npem-file = \"{pem}\"\n\
         backend = \"127.0.0.1:{other}\"\n\
         hsts = \"max-age=600\"\n\
         access-log = \"{log}\"\naccess-log-format = \"json\"\n\
         backend = {{\n name = \"api\"\n server = \"127.0.0.1:{api}\"\n}}\n\
         route = {{\n host = \"www.localhost\"\n redirect = \"https://localhost{{path}}{{query}}\"\n response-header = \"X-Route: www\"\n}}\n\
         route = {{\n host = \"old.localhost\"\n redirect = \"https://new.example/x{{path}}\"\n redirect-code = 301\n}}\n\
         route = {{\n host = \"localhost\"\n path-prefix = \"/api/\"\n backend = \"api\"\n strip-prefix = on\n}}\n\
         route = {{\n host = \"localhost\"\n path-prefix = \"/v1/\"\n backend = \"api\"\n replace-prefix = \"/v2/\"\n}}\n",
        pem = pem.display(),
        other = other.port,
        api = api.port,
        log = log.display(),
    );
    let path = dir.path("shuck.conf");
    std::fs::write(&path, conf).unwrap();
    let shuck = Shuck::start_raw(&["--config", path.to_str().unwrap()], port);
    for v in VERSIONS {
        let fail = |what: &str| format!("{v}: {what}\n{}", shuck.log());
        let before = (paths(&api).len(), paths(&other).len());
        // A redirect with the request in it, answered by shuck (HSTS on it too).
        let got = ask(port, v, "www.localhost", "/a/b?x=1");
        assert_eq!(got.0, 308, "{}", fail("www"));
        assert_eq!(got.1.as_deref(), Some("https://localhost/a/b?x=1"), "{v}");
        assert!(got.2 .0, "{v}: no HSTS on the redirect");
        assert!(
            got.2 .1,
            "{v}: the route's answer rules missed its redirect"
        );
        // A path that would leave the site keeps to it.
        let got = ask(port, v, "www.localhost", "//evil.example/");
        assert_eq!(
            got.1.as_deref(),
            Some("https://localhost/evil.example/"),
            "{v}"
        );
        let got = ask(port, v, "old.localhost", "/p?q");
        assert_eq!(
            (got.0, got.1.as_deref()),
            (301, Some("https://new.example/x/p"))
        );
        assert_eq!(
            (paths(&api).len(), paths(&other).len()),
            before,
            "{v}: a redirect reached a backend"
        );

        // strip-prefix and replace-prefix, the query kept.
        let tag = v.replace(['/', '.'], "");
        let sent = format!("/api/{tag}/users?id=7");
        assert_eq!(ask(port, v, "localhost", &sent).0, 200, "{}", fail("api"));
        let want = format!("/{tag}/users?id=7");
        assert_eq!(paths(&api).last(), Some(&want), "{v}");
        let (asked, upstream) = logged(&log, "localhost", &sent).expect("no log line");
        assert_eq!(
            (asked.as_str(), upstream.as_str()),
            (Some(&*sent), Some(&*want))
        );
        let sent = format!("/v1/{tag}/items");
        assert_eq!(ask(port, v, "localhost", &sent).0, 200, "{v}");
        assert_eq!(paths(&api).last(), Some(&format!("/v2/{tag}/items")), "{v}");

        // The prefix as routes read it: `//` and a dot segment, then %2F kept encoded.
        assert_eq!(ask(port, v, "localhost", &format!("//api//{tag}/a")).0, 200);
        assert_eq!(paths(&api).last(), Some(&format!("/{tag}/a")), "{v}");
        assert_eq!(
            ask(port, v, "localhost", &format!("/z/../api/{tag}/b")).0,
            200
        );
        assert_eq!(paths(&api).last(), Some(&format!("/{tag}/b")), "{v}");
        assert_eq!(ask(port, v, "localhost", &format!("/api/{tag}%2Fc")).0, 200);
        assert_eq!(paths(&api).last(), Some(&format!("/{tag}%2Fc")), "{v}");
        // `..` out of the prefix: not the route's, so nothing is stripped, and the
        // default backend gets it.
        let out = format!("/api/../{tag}");
        assert_eq!(ask(port, v, "localhost", &out).0, 200, "{v}");
        assert_eq!(paths(&other).last(), Some(&out), "{v}");
        let (_, upstream) = logged(&log, "localhost", &out).expect("no log line");
        assert!(upstream.is_null(), "{v}: {upstream}");
    }
}

#[test]
fn a_route_action_that_cannot_work_is_refused_with_its_reason() {
    for (route, says) in [
        (
            "host=a;redirect=https://b/{nope}",
            "unknown placeholder {nope}",
        ),
        ("host=a;redirect=b/c", "absolute URL"),
        (
            "host=a;redirect=https://b/;redirect-code=200",
            "not a redirect code",
        ),
        (
            "host=a;backend=default;redirect-code=301",
            "goes with redirect",
        ),
        ("host=a;redirect=https://b/;backend=default", "not both"),
        ("host=a;backend=default;strip-prefix=on", "give one"),
        (
            "host=a;path-prefix=/p/;backend=default;strip-prefix=on;replace-prefix=/q/",
            "not both",
        ),
        (
            "host=a;path-prefix=/p/;backend=default;replace-prefix=q",
            "starting with one /",
        ),
        ("sni=a;redirect=https://b/", "go with host"),
        (
            "host=a;path-prefix=/p/;backend=default;strip-prefix=maybe",
            "not on or off",
        ),
    ] {
        let (code, err) = run_to_exit(&["--http", "-b", "127.0.0.1:9", "--route", route]);
        assert_eq!(code, Some(1), "{route}: {err}");
        assert!(err.contains(says), "{route}: {err}");
    }
    // In TCP mode a route cannot act on requests.
    let (code, err) = run_to_exit(&["-b", "127.0.0.1:9", "--route", "host=a;redirect=https://b/"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("need --http") || err.contains("needs --http"),
        "{err}"
    );
}

/// `--test` lists what each route does and the rules it ends up with (its own, else its
/// backend's, else the global ones), HSTS first; a rule that deletes is taken as a value
/// on the command line.
#[test]
fn the_test_lists_each_routes_action_and_rules() {
    let dir = TempDir::new("route-test");
    let (pem, _) = rcgen_cert(&dir, "site", &["localhost"], false);
    let out = Command::new(BIN)
        .args(["--http", "-b", "127.0.0.1:9", "--hsts", "max-age=60"])
        .args(["--response-header", "-Server"])
        .args(["--named-backend", "name=api;server=127.0.0.1:8;request-header=X-B: b"])
        .args([
            "--route",
            "host=a.localhost;path-prefix=/api/;backend=api;strip-prefix=on;response-header=+X-A: 1;max-body-bytes=1k",
        ])
        .args(["--route", "host=www.localhost;redirect=https://localhost{path}{query}"])
        .args(["--route", "host=b.localhost;backend=api"])
        .arg("-t")
        .arg(&pem)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = "  route: host a.localhost path /api/* -> api\n    path sent: /api/* as /*\n    request-header X-B: b\n    response-header Strict-Transport-Security: max-age=60\n    response-header +X-A: 1\n    max-body-bytes 1024\n  route: host www.localhost -> redirect 308 https://localhost{path}{query}\n    response-header Strict-Transport-Security: max-age=60\n    response-header -Server\n  route: host b.localhost -> api\n    request-header X-B: b\n    response-header Strict-Transport-Security: max-age=60\n    response-header -Server\n";
    assert!(text.contains(want), "{text}");
}

/// A rewriting route to an HTTP/2 backend (nghttpd): HTTP/1.1's requests go through the
/// core with the rewriter's head, and still log the path the client asked for beside the
/// one sent; HTTP/2's and HTTP/3's are rewritten by the core itself.
#[test]
fn a_rewrite_to_an_http2_backend_is_logged_with_both_paths() {
    if !require("curl", "curl") || !common::h3::aioquic() {
        return;
    }
    let dir = TempDir::new("route-rewrite-h2");
    std::fs::create_dir_all(dir.path("docs")).unwrap();
    std::fs::write(dir.path("docs/page.html"), "from h2c\n").unwrap();
    let Some((_nghttpd, h2c)) = nghttpd(&dir) else {
        return;
    };
    let log = dir.path("access.log");
    let log_arg = log.to_str().unwrap().to_owned();
    let shuck = Shuck::start(&[
        "--http",
        "--quic",
        "-b",
        "127.0.0.1:9",
        "--named-backend",
        &format!("name=h;server={h2c};proto=h2"),
        "--route",
        "host=localhost;path-prefix=/old/;backend=h;replace-prefix=/docs/",
        "--access-log",
        &log_arg,
        "--access-log-format",
        "json",
    ]);
    for v in VERSIONS {
        let sent = format!("/old/page.html?v={}", v.replace(['/', '.'], ""));
        let got = ask(shuck.port, v, "localhost", &sent);
        assert_eq!(got.0, 200, "{v}: {}", shuck.log());
        let (asked, upstream) = logged(&log, "localhost", &sent).expect("no log line");
        let want = sent.replace("/old/", "/docs/");
        assert_eq!(
            (asked.as_str(), upstream.as_str()),
            (Some(&*sent), Some(&*want)),
            "{v}"
        );
    }
}
