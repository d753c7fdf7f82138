//! What a line says in each format, whatever a client sent.

use super::*;
use crate::access::record::{Cause, Conn, Said, Timings};

pub(in crate::access) fn conn() -> Conn {
    Conn {
        client: "192.0.2.7:40000".parse().unwrap(),
        frontend: "*:443".into(),
        sni: Some("www.example.com".into()),
        tls_version: Some("TLSv1.3"),
        cipher: Some("TLS13_AES_128_GCM_SHA256"),
        resumed: Some(false),
        protocol: "HTTP/2.0",
        handshake_us: Some(900),
        sink: 0,
        rendered: Default::default(),
    }
}

pub(in crate::access) fn rec<'a>(c: &'a Conn, path: &'a [u8], ua: &'a [u8]) -> Record<'a> {
    Record {
        start_us: 1_795_851_901_000_042,
        conn: c,
        method: b"GET",
        authority: b"www.example.com",
        path,
        upstream_uri: b"",
        user_agent: ua,
        referer: b"",
        status: 200,
        bytes_in: 40,
        bytes_out: 1234,
        backend: Some("default"),
        server: Some("127.0.0.1:8080"),
        retries: 0,
        request_id: b"",
        client: None,
        timings: Timings {
            total: 1500,
            ..Timings::default()
        },
        cause: Cause::Normal,
        plain: false,
    }
}

#[test]
fn combined_is_nginx_s_line_and_escapes_what_a_client_sends() {
    let c = conn();
    let mut out = Vec::new();
    Format::Combined.write(&rec(&c, b"/a\"b\n\\c\xff", b"curl/8"), &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "192.0.2.7 - - [28/Nov/2026:07:45:01 +0000] \"GET /a\\x22b\\x0A\\x5Cc\\xFF HTTP/2.0\" 200 1234 \"-\" \"curl/8\"\n"
    );
}

#[test]
fn json_lines_parse_for_any_bytes() {
    let c = conn();
    let junk: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    for path in [
        &b"/plain"[..],
        b"/\"\\\n\r\t\x00\x7f",
        b"/\xc3\xa9\xff\xfe",
        &junk,
    ] {
        let mut out = Vec::new();
        Format::Json.write(&rec(&c, path, &junk), &mut out);
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
        assert!(out.len() < 3 * 4 * FIELD_CAP, "{} bytes", out.len());
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["status"], 200);
        assert_eq!(v["remote_addr"], "192.0.2.7");
        assert_eq!(v["time"], "2026-11-28T07:45:01.000042Z");
        assert_eq!(v["upstream_addr"], "127.0.0.1:8080");
        assert_eq!(v["connect_us"], serde_json::Value::Null);
        assert_eq!(v["termination_state"], "--");
    }
    let mut out = Vec::new();
    Format::Json.write(&rec(&c, b"/\xc3\xa9\xff", b""), &mut out);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["request_uri"], "/\u{e9}\\xFF");
}

