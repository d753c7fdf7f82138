//! One connection's life, top to bottom as in docs/ARCHITECTURE.md:
//! admit → (PROXY header in) → handshake → choose and connect → preamble → relay → close.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

mod client;

use super::client_io::ClientIo;
use super::h2;
use super::handshake::handshake;
use super::http::choose::Chooser;
use super::http::{self, Http};
use super::preamble::{self, Origin, Preamble, TlsFacts};
use super::relay::{self, relay, RelayEnd};
use super::route::{preamble_index, Backend, PREAMBLES};
use super::tls_stream::TlsStream;
use super::upstream::{self, Upstream};
use super::{FrontendState, Worker};
use crate::counters::{FailReason, Failure, FrontendCounters, WorkerCounters};
use client::{finish, first_request, CLOSE_GRACE};
use rustls::HandshakeKind;

/// Keeps the worker's live count right however the connection ends (including a task
/// dropped at the drain deadline).
pub(in crate::proxy) struct LiveGuard<'a>(pub(in crate::proxy) &'a Worker);

impl Drop for LiveGuard<'_> {
    fn drop(&mut self) {
        self.0.conn_closed();
    }
}

/// Serves one accepted client connection. `_permit` is the `--max-conns` slot, released
/// when the connection ends.
pub async fn serve(
    worker: Rc<Worker>,
    frontend: Arc<FrontendState>,
    mut tcp: TcpStream,
    peer: SocketAddr,
    _permit: Option<OwnedSemaphorePermit>,
) {
    worker.conn_opened();
    let _live = LiveGuard(&worker);
    let counters = &worker.counters;
    let fe_counters = counters.frontend(frontend.slot);
    let _closed = ClosedGuard(fe_counters);
    let state = &worker.state;
    let limits = &state.limits;
    let started = Instant::now();

    // The backends and routes of this moment: a reload does not move this connection.
    let routing = state.routing.load_full();
    let kinds = routing.preambles();
    let v2 = preamble_index(Preamble::ProxyV2).is_some_and(|i| kinds[i]);
    let v1 = preamble_index(Preamble::ProxyV1).is_some_and(|i| kinds[i]);

    // admit: no Nagle and the keepalive came with the socket (`listener::set_client_options`)
    let wants_dst = v1 || v2;
    let socket_dst = if wants_dst || state.proxy_proxy {
        tcp.local_addr().unwrap_or(peer)
    } else {
        peer
    };
    let (origin, io) = if state.proxy_proxy {
        let received = Box::pin(tokio::time::timeout(
            limits.handshake_timeout,
            preamble::receive(&mut tcp, peer, socket_dst),
        ))
        .await;
        match received {
            Ok(Ok((origin, rest))) => (origin, ClientIo::with_prefix(tcp, rest)),
            Ok(Err(e)) => {
                counters.failed(Failure::Reason(FailReason::ProxyHeader));
                tracing::debug!(
                    name: "conn_proxy_header_refused",
                    client = %peer,
                    error = %e,
                    "PROXY header refused",
                );
                return;
            }
            Err(_) => {
                counters.failed(Failure::Reason(FailReason::ProxyHeader));
                tracing::debug!(
                    name: "conn_proxy_header_timeout",
                    client = %peer,
                    "no PROXY header within the handshake timeout",
                );
                return;
            }
        }
    } else {
        (
            Origin {
                src: peer,
                dst: socket_dst,
                received: None,
            },
            ClientIo::new(tcp),
        )
    };
    let client = origin.src;

    // handshake: boxed, because its state (ClientHello acceptor and mid-handshake stream,
    // ~3 KB) would otherwise stay reserved in this task for the connection's whole life.
    // The TLS state of this moment (a reload during the handshake does not touch it). No
    // named result here: a variable would keep a second TlsStream-sized slot in this task
    // for the connection's whole life.
    let want_sni = state.log_connections || (v2 && state.proxy_authority) || routing.by_name();
    let tls_state = frontend.tls.load_full();
    let mut tls = match Box::pin(handshake(
        io,
        &tls_state,
        limits.handshake_timeout,
        want_sni,
    ))
    .await
    {
        Ok(s) => s,
        Err(super::handshake::HandshakeError::AcmeAnswered(name)) => {
            // A full handshake, not a failure: the CA got what it came for.
            WorkerCounters::bump(&counters.handshakes_full);
            tracing::info!(
                name: "acme_tls_alpn_answered",
                name = %name,
                client = %client,
                "answered an ACME tls-alpn-01 challenge for {name}",
            );
            return;
        }
        Err(e) => {
            counters.failed(e.failure());
            super::handshake::log_failure(client, &e);
            return;
        }
    };
    let resumed = tls.conn().handshake_kind() == Some(HandshakeKind::Resumed);
    counters.handshake_done(resumed);

    // The connection's own backend: its server name's route, its frontend's, the default.
    let (fallback, mut route) = routing.for_connection(&frontend.name, tls.sni());

    // What the backend is told first, and the HTTP rewriter; the client certificate's
    // subject is only needed to build them, so it does not stay in this task while the
    // connection idles.
    let (preambles, mut http) = {
        let client_cert = tls.conn().peer_certificates().and_then(|c| c.first());
        // TCP mode writes the one backend's; HTTP mode may meet every backend's.
        let mut wanted = kinds;
        if state.http.is_none() {
            wanted = [false; PREAMBLES];
            if let Some(i) = preamble_index(routing.backend(fallback).preamble) {
                wanted[i] = true;
            }
        }
        let conn = tls.conn();
        let (preambles, subject) = preamble::told(
            state,
            wanted,
            &origin,
            client_cert.map(|c| c.as_ref()),
            || TlsFacts {
                alpn: conn.alpn_protocol(),
                sni: tls.sni().filter(|_| state.proxy_authority),
                version: version_name(conn.protocol_version()),
                cipher: conn
                    .negotiated_cipher_suite()
                    .map(|s| preamble::openssl_cipher_name(s.suite())),
                client_cert: None,
                client_cn: None,
            },
        );
        let cert_header = preamble::cert_header(state, &subject);
        let timeouts = http::Timeouts {
            request: limits.http_request_timeout,
            keepalive: limits.http_keepalive_timeout,
            stall: limits.http_stall_timeout,
        };
        let chooser = || {
            Chooser::wanted(&routing, &tls_state)
                .then(|| Chooser::new(routing.clone(), fallback, &tls_state.resolver, tls.sni()))
        };
        // HTTP/2 negotiated in HTTP mode: the gateway serves the connection.
        if let (Some(max_head), Some(b"h2")) = (state.http, tls.conn().alpn_protocol()) {
            let fwd = http::request::Forwarding::new(client.ip(), cert_header);
            let client = crate::proxy::gateway::Client {
                addr: client,
                preambles,
                fwd,
                routing: routing.clone(),
                fallback,
                chooser: chooser(),
                alt_svc: frontend.alt_svc.clone(),
                handshake: None,
            };
            drop(tls_state);
            // Boxed: the gateway's state would otherwise make every connection's future
            // (and its spawn's copy) larger, HTTP/2 or not.
            return Box::pin(serve_h2(
                &worker, &frontend, tls, client, max_head, resumed, started,
            ))
            .await;
        }
        let http = state.http.map(|max| {
            let mut h = Http::new(client.ip(), max, cert_header, timeouts);
            if let Some(line) = &frontend.alt_svc_line {
                h.response.announce(line.clone());
            }
            if let Some(c) = chooser() {
                h.request.route(c);
            }
            h
        });
        (preambles, http)
    };
    drop(tls_state);

    // HTTP mode: the first request head is read and accepted before a backend is chosen,
    // so that a request refused (400, 408) or never sent costs no backend connection.
    let first = match http.as_mut() {
        Some(h) => match first_request(&mut tls, h, limits.idle_timeout).await {
            Ok(bytes) => bytes,
            Err(end) => {
                if matches!(end, RelayEnd::Misdirected) {
                    WorkerCounters::bump(&counters.http.misdirected);
                }
                finish(&mut tls, &end, client, Some(&*h)).await;
                return;
            }
        },
        None => Vec::new(),
    };

    // choose and connect (boxed for the same reason as the handshake)
    let mut id = http
        .as_ref()
        .and_then(|h| h.request.backend())
        .unwrap_or(fallback);
    if id != fallback {
        route = "host";
    }
    let mut first = Some(first);
    let (mut to_backend, mut to_client) = (0, 0);
    let (out, lease) = loop {
        let b = routing.backend(id);
        let pre = preambles.get(b.preamble);
        let opened = open(
            &worker,
            b,
            pre,
            client,
            &mut tls,
            fe_counters,
            state.http.is_some(),
        );
        let Some((mut backend, lease)) = opened.await else {
            return;
        };
        if let Some(h) = http.as_mut() {
            h.request.serving(lease.server_arc(), id);
        }
        // preamble (unless TLS to the backend sent it before its handshake), and the first
        // request (or the one that moved the connection here)
        let mut opening = match pre {
            Some(p) if backend.is_plain() => p.to_vec(),
            _ => Vec::new(),
        };
        match (first.take(), http.as_mut()) {
            (Some(f), _) => opening.extend_from_slice(&f),
            (None, Some(h)) => {
                if let Err(e) = h.request.moved(&mut opening, &mut h.exchange) {
                    finish(&mut tls, &RelayEnd::BadRequest(e), client, Some(&*h)).await;
                    return;
                }
            }
            (None, None) => {}
        }
        if !opening.is_empty() {
            if let Err(e) = backend.write_all(&opening).await {
                tracing::warn!(
                    name: "conn_preamble_failed",
                    client = %client,
                    backend = %b.name,
                    server = %lease.server().name(),
                    error = %e,
                    "cannot write the preamble",
                );
                return;
            }
        }
        drop(opening);

        // relay
        let out = relay(&mut tls, &mut backend, limits.idle_timeout, http.as_mut()).await;
        to_backend += out.client_to_backend;
        to_client += out.backend_to_client;
        match out.end {
            // A request for another backend: this one has answered all it owed.
            RelayEnd::Switch(next) => {
                id = next;
                route = "host";
                WorkerCounters::bump(&counters.http.backend_switches);
            }
            // The backend ended before answering a request that may go again: a new
            // connection (the pool's next choice) gets it.
            RelayEnd::SendAgain => {
                drop(backend);
                let again = http.as_mut().and_then(|h| h.request.send_again());
                let Some(head) = again else {
                    break (out, Served::Lease(lease));
                };
                WorkerCounters::bump(&counters.http.retries);
                first = Some(head);
            }
            // The backend closed between requests: the client's next request (read before
            // any backend is chosen, as the first) goes to a new connection.
            RelayEnd::BackendClosed => {
                drop(backend);
                let Some(h) = http.as_mut() else {
                    break (out, Served::Lease(lease));
                };
                // No slot or active count held on that server while the client thinks.
                let server = lease.server_arc();
                drop(lease);
                match first_request(&mut tls, h, limits.idle_timeout).await {
                    Ok(bytes) => {
                        first = Some(bytes);
                        if let Some(b) = h.request.backend() {
                            id = b;
                        }
                    }
                    Err(end) => {
                        let out = relay::RelayOutcome { end, ..out };
                        break (out, Served::Gone(server));
                    }
                }
            }
            _ => break (out, Served::Lease(lease)),
        }
    };
    let out = relay::RelayOutcome {
        client_to_backend: to_backend,
        backend_to_client: to_client,
        end: out.end,
    };

    // close
    WorkerCounters::add(&fe_counters.bytes_in, out.client_to_backend);
    WorkerCounters::add(&fe_counters.bytes_out, out.backend_to_client);
    if let Some(h) = &http {
        WorkerCounters::add(&counters.http.requests_h1, h.request.requests());
    }
    match out.end {
        RelayEnd::HttpTimeout(http::Expired::Stall) => {
            WorkerCounters::bump(&counters.http.stalled_h1)
        }
        RelayEnd::Stray => WorkerCounters::bump(&counters.http.backend_stray),
        RelayEnd::Misdirected => WorkerCounters::bump(&counters.http.misdirected),
        _ => {}
    }
    finish(&mut tls, &out.end, client, http.as_ref()).await;
    if state.log_connections {
        let conn = tls.conn();
        tracing::info!(
            name: "connection_closed",
            worker = worker.id,
            client = %client,
            backend = %routing.backend(id).name,
            route,
            server = %lease.name(),
            sni = tls.sni().unwrap_or("-"),
            version = version_name(conn.protocol_version()).unwrap_or("-"),
            protocol = if http.is_some() { "http/1.1" } else { "tcp" },
            handshake = if resumed { "resumed" } else { "full" },
            bytes_in = out.client_to_backend,
            bytes_out = out.backend_to_client,
            ms = started.elapsed().as_millis() as u64,
            end = ?out.end,
            "connection closed",
        );
    }
}

