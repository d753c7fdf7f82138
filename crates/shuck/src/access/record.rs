//! What one access log line says: a request's (HTTP/1.1, HTTP/2, HTTP/3 alike) or a TCP
//! connection's facts, borrowed from where they already are, so that a line is formatted
//! without copying them first.

use std::cell::Cell;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::clock::Tick;

/// At most this many bytes of a path, a host, a User-Agent or a Referer are written: a
/// 64 KB request target makes a line of a few kilobytes, never of 64.
pub const FIELD_CAP: usize = 2048;

/// At most [`FIELD_CAP`] bytes of what a client sent.
pub(super) fn cap(s: &[u8]) -> &[u8] {
    &s[..s.len().min(FIELD_CAP)]
}

/// How a request or connection ended, as HAProxy's termination state says it: who ended it
/// and where it stood. Its [`code`](Cause::code) is HAProxy's two letters, its
/// [`name`](Cause::name) the JSON and template spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cause {
    /// Answered and passed on whole (or, in TCP mode, both sides closed).
    #[default]
    Normal,
    /// The client went away or reset its stream before the answer was whole.
    ClientClosed,
    /// The client sent nothing for a timeout (an idle connection, a slow head or body).
    ClientTimeout,
    /// No backend connection could be made: refused, unreachable, or no server up (`503`).
    BackendRefused,
    /// The backend did not answer within `--idle-timeout` (`504`).
    BackendTimeout,
    /// The backend closed or reset its connection before the answer's head, or sent one
    /// that cannot be passed on (`502`).
    BackendReset,
    /// The backend's answer was cut short after its head went out.
    AnswerCut,
    /// shuck refused the request as malformed (`400`, or a reset stream).
    BadRequest,
    /// The request's head came too slowly (`408`).
    RequestTimeout,
    /// The request named a host the connection's certificate does not cover (`421`).
    Misdirected,
    /// The client was over its request rate (`429`) or a route's rules refuse it (`403`).
    Refused,
}

impl Cause {
    /// HAProxy's termination state: the first letter who ended it (`C` client, `S` server,
    /// `P` shuck itself; lower case for a timeout), the second where it stood (`R` the
    /// request, `C` connecting, `H` waiting for the answer's head, `D` passing data).
    pub fn code(self) -> &'static str {
        match self {
            Cause::Normal => "--",
            Cause::ClientClosed => "CD",
            Cause::ClientTimeout => "cD",
            Cause::BackendRefused => "SC",
            Cause::BackendTimeout => "sH",
            Cause::BackendReset => "SH",
            Cause::AnswerCut => "SD",
            Cause::BadRequest => "PR",
            Cause::RequestTimeout => "cR",
            Cause::Misdirected => "PR",
            Cause::Refused => "PR",
        }
    }

    /// The cause in words, for JSON and templates.
    pub fn name(self) -> &'static str {
        match self {
            Cause::Normal => "normal",
            Cause::ClientClosed => "client_closed",
            Cause::ClientTimeout => "client_timeout",
            Cause::BackendRefused => "backend_refused",
            Cause::BackendTimeout => "backend_timeout",
            Cause::BackendReset => "backend_reset",
            Cause::AnswerCut => "answer_cut",
            Cause::BadRequest => "bad_request",
            Cause::RequestTimeout => "request_timeout",
            Cause::Misdirected => "misdirected",
            Cause::Refused => "refused",
        }
    }
}

/// Microseconds spent in each step; `None` where the step did not happen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    /// Waiting for a backend connection's slot: a server's `maxconn` queue, and (HTTP/2,
    /// HTTP/3) `--http-max-backend-conns`; 0 when none was waited for.
    pub queue: Option<u64>,
    /// Connecting (with TLS to the backend, its handshake too): 0 for an idle connection.
    pub connect: Option<u64>,
    /// From the request's head until the answer's head.
    pub head: Option<u64>,
    /// From the request's head (a connection's accept in TCP mode) until the end.
    pub total: u64,
}

/// The connection a request came on: made once per connection (only with an access log),
/// the same for all its requests.
#[derive(Debug, Clone)]
pub struct Conn {
    /// The client (the PROXY header's source with `--proxy-proxy`).
    pub client: SocketAddr,
    /// The frontend, as written.
    pub frontend: String,
    /// The server name the client asked for.
    pub sni: Option<String>,
    /// `TLSv1.3`, `TLSv1.2`.
    pub tls_version: Option<&'static str>,
    /// The cipher suite, by its IANA name.
    pub cipher: Option<&'static str>,
    /// Resumed (a ticket or a session ID) rather than a full handshake; `None` where the
    /// TLS library does not say (QUIC).
    pub resumed: Option<bool>,
    /// `HTTP/1.1`, `HTTP/2.0`, `HTTP/3.0`, or `TCP`.
    pub protocol: &'static str,
    /// The TLS handshake, µs.
    pub handshake_us: Option<u64>,
    /// The sink its lines go to (its frontend's, [`super::Settings::sink_of`]).
    pub sink: usize,
    /// Its fields as JSON writes them, and the request fields its lines repeat, made by
    /// its JSON lines: a connection's many requests copy them as one slice. Start it empty
    /// (`Default::default()`).
    pub rendered: std::cell::RefCell<super::repeated::Repeated>,
}

