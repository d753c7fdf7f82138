//! ACME against a real CA: Debian's `pebble` and its test DNS, every name resolving to
//! 127.0.0.1, pebble validating on shuck's own ports. What is checked is what a client
//! sees (`openssl s_client` verifying the chain against pebble's root), what the state
//! directory holds, what pebble received, the log and the metrics.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::pebble::{Pebble, PebbleOpts};
use common::*;

/// What a client verifying against `root` sees for `name` on `port`: whether the chain
/// verified for that name, and the leaf's serial.
fn served(port: u16, name: &str, root: &Path) -> (bool, String) {
    let out = sh_out(&format!(
        "echo | timeout 10 openssl s_client -connect 127.0.0.1:{port} -servername {name} -CAfile {} -verify_hostname {name} 2>&1",
        root.display()
    ));
    let serial = sh_out(&format!(
        "echo | timeout 10 openssl s_client -connect 127.0.0.1:{port} -servername {name} 2>/dev/null | openssl x509 -noout -serial 2>/dev/null"
    ));
    (
        out.contains("Verify return code: 0 (ok)"),
        serial.trim().to_owned(),
    )
}

/// A shuck on `port` (the port pebble checks tls-alpn-01 on, when it is) ordering from
/// `pebble` into `state`, one certificate per entry of `names`, forwarding to `backend`;
/// `extra` comes last, so it may override (`--acme-ca-file`).
fn acme_shuck(
    pebble: &Pebble,
    port: u16,
    state: &Path,
    backend: &str,
    names: &[&str],
    extra: &[&str],
) -> Shuck {
    let directory = pebble.directory();
    let ca = pebble.https_ca();
    let fe = format!("[127.0.0.1]:{port}");
    let mut all = vec![
        "-f",
        fe.as_str(),
        "-b",
        backend,
        "--acme-directory",
        &directory,
        "--acme-agree-tos",
        "--acme-contact",
        "ops@shuck.test",
        "--acme-state",
        state.to_str().unwrap(),
        "--acme-ca-file",
        ca.to_str().unwrap(),
    ];
    for n in names {
        all.extend(["--acme-domain", n]);
    }
    all.extend(extra.iter().copied());
    Shuck::start_raw(&all, port)
}

/// [`acme_shuck`] for one certificate, `name`, waited for until it is issued (a minute at
/// most; the log of both shuck and pebble otherwise).
fn issued_shuck(
    pebble: &Pebble,
    port: u16,
    state: &Path,
    backend: &str,
    name: &str,
    extra: &[&str],
) -> Shuck {
    let s = acme_shuck(pebble, port, state, backend, &[name], extra);
    assert!(
        s.wait_log(
            &format!("ACME: certificate for {name} issued"),
            Duration::from_secs(60)
        ),
        "{}\npebble: {}",
        s.log(),
        pebble.log()
    );
    s
}

fn metric(port: u16, series: &str) -> f64 {
    let (_, body) = scrape(port, "/metrics");
    sample(&body, series)
}

