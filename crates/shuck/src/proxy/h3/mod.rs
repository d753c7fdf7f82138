//! HTTP/3 in `--http` mode (`--quic`): QUIC termination on every worker thread, as HAProxy's
//! `bind quic4@` and nginx's `listen ... quic` in front of HTTP/1.1 servers. quinn speaks
//! QUIC over the frontend's own rustls configuration (its certificates, SNI, client
//! verification, session cache and ticket key ring: a ticket from the TCP side or another
//! worker resumes here), h3 speaks HTTP/3; each request stream goes to the gateway core
//! (`proxy/gateway/`) exactly as an HTTP/2 stream does (`stream.rs` hands h3's halves to
//! it). Each worker thread owns one UDP socket of a steered `SO_REUSEPORT` group
//! (`steer.rs`); `conn.rs` drives one connection.

mod conn;
mod drops;
mod resume;
pub mod steer;
mod stream;

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use super::{FrontendState, Worker};
use crate::config::Limits;
use crate::counters::WorkerCounters;
use crate::shutdown::Shutdown;
use crate::tls::TlsState;

/// Why a frontend's QUIC side could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum QuicError {
    /// rustls's configuration cannot serve QUIC (no TLS 1.3 suite QUIC can start with).
    #[error("the TLS configuration cannot serve QUIC: {0}")]
    Tls(String),
    /// The socket could not be registered.
    #[error("the UDP socket: {0}")]
    Socket(#[from] std::io::Error),
}

/// QUIC's address-validation tokens: the key that seals both kinds (a Retry's, and
/// NEW_TOKEN's for a client's next connection), and the log of NEW_TOKEN tokens used, so
/// that each is taken once by this host (every worker thread shares it).
#[derive(Clone)]
pub struct Tokens {
    key: Arc<dyn quinn::crypto::HandshakeTokenKey>,
    used: Arc<quinn::BloomTokenLog>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tokens(..)")
    }
}

/// The token key: derived from the farm's key (HKDF-SHA256 with a label of its own, so it
/// opens nothing else the farm key seals), so that a token one host issued is taken by
/// another; without one, a random key of this process's. The log of used tokens is the
/// process's own (quinn's Bloom filter pair, 10 MiB at most).
pub fn tokens(farm: Option<[u8; 32]>) -> Tokens {
    let secret = farm.unwrap_or_else(|| {
        let mut k = [0u8; 32];
        // A failing RNG leaves a fixed key: tokens would still be sealed, only guessable.
        let _ = aws_lc_rs::rand::fill(&mut k);
        k
    });
    Tokens {
        key: Arc::new(TokenKey::new(&secret)),
        used: Arc::new(quinn::BloomTokenLog::default()),
    }
}

/// The token key: PRK = HKDF-Extract(label, farm key); each token's AES-256-GCM key is
/// HKDF-Expand(PRK, its random bytes, 32), as quinn's own key (aws-lc's `Prk`) derives it,
/// so hosts of one farm agree whichever shuck they run. The PRK's HMAC is keyed once here:
/// aws-lc's `Prk` extracts and keys it again for every token, two of which (one opened, one
/// issued) each full handshake costs.
struct TokenKey(aws_lc_rs::hmac::Key);

impl TokenKey {
    fn new(secret: &[u8]) -> Self {
        use aws_lc_rs::hmac;
        let salt = hmac::Key::new(hmac::HMAC_SHA256, b"shuck quic retry token key");
        let prk = hmac::sign(&salt, secret);
        Self(hmac::Key::new(hmac::HMAC_SHA256, prk.as_ref()))
    }
}

impl quinn::crypto::HandshakeTokenKey for TokenKey {
    fn aead_from_hkdf(&self, random_bytes: &[u8]) -> Box<dyn quinn::crypto::AeadKey> {
        use aws_lc_rs::{aead, hmac};
        // HKDF-Expand's first block, T(1) = HMAC(PRK, info | 0x01), is the whole key.
        let mut ctx = hmac::Context::with_key(&self.0);
        ctx.update(random_bytes);
        ctx.update(&[1]);
        let okm = ctx.sign();
        // AES-256 takes any 32 bytes; SHA-256's tag is 32 bytes.
        let key =
            aead::UnboundKey::new(&aead::AES_256_GCM, okm.as_ref()).expect("a 32-byte AES-256 key");
        Box::new(aead::LessSafeKey::new(key))
    }
}

/// `--quic-retry Above(N)`: new connections a worker took in the current second.
struct RetryMeter {
    second: std::time::Instant,
    count: u32,
}

