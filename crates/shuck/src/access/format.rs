//! The three ways a line is written (`--access-log-format`): NCSA `combined` (what
//! goaccess, awstats and fail2ban read), `json` (one object a line, keys fixed), or a
//! template of named fields. Whatever a client sent, a line stays one line: `combined` and
//! templates escape as nginx does (`"`, `\`, and bytes outside 0x20..=0x7e as `\xHH`),
//! JSON as JSON requires (and bytes that are not UTF-8 as `\xHH` text, so that every line
//! parses).

use super::record::cap;
use super::record::Record;
use super::write::{ip, json_str, nginx, number, stamp, Escape};

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
/// writes them in the list's order: the time, the connection's fields (rendered once a
/// connection, [`Conn::rendered`](super::record::Conn::rendered)), then the request's; `time_local` is not in JSON.
macro_rules! fields {
    (
        line: $($name:literal => $f:ident,)*
        conn: $($cname:literal => $cf:ident,)*
        request: $($rname:literal => $rf:ident,)*
        not_json: $($xname:literal => $xf:ident,)*
    ) => {
        /// Every field with its name, in the order JSON writes them.
        pub const FIELDS: &[(&str, Field)] = &[
            $(($name, Field::$f),)* $(($cname, Field::$cf),)* $(($rname, Field::$rf),)*
            $(($xname, Field::$xf),)*
        ];

        /// One JSON object. Each key is a constant the compiler writes in place, and each
        /// `value` call, its field known, folds to that field's arm.
        fn json(rec: &Record<'_>, out: &mut Vec<u8>) {
            out.push(b'{');
            $(
                out.extend_from_slice(concat!("\"", $name, "\":").as_bytes());
                value(rec, Field::$f, out, Escape::Json);
            )*
            let conn = rec.conn.rendered.get_or_init(|| {
                let mut c = Vec::with_capacity(256);
                $(
                    c.extend_from_slice(concat!(",\"", $cname, "\":").as_bytes());
                    value(rec, Field::$cf, &mut c, Escape::Json);
                )*
                c.into_boxed_slice()
            });
            out.extend_from_slice(conn);
            $(
                out.extend_from_slice(concat!(",\"", $rname, "\":").as_bytes());
                value(rec, Field::$rf, out, Escape::Json);
            )*
            out.push(b'}');
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
    request:
        "request_method" => RequestMethod,
        "host" => Host,
        "request_uri" => RequestUri,
        "status" => Status,
        "bytes_received" => BytesReceived,
        "body_bytes_sent" => BodyBytesSent,
        "backend" => Backend,
        "upstream_addr" => UpstreamAddr,
        "retries" => Retries,
        "request_id" => RequestId,
        "queue_us" => QueueUs,
        "connect_us" => ConnectUs,
        "header_us" => HeaderUs,
        "request_us" => RequestUs,
        "termination_state" => TerminationState,
        "cause" => Cause,
        "http_user_agent" => HttpUserAgent,
        "http_referer" => HttpReferer,
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

/// Why a format could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    /// `{name}` names no field.
    #[error("unknown field {{{name}}} at byte {at} (fields: {})", FIELDS.iter().map(|f| f.0).collect::<Vec<_>>().join(", "))]
    Unknown {
        /// The name.
        name: String,
        /// Where it starts.
        at: usize,
    },
    /// A `{` without its `}`, or a `}` alone.
    #[error("unbalanced {what} at byte {at} (write {{{{ or }}}} for a brace)")]
    Unbalanced {
        /// `{` or `}`.
        what: char,
        /// Where.
        at: usize,
    },
    /// A template with no field.
    #[error("a template needs at least one {{field}}")]
    NoField,
}

impl std::str::FromStr for Format {
    type Err = FormatError;

    /// `combined`, `json`, or a template such as `{remote_addr} {request_method} {status}`.
    fn from_str(s: &str) -> Result<Self, FormatError> {
        match s {
            "combined" => return Ok(Format::Combined),
            "json" => return Ok(Format::Json),
            _ => {}
        }
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut rest = s.char_indices().peekable();
        while let Some((at, c)) = rest.next() {
            match c {
                '{' if rest.peek().map(|p| p.1) == Some('{') => {
                    rest.next();
                    text.push('{');
                }
                '}' if rest.peek().map(|p| p.1) == Some('}') => {
                    rest.next();
                    text.push('}');
                }
                '}' => return Err(FormatError::Unbalanced { what: '}', at }),
                '{' => {
                    let end = s[at..]
                        .find('}')
                        .ok_or(FormatError::Unbalanced { what: '{', at })?;
                    let name = &s[at + 1..at + end];
                    let field = FIELDS
                        .iter()
                        .find(|f| f.0 == name)
                        .ok_or_else(|| FormatError::Unknown {
                            name: name.to_owned(),
                            at,
                        })?
                        .1;
                    if !text.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut text)));
                    }
                    pieces.push(Piece::Field(field));
                    while rest.peek().is_some_and(|p| p.0 <= at + end) {
                        rest.next();
                    }
                }
                c => text.push(c),
            }
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        if !pieces.iter().any(|p| matches!(p, Piece::Field(_))) {
            return Err(FormatError::NoField);
        }
        Ok(Format::Template(pieces))
    }
}

