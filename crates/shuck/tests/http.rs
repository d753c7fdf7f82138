//! HTTP mode end to end: forwarding headers on every request, forged ones removed, bodies,
//! pipelining and WebSocket upgrades intact, malformed heads answered 400.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

/// A keep-alive origin that records each request (head and body) and answers 200 with the
/// body length; `GET /ws` with Upgrade gets 101 and then an echo.
fn recording_http() -> (Origin, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let o = Origin::start(move |s| {
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut w = s;
        loop {
            let Some(head) = read_http_head(&mut r) else {
                return;
            };
            let lower = head.to_ascii_lowercase();
            let mut body = Vec::new();
            if let Some(cl) = lower
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
            {
                body.resize(cl.trim().parse().unwrap(), 0);
                r.read_exact(&mut body).unwrap();
            } else if lower.contains("transfer-encoding: chunked") {
                loop {
                    let mut size = String::new();
                    if r.read_line(&mut size).is_err() {
                        return;
                    }
                    let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
                        return;
                    };
                    let mut chunk = vec![0u8; n + 2];
                    if r.read_exact(&mut chunk).is_err() {
                        return;
                    }
                    if n == 0 {
                        break;
                    }
                    body.extend_from_slice(&chunk[..n]);
                }
            }
            s2.lock()
                .unwrap()
                .push(format!("{head}{}", String::from_utf8_lossy(&body)));
            if lower.starts_with("get /ws ") {
                w.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n").unwrap();
                let mut buf = [0u8; 4096];
                while let Ok(n) = r.read(&mut buf) {
                    if n == 0 || w.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
                return;
            }
            let answer = format!("got {} bytes", body.len());
            w.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{answer}",
                    answer.len()
                )
                .as_bytes(),
            )
            .unwrap();
        }
    });
    (o, seen)
}

/// Reads one response (head with Content-Length, and its body).
fn response(c: &mut Client) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if c.read(&mut b).unwrap() == 0 {
            break;
        }
        head.push(b[0]);
    }
    let text = String::from_utf8(head).unwrap();
    let len: usize = text
        .to_ascii_lowercase()
        .lines()
        .find_map(|l| {
            l.strip_prefix("content-length: ")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).unwrap();
    text + &String::from_utf8_lossy(&body)
}

