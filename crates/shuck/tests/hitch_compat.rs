//! hitch's configurations run unchanged: the certificate hitch would serve by default,
//! `pem-dir` as hitch reads it, hitch's spellings of booleans and empty values, and hitch's
//! exit statuses. Each check goes through real sockets with a real TLS client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;

/// The certificate served to a client that sends no server name, and to one that sends
/// a name no certificate has.
fn defaults(addr: SocketAddr) -> (Vec<u8>, Vec<u8>) {
    let none = tls_connect(addr, &ClientOpts::default()).unwrap();
    let unknown = tls_connect(
        addr,
        &ClientOpts {
            sni: Some("nobody.test".into()),
            ..ClientOpts::default()
        },
    )
    .unwrap();
    (served_cert(&none), served_cert(&unknown))
}

fn by_name(addr: SocketAddr, name: &str) -> Vec<u8> {
    let c = tls_connect(
        addr,
        &ClientOpts {
            sni: Some(name.into()),
            ..ClientOpts::default()
        },
    )
    .unwrap();
    served_cert(&c)
}

fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_last_certificate_listed_is_the_default() {
    let dir = TempDir::new("hitch-default");
    let (a, a_der) = rcgen_cert(&dir, "a", &["a.test"], false);
    let (b, b_der) = rcgen_cert(&dir, "b", &["b.test"], false);
    let (own, own_der) = rcgen_cert(&dir, "own", &["own.test"], false);
    let origin = Origin::echo();

    // Command line: the last PEM file; the others still serve their names.
    let shuck = Shuck::start(&["-b", &origin.addr(), s(&a), s(&b)]);
    assert_eq!(defaults(shuck.addr()), (b_der.clone(), b_der.clone()));
    assert_eq!(by_name(shuck.addr(), "a.test"), a_der);
    drop(shuck);

    // pem-file keys of a configuration file.
    let port = free_port();
    let conf = dir.path("keys.conf");
    std::fs::write(
        &conf,
        format!(
            "frontend = \"[127.0.0.1]:{port}\"\nbackend = \"{}\"\npem-file = \"{}\"\npem-file = \"{}\"\n",
            origin.addr(),
            s(&a),
            s(&b)
        ),
    )
    .unwrap();
    let shuck = Shuck::start_raw(&["--config", s(&conf)], port);
    assert_eq!(defaults(shuck.addr()), (b_der.clone(), b_der.clone()));
    drop(shuck);

    // A frontend block's own list: its last; with match-global-certs the global
    // certificates serve their names, and the frontend's own last stays the default.
    let port = free_port();
    let conf = dir.path("block.conf");
    std::fs::write(
        &conf,
        format!(
            "frontend = {{\n  host = \"127.0.0.1\"\n  port = \"{port}\"\n  pem-file = \"{}\"\n  pem-file = \"{}\"\n}}\nbackend = \"{}\"\npem-file = \"{}\"\n",
            s(&a),
            s(&own),
            origin.addr(),
            s(&b)
        ),
    )
    .unwrap();
    let shuck = Shuck::start_raw(&["--config", s(&conf)], port);
    assert_eq!(defaults(shuck.addr()), (own_der.clone(), own_der.clone()));
    assert_eq!(by_name(shuck.addr(), "a.test"), a_der);
    drop(shuck);

    let port = free_port();
    let fe = format!("[127.0.0.1]:{port}+{};match-global-certs=on", s(&own));
    let shuck = Shuck::start_raw(&["-f", &fe, "-b", &origin.addr(), s(&a), s(&b)], port);
    assert_eq!(defaults(shuck.addr()), (own_der.clone(), own_der.clone()));
    assert_eq!(by_name(shuck.addr(), "a.test"), a_der);
    assert_eq!(by_name(shuck.addr(), "b.test"), b_der);
    drop(shuck);

    // pem-dir comes after the files given: the last file given stays the default; with no
    // file given, the first of the directory in name order is.
    let certs = TempDir::new("hitch-pemdir");
    let (_, d1_der) = rcgen_cert(&certs, "1-first", &["d1.test"], false);
    let (_, d2_der) = rcgen_cert(&certs, "2-second", &["d2.test"], false);
    let pem_dir = format!("{}/", certs.0.display());
    let shuck = Shuck::start(&["-b", &origin.addr(), "--pem-dir", &pem_dir, s(&a)]);
    assert_eq!(defaults(shuck.addr()), (a_der.clone(), a_der.clone()));
    assert_eq!(by_name(shuck.addr(), "d2.test"), d2_der);
    drop(shuck);
    let shuck = Shuck::start(&["-b", &origin.addr(), "--pem-dir", &pem_dir]);
    assert_eq!(defaults(shuck.addr()), (d1_der.clone(), d1_der.clone()));
    assert_eq!(by_name(shuck.addr(), "d2.test"), d2_der);
}

