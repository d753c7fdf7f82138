//! Entry points for the fuzz targets (`fuzz/`) and for the test that replays their corpora
//! on stable Rust (`tests/fuzz_corpus.rs`): each hands bytes from outside to one parser as
//! the data path or the configuration loader does. None may panic, whatever the bytes.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use crate::proxy::http::chunked::Chunked;
use crate::proxy::http::{Exchange, RequestRewriter, ResponseTracker};

/// A parser's entry point: bytes in, nothing out but a panic if it has a bug.
pub type Entry = fn(&[u8]);

/// The targets, by name (the fuzz target's and the corpus directory's).
pub const TARGETS: &[(&str, Entry)] = &[
    ("proxy_header", proxy_header),
    ("http_request", http_request),
    ("http_response", http_response),
    ("chunked", chunked),
    ("config_file", config_file),
];

/// A PROXY v1/v2 header from the client side (`--proxy-proxy`).
pub fn proxy_header(data: &[u8]) {
    let _ = crate::proxy::preamble::parse_received(data);
}

/// Request heads and bodies through the `--http` rewriter, whole and in small pieces.
pub fn http_request(data: &[u8]) {
    for step in [data.len().max(1), 7, 1] {
        let mut r = RequestRewriter::with_client_cert(
            IpAddr::V4(Ipv4Addr::new(203, 0, 113, 5)),
            1024,
            Some(("X-Client-Cert", Some("CN=fuzz"))),
        );
        let mut ex = Exchange::new();
        let mut out = Vec::new();
        for part in data.chunks(step) {
            if r.feed(part, &mut out, &mut ex).is_err() {
                break;
            }
        }
    }
}

/// Response heads and bodies through the `--http` tracker.
pub fn http_response(data: &[u8]) {
    let mut t = ResponseTracker::new(1024);
    let mut ex = Exchange::new();
    for part in data.chunks(5) {
        // A request outstanding for each response, as when the client pipelines.
        ex.pending.push_back(crate::proxy::http::Pending::Normal);
        t.observe(part, &mut ex);
    }
}

/// A chunked body.
pub fn chunked(data: &[u8]) {
    let mut c = Chunked::new();
    let mut at = 0;
    while at < data.len() && !c.is_done() {
        match c.advance(&data[at..]) {
            Ok(n) => at += n,
            Err(_) => return,
        }
    }
}

/// A hitch.conf-style configuration file, parsed and turned into flags.
pub fn config_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(entries) = crate::config::file::parse(text) {
        let _ = crate::config::file::to_args(Path::new("fuzz.conf"), &entries, &|_| false);
    }
}
