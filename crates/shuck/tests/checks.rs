//! Active health checks (`check`, `check-http`, `check-tls`, `check-send-proxy`, `rise`,
//! `fall`, `check-interval`): a server that stops answering is taken out within `fall`
//! checks and brought back within `rise`, with no failed client meanwhile; an HTTP check
//! that gets a refused status takes its server out; TCP and UNIX-socket servers alike.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// An HTTP/1.1 server on a fixed port that can be stopped and started again: it answers
/// `/health` with `status` and anything else with 200 and its `body`, one request per
/// connection, and records the PROXY lines it gets.
struct Toggle {
    port: u16,
    body: &'static str,
    status: Arc<AtomicU16>,
    proxy_lines: Arc<Mutex<Vec<String>>>,
    stop: Option<Arc<AtomicBool>>,
}

impl Toggle {
    fn new(body: &'static str) -> Toggle {
        let mut t = Toggle {
            port: free_port(),
            body,
            status: Arc::new(AtomicU16::new(200)),
            proxy_lines: Arc::new(Mutex::new(Vec::new())),
            stop: None,
        };
        t.start();
        t
    }

    fn spec(&self) -> String {
        format!("[127.0.0.1]:{}", self.port)
    }

    fn start(&mut self) {
        let l = TcpListener::bind(("127.0.0.1", self.port)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        self.stop = Some(stop.clone());
        let (status, body, lines) = (self.status.clone(), self.body, self.proxy_lines.clone());
        thread::spawn(move || {
            for s in l.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(s) = s else { continue };
                let (status, lines) = (status.clone(), lines.clone());
                thread::spawn(move || answer(s, &status, body, &lines));
            }
        });
    }

    fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop.store(true, Ordering::SeqCst);
            let _ = TcpStream::connect(("127.0.0.1", self.port)); // wakes the accept loop
        }
    }
}

impl Drop for Toggle {
    fn drop(&mut self) {
        self.stop();
    }
}

fn answer(s: TcpStream, status: &AtomicU16, body: &str, lines: &Mutex<Vec<String>>) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    let mut first = String::new();
    if r.read_line(&mut first).is_err() {
        return;
    }
    if first.starts_with("PROXY ") {
        lines.lock().unwrap().push(first.trim_end().to_owned());
        first.clear();
        if r.read_line(&mut first).is_err() {
            return;
        }
    }
    let mut line = String::new();
    while r.read_line(&mut line).is_ok_and(|n| n > 2) {
        line.clear();
    }
    if first.starts_with("GET /slow ") {
        thread::sleep(Duration::from_millis(1500));
    }
    let (code, text) = if first.starts_with("GET /health ") {
        (status.load(Ordering::SeqCst), "health")
    } else {
        (200, body)
    };
    let _ = write!(
        w,
        "HTTP/1.1 {code} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
}

/// One GET through shuck on a new connection: its status and body.
fn get(shuck: &Shuck) -> Option<(u16, String)> {
    get_path(shuck, "/")
}

fn get_path(shuck: &Shuck, path: &str) -> Option<(u16, String)> {
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).ok()?;
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let all = String::from_utf8_lossy(&read_all(&mut c).ok()?).into_owned();
    let status = all.split(' ').nth(1)?.parse().ok()?;
    Some((status, all.split_once("\r\n\r\n")?.1.to_owned()))
}

fn metric(stats: u16, series: &str) -> f64 {
    let (_, body) = scrape(stats, "/metrics");
    sample(&body, series)
}