#[test]
fn tls_alpn_01_and_http_01_certificates_are_issued_and_served() {
    let origin = Origin::echo();
    let (tls_port, http_port) = (free_port(), free_port());
    let Some(pebble) = Pebble::start(&PebbleOpts {
        http_port,
        ..PebbleOpts::local(tls_port)
    }) else {
        return;
    };
    let dir = TempDir::new("acme-issue");
    let (state_a, state_b) = (dir.path("a"), dir.path("b"));
    let (stats_a, stats_b) = (free_port(), free_port());
    let (sa, sb) = (stats_a.to_string(), stats_b.to_string());

    // A answers tls-alpn-01 on its frontend (pebble's tlsPort).
    let a = acme_shuck(
        &pebble,
        tls_port,
        &state_a,
        &origin.port_spec,
        &["one.test", "two.test,www.two.test"],
        &["--stats", &sa],
    );
    // B answers http-01 on its plain-HTTP listener, --redirect-listen (pebble's httpPort):
    // one listener for the redirects and the challenges.
    let listen = format!("127.0.0.1:{http_port}");
    let b = acme_shuck(
        &pebble,
        free_port(),
        &state_b,
        &origin.port_spec,
        &["three.test", "four.test"],
        &[
            "--acme-challenge",
            "http-01",
            "--redirect-listen",
            &listen,
            "--acme-key-type",
            "rsa-2048",
            "--stats",
            &sb,
        ],
    );

    for (s, n) in [(&a, 2), (&b, 2)] {
        assert!(
            wait_until(Duration::from_secs(60), || s
                .log()
                .matches("ACME: certificate for")
                .count()
                >= n),
            "certificates not issued: {}\npebble: {}",
            s.log(),
            pebble.log()
        );
    }
    assert!(a
        .log()
        .contains("answered an ACME tls-alpn-01 challenge for www.two.test"));
    assert!(b.log().contains("answered an ACME http-01 challenge"));
    let root = pebble.issuing_root();
    for (port, name) in [
        (a.port, "one.test"),
        (a.port, "two.test"),
        (a.port, "www.two.test"),
        (b.port, "three.test"),
        (b.port, "four.test"),
    ] {
        assert!(
            wait_until(Duration::from_secs(10), || served(port, name, &root).0),
            "{name} on {port} does not verify against pebble's root"
        );
    }
    // A name of another certificate is not served by this one.
    let (one, _) = served(a.port, "two.test", &root);
    assert!(one);
    let (other, _) = served(a.port, "elsewhere.test", &root);
    assert!(!other, "an unknown name got a certificate pebble signed");
    // The key type asked for.
    let key = sh_out(&format!(
        "echo | openssl s_client -connect 127.0.0.1:{} -servername three.test 2>/dev/null | openssl x509 -noout -text",
        b.port
    ));
    assert!(
        key.contains("rsaEncryption") && key.contains("2048 bit"),
        "{key}"
    );

    // The state directory: 0700, keys 0600.
    for d in [state_a.clone(), state_a.join("certificates")] {
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
    for f in std::fs::read_dir(state_a.join("certificates")).unwrap() {
        let f = f.unwrap().path();
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", f.display());
    }
    assert!(state_a.join("certificates/two.test.pem").exists());

    // Metrics: two orders each, the next renewals, the expiry of what is served (the
    // count waited for: the certificates can be served before it is scraped).
    let ok = "shuck_acme_orders_total{result=\"ok\"}";
    assert!(wait_until(Duration::from_secs(5), || metric(stats_a, ok) >= 2.0));
    assert_eq!(metric(stats_a, ok), 2.0);
    assert_eq!(
        metric(stats_a, "shuck_acme_orders_total{result=\"failed\"}"),
        0.0
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let next = metric(
        stats_b,
        "shuck_acme_next_renewal_seconds{name=\"three.test\"}",
    );
    assert!(
        next > now + 2000.0 && next < now + 2500.0,
        "{next} vs {now}"
    );
    let expiry = metric(
        stats_a,
        "shuck_certificate_not_after_seconds{name=\"two.test\"}",
    );
    assert!(expiry > now + 3000.0 && expiry < now + 3700.0, "{expiry}");

    // Port 80 redirects everything but the challenges (308, as --redirect-listen's).
    let mut c = std::net::TcpStream::connect(("127.0.0.1", http_port)).unwrap();
    c.write_all(b"GET /a/b?c=d HTTP/1.1\r\nHost: three.test:80\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    c.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 308"), "{resp}");
    assert!(
        resp.contains("Location: https://three.test/a/b?c=d\r\n"),
        "{resp}"
    );
    // Nothing but one plain host name is reflected into the Location.
    for bad in [
        "Host: evil.test/x",
        "Host: a@evil.test",
        "Host: three.test\r\nHost: evil.test",
        "Host: three.test,evil.test",
    ] {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", http_port)).unwrap();
        c.write_all(format!("GET / HTTP/1.1\r\n{bad}\r\n\r\n").as_bytes())
            .unwrap();
        let mut resp = String::new();
        c.read_to_string(&mut resp).unwrap();
        assert!(resp.starts_with("HTTP/1.1 400"), "{bad}: {resp}");
    }
    let mut c = std::net::TcpStream::connect(("127.0.0.1", http_port)).unwrap();
    c.write_all(b"GET /.well-known/acme-challenge/nope HTTP/1.1\r\nHost: three.test\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    c.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 404"), "{resp}");
}

