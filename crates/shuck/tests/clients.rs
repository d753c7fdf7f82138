//! Per-client limits and access rules (`--client-*`) through real sockets: clients bound to
//! their own addresses on 127.0.0.0/8, real TLS clients, curl over HTTP/1.1 and HTTP/2 and
//! aioquic over HTTP/3. One address held to its limit while twenty others are served; a
//! rate of connections and of requests (429 with Retry-After on each version); allow and
//! deny rules, per frontend, changed by a reload without dropping anyone; the PROXY
//! header's source counted; the metrics and the one log line an episode.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::h1origin::H1Origin;
use common::h3::{aioquic, answers, h3, header};
use common::*;

/// A TCP connection to `to` from the address `from` (any of 127.0.0.0/8 is this host's).
fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    let local: SocketAddr = format!("{from}:0").parse().unwrap();
    sock.bind(&local.into())?;
    sock.connect(&to.into())?;
    let s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    Ok(s)
}

/// A TLS connection from `from`, with a line echoed through it.
fn served_from(from: &str, to: SocketAddr) -> std::io::Result<Client> {
    let sock = connect_from(from, to)?;
    let mut c = tls_over(sock, &client_config(&ClientOpts::default()), None)?;
    c.write_all(b"ping through shuck\n")?;
    let mut buf = [0u8; 19];
    c.read_exact(&mut buf)?;
    assert_eq!(&buf, b"ping through shuck\n");
    Ok(c)
}

/// Whether a connection from `from` is refused before any TLS: shuck resets it without
/// a byte of a ServerHello.
fn refused_from(from: &str, to: SocketAddr) -> bool {
    let Ok(mut s) = connect_from(from, to) else {
        return true;
    };
    // A ClientHello's worth of bytes, so a served connection answers.
    let cfg = client_config(&ClientOpts::default());
    let conn = rustls::ClientConnection::new(
        cfg,
        rustls::pki_types::ServerName::try_from("localhost").unwrap(),
    );
    let mut conn = conn.unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    let _ = s.write_all(&hello);
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) | Err(_) => true,
        Ok(_) => false,
    }
}

fn refusals(stats: u16, reason: &str) -> f64 {
    let (_, body) = scrape(stats, "/metrics");
    sample(
        &body,
        &format!("shuck_client_refused_total{{reason=\"{reason}\"}}"),
    )
}

#[test]
fn one_address_is_held_to_its_connections_while_twenty_others_are_served() {
    let origin = Origin::echo();
    let stats = free_port();
    // Two worker threads: SO_REUSEPORT spreads one client's connections over both, and
    // they meet one limit.
    let shuck = Shuck::start(&[
        "-n",
        "2",
        "-b",
        &origin.addr(),
        "--client-max-conns",
        "3",
        "--stats",
        &stats.to_string(),
    ]);
    let heavy: Vec<Client> = (0..3)
        .map(|_| served_from("127.0.0.2", shuck.addr()).unwrap())
        .collect();
    for _ in 0..5 {
        assert!(
            refused_from("127.0.0.2", shuck.addr()),
            "a 4th connection was served"
        );
    }
    let others: Vec<Client> = (3..23)
        .map(|i| served_from(&format!("127.0.0.{i}"), shuck.addr()).unwrap())
        .collect();
    assert_eq!(others.len(), 20);
    assert_eq!(refusals(stats, "conn_limit"), 5.0);
    // One line for the episode, not one a refusal.
    assert_eq!(
        shuck.log().matches("refused (conn_limit)").count(),
        1,
        "{}",
        shuck.log()
    );
    assert!(shuck
        .log()
        .contains("client 127.0.0.2 refused (conn_limit)"));
    // A connection closed gives its slot back.
    drop(heavy);
    assert!(wait_until(Duration::from_secs(5), || served_from(
        "127.0.0.2",
        shuck.addr()
    )
    .is_ok()));
    let (_, body) = scrape(stats, "/metrics");
    assert!(
        sample(&body, "shuck_client_table_entries") >= 21.0,
        "{body}"
    );
}

#[test]
fn a_connection_rate_refuses_the_burst_past_it_then_lets_the_client_back() {
    let origin = Origin::echo();
    let stats = free_port();
    let shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--client-conn-rate",
        "2/s,burst=4",
        "--stats",
        &stats.to_string(),
    ]);
    for _ in 0..4 {
        drop(served_from("127.0.0.30", shuck.addr()).unwrap());
    }
    assert!(refused_from("127.0.0.30", shuck.addr()));
    // Another address has its own bucket.
    drop(served_from("127.0.0.31", shuck.addr()).unwrap());
    std::thread::sleep(Duration::from_millis(600));
    drop(served_from("127.0.0.30", shuck.addr()).unwrap());
    assert_eq!(refusals(stats, "conn_rate"), 1.0);
}

