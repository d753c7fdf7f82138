//! The admin API (`--admin-socket`, `--admin-listen`) and `shuck ctl`, through real
//! sockets and `curl --unix-socket`: servers drained, put in maintenance and killed under
//! h2load's load with no failed request; certificates added in every worker without a
//! reload and kept across a restart; a reload's errors with file and line; who may ask;
//! malformed requests that change nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_shuck");

/// One request with curl over the UNIX socket: the status and the JSON answer.
fn api(sock: &Path, method: &str, path: &str, body: Option<&[u8]>) -> (u16, Value) {
    curl(
        &["--unix-socket", sock.to_str().unwrap()],
        method,
        &format!("http://shuck{path}"),
        body,
    )
}

fn curl(extra: &[&str], method: &str, url: &str, body: Option<&[u8]>) -> (u16, Value) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-S", "-X", method, "-w", "\n%{http_code}"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::piped());
    if body.is_some() {
        cmd.args(["--data-binary", "@-"]);
    }
    let mut child = cmd.arg(url).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    if let Some(b) = body {
        stdin.write_all(b).unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (json, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
    let code: u16 = code.trim().parse().unwrap_or(0);
    (code, serde_json::from_str(json).unwrap_or(Value::Null))
}

/// The server `name` of backend `default` as `GET /backends` lists it.
fn server(sock: &Path, name: &str) -> Value {
    let (code, v) = api(sock, "GET", "/backends", None);
    assert_eq!(code, 200, "{v}");
    v["backends"][0]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no server {name}: {v}"))
}

fn set_state(sock: &Path, name: &str, state: &str) {
    let body = format!("{{\"state\":\"{state}\"}}");
    let (code, v) = api(
        sock,
        "PUT",
        &format!("/backends/default/servers/{name}"),
        Some(body.as_bytes()),
    );
    assert_eq!((code, v["admin"].as_str()), (200, Some(state)), "{v}");
}

/// Waits up to `t` for server `name`'s state to be `state`; how long it took.
fn wait_state(sock: &Path, name: &str, state: &str, t: Duration) -> Option<Duration> {
    let start = Instant::now();
    wait_until(t, || server(sock, name)["state"] == state).then(|| start.elapsed())
}

#[test]
fn drain_maint_and_a_killed_server_fail_no_request() {
    if !require("h2load", "nghttp2-client") {
        return;
    }
    let mut origins: Vec<(Proc, u16)> = (0..3).map(|_| bench_origin()).collect();
    let dir = TempDir::new("admin-load");
    let sock = dir.path("admin.sock");
    let backends: Vec<String> = origins
        .iter()
        .enumerate()
        .map(|(i, (_, port))| {
            format!(
                "[127.0.0.1]:{port},name=s{},check,check-interval=200ms,rise=2,fall=2",
                i + 1
            )
        })
        .collect();
    let shuck = Shuck::start(&[
        "--http",
        "-n",
        "2",
        "--admin-socket",
        sock.to_str().unwrap(),
        "-b",
        &backends[0],
        "-b",
        &backends[1],
        "-b",
        &backends[2],
    ]);
    for s in ["s1", "s2", "s3"] {
        assert!(wait_state(&sock, s, "up", Duration::from_secs(5)).is_some());
    }
    let url = format!("https://127.0.0.1:{}/0", shuck.port);
    let h1_url = url.clone();
    let load = thread::spawn(move || {
        Command::new("h2load")
            .args(["-D", "9", "-c", "8", "-m", "4", &url])
            .output()
            .unwrap()
    });
    // HTTP/1.1 keep-alive clients beside them, through all of it.
    let h1_load = thread::spawn(move || {
        Command::new("h2load")
            .args(["--h1", "-D", "9", "-c", "4", &h1_url])
            .output()
            .unwrap()
    });
    thread::sleep(Duration::from_millis(1000));

    // Drain s2: no new connection after the call; the open ones finish.
    assert!(server(&sock, "s2")["connections"].as_u64().unwrap() > 0);
    set_state(&sock, "s2", "drain");
    thread::sleep(Duration::from_millis(300));
    let drained_at = server(&sock, "s2")["connections"].as_u64().unwrap();
    assert!(
        wait_until(Duration::from_secs(3), || server(&sock, "s2")["active"]
            == 0),
        "the drained server's connections did not finish: {}",
        server(&sock, "s2")
    );

    // Maintenance for s3 closes its idle keep-alive connections, then back to ready.
    set_state(&sock, "s3", "maint");
    assert!(
        wait_until(Duration::from_secs(3), || server(&sock, "s3")["active"]
            == 0),
        "s3 kept connections in maintenance: {}",
        server(&sock, "s3")
    );
    let before = server(&sock, "s3")["connections"].as_u64().unwrap();
    set_state(&sock, "s3", "ready");
    // Clients' keep-alive connections stay where they are; new ones reach s3 again.
    for _ in 0..4 {
        let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
        c.write_all(b"GET /0 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let _ = read_all(&mut c);
    }
    assert!(
        server(&sock, "s3")["connections"].as_u64().unwrap() > before,
        "s3 took no connection once ready"
    );

    // s1 killed: out within fall x interval (2 x 200 ms, with the probe's own time), back
    // within rise x interval once restarted.
    let (mut p1, port1) = origins.remove(0);
    let _ = p1.0.kill();
    let _ = p1.0.wait();
    let down = wait_state(&sock, "s1", "down (check)", Duration::from_secs(3));
    assert!(
        down.is_some_and(|d| d < Duration::from_millis(1500)),
        "{down:?}"
    );
    let _p1 = bench_origin_at(port1);
    let up = wait_state(&sock, "s1", "up", Duration::from_secs(3));
    assert!(
        up.is_some_and(|d| d < Duration::from_millis(1500)),
        "{up:?}"
    );

    h2load_served_all("HTTP/1.1", &h1_load.join().unwrap(), &shuck);
    h2load_served_all("HTTP/2", &load.join().unwrap(), &shuck);
    assert_eq!(
        server(&sock, "s2")["connections"].as_u64().unwrap(),
        drained_at,
        "the drained server got new connections"
    );
    // Every call is logged with who made it.
    assert!(
        shuck
            .log()
            .contains("admin API: PUT /backends/default/servers/s2 from uid 0"),
        "{}",
        shuck.log()
    );
}

/// An h2load run's report: over a thousand requests done, none failed or errored, every
/// status 2xx.
fn h2load_served_all(what: &str, out: &std::process::Output, shuck: &Shuck) {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("{what}: no {prefix:?} in {text}"))
    };
    let requests = line("requests:");
    assert!(
        requests.contains(" 0 failed, 0 errored"),
        "{what}: {requests}\n{text}\n{}",
        shuck.log()
    );
    let statuses = line("status codes:");
    assert!(
        statuses.contains(" 0 3xx, 0 4xx, 0 5xx"),
        "{what}: {statuses}"
    );
    let done: u64 = requests
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(done > 1000, "{what}: {requests}");
}

