//! shuck-bench end to end: the origin serves every size, and `load` counts what really
//! happened against a real shuck (sessions, requests, resumption, failures).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::*;

/// The shuck binary next to shuck-bench, built if this test runs alone.
fn shuck_bin() -> PathBuf {
    let p = PathBuf::from(BENCH).with_file_name("shuck");
    if !p.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "-p", "shuck"])
            .status()
            .unwrap();
        assert!(st.success());
    }
    p
}

fn origin() -> (Proc, u16) {
    serving(BENCH.as_ref(), &["origin", "--listen", "127.0.0.1:{port}"])
}

/// shuck in front of the origin; its stderr is kept for the final counters.
fn shuck(origin_port: u16) -> (Proc, u16, PathBuf) {
    let port = free_port();
    let log = std::env::temp_dir().join(format!(
        "shuck-bench-test-{}-{port}.log",
        std::process::id()
    ));
    // shuck needs a certificate in front of a backend; any will do for the load client.
    let pem = log.with_extension("pem");
    write_pem(&pem);
    std::fs::set_permissions(&pem, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let child = Command::new(shuck_bin())
        .args([
            "-n",
            "1",
            "-f",
            &format!("[127.0.0.1]:{port}"),
            "-b",
            &format!("[127.0.0.1]:{origin_port}"),
            pem.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let p = Proc(child);
    wait_port(port);
    // Read at start; nothing reloads it here.
    let _ = std::fs::remove_file(&pem);
    (p, port, log)
}

fn load(args: &[&str]) -> serde_json::Value {
    let out = Command::new(BENCH)
        .arg("load")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_origin_serves_every_size_with_keep_alive() {
    let (_o, port) = origin();
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for (path, size) in [
        ("0", 0usize),
        ("1k", 1024),
        ("4k", 4096),
        ("100k", 102_400),
        ("1m", 1 << 20),
        ("777", 777),
    ] {
        write!(w, "GET /{path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut status = String::new();
        r.read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{path}: {status}");
        let mut len = None;
        loop {
            let mut h = String::new();
            r.read_line(&mut h).unwrap();
            if h == "\r\n" {
                break;
            }
            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                len = Some(v.trim().parse::<usize>().unwrap());
            }
        }
        assert_eq!(len, Some(size), "{path}");
        let mut body = vec![0u8; size];
        r.read_exact(&mut body).unwrap();
    }
    write!(w, "GET /nonsense HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 404"), "{status}");
}

/// `reuse=always` resumed every session except at most the first of each slot.
fn assert_all_resumed_but_first(report: &serde_json::Value, slots: u64) {
    let completed = report["completed"].as_u64().unwrap();
    let resumed = (completed as f64 * report["resumed_share"].as_f64().unwrap()).round() as u64;
    assert!(completed > 50, "{report}");
    assert!(resumed + slots >= completed, "{report}");
}

#[test]
fn load_counts_sessions_requests_and_resumption_as_they_happened() {
    let (_o, oport) = origin();
    let (mut sh, port, log) = shuck(oport);
    let target = format!("127.0.0.1:{port}");

    let never = load(&[
        "--target",
        &target,
        "--duration",
        "1.5",
        "--concurrency",
        "4",
        "--requests-per-conn",
        "3",
        "--size",
        "1k",
        "--tls",
        "1.3",
    ]);
    let completed = never["completed"].as_u64().unwrap();
    assert!(completed > 20, "{never}");
    assert_eq!(
        never["requests"].as_u64().unwrap(),
        completed * 3,
        "{never}"
    );
    assert_eq!(never["failures"].as_object().unwrap().len(), 0, "{never}");
    assert_eq!(never["resumed_share"].as_f64().unwrap(), 0.0);
    assert!(never["session_ms"]["p99"].as_f64().unwrap() > 0.0);

    let always = load(&[
        "--target",
        &target,
        "--duration",
        "1.5",
        "--concurrency",
        "8",
        "--reuse",
        "always",
        "--tls",
        "1.3",
    ]);
    // Every session resumes but the first of each of the 8 slots, which has nothing to
    // resume yet (on a slow machine those 8 are more than 1 % of the run).
    assert_all_resumed_but_first(&always, 8);
    let always12 = load(&[
        "--target",
        &target,
        "--duration",
        "1",
        "--concurrency",
        "8",
        "--reuse",
        "always",
        "--tls",
        "1.2",
        "--resume-by",
        "id",
    ]);
    assert_all_resumed_but_first(&always12, 8);

    let every4 = load(&[
        "--target",
        &target,
        "--duration",
        "1.5",
        "--rate",
        "200",
        "--reuse",
        "every:4",
    ]);
    let share = every4["resumed_share"].as_f64().unwrap();
    assert!(
        (0.15..=0.35).contains(&share),
        "every:4 resumed {share}: {every4}"
    );
    let attempted = every4["attempted"].as_u64().unwrap();
    assert!(
        (250..=350).contains(&attempted),
        "open loop at 200/s for 1.5 s attempted {attempted}"
    );

    // shuck's own counters agree with what the client saw.
    let total_completed: u64 = [&never, &always, &always12, &every4]
        .iter()
        .map(|r| r["completed"].as_u64().unwrap())
        .sum();
    let total_resumed: f64 = [&never, &always, &always12, &every4]
        .iter()
        .map(|r| r["completed"].as_f64().unwrap() * r["resumed_share"].as_f64().unwrap())
        .sum();
    let _ = Command::new("kill")
        .args(["-TERM", &sh.0.id().to_string()])
        .status();
    let _ = sh.0.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let summary = text
        .lines()
        .find(|l| l.contains("stopped;"))
        .unwrap_or_else(|| panic!("{text}"));
    let num = |key: &str| -> u64 {
        let at = summary
            .find(key)
            .unwrap_or_else(|| panic!("{key}: {summary}"))
            + key.len();
        summary[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (full, resumed) = (num("handshakes full="), num(" resumed="));
    assert_eq!(full + resumed, total_completed, "{summary}");
    assert!(
        (resumed as f64 - total_resumed).abs() < 1.5,
        "{summary} vs {total_resumed}"
    );
}

#[test]
fn a_stopped_target_is_counted_as_failures_not_a_hang() {
    let port = free_port();
    let start = Instant::now();
    let r = load(&[
        "--target",
        &format!("127.0.0.1:{port}"),
        "--duration",
        "1",
        "--concurrency",
        "4",
    ]);
    assert!(start.elapsed() < Duration::from_secs(8));
    assert_eq!(r["completed"].as_u64().unwrap(), 0);
    let refused = r["failures"]["connect_refused"].as_u64().unwrap();
    assert!(
        refused > 0 && refused == r["attempted"].as_u64().unwrap(),
        "{r}"
    );
    assert_eq!(r["failure_ratio"].as_f64().unwrap(), 1.0);
}

#[test]
fn ramp_finds_a_rate_within_the_limits_and_key_type_is_checked() {
    let (_o, oport) = origin();
    let (_s, port, log) = shuck(oport);
    let target = format!("127.0.0.1:{port}");
    let out = Command::new(BENCH)
        .args([
            "ramp",
            "--target",
            &target,
            "--start",
            "50",
            "--step",
            "50",
            "--max",
            "100",
            "--step-duration",
            "0.5",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["steps"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["best_rate"].as_f64(), Some(100.0), "{v}");

    // shuck's default certificate is ECDSA: claiming RSA stops the run.
    let out = Command::new(BENCH)
        .args([
            "load",
            "--target",
            &target,
            "--duration",
            "0.2",
            "--key-type",
            "rsa2048",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Rsa2048"));
    let _ = std::fs::remove_file(log);
}

/// shuck with no backend, on its built-in origin (as a newcomer first runs it).
fn bare_shuck() -> (Proc, u16) {
    serving(&shuck_bin(), &["-n", "1", "-f", "[127.0.0.1]:{port}"])
}

#[test]
fn load_measures_shuck_on_its_built_in_origin() {
    let (_sh, port) = bare_shuck();
    let target = format!("127.0.0.1:{port}");
    for size in ["0", "4k", "1m"] {
        let r = load(&[
            "--target",
            &target,
            "--duration",
            "1",
            "--concurrency",
            "2",
            "--requests-per-conn",
            "2",
            "--size",
            size,
        ]);
        assert!(r["completed"].as_u64().unwrap() > 0, "{size}: {r}");
        assert_eq!(r["failures"].as_object().unwrap().len(), 0, "{size}: {r}");
        assert!(r.get("first_bad_answer").is_none(), "{size}: {r}");
    }
}

#[test]
fn a_bad_answer_is_described_in_one_line() {
    // A backend that answers every request with 5 bytes, whatever size was asked.
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let bport = backend.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in backend.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut w = s;
                let mut line = String::new();
                while r.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line == "\r\n"
                        && w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
                            .is_err()
                    {
                        return;
                    }
                    line.clear();
                }
            });
        }
    });
    let (_sh, port, _log) = shuck(bport);
    let args = [
        "--target",
        &format!("127.0.0.1:{port}"),
        "--duration",
        "0.5",
        "--concurrency",
        "1",
        "--size",
        "4k",
    ];
    let r = load(&args);
    assert!(r["failures"]["bad_response"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(
        r["first_bad_answer"].as_str().unwrap(),
        "GET /4k: Content-Length 5, expected 4096 (the target's backend must answer \
         GET /N with N bytes, as `shuck-bench origin` does)",
        "{r}"
    );
    // And in the text report, on one line.
    let out = Command::new(BENCH).arg("load").args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("first bad answer"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("Content-Length 5, expected 4096"), "{line}");
}

#[test]
fn plain_load_speaks_tcp_without_tls_to_a_relay_or_an_origin() {
    // The origin itself is plain HTTP: --plain loads it as compare loads its relay.
    let (_o, port) = origin();
    let target = format!("127.0.0.1:{port}");
    let r = load(&[
        "--target",
        &target,
        "--plain",
        "--concurrency",
        "2",
        "--duration",
        "0.5",
        "--requests-per-conn",
        "4",
        "--size",
        "1k",
    ]);
    let completed = r["completed"].as_u64().unwrap();
    assert!(completed > 10, "{r}");
    assert_eq!(r["failure_ratio"].as_f64(), Some(0.0), "{r}");
    assert_eq!(r["requests"].as_u64(), Some(completed * 4), "{r}");
    // And a TLS load against the same plain port fails: --plain is what made it work.
    let out = Command::new(BENCH)
        .args([
            "load",
            "--target",
            &target,
            "--duration",
            "0.3",
            "--timeout",
            "1",
            "--json",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let tls: Option<serde_json::Value> = serde_json::from_str(&text).ok();
    assert!(
        !out.status.success() || tls.is_some_and(|t| t["completed"].as_u64() == Some(0)),
        "TLS against a plain port: {text}"
    );
}

#[test]
fn the_floor_server_answers_tls_over_tcp_and_http3_over_quic() {
    let pem = std::env::temp_dir().join(format!("shuck-bench-floor-{}.pem", std::process::id()));
    write_pem(&pem);
    let (_floor, port) = serving(
        BENCH.as_ref(),
        &[
            "floor-server",
            "--listen",
            "127.0.0.1:{port}",
            "--cert",
            pem.to_str().unwrap(),
        ],
    );
    let _ = std::fs::remove_file(&pem);
    // TCP: a full TLS 1.3 handshake and one answer a connection.
    let target = format!("127.0.0.1:{port}");
    let r = load(&[
        "--target",
        &target,
        "--concurrency",
        "2",
        "--duration",
        "1",
        "--reuse",
        "never",
        "--tls",
        "1.3",
    ]);
    assert!(r["completed"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["completed"], r["attempted"], "{r}");
    // QUIC: the same with HTTP/3, on the same port, and with QUIC alone (a stream a request).
    for raw in [&[][..], &["--raw"][..]] {
        let out = Command::new(BENCH)
            .args([
                "h3-load",
                "--addr",
                &target,
                "--connections",
                "2",
                "--streams",
                "1",
            ])
            .args(["--handshakes", "--duration", "1"])
            .args(raw)
            .output()
            .unwrap();
        let line = String::from_utf8_lossy(&out.stdout);
        let counts: Vec<u64> = line
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        assert!(
            counts[0] > 0 && counts[1] == 0,
            "{raw:?}: succeeded failed: {line}"
        );
    }
}

#[test]
fn the_floor_server_names_a_certificate_it_cannot_read() {
    let out = Command::new(BENCH)
        .args([
            "floor-server",
            "--listen",
            "127.0.0.1:0",
            "--cert",
            "/nonexistent/floor.pem",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/floor.pem"), "{err}");
}
