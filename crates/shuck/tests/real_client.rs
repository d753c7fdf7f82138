//! `--trusted-proxies` (issue 61 point 6): the client behind a CDN. From a trusted peer a
//! request's `X-Forwarded-For` (else `Forwarded`'s `for=`) names its client, which the
//! backend, the access log, the bans and rules and the request rate then see; from anyone
//! else the fields are the peer's forgery and are replaced. Over HTTP/1.1 and HTTP/2
//! (curl) and HTTP/3 (aioquic), from 127.0.0.1 (trusted) and other loopback addresses (not).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::h1origin::H1Origin;
use common::*;
use serde_json::json;

const VERSIONS: [&str; 3] = ["HTTP/1.1", "HTTP/2", "HTTP/3"];

/// The status of a GET of `path` over `version` from local address `from`, with `fields`,
/// and its `Retry-After`.
fn ask(
    port: u16,
    version: &str,
    from: &str,
    path: &str,
    fields: &[(&str, &str)],
) -> (u16, Option<String>) {
    if version == "HTTP/3" {
        let mut all = vec![
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "localhost"),
            (":path", path),
        ];
        all.extend_from_slice(fields);
        let req = json!([[{"raw_headers": all, "timeout": 5}]]);
        let extra = [
            "--sni",
            "localhost",
            "--deadline",
            "30",
            "--local-host",
            from,
        ];
        let report = common::h3::h3(port, req, &extra);
        let a = &report["requests"][0];
        let status = a["status"].as_str().and_then(|s| s.parse().ok());
        let retry = common::h3::header(a, "retry-after").map(str::to_owned);
        return (status.unwrap_or_else(|| panic!("{report}")), retry);
    }
    let flag = if version == "HTTP/2" {
        "--http2"
    } else {
        "--http1.1"
    };
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sk",
        flag,
        "--max-time",
        "10",
        "-D",
        "-",
        "-o",
        "/dev/null",
    ])
    .args(["--interface", from])
    .args([
        "--connect-to",
        &format!("localhost:{port}:127.0.0.1:{port}"),
    ]);
    for (n, v) in fields {
        cmd.args(["-H", &format!("{n}: {v}")]);
    }
    let out = cmd
        .arg(format!("https://localhost:{port}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let status = (lines.next().and_then(|l| l.split(' ').nth(1)))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("curl {version} from {from}: {text:?}"));
    let retry = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.eq_ignore_ascii_case("retry-after"))
        .map(|(_, v)| v.trim().to_owned());
    (status, retry)
}

/// What the backend got as `X-Forwarded-For` for the request of `path`.
fn forwarded_for(origin: &H1Origin, path: &str) -> Option<String> {
    let seen = origin.seen.lock().unwrap();
    let s = seen.iter().find(|s| s.path == path)?;
    let all: Vec<&str> = (s.headers.iter())
        .filter(|(n, _)| n == "x-forwarded-for")
        .map(|(_, v)| v.as_str())
        .collect();
    Some(all.join(" | "))
}

/// The access log's `remote_addr` for the request of `path`.
fn logged_client(log: &std::path::Path, path: &str) -> Option<String> {
    let line = log_line(log, |v| v["request_uri"] == path)?;
    line["remote_addr"].as_str().map(str::to_owned)
}

