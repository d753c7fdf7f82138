//! HTTP/3 in `--http` mode (`--quic`): QUIC termination on every worker thread, as HAProxy's
//! `bind quic4@` and nginx's `listen ... quic` in front of HTTP/1.1 servers. quinn speaks
//! QUIC over the frontend's own rustls configuration (its certificates, SNI, client
//! verification, session cache and ticket key ring: a ticket from the TCP side or another
//! worker resumes here), h3 speaks HTTP/3; each request stream goes to the gateway core
//! (`gateway/`) exactly as an HTTP/2 stream does (`stream.rs` hands h3's halves to
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

use crate::config::Limits;
use crate::counters::WorkerCounters;
use crate::edge::{FrontendState, Worker};
use crate::shutdown::Shutdown;
use crate::tls::quic_tokens::Tokens;
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
                    // A source near or over its connection limits is asked to prove its
                    // address first, whatever --quic-retry says: its limits are then
                    // judged before the TLS work, and a spoofed one never comes back.
                    let i = if !i.remote_address_validated()
                        && i.may_retry()
                        && (meter.wants_retry(limits.h3.retry)
                            || frontend.quic_client_near_limits(&worker.state, i.remote_address().ip()))
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
