//! HTTP mode (`--http`, stud-http's job): every request of a keep-alive connection gets
//! `X-Forwarded-For` and `X-Forwarded-Proto`, after the client's own copies (and
//! `Forwarded`) are removed. Requests are parsed with httparse; bodies stream through
//! without being buffered, their framing followed so that the next request is found.
//! Responses are followed too, only to learn when a `101 Switching Protocols` turns the
//! connection into a plain tunnel (WebSocket): until the backend has answered an upgrade
//! request, nothing more from the client is parsed as HTTP or passed on.

pub mod chunked;
pub mod front;
pub mod head;
pub mod log;

pub mod request;
pub mod response;

use std::collections::VecDeque;
use std::time::Duration;

use request::Waiting;
use tokio::time::Instant;

pub use request::RequestRewriter;
pub use response::ResponseTracker;

/// What kind of request a response will answer (it decides how the response is framed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    /// An ordinary request.
    Normal,
    /// HEAD: the response has no body.
    Head,
    /// A request to switch protocols.
    Upgrade,
}

/// Where a protocol upgrade stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upgrade {
    /// No upgrade asked.
    None,
    /// An upgrade request went to the backend; its answer is awaited.
    Awaiting,
    /// The backend answered 101: both directions are a plain relay now.
    Tunnel,
}

/// What both directions know of the exchange.
#[derive(Debug)]
pub struct Exchange {
    /// Requests sent whose responses have not begun, oldest first.
    pub pending: VecDeque<Pending>,
    /// Upgrade state.
    pub upgrade: Upgrade,
    /// The response stream could not be followed (malformed); upgrades are then refused.
    pub lost: bool,
    /// `--access-log`: the connection's lines.
    pub log: Option<Box<log::H1Log>>,
    /// `--request-id-response`: the IDs of the requests whose answers have not begun.
    pub ids: VecDeque<crate::access::request_id::RequestId>,
    /// The edge policy applies (`Http::police`): each request's answer rules, queued as
    /// `pending` is, and those of shuck's own answers (the connection's, or the last
    /// request's).
    pub policed: bool,
    /// See `policed`.
    pub answers: VecDeque<crate::gateway::policy::AnswerRules>,
    /// See `policed`.
    pub own: crate::gateway::policy::AnswerRules,
}

/// Most requests in flight (pipelined) on one connection.
pub const MAX_PIPELINE: usize = 1024;

impl Exchange {
    /// A new connection's exchange.
    pub fn new() -> Self {
        Exchange {
            pending: VecDeque::new(),
            upgrade: Upgrade::None,
            lost: false,
            log: None,
            ids: VecDeque::new(),
            policed: false,
            answers: VecDeque::new(),
            own: Default::default(),
        }
    }
}

impl Default for Exchange {
    fn default() -> Self {
        Self::new()
    }
}

/// Both sides of HTTP mode for one connection.
#[derive(Debug)]
pub struct Http {
    /// Client → backend.
    pub request: RequestRewriter,
    /// Backend → client.
    pub response: ResponseTracker,
    /// Shared state.
    pub exchange: Exchange,
    /// `--http-request-timeout` and `--http-keepalive-timeout`.
    pub timeouts: Timeouts,
}

/// HTTP mode's timeouts.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// Time for a whole request head from its first byte.
    pub request: Duration,
    /// Longest wait for the next request once nothing is outstanding.
    pub keepalive: Duration,
    /// Longest time without progress while the client owes bytes of a request body or
    /// does not take the answer.
    pub stall: Duration,
}

/// Which of HTTP mode's timeouts ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// A request head took too long (answered 408).
    Request,
    /// No next request came (closed without a word).
    KeepAlive,
    /// Nothing moved for `--http-stall-timeout` while the client owed a request body or
    /// left the answer untaken (408 when no answer had begun, else closed).
    Stall,
}

/// [`Http::at_rest`], from its parts (the relay's filters hold them apart).
pub fn at_rest(req: &RequestRewriter, resp: &ResponseTracker, ex: &Exchange) -> bool {
    req.between_requests()
        && ex.pending.is_empty()
        && ex.upgrade == Upgrade::None
        && resp.between_messages()
}

/// [`Http::may_send_again`], from its parts.
pub fn may_send_again(req: &RequestRewriter, resp: &ResponseTracker, ex: &Exchange) -> bool {
    req.may_send_again()
        && ex.pending.len() == 1
        && ex.upgrade == Upgrade::None
        && resp.between_messages()
}

