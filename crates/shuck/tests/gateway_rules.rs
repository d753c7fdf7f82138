//! One gateway, one set of rules: the same request shapes sent over HTTP/1.1, HTTP/2 and
//! HTTP/3 get the same verdict and put the same request on the backend (issue 45). The
//! certificate that served a connection (by its SNI, or the default for none, an unknown
//! name or an address) decides which Hosts it may ask for, so that no client reaches the
//! names, routes or client verification of another certificate; bodies are held to their
//! content-length; malformed heads are refused alike; a `://` in a query is no authority.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::h1origin::{H1Origin, Seen};
use common::shapes::{self, Conn, Fields, Proto, Verdict};
use common::*;

/// `public.test` (the default certificate) and `secret.test` (its own
/// `client-verify = required`), a route by the server name `secret.test` to the `secret`
/// backend; shuck with `--http --quic`.
struct Secret {
    shuck: Shuck,
    public: H1Origin,
    secret: H1Origin,
    pki: ClientPki,
    _dir: TempDir,
}

/// shuck with `--http --quic` on a fresh port, the rest of its configuration file `conf`.
fn gateway(dir: &TempDir, conf: &str) -> Shuck {
    let port = free_port();
    let path = dir.path("shuck.conf");
    let head = format!("http = on\nquic = on\nfrontend = \"[127.0.0.1]:{port}\"\n");
    std::fs::write(&path, head + conf).unwrap();
    Shuck::start_raw(&["--config", path.to_str().unwrap()], port)
}

fn secret_setup() -> Secret {
    let dir = TempDir::new("rules-secret");
    let pki = ClientPki::new();
    let (public_pem, _) = rcgen_cert(&dir, "public", &["public.test"], false);
    let (secret_pem, _) = rcgen_cert(&dir, "secret", &["secret.test"], false);
    let public = H1Origin::start(None);
    let secret = H1Origin::start(None);
    let shuck = gateway(
        &dir,
        &format!(
            "backend = \"127.0.0.1:{}\"\n\
             backend = {{\n name = \"secret\"\n server = \"127.0.0.1:{}\"\n}}\n\
             route = {{ sni = \"secret.test\" backend = \"secret\" }}\n\
             pem-file = {{\n cert = \"{}\"\n client-verify = required\n client-verify-ca = \"{}\"\n}}\n\
             pem-file = \"{}\"\n",
            public.port,
            secret.port,
            shapes::s(&secret_pem),
            shapes::s(&pki.ca),
            shapes::s(&public_pem),
        ),
    );
    Secret {
        shuck,
        public,
        secret,
        pki,
        _dir: dir,
    }
}

/// The paths a backend saw (an absolute-form target's, after its authority), sorted.
fn paths(o: &H1Origin) -> Vec<String> {
    let path = |t: &str| match t.strip_prefix("https://") {
        Some(rest) => rest[rest.find('/').unwrap_or(rest.len())..].to_owned(),
        None => t.to_owned(),
    };
    let mut p: Vec<String> = o.requests().iter().map(|s| path(&s.path)).collect();
    p.sort();
    p
}

