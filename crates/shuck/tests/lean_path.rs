//! What a connection costs the kernel (issue 26), asserted on the behaviour behind each
//! saving: TLS 1.3 session tickets leave with the first answer and still resume; a client
//! that sends nothing after its Finished still gets them at once; and, counted with strace
//! on the worker, tokio never writes its own eventfd for a connection's timers, the
//! half-close is signalled only where one direction lives on, and the tickets need no
//! write of their own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rustls::{ClientConfig, ClientConnection};

use common::*;

/// How long the slow origin waits before it answers.
const ORIGIN_DELAY: Duration = Duration::from_millis(400);

/// An origin that answers each line after [`ORIGIN_DELAY`], with the line itself.
fn slow_echo() -> Origin {
    Origin::start(|mut s: TcpStream| {
        let mut buf = [0u8; 256];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            thread::sleep(ORIGIN_DELAY);
            if s.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    })
}

/// A TLS 1.3 session whose handshake is driven by hand. `early` is written before the
/// handshake ends, so rustls sends it right after the client's Finished, in the same
/// write (as browsers and shuck-bench do). Returns the connection and socket once the
/// Finished (and `early`) left.
fn handshake(
    addr: SocketAddr,
    cfg: &Arc<ClientConfig>,
    early: &[u8],
) -> (ClientConnection, TcpStream) {
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut conn = ClientConnection::new(cfg.clone(), "localhost".try_into().unwrap()).unwrap();
    if !early.is_empty() {
        conn.writer().write_all(early).unwrap();
    }
    loop {
        while conn.wants_write() {
            conn.write_tls(&mut sock).unwrap();
        }
        if !conn.is_handshaking() {
            return (conn, sock);
        }
        assert!(conn.read_tls(&mut sock).unwrap() > 0, "shuck closed early");
        conn.process_new_packets().unwrap();
    }
}

/// Waits for the server's next bytes: how long they took and how many there were.
fn next_bytes(conn: &mut ClientConnection, sock: &mut TcpStream) -> (Duration, usize) {
    let t = Instant::now();
    let n = conn.read_tls(sock).unwrap();
    conn.process_new_packets().unwrap();
    (t.elapsed(), n)
}

fn tls13() -> Arc<ClientConfig> {
    client_config(&ClientOpts {
        version: Some(13),
        ..Default::default()
    })
}

#[test]
fn tls13_tickets_leave_with_the_first_answer_and_still_resume() {
    let origin = slow_echo();
    let shuck = Shuck::start(&["-b", &origin.addr()]);
    let cfg = tls13();

    let (mut conn, mut sock) = handshake(shuck.addr(), &cfg, b"ping\n");
    // Nothing comes before the answer: the tickets wait for it, and come in its read.
    let (after, n) = next_bytes(&mut conn, &mut sock);
    assert!(
        after >= ORIGIN_DELAY - Duration::from_millis(50),
        "the server sent {n} bytes {after:?} after the Finished, before the answer"
    );
    let mut answer = [0u8; 5];
    conn.reader().read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"ping\n");
    assert!(
        n > 5 + 22 + 100,
        "{n} bytes: tickets and answer expected in one read"
    );
    drop((conn, sock));

    let mut again = connect_with(shuck.addr(), &cfg, None).unwrap();
    assert!(resumed(&again), "the tickets sent with the answer resume");
    again.write_all(b"pong\n").unwrap();
    let mut back = [0u8; 5];
    again.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"pong\n");
}

#[test]
fn a_client_that_sends_nothing_after_its_finished_gets_its_tickets_at_once() {
    let origin = slow_echo();
    let shuck = Shuck::start(&["-b", &origin.addr()]);
    let cfg = tls13();

    // No request in hand at the handshake's end (openssl s_client -reconnect does this):
    // waiting for an answer would mean no ticket at all.
    let (mut conn, mut sock) = handshake(shuck.addr(), &cfg, b"");
    let (after, n) = next_bytes(&mut conn, &mut sock);
    assert!(
        after < ORIGIN_DELAY / 2 && n > 0,
        "the tickets came {after:?} after the Finished ({n} bytes)"
    );
    drop((conn, sock));
    let again = connect_with(shuck.addr(), &cfg, None).unwrap();
    assert!(resumed(&again), "the tickets sent at once resume");
}

#[test]
fn a_connection_makes_no_self_wakeup_and_no_needless_shutdown_or_write() {
    if !require("strace", "strace") {
        return;
    }
    let origin = Origin::http("hello");
    let shuck = Shuck::start(&["-n", "1", "-b", &origin.addr()]);
    let worker = only_child(shuck.pid());
    const SESSIONS: u64 = 60;
    let cfg = client_config(&ClientOpts {
        version: Some(13),
        no_resumption: true,
        ..Default::default()
    });
    let summary = strace_during(worker, || {
        for _ in 0..SESSIONS {
            let (conn, sock) = handshake(shuck.addr(), &cfg, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
            let mut s = rustls::StreamOwned::new(conn, sock);
            let mut answer = Vec::new();
            let mut buf = [0u8; 512];
            while !String::from_utf8_lossy(&answer).contains("hello") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "the answer was cut short");
                answer.extend_from_slice(&buf[..n]);
            }
            s.conn.send_close_notify();
            s.conn.write_tls(&mut s.sock).unwrap();
        }
    });

    // Without the timer anchor: two eventfd writes a connection (handshake and connect
    // timers); with it, those of the first connection after an idle spell and one each
    // time the anchor is set again (once a second).
    let writes = syscalls(&summary, "write");
    assert!(
        writes < SESSIONS / 4,
        "{writes} writes for {SESSIONS} sessions:\n{summary}"
    );
    // One half-close a connection (towards the side still open), not two.
    let shutdowns = syscalls(&summary, "shutdown");
    assert!(
        shutdowns <= SESSIONS + 1,
        "{shutdowns} shutdowns for {SESSIONS} sessions:\n{summary}"
    );
    // Server flight, request to the backend, tickets with the answer, close_notify.
    let sends = syscalls(&summary, "sendto") + syscalls(&summary, "writev");
    assert!(
        sends <= 4 * SESSIONS + 2,
        "{sends} sends for {SESSIONS} sessions:\n{summary}"
    );
    assert!(
        syscalls(&summary, "accept4") >= SESSIONS,
        "strace did not see the sessions:\n{summary}"
    );
}
