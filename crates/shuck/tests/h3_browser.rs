//! A real browser over HTTP/3: Chromium (Debian's, headless) loads a page with 40 images
//! through shuck `--http --quic` from nginx. Every request arrives over h3 (shuck's counters
//! and Chromium's net log say so), and nginx's log shows each with the client's
//! `X-Forwarded-For`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// The first of Debian's names for it.
fn chromium() -> Option<&'static str> {
    if !require("chromium", "chromium") {
        return None;
    }
    Some("chromium")
}

#[test]
fn chromium_loads_forty_images_over_h3() {
    let Some(browser) = chromium() else { return };
    if !require("nginx", "nginx") || !require("openssl", "openssl") {
        return;
    }
    let dir = TempDir::new("h3-browser");
    let www = dir.path("www");
    std::fs::create_dir_all(&www).unwrap();
    // 40 small PNGs (one pixel, each its own file) and the page showing them.
    let png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82";
    let mut page = String::from("<!doctype html><title>h3</title><body>\n");
    for i in 0..40 {
        std::fs::write(www.join(format!("img{i}.png")), png).unwrap();
        page.push_str(&format!("<img src=\"/img{i}.png\" width=8 height=8>\n"));
    }
    page.push_str("<p id=done>loaded</p></body>\n");
    std::fs::write(www.join("index.html"), page).unwrap();

    let (nginx, port) = static_nginx(&dir, &www);
    let backend = format!("[127.0.0.1]:{port}");
    let stats = free_port();
    let stats_arg = format!("127.0.0.1:{stats}");
    let shuck = Shuck::start(&[
        "--http", "--quic", "-n", "2", "-b", &backend, "--stats", &stats_arg,
    ]);

    let netlog = dir.path("netlog.json");
    let profile = dir.path("profile");
    // An address, not localhost: Chromium would try ::1 first, where nothing listens.
    let origin = format!("127.0.0.1:{}", shuck.port);
    let out = Command::new("timeout")
        .arg("90")
        .arg(browser)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--enable-quic",
            &format!("--origin-to-force-quic-on={origin}"),
            &format!(
                "--ignore-certificate-errors-spki-list={}",
                spki_pin(test_cert())
            ),
            &format!("--user-data-dir={}", profile.display()),
            &format!("--log-net-log={}", netlog.display()),
            "--virtual-time-budget=10000",
            "--dump-dom",
            &format!("https://{origin}/"),
        ])
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    drop(nginx);
    assert!(
        dom.contains("<p id=\"done\">loaded</p>"),
        "Chromium did not load the page ({:?}): {dom}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );

    // nginx: the page and its 40 images, each with the client's address.
    let log = std::fs::read_to_string(dir.path("access.log")).unwrap();
    let images = log.lines().filter(|l| l.contains("GET /img")).count();
    assert_eq!(images, 40, "{log}");
    assert!(
        log.lines()
            .filter(|l| l.contains("GET /"))
            .all(|l| l.starts_with("127.0.0.1|https|")),
        "{log}"
    );
    // shuck: every request came over HTTP/3, none over TCP.
    let (_, body) = scrape(stats, "/metrics");
    let h3 = sample(&body, "shuck_http_requests_total{protocol=\"h3\"}");
    assert!(h3 >= 41.0, "{h3} requests over h3");
    assert_eq!(
        sample(&body, "shuck_http_requests_total{protocol=\"h2\"}"),
        0.0
    );
    // Chromium's net log: events of the QUIC handshake it completed and of the HTTP/3
    // answers it decoded (event names are numbered in the log's constants).
    let net = std::fs::read_to_string(&netlog).unwrap_or_default();
    let log: serde_json::Value = serde_json::from_str(&net).expect("Chromium's net log");
    let count = |name: &str| {
        let id = log["constants"]["logEventTypes"][name].as_u64();
        log["events"]
            .as_array()
            .map_or(0, |e| e.iter().filter(|e| e["type"].as_u64() == id).count())
    };
    assert!(
        count("QUIC_SESSION_CRYPTO_HANDSHAKE_COMPLETE") >= 1,
        "no QUIC handshake"
    );
    let decoded = count("HTTP3_HEADERS_DECODED");
    assert!(
        decoded >= 41,
        "{decoded} HTTP/3 answers in Chromium's net log"
    );
    std::thread::sleep(Duration::from_millis(100));
}
