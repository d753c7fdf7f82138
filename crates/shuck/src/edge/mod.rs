//! What the TCP terminator (`proxy/`) and the HTTP gateway (`gateway/`) share, below both
//! (docs/ARCHITECTURE.md): the state every worker reads (`ProxyState`, a `FrontendState` per
//! frontend, a `Worker` per thread), where a connection or request goes (`route`), how a
//! backend connection is made (`upstream`) and what it is told first (`preamble`), health
//! checks (`check`), and the worker's scratch buffer (`buffers`).

pub mod buffers;
pub mod check;
pub mod grpc_health;
pub mod preamble;
pub mod route;
pub(crate) mod timer_anchor;
pub mod upstream;

use std::cell::Cell;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::{Notify, Semaphore};

use crate::backend::Picker;
use crate::config::Limits;
use crate::counters::WorkerCounters;
use crate::tls::TlsState;

/// What every connection of every worker reads: built once, shared read-only.
#[derive(Debug)]
pub struct ProxyState {
    /// Where connections and requests go: the backends and the routes to them, swapped
    /// whole by a reload (what is under way keeps the one it started with).
    pub routing: ArcSwap<route::Routing>,
    /// Read a PROXY header from the client side first.
    pub proxy_proxy: bool,
    /// HTTP mode, with the largest request head accepted.
    pub http: Option<usize>,
    /// Timeouts and limits.
    pub limits: Limits,
    /// Permits for `--max-conns`, shared by all workers, taken before `accept()` so that
    /// excess clients wait in the kernel backlog rather than being accepted and dropped.
    pub conn_limit: Option<Arc<Semaphore>>,
    /// Log a line per connection.
    pub log_connections: bool,
    /// Pass the verified client certificate's common name in PROXY v2.
    pub proxy_client_cert: bool,
    /// Pass the server name in PROXY v2's authority TLV.
    pub proxy_authority: bool,
    /// In HTTP mode, the header that carries the client certificate's subject.
    pub client_cert_header: Option<String>,
    /// Told when the admin API puts a server in maintenance: each worker thread wakes
    /// the keepers of its idle backend connections, which close those to that server.
    pub maint: tokio::sync::Notify,
    /// `--quic`: the key QUIC's Retry and NEW_TOKEN tokens are sealed under (the farm's,
    /// or this process's own) and the log of tokens used, the same for every worker thread.
    pub quic_tokens: crate::tls::quic_tokens::Tokens,
    /// `--access-log`: a line per request (per connection in TCP mode).
    pub access: Option<Arc<crate::access::AccessLog>>,
    /// `--request-id-header`: each request's ID, and whether answers carry it back; a
    /// reload swaps it (a connection keeps the one it started with).
    pub(crate) request_id: arc_swap::ArcSwapOption<crate::access::request_id::Spec>,
    /// `--trusted-proxies`: peers whose requests name their clients; swapped as
    /// `request_id` is, whose trust list is built from it.
    pub(crate) trusted: arc_swap::ArcSwapOption<crate::clients::CidrList>,
    /// `--client-*`: the client table, the bans, the refusal counters.
    pub clients: Arc<crate::clients::Clients>,
}

impl ProxyState {
    /// Whether `ip` is a proxy of `--trusted-proxies`: its requests name their clients.
    pub fn trusts(&self, ip: std::net::IpAddr) -> bool {
        self.trusted.load().as_ref().is_some_and(|t| t.contains(ip))
    }

    /// `--trusted-proxies` of the moment, for a new connection.
    pub fn trusted(&self) -> Option<Arc<crate::clients::CidrList>> {
        self.trusted.load_full()
    }

    /// `--request-id-header` of the moment, for a new connection.
    pub fn request_id(&self) -> Option<Arc<crate::access::request_id::Spec>> {
        self.request_id.load_full()
    }

    /// A reload's `--trusted-proxies` and `--request-id-header` (built from it), for
    /// connections accepted from now on.
    pub fn trust(
        &self,
        trusted: Option<Arc<crate::clients::CidrList>>,
        request_id: Option<Arc<crate::access::request_id::Spec>>,
    ) {
        self.trusted.store(trusted);
        self.request_id.store(request_id);
    }
}

/// A frontend as the workers see it. A reload swaps its TLS state: connections accepted
/// afterwards use the new one, live ones keep theirs.
#[derive(Debug)]
pub struct FrontendState {
    /// The endpoint as written, for logs and metrics.
    pub name: String,
    /// Its row in the workers' per-frontend counters.
    pub slot: usize,
    /// Certificates and rustls configuration for its new connections.
    pub tls: ArcSwap<TlsState>,
    /// Bumped by each reload (and closed when the frontend is removed): HTTP/2
    /// connections then send GOAWAY, so clients move to the new configuration.
    pub reloads: tokio::sync::watch::Sender<u64>,
    /// `--quic`: the `Alt-Svc` its HTTP/1.1 and HTTP/2 answers carry.
    pub alt_svc: Option<::http::HeaderValue>,
    /// The same as an HTTP/1.1 header line.
    pub alt_svc_line: Option<bytes::Bytes>,
    /// The access log sink its lines go to ([`NO_SINK`]: none); a reload may move it.
    access_sink: std::sync::atomic::AtomicUsize,
    /// What it asks of its clients (`--client-*`), when anything; a reload may change it.
    clients: arc_swap::ArcSwapOption<crate::clients::Policy>,
}

