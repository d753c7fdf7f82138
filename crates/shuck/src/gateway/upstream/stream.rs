//! One client stream carried as one stream on a shared HTTP/2 backend connection: the
//! request's body up and the answer down at once (gRPC's streaming both ways), each
//! under its peer's flow control, with trailers both ways. A stream the backend never
//! processed (above a GOAWAY's last stream, or `REFUSED_STREAM`) goes to another
//! connection with the body sent so far (`upload.rs` keeps it), as does one answered with
//! a gRPC status the backend's `retry-on` names; a client's reset is passed on as
//! `RST_STREAM` (`CANCEL`) and the backend's to the client; a gRPC call's `grpc-timeout` is
//! its deadline.

use crate::gateway::outcome::too_large;
use std::cell::Cell;
use std::future::poll_fn;

use bytes::Bytes;
use h2::{Reason, RecvStream};
use http::{HeaderMap, Request, Response, StatusCode};
use tokio::time::Instant;

use super::pool;
use super::upload::{filtered, upload, Replay, Up};
use crate::access::Cause;
use crate::backend::balance::Key;
use crate::counters::WorkerCounters;
use crate::edge::route::BackendId;
use crate::gateway::front::{BodyWait, Inbound, Note, Outbound, Reset, SendError};
use crate::gateway::grpc::{self, Code};
use crate::gateway::outcome::{client_reset, malformed, reply, stalled};
use crate::gateway::request::Body;
use crate::gateway::Gateway;

/// What a stream is besides its head.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// How its body travels.
    pub framing: Body,
    /// A gRPC call: shuck's own answers are gRPC's.
    pub grpc: bool,
    /// Its `grpc-timeout`, from the stream's start.
    pub deadline: Option<Instant>,
    /// Idempotent and without a body: it may go again even once processed, when its
    /// connection died before any answer.
    pub resendable: bool,
    /// What it brings to the choice of its server.
    pub key: Key,
}

/// How a try ended before the answer's head reached the client.
#[derive(Debug)]
enum Fail {
    /// The backend never processed it (GOAWAY above it, `REFUSED_STREAM`, or its
    /// connection refused a new stream): it may go elsewhere whatever its method.
    Unprocessed,
    /// The connection died (or the backend reset the stream) before an answer.
    Lost(h2::Error),
    /// No answer within `--idle-timeout`.
    Timeout,
    /// The call's `grpc-timeout` passed.
    Deadline,
    /// The client reset the stream.
    Client,
    /// The client's body stopped arriving for `--http-stall-timeout`.
    Stalled,
    /// The client's body is not its `content-length`.
    Length,
    /// The client's body ran past the edge policy's limit.
    TooLarge,
    /// Answered trailers-only with a `grpc-status` of the backend's `retry-on`: sent again
    /// while tries are left, else this answer is the client's.
    Status(Box<http::response::Parts>),
}

/// What became of a stream given to [`serve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// It was answered, or ended.
    Done,
    /// `proto = auto`: the server chose HTTP/1.1; nothing of the stream was used.
    Http1,
}

