//! A connection's backend ends: choosing, connecting, the preamble and the relay, again for
//! each backend its requests move to (`Ends::relay`), then its close (`Ends::close`).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::AsyncWriteExt;

use super::client::{finish, first_request, CLOSE_GRACE};
use super::version_name;
use crate::access::{self, Cause};
use crate::config::Proto;
use crate::counters::{FrontendCounters, WorkerCounters};
use crate::edge::preamble::Preambles;
use crate::edge::route::{Backend, BackendId, Routing};
use crate::edge::upstream::{self, Upstream};
use crate::edge::{FrontendState, Worker};
use crate::gateway::h1::front;
use crate::gateway::h1::{self, Http};
use crate::proxy::relay::{self, relay, RelayEnd};
use crate::proxy::tls_stream::TlsStream;

/// The backend ends of one client connection: what choosing, connecting and relaying read.
pub(super) struct Ends<'a> {
    pub(super) worker: &'a Rc<Worker>,
    pub(super) frontend: &'a FrontendState,
    pub(super) routing: &'a Arc<Routing>,
    pub(super) preambles: &'a Preambles,
    pub(super) client: SocketAddr,
    /// `--access-log`: the connection's facts.
    pub(super) log: Option<&'a Rc<access::Conn>>,
    /// The connection's accept.
    pub(super) started: Instant,
}

/// How the relay went, over every backend it met.
pub(super) struct Relayed {
    out: relay::RelayOutcome,
    /// The last backend and the route that chose it, for the log line.
    id: BackendId,
    route: &'static str,
    served: Served,
    /// The last backend connection's queue and connect (with an access log).
    opened: Option<access::record::Waited>,
}

