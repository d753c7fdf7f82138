//! gRPC end to end through shuck's HTTP/2 backends (`proto = h2`): grpcio's server and
//! clients (PyPI), over h2c and over TLS to the backend. Every kind of call with its
//! messages and trailers intact; deadlines and cancellations passed on; shuck's own
//! answers in gRPC's terms; a server's graceful stop (its GOAWAY) under load losing no call,
//! and a killed server failing only the calls it had.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::grpc::{self, call, call_in_background, pki, shuck};
use common::*;
use serde_json::{json, Value};

fn ok(v: &Value) -> &Value {
    assert_eq!(v["code"], "OK", "{v}");
    v
}

#[test]
fn every_kind_of_call_passes_whole_over_h2c_and_over_tls() {
    if !grpc::grpcio() {
        return;
    }
    let pki = pki();
    let dir = TempDir::new("grpc-events");
    let events = dir.path("events");
    let plain = grpc::Server::start("plain", None, Some(&events));
    let tls_server = grpc::Server::start(
        "tls",
        Some((pki.cert.as_ref(), pki.key.as_ref())),
        Some(&events),
    );
    let tls_keys = format!(";proto=h2;tls=on;ca-file={};sni=localhost", pki.cert);
    for (server, keys) in [
        (&plain, ";proto=h2".to_owned()),
        (&tls_server, tls_keys.clone()),
        // proto = auto over TLS: the server chooses h2 by ALPN.
        (&tls_server, tls_keys.replace("proto=h2", "proto=auto")),
    ] {
        let s = shuck(&pki, &[server], &keys, &[]);
        let ca = &pki.cert;
        let name = &server.name;
        assert_eq!(
            ok(&call(s.port, ca, "unary", &["hello"]))["reply"],
            format!("{name}:hello")
        );
        let t = call(s.port, ca, "trailers", &[]);
        assert_eq!(ok(&t)["reply"], "with trailers");
        assert_eq!(t["initial"]["x-initial"], "i1", "{t}");
        assert_eq!(t["trailing"]["x-trailer"], "t1", "{t}");
        assert_eq!(t["trailing"]["x-bin-bin"], "0001", "{t}");
        // The server's own status and message reach the client as it gave them.
        let st = call(s.port, ca, "status", &[]);
        assert_eq!(st["code"], "NOT_FOUND", "{st}");
        assert_eq!(st["details"], "no such thing: x", "{st}");
        let ss = call(s.port, ca, "server_stream", &["5"]);
        assert_eq!(ok(&ss)["reply"], json!(["0", "1", "2", "3", "4"]));
        let cs = call(s.port, ca, "client_stream", &["a", "bb", "ccc"]);
        assert_eq!(ok(&cs)["reply"], "3:6");
        // Each message goes only after the answer to the one before: both ways at once.
        let bidi = call(s.port, ca, "bidi", &["x", "y", "z"]);
        assert_eq!(ok(&bidi)["reply"], json!(["echo:x", "echo:y", "echo:z"]));
        let big = call(s.port, ca, "big", &["10485760"]);
        assert_eq!(ok(&big)["same"], true, "{big}");
        assert_eq!(big["len"], 10485760);
        // The backend hears of the client's own, and of shuck only once.
        let h = call(s.port, ca, "headers", &[]);
        assert_eq!(ok(&h)["reply"]["x-forwarded-for"], "127.0.0.1", "{h}");
        assert_eq!(h["reply"]["x-forwarded-proto"], "https", "{h}");
    }
    // Cancellations reach the server: the call's RST_STREAM is passed on.
    let s = shuck(&pki, &[&plain], ";proto=h2", &[]);
    let before = std::fs::read_to_string(&events).unwrap_or_default();
    let c = call(s.port, &pki.cert, "cancel", &["0.5"]);
    assert_eq!(c["code"], "CANCELLED", "{c}");
    assert!(
        wait_until(Duration::from_secs(5), || {
            let now = std::fs::read_to_string(&events).unwrap_or_default();
            now[before.len()..].contains("cancelled")
        }),
        "the server never saw the call cancelled: {}",
        std::fs::read_to_string(&events).unwrap_or_default()
    );
    // The client's deadline reached the server as grpc-timeout.
    let d = call(s.port, &pki.cert, "deadline", &["0.1", "5"]);
    assert_eq!(ok(&d)["reply"], "plain");
    assert!(std::fs::read_to_string(&events)
        .unwrap()
        .contains("deadline True"));
}

