//! The client side of TLS on rustls's unbuffered API, driven directly over real sockets by
//! a real rustls client: records of every size both ways, a reader smaller than a record,
//! close_notify both ways, the alert a non-TLS client gets, and no buffer kept while idle.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;

use clap::Parser;
use common::*;
use shuck::config::{Cli, Config};
use shuck::proxy::client_io::ClientIo;
use shuck::proxy::handshake;
use shuck::tls::TlsState;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn state(extra: &[&str]) -> TlsState {
    let mut args = vec!["shuck"];
    args.extend(with_cert(
        &[&["-f", "[127.0.0.1]:1", "-b", "[127.0.0.1]:2"], extra].concat(),
    ));
    let config = Config::from_cli(&Cli::try_parse_from(args).unwrap()).unwrap();
    TlsState::build(&config.tls, &config.certs).unwrap()
}

/// Runs `server` on one accepted connection on a current-thread runtime, `client` on a
/// thread against it; returns what the server returned.
fn run<T: Send + 'static>(
    server: impl AsyncFnOnce(tokio::net::TcpStream) -> T,
    client: impl FnOnce(std::net::SocketAddr) + Send + 'static,
) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let c = thread::spawn(move || client(addr));
        let (tcp, _) = listener.accept().await.unwrap();
        let out = tokio::time::timeout(std::time::Duration::from_secs(20), server(tcp))
            .await
            .expect("server side timed out");
        c.join().expect("client side failed");
        out
    })
}

/// Runs a handshake that must fail against `client`; returns the server's error.
fn refused(
    tls: TlsState,
    want_sni: bool,
    client: impl FnOnce(std::net::SocketAddr) + Send + 'static,
) -> String {
    run(
        async move |tcp| match handshake::accept(ClientIo::new(tcp), &tls, want_sni).await {
            Ok(_) => panic!("the handshake succeeded"),
            Err(e) => e.to_string(),
        },
        client,
    )
}

#[test]
fn records_of_every_size_both_ways_and_nothing_kept_while_idle() {
    for version in [12u8, 13] {
        let tls = state(&[]);
        let (idle, after_use, sni) = run(
            async move |tcp| {
                let mut s = handshake::accept(ClientIo::new(tcp), &tls, true)
                    .await
                    .unwrap();
                let idle = s.buffered();
                // Echo with a reader far smaller than a record: the rest waits in the
                // stream and comes with the next reads.
                let mut buf = [0u8; 7];
                loop {
                    let n = s.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    s.write_all(&buf[..n]).await.unwrap();
                    if buf[..n].contains(&b'\n') {
                        s.flush().await.unwrap();
                    }
                }
                let after_use = s.buffered();
                s.shutdown().await.unwrap();
                (idle, after_use, s.sni().map(str::to_owned))
            },
            move |addr| {
                let opts = ClientOpts {
                    version: Some(version),
                    sni: Some("localhost".into()),
                    ..ClientOpts::default()
                };
                let mut c = tls_connect(addr, &opts).unwrap();
                for size in [1usize, 100, 16 * 1024, 16 * 1024 + 1, 300_000] {
                    let mut msg: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
                    msg.push(b'\n');
                    c.write_all(&msg).unwrap();
                    let mut back = vec![0u8; msg.len()];
                    c.read_exact(&mut back).unwrap();
                    assert!(back == msg, "echo of {size} bytes differs");
                    if version == 13 {
                        // A KeyUpdate that asks for one back, answered while reading.
                        c.conn.refresh_traffic_keys().unwrap();
                    }
                }
                c.conn.send_close_notify();
                c.flush().unwrap();
                // The server's close_notify ends the stream cleanly (an error otherwise).
                assert!(read_all(&mut c).unwrap().is_empty());
            },
        );
        assert_eq!(idle, 0, "TLS 1.{version}: buffers held after the handshake");
        assert_eq!(after_use, 0, "TLS 1.{version}: buffers held after use");
        assert_eq!(sni.as_deref(), Some("localhost"));
    }
}