#[test]
fn forged_forwarding_headers_are_replaced_on_every_keep_alive_request() {
    let (o, seen) = recording_http();
    let shuck = Shuck::start(&["-n", "1", "-b", &o.addr(), "--http"]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    for i in 0..100 {
        write!(c, "GET /{i} HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: http\r\nForwarded: for=6.6.6.6\r\n\r\n").unwrap();
        assert!(response(&mut c).starts_with("HTTP/1.1 200"), "request {i}");
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 100);
    for req in seen.iter() {
        let lower = req.to_ascii_lowercase();
        assert_eq!(lower.matches("x-forwarded-for:").count(), 1, "{req}");
        assert!(req.contains("X-Forwarded-For: 127.0.0.1\r\n"), "{req}");
        assert!(req.contains("X-Forwarded-Proto: https\r\n"), "{req}");
        assert!(
            !req.contains("6.6.6.6") && !lower.contains("forwarded: for"),
            "{req}"
        );
    }
}

#[test]
fn pipelined_requests_and_bodies_pass_intact_and_in_order() {
    let (o, seen) = recording_http();
    let shuck = Shuck::start(&["-n", "1", "-b", &o.addr(), "--http"]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    let big = "z".repeat(100_000);
    let pipelined = format!(
        "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
         POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n\
         PUT /c HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{big}\
         GET /d HTTP/1.1\r\nHost: x\r\n\r\n",
        big.len()
    );
    c.write_all(pipelined.as_bytes()).unwrap();
    let answers: Vec<String> = (0..4).map(|_| response(&mut c)).collect();
    assert!(answers[0].ends_with("got 5 bytes"));
    assert!(answers[1].ends_with("got 7 bytes"));
    assert!(answers[2].ends_with(&format!("got {} bytes", big.len())));
    assert!(answers[3].ends_with("got 0 bytes"));
    let seen = seen.lock().unwrap();
    assert!(seen[0].starts_with("POST /a") && seen[0].ends_with("hello"));
    assert!(seen[1].starts_with("POST /b") && seen[1].ends_with("abcdefg"));
    assert!(seen[2].starts_with("PUT /c") && seen[2].ends_with(&big));
    assert!(seen[3].starts_with("GET /d"));
    assert!(seen
        .iter()
        .all(|r| r.contains("X-Forwarded-For: 127.0.0.1")));
}

#[test]
fn a_websocket_upgrade_becomes_a_plain_relay() {
    let (o, seen) = recording_http();
    let shuck = Shuck::start(&["-n", "1", "-b", &o.addr(), "--http"]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    write!(c, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n").unwrap();
    assert!(response(&mut c).starts_with("HTTP/1.1 101"));
    // Bytes that look like HTTP are not touched after the upgrade.
    let frame = b"\x81\x05hello GET / HTTP/1.1\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n";
    c.write_all(frame).unwrap();
    let mut back = vec![0u8; frame.len()];
    c.read_exact(&mut back).unwrap();
    assert_eq!(back, frame);
    assert_eq!(seen.lock().unwrap().len(), 1);
}

/// `Upgrade: h2c` would make the rest of the connection HTTP/2 that shuck does not read
/// (its frames, forged forwarding fields and all, would reach the backend as they are): the
/// token is dropped, and a request asking for h2c alone is refused.
#[test]
fn an_h2c_upgrade_is_refused_and_its_token_dropped_beside_others() {
    let (o, seen) = recording_http();
    let shuck = Shuck::start(&["-n", "1", "-b", &o.addr(), "--http"]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    write!(c, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n").unwrap();
    let answer = response(&mut c);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        seen.lock().unwrap().is_empty(),
        "an h2c upgrade reached the backend"
    );

    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    write!(c, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: h2c, websocket\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\nSec-WebSocket-Version: 13\r\n\r\n").unwrap();
    assert!(response(&mut c).starts_with("HTTP/1.1 101"));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].contains("\r\nUpgrade: websocket\r\n"),
        "{}",
        seen[0]
    );
    let lower = seen[0].to_ascii_lowercase();
    assert!(
        !lower.contains("h2c") && !lower.contains("http2-settings:"),
        "{}",
        seen[0]
    );
}

/// A request body that stops arriving, and an answer the client does not take, end the
/// exchange after --http-stall-timeout instead of holding the backend connection for
/// --idle-timeout.
#[test]
fn a_stalled_body_gets_408_and_an_untaken_answer_closes() {
    let origin = common::h1origin::H1Origin::start(None);
    let stats = free_port();
    let stats_s = stats.to_string();
    let shuck = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &origin.spec,
        "--http",
        "--http-stall-timeout",
        "1",
        "--stats",
        &stats_s,
    ]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    let t = Instant::now();
    c.write_all(b"POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        .unwrap();
    let answer = response(&mut c);
    let took = t.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(
        wait_until(Duration::from_secs(3), || origin
            .open
            .load(std::sync::atomic::Ordering::SeqCst)
            == 0),
        "the backend connection is closed"
    );

    // 100 MB asked for and never read: once the sockets' buffers are full, a stall.
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    c.write_all(b"GET /size/100000000 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || {
            origin.open.load(std::sync::atomic::Ordering::SeqCst) == 0
                && sample(
                    &scrape(stats, "/metrics").1,
                    "shuck_http_stalled_total{protocol=\"http/1.1\"}",
                ) == 2.0
        }),
        "the backend connection of an untaken answer is closed"
    );
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    while let Ok(n) = c.read(&mut buf) {
        if n == 0 {
            break;
        }
        got += n;
    }
    assert!(got < 100_000_000, "the answer was cut ({got} bytes)");
}

/// Bytes a backend writes after every answer owed (a body after a HEAD's head, a second
/// answer) never reach the client, who would take them for the answer to its next request:
/// the connection is closed instead, and counted.
#[test]
fn bytes_past_every_answer_owed_close_the_connection() {
    let origin = common::h1origin::H1Origin::start(None);
    let stats = free_port();
    let stats_s = stats.to_string();
    let shuck = Shuck::start(&["-n", "1", "-b", &origin.spec, "--http", "--stats", &stats_s]);
    for (method, want) in [
        ("HEAD", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"),
        ("GET", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
    ] {
        let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
        write!(c, "{method} /stray HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut got = vec![0u8; want.len()];
        c.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), want);
        // The backend's extra bytes come 200 ms later; then the client asks again.
        std::thread::sleep(Duration::from_millis(500));
        let _ = write!(c, "GET /one HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest);
        assert!(
            rest.is_empty(),
            "{method}: {}",
            String::from_utf8_lossy(&rest)
        );
    }
    let n = sample(
        &scrape(stats, "/metrics").1,
        "shuck_http_backend_dropped_total{reason=\"stray_bytes\"}",
    );
    assert_eq!(n, 2.0);
    assert!(
        !origin.requests().iter().any(|s| s.path == "/one"),
        "asked nothing more"
    );
}

#[test]
fn malformed_and_smuggling_prone_heads_get_400_and_a_close() {
    let (o, seen) = recording_http();
    let shuck = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &o.addr(),
        "--http",
        "--max-header-bytes",
        "1024",
        "--idle-timeout",
        "1",
    ]);
    let cases: Vec<Vec<u8>> =
        vec![
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc"
            .to_vec(),
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"
            .to_vec(),
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: a\r\n  folded\r\n\r\n".to_vec(),
        b"THIS IS NOT HTTP\r\n\r\n".to_vec(),
        format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "a".repeat(2000)
        )
        .into_bytes(),
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nnot-hex\r\n".to_vec(),
        // One byte over --max-header-bytes, the head's very last byte.
        format!("GET / HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n", "a".repeat(989)).into_bytes(),
    ];
    assert_eq!(cases.last().map(Vec::len), Some(1025));
    for case in &cases {
        let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
        c.write_all(case).unwrap();
        let got = String::from_utf8_lossy(&read_all(&mut c).unwrap_or_default()).into_owned();
        assert!(
            got.starts_with("HTTP/1.1 400 Bad Request"),
            "{:?} got {got:?}",
            String::from_utf8_lossy(case)
        );
    }
    // None of them reached the backend as a request (the chunked one had a valid head).
    assert!(
        seen.lock().unwrap().len() <= 1,
        "{:?}",
        seen.lock().unwrap()
    );
    // A client silent in the middle of a head gets no answer, and is cut at the idle
    // timeout rather than held forever.
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    c.sock
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(
        c.read(&mut [0u8; 1]).is_err(),
        "nothing is answered to half a head"
    );
    c.sock
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let start = std::time::Instant::now();
    assert_eq!(c.read(&mut [0u8; 1]).unwrap_or(0), 0);
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn bare_lf_host_rules_and_forwarding_names_by_any_spelling() {
    let (o, seen) = recording_http();
    let shuck = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &o.addr(),
        "--http",
        "--client-cert-header",
        "X-Client-Cert",
        "--idle-timeout",
        "30",
    ]);
    // Each is answered 400 at once (not at the 30 s idle timeout) and reaches nobody.
    let cases: [&[u8]; 17] = [
        b"GET / HTTP/1.1\nHost: x\n\n",
        b"GET / HTTP/1.1\r\nHost: x\nX: y\r\n\r\n",
        // A bare CR line ending: 400 at once, not 408 once the head never ends.
        b"GET / HTTP/1.1\rHost: x\r\r",
        b"GET / HTTP/1.1\r\nHost: x\rX: y\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
        b"GET http://evil.example/ HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.0\r\nHost: x\r\nhost: x\r\n\r\n",
        // A Host that is not uri-host[:port] (RFC 9112 3.2).
        b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a.test,b.test\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a.test/x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: user@a.test\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: b\xc3\xbccher.test\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a.test:65536\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n",
        // Trailers are checked as heads are.
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nContent-Length: 9\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: a\x00b\r\n\r\n",
    ];
    for case in cases {
        let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
        c.sock
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        c.write_all(case).unwrap();
        let got = String::from_utf8_lossy(&read_all(&mut c).unwrap_or_default()).into_owned();
        assert!(
            got.starts_with("HTTP/1.1 400 Bad Request"),
            "{:?} got {got:?}",
            String::from_utf8_lossy(case)
        );
    }
    // The trailer cases' heads and bodies went to the backend before their trailers were
    // read; their trailers never did.
    assert!(
        seen.lock().unwrap().iter().all(|r| r.starts_with("POST")
            && !r.contains("Content-Length: 9")
            && !r.contains("a\0b")),
        "{:?}",
        seen.lock().unwrap()
    );
    seen.lock().unwrap().clear();

    // Forwarding headers under other spellings are the client's claims too, and a
    // Connection header may not nominate shuck's own for removal.
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    c.write_all(
        b"GET /a HTTP/1.1\r\nHost: x\r\nX_Forwarded_For: 6.6.6.6\r\nx-forwarded_PROTO: http\r\n\
          X_Client_Cert: CN=admin\r\nConnection: keep-alive, X-Forwarded-For, X_Client_Cert\r\n\r\n",
    )
    .unwrap();
    assert!(response(&mut c).starts_with("HTTP/1.1 200"));
    let seen = seen.lock().unwrap();
    let req = &seen[0];
    let lower = req.to_ascii_lowercase().replace('_', "-");
    assert!(!req.contains("6.6.6.6") && !req.contains("admin"), "{req}");
    assert_eq!(lower.matches("x-forwarded-for:").count(), 1, "{req}");
    assert_eq!(lower.matches("x-forwarded-proto:").count(), 1, "{req}");
    assert!(req.contains("Connection: keep-alive\r\n"), "{req}");
    assert!(req.contains("X-Forwarded-For: 127.0.0.1\r\n"), "{req}");
}

