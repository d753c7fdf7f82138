//! Formats one access log line many times, for counting a line's instructions apart from
//! a request's: `valgrind --tool=callgrind --toggle-collect='*access_line::lines*'
//! target/release/examples/access_line json 100000` (bench/callgrind-line.sh).

use std::hint::black_box;

use shuck::access::record::Said;
use shuck::access::{Cause, Conn, Format, Timings};

/// Writes `n` lines of `format` as a worker thread would, handing on every 1 MiB.
#[inline(never)]
fn lines(format: &Format, said: &Said, conn: &Conn, n: u64) -> usize {
    let mut out = vec![0; 1024 * 1024 + 64 * 1024];
    let mut used = 0;
    let mut total = 0;
    for i in 0..n {
        let rec = shuck::access::Record {
            status: 200,
            bytes_in: 0,
            bytes_out: black_box(i & 0xfff),
            backend: Some("default"),
            server: Some("127.0.0.1:39001"),
            retries: 0,
            timings: Timings {
                queue: Some(0),
                connect: Some(0),
                head: Some(black_box(180 + (i & 63))),
                total: black_box(260 + (i & 127)),
            },
            ..said.record(conn, 1_795_000_000_000_000 + i * 37, Cause::Normal)
        };
        let rec = black_box(&rec);
        if used + format.bound(rec) > out.len() {
            total += used;
            used = 0;
        }
        used += format.write_into(rec, &mut out[used..]).unwrap_or(0);
    }
    total + used
}

fn main() {
    let mut args = std::env::args().skip(1);
    let format: Format = args
        .next()
        .unwrap_or_else(|| "json".into())
        .parse()
        .unwrap_or_else(|e| panic!("format: {e}"));
    let n = args.next().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let conn = Conn {
        client: "127.0.0.1:50000".parse().expect("an address"),
        frontend: "[127.0.0.1]:44321".into(),
        sni: None,
        tls_version: Some("TLSv1.3"),
        cipher: Some("TLS13_AES_256_GCM_SHA384"),
        resumed: Some(false),
        protocol: "HTTP/2.0",
        handshake_us: Some(1234),
        sink: 0,
        rendered: Default::default(),
    };
    let said = Said::new([
        b"GET",
        b"127.0.0.1:44321",
        b"/0",
        b"h2load nghttp2/1.52.0",
        b"",
        b"",
    ]);
    let bytes = lines(&format, &said, &conn, n);
    println!("{n} lines, {bytes} bytes");
}
