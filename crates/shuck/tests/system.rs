//! Running like hitch in production: an unprivileged user after binding, a chroot, a daemon
//! with a pid file and a log file, and sd_notify for systemd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

fn is_root() -> bool {
    sh_out("id -u").trim() == "0"
}

#[test]
fn user_and_group_are_dropped_to_and_it_still_serves() {
    if !is_root() {
        skip("not root; --user needs root to start");
        return;
    }
    let origin = Origin::echo();
    let dir = TempDir::new("priv");
    // Keys readable by root only: read before dropping.
    let (pem, _) = openssl_cert(&dir, "k", Key::EcP256, &["localhost"]);
    sh(&format!("chmod 600 {}", pem.display()));
    let shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--user",
        "nobody",
        "--group",
        "nogroup",
        pem.to_str().unwrap(),
    ]);
    // The worker process drops privileges; the master keeps root for reloads.
    let worker = shuck.worker();
    assert!(status_field(shuck.pid(), "Uid:").contains("\t0\t"));
    let uid = status_field(worker, "Uid:");
    let gid = status_field(worker, "Gid:");
    assert_eq!(
        uid.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["65534"; 4],
        "{uid}"
    );
    assert_eq!(
        gid.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["65534"; 4],
        "{gid}"
    );
    let groups = status_field(worker, "Groups:");
    assert_eq!(
        groups.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["65534"],
        "{groups}"
    );
    // Every thread, not only the main one.
    for task in std::fs::read_dir(format!("/proc/{worker}/task")).unwrap() {
        let status = std::fs::read_to_string(task.unwrap().path().join("status")).unwrap();
        assert!(
            status.contains("Uid:\t65534\t65534\t65534\t65534"),
            "{status}"
        );
    }
    assert!(
        shuck.log().contains("running as user nobody"),
        "{}",
        shuck.log()
    );
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    echo_roundtrip(&mut c);
    // A reload is read by the master, still root: the key nobody cannot read is read
    // (hitch's manager does the same).
    shuck.signal("HUP");
    assert!(
        shuck.wait_log("SIGHUP: configuration reloaded", Duration::from_secs(5)),
        "{}",
        shuck.log()
    );
    assert!(
        !shuck.log().contains("Permission denied"),
        "{}",
        shuck.log()
    );
    echo_roundtrip(&mut tls_connect(shuck.addr(), &ClientOpts::default()).unwrap());
}

#[test]
fn chroot_shuts_the_process_in() {
    if !is_root() {
        skip("not root; --chroot needs root");
        return;
    }
    let origin = Origin::echo();
    let jail = TempDir::new("jail");
    let shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--chroot",
        jail.0.to_str().unwrap(),
        "--user",
        "nobody",
    ]);
    let root = std::fs::read_link(format!("/proc/{}/root", shuck.worker())).unwrap();
    assert_eq!(root, jail.0);
    echo_roundtrip(&mut tls_connect(shuck.addr(), &ClientOpts::default()).unwrap());
}

#[test]
fn the_pid_file_outside_the_chroot_is_removed_at_exit() {
    if !is_root() {
        skip("not root; --chroot needs root");
        return;
    }
    let origin = Origin::echo();
    let jail = TempDir::new("jail-pid");
    let dir = TempDir::new("pid-outside");
    let pidfile = dir.path("shuck.pid");
    let mut shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--chroot",
        jail.0.to_str().unwrap(),
        "--pidfile",
        pidfile.to_str().unwrap(),
    ]);
    let written = std::fs::read_to_string(&pidfile).unwrap();
    assert_eq!(written.trim(), shuck.pid().to_string());
    shuck.signal("TERM");
    assert!(
        shuck.wait_exit(Duration::from_secs(10)).is_some(),
        "{}",
        shuck.log()
    );
    assert!(!pidfile.exists(), "pid file left behind: {}", shuck.log());
}

