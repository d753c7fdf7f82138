//! Balancing methods (`balance` in a backend block), counted at recording backends:
//! `leastconn` and `least-requests` send most to a fast server beside a slow one where
//! round robin splits evenly; `hash` keeps each key on one server, and a third server takes
//! about a third of the keys (38 of 90, the same every run: the ring holds server names),
//! only from the others; a sticky cookie keeps a client on its server over HTTP/1.1, HTTP/2
//! and HTTP/3; hashed by path, cookie or source, each request of a
//! keep-alive connection goes to its key's server. The admin API names each backend's
//! method.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::grpc::{self, call, pki, shuck};
use common::h1origin::H1Origin;
use common::*;
use serde_json::Value;

fn count(v: &Value, server: &str) -> u64 {
    v["servers"][server].as_u64().unwrap_or(0)
}

#[test]
fn leastconn_and_least_requests_favour_the_faster_server() {
    if !grpc::grpcio() {
        return;
    }
    let pki = pki();
    let slow = grpc::Server::start_slow("slow", None, None, 0.05);
    let fast = grpc::Server::start("fast", None, None);
    for method in ["roundrobin", "leastconn", "least-requests"] {
        let s = shuck(
            &pki,
            &[&slow, &fast],
            &format!(";proto=h2;balance={method}"),
            &[],
        );
        let v = call(s.port, &pki.cert, "load", &["400", "8"]);
        assert_eq!(v["codes"]["OK"], 400, "{method}: {v}");
        let (a, b) = (count(&v, "slow"), count(&v, "fast"));
        if method == "roundrobin" {
            assert!(a.abs_diff(b) <= 40, "{method}: {v}");
        } else {
            // The slow server holds its calls 50 ms: it has more in flight, so fewer come.
            assert!(b >= 3 * a, "{method}: {v}");
        }
    }
}

#[test]
fn hash_keeps_each_key_on_one_server_and_a_new_server_takes_about_a_third() {
    if !grpc::grpcio() {
        return;
    }
    let pki = pki();
    let a = grpc::Server::start("a", None, None);
    let b = grpc::Server::start("b", None, None);
    let c = grpc::Server::start("c", None, None);
    // The servers named by their own names: a ring of addresses would hold test ports, and
    // how many keys move would be a new draw each run (about 30, and past 42 now and then).
    let named = |servers: &[&grpc::Server]| {
        let mut keys = String::new();
        for s in servers {
            keys.push_str(&format!(";server={},name={}", s.addr(), s.name));
        }
        keys + ";proto=h2;balance=hash;hash-key=header:x-user;hash-balance-factor=0"
    };
    let two = shuck(&pki, &[], &named(&[&a, &b]), &[]);
    let v = call(two.port, &pki.cert, "users", &["90", "3"]);
    let before = v["servers"].as_object().unwrap().clone();
    assert_eq!(before.len(), 90, "{v}");
    for (user, servers) in &before {
        assert_eq!(
            servers.as_array().unwrap().len(),
            1,
            "{user} went to {servers}"
        );
    }
    let on = |s: &str| before.values().filter(|v| v[0] == s).count();
    assert!(on("a") > 20 && on("b") > 20, "{v}");
    // The same servers and one more (a ring of the same names: any host, any restart).
    let three = shuck(&pki, &[], &named(&[&a, &b, &c]), &[]);
    let after = call(three.port, &pki.cert, "users", &["90", "1"]);
    let moved: Vec<&String> = before
        .keys()
        .filter(|u| after["servers"][u.as_str()] != before[u.as_str()])
        .collect();
    assert!(
        (20..=40).contains(&moved.len()),
        "{} of 90 keys moved for a third server (about 30 expected)",
        moved.len()
    );
    for u in moved {
        assert_eq!(
            after["servers"][u.as_str()][0],
            "c",
            "{u} moved but not to the new server"
        );
    }
    // Without the header: round robin, both servers.
    let v = call(two.port, &pki.cert, "load", &["20", "1"]);
    assert!(count(&v, "a") > 0 && count(&v, "b") > 0, "{v}");
}

#[test]
fn hash_balance_factor_bounds_a_hot_keys_server() {
    if !grpc::grpcio() {
        return;
    }
    let pki = pki();
    let a = grpc::Server::start_slow("a", None, None, 0.05);
    let b = grpc::Server::start_slow("b", None, None, 0.05);
    // One user, 8 calls in flight at a time: all on its server, unless the factor bounds
    // a server to 125 % of the average in flight (5 of 8).
    for factor in [0, 125] {
        let keys =
            format!(";proto=h2;balance=hash;hash-key=header:x-user;hash-balance-factor={factor}");
        let s = shuck(&pki, &[&a, &b], &keys, &[]);
        let v = call(s.port, &pki.cert, "load", &["160", "8", "unary", "hot"]);
        assert_eq!(v["codes"]["OK"], 160, "{v}");
        let (on_a, on_b) = (count(&v, "a"), count(&v, "b"));
        if factor == 0 {
            assert!(on_a == 0 || on_b == 0, "no bound: one server: {v}");
        } else {
            assert!(
                on_a.min(on_b) >= 16,
                "bounded: the other server takes some: {v}"
            );
            assert!(
                on_a.max(on_b) > on_a.min(on_b),
                "the key's server most: {v}"
            );
        }
    }
}