#[test]
fn a_client_that_does_not_speak_tls_gets_a_decode_error_alert() {
    let tls = state(&[]);
    let err = refused(tls, false, |addr| {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        // A plaintext fatal alert record: decode_error (50).
        assert_eq!(got, [21, 3, 3, 0, 2, 2, 50]);
    });
    assert!(err.contains("corrupt message"), "{err}");
}

#[test]
fn unknown_names_get_unrecognized_name_when_asked() {
    let tls = state(&["--sni-nomatch-abort"]);
    let err = refused(tls, false, |addr| {
        let opts = ClientOpts {
            sni: Some("other.example".into()),
            ..ClientOpts::default()
        };
        let e = tls_connect(addr, &opts).err().unwrap();
        assert!(e.to_string().contains("UnrecognisedName"), "{e}");
    });
    assert!(err.contains("other.example"), "{err}");
}

#[test]
fn a_client_that_leaves_mid_handshake_is_an_error_not_a_hang() {
    let tls = state(&[]);
    let err = refused(tls, true, |addr| {
        let mut c = TcpStream::connect(addr).unwrap();
        // The first bytes of a ClientHello record, then nothing.
        c.write_all(&[22, 3, 1, 0, 200, 1, 0]).unwrap();
    });
    assert!(err.contains("closed"), "{err}");
}

#[test]
fn records_that_arrive_while_writing_are_read_in_order() {
    let tls = state(&[]);
    let got = run(
        async move |tcp| {
            let mut s = handshake::accept(ClientIo::new(tcp), &tls, false)
                .await
                .unwrap();
            // The first record only: the second came in the same read and stays queued.
            let mut first = [0u8; 5];
            s.read_exact(&mut first).await.unwrap();
            // Writing processes what is queued; it must still come to the next read.
            s.write_all(b"reply").await.unwrap();
            s.flush().await.unwrap();
            let mut second = [0u8; 6];
            s.read_exact(&mut second).await.unwrap();
            s.shutdown().await.unwrap();
            [first.to_vec(), second.to_vec()].concat()
        },
        |addr| {
            let mut c = tls_connect(addr, &ClientOpts::default()).unwrap();
            // Two records in one TCP segment.
            c.conn.writer().write_all(b"first").unwrap();
            c.conn.writer().write_all(b"second").unwrap();
            c.flush().unwrap();
            let mut reply = [0u8; 5];
            c.read_exact(&mut reply).unwrap();
            assert_eq!(&reply, b"reply");
            let _ = read_all(&mut c);
        },
    );
    assert_eq!(got, b"firstsecond");
}

#[test]
fn an_altered_record_is_refused_with_bad_record_mac() {
    let tls = state(&[]);
    let err = run(
        async move |tcp| {
            let mut s = handshake::accept(ClientIo::new(tcp), &tls, false)
                .await
                .unwrap();
            let mut buf = [0u8; 64];
            let e = s.read(&mut buf).await.unwrap_err();
            // Later calls report the failure too, and never touch the bad bytes again.
            assert!(s.read(&mut buf).await.is_err());
            assert!(s.write(b"x").await.is_err());
            let _ = s.shutdown().await;
            e.to_string()
        },
        |addr| {
            let mut c = tls_connect(addr, &ClientOpts::default()).unwrap();
            // Encrypt one record, flip a bit of its ciphertext, send it raw.
            c.conn.writer().write_all(b"hello").unwrap();
            let mut record = Vec::new();
            c.conn.write_tls(&mut record).unwrap();
            let last = record.len() - 1;
            record[last] ^= 1;
            c.sock.write_all(&record).unwrap();
            let e = read_all(&mut c).unwrap_err();
            assert!(e.to_string().contains("BadRecordMac"), "{e}");
        },
    );
    assert!(err.contains("decrypt"), "{err}");
}