/// curl from `from` over `version` to each path on one connection: the statuses, and the
/// headers of the last answer.
fn curl_from(from: &str, port: u16, version: &str, paths: &[&str]) -> (String, String) {
    let dir = TempDir::new("clients-curl");
    let heads = dir.path("heads");
    let mut cmd = Command::new("curl");
    cmd.args(["-sk", version, "--max-time", "10", "--interface", from])
        .args(["-w", "%{http_code} ", "-D", heads.to_str().unwrap()]);
    for p in paths {
        cmd.arg(format!("https://127.0.0.1:{port}{p}"))
            .args(["-o", "/dev/null"]);
    }
    let out = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
    (out, std::fs::read_to_string(heads).unwrap_or_default())
}

#[test]
fn requests_over_the_rate_are_answered_429_on_each_http_version() {
    if !require("curl", "curl") || !aioquic() {
        return;
    }
    let origin = H1Origin::start(None);
    let stats = free_port();
    let shuck = Shuck::start(&[
        "--http",
        "--quic",
        "-b",
        &origin.spec,
        "--client-request-rate",
        "1/m,burst=3",
        "--stats",
        &stats.to_string(),
    ]);
    let paths = ["/size/1", "/size/2", "/size/3", "/size/4"];
    // HTTP/1.1: the 4th request is answered 429 and the connection closes after it.
    let (codes, heads) = curl_from("127.0.0.40", shuck.port, "--http1.1", &paths);
    assert_eq!(codes, "200 200 200 429 ", "{heads}");
    let retry = heads
        .lines()
        .find_map(|l| l.strip_prefix("Retry-After: "))
        .unwrap_or_else(|| panic!("no Retry-After: {heads}"));
    let secs: u32 = retry.trim().parse().unwrap();
    assert!((1..=60).contains(&secs), "{secs}");
    // HTTP/2: the stream alone is answered 429.
    let (codes, heads) = curl_from("127.0.0.41", shuck.port, "--http2", &paths);
    assert_eq!(codes, "200 200 200 429 ", "{heads}");
    assert!(heads.contains("retry-after: "), "{heads}");
    // The same client over HTTP/2 is still over it, whatever the connection.
    let (codes, _) = curl_from("127.0.0.41", shuck.port, "--http2", &["/size/1"]);
    assert_eq!(codes, "429 ");
    // HTTP/3 (from 127.0.0.1, which has made no request yet).
    let reqs = serde_json::json!(paths
        .iter()
        .map(|p| serde_json::json!({"path": p}))
        .collect::<Vec<_>>());
    let report = h3(shuck.port, reqs, &[]);
    let got: Vec<&str> = answers(&report)
        .iter()
        .map(|a| a["status"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(got, ["200", "200", "200", "429"], "{report}");
    assert!(
        header(&answers(&report)[3], "retry-after").is_some(),
        "{report}"
    );
    assert_eq!(refusals(stats, "request_rate"), 4.0);
    // The backend saw only what was served.
    assert_eq!(origin.requests().len(), 9);
}

const BIN: &str = env!("CARGO_BIN_EXE_shuck");

/// `shuck ctl --socket SOCK ARGS...`: its exit status and what it printed.
fn ctl(sock: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(BIN)
        .args(["ctl", "--socket", sock.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn bans_from_the_api_refuse_at_once_are_listed_lifted_and_kept_across_a_restart() {
    let dir = TempDir::new("client-bans");
    let sock = dir.path("admin.sock");
    let state = dir.path("state.json");
    let origin = Origin::echo();
    let stats = free_port();
    let stats_s = stats.to_string();
    let args = [
        "-b",
        &origin.addr(),
        "--client-max-conns",
        "100",
        "--admin-socket",
        sock.to_str().unwrap(),
        "--admin-state",
        state.to_str().unwrap(),
        "--stats",
        &stats_s,
    ];
    let shuck = Shuck::start(&args);
    let kept = served_from("127.0.0.50", shuck.addr()).unwrap();
    let (ok, out) = ctl(&sock, &["ban", "127.0.0.48/29", "--reason", "scanner"]);
    assert!(ok, "{out}");
    let (ok, out) = ctl(&sock, &["ban", "127.0.0.60", "--seconds", "2"]);
    assert!(ok, "{out}");
    // Refused at accept from the moment the API answered; a connection already open stays.
    assert!(refused_from("127.0.0.50", shuck.addr()));
    assert!(refused_from("127.0.0.55", shuck.addr()));
    assert!(refused_from("127.0.0.60", shuck.addr()));
    served_from("127.0.0.56", shuck.addr()).unwrap();
    let mut kept = kept;
    echo_roundtrip(&mut kept);
    let (ok, out) = ctl(&sock, &["clients", "--top", "5"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("BANNED") && out.contains("127.0.0.48/29") && out.contains("scanner"),
        "{out}"
    );
    assert!(
        out.contains("127.0.0.50"),
        "the client with a connection open: {out}"
    );
    assert_eq!(refusals(stats, "ban"), 3.0);
    // A ban for a time ends by itself.
    std::thread::sleep(Duration::from_millis(2100));
    served_from("127.0.0.60", shuck.addr()).unwrap();
    // Bad input is named.
    let (ok, out) = ctl(&sock, &["ban", "127.0.0.1/8"]);
    assert!(!ok && out.contains("bits set"), "{out}");
    let (ok, out) = ctl(&sock, &["unban", "192.0.2.1"]);
    assert!(!ok && out.contains("no ban of 192.0.2.1"), "{out}");
    drop(kept);
    drop(shuck);
    // A restart reads the ban back.
    let saved = std::fs::read_to_string(&state).unwrap();
    assert!(saved.contains("127.0.0.48/29"), "{saved}");
    let shuck = Shuck::start(&args);
    assert!(wait_until(Duration::from_secs(5), || refused_from(
        "127.0.0.50",
        shuck.addr()
    )));
    let (ok, out) = ctl(&sock, &["unban", "127.0.0.48/29"]);
    assert!(ok, "{out}");
    served_from("127.0.0.50", shuck.addr()).unwrap();
    let (ok, out) = ctl(&sock, &["--json", "clients"]);
    assert!(ok && out.contains("\"bans\": []"), "{out}");
}

#[test]
fn allow_and_deny_rules_hold_per_frontend_and_change_by_reload_without_dropping_anyone() {
    let dir = TempDir::new("client-rules");
    let list = dir.path("deny.txt");
    std::fs::write(&list, "# scanners\n127.0.0.70\n127.0.0.72/31\n").unwrap();
    let origin = Origin::echo();
    let (p1, p2) = (free_port(), free_port());
    let conf = dir.path("shuck.conf");
    let write_conf = |deny: &str| {
        std::fs::write(
            &conf,
            format!(
                "frontend = {{\n  host = \"127.0.0.1\"\n  port = \"{p1}\"\n}}\nfrontend = {{\n  host = \"127.0.0.1\"\n  port = \"{p2}\"\n  client-allow = \"127.0.0.64/26\"\n  client-max-conns = 1\n}}\nbackend = \"{}\"\npem-file = \"{}\"\nclient-deny = \"{deny}\"\n",
                origin.addr(),
                test_cert(),
            ),
        )
        .unwrap();
    };
    write_conf(&format!("file:{}", list.display()));
    let shuck = Shuck::start_raw(&["--config", conf.to_str().unwrap()], p1);
    let a1: SocketAddr = format!("127.0.0.1:{p1}").parse().unwrap();
    let a2: SocketAddr = format!("127.0.0.1:{p2}").parse().unwrap();
    assert!(refused_from("127.0.0.70", a1));
    assert!(refused_from("127.0.0.73", a1));
    let mut open = served_from("127.0.0.71", a1).unwrap();
    // The second frontend: its own allow list and limit, the global deny list kept.
    let _one = served_from("127.0.0.81", a2).unwrap();
    assert!(refused_from("127.0.0.81", a2), "its own client-max-conns");
    assert!(refused_from("127.0.0.130", a2), "not on its allow list");
    assert!(refused_from("127.0.0.70", a2), "the global deny list");
    served_from("127.0.0.90", a2).unwrap();
    // The global frontend's count of 127.0.0.81 is apart.
    served_from("127.0.0.81", a1).unwrap();
    // A reload moves the rules; the connection open from a newly denied address stays.
    write_conf("127.0.0.71");
    shuck.signal("HUP");
    assert!(shuck.wait_log("SIGHUP: configuration reloaded", Duration::from_secs(10)));
    assert!(wait_until(Duration::from_secs(5), || refused_from(
        "127.0.0.71",
        a1
    )));
    served_from("127.0.0.70", a1).unwrap();
    echo_roundtrip(&mut open);
    // A bad rule is refused by the reload, naming it, and the running rules stay.
    write_conf("127.0.0.300");
    shuck.signal("HUP");
    assert!(
        shuck.wait_log("127.0.0.300", Duration::from_secs(10)),
        "{}",
        shuck.log()
    );
    assert!(refused_from("127.0.0.71", a1));
    // An allow file emptied (issue 60, point 7: it turned the allow list off, serving
    // everyone) is refused by the reload, naming the file; the running rules stay.
    let allow = dir.path("allow.txt");
    std::fs::write(&allow, "# nothing left\n").unwrap();
    let conf_text = std::fs::read_to_string(&conf).unwrap().replace(
        "client-allow = \"127.0.0.64/26\"",
        &format!("client-allow = \"file:{}\"", allow.display()),
    );
    std::fs::write(&conf, conf_text).unwrap();
    shuck.signal("HUP");
    assert!(
        shuck.wait_log("holds no address block", Duration::from_secs(10)),
        "{}",
        shuck.log()
    );
    assert!(shuck.log().contains("allow.txt"), "{}", shuck.log());
    assert!(
        refused_from("127.0.0.130", a2),
        "still not on its allow list"
    );
    let (code, out) = run_to_exit(&with_cert(&[
        "-f",
        "[127.0.0.1]:8443",
        "-b",
        "127.0.0.1:1",
        "--client-allow",
        &format!("file:{}", allow.display()),
        "--test",
    ]));
    assert_ne!(code, Some(0));
    assert!(
        out.contains("--client-allow") && out.contains("holds no address block"),
        "{out}"
    );
}

#[test]
fn with_a_proxy_header_the_client_is_its_source() {
    let origin = Origin::echo();
    let shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--proxy-proxy",
        "--client-max-conns",
        "1",
        "--client-deny",
        "203.0.113.66",
    ]);
    let from = |src: &str| {
        let mut s = TcpStream::connect(shuck.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(format!("PROXY TCP4 {src} 127.0.0.1 5555 443\r\n").as_bytes())
            .unwrap();
        tls_over(s, &client_config(&ClientOpts::default()), None)
    };
    let _first = from("203.0.113.7").unwrap();
    assert!(from("203.0.113.7").is_err(), "one connection per source");
    assert!(from("203.0.113.66").is_err(), "denied source");
    // Every connection comes from 127.0.0.1: the sources, not it, are counted.
    let _other = from("203.0.113.8").unwrap();
    assert!(
        shuck
            .log()
            .contains("client 203.0.113.7 refused (conn_limit)"),
        "{}",
        shuck.log()
    );
}

#[test]
fn bad_flags_are_named() {
    for (args, says) in [
        (&["--client-conn-rate", "fast"][..], "--client-conn-rate"),
        (&["--client-request-rate", "0/s"], "the rate must be"),
        (&["--client-deny", "10.0.0.0/33"], "prefix length"),
        (
            &["--client-allow", "file:/nonexistent/list"],
            "/nonexistent/list",
        ),
        (&["--client-prefix-v6", "0"], "--client-prefix-v6"),
        (&["--client-table-size", "10"], "--client-table-size"),
        (&["--client-request-rate", "5/s"], "it needs --http"),
        (
            &["--client-share-interval", "0.01"],
            "--client-share-interval",
        ),
        (
            &["-f", "[127.0.0.1]:1;client-max-conns=many"],
            "client-max-conns",
        ),
    ] {
        let (code, err) = run_to_exit(args);
        assert_ne!(code, Some(0), "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// A route's rules (`client-allow`, `client-deny`) answer 403 over HTTP/1.1, HTTP/2 and
/// HTTP/3 alike, whatever the request leaves out: no SNI, an address for a name, no Host.
/// A request no route takes on a connection a server-name route chose is held to that
/// route's rules, so leaving the Host out never reaches its backend.
#[test]
fn route_rules_refuse_a_request_whatever_it_leaves_out_on_every_version() {
    use common::shapes::{self, Conn, Fields, Verdict};
    let h3_ok = aioquic();
    let dir = TempDir::new("client-route-rules");
    let (pem, _) = rcgen_cert(
        &dir,
        "all",
        &["public.test", "secret.test", "admin.test"],
        false,
    );
    let (public, secret) = (H1Origin::start(None), H1Origin::start(None));
    let port = free_port();
    let conf = dir.path("shuck.conf");
    std::fs::write(
        &conf,
        format!(
            "http = on\nquic = on\nfrontend = \"[127.0.0.1]:{port}\"\n\
             backend = \"127.0.0.1:{}\"\n\
             backend = {{\n name = \"secret\"\n server = \"127.0.0.1:{}\"\n}}\n\
             route = {{ sni = \"secret.test\" backend = \"secret\" client-deny = \"127.0.0.1\" }}\n\
             route = {{ host = \"admin.test\" backend = \"secret\" client-allow = \"10.0.0.0/8\" }}\n\
             pem-file = \"{}\"\n",
            public.port,
            secret.port,
            shapes::s(&pem),
        ),
    )
    .unwrap();
    let shuck = Shuck::start_raw(&["--config", conf.to_str().unwrap()], port);
    let addr = shuck.addr();
    // (SNI, Host or none) → refused?
    let cases: Vec<(Conn, Option<&str>, bool)> = vec![
        (Conn::default(), Some("admin.test"), true),
        (Conn::default(), Some("public.test"), false),
        (Conn::default(), Some("127.0.0.1"), false),
        (Conn::default(), None, false),
        (Conn::sni("127.0.0.1"), Some("admin.test"), true),
        (Conn::sni("secret.test"), Some("secret.test"), true),
        (Conn::sni("secret.test"), Some("127.0.0.1"), true),
        (Conn::sni("secret.test"), Some("public.test"), true),
        (Conn::sni("secret.test"), None, true),
        (Conn::sni("public.test"), Some("public.test"), false),
    ];
    let versions = if h3_ok { 3 } else { 2 };
    let mut served = 0;
    for (i, (conn, host, refused)) in cases.iter().enumerate() {
        let want = Verdict::Status(if *refused { 403 } else { 200 });
        let label = format!("case {i}: sni {:?} host {host:?}", conn.sni);
        let raw = match host {
            Some(h) => format!("GET /c/{i} HTTP/1.1\r\nHost: {h}\r\n\r\n"),
            None => format!("GET /c/{i} HTTP/1.0\r\n\r\n"),
        };
        assert_eq!(
            shapes::h1(addr, conn, raw.as_bytes()),
            want,
            "HTTP/1.1 {label}"
        );
        // HTTP/2 and HTTP/3 need an authority (RFC 9113 §8.3.1): a request with neither
        // :authority nor Host is malformed (reset) before any route is looked at.
        let (req, want23) = match host {
            Some(h) => (
                Fields::request("GET", h, &format!("/c/{i}"), &[]),
                want.clone(),
            ),
            None => (
                Fields::raw(&[(":method", "GET"), (":scheme", "https"), (":path", "/c")]),
                Verdict::Refused,
            ),
        };
        assert_eq!(shapes::h2(addr, conn, &req), want23, "HTTP/2 {label}");
        if h3_ok {
            assert_eq!(
                shapes::h3(port, conn, &[req]),
                vec![want23.clone()],
                "HTTP/3 {label}"
            );
        }
        if !refused {
            served += if host.is_some() { versions } else { 1 };
        }
    }
    assert_eq!(secret.requests().len(), 0, "the secret backend was reached");
    assert_eq!(public.requests().len(), served);
}

/// A farm of three hosts (network namespaces) sharing a real redis-server: one client (the
/// root namespace's bridge address) spread over the hosts meets the farm's limits, not
/// three times them, within two intervals; a ban set on one host holds on every host.
#[test]
fn a_client_spread_over_the_farm_meets_the_farms_limits_and_bans() {
    use common::netns::{key_file, Farm, HOSTS};
    let Some(farm) = Farm::create() else { return };
    let Some(redis) = Redis::start(&farm.bridge_ip(), &["--protected-mode", "no"]) else {
        return;
    };
    let dir = TempDir::new("clients-farm");
    let key = key_file(&dir);
    let port = 8443;
    let socks: Vec<std::path::PathBuf> = (1..=HOSTS)
        .map(|i| dir.path(&format!("admin{i}.sock")))
        .collect();
    let hosts: Vec<Shuck> = (1..=HOSTS)
        .map(|i| {
            let fe = format!("[{}]:{port}", farm.ip(i));
            let ns = farm.ns(i);
            let args = [
                "-f",
                &fe,
                "-n",
                "1",
                "--shared-cache-key",
                &key,
                "--shared-store",
                &redis.url(),
                "--client-share-interval",
                "0.2",
                "--client-max-conns",
                "4",
                // One a minute: what refills over the test's seconds is not a whole token,
                // so the bound below is the farm's, not the clock's.
                "--client-conn-rate",
                "1/m,burst=8",
                "--admin-socket",
                socks[i - 1].to_str().unwrap(),
            ];
            Shuck::start_with(&["ip", "netns", "exec", &ns], &args, port)
        })
        .collect();
    let at = |i: usize| -> SocketAddr { format!("{}:{port}", farm.ip(i)).parse().unwrap() };
    let me = farm.bridge_ip();
    let open = |i: usize| {
        let s = connect_from(&me, at(i))?;
        tls_over(s, &client_config(&ClientOpts::default()), None)
    };
    let ctl = |i: usize, args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_shuck"))
            .args(["ctl", "--socket", socks[i - 1].to_str().unwrap()])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let table_on = |i: usize| {
        let out = Command::new(env!("CARGO_BIN_EXE_shuck"))
            .args([
                "ctl",
                "--json",
                "--socket",
                socks[i - 1].to_str().unwrap(),
                "clients",
            ])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_default()
    };
    let bans_on = |i: usize| table_on(i)["bans"].as_array().map_or(0, Vec::len);
    // What host `i` knows of the client's connections open on the other hosts.
    let farm_conns_on = |i: usize| {
        let t = table_on(i);
        t["clients"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["client"] == me.as_str()))
            .map_or(0, |c| c["remote_conns"].as_u64().unwrap_or(0))
    };
    // A ban set on host 1 reaches hosts 2 and 3 within two intervals and refuses there (a
    // banned connection takes nothing of the limits); its lifting reaches them too.
    ctl(1, &["ban", &me, "--reason", "farm"]);
    for i in 2..=HOSTS {
        assert!(
            wait_until(Duration::from_secs(3), || bans_on(i) == 1),
            "the ban did not reach host {i}"
        );
        assert!(refused_from(&me, at(i)));
        assert!(hosts[i - 1].wait_log("refused (ban)", Duration::from_secs(3)));
    }
    ctl(1, &["unban", &me]);
    assert!(
        wait_until(Duration::from_secs(3), || bans_on(2) == 0),
        "the lifting did not reach host 2"
    );
    drop(open(2).unwrap());
    // Two connections held on host 1, two on host 2: the farm's four (one more token of
    // the rate's eight each: five used).
    let held: Vec<Client> = [1, 1, 2, 2].iter().map(|&i| open(i).unwrap()).collect();
    // Within two intervals each host knows the others' (host 3: all four), and refuses.
    for (i, elsewhere) in [(3, 4), (1, 2)] {
        assert!(
            wait_until(Duration::from_secs(3), || farm_conns_on(i) == elsewhere),
            "host {i} does not know the farm's connections: {}",
            table_on(i)
        );
        assert!(
            refused_from(&me, at(i)),
            "host {i} let a fifth connection in"
        );
        assert!(hosts[i - 1].wait_log("refused (conn_limit)", Duration::from_secs(3)));
    }
    // Closed: within two intervals the farm has room again, and the rate's burst of eight
    // allows the three left over the farm, not each host's own eight. Rounds are six
    // intervals apart, so a host slowed by a loaded machine has still heard the others.
    drop(held);
    let wait = Duration::from_millis(1200);
    std::thread::sleep(wait);
    let mut served = 0;
    for _ in 0..3 {
        for i in 1..=HOSTS {
            if open(i).is_ok() {
                served += 1;
            }
        }
        std::thread::sleep(wait);
    }
    assert!(served >= 2, "the farm's rate refused too early: {served}");
    assert!(
        served <= 4,
        "each host allowed its own rate: {served} of 9 served\n{}\n{}",
        hosts[0].log(),
        table_on(1)
    );
    assert!(hosts
        .iter()
        .any(|h| h.log().contains("refused (conn_rate)")));
    // Last, as it takes some seconds the rate above would refill in.
    // Issue 60, point 3: past about 380 bans one sealed report was over the store's 24 KiB
    // and dropped unsaid. 800 bans of 200-byte reasons (about 200 KB), then the client's:
    // every one reaches the other hosts, the last refuses there, none is lost.
    let api = socks[0].clone();
    let post = |body: String| {
        use std::os::unix::net::UnixStream;
        let mut s = UnixStream::connect(&api).unwrap();
        write!(
            s,
            "POST /clients/ban HTTP/1.1\r\nHost: shuck\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    };
    let reason = "r".repeat(200);
    for i in 0..800u32 {
        // 198.18.0.0/15 (RFC 2544, benchmarking): blocks no test reaches.
        let block = format!("198.{}.{}.{}/32", 18 + i / 65536, (i / 256) % 256, i % 256);
        post(format!(
            r#"{{"block":"{block}","seconds":600,"reason":"{reason}"}}"#
        ));
    }
    post(format!(
        r#"{{"block":"{me}","seconds":600,"reason":"last"}}"#
    ));
    for i in 2..=HOSTS {
        assert!(
            wait_until(Duration::from_secs(5), || bans_on(i) == 801),
            "host {i} has {} of 801 bans: {}",
            bans_on(i),
            hosts[0].log()
        );
        assert!(refused_from(&me, at(i)), "host {i}: the 801st ban");
    }
    ctl(1, &["unban", &me]);
    assert!(
        wait_until(Duration::from_secs(5), || bans_on(2) == 800),
        "the lifting did not reach host 2"
    );
    assert!(
        !hosts[0].log().contains("clients_share_failed"),
        "{}",
        hosts[0].log()
    );
    // A value in the hash that does not open (another farm's, altered) is said and counted.
    redis.cli(&[
        "HSET",
        "shuck:clients",
        "00000000000000aa",
        "not a sealed report",
    ]);
    assert!(
        hosts[1].wait_log(
            "does not open under this farm's key",
            Duration::from_secs(3)
        ),
        "{}",
        hosts[1].log()
    );
    drop(hosts);
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    status_field(pid, "VmRSS")
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A spray from a million distinct sources (PROXY headers saying so): the client table
/// keeps its size, the process's memory does not grow past it, and the abusive client that
/// holds connections stays tracked and limited throughout.
#[test]
fn a_spray_of_a_million_sources_keeps_memory_bounded_and_the_abuser_limited() {
    const SOURCES: u32 = 1_000_000;
    let origin = Origin::echo();
    let stats = free_port();
    let shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--proxy-proxy",
        "--client-max-conns",
        "2",
        "--stats",
        &stats.to_string(),
    ]);
    let from = |src: &str| {
        let mut s = TcpStream::connect(shuck.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(format!("PROXY TCP4 {src} 127.0.0.1 5555 443\r\n").as_bytes())
            .unwrap();
        tls_over(s, &client_config(&ClientOpts::default()), None)
    };
    let abuser = "198.51.100.1";
    let _held = [from(abuser).unwrap(), from(abuser).unwrap()];
    assert!(from(abuser).is_err());
    let worker = shuck.worker();
    let before = rss_kib(worker);
    let addr = shuck.addr();
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            std::thread::spawn(move || {
                for i in (t..SOURCES).step_by(4) {
                    let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
                    // Sources spread over 127.1.0.0/16, so that ports last; a byte that is
                    // no ClientHello after the header, so that shuck closes first (and
                    // keeps the TIME_WAIT).
                    let local = format!("127.1.{}.{}", (i >> 8) & 0xff, i & 0xff);
                    let Ok(mut s) = connect_from(&local, addr) else {
                        continue;
                    };
                    let head = format!("PROXY TCP4 {ip} 127.0.0.1 5555 443\r\n\x00");
                    let _ = s.write_all(head.as_bytes());
                    let _ = s.read(&mut [0u8; 64]);
                }
            })
        })
        .collect();
    let mut refused_during = 0;
    while !threads.iter().all(|t| t.is_finished()) {
        if from(abuser).is_err() {
            refused_during += 1;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for t in threads {
        t.join().unwrap();
    }
    assert!(refused_during > 0);
    assert!(from(abuser).is_err(), "the abuser was forgotten");
    let (_, body) = scrape(stats, "/metrics");
    let entries = sample(&body, "shuck_client_table_entries");
    let capacity = sample(&body, "shuck_client_table_capacity");
    let evictions = sample(&body, "shuck_client_table_evictions_total");
    assert!(entries <= capacity, "{entries} > {capacity}");
    assert!(
        evictions >= f64::from(SOURCES) - capacity * 1.01,
        "{evictions}"
    );
    let grown = rss_kib(worker).saturating_sub(before);
    // A table entry is 64 bytes: a million tracked clients would be 61 MiB.
    assert!(grown < 16 * 1024, "the worker grew by {grown} KiB");
    // Another client is served as before.
    assert!(from("203.0.113.9").is_ok());
}

/// A network namespace of its own, removed at drop (its veth pair with it).
struct Ns(String);

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// IPv6 clients count by their /64 (`--client-prefix-v6`): a namespace routed a /48
/// (any address of it bound, as a host given a prefix does) opens connections from
/// addresses in one /64 and in others.
#[test]
fn ipv6_clients_count_by_their_64_in_a_routed_48() {
    let tag = format!("sc{}", std::process::id() % 100_000);
    let ns = format!("{tag}n");
    if !Command::new("ip")
        .args(["netns", "add", &ns])
        .status()
        .is_ok_and(|s| s.success())
    {
        skip("cannot create network namespaces (not root?); the IPv6 /64 test");
        return;
    }
    let _ns = Ns(ns.clone());
    let net = std::process::id() % 0xffff;
    let (here, there) = (format!("fd79:0:{net:x}::1"), format!("fd79:0:{net:x}::2"));
    sh(&format!(
        "ip link add {tag}r type veth peer name {tag}c && ip link set {tag}c netns {ns} \
         && ip addr add {here}/64 dev {tag}r nodad && ip link set {tag}r up \
         && ip -n {ns} addr add {there}/64 dev {tag}c nodad && ip -n {ns} link set {tag}c up \
         && ip -n {ns} link set lo up && ip -n {ns} -6 route add default via {here} \
         && ip -n {ns} -6 route add local 2001:db8:48::/48 dev lo \
         && ip netns exec {ns} sysctl -qw net.ipv6.ip_nonlocal_bind=1 \
         && ip -6 route add 2001:db8:48::/48 via {there} dev {tag}r"
    ));
    let origin = Origin::echo();
    let port = free_port();
    let fe = format!("[{here}]:{port}");
    let shuck = Shuck::start_raw(
        &["-f", &fe, "-b", &origin.addr(), "--client-max-conns", "1"],
        port,
    );
    let script = r#"
import json, socket, ssl, sys
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
held, out = [], []
for a in sys.argv[3:]:
    s = socket.socket(socket.AF_INET6)
    s.settimeout(5)
    try:
        s.bind((a, 0))
        s.connect((sys.argv[1], int(sys.argv[2])))
        held.append(ctx.wrap_socket(s, server_hostname="localhost"))
        out.append("ok")
    except Exception as e:
        print(a, repr(e), file=sys.stderr)
        out.append("refused")
print(json.dumps(out))
"#;
    let addrs = [
        "2001:db8:48:1::1",
        "2001:db8:48:1::2",
        "2001:db8:48:1:ffff::9",
        "2001:db8:48:2::1",
        "2001:db8:48:ffff::1",
    ];
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            "python3",
            "-c",
            script,
            &here,
            &port.to_string(),
        ])
        .args(addrs)
        .output()
        .unwrap();
    let got: Vec<String> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        got,
        ["ok", "refused", "refused", "ok", "ok"],
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        shuck.log()
    );
    assert!(
        shuck
            .log()
            .contains("client 2001:db8:48:1::2 refused (conn_limit)"),
        "{}",
        shuck.log()
    );
    let _ = Command::new("ip")
        .args(["-6", "route", "del", "2001:db8:48::/48"])
        .status();
}

/// Whether a connection from `from` gets no answer at all: its SYN dropped by the kernel.
fn syn_dropped(from: &str, to: SocketAddr) -> bool {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: SocketAddr = format!("{from}:0").parse().unwrap();
    sock.bind(&local.into()).unwrap();
    match sock.connect_timeout(&to.into(), Duration::from_millis(400)) {
        Err(e) => {
            e.kind() == std::io::ErrorKind::TimedOut || e.kind() == std::io::ErrorKind::WouldBlock
        }
        Ok(()) => false,
    }
}

/// `--client-refuse drop`: denied clients, and a client over its limit for a second, are
/// a BPF filter on the listening sockets: their SYNs get no answer, nothing is accepted;
/// connections already open and other clients go on; the client comes back once its time
/// is over.
#[test]
fn refused_in_the_kernel_a_client_gets_no_answer_until_its_time_is_over() {
    let origin = Origin::echo();
    let dir = TempDir::new("clients-drop");
    let sock = dir.path("admin.sock");
    let shuck = Shuck::start(&[
        "--admin-socket",
        sock.to_str().unwrap(),
        "-n",
        "2",
        "-b",
        &origin.addr(),
        "--client-refuse",
        "drop",
        "--client-max-conns",
        "1",
        "--client-deny",
        "127.0.0.99,127.0.1.0/24",
    ]);
    let to = shuck.addr();
    // The worker threads attach their filters as their accept loops start.
    assert!(wait_until(Duration::from_secs(2), || syn_dropped(
        "127.0.0.99",
        to
    )));
    assert!(wait_until(Duration::from_secs(2), || syn_dropped(
        "127.0.1.7",
        to
    )));
    let mut held = served_from("127.0.0.3", to).unwrap();
    // The first over its limit is accepted and reset; from then on its SYNs are dropped.
    assert!(refused_from("127.0.0.3", to));
    assert!(wait_until(Duration::from_secs(2), || syn_dropped(
        "127.0.0.3",
        to
    )));
    echo_roundtrip(&mut held);
    served_from("127.0.0.4", to).unwrap();
    drop(held);
    assert!(
        wait_until(Duration::from_secs(4), || served_from("127.0.0.3", to)
            .is_ok()),
        "the client did not come back: {}",
        shuck.log()
    );
    // A ban from the API is in the filter at once; its lifting too.
    let (ok, out) = ctl(&sock, &["ban", "127.0.0.5"]);
    assert!(ok, "{out}");
    assert!(wait_until(Duration::from_secs(2), || syn_dropped(
        "127.0.0.5",
        to
    )));
    let (ok, out) = ctl(&sock, &["unban", "127.0.0.5"]);
    assert!(ok, "{out}");
    assert!(wait_until(Duration::from_secs(2), || served_from(
        "127.0.0.5",
        to
    )
    .is_ok()));
    assert!(!shuck.log().contains("client_filter"), "{}", shuck.log());
}

/// Sends `count` QUIC Initials from `from` to `port` that no one answers (a spoofer's).
fn spoofed_initials(from: &str, port: u16, count: u32) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h3/spoof.py");
    let out = Command::new("timeout")
        .args(["60", "python3", script, "127.0.0.1"])
        .arg(port.to_string())
        .arg(count.to_string())
        .args(["--from", from])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "spoof.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 60, point 1: QUIC Initials with a victim's address as source charged the victim's
/// limits before the address was proven, locking it out over TCP and QUIC for the
/// handshake timeout (and, with --client-refuse drop, in the kernel).
#[test]
fn spoofed_quic_initials_spend_nothing_of_their_sources_limits() {
    if !require("curl", "curl") || !aioquic() {
        return;
    }
    let origin = H1Origin::start(None);
    let stats = free_port();
    let shuck = Shuck::start(&[
        "--http",
        "--quic",
        "-b",
        &origin.spec,
        "--client-max-conns",
        "2",
        "--client-conn-rate",
        "4/m,burst=4",
        "--client-refuse",
        "drop",
        "--ssl-handshake-timeout",
        "20",
        "--stats",
        &stats.to_string(),
    ]);
    // Ten Initials "from" 127.0.0.1, never followed: the victim's limits stand whole.
    spoofed_initials("127.0.0.1", shuck.port, 10);
    std::thread::sleep(Duration::from_millis(300));
    let (codes, _) = curl_from("127.0.0.1", shuck.port, "--http2", &["/size/1"]);
    assert_eq!(codes, "200 ", "TCP after the spoof\n{}", shuck.log());
    let report = h3(shuck.port, serde_json::json!([{"path": "/size/2"}]), &[]);
    let got: Vec<&str> = answers(&report)
        .iter()
        .map(|a| a["status"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(
        got,
        ["200"],
        "HTTP/3 after the spoof: {report}\n{}",
        shuck.log()
    );
    assert_eq!(refusals(stats, "conn_limit"), 0.0);
    assert_eq!(refusals(stats, "conn_rate"), 0.0);
    // The limits still hold for the proven: its two real connections so far, two more
    // taken (one open) and the fifth over the rate; a QUIC source near its limits is
    // sent a Retry first, and refused once it proves itself.
    let (codes, _) = curl_from("127.0.0.1", shuck.port, "--http1.1", &["/size/3"]);
    assert_eq!(codes, "200 ");
    let report = h3(shuck.port, serde_json::json!([{"path": "/size/4"}]), &[]);
    assert_eq!(answers(&report)[0]["status"], "200", "{report}");
    let report = h3(shuck.port, serde_json::json!([{"path": "/size/5"}]), &[]);
    assert!(
        report.get("error").is_some() || answers(&report)[0]["status"] != "200",
        "the fifth connection in a minute is refused: {report}"
    );
    assert!(refusals(stats, "conn_rate") >= 1.0, "{}", shuck.log());
    // A QUIC refusal never drops the address's SYNs in the kernel (the connect completes;
    // shuck itself then refuses it over the rate, and that TCP refusal may shun it).
    assert!(!syn_dropped("127.0.0.1", shuck.addr()), "{}", shuck.log());
    let retries = sample(&scrape(stats, "/metrics").1, "shuck_quic_retries_total");
    assert!(retries >= 1.0, "a Retry for the source near its limits");
}