/// A gRPC call made with curl (HTTP/2 to shuck): its answer head and trailers as curl
/// prints them. `message` is framed as gRPC's one message; none is sent when empty (curl
/// 7.88 reports an answer that ends the stream while it still sends as an error, though
/// RFC 9113 §8.1 allows it).
fn curl_call(port: u16, ca: &str, method: &str, message: &str, headers: &[&str]) -> String {
    let dir = TempDir::new("grpc-curl");
    let body = dir.path("body");
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message.as_bytes());
    std::fs::write(&body, framed).unwrap();
    let data = if message.is_empty() {
        "-X POST".to_owned()
    } else {
        format!("--data-binary @{}", body.display())
    };
    let mut cmd = format!(
        "curl -s --http2 -i --max-time 20 --cacert {ca} --resolve localhost:{port}:127.0.0.1 -H 'content-type: application/grpc' -H 'te: trailers' {data} https://localhost:{port}/test.Echo/{method}",
    );
    for h in headers {
        cmd.push_str(&format!(" -H '{h}'"));
    }
    sh_out(&cmd)
}

#[test]
fn shuck_ends_calls_as_grpc_clients_read_them() {
    if !grpc::grpcio() || !require("curl", "curl") {
        return;
    }
    let pki = pki();
    let dir = TempDir::new("grpc-events");
    let events = dir.path("events");
    let server = grpc::Server::start("s", None, Some(&events));
    let s = shuck(&pki, &[&server], ";proto=h2", &[]);
    // The call's grpc-timeout reaches the server (whose own deadline then ends it) and the
    // call is cancelled there.
    let out = curl_call(s.port, &pki.cert, "Sleep", "3", &["grpc-timeout: 300m"]);
    assert!(out.starts_with("HTTP/2 200"), "{out}");
    assert!(out.contains("grpc-status: 4"), "{out}");
    assert!(
        wait_until(Duration::from_secs(5), || std::fs::read_to_string(&events)
            .unwrap_or_default()
            .contains("cancelled")),
        "the server's call was not cancelled"
    );
    // A malformed grpc-timeout is no deadline of shuck's: the server judges the call
    // (grpc-core answers INTERNAL), and its answer reaches the client.
    let out = curl_call(s.port, &pki.cert, "Unary", "x", &["grpc-timeout: soon"]);
    assert!(out.contains("grpc-status: 13"), "{out}");
    assert!(out.contains("grpc-message: Error parsing"), "{out}");
    // It is shuck's deadline too: before a server that never answers, DEADLINE_EXCEEDED
    // trailers-only from shuck itself.
    let silent = fresh_listener();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let backend = format!("--named-backend=name=g;server={silent_addr};proto=h2");
    let quiet = Shuck::start(&[
        "--http",
        "-b",
        "127.0.0.1:1",
        &backend,
        "--route=host=localhost;backend=g",
        &pki.both,
    ]);
    let out = curl_call(quiet.port, &pki.cert, "Unary", "x", &["grpc-timeout: 300m"]);
    assert!(out.starts_with("HTTP/2 200"), "{out}");
    assert!(out.contains("grpc-status: 4"), "{out}");
    assert!(
        out.contains("grpc-message: the call's grpc-timeout passed"),
        "{out}"
    );
    drop(silent);
    drop(server);
    // No server up: UNAVAILABLE, as grpcio reads it and as it is on the wire.
    let v = call(s.port, &pki.cert, "unary", &["x"]);
    assert_eq!(v["code"], "UNAVAILABLE", "{v}");
    assert_eq!(v["details"], "Service Unavailable", "{v}");
    let out = curl_call(s.port, &pki.cert, "Unary", "", &[]);
    assert!(out.starts_with("HTTP/2 200"), "{out}");
    assert!(out.contains("grpc-status: 14"), "{out}");
    assert!(out.contains("content-type: application/grpc"), "{out}");
    // A request that is not a gRPC call still gets the HTTP status.
    let plain = sh_out(&format!(
        "curl -s --http2 -o /dev/null -w '%{{http_code}}' --cacert {} --resolve localhost:{p}:127.0.0.1 https://localhost:{p}/",
        pki.cert,
        p = s.port
    ));
    assert_eq!(plain, "503");
}

