//! TLS to the backend, against nginx asking for a client certificate
//! (`ssl_verify_client on`): served with the right CA and client certificate, backend
//! sessions resumed (nginx's `$ssl_session_reused`), the PROXY header before the
//! handshake; refused and marked down with a wrong CA or an expired backend certificate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command};
use std::time::Duration;

use common::*;

/// nginx, killed however the test ends.
struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One answer: status line and body (by Content-Length), or `None` when the connection
/// closed first.
fn answer(r: &mut impl BufRead) -> Option<(String, String)> {
    let head = read_http_head(r)?;
    let len = head
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some((
        head.lines().next().unwrap_or("").to_owned(),
        String::from_utf8_lossy(&body).into_owned(),
    ))
}

fn get(addr: std::net::SocketAddr) -> Option<(String, String)> {
    let c = tls_connect(addr, &ClientOpts::default()).ok()?;
    let mut r = BufReader::new(c);
    r.get_mut()
        .write_all(b"GET / HTTP/1.1\r\nHost: backend.test\r\nConnection: close\r\n\r\n")
        .ok()?;
    answer(&mut r)
}

/// nginx serving TLS on two ports with `ssl_verify_client on` and `proxy_protocol`: `good`
/// with a certificate for backend.test from the test CA, `old` with an expired one.
struct TlsNginx {
    pki: ClientPki,
    good: u16,
    old: u16,
    _dir: TempDir,
    _nginx: Nginx,
}

impl TlsNginx {
    fn start() -> Option<TlsNginx> {
        if !require("nginx", "nginx")
            || !require("openssl", "openssl")
            || !require("faketime", "faketime")
        {
            return None;
        }
        let pki = ClientPki::new();
        let dir = TempDir::new("backend-tls");
        let d = dir.0.display().to_string();
        let ca = pki.ca.parent().unwrap().display().to_string();
        std::fs::write(
            dir.path("server.ext"),
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:backend.test\n",
        )
        .unwrap();
        // A good certificate for backend.test, and one that expired (signed in 2020).
        for (name, fake) in [("good", ""), ("old", "faketime 2020-01-01 ")] {
            sh(&format!(
                "cd {d} && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
                 -keyout {name}.key -out {name}.csr -subj /CN=backend.test 2>/dev/null \
                 && {fake}openssl x509 -req -in {name}.csr -CA {ca}/ca.crt -CAkey {ca}/ca.key \
                 -CAcreateserial -days 2 -extfile server.ext -out {name}.crt 2>/dev/null"
            ));
        }
        let (good, old) = (free_port(), free_port());
        let cfg = dir.path("nginx.conf");
        let server = |port: u16, cert: &str| {
            format!(
                "server {{ listen 127.0.0.1:{port} ssl proxy_protocol; \
                 ssl_certificate {d}/{cert}.crt; ssl_certificate_key {d}/{cert}.key; \
                 ssl_client_certificate {ca}/ca.crt; ssl_verify_client on; \
                 ssl_session_cache shared:S{port}:1m; ssl_session_tickets on; \
                 location / {{ return 200 \"reused=$ssl_session_reused client=$ssl_client_s_dn proxy=$proxy_protocol_addr alpn=$ssl_alpn_protocol\\n\"; }} }}\n"
            )
        };
        std::fs::write(
            &cfg,
            format!(
                "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\n\
                 http {{ access_log off;\n\
                 client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n\
                 {}{} }}\n",
                server(good, "good"),
                server(old, "old"),
            ),
        )
        .unwrap();
        let _nginx = Nginx(
            Command::new("nginx")
                .args(["-c", cfg.to_str().unwrap(), "-e", &format!("{d}/error.log")])
                .spawn()
                .unwrap(),
        );
        wait_listening(good, "nginx");
        wait_listening(old, "nginx");
        Some(TlsNginx {
            pki,
            good,
            old,
            _dir: dir,
            _nginx,
        })
    }

    /// A named backend on `port` verified against CA `ca` ("ca" or "other"), with alice's
    /// client certificate and a PROXY v1 line before the handshake.
    fn backend(&self, name: &str, port: u16, ca: &str) -> String {
        let dir = self.pki.ca.parent().unwrap().display();
        let alice = self.pki.alice.display();
        format!(
            "name={name};server=[127.0.0.1]:{port};tls=on;ca-file={dir}/{ca}.crt;sni=backend.test;cert={alice};write-proxy-v1=on"
        )
    }
}

