//! `--shared-store`: sessions and the ticket key ring in a real redis-server (Debian's
//! package, started by each test on a port of its own), shared by shucks on loopback. The
//! farm behind HAProxy in network namespaces is in `tests/farm.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Read;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

fn key_file(dir: &TempDir, name: &str, key: &str) -> String {
    let p = dir.path(name);
    std::fs::write(&p, format!("{key}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p.to_str().unwrap().to_owned()
}

const FARM_KEY: &str = "ZmFybSBrZXkgZm9yIHRoZSBzaHVjayB0ZXN0cyEhISE=";
const OTHER_KEY: &str = "YW5vdGhlciBmYXJtJ3Mga2V5LCBub3QgdGhpcyBvbmU=";

/// The backend of every host: answers every request with 200.
static ORIGIN: std::sync::LazyLock<Origin> = std::sync::LazyLock::new(|| Origin::http("ok"));

/// A host of the farm: one certificate for all, the store at `url`, its own `--stats`.
fn host(cert: &str, url: &str, key: &str, extra: &[&str]) -> (Shuck, u16) {
    let stats = free_port();
    let stats_arg = format!("127.0.0.1:{stats}");
    let backend = ORIGIN.addr();
    let mut args = vec![
        "-b",
        &backend,
        "-n",
        "1",
        "--shared-store",
        url,
        "--shared-cache-key",
        key,
        "--stats",
        &stats_arg,
    ];
    args.extend_from_slice(extra);
    args.push(cert);
    let s = Shuck::start(&args);
    assert!(
        s.wait_log("shared store", Duration::from_secs(10)),
        "{}",
        s.log()
    );
    (s, stats)
}

fn metric(port: u16, series: &str) -> f64 {
    sample(&scrape(port, "/metrics").1, series)
}

/// A client resuming TLS 1.2 by session ID only.
fn tls12_ids() -> std::sync::Arc<rustls::ClientConfig> {
    client_config(&ClientOpts {
        version: Some(12),
        session_id_only: true,
        ..ClientOpts::default()
    })
}

/// What most tests start from: a redis-server of their own (with `extra` arguments), a
/// directory, the farm's certificate and its key file.
fn farm(extra: &[&str]) -> Option<(Redis, TempDir, String, String)> {
    let redis = Redis::start("127.0.0.1", extra)?;
    let dir = TempDir::new("store");
    let cert = farm_cert(&dir);
    let key = key_file(&dir, "farm.key", FARM_KEY);
    Some((redis, dir, cert, key))
}

fn farm_cert(dir: &TempDir) -> String {
    let (path, _) = openssl_cert(dir, "farm", Key::EcP256, &["localhost"]);
    path.to_str().unwrap().to_owned()
}

/// Connects with `cfg` (whose session cache carries sessions from host to host): whether
/// the handshake resumed.
fn resumes(s: &Shuck, cfg: &std::sync::Arc<rustls::ClientConfig>) -> bool {
    let mut c = connect_with(s.addr(), cfg, None).unwrap();
    echo_roundtrip_http(&mut c);
    resumed(&c)
}

/// One request to the origin, so that TLS 1.3 tickets (sent after the handshake) have
/// arrived before the connection closes.
fn echo_roundtrip_http(c: &mut Client) {
    use std::io::Write;
    c.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    while !out.ends_with(b"\r\n\r\nok") {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    assert!(out.starts_with(b"HTTP/1.1 200"), "{out:?}");
}

#[test]
fn sessions_and_tickets_made_on_one_host_resume_on_another() {
    let Some((redis, _dir, cert, key)) = farm(&[]) else {
        return;
    };
    for (tickets, opts) in [
        (
            "--no-tickets",
            ClientOpts {
                version: Some(12),
                session_id_only: true,
                ..ClientOpts::default()
            },
        ),
        (
            "--no-tickets",
            ClientOpts {
                version: Some(13),
                ..ClientOpts::default()
            },
        ),
        (
            "--tickets",
            ClientOpts {
                version: Some(13),
                ..ClientOpts::default()
            },
        ),
        (
            "--tickets",
            ClientOpts {
                version: Some(12),
                ..ClientOpts::default()
            },
        ),
    ] {
        let what = format!("{tickets} TLS 1.{}", opts.version.unwrap() - 10);
        let (a, a_stats) = host(&cert, &redis.url(), &key, &[tickets]);
        let (b, b_stats) = host(&cert, &redis.url(), &key, &[tickets]);
        if tickets == "--tickets" {
            // Both use the farm's ring once they have read it.
            assert!(wait_until(Duration::from_secs(5), || redis
                .cli(&["EXISTS", "shuck:ticket-keys"])
                .trim()
                == "1"));
            thread::sleep(Duration::from_millis(1500));
        }
        let cfg = client_config(&opts);
        assert!(!resumes(&a, &cfg), "{what}: the first handshake is full");
        // The write is asynchronous: a client comes back after a while, not at once.
        thread::sleep(Duration::from_millis(50));
        let hosts = [&b, &a];
        let mut n = 0;
        for i in 0..20 {
            n += usize::from(resumes(hosts[i % 2], &cfg));
            thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(n, 20, "{what}: {n}/20 resumed across hosts");
        let hits = |op: &str| {
            let series = format!("shuck_store_operations_total{{op=\"{op}\",result=\"hit\"}}");
            metric(a_stats, &series) + metric(b_stats, &series)
        };
        let (gets, takes) = (hits("get"), hits("take"));
        if tickets == "--no-tickets" {
            // A TLS 1.2 session is fetched once by the host that lacks it, which then
            // holds it too; every TLS 1.3 stateful ticket is taken from the store.
            let want = if opts.version == Some(12) {
                (1.0, 0.0)
            } else {
                (0.0, 20.0)
            };
            assert_eq!((gets, takes), want, "{what}: lookups found");
            // What lies in Redis is sealed: rustls' session holds the SNI the client sent
            // (localhost), which does not appear in the stored value.
            let keys = redis.cli(&["--scan", "--pattern", "shuck:session:*"]);
            let first = keys.lines().next().expect("sessions are in redis");
            let value = redis.cli(&["--no-raw", "GET", first]);
            assert!(value.len() > 40 && !value.contains("localhost"), "{value}");
        } else {
            assert_eq!(
                gets + takes,
                0.0,
                "{what}: stateless tickets need no lookup"
            );
        }
        assert_eq!(
            metric(a_stats, "shuck_store_up"),
            1.0,
            "{what}: the store answers"
        );
        redis.cli(&["FLUSHALL"]);
    }
}

#[test]
fn a_single_use_ticket_resumes_once_in_the_farm() {
    if !require("openssl", "openssl") {
        return;
    }
    let Some((redis, dir, cert, key)) = farm(&[]) else {
        return;
    };
    let (a, a_stats) = host(&cert, &redis.url(), &key, &["--no-tickets"]);
    let (b, b_stats) = host(&cert, &redis.url(), &key, &["--no-tickets"]);
    let sess = dir.path("ticket.pem");
    let sess = sess.to_str().unwrap();
    // openssl keeps the ticket it is given: the same one can be presented twice.
    let s_client = |port: u16, io: &str| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "(sleep 0.3; echo) | openssl s_client -tls1_3 -connect 127.0.0.1:{port} {io} {sess} 2>&1"
            ))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("Reused, TLSv1.3") {
            Some(true)
        } else if text.contains("New, TLSv1.3") {
            Some(false)
        } else {
            panic!("openssl s_client: {text}")
        }
    };
    assert_eq!(s_client(a.port, "-sess_out"), Some(false));
    thread::sleep(Duration::from_millis(100));
    assert_eq!(s_client(b.port, "-sess_in"), Some(true), "first use, on b");
    assert_eq!(
        s_client(a.port, "-sess_in"),
        Some(false),
        "second use, on a"
    );
    assert_eq!(s_client(b.port, "-sess_in"), Some(false), "third use, on b");
    assert_eq!(
        metric(
            b_stats,
            "shuck_store_operations_total{op=\"take\",result=\"hit\"}"
        ),
        1.0
    );
    assert!(
        metric(
            a_stats,
            "shuck_store_operations_total{op=\"take\",result=\"miss\"}"
        ) >= 1.0
    );
}

#[test]
fn values_sealed_under_another_farm_key_are_ignored_and_counted() {
    let Some(redis) = Redis::start("127.0.0.1", &[]) else {
        return;
    };
    let dir = TempDir::new("store");
    let cert = farm_cert(&dir);
    let ours = key_file(&dir, "ours.key", FARM_KEY);
    let theirs = key_file(&dir, "theirs.key", OTHER_KEY);
    let (a, _) = host(&cert, &redis.url(), &theirs, &["--no-tickets"]);
    let (b, b_stats) = host(&cert, &redis.url(), &ours, &["--no-tickets"]);
    let cfg = tls12_ids();
    assert!(!resumes(&a, &cfg));
    thread::sleep(Duration::from_millis(100));
    assert!(!resumes(&b, &cfg), "a session sealed under another key");
    assert_eq!(
        metric(
            b_stats,
            "shuck_store_operations_total{op=\"get\",result=\"unsealed\"}"
        ),
        1.0
    );
    // A value moved to another session's name does not open either.
    let (c, c_stats) = host(&cert, &redis.url(), &ours, &["--no-tickets"]);
    let names = || -> Vec<String> {
        redis
            .cli(&["--scan", "--pattern", "shuck:session:*"])
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let mut made = Vec::new();
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let before = names();
            let cfg = tls12_ids();
            assert!(!resumes(&b, &cfg));
            assert!(wait_until(Duration::from_secs(2), || names().len() > before.len()));
            made.push(names().into_iter().find(|n| !before.contains(n)).unwrap());
            cfg
        })
        .collect();
    assert_eq!(
        redis.cli(&["COPY", &made[0], &made[1], "REPLACE"]).trim(),
        "1"
    );
    assert!(
        !resumes(&c, &clients[1]),
        "a value under another session's name"
    );
    assert!(
        resumes(&c, &clients[0]),
        "the value under its own name still opens"
    );
    assert_eq!(
        metric(
            c_stats,
            "shuck_store_operations_total{op=\"get\",result=\"unsealed\"}"
        ),
        1.0
    );
}

