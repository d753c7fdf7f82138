//! Entry points for the fuzz targets (`fuzz/`) and for the test that replays their corpora
//! on stable Rust (`tests/fuzz_corpus.rs`): each hands bytes from outside to one parser as
//! the data path or the configuration loader does. None may panic, whatever the bytes.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::server::ProducesTickets;

use crate::gateway::h1::chunked::Chunked;
use crate::gateway::h1::{Exchange, RequestRewriter, ResponseTracker};
use crate::session::tickets::TicketKeys;

/// A parser's entry point: bytes in, nothing out but a panic if it has a bug.
pub type Entry = fn(&[u8]);

/// The targets, by name (the fuzz target's and the corpus directory's).
pub const TARGETS: &[(&str, Entry)] = &[
    ("proxy_header", proxy_header),
    ("http_request", http_request),
    ("http_response", http_response),
    ("chunked", chunked),
    ("config_file", config_file),
    ("config_values", config_values),
    ("ticket", ticket),
    ("ticket_keys_file", ticket_keys_file),
    ("ocsp_response", ocsp_response),
    ("pem", pem),
    ("datagram", datagram),
    ("client_hello", client_hello),
    ("store_value", store_value),
    ("acme", acme),
    ("admin_request", admin_request),
    ("gateway_request", gateway_request),
];

/// A PROXY v1/v2 header from the client side (`--proxy-proxy`).
pub fn proxy_header(data: &[u8]) {
    let _ = crate::edge::preamble::parse_received(data);
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
        ex.pending.push_back(crate::gateway::h1::Pending::Normal);
        if t.observe(part, &mut ex).is_err() {
            break; // the relay ends there
        }
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

/// Endpoint, backend, duration, certificate-option and TLS-parameter values as flags and
/// config keys give them: the first byte picks the parser, the rest is the value.
pub fn config_values(data: &[u8]) {
    use crate::config::{backend::BackendSpec, endpoint::Endpoint, pem_file::PemFile};
    use crate::tls::params;
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(value) = std::str::from_utf8(rest) else {
        return;
    };
    match which % 11 {
        0 => drop(Endpoint::parse("--frontend", value)),
        1 => drop(BackendSpec::parse(value)),
        2 => drop(crate::config::duration::parse_duration(value)),
        // Paths are only taken apart here; no file is read unless one of that name exists.
        3 => drop(PemFile::parse(value)),
        4 => drop(params::parse_tls12_ciphers(value)),
        5 => drop(params::parse_tls13_suites(value)),
        6 => drop(params::parse_protocols(value)),
        7 => drop(params::parse_groups(value)),
        8 => drop(params::parse_alpn(value)),
        9 => drop(crate::config::cli::parse_on_off(value)),
        _ => drop(crate::tls::client_auth::Mode::parse(value)),
    }
}

/// The key ring of [`ticket`]: a fixed `--ticket-keys` file, so that the fuzzer can find
/// the key names; tickets never expire under it, whatever the clock says.
fn ticket_ring() -> Option<&'static TicketKeys> {
    static RING: OnceLock<Option<TicketKeys>> = OnceLock::new();
    RING.get_or_init(|| {
        let text = "# two 48-byte keys\n\
                    AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4v\n\
                    ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoOEhYaHiImKi4yNjo+QkZKT\n";
        let forever = Duration::from_secs(1 << 40);
        TicketKeys::from_text(text, Path::new("fuzz.keys"), forever).ok()
    })
    .as_ref()
}

/// Random bytes as a session ticket (what a client may put in its ClientHello), and the
/// same bytes as a ticket's plaintext, which must come back whole through a ticket.
pub fn ticket(data: &[u8]) {
    let Some(ring) = ticket_ring() else {
        panic!("the fixed ticket key file no longer parses");
    };
    let _ = ring.decrypt(data);
    if let Some(sealed) = ring.encrypt(data) {
        assert_eq!(
            ring.decrypt(&sealed).as_deref(),
            Some(data),
            "a ticket round trip"
        );
    }
}

/// A `--ticket-keys` file's text.
pub fn ticket_keys_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = TicketKeys::from_text(text, Path::new("fuzz.keys"), Duration::from_secs(300));
}

