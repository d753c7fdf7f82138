//! The access log (`--access-log`) through real clients and real consumers of its formats:
//! curl over HTTP/1.1 and HTTP/2 and aioquic over HTTP/3, each request its own line with its
//! fields and timings; goaccess reading the combined log; lines that stay one line whatever
//! a client sends; the termination cause of a client abort, a cut answer, a backend
//! timeout, a 503, a 400 and a 421; TCP mode's line per connection; a file rotated by
//! logrotate under load with SIGUSR1 losing no line; a sink nobody reads costing counted
//! drops and no request; syslog over UDP; errors only and sampling; the flags' errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufReader, Read, Write};
use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant};

use common::h1origin::H1Origin;
use common::h3::{aioquic, answers, h3};
use common::*;
use serde_json::{json, Value};

/// A scratch folder named after `tag`, the access log's path in it, and an origin.
fn started(tag: &str) -> (TempDir, std::path::PathBuf, H1Origin) {
    let dir = TempDir::new(tag);
    let log = dir.path("access.log");
    (dir, log, H1Origin::start(None))
}

/// The file's lines once there are at least `n` (lines are handed on every 100 ms), and
/// then no more come for a moment.
fn lines(path: &std::path::Path, n: usize) -> Vec<String> {
    let read = || {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while read().len() < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let got = read();
    assert_eq!(
        got.len(),
        n,
        "{} lines, not {n}:\n{}",
        got.len(),
        got.join("\n")
    );
    got
}

fn json_lines(path: &std::path::Path, n: usize) -> Vec<Value> {
    lines(path, n)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// curl over `version` (`--http1.1`, `--http2`) to each path in turn on one connection;
/// the statuses.
fn curl(shuck: &Shuck, version: &str, paths: &[&str], extra: &[&str]) -> String {
    let mut cmd = Command::new("curl");
    cmd.args(["-sk", version, "--max-time", "10", "-w", "%{http_code} "]);
    cmd.args(extra);
    for p in paths {
        cmd.arg(format!("https://127.0.0.1:{}{p}", shuck.port))
            .args(["-o", "/dev/null"]);
    }
    String::from_utf8(cmd.output().unwrap().stdout).unwrap()
}

fn by_path<'a>(lines: &'a [Value], proto: &str, path: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["server_protocol"] == proto && l["request_uri"] == path)
        .unwrap_or_else(|| panic!("no {proto} line for {path}: {lines:#?}"))
}