/// Serves one stream on `backend`'s shared connections; `req` is its judged head.
pub(in crate::gateway) async fn serve<I: Inbound, O: Outbound>(
    gw: &Gateway,
    backend: BackendId,
    req: Request<()>,
    call: Call,
    body: &mut I,
    respond: &mut O,
) -> Served {
    let be = gw.backends.backend(backend).clone();
    let max_tries = gw.worker.state.limits.retries.max(1);
    let keepalive = gw.worker.state.limits.http_keepalive_timeout;
    let mut replay = Replay::default();
    let mut tries = 0;
    loop {
        let asked = respond.noting().then(std::time::Instant::now);
        let taken = tokio::select! {
            biased;
            () = gw.resets.closing.notified() => return Served::Done,
            () = poll_fn(|cx| respond.poll_reset(cx)) => {
                client_reset(gw);
                return Served::Done;
            }
            () = until(call.deadline) => {
                deadline(gw, respond);
                return Served::Done;
            }
            t = pool::take(&gw.worker, &be, &call.key, keepalive) => t,
        };
        let (taken, connect) = match taken {
            Ok(pool::Got::Stream(t, connect)) => (t, connect),
            Ok(pool::Got::Http1) => return Served::Http1,
            Err(e) => {
                gw.worker.connect_failed(gw.client, &e);
                reply(respond, StatusCode::SERVICE_UNAVAILABLE, call.grpc);
                return Served::Done;
            }
        };
        if let Some(asked) = asked {
            respond.note(Note::Connection {
                server: taken.lease.server_arc(),
                waited: asked.elapsed(),
                connect: connect.unwrap_or_default(),
            });
        }
        let cookie = be.set_cookie(&call.key, taken.lease.server());
        let retry_on = be.retry_on;
        let tried = exchange(
            gw,
            &taken,
            &req,
            (call, retry_on),
            cookie,
            &mut replay,
            body,
            respond,
        )
        .await;
        let again = match &tried {
            Ok(()) => {
                gw.resets.answered();
                return Served::Done;
            }
            Err(Fail::Unprocessed) => {
                taken.conn.retire();
                !replay.over
            }
            Err(Fail::Lost(_)) => call.resendable,
            Err(Fail::Status(parts)) => {
                let again = !replay.over && tries < max_tries;
                tracing::debug!(
                    name: "gateway_grpc_retry_on",
                    protocol = gw.version.as_str(),
                    client = %gw.client,
                    backend = %be.name,
                    server = %taken.lease.server().name(),
                    grpc_status = %String::from_utf8_lossy(grpc_status(&parts.headers)),
                    again,
                    "a call answered with a status of the backend's retry-on",
                );
                again
            }
            Err(_) => false,
        };
        if again && tries < max_tries {
            tries += 1;
            WorkerCounters::bump(&gw.worker.counters.http.retries);
            respond.note(Note::Retry);
            continue;
        }
        let status = match tried {
            Ok(()) => return Served::Done,
            // No try left: the server's own answer is the client's.
            Err(Fail::Status(parts)) => {
                let cookie = be.set_cookie(&call.key, taken.lease.server());
                if respond
                    .respond(answer_head(gw, *parts, cookie), true)
                    .is_ok()
                {
                    gw.resets.answered();
                    let _ = respond.flush_head(gw.stall).await;
                }
                return Served::Done;
            }
            Err(Fail::Client) => {
                client_reset(gw);
                return Served::Done;
            }
            Err(Fail::Deadline) => {
                deadline(gw, respond);
                return Served::Done;
            }
            Err(Fail::Stalled) => {
                respond.reset(Reset::Cancel);
                stalled(gw, respond.id(), "the request body stopped arriving");
                return Served::Done;
            }
            Err(Fail::Length) => {
                malformed(gw, respond, "the body is not its content-length");
                return Served::Done;
            }
            Err(Fail::TooLarge) => {
                too_large(gw, respond, call.grpc);
                return Served::Done;
            }
            Err(Fail::Timeout) => StatusCode::GATEWAY_TIMEOUT,
            Err(Fail::Unprocessed | Fail::Lost(_)) => StatusCode::BAD_GATEWAY,
        };
        let error = match &tried {
            Err(Fail::Lost(e)) => e.to_string(),
            Err(Fail::Unprocessed) => {
                "turned away unprocessed, too often or with too long a body".into()
            }
            _ => "no answer within --idle-timeout".into(),
        };
        tracing::warn!(
            name: "gateway_backend_error",
            protocol = gw.version.as_str(),
            status = %status,
            client = %gw.client,
            backend = %be.name,
            server = %taken.lease.server().name(),
            error = %error,
            "answered {status}",
        );
        reply(respond, status, call.grpc);
        return Served::Done;
    }
}

/// Ready at `deadline`; never without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// The call's deadline passed before its answer: `DEADLINE_EXCEEDED` as its answer. The
/// backend's stream, dropped by the caller, is reset (`CANCEL`).
fn deadline<O: Outbound>(gw: &Gateway, respond: &mut O) {
    tracing::debug!(
        name: "gateway_grpc_deadline",
        protocol = gw.version.as_str(),
        client = %gw.client,
        stream = respond.id(),
        "a gRPC call's grpc-timeout passed: DEADLINE_EXCEEDED",
    );
    respond.note(Note::Failed(Cause::BackendTimeout));
    respond.answer_now(
        grpc::trailers_only(Code::DeadlineExceeded, DEADLINE),
        Bytes::new(),
    );
}

/// What a call whose deadline passed is told.
const DEADLINE: &str = "the call's grpc-timeout passed";

/// Ends an answer whose head went with gRPC trailers saying `code`, within
/// `--http-stall-timeout` (a client gone is told nothing).
async fn end_call<O: Outbound>(gw: &Gateway, respond: &mut O, code: Code, message: &'static str) {
    respond.note(Note::Failed(match code {
        Code::DeadlineExceeded => Cause::BackendTimeout,
        _ => Cause::AnswerCut,
    }));
    let t = grpc::trailers(code, message);
    let _ = tokio::time::timeout(gw.stall, respond.trailers(t)).await;
}

