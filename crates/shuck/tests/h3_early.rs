//! HTTP/3's 0-RTT (`--quic-early-data`) through aioquic resuming with a ticket and sending
//! its first requests with its first flight: a safe request goes on at once with
//! `Early-Data: 1`, a POST waits for the handshake, a backend's `425 Too Early` is retried
//! after it (RFC 8470); a ticket's early data is taken once, on one host and across two
//! hosts sharing a real Redis; off by default.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::h1origin::H1Origin;
use common::h3::{aioquic, answers, gateway, h3};
use common::*;
use serde_json::{json, Value};

/// The client's options for a connection whose first requests go in 0-RTT with `ticket`:
/// its handshake's end is held back 300 ms, so that they reach shuck before it completes
/// whatever the machine's speed.
fn early_opts(ticket: &str) -> [&str; 5] {
    ["--ticket-in", ticket, "--early", "--hold-finished", "300"]
}

/// A first connection that leaves its ticket in `ticket`.
fn ticket_from(port: u16, ticket: &str) {
    let first = h3(
        port,
        json!([{"path": "/size/1"}]),
        &["--ticket-out", ticket],
    );
    assert_eq!(answers(&first)[0]["status"], "200", "{first}");
    assert!(first["tickets"].as_u64() >= Some(1), "{first}");
}

/// The requests of an early connection: a GET, a GET the backend refuses early, a POST.
fn early_requests() -> Value {
    json!([
        {"path": "/size/3"},
        {"path": "/too-early"},
        {"method": "POST", "path": "/sum", "body": "abc"},
    ])
}

fn seen_early(origin: &H1Origin, path: &str) -> Vec<Option<String>> {
    origin
        .requests()
        .iter()
        .filter(|s| s.path == path)
        .map(|s| s.header("early-data").map(str::to_owned))
        .collect()
}

#[test]
fn early_requests_are_marked_held_or_retried_and_a_ticket_is_used_once() {
    if !aioquic() {
        return;
    }
    let origin = H1Origin::start(None);
    let (shuck, stats) = gateway(&origin, &["-n", "2", "--quic-early-data"]);
    let dir = TempDir::new("h3-early");
    let ticket = dir.path("ticket");
    let t = ticket.to_str().unwrap();
    ticket_from(shuck.port, t);

    let report = h3(shuck.port, early_requests(), &early_opts(t));
    let got = answers(&report);
    assert_eq!(report["resumed"], true, "{report}");
    assert_eq!(report["early_data_accepted"], true, "{report}");
    assert_eq!(got[0]["status"], "200", "{report}");
    assert_eq!(got[0]["length"], 3, "{report}");
    // Refused early by the backend, answered after the handshake: the client sees the 200.
    assert_eq!(got[1]["status"], "200", "{report}");
    assert_eq!(got[2]["status"], "200", "{report}");
    assert_eq!(seen_early(&origin, "/size/3"), [Some("1".to_owned())]);
    assert_eq!(
        seen_early(&origin, "/too-early"),
        [Some("1".to_owned()), None],
        "the 425 is retried without the mark"
    );
    assert_eq!(seen_early(&origin, "/sum"), [None], "a POST waits");

    let (_, body) = scrape(stats, "/metrics");
    let m = |s: &str| sample(&body, s);
    assert_eq!(
        m("shuck_h3_early_requests_total{outcome=\"passed\"}"),
        2.0,
        "{body}"
    );
    assert_eq!(m("shuck_h3_early_requests_total{outcome=\"waited\"}"), 1.0);
    assert_eq!(m("shuck_h3_early_requests_total{outcome=\"retried\"}"), 1.0);
    assert_eq!(m("shuck_quic_handshakes_total{kind=\"0rtt\"}"), 1.0);
    assert_eq!(m("shuck_quic_handshakes_total{kind=\"resumed\"}"), 1.0);
    assert_eq!(m("shuck_quic_handshakes_total{kind=\"full\"}"), 1.0);

    // The same ticket again, as a replay would: single-use, so no resumption and no early
    // data; the requests are answered after a full handshake.
    let before = origin.requests().len();
    let replay = h3(shuck.port, early_requests(), &early_opts(t));
    assert_eq!(replay["resumed"], false, "{replay}");
    assert_eq!(replay["early_data_accepted"], false, "{replay}");
    for a in answers(&replay) {
        assert_eq!(a["status"], "200", "{replay}");
    }
    let later = &origin.requests()[before..];
    assert!(later.iter().all(|s| s.header("early-data").is_none()));
}