/// Redis killed, slow, then back empty: no handshake fails or waits; each host resumes its
/// own sessions meanwhile; one log line when the outage starts and one when it ends; the
/// ticket ring is published again by the host holding the lock.
#[test]
fn redis_down_or_slow_costs_no_handshake() {
    let Some((mut redis, _dir, cert, key)) = farm(&["--enable-debug-command", "yes"]) else {
        return;
    };
    let (a, a_stats) = host(&cert, &redis.url(), &key, &["--no-tickets"]);
    let (b, b_stats) = host(&cert, &redis.url(), &key, &["--no-tickets"]);
    let opts = ClientOpts {
        version: Some(12),
        session_id_only: true,
        ..ClientOpts::default()
    };

    // Slow (half a second, under the connection's own 1 s response timeout): a lookup
    // waits at most --shared-store-timeout (5 ms by default).
    let cfg = client_config(&opts);
    assert!(!resumes(&a, &cfg));
    thread::sleep(Duration::from_millis(100));
    let port = redis.addr.port();
    let sleeper = thread::spawn(move || {
        let _ = Command::new("redis-cli")
            .args(["-p", &port.to_string(), "DEBUG", "SLEEP", "0.5"])
            .output();
    });
    thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    assert!(!resumes(&b, &cfg), "the store did not answer in time: full");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    sleeper.join().unwrap();
    assert!(
        metric(
            b_stats,
            "shuck_store_operations_total{op=\"get\",result=\"timeout\"}"
        ) >= 1.0
    );
    assert!(metric(b_stats, "shuck_store_lookup_seconds_count") >= 1.0);
    thread::sleep(Duration::from_millis(500));

    // Down.
    redis.kill();
    let mut failed = Vec::new();
    let own = client_config(&opts);
    for i in 0..30 {
        let h = if i % 2 == 0 { &a } else { &b };
        let cfg = client_config(&opts);
        if let Err(e) = connect_with(h.addr(), &cfg, None) {
            failed.push(e.to_string());
        }
        // The same client back on the same host: its own cache.
        let _ = resumes(&a, &own);
    }
    assert!(failed.is_empty(), "{failed:?}");
    assert!(
        resumes(&a, &own),
        "a host resumes its own sessions meanwhile"
    );
    assert!(wait_until(Duration::from_secs(3), || metric(
        a_stats,
        "shuck_store_up"
    ) == 0.0));
    assert!(
        !resumes(&b, &own),
        "no farm-wide resumption without the store"
    );
    let outage = |s: &Shuck| s.log().matches("failed:").count();
    assert_eq!(outage(&a), 1, "one line per outage: {}", a.log());

    // Back, empty.
    redis.restart();
    assert!(
        a.wait_log("reachable again after", Duration::from_secs(10)),
        "{}",
        a.log()
    );
    assert!(b.wait_log("reachable again after", Duration::from_secs(10)));
    let cfg = client_config(&opts);
    assert!(!resumes(&a, &cfg));
    thread::sleep(Duration::from_millis(100));
    assert!(resumes(&b, &cfg), "farm-wide resumption is back");
    assert_eq!(outage(&a), 1, "{}", a.log());
}

