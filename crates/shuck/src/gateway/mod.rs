//! The HTTP gateway (`--http`), one of shuck's two jobs beside the TCP terminator
//! (`proxy/`), which hands it its HTTP connections. A folder per client version: `h1/`
//! (HTTP/1.1's wire: the request rewriter and response tracker that ride the terminator's
//! relay), `h2/` and `h3/` (each drives its connection and hands each request stream to
//! this core). What the three share is here, so that they judge a request alike: the
//! backend and the 421 check for a request's host (`choose.rs`, `path.rs`), what a field
//! may hold and the forwarding headers (`fields.rs`).
//!
//! The core that HTTP/2 and HTTP/3 share beyond that: each request stream of a client
//! connection becomes one HTTP/1.1 exchange on a keep-alive backend connection of that
//! client's, as HAProxy's `mode http` does with h2 and h3 clients in front of HTTP/1.1
//! servers. Here live what does not depend on the client's
//! framing: the request's hygiene (`request.rs`), routing and the exchange (`exchange.rs`),
//! the client's backend connections (`backends.rs`), the backend's answer read
//! (`response.rs`) and passed on (`answer.rs`), WebSockets (`tunnel.rs`), and how an
//! exchange ends (`outcome.rs`); a backend that speaks HTTP/2 is served on the worker's
//! shared connections instead (`upstream/`), for HTTP/1.1 clients too (`h1/front/`: the
//! requests their rewriter routed there). A version's folder holds its framing only: it
//! drives its connection and hands each stream in through the [`front`] traits.

mod answer;
mod backends;
pub mod choose;
pub use backends::wake_keepers;
mod early;
pub use early::Handshake;
mod exchange;
mod intake;
pub use intake::{accept, Stream};
pub mod fields;
pub mod front;
pub mod grpc;
pub mod h1;
pub mod h2;
pub mod h3;
mod logged;
mod outcome;
pub mod path;
pub mod policy;
pub mod real_ip;
pub mod request;
pub mod response;
pub mod route_action;
mod tunnel;
mod upload;
mod upstream;

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::Limits;
use crate::counters::WorkerCounters;
use crate::edge::preamble::Preambles;
use crate::edge::route::{BackendId, Routing};
use crate::edge::Worker;
use backends::Backends;
use choose::Chooser;
use fields::Forwarding;

/// The client's HTTP version, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.1 over TLS, whose requests for an HTTP/2 backend the core serves
    /// (`h1/front/`).
    H1,
    /// HTTP/2 over TLS.
    H2,
    /// HTTP/3 over QUIC.
    H3,
}

impl Version {
    /// As logs and metrics name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::H1 => "http/1.1",
            Version::H2 => "h2",
            Version::H3 => "h3",
        }
    }
}

/// What one client connection's streams share.
#[derive(Debug)]
pub struct Gateway {
    /// The worker serving it.
    pub(super) worker: Rc<Worker>,
    /// The client, as the backend is told (after `--proxy-proxy`).
    pub(super) client: SocketAddr,
    /// Its HTTP version.
    version: Version,
    /// Its backend connections.
    backends: Backends,
    /// The backend of a stream when no route chooses: the connection's.
    fallback: BackendId,
    /// With routes: each stream's backend, and the streams misdirected.
    chooser: Option<Chooser>,
    /// Its forwarding headers.
    fwd: Forwarding,
    /// The `Alt-Svc` its answers carry (`--quic`).
    alt_svc: Option<http::HeaderValue>,
    /// `--max-header-bytes`, for the backend's answer heads.
    max_head: usize,
    /// `--idle-timeout`: longest silence within an exchange.
    idle: Duration,
    /// `--http-stall-timeout`: longest wait on the client within an exchange.
    stall: Duration,
    /// Streams reset, against `--h2-max-resets`.
    pub(super) resets: ResetMeter,
    /// Streams being served now.
    pub(super) active: Cell<usize>,
    /// When the last stream ended (keep-alive).
    pub(super) idle_since: Cell<Instant>,
    /// Streams served.
    pub(super) streams: Cell<u64>,
    /// HTTP/3 with 0-RTT: the handshake its early requests wait on.
    handshake: Option<Rc<Handshake>>,
    /// `--access-log`: where each stream's line goes, and the connection's part of it.
    log: Option<Rc<logged::ConnLog>>,
    /// `--client-request-rate`: what each stream is held to.
    requests: Option<crate::clients::RequestLimit>,
    /// The frontend's own level of the edge's policy, when it gives one.
    frontend_policy: Option<Arc<crate::config::policy::Policy>>,
    /// Whether the core applies the edge policy (not to HTTP/1.1's requests: see
    /// [`Client::policed`]).
    policed: bool,
    /// The peer is a trusted proxy: each request names its client.
    behind: Option<real_ip::Behind>,
}