#[test]
fn early_data_is_refused_unless_asked_for() {
    if !aioquic() {
        return;
    }
    let origin = H1Origin::start(None);
    let (shuck, stats) = gateway(&origin, &[]);
    let dir = TempDir::new("h3-early-off");
    let ticket = dir.path("ticket");
    let t = ticket.to_str().unwrap();
    ticket_from(shuck.port, t);
    let report = h3(shuck.port, early_requests(), &early_opts(t));
    // Resumed from the ticket ring, without 0-RTT.
    assert_eq!(report["resumed"], true, "{report}");
    assert_eq!(report["early_data_accepted"], false, "{report}");
    for a in answers(&report) {
        assert_eq!(a["status"], "200", "{report}");
    }
    assert!(origin
        .requests()
        .iter()
        .all(|s| s.header("early-data").is_none()));
    let (_, body) = scrape(stats, "/metrics");
    assert_eq!(
        sample(&body, "shuck_quic_handshakes_total{kind=\"resumed\"}"),
        1.0,
        "{body}"
    );
    assert_eq!(
        sample(&body, "shuck_quic_handshakes_total{kind=\"0rtt\"}"),
        0.0
    );
}

#[test]
fn a_tickets_early_data_is_taken_once_across_hosts_sharing_a_store() {
    if !aioquic() {
        return;
    }
    let Some(redis) = Redis::start("127.0.0.1", &[]) else {
        return;
    };
    let dir = TempDir::new("h3-early-farm");
    let key = common::netns::key_file(&dir);
    let url = redis.url();
    let origin = H1Origin::start(None);
    let host = || {
        gateway(
            &origin,
            &[
                "--quic-early-data",
                "--shared-store",
                &url,
                "--shared-cache-key",
                &key,
            ],
        )
    };
    let (a, _) = host();
    let (b, b_stats) = host();
    for s in [&a, &b] {
        assert!(s.wait_log("shared store", std::time::Duration::from_secs(10)));
    }
    let ticket = dir.path("ticket");
    let t = ticket.to_str().unwrap();
    ticket_from(a.port, t);
    // The ticket reaches the store as the handshake ends (host A's write is queued).
    let stored = || {
        !redis
            .cli(&["--scan", "--pattern", "shuck:session:*"])
            .trim()
            .is_empty()
    };
    assert!(wait_until(std::time::Duration::from_secs(10), stored));
    let at_b = h3(b.port, early_requests(), &early_opts(t));
    assert_eq!(at_b["resumed"], true, "host B resumes A's ticket: {at_b}");
    assert_eq!(at_b["early_data_accepted"], true, "{at_b}");
    assert_eq!(answers(&at_b)[0]["length"], 3, "{at_b}");
    // Back at A, which issued it and still holds a copy: taken already, farm-wide.
    let at_a = h3(a.port, early_requests(), &early_opts(t));
    assert_eq!(at_a["resumed"], false, "{at_a}");
    assert_eq!(at_a["early_data_accepted"], false, "{at_a}");
    for r in answers(&at_a) {
        assert_eq!(r["status"], "200", "{at_a}");
    }
    let (_, body) = scrape(b_stats, "/metrics");
    assert_eq!(
        sample(&body, "shuck_quic_handshakes_total{kind=\"0rtt\"}"),
        1.0,
        "{body}"
    );
}

#[test]
fn early_data_is_refused_where_it_cannot_be_taken_safely() {
    let (code, out) = run_to_exit(&["--http", "--quic-early-data", "--test"]);
    assert_ne!(code, Some(0));
    assert!(
        out.contains("--quic-early-data") && out.contains("QUIC"),
        "{out}"
    );
    let (code, out) = run_to_exit(&[
        "--http",
        "--quic",
        "--quic-early-data",
        "--session-cache",
        "0",
        "--test",
    ]);
    assert_ne!(code, Some(0));
    assert!(out.contains("--session-cache"), "{out}");
    let (code, out) = run_to_exit(&["--http", "--quic", "--quic-early-data=maybe", "--test"]);
    assert_ne!(code, Some(0));
    assert!(
        out.contains("quic-early-data") && out.contains("maybe"),
        "{out}"
    );
}