#[test]
fn one_host_rotates_the_farm_ring_and_another_takes_over_when_it_dies() {
    let Some((mut redis, _dir, cert, key)) = farm(&[]) else {
        return;
    };
    let rotate = ["--ticket-rotate", "2"];
    let (a, _) = host(&cert, &redis.url(), &key, &rotate);
    let (b, _) = host(&cert, &redis.url(), &key, &rotate);
    let (c, _) = host(&cert, &redis.url(), &key, &rotate);
    thread::sleep(Duration::from_millis(5500));
    let rotations = |s: &Shuck| s.log().matches("ticket key ring rotated").count();
    let holders: Vec<usize> = [&a, &b, &c].iter().map(|s| rotations(s)).collect();
    assert_eq!(
        holders.iter().filter(|&&n| n > 0).count(),
        1,
        "one host rotates: {holders:?}"
    );
    assert!(holders.iter().sum::<usize>() >= 2, "{holders:?}");
    let opts = ClientOpts {
        version: Some(13),
        ..ClientOpts::default()
    };
    for (from, to) in [(&a, &b), (&b, &c), (&c, &a)] {
        let cfg = client_config(&opts);
        assert!(!resumes(from, &cfg));
        assert!(
            resumes(to, &cfg),
            "a ticket issued anywhere resumes anywhere"
        );
    }
    // The holder dies: its lock lapses and another host rotates.
    let holder = holders.iter().position(|&n| n > 0).unwrap();
    [&a, &b, &c][holder].signal("KILL");
    let survivors: Vec<&Shuck> = [&a, &b, &c]
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i != holder)
        .map(|(_, s)| s)
        .collect();
    let before: usize = survivors.iter().map(|s| rotations(s)).sum();
    assert_eq!(before, 0, "only the holder rotated");
    assert!(
        wait_until(Duration::from_secs(16), || survivors
            .iter()
            .map(|s| rotations(s))
            .sum::<usize>()
            > 0),
        "no host took the rotation over"
    );
    // The store restarted empty: the holder publishes the ring again.
    redis.restart();
    assert!(wait_until(Duration::from_secs(10), || redis
        .cli(&["EXISTS", "shuck:ticket-keys"])
        .trim()
        == "1"));
    let cfg = client_config(&opts);
    assert!(!resumes(survivors[0], &cfg));
    assert!(resumes(survivors[1], &cfg));
}