#[test]
fn fields_kept_by_said_are_escaped_unless_plain() {
    let c = conn();
    for (ua, plain) in [
        (&b"curl/8.5"[..], true),
        (b"a\"quote", false),
        (b"back\\slash", false),
        (b"new\nline", false),
        (b"\xff", false),
    ] {
        let said = Said::new([b"GET", b"example.com", b"/p?q=1", ua, b"", b"id-1"]);
        let rec = said.record(&c, 1_795_851_901_000_042, Cause::Normal);
        assert_eq!(rec.plain, plain, "{ua:?}");
        let mut out = Vec::new();
        Format::Json.write(&rec, &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let back = v["http_user_agent"].as_str().unwrap();
        if ua != b"\xff" {
            assert_eq!(back.as_bytes(), ua);
        }
        assert_eq!(v["request_uri"], "/p?q=1");
        assert_eq!(v["request_id"], "id-1");
        let mut out = Vec::new();
        Format::Combined.write(&rec, &mut out);
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
        assert!(out.starts_with(b"192.0.2.7 - - ["));
        assert!(String::from_utf8_lossy(&out).contains("\"GET /p?q=1 HTTP/2.0\" - 0 \"-\""));
    }
}

#[test]
fn a_connection_s_lines_each_show_their_own_request_s_shared_fields() {
    let c = conn();
    let json = |r: &Record<'_>| {
        let mut out = Vec::new();
        Format::Json.write(r, &mut out);
        serde_json::from_slice::<serde_json::Value>(&out).unwrap()
    };
    let base = rec(&c, b"/", b"agent/1");
    // Each shared field changed alone, then back: a line that copied the last line's
    // fields without comparing this one fails here.
    let steps: Vec<(Record<'_>, &str, serde_json::Value)> = vec![
        (base, "http_user_agent", "agent/1".into()),
        (base, "http_user_agent", "agent/1".into()),
        (
            Record {
                user_agent: b"agent/2",
                ..base
            },
            "http_user_agent",
            "agent/2".into(),
        ),
        (
            Record {
                method: b"POST",
                ..base
            },
            "request_method",
            "POST".into(),
        ),
        // The same bytes split otherwise between two fields.
        (
            Record {
                method: b"GETw",
                authority: b"ww.example.com",
                ..base
            },
            "host",
            "ww.example.com".into(),
        ),
        (
            Record {
                backend: None,
                ..base
            },
            "backend",
            serde_json::Value::Null,
        ),
        (
            Record {
                backend: Some("other"),
                ..base
            },
            "backend",
            "other".into(),
        ),
        (
            Record {
                server: None,
                ..base
            },
            "upstream_addr",
            serde_json::Value::Null,
        ),
        (
            Record {
                server: Some("[::1]:8080"),
                ..base
            },
            "upstream_addr",
            "[::1]:8080".into(),
        ),
        (
            Record {
                referer: b"https://a/",
                ..base
            },
            "http_referer",
            "https://a/".into(),
        ),
        (
            Record {
                referer: b"new\nline",
                plain: false,
                ..base
            },
            "http_referer",
            "new\nline".into(),
        ),
        (base, "http_referer", "".into()),
    ];
    for (i, (r, key, want)) in steps.iter().enumerate() {
        let v = json(r);
        assert_eq!(v[*key], *want, "line {i}: {v}");
        assert_eq!(
            v["request_method"],
            String::from_utf8_lossy(r.method).as_ref(),
            "line {i}"
        );
        assert_eq!(
            v["host"],
            String::from_utf8_lossy(r.authority).as_ref(),
            "line {i}"
        );
        assert_eq!(v["remote_addr"], "192.0.2.7", "line {i}");
    }
}

#[test]
fn every_shared_field_is_compared_by_its_own_value() {
    // A shared field `shared` gave no value would compare as equal whatever its request
    // said, and a connection's lines would repeat its first value.
    let c = conn();
    let r = rec(&c, b"/", b"agent/1");
    for f in SHARED_FIELDS {
        assert!(shared(&r, *f).is_some(), "{f:?} has no value to compare");
    }
}

#[test]
fn a_line_never_outgrows_its_bound() {
    let mut c = conn();
    c.frontend = "\u{1}".repeat(300);
    c.sni = Some("\u{1}".repeat(300));
    let worst = [
        vec![1u8; 3 * FIELD_CAP],
        vec![0xff; 3 * FIELD_CAP],
        vec![b'"'; 40],
    ];
    let server = "\u{1}".repeat(500);
    let every: String = FIELDS.iter().map(|f| format!("{{{}}} ", f.0)).collect();
    for format in [Format::Json, Format::Combined, every.parse().unwrap()] {
        for bytes in &worst {
            let r = Record {
                method: bytes,
                authority: bytes,
                user_agent: bytes,
                referer: bytes,
                request_id: bytes,
                server: Some(&server),
                backend: Some("a-backend.name_1"),
                ..rec(&c, bytes, bytes)
            };
            let bound = format.bound(&r);
            let mut room = vec![0; bound];
            let n = format.write_into(&r, &mut room);
            assert!(
                n.is_some_and(|n| n <= bound),
                "{format:?}: {n:?} of {bound}"
            );
            // One byte less than a line's length is refused, not overrun.
            let n = n.unwrap();
            let mut short = vec![0; n - 1];
            assert_eq!(format.write_into(&r, &mut short), None);
        }
    }
}

#[test]
fn a_client_a_trusted_proxy_named_has_no_port_of_the_peers() {
    let c = conn();
    let mut r = rec(&c, b"/behind", b"");
    r.client = Some("203.0.113.9".parse().unwrap());
    let mut out = Vec::new();
    Format::Json.write(&r, &mut out);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["remote_addr"], "203.0.113.9");
    assert_eq!(v["remote_port"], serde_json::Value::Null);
    let t: Format = "{remote_addr}:{remote_port}".parse().unwrap();
    let mut out = Vec::new();
    t.write(&r, &mut out);
    assert_eq!(out, b"203.0.113.9:-\n");
    r.client = None;
    let mut out = Vec::new();
    t.write(&r, &mut out);
    assert_eq!(out, b"192.0.2.7:40000\n");
}