/// Streams reset by the client (or refused as malformed) in the current second, and
/// streams given up on for `--http-stall-timeout` in a row: the two floods a client can
/// hold a worker or its backends with, each ending the connection.
#[derive(Debug)]
pub(super) struct ResetMeter {
    pub(super) limit: u32,
    window: Cell<Instant>,
    count: Cell<u32>,
    /// Streams stalled since one last ended well.
    stalls: Cell<u32>,
    /// More in a row than the client's backend connections (`--http-max-backend-conns`):
    /// its streams keep taking backend connections for nothing, wave after wave.
    stall_limit: u32,
    /// Wakes the driver, to close the connection, when a limit is passed.
    pub(super) passed: Notify,
    /// Wakes the streams waiting for a backend connection when a limit is passed: a
    /// hostile client's streams take none more.
    pub(super) closing: Notify,
}

impl ResetMeter {
    fn new(limit: u32, stall_limit: u32) -> Self {
        ResetMeter {
            limit,
            window: Cell::new(Instant::now()),
            count: Cell::new(0),
            stalls: Cell::new(0),
            stall_limit,
            passed: Notify::new(),
            closing: Notify::new(),
        }
    }

    /// Counts one; the driver is woken as the limit is passed.
    fn hit(&self) {
        let now = Instant::now();
        if now.duration_since(self.window.get()) >= Duration::from_secs(1) {
            self.window.set(now);
            self.count.set(0);
        }
        self.count.set(self.count.get() + 1);
        if self.count.get() == self.limit.saturating_add(1) {
            self.limit_passed();
        }
    }

    /// More than the limit this second.
    pub(super) fn over(&self) -> bool {
        self.count.get() > self.limit
    }

    /// A stream given up on for a stall; the driver is woken as the limit is passed.
    fn stalled(&self) {
        self.stalls.set(self.stalls.get() + 1);
        if self.stalls.get() == self.stall_limit.saturating_add(1) {
            self.limit_passed();
        }
    }

    /// A limit just passed: the driver closes the connection, and the streams waiting for a
    /// backend connection take none.
    fn limit_passed(&self) {
        self.passed.notify_one();
        self.closing.notify_waiters();
    }

    /// A stream answered whole: the stalls before it were not in a row.
    fn answered(&self) {
        self.stalls.set(0);
    }

    /// Why the connection must end as hostile, if it must.
    pub(super) fn flood(&self) -> Option<Flood> {
        if self.over() {
            Some(Flood::Resets)
        } else if self.stalls.get() > self.stall_limit {
            Some(Flood::Stalls)
        } else {
            None
        }
    }
}

/// Who the client is and what each backend connection opens with.
#[derive(Debug)]
pub struct Client {
    /// The client's address.
    pub addr: SocketAddr,
    /// The preambles (`--write-proxy-*`, `--write-ip`, `--proxy-proxy`, a backend's own).
    pub preambles: Preambles,
    /// Its forwarding headers.
    pub fwd: Forwarding,
    /// The backends and routes of the connection's start.
    pub routing: Arc<Routing>,
    /// The connection's own backend (its server name's route, its frontend's, the default).
    pub fallback: BackendId,
    /// With routes: each stream's backend by its `:authority` and path.
    pub chooser: Option<Chooser>,
    /// `--quic`: the `Alt-Svc` every answer carries unless the backend gave one.
    pub alt_svc: Option<http::HeaderValue>,
    /// `--quic-early-data`: the handshake, while requests may come before it completes.
    pub handshake: Option<Rc<Handshake>>,
    /// `--access-log`: the connection's facts, the same on each of its lines.
    pub log: Option<Rc<crate::access::Conn>>,
    /// `--client-request-rate`: what each of its requests is held to.
    pub requests: Option<crate::clients::RequestLimit>,
    /// The frontend's own level of the edge's policy (`Routing::frontend_policy`).
    pub policy: Option<Arc<crate::config::policy::Policy>>,
    /// Whether the core applies the edge policy. Not to HTTP/1.1's requests: their
    /// rewriter chose each one's route and applied its request phase (header rules, body
    /// limit), and `h1/front/` wraps each answer side in that route's answer rules.
    pub policed: bool,
    /// `--trusted-proxies`, when the peer is one: each request names its client.
    pub behind: Option<real_ip::Behind>,
}

