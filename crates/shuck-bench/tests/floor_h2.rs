//! `floor-h2`, the libraries-only HTTP/2 gateway under `h2 --h2c`'s figures: it passes a
//! GET's answer whole, a gRPC call's message and trailers, and h2load's streams (up to 200
//! asked at once) without a failure; a certificate it cannot read is named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

mod common;

use common::*;

/// The h2c origin and floor-h2 before it; floor-h2's port.
fn floor(pem: &std::path::Path) -> (Proc, Proc, u16) {
    let (origin, origin_port) = serving(
        BENCH.as_ref(),
        &["origin", "--h2c", "--listen", "127.0.0.1:{port}"],
    );
    let (floor, port) = serving(
        BENCH.as_ref(),
        &[
            "floor-h2",
            "--listen",
            "127.0.0.1:{port}",
            "--cert",
            pem.to_str().unwrap(),
            "--origin",
            &format!("127.0.0.1:{origin_port}"),
        ],
    );
    (origin, floor, port)
}

#[test]
fn floor_h2_passes_answers_grpc_trailers_and_many_streams() {
    if !have("curl") || !have("nghttp") || !have("h2load") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("shuck-bench-floor-h2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pem = dir.join("floor.pem");
    write_pem(&pem);
    let (_origin, _floor, port) = floor(&pem);

    // A GET: its 4 KB whole, over HTTP/2.
    let out = Command::new("curl")
        .args(["-sk", "--http2", "-w", "\n%{http_code} %{http_version}"])
        .arg(format!("https://127.0.0.1:{port}/4k"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, status) = text.rsplit_once('\n').unwrap();
    assert_eq!(status, "200 2", "{text}");
    assert_eq!(body.len(), 4096);

    // A gRPC call: its framed message echoed, grpc-status in the trailers.
    let message = b"the floor under shuck";
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(message);
    let body = dir.join("call.bin");
    std::fs::write(&body, &frame).unwrap();
    let out = Command::new("nghttp")
        .args(["-v", "-d"])
        .arg(&body)
        .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
        .arg(format!("https://127.0.0.1:{port}/bench.Echo/Unary"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("the floor under shuck"), "{text}");
    assert!(text.contains("grpc-status: 0"), "{text}");

    // Four connections of 50 streams each: every one answered.
    let out = Command::new("h2load")
        .args(["-n", "4000", "-c", "4", "-m", "50"])
        .arg(format!("https://127.0.0.1:{port}/0"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("4000 succeeded, 0 failed, 0 errored"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn floor_h2_names_a_certificate_it_cannot_read() {
    let out = Command::new(BENCH)
        .args([
            "floor-h2",
            "--listen",
            "127.0.0.1:0",
            "--cert",
            "/nonexistent/floor-h2.pem",
            "--origin",
            "127.0.0.1:1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/floor-h2.pem"), "{err}");
}
