//! Replication between hosts at the library level, over real UDP sockets on 127.0.0.1:
//! sessions and keys travel, a restarted host catches up, and datagrams that are replayed,
//! altered, sealed with another key, stale, from the future, oversized or from oneself are
//! dropped and counted without touching the cache.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{SocketAddr, UdpSocket};
use std::num::NonZeroUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustls::server::{ProducesTickets, StoresServerSessions};
use shuck::session::sync::datagram::{Header, Sealer};
use shuck::session::sync::wire::{self, Reject};
use shuck::session::sync::{Replication, Settings};
use shuck::session::tickets::TicketKeys;
use shuck::session::SessionCache;

const KEY: [u8; 32] = *b"0123456789abcdef0123456789abcdef";

fn free_udp() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

struct Host {
    cache: Arc<SessionCache>,
    tickets: Arc<TicketKeys>,
    sync: Replication,
}

fn host(listen: SocketAddr, peers: &[SocketAddr]) -> Host {
    let cache = Arc::new(SessionCache::new(
        NonZeroUsize::new(1000).unwrap(),
        Duration::from_secs(300),
    ));
    let tickets = Arc::new(
        TicketKeys::rotating(Duration::from_secs(3600), Duration::from_secs(300)).unwrap(),
    );
    let sync = Replication::start(
        &Settings {
            listen,
            peers: peers.to_vec(),
            iface: None,
            key: KEY,
            window: Duration::from_secs(5),
        },
        Some(cache.clone()),
        Some(tickets.clone()),
    )
    .unwrap();
    Host {
        cache,
        tickets,
        sync,
    }
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

fn sid(i: u8) -> Vec<u8> {
    vec![i; 32]
}

#[test]
fn sessions_deletions_and_keys_reach_the_peer() {
    let (a_addr, b_addr) = (free_udp(), free_udp());
    let a = host(a_addr, &[b_addr]);
    let b = host(b_addr, &[a_addr]);
    // Let the start-up exchange end first: A's Request may reach B (if B was bound in time)
    // and B then answers with a dump of its cache, which would count as B sending sessions.
    eventually("B's Request reaches A", || {
        a.sync.stats.requests.load(Relaxed) == 1
    });
    thread::sleep(Duration::from_millis(200));
    let b_dumped = b.sync.stats.sent_new.load(Relaxed);
    assert_eq!(b_dumped, 0, "B had no sessions to dump");

    assert!(a.cache.put(sid(1), b"session one".to_vec()));
    eventually("New reaches B", || b.cache.get(&sid(1)).is_some());
    assert_eq!(b.cache.get(&sid(1)).unwrap(), b"session one");
    // B does not echo it back as its own.
    thread::sleep(Duration::from_millis(100));
    assert_eq!(b.sync.stats.sent_new.load(Relaxed), 0);

    // A single-use ticket used on B is gone on A too.
    assert!(b.cache.take(&sid(1)).is_some());
    eventually("Del reaches A", || {
        a.sync.stats.received_del.load(Relaxed) == 1
    });
    assert!(a.cache.get(&sid(1)).is_none());

    // A ticket issued by A resumes on B: the keys were exchanged at start.
    eventually("keys reach B", || {
        b.sync.stats.received_keys.load(Relaxed) >= 2
    });
    let ticket = a.tickets.encrypt(b"ticket state").unwrap();
    assert_eq!(b.tickets.decrypt(&ticket).unwrap(), b"ticket state");
    assert_eq!(
        b.sync
            .stats
            .dropped
            .iter()
            .map(|d| d.load(Relaxed))
            .sum::<u64>(),
        0
    );
}

#[test]
fn a_host_that_starts_late_gets_the_sessions_and_keys_it_missed() {
    let (a_addr, c_addr) = (free_udp(), free_udp());
    let a = host(a_addr, &[c_addr]);
    for i in 0..200u8 {
        a.cache.put(sid(i), vec![i; 300]);
    }
    let ticket = a.tickets.encrypt(b"before").unwrap();
    // A's own New records went out (to nobody) before C binds, so only the dump can fill C.
    eventually("A sends its sessions", || {
        a.sync.stats.sent_new.load(Relaxed) == 200
    });
    // C comes up afterwards (a restart: a new process, a new sender id) and asks.
    let c = host(c_addr, &[a_addr]);
    eventually("dump reaches C", || c.cache.stats().entries == 200);
    assert_eq!(c.cache.get(&sid(77)).unwrap(), vec![77; 300]);
    eventually("keys reach C", || c.tickets.decrypt(&ticket).is_some());
    assert_eq!(a.sync.stats.requests.load(Relaxed), 1);
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn bad_datagrams_are_dropped_counted_and_change_nothing() {
    // A sends to B and to a tap (a wire capture).
    let (a_addr, b_addr) = (free_udp(), free_udp());
    let tap = UdpSocket::bind("127.0.0.1:0").unwrap();
    tap.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let a = host(a_addr, &[b_addr, tap.local_addr().unwrap()]);
    let b = host(b_addr, &[]);
    let mut buf = [0u8; 65536];
    // Skip A's start-up datagrams (request and keys) on the tap.
    thread::sleep(Duration::from_millis(200));
    tap.set_nonblocking(true).unwrap();
    while tap.recv_from(&mut buf).is_ok() {}
    tap.set_nonblocking(false).unwrap();

    a.cache.put(sid(9), b"the session".to_vec());
    let (n, _) = tap.recv_from(&mut buf).unwrap();
    let captured = buf[..n].to_vec();
    eventually("B stores it", || b.cache.get(&sid(9)).is_some());
    // B has it; now remove it locally so any accepted replay would show.
    assert!(b.cache.remove_replicated(&sid(9)));
    let before = b.cache.stats().entries;
    let stats = &b.sync.stats;
    let dropped = |r: Reject| stats.dropped(r);
    let accepted = stats.received.load(Relaxed);

    let send = |d: &[u8]| {
        tap.send_to(d, b_addr).unwrap();
    };
    // 1. The captured datagram, replayed.
    send(&captured);
    eventually("replay counted", || dropped(Reject::Replay) == 1);
    // 2. One bit altered (in the ciphertext).
    let mut altered = captured.clone();
    let last = altered.len() - 20;
    altered[last] ^= 0x04;
    send(&altered);
    eventually("altered counted", || dropped(Reject::Forged) == 1);
    // 3. Sealed with another key: a well-formed New for a new session.
    let mut records = Vec::new();
    wire::push_new(&mut records, &sid(10), 0, b"forged session").unwrap();
    let header = |seq, ts| Header {
        sender: [0x55; 8],
        timestamp: ts,
        sequence: seq,
    };
    let mut d = Vec::new();
    Sealer::new(&[7; 32])
        .unwrap()
        .seal(&header(1, now_ms()), &records, &mut d)
        .unwrap();
    send(&d);
    eventually("wrong key counted", || dropped(Reject::Forged) == 2);
    // 4. The right key but stale, or from the future.
    let right = Sealer::new(&KEY).unwrap();
    right
        .seal(&header(2, now_ms() - 60_000), &records, &mut d)
        .unwrap();
    send(&d);
    eventually("stale counted", || dropped(Reject::Stale) == 1);
    right
        .seal(&header(3, now_ms() + 60_000), &records, &mut d)
        .unwrap();
    send(&d);
    eventually("future counted", || dropped(Reject::Future) == 1);
    // 5. Claiming to be B itself; oversized; garbage; an unknown version.
    right
        .seal(
            &Header {
                sender: b.sync.id,
                timestamp: now_ms(),
                sequence: 4,
            },
            &records,
            &mut d,
        )
        .unwrap();
    send(&d);
    eventually("self counted", || dropped(Reject::Own) == 1);
    send(&vec![1u8; wire::MAX_DATAGRAM + 1]);
    eventually("oversized counted", || dropped(Reject::Oversized) == 1);
    send(b"junk");
    eventually("malformed counted", || dropped(Reject::Malformed) == 1);
    let mut v2 = captured.clone();
    v2[0] = 2;
    send(&v2);
    eventually("version counted", || dropped(Reject::Version) == 1);

    // Nothing of it reached the cache, and nothing was accepted.
    assert_eq!(stats.received.load(Relaxed), accepted);
    assert_eq!(b.cache.stats().entries, before);
    assert!(b.cache.get(&sid(9)).is_none());
    assert!(b.cache.get(&sid(10)).is_none());

    // The same key and a fresh header still get through: the checks are not just closed.
    right.seal(&header(5, now_ms()), &records, &mut d).unwrap();
    send(&d);
    eventually("a good datagram is accepted", || {
        b.cache.get(&sid(10)).is_some()
    });
}