/// One try: the stream opened on `taken`'s connection, its body up and its answer down.
#[allow(clippy::too_many_arguments)]
async fn exchange<I: Inbound, O: Outbound>(
    gw: &Gateway,
    taken: &pool::Taken,
    req: &Request<()>,
    (call, retry_on): (Call, crate::config::route::GrpcRetryOn),
    cookie: Option<http::HeaderValue>,
    replay: &mut Replay,
    body: &mut I,
    respond: &mut O,
) -> Result<(), Fail> {
    let ready = tokio::select! {
        r = taken.sender().ready() => r,
        () = until(call.deadline) => return Err(Fail::Deadline),
    };
    let Ok(mut send) = ready else {
        return Err(Fail::Unprocessed); // GOAWAY or a dead connection: nothing was sent
    };
    let end = call.framing == Body::None;
    let (answer, mut tx) = match send.send_request(req.clone(), end) {
        Ok(s) => s,
        Err(_) => return Err(Fail::Unprocessed),
    };
    let processed = Cell::new(false);
    let up = upload(gw, &mut tx, body, call.framing, replay, &processed);
    tokio::pin!(up);
    let mut sent = end;
    // Until the answer's head: the body goes up meanwhile.
    let idle = tokio::time::sleep(gw.idle);
    tokio::pin!(idle, answer);
    let head = loop {
        tokio::select! {
            biased;
            r = &mut answer => break r,
            r = &mut up, if !sent => match r {
                Ok(()) => sent = true,
                Err(Up::Wait(BodyWait::Client)) => return Err(Fail::Client),
                Err(Up::Wait(BodyWait::Stalled)) => return Err(Fail::Stalled),
                Err(Up::Wait(BodyWait::Length)) => return Err(Fail::Length),
                Err(Up::Wait(BodyWait::TooLarge)) => return Err(Fail::TooLarge),
                Err(Up::Backend) => sent = true, // its answer, or its reset, says why
            },
            () = poll_fn(|cx| respond.poll_reset(cx)) => return Err(Fail::Client),
            () = &mut idle => return Err(Fail::Timeout),
            () = until(call.deadline) => return Err(Fail::Deadline),
        }
    };
    let resp = match head {
        Ok(r) => r,
        Err(e) => return Err(classify(e)),
    };
    let (parts, mut rx) = resp.into_parts();
    // A trailers-only status the operator retries on (`retry-on`): whether the server ran
    // the call is not said by it (a GOAWAY's last stream covers it), so only when asked.
    if call.grpc && rx.is_end_stream() && retry_on.holds(grpc_status(&parts.headers)) {
        return Err(Fail::Status(Box::new(parts)));
    }
    processed.set(true);
    let resp = answer_head(gw, parts, cookie);
    let empty = rx.is_end_stream();
    if respond.respond(resp, empty).is_err() {
        return Err(Fail::Client);
    }
    gw.resets.answered();
    // The answer down, the body still up meanwhile (a bidirectional stream).
    let ended = {
        let down = async {
            match respond.flush_head(gw.stall).await {
                Ok(()) if empty => Ok(()),
                Ok(()) => download(gw, &mut rx, respond, call).await,
                Err(e) => Err(e.into()),
            }
        };
        tokio::pin!(down);
        loop {
            tokio::select! {
                r = &mut down => break r,
                r = &mut up, if !sent => match r {
                    Ok(()) | Err(Up::Backend) => sent = true,
                    Err(Up::Wait(BodyWait::Client)) => break Err(Down::Client),
                    Err(Up::Wait(BodyWait::Stalled)) => break Err(Down::Stalled),
                    Err(Up::Wait(BodyWait::Length)) => break Err(Down::Length),
                    Err(Up::Wait(BodyWait::TooLarge)) => break Err(Down::TooLarge),
                },
            }
        }
    };
    match ended {
        Ok(()) => {}
        Err(Down::Client) => client_reset(gw),
        Err(Down::Stalled) => {
            respond.reset(Reset::Cancel);
            stalled(
                gw,
                respond.id(),
                "the client stopped taking the answer or sending its body",
            );
        }
        Err(Down::Length) => malformed(gw, respond, "the body is not its content-length"),
        Err(Down::TooLarge) => too_large(gw, respond, call.grpc),
        Err(Down::Deadline) => end_call(gw, respond, Code::DeadlineExceeded, DEADLINE).await,
        Err(Down::Backend(e)) => lost_midway(gw, respond, call, &e).await,
        Err(Down::Silent) => {
            respond.reset(Reset::Cancel);
            gw.count_reset_sent();
        }
    }
    Ok(())
}

