//! The access log's view of an HTTP/1.1 connection: a line per request, opened when its
//! head is accepted, given its status when the answer's head passes, and written when the
//! answer ends, or when the connection does (with the cause its end gives). Only with
//! `--access-log`: without it the exchange has no log and none of this runs.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;

use crate::access::record::{micros, wall_us, Said, Waited};
use crate::access::{AccessLog, Cause, Conn, Record, Timings};
use crate::clock::Tick;

/// One request's line in the making.
#[derive(Debug)]
struct Line {
    /// µs since the Unix epoch.
    start_us: u64,
    began: Tick,
    /// What the request said.
    said: Said,
    status: u16,
    head_at: Option<Tick>,
    bytes_in: u64,
    bytes_out: u64,
    server: Option<Rc<str>>,
    /// The wait for the backend connection's slot and its connect, µs: 0 on one that
    /// was open already.
    queue: Option<u64>,
    connect: Option<u64>,
}

/// A connection's lines: requests whose answers have not begun, oldest first, and the
/// answer being passed on.
#[derive(Debug)]
pub struct H1Log {
    log: Arc<AccessLog>,
    conn: Rc<Conn>,
    lines: RefCell<Lines>,
}

#[derive(Debug, Default)]
struct Lines {
    waiting: VecDeque<Line>,
    answering: Option<Line>,
    /// The backend and server requests go to now.
    backend: Option<Rc<str>>,
    server: Option<Rc<str>>,
}

/// A request head's fields the line keeps.
pub struct Asked<'a> {
    /// The method.
    pub method: &'a [u8],
    /// `Host`.
    pub host: &'a [u8],
    /// The request target.
    pub target: &'a [u8],
    /// `User-Agent`.
    pub user_agent: &'a [u8],
    /// `Referer`.
    pub referer: &'a [u8],
    /// The request's ID (`--request-id-header`).
    pub request_id: &'a [u8],
    /// `--trusted-proxies`: the client the trusted peer named.
    pub client: Option<std::net::IpAddr>,
    /// The path and query its route's rewrite sent instead.
    pub rewritten: Option<&'a [u8]>,
}

impl Asked<'_> {
    /// The fields of a head as httparse read it (each the first of its name).
    pub fn of<'a>(
        method: &'a str,
        target: &'a str,
        headers: &'a [httparse::Header<'a>],
    ) -> Asked<'a> {
        let field = |name: &str| {
            headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map_or(&b""[..], |h| h.value)
        };
        Asked {
            method: method.as_bytes(),
            host: field("host"),
            target: target.as_bytes(),
            user_agent: field("user-agent"),
            referer: field("referer"),
            request_id: b"",
            client: None,
            rewritten: None,
        }
    }
}

impl H1Log {
    /// A connection's log, its lines going to `log`.
    pub fn new(log: Arc<AccessLog>, conn: Rc<Conn>) -> Self {
        H1Log {
            log,
            conn,
            lines: RefCell::new(Lines::default()),
        }
    }

    /// The backend and server the next requests go to, over a connection had after
    /// `opened`: its queue and its connect (`None` when none could be had).
    pub fn serving(&self, backend: &str, server: &str, opened: Option<Waited>) {
        let mut l = self.lines.borrow_mut();
        // Shared by the lines of the requests it serves: a count, not a copy, each.
        let server: Rc<str> = Rc::from(server);
        l.backend = Some(Rc::from(backend));
        l.server = Some(server.clone());
        // The request read before any backend was chosen goes to this one.
        for line in l.waiting.iter_mut().filter(|w| w.server.is_none()) {
            line.server = Some(server.clone());
        }
        // The newest request is the one this connection was opened for (the first, or
        // the one that moved the connection to another backend): it waited for it.
        if let (Some(line), Some(o)) = (l.waiting.back_mut(), opened) {
            line.server = Some(server);
            line.queue = Some(micros(o.queue));
            line.connect = Some(micros(o.connect));
        }
    }

    /// A request's head was accepted.
    pub fn asked(&self, a: &Asked<'_>) {
        let mut said = Said::new([
            a.method,
            a.host,
            a.target,
            a.user_agent,
            a.referer,
            a.request_id,
        ]);
        said.client = a.client;
        said.rewritten = a.rewritten.map(Box::from);
        let began = Tick::now();
        let mut l = self.lines.borrow_mut();
        let server = l.server.clone();
        // Over a connection open already: nothing waited for, nothing connected.
        let reused = server.as_ref().map(|_| 0);
        l.waiting.push_back(Line {
            start_us: wall_us(began),
            began,
            said,
            status: 0,
            head_at: None,
            bytes_in: 0,
            bytes_out: 0,
            server,
            queue: reused,
            connect: reused,
        });
    }

    /// The oldest waiting request was taken by the gateway core (`h1/front/`), which
    /// writes its line itself: the target the client wrote, when its route rewrote it.
    pub fn taken_by_core(&self) -> Option<Box<[u8]>> {
        let line = self.lines.borrow_mut().waiting.pop_front()?;
        line.said.rewritten.as_ref()?;
        Some(line.said.target().into())
    }

    /// Body bytes of the latest request went to the backend.
    pub fn sent(&self, n: usize) {
        if let Some(line) = self.lines.borrow_mut().waiting.back_mut() {
            line.bytes_in += n as u64;
        }
    }

