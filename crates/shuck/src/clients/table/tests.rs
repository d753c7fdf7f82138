//! The client table's unit tests.

use super::*;
use crate::clients::addr::Folding;

fn key(s: &str) -> Key {
    Folding::default().key(s.parse().unwrap())
}

#[test]
fn a_client_in_debt_outlives_a_spray_of_new_ones() {
    // Issue 60, point 5: a spray pushed out a client that had spent its burst, and it
    // came back with a fresh one.
    let t = Table::new(512);
    let rate: Rate = "1/m,burst=3".parse().unwrap();
    let limits = Limits {
        request_rate: Some(rate),
        ..Limits::default()
    };
    t.set_scope(0, limits);
    let v = key("192.0.2.1");
    for _ in 0..3 {
        t.request(v, 0, &rate).unwrap();
    }
    assert!(t.request(v, 0, &rate).is_err());
    // Three seconds on, its activity has halved to nothing; it still owes minutes.
    std::thread::sleep(std::time::Duration::from_millis(3100));
    for i in 0..20_000u32 {
        let k = Key(u128::from(i) + (1 << 64));
        let _ = t.request(k, 0, &rate);
    }
    assert!(t.evictions() > 10_000);
    assert!(t.request(v, 0, &rate).is_err(), "still in debt");
}

#[test]
fn counts_connections_to_the_limit() {
    let t = Table::new(1024);
    let l = Limits {
        max_conns: 2,
        ..Limits::default()
    };
    let a = t.open(key("10.0.0.1"), 0, &l).unwrap();
    let _b = t.open(key("10.0.0.1"), 0, &l).unwrap();
    let r = t.open(key("10.0.0.1"), 0, &l).unwrap_err();
    assert_eq!(
        r,
        Refusal {
            over: Over::Conns,
            first: true
        }
    );
    assert!(!t.open(key("10.0.0.1"), 0, &l).unwrap_err().first);
    // Another client, and the same one in another scope, have their own.
    t.open(key("10.0.0.2"), 0, &l).unwrap();
    t.open(key("10.0.0.1"), 3, &l).unwrap();
    t.close(a);
    t.open(key("10.0.0.1"), 0, &l).unwrap();
    assert_eq!(t.len(), 3);
    let top = t.top(1);
    assert_eq!(top[0].key, key("10.0.0.1"));
    assert_eq!((top[0].conns, top[0].refused), (2, 2));
}

#[test]
fn a_spray_keeps_the_heavy_hitter() {
    let t = Table::new(512);
    let l = Limits {
        max_conns: 1000,
        ..Limits::default()
    };
    let heavy = key("192.0.2.1");
    let mut kept = Vec::new();
    for i in 0..200u32 {
        kept.push(t.open(heavy, 0, &l).unwrap());
        t.close(kept.pop().unwrap());
        let _ = i;
    }
    let held = t.open(heavy, 0, &l).unwrap();
    for i in 0..200_000u32 {
        let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
        let s = t.open(Folding::default().key(ip.into()), 0, &l).unwrap();
        t.close(s);
    }
    assert!(t.len() as usize <= t.capacity());
    assert!(t.evictions() > 150_000);
    let top = t.top(1);
    assert_eq!(top[0].key, heavy, "the heavy hitter was pushed out");
    assert_eq!(top[0].conns, 1);
    t.close(held);
    assert_eq!(t.top(1)[0].conns, 0);
}

#[test]
fn top_keeps_the_most_active_in_order() {
    let t = Table::new(1024);
    let l = Limits {
        max_conns: 100,
        ..Limits::default()
    };
    for (ip, n) in [
        ("10.0.0.1", 3),
        ("10.0.0.2", 9),
        ("10.0.0.3", 1),
        ("10.0.0.4", 5),
    ] {
        for _ in 0..n {
            let s = t.open(key(ip), 0, &l).unwrap();
            t.close(s);
        }
    }
    let top: Vec<Key> = t.top(2).iter().map(|r| r.key).collect();
    assert_eq!(top, [key("10.0.0.2"), key("10.0.0.4")]);
    assert_eq!(t.top(10).len(), 4);
    assert!(t.top(0).is_empty());
}

#[test]
fn rates_refuse_with_a_retry_time() {
    let t = Table::new(64);
    let l = Limits {
        conn_rate: Some("2/s".parse().unwrap()),
        ..Limits::default()
    };
    let k = key("2001:db8::1");
    t.open(k, 0, &l).unwrap();
    t.open(key("2001:db8::2"), 0, &l).unwrap();
    match t.open(key("2001:db8::3"), 0, &l) {
        Err(Refusal {
            over: Over::ConnRate(ms),
            first: true,
        }) => assert!(ms <= 500, "{ms}"),
        other => panic!("{other:?}"),
    }
    let rate: Rate = "1/s".parse().unwrap();
    t.request(k, 0, &rate).unwrap();
    assert!(matches!(
        t.request(k, 0, &rate),
        Err(Refusal {
            over: Over::RequestRate(_),
            ..
        })
    ));
    t.charge(
        k,
        0,
        &Limits { max_conns: 1, ..l },
        Remote {
            conns: 1,
            conn_events: 0,
            requests: 0,
        },
    );
    let three = Limits {
        max_conns: 3,
        ..Limits::default()
    };
    assert_eq!(t.open(k, 0, &three).unwrap_err().over, Over::Conns);
}
