//! HTTP/2 in `--http` mode: a gateway, as HAProxy's `mode http` with h2 clients and
//! HTTP/1.1 servers. hyperium's `h2` speaks HTTP/2 to the client (framing, HPACK, flow
//! control, and its limits on CONTINUATION, empty-frame and reset floods); each stream
//! becomes one HTTP/1.1 exchange on a keep-alive backend connection of this client's
//! (`backends.rs`, `stream.rs`, `answer.rs`, `tunnel.rs`), with the HTTP/1.1 path's header
//! hygiene (`request.rs`).
//! This driver owns the connection: its settings, the limits h2 leaves to its user (the
//! rate of streams a client resets, a header block's time, an idle connection), and the
//! `GOAWAY` that drains it at a reload, a stop or a binary upgrade.

mod answer;
mod backends;
pub use backends::wake_keepers;
mod outcome;
pub mod request;
pub mod response;
mod stream;
mod tunnel;
mod watch;

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use h2::Reason;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;
use tokio::time::Instant;

use std::sync::Arc;

use super::http::choose::Chooser;
use super::http::request::Forwarding;
use super::preamble::Preambles;
use super::route::{BackendId, Routing};
use super::Worker;
use crate::config::Limits;
use crate::counters::WorkerCounters;
use crate::shutdown::Shutdown;
use backends::Backends;
use watch::{Seen, Watched};

/// What one client connection's streams share.
#[derive(Debug)]
pub struct Gateway {
    /// The worker serving it.
    worker: Rc<Worker>,
    /// The client, as the backend is told (after `--proxy-proxy`).
    client: SocketAddr,
    /// Its backend connections.
    backends: Backends,
    /// The backend of a stream when no route chooses: the connection's.
    fallback: BackendId,
    /// With routes: each stream's backend, and the streams misdirected.
    chooser: Option<Chooser>,
    /// Its forwarding headers.
    fwd: Forwarding,
    /// `--max-header-bytes`, for the backend's answer heads.
    max_head: usize,
    /// `--idle-timeout`: longest silence within an exchange.
    idle: Duration,
    /// `--http-stall-timeout`: longest wait on the client within an exchange.
    stall: Duration,
    /// Streams reset, against `--h2-max-resets`.
    resets: ResetMeter,
    /// Streams being served now.
    active: Cell<usize>,
    /// When the last stream ended (keep-alive).
    idle_since: Cell<Instant>,
    /// Streams served.
    streams: Cell<u64>,
}

/// Streams reset by the client (or refused as malformed) in the current second.
#[derive(Debug)]
struct ResetMeter {
    limit: u32,
    window: Cell<Instant>,
    count: Cell<u32>,
    /// Wakes the driver, to send `GOAWAY ENHANCE_YOUR_CALM`, when the limit is passed.
    passed: Notify,
}

impl ResetMeter {
    fn new(limit: u32) -> Self {
        ResetMeter {
            limit,
            window: Cell::new(Instant::now()),
            count: Cell::new(0),
            passed: Notify::new(),
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
            self.passed.notify_one();
        }
    }

    fn over(&self) -> bool {
        self.count.get() > self.limit
    }
}

impl Gateway {
    /// Counts a stream in until the guard drops.
    fn stream_opened(self: &Rc<Self>) -> Active {
        self.active.set(self.active.get() + 1);
        self.streams.set(self.streams.get() + 1);
        Active(self.clone())
    }
}

/// A stream being served; its end may leave the connection idle.
pub struct Active(Rc<Gateway>);

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
}

/// What an HTTP/2 connection did, for its log line and counters.
#[derive(Debug)]
pub struct Outcome {
    /// Streams served.
    pub streams: u64,
    /// Plaintext bytes from the client.
    pub bytes_in: u64,
    /// Plaintext bytes to the client.
    pub bytes_out: u64,
    /// How it ended.
    pub end: &'static str,
}

/// When a connection that is closing is given up on, whatever is still unsent.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Most streams taken from a connection in one turn of its loop.
const BATCH: usize = 32;

