//! One request stream carried as one HTTP/1.1 exchange on a backend connection of its
//! client's (`intake.rs` judged it and chose its backend): the head written, the
//! request body streamed up under the client's flow control (never a whole body in memory,
//! trailers passed), the answer passed down (`answer.rs`), a WebSocket carried as an
//! `Upgrade` (`tunnel.rs`). A backend answer that is malformed or cut short ends this
//! stream only: `502` before its head went out, a reset after.

use std::future::poll_fn;

use http::StatusCode;

use super::answer::answer;
use super::backends::BackendConn;
use super::early::{self, Early};
use super::front::{Inbound, Note, Outbound, Reset};
use super::outcome::{client_reset, malformed, reply, stalled, too_large, write_head, Done, End};
use super::request::{Body, Kind};
use super::tunnel::upgrade;
use super::upload::{upload, Up};
use super::{Active, Gateway};
use crate::backend::balance::Key;
use crate::counters::WorkerCounters;
use crate::edge::route::BackendId;
use crate::gateway::upstream::stream::{self, Call, Served};

/// A judged request's head, in its backend's version.
pub(super) enum Head {
    /// HTTP/1.1's bytes.
    H1(Vec<u8>),
    /// An HTTP/2 backend's request and what the stream is besides; with `proto = auto`,
    /// the HTTP/1.1 head too, for a server that chooses HTTP/1.1.
    H2(Box<(http::Request<()>, Call, Option<Vec<u8>>)>),
}

/// Whether a request may be sent again on a new connection when its own turns out closed
/// (a reused one the backend had closed, or a server that died). One not yet written to the
/// backend always may; one written and then closed on without a byte of answer only when it
/// is idempotent (RFC 9110 §9.2.2) and has no body (which was streamed, not kept): a POST is
/// never sent twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    /// Only if nothing of it was written.
    Unsent,
    /// Also once written, if nothing was answered.
    Unanswered,
}

impl Retry {
    pub(super) fn of(method: &http::Method, framing: Body) -> Retry {
        use http::Method;
        // GET first: most requests are, and the test ends there.
        let idempotent = *method == Method::GET
            || *method == Method::HEAD
            || *method == Method::OPTIONS
            || *method == Method::TRACE
            || *method == Method::PUT
            || *method == Method::DELETE;
        if idempotent && framing == Body::None {
            Retry::Unanswered
        } else {
            Retry::Unsent
        }
    }
}

/// How a stream's wait for a backend connection ended.
enum Waited {
    /// With one, or why not.
    Got(Result<super::backends::BackendConn, crate::backend::ConnectError>),
    /// The client reset the stream.
    Reset,
    /// The client's connection is being ended as hostile.
    Closing,
}

