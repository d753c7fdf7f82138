//! Telling the backend who the client is: PROXY v1/v2 read by real HAProxy and nginx,
//! v2 TLVs decoded, write-ip, and PROXY headers received from a balancer in front.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

/// An origin that records the first `n` bytes of each connection and then echoes.
fn recording_origin(n: usize) -> (Origin, Arc<Mutex<Vec<Vec<u8>>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let o = Origin::start(move |mut s| {
        let mut head = vec![0u8; n];
        if s.read_exact(&mut head).is_err() {
            return;
        }
        s2.lock().unwrap().push(head);
        let mut buf = [0u8; 4096];
        while let Ok(k) = s.read(&mut buf) {
            if k == 0 || s.write_all(&buf[..k]).is_err() {
                break;
            }
        }
    });
    (o, seen)
}

/// A whole PROXY v2 header off `s`: 16 bytes, then the length they announce.
fn read_v2_header(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut all = vec![0u8; 16];
    s.read_exact(&mut all).ok()?;
    let len = u16::from_be_bytes([all[14], all[15]]) as usize;
    all.resize(16 + len, 0);
    s.read_exact(&mut all[16..]).ok()?;
    Some(all)
}

fn wait_for<T>(f: impl Fn() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn write_ip_sends_the_family_and_the_client_address() {
    let (o4, seen4) = recording_origin(5);
    let shuck = Shuck::start(&["-n", "1", "-b", &o4.addr(), "--write-ip"]);
    let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    echo_roundtrip(&mut c);
    // AF_INET, then 127.0.0.1; the echo proves nothing more was written before the client's.
    assert_eq!(seen4.lock().unwrap()[0], [2, 127, 0, 0, 1]);

    let (o6, seen6) = recording_origin(17);
    let port = free_port();
    let fe = format!("[::1]:{port}");
    let s6 = Shuck::start_raw(
        &["-f", &fe, "-n", "1", "-b", &o6.addr(), "--write-ip"],
        port,
    );
    let mut c = tls_connect(
        SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, s6.port)),
        &ClientOpts::default(),
    )
    .unwrap();
    echo_roundtrip(&mut c);
    let mut want = vec![10u8]; // AF_INET6
    want.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
    assert_eq!(seen6.lock().unwrap()[0], want);
}

/// The bytes hitch writes with `--write-ip` and shuck's, at the same recording backend,
/// over IPv4 and IPv6.
#[test]
fn write_ip_bytes_are_hitchs() {
    if !require("hitch", "hitch") {
        return;
    }
    for (listen, client) in [("127.0.0.1", "127.0.0.1"), ("::1", "::1")] {
        let (origin, seen) = recording_origin(if client == "::1" { 17 } else { 5 });
        let mut hitch = Hitch::start(listen, &origin.addr());
        let mut c = tls_connect(hitch.addr, &ClientOpts::default()).unwrap();
        echo_roundtrip(&mut c);
        drop(c);
        hitch.stop();
        let port = free_port();
        let fe = format!("[{listen}]:{port}");
        let s = Shuck::start_raw(
            &["-f", &fe, "-n", "1", "-b", &origin.addr(), "--write-ip"],
            port,
        );
        let at = SocketAddr::new(client.parse().unwrap(), s.port);
        let mut c = tls_connect(at, &ClientOpts::default()).unwrap();
        echo_roundtrip(&mut c);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "one connection from each");
        assert_eq!(
            seen[1], seen[0],
            "shuck's write-ip bytes differ from hitch's"
        );
    }
}

/// A real hitch in front of `backend` (`HOST:PORT`), listening on `listen`.
struct Hitch {
    child: std::process::Child,
    addr: SocketAddr,
    _dir: TempDir,
}