#[test]
fn a_sticky_cookie_keeps_a_client_on_its_server_over_http1_http2_and_http3() {
    let one = H1Origin::start(None);
    let two = H1Origin::start(None);
    let backend = format!(
        "--named-backend=name=web;server={};server={};cookie=SRV",
        one.spec, two.spec
    );
    let dir = TempDir::new("cookies");
    let sock = dir.path("admin.sock");
    let s = Shuck::start(&[
        "--http",
        "--quic",
        "-b",
        "127.0.0.1:1",
        &backend,
        "--route=host=localhost;backend=web",
        "--admin-socket",
        sock.to_str().unwrap(),
    ]);
    let seen = |o: &H1Origin| o.seen.lock().unwrap().len();
    for version in ["--http1.1", "--http2"] {
        let jar = dir.path(&format!("jar{version}"));
        let (a0, b0) = (seen(&one), seen(&two));
        let mut set = 0;
        for _ in 0..8 {
            // A new connection each time: the cookie alone keeps the server.
            let out = sh_out(&format!(
                "curl -sk {version} -i -c {j} -b {j} --resolve localhost:{p}:127.0.0.1 https://localhost:{p}/",
                j = jar.display(),
                p = s.port
            ));
            assert!(out.contains(" 200"), "{out}");
            set += usize::from(out.to_ascii_lowercase().contains("set-cookie: srv="));
        }
        let (a, b) = (seen(&one) - a0, seen(&two) - b0);
        assert!(
            (a, b) == (8, 0) || (a, b) == (0, 8),
            "{version}: {a} and {b}"
        );
        assert_eq!(set, 1, "{version}: the cookie is set once, then sent back");
    }
    // HTTP/3 (aioquic): the cookie set on the first connection's answer keeps the next
    // seven connections on that server.
    if common::h3::aioquic() {
        use common::h3::{answers, h3, header};
        let (a0, b0) = (seen(&one), seen(&two));
        let first = h3(s.port, serde_json::json!([{ "path": "/" }]), &[]);
        let set = header(&answers(&first)[0], "set-cookie").unwrap_or_else(|| panic!("{first}"));
        let cookie = set.split(';').next().unwrap().to_owned();
        for _ in 0..7 {
            let req = serde_json::json!([{ "path": "/", "headers": [["cookie", cookie]] }]);
            let report = h3(s.port, req, &[]);
            let a = &answers(&report)[0];
            assert_eq!(a["status"], "200", "{report}");
            assert!(header(a, "set-cookie").is_none(), "set once: {report}");
        }
        let (a, b) = (seen(&one) - a0, seen(&two) - b0);
        assert!((a, b) == (8, 0) || (a, b) == (0, 8), "HTTP/3: {a} and {b}");
    }
    // Without cookies, both servers.
    let (a0, b0) = (seen(&one), seen(&two));
    for _ in 0..6 {
        sh_out(&format!(
            "curl -sk --resolve localhost:{p}:127.0.0.1 https://localhost:{p}/",
            p = s.port
        ));
    }
    assert!(seen(&one) > a0 && seen(&two) > b0);
    // The admin API names the method.
    let body = sh_out(&format!(
        "curl -s --unix-socket {} http://shuck/backends",
        sock.display()
    ));
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let web = v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "web")
        .unwrap();
    assert_eq!(web["balance"], "roundrobin", "{web}");
    assert_eq!(web["cookie"], "SRV", "{web}");
}