/// One line's facts. Byte strings are what the client sent, unchecked: each format escapes
/// them as it must.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// When the request (in TCP mode, the connection) began, in microseconds since the
    /// Unix epoch.
    pub start_us: u64,
    /// The connection it came on.
    pub conn: &'a Conn,
    /// `--trusted-proxies`: the client the trusted peer named, when it named one (then
    /// `remote_addr`; the peer stays the connection's).
    pub client: Option<std::net::IpAddr>,
    /// The method; empty in TCP mode.
    pub method: &'a [u8],
    /// `:authority` or `Host`.
    pub authority: &'a [u8],
    /// The path and query, as sent.
    pub path: &'a [u8],
    /// The path and query sent to the backend when a route rewrote it (empty: as asked).
    pub upstream_uri: &'a [u8],
    /// `User-Agent`.
    pub user_agent: &'a [u8],
    /// `Referer`.
    pub referer: &'a [u8],
    /// The answer's status; 0 when none was sent (a reset stream, TCP mode).
    pub status: u16,
    /// Body bytes from the client (in TCP mode, all its plaintext).
    pub bytes_in: u64,
    /// Body bytes to the client (in TCP mode, all the plaintext it was sent).
    pub bytes_out: u64,
    /// The backend's name (`default` for `-b`), if one was chosen.
    pub backend: Option<&'a str>,
    /// The server's address, if one was connected.
    pub server: Option<&'a str>,
    /// Times the request was sent again on a new connection.
    pub retries: u32,
    /// The request's ID (`--request-id-header`).
    pub request_id: &'a [u8],
    /// What each step took.
    pub timings: Timings,
    /// How it ended.
    pub cause: Cause,
    /// Whether the request's byte strings (method, authority, path, User-Agent, Referer,
    /// request ID) are known to need no escaping, each at most [`FIELD_CAP`] long: the
    /// formats then copy them without a scan. `false` when not known.
    pub plain: bool,
}

impl Record<'_> {
    /// An error for `--access-log-errors-only` and sampling: a status of 400 or more, or
    /// any end but a normal one.
    pub fn is_error(&self) -> bool {
        self.status >= 400 || self.cause != Cause::Normal
    }
}

/// The wall-clock time of `at`, in microseconds since the Unix epoch, from this thread's
/// reading of both clocks taken at most a second before: a request's line needs its
/// monotonic start anyway, and one clock read a request is saved. A step of the wall clock
/// shows within a second.
pub fn wall_us(at: Tick) -> u64 {
    thread_local! {
        static ANCHOR: Cell<Option<(Tick, u64)>> = const { Cell::new(None) };
    }
    ANCHOR.with(|a| match a.get() {
        Some((t, w)) if at >= t && at.micros_since(t) < 1_000_000 => w + at.micros_since(t),
        _ => {
            let now = (Tick::now(), crate::clock::unix_us());
            a.set(Some(now));
            now.1.saturating_sub(now.0.micros_since(at))
        }
    })
}

/// How a backend connection was had: its wait in its server's queue, then its connect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waited {
    /// In the queue (maxconn).
    pub queue: Duration,
    /// Connecting (and TLS to the backend).
    pub connect: Duration,
}

impl Waited {
    /// A connection asked for at `began` that waited `queued` of it in a queue.
    pub fn since(began: Instant, queued: Duration) -> Self {
        Waited {
            queue: queued,
            connect: began.elapsed().saturating_sub(queued),
        }
    }
}

/// A duration as the log writes it: microseconds (saturating).
pub fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// What a request said that its line keeps until it is written, each field cut at
/// [`FIELD_CAP`]: one allocation for all of them.
#[derive(Debug)]
pub struct Said {
    text: Vec<u8>,
    ends: [usize; 6],
    /// Whether `text` has nothing to escape: one scan of all six here, none when the
    /// line is written.
    plain: bool,
    /// `--trusted-proxies`: the client the trusted peer named ([`Record::client`]).
    pub client: Option<std::net::IpAddr>,
    /// The path and query a route's rewrite sent instead ([`Record::upstream_uri`]).
    pub rewritten: Option<Box<[u8]>>,
}

impl Said {
    /// The method, authority, path, User-Agent, Referer and request ID, in that order.
    pub fn new(fields: [&[u8]; 6]) -> Self {
        let mut text = Vec::with_capacity(128);
        let mut ends = [0; 6];
        for (i, f) in fields.into_iter().enumerate() {
            text.extend_from_slice(cap(f));
            ends[i] = text.len();
        }
        let plain = super::write::plain_run(&text) == text.len();
        Said {
            text,
            ends,
            plain,
            client: None,
            rewritten: None,
        }
    }

    /// The path and query, as the client wrote them.
    pub fn target(&self) -> &[u8] {
        self.get(2)
    }

    fn get(&self, i: usize) -> &[u8] {
        &self.text[if i == 0 { 0 } else { self.ends[i - 1] }..self.ends[i]]
    }

    /// A record of these fields over `conn`; the rest is the caller's to fill.
    pub fn record<'a>(&'a self, conn: &'a Conn, start_us: u64, cause: Cause) -> Record<'a> {
        Record {
            start_us,
            conn,
            client: self.client,
            upstream_uri: self.rewritten.as_deref().unwrap_or_default(),
            method: self.get(0),
            authority: self.get(1),
            path: self.get(2),
            user_agent: self.get(3),
            referer: self.get(4),
            status: 0,
            bytes_in: 0,
            bytes_out: 0,
            backend: None,
            server: None,
            retries: 0,
            request_id: self.get(5),
            timings: Timings::default(),
            cause,
            plain: self.plain,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::wall_us;
    use crate::clock::{unix_us, Tick};

    #[test]
    fn wall_clock_follows_the_system_clock() {
        let near = |a: u64, b: u64| a.abs_diff(b) < 50_000;
        let now = Tick::now();
        assert!(near(wall_us(now), unix_us()));
        // Again from the anchor just taken, and for a time before it.
        assert!(near(wall_us(Tick::now()), unix_us()));
        // 200 ms back, four times the tolerance: a reading that ignored `at` fails.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let w = wall_us(now);
        assert!(near(w + 200_000, unix_us()), "{w} {}", unix_us());
    }
}