#[test]
fn pem_dir_reads_every_regular_file_and_pem_dir_glob_narrows_it() {
    let certs = TempDir::new("hitch-pemdir-all");
    let (crt, crt_der) = rcgen_cert(&certs, "site", &["crt.test"], false);
    // A certificate whose file does not end in .pem.
    std::fs::rename(&crt, certs.path("site.crt")).unwrap();
    let (_, pem_der) = rcgen_cert(&certs, "other", &["pem.test"], false);
    std::fs::write(certs.path("README"), "not a certificate\n").unwrap();
    let origin = Origin::echo();
    let pem_dir = s(&certs.0).to_owned();

    let shuck = Shuck::start(&["-b", &origin.addr(), "--pem-dir", &pem_dir]);
    assert_eq!(by_name(shuck.addr(), "crt.test"), crt_der);
    assert_eq!(by_name(shuck.addr(), "pem.test"), pem_der);
    // In name order: other.pem, README (skipped), site.crt; the first is the default.
    assert_eq!(defaults(shuck.addr()).0, pem_der);
    let log = shuck.log();
    assert!(
        log.contains("--pem-dir: skipping") && log.contains("README"),
        "{log}"
    );
    drop(shuck);

    let shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--pem-dir",
        &pem_dir,
        "--pem-dir-glob",
        "*.crt",
    ]);
    assert_eq!(defaults(shuck.addr()).0, crt_der);
    assert_eq!(
        by_name(shuck.addr(), "pem.test"),
        crt_der,
        "other.pem is not loaded"
    );
    drop(shuck);

    let (code, err) = run_to_exit(&["--pem-dir", &pem_dir, "--pem-dir-glob", "*.key", "-t"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no file matching \"*.key\""), "{err}");
}

#[test]
fn hitch_spellings_of_booleans_and_empty_values_are_accepted() {
    let dir = TempDir::new("hitch-values");
    let (a, _) = rcgen_cert(&dir, "a", &["a.test"], false);
    let conf = dir.path("hitch.conf");
    std::fs::write(
        &conf,
        format!(
            "frontend = \"[127.0.0.1]:{}\"\nbackend = \"[127.0.0.1]:8000\"\npem-file = \"{}\"\n\
             prefer-server-ciphers = Y\nsni-nomatch-abort = f\nno-tickets = t\n\
             ciphers = \"\"\nuser = \"\"\ngroup = \"\"\nchroot = \"\"\npidfile = \"\"\n\
             ssl-engine = \"\"\nalpn-protos = \"\"\nlog-filename = \"\"\nshared-cache-listen = \"\"\n",
            free_port(),
            s(&a)
        ),
    )
    .unwrap();
    let (code, err) = run_to_exit(&["--config", s(&conf), "--test"]);
    assert_eq!(code, Some(0), "{err}");

    // The same on the command line: an empty value is no value.
    let (code, err) = run_to_exit(&["--ciphers=", "--user=", "--pidfile=", "--test", s(&a)]);
    assert_eq!(code, Some(0), "{err}");

    // sni-nomatch-abort = yes is on: an unknown name is refused.
    let port = free_port();
    let on = dir.path("on.conf");
    std::fs::write(
        &on,
        format!(
            "frontend = \"[127.0.0.1]:{port}\"\nbackend = \"{}\"\npem-file = \"{}\"\nsni-nomatch-abort = yes\n",
            Origin::echo().addr(),
            s(&a)
        ),
    )
    .unwrap();
    let shuck = Shuck::start_raw(&["--config", s(&on)], port);
    let refused = tls_connect(
        shuck.addr(),
        &ClientOpts {
            sni: Some("nobody.test".into()),
            ..ClientOpts::default()
        },
    );
    assert!(refused.is_err(), "sni-nomatch-abort = yes is on");

    // A named engine is a clear error with its line.
    let engine = dir.path("engine.conf");
    std::fs::write(&engine, "ssl-engine = \"rdrand\"\n").unwrap();
    let (code, err) = run_to_exit(&["--config", s(&engine), "--test"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("line 1") && err.contains("ssl-engine") && err.contains("no OpenSSL engines"),
        "{err}"
    );
    // A word that is no boolean names the spellings.
    let bad = dir.path("bad.conf");
    std::fs::write(&bad, "prefer-server-ciphers = maybe\n").unwrap();
    let (code, err) = run_to_exit(&["--config", s(&bad), "--test"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("maybe") && err.contains("yes/no"), "{err}");
}

#[test]
fn exit_statuses_are_hitchs() {
    let dir = TempDir::new("hitch-exit");
    let (a, _) = rcgen_cert(&dir, "a", &["a.test"], false);
    assert_eq!(run_to_exit(&["--help"]).0, Some(0));
    assert_eq!(run_to_exit(&["--version"]).0, Some(0));
    assert_eq!(run_to_exit(&["--test", s(&a)]).0, Some(0));
    // A bad flag, a bad value, a failed --test, a start-up error: 1.
    assert_eq!(run_to_exit(&["--no-such-flag"]).0, Some(1));
    assert_eq!(run_to_exit(&["-n", "zero"]).0, Some(1));
    assert_eq!(run_to_exit(&["--test", "/nonexistent.pem"]).0, Some(1));
    let taken = fresh_listener();
    let fe = format!("[127.0.0.1]:{}", taken.local_addr().unwrap().port());
    let (code, err) = run_to_exit(&["-f", &fe, s(&a)]);
    assert_eq!(code, Some(1), "{err}");
}

#[test]
fn without_a_backend_hitchs_default_is_used_once_anything_is_configured() {
    use std::io::{Read, Write};
    let dir = TempDir::new("hitch-backend");
    let (a, _) = rcgen_cert(&dir, "a", &["a.test"], false);
    // hitch's default backend; the test needs the port (nothing else of the suite uses it).
    let backend = std::net::TcpListener::bind("127.0.0.1:8000")
        .expect("127.0.0.1:8000 must be free for this test: hitch's default backend");
    let shuck = Shuck::start(&["-n", "1", s(&a)]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    c.write_all(b"to the default backend").unwrap();
    c.flush().unwrap();
    let (mut got, _) = backend.accept().unwrap();
    let mut buf = [0u8; 22];
    got.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"to the default backend");
    assert!(
        shuck.log().contains("forwarding to [127.0.0.1]:8000"),
        "{}",
        shuck.log()
    );
    drop(shuck);

    // A frontend's own certificate counts as configuring too.
    let port = free_port();
    let fe = format!("[127.0.0.1]:{port}+{}", s(&a));
    let own = Shuck::start_raw(&["-n", "1", "-f", &fe], port);
    let mut c = tls_connect(own.addr(), &ClientOpts::default()).unwrap();
    c.write_all(b"to the default backend").unwrap();
    c.flush().unwrap();
    let (mut got, _) = backend.accept().unwrap();
    got.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"to the default backend");
    drop(own);

    // The zero-configuration start keeps the built-in origin, and says what it is; a
    // frontend setting is no certificate (even one whose value holds a '+').
    let port = free_port();
    let fe = format!("[127.0.0.1]:{port};ciphers=EECDH+AESGCM");
    let bare = Shuck::start_raw(&["-n", "1", "-f", &fe], port);
    let mut c = tls_connect(bare.addr(), &ClientOpts::default()).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let answer = String::from_utf8_lossy(&read_all(&mut c).unwrap_or_default()).into_owned();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        bare.log().contains("demonstration default"),
        "{}",
        bare.log()
    );
}

