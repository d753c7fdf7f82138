//! One request stream carried as one HTTP/1.1 exchange on a backend connection of its
//! client's: its backend chosen (routes by `:authority` and path), the head written, the
//! request body streamed up under the client's flow control (never a whole body in memory,
//! trailers passed), the answer passed down (`answer.rs`), a WebSocket carried as an
//! `Upgrade` (`tunnel.rs`). A backend answer that is malformed or cut short ends this
//! stream only: `502` before its head went out, a reset after.

use std::future::{poll_fn, Future};
use std::pin::Pin;

use http::request::Parts;
use http::StatusCode;

use super::answer::answer;
use super::backends::BackendConn;
use super::early::{self, Early};
use super::front::{Inbound, Note, Outbound, Reset};
use super::outcome::{client_reset, malformed, reply, reply_with, stalled, write_head, Done, End};
use super::request::{self, Body, Kind, Refusal};
use super::tunnel::upgrade;
use super::upload::{upload, Up};
use super::{Active, Gateway};
use crate::access::request_id::RequestId;
use crate::backend::balance::Key;
use crate::config::Proto;
use crate::counters::WorkerCounters;
use crate::edge::route::BackendId;
use crate::gateway::choose::Choice;
use crate::gateway::upstream::head::H2Head;
use crate::gateway::upstream::stream::{self, Call, Served};

/// A stream's future: the version's own halves, or (`--access-log`) the same watched for
/// the log. Either is boxed where it is made (see [`take`]).
pub enum Stream<A, B> {
    /// Without an access log.
    Plain(Pin<Box<A>>),
    /// With one.
    Logged(Pin<Box<B>>),
}

impl<A: Future<Output = ()>, B: Future<Output = ()>> Future for Stream<A, B> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        match self.get_mut() {
            Stream::Plain(f) => f.as_mut().poll(cx),
            Stream::Logged(f) => f.as_mut().poll(cx),
        }
    }
}

/// Takes a stream in: its request (`parts`; `end_stream`: no body follows) refused at
/// once, or the future that serves it (`body` brings the request's body, `respond` takes
/// the answer). With `--access-log`, both halves are watched for the stream's line.
pub fn accept<I: Inbound, O: Outbound>(
    active: Active,
    parts: Parts,
    end_stream: bool,
    body: I,
    respond: O,
) -> Option<Stream<impl Future<Output = ()>, impl Future<Output = ()>>> {
    let gw = &active.0;
    let id = gw.fwd.request_id.as_ref().map(|_| {
        let given = parts.headers.iter();
        let given = given.filter(|(n, _)| gw.fwd.is_request_id(n.as_str().as_bytes()));
        RequestId::of(given.map(|(_, v)| v.as_bytes()))
    });
    let echo = gw.fwd.request_id.as_ref().is_some_and(|s| s.respond);
    if gw.log.is_none() && !echo {
        return take(active, parts, end_stream, id, body, respond).map(Stream::Plain);
    }
    let spec = gw.fwd.request_id.as_deref().filter(|s| s.respond);
    let echo = spec.zip(id).and_then(|(s, id)| {
        let name = http::HeaderName::from_bytes(s.name.as_bytes()).ok()?;
        Some((name, http::HeaderValue::from_bytes(id.as_bytes()).ok()?))
    });
    let (body, respond) = super::logged::watch(gw.log.clone(), echo, id, &parts, body, respond);
    take(active, parts, end_stream, id, body, respond).map(Stream::Logged)
}