#[test]
fn a_graceful_stop_under_load_loses_no_call() {
    if !grpc::grpcio() {
        return;
    }
    let pki = pki();
    let mut a = grpc::Server::start("a", None, None);
    let b = grpc::Server::start("b", None, None);
    // grpc-core's stop answers the calls it had not yet handed to the service CANCELLED
    // (at or below its GOAWAY's last stream, so HTTP/2 says they were processed): this
    // service's calls bear running twice, and its operator says so with retry-on.
    let s = shuck(
        &pki,
        &[&a, &b],
        ";proto=h2;retry-on=cancelled,unavailable",
        &[],
    );
    let load = call_in_background(s.port, &pki.cert, "load", vec!["3000".into(), "6".into()]);
    std::thread::sleep(Duration::from_millis(700));
    // grpcio's stop with a grace period: GOAWAY, then the calls under way finish.
    a.stop_gracefully();
    let v = load.join().unwrap();
    a.wait();
    assert_eq!(v["codes"], json!({"OK": 3000}), "{v}\n{}", s.log());
    assert!(v["servers"]["a"].as_u64().unwrap_or(0) > 0, "{v}");
    assert!(v["servers"]["b"].as_u64().unwrap_or(0) > 0, "{v}");
}

#[test]
fn a_killed_server_fails_only_its_own_calls() {
    if !grpc::grpcio() {
        return;
    }
    let pki = pki();
    let mut a = grpc::Server::start("a", None, None);
    let b = grpc::Server::start("b", None, None);
    let s = shuck(&pki, &[&a, &b], ";proto=h2", &[]);
    // Eight calls of two seconds each, spread over both servers.
    let load = call_in_background(
        s.port,
        &pki.cert,
        "load",
        vec!["8".into(), "8".into(), "sleep:2".into()],
    );
    std::thread::sleep(Duration::from_millis(800));
    a.kill();
    let v = load.join().unwrap();
    let codes = &v["codes"];
    let failed = codes["UNAVAILABLE"].as_u64().unwrap_or(0);
    let passed = codes["OK"].as_u64().unwrap_or(0);
    assert!(failed >= 1 && passed >= 1, "{v}");
    assert_eq!(failed + passed, 8, "every call ends UNAVAILABLE or OK: {v}");
    assert_eq!(v["servers"]["b"].as_u64(), Some(passed), "{v}");
    // New calls go to the server that is left.
    let v = call(s.port, &pki.cert, "load", &["20", "2"]);
    assert_eq!(v["codes"], json!({"OK": 20}), "{v}");
    assert_eq!(v["servers"], json!({"b": 20}), "{v}");
}