#[test]
fn tls_to_nginx_verified_with_a_client_certificate_and_resumed() {
    let Some(n) = TlsNginx::start() else { return };
    let (good, old) = (n.good, n.old);

    let (secure, wrong_ca, expired) = (
        n.backend("secure", good, "ca"),
        n.backend("wrongca", good, "other"),
        n.backend("expired", old, "ca"),
    );
    let (p1, p2, p3, stats) = (free_port(), free_port(), free_port(), free_port());
    let fe = |p: u16, b: &str| format!("[127.0.0.1]:{p};backend={b}");
    let (f1, f2, f3) = (fe(p1, "secure"), fe(p2, "wrongca"), fe(p3, "expired"));
    let stats_s = stats.to_string();
    let shuck = Shuck::start_raw(
        &[
            "-f",
            &f1,
            "-f",
            &f2,
            "-f",
            &f3,
            "--named-backend",
            &secure,
            "--named-backend",
            &wrong_ca,
            "--named-backend",
            &expired,
            "--backend-retry-after",
            "60",
            "--stats",
            &stats_s,
        ],
        p1,
    );
    let addr = |p: u16| -> std::net::SocketAddr { format!("127.0.0.1:{p}").parse().unwrap() };

    // Verified both ways; the second connection resumes the first one's backend session.
    let (status, body) = get(addr(p1)).expect("an answer through TLS to nginx");
    assert!(status.contains("200"), "{status} {body}");
    assert!(body.contains("CN=alice"), "{body}");
    assert!(
        body.contains("proxy=127.0.0.1"),
        "the PROXY header came before TLS: {body}"
    );
    assert!(body.starts_with("reused=."), "{body}");
    let (_, again) = get(addr(p1)).unwrap();
    assert!(
        again.starts_with("reused=r"),
        "the backend session was not resumed: {again}"
    );

    // A CA that did not sign nginx's certificate, and an expired certificate: refused,
    // marked down, with the reason.
    for (p, name, why) in [
        (p2, "wrongca", "UnknownIssuer"),
        (p3, "expired", "certificate expired"),
    ] {
        assert_eq!(get(addr(p)), None, "{name}: served unverified");
        assert!(
            shuck.wait_log(&format!("backend={name} "), Duration::from_secs(5)),
            "{}",
            shuck.log()
        );
        let log = shuck.log();
        assert!(
            log.lines().any(|l| l.contains("TLS to the backend failed")
                && l.contains(&format!("backend={name} "))
                && l.contains(why)),
            "{name}: {why}\n{log}"
        );
        let (_, m) = scrape(stats, "/metrics");
        let server = format!(
            "backend=\"{name}\",server=\"[127.0.0.1]:{}\"",
            if name == "expired" { old } else { good }
        );
        assert!(
            sample(&m, &format!("shuck_backend_tls_failures_total{{{server}}}")) >= 1.0,
            "{m}"
        );
        assert_eq!(
            sample(&m, &format!("shuck_backend_up{{{server}}}")),
            0.0,
            "{m}"
        );
    }
    // The good backend is untouched by the others' failures.
    let (_, body) = get(addr(p1)).unwrap();
    assert!(body.contains("CN=alice"), "{body}");
}

#[test]
fn http_mode_over_tls_to_the_backend() {
    let Some(n) = TlsNginx::start() else { return };
    let unverified = format!(
        "name=loose;server=[127.0.0.1]:{};tls=on;verify=none;sni=backend.test;cert={};alpn=http/1.1;write-proxy-v1=on",
        n.good,
        n.pki.alice.display()
    );
    let secure = format!("{};alpn=http/1.1", n.backend("secure", n.good, "ca"));
    let (p1, p2) = (free_port(), free_port());
    let (f1, f2) = (
        format!("[127.0.0.1]:{p1};backend=secure"),
        format!("[127.0.0.1]:{p2};backend=loose"),
    );
    let shuck = Shuck::start_raw(
        &[
            "--http",
            "-f",
            &f1,
            "-f",
            &f2,
            "--named-backend",
            &secure,
            "--named-backend",
            &unverified,
        ],
        p1,
    );
    assert!(
        shuck.log().contains("backend loose: verify = none"),
        "no warning: {}",
        shuck.log()
    );
    // HTTP/1.1 keep-alive: two requests, a body on the second.
    let c = tls_connect(shuck.addr(), &ClientOpts::default()).unwrap();
    let mut r = BufReader::new(c);
    r.get_mut()
        .write_all(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        .unwrap();
    for _ in 0..2 {
        let (status, body) = answer(&mut r).expect("an answer");
        assert!(status.contains("200"), "{status}");
        assert!(
            body.contains("CN=alice") && body.contains("alpn=http/1.1"),
            "{body}"
        );
    }
    // HTTP/2: streams with and without a body, through the backend's TLS.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (mut send, driver) = common::h2c::connect(shuck.addr()).await;
        for i in 0..3 {
            let (status, body) = common::h2c::get(&mut send, &format!("/h2/{i}"))
                .await
                .unwrap();
            assert_eq!(status, 200);
            assert!(String::from_utf8_lossy(&body).contains("CN=alice"));
        }
        let req = http::Request::post("https://localhost/upload")
            .body(())
            .unwrap();
        let (resp, mut up) = send.send_request(req, false).unwrap();
        up.send_data(bytes::Bytes::from_static(b"0123456789"), true)
            .unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        let body = common::h2c::read_body(resp.into_body()).await.unwrap();
        assert!(
            String::from_utf8_lossy(&body).contains("reused="),
            "{body:?}"
        );
        drop(send);
        let _ = tokio::time::timeout(Duration::from_secs(2), driver).await;
    });
    // verify = none takes a certificate from a CA it was not given.
    let loose: std::net::SocketAddr = format!("127.0.0.1:{p2}").parse().unwrap();
    let (status, body) = get(loose).expect("an answer with verify = none");
    assert!(
        status.contains("200") && body.contains("CN=alice"),
        "{status} {body}"
    );
}