/// What a backend read of a PROXY v2 header: the SSL TLV's verify field, and TLV 0xE0.
type SslSeen = (u32, Option<Vec<u8>>);

#[test]
fn proxy_v2_ssl_tlv_verify_and_the_client_certificate_as_hitch_sends_them() {
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};
    let pki = ClientPki::new();
    let seen: Arc<Mutex<Vec<SslSeen>>> = Arc::default();
    let record = seen.clone();
    let origin = Origin::start(move |mut s| {
        let Some(tlvs) = read_proxy_v2_tlvs(&mut s) else {
            return;
        };
        let (mut verify, mut cert) = (u32::MAX, None);
        for (kind, value) in tlvs {
            match kind {
                0x20 => verify = u32::from_be_bytes(value[1..5].try_into().unwrap()),
                0xE0 => cert = Some(value),
                _ => {}
            }
        }
        record.lock().unwrap().push((verify, cert));
        let mut buf = [0u8; 64];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 || s.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--client-verify",
        "optional",
        "--client-verify-ca",
        s(&pki.ca),
        "--write-proxy-v2",
        "--proxy-client-cert",
    ]);
    let mut without = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    echo_roundtrip(&mut without);
    let alice = ClientOpts {
        client_pem: Some(pki.alice.clone()),
        ..ClientOpts::default()
    };
    let mut with = tls_connect(shuck.addr(), &alice).unwrap();
    echo_roundtrip(&mut with);

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    // No certificate: not 0, which the PROXY protocol defines as "presented and verified".
    assert_ne!(seen[0].0, 0, "verify without a certificate");
    assert_eq!(seen[0].1, None, "no 0xE0 without a certificate");
    // alice's: verified (0), and her certificate in TLV 0xE0, PEM as OpenSSL writes it.
    assert_eq!(seen[1].0, 0);
    let pem = String::from_utf8(seen[1].1.clone().expect("TLV 0xE0")).unwrap();
    assert!(
        pem.starts_with("-----BEGIN TRUSTED CERTIFICATE-----\n"),
        "{pem}"
    );
    assert!(
        pem.ends_with("-----END TRUSTED CERTIFICATE-----\n"),
        "{pem}"
    );
    assert!(pem.lines().all(|l| l.len() <= 64), "{pem}");
    let alice_der = pem_der(&std::fs::read(&pki.alice).unwrap());
    let sent = pem_der(pem.replace("TRUSTED CERTIFICATE", "CERTIFICATE").as_bytes());
    assert_eq!(sent, alice_der);
}

#[test]
fn serving_as_root_without_user_is_warned_about() {
    let uid = sh_out("id -u");
    let root = uid.trim() == "0";
    let origin = Origin::echo();
    let shuck = Shuck::start(&["-n", "1", "-b", &origin.addr()]);
    assert_eq!(
        shuck.log().contains("running as root"),
        root,
        "uid {uid}: {}",
        shuck.log()
    );
    drop(shuck);
    if root {
        // With --user, nothing to warn about.
        let dropped = Shuck::start(&["-n", "1", "-b", &origin.addr(), "--user", "nobody"]);
        assert!(
            !dropped.log().contains("running as root:"),
            "{}",
            dropped.log()
        );
    }
}

