//! The three ways a line is written (`--access-log-format`): NCSA `combined` (what
//! goaccess, awstats and fail2ban read), `json` (one object a line, keys fixed), or a
//! template of named fields. Whatever a client sent, a line stays one line: `combined` and
//! templates escape as nginx does (`"`, `\`, and bytes outside 0x20..=0x7e as `\xHH`),
//! JSON as JSON requires (and bytes that are not UTF-8 as `\xHH` text, so that every line
//! parses).

use super::record::cap;
use super::record::Record;
use super::write::{ip, json_str, nginx, number, stamp, Escape, Out};

pub use super::record::FIELD_CAP;

/// A line's fields by name, for templates; the README's table lists them (nginx's variable
/// names where nginx has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// ISO 8601, UTC, microseconds.
    Time,
    /// `[28/Nov/2026:07:45:01 +0000]`'s inside, as `combined` writes it.
    TimeLocal,
    /// The client's address.
    RemoteAddr,
    /// The client's port.
    RemotePort,
    /// The frontend.
    Frontend,
    /// The server name asked for.
    SslServerName,
    /// The TLS version.
    SslProtocol,
    /// The cipher suite.
    SslCipher,
    /// `r` when resumed, `.` when not (nginx's `$ssl_session_reused`).
    SslSessionReused,
    /// `HTTP/1.1`, `HTTP/2.0`, `HTTP/3.0`, `TCP`.
    ServerProtocol,
    /// The method.
    RequestMethod,
    /// `:authority` or `Host`.
    Host,
    /// The path and query.
    RequestUri,
    /// The path and query a route's rewrite sent instead (none: as asked).
    UpstreamUri,
    /// The answer's status.
    Status,
    /// Body bytes from the client (HAProxy's `%U` counts them).
    BytesReceived,
    /// Body bytes to the client.
    BodyBytesSent,
    /// The backend's name.
    Backend,
    /// The server's address.
    UpstreamAddr,
    /// Times sent again.
    Retries,
    /// The request's ID.
    RequestId,
    /// The TLS handshake, µs.
    HandshakeUs,
    /// Waiting in a queue for a backend connection, µs.
    QueueUs,
    /// Connecting, µs.
    ConnectUs,
    /// Until the answer's head, µs.
    HeaderUs,
    /// Until the end, µs.
    RequestUs,
    /// HAProxy's two letters.
    TerminationState,
    /// The termination state in words.
    Cause,
    /// `User-Agent`.
    HttpUserAgent,
    /// `Referer`.
    HttpReferer,
}

/// Declares [`FIELDS`] and JSON's writer from one list, so that a key is spelled once. JSON
/// writes them in the list's order: the time, the connection's fields and the request
/// fields a connection's requests mostly share (both kept by the connection,
/// [`Repeated`](super::repeated::Repeated)), then the rest of the request's; `time_local` is not in JSON.
macro_rules! fields {
    (
        line: $($name:literal => $f:ident,)*
        conn: $($cname:literal => $cf:ident,)*
        shared: $($sname:literal => $sf:ident,)*
        request: $($rname:literal => $rf:ident,)*
        not_json: $($xname:literal => $xf:ident,)*
    ) => {
        /// The fields a connection's JSON keeps with the values they came from
        /// ([`shared`] must give each of them a value).
        #[cfg(test)]
        const SHARED_FIELDS: &[Field] = &[$(Field::$sf),*];

        /// Every field with its name, in the order JSON writes them.
        pub const FIELDS: &[(&str, Field)] = &[
            $(($name, Field::$f),)* $(($cname, Field::$cf),)* $(($sname, Field::$sf),)*
            $(($rname, Field::$rf),)* $(($xname, Field::$xf),)*
        ];

        /// One JSON object. Each key is a constant the compiler writes in place, and each
        /// `value` call, its field known, folds to that field's arm.
        fn json(rec: &Record<'_>, out: &mut Out<'_>) {
            out.byte(b'{');
            $(
                out.put(concat!("\"", $name, "\":").as_bytes());
                value(rec, Field::$f, out, Escape::Json);
            )*
            // A trusted proxy's request names its own client: its connection's fields are
            // not the connection's cached ones.
            if rec.client.is_some() {
                $(
                    out.put(concat!(",\"", $cname, "\":").as_bytes());
                    value(rec, Field::$cf, out, Escape::Json);
                )*
                $(
                    out.put(concat!(",\"", $sname, "\":").as_bytes());
                    value(rec, Field::$sf, out, Escape::Json);
                )*
                $(
                    out.put(concat!(",\"", $rname, "\":").as_bytes());
                    value(rec, Field::$rf, out, Escape::Json);
                )*
                out.byte(b'}');
                return;
            }
            let mut repeated = rec.conn.rendered.borrow_mut();
            let conn_bound = 0 $(+ concat!(",\"", $cname, "\":").len() + bound(rec, Field::$cf))*;
            let shared_bound = 0 $(+ concat!(",\"", $sname, "\":").len() + bound(rec, Field::$sf))*;
            // The values the shared fields are written from, in the list's order.
            let values = [$(shared(rec, Field::$sf)),*];
            out.put(repeated.get(
                values,
                |v| append(v, conn_bound, |c| {
                    $(
                        c.put(concat!(",\"", $cname, "\":").as_bytes());
                        value(rec, Field::$cf, c, Escape::Json);
                    )*
                }),
                |v| append(v, shared_bound, |c| {
                    $(
                        c.put(concat!(",\"", $sname, "\":").as_bytes());
                        value(rec, Field::$sf, c, Escape::Json);
                    )*
                }),
            ));
            drop(repeated);
            $(
                out.put(concat!(",\"", $rname, "\":").as_bytes());
                value(rec, Field::$rf, out, Escape::Json);
            )*
            out.byte(b'}');
        }

        /// At most how long [`json`]'s object is (its keys and values, braces and commas).
        fn json_bound(rec: &Record<'_>) -> usize {
            2 $(+ concat!("\"", $name, "\":").len() + bound(rec, Field::$f))*
                $(+ concat!(",\"", $cname, "\":").len() + bound(rec, Field::$cf))*
                $(+ concat!(",\"", $sname, "\":").len() + bound(rec, Field::$sf))*
                $(+ concat!(",\"", $rname, "\":").len() + bound(rec, Field::$rf))*
        }
    };
}

