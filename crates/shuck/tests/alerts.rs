//! The alerts RFC 8446 names, delivered to the client: crafted ClientHellos sent as raw
//! bytes over a real socket to the real binary, and the bytes it answers read back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, SignatureScheme};

/// A plaintext fatal alert record with `description`, as the first thing answered.
fn alert(description: u8) -> [u8; 7] {
    [21, 3, 3, 0, 2, 2, description]
}

const HANDSHAKE_FAILURE: u8 = 40;
const RECORD_OVERFLOW: u8 = 22;
const PROTOCOL_VERSION: u8 = 70;
const DECODE_ERROR: u8 = 50;

/// The ClientHello a rustls client with `opts` sends, as one record.
fn client_hello(opts: &ClientOpts) -> Vec<u8> {
    let name = ServerName::try_from("localhost").unwrap();
    let mut conn = ClientConnection::new(client_config(opts), name).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    assert_eq!(out[0], 22, "a handshake record");
    out
}

/// Sends `bytes` to shuck and reads everything it answers until it closes (a reset after
/// the alert counts as the end too, but the alert must have arrived first).
fn exchange(shuck: &Shuck, bytes: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(shuck.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(bytes).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => {
                assert!(!got.is_empty(), "nothing before {e}");
                break;
            }
        }
    }
    got
}

fn shuck_with(key: Key) -> (TempDir, Shuck) {
    let dir = TempDir::new("alerts");
    let (pem, _) = openssl_cert(&dir, "srv", key, &["localhost"]);
    let shuck = Shuck::start(&["-b", "[127.0.0.1]:9", pem.to_str().unwrap()]);
    (dir, shuck)
}

#[test]
fn an_sslv3_legacy_version_gets_protocol_version_even_offering_tls13() {
    let (_dir, shuck) = shuck_with(Key::EcP256);
    let mut hello = client_hello(&ClientOpts::default());
    // Record header (5), handshake type and length (4), then legacy_version.
    assert_eq!(&hello[9..11], [3, 3]);
    hello[9..11].copy_from_slice(&[3, 0]);
    assert_eq!(exchange(&shuck, &hello), alert(PROTOCOL_VERSION));
    // The untouched hello is served (a ServerHello comes back).
    let ok = client_hello(&ClientOpts::default());
    let mut c = TcpStream::connect(shuck.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(&ok).unwrap();
    let mut head = [0u8; 6];
    c.read_exact(&mut head).unwrap();
    assert_eq!((head[0], head[5]), (22, 2), "a ServerHello");
    assert!(
        shuck.wait_log("legacy_version", Duration::from_secs(5)),
        "{}",
        shuck.log()
    );
}

#[test]
fn a_plaintext_record_over_two_to_the_fourteen_gets_record_overflow() {
    let (_dir, shuck) = shuck_with(Key::EcP256);
    let hello = client_hello(&ClientOpts::default());
    // The same hello in a record of 2^14 + 1 bytes (padded after the message).
    let body_len = (1 << 14) + 1;
    let mut record = vec![22, 3, 1];
    record.extend_from_slice(&(body_len as u16).to_be_bytes());
    record.extend_from_slice(&hello[5..]);
    record.resize(5 + body_len, 0);
    assert_eq!(exchange(&shuck, &record), alert(RECORD_OVERFLOW));
}

#[test]
fn no_usable_signature_algorithm_gets_handshake_failure_before_any_server_hello() {
    let (_dir, shuck) = shuck_with(Key::EcP256);
    for version in [12, 13] {
        let opts = ClientOpts {
            version: Some(version),
            sig_schemes: Some(vec![SignatureScheme::ED25519]),
            ..ClientOpts::default()
        };
        let got = exchange(&shuck, &client_hello(&opts));
        assert_eq!(got, alert(HANDSHAKE_FAILURE), "TLS 1.{}", version % 10);
        // Through a real client: the alert, not a ServerHello and a decryption failure.
        let r = tls_connect(shuck.addr(), &opts);
        assert_eq!(
            alert_of(&r),
            Some(rustls::AlertDescription::HandshakeFailure),
            "{:?}",
            r.err()
        );
    }
    // A client offering the certificate's scheme is served.
    let opts = ClientOpts {
        sig_schemes: Some(vec![SignatureScheme::ECDSA_NISTP256_SHA256]),
        ..ClientOpts::default()
    };
    let r = tls_connect(shuck.addr(), &opts);
    assert!(r.is_ok(), "{:?}", r.err());
}

#[test]
fn a_hello_too_large_to_serve_gets_its_alert_not_a_reset() {
    let (_dir, shuck) = shuck_with(Key::EcP256);
    // A ClientHello announcing 100 000 bytes, sent whole in full records: more than
    // rustls's 64 KiB, and still arriving when shuck refuses it.
    let total = 100_000usize;
    let mut message = vec![1];
    message.extend_from_slice(&(total as u32).to_be_bytes()[1..]);
    message.extend_from_slice(&[3, 3]);
    message.resize(4 + total, 0);
    let mut stream = Vec::new();
    for chunk in message.chunks(1 << 14) {
        stream.extend_from_slice(&[22, 3, 1]);
        stream.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        stream.extend_from_slice(chunk);
    }
    for _ in 0..5 {
        assert_eq!(
            exchange(&shuck, &stream),
            alert(DECODE_ERROR),
            "{}",
            shuck.log()
        );
    }
}
