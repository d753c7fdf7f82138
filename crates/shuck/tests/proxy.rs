//! The data path end to end: relay with half-close, backend failures, timeouts, limits,
//! workers, signals and the embedded default, through the real binary and real sockets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

fn read_until_eof(s: &mut TcpStream) -> Vec<u8> {
    let mut v = Vec::new();
    s.read_to_end(&mut v).unwrap();
    v
}

#[test]
fn one_megabyte_each_way_with_half_close_from_the_client() {
    check_megabyte_each_way_client_closing_first(|o| Shuck::start(&["-n", "1", "-b", &o.addr()]));
}

#[test]
fn one_megabyte_each_way_with_half_close_from_the_backend() {
    // The origin sends everything and shuts its write side, then keeps reading: the client
    // sees close_notify and can still send.
    let first = pattern(1 << 20, 3);
    let received = Arc::new(Mutex::new(Vec::new()));
    let (f2, got) = (first.clone(), received.clone());
    let origin = Origin::start(move |mut s| {
        s.write_all(&f2).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let data = read_until_eof(&mut s);
        *got.lock().unwrap() = data;
    });
    let shuck = Shuck::start(&["-n", "1", "-b", &origin.addr()]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    let down = read_all(&mut c).unwrap();
    assert!(
        down == first,
        "backend→client differs ({} bytes)",
        down.len()
    );
    let up = pattern(1 << 20, 4);
    c.write_all(&up).unwrap();
    c.conn.send_close_notify();
    c.flush().unwrap();
    c.sock.shutdown(Shutdown::Write).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while received.lock().unwrap().len() < up.len() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(
        *received.lock().unwrap() == up,
        "client→backend after half-close differs"
    );
}

#[test]
fn backend_down_closes_promptly_and_logs_why() {
    let dead = free_port();
    let shuck = Shuck::start(&["-n", "1", "-b", &format!("[127.0.0.1]:{dead}")]);
    for _ in 0..3 {
        let start = Instant::now();
        let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
        let mut buf = [0u8; 16];
        let n = c.read(&mut buf).unwrap_or(0);
        assert_eq!(n, 0, "nothing comes from a dead backend");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "closed after {:?}",
            start.elapsed()
        );
    }
    assert!(
        shuck.wait_log("backend connection failed", Duration::from_secs(2)),
        "{}",
        shuck.log()
    );
    let log = shuck.log();
    assert!(log.contains(&format!("127.0.0.1:{dead}")), "{log}");
    assert!(log.to_lowercase().contains("refused"), "{log}");
}

#[test]
fn backend_connect_timeout_closes_the_client_and_logs() {
    // A listener whose accept queue is full drops SYNs: connecting to it hangs.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(
        &"127.0.0.1:0"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    )
    .unwrap();
    sock.listen(0).unwrap();
    let port = sock.local_addr().unwrap().as_socket().unwrap().port();
    let mut fill = Vec::new();
    for _ in 0..8 {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_nonblocking(true).unwrap();
        let _ = s.connect(&sock.local_addr().unwrap());
        fill.push(s);
    }
    thread::sleep(Duration::from_millis(200));
    let backend = format!("[127.0.0.1]:{port}");
    let shuck = Shuck::start(&["-n", "1", "-b", &backend, "--backend-connect-timeout", "1"]);
    let start = Instant::now();
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    let n = c.read(&mut [0u8; 8]).unwrap_or(0);
    assert_eq!(n, 0);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(4),
        "{took:?}"
    );
    assert!(
        shuck.wait_log("timed out", Duration::from_secs(2)),
        "{}",
        shuck.log()
    );
    assert!(
        shuck.log().contains(&format!("127.0.0.1:{port}")),
        "{}",
        shuck.log()
    );
}