/// The server a connection was last served by, for its log line: still held, or let go
/// while the client's next request was awaited (and none came).
enum Served {
    Lease(crate::backend::Lease),
    Gone(std::sync::Arc<crate::backend::Server>),
}

impl Served {
    fn name(&self) -> &str {
        match self {
            Served::Lease(l) => l.server().name(),
            Served::Gone(s) => s.name(),
        }
    }
}

/// Connects to `backend` for `client` (with TLS, `preamble` goes before the handshake);
/// when no server can be had, the failure is counted and logged, an HTTP client is told
/// 503, and the connection is closed (`None`).
async fn open<S>(
    worker: &Worker,
    backend: &Backend,
    preamble: Option<&[u8]>,
    client: SocketAddr,
    tls: &mut S,
    fe_counters: &FrontendCounters,
    http: bool,
) -> Option<(Upstream, crate::backend::Lease)>
where
    S: tokio::io::AsyncWrite + Unpin,
{
    match Box::pin(upstream::open(backend, &worker.picker, preamble)).await {
        Ok(b) => Some(b),
        Err(e) => {
            worker.connect_failed(client, &e);
            WorkerCounters::bump(&fe_counters.refused);
            if http {
                let _ = tokio::time::timeout(CLOSE_GRACE, tls.write_all(http::SERVICE_UNAVAILABLE))
                    .await;
            }
            // close_notify, then FIN: the client learns at once that nothing will come.
            let _ = tokio::time::timeout(CLOSE_GRACE, tls.shutdown()).await;
            None
        }
    }
}