impl Format {
    /// Appends `rec`'s line, newline included, to `out`.
    pub fn write(&self, rec: &Record<'_>, out: &mut Vec<u8>) {
        match self {
            Format::Combined => combined(rec, out),
            Format::Json => json(rec, out),
            Format::Template(pieces) => {
                for p in pieces {
                    match p {
                        Piece::Text(t) => out.extend_from_slice(t.as_bytes()),
                        Piece::Field(f) => value(rec, *f, out, Escape::Nginx),
                    }
                }
            }
        }
        out.push(b'\n');
    }
}

/// `$remote_addr - - [$time_local] "$request" $status $body_bytes_sent "$http_referer"
/// "$http_user_agent"`, as nginx writes it.
fn combined(rec: &Record<'_>, out: &mut Vec<u8>) {
    value(rec, Field::RemoteAddr, out, Escape::Nginx);
    out.extend_from_slice(b" - - [");
    value(rec, Field::TimeLocal, out, Escape::Nginx);
    out.extend_from_slice(b"] \"");
    if rec.method.is_empty() {
        out.push(b'-');
    } else {
        asked_nginx(rec, rec.method, out);
        out.push(b' ');
        asked_nginx(rec, rec.path, out);
        out.push(b' ');
        out.extend_from_slice(rec.conn.protocol.as_bytes());
    }
    out.extend_from_slice(b"\" ");
    value(rec, Field::Status, out, Escape::Nginx);
    out.push(b' ');
    value(rec, Field::BodyBytesSent, out, Escape::Nginx);
    out.extend_from_slice(b" \"");
    value(rec, Field::HttpReferer, out, Escape::Nginx);
    out.extend_from_slice(b"\" \"");
    value(rec, Field::HttpUserAgent, out, Escape::Nginx);
    out.push(b'"');
}

/// What the request sent, as nginx writes it: copied as it is when the record knows it
/// plain, escaped when not.
fn asked_nginx(rec: &Record<'_>, s: &[u8], out: &mut Vec<u8>) {
    match rec.plain {
        true => out.extend_from_slice(cap(s)),
        false => nginx(cap(s), out),
    }
}

