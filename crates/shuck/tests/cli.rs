//! Bad input of every kind gives one clear line and exit status 1 (as hitch); the manual's option
//! reference documents every flag.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

/// Runs shuck with `args`, expecting status 1 and a single error line containing `needles`.
fn refuses(args: &[&str], needles: &[&str]) {
    let (code, err) = run_to_exit(args);
    assert_eq!(code, Some(1), "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?}: one line expected, got: {err}");
    assert!(lines[0].starts_with("shuck: error: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: {n:?} missing from: {err}");
    }
}

#[test]
fn bad_flags_and_addresses() {
    refuses(&["--bogus"], &["--bogus"]);
    refuses(&["-f", "1.2.3.4"], &["--frontend", "1.2.3.4"]);
    refuses(&["-f", "[::1:443"], &["--frontend", "]"]);
    refuses(&["-f", "[127.0.0.1]:99999"], &["--frontend", "port"]);
    refuses(&["-b", "[127.0.0.1]"], &["--backend"]);
    refuses(
        &["-b", "[no-such-host.invalid]:80"],
        &["--backend", "resolve"],
    );
    refuses(&["-n", "0"], &["--workers"]);
    refuses(&["-n", "many"], &["many"]);
    refuses(&["--idle-timeout", "soon"], &["soon"]);
    refuses(&["--sni-nomatch-abort=perhaps"], &["perhaps"]);
}

