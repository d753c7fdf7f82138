//! A request stream taken in: its request judged before its task is made (the client's
//! request rate, the head's hygiene, the route's verdict and the edge policy's request
//! phase: header rules, the body limit), its answer side wrapped for the policy's answer
//! phase, and the exchange that serves it made (`exchange.rs`).

use std::future::Future;
use std::pin::Pin;

use http::request::Parts;
use http::StatusCode;

use super::early::{self, Early};
use super::front::{Inbound, Note, Outbound};
use super::outcome::{malformed, reply, reply_with, too_large};
use super::request::{self, Body, Refusal};
use super::route_action::{act, Acted};
use super::{Active, Gateway};
use crate::access::request_id::RequestId;
use crate::config::Proto;
use crate::counters::WorkerCounters;
use crate::edge::route::Target;
use crate::gateway::choose::{Choice, ENCODED_SLASH};
use crate::gateway::policy::body::Budget;
use crate::gateway::policy::{AnswerRules, Answering, Effective};
use crate::gateway::upstream::head::H2Head;
use crate::gateway::upstream::stream::Call;

use super::exchange::{serve, Head, Retry};

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
    let id = gw.fwd.request_id.as_ref().map(|spec| {
        let given = parts.headers.iter();
        let given = given.filter(|(n, _)| gw.fwd.is_request_id(n.as_str().as_bytes()));
        RequestId::of(
            spec.trusts(gw.client.ip()),
            given.map(|(_, v)| v.as_bytes()),
        )
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
    respond: O,
) -> Option<Pin<Box<impl Future<Output = ()>>>> {
    let gw: &Gateway = &active.0;
    let counters = &gw.worker.counters;
    let grpc = super::grpc::is_call(&parts.headers);
    // The answer phase covers every answer, shuck's own refusals first: the connection's
    // rules until the route is known.
    let routing = gw.backends.routing();
    let policed = gw.policed && routing.has_policy();
    let connection = Target {
        backend: gw.fallback,
        route: gw.fallback_route(),
    };
    let policy = |to: Target| Effective::of(routing, to, gw.frontend_policy.as_deref());
    let answers = if policed {
        AnswerRules::of(&policy(connection))
    } else {
        AnswerRules::default()
    };
    let mut respond = Answering::new(respond, answers);
    // --trusted-proxies: the client the trusted peer names, judged as a connection's
    // client is (its bans, the frontend's rules, its request rate).
    let real = gw.behind.as_ref().and_then(|b| {
        let fields: Vec<(&[u8], &[u8])> = (parts.headers.iter())
            .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()))
            .collect();
        let ip = b.client(&fields)?;
        Some((b, ip))
    });
    if let Some((behind, ip)) = real {
        respond.note(Note::Client(ip));
        if let Err(r) = behind.admit(ip) {
            crate::clients::log_refused(&r, std::net::SocketAddr::new(ip, 0), gw.version.as_str());
            if r.reason == crate::clients::Reason::RequestRate {
                let retry = http::HeaderValue::from(r.retry_secs());
                let retry = Some((http::header::RETRY_AFTER, retry));
                reply_with(&mut respond, StatusCode::TOO_MANY_REQUESTS, grpc, retry);
            } else {
                reply(&mut respond, StatusCode::FORBIDDEN, grpc);
            }
            return None;
        }
    } else if let Some(limit) = &gw.requests {
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
    let client = real.map_or(gw.client.ip(), |(_, ip)| ip);
    let choice = match &gw.chooser {
        None => Choice::Backend(connection),
        Some(c) => c.choose_for(host, parts.uri.path(), client),
    };
    // The forwarding fields name the request's client.
    let named;
    let fwd = match real {
        Some((_, ip)) => {
            named = gw.fwd.for_client(ip);
            &named
        }
        None => &gw.fwd,
    };
    // The route's own action: a redirect it answers itself, or the path it sends.
    let mut rewritten = None;
    if let Choice::Backend(to) = choice {
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        match act(routing, to, host, target) {
            Acted::Pass => {}
            Acted::Rewritten(p) => rewritten = Some(p),
            Acted::Redirect(code, location) => {
                if policed && to != connection {
                    respond.set(AnswerRules::of(&policy(to)));
                }
                // A Location of shuck's making is visible ASCII (config/rewrite.rs).
                let status = StatusCode::from_u16(code).unwrap_or(StatusCode::PERMANENT_REDIRECT);
                let location = http::HeaderValue::from_str(&location).ok();
                let location = location.map(|l| (http::header::LOCATION, l));
                reply_with(&mut respond, status, grpc, location);
                return None;
            }
        }
    }
    if let Some(p) = &rewritten {
        respond.note(Note::Rewritten(p));
    }
    let sent = rewritten.as_deref();
    let (proto, effective) = match choice {
        Choice::Backend(to) if policed => {
            // Its route's answer rules from now on (the connection's hold already when
            // the route is the connection's).
            let effective = policy(to);
            if to != connection {
                respond.set(AnswerRules::of(&effective));
            }
            (gw.backends.backend(to.backend).proto, effective)
        }
        Choice::Backend(to) => (gw.backends.backend(to.backend).proto, Effective::default()),
        _ => (Proto::Http1, Effective::default()),
    };
    let rules = effective.request;
    let h2 = proto != Proto::Http1;
    let mut head = Vec::new();
    let mut h2_head = H2Head::default();
    let built = if h2 {
        request::build(
            &parts,
            end_stream,
            fwd,
            id.as_ref(),
            rules,
            sent,
            &mut h2_head,
        )
    } else {
        head.reserve(512);
        request::build(&parts, end_stream, fwd, id.as_ref(), rules, sent, &mut head)
    };
    // proto = auto: the same head as HTTP/1.1's too (the same judgement, so it cannot
    // fail now), for a server that chooses HTTP/1.1.
    let h1_too = match proto {
        Proto::Auto => {
            request::build(&parts, end_stream, fwd, id.as_ref(), rules, sent, &mut head).ok()
        }
        _ => None,
    };
    let (mut framing, mut kind) = match built {
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
    // The request phase's body limit: a declared length over it never reaches the
    // backend; a body without one is counted as it goes.
    match &mut framing {
        Body::Length(n) if Budget::new(effective.max_body).refuses(*n) => {
            too_large(gw, &mut respond, grpc);
            return None;
        }
        Body::Chunked(b) => *b = Budget::new(effective.max_body),
        _ => {}
    }
    let backend = match choice {
        Choice::Backend(to) => to.backend,
        Choice::Forbidden => {
            reply(&mut respond, StatusCode::FORBIDDEN, grpc);
            return None;
        }
        Choice::EncodedSlash => {
            refuse(
                gw,
                &mut respond,
                StatusCode::BAD_REQUEST,
                ENCODED_SLASH,
                grpc,
            );
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
    if be.pool.in_maintenance() {
        maintenance(gw, &mut respond, &be.name, grpc);
        return None;
    }
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

/// A request for a backend whose every server is in maintenance: 503 with `Retry-After`
/// (its 503 error page, when one is given).
fn maintenance<O: Outbound>(gw: &Gateway, respond: &mut Answering<O>, backend: &str, grpc: bool) {
    tracing::debug!(
        name: "gateway_backend_maintenance",
        protocol = gw.version.as_str(),
        client = %gw.client,
        backend,
        "a request for a backend in maintenance: 503",
    );
    respond.in_maintenance();
    let retry = http::HeaderValue::from(crate::backend::MAINTENANCE_RETRY_SECS);
    let retry = Some((http::header::RETRY_AFTER, retry));
    reply_with(respond, StatusCode::SERVICE_UNAVAILABLE, grpc, retry);
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