fields! {
    line:
        "time" => Time,
    conn:
        "remote_addr" => RemoteAddr,
        "remote_port" => RemotePort,
        "frontend" => Frontend,
        "ssl_server_name" => SslServerName,
        "ssl_protocol" => SslProtocol,
        "ssl_cipher" => SslCipher,
        "ssl_session_reused" => SslSessionReused,
        "server_protocol" => ServerProtocol,
        "handshake_us" => HandshakeUs,
    shared:
        "request_method" => RequestMethod,
        "host" => Host,
        "backend" => Backend,
        "upstream_addr" => UpstreamAddr,
        "http_user_agent" => HttpUserAgent,
        "http_referer" => HttpReferer,
    request:
        "request_uri" => RequestUri,
        "upstream_uri" => UpstreamUri,
        "status" => Status,
        "bytes_received" => BytesReceived,
        "body_bytes_sent" => BodyBytesSent,
        "retries" => Retries,
        "request_id" => RequestId,
        "queue_us" => QueueUs,
        "connect_us" => ConnectUs,
        "header_us" => HeaderUs,
        "request_us" => RequestUs,
        "termination_state" => TerminationState,
        "cause" => Cause,
    not_json:
        "time_local" => TimeLocal,
}

/// A template's pieces: text as written, and fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Written as it is.
    Text(String),
    /// Written escaped, `-` when it has no value.
    Field(Field),
}

/// How lines are written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Format {
    /// NCSA combined.
    #[default]
    Combined,
    /// One JSON object a line.
    Json,
    /// A template.
    Template(Vec<Piece>),
}

impl Format {
    /// Appends `rec`'s line, newline included, to `out`.
    pub fn write(&self, rec: &Record<'_>, out: &mut Vec<u8>) {
        let len = out.len();
        out.resize(len + self.bound(rec), 0);
        let n = self.write_into(rec, &mut out[len..]).unwrap_or(0);
        out.truncate(len + n);
    }

    /// Writes `rec`'s line, newline included, at the start of `room`, which has at least
    /// [`bound`](Format::bound) bytes; how many it took (`None` if it did not fit).
    pub fn write_into(&self, rec: &Record<'_>, room: &mut [u8]) -> Option<usize> {
        let mut out = Out::new(room);
        match self {
            Format::Combined => combined(rec, &mut out),
            Format::Json => json(rec, &mut out),
            Format::Template(pieces) => {
                for p in pieces {
                    match p {
                        Piece::Text(t) => out.put(t.as_bytes()),
                        Piece::Field(f) => value(rec, *f, &mut out, Escape::Nginx),
                    }
                }
            }
        }
        out.byte(b'\n');
        out.fits().then(|| out.written())
    }

