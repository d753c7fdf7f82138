//! HTTP/3 tests' client: aioquic's (`tests/h3/client.py`, a real QUIC and HTTP/3 stack),
//! run once per connection, and shuck started before a recording HTTP/1.1 backend.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::Value;

use super::h1origin::H1Origin;
use super::{free_port, Shuck};

/// aioquic, installed from PyPI when missing (a test peer as the others are).
pub fn aioquic() -> bool {
    super::python_module("import aioquic", "aioquic", "aioquic")
}

/// Runs the HTTP/3 client against `port` with `requests` (a list, or a list of lists run
/// in turn); its JSON report.
pub fn h3(port: u16, requests: Value, extra: &[&str]) -> Value {
    h3_at("127.0.0.1", port, requests, extra)
}

/// As [`h3`], to `host` (a host of a farm in a network namespace).
pub fn h3_at(host: &str, port: u16, requests: Value, extra: &[&str]) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h3/client.py");
    // The client keeps its own deadline (--deadline, 120 s unless given); this one only
    // catches a client that hangs past it.
    let out = Command::new("timeout")
        .arg("1000")
        .arg("python3")
        .arg(script)
        .arg(host)
        .arg(port.to_string())
        .arg(requests.to_string())
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|e| {
        panic!(
            "client report {last:?}: {e}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The report's requests, panicking with the report when the client failed.
pub fn answers(report: &Value) -> &Vec<Value> {
    assert!(report.get("error").is_none(), "client failed: {report}");
    report["requests"].as_array().unwrap()
}

pub fn header<'a>(answer: &'a Value, name: &str) -> Option<&'a str> {
    answer["headers"]
        .as_array()?
        .iter()
        .find(|h| h[0] == name)
        .and_then(|h| h[1].as_str())
}

/// shuck with `--http --quic` before `origin`, and its metrics port.
pub fn gateway(origin: &H1Origin, extra: &[&str]) -> (Shuck, u16) {
    let stats = free_port();
    let stats_arg = format!("127.0.0.1:{stats}");
    let mut args = vec![
        "--http",
        "--quic",
        "-b",
        &origin.spec,
        "--stats",
        &stats_arg,
    ];
    args.extend_from_slice(extra);
    (Shuck::start(&args), stats)
}
