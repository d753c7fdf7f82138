//! The plain-HTTP listener's access log lines: one a request, as nginx's `return 301`
//! server writes them, to `--access-log`'s own target (the listener is no frontend, so
//! a frontend's own `access-log` does not take them). The connection's facts say
//! `HTTP/1.1` with no TLS; `frontend` is the listener's address.

use std::net::SocketAddr;

use crate::access::record::wall_us;
use crate::access::{AccessLog, Cause, Conn, Record, Timings};
use crate::clock::Tick;
use crate::gateway::h1::log::Asked;

/// A connection's facts, its lines going to `sink`.
pub(super) fn conn(client: SocketAddr, listener: SocketAddr, sink: usize) -> Conn {
    Conn {
        client,
        frontend: format!("http://{listener}"),
        sni: None,
        tls_version: None,
        cipher: None,
        resumed: None,
        protocol: "HTTP/1.1",
        handshake_us: None,
        sink,
        rendered: Default::default(),
    }
}

/// The line of the request whose head is `head` (as much as was read, when it never
/// parsed), answered with `out` (a whole answer: its status and its body's length are
/// read back from it), begun at `began`.
pub(super) fn line(log: &AccessLog, conn: &Conn, head: &[u8], out: &[u8], began: Tick) {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    // A head that does not parse is logged with what it had: nothing.
    let parsed = req.parse(head).is_ok();
    let asked = match (parsed, req.method, req.path) {
        (true, Some(m), Some(p)) => Asked::of(m, p, req.headers),
        _ => Asked::of("", "", &[]),
    };
    let status = status_of(out);
    let body = crate::redirect::answer::head_len(out).map_or(0, |n| out.len() - n);
    let cause = match status {
        429 => Cause::Refused,
        400 | 431 => Cause::BadRequest,
        _ => Cause::Normal,
    };
    let said = crate::access::record::Said::new([
        asked.method,
        asked.host,
        asked.target,
        asked.user_agent,
        asked.referer,
        b"",
    ]);
    log.log(&Record {
        status,
        bytes_out: body as u64,
        timings: Timings {
            total: Tick::now().micros_since(began),
            ..Timings::default()
        },
        ..said.record(conn, wall_us(began), cause)
    });
}

/// The status of the answer `out` begins with (0 when it is none).
fn status_of(out: &[u8]) -> u16 {
    out.get(9..12)
        .and_then(|d| std::str::from_utf8(d).ok())
        .and_then(|d| d.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_status_is_read_from_the_answers_first_line() {
        assert_eq!(
            super::status_of(b"HTTP/1.1 308 Permanent Redirect\r\n"),
            308
        );
        assert_eq!(super::status_of(b"HTTP/1.1"), 0);
        assert_eq!(super::status_of(b"HTTP/1.1 abc"), 0);
    }
}