/// Serves one stream whose request head is `head`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn serve<I: Inbound, O: Outbound>(
    active: Active,
    backend: BackendId,
    head: Head,
    framing: Body,
    kind: Kind,
    again: Retry,
    mut early: Early,
    key: Key,
    mut body: I,
    mut respond: O,
) {
    let gw: &Gateway = &active.0;
    if early == Early::Waited && !until_handshake(gw).await {
        return;
    }
    let mut head = match head {
        Head::H1(h) => h,
        // Boxed apart, so that the HTTP/1.1 backend's future stays its size.
        Head::H2(h) => {
            let (req, call, h1) = *h;
            let h2 = stream::serve(gw, backend, req, call, &mut body, &mut respond);
            match (Box::pin(h2).await, h1) {
                (Served::Http1, Some(h1)) => h1, // proto = auto, and the server chose it
                _ => return,
            }
        }
    };
    // Sent again at most --retries times (at least once): a server killed under load can
    // take a retry's fresh connection with it too, before it is marked down.
    let max_tries = gw.worker.state.limits.retries.max(1);
    let mut tries = 0;
    loop {
        // An idle connection of this client's, else (boxed, as it is large and rare once
        // the connections are warm) a new one or a wait for one: only that is timed for
        // the log (an idle one was waited for 0 µs, as HAProxy's %Tw says it).
        // hash and sticky cookies want one server: a connection to another does not do.
        let want = gw.backends.backend(backend).pool.wanted(&key);
        let mut asked = None;
        let got = match gw.backends.idle(backend, want) {
            Some(c) => Ok(c),
            None => {
                asked = respond.noting().then(std::time::Instant::now);
                // A client being ended as hostile (a reset or stall flood) opens nothing more.
                if gw.resets.flood().is_some() {
                    return;
                }
                let wait = async {
                    tokio::select! {
                        biased;
                        () = gw.resets.closing.notified() => Waited::Closing,
                        got = gw.backends.get(&gw.worker, backend, &key, want) => Waited::Got(got),
                        () = poll_fn(|cx| respond.poll_reset(cx)) => Waited::Reset,
                    }
                };
                match Box::pin(wait).await {
                    Waited::Got(got) => got,
                    Waited::Reset => return client_reset(gw),
                    Waited::Closing => return,
                }
            }
        };
        let mut conn = match got {
            Ok(c) => c,
            Err(e) => {
                gw.worker.connect_failed(gw.client, &e);
                return reply(&mut respond, StatusCode::SERVICE_UNAVAILABLE, false);
            }
        };
        if respond.noting() {
            let connect = conn.connect.take().unwrap_or_default();
            respond.note(Note::Connection {
                server: conn.server_arc(),
                waited: asked.map(|a| a.elapsed()).unwrap_or_default(),
                connect,
            });
        }
        let cookie = gw
            .backends
            .backend(backend)
            .set_cookie(&key, conn.server_ref());
        // The stream's future is copied whole into its box (see `accept`): the paths with
        // a body or a tunnel are boxed apart so that the common one, a request without a
        // body, stays small (2.3 KB with all three inline).
        let result = match (kind, framing) {
            (Kind::Upgrade(accept), _) => {
                Box::pin(upgrade(
                    gw,
                    &mut conn,
                    &head,
                    &accept,
                    &mut body,
                    &mut respond,
                ))
                .await
            }
            (_, Body::None) => fetch(gw, &mut conn, &head, kind, early, cookie, &mut respond).await,
            _ => {
                Box::pin(exchange(
                    gw,
                    &mut conn,
                    &head,
                    (framing, kind),
                    cookie,
                    &mut body,
                    &mut respond,
                ))
                .await
            }
        };
        match result {
            Ok(Done::Reusable) => {
                gw.resets.answered();
                return gw.backends.put(conn);
            }
            Ok(Done::Close) => return gw.resets.answered(),
            // Not answered whole: a stall (or reset) before it stays in the count.
            Ok(Done::Cut) => return,
            // Nothing of it was written (a reused connection the backend closed while idle, or
            // a server that died since the connect): it goes again, on another connection.
            Err(End::Unsent(_)) if tries < max_tries => {
                tries += 1;
                WorkerCounters::bump(&gw.worker.counters.http.retries);
                respond.note(Note::Retry);
            }
            // Closed or reset without a byte of answer (reused, or a server that died under
            // load): an idempotent request without a body goes to another connection (the
            // dead server is marked down by its next connect or its check).
            Err(End::Stale) if tries < max_tries && again == Retry::Unanswered => {
                tries += 1;
                WorkerCounters::bump(&gw.worker.counters.http.retries);
                respond.note(Note::Retry);
            }
            // The backend would not take it early: again once the handshake is done (the
            // connection, its answer unread, is dropped).
            Err(End::TooEarly) => {
                if !until_handshake(gw).await {
                    return;
                }
                early::unmark(&mut head);
                early = Early::No;
                WorkerCounters::bump(&gw.worker.counters.http.h3.early_requests[2]);
            }
            Err(End::ClientReset) => return client_reset(gw),
            Err(End::BadLength) => {
                return malformed(gw, &mut respond, "the body is not its content-length")
            }
            Err(End::TooLarge) => return too_large(gw, &mut respond, false),
            Err(End::Stalled) => {
                respond.reset(Reset::Cancel);
                return stalled(gw, respond.id(), "the request body stopped arriving");
            }
            Err(e) => {
                let status = match &e {
                    End::Timeout => StatusCode::GATEWAY_TIMEOUT,
                    _ => StatusCode::BAD_GATEWAY,
                };
                tracing::warn!(
                    name: "gateway_backend_error",
                    protocol = gw.version.as_str(),
                    status = %status,
                    client = %gw.client,
                    backend = %gw.backends.name(backend),
                    server = %conn.server(),
                    error = %e,
                    "answered {status}",
                );
                return reply(&mut respond, status, false);
            }
        }
    }
}

/// Waits for the client's handshake; whether it completed (if not, the connection is
/// gone and the stream with it). Boxed where it waits, as it rarely does: a stream's
/// future carries no room for it.
async fn until_handshake(gw: &Gateway) -> bool {
    match &gw.handshake {
        Some(h) if h.is_pending() => Box::pin(h.completed()).await,
        _ => true,
    }
}

/// A request without a body: the head, then the answer.
async fn fetch<O: Outbound>(
    gw: &Gateway,
    conn: &mut BackendConn,
    head: &[u8],
    kind: Kind,
    early: Early,
    cookie: Option<http::HeaderValue>,
    respond: &mut O,
) -> Result<Done, End> {
    write_head(&mut conn.tcp, head).await?;
    let BackendConn {
        tcp, buf, silence, ..
    } = conn;
    let early = early == Early::Passed;
    answer(tcp, buf, silence, gw, respond, kind, early, cookie).await
}

/// A request with a body: the head, then the body up and the answer down at once (a
/// backend may answer before the body is all sent).
async fn exchange<I: Inbound, O: Outbound>(
    gw: &Gateway,
    conn: &mut BackendConn,
    head: &[u8],
    (framing, kind): (Body, Kind),
    cookie: Option<http::HeaderValue>,
    body: &mut I,
    respond: &mut O,
) -> Result<Done, End> {
    write_head(&mut conn.tcp, head).await?;
    let BackendConn {
        tcp, buf, silence, ..
    } = conn;
    let (mut rd, mut wr) = tcp.split();
    let up = upload(body, &mut wr, framing, gw);
    let down = answer(&mut rd, buf, silence, gw, respond, kind, false, cookie);
    tokio::pin!(up, down);
    let mut sent = false;
    loop {
        tokio::select! {
            r = &mut up, if !sent => match r {
                Ok(()) => sent = true,
                Err(Up::Client) => return Err(End::ClientReset),
                Err(Up::Stalled) => return Err(End::Stalled),
                Err(Up::Length) => return Err(End::BadLength),
                Err(Up::TooLarge) => return Err(End::TooLarge),
                // The backend stopped reading (it may be answering 413): its answer decides.
                Err(Up::Backend(e)) => {
                    tracing::debug!(
                        name: "gateway_backend_stopped_reading",
                        protocol = gw.version.as_str(),
                        client = %gw.client,
                        error = %e,
                        "backend stopped reading the body",
                    );
                    let r = down.await?;
                    return Ok(if r == Done::Reusable { Done::Close } else { r });
                }
            },
            r = &mut down => {
                let done: Done = r?;
                return Ok(if sent || done == Done::Cut { done } else { Done::Close });
            }
        }
    }
}
