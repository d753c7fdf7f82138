//! The key ring's unit tests: rotation, replication of timer keys, followers, key files.

use super::*;
use base64::Engine;

const HOUR: Duration = Duration::from_secs(3600);

#[test]
fn roundtrip_and_forgery() {
    let t = TicketKeys::rotating(HOUR, HOUR).unwrap();
    let now = unix_ms();
    let ticket = t.seal(b"session state", now).unwrap();
    assert_eq!(t.open(&ticket, now + 1000).unwrap(), b"session state");
    for i in [
        0,
        NAME_LEN,
        HEADER_LEN,
        HEADER_LEN + NONCE_LEN,
        ticket.len() - 1,
    ] {
        let mut forged = ticket.clone();
        forged[i] ^= 1;
        assert!(
            t.open(&forged, now).is_none(),
            "byte {i} flipped still opens"
        );
    }
    assert!(t.open(&ticket[..20], now).is_none());
    assert!(t.open(&[], now).is_none());
    let other = TicketKeys::rotating(HOUR, HOUR).unwrap();
    assert!(other.open(&ticket, now).is_none());
}

#[test]
fn rotation_keeps_the_previous_key_until_it_ages_out() {
    let period = Duration::from_secs(10);
    let t = TicketKeys::rotating(period, HOUR).unwrap();
    let t0 = unix_ms();
    let k_ticket = t.seal(b"k", t0).unwrap();
    // One period later: a new key encrypts, the old one still decrypts.
    let t1 = t0 + 10_500;
    let new_ticket = t.seal(b"k2", t1).unwrap();
    assert_ne!(
        k_ticket[..NAME_LEN],
        new_ticket[..NAME_LEN],
        "no rotation happened"
    );
    assert_eq!(t.open(&k_ticket, t1).unwrap(), b"k");
    // Two periods after K was made, it is retired.
    assert!(t.open(&k_ticket, t0 + 20_500).is_none());
    assert_eq!(t.open(&new_ticket, t0 + 20_500).unwrap(), b"k2");
    // After a long pause the ring holds no retired key: the current and the next.
    t.seal(b"k3", t0 + 100_000).unwrap();
    assert_eq!(t.ring.load().keys.len(), 2);
    assert_eq!(t.lifetime(), 20);
}

#[test]
fn the_next_key_is_exported_a_period_before_it_encrypts() {
    let period = Duration::from_secs(10);
    let a = TicketKeys::rotating(period, HOUR).unwrap();
    let b = TicketKeys::rotating(period, HOUR).unwrap();
    let t0 = unix_ms();
    let changes = Arc::new(AtomicU64::new(0));
    let seen = changes.clone();
    a.set_on_change(Box::new(move || {
        seen.fetch_add(1, Ordering::Relaxed);
    }));
    // B learns A's keys (current and next) once, before A rotates.
    let exported = a.export();
    assert_eq!(exported.len(), 2);
    assert_eq!(b.merge_at(&exported, t0), 2);
    assert_eq!(b.merge_at(&exported, t0), 0, "merging twice adds nothing");
    let before = a.seal(b"before", t0).unwrap();
    let after = a.seal(b"after", t0 + 10_500).unwrap();
    assert_eq!(changes.load(Ordering::Relaxed), 1);
    assert_ne!(before[..NAME_LEN], after[..NAME_LEN]);
    // Both decrypt on B without another exchange; B never encrypts with A's keys.
    assert_eq!(b.open(&before, t0 + 10_600).unwrap(), b"before");
    assert_eq!(b.open(&after, t0 + 10_600).unwrap(), b"after");
    let own = b.seal(b"b", t0 + 1).unwrap();
    assert!(exported.iter().all(|k| k.name[..] != own[..NAME_LEN]));
    // Received keys retire as their sender said.
    assert!(b.open(&before, t0 + 20_500).is_none());
}

