//! Retries and redispatch (`--retries`): a connect refused by one server moves the
//! connection (or the HTTP request not yet sent) to the next server that is up, up to
//! `--retries` others; a keep-alive backend connection that the server closes between
//! requests is replaced at the client's next request, whose connection stays open.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

use common::*;

/// A port nothing listens on (refused at once).
fn dead_port() -> u16 {
    let l = fresh_listener();
    let p = l.local_addr().unwrap().port();
    drop(l);
    p
}

/// `req` on a new connection: what came back, read until the answer `ok` ends (the
/// origins keep their connections) or the connection does.
fn ask(shuck: &Shuck, req: &[u8]) -> Vec<u8> {
    let Ok(mut c) = tls_connect(shuck.addr(), &ClientOpts::default()) else {
        return Vec::new();
    };
    c.write_all(req).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !got.ends_with(b"\r\n\r\nok") {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

/// `n` GETs, each on a new connection 20 ms after the last (longer than the tests'
/// `--backend-retry-after`, so that a dead server is back in the rotation for each: on a fast
/// machine requests back to back found them still marked down); how many were answered 200.
fn served(shuck: &Shuck, n: usize) -> usize {
    (0..n)
        .filter(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            ask(shuck, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").starts_with(b"HTTP/1.1 200")
        })
        .count()
}

#[test]
fn a_refused_connect_moves_to_another_server_up_to_retries() {
    let origin = Origin::http("ok");
    let (d1, d2) = (dead_port(), dead_port());
    let servers = [
        format!("[127.0.0.1]:{d1},name=dead1"),
        format!("[127.0.0.1]:{d2},name=dead2"),
        origin.addr(),
    ];
    // Dead servers are back in the rotation after 10 ms: every round of three meets them.
    let start = |retries: &str| {
        Shuck::start(&[
            "--http",
            "-n",
            "1",
            "--backend-retry-after",
            "10ms",
            "--retries",
            retries,
            "-b",
            &servers[0],
            "-b",
            &servers[1],
            "-b",
            &servers[2],
        ])
    };
    let shuck = start("2");
    let n = 30;
    assert_eq!(served(&shuck, n), n, "{}", shuck.log());
    drop(shuck);
    // With no retry, a client whose first choice is dead gets 503.
    let shuck = start("0");
    let ok = served(&shuck, n);
    assert!(ok < n - 5, "{ok} of {n} served without retries");
    assert!(ok > 0);
    drop(shuck);
    // One retry: the two dead servers come one after the other in the rotation, so a
    // client that meets the first may meet the second; never a third.
    let shuck = start("1");
    let ok1 = served(&shuck, n);
    assert!(ok1 > ok, "{ok1} with one retry, {ok} with none");
}

#[test]
fn a_backend_closing_between_requests_keeps_the_client_connection() {
    // An origin that answers one request per connection and closes, without saying so
    // (as a server whose keep-alive timeout ran out, or that restarted).
    let origin = Origin::start(|s| {
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut w = s;
        let mut line = String::new();
        while r.read_line(&mut line).is_ok_and(|n| n > 2) {
            line.clear();
        }
        let _ = w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
    });
    let dir = TempDir::new("retries-idle");
    let sock = dir.path("admin.sock");
    let shuck = Shuck::start(&[
        "--http",
        "--admin-socket",
        sock.to_str().unwrap(),
        "-b",
        &origin.addr(),
    ]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    for i in 0..5 {
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        while !got.ends_with(b"\r\n\r\nok") {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => panic!("request {i}: the connection ended: {got:?}"),
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        assert!(got.starts_with(b"HTTP/1.1 200"), "{got:?}");
        // Give the backend's close time to arrive before the next request.
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(origin.accepted.load(std::sync::atomic::Ordering::SeqCst), 5);
    // While the client thinks, it holds nothing on the server (no slot, not active).
    let backends = sh_out(&format!(
        "curl -s --unix-socket {} http://shuck/backends",
        sock.display()
    ));
    let v: serde_json::Value = serde_json::from_str(&backends).unwrap();
    assert_eq!(v["backends"][0]["servers"][0]["active"], 0, "{v}");
    assert_eq!(v["backends"][0]["servers"][0]["connections"], 5, "{v}");
    drop(c);

    // A client that asked to close gets its close.
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    assert!(got.ends_with(b"ok"));
}

#[test]
fn a_request_unanswered_by_a_dying_server_goes_again_when_it_may() {
    // A server that reads each request and dies on it (closes without a byte).
    let dying = Origin::start(|s| {
        let mut r = BufReader::new(s);
        let mut line = String::new();
        while r.read_line(&mut line).is_ok_and(|n| n > 2) {
            line.clear();
        }
    });
    let ok = Origin::http("ok");
    let shuck = Shuck::start(&[
        "--http",
        "-n",
        "1",
        "--backend-retry-after",
        "10ms",
        "-b",
        &dying.addr(),
        "-b",
        &ok.addr(),
    ]);
    let ask = |req: &[u8]| ask(&shuck, req);
    // GETs: the dying server gets half of them first; every one is answered.
    for _ in 0..10 {
        let got = ask(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(got.starts_with(b"HTTP/1.1 200"), "{got:?}");
    }
    let met = dying.accepted.load(std::sync::atomic::Ordering::SeqCst);
    assert!(met >= 4, "the dying server met {met} requests");
    // A POST is never sent twice: the ones it met fail.
    let failed = (0..10)
        .filter(|_| {
            !ask(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
                .starts_with(b"HTTP/1.1 200")
        })
        .count();
    assert!(failed >= 3, "{failed} POSTs failed");
}
