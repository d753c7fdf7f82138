//! What a ClientHello says before rustls sees it, read with rusticata's `tls-parser`: the
//! server name it asks for and whether it is an ACME tls-alpn-01 check ([`peek`]: routes,
//! certificates with their own client verification, `--sni-nomatch-abort`), and what it
//! offers to resume, its TLS 1.2 session ID and its TLS 1.3 PSK identities (stateful
//! tickets), so that the shared store can be asked for a session rustls will then find in
//! the local cache ([`resumable`]; rustls' own `Acceptor` exposes neither, and costs a
//! second full decoding of the hello).

use tls_parser::nom::multi::length_data;
use tls_parser::nom::number::complete::{be_u16, be_u32, be_u8};
use tls_parser::{TlsMessage, TlsMessageHandshake, TlsRecordType};

/// The ALPN protocol of ACME's tls-alpn-01 checks (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Most PSK identities looked up (clients send one; each costs a round trip).
const MAX_IDENTITIES: usize = 2;
/// Largest ClientHello reassembled (rustls refuses larger ones too).
const MAX_HELLO: usize = 64 * 1024;
const TLS13: u16 = 0x0304;

/// What the server may have to look up to resume the client.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Resumable {
    /// A TLS 1.2 session ID to look up.
    pub session_id: Option<Vec<u8>>,
    /// TLS 1.3 PSK identities to take (stateful tickets).
    pub tickets: Vec<Vec<u8>>,
}

impl Resumable {
    /// Whether there is nothing to look up.
    pub fn is_empty(&self) -> bool {
        self.session_id.is_none() && self.tickets.is_empty()
    }
}

/// How the server resumes.
#[derive(Debug, Clone, Copy)]
pub struct Server {
    /// TLS 1.3 is served.
    pub tls13: bool,
    /// TLS 1.2 is served.
    pub tls12: bool,
    /// Stateless tickets are issued (and used): no lookup for a ticket, and in TLS 1.3 none
    /// for stateful ones either.
    pub stateless: bool,
}

/// What the ClientHello at the start of `records` needs looked up, given how the server
/// resumes: the session ID only when TLS 1.2 will be spoken and no ticket will be used
/// instead (every TLS 1.3 client sends a random one, never worth a lookup); PSK
/// identities only when TLS 1.3 will be spoken with stateful tickets. `None` when the
/// bytes are not a complete ClientHello (rustls then answers them itself).
pub fn resumable(records: &[u8], server: Server) -> Option<Resumable> {
    let hello = reassemble(records)?;
    let (_, msg) = tls_parser::parse_tls_message_handshake(&hello).ok()?;
    let TlsMessage::Handshake(TlsMessageHandshake::ClientHello(ch)) = msg else {
        return None;
    };
    let mut offers_tls13 = false;
    let mut ticket = false;
    let mut identities = Vec::new();
    let mut ext = ch.ext.unwrap_or_default();
    while !ext.is_empty() {
        let (rest, kind) = be_u16::<_, ()>(ext).ok()?;
        let (rest, data) = length_data(be_u16::<_, ()>)(rest).ok()?;
        ext = rest;
        match kind {
            43 => offers_tls13 = self::offers_tls13(data)?,
            35 => ticket = !data.is_empty(),
            41 => identities = psk_identities(data)?,
            _ => {}
        }
    }
    let tls13 = offers_tls13 && server.tls13;
    let mut out = Resumable::default();
    if !tls13 && server.tls12 && !(ticket && server.stateless) {
        out.session_id = ch
            .session_id
            .filter(|id| !id.is_empty() && id.len() <= 32)
            .map(<[u8]>::to_vec);
    }
    if tls13 && !server.stateless {
        out.tickets = identities;
    }
    Some(out)
}

/// What [`peek`] found at the start of the bytes received.
#[derive(Debug, PartialEq, Eq)]
pub enum Peek {
    /// The ClientHello is not all there yet.
    Incomplete,
    /// Not a ClientHello that parses (rustls then answers it itself).
    NotAHello,
    /// A ClientHello.
    Hello {
        /// The DNS name it asks for (an address in SNI is no name, as for rustls).
        server_name: Option<Box<str>>,
        /// It offers ALPN `acme-tls/1` alone (RFC 8737).
        acme_alpn: bool,
    },
}

