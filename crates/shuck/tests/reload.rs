//! SIGHUP reloads the configuration and every certificate: new connections get the new
//! state, live ones are not cut, a bad reload keeps the old state, frontends open and close.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// Replaces `path` atomically (a reload never reads half a file).
fn swap_in(path: &Path, content: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn reloads(shuck: &Shuck) -> usize {
    shuck
        .log()
        .matches("SIGHUP: configuration reloaded")
        .count()
}

fn reload_and_wait(shuck: &Shuck, expect: &str) {
    let before = shuck.log().matches(expect).count();
    shuck.signal("HUP");
    assert!(
        wait_until(Duration::from_secs(10), || shuck
            .log()
            .matches(expect)
            .count()
            > before),
        "no {expect:?} after SIGHUP: {}",
        shuck.log()
    );
}

#[test]
fn twenty_certificate_swaps_under_load_lose_nothing() {
    let dir = TempDir::new("reload");
    let (a_path, a_der) = openssl_cert(&dir, "a", Key::EcP256, &["localhost"]);
    let (b_path, b_der) = openssl_cert(&dir, "b", Key::EcP256, &["localhost"]);
    let (a_pem, b_pem) = (
        std::fs::read(&a_path).unwrap(),
        std::fs::read(&b_path).unwrap(),
    );
    let site = dir.path("site.pem");
    std::fs::write(&site, &a_pem).unwrap();
    let origin = Origin::echo();
    let shuck = Shuck::start(&["-n", "2", "-b", &origin.addr(), site.to_str().unwrap()]);
    let addr = shuck.addr();

    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let round_trips = Arc::new(AtomicUsize::new(0));
    // 50 busy connections, each echoing as fast as it can until told to stop.
    let mut busy = Vec::new();
    for i in 0..50 {
        let (stop, failures, trips) = (stop.clone(), failures.clone(), round_trips.clone());
        busy.push(thread::spawn(move || {
            let mut c = match tls_connect(addr, &ClientOpts::default()) {
                Ok(c) => c,
                Err(e) => {
                    return failures
                        .lock()
                        .unwrap()
                        .push(format!("busy {i} connect: {e}"))
                }
            };
            let msg = format!("conn {i:02} says hello\n");
            let mut buf = vec![0u8; msg.len()];
            let deadline = Instant::now() + Duration::from_secs(120);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let r = c
                    .write_all(msg.as_bytes())
                    .and_then(|()| c.read_exact(&mut buf));
                if let Err(e) = r {
                    return failures.lock().unwrap().push(format!("busy {i}: {e}"));
                }
                assert_eq!(buf, msg.as_bytes());
                trips.fetch_add(1, Ordering::Relaxed);
                thread::sleep(Duration::from_millis(5));
            }
        }));
    }
    // New connections all the time, each recording the certificate it saw.
    let seen = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
    let churn = {
        let (stop, failures, seen) = (stop.clone(), failures.clone(), seen.clone());
        thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                n += 1;
                match tls_connect(addr, &ClientOpts::default()) {
                    Ok(mut c) => {
                        echo_roundtrip(&mut c);
                        seen.lock().unwrap().push(served_cert(&c));
                    }
                    Err(e) => failures
                        .lock()
                        .unwrap()
                        .push(format!("new connection {n}: {e}")),
                }
            }
            n
        })
    };

    for i in 0..20 {
        let (pem, der) = if i % 2 == 0 {
            (&b_pem, &b_der)
        } else {
            (&a_pem, &a_der)
        };
        swap_in(&site, pem);
        reload_and_wait(&shuck, "SIGHUP: configuration reloaded");
        // A connection made now sees the new certificate.
        let c = tls_connect(addr, &ClientOpts::default()).unwrap();
        assert_eq!(
            &served_cert(&c),
            der,
            "reload {i}: old certificate still served"
        );
        thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for t in busy {
        t.join().unwrap();
    }
    let made = churn.join().unwrap();
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} failures: {failures:?}",
        failures.len()
    );
    assert_eq!(reloads(&shuck), 20);
    let seen = seen.lock().unwrap();
    assert!(made > 20 && seen.contains(&a_der) && seen.contains(&b_der));
    assert!(
        round_trips.load(Ordering::Relaxed) > 50 * 10,
        "the busy connections did not work"
    );
}