#[test]
fn silent_client_is_cut_at_the_handshake_timeout() {
    let origin = Origin::echo();
    let shuck = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &origin.addr(),
        "--ssl-handshake-timeout",
        "1",
    ]);
    let mut s = TcpStream::connect(shuck.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(6))).unwrap();
    let start = Instant::now();
    let r = s.read(&mut [0u8; 1]);
    let took = start.elapsed();
    assert!(
        matches!(r, Ok(0)) || matches!(&r, Err(e) if e.kind() == ErrorKind::ConnectionReset),
        "{r:?}"
    );
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(3),
        "cut after {took:?}"
    );
    assert_eq!(origin.accepted.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[test]
fn defer_accept_leaves_a_silent_client_in_the_kernel_and_serves_one_that_speaks() {
    assert!(require("ss", "iproute2"));
    let origin = Origin::echo();
    // The server side of a connection to `port`, as the kernel lists it.
    let states = |port: u16| {
        sh_out(&format!(
            "ss -tanH '( sport = :{port} )' | awk '{{print $1}}' | grep -v LISTEN || true"
        ))
    };
    for defer in [false, true] {
        let mut args = vec!["-n", "1", "-b", &origin.port_spec];
        if defer {
            args.push("--defer-accept");
        }
        let shuck = Shuck::start(&args);
        let silent = TcpStream::connect(shuck.addr()).unwrap();
        thread::sleep(Duration::from_millis(500));
        let seen = states(shuck.port);
        if defer {
            // Held before the accept queue: the kernel never completed it for shuck.
            assert!(seen.contains("SYN-RECV"), "{seen:?}");
            assert!(!seen.contains("ESTAB"), "{seen:?}");
        } else {
            assert!(seen.contains("ESTAB"), "{seen:?}");
        }
        // A client that speaks is accepted and served either way.
        let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
        echo_roundtrip(&mut c);
        drop(silent);
    }
}

#[test]
fn idle_connections_are_closed_after_the_idle_timeout() {
    let origin = Origin::echo();
    let shuck = Shuck::start(&["-n", "1", "-b", &origin.addr(), "--idle-timeout", "1"]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    // Traffic keeps it open past the timeout.
    for _ in 0..4 {
        thread::sleep(Duration::from_millis(400));
        c.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
    }
    let start = Instant::now();
    let mut b = [0u8; 1];
    let n = c.read(&mut b).unwrap_or(0);
    assert_eq!(n, 0);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[test]
fn sigterm_lets_an_in_flight_slow_response_finish_then_exits_zero() {
    let origin = Origin::start(|mut s| {
        let mut buf = [0u8; 64];
        let _ = s.read(&mut buf);
        thread::sleep(Duration::from_millis(1500));
        let _ = s.write_all(b"slow answer, complete");
    });
    let mut shuck = Shuck::start(&["-n", "2", "-b", &origin.addr()]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    c.write_all(b"request").unwrap();
    thread::sleep(Duration::from_millis(300));
    shuck.signal("TERM");
    assert!(
        shuck.wait_log("stopping", Duration::from_secs(2)),
        "{}",
        shuck.log()
    );
    thread::sleep(Duration::from_millis(200));
    assert!(
        !listening(shuck.addr().port()),
        "still accepting after SIGTERM"
    );
    let answer = read_all(&mut c).unwrap();
    assert_eq!(answer, b"slow answer, complete");
    drop(c);
    let st = shuck
        .wait_exit(Duration::from_secs(10))
        .expect("did not exit after drain");
    assert_eq!(st.code(), Some(0), "{}", shuck.log());
}

#[test]
fn drain_deadline_and_second_signal() {
    let origin = Origin::echo();
    // A connection that never ends is cut at the drain deadline; exit is still 0.
    let mut shuck = Shuck::start(&["-n", "1", "-b", &origin.addr(), "--drain-timeout", "1"]);
    let _c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    let start = Instant::now();
    shuck.signal("TERM");
    let st = shuck.wait_exit(Duration::from_secs(10)).expect("no exit");
    assert_eq!(st.code(), Some(0));
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
    assert!(shuck.log().contains("drain deadline"), "{}", shuck.log());

    // A second signal exits at once.
    let mut shuck = Shuck::start(&["-n", "1", "-b", &origin.addr(), "--drain-timeout", "60"]);
    let _c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    shuck.signal("INT");
    assert!(shuck.wait_log("stopping", Duration::from_secs(2)));
    let start = Instant::now();
    shuck.signal("INT");
    let st = shuck
        .wait_exit(Duration::from_secs(5))
        .expect("second signal ignored");
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_ne!(st.code(), Some(0));
}

#[test]
fn two_workers_both_serve() {
    let origin = Origin::echo();
    let shuck = Shuck::start(&["-n", "2", "-b", &origin.addr(), "--log-connections"]);
    if require("ss", "iproute2") {
        let out = Command::new("ss")
            .args(["-Hltn", &format!("sport = :{}", shuck.port)])
            .output()
            .unwrap();
        let listeners = String::from_utf8_lossy(&out.stdout).lines().count();
        assert_eq!(listeners, 2, "one SO_REUSEPORT socket per worker");
    }
    for i in 0..60 {
        let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
        c.write_all(b"hi").unwrap();
        let mut b = [0u8; 2];
        c.read_exact(&mut b).unwrap();
        c.conn.send_close_notify();
        c.flush().unwrap();
        drop(c);
        if i > 10 && shuck.log().contains("worker=0") && shuck.log().contains("worker=1") {
            return;
        }
    }
    thread::sleep(Duration::from_millis(500));
    let log = shuck.log();
    assert!(
        log.contains("worker=0") && log.contains("worker=1"),
        "{log}"
    );
}

#[test]
fn max_conns_leaves_excess_clients_in_the_backlog() {
    let origin = Origin::echo();
    let shuck = Shuck::start(&["-n", "1", "-b", &origin.addr(), "--max-conns", "2"]);
    let c1 = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    let _c2 = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    // The third connects at TCP level (kernel backlog) but is not served.
    let start = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let addr = shuck.addr();
    thread::spawn(move || {
        let r = tls_connect(addr, &ClientOpts::default()).map(|mut c| {
            c.write_all(b"late").unwrap();
            let mut b = [0u8; 4];
            c.read_exact(&mut b).unwrap();
            b
        });
        let _ = tx.send((r.map_err(|e| e.to_string()), Instant::now()));
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(1500)).is_err(),
        "third client served beyond --max-conns"
    );
    let released = Instant::now();
    drop(c1);
    let (r, when) = rx
        .recv_timeout(Duration::from_secs(8))
        .expect("third client never served");
    assert_eq!(&r.unwrap(), b"late");
    assert!(when >= released && when.duration_since(start) >= Duration::from_millis(1500));
}

#[test]
fn accept_errors_do_not_stop_the_worker_and_nofile_is_raised() {
    if !require("prlimit", "util-linux") {
        return;
    }
    let origin = Origin::echo();
    let port = free_port();
    let fe = format!("[127.0.0.1]:{port}");
    // Soft 32, hard 48: shuck must raise the soft limit to 48, then run out at about 20
    // connections.
    let shuck = Shuck::start_with(
        &["prlimit", "--nofile=32:48"],
        &["-f", &fe, "-n", "1", "-b", &origin.addr()],
        port,
    );
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", shuck.pid())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_owned();
    let nums: Vec<&str> = line
        .split_whitespace()
        .filter(|w| w.chars().all(|c| c.is_ascii_digit()))
        .collect();
    assert_eq!(nums, ["48", "48"], "{line}");

    let mut c0 = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    // One round trip first, so that c0's backend connection exists before the descriptors
    // run out (the client's handshake can finish before shuck has dialled the backend).
    c0.write_all(b"hello").unwrap();
    let mut b = [0u8; 5];
    c0.read_exact(&mut b).unwrap();
    let filler: Vec<TcpStream> = (0..60)
        .map(|_| TcpStream::connect(shuck.addr()).unwrap())
        .collect();
    assert!(
        shuck.wait_log("out of resources", Duration::from_secs(5)),
        "{}",
        shuck.log()
    );
    // The live connection is still served.
    c0.write_all(b"still here").unwrap();
    let mut b = [0u8; 10];
    c0.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"still here");
    // Accept keeps failing while the fillers hold the descriptors: one line for all of it.
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        shuck.log().matches("out of resources").count(),
        1,
        "logged once per episode"
    );
    drop(filler);
    // Once descriptors free up, new clients are served again.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let ok = tls_connect(shuck.addr(), &ClientOpts::default()).and_then(|mut c| {
            c.write_all(b"new")?;
            let mut b = [0u8; 3];
            c.read_exact(&mut b)?;
            Ok(b)
        });
        if let Ok(b) = ok {
            assert_eq!(&b, b"new");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "worker stopped serving: {}",
            shuck.log()
        );
        thread::sleep(Duration::from_millis(200));
    }
}

