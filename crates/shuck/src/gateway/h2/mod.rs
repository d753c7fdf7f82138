//! HTTP/2 in `--http` mode: a gateway, as HAProxy's `mode http` with h2 clients and
//! HTTP/1.1 servers. hyperium's `h2` speaks HTTP/2 to the client (framing, HPACK, flow
//! control, and its limits on CONTINUATION, empty-frame and reset floods); each stream
//! goes to the gateway core (`gateway/`) as one HTTP/1.1 exchange on a keep-alive
//! backend connection of this client's (`stream.rs` hands h2's stream halves to it).
//! This driver owns the connection: its settings, the limits h2 leaves to its user (the
//! rate of streams a client resets, a header block's time, an idle connection), and the
//! `GOAWAY` that drains it at a reload, a stop or a binary upgrade.

mod stream;
mod watch;

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use h2::Reason;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use crate::config::Limits;
use crate::counters::WorkerCounters;
use crate::edge::Worker;
use crate::gateway::{self, Client, Gateway, Version};
use crate::shutdown::Shutdown;
use watch::{Seen, Watched};

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
    let gw = Rc::new(Gateway::new(worker, Version::H2, client, limits, max_head));
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
                if let Some(flood) = gw.resets.flood().filter(|_| closing.is_none()) {
                    tracing::warn!(
                        name: "h2_rapid_reset",
                        client = %gw.client,
                        limit = gw.resets.limit,
                        flood = flood.as_str(),
                        "HTTP/2: {}: GOAWAY ENHANCE_YOUR_CALM",
                        flood.why(),
                    );
                    conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                    goaway(&counters, Reason::ENHANCE_YOUR_CALM);
                    closing = Some(Instant::now());
                    draining = true;
                    end = flood.as_str();
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
                    match gw.next_idle_check(now, keepalive) {
                        Some(at) => idle_check = at,
                        None => {
                            conn.graceful_shutdown();
                            goaway(&counters, Reason::NO_ERROR);
                            draining = true;
                            closing = Some(now);
                            end = "keep-alive timeout";
                        }
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
                            if gw.resets.flood().is_some() {
                                // Closing: GOAWAY is on its way (the `calm` arm sends it).
                                return Poll::Ready(Ok(true));
                            }
                            // Counted in now, not when its task first runs, so that
                            // the connection is never idle in between.
                            let active = gw.stream_opened();
                            let (parts, body) = req.into_parts();
                            let end_stream = body.is_end_stream();
                            let body = stream::Body(body);
                            let respond = stream::Answer::new(respond);
                            if let Some(serving) =
                                gateway::accept(active, parts, end_stream, body, respond)
                            {
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