/// [`accept`]'s work. Done before the future is made, so that the request (its
/// fields, a quarter of a kilobyte) is not carried in it.
///
/// The future is boxed here, where it is made: a task's future is moved whole at its
/// spawn and twice more as it ends (tokio's task stages), and 1.5 KB moved four times a
/// stream cost more than the allocation (callgrind: 8 % fewer instructions boxed).
fn take<I: Inbound, O: Outbound>(
    active: Active,
    parts: Parts,
    end_stream: bool,
    id: Option<RequestId>,
    body: I,
    mut respond: O,
) -> Option<Pin<Box<impl Future<Output = ()>>>> {
    let gw: &Gateway = &active.0;
    let counters = &gw.worker.counters;
    let grpc = super::grpc::is_call(&parts.headers);
    if let Some(limit) = &gw.requests {
        if let Err(r) = gw.worker.state.clients.request(limit) {
            crate::clients::log_refused(&r, gw.client, gw.version.as_str());
            // RFC 6585 §4: 429, and when to try again.
            let retry = http::HeaderValue::from(r.retry_secs());
            let retry = Some((http::header::RETRY_AFTER, retry));
            reply_with(&mut respond, StatusCode::TOO_MANY_REQUESTS, grpc, retry);
            return None;
        }
    }
    // Where it would go first (the head's form depends on the backend), then the head's
    // hygiene, then the route's verdict: a malformed request is refused alike whatever
    // its route (HTTP/3's stack refuses some before the core sees them).
    let host = parts.uri.authority().map(|a| a.as_str()).or_else(|| {
        parts
            .headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
    });
    let choice = match &gw.chooser {
        None => Choice::Backend(gw.fallback),
        Some(c) => c.choose(host, parts.uri.path()),
    };
    let proto = match choice {
        Choice::Backend(b) => gw.backends.backend(b).proto,
        _ => Proto::Http1,
    };
    let h2 = proto != Proto::Http1;
    let mut head = Vec::new();
    let mut h2_head = H2Head::default();
    let built = if h2 {
        request::build(&parts, end_stream, &gw.fwd, id.as_ref(), &mut h2_head)
    } else {
        head.reserve(512);
        request::build(&parts, end_stream, &gw.fwd, id.as_ref(), &mut head)
    };
    // proto = auto: the same head as HTTP/1.1's too (the same judgement, so it cannot
    // fail now), for a server that chooses HTTP/1.1.
    let h1_too = match proto {
        Proto::Auto => request::build(&parts, end_stream, &gw.fwd, id.as_ref(), &mut head).ok(),
        _ => None,
    };
    let (framing, mut kind) = match built {
        Ok(r) => r,
        Err(Refusal::Malformed(why)) => {
            malformed(gw, &mut respond, why);
            return None;
        }
        Err(Refusal::Status(status, why)) => {
            refuse(gw, &mut respond, status, why, grpc);
            return None;
        }
    };
    let backend = match choice {
        Choice::Backend(b) => b,
        Choice::Forbidden => {
            reply(&mut respond, StatusCode::FORBIDDEN, grpc);
            return None;
        }
        Choice::Misdirected => {
            tracing::debug!(
                name: "gateway_request_misdirected",
                protocol = gw.version.as_str(),
                client = %gw.client,
                host = host.unwrap_or("-"),
                "a request for a name the connection's certificate does not cover: 421",
            );
            WorkerCounters::bump(&counters.http.misdirected);
            reply(&mut respond, StatusCode::MISDIRECTED_REQUEST, grpc);
            return None;
        }
    };
    respond.note(Note::Backend(gw.backends.name(backend)));
    let be = gw.backends.backend(backend);
    let key = if be.reads_requests() {
        let fields: Vec<(&[u8], &[u8])> = (parts.headers.iter())
            .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()))
            .collect();
        be.key_of_request(gw.client.ip(), parts.uri.path().as_bytes(), &fields)
    } else {
        be.key_of_client(gw.client.ip())
    };
    let again = Retry::of(&parts.method, framing);
    let early = Early::of(gw.handshake.as_deref(), &parts.method, framing, kind);
    // proto = auto carries a WebSocket the HTTP/1.1 way (its own key in its head).
    let h2 = h2
        && match h1_too {
            Some((_, k)) if h2_head.upgrade => {
                kind = k;
                false
            }
            _ => true,
        };
    let head = if h2 {
        if h2_head.upgrade {
            let why = "WebSockets are not carried to an HTTP/2 backend";
            refuse(gw, &mut respond, StatusCode::NOT_IMPLEMENTED, why, grpc);
            return None;
        }
        if early == Early::Passed {
            h2_head.mark_early();
            early::mark(&mut head);
        }
        let tls = gw.backends.backend(backend).tls.is_some();
        let req = match h2_head.into_request(tls) {
            Ok(r) => r,
            Err(why) => {
                refuse(gw, &mut respond, StatusCode::BAD_REQUEST, why, grpc);
                return None;
            }
        };
        let deadline = super::grpc::timeout(&parts.headers)
            .filter(|_| grpc)
            .map(|d| tokio::time::Instant::now() + d);
        let call = Call {
            framing,
            grpc,
            deadline,
            resendable: again == Retry::Unanswered,
            key,
        };
        Head::H2(Box::new((req, call, h1_too.map(|_| head))))
    } else {
        if early == Early::Passed {
            early::mark(&mut head);
        }
        Head::H1(head)
    };
    gw.count_request();
    if early != Early::No {
        let h3 = &counters.http.h3;
        WorkerCounters::bump(&h3.early_requests[usize::from(early == Early::Waited)]);
    }
    Some(Box::pin(serve(
        active, backend, head, framing, kind, again, early, key, body, respond,
    )))
}

/// A well-formed request shuck does not pass on: answered `status`, logged with `why`.
fn refuse<O: Outbound>(gw: &Gateway, respond: &mut O, status: StatusCode, why: &str, grpc: bool) {
    tracing::debug!(
        name: "gateway_request_refused",
        protocol = gw.version.as_str(),
        reason = %why,
        client = %gw.client,
        "request refused: {why}",
    );
    reply(respond, status, grpc);
}

/// A judged request's head, in its backend's version.
enum Head {
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
enum Retry {
    /// Only if nothing of it was written.
    Unsent,
    /// Also once written, if nothing was answered.
    Unanswered,
}

impl Retry {
    fn of(method: &http::Method, framing: Body) -> Retry {
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
async fn serve<I: Inbound, O: Outbound>(
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
            Ok(_) => return gw.resets.answered(),
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
                return Ok(if sent { done } else { Done::Close });
            }
        }
    }
}
