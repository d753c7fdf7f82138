//! HTTP/2 at its limits, end to end: h2spec's conformance suite, hostile clients (rapid
//! resets, CONTINUATION floods, a window never opened) against shuck's CPU and memory while
//! another client is served, the timeouts, the GOAWAY of a stop and a reload, and 1 GB
//! each way byte-exact with the worker's memory bounded. One test at a time: they measure.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// The lock orders whole tests, each on its own runtime and thread: held across awaits on
// purpose.
#![allow(clippy::await_holding_lock)]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::h1origin::H1Origin;
use common::h2c::{self, frame, CONTINUATION, END_HEADERS, END_STREAM, HEADERS, RST_STREAM};
use common::*;
use tokio::io::AsyncWriteExt;

/// These tests measure memory and latency: they run one at a time.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// h2spec, installed with `go install` when missing.
fn h2spec() -> Option<PathBuf> {
    let home = PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()));
    let gobin = home.join("go/bin/h2spec");
    let on_path = Command::new("sh")
        .args(["-c", "command -v h2spec"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Some(p) = on_path.or_else(|| gobin.exists().then(|| gobin.clone())) {
        return Some(p);
    }
    if !require("go", "golang-go") {
        return None;
    }
    let out = Command::new("go")
        .args(["install", "github.com/summerwind/h2spec/cmd/h2spec@latest"])
        .env("GOBIN", home.join("go/bin"))
        .output()
        .unwrap();
    if gobin.exists() {
        return Some(gobin);
    }
    skip(&format!(
        "h2spec could not be installed with go install: {}",
        String::from_utf8_lossy(&out.stderr)
    ));
    None
}

#[test]
fn h2spec_passes_every_case() {
    let _one = one_at_a_time();
    let Some(h2spec) = h2spec() else { return };
    let origin = H1Origin::start(None);
    let shuck = Shuck::start(&["--http", "-b", &origin.spec]);
    let out = Command::new(h2spec)
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &shuck.port.to_string(),
            "-t",
            "-k",
            "-o",
            "5",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text
        .lines()
        .rev()
        .find(|l| l.contains("tests,") && l.contains("passed"))
        .unwrap_or_else(|| panic!("no h2spec summary: {text}"));
    let n: Vec<u32> = summary
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    // "145 tests, 145 passed, 0 skipped, 0 failed"
    assert!(
        n.len() >= 4 && n[0] >= 145 && n[1] == n[0] && n[3] == 0,
        "{summary}\n{text}"
    );
    assert!(out.status.success(), "{text}");
}

/// A rapid-reset attacker: connection after connection, each stream opened and reset at
/// once, until shuck sends GOAWAY. Returns the GOAWAY codes it got.
fn rapid_reset_attack(addr: std::net::SocketAddr, for_how_long: Duration) -> Vec<Option<u32>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let start = Instant::now();
        let mut codes = Vec::new();
        while start.elapsed() < for_how_long {
            let mut tls = h2c::raw(addr, &[]).await;
            let block = h2c::get_block("/");
            let mut batch = Vec::new();
            for i in 0..5000u32 {
                let id = 2 * i + 1;
                batch.extend(frame(HEADERS, END_STREAM | END_HEADERS, id, &block));
                batch.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
                if i % 100 == 99 {
                    if tls.write_all(&batch).await.is_err() {
                        break;
                    }
                    batch.clear();
                }
            }
            codes.push(h2c::goaway(&mut tls, Duration::from_secs(5)).await);
        }
        codes
    })
}