#[test]
fn tls_and_a_password_to_the_store() {
    if !require("openssl", "openssl") {
        return;
    }
    let dir = TempDir::new("store-tls");
    let d = dir.0.to_str().unwrap();
    sh(&format!(
        "cd {d} && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=store-ca 2>/dev/null \
         && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout redis.key -out redis.csr -subj /CN=redis 2>/dev/null \
         && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > ext \
         && openssl x509 -req -in redis.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out redis.pem -days 2 -extfile ext 2>/dev/null \
         && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout other.key -out other.pem -days 2 -subj /CN=other 2>/dev/null"
    ));
    let pass = "s3cret password";
    let Some(redis) = Redis::start_tls(
        &dir.path("redis.pem"),
        &dir.path("redis.key"),
        &dir.path("ca.pem"),
        &["--requirepass", pass],
    ) else {
        return;
    };
    let port = redis.addr.port().to_string();
    let cert = farm_cert(&dir);
    let key = key_file(&dir, "farm.key", FARM_KEY);
    let auth = key_file(&dir, "auth", pass);
    let url = format!("rediss://127.0.0.1:{port}");
    let ca = format!("{d}/ca.pem");
    let args = [
        "--no-tickets",
        "--shared-store-ca",
        &ca,
        "--shared-store-auth-file",
        &auth,
    ];
    let (a, _) = host(&cert, &url, &key, &args);
    let (b, b_stats) = host(&cert, &url, &key, &args);
    assert!(
        a.wait_log("connected", Duration::from_secs(5)),
        "{}",
        a.log()
    );
    let cfg = tls12_ids();
    assert!(!resumes(&a, &cfg));
    thread::sleep(Duration::from_millis(100));
    assert!(resumes(&b, &cfg), "resumed through rediss://");
    assert_eq!(
        metric(
            b_stats,
            "shuck_store_operations_total{op=\"get\",result=\"hit\"}"
        ),
        1.0
    );

    // A wrong password and a CA that did not sign the store's certificate: said in the
    // log, and the host serves on its own cache.
    let wrong = key_file(&dir, "wrong", "not the password");
    let other_ca = format!("{d}/other.pem");
    for (what, args, says) in [
        (
            "wrong password",
            [
                "--no-tickets",
                "--shared-store-ca",
                &ca,
                "--shared-store-auth-file",
                &wrong,
            ],
            "WRONGPASS",
        ),
        (
            "wrong CA",
            [
                "--no-tickets",
                "--shared-store-ca",
                &other_ca,
                "--shared-store-auth-file",
                &auth,
            ],
            "certificate",
        ),
    ] {
        let (h, h_stats) = host(&cert, &url, &key, &args);
        assert!(
            h.wait_log("failed:", Duration::from_secs(5)),
            "{what}: {}",
            h.log()
        );
        assert!(h.log().contains(says), "{what}: {}", h.log());
        let cfg = client_config(&ClientOpts::default());
        assert!(!resumes(&h, &cfg));
        assert!(resumes(&h, &cfg), "{what}: its own cache still resumes");
        assert_eq!(metric(h_stats, "shuck_store_up"), 0.0, "{what}");
    }
}

