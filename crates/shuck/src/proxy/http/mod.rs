//! HTTP mode (`--http`, stud-http's job): every request of a keep-alive connection gets
//! `X-Forwarded-For` and `X-Forwarded-Proto`, after the client's own copies (and
//! `Forwarded`) are removed. Requests are parsed with httparse; bodies stream through
//! without being buffered, their framing followed so that the next request is found.
//! Responses are followed too, only to learn when a `101 Switching Protocols` turns the
//! connection into a plain tunnel (WebSocket): until the backend has answered an upgrade
//! request, nothing more from the client is parsed as HTTP or passed on.

pub mod chunked;
pub mod head;
pub mod request;
pub mod response;

use std::collections::VecDeque;

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
}

impl Http {
    /// HTTP mode for a client at `client_ip`, refusing heads over `max_head` bytes; with
    /// `cert_header`, that header carries the client certificate's subject.
    pub fn new(
        client_ip: std::net::IpAddr,
        max_head: usize,
        cert_header: Option<(&str, Option<&str>)>,
    ) -> Self {
        Http {
            request: RequestRewriter::with_client_cert(client_ip, max_head, cert_header),
            response: ResponseTracker::new(max_head.max(16 * 1024)),
            exchange: Exchange::new(),
        }
    }
}

/// The answer to a refused request.
pub const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 12\r\nConnection: close\r\n\r\nBad Request\n";

/// The answer when no backend could take the request in time.
pub const SERVICE_UNAVAILABLE: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 20\r\nConnection: close\r\n\r\nService Unavailable\n";
