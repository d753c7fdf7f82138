//! `floor-server`: what the libraries shuck is built on cost for one answer, without shuck
//! (`bench/floor.sh`). One thread answers `200`, no body, to every request: HTTP/1.1 over
//! TLS 1.3 on TCP (tokio-rustls) and HTTP/3 over QUIC (quinn and h3) on the same port, from
//! one rustls configuration (one certificate, one suite). The ratio of its full QUIC
//! handshake's CPU to its full TCP + TLS 1.3 one is the floor under shuck's own ratio: the
//! share the transport libraries take, whatever the gateway above them does.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The answer to a request on a `raw` QUIC stream.
const RAW_ANSWER: &[u8] = b"200";

/// The answer to every HTTP/1.1 request.
const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";

/// One certificate's TLS 1.3 server configuration with the one suite every server is given
/// (the one QUIC starts with, as bench/handshake-ab.sh runs shuck), ALPN left to the caller.
pub(crate) fn tls13_config(pem: &Path) -> anyhow::Result<rustls::ServerConfig> {
    let certs = CertificateDer::pem_file_iter(pem)
        .and_then(|c| c.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("certificates in {}", pem.display()))?;
    anyhow::ensure!(!certs.is_empty(), "no certificate in {}", pem.display());
    let key = PrivateKeyDer::from_pem_file(pem)
        .with_context(|| format!("a private key in {}", pem.display()))?;
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.cipher_suites =
        vec![rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256];
    Ok(
        rustls::ServerConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_no_client_auth()
            .with_single_cert(certs, key)?,
    )
}

/// Serves on `addr` (TCP and UDP) with the certificate and key in the PEM file `pem`, on
/// one thread, until killed.
pub fn run(addr: SocketAddr, pem: &Path) -> anyhow::Result<()> {
    let tls = tls13_config(pem)?;
    let mut tcp_tls = tls.clone();
    tcp_tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut quic_tls = tls;
    // `raw`: QUIC alone, a stream for a request (`h3-load --raw`), to tell quinn's share
    // from h3's.
    quic_tls.alpn_protocols = vec![b"h3".to_vec(), b"raw".to_vec()];
    quic_tls.max_early_data_size = 0;
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(quic_tls))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(quic));
    // shuck's transport settings where they change a short connection's packets.
    let mut transport = quinn::TransportConfig::default();
    transport
        .max_concurrent_uni_streams(4u32.into())
        .mtu_discovery_config(Some(quinn::MtuDiscoveryConfig::default()));
    server.transport_config(Arc::new(transport));
    let mut validation = quinn::ValidationTokenConfig::default();
    validation.sent(1);
    server.validation_token_config(validation);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on TCP {addr}"))?;
        let endpoint = quinn::Endpoint::server(server, addr)
            .with_context(|| format!("listening on UDP {addr}"))?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tcp_tls));
        tokio::task::spawn_local(async move {
            while let Some(incoming) = endpoint.accept().await {
                tokio::task::spawn_local(async move {
                    let _ = h3_conn(incoming).await;
                });
            }
        });
        loop {
            let (tcp, _) = listener.accept().await?;
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            tokio::task::spawn_local(async move {
                let _ = h1_conn(acceptor, tcp).await;
            });
        }
    })
}

/// One TCP connection: its handshake, then `200` to each request head until the client
/// closes.
async fn h1_conn(
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
) -> anyhow::Result<()> {
    let mut tls = acceptor.accept(tcp).await?;
    let mut buf = vec![0u8; 16 * 1024];
    let mut have = 0;
    loop {
        let n = tls.read(&mut buf[have..]).await?;
        if n == 0 {
            return Ok(());
        }
        have += n;
        // Each complete head gets its answer; a partial one waits for more.
        while let Some(end) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") {
            tls.write_all(ANSWER).await?;
            buf.copy_within(end + 4..have, 0);
            have -= end + 4;
        }
        anyhow::ensure!(have < buf.len(), "a request head over {} bytes", buf.len());
    }
}

/// One QUIC connection: its handshake, then `200` to each HTTP/3 request until it ends (or,
/// with ALPN `raw`, [`RAW_ANSWER`] to each stream's request).
async fn h3_conn(incoming: quinn::Incoming) -> anyhow::Result<()> {
    let conn = incoming.await?;
    let raw = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.protocol)
        .is_some_and(|p| p == b"raw");
    if raw {
        while let Ok((mut send, mut recv)) = conn.accept_bi().await {
            tokio::task::spawn_local(async move {
                if recv.read_to_end(1024).await.is_ok() {
                    let _ = send.write_all(RAW_ANSWER).await;
                    let _ = send.finish();
                }
            });
        }
        return Ok(());
    }
    let mut h3c: h3::server::Connection<h3_quinn::Connection, bytes::Bytes> =
        h3::server::Connection::new(h3_quinn::Connection::new(conn)).await?;
    while let Some(resolver) = h3c.accept().await? {
        tokio::task::spawn_local(async move {
            let answer = async {
                let (_, mut stream) = resolver.resolve_request().await?;
                let response = http::Response::builder().status(200).body(())?;
                stream.send_response(response).await?;
                stream.finish().await?;
                anyhow::Ok(())
            };
            let _ = answer.await;
        });
    }
    Ok(())
}

/// `h3-load --raw`'s requests on one connection: a stream each, `GET` on it and its end,
/// then the answer read to its end, until `end` (one when `once`); each answered one is
/// counted in `ok`.
pub async fn raw_requests(
    conn: quinn::Connection,
    once: bool,
    end: std::time::Instant,
    ok: &std::sync::atomic::AtomicU64,
) -> anyhow::Result<()> {
    let result = async {
        loop {
            let (mut send, mut recv) = conn.open_bi().await?;
            send.write_all(b"GET").await?;
            send.finish()?;
            let answer = recv.read_to_end(1024).await?;
            anyhow::ensure!(answer == RAW_ANSWER, "answer {answer:?}");
            ok.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if once || std::time::Instant::now() >= end {
                return Ok(());
            }
        }
    }
    .await;
    conn.close(0u32.into(), b"");
    result
}