impl Http {
    /// HTTP mode for a client at `client_ip`, refusing heads over `max_head` bytes; with
    /// `cert_header`, that header carries the client certificate's subject.
    pub fn new(
        client_ip: std::net::IpAddr,
        max_head: usize,
        cert_header: Option<(&str, Option<&str>)>,
        timeouts: Timeouts,
    ) -> Self {
        Http {
            request: RequestRewriter::with_client_cert(client_ip, max_head, cert_header),
            response: ResponseTracker::new(max_head.max(16 * 1024)),
            exchange: Exchange::new(),
            timeouts,
        }
    }

    /// The edge policy applies to this connection's requests: `routing`'s levels, the
    /// frontend's own (`frontend`), and `connection`, where a request no route takes goes.
    pub fn police(
        &mut self,
        routing: std::sync::Arc<crate::edge::route::Routing>,
        frontend: Option<std::sync::Arc<crate::config::policy::Policy>>,
        connection: crate::edge::route::Target,
    ) {
        let own = crate::gateway::policy::Effective::of(&routing, connection, frontend.as_deref());
        self.exchange.own = crate::gateway::policy::AnswerRules::of(&own);
        self.exchange.policed = true;
        self.request.police(request::Police {
            routing,
            frontend,
            connection,
        });
    }

    /// Between requests: nothing owed either way, no head begun, no upgrade. A backend
    /// that closes now can be replaced at the client's next request.
    pub fn at_rest(&self) -> bool {
        at_rest(&self.request, &self.response, &self.exchange)
    }

    /// The backend ended without a byte of the one answer owed, to a request that may go
    /// again: it goes to a new connection instead of failing the client.
    pub fn may_send_again(&self) -> bool {
        may_send_again(&self.request, &self.response, &self.exchange)
    }

    /// When one of the timeouts runs out, given the last time a byte moved. `untaken`:
    /// answer bytes wait for the client to take them; `unsent`: request bytes wait for the
    /// backend (then a body that does not move is the backend's doing, not a stall).
    pub fn deadline(
        &self,
        last_active: Instant,
        untaken: bool,
        unsent: bool,
    ) -> Option<(Instant, Expired)> {
        let stall = (last_active + self.timeouts.stall, Expired::Stall);
        match self.request.waiting(&self.exchange) {
            Waiting::Head(started) => Some((started + self.timeouts.request, Expired::Request)),
            // The answer's end is still on its way: not idle yet.
            _ if untaken => Some(stall),
            Waiting::NextRequest => {
                Some((last_active + self.timeouts.keepalive, Expired::KeepAlive))
            }
            Waiting::Body if !unsent => Some(stall),
            Waiting::Body | Waiting::Other => None,
        }
    }

    /// What a stalled exchange's client is told: 408 when no answer is under way and one
    /// is owed, else nothing (an answer cut in the middle is told by the close).
    pub fn stall_answer(&self) -> Option<&'static [u8]> {
        (!self.exchange.pending.is_empty() && self.response.between_messages())
            .then_some(REQUEST_TIMEOUT)
    }
}

/// The answer to a request whose body is over its limit (`--max-body-bytes`).
pub const PAYLOAD_TOO_LARGE: &[u8] =
    b"HTTP/1.1 413 Content Too Large\r\nContent-Type: text/plain\r\nContent-Length: 18\r\nConnection: close\r\n\r\nContent Too Large\n";

/// The answer to a refused request.
pub const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 12\r\nConnection: close\r\n\r\nBad Request\n";

/// The answer to a request whose body has a transfer coding other than chunked.
pub const NOT_IMPLEMENTED: &[u8] =
    b"HTTP/1.1 501 Not Implemented\r\nContent-Type: text/plain\r\nContent-Length: 16\r\nConnection: close\r\n\r\nNot Implemented\n";

/// The answer to a request head that took longer than `--http-request-timeout`.
pub const REQUEST_TIMEOUT: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain\r\nContent-Length: 16\r\nConnection: close\r\n\r\nRequest Timeout\n";

/// The answer to a request for a backend whose every server is in maintenance.
pub const MAINTENANCE: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 20\r\nRetry-After: 60\r\nConnection: close\r\n\r\nService Unavailable\n";

/// The answer when no backend could take the request in time.
pub const SERVICE_UNAVAILABLE: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 20\r\nConnection: close\r\n\r\nService Unavailable\n";

#[cfg(test)]
mod tests {
    /// The HTTP/1.1 maintenance answer's `Retry-After` is the core's.
    #[test]
    fn the_maintenance_answer_says_the_same_wait_as_the_core() {
        let line = format!(
            "\r\nRetry-After: {}\r\n",
            crate::backend::MAINTENANCE_RETRY_SECS
        );
        let answer = String::from_utf8_lossy(super::MAINTENANCE);
        assert!(answer.contains(&line), "{answer}");
    }
}