    /// The oldest request's answer began with `status` (a final one, or 101).
    pub fn answered(&self, status: u16) {
        let mut l = self.lines.borrow_mut();
        if let Some(done) = l.answering.take() {
            self.write(&l, &done, Cause::Normal);
        }
        if let Some(mut line) = l.waiting.pop_front() {
            line.status = status;
            line.head_at = Some(Tick::now());
            l.answering = Some(line);
        }
    }

    /// Body bytes of the answer went to the client.
    pub fn received(&self, n: usize) {
        if let Some(line) = self.lines.borrow_mut().answering.as_mut() {
            line.bytes_out += n as u64;
        }
    }

    /// The answer being passed on is whole.
    pub fn answer_done(&self) {
        let mut l = self.lines.borrow_mut();
        if let Some(done) = l.answering.take() {
            self.write(&l, &done, Cause::Normal);
        }
    }

    /// The connection ends: the answer under way ends with `cut` (its cause when it did
    /// not end whole), each request still waiting with `unanswered`, and shuck's own
    /// answer (`own`: its status and cause) goes on the line of a request it refused
    /// before accepting it (`refused`: what is known of it), or else on the oldest
    /// waiting one.
    pub fn ended(
        &self,
        cut: Cause,
        unanswered: Cause,
        own: Option<(u16, Cause)>,
        refused: Option<&Asked<'_>>,
    ) {
        const NOTHING: Asked<'static> = Asked {
            method: b"",
            host: b"",
            target: b"",
            user_agent: b"",
            referer: b"",
            request_id: b"",
            client: None,
            rewritten: None,
        };
        let own_line =
            refused.is_some() || (own.is_some() && self.lines.borrow().waiting.is_empty());
        if own_line {
            self.asked(refused.unwrap_or(&NOTHING));
        }
        let mut l = self.lines.borrow_mut();
        if let Some(done) = l.answering.take() {
            self.write(&l, &done, cut);
        }
        // shuck's own answer goes to the request it refused, else to the oldest waiting.
        let target = if own_line {
            l.waiting.len().saturating_sub(1)
        } else {
            0
        };
        let mut i = 0;
        while let Some(mut line) = l.waiting.pop_front() {
            match own {
                Some((status, cause)) if i == target => {
                    line.status = status;
                    line.head_at = Some(Tick::now());
                    self.write(&l, &line, cause);
                }
                _ => self.write(&l, &line, unanswered),
            }
            i += 1;
        }
    }

    /// As [`Self::ended_held`] for a head refused as malformed: its line carries what it
    /// asked, unless a request before it still waits, whose line takes shuck's answer (the
    /// refused bytes were that request's, as a body longer than declared is).
    pub fn ended_refused(&self, head: &[u8], cut: Cause, unanswered: Cause, own: (u16, Cause)) {
        if self.lines.borrow().waiting.is_empty() {
            self.ended_held(head, cut, unanswered, own);
        } else {
            self.ended(cut, unanswered, Some(own), None);
        }
    }

    /// [`ended`](Self::ended) with shuck's own answer to a request held whole, never
    /// passed on (`head`: a 421's request).
    pub fn ended_held(&self, head: &[u8], cut: Cause, unanswered: Cause, own: (u16, Cause)) {
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut headers);
        let _ = req.parse(head);
        let asked = Asked::of(
            req.method.unwrap_or(""),
            req.path.unwrap_or(""),
            req.headers,
        );
        self.ended(cut, unanswered, Some(own), Some(&asked));
    }

    fn write(&self, l: &Lines, line: &Line, cause: Cause) {
        self.log.log(&Record {
            status: line.status,
            bytes_in: line.bytes_in,
            bytes_out: line.bytes_out,
            backend: l.backend.as_deref(),
            server: line.server.as_deref(),
            timings: Timings {
                queue: line.queue,
                connect: line.connect,
                head: line.head_at.map(|h| h.micros_since(line.began)),
                total: Tick::now().micros_since(line.began),
            },
            ..line.said.record(&self.conn, line.start_us, cause)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::Asked;

    #[test]
    fn a_heads_fields_are_the_first_of_their_names_in_any_case() {
        let h = |name, value: &'static [u8]| httparse::Header { name, value };
        let headers = [
            h("X-Ab", b"not the host: four letters"),
            h("HOST", b"a.example"),
            h("Referrer", b"not Referer's spelling"),
            h("user-agent", b"curl/8"),
            h("Host", b"b.example"),
            h("X-Referer", b"x"),
            h("ReFeReR", b"https://c.example/"),
            h("User-Agent", b"second"),
        ];
        let a = Asked::of("GET", "/p?q", &headers);
        assert_eq!(a.method, b"GET");
        assert_eq!(a.target, b"/p?q");
        assert_eq!(a.host, b"a.example");
        assert_eq!(a.user_agent, b"curl/8");
        assert_eq!(a.referer, b"https://c.example/");
        assert_eq!(a.request_id, b"");
        let none = Asked::of("GET", "/", &headers[..1]);
        assert_eq!(
            (none.host, none.user_agent, none.referer),
            (&b""[..], &b""[..], &b""[..])
        );
        // An empty first value is the value, as a later one does not replace it.
        let empty = [h("Host", b""), h("Host", b"later")];
        assert_eq!(Asked::of("GET", "/", &empty).host, b"");
    }
}