/// A frontend whose requests are not logged.
const NO_SINK: usize = usize::MAX;

impl FrontendState {
    /// A frontend serving `tls`.
    pub fn new(
        name: String,
        slot: usize,
        tls: Arc<TlsState>,
        alt_svc: Option<::http::HeaderValue>,
    ) -> Self {
        FrontendState {
            name,
            slot,
            tls: ArcSwap::new(tls),
            reloads: tokio::sync::watch::Sender::new(0),
            alt_svc_line: alt_svc.as_ref().map(|v| {
                let mut line = b"Alt-Svc: ".to_vec();
                line.extend_from_slice(v.as_bytes());
                line.extend_from_slice(b"\r\n");
                bytes::Bytes::from(line)
            }),
            alt_svc,
            access_sink: std::sync::atomic::AtomicUsize::new(NO_SINK),
            clients: arc_swap::ArcSwapOption::empty(),
        }
    }

    /// What it asks of its clients now, if anything.
    pub fn client_policy(&self) -> Option<Arc<crate::clients::Policy>> {
        self.clients.load_full()
    }

    /// Its clients are held to `policy` from now on (start, a reload).
    pub fn hold_clients_to(&self, policy: crate::clients::Policy) {
        self.clients.store(policy.any().then(|| Arc::new(policy)));
    }

    /// Judges a new connection from `client` (the PROXY header's source when there is
    /// one): the bans, this frontend's rules and limits. `None`: refused (counted, and the
    /// first refusal of an episode logged); close it.
    pub fn admit_client(
        &self,
        state: &ProxyState,
        client: std::net::SocketAddr,
    ) -> Option<Option<crate::clients::Admitted>> {
        let policy = self.clients.load();
        let policy = policy.as_deref().unwrap_or(&NO_POLICY);
        let r = if state.trusts(client.ip()) {
            // A trusted proxy carries many clients, each judged by its requests.
            state.clients.judge(policy, client.ip()).map(|()| None)
        } else {
            (state.clients).admit(policy, client.ip(), crate::clients::Source::Tcp)
        };
        self.refused_if(r, client)
    }

    /// A QUIC Initial from `client`, whose address is not proven: the bans and this
    /// frontend's rules only (a spoofed source must not charge its victim's limits).
    /// `false`: refused (counted, logged as [`Self::admit_client`] does).
    pub fn judge_quic_client(&self, state: &ProxyState, client: std::net::SocketAddr) -> bool {
        let policy = self.clients.load();
        let policy = policy.as_deref().unwrap_or(&NO_POLICY);
        self.refused_if(state.clients.judge(policy, client.ip()), client)
            .is_some()
    }

    /// Whether a QUIC source not yet proven is near or over this frontend's connection
    /// limits: it is sent a Retry, so that they are judged before any TLS work.
    pub fn quic_client_near_limits(&self, state: &ProxyState, ip: std::net::IpAddr) -> bool {
        let policy = self.clients.load();
        policy
            .as_deref()
            .is_some_and(|p| state.clients.near_limits(p, ip))
    }

    /// A QUIC connection whose address is proven (by a Retry's token or its completed
    /// handshake): its connection limits charged (bans and rules: [`Self::judge_quic_client`],
    /// and again here for a proven Initial, which is judged in one step). `None`: refused.
    pub fn admit_quic_client(
        &self,
        state: &ProxyState,
        client: std::net::SocketAddr,
        judged: bool,
    ) -> Option<Option<crate::clients::Admitted>> {
        let policy = self.clients.load();
        let policy = policy.as_deref().unwrap_or(&NO_POLICY);
        let quic = crate::clients::Source::Quic;
        let r = if state.trusts(client.ip()) {
            // As admit_client: a trusted proxy's clients are judged by its requests.
            state.clients.judge(policy, client.ip()).map(|()| None)
        } else if judged {
            state.clients.charge_limits(policy, client.ip(), quic)
        } else {
            state.clients.admit(policy, client.ip(), quic)
        };
        self.refused_if(r, client)
    }

    fn refused_if<T>(
        &self,
        r: Result<T, crate::clients::Refused>,
        client: std::net::SocketAddr,
    ) -> Option<T> {
        r.map_err(|r| crate::clients::log_refused(&r, client, &self.name))
            .ok()
    }

    /// A reload's new TLS state: new connections use it; HTTP/2 ones are told to go.
    pub fn reloaded(&self, tls: Arc<TlsState>) {
        self.tls.store(tls);
        self.reloads.send_modify(|g| *g += 1);
    }

