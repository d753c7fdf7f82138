//! TLS end to end: protocol versions and key types, SNI, ALPN, cipher options, and real
//! clients (rustls, openssl s_client, curl) against the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use rustls::{CipherSuite, ProtocolVersion};

#[test]
fn tls12_and_tls13_with_rsa_and_ecdsa() {
    let dir = TempDir::new("versions");
    let origin = Origin::echo();
    for key in [Key::Rsa, Key::EcP256] {
        let (pem, der) = openssl_cert(&dir, &format!("{key:?}"), key, &["localhost"]);
        let shuck = Shuck::start(&["-n", "1", "-b", &origin.addr(), pem.to_str().unwrap()]);
        for (v, want) in [
            (12, ProtocolVersion::TLSv1_2),
            (13, ProtocolVersion::TLSv1_3),
        ] {
            let opts = ClientOpts {
                version: Some(v),
                ..Default::default()
            };
            let mut c = tls_connect(shuck.addr(), &opts).unwrap();
            assert_eq!(c.conn.protocol_version(), Some(want), "{key:?}");
            assert_eq!(served_cert(&c), der, "{key:?} TLS1.{v}");
            echo_roundtrip(&mut c);
        }
    }
}

#[test]
fn every_key_type_and_encoding_serves() {
    let dir = TempDir::new("keys");
    let origin = Origin::echo();
    for key in [
        Key::RsaPkcs1,
        Key::EcP256Sec1,
        Key::EcP384Sec1,
        Key::Ed25519,
    ] {
        let (pem, der) = openssl_cert(&dir, &format!("{key:?}"), key, &["localhost"]);
        let shuck = Shuck::start(&["-n", "1", "-b", &origin.addr(), pem.to_str().unwrap()]);
        let mut c = tls_connect(shuck.addr(), &ClientOpts::default())
            .unwrap_or_else(|e| panic!("{key:?}: {e}"));
        assert_eq!(served_cert(&c), der, "{key:?}");
        echo_roundtrip(&mut c);
    }
}

#[test]
fn sni_selects_among_three_certificates_with_wildcard_and_default() {
    let dir = TempDir::new("sni");
    let origin = Origin::echo();
    let (a, a_der) = rcgen_cert(&dir, "a", &["a.example"], false);
    let (b, b_der) = rcgen_cert(&dir, "b", &["b.example", "bb.example"], false);
    let (w, w_der) = rcgen_cert(&dir, "w", &["*.wild.example"], false);
    let shuck = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &origin.addr(),
        // As in hitch, the last listed is the default.
        b.to_str().unwrap(),
        w.to_str().unwrap(),
        a.to_str().unwrap(),
    ]);
    let served = |sni: Option<&str>| {
        let opts = ClientOpts {
            sni: sni.map(str::to_owned),
            ..Default::default()
        };
        let mut c = tls_connect(shuck.addr(), &opts).unwrap();
        echo_roundtrip(&mut c);
        served_cert(&c)
    };
    assert_eq!(served(Some("a.example")), a_der);
    assert_eq!(served(Some("b.example")), b_der);
    assert_eq!(
        served(Some("BB.Example")),
        b_der,
        "names match case-insensitively"
    );
    assert_eq!(served(Some("x.wild.example")), w_der);
    assert_eq!(
        served(Some("wild.example")),
        a_der,
        "a wildcard does not match its parent"
    );
    assert_eq!(
        served(Some("y.x.wild.example")),
        a_der,
        "a wildcard covers one label"
    );
    assert_eq!(
        served(Some("unknown.example")),
        a_der,
        "unknown names get the default"
    );
    assert_eq!(served(None), a_der, "no SNI gets the default");
}