impl RetryMeter {
    /// Counts one; whether this one must prove its address first.
    fn wants_retry(&mut self, mode: crate::config::QuicRetry) -> bool {
        use crate::config::QuicRetry;
        let now = std::time::Instant::now();
        if now.duration_since(self.second) >= Duration::from_secs(1) {
            self.second = now;
            self.count = 0;
        }
        self.count = self.count.saturating_add(1);
        match mode {
            QuicRetry::Always => true,
            QuicRetry::Never => false,
            QuicRetry::Above(n) => self.count > n,
        }
    }
}

/// The `Alt-Svc` value announcing HTTP/3 on `port` for `max_age` seconds.
pub fn alt_svc(port: u16, max_age: u64) -> http::HeaderValue {
    let v = format!("h3=\":{port}\"; ma={max_age}");
    http::HeaderValue::from_str(&v).unwrap_or(http::HeaderValue::from_static("clear"))
}

/// quinn's server configuration for a frontend's TLS state: its rustls configuration with
/// ALPN `h3` only, and the limits of `--h3-*` and `--http-*`. 0-RTT (`--quic-early-data`)
/// where it can be taken safely: with single-use tickets from the session cache, and not
/// where client certificates are verified (they would be known only after the requests).
/// Whether it is on is returned with it.
pub fn server_config(
    tls: &TlsState,
    limits: &Limits,
    tokens: &Tokens,
    counters: &Arc<WorkerCounters>,
) -> Result<(quinn::ServerConfig, bool), QuicError> {
    // Certificates with their own client verification: a configuration that asks every
    // client, checked by the served certificate after the handshake (`conn.rs`).
    let base = tls.quic_auth.as_ref().map_or(&tls.config, |q| &q.config);
    let mut rustls = (**base).clone();
    rustls.alpn_protocols = vec![b"h3".to_vec()];
    let early = limits.h3.early_data && tls.cache.is_some() && !tls.verifies_clients;
    if early {
        // QUIC's only other value (RFC 9001 §4.6.1): the amount is QUIC's flow control's.
        rustls.max_early_data_size = u32::MAX;
        rustls.ticketer = Arc::new(resume::StatefulOnly);
    } else {
        rustls.max_early_data_size = 0;
    }
    if rustls.ticketer.enabled() {
        rustls.ticketer = Arc::new(resume::CountedTickets {
            ring: rustls.ticketer.clone(),
            counters: counters.clone(),
        });
    } else if let Some(cache) = &tls.cache {
        rustls.session_storage = Arc::new(resume::QuicSessions {
            cache: cache.clone(),
            store: tls.store.clone(),
            counters: counters.clone(),
        });
    }
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(rustls))
        .map_err(|e| QuicError::Tls(e.to_string()))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.token_key(tokens.key.clone());
    // NEW_TOKEN: one token per connection, for the client's next one (a returning client
    // skips the Retry, and its first flight is not held to three times what it sent).
    let mut validation = quinn::ValidationTokenConfig::default();
    validation.log(tokens.used.clone()).sent(1);
    config.validation_token_config(validation);
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(limits.h3.max_concurrent_streams.into())
        // The client's control stream and QPACK's two, and room for a grease stream.
        .max_concurrent_uni_streams(4u32.into())
        .max_idle_timeout(
            quinn::IdleTimeout::try_from(limits.http_keepalive_timeout.max(Duration::from_secs(1)))
                .ok(),
        )
        // What one stream and one connection may have in flight from the client: the
        // memory a connection costs is bounded by these and by h3's field section size.
        .stream_receive_window(quinn::VarInt::from_u32(limits.h3.stream_window))
        .receive_window(quinn::VarInt::from_u32(
            limits.h3.stream_window.saturating_mul(8),
        ))
        .send_window(u64::from(limits.h3.stream_window) * 8);
    if limits.h3.mtu_discovery {
        t.mtu_discovery_config(Some(quinn::MtuDiscoveryConfig::default()));
    } else {
        t.mtu_discovery_config(None);
    }
    config.transport_config(Arc::new(t));
    config.migration(limits.h3.migration);
    config.max_incoming(limits.h3.max_incoming);
    Ok((config, early))
}