impl Ends<'_> {
    /// Chooses and connects a backend, writes its preamble and the first request, and
    /// relays; again when the requests move to another backend, go again, or follow a
    /// backend that closed. `None` when the connection ended on the way (answered,
    /// counted and logged there).
    pub(super) async fn relay(
        &self,
        tls: &mut TlsStream,
        mut http: Option<&mut Http>,
        fallback: BackendId,
        mut route: &'static str,
        first: Vec<u8>,
    ) -> Option<Relayed> {
        let (worker, client) = (self.worker, self.client);
        let counters = &worker.counters;
        let idle = worker.state.limits.idle_timeout;
        let mut id = http
            .as_ref()
            .and_then(|h| h.request.backend())
            .unwrap_or(fallback);
        if id != fallback {
            route = "host";
        }
        let fe_counters = counters.frontend(self.frontend.slot);
        let http_mode = worker.state.http.is_some();
        let mut first = Some(first);
        let (mut to_backend, mut to_client) = (0, 0);
        // The last backend connection's queue and connect, for TCP mode's line.
        let mut opened_in = None;
        let (out, served) = loop {
            let b = self.routing.backend(id);
            // An HTTP/2 backend: the gateway core serves the requests for it.
            if let (Proto::H2, Some(h)) = (b.proto, http.as_deref_mut()) {
                let left = match first.take() {
                    Some(f) => self.through_core(tls, h, id, f).await,
                    None => {
                        let mut opening = Vec::new();
                        if let Err(e) = h.request.moved(&mut opening, &mut h.exchange) {
                            finish(tls, &RelayEnd::BadRequest(e), client, Some(&*h)).await;
                            return None;
                        }
                        self.through_core(tls, h, id, opening).await
                    }
                };
                to_backend += left.bytes_in;
                to_client += left.bytes_out;
                let end = match left.end {
                    front::End::Switch(next) => {
                        id = next;
                        route = "host";
                        WorkerCounters::bump(&counters.http.backend_switches);
                        continue;
                    }
                    front::End::Misdirected => RelayEnd::Misdirected,
                    front::End::Refused(r) => RelayEnd::Refused(r),
                    front::End::Redirect => RelayEnd::Redirect,
                    front::End::BadRequest(e) => RelayEnd::BadRequest(e),
                    front::End::Timeout(why) => RelayEnd::HttpTimeout(why),
                    front::End::Closed => RelayEnd::Closed,
                    front::End::Idle => RelayEnd::IdleTimeout,
                };
                let out = relay::RelayOutcome {
                    client_to_backend: 0,
                    backend_to_client: 0,
                    end,
                };
                break (out, Served::Shared(left.server));
            }
            let pre = self.preambles.get(b.preamble);
            // The clock is read for the log's queue and connect times only.
            let began = self.log.map(|_| Instant::now());
            // What chooses its server: the client, or (hash by a request's path, header or
            // cookie, a sticky cookie) the request that opens the connection.
            let key = match (&first, http.as_deref()) {
                (Some(f), Some(_)) => h1::head::key_of_head(b, client.ip(), f),
                (None, Some(h)) => h1::head::key_of_head(b, client.ip(), h.request.held_head()),
                _ => b.key_of_client(client.ip()),
            };
            // shuck's 503, should no connection be had: under the rules of the request's
            // route (queued by the rewriter), else the connection's.
            let own = http
                .as_deref()
                .map(|h| h.exchange.answers.back().unwrap_or(&h.exchange.own));
            if let (Some(own), true) = (own, b.pool.in_maintenance()) {
                // `shuck ctl maint BACKEND`: answered without a connect tried.
                let answer = own.in_maintenance().own_h1(h1::MAINTENANCE);
                let _ = tokio::time::timeout(CLOSE_GRACE, tls.write_all(&answer)).await;
                let _ = tokio::time::timeout(CLOSE_GRACE, tls.shutdown()).await;
                if let Some(l) = http.as_deref().and_then(|h| h.exchange.log.as_deref()) {
                    l.serving(&b.name, "-", None);
                    l.ended(
                        Cause::Normal,
                        Cause::BackendRefused,
                        Some((503, Cause::BackendRefused)),
                        None,
                    );
                }
                return None;
            }
            let opened = open(worker, b, pre, client, tls, fe_counters, own, &key);
            let Some((mut backend, lease)) = opened.await else {
                if let Some(l) = http.as_deref().and_then(|h| h.exchange.log.as_deref()) {
                    let refused = Some((503, Cause::BackendRefused));
                    l.serving(&b.name, "-", None);
                    l.ended(Cause::Normal, Cause::BackendRefused, refused, None);
                }
                if !http_mode {
                    let out = relay::RelayOutcome {
                        client_to_backend: to_backend,
                        backend_to_client: to_client,
                        end: RelayEnd::Closed,
                    };
                    self.log_tcp(&out, Some(&b.name), None, None, Cause::BackendRefused);
                }
                return None;
            };
            opened_in = began.map(|t| access::record::Waited::since(t, lease.queued()));
            if let Some(h) = http.as_deref_mut() {
                h.response.set_cookie(
                    b.set_cookie(&key, lease.server())
                        .as_ref()
                        .map(|v| v.as_bytes()),
                );
                h.request.serving(lease.server_arc(), id);
                h.request
                    .chosen_by(b.reads_requests().then(|| (self.routing.clone(), key)));
                if let Some(l) = &h.exchange.log {
                    l.serving(&b.name, lease.server().name(), opened_in);
                }
            }
            // preamble (unless TLS to the backend sent it before its handshake), and the
            // first request (or the one that moved the connection here)
            let mut opening = match pre {
                Some(p) if backend.is_plain() => p.to_vec(),
                _ => Vec::new(),
            };
            match (first.take(), http.as_deref_mut()) {
                (Some(f), _) => opening.extend_from_slice(&f),
                (None, Some(h)) => {
                    if let Err(e) = h.request.moved(&mut opening, &mut h.exchange) {
                        finish(tls, &RelayEnd::BadRequest(e), client, Some(&*h)).await;
                        return None;
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
                    if let Some(l) = http.as_deref().and_then(|h| h.exchange.log.as_deref()) {
                        l.ended(Cause::Normal, Cause::BackendReset, None, None);
                    }
                    return None;
                }
            }
            drop(opening);

            let out = relay(tls, &mut backend, idle, http.as_deref_mut()).await;
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
                    let again = http.as_deref_mut().and_then(|h| h.request.send_again());
                    let Some(head) = again else {
                        break (out, Served::Lease(lease));
                    };
                    WorkerCounters::bump(&counters.http.retries);
                    first = Some(head);
                }
                // The backend closed between requests: the client's next request (read
                // before any backend is chosen, as the first) goes to a new connection.
                RelayEnd::BackendClosed => {
                    drop(backend);
                    let Some(h) = http.as_deref_mut() else {
                        break (out, Served::Lease(lease));
                    };
                    // No slot or active count held on that server while the client thinks.
                    let server = lease.server_arc();
                    drop(lease);
                    match first_request(tls, h, idle).await {
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
        Some(Relayed {
            out,
            id,
            route,
            served,
            opened: opened_in,
        })
    }
    /// The counters, the end the client is told (close_notify, or an answer first), and
    /// the connection's log line.
    pub(super) async fn close(
        &self,
        tls: &mut TlsStream,
        http: Option<&Http>,
        relayed: Relayed,
        resumed: bool,
        started: Instant,
    ) {
        let (worker, client) = (self.worker, self.client);
        let (state, counters) = (&worker.state, &worker.counters);
        let fe_counters = counters.frontend(self.frontend.slot);
        let Relayed {
            out,
            id,
            route,
            served,
            opened,
        } = relayed;
        WorkerCounters::add(&fe_counters.bytes_in, out.client_to_backend);
        WorkerCounters::add(&fe_counters.bytes_out, out.backend_to_client);
        if let Some(h) = http {
            WorkerCounters::add(&counters.http.requests_h1, h.request.requests());
        }
        match out.end {
            RelayEnd::HttpTimeout(h1::Expired::Stall) => {
                WorkerCounters::bump(&counters.http.stalled_h1)
            }
            RelayEnd::Stray => WorkerCounters::bump(&counters.http.backend_stray),
            RelayEnd::Misdirected => WorkerCounters::bump(&counters.http.misdirected),
            _ => {}
        }
        finish(tls, &out.end, client, http).await;
        if http.is_none() {
            self.log_tcp(
                &out,
                Some(&self.routing.backend(id).name),
                Some(served.name()),
                opened,
                cause_of(&out.end),
            );
        }
        // In TCP mode the access log's line is the connection's: not written twice.
        if state.log_connections && (http.is_some() || self.log.is_none()) {
            let conn = tls.conn();
            tracing::info!(
                name: "connection_closed",
                worker = worker.id,
                client = %client,
                backend = %self.routing.backend(id).name,
                route,
                server = %served.name(),
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
}

impl Ends<'_> {
    /// Serves the requests for HTTP/2 backend `id` through the gateway core, `first`
    /// (the rewriter's output: a whole head, maybe more) first.
    async fn through_core(
        &self,
        tls: &mut TlsStream,
        http: &mut Http,
        id: BackendId,
        first: Vec<u8>,
    ) -> front::Left {
        let state = &self.worker.state;
        let client = crate::gateway::Client {
            addr: self.client,
            // An HTTP/2 backend takes none (refused at start).
            preambles: Preambles::default(),
            fwd: http.request.forwarding(),
            routing: self.routing.clone(),
            fallback: id,
            // The rewriter routed the requests, held them to the limits and rules: the
            // core judges their heads, not their way again.
            chooser: None,
            alt_svc: self.frontend.alt_svc.clone(),
            handshake: None,
            log: self.log.cloned(),
            requests: None,
            // The rewriter resolved the policy of each request; h1/front/ hands it over.
            policy: None,
            policed: false,
            // The rewriter judged each request's client and wrote it in X-Forwarded-For,
            // which the core reads back from the trusted peer's connection.
            behind: crate::gateway::real_ip::Behind::of(
                self.client.ip(),
                state.trusted().as_ref(),
                None,
            ),
        };
        let max_head = state.http.unwrap_or_default();
        let gw = crate::gateway::Gateway::new(
            self.worker.clone(),
            crate::gateway::Version::H1,
            client,
            &state.limits,
            max_head,
        );
        Box::pin(front::serve(Rc::new(gw), tls, http, first)).await
    }

    /// TCP mode's access log line: the connection's whole life.
    fn log_tcp(
        &self,
        out: &relay::RelayOutcome,
        backend: Option<&str>,
        server: Option<&str>,
        opened: Option<access::record::Waited>,
        cause: Cause,
    ) {
        let (Some(log), Some(conn)) = (&self.worker.state.access, self.log) else {
            return;
        };
        let took = self.started.elapsed();
        log.log(&access::Record {
            start_us: crate::clock::unix_us().saturating_sub(access::record::micros(took)),
            conn,
            client: None,
            method: b"",
            authority: b"",
            path: b"",
            upstream_uri: b"",
            user_agent: b"",
            referer: b"",
            status: 0,
            bytes_in: out.client_to_backend,
            bytes_out: out.backend_to_client,
            backend,
            server,
            retries: 0,
            request_id: b"",
            timings: access::Timings {
                queue: opened.map(|o| access::record::micros(o.queue)),
                connect: opened.map(|o| access::record::micros(o.connect)),
                head: None,
                total: access::record::micros(took),
            },
            cause,
            // No request strings: nothing to escape.
            plain: true,
        });
    }
}

/// How a TCP relay's end reads in the access log.
fn cause_of(end: &RelayEnd) -> Cause {
    match end {
        RelayEnd::Closed => Cause::Normal,
        RelayEnd::IdleTimeout => Cause::ClientTimeout,
        RelayEnd::Error(relay::Side::Client, _) => Cause::ClientClosed,
        RelayEnd::Error(relay::Side::Backend, _) => Cause::BackendReset,
        _ => Cause::Normal,
    }
}

/// The server a connection was last served by, for its log line: still held, or let go
/// while the client's next request was awaited (and none came).
enum Served {
    Lease(crate::backend::Lease),
    Gone(std::sync::Arc<crate::backend::Server>),
    /// Over the worker's shared connections to an HTTP/2 backend: the last request's
    /// server, if one was had.
    Shared(Option<std::sync::Arc<crate::backend::Server>>),
}

impl Served {
    fn name(&self) -> &str {
        match self {
            Served::Lease(l) => l.server().name(),
            Served::Gone(s) => s.name(),
            Served::Shared(s) => s.as_ref().map_or("-", |s| s.name()),
        }
    }
}

/// Connects to `backend` for `client` (with TLS, `preamble` goes before the handshake);
/// when no server can be had, the failure is counted and logged, an HTTP client is told
/// 503, and the connection is closed (`None`).
#[allow(clippy::too_many_arguments)]
async fn open<S>(
    worker: &Worker,
    backend: &Backend,
    preamble: Option<&[u8]>,
    client: SocketAddr,
    tls: &mut S,
    fe_counters: &FrontendCounters,
    http: Option<&crate::gateway::policy::AnswerRules>,
    key: &crate::backend::balance::Key,
) -> Option<(Upstream, crate::backend::Lease)>
where
    S: tokio::io::AsyncWrite + Unpin,
{
    match Box::pin(upstream::open(backend, &worker.picker, preamble, key)).await {
        Ok(b) => Some(b),
        Err(e) => {
            worker.connect_failed(client, &e);
            WorkerCounters::bump(&fe_counters.refused);
            if let Some(own) = http {
                let answer = own.own_h1(h1::SERVICE_UNAVAILABLE);
                let _ = tokio::time::timeout(CLOSE_GRACE, tls.write_all(&answer)).await;
            }
            // close_notify, then FIN: the client learns at once that nothing will come.
            let _ = tokio::time::timeout(CLOSE_GRACE, tls.shutdown()).await;
            None
        }
    }
}
