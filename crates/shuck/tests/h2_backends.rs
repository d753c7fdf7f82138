//! The HTTP/2 gateway's keep-alive backend connections against backends and clients that
//! misbehave: bytes a backend writes past its answer never answer the next stream, a
//! connection the backend closed while idle is never chosen, a request is sent again only
//! when RFC 9110 allows it, and streams that make no progress give their backend
//! connection back after --http-stall-timeout, with at most --http-max-backend-conns per
//! client connection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::h1origin::H1Origin;
use common::h2c;
use common::*;

/// shuck in --http mode before `origin`, with its metrics on a port of their own.
fn gateway(origin: &H1Origin, extra: &[&str]) -> (Shuck, u16) {
    let stats = free_port();
    let stats_s = stats.to_string();
    let mut args = vec!["--http", "-n", "1", "-b", &origin.spec, "--stats", &stats_s];
    args.extend_from_slice(extra);
    (Shuck::start(&args), stats)
}

fn metric(stats: u16, series: &str) -> f64 {
    sample(&scrape(stats, "/metrics").1, series)
}

/// Waits until `series` reads `want` (counters are written as the event happens, scraped
/// from another thread).
fn wait_metric(stats: u16, series: &str, want: f64) {
    let ok = wait_until(Duration::from_secs(5), || metric(stats, series) == want);
    assert!(ok, "{series} is {}, not {want}", metric(stats, series));
}

async fn request(
    send: &h2::client::SendRequest<Bytes>,
    method: &str,
    path: &str,
    body: Option<&'static [u8]>,
) -> (u16, Vec<u8>) {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("https://localhost{path}"))
        .body(())
        .unwrap();
    let mut send = send.clone().ready().await.unwrap();
    let (resp, mut up) = send.send_request(req, body.is_none()).unwrap();
    if let Some(b) = body {
        up.send_data(Bytes::from_static(b), true).unwrap();
    }
    let resp = tokio::time::timeout(Duration::from_secs(10), resp)
        .await
        .expect("answered within 10 s")
        .unwrap();
    let status = resp.status().as_u16();
    (status, h2c::read_body(resp.into_body()).await.unwrap())
}

/// `n` GETs of `path` at once on one client connection; their statuses and bodies.
async fn at_once(
    send: &h2::client::SendRequest<Bytes>,
    n: usize,
    path: &'static str,
) -> Vec<(u16, Vec<u8>)> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let s = send.clone();
            tokio::spawn(async move { request(&s, "GET", path, None).await })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    answers
}

/// Waits up to `within` for the backend to have no connection open.
fn all_closed(origin: &H1Origin, within: Duration) -> bool {
    wait_until(within, || origin.open.load(Ordering::SeqCst) == 0)
}