impl Hitch {
    fn start(listen: &str, backend: &str) -> Hitch {
        let dir = TempDir::new("hitch-write-ip");
        let port = free_port();
        let (host, bport) = backend.rsplit_once(':').unwrap();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let conf = dir.path("hitch.conf");
        std::fs::write(
            &conf,
            format!(
                "frontend = \"[{listen}]:{port}\"\nbackend = \"[{host}]:{bport}\"\n\
                 pem-file = \"{}\"\nworkers = 1\nwrite-ip = on\ndaemon = off\n\
                 user = \"nobody\"\n",
                test_cert()
            ),
        )
        .unwrap();
        let child = Command::new("hitch")
            .arg("--config")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("hitch starts");
        assert!(
            wait_until(Duration::from_secs(10), || listening(port)),
            "hitch did not start"
        );
        Hitch {
            child,
            addr: SocketAddr::new(listen.parse().unwrap(), port),
            _dir: dir,
        }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Hitch {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A v2 header's TLVs, as (type, value).
fn tlvs_of(h: &ppp::v2::Header) -> Vec<(u8, Vec<u8>)> {
    h.tlvs()
        .map(|t| t.unwrap())
        .map(|t| (t.kind, t.value.to_vec()))
        .collect()
}

/// The SSL TLV's sub-TLVs as text (after its client flags and verify result), checking
/// that it says the client came over TLS.
fn ssl_subtlvs(tlvs: &[(u8, Vec<u8>)]) -> String {
    let ssl = &tlvs.iter().find(|t| t.0 == 0x20).expect("SSL TLV").1;
    assert_eq!(ssl[0] & 0x01, 0x01);
    String::from_utf8_lossy(&ssl[5..]).into_owned()
}

#[test]
fn proxy_v2_carries_addresses_and_tls_tlvs() {
    let full = Arc::new(Mutex::new(Vec::new()));
    let f2 = full.clone();
    let o2 = Origin::start(move |mut s| {
        *f2.lock().unwrap() = read_v2_header(&mut s).expect("a PROXY v2 header");
        let mut buf = [0u8; 4096];
        while let Ok(k) = s.read(&mut buf) {
            if k == 0 || s.write_all(&buf[..k]).is_err() {
                break;
            }
        }
    });
    let shuck = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &o2.addr(),
        "--write-proxy-v2",
        "--alpn-protos",
        "h2,http/1.1",
    ]);
    let opts = ClientOpts {
        version: Some(13),
        sni: Some("shop.example".into()),
        alpn: vec![b"h2".to_vec()],
        ..Default::default()
    };
    let mut c = tls_connect(shuck.addr(), &opts).unwrap();
    echo_roundtrip(&mut c);
    let local_port = c.sock.local_addr().unwrap().port();
    let bytes = wait_for(|| Some(full.lock().unwrap().clone()).filter(|b| !b.is_empty()));
    let h = ppp::v2::Header::try_from(bytes.as_slice()).unwrap();
    match h.addresses {
        ppp::v2::Addresses::IPv4(a) => {
            assert_eq!(a.source_address, std::net::Ipv4Addr::LOCALHOST);
            assert_eq!(a.source_port, local_port, "the client's own port");
            assert_eq!(a.destination_port, shuck.port);
        }
        other => panic!("{other:?}"),
    }
    let tlvs = tlvs_of(&h);
    assert!(tlvs.contains(&(0x01, b"h2".to_vec())), "ALPN: {tlvs:?}");
    assert!(
        tlvs.contains(&(0x02, b"shop.example".to_vec())),
        "authority: {tlvs:?}"
    );
    let sub = ssl_subtlvs(&tlvs);
    assert!(sub.contains("TLSv1.3") && sub.contains("TLS_AES_"), "{sub}");

    // --write-proxy is hitch's name for v2.
    let shuck = Shuck::start(&["-n", "1", "-b", &o2.addr(), "--write-proxy"]);
    full.lock().unwrap().clear();
    echo_roundtrip(&mut tls_connect(shuck.addr(), &ClientOpts::default()).unwrap());
    let bytes = wait_for(|| Some(full.lock().unwrap().clone()).filter(|b| !b.is_empty()));
    assert_eq!(&bytes[..12], b"\r\n\r\n\0\r\nQUIT\n");
}

#[test]
fn proxy_proxy_passes_on_the_balancers_client() {
    let header = b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 443\r\n";
    let (o, seen) = recording_origin(header.len());
    let cfg = client_config(&ClientOpts::default());
    // Alone: the header goes on as received.
    let shuck = Shuck::start(&["-n", "1", "-b", &o.addr(), "--proxy-proxy"]);
    let mut sock = TcpStream::connect(shuck.addr()).unwrap();
    sock.write_all(header).unwrap();
    let mut c = tls_over(sock, &cfg, None).unwrap();
    echo_roundtrip(&mut c);
    assert_eq!(seen.lock().unwrap()[0], header.to_vec());
    // With --write-proxy-v1: re-encoded, with the balancer's client.
    let (o1, seen1) = recording_origin(header.len());
    let shuck = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &o1.addr(),
        "--proxy-proxy",
        "--write-proxy-v1",
    ]);
    let mut sock = TcpStream::connect(shuck.addr()).unwrap();
    // A v2 header from the balancer this time.
    let v2 = ppp::v2::Builder::with_addresses(
        ppp::v2::Version::Two | ppp::v2::Command::Proxy,
        ppp::v2::Protocol::Stream,
        (
            "203.0.113.7:5555".parse::<SocketAddr>().unwrap(),
            "127.0.0.1:443".parse::<SocketAddr>().unwrap(),
        ),
    )
    .build()
    .unwrap();
    sock.write_all(&v2).unwrap();
    let mut c = tls_over(sock, &cfg, None).unwrap();
    echo_roundtrip(&mut c);
    assert_eq!(
        String::from_utf8_lossy(&seen1.lock().unwrap()[0]),
        "PROXY TCP4 203.0.113.7 127.0.0.1 5555 443\r\n"
    );
    // Without a header: refused, nothing reaches the backend.
    let before = o1.accepted.load(std::sync::atomic::Ordering::SeqCst);
    assert!(tls_connect(shuck.addr(), &ClientOpts::default()).is_err());
    assert_eq!(
        o1.accepted.load(std::sync::atomic::Ordering::SeqCst),
        before
    );
}