#[test]
fn a_bad_reload_keeps_the_running_state() {
    let dir = TempDir::new("reload");
    let (a_path, a_der) = openssl_cert(&dir, "a", Key::EcP256, &["localhost"]);
    let site = dir.path("site.pem");
    std::fs::copy(&a_path, &site).unwrap();
    let origin = Origin::echo();
    let shuck = Shuck::start(&["-b", &origin.addr(), site.to_str().unwrap()]);
    let mut live = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    // A certificate without its key.
    let cert_only: String = String::from_utf8(std::fs::read(&a_path).unwrap())
        .unwrap()
        .split("-----BEGIN PRIVATE KEY-----")
        .next()
        .unwrap()
        .to_owned();
    swap_in(&site, cert_only.as_bytes());
    reload_and_wait(&shuck, "configuration refused");
    assert!(shuck.log().contains("no private key"), "{}", shuck.log());
    let c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    assert_eq!(served_cert(&c), a_der);
    echo_roundtrip(&mut live);
}

#[test]
fn frontends_are_opened_and_closed_by_a_reload() {
    let dir = TempDir::new("reload");
    let origin = Origin::echo();
    let (p1, p2) = (free_port(), free_port());
    let conf = dir.path("shuck.conf");
    let (pem, _) = openssl_cert(&dir, "c", Key::EcP256, &["c.test"]);
    let write = |ports: &[u16]| {
        let mut text = format!(
            "backend = \"{}\"\npem-file = \"{}\"\n",
            origin.addr(),
            pem.display()
        );
        for p in ports {
            text.push_str(&format!("frontend = \"[127.0.0.1]:{p}\"\n"));
        }
        swap_in(&conf, text.as_bytes());
    };
    write(&[p1]);
    let shuck = Shuck::start_raw(&["--config", conf.to_str().unwrap(), "-n", "2"], p1);
    let a1 = SocketAddr::from(([127, 0, 0, 1], p1));
    let a2 = SocketAddr::from(([127, 0, 0, 1], p2));
    let mut on_p1 = tls_connect(a1, &ClientOpts::default()).unwrap();
    assert!(!listening(p2), "nothing listens on {p2} before the reload");

    write(&[p1, p2]);
    reload_and_wait(&shuck, "SIGHUP: configuration reloaded");
    assert!(
        shuck.log().contains(&format!("opened [127.0.0.1]:{p2}")),
        "{}",
        shuck.log()
    );
    assert!(listening(p2));
    echo_roundtrip(&mut tls_connect(a2, &ClientOpts::default()).unwrap());

    write(&[p2]);
    reload_and_wait(&shuck, "SIGHUP: configuration reloaded");
    assert!(
        shuck.log().contains(&format!("closed [127.0.0.1]:{p1}")),
        "{}",
        shuck.log()
    );
    assert!(
        wait_until(Duration::from_secs(5), || !listening(p1)),
        "the removed frontend still accepts"
    );
    // Its live connection goes on; the other frontend serves.
    echo_roundtrip(&mut on_p1);
    echo_roundtrip(&mut tls_connect(a2, &ClientOpts::default()).unwrap());

    // A change that needs a restart is named, and the rest still applies.
    let text = format!(
        "backend = \"{}\"\npem-file = \"{}\"\nfrontend = \"[127.0.0.1]:{p2}\"\nbacklog = 5\n",
        origin.addr(),
        pem.display()
    );
    swap_in(&conf, text.as_bytes());
    reload_and_wait(&shuck, "SIGHUP: configuration reloaded");
    assert!(
        shuck.log().contains("backlog changed; restart shuck"),
        "{}",
        shuck.log()
    );
}