    /// At most how many bytes `rec`'s line takes, newline included.
    #[inline]
    pub fn bound(&self, rec: &Record<'_>) -> usize {
        1 + match self {
            Format::Json => json_bound(rec),
            Format::Combined => {
                COMBINED_TEXT
                    + [
                        Field::RemoteAddr,
                        Field::TimeLocal,
                        Field::RequestMethod,
                        Field::RequestUri,
                        Field::ServerProtocol,
                        Field::Status,
                        Field::BodyBytesSent,
                        Field::HttpReferer,
                        Field::HttpUserAgent,
                    ]
                    .into_iter()
                    .map(|f| bound(rec, f))
                    .sum::<usize>()
            }
            Format::Template(pieces) => pieces
                .iter()
                .map(|p| match p {
                    Piece::Text(t) => t.len(),
                    Piece::Field(f) => bound(rec, *f),
                })
                .sum(),
        }
    }
}

/// `combined`'s own text between its fields, and more.
const COMBINED_TEXT: usize = 32;

/// At most this many bytes of a value not sent by a client nor named in the configuration:
/// a number (20 digits), an address (an IPv6 one, 45, and quotes), a time, a cipher suite's
/// name, a cause.
const OWN_MAX: usize = 64;

/// A shared field's value as [`Repeated`](super::repeated::Repeated) compares it.
#[inline(always)]
fn shared<'a>(rec: &Record<'a>, field: Field) -> Option<&'a [u8]> {
    match field {
        Field::RequestMethod => Some(rec.method),
        Field::Host => Some(rec.authority),
        Field::Backend => rec.backend.map(str::as_bytes),
        Field::UpstreamAddr => rec.server.map(str::as_bytes),
        Field::HttpUserAgent => Some(rec.user_agent),
        Field::HttpReferer => Some(rec.referer),
        _ => None,
    }
}

/// At most how many bytes `field`'s value takes in any format: what a client sent (and a
/// frontend's or server's name) six times its length, as JSON's `\u00HH` escapes a byte at
/// worst, and its quotes; a backend's name as it is; anything else [`OWN_MAX`].
#[inline(always)]
fn bound(rec: &Record<'_>, field: Field) -> usize {
    let sent = |s: &[u8]| 2 + 6 * s.len();
    let c = rec.conn;
    match field {
        Field::Frontend => sent(c.frontend.as_bytes()),
        Field::SslServerName => c.sni.as_deref().map_or(OWN_MAX, |s| sent(s.as_bytes())),
        Field::RequestMethod => sent(rec.method),
        Field::Host => sent(rec.authority),
        Field::RequestUri => sent(rec.path),
        Field::UpstreamUri => sent(rec.upstream_uri).max(OWN_MAX),
        Field::UpstreamAddr => rec.server.map_or(OWN_MAX, |s| sent(s.as_bytes())),
        Field::RequestId => sent(rec.request_id),
        Field::HttpUserAgent => sent(rec.user_agent),
        Field::HttpReferer => sent(rec.referer),
        Field::Backend => rec.backend.map_or(OWN_MAX, |b| 2 + b.len()),
        _ => OWN_MAX,
    }
}