/// Finding 1: SNI (none, unknown, an address, the other name, the same name) × Host ×
/// HTTP version. A connection served the default certificate never reaches `secret.test`
/// (421), whatever its Host says; one verified under `secret.test`'s rules does, and only
/// for its own name.
#[test]
fn the_served_certificate_decides_the_hosts_a_connection_may_ask_for() {
    let h3_ok = common::h3::aioquic();
    let t = secret_setup();
    let addr = t.shuck.addr();
    let conns: Vec<(&str, Conn, bool)> = vec![
        ("none", Conn::default(), false),
        ("unknown", Conn::sni("unknown.test"), false),
        ("address", Conn::sni("127.0.0.1"), false),
        ("other", Conn::sni("public.test"), false),
        (
            "same",
            Conn {
                sni: Some("secret.test".into()),
                cert: Some(t.pki.alice.clone()),
            },
            true,
        ),
    ];
    let hosts = ["secret.test", "SECRET.test:443", "public.test", "127.0.0.1"];
    let mut want_secret = Vec::new();
    let mut want_public = Vec::new();
    for (label, conn, verified) in &conns {
        let mut h3_reqs = Vec::new();
        let mut h3_want = Vec::new();
        for (hi, host) in hosts.iter().enumerate() {
            let to_secret = host.to_ascii_lowercase().starts_with("secret.test");
            // Served under secret.test's rules: only its own name; else: never it.
            let allowed = to_secret == *verified;
            let want = if allowed {
                Verdict::Status(200)
            } else {
                Verdict::Status(421)
            };
            let mut record = |proto: &str, how: &str| {
                let path = format!("/m/{proto}/{label}/{hi}/{how}");
                if allowed {
                    if *verified {
                        want_secret.push(path.clone());
                    } else {
                        want_public.push(path.clone());
                    }
                }
                path
            };
            // HTTP/1.1: Host, and an HTTP/1.0 request in absolute form without one.
            let path = record("h1", "host");
            let raw = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
            let got = shapes::h1(addr, conn, raw.as_bytes());
            assert_eq!(got, want, "HTTP/1.1 {label} Host {host}");
            let path = record("h1", "absolute");
            let raw = format!("GET https://{host}{path} HTTP/1.0\r\n\r\n");
            let got = shapes::h1(addr, conn, raw.as_bytes());
            assert_eq!(got, want, "HTTP/1.0 absolute {label} {host}");
            // HTTP/2 and HTTP/3: :authority, and Host without it.
            for proto in [Proto::H2, Proto::H3] {
                let tag = if proto == Proto::H2 { "h2" } else { "h3" };
                let path = record(tag, "authority");
                let by_authority = Fields::request("GET", host, &path, &[]);
                let path = record(tag, "host");
                let by_host = Fields::raw(&[
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":path", &path),
                    ("host", host),
                ]);
                if proto == Proto::H2 {
                    for (how, req) in [("authority", by_authority), ("host", by_host)] {
                        let got = shapes::h2(addr, conn, &req);
                        assert_eq!(got, want, "HTTP/2 {label} {how} {host}");
                    }
                } else {
                    h3_reqs.extend([by_authority, by_host]);
                    h3_want.extend([want.clone(), want.clone()]);
                }
            }
        }
        if h3_ok {
            let got = shapes::h3(t.shuck.port, conn, &h3_reqs);
            assert_eq!(got, h3_want, "HTTP/3 {label}");
        } else {
            // No client: what it would have recorded is not expected either.
            want_public.retain(|p| !p.starts_with("/m/h3/"));
            want_secret.retain(|p| !p.starts_with("/m/h3/"));
        }
    }
    // secret.test without a client certificate: no handshake, over every version.
    let bare = Conn::sni("secret.test");
    let raw = b"GET /m/bare HTTP/1.1\r\nHost: secret.test\r\n\r\n";
    assert_eq!(shapes::h1(addr, &bare, raw), Verdict::NoHandshake);
    let req = Fields::request("GET", "secret.test", "/m/bare", &[]);
    assert_eq!(shapes::h2(addr, &bare, &req), Verdict::NoHandshake);
    if h3_ok {
        let got = shapes::h3(t.shuck.port, &bare, &[req]);
        assert_ne!(
            got,
            vec![Verdict::Status(200)],
            "HTTP/3 without a certificate"
        );
    }
    want_secret.sort();
    want_public.sort();
    assert_eq!(
        paths(&t.secret),
        want_secret,
        "what reached the secret backend"
    );
    assert_eq!(
        paths(&t.public),
        want_public,
        "what reached the public backend"
    );
}