#[tokio::test]
async fn hostile_floods_keep_memory_bounded_and_others_served() {
    let _one = one_at_a_time();
    let origin = H1Origin::start(None);
    let shuck = Shuck::start(&["--http", "-b", &origin.spec, "--h2-max-resets", "100"]);
    let worker = shuck.worker();
    let (mut victim, _conn) = h2c::connect(shuck.addr()).await;
    assert_eq!(h2c::get(&mut victim, "/").await.unwrap().0.as_u16(), 200);
    let before = rss_kib(worker);
    let rss = RssWatch::start(worker);

    // Rapid reset (CVE-2023-44487), from another thread for 3 s.
    let addr = shuck.addr();
    let attack = std::thread::spawn(move || rapid_reset_attack(addr, Duration::from_secs(3)));
    let mut latencies = Vec::new();
    while !attack.is_finished() {
        let t = Instant::now();
        let (status, body) = h2c::get(&mut victim, "/").await.unwrap();
        latencies.push(t.elapsed());
        assert_eq!((status.as_u16(), &body[..]), (200, &b"127.0.0.1"[..]));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let codes = attack.join().unwrap();
    assert!(!codes.is_empty());
    assert!(
        codes.iter().all(|c| *c == Some(11)),
        "every attacking connection ends with GOAWAY ENHANCE_YOUR_CALM: {codes:?}"
    );
    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100];
    eprintln!(
        "victim under rapid reset: {} requests, p99 {p99:?}; {} attacking connections",
        latencies.len(),
        codes.len()
    );
    assert!(p99 < Duration::from_millis(100), "p99 {p99:?}");

    // CONTINUATION flood: a header block that never ends.
    let mut tls = h2c::raw(addr, &[]).await;
    let mut out = frame(HEADERS, END_STREAM, 1, &h2c::get_block("/"));
    let junk = vec![b'a'; 16 * 1024];
    let mut sent = 0usize;
    for _ in 0..4096 {
        out.extend(frame(CONTINUATION, 0, 1, &junk));
        if tls.write_all(&out).await.is_err() {
            break;
        }
        sent += out.len();
        out.clear();
    }
    let code = h2c::goaway(&mut tls, Duration::from_secs(5)).await;
    eprintln!("CONTINUATION flood: {sent} bytes written before shuck closed; GOAWAY {code:?}");
    assert!(sent < 8 << 20, "shuck stopped reading the flood early");
    assert_eq!(h2c::get(&mut victim, "/").await.unwrap().0.as_u16(), 200);

    let grown = rss.max_kib().saturating_sub(before);
    eprintln!("worker RSS {before} KiB before, at most +{grown} KiB during the floods");
    assert!(grown < 40 * 1024, "worker grew {grown} KiB");
    assert!(
        shuck.log().contains("GOAWAY ENHANCE_YOUR_CALM"),
        "{}",
        shuck.log()
    );
}

#[tokio::test]
async fn a_window_never_opened_costs_bounded_memory() {
    let _one = one_at_a_time();
    let origin = H1Origin::start(None);
    let shuck = Shuck::start(&["--http", "-b", &origin.spec, "--idle-timeout", "2"]);
    let worker = shuck.worker();
    let before = rss_kib(worker);
    let rss = RssWatch::start(worker);
    // SETTINGS_INITIAL_WINDOW_SIZE = 0: shuck may send no body byte.
    let mut tls = h2c::raw(shuck.addr(), &[(0x4, 0)]).await;
    let mut out = Vec::new();
    for i in 0..50u32 {
        out.extend(frame(
            HEADERS,
            END_STREAM | END_HEADERS,
            2 * i + 1,
            &h2c::get_block("/size/100000000"),
        ));
    }
    tls.write_all(&out).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let grown = rss.max_kib().saturating_sub(before);
    eprintln!("50 streams of 100 MB to a shut window: worker +{grown} KiB");
    assert!(grown < 20 * 1024, "worker grew {grown} KiB");
    // The stalled streams are given up at --http-stall-timeout; others are served meanwhile.
    let (mut send, _conn) = h2c::connect(shuck.addr()).await;
    assert_eq!(h2c::get(&mut send, "/").await.unwrap().0.as_u16(), 200);
    drop(tls);
}