#[test]
fn cipher_and_protocol_lists_are_lenient_as_openssl() {
    let dir = TempDir::new("hitch-lenient");
    let (a, _) = rcgen_cert(&dir, "a", &["a.test"], false);
    let origin = Origin::echo();
    let port = free_port();
    let conf = dir.path("hitch.conf");
    // hitch 1.0's switch and a cipher list with suites shuck does not serve.
    std::fs::write(
        &conf,
        format!(
            "frontend = \"[127.0.0.1]:{port}\"\nbackend = \"{}\"\npem-file = \"{}\"\n\
             ssl = on\nciphers = \"EECDH+AESGCM:EDH+AESGCM:AES128-SHA:!RC4\"\n",
            origin.addr(),
            s(&a)
        ),
    )
    .unwrap();
    let shuck = Shuck::start_raw(&["--config", s(&conf)], port);
    let log = shuck.log();
    let dropped: Vec<&str> = log.lines().filter(|l| l.contains("dropped")).collect();
    assert_eq!(dropped.len(), 2, "one warning per list: {log}");
    assert!(
        dropped
            .iter()
            .any(|l| l.contains("--ciphers: dropped EDH+AESGCM, AES128-SHA") && l.contains("CBC")),
        "{log}"
    );
    assert!(
        dropped.iter().any(
            |l| l.contains("--tls-protos: dropped SSLv3, TLSv1.0, TLSv1.1")
                && l.contains("insecure")
        ),
        "{log}"
    );
    // What is left is served: TLS 1.2 with an ECDHE AES-GCM suite, and TLS 1.3.
    for version in [12, 13] {
        let mut c = tls_connect(
            shuck.addr(),
            &ClientOpts {
                version: Some(version),
                ..ClientOpts::default()
            },
        )
        .unwrap();
        echo_roundtrip(&mut c);
    }
    // What was dropped is not: ChaCha20 was not selected, TLS 1.1 is refused.
    let chacha = tls_connect(
        shuck.addr(),
        &ClientOpts {
            version: Some(12),
            suites: Some(vec![
                rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            ]),
            ..ClientOpts::default()
        },
    );
    assert!(chacha.is_err(), "ChaCha20 is not in the list");
    if require("openssl", "openssl") {
        let out = sh_out(&format!(
            "echo | openssl s_client -connect 127.0.0.1:{port} -tls1_1 -cipher 'ALL:@SECLEVEL=0' 2>&1 || true"
        ));
        assert!(
            out.contains("no peer certificate available") && out.contains("alert"),
            "TLS 1.1 must be refused: {out}"
        );
    }
    drop(shuck);

    // Only a list left empty is an error, naming what it held.
    for (body, needles) in [
        (
            "ciphers = \"AES128-SHA:DHE-RSA-AES256-SHA\"\n",
            &["AES128-SHA:DHE-RSA-AES256-SHA", "selects no cipher suite"][..],
        ),
        (
            "tls-protos = SSLv3 TLSv1.1\n",
            &["SSLv3, TLSv1.1", "insecure"][..],
        ),
        (
            "tls = on\nssl = on\n",
            &["line 2", "ssl after tls (line 1)"][..],
        ),
    ] {
        let bad = dir.path("bad.conf");
        std::fs::write(&bad, body).unwrap();
        let (code, err) = run_to_exit(&["--config", s(&bad), "--test", s(&a)]);
        assert_eq!(code, Some(1), "{body}: {err}");
        for n in needles {
            assert!(err.contains(n), "{body}: {err}");
        }
    }
    // --tls or --ssl on the command line cannot override the file's tls-protos (hitch).
    let protos = dir.path("protos.conf");
    std::fs::write(&protos, "tls-protos = TLSv1.2\n").unwrap();
    let (code, err) = run_to_exit(&["--config", s(&protos), "--tls", "--test", s(&a)]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--tls and --ssl cannot override tls-protos"),
        "{err}"
    );
    let (code, err) = run_to_exit(&["--tls", "--ssl", "--test", s(&a)]);
    assert_eq!(code, Some(1), "{err}");
    // Without a file, --tls stands for TLSv1.0-1.3, of which TLSv1.2 and 1.3 are served.
    let (code, err) = run_to_exit(&["--tls", "--test", s(&a)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("--tls: dropped TLSv1.0, TLSv1.1"), "{err}");
    // hitch offered NPN beside ALPN; shuck says it does not.
    let (code, err) = run_to_exit(&["--alpn-protos", "h2,http/1.1", "--test", s(&a)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("NPN") && err.contains("deliberate difference"),
        "{err}"
    );
}

/// Splits `pem` (chain then key, as rcgen_cert writes it) into a chain file and a key file.
fn split_key(dir: &TempDir, pem: &std::path::Path, name: &str) -> (String, String) {
    let text = std::fs::read_to_string(pem).unwrap();
    let at = text.find("-----BEGIN PRIVATE KEY").unwrap();
    let (crt, key) = (
        dir.path(&format!("{name}.crt")),
        dir.path(&format!("{name}.key")),
    );
    std::fs::write(&crt, &text[..at]).unwrap();
    std::fs::write(&key, &text[at..]).unwrap();
    (s(&crt).to_owned(), s(&key).to_owned())
}

#[test]
fn pem_file_blocks_take_a_key_of_their_own_and_client_verification() {
    let dir = TempDir::new("hitch-pemblock");
    let pki = ClientPki::new();
    let (open_pem, open_der) = rcgen_cert(&dir, "open", &["open.test"], false);
    let (locked_pem, locked_der) = rcgen_cert(&dir, "locked", &["locked.test"], false);
    let (open_crt, open_key) = split_key(&dir, &open_pem, "open");
    let origin = Origin::echo();
    let (port, strict_port) = (free_port(), free_port());
    let conf = dir.path("hitch.conf");
    std::fs::write(
        &conf,
        format!(
            "frontend = \"[127.0.0.1]:{port}\"\n\
             frontend = {{\n host = \"127.0.0.1\"\n port = \"{strict_port}\"\n \
               client-verify = required\n client-verify-ca = \"{ca}\"\n}}\n\
             backend = \"{backend}\"\n\
             pem-file = {{\n cert = \"{locked}\"\n client-verify = required\n client-verify-ca = \"{ca}\"\n}}\n\
             pem-file = {{\n cert = \"{open_crt}\"\n private-key = \"{open_key}\"\n}}\n",
            ca = s(&pki.ca),
            backend = origin.addr(),
            locked = s(&locked_pem),
        ),
    )
    .unwrap();
    let _shuck = Shuck::start_raw(&["--config", s(&conf)], port);
    let opts = |sni: &str, client: Option<&std::path::Path>| ClientOpts {
        sni: Some(sni.into()),
        client_pem: client.map(Into::into),
        ..ClientOpts::default()
    };
    let talk = |port: u16, o: &ClientOpts| -> Result<Vec<u8>, String> {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut c = tls_connect(addr, o).map_err(|e| e.to_string())?;
        // TLS 1.3 reports a refused client certificate on the first read.
        use std::io::{Read, Write};
        c.write_all(b"ping\n").map_err(|e| e.to_string())?;
        let mut buf = [0u8; 5];
        c.read_exact(&mut buf).map_err(|e| e.to_string())?;
        Ok(served_cert(&c))
    };
    // The key in its own file serves; its certificate is the default (listed last).
    assert_eq!(talk(port, &opts("open.test", None)).unwrap(), open_der);
    assert_eq!(talk(port, &opts("nobody.test", None)).unwrap(), open_der);
    // The locked certificate asks for a client certificate from its own CA.
    assert!(talk(port, &opts("locked.test", None)).is_err());
    assert!(talk(port, &opts("locked.test", Some(&pki.mallory))).is_err());
    assert_eq!(
        talk(port, &opts("locked.test", Some(&pki.alice))).unwrap(),
        locked_der
    );
    // The second frontend asks every client for one (frontend block's client-verify).
    assert!(talk(strict_port, &opts("open.test", None)).is_err());
    assert_eq!(
        talk(strict_port, &opts("open.test", Some(&pki.alice))).unwrap(),
        open_der
    );

    // client-verify with no CA anywhere is an error naming the certificate, as in hitch.
    let bad = dir.path("bad.conf");
    std::fs::write(
        &bad,
        format!(
            "pem-file = {{\n cert = \"{}\"\n client-verify = optional\n}}\n",
            s(&locked_pem)
        ),
    )
    .unwrap();
    let (code, err) = run_to_exit(&["--config", s(&bad), "--test"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(s(&locked_pem)) && err.contains("needs a client-verify-ca"),
        "{err}"
    );
    // A key that is not the certificate's names the files.
    let wrong = dir.path("wrong.conf");
    let (_, locked_key) = split_key(&dir, &locked_pem, "locked");
    std::fs::write(
        &wrong,
        format!("pem-file = {{\n cert = \"{open_crt}\"\n private-key = \"{locked_key}\"\n}}\n"),
    )
    .unwrap();
    let (code, err) = run_to_exit(&["--config", s(&wrong), "--test"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("does not match"), "{err}");
}

#[test]
fn the_command_line_adds_to_the_files_frontends_and_certificates() {
    let dir = TempDir::new("hitch-additive");
    let (a, a_der) = rcgen_cert(&dir, "a", &["a.test"], false);
    let (b, b_der) = rcgen_cert(&dir, "b", &["b.test"], false);
    let origin = Origin::echo();
    let (port, extra) = (free_port(), free_port());
    let conf = dir.path("hitch.conf");
    std::fs::write(
        &conf,
        format!(
            "frontend = \"[127.0.0.1]:{port}\"\nbackend = \"{}\"\npem-file = \"{}\"\n",
            origin.addr(),
            s(&a)
        ),
    )
    .unwrap();
    // As in hitch: the file's certificate and frontend stay; the command line's certificate
    // comes last and so is the default; its frontend listens too.
    let fe = format!("[127.0.0.1]:{extra}");
    let shuck = Shuck::start_raw(&["--config", s(&conf), "-f", &fe, s(&b)], port);
    assert_eq!(defaults(shuck.addr()).0, b_der);
    assert_eq!(by_name(shuck.addr(), "a.test"), a_der);
    wait_listening(extra, "the command line's frontend");
    let extra_addr: SocketAddr = format!("127.0.0.1:{extra}").parse().unwrap();
    assert_eq!(by_name(extra_addr, "a.test"), a_der);
}

#[test]
fn test_finds_frontends_on_the_same_address() {
    let dir = TempDir::new("hitch-redundant");
    let (a, _) = rcgen_cert(&dir, "a", &["a.test"], false);
    let p = free_port();
    for (one, two) in [
        (format!("[*]:{p}"), format!("[*]:{p}")),
        (format!("[*]:{p}"), format!("[0.0.0.0]:{p}")),
        (format!("[*]:{p}"), format!("[::]:{p}")),
        (format!("[127.0.0.1]:{p}"), format!("127.0.0.1:{p}")),
        (
            format!("[127.0.0.1]:{p}"),
            format!("[::ffff:127.0.0.1]:{p}"),
        ),
        (format!("[::1]:{p}"), format!("[::1]:{p}")),
    ] {
        let (code, err) = run_to_exit(&["-f", &one, "-f", &two, "--test", s(&a)]);
        assert_eq!(code, Some(1), "{one} {two}: {err}");
        assert!(err.contains("redundant frontend"), "{one} {two}: {err}");
        // The same in a configuration file.
        let conf = dir.path("dup.conf");
        std::fs::write(
            &conf,
            format!(
                "frontend = \"{one}\"\nfrontend = {{\n host = \"{}\"\n port = \"{p}\"\n}}\n",
                two.rsplit_once(':').unwrap().0.trim_matches(['[', ']'])
            ),
        )
        .unwrap();
        let (code, err) = run_to_exit(&["--config", s(&conf), "--test", s(&a)]);
        assert_eq!(code, Some(1), "{one} {two} in a file: {err}");
    }
    // Different ports, or two specific addresses, are fine.
    let q = free_port();
    let (code, err) = run_to_exit(&[
        "-f",
        &format!("[127.0.0.1]:{p}"),
        "-f",
        &format!("[127.0.0.2]:{p}"),
        "-f",
        &format!("[*]:{q}"),
        "--test",
        s(&a),
    ]);
    assert_eq!(code, Some(0), "{err}");
}

/// A network namespace of the test's own, removed however the test ends.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        assert!(require("ip", "iproute2"));
        let name = format!("shuck-{tag}-{}", std::process::id());
        sh(&format!(
            "ip netns add {name} && ip -n {name} link set lo up"
        ));
        Netns(name)
    }

    fn exec(&self, cmd: &str) -> String {
        sh_out(&format!("ip netns exec {} {cmd}", self.0))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "delete", &self.0])
            .status();
    }
}