/// The server name and the ACME ALPN of the ClientHello at the start of `records`.
pub fn peek(records: &[u8]) -> Peek {
    let hello = match joined(records) {
        Joined::One(h) => std::borrow::Cow::Borrowed(h),
        Joined::Many(h) => std::borrow::Cow::Owned(h),
        Joined::Incomplete => return Peek::Incomplete,
        Joined::Bad => return Peek::NotAHello,
    };
    let Ok((_, msg)) = tls_parser::parse_tls_message_handshake(&hello) else {
        return Peek::NotAHello;
    };
    let TlsMessage::Handshake(TlsMessageHandshake::ClientHello(ch)) = msg else {
        return Peek::NotAHello;
    };
    let (mut server_name, mut acme_alpn) = (None, false);
    let mut ext = ch.ext.unwrap_or_default();
    while !ext.is_empty() {
        let Ok((rest, kind)) = be_u16::<_, ()>(ext) else {
            return Peek::NotAHello;
        };
        let Ok((rest, data)) = length_data(be_u16::<_, ()>)(rest) else {
            return Peek::NotAHello;
        };
        ext = rest;
        match kind {
            0 => server_name = host_name(data),
            16 => acme_alpn = only_acme(data),
            _ => {}
        }
    }
    Peek::Hello {
        server_name,
        acme_alpn,
    }
}

/// server_name (RFC 6066 §3): the first host_name, when it is a DNS name.
fn host_name(data: &[u8]) -> Option<Box<str>> {
    let (_, mut list) = length_data(be_u16::<_, ()>)(data).ok()?;
    while !list.is_empty() {
        let (r, kind) = be_u8::<_, ()>(list).ok()?;
        let (r, name) = length_data(be_u16::<_, ()>)(r).ok()?;
        list = r;
        if kind == 0 {
            let name = std::str::from_utf8(name).ok()?;
            rustls::pki_types::DnsName::try_from(name).ok()?;
            return Some(name.into());
        }
    }
    None
}

/// application_layer_protocol_negotiation: exactly one protocol, `acme-tls/1`.
fn only_acme(data: &[u8]) -> bool {
    let one = || -> Option<bool> {
        let (_, list) = length_data(be_u16::<_, ()>)(data).ok()?;
        let (rest, first) = length_data(be_u8::<_, ()>)(list).ok()?;
        Some(rest.is_empty() && first == ACME_TLS_ALPN)
    };
    one().unwrap_or(false)
}

/// The first handshake message of some records: borrowed when one record holds it.
enum Joined<'a> {
    One(&'a [u8]),
    Many(Vec<u8>),
    Incomplete,
    Bad,
}

fn joined(records: &[u8]) -> Joined<'_> {
    use tls_parser::nom::Err;
    // What cannot begin a ClientHello is known from its first bytes, not after waiting for
    // a length it names: a handshake record (22) of version 3.x, at most 2^14 bytes long.
    match records {
        [t, ..] if *t != 22 => return Joined::Bad,
        [_, major, ..] if *major != 3 => return Joined::Bad,
        [_, _, _, hi, lo, ..] if usize::from(*hi) << 8 | usize::from(*lo) > 1 << 14 => {
            return Joined::Bad
        }
        _ => {}
    }
    let record = match tls_parser::parse_tls_raw_record(records) {
        Ok((_, r)) => r,
        Err(Err::Incomplete(_)) => return Joined::Incomplete,
        Err(_) => return Joined::Bad,
    };
    if record.hdr.record_type != TlsRecordType::Handshake {
        return Joined::Bad;
    }
    let data = record.data;
    if data.len() >= 4 {
        let want =
            4 + (usize::from(data[1]) << 16 | usize::from(data[2]) << 8 | usize::from(data[3]));
        if data.len() >= want {
            return Joined::One(&data[..want]);
        }
        if want > MAX_HELLO {
            return Joined::Bad;
        }
    }
    // Fragmented over several records: joined, or more to read.
    let mut msg = Vec::new();
    let mut rest = records;
    loop {
        let record = match tls_parser::parse_tls_raw_record(rest) {
            Ok((r, record)) => {
                rest = r;
                record
            }
            Err(Err::Incomplete(_)) => return Joined::Incomplete,
            Err(_) => return Joined::Bad,
        };
        if record.hdr.record_type != TlsRecordType::Handshake {
            return Joined::Bad;
        }
        msg.extend_from_slice(record.data);
        if msg.len() >= 4 {
            let want =
                4 + (usize::from(msg[1]) << 16 | usize::from(msg[2]) << 8 | usize::from(msg[3]));
            if want > MAX_HELLO {
                return Joined::Bad;
            }
            if msg.len() >= want {
                msg.truncate(want);
                return Joined::Many(msg);
            }
        }
    }
}

