//! Session resumption end to end: one cache for all workers, stateless tickets under a
//! rotating key ring, key files shared between processes, bounds and expiry.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// The four ways to resume, as (name, shuck flags, client options).
fn modes() -> Vec<(&'static str, Vec<&'static str>, ClientOpts)> {
    let v12 = ClientOpts {
        version: Some(12),
        ..Default::default()
    };
    let v13 = ClientOpts {
        version: Some(13),
        ..Default::default()
    };
    vec![
        (
            "TLS 1.2 session ID",
            vec![],
            ClientOpts {
                session_id_only: true,
                ..v12.clone()
            },
        ),
        ("TLS 1.2 ticket", vec![], v12),
        ("TLS 1.3 stateful", vec!["--no-tickets"], v13.clone()),
        ("TLS 1.3 stateless", vec![], v13),
    ]
}

/// Stops shuck and returns its final counters line.
fn final_summary(mut shuck: Shuck) -> String {
    shuck.signal("TERM");
    shuck.wait_exit(Duration::from_secs(10)).expect("no exit");
    let log = shuck.log();
    log.lines()
        .find(|l| l.contains("stopped;"))
        .unwrap_or_else(|| panic!("{log}"))
        .to_owned()
}

/// The number after `key=` in a summary line.
fn count(summary: &str, section: &str, key: &str) -> u64 {
    let rest = &summary[summary
        .find(section)
        .unwrap_or_else(|| panic!("{section}: {summary}"))..];
    let at = rest
        .find(&format!(" {key}="))
        .unwrap_or_else(|| panic!("{key}: {summary}"));
    rest[at + key.len() + 2..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn every_mode_resumes_across_two_workers() {
    let origin = Origin::echo();
    for (name, flags, opts) in modes() {
        let mut args = vec!["-n", "2", "-b", &origin.port_spec, "--log-connections"];
        args.extend(flags.iter());
        let shuck = Shuck::start(&args);
        let cfg = client_config(&opts);
        let mut first = connect_with(shuck.addr(), &cfg, None).unwrap();
        assert!(!resumed(&first), "{name}: first handshake cannot resume");
        echo_roundtrip(&mut first);
        drop(first);
        for i in 0..200 {
            let mut c = connect_with(shuck.addr(), &cfg, None).unwrap();
            assert!(resumed(&c), "{name}: connection {i} did not resume");
            echo_roundtrip(&mut c);
        }
        thread::sleep(Duration::from_millis(300));
        let log = shuck.log();
        for w in ["worker=0", "worker=1"] {
            assert!(
                log.lines()
                    .any(|l| l.contains(w) && l.contains("handshake=\"resumed\"")),
                "{name}: no resumed handshake on {w}"
            );
        }
        let summary = final_summary(shuck);
        assert_eq!(
            count(&summary, "handshakes", "resumed"),
            200,
            "{name}: {summary}"
        );
        assert_eq!(
            count(&summary, "handshakes", "full"),
            1,
            "{name}: {summary}"
        );
        match name {
            "TLS 1.2 session ID" | "TLS 1.3 stateful" => {
                assert!(
                    count(&summary, "session cache", "hits") >= 200,
                    "{name}: {summary}"
                )
            }
            _ => assert!(
                count(&summary, "tickets", "resumed") >= 200,
                "{name}: {summary}"
            ),
        }
    }
}

#[test]
fn openssl_s_client_reuses_sessions() {
    if !require("openssl", "openssl") {
        return;
    }
    let origin = Origin::echo();
    let dir = TempDir::new("sclient");
    for (name, flags, client) in [
        ("TLS 1.2 session ID", vec![], "-tls1_2 -no_ticket"),
        ("TLS 1.2 ticket", vec![], "-tls1_2"),
        ("TLS 1.3 stateful", vec!["--no-tickets"], "-tls1_3"),
        ("TLS 1.3 stateless", vec![], "-tls1_3"),
    ] {
        let mut args = vec!["-n", "2", "-b", &origin.port_spec];
        args.extend(flags.iter());
        let shuck = Shuck::start(&args);
        let sess = dir.path("sess.pem");
        let base = format!(
            "openssl s_client -connect 127.0.0.1:{} {client}",
            shuck.port
        );
        // Staying connected a moment lets TLS 1.3 tickets arrive before the file is written.
        let out = sh_out(&format!(
            "(printf 'hi\\n'; sleep 0.5) | {base} -sess_out {}",
            sess.display()
        ));
        assert!(out.contains("New,"), "{name}: {out}");
        for _ in 0..3 {
            let out = sh_out(&format!(
                "(printf 'hi\\n'; sleep 0.3) | {base} -sess_in {} -sess_out {}",
                sess.display(),
                sess.display()
            ));
            assert!(out.contains("Reused,"), "{name}: {out}");
        }
    }
}

#[test]
fn the_cache_stays_within_its_bound() {
    let origin = Origin::echo();
    let shuck = Shuck::start(&[
        "-n",
        "2",
        "-b",
        &origin.port_spec,
        "-C",
        "100",
        "--no-tickets",
    ]);
    let oldest = client_config(&ClientOpts {
        version: Some(12),
        session_id_only: true,
        ..Default::default()
    });
    connect_with(shuck.addr(), &oldest, None).unwrap();
    assert!(
        resumed(&connect_with(shuck.addr(), &oldest, None).unwrap()),
        "control: resumes while cached"
    );

    // 10,000 distinct sessions, from 4 client threads; none of them resumes.
    let addr = shuck.addr();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            thread::spawn(move || {
                let fresh = client_config(&ClientOpts {
                    version: Some(12),
                    no_resumption: true,
                    ..Default::default()
                });
                for _ in 0..2_500 {
                    connect_with(addr, &fresh, None).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(
        !resumed(&connect_with(shuck.addr(), &oldest, None).unwrap()),
        "evicted session resumed"
    );
    let newest = client_config(&ClientOpts {
        version: Some(12),
        session_id_only: true,
        ..Default::default()
    });
    connect_with(shuck.addr(), &newest, None).unwrap();
    assert!(resumed(&connect_with(shuck.addr(), &newest, None).unwrap()));

    let summary = final_summary(shuck);
    assert!(
        count(&summary, "session cache", "entries") <= 100,
        "{summary}"
    );
    assert!(
        count(&summary, "session cache", "stores") >= 10_000,
        "{summary}"
    );
    assert!(
        count(&summary, "session cache", "evictions") >= 9_900,
        "{summary}"
    );
}

#[test]
fn sessions_expire_after_the_session_timeout() {
    let origin = Origin::echo();
    for (name, flags, opts) in modes() {
        let mut args = vec!["-n", "1", "-b", &origin.port_spec, "--session-timeout", "1"];
        args.extend(flags.iter());
        let shuck = Shuck::start(&args);
        let cfg = client_config(&opts);
        let mut c = connect_with(shuck.addr(), &cfg, None).unwrap();
        echo_roundtrip(&mut c);
        let mut c = connect_with(shuck.addr(), &cfg, None).unwrap();
        assert!(resumed(&c), "{name}: control: a fresh session resumes");
        echo_roundtrip(&mut c);
        thread::sleep(Duration::from_millis(2000));
        let c = connect_with(shuck.addr(), &cfg, None).unwrap();
        assert!(
            !resumed(&c),
            "{name}: a 2 s old session resumed with --session-timeout 1"
        );
    }
}

#[test]
fn a_ticket_outlives_one_rotation_but_not_its_key() {
    let origin = Origin::echo();
    let shuck = Shuck::start(&["-n", "1", "-b", &origin.port_spec, "--ticket-rotate", "3"]);
    let t0 = Instant::now();
    let opts = ClientOpts {
        version: Some(13),
        ..Default::default()
    };
    let ticket_now = || {
        let cfg = client_config(&opts);
        let mut c = connect_with(shuck.addr(), &cfg, None).unwrap();
        echo_roundtrip(&mut c);
        cfg
    };
    let probe = |cfg| resumed(&connect_with(shuck.addr(), cfg, None).unwrap());
    let at = |secs: f64| {
        let due = t0 + Duration::from_secs_f64(secs);
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            thread::sleep(d);
        }
    };
    // Tickets under the first key K (made at start, retired 6 s later).
    let x = ticket_now();
    let y = ticket_now();
    assert!(t0.elapsed() < Duration::from_secs(1));
    at(3.3);
    let z = ticket_now(); // issued under K2: the rotation has happened
    at(3.6);
    assert!(probe(&x), "a ticket under K must resume after one rotation");
    at(6.6);
    assert!(
        !probe(&y),
        "a ticket under K must not resume once K has aged out"
    );
    assert!(probe(&z), "a ticket under K2 still resumes");
}

fn key_file(dir: &TempDir, name: &str, lines: &[String]) -> String {
    let p = dir.path(name);
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p.to_str().unwrap().to_owned()
}

fn random_key() -> String {
    sh_out("openssl rand 80 | openssl base64 -A")
        .trim()
        .to_owned()
}

#[test]
fn processes_sharing_a_key_file_resume_each_others_tickets() {
    if !require("openssl", "openssl") {
        return;
    }
    let dir = TempDir::new("ticketkeys");
    let origin = Origin::echo();
    let shared = key_file(
        &dir,
        "shared.keys",
        &[random_key(), random_key(), random_key()],
    );
    let other = key_file(&dir, "other.keys", &[random_key()]);
    let a = Shuck::start(&["-n", "1", "-b", &origin.port_spec, "--ticket-keys", &shared]);
    let b = Shuck::start(&["-n", "1", "-b", &origin.port_spec, "--ticket-keys", &shared]);
    let c = Shuck::start(&["-n", "1", "-b", &origin.port_spec, "--ticket-keys", &other]);
    for v in [12, 13] {
        let opts = ClientOpts {
            version: Some(v),
            ..Default::default()
        };
        let from_a = || {
            let cfg = client_config(&opts);
            let mut conn = connect_with(a.addr(), &cfg, None).unwrap();
            echo_roundtrip(&mut conn);
            cfg
        };
        assert!(
            resumed(&connect_with(b.addr(), &from_a(), None).unwrap()),
            "TLS1.{v}: B did not resume A's ticket"
        );
        assert!(
            !resumed(&connect_with(c.addr(), &from_a(), None).unwrap()),
            "TLS1.{v}: C resumed a ticket it has no key for"
        );
    }

    // A malformed file on SIGHUP is refused with its line; the keys in use stay.
    let opts = ClientOpts {
        version: Some(13),
        ..Default::default()
    };
    let before = client_config(&opts);
    echo_roundtrip(&mut connect_with(a.addr(), &before, None).unwrap());
    std::fs::write(&shared, format!("{}\nthis is not base64\n", random_key())).unwrap();
    a.signal("HUP");
    assert!(a.wait_log("line 2", Duration::from_secs(5)), "{}", a.log());
    assert!(
        resumed(&connect_with(a.addr(), &before, None).unwrap()),
        "old keys dropped by a bad reload"
    );
    // A good file replaces them: old tickets no longer resume.
    key_file(&dir, "shared.keys", &[random_key()]);
    a.signal("HUP");
    assert!(
        a.wait_log("1 ticket key(s) reloaded", Duration::from_secs(5)),
        "{}",
        a.log()
    );
    assert!(
        !resumed(&connect_with(a.addr(), &before, None).unwrap()),
        "retired key still decrypts"
    );
}

#[test]
fn a_malformed_key_file_is_refused_with_its_line() {
    let dir = TempDir::new("badkeys");
    use base64::Engine;
    let good = base64::engine::general_purpose::STANDARD.encode([1u8; 80]);
    let bad = key_file(
        &dir,
        "bad.keys",
        &["# keys".into(), good, "c2hvcnQ=".into()],
    );
    let (code, err) = run_to_exit(&["--ticket-keys", &bad]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("bad.keys") && err.contains("line 3") && err.contains("48 or 80"),
        "{err}"
    );
    let missing = dir.path("missing.keys");
    let (code, err) = run_to_exit(&["--ticket-keys", missing.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("missing.keys"), "{err}");
}