/// Serves an HTTP/2 connection until it ends: streams are spawned on this worker as they
/// come. `drain` (stop, binary upgrade) and `reload` (SIGHUP) send `GOAWAY` and let the
/// streams under way finish.
pub async fn serve<S>(
    io: S,
    worker: Rc<Worker>,
    client: Client,
    limits: &Limits,
    max_head: usize,
    mut drain: Shutdown,
    mut reload: tokio::sync::watch::Receiver<u64>,
) -> Outcome
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let counters = worker.counters.clone();
    WorkerCounters::bump(&counters.http.h2_connections);
    let gw = Rc::new(Gateway {
        worker,
        client: client.addr,
        fallback: client.fallback,
        chooser: client.chooser,
        backends: Backends::new(
            client.routing,
            client.preambles,
            limits.idle_timeout,
            limits.h2.max_backend_conns as usize,
            counters.clone(),
        ),
        fwd: client.fwd,
        max_head,
        idle: limits.idle_timeout,
        stall: limits.http_stall_timeout,
        resets: ResetMeter::new(limits.h2.max_resets),
        active: Cell::new(0),
        idle_since: Cell::new(Instant::now()),
        streams: Cell::new(0),
    });
    let seen = Rc::new(Seen::default());
    let window = limits.h2.initial_window;
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(limits.h2.max_concurrent_streams)
        .max_header_list_size(u32::try_from(max_head).unwrap_or(u32::MAX))
        .initial_window_size(window)
        .initial_connection_window_size(window.saturating_mul(16))
        .max_send_buffer_size(64 * 1024)
        .enable_connect_protocol();
    let outcome = |end, seen: &Seen, gw: &Gateway| Outcome {
        streams: gw.streams.get(),
        bytes_in: seen.bytes_in.get(),
        bytes_out: seen.bytes_out.get(),
        end,
    };

    // The preface and SETTINGS are a head too: they get --http-request-timeout.
    let request_timeout = limits.http_request_timeout;
    let wire = Watched::new(io, seen.clone());
    let mut handshake = std::pin::pin!(builder.handshake::<_, bytes::Bytes>(wire.handle()));
    // Whenever h2 waits, what it wrote goes out (see watch.rs).
    let handshake = poll_fn(|cx| {
        let r = handshake.as_mut().poll(cx);
        if r.is_pending() {
            wire.send_gathered(cx);
        }
        r
    });
    let mut conn = match tokio::time::timeout(request_timeout, handshake).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(
                name: "h2_preface_refused",
                client = %gw.client,
                error = %e,
                "HTTP/2 preface refused",
            );
            count_error(&counters, gw.client, &e);
            return outcome("bad preface", &seen, &gw);
        }
        Err(_) => return outcome("no preface in time", &seen, &gw),
    };

    let keepalive = limits.http_keepalive_timeout;
    let mut draining = false;
    let mut closing: Option<Instant> = None;
    let mut end = "closed";
    // The select's waits live across its turns: made afresh on every turn, four waiter
    // registrations and a timer were set up and torn down for every stream accepted
    // (about a twentieth of the gateway's CPU). Each is made again only once it fired;
    // the timer is moved only when the deadline does.
    let never = Instant::now() + Duration::from_secs(365 * 24 * 3600);
    let mut drained = std::pin::pin!(drain.recv());
    let mut reloaded = std::pin::pin!(reload.changed());
    let mut calm = std::pin::pin!(gw.resets.passed.notified());
    let mut head_started = std::pin::pin!(seen.head_started.notified());
    let mut armed = never;
    let mut timer = std::pin::pin!(tokio::time::sleep_until(armed));
    // When to look at whether the connection has been idle for --http-keepalive-timeout:
    // never later than it could come due, and moved only when reached, so that streams
    // beginning and ending do not move the timer.
    let mut idle_check = gw.idle_since.get() + keepalive;
    loop {
        // The next deadline: a header block's, an idle connection's, or a closing one's.
        let mut deadline = never;
        match closing {
            Some(t) => deadline = t + CLOSE_GRACE,
            None => {
                if let Some(t) = seen.head_since.get() {
                    deadline = deadline.min(t + request_timeout);
                }
                if !draining {
                    deadline = deadline.min(idle_check);
                }
            }
        }
        if deadline != armed {
            armed = deadline;
            timer.as_mut().reset(deadline);
        }
        tokio::select! {
            biased;
            () = &mut drained, if !draining => {
                conn.graceful_shutdown();
                goaway(&counters, Reason::NO_ERROR);
                draining = true;
                end = "drained";
            }
            r = &mut reloaded, if !draining => {
                if r.is_ok() {
                    conn.graceful_shutdown();
                    goaway(&counters, Reason::NO_ERROR);
                    draining = true;
                    end = "reload";
                } else {
                    draining = true; // the frontend is gone: same as a stop
                    conn.graceful_shutdown();
                    goaway(&counters, Reason::NO_ERROR);
                    end = "frontend removed";
                }
            }
            () = &mut calm => {
                calm.set(gw.resets.passed.notified());
                if gw.resets.over() && closing.is_none() {
                    tracing::warn!(
                        name: "h2_rapid_reset",
                        client = %gw.client,
                        limit = gw.resets.limit,
                        "HTTP/2: streams reset faster than --h2-max-resets per second: GOAWAY ENHANCE_YOUR_CALM",
                    );
                    conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                    goaway(&counters, Reason::ENHANCE_YOUR_CALM);
                    closing = Some(Instant::now());
                    draining = true;
                    end = "reset flood";
                }
            }
            () = &mut head_started => head_started.set(seen.head_started.notified()),
            () = &mut timer => {
                // Fired: stays fired until moved; the next turn moves it.
                armed = never;
                timer.as_mut().reset(never);
                if closing.is_some() {
                    break; // what was left to send did not go in time
                }
                if seen.head_since.get().is_some_and(|t| t + request_timeout <= Instant::now()) {
                    tracing::debug!(
                        name: "h2_header_timeout",
                        client = %gw.client,
                        "HTTP/2: a header block took longer than --http-request-timeout",
                    );
                    conn.abrupt_shutdown(Reason::NO_ERROR);
                    goaway(&counters, Reason::NO_ERROR);
                    closing = Some(Instant::now());
                    draining = true;
                    end = "request timeout";
                } else if !draining {
                    let now = Instant::now();
                    let idle_end = gw.idle_since.get() + keepalive;
                    if gw.active.get() > 0 {
                        idle_check = now + keepalive; // nothing can come due sooner
                    } else if idle_end > now {
                        idle_check = idle_end;
                    } else {
                        conn.graceful_shutdown();
                        goaway(&counters, Reason::NO_ERROR);
                        draining = true;
                        closing = Some(now);
                        end = "keep-alive timeout";
                    }
                }
            }
            // The streams ready now are taken in one turn (up to BATCH, so that one client
            // cannot hold the worker): the other arms are polled once a batch, not once a
            // stream. (Polled in this task instead of a task each, with FuturesUnordered,
            // they cost 5 % fewer instructions but no less time: not kept.)
            next = poll_fn(|cx| {
                let mut taken = 0;
                loop {
                    match conn.poll_accept(cx) {
                        Poll::Ready(Some(Ok((req, respond)))) => {
                            if gw.resets.over() {
                                // Closing: GOAWAY is on its way (the `calm` arm sends it).
                                return Poll::Ready(Ok(true));
                            }
                            // Counted in now, not when its task first runs, so that
                            // the connection is never idle in between.
                            let active = gw.stream_opened();
                            if let Some(serving) = stream::accept(active, req, respond) {
                                tokio::task::spawn_local(serving);
                            }
                            taken += 1;
                            if taken == BATCH {
                                return Poll::Ready(Ok(true));
                            }
                        }
                        // Pending even when streams were taken: h2 wakes this task for
                        // the next, and a turn of the loop now would only poll h2 once
                        // more for nothing (a fifth of its polls).
                        Poll::Pending => {
                            wire.send_gathered(cx);
                            return Poll::Pending;
                        }
                        Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                        Poll::Ready(None) => return Poll::Ready(Ok(false)),
                    }
                }
            }) => match next {
                // A batch taken: on to the next turn.
                Ok(true) => {}
                Err(e) => {
                    tracing::debug!(
                        name: "h2_connection_ended",
                        client = %gw.client,
                        error = %e,
                        "HTTP/2 connection ended",
                    );
                    if count_error(&counters, gw.client, &e) {
                        end = "protocol error";
                    }
                    break;
                }
                Ok(false) => break,
            },
        }
    }
    outcome(end, &seen, &gw)
}

/// Counts the GOAWAY h2 sent for an error it found; true when it did.
fn count_error(counters: &WorkerCounters, client: SocketAddr, e: &h2::Error) -> bool {
    match e.reason() {
        Some(reason) if e.is_go_away() && e.is_library() => {
            if reason == Reason::ENHANCE_YOUR_CALM {
                tracing::warn!(
                    name: "h2_flood",
                    client = %client,
                    error = %e,
                    "HTTP/2: a client flooded its connection: GOAWAY ENHANCE_YOUR_CALM",
                );
            }
            goaway(counters, reason);
            true
        }
        _ => false,
    }
}

fn goaway(counters: &WorkerCounters, reason: Reason) {
    counters.http.goaway(u32::from(reason));
}