#[test]
fn bad_store_settings_are_refused_naming_what_is_wrong() {
    let dir = TempDir::new("store-bad");
    let key = key_file(&dir, "farm.key", FARM_KEY);
    let empty = key_file(&dir, "empty", "");
    let not_pem = key_file(&dir, "notpem", "hello");
    // (URL, what else is given, what the error must say); every case has the farm key
    // unless it is the one about its absence.
    let redis = "redis://127.0.0.1:6379";
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        ("redis://:pw@127.0.0.1:6379", vec![], "holds a password"),
        (
            "http://127.0.0.1:6379",
            vec![],
            "not a redis:// or rediss:// URL",
        ),
        (redis, vec!["--shared-store-ca", &key], "is for a rediss://"),
        (
            "rediss://127.0.0.1:6379",
            vec!["--shared-store-ca", &not_pem],
            "holds no certificate",
        ),
        (
            redis,
            vec!["--shared-store-auth-file", &empty],
            "first line is empty",
        ),
        (
            redis,
            vec!["--shared-store-timeout", "0"],
            "--shared-store-timeout",
        ),
        (
            redis,
            vec!["--shared-store-prefix", "a b"],
            "--shared-store-prefix",
        ),
        (
            redis,
            vec!["--shared-store-auth-file", "/nonexistent/auth"],
            "/nonexistent/auth",
        ),
    ];
    let mut runs: Vec<(Vec<&str>, &str)> = cases
        .into_iter()
        .map(|(url, extra, says)| {
            let mut args = vec!["--shared-store", url, "--shared-cache-key", &key];
            args.extend(extra);
            (args, says)
        })
        .collect();
    runs.push((vec!["--shared-store", redis], "needs --shared-cache-key"));
    for (args, says) in runs {
        let (code, err) = run_to_exit(&args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: expected {says:?} in: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // The same keys from a file, with the line at fault.
    let conf = dir.path("shuck.conf");
    std::fs::write(
        &conf,
        "shared-store = \"redis://127.0.0.1:6379\"\nshared-store-timeout = \"soon\"\n",
    )
    .unwrap();
    let (code, err) = run_to_exit(&["--config", conf.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("line 2") && err.contains("shared-store-timeout"),
        "{err}"
    );
}

/// An unreachable store at start: shuck starts and serves, and says so once.
#[test]
fn an_unreachable_store_at_start_is_logged_and_shuck_serves() {
    let dir = TempDir::new("store");
    let cert = farm_cert(&dir);
    let key = key_file(&dir, "farm.key", FARM_KEY);
    let url = format!("redis://127.0.0.1:{}", free_port());
    let (s, stats) = host(&cert, &url, &key, &[]);
    assert!(s.wait_log("failed:", Duration::from_secs(5)), "{}", s.log());
    let cfg = client_config(&ClientOpts::default());
    assert!(!resumes(&s, &cfg));
    assert!(resumes(&s, &cfg));
    thread::sleep(Duration::from_millis(2500));
    assert_eq!(s.log().matches("failed:").count(), 1, "{}", s.log());
    assert_eq!(metric(stats, "shuck_store_up"), 0.0);
}

/// Replication (`-U`/`-P`) and the store at once: both get every session.
#[test]
fn replication_and_the_store_together() {
    let Some((redis, _dir, cert, key)) = farm(&[]) else {
        return;
    };
    let (pa, pb) = (free_port(), free_port());
    let (la, lb) = (format!("[127.0.0.1]:{pa}"), format!("[127.0.0.1]:{pb}"));
    let (a, a_stats) = host(
        &cert,
        &redis.url(),
        &key,
        &["--no-tickets", "-U", &la, "-P", &lb],
    );
    let (b, b_stats) = host(
        &cert,
        &redis.url(),
        &key,
        &["--no-tickets", "-U", &lb, "-P", &la],
    );
    let cfg = tls12_ids();
    assert!(!resumes(&a, &cfg));
    assert!(wait_until(Duration::from_secs(2), || {
        let body = scrape(b_stats, "/metrics").1;
        sample(&body, "shuck_replication_received_total{what=\"new\"}") >= 1.0
    }));
    assert!(resumes(&b, &cfg), "resumed from what replication brought");
    assert_eq!(
        metric(
            a_stats,
            "shuck_store_operations_total{op=\"put\",result=\"ok\"}"
        ),
        1.0,
        "and the store has it too"
    );
    assert_eq!(
        metric(
            b_stats,
            "shuck_store_operations_total{op=\"get\",result=\"hit\"}"
        ),
        0.0,
        "no lookup for a session held here"
    );
}