/// A certificate for `name`, made with openssl, as one PEM (chain and key).
fn cert_for(dir: &TempDir, file: &str, name: &str) -> (Vec<u8>, Vec<u8>) {
    let (path, der) = openssl_cert(dir, file, Key::EcP256, &[name]);
    (std::fs::read(path).unwrap(), der)
}

#[test]
fn certificates_are_added_in_every_worker_and_kept() {
    let dir = TempDir::new("admin-certs");
    let sock = dir.path("admin.sock");
    let store = dir.path("certs");
    let origin = Origin::echo();
    let args = [
        "-n",
        "2",
        "--admin-socket",
        sock.to_str().unwrap(),
        "--admin-certs",
        store.to_str().unwrap(),
        "-b",
        &origin.addr(),
    ];
    let shuck = Shuck::start(&args);
    let (shop, shop_der) = cert_for(&dir, "shop", "shop.example");

    // Clients handshake all along: none fails.
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let addr = shuck.addr();
    let loops: Vec<_> = (0..2)
        .map(|_| {
            let (stop, failed, done) = (stop.clone(), failed.clone(), done.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let opts = ClientOpts {
                        sni: Some("shop.example".into()),
                        ..Default::default()
                    };
                    match tls_connect(addr, &opts) {
                        Ok(mut c) => {
                            echo_roundtrip(&mut c);
                            done.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(_) => {
                            failed.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    let (code, v) = api(&sock, "PUT", "/certificates/shop", Some(&shop));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["result"], "added");
    // Every handshake from now on, on either worker thread, gets it.
    for _ in 0..20 {
        let opts = ClientOpts {
            sni: Some("shop.example".into()),
            ..Default::default()
        };
        let c = tls_connect(addr, &opts).unwrap();
        assert_eq!(served_cert(&c), shop_der);
    }
    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    for l in loops {
        l.join().unwrap();
    }
    assert_eq!(failed.load(Ordering::SeqCst), 0);
    assert!(done.load(Ordering::SeqCst) > 10);

    // A key that is not the certificate's: refused with the reason, the old one served.
    let (other, _) = cert_for(&dir, "other", "shop.example");
    let text = String::from_utf8_lossy(&shop);
    let cert_part = &text[..text.find("-----BEGIN PRIVATE KEY").unwrap()];
    let other_text = String::from_utf8_lossy(&other);
    let key_part = &other_text[other_text.find("-----BEGIN PRIVATE KEY").unwrap()..];
    let mismatched = format!("{cert_part}{key_part}");
    let (code, v) = api(
        &sock,
        "PUT",
        "/certificates/shop",
        Some(mismatched.as_bytes()),
    );
    assert_eq!(code, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("does not match"),
        "{v}"
    );
    let (code, v) = api(
        &sock,
        "PUT",
        "/certificates/bad",
        Some(b"not a certificate"),
    );
    assert_eq!(code, 400, "{v}");
    let opts = ClientOpts {
        sni: Some("shop.example".into()),
        ..Default::default()
    };
    assert_eq!(served_cert(&tls_connect(addr, &opts).unwrap()), shop_der);

    // Listed with its source; the configuration's own cannot be deleted.
    let (_, list) = api(&sock, "GET", "/certificates", None);
    let listed = list["certificates"].as_array().unwrap();
    let shop_entry = listed.iter().find(|c| c["name"] == "shop").unwrap();
    assert_eq!(shop_entry["source"], "admin");
    assert_eq!(shop_entry["names"][0], "shop.example");
    assert_eq!(shop_entry["key_type"], "ECDSA");
    assert!(shop_entry["not_after"].as_str().unwrap().ends_with('Z'));
    let (code, _) = api(&sock, "DELETE", "/certificates/nope", None);
    assert_eq!(code, 404);

    // A restart serves it again, from --admin-certs.
    drop(shuck);
    assert!(store.join("shop.pem").exists());
    let shuck = Shuck::start(&args);
    let c = tls_connect(shuck.addr(), &opts).unwrap();
    assert_eq!(served_cert(&c), shop_der);

    // Removed: the default certificate again.
    let (code, v) = api(&sock, "DELETE", "/certificates/shop", None);
    assert_eq!(code, 200, "{v}");
    let c = tls_connect(shuck.addr(), &opts).unwrap();
    assert_ne!(served_cert(&c), shop_der);
    assert!(!store.join("shop.pem").exists());
}

#[test]
fn a_reload_answers_with_its_errors_and_changes_nothing() {
    let dir = TempDir::new("admin-reload");
    let sock = dir.path("admin.sock");
    let a = Origin::http("from-a");
    let b = Origin::http("from-b");
    let port = free_port();
    let conf = dir.path("shuck.conf");
    let write_conf = |backend: &str, extra: &str| {
        std::fs::write(
            &conf,
            format!(
                "frontend = \"[127.0.0.1]:{port}\"\nbackend = \"{backend}\"\npem-file = \"{}\"\nadmin-socket = \"{}\"\n{extra}",
                test_cert(),
                sock.display()
            ),
        )
        .unwrap();
    };
    let (a_spec, b_spec) = (a.addr(), b.addr());
    write_conf(&a_spec, "");
    let shuck = Shuck::start_raw(&["--config", conf.to_str().unwrap()], port);
    // The origin keeps its connections open: read until one of the two bodies came.
    let body = |s: &Shuck| {
        let mut c = tls_connect(s.addr(), &ClientOpts::default()).unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.ends_with(b"from-a") && !got.ends_with(b"from-b") {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    };
    assert!(body(&shuck).ends_with("from-a"));

    // Line 5: a key that does not exist.
    write_conf(&b_spec, "no-such-key = 1\n");
    let (code, v) = api(&sock, "POST", "/reload", None);
    assert_eq!(code, 400, "{v}");
    let e = &v["errors"][0];
    assert_eq!(e["file"], conf.to_str().unwrap(), "{v}");
    assert_eq!(e["line"], 5, "{v}");
    assert!(
        e["message"].as_str().unwrap().contains("no-such-key"),
        "{v}"
    );
    assert!(
        body(&shuck).ends_with("from-a"),
        "the old configuration serves"
    );
    let (_, st) = api(&sock, "GET", "/status", None);
    assert_eq!(st["last_reload"]["result"], "refused", "{st}");

    // shuck ctl says the same, with the exit status of a refusal.
    let out = Command::new(BIN)
        .args(["ctl", "--socket", sock.to_str().unwrap(), "reload"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:5:", conf.display())), "{err}");

    write_conf(&b_spec, "");
    let (code, v) = api(&sock, "POST", "/reload", None);
    assert_eq!(code, 200, "{v}");
    let got = body(&shuck);
    assert!(
        got.ends_with("from-b"),
        "the new configuration serves: {got}\n{}",
        shuck.log()
    );
    let (_, st) = api(&sock, "GET", "/status", None);
    assert_eq!(st["last_reload"]["result"], "ok", "{st}");
    assert_eq!(st["master_pid"], shuck.pid());
    assert_eq!(st["worker_pid"], shuck.worker());
}

/// The admin API on a UNIX socket and on TCP with a token, before an echo backend.
struct TokenApi {
    sock: std::path::PathBuf,
    token: std::path::PathBuf,
    tcp: u16,
    origin: Origin,
}

impl TokenApi {
    fn new(dir: &TempDir) -> TokenApi {
        let token = dir.path("token");
        std::fs::write(&token, "s3cret-token-0123456789\n").unwrap();
        TokenApi {
            sock: dir.path("admin.sock"),
            token,
            tcp: free_port(),
            origin: Origin::echo(),
        }
    }

    fn args(&self) -> Vec<String> {
        [
            "--admin-socket",
            self.sock.to_str().unwrap(),
            "--admin-listen",
            &self.tcp.to_string(),
            "--admin-token-file",
            self.token.to_str().unwrap(),
            "-b",
            &self.origin.addr(),
        ]
        .map(String::from)
        .to_vec()
    }
}

#[test]
fn only_the_owner_may_ask_and_tcp_needs_the_token() {
    let dir = TempDir::new("admin-perm");
    let api_on = TokenApi::new(&dir);
    let (sock, token, tcp, origin) = (&api_on.sock, &api_on.token, api_on.tcp, &api_on.origin);
    let tcp_spec = tcp.to_string();
    sh(&format!("chmod 644 {}", token.display()));
    let args = api_on.args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // A token others may read is refused at start.
    let (code, err) = run_to_exit(&with_cert(&args));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--admin-token-file") && err.contains("chmod 600"),
        "{err}"
    );
    sh(&format!("chmod 600 {}", token.display()));
    // The TCP API without a token is refused at start.
    let (code, err) = run_to_exit(&with_cert(&[
        "--admin-listen",
        &tcp_spec,
        "-b",
        &origin.addr(),
    ]));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("needs --admin-token-file"), "{err}");
    let shuck = Shuck::start(&args);
    let meta = std::fs::metadata(sock).unwrap();
    // A second shuck on the same socket is refused; the first one's stays.
    let (code, err) = run_to_exit(&with_cert(&[
        "-f",
        &format!("[127.0.0.1]:{}", free_port()),
        "--admin-socket",
        sock.to_str().unwrap(),
        "-b",
        &origin.addr(),
    ]));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("another process is listening on it"), "{err}");
    assert!(sock.exists());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);

    // Another user cannot connect to the socket (0600), nor ask when it is opened up
    // (SO_PEERCRED: root and shuck's own user only).
    if require("runuser", "util-linux") {
        sh(&format!("chmod 755 {}", dir.0.display()));
        let as_nobody = |path: &str| {
            Command::new("runuser")
                .args([
                    "-u",
                    "nobody",
                    "--",
                    "curl",
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                ])
                .args(["--unix-socket", sock.to_str().unwrap()])
                .arg(format!("http://shuck{path}"))
                .output()
                .unwrap()
        };
        let out = as_nobody("/status");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "000",
            "connected as nobody"
        );
        sh(&format!("chmod 666 {}", sock.display()));
        for path in ["/status", "/backends", "/reload"] {
            let out = as_nobody(path);
            assert_eq!(String::from_utf8_lossy(&out.stdout), "403", "{path}");
        }
    }

    // TCP: 401 without the token or with another; 200 with it.
    let url = format!("http://127.0.0.1:{tcp}/status");
    assert_eq!(curl(&[], "GET", &url, None).0, 401);
    assert_eq!(
        curl(
            &["-H", "Authorization: Bearer wrong-token-0123456789"],
            "GET",
            &url,
            None
        )
        .0,
        401
    );
    let (code, v) = curl(
        &["-H", "Authorization: Bearer s3cret-token-0123456789"],
        "GET",
        &url,
        None,
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["master_pid"], shuck.pid());
    assert!(shuck.log().contains("401"));
}

#[test]
fn malformed_requests_change_nothing() {
    let dir = TempDir::new("admin-fuzz");
    let sock = dir.path("admin.sock");
    let origin = Origin::echo();
    let shuck = Shuck::start(&[
        "--admin-socket",
        sock.to_str().unwrap(),
        "-b",
        &origin.addr(),
    ]);
    let (_, before) = api(&sock, "GET", "/status", None);
    let big = "a".repeat(20_000);
    let cases: Vec<Vec<u8>> = vec![
        b"\x00\x01\x02garbage\r\n\r\n".to_vec(),
        b"GET /status HTTP/9.9\r\n\r\n".to_vec(),
        format!("GET /{big} HTTP/1.1\r\n\r\n").into_bytes(),
        b"PUT /backends/default/servers/x HTTP/1.1\r\nContent-Length: 5\r\n\r\n{{{{{".to_vec(),
        b"PUT /backends/default/servers/x HTTP/1.1\r\nContent-Length: 18\r\n\r\n{\"state\":\"broken\"}".to_vec(),
        b"PUT /certificates/..%2F..%2Fetc%2Fpasswd HTTP/1.1\r\nContent-Length: 1\r\n\r\nx".to_vec(),
        b"POST /reload HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
        b"PUT /certificates/x HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n".to_vec(),
        b"DELETE /status HTTP/1.1\r\n\r\n".to_vec(),
        b"GET /backends/%ZZ/servers/a HTTP/1.1\r\n\r\n".to_vec(),
        // A length another reader could take otherwise, and lines ended by LF alone.
        b"PUT /backends/default/servers/s HTTP/1.1\r\nContent-Length: +2\r\n\r\n{}".to_vec(),
        b"GET /status HTTP/1.1\nHost: x\n\n".to_vec(),
        b"GET /status HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc".to_vec(), // cut short
    ];
    let mut refused = 0;
    for i in 0..1000 {
        let case = &cases[i % cases.len()];
        let mut s = UnixStream::connect(&sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let _ = s.write_all(case);
        if i % cases.len() == cases.len() - 1 {
            // Half a request, then gone.
            drop(s);
            continue;
        }
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        let text = String::from_utf8_lossy(&answer);
        assert!(
            text.starts_with("HTTP/1.1 4"),
            "case {}: {text}",
            i % cases.len()
        );
        refused += 1;
    }
    assert!(refused > 900);
    let (code, after) = api(&sock, "GET", "/status", None);
    assert_eq!(code, 200);
    assert_eq!(before["master_pid"], after["master_pid"]);
    assert_eq!(before["worker_pid"], after["worker_pid"]);
    let (_, b) = api(&sock, "GET", "/backends", None);
    assert_eq!(b["backends"][0]["servers"][0]["state"], "up", "{b}");
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    echo_roundtrip(&mut c);
}

#[test]
fn shuck_ctl_prints_tables_json_and_exit_statuses() {
    let dir = TempDir::new("admin-ctl");
    let sock = dir.path("admin.sock");
    let (a, b) = (Origin::echo(), Origin::echo());
    let (sa, sb) = (
        format!("{},name=api1", a.addr()),
        format!("{},name=api2", b.addr()),
    );
    let shuck = Shuck::start(&[
        "--admin-socket",
        sock.to_str().unwrap(),
        "-b",
        &sa,
        "-b",
        &sb,
    ]);
    let ctl = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(["ctl", "--socket", sock.to_str().unwrap()])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, _) = ctl(&["backends"]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("BACKEND  BALANCE     SERVER"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("default  roundrobin  api1") && l.contains(" up ")),
        "{out}"
    );
    let (code, out, _) = ctl(&["drain", "default/api1"]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("api1: drain"), "{out}");
    let (code, out, _) = ctl(&["--json", "backends"]);
    assert_eq!(code, Some(0));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["backends"][0]["servers"][0]["state"], "drain");
    // The operator's state survives a reload and a worker that dies.
    let (code, v) = api(&sock, "POST", "/reload", None);
    assert_eq!(code, 200, "{v}");
    assert_eq!(server(&sock, "api1")["state"], "drain");
    let worker = shuck.worker();
    sh(&format!("kill -9 {worker}"));
    assert!(wait_until(Duration::from_secs(10), || {
        let (code, v) = api(&sock, "GET", "/status", None);
        code == 200
            && v["worker_pid"]
                .as_u64()
                .is_some_and(|p| p != u64::from(worker))
    }));
    assert!(wait_until(Duration::from_secs(5), || server(&sock, "api1")
        ["state"]
        == "drain"));
    assert_eq!(server(&sock, "api2")["state"], "up");
    let (code, _, err) = ctl(&["drain", "default/nope"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("no server \"nope\"") && err.contains("api1, api2"),
        "{err}"
    );
    let (code, _, err) = ctl(&["weight", "default/api2", "0"]);
    assert_eq!(code, Some(1), "{err}");
    let (code, out, _) = ctl(&["cert", "list"]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("NAME") && out.contains("file"), "{out}");
    let (code, _, err) = ctl(&["cert", "add", "x", "/nonexistent.pem"]);
    assert_eq!(code, Some(2), "{err}");
    let (code, out, _) = ctl(&["tickets", "rotate"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("result: rotated"), "{out}");
    let (code, out, _) = ctl(&["sessions"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("cache.entries:"), "{out}");
    let out = Command::new(BIN)
        .args(["ctl", "--socket", "/nonexistent/admin.sock", "status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--admin-socket"));
}

#[test]
fn operator_states_survive_a_restart_with_admin_state() {
    let dir = TempDir::new("admin-state");
    let sock = dir.path("admin.sock");
    let state = dir.path("server-state.json");
    let (a, b) = (Origin::echo(), Origin::echo());
    let (sa, sb) = (
        format!("{},name=api1", a.addr()),
        format!("{},name=api2", b.addr()),
    );
    let args = [
        "--admin-socket",
        sock.to_str().unwrap(),
        "--admin-state",
        state.to_str().unwrap(),
        "-b",
        &sa,
        "-b",
        &sb,
    ];
    let shuck = Shuck::start(&args);
    set_state(&sock, "api1", "maint");
    let (code, v) = api(
        &sock,
        "PUT",
        "/backends/default/servers/api2",
        Some(b"{\"weight\": 7}"),
    );
    assert_eq!(code, 200, "{v}");
    let saved = std::fs::read_to_string(&state).unwrap();
    assert!(
        saved.contains("\"maint\"") && saved.contains("7"),
        "{saved}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&state).unwrap().permissions().mode() & 0o777,
        0o600
    );
    drop(shuck);
    // A restart reads them back.
    let shuck = Shuck::start(&args);
    assert!(wait_until(Duration::from_secs(5), || server(&sock, "api1")
        ["state"]
        == "maint"));
    assert_eq!(server(&sock, "api2")["weight"], 7);
    assert!(shuck.log().contains("server setting(s) from"));
    // The one server in rotation takes every client.
    for _ in 0..4 {
        let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
        echo_roundtrip(&mut c);
    }
    assert_eq!(a.accepted.load(Ordering::SeqCst), 0);
    drop(shuck);
    // A file that is not one is named, and shuck starts with every server ready.
    std::fs::write(&state, "not json").unwrap();
    let shuck = Shuck::start(&args);
    assert!(shuck.wait_log("not a shuck server-state file", Duration::from_secs(5)));
    assert_eq!(server(&sock, "api1")["state"], "up");
    // Without the admin API the flag is refused.
    let (code, err) = run_to_exit(&with_cert(&[
        "--admin-state",
        "/tmp/x.json",
        "-b",
        &a.addr(),
    ]));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--admin-state: needs the admin API"), "{err}");
}

/// Issue 45, finding 5: root writes and reads `--admin-certs` and `--admin-state` only in
/// a directory that is root's alone, never through a link. A directory others may write
/// (or own) is refused at start, naming the option; a link planted in the directory (at a
/// certificate's name, or at the aside name the old code wrote through) is neither followed
/// when reading nor when writing.
#[test]
fn admin_files_are_never_written_or_read_through_links() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("admin-links");
    let sock = dir.path("admin.sock");
    let store = dir.path("certs");
    std::fs::create_dir(&store).unwrap();
    let origin = Origin::echo();
    let refused = |args: &[&str], option: &str, why: &str| {
        let (code, err) = run_to_exit(args);
        assert_ne!(code, Some(0), "{args:?}: {err}");
        assert!(err.contains(option) && err.contains(why), "{args:?}: {err}");
    };
    let sock_s = sock.to_str().unwrap();
    let store_s = store.to_str().unwrap();
    // Writable by others, or owned by another user: refused at start.
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o777)).unwrap();
    let certs_args = [
        "--admin-socket",
        sock_s,
        "--admin-certs",
        store_s,
        "-b",
        &origin.addr(),
    ];
    refused(&certs_args, "--admin-certs", "writable by group or others");
    let state = store.join("state.json");
    let state_args = [
        "--admin-socket",
        sock_s,
        "--admin-state",
        state.to_str().unwrap(),
        "-b",
        &origin.addr(),
    ];
    refused(&state_args, "--admin-state", "writable by group or others");
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o700)).unwrap();
    sh(&format!("chown 65534 {store_s}"));
    refused(&certs_args, "--admin-certs", "not by root");
    sh(&format!("chown 0 {store_s}"));

    // A link at a certificate's name is not read: were it, the file it points to (no PEM)
    // would stop the start.
    let secret = dir.path("root-only");
    std::fs::write(&secret, "root's secret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&secret, store.join("planted.pem")).unwrap();
    let shuck = Shuck::start(&certs_args);

    // Links where the writer would go: the certificate's own name and the fixed aside name
    // the old code opened; neither is followed, the victim file is untouched.
    let (shop, _) = cert_for(&dir, "shop", "shop.example");
    std::os::unix::fs::symlink(&secret, store.join("shop.pem")).unwrap();
    std::os::unix::fs::symlink(&secret, store.join(".shop.pem.new")).unwrap();
    let (code, v) = api(&sock, "PUT", "/certificates/shop", Some(&shop));
    assert_eq!(code, 200, "{v}");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root's secret\n");
    let meta = std::fs::symlink_metadata(store.join("shop.pem")).unwrap();
    assert!(
        meta.file_type().is_file(),
        "the link was replaced, not followed"
    );
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read(store.join("shop.pem")).unwrap(), shop);
    // No aside file is left behind but the planted link.
    let left: Vec<String> = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".new"))
        .collect();
    assert_eq!(left, [".shop.pem.new"]);
    drop(shuck);
}

