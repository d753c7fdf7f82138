//! The process model, end to end: a root master and an unprivileged worker; reload as
//! root; a killed worker replaced on the same sockets under load; binary upgrades under
//! load that lose no connection and keep resumption; an upgrade to a binary that fails;
//! socket activation by systemd; a crash loop that gives up.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_shuck");

/// A shuck-bench load run in the background; its JSON report when joined.
fn bench_load(args: Vec<String>) -> thread::JoinHandle<serde_json::Value> {
    thread::spawn(move || {
        let out = Command::new(bench_bin())
            .arg("load")
            .arg("--json")
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "shuck-bench load failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    })
}

fn failures(report: &serde_json::Value) -> Vec<(String, u64)> {
    report["failures"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .filter(|(_, n)| *n > 0)
                .collect()
        })
        .unwrap_or_default()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
    })
}

fn swap_in(path: &Path, content: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn a_reload_as_root_reads_a_key_only_root_can_read() {
    let dir = TempDir::new("process-reload");
    let (a_path, a_der) = openssl_cert(&dir, "a", Key::EcP256, &["localhost"]);
    let (b_path, b_der) = openssl_cert(&dir, "b", Key::EcP256, &["localhost"]);
    let site = dir.path("site.pem");
    swap_in(&site, &std::fs::read(&a_path).unwrap());
    let origin = Origin::echo();
    let shuck = Shuck::start(&[
        "--user",
        "nobody",
        "-b",
        &origin.addr(),
        site.to_str().unwrap(),
    ]);
    let master = shuck.pid();
    let worker = only_child(master);
    assert!(
        status_field(master, "Uid:").contains("\t0\t"),
        "the master stays root"
    );
    let nobody = sh_out("id -u nobody");
    assert!(
        status_field(worker, "Uid:").contains(&format!("\t{}\t", nobody.trim())),
        "the worker is nobody: {}",
        status_field(worker, "Uid:")
    );
    let mut live = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    assert_eq!(served_cert(&live), a_der);

    // SIGHUP to the master: the 0600 root key is read by the master and served by the
    // worker, which could not read it.
    swap_in(&site, &std::fs::read(&b_path).unwrap());
    shuck.signal("HUP");
    assert!(
        shuck.wait_log("SIGHUP: configuration reloaded", Duration::from_secs(10)),
        "{}",
        shuck.log()
    );
    let c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    assert_eq!(served_cert(&c), b_der, "the new certificate is served");
    assert!(
        !shuck.log().contains("Permission denied"),
        "{}",
        shuck.log()
    );
    // The live connection kept its certificate and goes on; the worker is the same.
    echo_roundtrip(&mut live);
    assert_eq!(children_of(master), vec![worker]);

    // SIGHUP to the worker is passed to the master.
    swap_in(&site, &std::fs::read(&a_path).unwrap());
    sh(&format!("kill -HUP {worker}"));
    assert!(
        wait_until(Duration::from_secs(10), || shuck
            .log()
            .matches("SIGHUP: configuration reloaded")
            .count()
            == 2),
        "{}",
        shuck.log()
    );
    let c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    assert_eq!(served_cert(&c), a_der);
}

#[test]
fn a_killed_worker_is_replaced_on_the_same_sockets_under_load() {
    let (_origin, origin_port) = bench_origin();
    let shuck = Shuck::start(&["-b", &format!("[127.0.0.1]:{origin_port}")]);
    let master = shuck.pid();
    let first = only_child(master);
    let target = shuck.addr().to_string();

    // A TLS 1.3 ticket issued before the crash.
    let tls13 = ClientOpts {
        version: Some(13),
        ..ClientOpts::default()
    };
    let cfg = client_config(&tls13);
    let mut c = connect_with(shuck.addr(), &cfg, None).unwrap();
    c.write_all(b"GET /0 HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let mut buf = [0u8; 256];
    let _ = c.read(&mut buf).unwrap();
    drop(c);

    // Connections live inside the worker when it dies: these fail, and are counted.
    let held: Vec<Client> = (0..5)
        .map(|_| tls_connect(shuck.addr(), &ClientOpts::default()).unwrap())
        .collect();

    let load = bench_load(
        [
            "--target",
            &target,
            "--rate",
            "40",
            "--duration",
            "30",
            "--reuse",
            "always",
            "--tls",
            "1.3",
            "--timeout",
            "5",
        ]
        .map(String::from)
        .to_vec(),
    );
    thread::sleep(Duration::from_secs(8));
    let killed_at = Instant::now();
    sh(&format!("kill -KILL {first}"));
    let mut second = 0;
    assert!(
        wait_until(Duration::from_secs(1), || {
            second = children_of(master)
                .into_iter()
                .find(|&p| p != first)
                .unwrap_or(0);
            second != 0
        }),
        "no new worker within 1 s: {}",
        shuck.log()
    );
    let replaced_in = killed_at.elapsed();
    assert!(
        shuck.wait_log("listening on", Duration::from_secs(5))
            && wait_until(Duration::from_secs(5), || shuck
                .log()
                .matches("listening on")
                .count()
                == 2),
        "{}",
        shuck.log()
    );
    // The ticket from before the crash resumes with the new worker.
    let c = connect_with(shuck.addr(), &cfg, None).unwrap();
    assert_eq!(
        c.conn.handshake_kind(),
        Some(rustls::HandshakeKind::Resumed),
        "a TLS 1.3 ticket issued before the crash does not resume after it"
    );
    // The connections that lived in the dead worker are gone.
    let mut lost = 0;
    for mut h in held {
        h.sock
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let broken = h.write_all(b"x").and_then(|()| h.flush()).is_err()
            || matches!(h.read(&mut buf), Ok(0) | Err(_));
        lost += usize::from(broken);
    }
    assert_eq!(lost, 5, "connections live in the killed worker");

    let report = load.join().unwrap();
    let failed = failures(&report);
    let attempted = report["attempted"].as_u64().unwrap();
    let completed = report["completed"].as_u64().unwrap();
    eprintln!(
        "crash under load: new worker after {replaced_in:?}; {attempted} attempted, {completed} completed, failures {failed:?}, resumed {:.3}; 5 held connections lost",
        report["resumed_share"]
    );
    // New connections were never refused, timed out or reset before their handshake:
    // the only failures are sessions in flight inside the killed worker.
    for (kind, n) in &failed {
        assert!(
            !matches!(
                kind.as_str(),
                "connect_refused" | "connect_error" | "timeout"
            ),
            "{n} sessions failed with {kind}: {failed:?}"
        );
    }
    let in_flight: u64 = failed.iter().map(|(_, n)| n).sum();
    assert!(
        in_flight <= 3,
        "{in_flight} sessions failed; at 40/s only those in flight at the kill may: {failed:?}"
    );
    assert!(attempted >= 1000, "the load did not run: {report}");
    assert!(
        report["resumed_share"].as_f64().unwrap() > 0.99,
        "tickets stopped resuming across the crash: {report}"
    );
    assert!(alive(master));
}

/// The pid in a pid file, once it is there.
fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Every master this test saw, killed at the end (their workers die with them).
/// The pids are checked before the kill: only a process whose command line holds this
/// test's own pid file path (a pid may have been reused since) is ended.
struct Masters(Mutex<Vec<u32>>, String);

impl Masters {
    fn add(&self, pid: u32) {
        self.0.lock().unwrap().push(pid);
    }
}

impl Drop for Masters {
    fn drop(&mut self) {
        for pid in self.0.lock().unwrap().iter() {
            // Most have exited already; a pid that is gone, or now another's, is left.
            for p in children_of(*pid).into_iter().chain([*pid]) {
                let ours = std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&self.1));
                if !ours {
                    continue;
                }
                let _ = Command::new("kill")
                    .args(["-KILL", &p.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

/// Upgrades the master in `pidfile` and waits until the new one serves and the old one
/// has handed over.
fn upgrade(shuck: &Shuck, pidfile: &Path, masters: &Masters, n: usize) {
    let old = read_pid(pidfile).unwrap();
    sh(&format!("kill -USR2 {old}"));
    assert!(
        wait_until(Duration::from_secs(20), || {
            read_pid(pidfile).is_some_and(|p| p != old)
                && shuck
                    .log()
                    .matches("this one stops accepting, hands over")
                    .count()
                    >= n
        }),
        "upgrade {n} did not happen: {}",
        shuck.log()
    );
    masters.add(read_pid(pidfile).unwrap());
}

#[test]
fn twenty_binary_upgrades_under_load_lose_nothing() {
    let (_origin, origin_port) = bench_origin();
    let dir = TempDir::new("process-upgrade");
    let pidfile = dir.path("shuck.pid");
    let shuck = Shuck::start(&[
        "-b",
        &format!("[127.0.0.1]:{origin_port}"),
        "--pidfile",
        pidfile.to_str().unwrap(),
        "--drain-timeout",
        "60",
    ]);
    let masters = Masters(Mutex::new(vec![shuck.pid()]), pidfile.display().to_string());
    let target = shuck.addr().to_string();
    let addr = shuck.addr();

    // Twenty long-lived streams, each 4 MB read slowly across the upgrades.
    const STREAM: usize = 4 << 20;
    let streams: Vec<thread::JoinHandle<Result<(), String>>> = (0..20)
        .map(|_| {
            thread::spawn(move || {
                let mut c = tls_connect(addr, &ClientOpts::default()).map_err(|e| e.to_string())?;
                c.write_all(format!("GET /{STREAM} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
                    .map_err(|e| e.to_string())?;
                let mut got = Vec::with_capacity(STREAM + 512);
                let mut buf = vec![0u8; 16 * 1024];
                let started = Instant::now();
                while got.len() < STREAM + 100 {
                    let n = c
                        .read(&mut buf)
                        .map_err(|e| format!("after {} bytes: {e}", got.len()))?;
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                    // About 16 s for the whole stream.
                    let due = Duration::from_secs_f64(16.0 * got.len() as f64 / STREAM as f64);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        thread::sleep(wait);
                    }
                    if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        if got.len() - end - 4 >= STREAM {
                            break;
                        }
                    }
                }
                let end = got
                    .windows(4)
                    .position(|w| w == b"\r\n\r\n")
                    .ok_or("no response head")?;
                let body = &got[end + 4..];
                if body.len() != STREAM {
                    return Err(format!("{} body bytes of {STREAM}", body.len()));
                }
                for (i, &b) in body.iter().enumerate() {
                    let want = b'a' + ((i % (256 * 1024)) % 26) as u8;
                    if b != want {
                        return Err(format!("byte {i} is {b}, not {want}"));
                    }
                }
                Ok(())
            })
        })
        .collect();

    let common = |tls: &str| {
        let mut a: Vec<String> = [
            "--target",
            &target,
            "--rate",
            "30",
            "--duration",
            "28",
            "--reuse",
            "always",
            "--timeout",
            "10",
            "--tls",
            tls,
        ]
        .map(String::from)
        .to_vec();
        if tls == "1.2" {
            a.extend(["--resume-by".to_owned(), "id".to_owned()]);
        }
        a
    };
    let load13 = bench_load(common("1.3"));
    let load12 = bench_load(common("1.2"));
    thread::sleep(Duration::from_secs(2));
    for n in 1..=20 {
        upgrade(&shuck, &pidfile, &masters, n);
        thread::sleep(Duration::from_millis(500));
    }
    let r13 = load13.join().unwrap();
    let r12 = load12.join().unwrap();
    for (i, s) in streams.into_iter().enumerate() {
        s.join()
            .unwrap()
            .unwrap_or_else(|e| panic!("long-lived connection {i}: {e}"));
    }
    for (name, r) in [("TLS 1.3 tickets", &r13), ("TLS 1.2 session IDs", &r12)] {
        eprintln!(
            "{name}: attempted {}, completed {}, resumed {:.4}, failures {:?}",
            r["attempted"],
            r["completed"],
            r["resumed_share"],
            failures(r)
        );
        assert!(failures(r).is_empty(), "{name}: failures {:?}", failures(r));
        assert!(r["attempted"].as_u64().unwrap() >= 700, "{name}: {r}");
        // Client side, over every session (also those that had nothing to offer yet).
        assert!(
            r["resumed_share"].as_f64().unwrap() >= 0.97,
            "{name}: resumption across upgrades {r}; handovers:\n{}",
            handovers(&shuck.log())
        );
    }
    assert_eq!(
        shuck
            .log()
            .matches("this one stops accepting, hands over")
            .count(),
        20
    );
    // The old masters have exited; the newest serves.
    let newest = read_pid(&pidfile).unwrap();
    for pid in masters.0.lock().unwrap().iter().filter(|&&p| p != newest) {
        assert!(
            wait_until(Duration::from_secs(10), || !alive(*pid)),
            "old master {pid} still runs"
        );
    }
    echo_http(addr);

    // Server side, over the resumption attempts themselves: every worker's closing
    // summary counts session-ID lookups (hits, misses) and tickets (resumed, refused).
    sh(&format!("kill -TERM {newest}"));
    assert!(
        wait_until(Duration::from_secs(30), || !alive(newest)),
        "the last master did not stop"
    );
    let log = shuck.log();
    let summaries: Vec<&str> = log.lines().filter(|l| l.contains(" stopped; ")).collect();
    assert_eq!(summaries.len(), 21, "one summary per worker: {log}");
    let sum = |part: &str, key: &str| -> u64 {
        summaries
            .iter()
            .map(|l| {
                let section = l.split(part).nth(1).unwrap_or("");
                section
                    .split(&format!(" {key}="))
                    .nth(1)
                    .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or_else(|| panic!("no {key}= in {l}"))
            })
            .sum()
    };
    let (hits, misses) = (sum("session cache", "hits"), sum("session cache", "misses"));
    let (resumed, refused) = (sum("tickets", "resumed"), sum("tickets", "refused"));
    eprintln!(
        "across 20 upgrades: session IDs {hits} hits / {misses} misses, tickets {resumed} resumed / {refused} refused"
    );
    assert!(
        hits >= 700 && resumed >= 700,
        "too few attempts: {hits}, {resumed}"
    );
    assert!(
        hits * 100 >= (hits + misses) * 99,
        "session IDs: {hits} of {} attempts resumed; handovers:\n{}",
        hits + misses,
        handovers(&log)
    );
    assert!(
        resumed * 100 >= (resumed + refused) * 99,
        "tickets: {resumed} of {} attempts resumed; handovers:\n{}",
        resumed + refused,
        handovers(&log)
    );
}

/// What each handover in `log` said (how many sessions went and came, how long the
/// handshakes took to settle, any warning), printed when a resumption check fails.
fn handovers(log: &str) -> String {
    log.lines()
        .filter(|l| {
            l.contains("handed over:") || l.contains("taken over from") || l.contains("WARN")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One request through shuck to the bench origin.
fn echo_http(addr: SocketAddr) {
    let mut c = tls_connect(addr, &ClientOpts::default()).unwrap();
    c.write_all(b"GET /10 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
}

/// Puts a new executable in place as a package manager does: a new file renamed over the
/// running one (which cannot be written: "text file busy").
fn install(path: &Path, script: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, script).unwrap();
    sh(&format!("chmod 755 {}", tmp.display()));
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn an_upgrade_to_a_binary_that_fails_keeps_the_old_one_serving() {
    let dir = TempDir::new("process-bad-upgrade");
    let bin = dir.path("shuck");
    std::fs::copy(BIN, &bin).unwrap();
    let pidfile = dir.path("shuck.pid");
    let origin = Origin::echo();
    let port = free_port();
    let notify = dir.path("notify.sock");
    let notify_sock = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    notify_sock
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut child = Command::new(&bin)
        .args(with_cert(&[
            "-f",
            &format!("[127.0.0.1]:{port}"),
            "-b",
            &origin.addr(),
            "--pidfile",
            pidfile.to_str().unwrap(),
        ]))
        .env("NOTIFY_SOCKET", &notify)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = capture_stderr(&mut child);
    let first = Proc(child);
    let masters = Masters(
        Mutex::new(vec![first.0.id()]),
        pidfile.display().to_string(),
    );
    let log_has = |s: &str, n: usize| {
        wait_until(Duration::from_secs(20), || {
            log.lock().unwrap().matches(s).count() >= n
        })
    };
    assert!(log_has("listening on", 1));
    let mut buf = [0u8; 256];
    let n = notify_sock.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"READY=1");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut live = tls_connect(addr, &ClientOpts::default()).unwrap();

    // A binary that exits at start.
    install(
        &bin,
        "#!/bin/sh\necho 'new binary: refusing to start' >&2\nexit 1\n",
    );
    let pid = first.0.id();
    sh(&format!("kill -USR2 {pid}"));
    assert!(
        log_has("before it served; this process goes on serving", 1),
        "{}",
        log.lock().unwrap()
    );
    assert!(log.lock().unwrap().contains("exited with status 1"));
    echo_roundtrip(&mut live);
    echo_roundtrip(&mut tls_connect(addr, &ClientOpts::default()).unwrap());
    assert_eq!(read_pid(&pidfile), Some(pid));

    // A binary that refuses the configuration: the same.
    let conf = dir.path("bad.conf");
    std::fs::write(&conf, "frontend = \n").unwrap();
    // (The configuration is the command line's; a missing backend file stands in.)
    install(
        &bin,
        &format!("#!/bin/sh\nexec {BIN} --config {} \"$@\"\n", conf.display()),
    );
    sh(&format!("kill -USR2 {pid}"));
    assert!(
        log_has("before it served; this process goes on serving", 2),
        "{}",
        log.lock().unwrap()
    );
    echo_roundtrip(&mut live);

    // A slow binary: a second SIGUSR2 meanwhile is refused; then it takes over, and
    // tells systemd its pid.
    install(&bin, &format!("#!/bin/sh\nsleep 2\nexec {BIN} \"$@\"\n"));
    sh(&format!("kill -USR2 {pid}"));
    assert!(log_has("SIGUSR2: started", 3));
    sh(&format!("kill -USR2 {pid}"));
    assert!(
        log_has(
            "a binary upgrade is already under way; this one is refused",
            1
        ),
        "{}",
        log.lock().unwrap()
    );
    assert!(
        log_has("hands over its sessions", 1),
        "{}",
        log.lock().unwrap()
    );
    let new = read_pid(&pidfile).unwrap();
    masters.add(new);
    assert_ne!(new, pid);
    let n = notify_sock.recv(&mut buf).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&buf[..n]),
        format!("MAINPID={new}\nREADY=1")
    );
    // The live connection drains in the old worker; new ones go to the new process.
    echo_roundtrip(&mut live);
    drop(live);
    assert!(
        wait_until(Duration::from_secs(10), || !alive(pid)),
        "the old master did not exit: {}",
        log.lock().unwrap()
    );
    echo_roundtrip(&mut tls_connect(addr, &ClientOpts::default()).unwrap());
}

#[test]
fn socket_activation_takes_systemds_sockets() {
    assert!(
        Path::new("/usr/bin/systemd-socket-activate").exists()
            || sh_status("apt-get install -y -qq systemd >/dev/null 2>&1"),
        "systemd-socket-activate (Debian's systemd package) is needed"
    );
    let origin = Origin::echo();
    let port = free_port();
    let mut child = Command::new("systemd-socket-activate")
        .args([
            "-l",
            &format!("127.0.0.1:{port}"),
            "--fdname=web",
            BIN,
            test_cert(),
            "-f",
            &format!("[127.0.0.1]:{port}"),
            "-b",
            &origin.addr(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = capture_stderr(&mut child);
    let shuck = Proc(child);
    assert!(
        wait_until(Duration::from_secs(10), || log
            .lock()
            .unwrap()
            .contains("Listening on")),
        "{}",
        log.lock().unwrap()
    );
    // systemd starts the service on the first connection, which waits in the socket's
    // backlog and is served by shuck once it runs: the socket was never bound again.
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let first = thread::spawn(move || {
        let mut c = tls_connect(addr, &ClientOpts::default()).unwrap();
        echo_roundtrip(&mut c);
    });
    assert!(
        wait_until(Duration::from_secs(20), || log
            .lock()
            .unwrap()
            .contains("listening on")),
        "{}",
        log.lock().unwrap()
    );
    let text = log.lock().unwrap().clone();
    assert!(
        text.contains("listening sockets taken from systemd, not bound again"),
        "{text}"
    );
    assert!(!text.contains("address already in use"), "{text}");
    first.join().unwrap();
    echo_roundtrip(&mut tls_connect(addr, &ClientOpts::default()).unwrap());
    // The only socket on the port is systemd's: one listener, no SO_REUSEPORT sibling.
    let listeners = sh_out(&format!("ss -Hltn 'sport = :{port}' | wc -l"));
    assert_eq!(listeners.trim(), "1", "shuck bound the port again");
    drop(shuck);
}

#[test]
fn a_crash_loop_gives_up() {
    let origin = Origin::echo();
    let mut shuck = Shuck::start(&["-b", &origin.addr()]);
    let master = shuck.pid();
    // The first worker has served (its log line comes before it tells the master so): a
    // death now is a crash, not a failed start.
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    echo_roundtrip(&mut c);
    drop(c);
    let mut seen = Vec::new();
    for i in 0..5 {
        let w = only_child(master);
        assert!(!seen.contains(&w));
        seen.push(w);
        // SIGKILL as the OOM killer sends, SIGABRT as a failed assertion or an abort.
        let sig = if i % 2 == 0 { "KILL" } else { "ABRT" };
        sh(&format!("kill -{sig} {w}"));
        if i < 4 {
            assert!(
                wait_until(Duration::from_secs(3), || children_of(master)
                    .iter()
                    .any(|p| !seen.contains(p))),
                "crash {i}: not replaced: {}",
                shuck.log()
            );
        }
    }
    let st = shuck
        .wait_exit(Duration::from_secs(5))
        .expect("the master gives up");
    assert_eq!(st.code(), Some(1));
    let log = shuck.log();
    assert!(log.contains("5 crashes within 60s; giving up"), "{log}");
    assert!(
        log.contains("ms (2 crashes within 60s)"),
        "the second crash backs off: {log}"
    );
}
