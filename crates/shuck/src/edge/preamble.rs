//! The preamble stage: what shuck writes to the backend before the client's bytes, to say
//! who the client is (PROXY protocol v1 or v2 with TLS TLVs, stud's write-ip), and reading
//! a PROXY header that an L4 balancer in front sent (`--proxy-proxy`).
//!
//! PROXY headers are parsed and built with the `ppp` crate: it implements both versions
//! and their TLVs to the HAProxy specification, and is what other Rust proxies use.

use std::io;
use std::net::{IpAddr, SocketAddr};

use ppp::v2;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

pub use crate::config::Preamble;
use crate::edge::route::{preamble_index, PREAMBLES};
use crate::edge::ProxyState;
use crate::tls::client_auth::Subject;

/// Who the client is: from the socket, or from a PROXY header received in front.
#[derive(Debug, Clone)]
pub struct Origin {
    /// The client's address.
    pub src: SocketAddr,
    /// The address it connected to.
    pub dst: SocketAddr,
    /// The PROXY header received (`--proxy-proxy`), re-encoded from what was parsed: a
    /// backend never sees bytes the hop in front sent unchecked.
    pub received: Option<Vec<u8>>,
}

/// TLS facts for PROXY v2 TLVs.
#[derive(Debug, Default)]
pub struct TlsFacts<'a> {
    /// Negotiated ALPN protocol.
    pub alpn: Option<&'a [u8]>,
    /// SNI sent by the client.
    pub sni: Option<&'a str>,
    /// "TLSv1.2" or "TLSv1.3".
    pub version: Option<&'a str>,
    /// The cipher suite, OpenSSL-style name.
    pub cipher: Option<&'a str>,
    /// The client certificate (DER), when the client sent one: rustls has verified it.
    pub client_cert: Option<&'a [u8]>,
    /// With `--proxy-client-cert`: the certificate's common name (`Some("")` for one
    /// without), and the certificate itself in TLV 0xE0, as hitch sends them.
    pub client_cn: Option<&'a str>,
}