/// HTTP mode over HTTP/2: the gateway serves the connection until it ends; then
/// close_notify, the counters and the log line.
async fn serve_h2(
    worker: &Rc<Worker>,
    frontend: &FrontendState,
    mut tls: TlsStream,
    client: crate::proxy::gateway::Client,
    max_head: usize,
    resumed: bool,
    started: Instant,
) {
    let state = &worker.state;
    let peer = client.addr;
    let out = h2::serve(
        &mut tls,
        worker.clone(),
        client,
        &state.limits,
        max_head,
        worker.drain.clone(),
        frontend.reloads.subscribe(),
    )
    .await;
    let fe_counters = worker.counters.frontend(frontend.slot);
    WorkerCounters::add(&fe_counters.bytes_in, out.bytes_in);
    WorkerCounters::add(&fe_counters.bytes_out, out.bytes_out);
    let _ = tokio::time::timeout(CLOSE_GRACE, tls.shutdown()).await;
    if state.log_connections {
        let conn = tls.conn();
        tracing::info!(
            name: "connection_closed",
            worker = worker.id,
            client = %peer,
            sni = tls.sni().unwrap_or("-"),
            version = version_name(conn.protocol_version()).unwrap_or("-"),
            protocol = "h2",
            handshake = if resumed { "resumed" } else { "full" },
            streams = out.streams,
            bytes_in = out.bytes_in,
            bytes_out = out.bytes_out,
            ms = started.elapsed().as_millis() as u64,
            end = out.end,
            "connection closed",
        );
    }
}

/// Counts the connection closed however `serve` returns.
struct ClosedGuard<'a>(&'a FrontendCounters);

impl Drop for ClosedGuard<'_> {
    fn drop(&mut self) {
        WorkerCounters::bump(&self.0.closed);
    }
}

fn version_name(v: Option<rustls::ProtocolVersion>) -> Option<&'static str> {
    match v {
        Some(rustls::ProtocolVersion::TLSv1_3) => Some("TLSv1.3"),
        Some(rustls::ProtocolVersion::TLSv1_2) => Some("TLSv1.2"),
        _ => None,
    }
}