#[test]
fn renewal_swaps_the_certificate_and_live_connections_keep_theirs() {
    let origin = Origin::echo();
    let tls_port = free_port();
    // Twelve seconds of life: renewal at two thirds, eight seconds in.
    let Some(pebble) = Pebble::start(&PebbleOpts {
        validity: 12,
        ..PebbleOpts::local(tls_port)
    }) else {
        return;
    };
    let dir = TempDir::new("acme-renew");
    let stats = free_port().to_string();
    let s = issued_shuck(
        &pebble,
        tls_port,
        &dir.path("state"),
        &origin.port_spec,
        "renew.test",
        &["--stats", &stats],
    );
    let root = pebble.issuing_root();
    let (ok, first) = served(tls_port, "renew.test", &root);
    assert!(ok, "{}", s.log());
    // A connection opened on the first certificate.
    let opts = ClientOpts {
        sni: Some("renew.test".into()),
        ..Default::default()
    };
    let mut live = tls_connect(s.addr(), &opts).unwrap();
    echo_roundtrip(&mut live);
    let live_cert = served_cert(&live);

    assert!(
        wait_until(Duration::from_secs(30), || s
            .log()
            .matches("ACME: certificate for renew.test issued")
            .count()
            >= 2),
        "no renewal: {}",
        s.log()
    );
    assert!(
        wait_until(Duration::from_secs(10), || {
            let (ok, serial) = served(tls_port, "renew.test", &root);
            ok && serial != first
        }),
        "the renewed certificate is not served: {}",
        s.log()
    );
    // The connection made before the swap goes on, on its certificate.
    echo_roundtrip(&mut live);
    assert_eq!(served_cert(&live), live_cert);
    let port: u16 = stats.parse().unwrap();
    assert!(metric(port, "shuck_acme_orders_total{result=\"ok\"}") >= 2.0);
    assert!(pebble.orders() >= 2);
}