#[test]
fn check_grpc_follows_the_servers_serving_status() {
    if !grpc::grpcio() {
        return;
    }
    let pki = pki();
    let a = grpc::Server::start("a", None, None);
    let b = grpc::Server::start("b", None, None);
    let check = ",check-grpc=test.Echo,check-interval=200ms,rise=1,fall=1";
    let spec = format!(
        "--named-backend=name=g;server={}{check};server={}{check};proto=h2",
        a.addr(),
        b.addr()
    );
    let s = Shuck::start(&[
        "--http",
        "-n",
        "1",
        "-b",
        "127.0.0.1:1",
        &spec,
        "--route=host=localhost;backend=g",
        &pki.both,
    ]);
    let spread = || call(s.port, &pki.cert, "load", &["20", "2"]);
    assert!(
        wait_until(Duration::from_secs(10), || spread()["servers"]
            .as_object()
            .is_some_and(|m| m.len() == 2)),
        "both servers never served"
    );
    // a says NOT_SERVING for the service: its checks take it out, b alone serves.
    let set = call(a.port, "-", "set_health", &["not"]);
    assert_eq!(ok(&set)["reply"], "ok");
    assert!(
        s.wait_log("NOT_SERVING", Duration::from_secs(5)),
        "the check never failed: {}",
        s.log()
    );
    let v = spread();
    assert_eq!(v["servers"], json!({"b": 20}), "{v}");
    // SERVING again: back in rotation.
    call(a.port, "-", "set_health", &["serving"]);
    assert!(
        wait_until(Duration::from_secs(10), || spread()["servers"]["a"]
            .as_u64()
            .is_some_and(|n| n > 0)),
        "a never came back"
    );
}

#[test]
fn the_access_log_says_why_shuck_ended_a_call_it_answered_200() {
    if !grpc::grpcio() {
        return;
    }
    let pki = pki();
    let dir = TempDir::new("grpc-log");
    let log = dir.path("access.log");
    let log_s = log.to_str().unwrap();
    let server = grpc::Server::start("s", None, None);
    let s = shuck(
        &pki,
        &[&server],
        ";proto=h2",
        &["--access-log", log_s, "--access-log-format", "json"],
    );
    assert_eq!(call(s.port, &pki.cert, "unary", &["x"])["code"], "OK");
    drop(server);
    assert_eq!(
        call(s.port, &pki.cert, "unary", &["x"])["code"],
        "UNAVAILABLE"
    );
    let lines = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect::<Vec<_>>()
    };
    assert!(
        wait_until(Duration::from_secs(5), || lines().len() >= 2),
        "{:?}",
        lines()
    );
    let l = lines();
    // Both are 200 on the wire (a gRPC status travels in trailers); the cause tells them apart.
    assert_eq!(
        (l[0]["status"].as_u64(), l[0]["cause"].as_str()),
        (Some(200), Some("normal")),
        "{}",
        l[0]
    );
    assert_eq!(
        (l[1]["status"].as_u64(), l[1]["cause"].as_str()),
        (Some(200), Some("backend_refused")),
        "{}",
        l[1]
    );
}

#[test]
fn maxconn_counts_streams_on_a_shared_connection() {
    if !grpc::grpcio() {
        return;
    }
    let pki = pki();
    let dir = TempDir::new("grpc-maxconn");
    for (maxconn, events) in [(Some(2), dir.path("two")), (None, dir.path("none"))] {
        let server = grpc::Server::start_slow("a", None, Some(&events), 0.2);
        // The block's keys follow its one server: maxconn is that server's.
        let limit = maxconn.map_or(String::new(), |n| format!(",maxconn={n}"));
        let s = shuck(&pki, &[&server], &format!("{limit};proto=h2"), &[]);
        // 12 calls from 6 clients at once, all over the worker's one connection.
        let v = call(s.port, &pki.cert, "load", &["12", "6"]);
        assert_eq!(v["codes"]["OK"], 12, "{v}");
        let most = std::fs::read_to_string(&events)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("inflight ")?.parse::<u32>().ok())
            .max()
            .unwrap();
        match maxconn {
            // The server's slots are its streams: two at a time, the others queued.
            Some(n) => assert_eq!(most, n, "at most maxconn streams at once"),
            None => assert!(most > 2, "without maxconn, more at once: {most}"),
        }
    }
}
