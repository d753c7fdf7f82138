//! What the shuck-bench tests share: free ports, processes stopped when dropped, and a
//! certificate.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// shuck-bench itself.
pub const BENCH: &str = env!("CARGO_BIN_EXE_shuck-bench");

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A process of the test's, killed and reaped when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits up to 20 s for `port` to take connections.
pub fn wait_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "port {port} never opened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `program args` with `{port}` in them replaced by a free port, once that port is open.
pub fn serving(program: &std::path::Path, args: &[&str]) -> (Proc, u16) {
    let port = free_port();
    let child = Command::new(program)
        .args(args.iter().map(|a| a.replace("{port}", &port.to_string())))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let p = Proc(child);
    wait_port(port);
    (p, port)
}

/// A certificate for localhost with its key, in one PEM file at `path`.
pub fn write_pem(path: &std::path::Path) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(path, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
}

/// Whether `program` is here; under CI (`CI` set) a missing one fails the test, as a check
/// that cannot run must.
pub fn have(program: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found || std::env::var_os("CI").is_none(),
        "{program} is needed (nghttp2-client, curl)"
    );
    if !found {
        eprintln!("SKIP: no {program}");
    }
    found
}