#[test]
fn an_unreachable_ca_keeps_the_old_certificate_and_backs_off() {
    let tls_port = free_port();
    let Some(mut pebble) = Pebble::start(&PebbleOpts {
        validity: 9,
        ..PebbleOpts::local(tls_port)
    }) else {
        return;
    };
    let dir = TempDir::new("acme-down");
    let stats = free_port().to_string();
    let state = dir.path("state");
    let s = issued_shuck(
        &pebble,
        tls_port,
        &state,
        "[127.0.0.1]:9",
        "down.test",
        &["--stats", &stats],
    );
    let root = pebble.issuing_root();
    let (ok, first) = served(tls_port, "down.test", &root);
    assert!(ok);
    // The CA goes away before the renewal (six seconds in).
    pebble.kill();
    assert!(
        s.wait_log(
            "ACME: order for down.test failed at",
            Duration::from_secs(30)
        ),
        "{}",
        s.log()
    );
    let log = s.log();
    let line = log
        .lines()
        .find(|l| l.contains("ACME: order for down.test failed at"))
        .unwrap();
    assert!(
        line.contains(
            "the certificate in place stays served; retrying in 60s (failure 1 in a row)"
        ),
        "{line}"
    );
    assert!(line.contains("WARN"), "{line}");
    let port: u16 = stats.parse().unwrap();
    // The log line can come before the count is scraped: waited for, then exactly one.
    let failed = "shuck_acme_orders_total{result=\"failed\"}";
    assert!(
        wait_until(Duration::from_secs(5), || metric(port, failed) >= 1.0),
        "the failed order is not counted"
    );
    assert_eq!(metric(port, failed), 1.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let next = metric(port, "shuck_acme_next_renewal_seconds{name=\"down.test\"}");
    assert!(next > now + 50.0 && next < now + 61.0, "{next} vs {now}");
    // Still served, while it is valid.
    let (ok, serial) = served(tls_port, "down.test", &root);
    assert!(ok && serial == first, "{serial} vs {first}");
}

#[test]
fn a_restart_serves_the_state_directory_without_a_new_order() {
    let tls_port = free_port();
    let Some(pebble) = Pebble::start(&PebbleOpts::local(tls_port)) else {
        return;
    };
    let dir = TempDir::new("acme-restart");
    let state = dir.path("state");
    let mut s = issued_shuck(
        &pebble,
        tls_port,
        &state,
        "[127.0.0.1]:9",
        "again.test",
        &[],
    );
    let root = pebble.issuing_root();
    let (ok, first) = served(tls_port, "again.test", &root);
    assert!(ok);
    assert_eq!(pebble.orders(), 1);
    s.signal("TERM");
    assert!(s.wait_exit(Duration::from_secs(20)).is_some());
    drop(s);

    let s = acme_shuck(
        &pebble,
        tls_port,
        &state,
        "[127.0.0.1]:9",
        &["again.test"],
        &[],
    );
    // Served from the first handshake, before any word from the CA.
    let (ok, serial) = served(tls_port, "again.test", &root);
    assert!(ok && serial == first, "{serial} vs {first}: {}", s.log());
    assert!(s.wait_log("ACME: serving the certificate in", Duration::from_secs(10)));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        pebble.orders(),
        1,
        "a new order after a restart: {}",
        s.log()
    );
    assert!(!s.log().contains("ACME: order created"), "{}", s.log());
    // A reload reads the state directory again with the rest: the certificate stays.
    s.signal("HUP");
    assert!(
        s.wait_log("SIGHUP: configuration reloaded", Duration::from_secs(10)),
        "{}",
        s.log()
    );
    let (ok, serial) = served(tls_port, "again.test", &root);
    assert!(
        ok && serial == first,
        "after SIGHUP: {serial} vs {first}: {}",
        s.log()
    );
}

#[test]
fn without_its_certificate_a_name_gets_the_default_or_unrecognized_name() {
    // A directory nobody answers: the order fails, the name is served meanwhile.
    let origin = Origin::echo();
    let dir = TempDir::new("acme-none");
    let (cert, _) = openssl_cert(&dir, "default", Key::EcP256, &["default.test"]);
    let closed = free_port();
    let directory = format!("https://127.0.0.1:{closed}/dir");
    let state = dir.path("state");
    let stats = free_port().to_string();
    let s = Shuck::start(&[
        "-b",
        &origin.port_spec,
        cert.to_str().unwrap(),
        "--acme-directory",
        &directory,
        "--acme-agree-tos",
        "--acme-domain",
        "pending.test",
        "--acme-state",
        state.to_str().unwrap(),
        "--stats",
        &stats,
    ]);
    assert!(
        s.wait_log(
            "ACME: order for pending.test failed at new account",
            Duration::from_secs(30)
        ),
        "{}",
        s.log()
    );
    let log = s.log();
    assert!(log.contains("Connection refused"), "{log}");
    // The line names the CA it could not reach.
    assert!(
        log.contains(&format!("(CA directory {directory})")),
        "{log}"
    );
    assert!(
        log.contains("the default certificate answers meanwhile; retrying in 60s"),
        "{log}"
    );
    let opts = ClientOpts {
        sni: Some("pending.test".into()),
        ..Default::default()
    };
    let mut c = tls_connect(s.addr(), &opts).unwrap();
    echo_roundtrip(&mut c);
    let default = std::fs::read(&cert).unwrap();
    assert_eq!(served_cert(&c), pem_der(&default));
    let port: u16 = stats.parse().unwrap();
    // The log line can come before the count is scraped: waited for, then exactly one.
    let failed = "shuck_acme_orders_total{result=\"failed\"}";
    assert!(
        wait_until(Duration::from_secs(5), || metric(port, failed) >= 1.0),
        "the failed order is not counted"
    );
    assert_eq!(metric(port, failed), 1.0);
    drop(s);

    // With --sni-nomatch-abort: unrecognized_name until the certificate exists.
    let s = Shuck::start(&[
        "-b",
        "[127.0.0.1]:9",
        cert.to_str().unwrap(),
        "--sni-nomatch-abort",
        "--acme-directory",
        &directory,
        "--acme-agree-tos",
        "--acme-domain",
        "pending.test",
        "--acme-state",
        state.to_str().unwrap(),
    ]);
    let r = tls_connect(s.addr(), &opts);
    assert_eq!(
        alert_of(&r),
        Some(rustls::AlertDescription::UnrecognisedName),
        "{:?}",
        r.err()
    );
}