fn haproxy_backend(
    dir: &TempDir,
    origin_port: u16,
) -> Option<(std::process::Child, u16, std::path::PathBuf)> {
    if !require("haproxy", "haproxy") {
        return None;
    }
    let port = free_port();
    let log = dir.path("haproxy.out");
    let cfg = dir.path("haproxy.cfg");
    std::fs::write(
        &cfg,
        format!(
            "global\n  log stdout format raw local0\n  maxconn 100\ndefaults\n  mode tcp\n  log global\n  timeout connect 2s\n  timeout client 10s\n  timeout server 10s\n\
             frontend fe\n  bind 127.0.0.1:{port} accept-proxy\n  bind [::1]:{port} accept-proxy\n  log-format \"CLIENT %ci %cp\"\n  default_backend be\n\
             backend be\n  server s 127.0.0.1:{origin_port}\n"
        ),
    )
    .unwrap();
    let child = Command::new("haproxy")
        .args(["-db", "-f", cfg.to_str().unwrap()])
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(port, "haproxy");
    Some((child, port, log))
}

#[test]
fn haproxy_reads_proxy_v1_and_v2_from_ipv4_and_ipv6_clients() {
    let dir = TempDir::new("haproxy");
    let origin = Origin::echo();
    let Some((mut haproxy, hport, log)) = haproxy_backend(&dir, origin.port) else {
        return;
    };
    let backend = format!("[127.0.0.1]:{hport}");
    for flag in ["--write-proxy-v1", "--write-proxy-v2"] {
        for v6 in [false, true] {
            let port = free_port();
            let fe = if v6 {
                format!("[::1]:{port}")
            } else {
                format!("[127.0.0.1]:{port}")
            };
            let shuck = Shuck::start_raw(&["-f", &fe, "-n", "1", "-b", &backend, flag], port);
            let addr: SocketAddr = if v6 {
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port))
            } else {
                shuck.addr()
            };
            let mut c = tls_connect(addr, &ClientOpts::default()).unwrap();
            echo_roundtrip(&mut c);
            let me = c.sock.local_addr().unwrap();
            c.conn.send_close_notify();
            let _ = c.flush();
            drop(c);
            let want = format!("CLIENT {} {}", me.ip(), me.port());
            wait_for(|| {
                std::fs::read_to_string(&log)
                    .ok()
                    .filter(|t| t.contains(&want))
            })
            .lines()
            .find(|l| l.contains(&want))
            .unwrap_or_else(|| panic!("{flag} v6={v6}: haproxy did not log {want}"));
        }
    }
    let _ = haproxy.kill();
    let _ = haproxy.wait();
}