/// With the worker at its descriptor limit, a backend connection fails for shuck's own
/// shortage: that client gets 503, the failure is counted as a local resource error, the
/// backend is not marked down, and once descriptors are free again the next client is
/// served at once (not after --backend-retry-after).
#[test]
fn descriptors_running_out_are_not_blamed_on_the_backend() {
    if !require("prlimit", "util-linux") {
        return;
    }
    let origin = Origin::http("hello");
    let port = free_port();
    let fe = format!("[127.0.0.1]:{port}");
    let stats = free_port();
    let stats_s = stats.to_string();
    let shuck = Shuck::start_with(
        &["prlimit", "--nofile=64:64"],
        &[
            "-f",
            &fe,
            "-n",
            "1",
            "-b",
            &origin.addr(),
            "--http",
            "--backend-retry-after",
            "60",
            "--stats",
            &stats_s,
        ],
        port,
    );
    let get = |c: &mut Client| -> std::io::Result<String> {
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")?;
        let mut got = Vec::new();
        let mut b = [0u8; 512];
        while !got.ends_with(b"hello") && !got.ends_with(b"Service Unavailable\n") {
            let n = c.read(&mut b)?;
            if n == 0 {
                break;
            }
            got.extend_from_slice(&b[..n]);
        }
        Ok(String::from_utf8_lossy(&got).into_owned())
    };
    // A handshake alone costs shuck one descriptor (the backend is chosen at the first
    // request): open such connections until one is not accepted, which leaves the worker
    // with none free whatever it held before (inherited descriptors differ by runner).
    let cfg = client_config(&ClientOpts::default());
    let handshake = || -> std::io::Result<Client> {
        let sock = TcpStream::connect(shuck.addr())?;
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let conn =
            rustls::ClientConnection::new(cfg.clone(), name).map_err(std::io::Error::other)?;
        sock.set_read_timeout(Some(Duration::from_secs(2)))?;
        let mut s = rustls::StreamOwned::new(conn, sock);
        while s.conn.is_handshaking() {
            s.conn.complete_io(&mut s.sock)?;
        }
        Ok(s)
    };
    let mut held = Vec::new();
    while held.len() < 64 {
        match handshake() {
            Ok(c) => held.push(c),
            Err(_) => break,
        }
    }
    assert!(held.len() < 64, "the worker never ran out of descriptors");
    // One descriptor free again: the next client is accepted, and its backend connection
    // is what runs short.
    held.pop();
    thread::sleep(Duration::from_millis(300));
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    let refused = get(&mut c).unwrap_or_default();
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(
        shuck.wait_log("out of local resources", Duration::from_secs(5)),
        "{}",
        shuck.log()
    );
    drop(c);
    drop(held);
    // Served at once once the descriptors are free again.
    thread::sleep(Duration::from_millis(300));
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    let answer = get(&mut c).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (_, body) = scrape(stats, "/metrics");
    assert!(
        sample(&body, "shuck_local_resource_errors_total{kind=\"emfile\"}") >= 1.0,
        "{body}"
    );
    let up = format!(
        "shuck_backend_up{{backend=\"default\",server=\"{}\"}}",
        origin.addr()
    );
    assert_eq!(sample(&body, &up), 1.0, "{body}");
    assert_eq!(sample(&body, "shuck_backend_connect_failures_total"), 0.0);
    assert!(!shuck.log().contains("marked down for"), "{}", shuck.log());
}

#[test]
fn embedded_default_answers_curl_at_once() {
    let port = free_port();
    let fe = format!("[127.0.0.1]:{port}");
    let shuck = Shuck::start_raw(&["-f", &fe], port);
    let log = shuck.log();
    assert!(log.contains("self-signed"), "{log}");
    assert!(
        log.contains(&format!("listening on [127.0.0.1]:{port}")),
        "{log}"
    );
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    c.write_all(b"GET /hi HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let body = String::from_utf8(read_all(&mut c).unwrap()).unwrap();
    assert!(
        body.starts_with("HTTP/1.1 200 OK") && body.contains("shuck is running"),
        "{body}"
    );
    if require("curl", "curl") {
        let out = Command::new("curl")
            .args(["-sk", &format!("https://127.0.0.1:{port}/")])
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&out.stdout).contains("shuck is running"));
    }
}