#[test]
fn a_server_that_stops_is_taken_out_and_brought_back_without_failing_a_client() {
    let a = Toggle::new("A");
    let mut b = Toggle::new("B");
    let stats = free_port();
    let stats_s = stats.to_string();
    let opts = ",check-http=/health,check-interval=200ms,rise=2,fall=2,check-send-proxy";
    let (sa, sb) = (
        format!("{},name=a{opts}", a.spec()),
        format!("{},name=b{opts}", b.spec()),
    );
    let shuck = Shuck::start(&[
        "--http",
        "-b",
        &sa,
        "-b",
        &sb,
        "--write-proxy-v1",
        "--stats",
        &stats_s,
    ]);
    let up_b = "shuck_backend_check_up{backend=\"default\",server=\"b\"}";
    assert!(wait_until(Duration::from_secs(3), || metric(stats, up_b) == 1.0));
    // Both serve.
    let mut seen = std::collections::HashSet::new();
    for _ in 0..10 {
        let (status, body) = get(&shuck).unwrap();
        assert_eq!(status, 200);
        seen.insert(body);
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    // Checks come with the PROXY header the backend asked for (a v1 line of shuck's own).
    assert!(a
        .proxy_lines
        .lock()
        .unwrap()
        .iter()
        .any(|l| l == "PROXY UNKNOWN"));

    // b stops: out within fall × interval (and some slack), no client fails meanwhile.
    b.stop();
    let stopped = Instant::now();
    let mut failed = 0;
    while stopped.elapsed() < Duration::from_secs(5)
        && !shuck.log().contains("backend_check_down")
        && !shuck.log().contains("takes nothing new")
    {
        match get(&shuck) {
            Some((200, body)) => assert_eq!(body, "A"),
            other => {
                failed += 1;
                eprintln!("{other:?}");
            }
        }
    }
    let out_after = stopped.elapsed();
    assert!(
        shuck
            .log()
            .contains("b of backend default takes nothing new"),
        "{}",
        shuck.log()
    );
    assert!(
        out_after < Duration::from_secs(2),
        "taken out after {out_after:?}"
    );
    assert_eq!(failed, 0, "{}", shuck.log());
    assert_eq!(metric(stats, up_b), 0.0);
    let fails = "shuck_backend_checks_total{backend=\"default\",server=\"b\",result=\"failed\"}";
    assert!(metric(stats, fails) >= 2.0);
    // While out, it takes nothing (its failures are not even tried).
    for _ in 0..6 {
        assert_eq!(get(&shuck).unwrap(), (200, "A".to_owned()));
    }

    // b is back: in within rise × interval.
    b.start();
    let started = Instant::now();
    assert!(
        shuck.wait_log("b of backend default is back", Duration::from_secs(3)),
        "{}",
        shuck.log()
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(metric(stats, up_b), 1.0);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..10 {
        seen.insert(get(&shuck).unwrap().1);
    }
    assert_eq!(seen.len(), 2, "{seen:?}");

    // A refused status takes it out too; check-status decides what is accepted.
    b.status.store(503, Ordering::SeqCst);
    assert!(wait_until(Duration::from_secs(3), || metric(stats, up_b) == 0.0));
    assert!(shuck.log().contains("status 503"), "{}", shuck.log());
    b.status.store(200, Ordering::SeqCst);
    assert!(wait_until(Duration::from_secs(3), || metric(stats, up_b) == 1.0));
}

#[test]
fn a_connection_waiting_for_a_server_taken_out_goes_to_one_that_is_up() {
    let a = Toggle::new("A");
    let b = Toggle::new("B");
    // a is nearly always chosen, and takes one connection at a time.
    let sa = format!(
        "{},name=a,weight=1000,maxconn=1,check-http=/health,check-interval=100ms,fall=1,rise=1",
        a.spec()
    );
    let sb = format!("{},name=b,weight=1", b.spec());
    let shuck = Shuck::start(&["-b", &sa, "-b", &sb, "-n", "1", "--queue-timeout", "10"]);
    thread::sleep(Duration::from_millis(300));
    let slow = {
        let addr = shuck.addr();
        thread::spawn(move || {
            let mut c = tls_connect(addr, &ClientOpts::default()).unwrap();
            c.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            String::from_utf8_lossy(&read_all(&mut c).unwrap()).into_owned()
        })
    };
    thread::sleep(Duration::from_millis(200));
    // This one waits in a's queue; a is taken out meanwhile: it goes to b at once.
    let waiting = {
        let addr = shuck.addr();
        thread::spawn(move || {
            let started = Instant::now();
            let mut c = tls_connect(addr, &ClientOpts::default()).unwrap();
            c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let body = String::from_utf8_lossy(&read_all(&mut c).unwrap()).into_owned();
            (body, started.elapsed())
        })
    };
    thread::sleep(Duration::from_millis(200));
    a.status.store(503, Ordering::SeqCst);
    let (body, took) = waiting.join().unwrap();
    assert!(body.ends_with("B"), "{body}\n{}", shuck.log());
    assert!(
        took < Duration::from_millis(1200),
        "waited {took:?}: it stayed in a's queue"
    );
    assert!(
        slow.join().unwrap().ends_with("A"),
        "the connection under way finishes"
    );
}

#[test]
fn unix_socket_and_tls_checks() {
    let dir = TempDir::new("checks-unix");
    let path = dir.path("backend.sock");
    let listener = UnixListener::bind(&path).unwrap();
    // A TLS server for check-tls: another shuck in front of its built-in origin.
    let tls_port = free_port();
    let tls_fe = format!("[127.0.0.1]:{tls_port}");
    let tls_server = Shuck::start_raw(&["-f", &tls_fe], tls_port);
    let plain = Toggle::new("P");
    let stats = free_port();
    let stats_s = stats.to_string();
    let unix = format!(
        "{},name=u,check,check-interval=100ms,fall=1,rise=1",
        path.display()
    );
    let tls = format!("[127.0.0.1]:{tls_port},name=t,check-tls,check-interval=100ms,fall=1,rise=1");
    let not_tls = format!(
        "{},name=n,check-tls,check-interval=100ms,fall=1,rise=1",
        plain.spec()
    );
    let shuck = Shuck::start(&["-b", &unix, "-b", &tls, "-b", &not_tls, "--stats", &stats_s]);
    let up = |s: &str| {
        metric(
            stats,
            &format!("shuck_backend_check_up{{backend=\"default\",server=\"{s}\"}}"),
        )
    };
    thread::sleep(Duration::from_millis(600));
    assert_eq!(up("u"), 1.0, "{}", shuck.log());
    assert_eq!(up("t"), 1.0, "{}", shuck.log());
    assert_eq!(
        up("n"),
        0.0,
        "a plain server fails a TLS check: {}",
        shuck.log()
    );
    // The UNIX socket goes away: out.
    drop(listener);
    std::fs::remove_file(&path).unwrap();
    assert!(
        wait_until(Duration::from_secs(3), || up("u") == 0.0),
        "{}",
        shuck.log()
    );
    drop(tls_server);
    assert!(
        wait_until(Duration::from_secs(3), || up("t") == 0.0),
        "{}",
        shuck.log()
    );
}

#[test]
fn check_options_are_checked() {
    for (spec, needle) in [
        ("[127.0.0.1]:1,rise=2", "rise needs check"),
        (
            "[127.0.0.1]:1,check,check-status=200",
            "check-status needs check-http",
        ),
        ("[127.0.0.1]:1,check-http=health", "a path starting with /"),
        ("[127.0.0.1]:1,check,check-interval=1ms", "from 10ms to 1h"),
        ("[127.0.0.1]:1,check,fall=0", "from 1 to 1000"),
        (
            "[127.0.0.1]:1,check-http=/h,check-status=9xx",
            "check-status",
        ),
        ("[127.0.0.1]:1,name=a b", "letters, digits"),
        (
            "[127.0.0.1]:1,chek",
            "unknown or malformed parameter \"chek\"",
        ),
    ] {
        let (code, out) = run_to_exit(&["-b", spec, "--test"]);
        assert_eq!(code, Some(1), "{spec}: {out}");
        assert!(out.contains(needle), "{spec}: {out}");
    }
}