#[tokio::test]
async fn bytes_past_an_answer_never_answer_the_next_stream() {
    let origin = H1Origin::start(None);
    let (shuck, stats) = gateway(&origin, &[]);
    let (send, _conn) = h2c::connect(shuck.addr()).await;
    // HEAD, then a body 200 ms after its head; GET, then a second answer 200 ms after.
    for (method, path) in [("HEAD", "/stray"), ("GET", "/stray")] {
        let (status, _) = request(&send, method, path, None).await;
        assert_eq!(status, 200, "{method} {path}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (status, body) = request(&send, "GET", "/one", None).await;
        assert_eq!(
            (status, &body[..]),
            (200, &b"127.0.0.1"[..]),
            "after {method} {path}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    // More body than the Content-Length said, in the same packet: cut off, then dropped.
    let (status, body) = request(&send, "GET", "/short", None).await;
    assert_eq!((status, &body[..]), (200, &b"ok"[..]));
    let (status, body) = request(&send, "GET", "/two", None).await;
    assert_eq!((status, &body[..]), (200, &b"127.0.0.1"[..]));
    wait_metric(
        stats,
        "shuck_http_backend_dropped_total{reason=\"stray_bytes\"}",
        3.0,
    );
    let seen: Vec<String> = origin.requests().iter().map(|s| s.path.clone()).collect();
    assert_eq!(seen, ["/stray", "/one", "/stray", "/one", "/short", "/two"]);
    assert_eq!(
        origin.conns.load(Ordering::SeqCst),
        4,
        "a new connection after each stray"
    );
}

/// A client connection's idle backend connections close with it.
#[tokio::test]
async fn idle_backend_connections_close_with_their_client() {
    let origin = H1Origin::start(None);
    let (shuck, _stats) = gateway(&origin, &["--log-connections"]);
    {
        let (send, conn) = h2c::connect(shuck.addr()).await;
        for (status, _) in at_once(&send, 4, "/slow/100").await {
            assert_eq!(status, 200);
        }
        assert!(
            origin.open.load(Ordering::SeqCst) >= 2,
            "connections kept idle"
        );
        drop(send);
        conn.abort();
        let _ = conn.await; // the client's socket is closed as its task ends
    }
    assert!(
        all_closed(&origin, Duration::from_secs(5)),
        "{} backend connections outlived their client: {}",
        origin.open.load(Ordering::SeqCst),
        shuck.log()
    );
}

#[tokio::test]
async fn a_connection_closed_while_idle_is_never_chosen() {
    // The backend closes connections idle for 1 s, as its keep-alive timeout.
    let origin = H1Origin::start_with(None, Some(Duration::from_secs(1)));
    let (shuck, stats) = gateway(&origin, &[]);
    let (send, _conn) = h2c::connect(shuck.addr()).await;
    assert_eq!(request(&send, "GET", "/", None).await.0, 200);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Dropped as the backend closed it, before any stream wanted it.
    wait_metric(
        stats,
        "shuck_http_backend_dropped_total{reason=\"closed_idle\"}",
        1.0,
    );
    let (status, body) = request(&send, "POST", "/sum", Some(b"hello")).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(
        body.starts_with(b"5 "),
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(metric(stats, "shuck_http_retries_total"), 0.0);
    let posts = origin
        .requests()
        .iter()
        .filter(|s| s.method == "POST")
        .count();
    assert_eq!(posts, 1);
}

#[tokio::test]
async fn only_idempotent_requests_are_sent_again() {
    let origin = H1Origin::start(None);
    let (shuck, stats) = gateway(&origin, &[]);
    let (send, _conn) = h2c::connect(shuck.addr()).await;
    let count = |path: &str| origin.requests().iter().filter(|s| s.path == path).count();
    // Each on a reused connection that the backend takes the request on and closes.
    assert_eq!(request(&send, "GET", "/", None).await.0, 200);
    let (status, _) = request(&send, "POST", "/flaky/post", None).await;
    assert_eq!(status, 502, "a POST answered nothing is never sent twice");
    assert_eq!(count("/flaky/post"), 1);
    assert!(
        shuck.wait_log("answered 502", Duration::from_secs(5)),
        "{}",
        shuck.log()
    );
    for method in ["GET", "DELETE", "PUT", "OPTIONS"] {
        assert_eq!(request(&send, "GET", "/", None).await.0, 200);
        let path = format!("/flaky/{method}");
        let (status, body) = request(&send, method, &path, None).await;
        assert_eq!((status, &body[..]), (200, &b"flaky"[..]), "{method}");
        assert_eq!(count(&path), 2, "{method} sent again once");
    }
    wait_metric(stats, "shuck_http_retries_total", 4.0);
    // A PUT with a body was streamed, not kept: it is not sent twice either.
    assert_eq!(request(&send, "GET", "/", None).await.0, 200);
    let (status, _) = request(&send, "PUT", "/flaky/put-body", Some(b"data")).await;
    assert_eq!(status, 502);
    assert_eq!(count("/flaky/put-body"), 1);
}

#[tokio::test]
async fn stalled_streams_give_their_backend_connections_back() {
    let origin = H1Origin::start(None);
    let (shuck, stats) = gateway(
        &origin,
        &["--http-stall-timeout", "1", "--http-max-backend-conns", "4"],
    );
    let (send, _conn) = h2c::connect(shuck.addr()).await;
    // Ten POSTs that declare a body and never send it: at most four backend connections
    // at once, each given back a stall timeout later with its stream reset; and once more
    // streams have stalled in a row than the client has backend connections (issue 45,
    // point 10), the client is hostile: GOAWAY ENHANCE_YOUR_CALM, and the streams that
    // were waiting never take a backend connection.
    let started = Instant::now();
    let mut held = Vec::new();
    let mut answers = Vec::new();
    for i in 0..10 {
        let req = http::Request::post(format!("https://localhost/post/{i}"))
            .header("content-length", "100")
            .body(())
            .unwrap();
        let mut s = send.clone().ready().await.unwrap();
        let (resp, up) = s.send_request(req, false).unwrap();
        held.push(up);
        answers.push(resp);
    }
    let mut reasons = Vec::new();
    for resp in answers {
        let e = tokio::time::timeout(Duration::from_secs(10), resp)
            .await
            .expect("ended within 10 s")
            .expect_err("a stalled stream is reset");
        reasons.push(e.reason());
    }
    let took = started.elapsed();
    let cancel = Some(h2::Reason::CANCEL);
    assert_eq!(reasons[..4], [cancel; 4], "the first wave: {reasons:?}");
    wait_metric(
        stats,
        "shuck_h2_goaway_total{reason=\"enhance_your_calm\"}",
        1.0,
    );
    // Two waves of at most four, a second each, then the GOAWAY.
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(6),
        "{took:?}"
    );
    // One connection each for the two waves; the streams waiting when the fifth stall
    // ended the connection take none of the slots the stalls free.
    assert_eq!(
        origin.conns.load(Ordering::SeqCst),
        8,
        "none for the streams after the GOAWAY"
    );
    assert!(
        all_closed(&origin, Duration::from_secs(3)),
        "backend connections closed"
    );
    // Counted once the connection is gone: the fifth stall ended it (the flood), and each
    // of the second wave's others counts if its timer fell before the close, in the same
    // second (all of them on an idle machine; under load, some end with the connection).
    let stalled = metric(stats, "shuck_http_stalled_total{protocol=\"h2\"}");
    assert!(
        (5.0..=8.0).contains(&stalled),
        "{stalled} streams counted stalled"
    );
    drop(held);

    // A client that never opens its window for a large answer: reset, connection closed.
    let tls = h2c::tls_h2(shuck.addr()).await;
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, Bytes>(tls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get("https://localhost/size/1000000")
        .body(())
        .unwrap();
    let (resp, _) = send.ready().await.unwrap().send_request(req, true).unwrap();
    let resp = resp.await.unwrap();
    let mut body = resp.into_body();
    let e = tokio::time::timeout(Duration::from_secs(5), body.data())
        .await
        .expect("reset within 5 s")
        .expect("an end")
        .expect_err("a reset");
    assert_eq!(e.reason(), Some(h2::Reason::CANCEL), "{e}");
    wait_metric(
        stats,
        "shuck_http_stalled_total{protocol=\"h2\"}",
        stalled + 1.0,
    );
    assert!(
        all_closed(&origin, Duration::from_secs(3)),
        "its backend connection closed"
    );

    // Within the cap, streams are served in order over the client's four connections.
    let (send, _conn) = h2c::connect(shuck.addr()).await;
    origin.max_open.store(0, Ordering::SeqCst);
    for answer in at_once(&send, 12, "/slow/200").await {
        assert_eq!(answer, (200, b"slow".to_vec()));
    }
    assert!(origin.max_open.load(Ordering::SeqCst) <= 4, "the cap held");
}

#[tokio::test]
async fn streams_whose_windows_stay_shut_end_in_goaway_over_http1_backends() {
    // Issue 60, point 4: answers the client never lets in held the client's backend
    // connections wave after wave, as each stalled stream's end counted as an answer.
    let origin = H1Origin::start(None);
    let (shuck, stats) = gateway(
        &origin,
        &["--http-stall-timeout", "1", "--http-max-backend-conns", "4"],
    );
    let tls = h2c::tls_h2(shuck.addr()).await;
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, Bytes>(tls)
        .await
        .unwrap();
    let driver = tokio::spawn(conn);
    let started = Instant::now();
    let mut bodies = Vec::new();
    for i in 0..30 {
        let req = http::Request::get(format!("https://localhost/size/{}", 100_000 + i))
            .body(())
            .unwrap();
        let mut s = send.clone().ready().await.unwrap();
        let (resp, _) = s.send_request(req, true).unwrap();
        bodies.push(resp);
    }
    // The connection ends with GOAWAY ENHANCE_YOUR_CALM once more than four streams have
    // stalled in a row: after the second wave, never a third.
    let ended = tokio::time::timeout(Duration::from_secs(10), driver)
        .await
        .expect("the connection ended within 10 s")
        .unwrap();
    let e = ended.expect_err("ended by shuck's GOAWAY");
    assert_eq!(e.reason(), Some(h2::Reason::ENHANCE_YOUR_CALM), "{e}");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(4), "{took:?}");
    wait_metric(
        stats,
        "shuck_h2_goaway_total{reason=\"enhance_your_calm\"}",
        1.0,
    );
    assert!(
        origin.conns.load(Ordering::SeqCst) <= 8,
        "two waves of four at most: {}",
        origin.conns.load(Ordering::SeqCst)
    );
    assert!(
        all_closed(&origin, Duration::from_secs(3)),
        "its backend connections let go"
    );
    drop(bodies);
}