/// A trailers-only answer's `grpc-status`, empty when it has none.
fn grpc_status(h: &HeaderMap) -> &[u8] {
    h.get("grpc-status").map_or(&[], |v| v.as_bytes())
}

/// The backend's answer head as the client gets it: `Alt-Svc` unless the backend set one,
/// and the sticky cookie.
fn answer_head(
    gw: &Gateway,
    parts: http::response::Parts,
    cookie: Option<http::HeaderValue>,
) -> Response<()> {
    let mut resp = Response::from_parts(parts, ());
    if let Some(v) = &gw.alt_svc {
        if let http::header::Entry::Vacant(e) = resp.headers_mut().entry(http::header::ALT_SVC) {
            e.insert(v.clone());
        }
    }
    if let Some(c) = cookie {
        resp.headers_mut().append(http::header::SET_COOKIE, c);
    }
    resp
}

/// What a stream's error before its answer means for sending it again.
fn classify(e: h2::Error) -> Fail {
    let graceful = e.is_go_away() && e.is_remote() && e.reason() == Some(Reason::NO_ERROR);
    let refused = e.is_reset() && e.is_remote() && e.reason() == Some(Reason::REFUSED_STREAM);
    if graceful || refused {
        // RFC 9113 §6.8, §8.7: never processed, safe to send anywhere.
        Fail::Unprocessed
    } else {
        Fail::Lost(e)
    }
}

/// The backend's answer broke after its head went: a reset of the backend's is passed on
/// as a reset; a lost connection ends a gRPC call with `UNAVAILABLE` in its trailers (what
/// its client reads), any other answer with a reset.
async fn lost_midway<O: Outbound>(gw: &Gateway, respond: &mut O, call: Call, e: &h2::Error) {
    tracing::debug!(
        name: "gateway_backend_answer_cut",
        protocol = gw.version.as_str(),
        client = %gw.client,
        error = %e,
        "backend answer cut short: {e}",
    );
    if call.grpc && !e.is_reset() {
        return end_call(
            gw,
            respond,
            Code::Unavailable,
            "the backend connection was lost",
        )
        .await;
    }
    let why = if e.reason() == Some(Reason::CANCEL) {
        Reset::Cancel
    } else {
        Reset::Internal
    };
    respond.reset(why);
    gw.count_reset_sent();
}

/// Why the answer's way down stopped.
enum Down {
    Client,
    Stalled,
    /// The client's body is not its `content-length`.
    Length,
    TooLarge,
    Deadline,
    /// No byte from the backend for `--idle-timeout`.
    Silent,
    Backend(h2::Error),
}

impl From<SendError> for Down {
    fn from(e: SendError) -> Self {
        match e {
            SendError::Client => Down::Client,
            SendError::Stalled => Down::Stalled,
        }
    }
}

/// The answer's body and trailers to the client, each piece's window given back to the
/// backend once the client took it.
async fn download<O: Outbound>(
    gw: &Gateway,
    rx: &mut RecvStream,
    respond: &mut O,
    call: Call,
) -> Result<(), Down> {
    // One timer for the whole answer, moved on as pieces come.
    let silence = tokio::time::sleep(gw.idle);
    tokio::pin!(silence);
    loop {
        let next = tokio::select! {
            d = rx.data() => d,
            () = &mut silence => return Err(Down::Silent),
            () = until(call.deadline) => return Err(Down::Deadline),
        };
        silence.as_mut().reset(Instant::now() + gw.idle);
        match next {
            Some(Ok(d)) => {
                let n = d.len();
                let last = rx.is_end_stream();
                respond.send(d, last, gw.stall).await?;
                let _ = rx.flow_control().release_capacity(n);
                if last {
                    return Ok(());
                }
            }
            Some(Err(e)) => return Err(Down::Backend(e)),
            None => break,
        }
    }
    match rx.trailers().await {
        Ok(Some(t)) => {
            let t = filtered(gw, t);
            respond.trailers(t).await.map_err(|_| Down::Client)
        }
        Ok(None) => Ok(respond.send(Bytes::new(), true, gw.stall).await?),
        Err(e) => Err(Down::Backend(e)),
    }
}