/// One worker thread's QUIC endpoint for a frontend: from `start` (at once, but for a
/// binary upgrade's new process), accepts on its socket (number `index` of the frontend's
/// steered group of `workers`) until shutdown or the frontend's removal;
/// a reload gives new connections the new TLS state. Then no new connection is taken and
/// the established ones finish their requests (each sends `GOAWAY`: `conn.rs`).
pub async fn serve(
    socket: std::net::UdpSocket,
    index: usize,
    workers: usize,
    frontend: Arc<FrontendState>,
    worker: Rc<Worker>,
    [mut shutdown, mut stop, mut start]: [Shutdown; 3],
) {
    // At a binary upgrade the previous process reads these same sockets until its QUIC
    // connections have drained and it has exited: reading them too would take its
    // connections' packets, which this process could only answer with a reset.
    tokio::select! {
        _ = start.recv() => {}
        _ = shutdown.recv() => return,
        _ = stop.recv() => return,
    }
    let limits = &worker.state.limits;
    let local = socket.local_addr().ok();
    let mut socket_drops = drops::SocketDrops::watch(&socket);
    let mut drops_tick = tokio::time::interval(Duration::from_secs(1));
    drops_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let tokens = &worker.state.quic_tokens;
    let counters = &worker.counters;
    let mut early = false;
    let started =
        server_config(&frontend.tls.load(), limits, tokens, counters).and_then(|(config, e)| {
            early = e;
            let mut ep = quinn::EndpointConfig::default();
            ep.cid_generator(move || Box::new(steer::WorkerCids::new(index, workers)));
            ep.drop_hook(drops::hook(worker.counters.clone()));
            let runtime = Arc::new(quinn::TokioRuntime);
            Ok(quinn::Endpoint::new(ep, Some(config), socket, runtime)?)
        });
    let endpoint = match started {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(
                name: "quic_endpoint_failed",
                frontend = %frontend.name,
                worker = worker.id,
                error = %e,
                "cannot serve QUIC on {}: {e}",
                frontend.name,
            );
            return;
        }
    };
    let local: Option<SocketAddr> = local.or_else(|| endpoint.local_addr().ok());
    let mut reloads = frontend.reloads.subscribe();
    let mut meter = RetryMeter {
        second: std::time::Instant::now(),
        count: 0,
    };
    loop {
        tokio::select! {
            _ = shutdown.recv() => break,
            _ = stop.recv() => break,
            _ = drops_tick.tick(), if socket_drops.is_some() => {
                if let Some(d) = socket_drops.as_mut() {
                    d.update(counters);
                }
            }
            r = reloads.changed() => {
                if r.is_err() {
                    break;
                }
                match server_config(&frontend.tls.load(), limits, tokens, counters) {
                    Ok((c, e)) => {
                        endpoint.set_server_config(Some(c));
                        early = e;
                    }
                    Err(e) => tracing::error!(
                        name: "quic_reload_failed",
                        frontend = %frontend.name,
                        error = %e,
                        "QUIC keeps the previous TLS configuration: {e}",
                    ),
                }
            }
            incoming = endpoint.accept() => match incoming {
                Some(i) => {
                    WorkerCounters::bump(&worker.counters.http.h3.incoming);
                    // A client that has not proven its address yet, when asked to: a Retry
                    // (no state kept); its next Initial carries the token back.
                    let i = if !i.remote_address_validated()
                        && i.may_retry()
                        && meter.wants_retry(limits.h3.retry)
                    {
                        match i.retry() {
                            Ok(()) => {
                                WorkerCounters::bump(&worker.counters.http.h3.retries);
                                continue;
                            }
                            Err(e) => e.into_incoming(),
                        }
                    } else {
                        i
                    };
                    // Boxed: a connection's future is large, and an unboxed task's future is
                    // copied whole at its spawn and again as it ends.
                    tokio::task::spawn_local(Box::pin(conn::serve(
                        i,
                        worker.clone(),
                        frontend.clone(),
                        local,
                        early,
                    )));
                }
                None => break,
            },
        }
    }
    // New connections are refused from now on; established ones drain (their tasks hold
    // the worker's live count, which the drain deadline bounds).
    endpoint.set_server_config(None);
    endpoint.wait_idle().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_with_one_farm_key_open_each_others_tokens() {
        let (a, b, other) = (
            tokens(Some([7; 32])),
            tokens(Some([7; 32])),
            tokens(Some([8; 32])),
        );
        let nonce = [1u8; 32];
        let mut token = b"the client's address and its first ID".to_vec();
        a.key.aead_from_hkdf(&nonce).seal(&mut token, b"").unwrap();
        let mut copy = token.clone();
        let opened = b.key.aead_from_hkdf(&nonce).open(&mut copy, b"").unwrap();
        assert_eq!(opened, b"the client's address and its first ID");
        let mut copy = token.clone();
        assert!(other
            .key
            .aead_from_hkdf(&nonce)
            .open(&mut copy, b"")
            .is_err());
        // quinn's own token key (aws-lc's HKDF) opens ours: a farm's hosts agree.
        let prk =
            aws_lc_rs::hkdf::Salt::new(aws_lc_rs::hkdf::HKDF_SHA256, b"shuck quic retry token key")
                .extract(&[7; 32]);
        let mut copy = token.clone();
        let opened = quinn::crypto::HandshakeTokenKey::aead_from_hkdf(&prk, &nonce)
            .open(&mut copy, b"")
            .unwrap();
        assert_eq!(opened, b"the client's address and its first ID");
        // Without a farm key each process draws its own.
        let mut copy = token;
        assert!(tokens(None)
            .key
            .aead_from_hkdf(&nonce)
            .open(&mut copy, b"")
            .is_err());
    }
}
