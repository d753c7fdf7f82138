//! Backends on UNIX-domain sockets (hitch 1.7's `backend = "/path"`): every preamble,
//! `--http` over HTTP/1.1 and HTTP/2, maxconn and its queue, down-marking, reload, the
//! configuration file, the refusals, and hitch's usual partner: a real Varnish listening on
//! a socket with PROXY.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::*;

/// A backend on a UNIX socket in `dir`, each connection served by `handler` on a thread.
struct UnixOrigin {
    path: PathBuf,
    accepted: Arc<AtomicUsize>,
}

impl UnixOrigin {
    fn start(
        dir: &TempDir,
        name: &str,
        handler: impl Fn(UnixStream) + Send + Sync + 'static,
    ) -> Self {
        let path = dir.path(name);
        let l = UnixListener::bind(&path).unwrap();
        let accepted = serve_each(move || l.accept().map(|(s, _)| s), handler);
        UnixOrigin { path, accepted }
    }

    /// Records what each connection sends up to and including "hello\n", answers "ok\n"
    /// and closes.
    fn recording(dir: &TempDir, name: &str) -> (Self, Arc<Mutex<Vec<Vec<u8>>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let o = Self::start(dir, name, move |mut s| {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.ends_with(b"hello\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            s2.lock().unwrap().push(got);
            let _ = s.write_all(b"ok\n");
        });
        (o, seen)
    }

    /// Answers every HTTP/1.1 request with 200 and the request head as the body
    /// (keep-alive).
    fn mirror(dir: &TempDir, name: &str) -> Self {
        Self::start(dir, name, |s| {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut w = s;
            loop {
                let Some(head) = read_http_head(&mut r) else {
                    return;
                };
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{head}",
                    head.len()
                );
                if w.write_all(resp.as_bytes()).is_err() {
                    return;
                }
            }
        })
    }

    fn spec(&self) -> String {
        self.path.display().to_string()
    }
}

fn cert(dir: &TempDir) -> String {
    let (pem, _) = rcgen_cert(dir, "srv", &["localhost"], false);
    pem.display().to_string()
}

/// One TLS connection through shuck: sends `before` in clear first (a PROXY header), then
/// "hello\n" over TLS; returns what came back.
fn hello_through(shuck: &Shuck, before: &[u8]) -> String {
    let mut sock = std::net::TcpStream::connect(shuck.addr()).unwrap();
    sock.write_all(before).unwrap();
    let mut c = tls_over(sock, &client_config(&ClientOpts::default()), None).unwrap();
    c.write_all(b"hello\n").unwrap();
    String::from_utf8(read_all(&mut c).unwrap()).unwrap()
}

#[test]
fn every_preamble_reaches_a_unix_socket_backend() {
    let dir = TempDir::new("unix-preamble");
    let pem = cert(&dir);
    let (origin, seen) = UnixOrigin::recording(&dir, "rec.sock");
    let balancer = b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 443\r\n";
    let cases: [(&[&str], &[u8], &[u8]); 4] = [
        (&[], b"", b"hello\n"),
        (
            &["--write-proxy-v1"],
            b"",
            b"PROXY TCP4 127.0.0.1 127.0.0.1 ",
        ),
        (&["--write-proxy-v2"], b"", b"\r\n\r\n\0\r\nQUIT\n\x21\x11"),
        (
            &["--proxy-proxy"],
            balancer,
            b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 443\r\n",
        ),
    ];
    for (flags, before, starts) in cases {
        let mut args = vec!["-b", origin.path.to_str().unwrap()];
        args.extend_from_slice(flags);
        args.push(&pem);
        let shuck = Shuck::start(&args);
        assert!(
            shuck.log().contains("forwarding to unix:"),
            "{}",
            shuck.log()
        );
        assert_eq!(hello_through(&shuck, before), "ok\n", "{flags:?}");
        let got = seen.lock().unwrap().pop().unwrap();
        assert!(got.starts_with(starts), "{flags:?}: {got:?}");
        assert!(got.ends_with(b"hello\n"), "{flags:?}: {got:?}");
    }
    // v2 from a balancer's header: its client, not the socket's.
    let shuck = Shuck::start(&[
        "-b",
        &origin.spec(),
        "--proxy-proxy",
        "--write-proxy-v2",
        &pem,
    ]);
    assert_eq!(hello_through(&shuck, balancer), "ok\n");
    let got = seen.lock().unwrap().pop().unwrap();
    assert_eq!(&got[16..20], [203, 0, 113, 7], "{got:?}");
}