/// The request shapes: a name, the HTTP/1.1 bytes (when HTTP/1.1 can say it), the
/// HTTP/2 and HTTP/3 fields (when they can), and the verdict all give.
struct Shape {
    name: &'static str,
    h1: Option<Vec<u8>>,
    h23: Option<Fields>,
    want: Verdict,
    /// The backend it reaches when passed: "app", "admin" or "api".
    backend: &'static str,
}

fn shape(
    name: &'static str,
    h1: Option<&str>,
    h23: Option<Fields>,
    want: Verdict,
    backend: &'static str,
) -> Shape {
    Shape {
        name,
        h1: h1.map(|s| s.as_bytes().to_vec()),
        h23,
        want,
        backend,
    }
}

/// A GET of `path` for localhost, passed to `backend`, in every version.
fn plain(name: &'static str, path: &str, backend: &'static str) -> Shape {
    Shape {
        name,
        h1: Some(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").into_bytes()),
        h23: Some(Fields::request("GET", "localhost", path, &[])),
        want: Verdict::Status(200),
        backend,
    }
}

fn table() -> Vec<Shape> {
    let get = |path: &str, extra: &[(&str, &str)]| Fields::request("GET", "localhost", path, extra);
    let post =
        |path: &str, extra: &[(&str, &str)]| Fields::request("POST", "localhost", path, extra);
    // A whole request hidden in a body past its length: what a backend would take as the
    // next request on its connection.
    let smuggled = "hello\
        GET /c/smuggled HTTP/1.1\r\nHost: evil.test\r\nX-Forwarded-For: 6.6.6.6\r\nX-Client-Cert: CN=root\r\n\r\n";
    vec![
        shape(
            "good",
            Some("GET /c/good?q=1 HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n"),
            Some(get("/c/good?q=1", &[("accept", "*/*")])),
            Verdict::Status(200),
            "app",
        ),
        shape(
            "forwarding headers in every spelling",
            Some(
                "GET /c/fwd HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-For: 6.6.6.6\r\n\
                 x_forwarded_for: 6.6.6.7\r\nForwarded: for=6.6.6.8\r\nX-Forwarded-Proto: http\r\n\
                 X-FORWARDED_PROTO: ftp\r\n\r\n",
            ),
            Some(get(
                "/c/fwd",
                &[
                    ("x-forwarded-for", "6.6.6.6"),
                    ("x_forwarded_for", "6.6.6.7"),
                    ("forwarded", "for=6.6.6.8"),
                    ("x-forwarded-proto", "http"),
                    ("x-forwarded_proto", "ftp"),
                ],
            )),
            Verdict::Status(200),
            "app",
        ),
        shape(
            "a body of its content-length",
            Some("POST /c/post HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello"),
            Some(post("/c/post", &[("content-length", "5")]).with_body(b"hello")),
            Verdict::Status(200),
            "app",
        ),
        shape(
            "a body longer than its content-length (smuggling)",
            None,
            Some(post("/c/long", &[("content-length", "5")]).with_body(smuggled.as_bytes())),
            Verdict::Refused,
            "",
        ),
        shape(
            "a body shorter than its content-length",
            None,
            Some(post("/c/short", &[("content-length", "60")]).with_body(b"hello")),
            Verdict::Refused,
            "",
        ),
        shape(
            "a content-length and no body",
            None,
            Some(get("/c/nobody", &[("content-length", "60")])),
            Verdict::Refused,
            "",
        ),
        shape(
            "a :path given twice",
            None,
            Some(Fields::raw(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":authority", "localhost"),
                (":path", "/c/first"),
                (":path", "/c/second"),
            ])),
            Verdict::Refused,
            "",
        ),
        shape(
            "a pseudo-header field after a regular one",
            None,
            Some(Fields::raw(&[
                (":method", "GET"),
                (":scheme", "https"),
                ("accept", "*/*"),
                (":authority", "localhost"),
                (":path", "/c/late"),
            ])),
            Verdict::Refused,
            "",
        ),
        shape(
            "a fragment in :path",
            None,
            Some(get("/c/frag#x", &[])),
            Verdict::Refused,
            "",
        ),
        shape(
            "two Host fields",
            Some("GET /c/hosts HTTP/1.1\r\nHost: localhost\r\nHost: other.test\r\n\r\n"),
            Some(Fields::raw(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/c/hosts"),
                ("host", "localhost"),
                ("host", "other.test"),
            ])),
            Verdict::Refused,
            "",
        ),
        shape(
            "an authority and a Host that differ",
            Some("GET https://localhost/c/differ HTTP/1.1\r\nHost: other.test\r\n\r\n"),
            Some(get("/c/differ", &[("host", "other.test")])),
            Verdict::Refused,
            "",
        ),
        shape(
            "no Host at all",
            Some("GET /c/nohost HTTP/1.1\r\n\r\n"),
            Some(Fields::raw(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/c/nohost"),
            ])),
            Verdict::Refused,
            "",
        ),
        plain("a path-prefix route", "/admin/x", "admin"),
        plain(
            "a :// in the query does not escape a path-prefix route",
            "/admin/y?u=://h/",
            "admin",
        ),
        plain(
            "an empty segment (//) reaches the route",
            "//admin/v",
            "admin",
        ),
        plain(
            "a percent-encoded letter reaches the route",
            "/%61dmin/w",
            "admin",
        ),
        plain("a dot segment reaches the route", "/./admin/u", "admin"),
        plain(
            "a .. segment leaves the route it names",
            "/api/../admin/t",
            "admin",
        ),
        plain(
            "a :// in the query does not reach another route",
            "/c/pub?u=://h/api/",
            "app",
        ),
        shape(
            "a name of another certificate: 421",
            Some("GET /c/other HTTP/1.1\r\nHost: other.test\r\n\r\n"),
            Some(Fields::request("GET", "other.test", "/c/other", &[])),
            Verdict::Status(421),
            "",
        ),
    ]
}

