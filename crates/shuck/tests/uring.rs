//! The io_uring prototype (issue 26, point 6; `cargo test -p shuck --features io-uring
//! --test uring`): a plain-relay frontend is served from a ring, bytes pass exactly both
//! ways, sessions resume by cache and by ticket, the worker's per-connection work is
//! submissions rather than system calls of its own, a silent client meets the handshake
//! timeout, SIGTERM drains, and what the prototype cannot serve stays on the epoll path.
#![cfg(feature = "io-uring")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// shuck with one worker relaying to `backend` (and `more` flags), once its ring serves.
fn start(backend: &Origin, more: &[&str]) -> Shuck {
    let backend = backend.addr();
    let mut args = vec!["-n", "1", "-b", &backend];
    args.extend_from_slice(more);
    let shuck = Shuck::start(&args);
    assert!(
        shuck.wait_log(
            "io_uring prototype serves this frontend",
            Duration::from_secs(5)
        ),
        "{}",
        shuck.log()
    );
    shuck
}

#[test]
fn a_megabyte_each_way_with_half_close_from_the_client() {
    // The client's close_notify goes on as the ring's shutdown of the backend's write side;
    // the origin's close comes back as close_notify.
    check_megabyte_each_way_client_closing_first(|o| start(o, &[]));
}

#[test]
fn sessions_resume_by_cache_and_by_ticket() {
    let origin = Origin::echo();
    let shuck = start(&origin, &[]);
    for (what, opts) in [
        (
            "TLS 1.2 session ID",
            ClientOpts {
                version: Some(12),
                session_id_only: true,
                ..Default::default()
            },
        ),
        (
            "TLS 1.2 ticket",
            ClientOpts {
                version: Some(12),
                ..Default::default()
            },
        ),
        (
            "TLS 1.3 ticket",
            ClientOpts {
                version: Some(13),
                ..Default::default()
            },
        ),
    ] {
        let cfg = client_config(&opts);
        let mut first = connect_with(shuck.addr(), &cfg, None).unwrap();
        echo_roundtrip(&mut first);
        assert!(!resumed(&first), "{what}: the first handshake resumed");
        drop(first);
        let mut second = connect_with(shuck.addr(), &cfg, None).unwrap();
        echo_roundtrip(&mut second);
        assert!(
            resumed(&second),
            "{what}: the second handshake did not resume"
        );
    }
}

#[test]
fn a_connection_is_submissions_not_system_calls() {
    if !require("strace", "strace") {
        return;
    }
    let origin = Origin::http("hello");
    let shuck = start(&origin, &[]);
    let worker = only_child(shuck.pid());
    const SESSIONS: u64 = 40;
    let cfg = client_config(&ClientOpts {
        version: Some(13),
        no_resumption: true,
        ..Default::default()
    });
    let summary = strace_during(worker, || {
        for _ in 0..SESSIONS {
            let mut c = connect_with(shuck.addr(), &cfg, None).unwrap();
            c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
            read_until(&mut c, "hello");
        }
    });
    // On the epoll path each connection makes accept4, socket, connect, sendto/recvfrom
    // several times, epoll_ctl and close; here the ring does all of it.
    for name in [
        "accept4",
        "socket",
        "connect",
        "sendto",
        "recvfrom",
        "epoll_ctl",
        "close",
    ] {
        let n = syscalls(&summary, name);
        assert!(
            n < SESSIONS / 4,
            "{n} {name} for {SESSIONS} sessions:\n{summary}"
        );
    }
    // With one client at a time each step of a connection is a wait of its own: about 12
    // a session (bench/syscalls.sh), against about 28 calls of every kind on epoll.
    let enters = syscalls(&summary, "io_uring_enter");
    eprintln!("{enters} io_uring_enter for {SESSIONS} sessions");
    assert!(
        (SESSIONS..SESSIONS * 16).contains(&enters),
        "{enters} io_uring_enter for {SESSIONS} sessions:\n{summary}"
    );
}

#[test]
fn a_silent_client_meets_the_handshake_timeout() {
    let origin = Origin::echo();
    let shuck = start(&origin, &["--ssl-handshake-timeout", "1"]);
    let mut silent = TcpStream::connect(shuck.addr()).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let n = silent.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "a silent client got bytes");
    let took = started.elapsed();
    // Checked once a second: past the timeout, within two ticks of it.
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "closed after {took:?}"
    );
}

#[test]
fn sigterm_lets_a_live_connection_finish() {
    let origin = Origin::echo();
    let mut shuck = start(&origin, &[]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    echo_roundtrip(&mut c);
    shuck.signal("TERM");
    thread::sleep(Duration::from_millis(1500));
    // Still served during the drain (the ring saw the stop at its next tick).
    echo_roundtrip(&mut c);
    assert!(
        shuck.wait_exit(Duration::from_millis(200)).is_none(),
        "exited under a live connection"
    );
    drop(c);
    let status = shuck.wait_exit(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        shuck.log()
    );
}

#[test]
fn what_the_prototype_cannot_serve_stays_on_epoll() {
    let origin = Origin::http("hello");
    let shuck = Shuck::start(&["-n", "1", "--http", "-b", &origin.addr()]);
    assert!(
        shuck.wait_log("io_uring prototype not used", Duration::from_secs(5)),
        "{}",
        shuck.log()
    );
    assert!(
        shuck.log().contains("--http is not in the prototype"),
        "{}",
        shuck.log()
    );
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    let answer = read_until(&mut c, "hello");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// Reads until `needle` has come, failing on an early end.
fn read_until(c: &mut Client, needle: &str) -> String {
    let mut answer = Vec::new();
    let mut buf = [0u8; 512];
    while !String::from_utf8_lossy(&answer).contains(needle) {
        let n = c.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "the answer was cut short: {}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn bytes_after_a_close_notify_do_not_stall_the_ring() {
    let origin = Origin::echo();
    let shuck = start(&origin, &[]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    echo_roundtrip(&mut c);
    // close_notify and more bytes behind it, in one segment.
    c.conn.send_close_notify();
    let mut wire = Vec::new();
    while c.conn.wants_write() {
        c.conn.write_tls(&mut wire).unwrap();
    }
    // More than rustls takes in one read, so that some is left once it has seen the
    // close_notify.
    for _ in 0..1000 {
        wire.extend_from_slice(&[0x17, 0x03, 0x03, 0x00, 0x05, 1, 2, 3, 4, 5]);
    }
    c.sock.write_all(&wire).unwrap();
    // The ring still serves others at once.
    let mut other = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    echo_roundtrip(&mut other);
    let mut buf = [0u8; 64];
    c.sock
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // The first connection ends (its close_notify, then the close).
    let started = Instant::now();
    while c.sock.read(&mut buf).is_ok_and(|n| n > 0) {
        assert!(started.elapsed() < Duration::from_secs(5), "still open");
    }
}