/// An OCSP response (fetched from a responder or read from `ocsp-resp-file`) checked against
/// a fixed certificate and its issuer, as the stapler checks it.
pub fn ocsp_response(data: &[u8]) {
    static PAIR: OnceLock<Option<(Vec<u8>, Vec<u8>)>> = OnceLock::new();
    let pair = PAIR.get_or_init(|| {
        let der = |pem: &[u8]| CertificateDer::from_pem_slice(pem).ok().map(|c| c.to_vec());
        Some((
            der(include_bytes!("ocsp-leaf.pem"))?,
            der(include_bytes!("ocsp-issuer.pem"))?,
        ))
    });
    let Some((leaf, issuer)) = pair else {
        panic!("the fixed OCSP certificates no longer parse");
    };
    let _ = crate::tls::ocsp::verify::verify(data, leaf, issuer, SystemTime::now(), None);
}

/// A PEM file as `--pem-file` and `pem-file` give it: certificates and one key.
pub fn pem(data: &[u8]) {
    let _ = crate::tls::LoadedCert::from_pem(data, "fuzz.pem", None);
}

/// A replication datagram as it arrives on the UDP port: the header checks and the seal;
/// then arbitrary plaintext through the records parser, as if the seal had passed.
pub fn datagram(data: &[u8]) {
    use crate::session::sync::datagram::{Header, Sealer};
    use crate::session::sync::wire::{self, Record};
    let Ok(sealer) = Sealer::new(&[7; 32]) else {
        return;
    };
    let mut copy = data.to_vec();
    let _ = sealer.open(&mut copy, &[1; 8]);
    let mut sealed = Vec::new();
    let plain = &data[..data.len().min(wire::MAX_PLAINTEXT)];
    let header = Header {
        sender: [2; 8],
        timestamp: 0,
        sequence: 0,
    };
    if sealer.seal(&header, plain, &mut sealed).is_ok() {
        if let Ok((_, records)) = sealer.open(&mut sealed, &[1; 8]) {
            for r in wire::records(records) {
                if let Ok(Record::Keys(body)) = r {
                    let _ = wire::keys(body).count();
                }
            }
        }
    }
}

/// A client's first bytes, read for the server name and the ACME check (routes, SNI
/// policies), and for the session ID and PSK identities to fetch from the shared store
/// (`--shared-store`), under every way a server may resume.
pub fn client_hello(data: &[u8]) {
    let _ = crate::tls::hello::peek(data);
    for tls13 in [true, false] {
        for stateless in [true, false] {
            let server = crate::tls::hello::Server {
                tls13,
                tls12: true,
                stateless,
            };
            let _ = crate::tls::hello::resumable(data, server);
        }
    }
}

/// A value read from the shared store: opened as a session and as the ticket ring under a
/// fixed farm key, and the ring's encoding decoded as if it had opened.
pub fn store_value(data: &[u8]) {
    use crate::session::store::{self, SharedStore};
    static STORE: OnceLock<Option<SharedStore>> = OnceLock::new();
    let shared = STORE.get_or_init(|| {
        let settings = store::Settings::fixture("redis://127.0.0.1:6379")?;
        SharedStore::new(settings, Duration::from_secs(300)).ok()
    });
    if let Some(shared) = shared {
        let name = shared.session_name(b"fuzz");
        store::open_any(shared, &name, data);
    }
    let _ = crate::session::tickets::RingState::decode(&mut crate::codec::Reader::new(data));
}

/// What ACME reads from outside: the first byte picks a farm message from another host
/// (which must encode back to the same bytes) or a request head on the http-01 port (which
/// must get a response; a 301's Location must be one line).
pub fn acme(data: &[u8]) {
    use crate::acme::farm::FarmMsg;
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    if which % 2 == 0 {
        if let Some(m) = FarmMsg::decode(rest) {
            assert_eq!(m.encode(), rest, "a farm message that does not encode back");
        }
    } else {
        let settings = crate::redirect::answer::Settings {
            code: 308,
            port: Some(8443),
            acme: true,
        };
        let mut out = Vec::new();
        if crate::redirect::answer::respond(rest, true, settings, &mut out).is_none() {
            return;
        }
        let r = String::from_utf8_lossy(&out);
        assert!(r.starts_with("HTTP/1.1 "), "{r}");
        let head = r.split("\r\n\r\n").next().unwrap_or("");
        assert!(
            head.split("\r\n")
                .all(|l| !l.contains('\n') && !l.contains('\r')),
            "a response head split by the request: {r:?}"
        );
    }
}

