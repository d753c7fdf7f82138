//! Several backends: weighted round robin, maxconn with a FIFO queue and its timeout, and a
//! server dying mid-run without losing a client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// An origin that reads one line (the client's number), holds the connection `hold`, then
/// answers "done N" and closes. It records the order in which it accepted clients.
fn slow_origin(hold: Duration) -> (Origin, Arc<Mutex<Vec<u32>>>) {
    let order = Arc::new(Mutex::new(Vec::new()));
    let o2 = order.clone();
    let o = Origin::start(move |mut s| {
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).unwrap_or(0);
        let id: u32 = String::from_utf8_lossy(&buf[..n])
            .trim()
            .parse()
            .unwrap_or(u32::MAX);
        o2.lock().unwrap().push(id);
        thread::sleep(hold);
        let _ = s.write_all(format!("done {id}").as_bytes());
    });
    (o, order)
}

/// Starts `n` clients 100 ms apart, each sending its number; returns what each got and
/// when it ended, relative to its start.
fn clients(addr: std::net::SocketAddr, n: u32) -> Vec<(u32, String, Duration)> {
    let handles: Vec<_> = (0..n)
        .map(|i| {
            thread::sleep(Duration::from_millis(100));
            thread::spawn(move || {
                let start = Instant::now();
                let mut c = tls_connect(addr, &ClientOpts::default()).unwrap();
                c.sock
                    .set_read_timeout(Some(Duration::from_secs(30)))
                    .unwrap();
                c.write_all(format!("{i}\n").as_bytes()).unwrap();
                let got = read_all(&mut c)
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default();
                (i, got, start.elapsed())
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn maxconn_queues_clients_in_arrival_order_instead_of_refusing() {
    let (o, order) = slow_origin(Duration::from_secs(1));
    let shuck = Shuck::start(&[
        "-n",
        "2",
        "-b",
        &format!("{},maxconn=2", o.addr()),
        "--queue-timeout",
        "30",
    ]);
    let results = clients(shuck.addr(), 10);
    for (i, got, _) in &results {
        assert_eq!(got, &format!("done {i}"), "client {i} was not served");
    }
    assert_eq!(
        *order.lock().unwrap(),
        (0..10).collect::<Vec<_>>(),
        "not served in arrival order"
    );
    // Two at a time for one second each: the last waited about four seconds.
    assert!(
        results[9].2 >= Duration::from_millis(3500),
        "{:?}",
        results[9].2
    );
}

#[test]
fn the_queue_timeout_closes_late_clients_and_http_mode_says_503() {
    let (o, _order) = slow_origin(Duration::from_secs(3));
    let shuck = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &format!("{},maxconn=2", o.addr()),
        "--queue-timeout",
        "1",
    ]);
    let results = clients(shuck.addr(), 4);
    for (i, got, took) in &results {
        if *i < 2 {
            assert_eq!(got, &format!("done {i}"));
        } else {
            assert_eq!(got, "", "client {i} should have been closed");
            assert!(
                *took >= Duration::from_millis(800) && *took < Duration::from_millis(2500),
                "client {i}: {took:?}"
            );
        }
    }

    let shuck = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &format!("{},maxconn=1", o.addr()),
        "--queue-timeout",
        "1",
        "--http",
    ]);
    let _busy = thread::spawn({
        let addr = shuck.addr();
        move || {
            let mut c = tls_connect(addr, &ClientOpts::default()).unwrap();
            let _ = c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
            let _ = read_all(&mut c);
        }
    });
    thread::sleep(Duration::from_millis(300));
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let got = String::from_utf8_lossy(&read_all(&mut c).unwrap_or_default()).into_owned();
    assert!(
        got.starts_with("HTTP/1.1 503 Service Unavailable"),
        "{got:?}"
    );
}

#[test]
fn one_dead_server_of_three_loses_no_client() {
    let origins: Vec<StoppableOrigin> = (0..3).map(|_| StoppableOrigin::echo()).collect();
    let mut args = vec![
        "-n".to_string(),
        "2".into(),
        "--backend-retry-after".into(),
        "30".into(),
    ];
    for o in &origins {
        args.push("-b".into());
        args.push(o.port_spec.clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut shuck = Shuck::start(&args);
    let cfg = client_config(&ClientOpts::default());
    for i in 0..1000 {
        if i == 300 {
            origins[1].stop();
        }
        let mut c = connect_with(shuck.addr(), &cfg, None)
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        echo_roundtrip(&mut c);
    }
    let served: Vec<usize> = origins
        .iter()
        .map(|o| o.accepted.load(std::sync::atomic::Ordering::SeqCst))
        .collect();
    assert!(served[0] > 300 && served[2] > 300, "{served:?}");
    assert!(
        served[1] >= 90 && served[1] <= 110,
        "round robin before the failure: {served:?}"
    );
    shuck.signal("TERM");
    shuck.wait_exit(Duration::from_secs(10)).unwrap();
    let log = shuck.log();
    let summary = log.lines().find(|l| l.contains("stopped;")).unwrap();
    assert!(
        summary.contains(&format!(
            "backend {} active=0 queued=0 queue_timeouts=0 connect_failures=1 marked_down=1",
            origins[1].port_spec
        )) || summary.contains(&format!(
            "backend {} active=0 queued=0 queue_timeouts=0 connect_failures=2 marked_down=2",
            origins[1].port_spec
        )),
        "{summary}"
    );
    assert!(log.contains("marked down"), "{log}");
}

#[test]
fn weights_share_connections() {
    let a = StoppableOrigin::echo();
    let b = StoppableOrigin::echo();
    let shuck = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &format!("{},weight=3", a.port_spec),
        "-b",
        &b.port_spec,
    ]);
    let cfg = client_config(&ClientOpts::default());
    for _ in 0..40 {
        echo_roundtrip(&mut connect_with(shuck.addr(), &cfg, None).unwrap());
    }
    let (na, nb) = (
        a.accepted.load(std::sync::atomic::Ordering::SeqCst),
        b.accepted.load(std::sync::atomic::Ordering::SeqCst),
    );
    assert_eq!((na, nb), (30, 10));
}

#[test]
fn bad_backend_parameters_are_refused() {
    for (arg, needle) in [
        ("[127.0.0.1]:80,maxconn=0", "maxconn"),
        ("[127.0.0.1]:80,weight=x", "weight"),
        ("[127.0.0.1]:80,speed=2", "speed"),
    ] {
        let (code, err) = run_to_exit(&["-b", arg]);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains(needle) && err.contains("--backend"), "{err}");
    }
}