#[test]
fn http_mode_over_a_unix_socket_in_http1_and_h2() {
    let dir = TempDir::new("unix-http");
    let pem = cert(&dir);
    let origin = UnixOrigin::mirror(&dir, "mirror.sock");
    let shuck = Shuck::start(&["--http", "-b", &origin.spec(), &pem]);
    // HTTP/1.1, two requests on one connection, a forged X-Forwarded-For replaced.
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    for _ in 0..2 {
        c.write_all(b"GET /a HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n")
            .unwrap();
        let mut head = vec![0u8; 4096];
        let n = c.read(&mut head).unwrap();
        let text = String::from_utf8_lossy(&head[..n]);
        assert!(text.contains("X-Forwarded-For: 127.0.0.1"), "{text}");
        assert!(!text.contains("6.6.6.6"), "{text}");
    }
    assert_eq!(origin.accepted.load(Ordering::SeqCst), 1);
    // HTTP/2 through curl: each stream an HTTP/1.1 request on the socket.
    assert!(require("curl", "curl"));
    let port = shuck.port;
    let out = sh_out(&format!(
        "curl -sk --http2 -w '%{{http_version}}' https://127.0.0.1:{port}/h2 https://127.0.0.1:{port}/again"
    ));
    assert!(
        out.contains("GET /h2 HTTP/1.1") && out.contains("GET /again HTTP/1.1"),
        "{out}"
    );
    assert!(out.contains("X-Forwarded-For: 127.0.0.1"), "{out}");
    assert!(out.ends_with('2'), "{out}");
}

#[test]
fn maxconn_queue_and_down_marking_on_unix_sockets() {
    let dir = TempDir::new("unix-pool");
    let pem = cert(&dir);
    // Holds each connection until the test lets it go, then answers.
    let release = Arc::new(Mutex::new(false));
    let r2 = release.clone();
    let slow = UnixOrigin::start(&dir, "slow.sock", move |mut s| {
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        while !*r2.lock().unwrap() {
            thread::sleep(Duration::from_millis(10));
        }
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
    });
    let missing = dir.path("missing.sock");
    let shuck = Shuck::start(&[
        "--http",
        "-b",
        missing.to_str().unwrap(),
        "-b",
        &format!("{},maxconn=1", slow.spec()),
        "--queue-timeout",
        "300ms",
        &pem,
    ]);
    let request = |c: &mut Client| {
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    };
    let mut first = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    request(&mut first);
    // The missing socket is tried (round robin) or skipped; either way it is marked down,
    // named by its path.
    assert!(
        wait_until(Duration::from_secs(5), || slow
            .accepted
            .load(Ordering::SeqCst)
            == 1),
        "{}",
        shuck.log()
    );
    let mut second = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    request(&mut second);
    let mut answer = vec![0u8; 256];
    let n = second.read(&mut answer).unwrap();
    assert!(
        answer[..n].starts_with(b"HTTP/1.1 503"),
        "{:?}",
        String::from_utf8_lossy(&answer[..n])
    );
    *release.lock().unwrap() = true;
    let n = first.read(&mut answer).unwrap();
    assert!(answer[..n].starts_with(b"HTTP/1.1 200"));
    assert_eq!(slow.accepted.load(Ordering::SeqCst), 1, "maxconn 1 held");
    let log = shuck.log();
    assert!(
        log.contains(&format!("unix:{}", missing.display())) && log.contains("marked down"),
        "{log}"
    );
}

#[test]
fn a_configuration_file_names_a_socket_and_reload_keeps_it() {
    let dir = TempDir::new("unix-file");
    let pem = cert(&dir);
    let (origin, seen) = UnixOrigin::recording(&dir, "rec.sock");
    let port = free_port();
    let conf = dir.path("shuck.conf");
    std::fs::write(
        &conf,
        format!(
            "frontend = \"[127.0.0.1]:{port}\"\nbackend = \"{}\"\nwrite-proxy-v1 = on\npem-file = \"{pem}\"\n",
            origin.spec()
        ),
    )
    .unwrap();
    let shuck = Shuck::start_raw(&["--config", conf.to_str().unwrap()], port);
    assert_eq!(hello_through(&shuck, b""), "ok\n");
    shuck.signal("HUP");
    assert!(
        shuck.wait_log("reload", Duration::from_secs(10)),
        "{}",
        shuck.log()
    );
    assert_eq!(hello_through(&shuck, b""), "ok\n");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|g| g.starts_with(b"PROXY TCP4 127.0.0.1 ")));
}

