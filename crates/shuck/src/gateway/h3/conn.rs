//! One QUIC connection's life: the handshake (under `--ssl-handshake-timeout`), the client as
//! the backends are told (preambles, forwarding headers, routes by its server name), then
//! HTTP/3 request streams taken as they come, each a task of its own served by the gateway
//! core; `GOAWAY` at a drain, a reload or `--http-keepalive-timeout` of idleness, and a
//! close for a flood of resets (`--h2-max-resets`, which counts h3's as well).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::stream::{Answer, Body};
use crate::counters::WorkerCounters;
use crate::edge::preamble::{self, Origin, TlsFacts};
use crate::edge::{FrontendState, Worker};
use crate::gateway::choose::Chooser;
use crate::gateway::fields::Forwarding;
use crate::gateway::{self, Client, Gateway, Version};

/// How long a request without `Content-Length` is given to show whether a body follows
/// (its stream's end nearly always comes in the head's own packet).
const BODY_PEEK: Duration = Duration::from_millis(50);

/// QUIC's `CONNECTION_REFUSED` (RFC 9000 §20.1), as `Incoming::refuse` sends it.
const CONNECTION_REFUSED: u32 = 0x2;

/// How long a closing connection is given to tell the client.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Serves one incoming QUIC connection until it ends. With 0-RTT (`early`: the
/// configuration accepts it), requests are taken as soon as the client's first flight is
/// read, the handshake completing alongside (`gateway::Handshake` holds what must wait).
pub(super) async fn serve(
    incoming: quinn::Incoming,
    worker: Rc<Worker>,
    frontend: Arc<FrontendState>,
    local: Option<SocketAddr>,
    early: bool,
) {
    let _live = worker.opened();
    let counters = &worker.counters;
    let state = &worker.state;
    let limits = &state.limits;
    let peer = incoming.remote_address();
    // The client's bans and rules before any TLS work, and its limits too when its address
    // is proven (a Retry's token): refused with CONNECTION_REFUSED. An address not proven
    // is charged only once its handshake proves it, so that datagrams with a victim's
    // address as source cannot spend the victim's limits (issue 60).
    let proven = incoming.remote_address_validated();
    let mut admitted = None;
    if proven {
        let Some(a) = frontend.admit_quic_client(state, peer, false) else {
            incoming.refuse();
            return;
        };
        admitted = a;
    } else if !frontend.judge_quic_client(state, peer) {
        incoming.refuse();
        return;
    }
    let connecting = match incoming.accept() {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(
                name: "quic_connection_refused",
                client = %peer,
                error = %e,
                "QUIC connection refused",
            );
            return;
        }
    };
    let Some(max_head) = state.http else {
        return; // --quic is refused without --http; a reload cannot turn it off under us
    };
    let began = Instant::now();
    let deadline = began + limits.handshake_timeout;
    let failed = |e: &dyn std::fmt::Display| {
        WorkerCounters::bump(&counters.http.h3.handshake_failures);
        tracing::debug!(
            name: "quic_handshake_failed",
            client = %peer,
            error = %e,
            "QUIC handshake failed: {e}",
        );
    };
    let (conn, handshake) = match handshake(connecting, early, deadline).await {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    // HTTP/3's control streams (its SETTINGS) are opened at once, as 0.5-RTT data: quinn
    // (vendor/quinn-proto's patch 5) sends them with the HANDSHAKE_DONE and the tickets,
    // not in a datagram of their own after the handshake. Nothing the client sends is read
    // before the handshake completes (but 0-RTT requests, with --quic-early-data).
    let built = open(&conn, max_head, limits.http_request_timeout).await;
    let handshake = match handshake {
        Pending::Early(h, accepted) => Some((h, accepted)),
        Pending::Full(accepted) => {
            if tokio::time::timeout_at(deadline, accepted).await.is_err() {
                return failed(&HandshakeError::Timeout);
            }
            if let Some(e) = conn.close_reason() {
                return failed(&e);
            }
            WorkerCounters::bump(&counters.http.h3.connections);
            None
        }
        Pending::Done => {
            WorkerCounters::bump(&counters.http.h3.connections);
            None
        }
    };
    if !proven {
        // Proven now (or, with 0-RTT, proving it alongside its first requests).
        match frontend.admit_quic_client(state, peer, true) {
            Some(a) => admitted = a,
            None => {
                conn.close(
                    quinn::VarInt::from_u32(CONNECTION_REFUSED),
                    b"client limits",
                );
                return;
            }
        }
    }
    WorkerCounters::bump(&counters.frontend(frontend.slot).accepted);
    let started = Instant::now();
    let data = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok());
    let suite = data.as_ref().and_then(|d| d.cipher_suite);
    let sni = data.and_then(|d| d.server_name);
    if let Err(alert) = served_certificates_check(&frontend, &conn, sni.as_deref()) {
        WorkerCounters::bump(&counters.http.h3.handshake_failures);
        tracing::debug!(
            name: "quic_client_certificate_refused",
            client = %peer,
            sni = sni.as_deref().unwrap_or("-"),
            alert = ?alert,
            "QUIC: the client certificate does not pass the served certificate's client-verify",
        );
        // A TLS alert in QUIC's CRYPTO_ERROR range (RFC 9001 §4.8).
        let code = 0x100 + u32::from(u8::from(alert));
        conn.close(quinn::VarInt::from_u32(code), b"client certificate");
        return;
    }
    let mut client = client(&worker, &frontend, &conn, sni.as_deref(), suite, local);
    client.handshake = handshake.as_ref().map(|(h, _)| h.clone());
    client.requests = admitted.as_ref().and_then(|a| a.requests());
    if let (Some(_), Some(sink)) = (&worker.state.access, frontend.access_sink()) {
        client.log = Some(Rc::new(crate::access::Conn {
            client: peer,
            frontend: frontend.name.clone(),
            sni: sni.clone(),
            tls_version: Some("TLSv1.3"),
            cipher: suite.and_then(|s| s.as_str()),
            // quinn does not say whether a handshake resumed a session.
            resumed: None,
            protocol: "HTTP/3.0",
            handshake_us: Some(crate::access::record::micros(started - began)),
            sink,
            rendered: Default::default(),
        }));
    }
    let gw = Rc::new(Gateway::new(
        worker.clone(),
        Version::H3,
        client,
        limits,
        max_head,
    ));
    let end = match (built, handshake) {
        (Err(end), _) => end,
        (Ok(h3c), None) => drive(&gw, &conn, h3c, &worker, &frontend).await,
        (Ok(h3c), Some((h, accepted))) => {
            // The handshake completes (or not) while the early requests are served: each
            // that waits on it is told. A client that never completes it (a replay) is
            // cut off at --ssl-handshake-timeout.
            let settle = async {
                // quinn's word is whether a client's 0-RTT was taken (false for a server,
                // and for a connection lost): whether it is still open tells.
                let waited = tokio::time::timeout_at(deadline, accepted).await;
                let done = waited.is_ok() && conn.close_reason().is_none();
                h.settle(done);
                if done {
                    WorkerCounters::bump(&counters.http.h3.connections);
                    if h.had_early_requests() {
                        WorkerCounters::bump(&counters.http.h3.zero_rtt);
                    }
                    std::future::pending::<()>().await;
                }
                WorkerCounters::bump(&counters.http.h3.handshake_failures);
                conn.close(quinn::VarInt::from_u32(0x100), b"handshake");
            };
            let end = tokio::select! {
                end = drive(&gw, &conn, h3c, &worker, &frontend) => end,
                () = settle => "handshake failed",
            };
            // Gone before it completed: whatever still waits on it ends.
            if h.is_pending() {
                h.settle(false);
            }
            end
        }
    };
    if conn.remote_address() != peer {
        WorkerCounters::bump(&counters.http.h3.migrated);
    }
    let stats = conn.stats();
    let h3 = &counters.http.h3;
    WorkerCounters::add(&h3.datagrams_in, stats.udp_rx.datagrams);
    WorkerCounters::add(&h3.datagrams_out, stats.udp_tx.datagrams);
    WorkerCounters::add(&h3.lost, stats.path.lost_packets);
    WorkerCounters::bump(&counters.frontend(frontend.slot).closed);
    if state.log_connections {
        tracing::info!(
            name: "connection_closed",
            worker = worker.id,
            client = %peer,
            sni = sni.as_deref().unwrap_or("-"),
            version = "TLSv1.3",
            protocol = "h3",
            streams = gw.streams.get(),
            bytes_in = stats.udp_rx.bytes,
            bytes_out = stats.udp_tx.bytes,
            ms = started.elapsed().as_millis() as u64,
            end = end,
            "h3 connection from {peer} closed ({end})",
        );
    }
}