#[tokio::test]
async fn a_silent_backend_gets_504_at_idle_timeout_and_not_before() {
    let _one = one_at_a_time();
    let origin = H1Origin::start(None);
    let shuck = Shuck::start(&["--http", "-b", &origin.spec, "--idle-timeout", "1"]);
    let (mut send, _conn) = h2c::connect(shuck.addr()).await;
    // Silent for 3 s: 504 at --idle-timeout.
    let t = Instant::now();
    let (status, _) = h2c::get(&mut send, "/slow/3000").await.unwrap();
    let took = t.elapsed();
    assert_eq!(status.as_u16(), 504);
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2500),
        "{took:?}"
    );
    // A backend connection idle for longer than --idle-timeout between two streams: the
    // next answer's wait starts afresh (no timer left over from before fires early).
    assert_eq!(h2c::get(&mut send, "/").await.unwrap().0.as_u16(), 200);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for _ in 0..3 {
        let (status, body) = h2c::get(&mut send, "/slow/600").await.unwrap();
        assert_eq!((status.as_u16(), &body[..]), (200, &b"slow"[..]));
    }
}

#[tokio::test]
async fn idle_connections_and_slow_heads_get_goaway() {
    let _one = one_at_a_time();
    let origin = H1Origin::start(None);
    let shuck = Shuck::start(&[
        "--http",
        "-b",
        &origin.spec,
        "--http-keepalive-timeout",
        "1",
    ]);
    // Idle: GOAWAY NO_ERROR after --http-keepalive-timeout.
    let t = Instant::now();
    let mut tls = h2c::raw(shuck.addr(), &[]).await;
    assert_eq!(h2c::goaway(&mut tls, Duration::from_secs(5)).await, Some(0));
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    // A stream longer than the keep-alive timeout is not cut by it, and the timeout
    // counts from its end: not from the connection's start, nor from a check made while
    // the stream was under way.
    let mut tls = h2c::raw(shuck.addr(), &[]).await;
    tls.write_all(&frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        1,
        &h2c::get_block("/slow/1500"),
    ))
    .await
    .unwrap();
    h2c::answered(&mut tls, 1, Duration::from_secs(5)).await;
    let answered = Instant::now();
    assert_eq!(h2c::goaway(&mut tls, Duration::from_secs(5)).await, Some(0));
    let idle = answered.elapsed();
    assert!(
        idle >= Duration::from_millis(900) && idle < Duration::from_millis(1400),
        "{idle:?}"
    );
    // A header block begun and never ended: closed after --http-request-timeout, long
    // before the keep-alive timeout.
    let shuck = Shuck::start(&[
        "--http",
        "-b",
        &origin.spec,
        "--http-keepalive-timeout",
        "30",
        "--http-request-timeout",
        "1",
    ]);
    let t = Instant::now();
    let mut tls = h2c::raw(shuck.addr(), &[]).await;
    tls.write_all(&frame(HEADERS, END_STREAM, 1, &h2c::get_block("/")))
        .await
        .unwrap();
    let code = h2c::goaway(&mut tls, Duration::from_secs(5)).await;
    assert!(matches!(code, Some(0) | None), "{code:?}");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "{took:?} {}",
        shuck.log()
    );
}

