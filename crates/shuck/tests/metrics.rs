//! `--stats`: the Prometheus endpoint counts exactly what a scripted run did.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

#[test]
fn metrics_count_exactly_what_happened() {
    let origin = Origin::echo();
    let stats = free_port();
    let stats_s = stats.to_string();
    let shuck = Shuck::start(&["-n", "2", "-b", &origin.addr(), "--stats", &stats_s]);
    let fe = format!("[127.0.0.1]:{}", shuck.port);

    // 1 full then 3 resumed with one client; 4 full without resumption.
    let resuming = ClientOpts::default();
    let cfg = client_config(&resuming);
    for i in 0..4 {
        let mut c = connect_with(shuck.addr(), &cfg, None).unwrap();
        assert_eq!(resumed(&c), i > 0);
        echo_roundtrip(&mut c);
    }
    let fresh = ClientOpts {
        no_resumption: true,
        ..ClientOpts::default()
    };
    for _ in 0..4 {
        let mut c = tls_connect(shuck.addr(), &fresh).unwrap();
        echo_roundtrip(&mut c);
    }
    // 2 failed: plain text instead of a ClientHello, and a client that leaves at once.
    let mut junk = TcpStream::connect(shuck.addr()).unwrap();
    junk.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    let mut b = Vec::new();
    let _ = junk.read_to_end(&mut b);
    drop(TcpStream::connect(shuck.addr()).unwrap());

    // Wait until every connection is accepted and counted closed.
    let deadline = Instant::now() + Duration::from_secs(5);
    let body = loop {
        let (_, body) = scrape(stats, "/metrics");
        let active = sample(
            &body,
            &format!("shuck_connections_active{{frontend=\"{fe}\"}}"),
        );
        let accepted = sample(
            &body,
            &format!("shuck_connections_accepted_total{{frontend=\"{fe}\"}}"),
        );
        if active == 0.0 && accepted >= 10.0 {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "connections still active:\n{body}"
        );
        thread::sleep(Duration::from_millis(50));
    };
    let (head, _) = scrape(stats, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");

    assert_eq!(
        sample(
            &body,
            &format!("shuck_connections_accepted_total{{frontend=\"{fe}\"}}")
        ),
        10.0
    );
    assert_eq!(sample(&body, "shuck_handshakes_total{kind=\"full\"}"), 5.0);
    assert_eq!(
        sample(&body, "shuck_handshakes_total{kind=\"resumed\"}"),
        3.0
    );
    assert_eq!(sample(&body, "shuck_resumptions_total{by=\"ticket\"}"), 3.0);
    assert_eq!(
        sample(
            &body,
            "shuck_handshakes_failed_total{reason=\"alert_sent\",alert=\"decode_error\"}"
        ),
        1.0
    );
    assert_eq!(
        sample(&body, "shuck_handshakes_failed_total{reason=\"closed\"}"),
        1.0
    );
    assert_eq!(
        sample(&body, "shuck_handshakes_failed_total{reason=\"timeout\"}"),
        0.0
    );
    // 8 echo round trips of 19 bytes each way.
    assert_eq!(
        sample(
            &body,
            &format!("shuck_bytes_received_total{{frontend=\"{fe}\"}}")
        ),
        152.0
    );
    assert_eq!(
        sample(
            &body,
            &format!("shuck_bytes_sent_total{{frontend=\"{fe}\"}}")
        ),
        152.0
    );
    assert_eq!(
        sample(
            &body,
            &format!("shuck_connections_refused_total{{frontend=\"{fe}\"}}")
        ),
        0.0
    );
    let server = format!("[127.0.0.1]:{}", origin.port);
    assert_eq!(
        sample(
            &body,
            &format!("shuck_backend_up{{backend=\"default\",server=\"{server}\"}}")
        ),
        1.0
    );
    assert_eq!(
        sample(
            &body,
            &format!("shuck_backend_active{{backend=\"default\",server=\"{server}\"}}")
        ),
        0.0
    );
    assert_eq!(
        sample(&body, "shuck_session_cache_entries"),
        0.0,
        "tickets, not the cache"
    );
    assert_eq!(sample(&body, "shuck_backend_connect_failures_total"), 0.0);
    assert!(body.trim_end().ends_with("# EOF"), "{body}");

    let (head, _) = scrape(stats, "/nope");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    // Loopback only by default.
    let ss = sh_out(&format!("ss -ltn 'sport = :{stats}'"));
    assert!(ss.contains("127.0.0.1:"), "{ss}");
}

#[test]
fn a_taken_stats_port_is_an_error() {
    let taken = fresh_listener();
    let port = taken.local_addr().unwrap().port().to_string();
    let (code, err) = run_to_exit(&["-f", "[127.0.0.1]:1", "--stats", &port]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--stats") && err.contains(&port), "{err}");
}

/// One worker thread, `--stats` on a fresh port, an echo origin, and `extra`.
fn with_stats(extra: &[&str]) -> (Shuck, u16, Origin) {
    let origin = Origin::echo();
    let stats = free_port();
    let (stats_s, backend) = (stats.to_string(), origin.addr());
    let mut args = vec!["-n", "1", "--stats", &stats_s, "-b", &backend];
    args.extend_from_slice(extra);
    (Shuck::start(&args), stats, origin)
}

#[test]
fn certificate_expiry_is_exposed_per_name_and_follows_reloads() {
    let dir = TempDir::new("cert-expiry");
    let (a, _) = openssl_cert(&dir, "a", Key::EcP256, &["a.example"]);
    let (b, _) = openssl_cert(&dir, "b", Key::EcP256, &["b.example", "www.b.example"]);
    let not_after = |name: &str| -> f64 {
        let crt = dir.path(&format!("{name}.crt"));
        sh_out(&format!(
            "date -d \"$(openssl x509 -enddate -noout -in {} | cut -d= -f2)\" +%s",
            crt.display()
        ))
        .trim()
        .parse()
        .unwrap()
    };
    let (shuck, stats, _origin) = with_stats(&[a.to_str().unwrap(), b.to_str().unwrap()]);
    let (_, body) = scrape(stats, "/metrics");
    let series = |n: &str| format!("shuck_certificate_not_after_seconds{{name=\"{n}\"}}");
    assert_eq!(sample(&body, &series("a.example")), not_after("a"));
    assert_eq!(sample(&body, &series("b.example")), not_after("b"));
    assert!(
        body.contains("# TYPE shuck_certificate_not_after_seconds gauge"),
        "{body}"
    );

    // A renewed certificate (valid until 4096, rcgen's default) shows after the reload.
    let (renewed, _) = rcgen_cert(&dir, "renewed", &["a.example"], false);
    std::fs::copy(&renewed, &a).unwrap();
    shuck.signal("HUP");
    assert!(shuck.wait_log("configuration reloaded", Duration::from_secs(10)));
    let (_, body) = scrape(stats, "/metrics");
    assert_eq!(sample(&body, &series("a.example")), 67_090_118_400.0);
    assert_eq!(sample(&body, &series("b.example")), not_after("b"));
}

/// Every `expr` (and template query) in a Grafana dashboard, wherever it is nested.
fn queries(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => queries(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

#[test]
fn every_metric_the_dashboard_queries_is_exposed() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../contrib/grafana/shuck.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut exprs = Vec::new();
    queries(&dashboard, &mut exprs);
    let mut queried: Vec<String> = exprs
        .iter()
        .flat_map(|e| {
            e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("shuck_"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    queried.sort();
    queried.dedup();
    // What the issue asks the dashboard to show is among them.
    for m in [
        "shuck_handshakes_total",
        "shuck_handshakes_failed_total",
        "shuck_connections_active",
        "shuck_bytes_received_total",
        "shuck_bytes_sent_total",
        "shuck_backend_up",
        "shuck_backend_queued",
        "shuck_replication_dropped_total",
        "shuck_certificate_not_after_seconds",
        "shuck_store_operations_total",
        "shuck_store_lookup_seconds_bucket",
        "shuck_acme_orders_total",
        "shuck_acme_next_renewal_seconds",
        "shuck_http_requests_total",
        "shuck_h2_streams_reset_total",
        "shuck_h2_goaway_total",
        "shuck_backend_check_up",
        "shuck_backend_checks_total",
        "shuck_backend_admin_state",
        "shuck_backend_connections_total",
        "shuck_quic_connections_total",
        "shuck_h3_streams_reset_total",
        "shuck_h3_goaway_total",
        "shuck_quic_dropped_total",
        "shuck_client_refused_total",
        "shuck_client_table_entries",
        "shuck_client_table_evictions_total",
    ] {
        assert!(
            queried.iter().any(|q| q == m),
            "the dashboard does not show {m}"
        );
    }

    // A shuck with replication and the shared store on, so that every family has its
    // samples.
    let Some(redis) = Redis::start("127.0.0.1", &[]) else {
        return;
    };
    let dir = TempDir::new("dashboard");
    let key = dir.path("farm.key");
    std::fs::write(&key, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n").unwrap();
    sh(&format!("chmod 600 {}", key.display()));
    let (udp, peer) = (free_port(), free_port());
    // A server with a health check: its families too.
    let checked_origin = Origin::echo();
    let checked = format!("{},name=checked,check", checked_origin.addr());
    let (_shuck, stats, _origin) = with_stats(&[
        "-b",
        &checked,
        // HTTP mode: its families too.
        "--http",
        // Client limits: the client table's.
        "--client-max-conns",
        "1000",
        "-U",
        &format!("[127.0.0.1]:{udp}"),
        "-P",
        &format!("[127.0.0.1]:{peer}"),
        "--shared-cache-key",
        key.to_str().unwrap(),
        "--shared-store",
        &redis.url(),
        // ACME on (its CA unreachable): its families are there too.
        "--acme-directory",
        "https://127.0.0.1:1/dir",
        "--acme-agree-tos",
        "--acme-domain",
        "dashboard.test",
        "--acme-state",
        dir.path("acme").to_str().unwrap(),
    ]);
    // The client reports once its first attempt is over.
    let mut body = String::new();
    assert!(wait_until(Duration::from_secs(20), || {
        body = scrape(stats, "/metrics").1;
        body.contains("shuck_acme_next_renewal_seconds{")
    }));
    let exposed: Vec<&str> = body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    for m in &queried {
        assert!(
            exposed.contains(&m.as_str()),
            "the dashboard queries {m}, which /metrics does not give:\n{body}"
        );
    }
}