/// A certificate's own `client-verify`, applied once the handshake is done (see
/// `tls::quic_auth`): the alert to close with when the client does not pass it.
fn served_certificates_check(
    frontend: &FrontendState,
    conn: &quinn::Connection,
    sni: Option<&str>,
) -> Result<(), rustls::AlertDescription> {
    let tls = frontend.tls.load();
    let Some(auth) = &tls.quic_auth else {
        return Ok(());
    };
    let chain = conn.peer_identity().and_then(|i| {
        i.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
            .ok()
    });
    auth.check(
        tls.resolver.choose(sni),
        chain.as_deref().map(Vec::as_slice),
    )
}

/// Why a QUIC handshake did not give a connection.
#[derive(Debug, thiserror::Error)]
enum HandshakeError {
    #[error("{0}")]
    Quic(#[from] quinn::ConnectionError),
    #[error("not complete within --ssl-handshake-timeout")]
    Timeout,
}

/// A connection's handshake under way, and quinn's word that it completed.
enum Pending {
    /// With 0-RTT: what the early requests wait on.
    Early(Rc<gateway::Handshake>, quinn::ZeroRttAccepted),
    /// Without: nothing is read from the client before it completes.
    Full(quinn::ZeroRttAccepted),
    /// Already complete.
    Done,
}

/// The handshake, to the client's first flight read (its server name known); the rest
/// goes on beside the server's 0.5-RTT data (and, with 0-RTT, the early requests).
async fn handshake(
    mut connecting: quinn::Connecting,
    early: bool,
    deadline: Instant,
) -> Result<(quinn::Connection, Pending), HandshakeError> {
    tokio::time::timeout_at(deadline, connecting.handshake_data())
        .await
        .map_err(|_| HandshakeError::Timeout)??;
    match connecting.into_0rtt() {
        Ok((conn, accepted)) if early => {
            let pending = Rc::new(gateway::Handshake::pending());
            Ok((conn, Pending::Early(pending, accepted)))
        }
        Ok((conn, accepted)) => Ok((conn, Pending::Full(accepted))),
        // A server's connection always goes on in 0.5-RTT (quinn); were it not to, the
        // handshake is waited for whole.
        Err(connecting) => {
            let conn = tokio::time::timeout_at(deadline, connecting)
                .await
                .map_err(|_| HandshakeError::Timeout)??;
            Ok((conn, Pending::Done))
        }
    }
}

/// The client as the backends are told: its preambles, forwarding headers and routes.
fn client(
    worker: &Worker,
    frontend: &FrontendState,
    conn: &quinn::Connection,
    sni: Option<&str>,
    suite: Option<rustls::CipherSuite>,
    local: Option<SocketAddr>,
) -> Client {
    let state = &worker.state;
    let routing = state.routing.load_full();
    let (fallback, _) = routing.for_connection(&frontend.name, sni);
    let peer = conn.remote_address();
    let certs = conn.peer_identity().and_then(|i| {
        i.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
            .ok()
    });
    let client_cert = certs.as_deref().and_then(|c| c.first());
    let origin = Origin {
        src: peer,
        dst: local.unwrap_or(peer),
        received: None,
    };
    let (preambles, subject) = preamble::told(
        state,
        routing.preambles(),
        &origin,
        client_cert.map(|c| c.as_ref()),
        || TlsFacts {
            alpn: Some(b"h3"),
            sni: sni.filter(|_| state.proxy_authority),
            version: Some("TLSv1.3"),
            cipher: suite.map(preamble::openssl_cipher_name),
            client_cert: None,
            client_cn: None,
        },
    );
    let cert_header = preamble::cert_header(state, &subject);
    let tls = frontend.tls.load();
    let policy = routing.frontend_policy(&frontend.name);
    let chooser = Chooser::wanted(&routing, &tls).then(|| {
        let who = (peer.ip(), &state.clients);
        Chooser::new(routing.clone(), fallback, &tls.resolver, sni, who)
    });
    Client {
        addr: peer,
        preambles,
        fwd: Forwarding::new(peer.ip(), cert_header).with_request_id(state.request_id()),
        routing,
        fallback,
        chooser,
        // A client on HTTP/3 has found it already: no Alt-Svc (as Caddy; each would be
        // QPACK-encoded afresh, a tenth of an answer's instructions by callgrind).
        alt_svc: None,
        handshake: None,
        log: None,
        requests: None,
        policy,
        policed: true,
        behind: crate::gateway::real_ip::Behind::of(
            peer.ip(),
            state.trusted().as_ref(),
            Some((state.clients.clone(), frontend.client_policy())),
        ),
    }
}

/// h3's side of a connection.
type H3Connection = h3::server::Connection<h3_quinn::Connection, Bytes>;

/// Starts HTTP/3 on the connection: its control and QPACK streams opened, the SETTINGS
/// sent. What went wrong, for the log line.
async fn open(
    conn: &quinn::Connection,
    max_head: usize,
    timeout: Duration,
) -> Result<H3Connection, &'static str> {
    let mut builder = h3::server::builder();
    builder.max_field_section_size(max_head as u64);
    let built = builder.build::<_, Bytes>(h3_quinn::Connection::new(conn.clone()));
    match tokio::time::timeout(timeout, built).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => {
            tracing::debug!(
                name: "h3_connection_refused",
                client = %conn.remote_address(),
                error = %e,
                "HTTP/3 could not start",
            );
            Err("bad settings")
        }
        Err(_) => Err("no settings in time"),
    }
}

