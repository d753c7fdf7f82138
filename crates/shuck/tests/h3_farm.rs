//! HTTP/3 across a farm on a real network: three hosts in network namespaces on a bridge
//! (`tests/common/netns.rs`), replicating the ticket ring by unicast, each asking every new
//! QUIC client to prove its address (`--quic-retry always`). aioquic, from the root
//! namespace: a ticket from host 1 resumes on hosts 2 and 3, and a NEW_TOKEN token from host
//! 1 spares the client host 2's Retry. A Retry token made by host 1 is taken by host 2,
//! through a UDP splitter standing in for an ECMP or anycast front: the client's first
//! packet goes to host 1, which answers with a Retry, and the rest to host 2.
//!
//! Needs root (network namespaces); says SKIP otherwise. Every namespace, link and process
//! is removed at the end, also on failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::thread;
use std::time::Duration;

use common::h3::{aioquic, answers, h3_at};
use common::netns::{key_file, Farm, HOSTS};
use common::udp_front::UdpFront;
use common::*;
use serde_json::json;

const PORT: u16 = 8443;
const SYNC_PORT: u16 = 8888;
const STATS_PORT: u16 = 9090;

/// The farms run one at a time (three shucks each on a 2-core machine).
static ONE_FARM_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Host `i` of `farm`: HTTP/3 before its built-in origin, the farm key, unicast
/// replication to the others, a Retry for every new client.
fn start_host(farm: &Farm, i: usize, key: &str) -> Shuck {
    let ip = farm.ip(i);
    let mut args: Vec<String> = [
        "--http",
        "--quic",
        "--quic-retry",
        "always",
        "-n",
        "1",
        "--shared-cache-key",
        key,
        "-U",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(format!("[*]:{SYNC_PORT}"));
    args.extend(["-f".into(), format!("[{ip}]:{PORT}")]);
    args.extend(["--stats".into(), format!("{ip}:{STATS_PORT}")]);
    for j in (1..=HOSTS).filter(|&j| j != i) {
        args.extend(["-P".into(), format!("[{}]:{SYNC_PORT}", farm.ip(j))]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Shuck::start_with(&["ip", "netns", "exec", &farm.ns(i)], &args, PORT)
}

/// A counter of host `i`.
fn metric(farm: &Farm, i: usize, series: &str) -> f64 {
    let addr = format!("{}:{STATS_PORT}", farm.ip(i));
    sample(&scrape_at(&addr, "/metrics").1, series)
}

/// The farm, its hosts, and the directory of the farm key; `None` (SKIP said) without
/// root or aioquic.
fn farm() -> Option<(Farm, Vec<Shuck>, TempDir)> {
    if !aioquic() {
        return None;
    }
    let farm = Farm::create()?;
    let dir = TempDir::new("h3-farm");
    let key = key_file(&dir);
    let hosts: Vec<Shuck> = (1..=HOSTS).map(|i| start_host(&farm, i, &key)).collect();
    // The first ring's keys reach the other hosts.
    thread::sleep(Duration::from_millis(800));
    Some((farm, hosts, dir))
}

#[test]
fn a_ticket_and_a_token_from_one_host_serve_on_the_others() {
    let _one = ONE_FARM_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some((farm, _hosts, dir)) = farm() else {
        return;
    };
    let (ticket, token) = (dir.path("ticket"), dir.path("token"));
    let (ticket, token) = (ticket.to_str().unwrap(), token.to_str().unwrap());
    let get = json!([{"path": "/"}]);
    let first = h3_at(
        &farm.ip(1),
        PORT,
        get.clone(),
        &["--ticket-out", ticket, "--token-out", token],
    );
    assert_eq!(answers(&first)[0]["status"], "200", "{first}");
    assert_eq!(first["resumed"], false);
    assert!(first["tokens"].as_u64() >= Some(1), "{first}");
    assert_eq!(metric(&farm, 1, "shuck_quic_retries_total"), 1.0);

    // Host 2: the ticket resumes, and the token proves the address (no Retry).
    let second = h3_at(
        &farm.ip(2),
        PORT,
        get.clone(),
        &["--ticket-in", ticket, "--token-in", token],
    );
    assert_eq!(answers(&second)[0]["status"], "200", "{second}");
    assert_eq!(
        second["resumed"], true,
        "host 2 resumes host 1's ticket: {second}"
    );
    assert_eq!(metric(&farm, 2, "shuck_quic_retries_total"), 0.0);
    let resumed = "shuck_quic_handshakes_total{kind=\"resumed\"}";
    assert_eq!(metric(&farm, 2, resumed), 1.0);

    // Host 3: the ticket again (stateless tickets resume more than once), with a Retry.
    let third = h3_at(&farm.ip(3), PORT, get, &["--ticket-in", ticket]);
    assert_eq!(answers(&third)[0]["status"], "200", "{third}");
    assert_eq!(
        third["resumed"], true,
        "host 3 resumes host 1's ticket: {third}"
    );
    assert_eq!(metric(&farm, 3, "shuck_quic_retries_total"), 1.0);
    assert_eq!(metric(&farm, 3, resumed), 1.0);
}

#[test]
fn a_retry_token_from_one_host_is_taken_by_another() {
    let _one = ONE_FARM_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some((farm, _hosts, _dir)) = farm() else {
        return;
    };
    let host = |i: usize| SocketAddr::new(farm.ip(i).parse().unwrap(), PORT);
    // The client's first datagram to host 1, the rest to host 2: an anycast or ECMP front
    // whose route changed between two packets.
    let (first, rest) = (host(1), host(2));
    let splitter = UdpFront::start(
        &farm.bridge_ip(),
        Box::new(move |n, d| vec![(if n == 0 { first } else { rest }, d.to_vec())]),
    );
    let report = h3_at(
        &splitter.addr.ip().to_string(),
        splitter.addr.port(),
        json!([{"path": "/"}]),
        &[],
    );
    assert_eq!(answers(&report)[0]["status"], "200", "{report}");
    // Host 1 sent the Retry and kept nothing; host 2 took its token and served.
    assert_eq!(metric(&farm, 1, "shuck_quic_retries_total"), 1.0);
    assert_eq!(
        metric(
            &farm,
            1,
            "shuck_quic_connections_total{stage=\"established\"}"
        ),
        0.0
    );
    assert_eq!(metric(&farm, 2, "shuck_quic_retries_total"), 0.0);
    assert_eq!(
        metric(
            &farm,
            2,
            "shuck_quic_connections_total{stage=\"established\"}"
        ),
        1.0
    );
}
