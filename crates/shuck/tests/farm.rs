//! A farm on a real network: three hosts, each a Linux network namespace joined to a bridge
//! by a veth pair, each running shuck with replication on (or with a shared redis-server on
//! the bridge instead, `--shared-store`), behind HAProxy in TCP mode
//! (round robin). A client making 300 connections through HAProxy, reusing its sessions,
//! must resume at least 99 % of them, for TLS 1.2 session IDs, TLS 1.3 stateful tickets (the
//! cache) and TLS 1.3 stateless tickets, with unicast and with multicast, while one host is
//! killed a third of the way through and restarted two thirds of the way: no connection
//! fails, and the restarted host resumes sessions made before it came back.
//!
//! ACME across the farm: pebble (Debian's ACME test server) validates through HAProxy, so
//! its connection lands on any host; each certificate is ordered once and served by all
//! three, also when its orderer dies in the middle of the order.
//!
//! Needs root (network namespaces) and HAProxy (installed with apt-get when missing); says
//! SKIP otherwise. Every namespace, link and process is removed at the end, also on failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use common::netns::{key_file, Farm, HOSTS};
use common::*;

const CONNECTIONS: usize = 300;
const TLS_PORT: u16 = 8443;
const SYNC_PORT: u16 = 8888;
/// Pause between a client's connections. Replication is asynchronous by design (a
/// handshake never waits for it): a session made on one host reaches the others a fraction
/// of a millisecond later on an idle network, but a client that reconnects to another host
/// faster than that, on a loaded 2-core machine running nine shucks and HAProxy, can miss
/// it. Real clients do not reconnect within a millisecond; 10 ms keeps the test about
/// replication, not about the scheduler.
const THINK: Duration = Duration::from_millis(10);

/// The farms run one at a time: each is three shucks and HAProxy on a 2-core machine.
static ONE_FARM_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// HAProxy in the root namespace, TCP mode, round robin over the hosts; a connection to a
/// dead host is retried on another.
struct Balancer {
    child: Child,
    port: u16,
    _dir: TempDir,
}