/// Issue 45, finding 6: unauthenticated TCP peers cannot lock root out. Each listener has
/// its own budget (70 silent TCP connections leave the UNIX socket answering), a silent
/// peer is closed after the head's short deadline, and a head without the token is answered
/// 401 at once, its declared body never waited for.
#[test]
fn tcp_peers_cannot_lock_root_out_of_the_admin_socket() {
    let dir = TempDir::new("admin-flood");
    let api_on = TokenApi::new(&dir);
    sh(&format!("chmod 600 {}", api_on.token.display()));
    let (sock, tcp) = (api_on.sock.clone(), api_on.tcp);
    let args = api_on.args();
    let _shuck = Shuck::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let silent: Vec<std::net::TcpStream> = (0..70)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", tcp)).unwrap())
        .collect();
    thread::sleep(Duration::from_millis(200));
    let (code, v) = api(&sock, "GET", "/status", None);
    assert_eq!(code, 200, "root on the UNIX socket during a TCP flood: {v}");
    // A head without the token, declaring a megabyte it never sends: 401 now.
    let started = Instant::now();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", tcp)).unwrap();
    // Connections over the TCP budget are closed as they come: wait for the silent ones
    // to be closed (the head's deadline) before asking.
    let ask = |s: &mut std::net::TcpStream| {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"PUT /certificates/x HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n")
            .unwrap();
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    };
    let first = ask(&mut s);
    if first.is_empty() {
        // Closed for the budget: the silent peers go within the head's deadline.
        thread::sleep(Duration::from_secs(3));
        s = std::net::TcpStream::connect(("127.0.0.1", tcp)).unwrap();
        let t = Instant::now();
        let text = ask(&mut s);
        assert!(text.starts_with("HTTP/1.1 401"), "{text}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    } else {
        assert!(first.starts_with("HTTP/1.1 401"), "{first}");
    }
    // The silent ones were closed by the head's deadline, well before the exchange's 10 s.
    let mut closed = 0;
    for mut c in silent {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 1];
        if matches!(c.read(&mut b), Ok(0) | Err(_)) {
            closed += 1;
        }
    }
    assert_eq!(closed, 70);
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
}
