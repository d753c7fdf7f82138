//! One connection's life, top to bottom as in docs/ARCHITECTURE.md, a function a stage:
//! `serve` walks them: `admit` (the PROXY header in) → `accept_tls` (the handshake) →
//! `told` (the preambles, and who serves the requests: the relay, or the gateway over
//! HTTP/2) → the first request (HTTP mode) → `Ends::relay` (choose, connect, preamble,
//! relay; again for each backend the requests move to; `ends.rs`) → `Ends::close`.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

mod client;
mod ends;

use super::client_io::ClientIo;
use super::handshake::{handshake, log_failure, HandshakeError};
use super::relay::RelayEnd;
use super::tls_stream::TlsStream;
use crate::access;
use crate::counters::{FailReason, Failure, FrontendCounters, WorkerCounters};
use crate::edge::preamble::{self, Origin, Preamble, Preambles, TlsFacts};
use crate::edge::route::{preamble_index, BackendId, Routing, PREAMBLES};
use crate::edge::{FrontendState, Worker};
use crate::gateway::choose::Chooser;
use crate::gateway::h1::{self, Http};
use crate::gateway::h2;
use crate::gateway::real_ip::Behind;
use crate::tls::TlsState;
use client::{finish, first_request, CLOSE_GRACE};
use ends::Ends;
use rustls::HandshakeKind;