#[test]
fn bad_acme_settings_are_refused_naming_them() {
    let dir = TempDir::new("acme-bad");
    std::fs::write(dir.path("file"), "x").unwrap();
    std::fs::write(dir.path("notpem"), "not a certificate").unwrap();
    let under_file = dir.path("file").join("state");
    let unusable = format!("--acme-state {}: Not a directory", under_file.display());
    let state = dir.path("state");
    let st = state.to_str().unwrap();
    let base = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "-b",
            "[127.0.0.1]:9",
            "-f",
            &format!("[127.0.0.1]:{}", free_port()),
            "--acme-directory",
            "https://127.0.0.1:1/dir",
            "--acme-agree-tos",
            "--acme-state",
            st,
            "--acme-domain",
            "a.test",
        ]
        .map(String::from)
        .to_vec();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "-b".into(),
                "[127.0.0.1]:9".into(),
                "--acme-domain".into(),
                "a.test".into(),
            ],
            "--acme-domain: needs --acme-directory",
        ),
        (
            base(&[])
                .into_iter()
                .filter(|a| a != "--acme-agree-tos")
                .collect(),
            "needs --acme-agree-tos",
        ),
        (
            base(&["--acme-directory", "http://127.0.0.1:1/dir"]),
            "not an https:// URL",
        ),
        (
            base(&["--acme-domain", "*.b.test"]),
            "a wildcard needs the dns-01 challenge",
        ),
        (
            base(&["--acme-domain", "b.test,a.test"]),
            "a.test is named twice",
        ),
        (base(&["--acme-domain", "b..test"]), "is not a DNS name"),
        (
            base(&["--acme-challenge", "dns-01"]),
            "--acme-challenge: \"dns-01\" is not tls-alpn-01 or http-01",
        ),
        (
            base(&["--acme-challenge", "http-01"]),
            "http-01 needs --redirect-listen or --acme-http-listen",
        ),
        (
            base(&["--acme-key-type", "dsa"]),
            "--acme-key-type: \"dsa\" is not one of ecdsa-p256",
        ),
        (
            base(&["--acme-ca-file", dir.path("missing").to_str().unwrap()]),
            "--acme-ca-file: ",
        ),
        (
            base(&["--acme-ca-file", dir.path("notpem").to_str().unwrap()]),
            "holds no certificate",
        ),
        (
            base(&["--acme-eab-kid", "kid"]),
            "needs both --acme-eab-kid and --acme-eab-hmac-key",
        ),
        // An unusable state directory, named with the system's reason.
        (
            base(&["--acme-state", under_file.to_str().unwrap()]),
            &unusable,
        ),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, err) = run_to_exit(&args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: wanted {want:?} in: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn a_wrong_ca_file_or_a_refused_challenge_is_logged_and_shuck_serves_on() {
    let origin = Origin::echo();
    let tls_port = free_port();
    // Pebble checks tls-alpn-01 on a port where nothing listens: the challenge fails.
    let Some(pebble) = Pebble::start(&PebbleOpts::local(free_port())) else {
        return;
    };
    let dir = TempDir::new("acme-refused");
    let (cert, _) = openssl_cert(&dir, "default", Key::EcP256, &["default.test"]);
    let state = dir.path("state");
    let cert = cert.to_str().unwrap();
    let s = acme_shuck(
        &pebble,
        tls_port,
        &state,
        &origin.port_spec,
        &["refused.test"],
        &[cert],
    );
    assert!(
        s.wait_log(
            "ACME: order for refused.test failed at validation",
            Duration::from_secs(60)
        ),
        "{}\npebble: {}",
        s.log(),
        pebble.log()
    );
    let log = s.log();
    let line = log
        .lines()
        .find(|l| l.contains("failed at validation"))
        .unwrap();
    // The CA's problem document: its type and detail.
    assert!(line.contains("urn:ietf:params:acme:error:"), "{line}");
    assert!(line.contains("refused.test"), "{line}");
    let mut c = tls_connect(s.addr(), &ClientOpts::default()).unwrap();
    echo_roundtrip(&mut c);
    drop(s);

    // A CA file that did not sign the CA's HTTPS certificate.
    let other = TempDir::new("acme-other-ca");
    let (wrong, _) = openssl_cert(&other, "other", Key::EcP256, &["other.test"]);
    let s = acme_shuck(
        &pebble,
        tls_port,
        &state,
        &origin.port_spec,
        &["refused.test"],
        &[cert, "--acme-ca-file", wrong.to_str().unwrap()],
    );
    assert!(
        // The account exists (the first run made it): reading the directory fails.
        s.wait_log(
            "ACME: order for refused.test failed at directory",
            Duration::from_secs(30)
        ),
        "{}",
        s.log()
    );
    assert!(s.log().contains("UnknownIssuer"), "{}", s.log());
    let mut c = tls_connect(s.addr(), &ClientOpts::default()).unwrap();
    echo_roundtrip(&mut c);
}

#[test]
fn a_dead_acme_client_is_replaced_and_the_worker_never_writes_the_state() {
    let tls_port = free_port();
    let Some(pebble) = Pebble::start(&PebbleOpts::local(tls_port)) else {
        return;
    };
    let dir = TempDir::new("acme-respawn");
    let state = dir.path("state");
    // The worker runs as nobody; the state directory (0700, root's) is the client's alone.
    let s = issued_shuck(
        &pebble,
        tls_port,
        &state,
        "[127.0.0.1]:9",
        "first.test",
        &["--user", "nobody"],
    );
    let client_pid = |log: &str, nth: usize| -> Option<u32> {
        log.lines()
            .filter_map(|l| l.split("ACME client running as process ").nth(1))
            .nth(nth)
            .and_then(|r| r.split(' ').next())
            .and_then(|p| p.parse().ok())
    };
    let pid = client_pid(&s.log(), 0).expect("the client's pid is logged");
    // Two children: the ACME client, as root, and the worker, as nobody.
    let children = children_of(s.pid());
    assert_eq!(children.len(), 2, "{children:?}");
    assert!(children.contains(&pid), "{children:?} {pid}");
    let worker = children.iter().copied().find(|&c| c != pid).unwrap();
    let uid = |p: u32| {
        status_field(p, "Uid:")
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(uid(pid), "0");
    assert_eq!(uid(worker), sh_out("id -u nobody").trim());
    let root = pebble.issuing_root();
    assert!(served(tls_port, "first.test", &root).0, "{}", s.log());
    sh(&format!("kill -KILL {pid}"));
    assert!(
        s.wait_log("the ACME client process", Duration::from_secs(10)),
        "{}",
        s.log()
    );
    assert!(s.log().contains("starting another in 5s"), "{}", s.log());
    assert!(
        wait_until(Duration::from_secs(15), || client_pid(&s.log(), 1)
            .is_some()),
        "{}",
        s.log()
    );
    let again = client_pid(&s.log(), 1).unwrap();
    assert!(children_of(s.pid()).contains(&again));
    // The new client serves what is stored: no new order.
    assert!(s.wait_log("ACME: serving the certificate in", Duration::from_secs(10)));
    assert_eq!(pebble.orders(), 1, "{}", s.log());
}

#[test]
fn external_account_binding_is_sent_when_the_ca_requires_it() {
    const KID: &str = "kid-1";
    const HMAC: &str = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W";
    let tls_port = free_port();
    let Some(pebble) = Pebble::start(&PebbleOpts {
        eab: Some((KID, HMAC)),
        ..PebbleOpts::local(tls_port)
    }) else {
        return;
    };
    let dir = TempDir::new("acme-eab");
    // Without the binding, the CA refuses the account, and says why.
    let s = acme_shuck(
        &pebble,
        tls_port,
        &dir.path("none"),
        "[127.0.0.1]:9",
        &["eab.test"],
        &[],
    );
    assert!(
        s.wait_log(
            "ACME: order for eab.test failed at new account",
            Duration::from_secs(30)
        ),
        "{}",
        s.log()
    );
    assert!(s.log().contains("externalAccountRequired"), "{}", s.log());
    drop(s);
    // With it, the account is made and the certificate issued.
    let key = dir.path("hmac");
    std::fs::write(&key, format!("{HMAC}\n")).unwrap();
    let _s = issued_shuck(
        &pebble,
        tls_port,
        &dir.path("bound"),
        "[127.0.0.1]:9",
        "eab.test",
        &[
            "--acme-eab-kid",
            KID,
            "--acme-eab-hmac-key",
            key.to_str().unwrap(),
        ],
    );
    let root = pebble.issuing_root();
    assert!(served(tls_port, "eab.test", &root).0);
}

#[test]
fn ocsp_staples_follow_a_newly_issued_certificate_without_a_reload() {
    let origin = Origin::echo();
    let tls_port = free_port();
    // The responder pebble names in what it issues: it records each request (its answer
    // cannot verify, pebble's own key signs the certificates).
    let responder = Origin::start(|mut s| {
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        let _ = s.write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n");
    });
    let url = format!("http://127.0.0.1:{}/", responder.port);
    let Some(pebble) = Pebble::start(&PebbleOpts {
        ocsp_url: Some(&url),
        ..PebbleOpts::local(tls_port)
    }) else {
        return;
    };
    let dir = TempDir::new("acme-ocsp");
    let cache = dir.path("ocsp");
    std::fs::create_dir(&cache).unwrap();
    let s = acme_shuck(
        &pebble,
        tls_port,
        &dir.path("state"),
        &origin.port_spec,
        &["ocsp.test"],
        &["--ocsp-dir", cache.to_str().unwrap()],
    );
    // Nothing to staple before the certificate: the self-signed default names no responder.
    assert!(
        s.wait_log("ACME: serving", Duration::from_secs(60)),
        "{}",
        s.log()
    );
    assert!(
        wait_until(Duration::from_secs(20), || responder
            .accepted
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0),
        "no OCSP request for the new certificate: {}",
        s.log()
    );
    // The OCSP thread asked about the ACME certificate (and was answered 503).
    assert!(
        s.wait_log("OCSP: HTTP status 503", Duration::from_secs(5))
            && s.log().contains("certificates/ocsp.test.pem"),
        "{}",
        s.log()
    );
}