/// What a backend saw of a request, less what differs by version and nothing else: the
/// fields sorted (HTTP/2 and HTTP/3 write Host first), names lowercase.
fn seen_key(s: &Seen) -> String {
    let mut h = s.headers.clone();
    h.sort();
    format!("{} {} {:?} body {}", s.method, s.path, h, s.body_len)
}

/// Finding 3 (and 2, 4): the table sent over every version; same verdict, same request at
/// the same backend, nothing else anywhere.
#[test]
fn every_version_meets_one_set_of_rules() {
    let h3_ok = common::h3::aioquic();
    let dir = TempDir::new("rules-table");
    let (other, _) = rcgen_cert(&dir, "other", &["other.test"], false);
    let (app, admin, api) = (
        H1Origin::start(None),
        H1Origin::start(None),
        H1Origin::start(None),
    );
    let shuck = gateway(
        &dir,
        &format!(
            "backend = \"127.0.0.1:{}\"\n\
             backend = {{ name = \"admin\" server = \"127.0.0.1:{}\" }}\n\
             backend = {{ name = \"api\" server = \"127.0.0.1:{}\" }}\n\
             route = {{ host = \"localhost\" path-prefix = \"/admin/\" backend = \"admin\" }}\n\
             route = {{ host = \"localhost\" path-prefix = \"/api/\" backend = \"api\" }}\n\
             pem-file = \"{}\"\npem-file = \"{}\"\n",
            app.port,
            admin.port,
            api.port,
            shapes::s(&other),
            test_cert(),
        ),
    );
    let port = shuck.port;
    let addr = shuck.addr();
    let conn = Conn::sni("localhost");
    let shapes = table();
    let backend_of = |name: &str| match name {
        "admin" => &admin,
        "api" => &api,
        _ => &app,
    };
    // A request is streamed: its head may reach the backend before its body is found
    // longer or shorter than declared. Then the backend connection is closed with the body
    // incomplete, which no backend takes as a request: only complete ones count.
    let complete = |r: &Seen| {
        r.header("content-length")
            .is_none_or(|n| n.parse::<u64>().is_ok_and(|n| n == r.body_len))
    };
    let seen = |o: &H1Origin| o.requests().iter().filter(|r| complete(r)).count();
    let count = || seen(&app) + seen(&admin) + seen(&api);
    // HTTP/3: every shape on one connection, in turn: a stream that left its backend
    // connection out of step would show in the shapes after it.
    let h3_got = if h3_ok {
        let reqs: Vec<Fields> = shapes.iter().filter_map(|s| s.h23.clone()).collect();
        let before = count();
        let got = shapes::h3(port, &conn, &reqs);
        Some((got, before))
    } else {
        None
    };
    let after_h3 = count();
    let mut h3_iter = h3_got.as_ref().map(|(g, _)| g.iter());
    let mut by_version: Vec<(&str, Proto, Option<String>)> = Vec::new();
    for s in &shapes {
        let mut keys = Vec::new();
        let before = count();
        if let Some(raw) = &s.h1 {
            let n = seen(backend_of(s.backend));
            assert_eq!(shapes::h1(addr, &conn, raw), s.want, "HTTP/1.1: {}", s.name);
            keys.push((Proto::H1, n));
        }
        if let Some(f) = &s.h23 {
            let n = seen(backend_of(s.backend));
            assert_eq!(shapes::h2(addr, &conn, f), s.want, "HTTP/2: {}", s.name);
            keys.push((Proto::H2, n));
            if let Some(it) = h3_iter.as_mut() {
                assert_eq!(it.next(), Some(&s.want), "HTTP/3: {}", s.name);
            }
        }
        // A request passed reaches its backend once per version, and a refused one none.
        let passed = if s.backend.is_empty() { 0 } else { keys.len() };
        assert_eq!(
            count() - before,
            passed,
            "requests passed on for: {}",
            s.name
        );
        for (proto, n) in keys.into_iter().filter(|_| passed > 0) {
            let done: Vec<Seen> = backend_of(s.backend)
                .requests()
                .into_iter()
                .filter(complete)
                .collect();
            let key = seen_key(&done[n]);
            by_version.push((s.name, proto, Some(key)));
        }
    }
    // The same request at the backend, whichever version carried it.
    for s in shapes.iter().filter(|s| !s.backend.is_empty()) {
        let keys: Vec<&String> = by_version
            .iter()
            .filter(|(n, _, _)| *n == s.name)
            .filter_map(|(_, _, k)| k.as_ref())
            .collect();
        assert!(
            keys.windows(2).all(|w| w[0] == w[1]),
            "{}: {keys:#?}",
            s.name
        );
    }
    if let Some((_, before)) = h3_got {
        let passed = shapes
            .iter()
            .filter(|s| s.h23.is_some() && !s.backend.is_empty())
            .count();
        assert_eq!(after_h3 - before, passed, "HTTP/3 requests passed on");
        // Each in step with its own answer, and the same request as the other versions':
        // every passed shape's request is at its backend once per version.
        let all: Vec<String> = [&app, &admin, &api]
            .iter()
            .flat_map(|o| o.requests())
            .filter(complete)
            .map(|r| seen_key(&r))
            .collect();
        for s in shapes
            .iter()
            .filter(|s| s.h23.is_some() && !s.backend.is_empty())
        {
            let h2_key = by_version
                .iter()
                .find(|(n, p, _)| *n == s.name && *p == Proto::H2)
                .and_then(|(_, _, k)| k.clone())
                .unwrap();
            let versions = 2 + usize::from(s.h1.is_some());
            assert_eq!(
                all.iter().filter(|k| **k == h2_key).count(),
                versions,
                "{}: every version puts the same request on the backend: {all:#?}",
                s.name
            );
        }
    }
    // Nothing smuggled reached any backend, in any version.
    for o in [&app, &admin, &api] {
        assert!(
            o.requests().iter().all(|r| !r.path.contains("smuggled")),
            "{:?}",
            o.requests()
        );
    }
}