/// TCPFastOpenPassive of the namespace: connections accepted with data in the SYN.
fn fastopen_passive(ns: &Netns) -> u64 {
    let netstat = ns.exec("cat /proc/net/netstat");
    let rows: Vec<&str> = netstat
        .lines()
        .filter(|l| l.starts_with("TcpExt:"))
        .collect();
    let (names, values) = (rows[0], rows[1]);
    let at = names
        .split_whitespace()
        .position(|n| n == "TCPFastOpenPassive")
        .expect("the kernel counts TCPFastOpenPassive");
    values.split_whitespace().nth(at).unwrap().parse().unwrap()
}

#[test]
fn tcp_fastopen_takes_data_in_the_syn() {
    assert!(require("curl", "curl"));
    // Off (the default, here from the command line), then on from hitch's key.
    for on in [false, true] {
        let ns = Netns::new("tfo");
        // Server side of Fast Open allowed in this namespace only (bit 2), for listeners
        // that ask for it with TCP_FASTOPEN.
        ns.exec("sysctl -qw net.ipv4.tcp_fastopen=3");
        let dir = TempDir::new("hitch-tfo");
        let (a, _) = rcgen_cert(&dir, "a", &["a.test"], false);
        let conf = dir.path("hitch.conf");
        std::fs::write(
            &conf,
            format!(
                "frontend = \"[127.0.0.1]:8443\"\nbackend = \"[127.0.0.1]:9\"\npem-file = \"{}\"\n{}",
                s(&a),
                if on { "tcp-fastopen = on\n" } else { "" }
            ),
        )
        .unwrap();
        let mut args = vec!["--config", s(&conf)];
        if !on {
            args.push("--tcp-fastopen=off");
        }
        let _shuck = Shuck::start_with(&["ip", "netns", "exec", &ns.0], &args, 8443);
        let before = fastopen_passive(&ns);
        // The first connection fetches a cookie, the next ones send their ClientHello in
        // the SYN (the backend refuses: the handshake is what counts).
        for _ in 0..3 {
            ns.exec(
                "curl -sk --max-time 5 --tcp-fastopen https://127.0.0.1:8443/ -o /dev/null || true",
            );
        }
        let after = fastopen_passive(&ns);
        assert_eq!(
            after > before,
            on,
            "tcp-fastopen {on}: TCPFastOpenPassive {before} -> {after}"
        );
    }
}

