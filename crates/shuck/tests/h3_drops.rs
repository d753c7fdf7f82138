//! What QUIC discards, counted by reason (`shuck_quic_dropped_total{reason}`), from real
//! datagrams: a truncated header, an unknown version (answered with Version Negotiation),
//! an Initial under 1 200 bytes, a packet for no connection; a path that duplicates,
//! corrupts and mirrors aioquic's datagrams (its requests still answered); and datagrams
//! the kernel had no room for while the worker was stopped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use common::h1origin::H1Origin;
use common::h3::{aioquic, answers, gateway, h3};
use common::udp_front::UdpFront;
use common::*;
use serde_json::json;

/// A long header (Initial's type) of `version` with 8-byte connection IDs, padded with
/// zeros to `len` bytes; for version 1 the length field covers the rest, as a client's.
fn long_header(version: u32, len: usize) -> Vec<u8> {
    let mut d = vec![0xc0];
    d.extend_from_slice(&version.to_be_bytes());
    d.push(8);
    d.extend_from_slice(&[0x11; 8]);
    if version == 1 {
        // No source ID, no token, then the 2-byte length of what follows.
        d.extend_from_slice(&[0, 0]);
        let rest = len - d.len() - 2;
        d.extend_from_slice(&[0x40 | (rest >> 8) as u8, rest as u8]);
    } else {
        d.push(8);
        d.extend_from_slice(&[0x22; 8]);
    }
    d.resize(len, 0);
    d
}

/// The worker stopped (SIGSTOP) until dropped, also when the test fails.
struct Stopped(u32);

impl Stopped {
    fn new(pid: u32) -> Stopped {
        sh(&format!("kill -STOP {pid}"));
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        sh(&format!("kill -CONT {}", self.0));
    }
}

#[test]
fn discarded_datagrams_are_counted_by_reason() {
    if !aioquic() {
        return;
    }
    let origin = H1Origin::start(None);
    let (shuck, stats) = gateway(&origin, &[]);
    let server: SocketAddr = format!("127.0.0.1:{}", shuck.port).parse().unwrap();
    let dropped = |reason: &str| {
        sample(
            &scrape(stats, "/metrics").1,
            &format!("shuck_quic_dropped_total{{reason=\"{reason}\"}}"),
        )
    };

    // Datagrams no client would send.
    let raw = UdpSocket::bind("127.0.0.1:0").unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for _ in 0..3 {
        raw.send_to(&[0x40], server).unwrap();
    }
    raw.send_to(&long_header(0x1a2a_3a4a, 1200), server)
        .unwrap();
    let mut buf = [0u8; 2048];
    let (n, _) = raw.recv_from(&mut buf).unwrap();
    assert!(
        n > 6 && buf[0] & 0x80 != 0 && buf[1..5] == [0; 4],
        "an unknown version of 1 200 bytes is answered with Version Negotiation: {:x?}",
        &buf[..n]
    );
    raw.send_to(&long_header(0x1a2a_3a4a, 100), server).unwrap();
    for _ in 0..2 {
        raw.send_to(&long_header(1, 100), server).unwrap();
    }
    let mut short = vec![0x40];
    short.extend_from_slice(&[0x5a; 99]);
    for _ in 0..4 {
        raw.send_to(&short, server).unwrap();
    }
    let expected = [
        ("malformed", 3.0),
        ("unsupported_version", 2.0),
        ("short_initial", 2.0),
        ("unknown_connection", 4.0),
    ];
    wait_until(Duration::from_secs(5), || {
        expected.iter().all(|(r, n)| dropped(r) >= *n)
    });
    for (reason, n) in expected {
        assert_eq!(dropped(reason), n, "{reason}");
    }
    assert_eq!(dropped("duplicate"), 0.0);

    // A path that delivers each of aioquic's datagrams twice and a third time with its
    // last byte changed, and the second one also from another address.
    let mirror = UdpSocket::bind("127.0.0.1:0").unwrap();
    let path = UdpFront::start(
        "127.0.0.1",
        Box::new(move |n, d| {
            // The second (the client's Finished, or before it), which the server takes
            // while still handshaking; before the copies the front sends, so first.
            if n == 1 {
                let _ = mirror.send_to(d, server);
            }
            let mut bad = d.to_vec();
            if let Some(last) = bad.last_mut() {
                *last ^= 0x55;
            }
            vec![(server, d.to_vec()), (server, d.to_vec()), (server, bad)]
        }),
    );
    let requests: Vec<_> = (0..5).map(|_| json!({"path": "/size/20000"})).collect();
    let report = h3(path.addr.port(), json!(requests), &[]);
    for a in answers(&report) {
        assert_eq!(a["status"], "200", "{report}");
    }
    drop(path);
    for reason in ["duplicate", "undecryptable", "unexpected_peer"] {
        assert!(dropped(reason) >= 1.0, "{reason}");
    }

    // The worker stopped: its socket's receive buffer fills and the kernel drops the rest.
    // Every datagram is counted once: what fitted is read after (for no connection).
    assert_eq!(dropped("socket_buffer"), 0.0);
    let before = dropped("unknown_connection");
    {
        let _stopped = Stopped::new(shuck.worker());
        for _ in 0..4000 {
            raw.send_to(&short, server).unwrap();
        }
    }
    let counted = || dropped("socket_buffer") + dropped("unknown_connection") - before;
    wait_until(Duration::from_secs(10), || counted() >= 4000.0);
    let kernel = dropped("socket_buffer");
    let body = scrape(stats, "/metrics").1;
    let lines: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("shuck_quic_dropped"))
        .collect();
    eprintln!("{}", lines.join("\n"));
    assert!(
        kernel > 0.0 && counted() >= 4000.0,
        "the kernel dropped {kernel}, {} counted in all",
        counted()
    );
}
