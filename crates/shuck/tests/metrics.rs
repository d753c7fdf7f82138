//! `--stats`: the Prometheus endpoint counts exactly what a scripted run did.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

fn scrape(port: u16, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    (head.to_owned(), body.to_owned())
}

/// The value of the sample whose line starts with `series` (name and labels).
fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no sample {series} in:\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

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
        sample(&body, &format!("shuck_backend_up{{server=\"{server}\"}}")),
        1.0
    );
    assert_eq!(
        sample(
            &body,
            &format!("shuck_backend_active{{server=\"{server}\"}}")
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
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let (code, err) = run_to_exit(&["-f", "[127.0.0.1]:1", "--stats", &port]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--stats") && err.contains(&port), "{err}");
}