#[test]
fn sni_uses_the_common_name_when_there_is_no_san() {
    if !require("openssl", "openssl") {
        return;
    }
    let dir = TempDir::new("cn");
    let origin = Origin::echo();
    let (a, a_der) = rcgen_cert(&dir, "a", &["a.example"], false);
    sh(&format!(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=cn-only.example \
         -days 30 -keyout {d}/cn.key -out {d}/cn.crt && cat {d}/cn.crt {d}/cn.key > {d}/cn.pem",
        d = dir.0.display()
    ));
    let cn = dir.path("cn.pem");
    let shuck = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &origin.addr(),
        cn.to_str().unwrap(),
        a.to_str().unwrap(),
    ]);
    let sni = |n: &str| ClientOpts {
        sni: Some(n.into()),
        ..Default::default()
    };
    let c = tls_connect(shuck.addr(), &sni("cn-only.example")).unwrap();
    assert_ne!(
        served_cert(&c),
        a_der,
        "the CN-only certificate serves its CN"
    );
    let c = tls_connect(shuck.addr(), &sni("other.example")).unwrap();
    assert_eq!(served_cert(&c), a_der);
}

#[test]
fn sni_nomatch_abort_sends_unrecognized_name() {
    let dir = TempDir::new("sniabort");
    let origin = Origin::echo();
    let (a, a_der) = rcgen_cert(&dir, "a", &["a.example"], false);
    let (w, w_der) = rcgen_cert(&dir, "w", &["*.wild.example"], false);
    let shuck = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &origin.addr(),
        "--sni-nomatch-abort",
        w.to_str().unwrap(),
        a.to_str().unwrap(),
    ]);
    let connect = |sni: Option<&str>| {
        let opts = ClientOpts {
            sni: sni.map(str::to_owned),
            ..Default::default()
        };
        tls_connect(shuck.addr(), &opts)
    };
    assert_eq!(served_cert(&connect(Some("a.example")).unwrap()), a_der);
    assert_eq!(
        served_cert(&connect(Some("q.wild.example")).unwrap()),
        w_der
    );
    assert_eq!(
        served_cert(&connect(None).unwrap()),
        a_der,
        "no SNI is not a mismatch"
    );
    let err = connect(Some("other.example")).unwrap_err().to_string();
    assert!(
        err.contains("UnrecognisedName") || err.contains("unrecognised"),
        "{err}"
    );

    if require("openssl", "openssl") {
        let text = sh_out(&format!(
            "openssl s_client -connect 127.0.0.1:{} -servername nope.example </dev/null",
            shuck.port
        ));
        assert!(text.contains("unrecognized name"), "{text}");
    }
}

#[test]
fn alpn_is_negotiated() {
    let origin = Origin::echo();
    let shuck = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &origin.addr(),
        "--alpn-protos",
        "h2,http/1.1",
    ]);
    for (offer, want) in [
        (vec![b"http/1.1".to_vec()], Some(&b"http/1.1"[..])),
        (vec![b"h2".to_vec(), b"http/1.1".to_vec()], Some(&b"h2"[..])),
        (vec![], None),
    ] {
        let opts = ClientOpts {
            alpn: offer.clone(),
            ..Default::default()
        };
        let mut c = tls_connect(shuck.addr(), &opts).unwrap();
        assert_eq!(c.conn.alpn_protocol(), want, "offered {offer:?}");
        echo_roundtrip(&mut c);
    }
    // A client whose protocols shuck does not speak is refused (RFC 7301).
    let opts = ClientOpts {
        alpn: vec![b"spdy/3".to_vec()],
        ..Default::default()
    };
    assert!(tls_connect(shuck.addr(), &opts).is_err());
}