/// From the trusted peer the client its fields name is forwarded, logged, routed and
/// judged; from another, the same fields are a forgery, replaced by the peer's address.
#[test]
fn a_trusted_proxys_client_is_forwarded_logged_and_judged_and_a_forgery_is_not() {
    if !require("curl", "curl") || !common::h3::aioquic() {
        return;
    }
    let dir = TempDir::new("real-client");
    let log = dir.path("access.log");
    let origin = H1Origin::start(None);
    let log_arg = log.to_str().unwrap().to_owned();
    let shuck = Shuck::start(&[
        "--http",
        "--quic",
        "-b",
        &origin.spec,
        "--trusted-proxies",
        "127.0.0.1/32",
        "--client-deny",
        "198.51.100.66/32",
        "--client-request-rate",
        "1/m,burst=3",
        // One connection at a time per client: the trusted peer's many are not held to it.
        "--client-max-conns",
        "1",
        "--access-log",
        &log_arg,
        "--access-log-format",
        "json",
    ]);
    let port = shuck.port;
    let fail = |what: &str| format!("{what}\n{}", shuck.log());
    for (i, v) in VERSIONS.iter().enumerate() {
        // A chain through one more proxy of ours: its rightmost untrusted hop.
        let path = format!("/{i}/chain");
        let xff = format!("203.0.113.{i}, 127.0.0.1");
        let got = ask(port, v, "127.0.0.1", &path, &[("x-forwarded-for", &xff)]);
        assert_eq!(got.0, 200, "{}", fail(v));
        let want = format!("203.0.113.{i}");
        assert_eq!(forwarded_for(&origin, &path), Some(want.clone()), "{v}");
        assert_eq!(logged_client(&log, &path), Some(want), "{v}");
        // The peer's port is not the client's: none is logged.
        let line = log_line(&log, |l| l["request_uri"] == path.as_str()).unwrap();
        assert_eq!(line["remote_port"], serde_json::Value::Null, "{v}: {line}");

        // Forwarded (RFC 7239), an IPv6 node with its port, when there is no XFF.
        let path = format!("/{i}/forwarded");
        let fwd = format!("for=\"[2001:db8::{}]:4711\";proto=https", 10 + i);
        let got = ask(port, v, "127.0.0.1", &path, &[("forwarded", &fwd)]);
        assert_eq!(got.0, 200, "{}", fail(v));
        let want = format!("2001:db8::{}", 10 + i);
        assert_eq!(forwarded_for(&origin, &path), Some(want.clone()), "{v}");
        assert_eq!(logged_client(&log, &path), Some(want), "{v}");

        // Nothing believable named (`unknown`), or nothing at all: the peer is the client.
        for (name, fields) in [
            ("unknown", &[("x-forwarded-for", "unknown")][..]),
            ("none", &[][..]),
        ] {
            let path = format!("/{i}/{name}");
            assert_eq!(ask(port, v, "127.0.0.1", &path, fields).0, 200, "{v}");
            let got = forwarded_for(&origin, &path);
            assert_eq!(got.as_deref(), Some("127.0.0.1"), "{v} {name}");
        }

        // From a peer not trusted (one for each version, each within its own rate): a
        // forgery, replaced, and logged as the peer.
        let untrusted = format!("127.0.0.{}", 10 + i);
        let path = format!("/{i}/forged");
        let forged = [("x-forwarded-for", "203.0.113.200")];
        assert_eq!(ask(port, v, &untrusted, &path, &forged).0, 200, "{v}");
        let got = forwarded_for(&origin, &path);
        assert_eq!(got.as_deref(), Some(untrusted.as_str()), "{v}");
        let logged = logged_client(&log, &path);
        assert_eq!(logged.as_deref(), Some(untrusted.as_str()), "{v}");

        // A client the rules deny, named by the trusted peer: refused, never passed on.
        let path = format!("/{i}/denied");
        let denied = [("x-forwarded-for", "198.51.100.66")];
        assert_eq!(ask(port, v, "127.0.0.1", &path, &denied).0, 403, "{v}");
        assert_eq!(forwarded_for(&origin, &path), None, "{v}");
        // ...and the same from an untrusted peer is only a field: served.
        let path = format!("/{i}/denied-forged");
        assert_eq!(ask(port, v, &untrusted, &path, &denied).0, 200, "{v}");

        // The request rate is the named client's: its fourth in a minute is refused while
        // another client behind the same peer is served.
        let busy = format!("198.51.100.{}", 10 + i);
        for n in 0..3 {
            let path = format!("/{i}/rate/{n}");
            let got = ask(port, v, "127.0.0.1", &path, &[("x-forwarded-for", &busy)]);
            assert_eq!(got.0, 200, "{v} request {n}");
        }
        let path = format!("/{i}/rate/over");
        let (status, retry) = ask(port, v, "127.0.0.1", &path, &[("x-forwarded-for", &busy)]);
        assert_eq!(status, 429, "{}", fail(v));
        assert!(retry.is_some_and(|r| r.parse::<u64>().is_ok_and(|s| s >= 1)));
        assert_eq!(forwarded_for(&origin, &path), None, "{v}");
        let other = format!("198.51.100.{}", 20 + i);
        let path = format!("/{i}/rate/other");
        let got = ask(port, v, "127.0.0.1", &path, &[("x-forwarded-for", &other)]);
        assert_eq!(got.0, 200, "{v}");
    }
}

/// Whether a TCP connection to `port` from local address `from` is kept open, with
/// nothing to read, for its handshake (a refused client is closed at accept); the
/// connection itself, to be held.
fn kept(from: &str, port: u16) -> (bool, Option<tokio::net::TcpStream>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(format!("{from}:0").parse().unwrap()).unwrap();
        let to = format!("127.0.0.1:{port}").parse().unwrap();
        let Ok(mut c) = s.connect(to).await else {
            return (false, None); // refused so early that the connect saw the reset
        };
        let mut byte = [0u8; 1];
        let read = tokio::io::AsyncReadExt::read(&mut c, &mut byte);
        let open = tokio::time::timeout(Duration::from_millis(700), read)
            .await
            .is_err();
        (open, Some(c))
    })
}