#[test]
fn backend_refresh_resolves_the_backend_name_again() {
    assert!(require("unshare", "util-linux"));
    let dir = TempDir::new("hitch-refresh");
    let (a, _) = rcgen_cert(&dir, "a", &["a.test"], false);
    let port = free_port();
    // Two backends on one port, told apart by their loopback address and their answer.
    let mut backends = Vec::new();
    for (ip, answer) in [("127.0.0.1", b"one\n"), ("127.0.0.2", b"two\n")] {
        let l = std::net::TcpListener::bind((ip, port)).unwrap();
        backends.push(std::thread::spawn(move || {
            for c in l.incoming().take(4) {
                use std::io::Write;
                let _ = c.and_then(|mut c| c.write_all(answer));
            }
        }));
    }
    // shuck sees its own /etc/hosts (a bind mount in a namespace of its own).
    let hosts = dir.path("hosts");
    std::fs::write(&hosts, "127.0.0.1 origin.shuck.test\n").unwrap();
    let script = format!(
        "mount --bind {} /etc/hosts && exec \"$0\" \"$@\"",
        hosts.display()
    );
    let fe_port = free_port();
    let fe = format!("[127.0.0.1]:{fe_port}");
    let be = format!("origin.shuck.test:{port}");
    let shuck = Shuck::start_with(
        &["unshare", "-m", "sh", "-c", &script],
        &["-f", &fe, "-b", &be, "--backend-refresh", "1", s(&a)],
        fe_port,
    );
    let answer = || {
        use std::io::Read;
        let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
        let mut buf = [0u8; 4];
        c.read_exact(&mut buf).unwrap();
        String::from_utf8_lossy(&buf).into_owned()
    };
    assert_eq!(answer(), "one\n");
    // The name moves (written in place: the bind mount keeps the file).
    std::fs::write(&hosts, "127.0.0.2 origin.shuck.test\n").unwrap();
    assert!(
        shuck.wait_log("resolved again", Duration::from_secs(10)),
        "{}",
        shuck.log()
    );
    assert_eq!(answer(), "two\n");
    // A name that stops resolving keeps the addresses in use.
    std::fs::write(&hosts, "\n").unwrap();
    assert!(
        shuck.wait_log("keeping the addresses in use", Duration::from_secs(10)),
        "{}",
        shuck.log()
    );
    assert_eq!(answer(), "two\n");
    drop(shuck);
    // Let the backend threads end: one connection each past what they served.
    for ip in ["127.0.0.1", "127.0.0.2"] {
        for _ in 0..4 {
            let _ = std::net::TcpStream::connect((ip, port));
        }
    }
    for b in backends {
        b.join().unwrap();
    }
}