impl Gateway {
    /// The shared part of a new client connection of `version`.
    pub fn new(
        worker: Rc<Worker>,
        version: Version,
        client: Client,
        limits: &Limits,
        max_head: usize,
    ) -> Self {
        let counters = worker.counters.clone();
        let log = (worker.state.access.clone().zip(client.log))
            .map(|(log, conn)| Rc::new(logged::ConnLog { log, conn }));
        Gateway {
            worker,
            client: client.addr,
            version,
            fallback: client.fallback,
            chooser: client.chooser,
            backends: Backends::new(
                client.routing,
                client.preambles,
                limits.idle_timeout,
                limits.h2.max_backend_conns as usize,
                counters,
            ),
            fwd: client.fwd,
            alt_svc: client.alt_svc,
            max_head,
            idle: limits.idle_timeout,
            stall: limits.http_stall_timeout,
            resets: ResetMeter::new(limits.h2.max_resets, limits.h2.max_backend_conns),
            active: Cell::new(0),
            idle_since: Cell::new(Instant::now()),
            streams: Cell::new(0),
            handshake: client.handshake,
            log,
            requests: client.requests,
            frontend_policy: client.policy,
            policed: client.policed,
            behind: client.behind,
        }
    }

    /// The server-name route that chose the connection's backend, if one did.
    pub(super) fn fallback_route(&self) -> Option<crate::edge::route::RouteId> {
        self.chooser.as_ref().and_then(Chooser::fallback_route)
    }

    /// Counts a stream in until the guard drops.
    pub(super) fn stream_opened(self: &Rc<Self>) -> Active {
        self.active.set(self.active.get() + 1);
        self.streams.set(self.streams.get() + 1);
        Active(self.clone())
    }

    /// The connection's keep-alive check at `now`: when to look again, or `None` when it
    /// has been idle for `keepalive` (a stream under way counts as not idle).
    pub(super) fn next_idle_check(&self, now: Instant, keepalive: Duration) -> Option<Instant> {
        let idle_end = self.idle_since.get() + keepalive;
        if self.active() > 0 {
            Some(now + keepalive) // nothing can come due sooner
        } else if idle_end > now {
            Some(idle_end)
        } else {
            None
        }
    }

    /// Streams being served now.
    pub(super) fn active(&self) -> usize {
        self.active.get()
    }

    /// A request passed to a backend (HTTP/1.1's are counted by its rewriter, which
    /// read them first).
    fn count_request(&self) {
        let h = &self.worker.counters.http;
        WorkerCounters::bump(match self.version {
            Version::H1 => return,
            Version::H2 => &h.requests_h2,
            Version::H3 => &h.h3.requests,
        });
    }

    /// A stream shuck reset (HTTP/1.1 has no streams to reset: its connection closes,
    /// and is counted as it closes).
    fn count_reset_sent(&self) {
        let h = &self.worker.counters.http;
        WorkerCounters::bump(match self.version {
            Version::H1 => return,
            Version::H2 => &h.h2_resets_sent,
            Version::H3 => &h.h3.resets_sent,
        });
    }

    /// A stream the client reset.
    fn count_reset_received(&self) {
        let h = &self.worker.counters.http;
        WorkerCounters::bump(match self.version {
            Version::H1 => return,
            Version::H2 => &h.h2_resets_received,
            Version::H3 => &h.h3.resets_received,
        });
    }

    /// A stream reset for `--http-stall-timeout`.
    fn count_stalled(&self) {
        let h = &self.worker.counters.http;
        WorkerCounters::bump(match self.version {
            Version::H1 => &h.stalled_h1,
            Version::H2 => &h.stalled_h2,
            Version::H3 => &h.h3.stalled,
        });
    }
}

/// Why a client's connection is ended as hostile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flood {
    /// Streams reset faster than `--h2-max-resets` a second (rapid reset).
    Resets,
    /// More streams stalled in a row than `--http-max-backend-conns`.
    Stalls,
}

impl Flood {
    /// As the connection's log line ends it.
    pub fn as_str(self) -> &'static str {
        match self {
            Flood::Resets => "reset flood",
            Flood::Stalls => "stall flood",
        }
    }

    /// What the client did, for the warning.
    pub fn why(self) -> &'static str {
        match self {
            Flood::Resets => "streams reset faster than --h2-max-resets per second",
            Flood::Stalls => "more streams stalled in a row than --http-max-backend-conns",
        }
    }
}

/// A stream being served; its end may leave the connection idle.
pub struct Active(Rc<Gateway>);

impl Active {
    /// The client reset the stream before its request could be read: counted, and against
    /// the reset limit (a flood of streams opened and reset at once is rapid reset too).
    pub fn reset_by_client(&self) {
        outcome::client_reset(&self.0);
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        let gw = &self.0;
        gw.active.set(gw.active.get().saturating_sub(1));
        // Recorded only: the driver looks at it when its keep-alive check comes due, so
        // that a connection going idle between every burst of streams wakes nobody.
        if gw.active.get() == 0 {
            gw.idle_since.set(Instant::now());
        }
    }
}