/// HTTP/3 over the connection until it ends; what ended it, for the log line.
async fn drive(
    gw: &Rc<Gateway>,
    conn: &quinn::Connection,
    mut h3c: H3Connection,
    worker: &Rc<Worker>,
    frontend: &FrontendState,
) -> &'static str {
    let limits = &worker.state.limits;
    let counters = &worker.counters;
    let keepalive = limits.http_keepalive_timeout;
    let mut drain = worker.drain.clone();
    let mut reload = frontend.reloads.subscribe();
    let mut draining = false;
    let mut end = "closed";
    // The waits live across the loop's turns, as HTTP/2's driver keeps them: made afresh on
    // every turn, each request accepted would set up and tear down a timer and three waiter
    // registrations. The idle timer moves only when it fires (see `idle_check`).
    let mut drained = std::pin::pin!(drain.recv());
    let mut reloaded = std::pin::pin!(reload.changed());
    let mut calm = std::pin::pin!(gw.resets.passed.notified());
    let mut idle_check = gw.idle_since.get() + keepalive;
    let mut timer = std::pin::pin!(tokio::time::sleep_until(idle_check));
    loop {
        tokio::select! {
            biased;
            _ = &mut drained, if !draining => {
                draining = true;
                end = "drained";
            }
            r = &mut reloaded, if !draining => {
                draining = true;
                end = if r.is_ok() { "reload" } else { "frontend removed" };
            }
            () = &mut calm => {
                calm.set(gw.resets.passed.notified());
                if let Some(flood) = gw.resets.flood() {
                    tracing::warn!(
                        name: "h3_rapid_reset",
                        client = %gw.client,
                        limit = gw.resets.limit,
                        flood = flood.as_str(),
                        "HTTP/3: {}: closed with H3_EXCESSIVE_LOAD",
                        flood.why(),
                    );
                    conn.close(quinn::VarInt::from_u32(0x107), flood.as_str().as_bytes());
                    return flood.as_str();
                }
            }
            // Idle for --http-keepalive-timeout: never looked at later than it could come
            // due, and moved only when reached, so that requests do not move the timer.
            () = &mut timer, if !draining => {
                match gw.next_idle_check(Instant::now(), keepalive) {
                    Some(at) => idle_check = at,
                    None => {
                        draining = true;
                        end = "keep-alive timeout";
                    }
                }
                timer.as_mut().reset(idle_check);
            }
            next = h3c.accept() => match next {
                Ok(Some(resolver)) => {
                    let active = gw.stream_opened();
                    let timeout = limits.http_request_timeout;
                    let stall = limits.http_stall_timeout;
                    // Boxed: h3's head-reading future is large, and a task's future is
                    // moved whole at its spawn and as it ends (see `gateway::accept`).
                    tokio::task::spawn_local(Box::pin(async move {
                        let resolved = tokio::time::timeout(timeout, resolver.resolve_request()).await;
                        let (req, stream) = match resolved {
                            Ok(Ok(r)) => r,
                            // Reset before its head was read, or a head h3 refused: the stream
                            // cost a task, and counts against the reset limit.
                            Ok(Err(
                                h3::error::StreamError::RemoteTerminate { .. }
                                | h3::error::StreamError::StreamError { .. },
                            )) => return active.reset_by_client(),
                            _ => return, // too slow, or the connection went
                        };
                        let (tx, rx) = stream.split();
                        let (parts, ()) = req.into_parts();
                        let peek = if parts.headers.contains_key(http::header::CONTENT_LENGTH) {
                            Duration::ZERO
                        } else {
                            BODY_PEEK
                        };
                        let Ok((body, end_stream)) = Body::peek(rx, peek).await else {
                            return active.reset_by_client();
                        };
                        if let Some(serving) =
                            gateway::accept(active, parts, end_stream, body, Answer::new(tx, stall))
                        {
                            serving.await;
                        }
                    }));
                    continue;
                }
                Ok(None) => break, // the client's GOAWAY, or ours, and every request done
                Err(e) => {
                    tracing::debug!(
                        name: "h3_connection_ended",
                        client = %gw.client,
                        error = %e,
                        "HTTP/3 connection ended",
                    );
                    if !e.is_h3_no_error() {
                        end = "protocol error";
                    }
                    break;
                }
            },
        }
        if draining {
            WorkerCounters::bump(&counters.http.h3.goaway);
            // GOAWAY: the requests taken go on; streams past it are refused by h3.
            if tokio::time::timeout(CLOSE_GRACE, h3c.shutdown(0))
                .await
                .is_err()
            {
                break;
            }
            // Streams past it are refused by h3 as accept() meets them; once it has nothing
            // more to give, the answers under way are waited for alone.
            let mut accepting = true;
            while gw.active() > 0 {
                tokio::select! {
                    r = h3c.accept(), if accepting => accepting = matches!(r, Ok(Some(_))),
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            }
            // The last answers may still be in quinn's buffers, which a close discards:
            // the client, told GOAWAY and answered, closes itself; it is given a moment.
            let _ = tokio::time::timeout(CLOSE_GRACE, conn.closed()).await;
            break;
        }
    }
    conn.close(quinn::VarInt::from_u32(0x100), b"");
    end
}