/// Appends to `v` what `f` writes into room for `bound` bytes.
fn append(v: &mut Vec<u8>, bound: usize, f: impl FnOnce(&mut Out<'_>)) {
    let len = v.len();
    v.resize(len + bound, 0);
    let mut out = Out::new(&mut v[len..]);
    f(&mut out);
    let n = if out.fits() { out.written() } else { 0 };
    v.truncate(len + n);
}

/// `$remote_addr - - [$time_local] "$request" $status $body_bytes_sent "$http_referer"
/// "$http_user_agent"`, as nginx writes it.
fn combined(rec: &Record<'_>, out: &mut Out<'_>) {
    value(rec, Field::RemoteAddr, out, Escape::Nginx);
    out.put(b" - - [");
    value(rec, Field::TimeLocal, out, Escape::Nginx);
    out.put(b"] \"");
    if rec.method.is_empty() {
        out.byte(b'-');
    } else {
        asked_nginx(rec, rec.method, out);
        out.byte(b' ');
        asked_nginx(rec, rec.path, out);
        out.byte(b' ');
        out.put(rec.conn.protocol.as_bytes());
    }
    out.put(b"\" ");
    value(rec, Field::Status, out, Escape::Nginx);
    out.byte(b' ');
    value(rec, Field::BodyBytesSent, out, Escape::Nginx);
    out.put(b" \"");
    value(rec, Field::HttpReferer, out, Escape::Nginx);
    out.put(b"\" \"");
    value(rec, Field::HttpUserAgent, out, Escape::Nginx);
    out.byte(b'"');
}

/// What the request sent, as nginx writes it: copied as it is when the record knows it
/// plain, escaped when not.
fn asked_nginx(rec: &Record<'_>, s: &[u8], out: &mut Out<'_>) {
    match rec.plain {
        true => out.put(cap(s)),
        false => nginx(cap(s), out),
    }
}

/// One field's value: a string quoted in JSON, a number bare; no value is `-` (JSON: null).
#[inline(always)]
fn value(rec: &Record<'_>, field: Field, out: &mut Out<'_>, esc: Escape) {
    let c = rec.conn;
    let text = |out: &mut Out<'_>, s: &[u8]| match esc {
        Escape::Nginx if s.is_empty() => out.byte(b'-'),
        Escape::Nginx => nginx(cap(s), out),
        // Often so (no User-Agent, Referer or request ID): no scan.
        Escape::Json if s.is_empty() => out.put(b"\"\""),
        Escape::Json => {
            out.byte(b'"');
            json_str(cap(s), out);
            out.byte(b'"');
        }
    };
    // What the request said: copied as it is when the record knows it plain.
    let asked = |out: &mut Out<'_>, s: &[u8]| match esc {
        _ if !rec.plain || s.is_empty() => text(out, s),
        Escape::Nginx => asked_nginx(rec, s, out),
        Escape::Json => {
            out.byte(b'"');
            out.put(cap(s));
            out.byte(b'"');
        }
    };
    // shuck's own words (a TLS version's, a cipher's, a cause's name, a backend's, whose
    // names are letters, digits, `-`, `_` and `.`): nothing to escape.
    let own = |out: &mut Out<'_>, s: &str| {
        if esc == Escape::Json {
            out.byte(b'"');
            out.put(s.as_bytes());
            out.byte(b'"');
        } else {
            out.put(s.as_bytes());
        }
    };
    let none = |out: &mut Out<'_>| match esc {
        Escape::Nginx => out.byte(b'-'),
        Escape::Json => out.put(b"null"),
    };
    let opt_text = |out: &mut Out<'_>, s: Option<&str>| match s {
        Some(s) => text(out, s.as_bytes()),
        None => none(out),
    };
    let opt_num = |out: &mut Out<'_>, n: Option<u64>| match n {
        Some(n) => number(n, out),
        None => none(out),
    };
    match field {
        Field::Time => {
            if esc == Escape::Json {
                out.byte(b'"');
            }
            stamp(rec.start_us, out, false);
            if esc == Escape::Json {
                out.byte(b'"');
            }
        }
        Field::TimeLocal => stamp(rec.start_us, out, true),
        Field::RemoteAddr => match rec.client {
            Some(real) => ip(std::net::SocketAddr::new(real, c.client.port()), out, esc),
            None => ip(c.client, out, esc),
        },
        // A trusted proxy's client: the peer's port is not the client's, and the fields
        // that named it give none (nginx's realip keeps one only when the field has it).
        Field::RemotePort => match rec.client {
            Some(_) => none(out),
            None => number(u64::from(c.client.port()), out),
        },
        Field::Frontend => text(out, c.frontend.as_bytes()),
        Field::SslServerName => opt_text(out, c.sni.as_deref()),
        Field::SslProtocol => match c.tls_version {
            Some(v) => own(out, v),
            None => none(out),
        },
        Field::SslCipher => match c.cipher {
            Some(v) => own(out, v),
            None => none(out),
        },
        Field::SslSessionReused => match (esc, c.resumed) {
            (_, None) => none(out),
            (Escape::Json, Some(r)) => out.put(if r { b"true" } else { b"false" }),
            (Escape::Nginx, Some(r)) => out.byte(if r { b'r' } else { b'.' }),
        },
        Field::ServerProtocol => own(out, c.protocol),
        Field::RequestMethod => asked(out, rec.method),
        Field::Host => asked(out, rec.authority),
        Field::RequestUri => asked(out, rec.path),
        Field::UpstreamUri if rec.upstream_uri.is_empty() => none(out),
        Field::UpstreamUri => text(out, rec.upstream_uri),
        Field::Status => opt_num(out, (rec.status != 0).then_some(u64::from(rec.status))),
        Field::BytesReceived => number(rec.bytes_in, out),
        Field::BodyBytesSent => number(rec.bytes_out, out),
        Field::Backend => match rec.backend {
            Some(b) => own(out, b),
            None => none(out),
        },
        Field::UpstreamAddr => opt_text(out, rec.server),
        Field::Retries => number(u64::from(rec.retries), out),
        Field::RequestId => asked(out, rec.request_id),
        Field::HandshakeUs => opt_num(out, c.handshake_us),
        Field::QueueUs => opt_num(out, rec.timings.queue),
        Field::ConnectUs => opt_num(out, rec.timings.connect),
        Field::HeaderUs => opt_num(out, rec.timings.head),
        Field::RequestUs => number(rec.timings.total, out),
        Field::TerminationState => own(out, rec.cause.code()),
        Field::Cause => own(out, rec.cause.name()),
        Field::HttpUserAgent => asked(out, rec.user_agent),
        Field::HttpReferer => asked(out, rec.referer),
    }
}

#[cfg(test)]
pub(super) mod tests;