#[test]
fn nginx_reads_proxy_protocol() {
    if !require("nginx", "nginx libnginx-mod-stream") {
        return;
    }
    // nginx-light has no stream module: get it as the programs are got.
    let modules = [
        "/usr/lib/nginx/modules/ngx_stream_module.so",
        "/usr/share/nginx/modules/ngx_stream_module.so",
    ];
    let find = || {
        modules
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
    };
    let built_in = {
        let v = Command::new("nginx").arg("-V").output().unwrap();
        let text = String::from_utf8_lossy(&v.stderr).into_owned();
        text.contains("--with-stream ") || text.trim_end().ends_with("--with-stream")
    };
    if find().is_none() && !built_in {
        let _ = Command::new("sh")
            .args(["-c", "(apt-get install -y -qq libnginx-mod-stream || (apt-get update -qq && apt-get install -y -qq libnginx-mod-stream)) >/dev/null 2>&1"])
            .status();
        if find().is_none() {
            skip("nginx has no stream module and libnginx-mod-stream could not be installed");
            return;
        }
    }
    let module = find();
    let dir = TempDir::new("nginx");
    let port = free_port();
    let load = module
        .map(|m| format!("load_module {m};\n"))
        .unwrap_or_default();
    let cfg = dir.path("nginx.conf");
    std::fs::write(
        &cfg,
        format!(
            "{load}daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\n\
             stream {{ server {{ listen 127.0.0.1:{port} proxy_protocol; return \"$proxy_protocol_addr $proxy_protocol_port\\n\"; }} }}\n",
            d = dir.0.display()
        ),
    )
    .unwrap();
    let mut nginx = Command::new("nginx")
        .args([
            "-c",
            cfg.to_str().unwrap(),
            "-p",
            dir.0.to_str().unwrap(),
            "-e",
            dir.path("error.log").to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(st)) = nginx.try_wait() {
            panic!(
                "nginx exited {st}: {}",
                std::fs::read_to_string(dir.path("error.log")).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "nginx did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    for flag in ["--write-proxy-v1", "--write-proxy-v2"] {
        let shuck = Shuck::start(&["-n", "1", "-b", &format!("[127.0.0.1]:{port}"), flag]);
        let mut c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
        let me = c.sock.local_addr().unwrap();
        let got = String::from_utf8(read_all(&mut c).unwrap()).unwrap();
        assert_eq!(got, format!("{} {}\n", me.ip(), me.port()), "{flag}");
    }
    let _ = nginx.kill();
    let _ = nginx.wait();
}

#[test]
fn conflicting_preamble_flags_are_refused() {
    let (code, err) = run_to_exit(&["--write-ip", "--write-proxy-v1"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--write-ip"), "{err}");
}

#[test]
fn proxy_proxy_alone_sends_a_header_encoded_anew_and_refuses_what_does_not_parse() {
    let unknown = b"PROXY UNKNOWN\r\n";
    let (o, seen) = recording_origin(unknown.len());
    let cfg = client_config(&ClientOpts::default());
    let shuck = Shuck::start(&["-n", "1", "-b", &o.addr(), "--proxy-proxy"]);
    // UNKNOWN with fields after it: the backend gets a bare UNKNOWN line.
    let mut sock = TcpStream::connect(shuck.addr()).unwrap();
    sock.write_all(b"PROXY UNKNOWN junk 1 2 3\r\n").unwrap();
    echo_roundtrip(&mut tls_over(sock, &cfg, None).unwrap());
    assert_eq!(seen.lock().unwrap()[0], unknown.to_vec());
    // Refused before anything reaches the backend: control bytes in a v1 line, a v2
    // header whose TLVs do not parse.
    let v2 = ppp::v2::Builder::with_addresses(
        ppp::v2::Version::Two | ppp::v2::Command::Proxy,
        ppp::v2::Protocol::Stream,
        (
            "203.0.113.7:5555".parse::<SocketAddr>().unwrap(),
            "127.0.0.1:443".parse::<SocketAddr>().unwrap(),
        ),
    )
    .write_tlv(ppp::v2::Type::Authority, b"example.com")
    .unwrap()
    .build()
    .unwrap();
    let mut bad_tlv = v2.clone();
    let len = u16::from_be_bytes([bad_tlv[14], bad_tlv[15]]) + 2;
    bad_tlv[14..16].copy_from_slice(&len.to_be_bytes());
    bad_tlv.extend_from_slice(&[0x02, 0x00]);
    let before = o.accepted.load(std::sync::atomic::Ordering::SeqCst);
    for header in [&b"PROXY UNKNOWN \x1b[2J\r\n"[..], &bad_tlv] {
        let mut sock = TcpStream::connect(shuck.addr()).unwrap();
        sock.write_all(header).unwrap();
        assert!(tls_over(sock, &cfg, None).is_err());
    }
    assert_eq!(o.accepted.load(std::sync::atomic::Ordering::SeqCst), before);
    // A good v2 header with its TLVs goes on as parsed.
    let (o2, seen2) = recording_origin(v2.len());
    let shuck = Shuck::start(&["-n", "1", "-b", &o2.addr(), "--proxy-proxy"]);
    let mut sock = TcpStream::connect(shuck.addr()).unwrap();
    sock.write_all(&v2).unwrap();
    echo_roundtrip(&mut tls_over(sock, &cfg, None).unwrap());
    assert_eq!(seen2.lock().unwrap()[0], v2);
}

#[test]
fn proxy_v2_tells_of_an_http3_client_and_its_cipher() {
    if !common::h3::aioquic() {
        return;
    }
    // An HTTP/1.1 backend behind the PROXY v2 header: it keeps the header and answers each
    // request head with a small 200.
    let full = Arc::new(Mutex::new(Vec::new()));
    let f2 = full.clone();
    let origin = Origin::start(move |mut s| {
        let Some(header) = read_v2_header(&mut s) else {
            return;
        };
        *f2.lock().unwrap() = header;
        let mut req = Vec::new();
        let mut byte = [0u8; 1];
        while !req.ends_with(b"\r\n\r\n") && s.read(&mut byte).is_ok_and(|n| n == 1) {
            req.push(byte[0]);
        }
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
    });
    let shuck = Shuck::start(&[
        "-n",
        "1",
        "-b",
        &origin.addr(),
        "--http",
        "--quic",
        "--write-proxy-v2",
    ]);
    let report = common::h3::h3(shuck.port, serde_json::json!([{"path": "/"}]), &[]);
    assert_eq!(common::h3::answers(&report)[0]["status"], "200", "{report}");
    let bytes = wait_for(|| Some(full.lock().unwrap().clone()).filter(|b| !b.is_empty()));
    let h = ppp::v2::Header::try_from(bytes.as_slice()).unwrap();
    match h.addresses {
        ppp::v2::Addresses::IPv4(a) => {
            assert_eq!(a.source_address, std::net::Ipv4Addr::LOCALHOST);
            assert_eq!(
                a.destination_port, shuck.port,
                "QUIC's port, the same as TCP's"
            );
        }
        other => panic!("{other:?}"),
    }
    let tlvs = tlvs_of(&h);
    assert!(tlvs.contains(&(0x01, b"h3".to_vec())), "ALPN: {tlvs:?}");
    let sub = ssl_subtlvs(&tlvs);
    assert!(
        sub.contains("TLSv1.3") && sub.contains("TLS_AES_"),
        "the version and the cipher: {sub}"
    );
}