/// One field's value: a string quoted in JSON, a number bare; no value is `-` (JSON: null).
#[inline(always)]
fn value(rec: &Record<'_>, field: Field, out: &mut Vec<u8>, esc: Escape) {
    let c = rec.conn;
    let text = |out: &mut Vec<u8>, s: &[u8]| match esc {
        Escape::Nginx if s.is_empty() => out.push(b'-'),
        Escape::Nginx => nginx(cap(s), out),
        // Often so (no User-Agent, Referer or request ID): no scan.
        Escape::Json if s.is_empty() => out.extend_from_slice(b"\"\""),
        Escape::Json => {
            out.push(b'"');
            json_str(cap(s), out);
            out.push(b'"');
        }
    };
    // What the request said: copied as it is when the record knows it plain.
    let asked = |out: &mut Vec<u8>, s: &[u8]| match esc {
        _ if !rec.plain || s.is_empty() => text(out, s),
        Escape::Nginx => asked_nginx(rec, s, out),
        Escape::Json => {
            out.push(b'"');
            out.extend_from_slice(cap(s));
            out.push(b'"');
        }
    };
    // shuck's own words (a TLS version's, a cipher's, a cause's name, a backend's, whose
    // names are letters, digits, `-`, `_` and `.`): nothing to escape.
    let own = |out: &mut Vec<u8>, s: &str| {
        if esc == Escape::Json {
            out.push(b'"');
            out.extend_from_slice(s.as_bytes());
            out.push(b'"');
        } else {
            out.extend_from_slice(s.as_bytes());
        }
    };
    let none = |out: &mut Vec<u8>| match esc {
        Escape::Nginx => out.push(b'-'),
        Escape::Json => out.extend_from_slice(b"null"),
    };
    let opt_text = |out: &mut Vec<u8>, s: Option<&str>| match s {
        Some(s) => text(out, s.as_bytes()),
        None => none(out),
    };
    let opt_num = |out: &mut Vec<u8>, n: Option<u64>| match n {
        Some(n) => number(n, out),
        None => none(out),
    };
    match field {
        Field::Time => {
            if esc == Escape::Json {
                out.push(b'"');
            }
            stamp(rec.start_us, out, false);
            if esc == Escape::Json {
                out.push(b'"');
            }
        }
        Field::TimeLocal => stamp(rec.start_us, out, true),
        Field::RemoteAddr => ip(c.client, out, esc),
        Field::RemotePort => number(u64::from(c.client.port()), out),
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
            (Escape::Json, Some(r)) => out.extend_from_slice(if r { b"true" } else { b"false" }),
            (Escape::Nginx, Some(r)) => out.push(if r { b'r' } else { b'.' }),
        },
        Field::ServerProtocol => own(out, c.protocol),
        Field::RequestMethod => asked(out, rec.method),
        Field::Host => asked(out, rec.authority),
        Field::RequestUri => asked(out, rec.path),
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
mod tests {
    use super::*;
    use crate::access::record::{Cause, Conn, Said, Timings};

    fn conn() -> Conn {
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

    fn rec<'a>(c: &'a Conn, path: &'a [u8], ua: &'a [u8]) -> Record<'a> {
        Record {
            start_us: 1_795_851_901_000_042,
            conn: c,
            method: b"GET",
            authority: b"www.example.com",
            path,
            user_agent: ua,
            referer: b"",
            status: 200,
            bytes_in: 40,
            bytes_out: 1234,
            backend: Some("default"),
            server: Some("127.0.0.1:8080"),
            retries: 0,
            request_id: b"",
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
    fn templates_name_their_fields_and_refuse_unknown_ones() {
        let f: Format =
            "{remote_addr}:{remote_port} {{{status}}} {cause} {request_us}us {connect_us}"
                .parse()
                .unwrap();
        let c = conn();
        let mut out = Vec::new();
        f.write(&rec(&c, b"/", b""), &mut out);
        assert_eq!(out, b"192.0.2.7:40000 {200} normal 1500us -\n");
        assert!(matches!(
            "{client} {status}".parse::<Format>(),
            Err(FormatError::Unknown { name, at: 0 }) if name == "client"
        ));
        assert!(matches!(
            "{status".parse::<Format>(),
            Err(FormatError::Unbalanced { what: '{', at: 0 })
        ));
        assert!(matches!(
            "a } b".parse::<Format>(),
            Err(FormatError::Unbalanced { what: '}', at: 2 })
        ));
        assert_eq!("plain".parse::<Format>(), Err(FormatError::NoField));
    }
}