#[test]
fn protocol_and_cipher_options_take_effect() {
    let origin = Origin::echo();
    let only13 = Shuck::start(&["-n", "1", "-b", &origin.addr(), "--tls-protos", "TLSv1.3"]);
    assert!(tls_connect(
        only13.addr(),
        &ClientOpts {
            version: Some(12),
            ..Default::default()
        }
    )
    .is_err());
    tls_connect(
        only13.addr(),
        &ClientOpts {
            version: Some(13),
            ..Default::default()
        },
    )
    .unwrap();

    let dir = TempDir::new("ciphers");
    let (rsa, _) = openssl_cert(&dir, "rsa", Key::Rsa, &["localhost"]);
    let shuck = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &origin.addr(),
        "-c",
        "ECDHE-RSA-AES256-GCM-SHA384",
        "--ciphersuites",
        "TLS_CHACHA20_POLY1305_SHA256",
        rsa.to_str().unwrap(),
    ]);
    let c = tls_connect(
        shuck.addr(),
        &ClientOpts {
            version: Some(12),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        c.conn.negotiated_cipher_suite().unwrap().suite(),
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
    );
    let c = tls_connect(
        shuck.addr(),
        &ClientOpts {
            version: Some(13),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        c.conn.negotiated_cipher_suite().unwrap().suite(),
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
    );
    let refused = ClientOpts {
        version: Some(12),
        suites: Some(vec![CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]),
        ..Default::default()
    };
    assert!(tls_connect(shuck.addr(), &refused).is_err());

    // --prefer-server-ciphers: the server's order wins over the client's.
    let ordered = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &origin.addr(),
        "--prefer-server-ciphers",
        "-c",
        "ECDHE-RSA-CHACHA20-POLY1305:ECDHE-RSA-AES128-GCM-SHA256",
        rsa.to_str().unwrap(),
    ]);
    let opts = ClientOpts {
        version: Some(12),
        suites: Some(vec![
            CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ]),
        ..Default::default()
    };
    let c = tls_connect(ordered.addr(), &opts).unwrap();
    assert_eq!(
        c.conn.negotiated_cipher_suite().unwrap().suite(),
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
    );

    // --ecdh-curve: a client offering only P-384 fails against an X25519-only server.
    if require("openssl", "openssl") {
        let x25519 = Shuck::start(&["-n", "1", "-b", &origin.addr(), "--ecdh-curve", "X25519"]);
        let run = |groups: &str| {
            sh_out(&format!(
                "echo | openssl s_client -connect 127.0.0.1:{} -groups {groups}",
                x25519.port
            ))
        };
        let ok = run("X25519");
        assert!(
            ok.contains("Cipher is") && !ok.contains("Cipher is (NONE)"),
            "{ok}"
        );
        let bad = run("P-384");
        assert!(
            bad.contains("alert") || bad.contains("Cipher is (NONE)"),
            "{bad}"
        );
    }
}

#[test]
fn openssl_s_client_and_curl_get_through() {
    let origin = Origin::http("hello from the origin\n");
    let dir = TempDir::new("clients");
    let (rsa, _) = openssl_cert(&dir, "rsa", Key::Rsa, &["localhost"]);
    let (ec, _) = openssl_cert(&dir, "ec", Key::EcP256, &["ec.localhost"]);
    let (rsa, ec) = (rsa.to_str().unwrap(), ec.to_str().unwrap());
    let shuck = Shuck::start(&["-n", "1", "-b", &origin.addr(), rsa, ec]);
    let port = shuck.port;
    if require("openssl", "openssl") {
        for (flag, want) in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")] {
            // -ign_eof keeps reading after the request is sent; timeout ends the keep-alive.
            let text = sh_out(&format!(
                "printf 'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' | \
                 timeout 3 openssl s_client -ign_eof -connect 127.0.0.1:{port} {flag} -servername localhost"
            ));
            assert!(text.contains(want), "{flag}: {text}");
            assert!(text.contains("hello from the origin"), "{flag}: {text}");
        }
        // The ECDSA certificate is chosen by SNI.
        let text = sh_out(&format!(
            "echo | openssl s_client -connect 127.0.0.1:{port} -servername ec.localhost"
        ));
        assert!(
            text.contains("CN = ec.localhost") || text.contains("CN=ec.localhost"),
            "{text}"
        );
    }
    if require("curl", "curl") {
        for flag in ["--tlsv1.2 --tls-max 1.2", "--tlsv1.3"] {
            let text = sh_out(&format!(
                "curl -sSk {flag} https://127.0.0.1:{port}/ https://127.0.0.1:{port}/again"
            ));
            assert_eq!(
                text, "hello from the origin\nhello from the origin\n",
                "curl {flag}"
            );
        }
    }
}