#[test]
fn proxy_authority_sends_the_server_name_unless_turned_off() {
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};
    let dir = TempDir::new("hitch-authority");
    let (a, _) = rcgen_cert(&dir, "a", &["a.test"], false);
    let seen: Arc<Mutex<Vec<Option<Vec<u8>>>>> = Arc::default();
    let record = seen.clone();
    let origin = Origin::start(move |mut s| {
        let Some(tlvs) = read_proxy_v2_tlvs(&mut s) else {
            return;
        };
        let authority = tlvs.into_iter().find(|(k, _)| *k == 0x02).map(|(_, v)| v);
        record.lock().unwrap().push(authority);
        let mut buf = [0u8; 64];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 || s.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let sni = ClientOpts {
        sni: Some("a.test".into()),
        ..ClientOpts::default()
    };
    for setting in ["", "proxy-authority = on\n", "proxy-authority = off\n"] {
        let port = free_port();
        let conf = dir.path("hitch.conf");
        std::fs::write(
            &conf,
            format!(
                "frontend = \"[127.0.0.1]:{port}\"\nbackend = \"{}\"\npem-file = \"{}\"\nwrite-proxy-v2 = on\n{setting}",
                origin.addr(),
                s(&a)
            ),
        )
        .unwrap();
        let shuck = Shuck::start_raw(&["--config", s(&conf)], port);
        let mut c = tls_connect(shuck.addr(), &sni).unwrap();
        echo_roundtrip(&mut c);
    }
    let seen = seen.lock().unwrap();
    assert_eq!(
        *seen,
        [Some(b"a.test".to_vec()), Some(b"a.test".to_vec()), None],
        "on by default, as hitch; off leaves the TLV out"
    );
}

#[test]
fn handshake_failures_are_logged_at_info_with_their_reason_and_rate_limited() {
    use std::io::Write;
    assert!(require("openssl", "openssl"));
    let pki = ClientPki::new();
    let dir = TempDir::new("hitch-failures");
    let (a, _) = rcgen_cert(&dir, "a", &["a.test"], false);
    // An X.509 v1 client certificate from the trusted CA (openssl x509 -req adds no
    // extension, so it writes version 1).
    let ca_dir = pki.ca.parent().unwrap().display().to_string();
    let d = dir.0.display().to_string();
    sh(&format!(
        "cd {d} && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout v1.key \
         -out v1.csr -subj /CN=v1 2>/dev/null && openssl x509 -req -in v1.csr -CA {ca_dir}/ca.crt \
         -CAkey {ca_dir}/ca.key -CAcreateserial -days 2 -out v1.crt 2>/dev/null \
         && cat v1.crt v1.key > v1.pem"
    ));
    assert!(sh_out(&format!("openssl x509 -in {d}/v1.crt -noout -text")).contains("Version: 1"));
    let shuck = Shuck::start(&[
        "-b",
        &Origin::echo().addr(),
        "--sni-nomatch-abort",
        "--client-verify",
        "required",
        "--client-verify-ca",
        s(&pki.ca),
        s(&a),
    ]);
    let port = shuck.port;
    let openssl = |opts: &str| {
        sh_out(&format!(
            "echo | timeout 10 openssl s_client -connect 127.0.0.1:{port} {opts} 2>&1 || true"
        ))
    };
    openssl("-tls1_1 -cipher 'ALL:@SECLEVEL=0' -servername a.test");
    openssl("-tls1_2 -cipher AES128-SHA -servername a.test");
    openssl("-servername nobody.test");
    let client = |pem: &std::path::Path| {
        let o = ClientOpts {
            sni: Some("a.test".into()),
            client_pem: Some(pem.into()),
            ..ClientOpts::default()
        };
        if let Ok(mut c) = tls_connect(shuck.addr(), &o) {
            let _ = c.write_all(b"x");
            let _ = read_all(&mut c);
        }
    };
    client(&pki.mallory);
    // rustls will not even present a v1 certificate: openssl does.
    openssl(&format!(
        "-servername a.test -cert {d}/v1.crt -key {d}/v1.key"
    ));
    for (reason, deliberate) in [
        ("protocol version", true),
        ("no shared cipher", true),
        ("unknown server name \"nobody.test\"", false),
        ("client certificate from an unknown CA", false),
        ("client certificate is X.509 v1", true),
    ] {
        assert!(
            shuck.wait_log(reason, Duration::from_secs(5)),
            "{reason}: {}",
            shuck.log()
        );
        let log = shuck.log();
        let line = log.lines().find(|l| l.contains(reason)).unwrap();
        assert!(
            line.contains("INFO") && line.contains("client=127.0.0.1:"),
            "{line}"
        );
        assert_eq!(
            line.contains("a deliberate difference from hitch"),
            deliberate,
            "{line}"
        );
    }

    // A flood of garbage: at most 20 lines a second, and the next line counts the rest.
    let before = shuck.log().matches("handshake failed").count();
    for _ in 0..100 {
        if let Ok(mut c) = std::net::TcpStream::connect(shuck.addr()) {
            let _ = c.write_all(b"GET / HTTP/1.0\r\n\r\n");
            let _ = c.shutdown(std::net::Shutdown::Write);
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut c, &mut sink);
        }
    }
    std::thread::sleep(Duration::from_millis(1100));
    openssl("-servername nobody.test");
    assert!(
        shuck.wait_log("more failures not logged", Duration::from_secs(5)),
        "{}",
        shuck.log()
    );
    let logged = shuck.log().matches("handshake failed").count() - before;
    assert!(logged <= 3 * 20 + 1, "{logged} lines for 101 failures");
}