#[test]
fn unknown_user_or_group_is_an_error() {
    let (code, err) = run_to_exit(&["--user", "no-such-user-here"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--user") && err.contains("no-such-user-here"),
        "{err}"
    );
    let (code, err) = run_to_exit(&["--group", "no-such-group-here"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--group") && err.contains("no-such-group-here"),
        "{err}"
    );
    let (code, err) = run_to_exit(&["--chroot", "/nonexistent/jail"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--chroot"), "{err}");
    let (code, err) = run_to_exit(&["--syslog-facility", "local9", "--syslog"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("local9") && err.contains("local7"), "{err}");
}

#[test]
fn daemon_with_pidfile_and_log_file() {
    let origin = Origin::echo();
    let dir = TempDir::new("daemon");
    let pidfile = dir.path("shuck.pid");
    let logfile = dir.path("shuck.log");
    let port = free_port();
    let fe = format!("[127.0.0.1]:{port}");
    // The command returns at once (the parent exits 0); the daemon lives on.
    let st = Command::new(BIN)
        .args(with_cert(&[
            "-f",
            &fe,
            "-b",
            &origin.addr(),
            "--daemon",
            "--pidfile",
        ]))
        .arg(&pidfile)
        .arg("--log-filename")
        .arg(&logfile)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    // Whatever happens below, end the daemon we started, by its pid.
    let guard = Daemon::from_pidfile(&pidfile);
    let pid = guard.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.contains("shuck"), "{status}");
    // Detached: its own session, not the test's.
    let sid = sh_out(&format!("ps -o sid= -p {pid}")).trim().to_owned();
    assert_eq!(sid, pid.to_string(), "not a session leader");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&logfile)
        .unwrap_or_default()
        .contains("listening on")
    {
        assert!(Instant::now() < deadline, "nothing logged to the file");
        thread::sleep(Duration::from_millis(20));
    }
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    echo_roundtrip(&mut tls_connect(addr, &ClientOpts::default()).unwrap());
    sh(&format!("kill -TERM {pid}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(Instant::now() < deadline, "the daemon did not stop");
        thread::sleep(Duration::from_millis(20));
    }
    drop(guard);
    assert!(!pidfile.exists(), "pid file left behind");
    assert!(std::fs::read_to_string(&logfile)
        .unwrap()
        .contains("stopped;"));
}

#[test]
fn sd_notify_ready_reloading_stopping() {
    let dir = TempDir::new("notify");
    let sock_path = dir.path("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let origin = Origin::echo();
    let port = free_port();
    let fe = format!("[127.0.0.1]:{port}");
    let mut child = Command::new(BIN)
        .args(with_cert(&["-f", &fe, "-b", &origin.addr()]))
        .env("NOTIFY_SOCKET", &sock_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut buf = [0u8; 256];
    let mut recv = || {
        let n = sock.recv(&mut buf).expect("no sd_notify datagram");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let first = recv();
    assert_eq!(first, "READY=1");
    // Ready means serving.
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    echo_roundtrip(&mut tls_connect(addr, &ClientOpts::default()).unwrap());
    sh(&format!("kill -HUP {pid}"));
    let reloading = recv();
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading}"
    );
    assert_eq!(recv(), "READY=1");
    sh(&format!("kill -TERM {pid}"));
    assert_eq!(recv(), "STOPPING=1");
    let st = child.wait().unwrap();
    assert!(st.success());
}

/// A wrapper running shuck in a mount namespace of its own whose /dev holds only `null`
/// and `log`, a link to `dir/log`: the test plays the syslog daemon there (or not), and the
/// machine's /dev/log is never touched.
fn private_dev_log(dir: &TempDir) -> Vec<String> {
    assert!(is_root(), "the syslog tests need root (a mount namespace)");
    assert!(require("unshare", "util-linux"));
    let script = format!(
        "mount -t tmpfs tmpfs /dev && mknod -m 666 /dev/null c 1 3 && ln -s {}/log /dev/log && exec \"$0\" \"$@\"",
        dir.0.display()
    );
    ["unshare", "-m", "sh", "-c", &script]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// shuck with `args` under `wrapper`, its standard error piped.
fn spawn_wrapped(wrapper: &[String], args: &[&str]) -> std::process::Child {
    Command::new(&wrapper[0])
        .args(&wrapper[1..])
        .arg(BIN)
        .args(with_cert(args))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The next datagram on `sock` that contains `needle`, within 10 s.
fn syslog_line(sock: &UnixDatagram, needle: &str) -> String {
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = sock.recv(&mut buf).expect("nothing logged to syslog");
        let line = String::from_utf8_lossy(&buf[..n]).into_owned();
        if line.contains(needle) {
            return line;
        }
        assert!(Instant::now() < deadline, "no {needle:?} line in syslog");
    }
}

#[test]
fn syslog_gets_the_log_with_its_facility() {
    let dir = TempDir::new("syslog");
    let wrapper = private_dev_log(&dir);
    let sock = UnixDatagram::bind(dir.path("log")).unwrap();
    let origin = Origin::echo();
    let port = free_port();
    let fe = format!("[127.0.0.1]:{port}");
    let mut child = spawn_wrapped(
        &wrapper,
        &[
            "-f",
            &fe,
            "-b",
            &origin.addr(),
            "--syslog",
            "--syslog-facility",
            "local3",
        ],
    );
    let pid = child.id();
    let line = syslog_line(&sock, "listening on");
    // local3 (19) * 8 + info (6) = 158.
    // "listening on" is the worker process's line, under its own pid.
    let worker = children_of(pid);
    assert!(
        worker.len() == 1 && line.starts_with(&format!("<158>shuck[{}]: ", worker[0])),
        "{line} (workers {worker:?})"
    );
    sh(&format!("kill -TERM {pid}"));
    let st = child.wait().unwrap();
    assert!(st.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!err.contains("listening on"), "logged to stderr too: {err}");
}

#[test]
fn syslog_and_a_log_file_both_get_every_line() {
    let dir = TempDir::new("syslog-file");
    let wrapper = private_dev_log(&dir);
    let sock = UnixDatagram::bind(dir.path("log")).unwrap();
    let logfile = dir.path("shuck.log");
    let origin = Origin::echo();
    let port = free_port();
    let fe = format!("[127.0.0.1]:{port}");
    // As hitch takes `syslog = on` with `log-filename`: both, from the file too.
    let conf = dir.path("shuck.conf");
    let (pem, _) = openssl_cert(&dir, "c", Key::EcP256, &["c.test"]);
    std::fs::write(
        &conf,
        format!(
            "frontend = \"{fe}\"\nbackend = \"{}\"\npem-file = \"{}\"\nsyslog = on\nlog-filename = \"{}\"\n",
            origin.addr(),
            pem.display(),
            logfile.display()
        ),
    )
    .unwrap();
    let mut child = spawn_wrapped(&wrapper, &["--config", &conf.display().to_string()]);
    let pid = child.id();
    let line = syslog_line(&sock, "listening on");
    assert!(line.contains(&format!("listening on {fe}")), "{line}");
    let text = std::fs::read_to_string(&logfile).unwrap_or_default();
    sh(&format!("kill -TERM {pid}"));
    let st = child.wait().unwrap();
    assert!(st.success());
    assert!(
        text.contains(&format!("listening on {fe}")),
        "log file: {text}"
    );
}

#[test]
fn syslog_without_dev_log_starts_on_stderr_and_moves_to_dev_log_when_it_appears() {
    let dir = TempDir::new("syslog-late");
    let wrapper = private_dev_log(&dir);
    let w: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let origin = Origin::echo();
    let port = free_port();
    let fe = format!("[127.0.0.1]:{port}");
    // No /dev/log: shuck starts (as hitch), warns once, and logs to stderr.
    let shuck = Shuck::start_with(&w, &["-f", &fe, "-b", &origin.addr(), "--syslog"], port);
    let log = shuck.log();
    assert_eq!(
        log.matches("/dev/log cannot be reached").count(),
        1,
        "{log}"
    );
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    echo_roundtrip(&mut c);
    // The daemon comes: the next lines go to it (looked for at most once a second).
    let sock = UnixDatagram::bind(dir.path("log")).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = loop {
        shuck.signal("HUP");
        if let Ok(n) = sock.recv(&mut buf) {
            break String::from_utf8_lossy(&buf[..n]).into_owned();
        }
        assert!(
            Instant::now() < deadline,
            "nothing reached /dev/log: {}",
            shuck.log()
        );
    };
    // daemon (3) * 8 + a severity.
    assert!(line.starts_with("<2") || line.starts_with("<3"), "{line}");
    // Logged by the worker process, under its own pid.
    assert!(
        line.contains(&format!("shuck[{}]", shuck.worker())),
        "{line}"
    );
}

/// Every line of `log` as a JSON object with the stable fields; panics naming the first
/// line that is not one.
fn json_lines(log: &str) -> Vec<serde_json::Map<String, serde_json::Value>> {
    log.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {line}\n{log}"));
            let obj = v
                .as_object()
                .unwrap_or_else(|| panic!("not an object: {line}"));
            let time = obj["time"].as_str().unwrap();
            assert!(
                time.len() >= 20 && time.ends_with('Z') && &time[10..11] == "T",
                "{line}"
            );
            let level = obj["level"].as_str().unwrap();
            assert!(
                ["error", "warn", "info", "debug", "trace"].contains(&level),
                "{line}"
            );
            assert!(!obj["event"].as_str().unwrap().is_empty(), "{line}");
            obj.clone()
        })
        .collect()
}

#[test]
fn json_logs_are_one_object_per_line_through_errors_reloads_and_connections() {
    let dir = TempDir::new("json-log");
    let (pem, _) = openssl_cert(&dir, "a", Key::EcP256, &["a.example"]);
    let origin = StoppableOrigin::echo();
    let conf = dir.path("shuck.conf");
    std::fs::write(
        &conf,
        format!(
            "pem-file = \"{}\"\nbackend = \"{}\"\nlog-format = json\nlog-connections = on\n",
            pem.display(),
            origin.port_spec
        ),
    )
    .unwrap();
    let mut shuck = Shuck::start(&["-n", "1", "--config", conf.to_str().unwrap()]);

    // Connections: two served, one that is not TLS.
    for _ in 0..2 {
        let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
        echo_roundtrip(&mut c);
    }
    let mut plain = std::net::TcpStream::connect(shuck.addr()).unwrap();
    std::io::Write::write_all(&mut plain, b"GET / HTTP/1.1\r\n\r\n").unwrap();
    drop(plain);
    // A good reload, then one refused (the certificate file broken).
    shuck.signal("HUP");
    assert!(shuck.wait_log("configuration reloaded", Duration::from_secs(10)));
    std::fs::write(&pem, "not a certificate\n").unwrap();
    shuck.signal("HUP");
    assert!(shuck.wait_log("configuration refused", Duration::from_secs(10)));
    // The backend gone: an error for the connection that finds no backend.
    origin.stop();
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    let _ = read_all(&mut c);
    assert!(shuck.wait_log("no backend could be reached", Duration::from_secs(10)));
    shuck.signal("TERM");
    assert!(shuck.wait_exit(Duration::from_secs(20)).is_some());

    let lines = json_lines(&shuck.log());
    // Pipelines match on the fixed name alone; the text is `message`.
    let find = |event: &str| {
        lines
            .iter()
            .filter(|o| o["event"] == event)
            .collect::<Vec<_>>()
    };
    let closed = find("connection_closed");
    assert_eq!(closed[0]["message"], "connection closed");
    assert_eq!(closed.len(), 2, "{lines:?}");
    for o in &closed {
        // Numbers stay numbers; names stay the text format's.
        assert!(o["bytes_in"].as_u64().unwrap() > 0, "{o:?}");
        assert!(o["bytes_out"].as_u64().unwrap() > 0, "{o:?}");
        assert_eq!(o["handshake"], "full", "{o:?}");
        assert_eq!(o["level"], "info");
        assert!(
            o["client"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{o:?}"
        );
    }
    let failed = find("handshake_failed");
    assert_eq!(failed.len(), 1, "{lines:?}");
    assert!(failed[0]["client"].as_str().is_some());
    // The reload summary's values are fields, not only words in the text.
    let reloaded = find("reload_done");
    assert_eq!(reloaded.len(), 1, "{lines:?}");
    assert_eq!(reloaded[0]["frontends"], 1, "{:?}", reloaded[0]);
    assert_eq!(reloaded[0]["certificates"], 1, "{:?}", reloaded[0]);
    let refused = find("reload_refused");
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["level"], "error");
    assert!(refused[0]["error"].as_str().is_some(), "{:?}", refused[0]);
    let no_backend = find("conn_no_backend");
    assert_eq!(no_backend[0]["level"], "warn");
    assert!(no_backend[0]["error"].as_str().unwrap().contains("refused"));
    let listening = find("listening");
    assert_eq!(listening[0]["workers"], 1, "{:?}", listening[0]);
    assert!(!find("stopped").is_empty());
    // Every line has its fixed name.
    for o in &lines {
        let event = o["event"].as_str().unwrap();
        assert!(!event.is_empty() && !event.contains(' '), "{o:?}");
    }

    // A start-up error once the format is known is one more object, not a text line.
    let (code, err) = run_to_exit(&["--log-format", "json", "--pem-file", "/nonexistent.pem"]);
    assert_eq!(code, Some(1));
    let lines = json_lines(&err);
    let last = lines.last().unwrap();
    assert_eq!(last["level"], "error");
    assert_eq!(last["event"], "cannot_start");
    assert_eq!(last["message"], "cannot start");
    assert!(
        last["error"].as_str().unwrap().contains("/nonexistent.pem"),
        "{err}"
    );
    // And a bad value for the flag names it.
    let (code, err) = run_to_exit(&["--log-format", "xml"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("--log-format") && err.contains("json"),
        "{err}"
    );
}

#[test]
fn a_fifo_or_a_huge_file_in_a_certificates_place_never_stalls_the_master() {
    let dir = TempDir::new("fifo-pem");
    let origin = Origin::echo();
    let (pem, _) = openssl_cert(&dir, "c", Key::EcP256, &["c.test"]);
    let fifo = dir.path("fifo.pem");
    sh(&format!("mkfifo {}", fifo.display()));
    let huge = dir.path("huge.pem");
    sh(&format!("truncate -s 100M {}", huge.display()));
    // At start: refused at once, naming the file, without reading 100 MB.
    for (file, needle) in [(&fifo, "not a regular file"), (&huge, "larger than")] {
        let started = Instant::now();
        let (code, err) = run_to_exit(&["-b", &origin.addr(), &file.display().to_string()]);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains(&file.display().to_string()) && err.contains(needle),
            "{err}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{err}");
    }
    // At reload: the FIFO planted in the certificate's place is refused, the master goes on
    // (a worker killed afterwards is replaced) and the running certificate is served.
    let live = dir.path("live.pem");
    std::fs::copy(&pem, &live).unwrap();
    let shuck = Shuck::start(&["-b", &origin.addr(), &live.display().to_string()]);
    std::fs::remove_file(&live).unwrap();
    sh(&format!("mkfifo {}", live.display()));
    shuck.signal("HUP");
    assert!(
        shuck.wait_log("not a regular file", Duration::from_secs(10)),
        "{}",
        shuck.log()
    );
    let first = shuck.worker();
    sh(&format!("kill -KILL {first}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while children_of(shuck.pid()).iter().all(|&p| p == first) {
        assert!(Instant::now() < deadline, "no new worker: {}", shuck.log());
        thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut c = loop {
        match tls_connect(shuck.addr(), &ClientOpts::default()) {
            Ok(c) => break c,
            Err(e) => assert!(Instant::now() < deadline, "{e}: {}", shuck.log()),
        }
        thread::sleep(Duration::from_millis(100));
    };
    echo_roundtrip(&mut c);
}

#[test]
fn pid_and_log_files_do_not_follow_a_planted_link_and_open_keys_are_warned_of() {
    let dir = TempDir::new("nofollow");
    let origin = Origin::echo();
    let (pem, _) = openssl_cert(&dir, "c", Key::EcP256, &["c.test"]);
    let victim = dir.path("victim");
    for flag in ["--pidfile", "--log-filename"] {
        let link = dir.path(&format!("link{flag}"));
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let (code, err) = run_to_exit(&[
            "-b",
            &origin.addr(),
            flag,
            &link.display().to_string(),
            &pem.display().to_string(),
        ]);
        assert_eq!(code, Some(1), "{flag}: {err}");
        assert!(
            err.contains(flag) && err.contains("symbolic link"),
            "{flag}: {err}"
        );
        assert!(!victim.exists(), "{flag} followed the link");
    }
    // A key readable by others is served, with the warning the replication key gets.
    sh(&format!("chmod 644 {}", pem.display()));
    let shuck = Shuck::start(&["-b", &origin.addr(), &pem.display().to_string()]);
    assert!(
        shuck.wait_log(
            "a private key is open to others; chmod o-rwx it",
            Duration::from_secs(5)
        ),
        "{}",
        shuck.log()
    );
    drop(shuck);
    // 0600, and Debian's 0640 for a group (root:ssl-cert there): no warning.
    for mode in ["600", "640"] {
        sh(&format!("chmod {mode} {}", pem.display()));
        let shuck = Shuck::start(&["-b", &origin.addr(), &pem.display().to_string()]);
        let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
        echo_roundtrip(&mut c);
        assert!(!shuck.log().contains("chmod"), "{mode}: {}", shuck.log());
    }
}

/// Every event shuck logs has a fixed name (`name:` where it is logged, the JSON `event`),
/// written in snake_case, and the manual's Log events section names each one.
#[test]
fn every_log_event_has_a_fixed_name_the_readme_lists() {
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let manual = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/manual/src/logs-metrics.md"
    ))
    .unwrap();
    let section = manual
        .split("## Log events")
        .nth(1)
        .and_then(|r| r.split("\n## ").next())
        .expect("the manual has a Log events section");
    let mut files = vec![std::path::PathBuf::from(src)];
    let mut seen = 0;
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if p.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        // Unit tests may log what they like.
        let code = text.split("#[cfg(test)]").next().unwrap();
        for level in ["info", "warn", "error", "debug", "trace"] {
            let call = format!("tracing::{level}!(");
            for (at, _) in code.match_indices(&call) {
                let after = code[at + call.len()..].trim_start();
                let line = code[..at].lines().count() + 1;
                let name = after
                    .strip_prefix("name: \"")
                    .and_then(|r| r.split('"').next())
                    .unwrap_or_else(|| panic!("{}:{line}: an event without name:", p.display()));
                assert!(
                    !name.is_empty()
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                    "{}:{line}: {name:?} is not snake_case",
                    p.display()
                );
                assert!(
                    section.contains(&format!("`{name}`")),
                    "{}:{line}: the manual's Log events section does not list {name}",
                    p.display()
                );
                seen += 1;
            }
        }
    }
    assert!(seen > 100, "only {seen} events found under {src}");
}