#[test]
fn received_keys_are_bounded_and_files_win() {
    let t = TicketKeys::rotating(HOUR, HOUR).unwrap();
    let now = unix_ms();
    let many: Vec<SharedKey> = (0..200u64)
        .map(|i| SharedKey {
            name: [(i % 256) as u8; NAME_LEN],
            secret: [1; 32],
            retire_at: now + 1000 + i,
        })
        .chain([SharedKey {
            name: [0xee; NAME_LEN],
            secret: [1; 32],
            retire_at: now - 1,
        }])
        .collect();
    t.merge_at(&many, now);
    let ring = t.ring.load();
    assert_eq!(ring.keys.len(), MAX_KEYS);
    assert!(
        ring.keys.iter().all(|k| k.name != [0xee; NAME_LEN]),
        "retired key kept"
    );
    assert!(!ring.keys[ring.current].foreign && !ring.keys[1].foreign);
    drop(ring);
    let p = write("wins", &format!("{}\n", b64(&[1u8; 80])));
    let f = TicketKeys::from_file(&p, HOUR).unwrap();
    assert_eq!(f.merge_at(&many, now), 0);
    assert!(f.export().is_empty());
    let _ = std::fs::remove_file(p);
}

#[test]
fn a_follower_encrypts_with_the_installed_ring_and_never_rotates_alone() {
    let period = Duration::from_secs(10);
    let master = TicketKeys::rotating(period, HOUR).unwrap();
    let worker = TicketKeys::rotating(period, HOUR).unwrap();
    worker.follow();
    worker.install(&master.state().unwrap());
    let t0 = unix_ms();
    let ticket = worker.seal(b"w", t0).unwrap();
    assert_eq!(master.open(&ticket, t0).unwrap(), b"w");
    // Past the period the follower still encrypts with the installed key.
    let later = worker.seal(b"w2", t0 + 11_000).unwrap();
    assert_eq!(later[..NAME_LEN], ticket[..NAME_LEN]);
    // The master rotates; once installed, the worker encrypts with the new key and
    // still opens tickets made before.
    master.rotate_due(t0 + 11_000);
    worker.install(&master.state().unwrap());
    let after = worker.seal(b"w3", t0 + 11_000).unwrap();
    assert_ne!(after[..NAME_LEN], ticket[..NAME_LEN]);
    assert_eq!(master.open(&after, t0 + 11_000).unwrap(), b"w3");
    assert_eq!(worker.open(&ticket, t0 + 11_000).unwrap(), b"w");
    assert!(worker.state().is_some());
}

#[test]
fn session_lifetime_bounds_tickets() {
    let t = TicketKeys::rotating(HOUR, Duration::from_secs(5)).unwrap();
    let now = unix_ms();
    let ticket = t.seal(b"s", now).unwrap();
    assert!(t.open(&ticket, now + 4_000).is_some());
    assert!(t.open(&ticket, now + 5_000).is_none());
    assert!(
        t.open(&ticket, now - CLOCK_SKEW_MS - 1).is_none(),
        "from the future"
    );
    assert_eq!(t.lifetime(), 5);
}

fn write(name: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("shuck-keys-{}-{name}", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn key_file_second_to_last_encrypts_and_all_decrypt() {
    let k1 = b64(&[1u8; 80]);
    let k2 = b64(&[2u8; 80]);
    let k3 = b64(&[3u8; 80]);
    let p = write("three", &format!("# comment\n{k1}\n\n{k2}\n{k3}\n"));
    let t = TicketKeys::from_file(&p, HOUR).unwrap();
    let now = unix_ms();
    let ticket = t.seal(b"x", now).unwrap();
    assert_eq!(&ticket[..NAME_LEN], &[2u8; 16]);
    // A host with only the old and new keys still reads tickets of each.
    let p1 = write("one", &format!("{k1}\n"));
    let only1 = TicketKeys::from_file(&p1, HOUR).unwrap();
    assert!(t.open(&only1.seal(b"y", now).unwrap(), now).is_some());
    let p48 = write("48", &format!("{}\n", b64(&[9u8; 48])));
    assert!(TicketKeys::from_file(&p48, HOUR).is_ok());
    for p in [p, p1, p48] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn bad_key_files_name_the_line() {
    let good = b64(&[1u8; 80]);
    for (text, line, needle) in [
        (format!("{good}\nnot base64!\n"), Some(2), "base64"),
        (format!("{good}\n{}\n", b64(&[1u8; 47])), Some(2), "47"),
        (format!("{good}\n{}\n", b64(&[1u8; 48])), Some(2), "mix"),
        ("# only a comment\n".to_string(), None, "no key"),
    ] {
        let p = write("bad", &text);
        let e = TicketKeys::from_file(&p, HOUR).unwrap_err();
        let msg = e.to_string();
        match e {
            TicketError::BadKeyFile { line: l, .. } => assert_eq!(l, line, "{msg}"),
            other => panic!("{other}"),
        }
        assert!(msg.contains(needle), "{msg}");
        let _ = std::fs::remove_file(p);
    }
}
