//! The request side's rules, fed a few bytes at a time.
use super::*;

fn rewrite(input: &[u8]) -> Result<String, Rejected> {
    let mut r = RequestRewriter::new("203.0.113.5".parse().unwrap(), 16 * 1024);
    let mut ex = Exchange::new();
    let mut out = Vec::new();
    for part in input.chunks(5) {
        r.feed(part, &mut out, &mut ex)?;
    }
    Ok(String::from_utf8(out).unwrap())
}

#[test]
fn host_rules_of_rfc_9112() {
    for (input, why) in [
        (&b"GET / HTTP/1.1\r\n\r\n"[..], "no Host"),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "more than one Host",
        ),
        (
            b"GET / HTTP/1.0\r\nHost: a\r\nhost: a\r\n\r\n",
            "more than one Host",
        ),
        (
            b"GET http://b/x HTTP/1.1\r\nHost: a\r\n\r\n",
            "different authorities",
        ),
        (b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", "character"),
        (b"GET / HTTP/1.1\r\nHost: a,b\r\n\r\n", "character"),
        (b"GET / HTTP/1.1\r\nHost: evil.test/x\r\n\r\n", "character"),
        (b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", "character"),
        (b"GET / HTTP/1.1\r\nHost: b\xc3\xbccher\r\n\r\n", "character"),
        (b"GET / HTTP/1.1\r\nHost: a:65536\r\n\r\n", "port"),
        (b"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", "IP literal"),
        (b"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", "bare LF or CR"),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nContent-Length: 5\r\n\r\n",
            "Content-Length or Transfer-Encoding in a trailer",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\ntransfer-encoding: gzip\r\n\r\n",
            "Content-Length or Transfer-Encoding in a trailer",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: a\x00b\r\n\r\n",
            "malformed trailer",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nnot a field\r\n\r\n",
            "malformed trailer",
        ),
    ] {
        let e = rewrite(input).unwrap_err();
        assert!(
            e.0.contains(why),
            "{:?}: {e}",
            String::from_utf8_lossy(input)
        );
    }
    assert!(rewrite(b"GET / HTTP/1.0\r\n\r\n").is_ok());
    assert!(rewrite(b"GET HTTP://A:80/x HTTP/1.1\r\nHost: a:80\r\n\r\n").is_ok());
    assert!(rewrite(b"GET / HTTP/1.1\r\nHost: [::1]:8443\r\n\r\n").is_ok());
    assert!(rewrite(b"GET / HTTP/1.1\r\nHost: \r\n\r\n").is_ok());
}

#[test]
fn forwarding_fields_are_removed_from_chunked_trailers() {
    let out = rewrite(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Forwarded-For: 6.6.6.6\r\nX-Sum: 1\r\nforwarded: for=6.6.6.6\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    assert!(!out.contains("6.6.6.6"), "{out}");
    assert!(
        out.contains("3\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\nGET / HTTP/1.1"),
        "{out}"
    );
}

#[test]
fn forwarding_headers_are_removed_by_any_spelling_and_not_nominated() {
    let out = rewrite(b"GET / HTTP/1.1\r\nHost: a\r\nX_Forwarded_For: 1.2.3.4\r\nx-FORWARDED_proto: http\r\nConnection: close, X-Forwarded-For, x_forwarded_proto\r\n\r\n").unwrap();
    assert_eq!(out, "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nX-Forwarded-For: 203.0.113.5\r\nX-Forwarded-Proto: https\r\n\r\n");
    let out = rewrite(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Forwarded\r\n\r\n").unwrap();
    assert!(!out.contains("Connection"), "{out}");
}

#[test]
fn strips_and_injects() {
    let out = rewrite(b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\r\nx-forwarded-proto: http\r\nForwarded: for=1.2.3.4\r\n\r\n").unwrap();
    assert_eq!(out, "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.5\r\nX-Forwarded-Proto: https\r\n\r\n");
}

#[test]
fn bodies_and_pipelining_pass_intact() {
    let input = b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloPOST /b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /c HTTP/1.1\r\nHost: a\r\n\r\n";
    let out = rewrite(input).unwrap();
    assert_eq!(out.matches("X-Forwarded-For: 203.0.113.5").count(), 3);
    assert!(out.contains("\r\n\r\nhelloPOST /b"));
    assert!(out.contains("\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /c"));
}

#[test]
fn smuggling_and_malformed_heads_are_refused() {
    for (bad, why) in [
        (
            &b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            "both",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            "conflicting",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\n",
            "Content-Length",
        ),
        (b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", "malformed"),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            "transfer coding",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "transfer coding",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "chunked twice",
        ),
        (
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "Transfer-Encoding",
        ),
        (b"GARBAGE\r\n\r\n", "malformed"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n", "malformed"),
        (b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n", "CONNECT"),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "chunk",
        ),
    ] {
        let e = rewrite(bad).unwrap_err();
        assert!(e.0.contains(why), "{:?}: {e}", String::from_utf8_lossy(bad));
    }
    let big = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    assert!(rewrite(big.as_bytes()).unwrap_err().0.contains("too large"));
    // An identical duplicate Content-Length is accepted and passed once.
    let out =
        rewrite(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok")
            .unwrap();
    assert_eq!(out.matches("Content-Length").count(), 1);
}

#[test]
fn h2c_is_never_an_upgrade() {
    let e = rewrite(b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n").unwrap_err();
    assert!(e.0.contains("h2c"), "{e}");
    let e = rewrite(b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: H2C/1\r\nConnection: Upgrade\r\n\r\n")
        .unwrap_err();
    assert!(e.0.contains("h2c"), "{e}");
    // Beside another protocol, only its token and its settings go.
    let out = rewrite(b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c, websocket\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n").unwrap();
    assert!(out.contains("\r\nUpgrade: websocket\r\n"), "{out}");
    assert!(!out.to_ascii_lowercase().contains("h2c"), "{out}");
    assert!(!out.contains("HTTP2-Settings: "), "{out}");
}

#[test]
fn upgrade_holds_bytes_until_answered() {
    let mut r = RequestRewriter::new("203.0.113.5".parse().unwrap(), 16 * 1024);
    let mut ex = Exchange::new();
    let mut out = Vec::new();
    r.feed(b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\r\nFRAME", &mut out, &mut ex).unwrap();
    assert!(r.is_holding());
    assert!(!String::from_utf8_lossy(&out).contains("FRAME"));
    // Accepted (the response side saw 101): the held bytes and what follows pass as is.
    ex.upgrade = Upgrade::Tunnel;
    r.feed(b"MORE", &mut out, &mut ex).unwrap();
    assert!(r.is_tunnel());
    assert!(String::from_utf8_lossy(&out).ends_with("FRAMEMORE"));
}