#[test]
fn slow_heads_get_408_and_idle_keep_alive_closes_while_others_are_served() {
    // A thousand client sockets here, as many in shuck: past the usual soft limit of 1024.
    common::raise_fd_limit(4096);
    let (o, seen) = recording_http();
    let shuck = Shuck::start(&[
        "-b",
        &o.addr(),
        "--http",
        "--http-request-timeout",
        "4",
        "--http-keepalive-timeout",
        "2",
        "--idle-timeout",
        "60",
    ]);
    let addr = shuck.addr();
    // 1,000 clients drip a head a byte at a time (slowloris), from 10 threads; once all
    // are connected, a keep-alive client is timed while they drip.
    const DRIPPERS: usize = 1000;
    const THREADS: usize = 10;
    let deadline = Duration::from_secs(4);
    let connected = std::sync::Arc::new(std::sync::Barrier::new(THREADS + 1));
    let drippers: Vec<_> = (0..THREADS)
        .map(|_| {
            let connected = connected.clone();
            std::thread::spawn(move || {
                let mut cs: Vec<(Client, Instant)> = (0..DRIPPERS / THREADS)
                    .map(|_| {
                        let mut c = tls_connect(addr, &ClientOpts::default()).unwrap();
                        c.sock.set_nonblocking(false).unwrap();
                        c.sock
                            .set_read_timeout(Some(Duration::from_millis(1)))
                            .unwrap();
                        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Drip: ")
                            .unwrap();
                        (c, Instant::now())
                    })
                    .collect();
                connected.wait();
                let started = Instant::now();
                // Each client's answer, and how long after its first byte it came.
                let mut answers: Vec<Option<(Vec<u8>, Duration)>> = vec![None; cs.len()];
                while answers.iter().any(Option::is_none)
                    && started.elapsed() < Duration::from_secs(30)
                {
                    for ((c, first), a) in cs.iter_mut().zip(answers.iter_mut()) {
                        if a.is_some() {
                            continue;
                        }
                        let _ = c.write_all(b"a");
                        let mut buf = [0u8; 256];
                        match c.read(&mut buf) {
                            Ok(n) => *a = Some((buf[..n].to_vec(), first.elapsed())),
                            Err(e)
                                if e.kind() == std::io::ErrorKind::WouldBlock
                                    || e.kind() == std::io::ErrorKind::TimedOut => {}
                            Err(_) => *a = Some((Vec::new(), first.elapsed())),
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                answers
            })
        })
        .collect();
    connected.wait();
    let mut c = tls_connect(addr, &ClientOpts::default()).unwrap();
    let mut took = Vec::new();
    for i in 0..50 {
        let t = Instant::now();
        write!(c, "GET /{i} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(response(&mut c).starts_with("HTTP/1.1 200"), "request {i}");
        took.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(20));
    }
    let last_response = Instant::now();
    took.sort();
    let p99 = took[took.len() * 99 / 100];
    let mut cut = 0;
    for d in drippers {
        for a in d.join().unwrap() {
            let (a, after) = a.expect("a dripping client was never cut");
            assert!(
                a.starts_with(b"HTTP/1.1 408 Request Timeout"),
                "{}",
                String::from_utf8_lossy(&a)
            );
            // At the deadline: not before it, and not long after (a client notices within
            // one pass over its thread's hundred sockets).
            assert!(
                after + Duration::from_millis(100) >= deadline
                    && after < deadline + Duration::from_secs(4),
                "cut {after:?} after the first byte"
            );
            cut += 1;
        }
    }
    assert_eq!(cut, DRIPPERS);
    assert!(
        p99 < Duration::from_millis(100),
        "p99 {p99:?} while dripped on"
    );
    // None of the dripped heads reached the backend.
    assert_eq!(seen.lock().unwrap().len(), 50);

    // After a response, a keep-alive connection with no next request is closed without a
    // word at --http-keepalive-timeout (not the 60 s idle timeout).
    c.sock
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let rest = read_all(&mut c).unwrap_or_default();
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    let waited = last_response.elapsed();
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
}

#[test]
fn no_backend_connection_before_the_first_request_is_accepted() {
    use std::sync::atomic::Ordering::SeqCst;
    let (o, seen) = recording_http();
    let shuck = Shuck::start(&["-n", "1", "-b", &o.addr(), "--http", "--proxy-proxy"]);
    let cfg = client_config(&ClientOpts::default());
    let open = |req: &[u8]| {
        let mut sock = std::net::TcpStream::connect(shuck.addr()).unwrap();
        sock.write_all(b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 443\r\n")
            .unwrap();
        let mut c = tls_over(sock, &cfg, None).unwrap();
        c.sock
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        c.write_all(req).unwrap();
        c
    };
    // A refused request: 400, and no backend connection at all (not one carrying only
    // the PROXY line).
    let mut c = open(b"GET / HTTP/1.1\r\n\r\n");
    let got = String::from_utf8_lossy(&read_all(&mut c).unwrap_or_default()).into_owned();
    assert!(got.starts_with("HTTP/1.1 400"), "{got}");
    // A client that sends nothing after its handshake holds no backend connection either.
    let _silent = open(b"");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        o.accepted.load(SeqCst),
        0,
        "a backend connection was opened"
    );
    // A good request opens one, and the balancer's client is the one forwarded.
    let mut c = open(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(response(&mut c).starts_with("HTTP/1.1 200"));
    assert_eq!(o.accepted.load(SeqCst), 1);
    assert!(
        seen.lock().unwrap()[0].contains("X-Forwarded-For: 203.0.113.7\r\n"),
        "{:?}",
        seen.lock().unwrap()
    );
}

#[test]
fn forwarding_fields_in_chunked_trailers_are_removed() {
    // An origin that keeps the raw bytes of one chunked request, trailers included.
    let raw = Arc::new(Mutex::new(Vec::new()));
    let r2 = raw.clone();
    let o = Origin::start(move |mut s| {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        // Until the last chunk's line and the empty line that ends the trailers.
        let done = |g: &[u8]| {
            g.windows(5).any(|w| w == b"0\r\n\r\n")
                || (g.windows(3).any(|w| w == b"\n0\r") && g.ends_with(b"\r\n\r\n"))
        };
        while !done(&got) {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        *r2.lock().unwrap() = got;
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    });
    let shuck = Shuck::start(&["-n", "1", "-b", &o.addr(), "--http"]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    c.write_all(
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\
          X_Forwarded_For: 6.6.6.6\r\nX-Checksum: 42\r\nForwarded: for=6.6.6.6\r\n\r\n",
    )
    .unwrap();
    assert!(response(&mut c).starts_with("HTTP/1.1 200"));
    let got = String::from_utf8_lossy(&raw.lock().unwrap()).into_owned();
    assert!(
        got.ends_with("3\r\nabc\r\n0\r\nX-Checksum: 42\r\n\r\n"),
        "{got:?}"
    );
    assert!(!got.contains("6.6.6.6"), "{got:?}");
}