#[test]
fn bad_replication_settings_are_named() {
    let dir = TempDir::new("psk");
    let key = dir.path("psk");
    std::fs::write(&key, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n").unwrap();
    let short = dir.path("short");
    std::fs::write(&short, "AAECAw==\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let k = key.to_str().unwrap();
    refuses(
        &["-U", "[127.0.0.1]:9999"],
        &["--shared-cache-key", "unsealed"],
    );
    refuses(
        &["-P", "[127.0.0.1]:9999"],
        &["--shared-cache-peer", "--shared-cache-listen"],
    );
    refuses(
        &[
            "-U",
            "[127.0.0.1]:9999",
            "--shared-cache-key",
            short.to_str().unwrap(),
        ],
        &["--shared-cache-key", "4 bytes", "urandom"],
    );
    refuses(
        &[
            "-U",
            "[127.0.0.1]:9999",
            "--shared-cache-key",
            "/nonexistent/psk",
        ],
        &["/nonexistent/psk"],
    );
    refuses(
        &[
            "-U",
            "[127.0.0.1]:9999",
            "-P",
            "[239.1.2.3]:9999",
            "--shared-cache-key",
            k,
        ],
        &["--shared-cache-listen", "239.1.2.3", "[*]:PORT"],
    );
    refuses(
        &["-U", "[*]:9999", "-P", "[*]:9999", "--shared-cache-key", k],
        &["--shared-cache-peer", "not *"],
    );
    refuses(
        &[
            "-U",
            "[*]:9999",
            "-P",
            "[239.1.2.3]:9999",
            "-M",
            "lo,999",
            "--shared-cache-key",
            k,
        ],
        &["--shared-cache-if", "TTL"],
    );
    refuses(
        &[
            "-U",
            "[*]:9999",
            "-P",
            "[239.1.2.3]:9999",
            "-M",
            "nosuchif0",
            "--shared-cache-key",
            k,
        ],
        &["--shared-cache-if nosuchif0", "no such interface"],
    );
    refuses(
        &[
            "-U",
            "[*]:9999",
            "--shared-cache-key",
            k,
            "--shared-cache-window",
            "0",
        ],
        &["--shared-cache-window"],
    );
    // A UDP port already taken.
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let u = format!("[127.0.0.1]:{}", taken.local_addr().unwrap().port());
    refuses(
        &["-U", &u, "--shared-cache-key", k],
        &["--shared-cache-listen", "bind"],
    );
}

#[test]
fn bad_tls_names_list_the_valid_ones() {
    refuses(
        &["--tls-protos", "TLSv1.1"],
        &["TLSv1.1", "TLSv1.2, TLSv1.3"],
    );
    refuses(&["--tls-protos", "SSLv9"], &["SSLv9", "TLSv1.2, TLSv1.3"]);
    // A list is refused only when nothing in it is served (names are dropped otherwise,
    // as OpenSSL does: tests/hitch_compat.rs).
    refuses(
        &["-c", "RC4-MD5X"],
        &["RC4-MD5X", "ECDHE-RSA-AES128-GCM-SHA256"],
    );
    refuses(
        &["-c", "DHE-RSA-AES128-GCM-SHA256"],
        &["DHE-RSA-AES128-GCM-SHA256", "valid"],
    );
    refuses(
        &["--ciphersuites", "TLS_AES_128_CCM_8_SHA256"],
        &["TLS_AES_128_CCM_8_SHA256", "TLS_AES_128_GCM_SHA256"],
    );
    refuses(
        &["--ecdh-curve", "brainpoolP256r1"],
        &["brainpoolP256r1", "X25519"],
    );
    refuses(&["--alpn-protos", ","], &["--alpn-protos"]);
}

#[test]
fn bad_pem_files_are_named() {
    let dir = TempDir::new("badpem");
    let missing = dir.path("missing.pem");
    refuses(&[missing.to_str().unwrap()], &["missing.pem"]);

    let (good, _) = rcgen_cert(&dir, "good", &["localhost"], false);
    let (other, _) = rcgen_cert(&dir, "other", &["localhost"], false);
    let text = std::fs::read_to_string(&good).unwrap();
    let other_text = std::fs::read_to_string(&other).unwrap();
    let cert_only = &text[..text.find("-----BEGIN PRIVATE KEY").unwrap()];
    let key_only = &text[text.find("-----BEGIN PRIVATE KEY").unwrap()..];
    let other_key = &other_text[other_text.find("-----BEGIN PRIVATE KEY").unwrap()..];

    let p = dir.path("nokey.pem");
    std::fs::write(&p, cert_only).unwrap();
    refuses(&[p.to_str().unwrap()], &["nokey.pem", "no private key"]);

    let p = dir.path("nocert.pem");
    std::fs::write(&p, key_only).unwrap();
    refuses(&[p.to_str().unwrap()], &["nocert.pem", "no certificate"]);

    let p = dir.path("mismatch.pem");
    std::fs::write(&p, format!("{cert_only}{other_key}")).unwrap();
    // Private, as a key file should be: the key-mode warning is not this test's subject.
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    refuses(&[p.to_str().unwrap()], &["mismatch.pem", "does not match"]);

    let p = dir.path("garbage.pem");
    std::fs::write(
        &p,
        "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    refuses(&[p.to_str().unwrap()], &["garbage.pem"]);

    let p = dir.path("empty.pem");
    std::fs::write(&p, "").unwrap();
    refuses(&[p.to_str().unwrap()], &["empty.pem"]);

    let unreadable = dir.path("a-directory.pem");
    std::fs::create_dir(&unreadable).unwrap();
    refuses(&[unreadable.to_str().unwrap()], &["a-directory.pem"]);

    if require("openssl", "openssl") {
        let p = dir.path("enc.pem");
        sh(&format!(
            "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -aes256 -pass pass:x -out {k} && cat {c} >> {k} && mv {k} {p}",
            k = dir.path("enc.key").display(),
            c = dir.path("good.pem").display(),
            p = p.display()
        ));
        refuses(&[p.to_str().unwrap()], &["enc.pem", "encrypted"]);
    }

    let empty_dir = dir.path("emptydir");
    std::fs::create_dir(&empty_dir).unwrap();
    refuses(
        &["--pem-dir", empty_dir.to_str().unwrap()],
        &["--pem-dir", "emptydir"],
    );
}

#[test]
fn a_taken_port_is_named() {
    let held = fresh_listener();
    let port = held.local_addr().unwrap().port();
    let fe = format!("[127.0.0.1]:{port}");
    refuses(&["-f", &fe], &[&fe, "already in use"]);

    // Another shuck holds it with SO_REUSEPORT: still refused, not silently shared.
    drop(held);
    let first = Shuck::start_raw(&["-f", &fe, "-n", "1"], port);
    refuses(&["-f", &fe], &[&fe, "already in use"]);
    drop(first);
}

#[test]
fn an_expired_certificate_is_a_warning_not_an_error() {
    let dir = TempDir::new("expired");
    let (pem, der) = rcgen_cert(&dir, "old", &["localhost"], true);
    let shuck = Shuck::start(&["-n", "1", pem.to_str().unwrap()]);
    assert!(
        shuck.log().contains("WARN") && shuck.log().contains("expired"),
        "{}",
        shuck.log()
    );
    let c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    assert_eq!(served_cert(&c), der);
}

#[test]
fn pem_dir_loads_every_pem_file() {
    let dir = TempDir::new("pemdir");
    let (_, a) = rcgen_cert(&dir, "a", &["a.example"], false);
    let (_, b) = rcgen_cert(&dir, "b", &["b.example"], false);
    std::fs::write(dir.path("notes.txt"), "not a pem").unwrap();
    let shuck = Shuck::start(&["-n", "1", "--pem-dir", dir.0.to_str().unwrap()]);
    let sni = |n: &str| ClientOpts {
        sni: Some(n.into()),
        ..Default::default()
    };
    assert_eq!(
        served_cert(&tls_connect(shuck.addr(), &sni("a.example")).unwrap()),
        a
    );
    assert_eq!(
        served_cert(&tls_connect(shuck.addr(), &sni("b.example")).unwrap()),
        b
    );
}

#[test]
fn help_and_version_exit_zero() {
    let (code, _) = run_to_exit(&["--help"]);
    assert_eq!(code, Some(0));
    let (code, _) = run_to_exit(&["--version"]);
    assert_eq!(code, Some(0));
}

#[test]
fn version_says_what_a_bug_report_needs() {
    let out = std::process::Command::new(BIN)
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let lock =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock")).unwrap();
    let locked = |name: &str| {
        let entry = format!("name = \"{name}\"\nversion = \"");
        let at = lock.find(&entry).unwrap() + entry.len();
        lock[at..].split('"').next().unwrap().to_owned()
    };
    assert!(
        text.starts_with(&format!("shuck {}\n", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    for (name, v) in [
        ("rustls", locked("rustls")),
        ("aws-lc-rs", locked("aws-lc-rs")),
        ("aws-lc-sys", locked("aws-lc-sys")),
    ] {
        assert!(text.contains(&format!("{name} {v}")), "{name} {v}: {text}");
    }
    // The commit it was built from: this checkout's HEAD ("unknown" in a tree without git).
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    assert!(
        text.contains(&format!("commit {head}, built ")),
        "{head}: {text}"
    );
    // Built on a date written YYYY-MM-DD.
    let date = text.split("built ").nth(1).unwrap().lines().next().unwrap();
    let parts: Vec<&str> = date.split('-').collect();
    assert!(
        parts.len() == 3 && parts.iter().all(|p| p.parse::<u32>().is_ok()),
        "{date}"
    );
    // -V is the version alone, as hitch -V.
    let short = std::process::Command::new(BIN).arg("-V").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&short.stdout),
        format!("shuck {}\n", env!("CARGO_PKG_VERSION"))
    );
}

/// The manual's option reference (generated by `cargo run -p xtask -- book`) names every flag
/// `--help` lists, aliases included (not the other tools' flags its text quotes, such as
/// curl's).
#[test]
fn the_option_reference_documents_every_flag() {
    let out = std::process::Command::new(BIN)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let reference = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/manual/src/options.md"
    ))
    .unwrap();
    // An option's own line starts with its flags; an alias is given as `[alias: --x]`.
    let listing = help.lines().filter(|l| {
        let l = l.trim_start();
        l.starts_with('-') || l.starts_with("[alias")
    });
    let mut flags: Vec<&str> = listing
        .flat_map(|l| {
            l.split(|c: char| {
                c.is_whitespace() || c == ',' || c == '[' || c == ']' || c == '=' || c == '<'
            })
        })
        .map(|w| w.trim_end_matches(['.', ')', ':']))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .collect();
    flags.sort();
    flags.dedup();
    assert!(flags.len() > 20, "{flags:?}");
    for f in flags {
        assert!(
            reference.contains(&format!("`{f}")),
            "docs/manual/src/options.md lacks {f}: run cargo run -p xtask -- book"
        );
    }
}