impl Balancer {
    fn start(farm: &Farm) -> Balancer {
        let dir = TempDir::new("haproxy");
        let port = free_port();
        let mut cfg = format!(
            "global\n  maxconn 2000\ndefaults\n  mode tcp\n  timeout connect 1s\n  timeout client 10s\n  timeout server 10s\n  retries 3\n  option redispatch 1\nlisten farm\n  bind 127.0.0.1:{port}\n  balance roundrobin\n"
        );
        for i in 1..=HOSTS {
            cfg.push_str(&format!(
                "  server h{i} {}:{TLS_PORT} check inter 200ms fall 1 rise 2\n",
                farm.ip(i)
            ));
        }
        let path = dir.path("haproxy.cfg");
        std::fs::write(&path, cfg).unwrap();
        let child = Command::new("haproxy")
            .args(["-db", "-f"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_listening(port, "haproxy");
        Balancer {
            child,
            port,
            _dir: dir,
        }
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Tls12SessionIds,
    Tls13Cache,
    Tls13Tickets,
}

#[derive(Clone, Copy, Debug)]
enum Transport {
    Unicast,
    Multicast,
    MulticastV6,
    /// No replication: a redis-server on the bridge (`--shared-store`).
    Redis,
}

fn start_host(
    farm: &Farm,
    i: usize,
    mode: Mode,
    transport: Transport,
    key: &str,
    store: Option<&Redis>,
) -> Shuck {
    let ns = farm.ns(i);
    let fe = format!("[{}]:{TLS_PORT}", farm.ip(i));
    let mut args: Vec<String> = vec![
        "-f".into(),
        fe,
        "-n".into(),
        "1".into(),
        "--shared-cache-key".into(),
        key.into(),
    ];
    if let Some(redis) = store {
        args.extend(["--shared-store".into(), redis.url()]);
    } else {
        args.extend(["-U".into(), format!("[*]:{SYNC_PORT}")]);
    }
    match transport {
        Transport::Redis => {}
        Transport::Unicast => {
            for j in (1..=HOSTS).filter(|&j| j != i) {
                args.extend(["-P".into(), format!("[{}]:{SYNC_PORT}", farm.ip(j))]);
            }
        }
        Transport::Multicast => {
            args.extend([
                "-P".into(),
                format!("[239.77.{}.1]:{SYNC_PORT}", farm.net),
                "-M".into(),
                "eth0,1".into(),
            ]);
        }
        Transport::MulticastV6 => {
            args.extend([
                "-P".into(),
                format!("[ff15::77:{}]:{SYNC_PORT}", farm.net),
                "-M".into(),
                "eth0".into(),
            ]);
        }
    }
    if matches!(mode, Mode::Tls12SessionIds | Mode::Tls13Cache) {
        args.push("--no-tickets".into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Shuck::start_with(&["ip", "netns", "exec", &ns], &args, TLS_PORT)
}

/// One request through the balancer; returns whether the handshake resumed.
fn one_request(
    addr: SocketAddr,
    cfg: &std::sync::Arc<rustls::ClientConfig>,
) -> Result<bool, String> {
    let mut c = connect_with(addr, cfg, None).map_err(|e| format!("handshake: {e}"))?;
    c.write_all(b"GET / HTTP/1.1\r\nhost: farm\r\nconnection: close\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut resp = Vec::new();
    // The origin closes after the response; rustls reports a missing close_notify as an
    // error, which is the origin's doing, not a failure of the proxy.
    let _ = c.read_to_end(&mut resp);
    if !resp.starts_with(b"HTTP/1.1 200") {
        return Err(format!(
            "bad response: {:?}",
            String::from_utf8_lossy(&resp[..resp.len().min(80)])
        ));
    }
    Ok(resumed(&c))
}

fn run_farm(mode: Mode, transport: Transport) {
    if !require("haproxy", "haproxy") {
        return;
    }
    let _one = ONE_FARM_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(farm) = Farm::create() else { return };
    let dir = TempDir::new("farm");
    let key = key_file(&dir);
    let redis = match transport {
        Transport::Redis => match Redis::start(&farm.bridge_ip(), &[]) {
            Some(r) => Some(r),
            None => return,
        },
        _ => None,
    };
    let mut hosts: Vec<Shuck> = (1..=HOSTS)
        .map(|i| start_host(&farm, i, mode, transport, &key, redis.as_ref()))
        .collect();
    let lb = Balancer::start(&farm);
    // Let the health checks see every host up.
    thread::sleep(Duration::from_millis(800));

    let opts = ClientOpts {
        version: Some(match mode {
            Mode::Tls12SessionIds => 12,
            _ => 13,
        }),
        session_id_only: matches!(mode, Mode::Tls12SessionIds),
        ..ClientOpts::default()
    };
    let cfg = client_config(&opts);
    let mut resumed_count = 0;
    let mut failures = Vec::new();
    for n in 0..CONNECTIONS {
        if n == CONNECTIONS / 3 {
            // Kill host 2 outright: no drain, no goodbye.
            hosts[1].signal("KILL");
            hosts[1].wait_exit(Duration::from_secs(5)).unwrap();
        }
        if n == 2 * CONNECTIONS / 3 {
            hosts[1] = start_host(&farm, 2, mode, transport, &key, redis.as_ref());
            // Back in the balancer after two good checks.
            thread::sleep(Duration::from_millis(1000));
        }
        thread::sleep(THINK);
        match one_request(lb.addr(), &cfg) {
            Ok(true) => resumed_count += 1,
            Ok(false) => {}
            Err(e) => failures.push(format!("connection {n}: {e}")),
        }
    }
    let logs: Vec<String> = hosts
        .iter_mut()
        .map(|h| {
            h.signal("TERM");
            h.wait_exit(Duration::from_secs(10));
            h.log()
        })
        .collect();
    let summary = |log: &str| {
        log.lines()
            .rev()
            .find(|l| l.contains("stopped;"))
            .unwrap_or("")
            .to_owned()
    };
    eprintln!(
        "{mode:?} over {transport:?}: {resumed_count}/{CONNECTIONS} resumed, {} failed",
        failures.len()
    );
    for (i, l) in logs.iter().enumerate() {
        eprintln!("host {}: {}", i + 1, summary(l));
    }
    assert!(failures.is_empty(), "failed connections: {failures:?}");
    assert!(
        resumed_count * 100 >= CONNECTIONS * 99,
        "{mode:?} over {transport:?}: only {resumed_count} of {CONNECTIONS} resumed; logs: {logs:#?}"
    );
    // The restarted host served resumptions: of sessions made before it came back, since
    // the client only ever got full handshakes (new sessions) at the very start.
    let restarted = summary(&logs[1]);
    let resumed_there: u64 = restarted
        .split_whitespace()
        .find_map(|w| w.strip_prefix("resumed="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(
        resumed_there > 0,
        "the restarted host resumed nothing: {restarted}"
    );
    for l in &logs {
        assert!(!l.contains("panicked"), "{l}");
    }
}

#[test]
fn farm_unicast_resumes_anywhere() {
    for mode in [Mode::Tls12SessionIds, Mode::Tls13Cache, Mode::Tls13Tickets] {
        run_farm(mode, Transport::Unicast);
    }
}

#[test]
fn farm_multicast_resumes_anywhere() {
    for mode in [Mode::Tls12SessionIds, Mode::Tls13Cache, Mode::Tls13Tickets] {
        run_farm(mode, Transport::Multicast);
    }
}

/// The same farm with no replication at all: sessions and the ticket ring in Redis.
#[test]
fn farm_through_redis_resumes_anywhere() {
    for mode in [Mode::Tls12SessionIds, Mode::Tls13Cache, Mode::Tls13Tickets] {
        run_farm(mode, Transport::Redis);
    }
}

#[test]
fn farm_ipv6_multicast_resumes_anywhere() {
    run_farm(Mode::Tls13Tickets, Transport::MulticastV6);
}

// ---------------------------------------------------------------- ACME across the farm

/// A farm host with ACME for `name`, its state in `dir`, replication by unicast.
fn start_acme_host(
    farm: &Farm,
    i: usize,
    key: &str,
    pebble: &common::pebble::Pebble,
    dir: &TempDir,
    name: &str,
) -> Shuck {
    let ns = farm.ns(i);
    let fe = format!("[{}]:{TLS_PORT}", farm.ip(i));
    let state = dir.path(&format!("state{i}"));
    let directory = pebble.directory();
    let ca = pebble.https_ca();
    let mut args: Vec<String> = vec![
        "-f".into(),
        fe,
        "-n".into(),
        "1".into(),
        "-b".into(),
        "[127.0.0.1]:9".into(),
        "--shared-cache-key".into(),
        key.into(),
        "-U".into(),
        format!("[*]:{SYNC_PORT}"),
        "--acme-directory".into(),
        directory,
        "--acme-agree-tos".into(),
        "--acme-state".into(),
        state.to_str().unwrap().into(),
        "--acme-ca-file".into(),
        ca.to_str().unwrap().into(),
        "--acme-domain".into(),
        name.into(),
    ];
    for j in (1..=HOSTS).filter(|&j| j != i) {
        args.extend(["-P".into(), format!("[{}]:{SYNC_PORT}", farm.ip(j))]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Shuck::start_with(&["ip", "netns", "exec", &ns], &args, TLS_PORT)
}

/// The serial of the certificate `host` serves for `name`, when it verifies against
/// `root`.
fn farm_serial(host: &str, name: &str, root: &std::path::Path) -> Option<String> {
    let out = sh_out(&format!(
        "echo | timeout 10 openssl s_client -connect {host} -servername {name} -CAfile {} -verify_hostname {name} 2>&1",
        root.display()
    ));
    if !out.contains("Verify return code: 0 (ok)") {
        return None;
    }
    let serial = sh_out(&format!(
        "echo | timeout 10 openssl s_client -connect {host} -servername {name} 2>/dev/null | openssl x509 -noout -serial"
    ));
    Some(serial.trim().to_owned())
}

/// Pebble on the bridge, checking tls-alpn-01 through the balancer (every name resolves
/// to 127.0.0.1, where HAProxy listens).
fn farm_pebble(farm: &Farm, lb: &Balancer, va_sleep: u32) -> Option<common::pebble::Pebble> {
    let listen = farm.bridge_ip();
    common::pebble::Pebble::start(&common::pebble::PebbleOpts {
        listen: &listen,
        va_sleep,
        ..common::pebble::PebbleOpts::local(lb.port)
    })
}

/// Every live host serves the same certificate for `name`, and so does the balancer.
fn all_serve(farm: &Farm, lb: &Balancer, live: &[usize], name: &str, root: &std::path::Path) {
    let mut serials = Vec::new();
    for &i in live {
        let host = format!("{}:{TLS_PORT}", farm.ip(i));
        let mut got = None;
        assert!(
            wait_until(Duration::from_secs(15), || {
                got = farm_serial(&host, name, root);
                got.is_some()
            }),
            "host {i} does not serve a certificate for {name} that verifies"
        );
        serials.push(got.unwrap());
    }
    serials.dedup();
    assert_eq!(
        serials.len(),
        1,
        "the hosts serve different certificates: {serials:?}"
    );
    let via_lb = farm_serial(&format!("127.0.0.1:{}", lb.port), name, root);
    assert_eq!(via_lb.as_ref(), serials.first());
}

#[test]
fn farm_orders_a_certificate_once_and_every_host_serves_it() {
    if !require("haproxy", "haproxy") {
        return;
    }
    let _one = ONE_FARM_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(farm) = Farm::create() else { return };
    let lb = Balancer::start(&farm);
    let Some(pebble) = farm_pebble(&farm, &lb, 0) else {
        return;
    };
    let dir = TempDir::new("farm-acme");
    let key = key_file(&dir);
    let hosts: Vec<Shuck> = (1..=HOSTS)
        .map(|i| start_acme_host(&farm, i, &key, &pebble, &dir, "farm.test"))
        .collect();
    assert!(
        wait_until(Duration::from_secs(60), || hosts.iter().all(|h| {
            let l = h.log();
            l.contains("ACME: certificate for farm.test issued")
                || l.contains("ACME: certificate for farm.test received from the farm")
        })),
        "not every host has the certificate: {:#?}\npebble: {}",
        hosts.iter().map(Shuck::log).collect::<Vec<_>>(),
        pebble.log()
    );
    let issued = hosts
        .iter()
        .filter(|h| h.log().contains("ACME: certificate for farm.test issued"))
        .count();
    assert_eq!(issued, 1, "ordered by {issued} hosts");
    assert_eq!(pebble.orders(), 1, "{}", pebble.log());
    let root = pebble.issuing_root();
    all_serve(&farm, &lb, &[1, 2, 3], "farm.test", &root);
    // A host that joins later gets it from its peers, with no order.
    drop(hosts);
    let empty = TempDir::new("farm-acme-late");
    let late = start_acme_host(&farm, 2, &key, &pebble, &empty, "farm.test");
    let others: Vec<Shuck> = [1, 3]
        .iter()
        .map(|&i| start_acme_host(&farm, i, &key, &pebble, &dir, "farm.test"))
        .collect();
    assert!(
        late.wait_log(
            "ACME: certificate for farm.test received from the farm",
            Duration::from_secs(30)
        ),
        "{}",
        late.log()
    );
    assert_eq!(pebble.orders(), 1, "{}", late.log());
    drop(others);
}

#[test]
fn farm_acme_orderer_killed_mid_order_another_host_completes_it() {
    if !require("haproxy", "haproxy") {
        return;
    }
    let _one = ONE_FARM_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(farm) = Farm::create() else { return };
    let lb = Balancer::start(&farm);
    // Pebble waits up to 3 s before validating: the order is surely in flight when its
    // orderer is stopped.
    let Some(pebble) = farm_pebble(&farm, &lb, 3) else {
        return;
    };
    let dir = TempDir::new("farm-acme-kill");
    let key = key_file(&dir);
    let mut hosts: Vec<Shuck> = (1..=HOSTS)
        .map(|i| start_acme_host(&farm, i, &key, &pebble, &dir, "kill.test"))
        .collect();
    let mut orderer = None;
    assert!(
        wait_until(Duration::from_secs(30), || {
            orderer = hosts
                .iter()
                .position(|h| h.log().contains("ACME: order created"));
            orderer.is_some()
        }),
        "no host ordered: {:#?}",
        hosts.iter().map(Shuck::log).collect::<Vec<_>>()
    );
    let k = orderer.unwrap();
    let log = hosts[k].log();
    let client: u32 = log
        .lines()
        .find_map(|l| l.split("ACME client running as process ").nth(1))
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .expect("the ACME client's pid is logged");
    // Frozen in mid-order, then the whole host dies.
    sh(&format!("kill -STOP {client}"));
    assert!(
        !hosts[k]
            .log()
            .contains("ACME: certificate for kill.test issued"),
        "the order finished before it could be stopped: {}",
        hosts[k].log()
    );
    let master = hosts[k].pid();
    for pid in children_of(master) {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    hosts[k].signal("KILL");
    hosts[k].wait_exit(Duration::from_secs(5)).unwrap();
    let live: Vec<usize> = (0..HOSTS).filter(|&i| i != k).collect();
    assert!(
        wait_until(Duration::from_secs(90), || live.iter().all(|&i| {
            let l = hosts[i].log();
            l.contains("ACME: certificate for kill.test issued")
                || l.contains("ACME: certificate for kill.test received from the farm")
        })),
        "the survivors did not complete the order: {:#?}\npebble: {}",
        live.iter().map(|&i| hosts[i].log()).collect::<Vec<_>>(),
        pebble.log()
    );
    let completed = live
        .iter()
        .filter(|&&i| {
            hosts[i]
                .log()
                .contains("ACME: certificate for kill.test issued")
        })
        .count();
    assert_eq!(completed, 1, "completed by {completed} hosts");
    // The abandoned order and the one that completed.
    assert_eq!(pebble.orders(), 2, "{}", pebble.log());
    let root = pebble.issuing_root();
    let live_hosts: Vec<usize> = live.iter().map(|i| i + 1).collect();
    all_serve(&farm, &lb, &live_hosts, "kill.test", &root);
    for i in live {
        assert!(!hosts[i].log().contains("panicked"));
    }
}