/// The trusted peer's own connections are not held to the per-client connection limit
/// (its clients are judged by its requests), while any other client still is; a trusted
/// peer the rules deny is still refused.
#[test]
fn a_trusted_proxy_may_hold_more_connections_than_a_client() {
    let origin = H1Origin::start(None);
    let shuck = Shuck::start(&[
        "--http",
        "-b",
        &origin.spec,
        "--trusted-proxies",
        "127.0.0.0/30",
        "--client-deny",
        "127.0.0.3/32",
        "--client-max-conns",
        "1",
    ]);
    let port = shuck.port;
    let mut held = Vec::new();
    for n in 0..4 {
        let (open, c) = kept("127.0.0.1", port);
        assert!(open, "trusted connection {n} closed: {}", shuck.log());
        held.push(c);
    }
    let (open, _first) = kept("127.0.0.5", port);
    assert!(open, "{}", shuck.log());
    let (open, _) = kept("127.0.0.5", port);
    assert!(!open, "an untrusted client's second connection was kept");
    let (open, _) = kept("127.0.0.3", port);
    assert!(!open, "a denied trusted peer was kept");
}

/// What the backend got as `X-Request-ID` for the request of `path`.
fn request_id(origin: &H1Origin, path: &str) -> Option<String> {
    let seen = origin.seen.lock().unwrap();
    let s = seen.iter().find(|s| s.path == path)?;
    (s.headers.iter())
        .find(|(n, _)| n == "x-request-id")
        .map(|(_, v)| v.clone())
}

/// `--trusted-proxies` follows SIGHUP over every version: the peer trusted before is a
/// client like any other after (its forwarding fields and request ID replaced), the one
/// trusted after is believed; a list that does not parse is refused and the running one
/// stays.
#[test]
fn the_trusted_proxies_follow_a_reload() {
    if !require("curl", "curl") || !common::h3::aioquic() {
        return;
    }
    let dir = TempDir::new("real-client-reload");
    let origin = H1Origin::start(None);
    let port = free_port();
    let conf = dir.path("shuck.conf");
    let write = |trusted: &str| {
        let text = format!(
            "http = on\nquic = on\nfrontend = \"[127.0.0.1]:{port}\"\npem-file = \"{}\"\n\
             backend = \"{}\"\nrequest-id-header = \"X-Request-ID\"\ntrusted-proxies = \"{trusted}\"\n",
            test_cert(),
            origin.spec
        );
        std::fs::write(&conf, text).unwrap();
    };
    write("127.0.0.1/32");
    let shuck = Shuck::start_raw(&["--config", conf.to_str().unwrap()], port);
    // Whether a request from `from` over `v` had its fields believed.
    let believed = |round: &str, v: &str, from: &str| -> bool {
        let path = format!("/{round}/{}/{from}", v.replace('/', ""));
        let fields = [
            ("x-forwarded-for", "203.0.113.7"),
            ("x-request-id", "chosen-by-the-peer"),
        ];
        let got = ask(port, v, from, &path, &fields);
        assert_eq!(got.0, 200, "{v} from {from}: {}", shuck.log());
        let xff = forwarded_for(&origin, &path);
        let id = request_id(&origin, &path);
        let trusted = xff.as_deref() == Some("203.0.113.7");
        assert_eq!(
            trusted,
            id.as_deref() == Some("chosen-by-the-peer"),
            "{v} from {from}: the client and the ID are believed together ({xff:?}, {id:?})"
        );
        if !trusted {
            assert_eq!(xff.as_deref(), Some(from), "{v} from {from}");
        }
        trusted
    };
    for v in VERSIONS {
        assert!(believed("before", v, "127.0.0.1"), "{v}");
        assert!(!believed("before", v, "127.0.0.20"), "{v}");
    }
    write("127.0.0.20/32");
    shuck.signal("HUP");
    assert!(
        shuck.wait_log("SIGHUP: 1 trusted proxy range(s)", Duration::from_secs(10)),
        "{}",
        shuck.log()
    );
    for v in VERSIONS {
        assert!(!believed("after", v, "127.0.0.1"), "{v}");
        assert!(believed("after", v, "127.0.0.20"), "{v}");
    }
    write("127.0.0.1/33");
    shuck.signal("HUP");
    assert!(
        shuck.wait_log("127.0.0.1/33", Duration::from_secs(10)),
        "a bad list is refused, naming it: {}",
        shuck.log()
    );
    for v in VERSIONS {
        assert!(believed("refused", v, "127.0.0.20"), "{v}");
    }
}