#[test]
fn hash_follows_each_request_of_a_connection_by_path_cookie_or_source() {
    let one = H1Origin::start(None);
    let two = H1Origin::start(None);
    const KEYS: usize = 16;
    for key in ["path", "cookie:uid", "source"] {
        let backend = format!(
            "--named-backend=name=web;server={};server={};balance=hash;hash-key={key}",
            one.spec, two.spec
        );
        let s = Shuck::start(&[
            "--http",
            "-b",
            "127.0.0.1:1",
            &backend,
            "--route=host=localhost;backend=web",
        ]);
        one.seen.lock().unwrap().clear();
        two.seen.lock().unwrap().clear();
        for version in ["--http1.1", "--http2"] {
            // One connection (curl reuses it across --next), each key twice.
            let requests: Vec<String> = (0..2 * KEYS)
                .map(|i| {
                    let k = i % KEYS;
                    let cookie = format!("-b uid=k{k}");
                    format!(
                        "-sk {version} -o /dev/null --resolve localhost:{p}:127.0.0.1 {c} https://localhost:{p}/k{k}",
                        p = s.port,
                        c = if key == "cookie:uid" { cookie.as_str() } else { "" },
                    )
                })
                .collect();
            let out = sh_out(&format!(
                "curl -w '%{{num_connects}}' {}",
                requests.join(" --next ")
            ));
            assert_eq!(
                out.matches('1').count(),
                1,
                "{version}: one connection: {out}"
            );
        }
        // Each key's requests, over both versions, on one server.
        let on = |o: &H1Origin, k: usize| {
            let path = format!("/k{k}");
            o.seen
                .lock()
                .unwrap()
                .iter()
                .filter(|r| r.path == path)
                .count()
        };
        let mut used = [0, 0];
        for k in 0..KEYS {
            let (a, b) = (on(&one, k), on(&two, k));
            assert!(
                (a, b) == (4, 0) || (a, b) == (0, 4),
                "hash-key={key}: k{k} went {a} to one, {b} to two"
            );
            used[usize::from(b > 0)] += 1;
        }
        if key == "source" {
            assert!(used.contains(&0), "one client, one server: {used:?}");
        } else {
            assert!(used[0] > 0 && used[1] > 0, "hash-key={key}: {used:?}");
        }
    }
}

#[test]
fn balancing_settings_are_checked() {
    for (spec, http, want) in [
        (
            "balance=random",
            true,
            "expected roundrobin, leastconn, least-requests or hash",
        ),
        ("hash-key=path", true, "hash-key needs balance = hash"),
        (
            "balance=hash;hash-key=url",
            true,
            "expected source, path, header:NAME or cookie:NAME",
        ),
        (
            "balance=hash;hash-balance-factor=50",
            true,
            "from 100 to 10000",
        ),
        ("cookie=a;b", true, "expected key=value"),
        (
            "cookie=SRV",
            false,
            "cookie reads requests: it needs --http",
        ),
        ("balance=hash;hash-key=path", false, "it needs --http"),
    ] {
        let spec = format!("name=b;server=127.0.0.1:9;{spec}");
        let (code, out) = test_backend(&spec, if http { &["--http"] } else { &[] });
        assert_ne!(code, Some(0), "{spec}: accepted\n{out}");
        assert!(out.contains(want), "{spec}: {out}");
    }
    // In TCP mode, hash by source is what a connection has.
    let (code, out) = test_backend("name=b;server=127.0.0.1:9;balance=hash", &[]);
    assert_eq!(code, Some(0), "{out}");
}

/// The unkeyed id an earlier shuck gave a server named `name` (FNV-1a, then splitmix64's
/// finaliser): what anyone could compute from a guess of the name.
fn unkeyed_id(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name.as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[test]
fn a_sticky_cookie_names_its_server_under_a_key() {
    // Issue 60, point 10: a server without name= was named in its cookie by an unkeyed
    // hash of its address, recovered offline from a guess.
    let one = H1Origin::start(None);
    let backend = format!("--named-backend=name=web;server={};cookie=SRV", one.spec);
    let dir = TempDir::new("cookie-key");
    let key = common::netns::key_file(&dir);
    let cookie_of = |extra: &[&str]| {
        let mut args = vec![
            "--http",
            "-b",
            "127.0.0.1:1",
            &backend,
            "--route=host=localhost;backend=web",
        ];
        args.extend_from_slice(extra);
        let s = Shuck::start(&args);
        let out = sh_out(&format!(
            "curl -sk -i --resolve localhost:{p}:127.0.0.1 https://localhost:{p}/",
            p = s.port
        ));
        let line = out
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("set-cookie: srv="))
            .unwrap_or_else(|| panic!("{out}"))
            .to_owned();
        let v = line.split_once('=').unwrap().1.split(';').next().unwrap();
        u64::from_str_radix(v, 16).unwrap()
    };
    let port = one.spec.rsplit(':').next().unwrap();
    let plain = cookie_of(&[]);
    for name in [
        one.spec.clone(),
        format!("127.0.0.1:{port}"),
        format!("[127.0.0.1]:{port}"),
    ] {
        assert_ne!(plain, unkeyed_id(&name), "{name}");
    }
    // Two hosts of a farm (one key) name the server alike; without it, a key per start.
    let farm = |port: &str| {
        cookie_of(&[
            "--shared-cache-key",
            key.as_str(),
            "-U",
            &format!("[127.0.0.1]:{port}"),
        ])
    };
    let (u1, u2) = (free_port().to_string(), free_port().to_string());
    assert_eq!(farm(&u1), farm(&u2));
    assert_ne!(cookie_of(&[]), plain);
}