#[tokio::test]
async fn stop_and_reload_send_goaway_and_finish_streams() {
    let _one = one_at_a_time();
    let dir = TempDir::new("h2-drain");
    let (pem, _) = openssl_cert(&dir, "site", Key::EcP256, &["localhost"]);
    let origin = H1Origin::start(None);
    let mut shuck = Shuck::start(&["--http", "-b", &origin.spec, pem.to_str().unwrap()]);
    for signal in ["HUP", "TERM"] {
        let (send, conn) = h2c::connect(shuck.addr()).await;
        let mut s = send.clone();
        let slow = tokio::spawn(async move { h2c::get(&mut s, "/slow/1500").await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        shuck.signal(signal);
        let (status, body) = slow.await.unwrap().unwrap();
        assert_eq!(
            (status.as_u16(), &body[..]),
            (200, &b"slow"[..]),
            "the stream under way finishes"
        );
        // GOAWAY: the connection ends once its stream is done.
        let ended = tokio::time::timeout(Duration::from_secs(5), conn).await;
        assert!(ended.is_ok(), "{signal}: the connection was not closed");
    }
    assert!(shuck.wait_exit(Duration::from_secs(10)).is_some());
}

#[test]
fn a_gigabyte_each_way_is_byte_exact_with_bounded_memory() {
    let _one = one_at_a_time();
    if !require("curl", "curl") {
        return;
    }
    let dir = TempDir::new("h2-big");
    let file = dir.path("big");
    sh(&format!(
        "head -c 1073741824 /dev/urandom > {}",
        file.display()
    ));
    let sum = sh_out(&format!("sha256sum {}", file.display()));
    let sum = sum.split_whitespace().next().unwrap().to_owned();
    let origin = H1Origin::start(Some(file.clone()));
    let shuck = Shuck::start(&["--http", "-b", &origin.spec]);
    let worker = shuck.worker();
    let before = rss_kib(worker);
    let rss = RssWatch::start(worker);
    let url = format!("https://127.0.0.1:{}", shuck.port);

    let t = Instant::now();
    let down = sh_out(&format!(
        "curl -sk --http2 --max-time 300 {url}/file | sha256sum"
    ));
    eprintln!("1 GiB down in {:?}", t.elapsed());
    assert_eq!(
        down.split_whitespace().next(),
        Some(sum.as_str()),
        "download: {down}"
    );

    let t = Instant::now();
    let up = sh_out(&format!(
        "curl -sk --http2 --max-time 300 -T {} {url}/sum",
        file.display()
    ));
    eprintln!("1 GiB up in {:?}", t.elapsed());
    assert_eq!(up, format!("1073741824 {sum}"), "upload");
    let seen = origin.requests();
    assert!(seen
        .iter()
        .all(|s| s.header("x-forwarded-for") == Some("127.0.0.1")));

    let grown = rss.max_kib().saturating_sub(before);
    eprintln!("worker RSS {before} KiB before, at most +{grown} KiB during 2 GiB");
    assert!(grown < 32 * 1024, "worker grew {grown} KiB");
}

/// Waits for shuck's count of streams reset by clients to reach `n`; how long it took.
async fn client_resets_reach(stats: u16, n: f64, within: Duration) -> Duration {
    let t = Instant::now();
    let series = "shuck_h2_streams_reset_total{by=\"client\"}";
    loop {
        let (_, body) = scrape(stats, "/metrics");
        let got = sample(&body, series);
        if got >= n {
            return t.elapsed();
        }
        assert!(t.elapsed() < within, "{series} {got}, not {n}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_reset_is_seen_before_a_quick_answer_and_during_a_slow_one() {
    let _one = one_at_a_time();
    let origin = H1Origin::start(None);
    let stats = free_port();
    let shuck = Shuck::start(&["--http", "-b", &origin.spec, "--stats", &stats.to_string()]);
    let mut tls = h2c::raw(shuck.addr(), &[]).await;
    let open = |id, path| frame(HEADERS, END_STREAM | END_HEADERS, id, &h2c::get_block(path));
    let reset = |id| frame(RST_STREAM, 0, id, &8u32.to_be_bytes());
    // A first stream, so that the backend connection it leaves idle serves the next.
    tls.write_all(&open(1, "/")).await.unwrap();
    h2c::answered(&mut tls, 1, Duration::from_secs(5)).await;
    // Reset as it opens: the answer, quick, finds it and counts it.
    tls.write_all(&[open(3, "/"), reset(3)].concat())
        .await
        .unwrap();
    client_resets_reach(stats, 1.0, Duration::from_secs(3)).await;
    // Reset while the backend keeps the stream waiting: seen within the wait (the answer
    // comes at 5 s), from when the wait has lasted its patience (100 ms).
    tls.write_all(&open(5, "/slow/5000")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    tls.write_all(&reset(5)).await.unwrap();
    let took = client_resets_reach(stats, 2.0, Duration::from_secs(5)).await;
    assert!(took < Duration::from_secs(1), "{took:?}");
    // The connection still serves.
    tls.write_all(&open(7, "/")).await.unwrap();
    h2c::answered(&mut tls, 7, Duration::from_secs(5)).await;
}