/// The handshake message that starts `records`, its fragments joined.
fn reassemble(mut records: &[u8]) -> Option<Vec<u8>> {
    let mut msg = Vec::new();
    loop {
        let (rest, record) = tls_parser::parse_tls_raw_record(records).ok()?;
        if record.hdr.record_type != TlsRecordType::Handshake {
            return None;
        }
        msg.extend_from_slice(record.data);
        records = rest;
        if msg.len() >= 4 {
            let want =
                4 + (usize::from(msg[1]) << 16 | usize::from(msg[2]) << 8 | usize::from(msg[3]));
            if want > MAX_HELLO {
                return None;
            }
            if msg.len() >= want {
                msg.truncate(want);
                return Some(msg);
            }
        }
    }
}

/// supported_versions in a ClientHello (versions<2..254>): whether it offers TLS 1.3.
fn offers_tls13(data: &[u8]) -> Option<bool> {
    let (rest, mut list) = length_data(be_u8::<_, ()>)(data).ok()?;
    let mut found = false;
    while !list.is_empty() {
        let (r, v) = be_u16::<_, ()>(list).ok()?;
        found |= v == TLS13;
        list = r;
    }
    rest.is_empty().then_some(found)
}

/// pre_shared_key in a ClientHello (RFC 8446 §4.2.11): identities<7..2^16-1>, each an
/// identity<1..2^16-1> and an obfuscated age (u32); the binders that follow are rustls'.
fn psk_identities(data: &[u8]) -> Option<Vec<Vec<u8>>> {
    let (_, mut list) = length_data(be_u16::<_, ()>)(data).ok()?;
    let mut out = Vec::new();
    while !list.is_empty() {
        let (r, id) = length_data(be_u16::<_, ()>)(list).ok()?;
        let (r, _age) = be_u32::<_, ()>(r).ok()?;
        list = r;
        if out.len() < MAX_IDENTITIES && !id.is_empty() {
            out.push(id.to_vec());
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: Server = Server {
        tls13: true,
        tls12: true,
        stateless: false,
    };

    /// A ClientHello record: session ID and extensions as given.
    fn hello(session_id: &[u8], exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[0x11; 32]);
        body.push(session_id.len() as u8);
        body.extend_from_slice(session_id);
        body.extend_from_slice(&[0, 2, 0x13, 0x01, 1, 0]);
        let mut ext = Vec::new();
        for (kind, data) in exts {
            ext.extend_from_slice(&kind.to_be_bytes());
            ext.extend_from_slice(&(data.len() as u16).to_be_bytes());
            ext.extend_from_slice(data);
        }
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut msg = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
        msg.extend_from_slice(&body);
        let mut rec = vec![22, 3, 1, (msg.len() >> 8) as u8, msg.len() as u8];
        rec.extend_from_slice(&msg);
        rec
    }

    fn tls13() -> (u16, Vec<u8>) {
        (43, vec![4, 0x03, 0x04, 0x03, 0x03])
    }

    fn psk(ids: &[&[u8]]) -> (u16, Vec<u8>) {
        let mut list = Vec::new();
        for id in ids {
            list.extend_from_slice(&(id.len() as u16).to_be_bytes());
            list.extend_from_slice(id);
            list.extend_from_slice(&[0, 0, 0, 9]);
        }
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&list);
        data.extend_from_slice(&[0, 33, 32]);
        data.extend_from_slice(&[0; 32]);
        (41, data)
    }

    #[test]
    fn tls12_session_id_is_looked_up_unless_a_ticket_will_be_used() {
        let r = resumable(&hello(&[5; 32], &[]), ALL).unwrap();
        assert_eq!(r.session_id.as_deref(), Some(&[5u8; 32][..]));
        let with_ticket = hello(&[5; 32], &[(35, vec![1, 2, 3])]);
        let stateless = Server {
            stateless: true,
            ..ALL
        };
        assert!(resumable(&with_ticket, stateless).unwrap().is_empty());
        assert!(resumable(&with_ticket, ALL).unwrap().session_id.is_some());
        assert!(resumable(&hello(&[], &[]), ALL).unwrap().is_empty());
    }

    #[test]
    fn tls13_clients_random_session_id_is_not_looked_up_but_their_tickets_are() {
        let h = hello(
            &[5; 32],
            &[tls13(), psk(&[b"ticket-one", b"two", b"three"])],
        );
        let r = resumable(&h, ALL).unwrap();
        assert_eq!(r.session_id, None);
        assert_eq!(r.tickets, [b"ticket-one".to_vec(), b"two".to_vec()]);
        let stateless = Server {
            stateless: true,
            ..ALL
        };
        assert!(resumable(&h, stateless).unwrap().is_empty());
        // A server without TLS 1.3 speaks 1.2 to it: the session ID is what counts.
        let only12 = Server {
            tls13: false,
            ..ALL
        };
        assert!(resumable(&h, only12).unwrap().session_id.is_some());
    }

    #[test]
    fn openssl_hellos_from_the_fuzz_corpus() {
        let psk = include_bytes!("../../../../fuzz/corpus/client_hello/seed-tls13-psk");
        let r = resumable(psk, ALL).unwrap();
        assert_eq!((r.session_id, r.tickets.len()), (None, 1));
        let id = include_bytes!("../../../../fuzz/corpus/client_hello/seed-tls12-session-id");
        assert_eq!(
            resumable(id, ALL).unwrap().session_id.map(|i| i.len()),
            Some(32)
        );
        let plain = include_bytes!("../../../../fuzz/corpus/client_hello/seed-plain");
        assert!(resumable(plain, ALL).unwrap().is_empty());
    }

    #[test]
    fn a_hello_split_over_records_is_joined_and_broken_ones_are_refused() {
        let whole = hello(&[7; 16], &[]);
        let msg = &whole[5..];
        let mut split = Vec::new();
        for part in [&msg[..10], &msg[10..]] {
            split.extend_from_slice(&[22, 3, 1, 0, part.len() as u8]);
            split.extend_from_slice(part);
        }
        assert_eq!(
            resumable(&split, ALL).unwrap().session_id.as_deref(),
            Some(&[7u8; 16][..])
        );
        assert!(resumable(&whole[..whole.len() - 1], ALL).is_none());
        assert!(resumable(b"GET / HTTP/1.1\r\n\r\n", ALL).is_none());
        let mut bad_psk = psk(&[b"x"]);
        bad_psk.1.truncate(3);
        assert!(resumable(&hello(&[], &[tls13(), bad_psk]), ALL).is_none());
    }

    fn sni(name: &[u8]) -> (u16, Vec<u8>) {
        let mut entry = vec![0];
        entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
        entry.extend_from_slice(name);
        let mut data = (entry.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&entry);
        (0, data)
    }

    fn alpn(protos: &[&[u8]]) -> (u16, Vec<u8>) {
        let mut list = Vec::new();
        for p in protos {
            list.push(p.len() as u8);
            list.extend_from_slice(p);
        }
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&list);
        (16, data)
    }

    #[test]
    fn peek_finds_the_name_and_the_acme_check() {
        let h = hello(&[], &[sni(b"API.example.com"), alpn(&[b"acme-tls/1"])]);
        assert_eq!(
            peek(&h),
            Peek::Hello {
                server_name: Some("API.example.com".into()),
                acme_alpn: true
            }
        );
        // An address is no name (as rustls reads it); ACME with another protocol is not a check.
        let h = hello(&[], &[sni(b"10.0.0.1"), alpn(&[b"acme-tls/1", b"h2"])]);
        assert_eq!(
            peek(&h),
            Peek::Hello {
                server_name: None,
                acme_alpn: false
            }
        );
        // Every prefix is incomplete; fragmented over records, it is joined.
        let h = hello(&[], &[sni(b"a.example.com")]);
        for n in 0..h.len() {
            assert_eq!(peek(&h[..n]), Peek::Incomplete, "{n}");
        }
        let msg = &h[5..];
        let mut split = Vec::new();
        for part in msg.chunks(7) {
            split.extend_from_slice(&[22, 3, 1, 0, part.len() as u8]);
            split.extend_from_slice(part);
        }
        assert!(
            matches!(peek(&split), Peek::Hello { server_name: Some(n), .. } if &*n == "a.example.com")
        );
        assert_eq!(peek(&split[..split.len() - 1]), Peek::Incomplete);
        // Not a handshake record, or a hello that does not parse: known at once.
        assert_eq!(peek(&[23, 3, 3, 0, 1, 0]), Peek::NotAHello);
        assert_eq!(peek(b"GET / HTTP/1.0\r\n"), Peek::NotAHello);
        assert_eq!(peek(b"G"), Peek::NotAHello);
        assert_eq!(peek(&[22, 3, 1, 0x40, 1]), Peek::NotAHello);
        let mut bad = h.clone();
        bad[9] = 9; // not a ClientHello body's version
        bad[5] = 2; // a ServerHello
        assert_eq!(peek(&bad), Peek::NotAHello);
    }
}
