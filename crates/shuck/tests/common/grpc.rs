//! gRPC peers for the tests: grpcio's server and clients (`tests/grpc/peer.py`, PyPI's
//! grpcio and grpcio-health-checking, installed when missing).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::{free_port, rcgen_cert, wait_listening, Shuck, TempDir};

const PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/grpc/peer.py");

/// grpcio and its health service, installed from PyPI when missing.
pub fn grpcio() -> bool {
    super::python_module(
        "import grpc, grpc_health.v1.health",
        "grpcio grpcio-health-checking",
        "grpcio",
    )
}

/// A grpcio server of the service test.Echo; killed when dropped.
pub struct Server {
    child: Child,
    /// Its port.
    pub port: u16,
    /// What it answers `Unary` with first.
    pub name: String,
}

impl Server {
    /// In clear (h2c), or with `tls` (certificate and key files); `events`: its log of
    /// cancelled calls and deadlines.
    pub fn start(name: &str, tls: Option<(&Path, &Path)>, events: Option<&Path>) -> Server {
        Self::start_slow(name, tls, events, 0.0)
    }

    /// As [`Server::start`], each `Unary` call taking `delay` seconds.
    pub fn start_slow(
        name: &str,
        tls: Option<(&Path, &Path)>,
        events: Option<&Path>,
        delay: f64,
    ) -> Server {
        let port = free_port();
        let mut cmd = Command::new("python3");
        cmd.arg(PEER).arg("serve").arg(port.to_string()).arg(name);
        if delay > 0.0 {
            cmd.arg("--delay").arg(delay.to_string());
        }
        if let Some((c, k)) = tls {
            cmd.arg("--tls").arg(c).arg(k);
        }
        if let Some(e) = events {
            cmd.arg("--events").arg(e);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let out = child.stdout.take().unwrap();
        BufReader::new(out).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the gRPC server {name} did not start");
        wait_listening(port, "the gRPC server");
        Server {
            child,
            port,
            name: name.to_owned(),
        }
    }

    /// `host:port` as a backend block's `server`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM: it stops with a grace period (GOAWAY, calls under way finish).
    pub fn stop_gracefully(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    /// SIGKILL, and reaped.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for it to end after [`Server::stop_gracefully`].
    pub fn wait(&mut self) {
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One client operation through shuck at `port` (TLS, name localhost, `ca` trusted): its
/// JSON result.
pub fn call(port: u16, ca: &str, op: &str, args: &[&str]) -> Value {
    let out = Command::new("timeout")
        .arg("300")
        .arg("python3")
        .arg(PEER)
        .arg("client")
        .arg(port.to_string())
        .arg(ca)
        .arg(op)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|e| {
        panic!(
            "gRPC client {op} {args:?}: {e}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// [`call`] on a thread of its own.
pub fn call_in_background(
    port: u16,
    ca: &str,
    op: &'static str,
    args: Vec<String>,
) -> std::thread::JoinHandle<Value> {
    let ca = ca.to_owned();
    std::thread::spawn(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        call(port, &ca, op, &args)
    })
}

/// A certificate for localhost as a PEM of its own (the clients' anchor) and with its key
/// (shuck's, or a backend's).
pub struct Pki {
    _dir: TempDir,
    /// The certificate and its key (shuck's).
    pub both: String,
    /// The certificate alone (the clients' anchor, a backend's).
    pub cert: String,
    /// The key alone.
    pub key: String,
}

pub fn pki() -> Pki {
    let dir = TempDir::new("grpc");
    let (both, _) = rcgen_cert(&dir, "localhost", &["localhost", "127.0.0.1"], false);
    let pem = std::fs::read_to_string(&both).unwrap();
    let at = pem.find("-----BEGIN PRIVATE KEY").unwrap();
    let (cert, key) = (dir.path("cert.pem"), dir.path("key.pem"));
    std::fs::write(&cert, &pem[..at]).unwrap();
    std::fs::write(&key, &pem[at..]).unwrap();
    Pki {
        both: both.to_str().unwrap().into(),
        cert: cert.to_str().unwrap().into(),
        key: key.to_str().unwrap().into(),
        _dir: dir,
    }
}

/// shuck before one named backend `g` (its block's keys after the servers), every host
/// routed to it.
pub fn shuck(pki: &Pki, servers: &[&Server], keys: &str, extra: &[&str]) -> Shuck {
    let mut spec = "name=g".to_owned();
    for s in servers {
        spec.push_str(&format!(";server={}", s.addr()));
    }
    spec.push_str(keys);
    let backend = format!("--named-backend={spec}");
    let mut args = vec![
        "--http",
        "-n",
        "1",
        "-b",
        "127.0.0.1:1",
        &backend,
        "--route=host=localhost;backend=g",
        "--route=host=127.0.0.1;backend=g",
        &pki.both,
    ];
    args.extend_from_slice(extra);
    Shuck::start(&args)
}