/// Serves one accepted client connection, stage by stage. `_permit` is the `--max-conns`
/// slot, released when the connection ends.
pub async fn serve(
    worker: Rc<Worker>,
    frontend: Arc<FrontendState>,
    tcp: TcpStream,
    peer: SocketAddr,
    _permit: Option<OwnedSemaphorePermit>,
    admitted: Option<crate::clients::Admitted>,
) {
    let _live = worker.opened();
    let counters = &worker.counters;
    let _closed = ClosedGuard(counters.frontend(frontend.slot));
    let state = &worker.state;
    let started = Instant::now();
    // The backends and routes of this moment: a reload does not move this connection.
    let routing = state.routing.load_full();

    // admit: no Nagle and the keepalive came with the socket (`listener::set_client_options`)
    let Some((origin, io)) = admit(&worker, &routing, tcp, peer).await else {
        return;
    };
    let client = origin.src;
    // With a PROXY header, the client is its source: judged now (else at accept).
    let admitted = match admitted {
        Some(a) => Some(a),
        None if state.proxy_proxy => match frontend.admit_client(state, client) {
            Some(a) => a,
            None => return,
        },
        None => None,
    };
    let requests = admitted.as_ref().and_then(|a| a.requests());

    // handshake, with the TLS state of this moment (a reload during it does not touch it).
    // No named result: a variable would keep a second TlsStream-sized slot in this task for
    // the connection's whole life.
    let tls_state = frontend.tls.load_full();
    let Some(mut tls) = accept_tls(&worker, &routing, &tls_state, io, client).await else {
        return;
    };
    let resumed = tls.conn().handshake_kind() == Some(HandshakeKind::Resumed);
    counters.handshake_done(resumed);
    let log = access_conn(state, &frontend, &tls, client, started.elapsed());

    // The connection's own backend: its server name's route, its frontend's, the default;
    // what the backends are told first; and who serves the requests.
    let (fallback, route) = routing.for_connection(&frontend.name, tls.sni());
    let (preambles, mut http) = match told(
        &worker,
        &frontend,
        &routing,
        &tls_state,
        &tls,
        &origin,
        fallback,
        log.clone(),
        requests,
    ) {
        Told::Relay(preambles, http) => (preambles, http),
        // HTTP/2 negotiated in HTTP mode: the gateway serves the connection. Boxed: its
        // state would otherwise make every connection's future larger, HTTP/2 or not.
        Told::H2(client, max_head) => {
            drop(tls_state);
            return Box::pin(serve_h2(
                &worker, &frontend, tls, client, max_head, resumed, started,
            ))
            .await;
        }
    };
    drop(tls_state);

    // HTTP mode: the first request head is read and accepted before a backend is chosen,
    // so that a request refused (400, 408) or never sent costs no backend connection.
    let first = match http.as_mut() {
        Some(h) => match first_request(&mut tls, h, state.limits.idle_timeout).await {
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

    // choose, connect, preamble, relay: again for each backend the requests move to
    let ends = Ends {
        worker: &worker,
        frontend: &frontend,
        routing: &routing,
        preambles: &preambles,
        client,
        log: log.as_ref(),
        started,
    };
    let Some(relayed) = ends
        .relay(&mut tls, http.as_mut(), fallback, route, first)
        .await
    else {
        return;
    };

    // close
    ends.close(&mut tls, http.as_ref(), relayed, resumed, started)
        .await;
}

/// The client's origin, from a PROXY header when `--proxy-proxy` asks for one (refused, or
/// late past the handshake timeout: counted and logged, `None`), else from the socket.
async fn admit(
    worker: &Worker,
    routing: &Routing,
    mut tcp: TcpStream,
    peer: SocketAddr,
) -> Option<(Origin, ClientIo)> {
    let state = &worker.state;
    let kinds = routing.preambles();
    let wants_dst = [Preamble::ProxyV1, Preamble::ProxyV2]
        .into_iter()
        .any(|p| preamble_index(p).is_some_and(|i| kinds[i]));
    let socket_dst = if wants_dst || state.proxy_proxy {
        tcp.local_addr().unwrap_or(peer)
    } else {
        peer
    };
    if !state.proxy_proxy {
        let origin = Origin {
            src: peer,
            dst: socket_dst,
            received: None,
        };
        return Some((origin, ClientIo::new(tcp)));
    }
    let received = Box::pin(tokio::time::timeout(
        state.limits.handshake_timeout,
        preamble::receive(&mut tcp, peer, socket_dst),
    ))
    .await;
    match received {
        Ok(Ok((origin, rest))) => Some((origin, ClientIo::with_prefix(tcp, rest))),
        Ok(Err(e)) => {
            worker
                .counters
                .failed(Failure::Reason(FailReason::ProxyHeader));
            tracing::debug!(
                name: "conn_proxy_header_refused",
                client = %peer,
                error = %e,
                "PROXY header refused",
            );
            None
        }
        Err(_) => {
            worker
                .counters
                .failed(Failure::Reason(FailReason::ProxyHeader));
            tracing::debug!(
                name: "conn_proxy_header_timeout",
                client = %peer,
                "no PROXY header within the handshake timeout",
            );
            None
        }
    }
}

/// The TLS handshake: the stream, or `None` once a failure is counted and logged (or an
/// ACME tls-alpn-01 challenge answered). Boxed, because its state (ClientHello acceptor and
/// mid-handshake stream, ~3 KB) would otherwise stay reserved in the connection's task for
/// its whole life.
async fn accept_tls(
    worker: &Worker,
    routing: &Routing,
    tls_state: &TlsState,
    io: ClientIo,
    client: SocketAddr,
) -> Option<TlsStream> {
    let state = &worker.state;
    let counters = &worker.counters;
    let v2 = preamble_index(Preamble::ProxyV2).is_some_and(|i| routing.preambles()[i]);
    let want_sni = state.log_connections || (v2 && state.proxy_authority) || routing.by_name();
    match Box::pin(handshake(
        io,
        tls_state,
        state.limits.handshake_timeout,
        want_sni,
    ))
    .await
    {
        Ok(s) => Some(s),
        Err(HandshakeError::AcmeAnswered(name)) => {
            // A full handshake, not a failure: the CA got what it came for.
            WorkerCounters::bump(&counters.handshakes_full);
            tracing::info!(
                name: "acme_tls_alpn_answered",
                name = %name,
                client = %client,
                "answered an ACME tls-alpn-01 challenge for {name}",
            );
            None
        }
        Err(e) => {
            counters.failed(e.failure());
            log_failure(client, &e);
            None
        }
    }
}

/// Who serves a connection's bytes once its handshake is done.
// Taken apart as soon as it is returned: boxing the larger side would cost an allocation a
// connection for nothing.
#[allow(clippy::large_enum_variant)]
enum Told {
    /// shuck relays them (TCP mode, or HTTP/1.1 through the rewriter): the preambles the
    /// backends are told first, and the rewriter in HTTP mode.
    Relay(Preambles, Option<Http>),
    /// The gateway, over HTTP/2 (with the largest request head).
    H2(crate::gateway::Client, usize),
}

/// What the backends are told first and who serves the requests. The client certificate's
/// subject is only needed to build them, so it does not stay in the connection's task while
/// the connection idles.
#[allow(clippy::too_many_arguments)]
fn told(
    worker: &Worker,
    frontend: &FrontendState,
    routing: &Arc<Routing>,
    tls_state: &TlsState,
    tls: &TlsStream,
    origin: &Origin,
    fallback: BackendId,
    log: Option<Rc<access::Conn>>,
    requests: Option<crate::clients::RequestLimit>,
) -> Told {
    let state = &worker.state;
    let limits = &state.limits;
    let client = origin.src;
    let client_cert = tls.conn().peer_certificates().and_then(|c| c.first());
    // TCP mode writes the one backend's; HTTP mode may meet every backend's.
    let mut wanted = routing.preambles();
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
        origin,
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
    let chooser = || {
        Chooser::wanted(routing, tls_state).then(|| {
            let who = (client.ip(), &state.clients);
            Chooser::new(
                routing.clone(),
                fallback,
                &tls_state.resolver,
                tls.sni(),
                who,
            )
        })
    };
    if let (Some(max_head), Some(b"h2")) = (state.http, conn.alpn_protocol()) {
        let fwd = h1::request::Forwarding::new(client.ip(), cert_header)
            .with_request_id(state.request_id());
        let client = crate::gateway::Client {
            addr: client,
            preambles,
            fwd,
            routing: routing.clone(),
            fallback,
            chooser: chooser(),
            alt_svc: frontend.alt_svc.clone(),
            handshake: None,
            log,
            requests,
            policy: routing.frontend_policy(&frontend.name),
            policed: true,
            behind: Behind::of(
                client.ip(),
                state.trusted().as_ref(),
                Some((state.clients.clone(), frontend.client_policy())),
            ),
        };
        return Told::H2(client, max_head);
    }
    let timeouts = h1::Timeouts {
        request: limits.http_request_timeout,
        keepalive: limits.http_keepalive_timeout,
        stall: limits.http_stall_timeout,
    };
    let http = state.http.map(|max| {
        let mut h = Http::new(client.ip(), max, cert_header, timeouts);
        if let Some(line) = &frontend.alt_svc_line {
            h.response.announce(line.clone());
        }
        if routing.has_policy() {
            let connection = crate::edge::route::Target {
                backend: fallback,
                route: routing.sni_route(tls.sni()),
            };
            let own = routing.frontend_policy(&frontend.name);
            h.police(routing.clone(), own, connection);
        }
        if let Some(c) = chooser() {
            h.request.route(c);
        }
        if let Some(limit) = requests {
            h.request.limit_requests(state.clients.clone(), limit);
        }
        let judge = Some((state.clients.clone(), frontend.client_policy()));
        if let Some(b) = Behind::of(client.ip(), state.trusted().as_ref(), judge) {
            h.request.behind(b);
        }
        if let Some(spec) = state.request_id() {
            h.request.request_ids(spec.clone());
            if spec.respond {
                h.response.echo_ids(spec.clone());
            }
        }
        if let (Some(access), Some(conn)) = (&state.access, &log) {
            h.exchange.log = Some(Box::new(h1::log::H1Log::new(access.clone(), conn.clone())));
        }
        h
    });
    Told::Relay(preambles, http)
}

/// HTTP mode over HTTP/2: the gateway serves the connection until it ends; then
/// close_notify, the counters and the log line.
async fn serve_h2(
    worker: &Rc<Worker>,
    frontend: &FrontendState,
    mut tls: TlsStream,
    client: crate::gateway::Client,
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

/// The access log's facts of this connection, when there is an access log.
fn access_conn(
    state: &crate::edge::ProxyState,
    frontend: &FrontendState,
    tls: &TlsStream,
    client: SocketAddr,
    handshake: std::time::Duration,
) -> Option<Rc<access::Conn>> {
    state.access.as_ref()?;
    let sink = frontend.access_sink()?;
    let conn = tls.conn();
    let protocol = match (state.http, conn.alpn_protocol()) {
        (Some(_), Some(b"h2")) => "HTTP/2.0",
        (Some(_), _) => "HTTP/1.1",
        (None, _) => "TCP",
    };
    Some(Rc::new(access::Conn {
        client,
        frontend: frontend.name.clone(),
        sni: tls.sni().map(str::to_owned),
        tls_version: version_name(conn.protocol_version()),
        cipher: conn
            .negotiated_cipher_suite()
            .and_then(|s| s.suite().as_str()),
        resumed: Some(conn.handshake_kind() == Some(HandshakeKind::Resumed)),
        protocol,
        handshake_us: Some(access::record::micros(handshake)),
        sink,
        rendered: Default::default(),
    }))
}

fn version_name(v: Option<rustls::ProtocolVersion>) -> Option<&'static str> {
    match v {
        Some(rustls::ProtocolVersion::TLSv1_3) => Some("TLSv1.3"),
        Some(rustls::ProtocolVersion::TLSv1_2) => Some("TLSv1.2"),
        _ => None,
    }
}