#[test]
fn bad_unix_backends_are_refused_naming_what_is_wrong() {
    let dir = TempDir::new("unix-bad");
    let pem = cert(&dir);
    let long = format!("/{}", "x".repeat(120));
    for (args, says) in [
        (vec!["-b", "/run/v.sock", "--write-ip"], "--write-ip"),
        (vec!["-b", "run/v.sock"], "must be absolute"),
        (vec!["-b", "/run/"], "not a directory"),
        (vec!["-b", &long], "at most 107 bytes"),
        (
            vec!["-b", "/run/v.sock,weight=0"],
            "weight must be from 1 to 1000",
        ),
    ] {
        let mut all = args.clone();
        all.push(&pem);
        let (code, err) = run_to_exit(&all);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let conf = dir.path("bad.conf");
    std::fs::write(
        &conf,
        format!("pem-file = \"{pem}\"\n\nbackend = \"/run/\"\n"),
    )
    .unwrap();
    let (code, err) = run_to_exit(&["--config", conf.to_str().unwrap(), "--test"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("line 3") && err.contains("not a directory"),
        "{err}"
    );
}

/// `varnishd` in the foreground on a socket with PROXY; killed with its child on drop.
struct Varnish(Child);

impl Varnish {
    fn start(dir: &TempDir, sock: &Path) -> Option<Varnish> {
        if !require("varnishd", "varnish") {
            return None;
        }
        let vcl = dir.path("v.vcl");
        std::fs::write(
            &vcl,
            "vcl 4.1;\nbackend default none;\n\
             sub vcl_recv { return (synth(200, \"through varnish\")); }\n\
             sub vcl_synth { set resp.http.X-Client-Ip = client.ip; \
             set resp.http.X-Forwarded-For = req.http.X-Forwarded-For; }\n",
        )
        .unwrap();
        let child = Command::new("varnishd")
            .args(["-F", "-j", "none", "-s", "malloc,16m", "-f"])
            .arg(&vcl)
            .arg("-n")
            .arg(dir.path("varnish"))
            .arg("-a")
            .arg(format!("{},PROXY", sock.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let v = Varnish(child);
        assert!(
            wait_until(Duration::from_secs(20), || UnixStream::connect(sock)
                .is_ok()),
            "varnishd did not listen on {}",
            sock.display()
        );
        Some(v)
    }
}

impl Drop for Varnish {
    fn drop(&mut self) {
        // varnishd's child (the cache process) ends with its manager.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn hitch_and_varnish_over_a_unix_socket_with_proxy() {
    let dir = TempDir::new("unix-varnish");
    let pem = cert(&dir);
    let sock = dir.path("varnish.sock");
    let Some(_varnish) = Varnish::start(&dir, &sock) else {
        return;
    };
    assert!(require("curl", "curl"));
    let sock_spec = sock.display().to_string();
    // hitch's documented pairing: --write-proxy-v2 to varnishd -a /path,PROXY.
    let shuck = Shuck::start(&[
        "-b",
        &sock_spec,
        "--write-proxy-v2",
        "--alpn-protos",
        "http/1.1",
        &pem,
    ]);
    let port = shuck.port;
    let out = sh_out(&format!("curl -sk -D- https://127.0.0.1:{port}/"));
    assert!(out.contains("200 through varnish"), "{out}");
    // Without PROXY, a UNIX socket's client would be 0.0.0.0.
    assert!(out.contains("X-Client-Ip: 127.0.0.1"), "{out}");
    // Behind a balancer: the balancer's client, carried through by --proxy-proxy.
    let shuck = Shuck::start(&["-b", &sock_spec, "--proxy-proxy", "--write-proxy-v1", &pem]);
    let mut sock = std::net::TcpStream::connect(shuck.addr()).unwrap();
    sock.write_all(b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 443\r\n")
        .unwrap();
    let mut c = tls_over(sock, &client_config(&ClientOpts::default()), None).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let got = String::from_utf8_lossy(&read_all(&mut c).unwrap()).into_owned();
    assert!(got.contains("X-Client-Ip: 203.0.113.7"), "{got}");
    // --http over the socket: Varnish sees the X-Forwarded-For shuck wrote.
    let shuck = Shuck::start(&["--http", "-b", &sock_spec, "--write-proxy-v2", &pem]);
    let port = shuck.port;
    let out = sh_out(&format!(
        "curl -sk --http2 -D- -H 'X-Forwarded-For: 6.6.6.6' https://127.0.0.1:{port}/"
    ));
    assert!(out.contains("x-forwarded-for: 127.0.0.1"), "{out}");
    assert!(out.contains("x-client-ip: 127.0.0.1"), "{out}");
}