/// The settings of hitch's and stud's example configurations (hitch 1.0–1.2's
/// `hitch.conf.ex`, 1.3–1.4's `hitch.conf.example`, 1.7's `hitch.conf.man.rst` example, and
/// stud's `--default-config`), key for key, with the switches their comments offer.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "stud --default-config",
        "frontend = \"[*]:8443\"\nbackend = \"[127.0.0.1]:8000\"\npem-file = \"\"\n\
         ciphers = \"\"\nprefer-server-ciphers = off\nssl-engine = \"\"\nworkers = 1\n\
         backlog = 100\nkeepalive = 3600\nshared-cache = 0\nshared-cache-listen = \"\"\n\
         chroot = \"\"\nuser = \"\"\ngroup = \"\"\nquiet = off\nsyslog = off\n\
         syslog-facility = \"daemon\"\ndaemon = off\nwrite-ip = off\nwrite-proxy = off\n",
    ),
    (
        "hitch 1.0 hitch.conf.ex, with its commented tls = on",
        "frontend = \"[*]:8443\"\nbackend = \"[127.0.0.1]:6081\"\npem-file = \"\"\ntls = on\n\
         ciphers = \"\"\nprefer-server-ciphers = off\nssl-engine = \"\"\nworkers = 1\n\
         backlog = 100\nkeepalive = 3600\nchroot = \"\"\nuser = \"\"\ngroup = \"\"\n\
         quiet = off\nsyslog = off\nsyslog-facility = \"daemon\"\ndaemon = off\n\
         write-ip = off\nwrite-proxy-v1 = off\nwrite-proxy-v2 = off\nproxy-proxy = off\n\
         sni-nomatch-abort = off\n",
    ),
    (
        "hitch 1.0 hitch.conf.ex, with its commented ssl = off",
        "frontend = \"[*]:8443\"\nbackend = \"[127.0.0.1]:6081\"\npem-file = \"\"\nssl = off\n\
         ciphers = \"\"\nworkers = 1\n",
    ),
    (
        "hitch 1.2-1.4 hitch.conf.example",
        "frontend = \"[*]:8443\"\nfrontend = {\n    host = \"*\"\n    port = \"443\"\n}\n\
         backend = \"[127.0.0.1]:6081\"\npem-file = \"\"\n\
         ciphers = \"EECDH+AESGCM:EDH+AESGCM:AES256+EECDH:AES256+EDH\"\n\
         prefer-server-ciphers = off\nssl-engine = \"\"\nworkers = 1\nbacklog = 100\n\
         keepalive = 3600\nchroot = \"\"\nuser = \"\"\ngroup = \"\"\nquiet = off\n\
         syslog = off\nsyslog-facility = \"daemon\"\ndaemon = off\nwrite-ip = off\n\
         write-proxy-v1 = off\nwrite-proxy-v2 = off\nproxy-proxy = off\n\
         sni-nomatch-abort = off\n",
    ),
    (
        "hitch 1.7 hitch.conf(5) example (its user and group are nobody here)",
        "frontend = {\n    host = \"*\"\n    port = \"443\"\n}\n\
         backend = \"[127.0.0.1]:6086\"    # 6086 is the default Varnish PROXY port.\n\
         workers = 4                     # number of CPU cores\n\ndaemon = on\n\
         user = \"nobody\"\ngroup = \"nogroup\"\n# alpn-protos = \"h2, http/1.1\"\n\
         write-proxy-v2 = on             # Write PROXY header\n",
    ),
];

#[test]
fn hitch_and_stud_example_configurations_pass_test() {
    let dir = TempDir::new("hitch-examples");
    let conf = dir.path("example.conf");
    // The examples name no usable certificate (stud's has `pem-file = ""`): as with hitch,
    // one is given on the command line.
    let (pem, _) = openssl_cert(&dir, "c", Key::EcP256, &["c.test"]);
    for (name, text) in EXAMPLES {
        std::fs::write(&conf, text).unwrap();
        let (code, err) = run_to_exit(&["--config", s(&conf), "--test", s(&pem)]);
        assert_eq!(code, Some(0), "{name}: {err}");
        let (code, err) = run_to_exit(&["--config", s(&conf), "--test"]);
        if !text
            .lines()
            .any(|l| l.trim_start().starts_with("pem-file = \"/"))
        {
            assert_eq!(code, Some(1), "{name}: {err}");
            assert!(
                err.contains("No x509 certificate PEM file"),
                "{name}: {err}"
            );
        }
    }
}