fn opts_for(sni: &str) -> ClientOpts {
    ClientOpts {
        sni: Some(sni.into()),
        ..ClientOpts::default()
    }
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn each_request_of_each_http_version_is_a_line_with_its_fields() {
    if !require("curl", "curl") || !aioquic() {
        return;
    }
    let (_dir, log, origin) = started("access-versions");
    let shuck = Shuck::start(&[
        "--http",
        "--quic",
        "-b",
        &origin.spec,
        "--access-log",
        log.to_str().unwrap(),
        "--access-log-format",
        "json",
    ]);
    let h1 = curl(
        &shuck,
        "--http1.1",
        &["/size/10", "/size/20"],
        &["-A", "agent/1"],
    );
    assert_eq!(h1, "200 200 ");
    let post = curl(
        &shuck,
        "--http1.1",
        &["/sum"],
        &["--data-binary", "hello world"],
    );
    assert_eq!(post, "200 ");
    let h2 = curl(
        &shuck,
        "--http2",
        &["/size/100", "/size/200", "/sum?q=1"],
        &["-e", "https://ref.example/"],
    );
    assert_eq!(h2, "200 200 200 ");
    let report = h3(
        shuck.port,
        json!([
            {"path": "/size/300"},
            {"method": "POST", "path": "/sum", "body": "twelve bytes"},
        ]),
        &[],
    );
    assert_eq!(answers(&report).len(), 2, "{report}");
    let all = json_lines(&log, 8);
    for l in &all {
        assert_eq!(l["remote_addr"], "127.0.0.1", "{l}");
        assert_eq!(l["ssl_protocol"], "TLSv1.3", "{l}");
        assert_eq!(l["cause"], "normal", "{l}");
        assert_eq!(l["termination_state"], "--", "{l}");
        assert_eq!(l["status"], 200, "{l}");
        assert_eq!(l["backend"], "default", "{l}");
        assert!(
            l["upstream_addr"].as_str().unwrap().contains(&origin.spec),
            "{l}"
        );
        let (head, total) = (num(&l["header_us"]), num(&l["request_us"]));
        assert!(head <= total, "the answer's head within the request: {l}");
        assert!(num(&l["handshake_us"]) > 0, "{l}");
        assert!(l["time"].as_str().unwrap().ends_with('Z'), "{l}");
    }
    let l = by_path(&all, "HTTP/1.1", "/size/20");
    assert_eq!(
        (&l["request_method"], num(&l["body_bytes_sent"])),
        (&json!("GET"), 20)
    );
    assert_eq!(l["http_user_agent"], "agent/1");
    // The connection's second request rode the backend connection the first opened.
    assert_eq!((num(&l["connect_us"]), num(&l["queue_us"])), (0, 0), "{l}");
    let first = by_path(&all, "HTTP/1.1", "/size/10");
    assert!(
        first["connect_us"].is_u64() && first["queue_us"] == 0,
        "{first}"
    );
    let l = by_path(&all, "HTTP/1.1", "/sum");
    assert_eq!(
        (num(&l["bytes_received"]), &l["request_method"]),
        (11, &json!("POST"))
    );
    let l = by_path(&all, "HTTP/2.0", "/size/200");
    assert_eq!(num(&l["body_bytes_sent"]), 200);
    assert_eq!(l["http_referer"], "https://ref.example/");
    assert_eq!(l["host"], format!("127.0.0.1:{}", shuck.port));
    by_path(&all, "HTTP/2.0", "/sum?q=1");
    for l in all.iter().filter(|l| l["server_protocol"] != "HTTP/1.1") {
        assert!(l["connect_us"].is_u64() && l["queue_us"].is_u64(), "{l}");
    }
    let l = by_path(&all, "HTTP/3.0", "/size/300");
    assert_eq!(num(&l["body_bytes_sent"]), 300);
    let l = by_path(&all, "HTTP/3.0", "/sum");
    assert_eq!(num(&l["bytes_received"]), 12);
    // One connection's requests share its port; the second curl's is another.
    let port = |p: &str, proto: &str| by_path(&all, proto, p)["remote_port"].clone();
    assert_eq!(port("/size/10", "HTTP/1.1"), port("/size/20", "HTTP/1.1"));
    assert_ne!(port("/size/10", "HTTP/1.1"), port("/sum", "HTTP/1.1"));
    assert_eq!(port("/size/100", "HTTP/2.0"), port("/sum?q=1", "HTTP/2.0"));
}

#[test]
fn goaccess_reads_the_combined_log() {
    if !require("curl", "curl") || !require("goaccess", "goaccess") {
        return;
    }
    let (dir, log, origin) = started("access-goaccess");
    let shuck = Shuck::start(&[
        "--http",
        "-b",
        &origin.spec,
        "--access-log",
        log.to_str().unwrap(),
    ]);
    assert_eq!(
        curl(&shuck, "--http1.1", &["/a", "/b", "/c"], &[]),
        "200 200 200 "
    );
    assert_eq!(
        curl(
            &shuck,
            "--http2",
            &["/d", "/e"],
            &["-A", "Mozilla/5.0 \"quoted\""]
        ),
        "200 200 "
    );
    let got = lines(&log, 5);
    let first = got.iter().find(|l| l.contains(" /a ")).unwrap();
    assert!(first.starts_with("127.0.0.1 - - ["), "{first}");
    assert!(first.contains("\"GET /a HTTP/1.1\" 200 "), "{first}");
    let report = dir.path("report.json");
    let out = Command::new("goaccess")
        .arg(&log)
        .args(["--log-format=COMBINED", "--no-global-config", "-o"])
        .arg(&report)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "goaccess: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let general = &r["general"];
    assert_eq!(general["total_requests"], 5, "{general}");
    assert_eq!(general["valid_requests"], 5, "{general}");
    assert_eq!(general["failed_requests"], 0, "{general}");
}

#[test]
fn fail2bans_nginx_filters_match_the_combined_log() {
    if !require("curl", "curl") || !require("fail2ban-regex", "fail2ban") {
        return;
    }
    let (_dir, log, origin) = started("access-fail2ban");
    let shuck = Shuck::start(&[
        "--http",
        "-b",
        &origin.spec,
        "--access-log",
        log.to_str().unwrap(),
    ]);
    assert_eq!(
        curl(&shuck, "--http1.1", &["/wp-login.php", "/ok"], &[]),
        "404 200 "
    );
    assert_eq!(curl(&shuck, "--http2", &["/wp-admin.php"], &[]), "404 ");
    for _ in 0..2 {
        let answer = raw_h1(&shuck, b"GET / HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n");
        assert!(answer.starts_with(b"HTTP/1.1 400"));
    }
    lines(&log, 5);
    let matched = |filter: &str| {
        let out = Command::new("fail2ban-regex")
            .arg(&log)
            .arg(format!("/etc/fail2ban/filter.d/{filter}.conf"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = text
            .lines()
            .find(|l| l.starts_with("Lines: "))
            .unwrap_or_else(|| panic!("fail2ban-regex {filter}: {text}"))
            .to_owned();
        line
    };
    assert!(
        matched("nginx-botsearch").contains("2 matched"),
        "{}",
        matched("nginx-botsearch")
    );
    assert!(
        matched("nginx-bad-request").contains("2 matched"),
        "{}",
        matched("nginx-bad-request")
    );
}

#[test]
fn a_reload_moves_the_log_and_changes_its_format() {
    if !require("curl", "curl") {
        return;
    }
    let dir = TempDir::new("access-reload");
    let (first, second) = (dir.path("first.log"), dir.path("second.log"));
    let origin = H1Origin::start(None);
    let port = free_port();
    let (pem, _) = rcgen_cert(&dir, "c", &["localhost"], false);
    let conf = dir.path("shuck.conf");
    let write = |log: &std::path::Path, format: &str| {
        let text = format!(
            "frontend = \"[127.0.0.1]:{port}\"\nbackend = \"{}\"\npem-file = \"{}\"\nhttp = on\naccess-log = \"{}\"\naccess-log-format = \"{format}\"\n",
            origin.spec,
            pem.display(),
            log.display()
        );
        let tmp = dir.path("shuck.conf.new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &conf).unwrap();
    };
    write(&first, "{request_uri} first");
    let shuck = Shuck::start_raw(&["--config", conf.to_str().unwrap()], port);
    assert_eq!(curl(&shuck, "--http2", &["/before"], &[]), "200 ");
    assert_eq!(lines(&first, 1), ["/before first"]);
    write(&second, "{request_uri} {status} second");
    shuck.signal("HUP");
    assert!(
        shuck.wait_log("SIGHUP: configuration reloaded", Duration::from_secs(10)),
        "{}",
        shuck.log()
    );
    assert_eq!(curl(&shuck, "--http1.1", &["/after"], &[]), "200 ");
    assert_eq!(lines(&second, 1), ["/after 200 second"]);
    assert_eq!(
        lines(&first, 1),
        ["/before first"],
        "nothing more in the first file"
    );
}

/// curl's answer head for one request.
fn curl_head(shuck: &Shuck, version: &str, path: &str, extra: &[&str]) -> String {
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
        .args(extra)
        .arg(format!("https://127.0.0.1:{}{path}", shuck.port))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_ascii_lowercase()
}

#[test]
fn request_ids_pass_or_are_made_and_come_back() {
    if !require("curl", "curl") || !aioquic() {
        return;
    }
    let (_dir, log, origin) = started("access-ids");
    let shuck = Shuck::start(&[
        "--http",
        "--quic",
        "-b",
        &origin.spec,
        "--request-id-header",
        "X-Request-ID",
        "--request-id-response",
        "--trusted-proxies",
        "127.0.0.1",
        "--access-log",
        log.to_str().unwrap(),
        "--access-log-format",
        "{server_protocol} {request_uri} {request_id}",
    ]);
    let h1 = curl_head(
        &shuck,
        "--http1.1",
        "/h1-given",
        &["-H", "X-Request-ID: client-1"],
    );
    assert!(h1.contains("x-request-id: client-1\r\n"), "{h1}");
    let bad = curl_head(
        &shuck,
        "--http1.1",
        "/h1-bad",
        &["-H", "X-Request-ID: two words"],
    );
    let h1_none = curl_head(&shuck, "--http1.1", "/h1-none", &[]);
    // `X_Request_ID` is `X-Request-ID` to a backend that reads it as HTTP_X_REQUEST_ID: the
    // ID's header too, never passed on beside the one shuck writes; and a nomination of
    // it in Connection would make the next hop strip shuck's.
    let h1_under = curl_head(
        &shuck,
        "--http1.1",
        "/h1-under",
        &[
            "-H",
            "X_Request_ID: under-1",
            "-H",
            "Connection: keep-alive, X-Request-ID",
        ],
    );
    assert!(h1_under.contains("x-request-id: under-1\r\n"), "{h1_under}");
    let h2 = curl_head(&shuck, "--http2", "/h2-none", &[]);
    let h2_given = curl_head(
        &shuck,
        "--http2",
        "/h2-given",
        &["-H", "X-Request-ID: h2-given-1"],
    );
    let h2_under = curl_head(
        &shuck,
        "--http2",
        "/h2-under",
        &["-H", "x_request_id: under-2"],
    );
    assert!(
        h2_given.contains("x-request-id: h2-given-1\r\n"),
        "{h2_given}"
    );
    assert!(h2_under.contains("x-request-id: under-2\r\n"), "{h2_under}");
    let h2_bad = curl_head(
        &shuck,
        "--http2",
        "/h2-bad",
        &["-H", "X-Request-ID: two words"],
    );
    // Longer than the 64 bytes an ID may have.
    let long = "q".repeat(65);
    let report = h3(
        shuck.port,
        json!([
            {"path": "/h3-given", "headers": [["x-request-id", "quic-7"]]},
            {"path": "/h3-none"},
            {"path": "/h3-bad", "headers": [["x-request-id", long]]},
            {"path": "/h3-under", "headers": [["x_request_id", "under-3"]]},
        ]),
        &[],
    );
    let a = answers(&report);
    let from_h3 = |i: usize| {
        common::h3::header(&a[i], "x-request-id")
            .unwrap()
            .to_owned()
    };
    assert_eq!(from_h3(0), "quic-7");
    assert_eq!(from_h3(3), "under-3");
    let made = |head: &str| {
        let v = head
            .lines()
            .find_map(|l| l.strip_prefix("x-request-id: "))
            .unwrap_or_else(|| panic!("no id in {head}"))
            .trim()
            .to_owned();
        assert!(
            v.len() == 32 && v.bytes().all(|b| b.is_ascii_hexdigit()),
            "{v}"
        );
        v
    };
    let ids = [
        ("HTTP/1.1", "/h1-given", "client-1".to_owned()),
        ("HTTP/1.1", "/h1-bad", made(&bad)),
        ("HTTP/2.0", "/h2-none", made(&h2)),
        ("HTTP/3.0", "/h3-given", "quic-7".to_owned()),
        ("HTTP/3.0", "/h3-none", from_h3(1)),
        ("HTTP/2.0", "/h2-bad", made(&h2_bad)),
        ("HTTP/3.0", "/h3-bad", from_h3(2)),
        ("HTTP/1.1", "/h1-none", made(&h1_none)),
        ("HTTP/1.1", "/h1-under", "under-1".to_owned()),
        ("HTTP/2.0", "/h2-given", "h2-given-1".to_owned()),
        ("HTTP/2.0", "/h2-under", "under-2".to_owned()),
        ("HTTP/3.0", "/h3-under", "under-3".to_owned()),
    ];
    assert_eq!(from_h3(1).len(), 32);
    assert_eq!(
        from_h3(2).len(),
        32,
        "a malformed ID over HTTP/3 is replaced"
    );
    let got = lines(&log, 12);
    let seen = origin.requests();
    for (proto, path, id) in &ids {
        let line = format!("{proto} {path} {id}");
        assert!(got.contains(&line), "no {line:?} in {got:?}");
        let s = seen.iter().find(|s| s.path == *path).unwrap();
        assert_eq!(
            s.all("x-request-id"),
            [id.as_str()],
            "the backend gets the one ID: {s:?}"
        );
        assert!(s.all("x_request_id").is_empty(), "{s:?}");
        assert!(
            s.all("connection")
                .iter()
                .all(|c| !c.to_ascii_lowercase().contains("request-id")),
            "{s:?}"
        );
    }
    let distinct: std::collections::HashSet<&String> = ids.iter().map(|i| &i.2).collect();
    assert_eq!(distinct.len(), 12);
    drop(shuck);
    // A peer not in --trusted-proxies (issue 60, point 9): its own ID never passes, over
    // any version, so no client chooses its request's ID or takes another request's.
    let shuck = Shuck::start(&[
        "--http",
        "--quic",
        "-b",
        &origin.spec,
        "--request-id-header",
        "X-Request-ID",
        "--request-id-response",
        "--trusted-proxies",
        "10.0.0.0/8",
    ]);
    for v in ["--http1.1", "--http2"] {
        let head = curl_head(&shuck, v, "/untrusted", &["-H", "X-Request-ID: chosen-1"]);
        assert!(!head.contains("chosen-1"), "{v}: {head}");
        made(&head);
    }
    let report = h3(
        shuck.port,
        json!([{"path": "/untrusted", "headers": [["x-request-id", "chosen-1"]]}]),
        &[],
    );
    let id = common::h3::header(&answers(&report)[0], "x-request-id").unwrap();
    assert!(id.len() == 32 && id != "chosen-1", "{id}");
    assert!(origin
        .requests()
        .iter()
        .filter(|r| r.path == "/untrusted")
        .all(|r| r.all("x-request-id") != ["chosen-1"]));
}

/// Sends raw HTTP/1.1 on one TLS connection; what came back.
fn raw_h1(shuck: &Shuck, req: &[u8]) -> Vec<u8> {
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    c.write_all(req).unwrap();
    c.flush().unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    out
}

#[test]
fn what_a_client_sends_never_breaks_a_line() {
    let dir = TempDir::new("access-escape");
    let log = dir.path("access.log");
    let jlog = dir.path("access.json");
    // In front of the built-in origin (it answers a head over its limit 431).
    let start = |log: &std::path::Path, format: &str| {
        Shuck::start(&[
            "--http",
            "--max-header-bytes",
            "131072",
            "--access-log",
            log.to_str().unwrap(),
            "--access-log-format",
            format,
        ])
    };
    let nasty = b"GET /a\"b\\c?x=%0a HTTP/1.1\r\nHost: h\r\nUser-Agent: q\"uote\\ \t tab \xff\xfe\r\nConnection: close\r\n\r\n";
    let junk: Vec<u8> = (0x80..=0xffu8).cycle().take(64 * 1024).collect();
    let mut long = b"GET /long HTTP/1.1\r\nHost: h\r\nReferer: ".to_vec();
    long.extend_from_slice(&junk);
    long.extend_from_slice(b"\r\nConnection: close\r\n\r\n");

    let shuck = start(&log, "combined");
    let answer = raw_h1(&shuck, nasty);
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let answer = raw_h1(&shuck, &long);
    assert!(
        answer.starts_with(b"HTTP/1.1 "),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // Two connections, maybe two worker threads: their lines in either order.
    let mut got = lines(&log, 2);
    got.sort_by_key(|l| l.contains("/long"));
    assert!(
        got[0].contains("\"GET /a\\x22b\\x5Cc?x=%0a HTTP/1.1\" 200 "),
        "{}",
        got[0]
    );
    assert!(
        got[0].ends_with("\"q\\x22uote\\x5C \\x09 tab \\xFF\\xFE\""),
        "{}",
        got[0]
    );
    for l in &got {
        assert!(
            l.is_ascii() && l.len() < 4 * 2048 + 200,
            "{} bytes",
            l.len()
        );
    }
    assert!(got[1].contains("\"GET /long HTTP/1.1\""), "{}", got[1]);

    // The same in JSON: every line parses, the bytes that are not UTF-8 kept as text.
    let shuck = start(&jlog, "json");
    raw_h1(&shuck, nasty);
    raw_h1(&shuck, &long);
    let mut got = json_lines(&jlog, 2);
    got.sort_by_key(|l| l["request_uri"] == "/long");
    assert_eq!(got[0]["http_user_agent"], "q\"uote\\ \t tab \\xFF\\xFE");
    assert_eq!(got[0]["request_uri"], "/a\"b\\c?x=%0a");
    assert_eq!(
        got[1]["http_referer"].as_str().unwrap().len(),
        4 * 2048,
        "capped at 2048 bytes, each written \\xHH"
    );
}

#[test]
fn each_end_has_its_cause() {
    if !require("curl", "curl") {
        return;
    }
    let (dir, log, origin) = started("access-causes");
    let (other, _) = rcgen_cert(&dir, "c", &["c.test"], false);
    let (cert, _) = rcgen_cert(&dir, "a", &["a.test"], false);
    let shuck = Shuck::start(&[
        "--http",
        "--pem-file",
        other.to_str().unwrap(),
        "--pem-file",
        cert.to_str().unwrap(),
        "-b",
        &origin.spec,
        "--route",
        "host=a.test;backend=default",
        "--idle-timeout",
        "1",
        "--access-log",
        log.to_str().unwrap(),
        "--access-log-format",
        "{server_protocol} {request_uri} {status} {cause} {termination_state}",
    ]);
    let resolve = format!("a.test:{}:127.0.0.1", shuck.port);
    let url = |p: &str| format!("https://a.test:{}{p}", shuck.port);
    for v in ["--http1.1", "--http2"] {
        // The answer cut by the backend, the backend silent past --idle-timeout.
        for p in ["/cut", "/slow/3000"] {
            let _ = Command::new("curl")
                .args([
                    "-sk",
                    v,
                    "--max-time",
                    "5",
                    "--resolve",
                    &resolve,
                    "-o",
                    "/dev/null",
                ])
                .arg(url(p))
                .output()
                .unwrap();
        }
    }
    // The client gone before the answer (HTTP/2: its stream's end is seen at once).
    let _ = Command::new("curl")
        .args(["-sk", "--http2", "--max-time", "0.3", "--resolve", &resolve])
        .args(["-o", "/dev/null"])
        .arg(url("/slow/800"))
        .output()
        .unwrap();
    // The client gone in the middle of a large answer (HTTP/1.1: a half-close is no abort;
    // the writes that fail after it are).
    {
        let mut c = tls_connect(shuck.addr(), &opts_for("a.test")).unwrap();
        c.write_all(b"GET /size/100000000 HTTP/1.1\r\nHost: a.test\r\n\r\n")
            .unwrap();
        let mut first = [0u8; 4096];
        c.read_exact(&mut first).unwrap();
    }
    // A name another certificate covers: 421.
    let mut opts = ClientOpts {
        sni: Some("a.test".into()),
        ..ClientOpts::default()
    };
    let mut c = tls_connect(shuck.addr(), &opts).unwrap();
    c.write_all(b"GET /other HTTP/1.1\r\nHost: c.test\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(c);
    let head = read_http_head(&mut r).unwrap();
    assert!(head.starts_with("HTTP/1.1 421"), "{head}");
    // A malformed head: 400.
    opts.sni = None;
    let answer = raw_h1(&shuck, b"GET / HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n");
    assert!(answer.starts_with(b"HTTP/1.1 400"));
    // A transfer coding shuck does not decode: 501 (issue 60, point 11).
    let answer = raw_h1(
        &shuck,
        b"POST /gz HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    );
    assert!(
        answer.starts_with(b"HTTP/1.1 501"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let got = lines(&log, 9);
    let has = |want: &str| {
        assert!(
            got.iter().any(|l| l == want),
            "no line {want:?} in\n{}",
            got.join("\n")
        )
    };
    has("HTTP/1.1 /cut 200 answer_cut SD");
    has("HTTP/2.0 /cut 200 answer_cut SD");
    has("HTTP/2.0 /slow/3000 504 backend_timeout sH");
    has("HTTP/1.1 /slow/3000 - backend_timeout sH");
    has("HTTP/1.1 /size/100000000 200 client_closed CD");
    has("HTTP/2.0 /slow/800 - client_closed CD");
    has("HTTP/1.1 /other 421 misdirected PR");
    // Refused lines keep their request line, as nginx's do (fail2ban's filters read it).
    has("HTTP/1.1 / 400 bad_request PR");
    has("HTTP/1.1 /gz 501 bad_request PR");
}

#[test]
fn no_server_is_a_503_line_and_tcp_mode_logs_each_connection() {
    if !require("curl", "curl") {
        return;
    }
    let dir = TempDir::new("access-503");
    let log = dir.path("access.log");
    let closed = format!("[127.0.0.1]:{}", free_port());
    let shuck = Shuck::start(&[
        "--http",
        "-b",
        &closed,
        "--access-log",
        log.to_str().unwrap(),
        "--access-log-format",
        "json",
    ]);
    assert_eq!(curl(&shuck, "--http1.1", &["/h1"], &[]), "503 ");
    assert_eq!(curl(&shuck, "--http2", &["/h2"], &[]), "503 ");
    let got = json_lines(&log, 2);
    for l in &got {
        assert_eq!(
            (&l["status"], &l["cause"]),
            (&json!(503), &json!("backend_refused")),
            "{l}"
        );
        assert_eq!(l["termination_state"], "SC");
    }
    drop(shuck);

    // TCP mode: a line per connection, its bytes each way; a refused backend's too. With
    // --log-connections too, the access log's line is the connection's, not one more.
    let tlog = dir.path("tcp.log");
    let echo = Origin::echo();
    let spec = echo.addr();
    let shuck = Shuck::start(&[
        "-b",
        &spec,
        "--log-connections",
        "--access-log",
        tlog.to_str().unwrap(),
        "--access-log-format",
        "json",
    ]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    c.write_all(&[7u8; 1000]).unwrap();
    let mut back = [0u8; 1000];
    c.read_exact(&mut back).unwrap();
    c.conn.send_close_notify();
    c.flush().unwrap();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    let l = &json_lines(&tlog, 1)[0];
    assert_eq!(l["server_protocol"], "TCP", "{l}");
    assert_eq!(
        (num(&l["bytes_received"]), num(&l["body_bytes_sent"])),
        (1000, 1000),
        "{l}"
    );
    assert_eq!(
        (&l["status"], &l["request_method"]),
        (&Value::Null, &json!("")),
        "{l}"
    );
    assert_eq!(l["cause"], "normal", "{l}");
    assert_eq!(
        (num(&l["queue_us"]), l["connect_us"].is_u64()),
        (0, true),
        "{l}"
    );
    assert!(
        !shuck.log().contains("connection closed"),
        "{}",
        shuck.log()
    );
    drop(shuck);
    let rlog = dir.path("refused.log");
    let shuck = Shuck::start(&["-b", &closed, "--access-log", rlog.to_str().unwrap()]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    let _ = c.read_to_end(&mut Vec::new());
    let got = lines(&rlog, 1);
    assert!(got[0].contains("\"-\" - 0 "), "{}", got[0]);
    let shuck_json = Shuck::start(&[
        "-b",
        &closed,
        "--access-log",
        rlog.to_str().unwrap(),
        "--access-log-format",
        "{server_protocol} {cause}",
    ]);
    let mut c = tls_connect(shuck_json.addr(), &ClientOpts::default()).unwrap();
    let _ = c.read_to_end(&mut Vec::new());
    let got = lines(&rlog, 2);
    assert_eq!(got[1], "TCP backend_refused");
}

#[test]
fn errors_only_and_sampling_choose_the_lines() {
    if !require("curl", "curl") {
        return;
    }
    let dir = TempDir::new("access-filters");
    let origin = H1Origin::start(None);
    let log = dir.path("errors.log");
    let shuck = Shuck::start(&[
        "--http",
        "-b",
        &origin.spec,
        "--access-log",
        log.to_str().unwrap(),
        "--access-log-errors-only",
        "--access-log-format",
        "{request_uri} {status}",
    ]);
    assert_eq!(
        curl(&shuck, "--http2", &["/a", "/b", "/bad", "/c"], &[]),
        "200 200 502 200 "
    );
    assert_eq!(lines(&log, 1), ["/bad 502"]);
    drop(shuck);
    let log = dir.path("sampled.log");
    let shuck = Shuck::start(&[
        "--http",
        "-n",
        "1",
        "-b",
        &origin.spec,
        "--access-log",
        log.to_str().unwrap(),
        "--access-log-sample",
        "3",
        "--access-log-format",
        "{request_uri} {status}",
    ]);
    let paths: Vec<String> = (1..=9).map(|i| format!("/size/{i}")).collect();
    let mut paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    paths.push("/bad");
    assert_eq!(
        curl(&shuck, "--http2", &paths, &[]),
        "200 200 200 200 200 200 200 200 200 502 "
    );
    assert_eq!(
        lines(&log, 4),
        ["/size/3 200", "/size/6 200", "/size/9 200", "/bad 502"]
    );
}

#[test]
fn logrotate_and_sigusr1_lose_no_line_under_load() {
    if !require("logrotate", "logrotate") {
        return;
    }
    let (dir, log, origin) = started("access-rotate");
    // One worker thread: its lines reach the file in the order of the requests.
    let shuck = Shuck::start(&[
        "--http",
        "-n",
        "1",
        "-b",
        &origin.spec,
        "--access-log",
        log.to_str().unwrap(),
        "--access-log-format",
        "{request_uri}",
    ]);
    let conf = dir.path("rotate.conf");
    std::fs::write(
        &conf,
        format!(
            "{} {{\n  rotate 5\n  missingok\n  postrotate\n    kill -USR1 {}\n  endscript\n}}\n",
            log.display(),
            shuck.pid()
        ),
    )
    .unwrap();
    let state = dir.path("rotate.state");
    let addr = shuck.addr();
    // 600 requests on keep-alive connections of 100 each, while the log is rotated twice.
    let load = std::thread::spawn(move || {
        for conn in 0..6 {
            let c = tls_connect(addr, &ClientOpts::default()).unwrap();
            let mut r = BufReader::new(c);
            for i in 0..100 {
                let req = format!("GET /n/{} HTTP/1.1\r\nHost: x\r\n\r\n", conn * 100 + i);
                r.get_mut().write_all(req.as_bytes()).unwrap();
                let head = read_http_head(&mut r).unwrap();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
            }
        }
    });
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(150));
        let out = Command::new("logrotate")
            .arg("-f")
            .arg("-s")
            .arg(&state)
            .arg(&conf)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "logrotate: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    load.join().unwrap();
    assert!(
        shuck.wait_log("access log opened again", Duration::from_secs(5)),
        "{}",
        shuck.log()
    );
    std::thread::sleep(Duration::from_millis(500));
    let mut seen = Vec::new();
    for f in [
        dir.path("access.log.2"),
        dir.path("access.log.1"),
        log.clone(),
    ] {
        seen.extend(
            std::fs::read_to_string(&f)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned),
        );
    }
    let want: Vec<String> = (0..600).map(|i| format!("/n/{i}")).collect();
    assert_eq!(
        seen, want,
        "every request once, in order, across the rotated files"
    );
    assert!(
        std::fs::metadata(dir.path("access.log.1")).is_ok(),
        "logrotate rotated the file"
    );
}

#[test]
fn a_sink_nobody_reads_costs_counted_drops_not_requests() {
    if !require("h2load", "nghttp2-client") {
        return;
    }
    let dir = TempDir::new("access-stall");
    let fifo = dir.path("fifo");
    sh(&format!("mkfifo {}", fifo.display()));
    // A reader that opens the FIFO and never reads: writes block once its 64 KiB are full.
    let mut reader = Command::new("sh")
        .arg("-c")
        .arg(format!("exec 3<{}; sleep 120", fifo.display()))
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let _ = reader.try_wait();
    let _reader = Kill(reader);
    let origin = H1Origin::start(None);
    let stats = free_port();
    let stats_s = stats.to_string();
    let mut shuck = Shuck::start(&[
        "--http",
        "-b",
        &origin.spec,
        "--stats",
        &stats_s,
        "--access-log",
        &format!("fifo:{}", fifo.display()),
        "--access-log-format",
        "json",
    ]);
    let out = Command::new("h2load")
        .args(["-n", "40000", "-c", "4", "-m", "20", "-T", "30"])
        .arg(format!("https://127.0.0.1:{}/size/1", shuck.port))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("40000 succeeded, 0 failed, 0 errored"),
        "every request answered while the log stalls: {text}"
    );
    let (_, m) = scrape(stats, "/metrics");
    let dropped = sample(&m, "shuck_access_log_dropped_total");
    assert!(dropped > 10_000.0, "drops counted: {dropped}\n{m}");
    assert!(shuck.wait_log("access log: lines dropped", Duration::from_secs(5)));
    assert_eq!(
        shuck.log().matches("access log: lines dropped").count(),
        1,
        "warned once an episode"
    );
    // Opening the log again (SIGUSR1) and stopping wait on no stalled write: requests go
    // on being answered, and shuck stops within its grace.
    shuck.signal("USR1");
    assert!(shuck.wait_log("access log opened again", Duration::from_secs(5)));
    let out = Command::new("h2load")
        .args(["-n", "100", "-c", "1", "-T", "10"])
        .arg(format!("https://127.0.0.1:{}/size/1", shuck.port))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("100 succeeded"), "{text}");
    shuck.signal("TERM");
    assert!(
        shuck.wait_exit(Duration::from_secs(15)).is_some(),
        "shuck stops with its log stalled: {}",
        shuck.log()
    );
}

#[test]
fn syslog_over_udp_gets_rfc5424_lines() {
    if !require("curl", "curl") {
        return;
    }
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let target = format!("udp://{}", sock.local_addr().unwrap());
    let origin = H1Origin::start(None);
    let start = |target: &str, more: &[&str]| {
        let args = ["--http", "-b", &origin.spec, "--access-log", target];
        Shuck::start(&[&args[..], more].concat())
    };
    let shuck = start(&target, &["--syslog-facility", "local0"]);
    assert_eq!(curl(&shuck, "--http1.1", &["/size/3"], &[]), "200 ");
    let mut buf = [0u8; 2048];
    let n = sock.recv(&mut buf).unwrap();
    let msg = String::from_utf8_lossy(&buf[..n]);
    // local0 (16) at info (6): PRI 134; version 1; then the line.
    assert!(msg.starts_with("<134>1 "), "{msg}");
    // RFC 5424 §6.2.3: TIME-SECFRAC is at most six digits (issue 60, point 13).
    let stamp = msg.split(' ').nth(1).unwrap();
    let frac = stamp.split_once('.').map(|(_, f)| f.trim_end_matches('Z'));
    assert_eq!(stamp.len(), "2026-01-01T00:00:00.000000Z".len(), "{stamp}");
    assert_eq!(frac.map(str::len), Some(6), "{stamp}");
    assert!(msg.contains(" shuck "), "{msg}");
    assert!(msg.contains(" access - 127.0.0.1 - - ["), "{msg}");
    assert!(
        msg.contains("\"GET /size/3 HTTP/1.1\" 200 3 \"-\" \"curl/"),
        "{msg}"
    );
    drop(shuck);

    // A syslog's datagram socket (`syslog` is /dev/log's, this machine's own).
    let dir = TempDir::new("access-unix");
    let path = dir.path("log.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let target = format!("unix:{}", path.display());
    let shuck = start(&target, &["--access-log-format", "json"]);
    assert_eq!(curl(&shuck, "--http2", &["/size/4"], &[]), "200 ");
    let n = sock.recv(&mut buf).unwrap();
    let msg = String::from_utf8_lossy(&buf[..n]);
    // The default facility (daemon, 3) at info: PRI 30.
    let (head, line) = msg.split_once(" access - ").unwrap();
    assert!(head.starts_with("<30>1 "), "{msg}");
    let v: Value = serde_json::from_str(line).unwrap();
    assert_eq!(
        (&v["request_uri"], &v["status"]),
        (&json!("/size/4"), &json!(200))
    );
}

#[test]
fn bad_access_log_flags_are_named() {
    let (code, err) = run_to_exit(&[
        "--access-log",
        "stderr",
        "--access-log-format",
        "{client} {status}",
        "--test",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("unknown field {client} at byte 0"), "{err}");
    let (code, err) = run_to_exit(&["--request-id-response", "--http", "--test"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--request-id-response: needs --request-id-header"),
        "{err}"
    );
    let (code, err) = run_to_exit(&["--request-id-header", "X Id", "--http", "--test"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("a header name is 1 to 64 letters, digits and -"),
        "{err}"
    );
    let (code, err) = run_to_exit(&["--request-id-header", "X-Id", "--test"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("needs --http"), "{err}");
    // A header that frames or routes the request (its own would be taken for the ID).
    for name in [
        "Content-Length",
        "transfer-encoding",
        "Host",
        "X-Forwarded-For",
    ] {
        let (code, err) = run_to_exit(&["--request-id-header", name, "--http", "--test"]);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains("--request-id-header") && err.contains("already uses"),
            "{name}: {err}"
        );
    }
    let (code, err) = run_to_exit(&[
        "--request-id-header",
        "X-Client",
        "--client-cert-header",
        "x_client",
        "--http",
        "--test",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--client-cert-header's too"), "{err}");
    let (code, err) = run_to_exit(&["--access-log-sample", "3", "--test"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--access-log-sample: needs --access-log"),
        "{err}"
    );
    let (code, err) = run_to_exit(&["--access-log", "tcp://127.0.0.1:514", "--test"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("only udp:// is a network target"), "{err}");
    let (code, err) = run_to_exit(&["--access-log", "unix:", "--test"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("unix: needs the syslog socket's path"),
        "{err}"
    );
    let dir = TempDir::new("access-conf");
    let conf = dir.path("shuck.conf");
    std::fs::write(
        &conf,
        "access-log = \"stderr\"\naccess-log-format = \"{status\"\n",
    )
    .unwrap();
    let (code, err) = run_to_exit(&["--config", conf.to_str().unwrap(), "--test"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("line 2") && err.contains("unbalanced {"),
        "{err}"
    );
}

#[test]
fn a_wait_for_a_server_s_slot_is_queue_time_not_connect_time() {
    if !require("curl", "curl") {
        return;
    }
    let (_dir, log, origin) = started("access-queue");
    // One connection at a time to the server: of two requests at once, one waits.
    let spec = format!("{},maxconn=1", origin.spec);
    let shuck = Shuck::start(&[
        "--http",
        "-b",
        &spec,
        "--queue-timeout",
        "10",
        "--access-log",
        log.to_str().unwrap(),
        "--access-log-format",
        "json",
    ]);
    // HTTP/1.1: two clients at once, the second's connection waits for the first's to
    // end (each holds its backend connection while it lasts).
    std::thread::scope(|s| {
        let both = ["/slow/700", "/slow/701"].map(|p| {
            let shuck = &shuck;
            s.spawn(move || curl(shuck, "--http1.1", &[p], &[]))
        });
        for t in both {
            assert_eq!(t.join().unwrap(), "200 ");
        }
    });
    // HTTP/2: two streams of one connection; the second waits for the first's backend
    // connection.
    let got = curl(
        &shuck,
        "--http2",
        &["/slow/700", "/slow/701"],
        &["--parallel", "--parallel-max", "2"],
    );
    assert_eq!(got, "200 200 ");
    let all = json_lines(&log, 4);
    for proto in ["HTTP/1.1", "HTTP/2.0"] {
        let two: Vec<&Value> = all
            .iter()
            .filter(|l| l["server_protocol"] == proto)
            .collect();
        assert_eq!(two.len(), 2, "{all:?}");
        let mut queued: Vec<u64> = two.iter().map(|l| num(&l["queue_us"])).collect();
        queued.sort();
        // The second waited for the first's answer (700 ms), in the queue; connecting
        // took no such time for either.
        assert!(
            queued[0] < 200_000 && queued[1] >= 400_000,
            "{proto}: {two:?}"
        );
        for l in &two {
            assert!(num(&l["connect_us"]) < 200_000, "{l}");
            assert!(
                num(&l["queue_us"]) + num(&l["connect_us"]) <= num(&l["request_us"]),
                "{l}"
            );
        }
    }
}

#[test]
fn each_frontend_writes_to_its_own_log_or_none() {
    if !require("curl", "curl") || !aioquic() {
        return;
    }
    let (dir, main_log, origin) = started("access-frontends");
    let (own, moved) = (dir.path("own.log"), dir.path("moved.log"));
    let ports = [free_port(), free_port(), free_port()];
    let (pem, _) = rcgen_cert(&dir, "c", &["localhost"], false);
    let conf = dir.path("shuck.conf");
    // The first frontend writes where --access-log says; the second to its own file; the
    // third nowhere.
    let write = |second: &std::path::Path| {
        let text = format!(
            "backend = \"{}\"\npem-file = \"{}\"\nhttp = on\naccess-log = \"{}\"\n\
             access-log-format = \"{{frontend}} {{request_uri}}\"\n\
             frontend = {{\n host = \"127.0.0.1\"\n port = \"{}\"\n}}\n\
             frontend = {{\n host = \"127.0.0.1\"\n port = \"{}\"\n access-log = \"{}\"\n quic = on\n}}\n\
             frontend = {{\n host = \"127.0.0.1\"\n port = \"{}\"\n access-log = \"off\"\n}}\n",
            origin.spec,
            pem.display(),
            main_log.display(),
            ports[0],
            ports[1],
            second.display(),
            ports[2],
        );
        let tmp = dir.path("shuck.conf.new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &conf).unwrap();
    };
    write(&own);
    let shuck = Shuck::start_raw(&["--config", conf.to_str().unwrap()], ports[0]);
    let get = |port: u16, version: &str, path: &str| {
        let out = Command::new("curl")
            .args(["-sk", version, "--max-time", "10", "-o", "/dev/null"])
            .args(["-w", "%{http_code}"])
            .arg(format!("https://127.0.0.1:{port}{path}"))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "200", "{path}");
    };
    for (i, version) in ["--http1.1", "--http2"].iter().enumerate() {
        for (port, name) in ports.iter().zip(["main", "own", "none"]) {
            get(*port, version, &format!("/{name}/{i}"));
        }
    }
    let report = h3(ports[1], json!([{"path": "/own/2"}]), &[]);
    assert_eq!(answers(&report).len(), 1, "{report}");
    let fe = |i: usize| format!("[127.0.0.1]:{}", ports[i]);
    // Each connection's lines come from the worker thread that served it: sorted, as
    // those threads hand theirs on in no set order.
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(
        sorted(lines(&main_log, 2)),
        [format!("{} /main/0", fe(0)), format!("{} /main/1", fe(0))]
    );
    assert_eq!(
        sorted(lines(&own, 3)),
        [0, 1, 2].map(|i| format!("{} /own/{i}", fe(1)))
    );
    // A reload moves the second frontend's log to another file (the master opens it).
    write(&moved);
    shuck.signal("HUP");
    assert!(
        shuck.wait_log("SIGHUP: configuration reloaded", Duration::from_secs(10)),
        "{}",
        shuck.log()
    );
    get(ports[1], "--http2", "/own/after");
    get(ports[2], "--http1.1", "/none/after");
    assert_eq!(lines(&moved, 1), [format!("{} /own/after", fe(1))]);
    assert_eq!(lines(&own, 3).len(), 3, "nothing more in the first file");
    assert_eq!(lines(&main_log, 2).len(), 2);

    drop(shuck);

    // TCP mode: a frontend's own log has its connections' lines.
    let echo = Origin::echo();
    let tcp_own = dir.path("tcp-own.log");
    let shuck = Shuck::start(&[
        "-f",
        &format!("[127.0.0.1]:{};access-log={}", ports[2], tcp_own.display()),
        "-b",
        &echo.addr(),
    ]);
    for port in [shuck.port, ports[2]] {
        let addr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut c = tls_connect(addr, &ClientOpts::default()).unwrap();
        c.write_all(b"ping").unwrap();
        let mut back = [0u8; 4];
        c.read_exact(&mut back).unwrap();
    }
    let got = lines(&tcp_own, 1);
    assert!(got[0].contains("\"-\" - 4 "), "{}", got[0]);

    // A frontend's access-log that is no target is named with its line.
    std::fs::write(
        &conf,
        "frontend = {\n port = \"1\"\n access-log = \"tcp://127.0.0.1:514\"\n}\n",
    )
    .unwrap();
    let (code, err) = run_to_exit(&["--config", conf.to_str().unwrap(), "--test"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("line 3") && err.contains("only udp:// is a network target"),
        "{err}"
    );
}

/// Issue 60, point 8: the master opens the log as root, so a directory its worker's user
/// may write (where it could plant a link), or a FIFO at the path (an open that waits for a
/// reader for ever), is refused at start with the path named; a FIFO asked for by
/// `fifo:PATH`, a regular file and `/dev/null` are written.
#[test]
fn the_log_is_opened_only_where_root_may_write_safely() {
    let dir = TempDir::new("access-open");
    let run = |target: &str| {
        let started = std::time::Instant::now();
        let r = run_to_exit(&with_cert(&[
            "--http",
            "-f",
            "[127.0.0.1]:1",
            "-b",
            "127.0.0.1:1",
            "--access-log",
            target,
            "--user",
            "nobody",
        ]));
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{target}: hung"
        );
        r
    };
    let fifo = dir.path("fifo");
    sh(&format!("mkfifo {}", fifo.display()));
    let (code, err) = run(fifo.to_str().unwrap());
    assert_ne!(code, Some(0));
    assert!(err.contains("fifo:PATH") && err.contains("fifo"), "{err}");
    let theirs = dir.path("theirs");
    std::fs::create_dir(&theirs).unwrap();
    sh(&format!("chown nobody {}", theirs.display()));
    let (code, err) = run(theirs.join("access.log").to_str().unwrap());
    assert_ne!(code, Some(0));
    assert!(
        err.contains("owned by uid") && err.contains("theirs"),
        "{err}"
    );
    let open = dir.path("open");
    std::fs::create_dir(&open).unwrap();
    sh(&format!("chmod 0777 {}", open.display()));
    let (code, err) = run(open.join("access.log").to_str().unwrap());
    assert_ne!(code, Some(0));
    assert!(err.contains("writable by group or others"), "{err}");
    let device = "/dev/zero";
    let (code, err) = run(device);
    assert_ne!(code, Some(0));
    assert!(err.contains("not a regular file"), "{err}");
}