/// An admin API request (`--admin-socket`, `--admin-listen`): read whole and in every
/// prefix, then the call it names; a call that crosses to the worker must decode back to
/// itself, and a configuration error always becomes `{file, line, message}`.
pub fn admin_request(data: &[u8]) {
    use crate::admin::{request, Call, WorkerCall};
    for cut in [data.len() / 3, data.len() / 2, data.len()] {
        let _ = request::parse(&data[..cut]);
    }
    if let Ok(Some(req)) = request::parse(data) {
        assert!(req.body.len() <= request::MAX_BODY);
        if let Ok(Call::SetServer {
            backend,
            server,
            change,
        }) = Call::of(&req)
        {
            let call = WorkerCall::SetServer(crate::admin::ServerSetting {
                backend,
                server,
                change,
            });
            assert_eq!(WorkerCall::decode(&call.encode()), Some(call));
        }
    }
    let text = String::from_utf8_lossy(data);
    let v = crate::admin::config_error_json(&text);
    assert!(v.get("message").is_some());
}

/// An HTTP/2 or HTTP/3 request's fields, one `name: value` a line (pseudo-header fields
/// as the client sends them), through what the gateway core judges for every version: the
/// request as h2 and h3 hand it over, its HTTP/1.1 head for the backend, the path its route
/// matches. A head that passes names one Host, the `:authority`'s, and a declared body
/// never comes with the stream already ended.
pub fn gateway_request(data: &[u8]) {
    use crate::gateway::h1::request::Forwarding;
    use crate::gateway::request::{build, Body};
    let text = String::from_utf8_lossy(data);
    let mut builder = http::Request::builder();
    let mut uri = http::Uri::builder();
    let mut protocol = None;
    let mut fields = Vec::new();
    for line in text.lines() {
        let Some((name, value)) = line.split_once(": ") else {
            continue;
        };
        match name {
            ":method" => builder = builder.method(value),
            ":scheme" => uri = uri.scheme(value),
            ":authority" => uri = uri.authority(value),
            ":path" => uri = uri.path_and_query(value),
            ":protocol" => protocol = Some(h2::ext::Protocol::from(value)),
            _ => fields.push((name, value)),
        }
    }
    let Ok(uri) = uri.build() else {
        return;
    };
    builder = builder.uri(uri);
    for (n, v) in fields {
        builder = builder.header(n, v);
    }
    let Ok(mut req) = builder.body(()) else {
        return;
    };
    if let Some(p) = protocol {
        req.extensions_mut().insert(p);
    }
    let (parts, ()) = req.into_parts();
    let fwd = Forwarding::new(
        IpAddr::V4(Ipv4Addr::new(203, 0, 113, 5)),
        Some(("X-Client-Cert", Some("CN=fuzz"))),
    );
    for end_stream in [true, false] {
        let mut out = Vec::new();
        if let Ok((body, _)) = build(&parts, end_stream, &fwd, None, None, None, &mut out) {
            let head = String::from_utf8_lossy(&out);
            assert_eq!(head.matches("\r\nHost: ").count(), 1, "{head}");
            assert!(!(end_stream && matches!(body, Body::Length(n) if n > 0)));
        }
    }
    let _ = crate::gateway::path::for_matching(parts.uri.path());
    let _ = crate::gateway::choose::split_target(&text);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixtures must let the fuzzer reach past the checks: the seed response verifies
    /// against them, and a ticket from the fixed ring opens.
    #[test]
    fn the_fixtures_reach_the_deep_paths() {
        let leaf = CertificateDer::from_pem_slice(include_bytes!("ocsp-leaf.pem")).unwrap();
        let issuer = CertificateDer::from_pem_slice(include_bytes!("ocsp-issuer.pem")).unwrap();
        let good = include_bytes!("../../../../fuzz/corpus/ocsp_response/seed-good");
        let staple =
            crate::tls::ocsp::verify::verify(good, &leaf, &issuer, SystemTime::now(), None);
        assert!(staple.is_ok(), "{staple:?}");
        let delegated = include_bytes!("../../../../fuzz/corpus/ocsp_response/seed-delegated");
        assert!(crate::tls::ocsp::verify::verify(
            delegated,
            &leaf,
            &issuer,
            SystemTime::now(),
            None
        )
        .is_ok());
        let ring = ticket_ring().unwrap();
        let sealed = ring.encrypt(b"session").unwrap();
        assert_eq!(ring.decrypt(&sealed).as_deref(), Some(&b"session"[..]));
    }
}