/// Why a PROXY header from the client side was refused.
#[derive(Debug, thiserror::Error)]
pub enum PreambleError {
    /// The client did not start with a PROXY header.
    #[error("expected a PROXY protocol header (--proxy-proxy) from the client side")]
    Missing,
    /// The header is malformed.
    #[error("malformed PROXY protocol header: {0}")]
    Malformed(String),
    /// Reading failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Longest PROXY header accepted from the client side (v1: 107 bytes; v2 with TLVs).
const MAX_RECEIVED: usize = 4096;
const V2_SIG: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";

/// Reads a PROXY v1 or v2 header from `tcp`; returns the origin it names and any bytes
/// read past it (the start of the TLS handshake).
pub async fn receive(
    tcp: &mut TcpStream,
    socket_src: SocketAddr,
    socket_dst: SocketAddr,
) -> Result<(Origin, Vec<u8>), PreambleError> {
    let mut buf = Vec::with_capacity(256);
    loop {
        if let Some(Parsed {
            len,
            addrs,
            encoded,
        }) = parse_received(&buf)?
        {
            let (src, dst) = addrs.unwrap_or((socket_src, socket_dst));
            let rest = buf.split_off(len);
            return Ok((
                Origin {
                    src,
                    dst,
                    received: Some(encoded),
                },
                rest,
            ));
        }
        if buf.len() >= MAX_RECEIVED {
            return Err(PreambleError::Malformed("longer than 4096 bytes".into()));
        }
        let mut chunk = [0u8; 512];
        let want = chunk.len().min(MAX_RECEIVED - buf.len());
        let n = tcp.read(&mut chunk[..want]).await?;
        if n == 0 {
            return Err(PreambleError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A PROXY header read from the client side.
pub(crate) struct Parsed {
    /// Its length in the input.
    len: usize,
    /// The addresses it names; `None` for LOCAL/UNKNOWN (use the socket's).
    addrs: Option<(SocketAddr, SocketAddr)>,
    /// The same header encoded anew from what was parsed (for `--proxy-proxy` alone).
    encoded: Vec<u8>,
}

/// `Ok(None)`: need more bytes.
pub(crate) fn parse_received(buf: &[u8]) -> Result<Option<Parsed>, PreambleError> {
    let prefix = buf.len().min(V2_SIG.len());
    if buf[..prefix] == V2_SIG[..prefix] {
        if buf.len() < 16 {
            return Ok(None);
        }
        let len = 16 + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
        if buf.len() < len {
            return Ok(None);
        }
        let h = v2::Header::try_from(&buf[..len])
            .map_err(|e| PreambleError::Malformed(e.to_string()))?;
        let addrs = match (h.command, h.addresses) {
            (v2::Command::Proxy, v2::Addresses::IPv4(a)) => Some((
                SocketAddr::new(a.source_address.into(), a.source_port),
                SocketAddr::new(a.destination_address.into(), a.destination_port),
            )),
            (v2::Command::Proxy, v2::Addresses::IPv6(a)) => Some((
                SocketAddr::new(a.source_address.into(), a.source_port),
                SocketAddr::new(a.destination_address.into(), a.destination_port),
            )),
            _ => None,
        };
        let encoded = reencode_v2(&h)?;
        return Ok(Some(Parsed {
            len,
            addrs,
            encoded,
        }));
    }
    let prefix = buf.len().min(6);
    if buf[..prefix] != b"PROXY "[..prefix] {
        return Err(PreambleError::Missing);
    }
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        if buf.len() > 107 {
            return Err(PreambleError::Malformed(
                "v1 line longer than 107 bytes".into(),
            ));
        }
        return Ok(None);
    };
    let len = end + 2;
    // Control bytes (which ppp lets through after UNKNOWN) are refused: a backend's parser
    // may read them as something else.
    if buf[..end].iter().any(|&b| b < 0x20 || b == 0x7f) {
        return Err(PreambleError::Malformed(
            "control bytes in the v1 line".into(),
        ));
    }
    let h = ppp::v1::Header::try_from(&buf[..len])
        .map_err(|e| PreambleError::Malformed(e.to_string()))?;
    let addrs = match h.addresses {
        ppp::v1::Addresses::Tcp4(a) => Some((
            SocketAddr::new(a.source_address.into(), a.source_port),
            SocketAddr::new(a.destination_address.into(), a.destination_port),
        )),
        ppp::v1::Addresses::Tcp6(a) => Some((
            SocketAddr::new(a.source_address.into(), a.source_port),
            SocketAddr::new(a.destination_address.into(), a.destination_port),
        )),
        ppp::v1::Addresses::Unknown => None,
    };
    Ok(Some(Parsed {
        len,
        addrs,
        encoded: h.addresses.to_string().into_bytes(),
    }))
}

/// A v2 header built anew from `h`'s command, addresses and TLVs; a TLV that does not
/// parse is refused.
fn reencode_v2(h: &v2::Header<'_>) -> Result<Vec<u8>, PreambleError> {
    let bad = |e: String| PreambleError::Malformed(e);
    let mut b = v2::Builder::with_addresses(h.version | h.command, h.protocol, h.addresses);
    for tlv in h.tlvs() {
        let tlv = tlv.map_err(|e| bad(format!("a TLV does not parse: {e}")))?;
        b = b
            .write_tlv(tlv.kind, &tlv.value)
            .map_err(|e| bad(e.to_string()))?;
    }
    b.build().map_err(|e| bad(e.to_string()))
}

/// IPv4 clients of a dual-stack socket appear as `::ffff:a.b.c.d`; backends want a.b.c.d.
pub fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// `--write-ip`'s family octet for IPv4 (Linux's `AF_INET`).
const AF_INET: u8 = 2;
/// `--write-ip`'s family octet for IPv6 (Linux's `AF_INET6`).
const AF_INET6: u8 = 10;

/// What a connection may write before the client's bytes: one preamble per kind its
/// backends use (most often one, or none), built once after the handshake.
#[derive(Debug, Default, Clone)]
pub struct Preambles([Option<Box<[u8]>>; PREAMBLES]);

impl Preambles {
    /// The preambles of the kinds marked in `kinds` ([`preamble_index`]).
    pub fn build(kinds: [bool; PREAMBLES], origin: &Origin, tls: &TlsFacts<'_>) -> Self {
        let all = [
            Preamble::ProxyV1,
            Preamble::ProxyV2,
            Preamble::WriteIp,
            Preamble::PassThrough,
        ];
        let mut p = Preambles::default();
        for kind in all {
            if let Some(i) = preamble_index(kind).filter(|&i| kinds[i]) {
                p.0[i] = Some(build(kind, origin, tls).into_boxed_slice());
            }
        }
        p
    }

    /// The preamble of `kind`, if built and not empty.
    pub fn get(&self, kind: Preamble) -> Option<&[u8]> {
        let bytes = self.0.get(preamble_index(kind)?)?.as_deref()?;
        (!bytes.is_empty()).then_some(bytes)
    }
}

/// What the backends are told of a client, alike over TCP and QUIC: the preambles of the
/// kinds `wanted` (their facts asked of `facts` only then), and the client certificate's
/// subject when `--proxy-client-cert` or `--client-cert-header` needs it.
pub fn told<'a>(
    state: &ProxyState,
    wanted: [bool; PREAMBLES],
    origin: &Origin,
    client_cert: Option<&'a [u8]>,
    facts: impl FnOnce() -> TlsFacts<'a>,
) -> (Preambles, Option<Subject>) {
    let subject = if state.proxy_client_cert || state.client_cert_header.is_some() {
        client_cert.and_then(Subject::of)
    } else {
        None
    };
    let preambles = if wanted.iter().any(|&w| w) {
        let facts = TlsFacts {
            client_cert,
            client_cn: subject
                .as_ref()
                .filter(|_| state.proxy_client_cert)
                .map(|s| s.cn.as_deref().unwrap_or("")),
            ..facts()
        };
        Preambles::build(wanted, origin, &facts)
    } else {
        Preambles::default()
    };
    (preambles, subject)
}

/// `--client-cert-header`: its name, and the subject it carries (none without a
/// certificate).
pub fn cert_header<'s>(
    state: &'s ProxyState,
    subject: &'s Option<Subject>,
) -> Option<(&'s str, Option<&'s str>)> {
    state
        .client_cert_header
        .as_deref()
        .map(|name| (name, subject.as_ref().map(|s| s.name.as_str())))
}

/// One preamble of `kind`.
pub fn build(kind: Preamble, origin: &Origin, tls: &TlsFacts<'_>) -> Vec<u8> {
    let (src, dst) = (canonical(origin.src), canonical(origin.dst));
    match kind {
        Preamble::None => Vec::new(),
        Preamble::PassThrough => origin.received.clone().unwrap_or_default(),
        // stud's and hitch's layout: the address family as the kernel numbers it
        // (AF_INET 2, AF_INET6 10), then the address in network order.
        Preamble::WriteIp => match src.ip() {
            IpAddr::V4(ip) => [&[AF_INET][..], &ip.octets()].concat(),
            IpAddr::V6(ip) => [&[AF_INET6][..], &ip.octets()].concat(),
        },
        Preamble::ProxyV1 => {
            let addrs = if src.is_ipv4() == dst.is_ipv4() {
                ppp::v1::Addresses::from((src, dst))
            } else {
                ppp::v1::Addresses::Unknown
            };
            addrs.to_string().into_bytes()
        }
        Preamble::ProxyV2 => build_v2(src, dst, tls),
    }
}

fn build_v2(src: SocketAddr, dst: SocketAddr, tls: &TlsFacts<'_>) -> Vec<u8> {
    let version_command = v2::Version::Two | v2::Command::Proxy;
    let builder = if src.is_ipv4() == dst.is_ipv4() {
        v2::Builder::with_addresses(version_command, v2::Protocol::Stream, (src, dst))
    } else {
        v2::Builder::with_addresses(
            version_command,
            v2::Protocol::Unspecified,
            v2::Addresses::Unspecified,
        )
    };
    // The SSL TLV: client flags (PP2_CLIENT_SSL), the verify result, then sub-TLVs for the
    // version and the cipher, as hitch and HAProxy send it. The verify result is 0 only
    // for a certificate presented and verified (PROXY protocol §2.2.5); hitch sends 1 when
    // there is none. With a client certificate: PP2_CLIENT_CERT_CONN | PP2_CLIENT_CERT_SESS,
    // and with --proxy-client-cert its common name.
    let (client, verify) = match tls.client_cert {
        Some(_) => (0x07, 0u32),
        None => (0x01, 1u32),
    };
    let mut ssl = vec![client];
    ssl.extend_from_slice(&verify.to_be_bytes());
    for (kind, value) in [
        (v2::Type::SSLVersion, tls.version),
        (
            v2::Type::SSLCommonName,
            tls.client_cn.filter(|c| !c.is_empty()),
        ),
        (v2::Type::SSLCipher, tls.cipher),
    ] {
        if let Some(v) = value {
            let len = u16::try_from(v.len()).unwrap_or(u16::MAX);
            ssl.push(kind.into());
            ssl.extend_from_slice(&len.to_be_bytes());
            ssl.extend_from_slice(&v.as_bytes()[..usize::from(len)]);
        }
    }
    let with_tlvs = (|| -> io::Result<Vec<u8>> {
        let mut b = builder;
        if let Some(alpn) = tls.alpn {
            b = b.write_tlv(v2::Type::ALPN, alpn)?;
        }
        if let Some(sni) = tls.sni {
            b = b.write_tlv(v2::Type::Authority, sni.as_bytes())?;
        }
        if let (Some(der), Some(_)) = (tls.client_cert, tls.client_cn) {
            b = b.write_tlv(CLIENT_CERT_TLV, &trusted_certificate_pem(der))?;
        }
        b.write_tlv(v2::Type::SSL, &ssl)?.build()
    })();
    // Building into a Vec cannot fail short of allocation failure; fall back to a bare
    // header rather than nothing.
    with_tlvs.unwrap_or_else(|_| {
        v2::Builder::with_addresses(version_command, v2::Protocol::Stream, (src, dst))
            .build()
            .unwrap_or_default()
    })
}

/// hitch's TLV for the client certificate (0xE0, the first of the types the PROXY
/// protocol leaves to applications).
const CLIENT_CERT_TLV: u8 = 0xE0;

/// A certificate as OpenSSL's `PEM_write_bio_X509_AUX` writes it (what hitch sends in
/// TLV 0xE0): base64 in lines of 64 under the `TRUSTED CERTIFICATE` label.
fn trusted_certificate_pem(der: &[u8]) -> Vec<u8> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = b"-----BEGIN TRUSTED CERTIFICATE-----\n".to_vec();
    for line in b64.as_bytes().chunks(64) {
        pem.extend_from_slice(line);
        pem.push(b'\n');
    }
    pem.extend_from_slice(b"-----END TRUSTED CERTIFICATE-----\n");
    pem
}

/// The OpenSSL name of a rustls cipher suite, as backends that read the SSL TLV expect.
pub fn openssl_cipher_name(s: rustls::CipherSuite) -> &'static str {
    use rustls::CipherSuite as C;
    match s {
        C::TLS13_AES_128_GCM_SHA256 => "TLS_AES_128_GCM_SHA256",
        C::TLS13_AES_256_GCM_SHA384 => "TLS_AES_256_GCM_SHA384",
        C::TLS13_CHACHA20_POLY1305_SHA256 => "TLS_CHACHA20_POLY1305_SHA256",
        C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 => "ECDHE-ECDSA-AES128-GCM-SHA256",
        C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 => "ECDHE-ECDSA-AES256-GCM-SHA384",
        C::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-ECDSA-CHACHA20-POLY1305",
        C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => "ECDHE-RSA-AES128-GCM-SHA256",
        C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => "ECDHE-RSA-AES256-GCM-SHA384",
        C::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-RSA-CHACHA20-POLY1305",
        _ => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(src: &str, dst: &str) -> Origin {
        Origin {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            received: None,
        }
    }

    #[test]
    fn v1_text() {
        let o = origin("192.0.2.7:5555", "127.0.0.1:443");
        assert_eq!(
            build(Preamble::ProxyV1, &o, &TlsFacts::default()),
            b"PROXY TCP4 192.0.2.7 127.0.0.1 5555 443\r\n"
        );
        let o = origin("[2001:db8::1]:5555", "[::1]:443");
        assert_eq!(
            build(Preamble::ProxyV1, &o, &TlsFacts::default()),
            b"PROXY TCP6 2001:db8::1 ::1 5555 443\r\n"
        );
        let o = origin("[::ffff:192.0.2.7]:5555", "[::ffff:127.0.0.1]:443");
        assert_eq!(
            build(Preamble::ProxyV1, &o, &TlsFacts::default()),
            b"PROXY TCP4 192.0.2.7 127.0.0.1 5555 443\r\n"
        );
    }

    #[test]
    fn write_ip() {
        assert_eq!(
            build(
                Preamble::WriteIp,
                &origin("192.0.2.7:1", "127.0.0.1:2"),
                &TlsFacts::default()
            ),
            [2, 192, 0, 2, 7]
        );
        let v6 = build(
            Preamble::WriteIp,
            &origin("[2001:db8::1]:1", "[::1]:2"),
            &TlsFacts::default(),
        );
        assert_eq!(v6.len(), 17);
        assert_eq!(&v6[..5], &[10, 0x20, 0x01, 0x0d, 0xb8]);
    }

    #[test]
    fn v2_tlvs_decode() {
        let tls = TlsFacts {
            alpn: Some(b"h2"),
            sni: Some("example.com"),
            version: Some("TLSv1.3"),
            cipher: Some("TLS_AES_128_GCM_SHA256"),
            client_cert: None,
            client_cn: None,
        };
        let bytes = build(
            Preamble::ProxyV2,
            &origin("192.0.2.7:5555", "127.0.0.1:443"),
            &tls,
        );
        let h = v2::Header::try_from(bytes.as_slice()).unwrap();
        assert_eq!(h.command, v2::Command::Proxy);
        match h.addresses {
            v2::Addresses::IPv4(a) => {
                assert_eq!(a.source_address.to_string(), "192.0.2.7");
                assert_eq!(a.source_port, 5555);
                assert_eq!(a.destination_port, 443);
            }
            other => panic!("{other:?}"),
        }
        let tlvs: Vec<_> = h.tlvs().map(|t| t.unwrap()).collect();
        assert_eq!(tlvs[0].kind, 0x01);
        assert_eq!(&*tlvs[0].value, b"h2");
        assert_eq!(tlvs[1].kind, 0x02);
        assert_eq!(&*tlvs[1].value, b"example.com");
        assert_eq!(tlvs[2].kind, 0x20);
        let ssl = &tlvs[2].value;
        assert_eq!(ssl[0], 0x01, "PP2_CLIENT_SSL");
        assert_eq!(&ssl[1..5], &[0, 0, 0, 1], "no certificate: not 'verified'");
        assert_eq!(ssl[5], 0x21);
        assert_eq!(&ssl[8..15], b"TLSv1.3");
        assert_eq!(ssl[15], 0x23);
        assert_eq!(&ssl[18..], b"TLS_AES_128_GCM_SHA256");

        // With a verified client certificate: the cert flags and its CN (0x22), and the
        // certificate in TLV 0xE0 as hitch sends it.
        let with_cert = TlsFacts {
            client_cert: Some(&[0x30, 0x03, 0x02, 0x01, 0x07]),
            client_cn: Some("alice"),
            ..tls
        };
        let bytes = build(
            Preamble::ProxyV2,
            &origin("192.0.2.7:5555", "127.0.0.1:443"),
            &with_cert,
        );
        let h = v2::Header::try_from(bytes.as_slice()).unwrap();
        let tlvs: Vec<_> = h.tlvs().map(|t| t.unwrap()).collect();
        assert_eq!(tlvs[2].kind, 0xE0);
        assert_eq!(
            &*tlvs[2].value,
            b"-----BEGIN TRUSTED CERTIFICATE-----\nMAMCAQc=\n-----END TRUSTED CERTIFICATE-----\n"
        );
        let ssl = &tlvs[3].value;
        assert_eq!(ssl[0], 0x07, "SSL | CERT_CONN | CERT_SESS");
        assert_eq!(&ssl[1..5], &[0, 0, 0, 0], "verified");
        assert_eq!(ssl[15], 0x22);
        assert_eq!(&ssl[16..18], &[0, 5]);
        assert_eq!(&ssl[18..23], b"alice");
    }

    #[test]
    fn received_headers() {
        let v1 = b"PROXY TCP4 203.0.113.9 127.0.0.1 40000 443\r\n\x16\x03\x01";
        let p = parse_received(v1).unwrap().unwrap();
        assert_eq!(&v1[p.len..], b"\x16\x03\x01");
        assert_eq!(p.addrs.unwrap().0, "203.0.113.9:40000".parse().unwrap());
        assert_eq!(p.encoded, &v1[..p.len]);
        assert!(parse_received(b"PROXY TCP4 203.0").unwrap().is_none());
        assert!(matches!(
            parse_received(b"\x16\x03\x01\x00"),
            Err(PreambleError::Missing)
        ));
        assert!(parse_received(b"PROXY BOGUS x y\r\n").is_err());
        let v2 = build(
            Preamble::ProxyV2,
            &origin("[2001:db8::9]:7", "[::1]:443"),
            &TlsFacts {
                sni: Some("example.com"),
                version: Some("TLSv1.3"),
                ..TlsFacts::default()
            },
        );
        let p = parse_received(&v2).unwrap().unwrap();
        assert_eq!(p.len, v2.len());
        assert_eq!(p.addrs.unwrap().0, "[2001:db8::9]:7".parse().unwrap());
        assert_eq!(
            p.encoded, v2,
            "a well-formed v2 header is re-encoded as it was"
        );
        assert!(parse_received(&v2[..10]).unwrap().is_none());
        let p = parse_received(b"PROXY UNKNOWN\r\n").unwrap().unwrap();
        assert_eq!(
            (p.len, p.addrs, p.encoded),
            (15, None, b"PROXY UNKNOWN\r\n".to_vec())
        );
        // UNKNOWN with anything after it goes on as a bare UNKNOWN; control bytes are
        // refused.
        let p = parse_received(b"PROXY UNKNOWN whatever 1 2\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(p.encoded, b"PROXY UNKNOWN\r\n");
        assert!(parse_received(b"PROXY UNKNOWN \x1b[2J\r\n").is_err());
        // A v2 header whose TLV area does not parse is refused.
        let mut bad = v2.clone();
        let len = u16::from_be_bytes([bad[14], bad[15]]) + 2;
        bad[14..16].copy_from_slice(&len.to_be_bytes());
        bad.extend_from_slice(&[0x02, 0x00]);
        assert!(matches!(
            parse_received(&bad),
            Err(PreambleError::Malformed(m)) if m.contains("TLV")
        ));
    }
}
