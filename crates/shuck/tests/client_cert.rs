//! Client certificates: required without one fails, with one from the CA passes and its
//! subject reaches the backend (PROXY v2 SSL TLV and an HTTP header); optional serves
//! clients without one and refuses a certificate from another CA.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};

use common::*;

fn with_cert(pem: &std::path::Path) -> ClientOpts {
    ClientOpts {
        client_pem: Some(pem.to_owned()),
        ..ClientOpts::default()
    }
}

/// Connects and makes one echo round trip; Err if the handshake or the first read fails
/// (with TLS 1.3 the server's verdict on the client certificate arrives after the client
/// thinks the handshake is done).
fn try_echo(addr: std::net::SocketAddr, opts: &ClientOpts) -> Result<(), String> {
    let mut c = tls_connect(addr, opts).map_err(|e| e.to_string())?;
    c.write_all(b"ping\n").map_err(|e| e.to_string())?;
    let mut b = [0u8; 5];
    c.read_exact(&mut b).map_err(|e| e.to_string())?;
    (b == *b"ping\n")
        .then_some(())
        .ok_or_else(|| "wrong echo".into())
}

#[test]
fn required_refuses_without_and_passes_the_subject_with_a_certificate() {
    let pki = ClientPki::new();
    // An origin that records the PROXY v2 SSL TLV's CN, then echoes.
    let cns = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = cns.clone();
    let origin = Origin::start(move |mut s| {
        let Some(tlvs) = read_proxy_v2_tlvs(&mut s) else {
            return;
        };
        let mut cn = String::from("-");
        for (kind, value) in tlvs {
            if kind == 0x20 {
                assert_eq!(value[0], 0x07, "client flags");
                let mut sub = &value[5..];
                while sub.len() >= 3 {
                    let (k, sl) = (sub[0], u16::from_be_bytes([sub[1], sub[2]]) as usize);
                    if k == 0x22 {
                        cn = String::from_utf8(sub[3..3 + sl].to_vec()).unwrap();
                    }
                    sub = &sub[3 + sl..];
                }
            }
        }
        seen.lock().unwrap().push(cn);
        let mut buf = [0u8; 1024];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 || s.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let ca = pki.ca.to_str().unwrap();
    let shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--client-verify",
        "required",
        "--client-verify-ca",
        ca,
        "--write-proxy-v2",
        "--proxy-client-cert",
    ]);
    for version in [12, 13] {
        let none = ClientOpts {
            version: Some(version),
            ..ClientOpts::default()
        };
        assert!(
            try_echo(shuck.addr(), &none).is_err(),
            "TLS 1.{version}: served without a certificate"
        );
        let other = ClientOpts {
            version: Some(version),
            ..with_cert(&pki.mallory)
        };
        assert!(
            try_echo(shuck.addr(), &other).is_err(),
            "TLS 1.{version}: another CA's certificate accepted"
        );
        let alice = ClientOpts {
            version: Some(version),
            ..with_cert(&pki.alice)
        };
        try_echo(shuck.addr(), &alice).unwrap();
    }
    assert_eq!(*cns.lock().unwrap(), ["alice", "alice"]);
}

#[test]
fn http_header_carries_the_subject_and_optional_mode() {
    let pki = ClientPki::new();
    // An HTTP origin answering with the value of the header it received.
    let origin = Origin::start(|s| {
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut w = s;
        loop {
            let mut subject = String::from("(none)");
            let mut count = 0;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                if line == "\r\n" {
                    break;
                }
                if let Some(v) = line
                    .to_ascii_lowercase()
                    .strip_prefix("x-ssl-client-subject:")
                {
                    count += 1;
                    subject = line[line.len() - v.len()..].trim().to_owned();
                }
            }
            let body = format!("{count} {subject}");
            let resp = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            if w.write_all(resp.as_bytes()).is_err() {
                return;
            }
        }
    });
    let shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--http",
        "--client-verify",
        "optional",
        "--client-verify-ca",
        pki.ca.to_str().unwrap(),
        "--client-cert-header",
        "X-SSL-Client-Subject",
    ]);
    let ask = |opts: &ClientOpts| -> Result<String, String> {
        let mut c = tls_connect(shuck.addr(), opts).map_err(|e| e.to_string())?;
        c.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nX-SSL-Client-Subject: CN=admin\r\n\r\n")
            .map_err(|e| e.to_string())?;
        // Read the head, then exactly content-length bytes of body.
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&got).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if body.len() >= len {
                    return Ok(body[..len].to_owned());
                }
            }
            let n = c.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err(format!("closed early: {text:?}"));
            }
            got.extend_from_slice(&buf[..n]);
        }
    };
    // With alice's certificate: exactly one header, the real subject.
    assert_eq!(
        ask(&with_cert(&pki.alice)).unwrap(),
        "1 CN=alice, O=Example"
    );
    // Without a certificate (optional): served, and the client's own header is gone.
    assert_eq!(ask(&ClientOpts::default()).unwrap(), "0 (none)");
    // Another CA's certificate: refused even though certificates are optional.
    assert!(ask(&with_cert(&pki.mallory)).is_err());
}

#[test]
fn bad_client_verify_settings_are_named() {
    let (code, err) = run_to_exit(&["--client-verify", "required"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--client-verify-ca"), "{err}");
    let (code, err) = run_to_exit(&["--client-verify", "sometimes"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("sometimes") && err.contains("optional"),
        "{err}"
    );
    let dir = TempDir::new("ca");
    let empty = dir.path("empty.pem");
    std::fs::write(&empty, "nothing here\n").unwrap();
    let (code, err) = run_to_exit(&[
        "--client-verify",
        "optional",
        "--client-verify-ca",
        empty.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("empty.pem") && err.contains("no certificate"),
        "{err}"
    );
    let (code, err) = run_to_exit(&["--http", "--client-cert-header", "Bad Header"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--client-cert-header"), "{err}");
}