    /// The access log sink its lines go to, if its requests are logged.
    pub fn access_sink(&self) -> Option<usize> {
        let s = self.access_sink.load(std::sync::atomic::Ordering::Relaxed);
        (s != NO_SINK).then_some(s)
    }

    /// Its lines go to `sink` from now on (start, a reload).
    pub fn log_to(&self, sink: Option<usize>) {
        self.access_sink.store(
            sink.unwrap_or(NO_SINK),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

/// The policy of a frontend that asks nothing of its clients (the bans still hold).
static NO_POLICY: crate::clients::Policy = crate::clients::Policy::NONE;

/// What the main thread tells a worker.
#[derive(Debug)]
pub enum Control {
    /// Accept on this socket for this frontend until `stop` (the frontend was removed by a
    /// reload) or shutdown.
    Listen {
        /// The frontend.
        frontend: Arc<FrontendState>,
        /// This worker's SO_REUSEPORT socket for it.
        listener: std::net::TcpListener,
        /// Fired when a reload removes the frontend.
        stop: crate::shutdown::Shutdown,
    },
    /// Serve QUIC on this socket for this frontend, as the worker of `index` in its
    /// steered group of `workers` (`h3/steer.rs`), until `stop` or shutdown.
    Quic {
        /// The frontend.
        frontend: Arc<FrontendState>,
        /// This worker's UDP socket for it.
        socket: std::net::UdpSocket,
        /// Its place in the group, which the connection IDs it issues carry.
        index: usize,
        /// The group's size.
        workers: usize,
        /// Fired when a reload removes the frontend.
        stop: crate::shutdown::Shutdown,
    },
}

/// One worker's view: the shared state plus its own bookkeeping (single-threaded, so plain
/// cells: nothing here is touched by another core).
#[derive(Debug)]
pub struct Worker {
    /// Index of the worker, for logs.
    pub id: usize,
    /// The shared state.
    pub state: Arc<ProxyState>,
    /// Connections alive on this worker; drain waits for it to reach zero.
    live: Cell<usize>,
    /// Woken when `live` drops to zero.
    idle: Notify,
    /// This worker's counters.
    pub counters: Arc<WorkerCounters>,
    /// This worker's round-robin position over the backend servers.
    pub picker: Picker,
    /// Fired at stop and binary upgrade: HTTP/2 connections send GOAWAY and drain.
    pub drain: crate::shutdown::Shutdown,
    /// Keeps the runtime's timers from waking their own driver ([`timer_anchor`]).
    anchor: timer_anchor::Anchor,
}

impl Worker {
    /// A backend connection for `client` could not be made: counted against the backends
    /// (or as this worker's own shortage, `shuck_local_resource_errors_total`) and logged.
    pub fn connect_failed(&self, client: std::net::SocketAddr, e: &crate::backend::ConnectError) {
        use crate::backend::ConnectError;
        match e {
            ConnectError::Local { kind, .. } => self.counters.local_shortage(kind.index()),
            _ => WorkerCounters::bump(&self.counters.backend_failures),
        }
        if e.is_local() {
            // The pool warns once an episode; each client is a debug line.
            tracing::debug!(
                name: "conn_local_shortage",
                client = %client,
                error = %e,
                "no backend connection: out of local resources",
            );
        } else if e.is_queue() {
            tracing::debug!(
                name: "conn_no_backend_slot",
                client = %client,
                error = %e,
                "no backend slot",
            );
        } else {
            tracing::warn!(
                name: "conn_no_backend",
                client = %client,
                error = %e,
                "no backend could be reached",
            );
        }
    }

    /// A worker with no connection yet.
    pub fn new(
        id: usize,
        state: Arc<ProxyState>,
        counters: Arc<WorkerCounters>,
        drain: crate::shutdown::Shutdown,
    ) -> Self {
        Worker {
            id,
            state,
            live: Cell::new(0),
            idle: Notify::new(),
            counters,
            picker: Picker::default(),
            drain,
            anchor: timer_anchor::Anchor::default(),
        }
    }

    /// Connections alive on this worker.
    pub fn live(&self) -> usize {
        self.live.get()
    }

    /// Waits until no connection is alive on this worker.
    pub async fn all_closed(&self) {
        while self.live.get() > 0 {
            self.idle.notified().await;
        }
    }

    /// A connection opened: counted live until the guard drops, however the connection
    /// ends (a task dropped at the drain deadline included).
    pub fn opened(&self) -> LiveGuard<'_> {
        self.live.set(self.live.get() + 1);
        self.anchor.opened();
        LiveGuard(self)
    }

    fn conn_closed(&self) {
        let n = self.live.get().saturating_sub(1);
        self.live.set(n);
        if n == 0 {
            self.idle.notify_waiters();
        }
    }
}

/// Keeps the worker's live count right however its connection ends.
#[derive(Debug)]
pub struct LiveGuard<'a>(&'a Worker);

impl Drop for LiveGuard<'_> {
    fn drop(&mut self) {
        self.0.conn_closed();
    }
}
