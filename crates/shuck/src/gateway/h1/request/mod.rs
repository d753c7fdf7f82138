//! Client → backend in HTTP mode: parse each request head, refuse what is malformed or
//! smuggling-prone, rewrite the forwarding headers, and pass bodies through.

use std::net::IpAddr;

use super::chunked::Chunked;
use super::head::{HeadBuf, Pushed};
use super::{Exchange, Pending, Upgrade, MAX_PIPELINE};
use crate::backend::balance::Key;
use crate::edge::route::BackendId;
use crate::gateway::choose::{path_of, Choice, Chooser};
use crate::gateway::fields::{
    check_host, content_length, filter_trailer, is_forwarding, is_request_id,
};
pub use crate::gateway::fields::{Forwarding, Rejected};

#[derive(Debug)]
enum State {
    Head,
    Body(u64),
    Chunked(Chunked),
    /// An upgrade request was sent; client bytes wait in `held` for the backend's answer.
    AwaitUpgrade,
    Tunnel,
    /// A request for another backend than the one connected, or misdirected: its head
    /// and what follows wait in `held` until the answers owed are out ([`Hold`]).
    Held(Hold),
}

/// Why a request waits before it is passed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// It goes to this other backend: once the answers owed are out, the connection
    /// moves there ([`RequestRewriter::moved`]).
    Switch(BackendId),
    /// Its name is not the connection's: answered 421 once the answers owed are out.
    Misdirected,
    /// The client is over its limits (429) or a route's rules (403): answered so once the
    /// answers owed are out.
    Refused(crate::clients::Refused),
}

/// The request side of HTTP mode.
#[derive(Debug)]
pub struct RequestRewriter {
    state: State,
    /// A head being received.
    head: HeadBuf,
    /// Client bytes held while an upgrade is pending.
    held: Vec<u8>,
    /// The injected headers, made once per connection, and another header the client may
    /// not set (`--client-cert-header`).
    fwd: Forwarding,
    /// When the head being received got its first byte (`--http-request-timeout`).
    head_started: Option<tokio::time::Instant>,
    /// A chunked body's trailer section, held until whole to drop forwarding fields.
    trailer: Vec<u8>,
    /// Requests passed on.
    requests: u64,
    /// With routes: each request's backend.
    choose: Option<Chooser>,
    /// The backend the requests passed on went to.
    current: Option<BackendId>,
    /// `--client-request-rate`: what each request is held to.
    limit: Option<(
        std::sync::Arc<crate::clients::Clients>,
        crate::clients::RequestLimit,
    )>,
    /// The server they went to, and its backend: a request that finds it out of
    /// rotation (drained, in maintenance, down by its checks) moves to another.
    server: Option<(std::sync::Arc<crate::backend::Server>, BackendId)>,
    /// The last request asked for the connection to end after its answer
    /// (`Connection: close`, or HTTP/1.0 without `keep-alive`).
    closing: bool,
    /// The last request's head as sent, while it may go again: idempotent, without a
    /// body (RFC 9110 §9.2.2). Its buffer is the connection's, kept between requests.
    retry_head: Vec<u8>,
    /// `retry_head` holds the last request and it was not sent again yet.
    retryable: bool,
    /// `--request-id-header`.
    request_id: Option<std::sync::Arc<crate::access::request_id::Spec>>,
    /// A backend whose server a request chooses (`balance = hash` by path, header or
    /// cookie; a sticky cookie): the routing that names it, and the key that chose the
    /// server now connected. A request with another key goes through the choice again.
    rekey: Option<(std::sync::Arc<crate::edge::route::Routing>, Key)>,
    /// The client, whose address a key may be.
    ip: IpAddr,
}

/// What the request side is waiting for, for HTTP mode's timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// The rest of a head that began at this instant.
    Head(tokio::time::Instant),
    /// The next request, with no response outstanding (keep-alive).
    NextRequest,
    /// The rest of a request body (`--http-stall-timeout`).
    Body,
    /// Neither (a body, a response, a tunnel).
    Other,
}

/// Most bytes held while an upgrade is pending.
const MAX_HELD: usize = 64 * 1024;

impl RequestRewriter {
    /// A rewriter for a client at `ip` (tests; connections come through
    /// [`Self::with_client_cert`]).
    #[cfg(test)]
    pub(crate) fn new(ip: IpAddr, max_head: usize) -> Self {
        Self::with_client_cert(ip, max_head, None)
    }

    /// As [`Self::new`], also replacing header `name` with the client certificate's
    /// subject (or removing it when the client sent no certificate).
    pub fn with_client_cert(
        ip: IpAddr,
        max_head: usize,
        cert_header: Option<(&str, Option<&str>)>,
    ) -> Self {
        RequestRewriter {
            state: State::Head,
            head: HeadBuf::new(max_head),
            held: Vec::new(),
            fwd: Forwarding::new(ip, cert_header),
            head_started: None,
            trailer: Vec::new(),
            requests: 0,
            choose: None,
            current: None,
            limit: None,
            server: None,
            closing: false,
            retry_head: Vec::new(),
            retryable: false,
            request_id: None,
            rekey: None,
            ip,
        }
    }

    /// Each request gets an ID in `spec`'s header (`--request-id-header`).
    pub fn request_ids(&mut self, spec: std::sync::Arc<crate::access::request_id::Spec>) {
        self.request_id = Some(spec);
    }

    /// The forwarding headers it writes, with `--request-id-header`'s: the gateway core
    /// judges the requests it takes from this rewriter (`h1/front/`) with the same.
    pub fn forwarding(&self) -> Forwarding {
        self.fwd.clone().with_request_id(self.request_id.clone())
    }

    /// The requests now go to `server` of backend `id`.
    pub fn serving(&mut self, server: std::sync::Arc<crate::backend::Server>, id: BackendId) {
        self.server = Some((server, id));
    }

    /// The server now connected was chosen by `key`, from a request (`Some`: the backend's
    /// balancing reads requests): a request with another key is held for a new choice.
    pub fn chosen_by(&mut self, key: Option<(std::sync::Arc<crate::edge::route::Routing>, Key)>) {
        self.rekey = key;
    }

    /// Routes each request by its `Host` and path (from the first on).
    pub fn route(&mut self, chooser: Chooser) {
        self.choose = Some(chooser);
    }

    /// Holds each request to `limit` (`--client-request-rate`).
    pub fn limit_requests(
        &mut self,
        clients: std::sync::Arc<crate::clients::Clients>,
        limit: crate::clients::RequestLimit,
    ) {
        self.limit = Some((clients, limit));
    }

    /// The backend of the requests passed on, once routes chose one.
    pub fn backend(&self) -> Option<BackendId> {
        self.current
    }

    /// A request waiting for the answers owed before it, and why.
    /// The head of a request held (for another backend, or misdirected).
    pub fn held_head(&self) -> &[u8] {
        &self.held
    }

    /// What is held, if anything.
    pub fn held(&self) -> Option<Hold> {
        match self.state {
            State::Held(h) => Some(h),
            _ => None,
        }
    }

    /// The connection now goes to the backend the held request chose: that request and
    /// what followed it are rewritten into `out`.
    pub fn moved(&mut self, out: &mut Vec<u8>, ex: &mut Exchange) -> Result<(), Rejected> {
        if let State::Held(Hold::Switch(to)) = self.state {
            self.current = Some(to);
            self.state = State::Head;
            let held = std::mem::take(&mut self.held);
            self.feed(&held, out, ex)?;
        }
        Ok(())
    }

    /// The last request was sent whole and may go again (idempotent, no body, not sent
    /// again already), nothing of the next one begun.
    pub fn may_send_again(&self) -> bool {
        self.retryable && matches!(self.state, State::Head) && self.head_started.is_none()
    }

    /// The last request's head, to send again on a new backend connection (once).
    pub fn send_again(&mut self) -> Option<Vec<u8>> {
        std::mem::take(&mut self.retryable).then(|| self.retry_head.clone())
    }

    /// No request under way on the client's side (none begun, none held) and the last
    /// one did not ask to close.
    pub fn between_requests(&self) -> bool {
        matches!(self.state, State::Head) && self.head_started.is_none() && !self.closing
    }

    /// Requests passed on so far.
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// What the client side is waiting for now.
    pub fn waiting(&self, ex: &Exchange) -> Waiting {
        match (&self.state, self.head_started) {
            (State::Head, Some(t)) => Waiting::Head(t),
            (State::Head, None) if ex.pending.is_empty() && ex.upgrade == Upgrade::None => {
                Waiting::NextRequest
            }
            (State::Body(_) | State::Chunked(_), _) => Waiting::Body,
            _ => Waiting::Other,
        }
    }

    /// True when nothing of the exchange needs parsing any more.
    #[cfg(test)]
    pub(crate) fn is_tunnel(&self) -> bool {
        matches!(self.state, State::Tunnel)
    }

    /// True while client bytes are held waiting for the answer to an upgrade.
    pub fn is_holding(&self) -> bool {
        matches!(self.state, State::AwaitUpgrade)
    }

    /// Consumes all of `input`, appending what goes to the backend to `out`. Call with an
    /// empty `input` after the exchange's upgrade state changes, to release held bytes.
    pub fn feed(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        ex: &mut Exchange,
    ) -> Result<(), Rejected> {
        if let State::Held(_) = self.state {
            if self.held.len() + input.len() > MAX_HELD {
                return Err(Rejected(
                    "too much data sent ahead of a request for another backend",
                ));
            }
            self.held.extend_from_slice(input);
            return Ok(());
        }
        if let State::AwaitUpgrade = self.state {
            if self.held.len() + input.len() > MAX_HELD {
                return Err(Rejected("too much data before the upgrade was answered"));
            }
            self.held.extend_from_slice(input);
            match ex.upgrade {
                Upgrade::Awaiting if ex.lost => {
                    return Err(Rejected("backend response not understood"))
                }
                Upgrade::Awaiting => return Ok(()),
                Upgrade::Tunnel => self.state = State::Tunnel,
                Upgrade::None => self.state = State::Head,
            }
            let held = std::mem::take(&mut self.held);
            return self.feed(&held, out, ex);
        }
        let mut i = 0;
        while i < input.len() {
            match &mut self.state {
                State::Tunnel => {
                    out.extend_from_slice(&input[i..]);
                    return Ok(());
                }
                State::AwaitUpgrade | State::Held(_) => {
                    return self.feed(&input[i..], out, ex);
                }
                State::Body(left) => {
                    let take = (*left).min((input.len() - i) as u64) as usize;
                    out.extend_from_slice(&input[i..i + take]);
                    i += take;
                    *left -= take as u64;
                    if let Some(l) = &ex.log {
                        l.sent(take);
                    }
                    if *left == 0 {
                        self.after_message(ex);
                    }
                }
                State::Chunked(c) => {
                    let in_trailer = c.in_trailer();
                    let n = c.advance(&input[i..]).map_err(|e| Rejected(e.0))?;
                    if in_trailer {
                        self.trailer.extend_from_slice(&input[i..i + n]);
                    } else {
                        out.extend_from_slice(&input[i..i + n]);
                    }
                    if let Some(l) = &ex.log {
                        l.sent(n);
                    }
                    i += n;
                    if c.is_done() {
                        let trailer = std::mem::take(&mut self.trailer);
                        filter_trailer(&trailer, self.fwd.strip.as_deref(), out)?;
                        self.after_message(ex);
                    }
                }
                State::Head => {
                    // Empty lines before a request line are allowed (RFC 9112 §2.2).
                    if self.head.is_empty() && (input[i] == b'\r' || input[i] == b'\n') {
                        i += 1;
                        continue;
                    }
                    if self.head_started.is_none() {
                        self.head_started = Some(tokio::time::Instant::now());
                    }
                    match self.head.push(&input[i..]) {
                        Pushed::Complete { used, head } => {
                            i += used;
                            self.head_started = None;
                            self.start_message(&head, out, ex)?;
                        }
                        Pushed::TooLarge => {
                            return Err(Rejected("request head too large (--max-header-bytes)"));
                        }
                        Pushed::BareLineEnd => {
                            return Err(Rejected(
                                "a line of the request head ends in a bare LF or CR",
                            ));
                        }
                        Pushed::Partial => return Ok(()),
                    }
                }
            }
        }
        Ok(())
    }

    /// After a message's body: the next head, or wait for the upgrade's answer.
    fn after_message(&mut self, ex: &Exchange) {
        self.state = if ex.upgrade == Upgrade::Awaiting {
            State::AwaitUpgrade
        } else {
            State::Head
        };
    }

    fn start_message(
        &mut self,
        head: &[u8],
        out: &mut Vec<u8>,
        ex: &mut Exchange,
    ) -> Result<(), Rejected> {
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(head) {
            Ok(httparse::Status::Complete(n)) if n == head.len() => {}
            Ok(_) => return Err(Rejected("incomplete request head")),
            Err(httparse::Error::TooManyHeaders) => return Err(Rejected("too many headers")),
            Err(_) => return Err(Rejected("malformed request head")),
        }
        let (Some(method), Some(path), Some(version)) = (req.method, req.path, req.version) else {
            return Err(Rejected("malformed request line"));
        };
        if method.eq_ignore_ascii_case("CONNECT") {
            return Err(Rejected("CONNECT is not supported"));
        }
        if ex.pending.len() >= MAX_PIPELINE {
            return Err(Rejected("too many pipelined requests"));
        }
        let host = check_host(path, version, req.headers)?;
        if let Some((clients, limit)) = &self.limit {
            if let Err(r) = clients.request(limit) {
                self.state = State::Held(Hold::Refused(r));
                self.held.clear();
                self.held.extend_from_slice(head);
                return Ok(());
            }
        }
        // Its server was taken out of rotation since the last request: the next one that
        // is up takes this request (HAProxy's drain: no new request, the last answers end).
        if let Some((_, id)) = self.server.as_ref().filter(|(s, _)| s.is_out()) {
            self.state = State::Held(Hold::Switch(*id));
            self.held.clear();
            self.held.extend_from_slice(head);
            return Ok(());
        }
        if let Some(c) = &self.choose {
            // A Host that passed check_host is ASCII.
            let host = host.and_then(|h| std::str::from_utf8(h).ok());
            let hold = match c.choose(host, path_of(path)) {
                Choice::Misdirected => Some(Hold::Misdirected),
                Choice::Forbidden => Some(Hold::Refused(crate::clients::Refused {
                    reason: crate::clients::Reason::Deny,
                    retry_ms: None,
                    first: false,
                })),
                Choice::Backend(b) if self.current.is_none_or(|c| c == b) => {
                    self.current = Some(b);
                    None
                }
                Choice::Backend(b) => Some(Hold::Switch(b)),
            };
            if let Some(h) = hold {
                self.state = State::Held(h);
                self.held.clear();
                self.held.extend_from_slice(head);
                return Ok(());
            }
        }
        if let Some(id) = self.moves_server(path, req.headers) {
            self.state = State::Held(Hold::Switch(id));
            self.held.clear();
            self.held.extend_from_slice(head);
            return Ok(());
        }
        let mut length: Option<u64> = None;
        let mut chunked = false;
        let mut te_seen = false;
        let mut upgrade_header = false;
        let mut connection_upgrade = false;
        let mut close = version == 0;
        let mut h2c_dropped = false;
        out.reserve(head.len() + self.fwd.lines.len() + 16);
        let head_at = out.len();
        out.extend_from_slice(method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(path.as_bytes());
        out.extend_from_slice(if version == 0 {
            b" HTTP/1.0\r\n"
        } else {
            b" HTTP/1.1\r\n"
        });
        let strip = self.fwd.strip.as_deref();
        let id_spec = self.request_id.as_deref();
        let mut given_id = None;
        for h in req.headers.iter() {
            let name = h.name;
            if is_forwarding(name.as_bytes(), strip) {
                continue; // the client's own claims: never passed on
            }
            if is_request_id(name.as_bytes(), id_spec) {
                given_id = given_id.or(Some(h.value)); // the first; written below
                continue;
            }
            if name.eq_ignore_ascii_case("connection") {
                // A nomination of a forwarding header (or of the request's ID) would make
                // the next hop strip ours.
                let kept: Vec<&[u8]> = h
                    .value
                    .split(|&b| b == b',')
                    .map(<[u8]>::trim_ascii)
                    .filter(|t| {
                        !t.is_empty() && !is_forwarding(t, strip) && !is_request_id(t, id_spec)
                    })
                    .collect();
                connection_upgrade |= kept.iter().any(|t| t.eq_ignore_ascii_case(b"upgrade"));
                for t in &kept {
                    if t.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if t.eq_ignore_ascii_case(b"keep-alive") && version == 0 {
                        close = false;
                    }
                }
                if kept.is_empty() {
                    continue;
                }
                out.extend_from_slice(b"Connection: ");
                out.extend_from_slice(&kept.join(&b", "[..]));
                out.extend_from_slice(b"\r\n");
                continue;
            }
            if name.eq_ignore_ascii_case("content-length") {
                let n =
                    content_length(h.value.trim_ascii()).ok_or(Rejected("bad Content-Length"))?;
                match length {
                    Some(m) if m != n => {
                        return Err(Rejected("conflicting Content-Length headers"))
                    }
                    Some(_) => continue, // an identical duplicate: pass one
                    None => length = Some(n),
                }
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                te_seen = true;
                let v =
                    std::str::from_utf8(h.value).map_err(|_| Rejected("bad Transfer-Encoding"))?;
                let last = v.rsplit(',').next().unwrap_or("").trim();
                // Only the last coding of the last header decides; it must be chunked.
                chunked = last.eq_ignore_ascii_case("chunked");
            } else if name.eq_ignore_ascii_case("upgrade") {
                // h2c would make the rest of the connection HTTP/2 that no rewriter reads
                // (forged forwarding fields would reach the backend): its token is dropped.
                let tokens = h.value.split(|&b| b == b',').map(<[u8]>::trim_ascii);
                let kept: Vec<&[u8]> = tokens
                    .filter(|t| !t.is_empty())
                    .filter(|t| {
                        let h2c = is_h2c(t);
                        h2c_dropped |= h2c;
                        !h2c
                    })
                    .collect();
                if kept.is_empty() {
                    continue;
                }
                upgrade_header = true;
                out.extend_from_slice(b"Upgrade: ");
                out.extend_from_slice(&kept.join(&b", "[..]));
                out.extend_from_slice(b"\r\n");
                continue;
            } else if name.eq_ignore_ascii_case("http2-settings") {
                continue; // h2c's own field, meaningless once its token is dropped
            }
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(h.value);
            out.extend_from_slice(b"\r\n");
        }
        if h2c_dropped && !upgrade_header {
            return Err(Rejected("Upgrade: h2c is not passed on"));
        }
        if te_seen && length.is_some() {
            return Err(Rejected("both Content-Length and Transfer-Encoding"));
        }
        if te_seen && (!chunked || version == 0) {
            return Err(Rejected("unsupported Transfer-Encoding"));
        }
        let id = self.request_id.as_ref().map(|spec| {
            let id = crate::access::request_id::RequestId::of(given_id.into_iter());
            id.write_line(&spec.name, out);
            if spec.respond {
                ex.ids.push_back(id);
            }
            id
        });
        out.extend_from_slice(self.fwd.lines.as_bytes());

        self.requests += 1;
        self.closing = close;
        let upgrade = upgrade_header && connection_upgrade && version == 1;
        if let Some(l) = &ex.log {
            let mut asked = super::log::Asked::of(method, path, req.headers);
            if let Some(id) = &id {
                asked.request_id = id.as_bytes();
            }
            l.asked(&asked);
        }
        ex.pending.push_back(if upgrade {
            Pending::Upgrade
        } else if method.eq_ignore_ascii_case("HEAD") {
            Pending::Head
        } else {
            Pending::Normal
        });
        if upgrade {
            ex.upgrade = Upgrade::Awaiting;
        }
        let bodiless = !chunked && length.unwrap_or(0) == 0;
        self.retryable = bodiless && !upgrade && idempotent(method);
        if self.retryable {
            self.retry_head.clear();
            self.retry_head.extend_from_slice(&out[head_at..]);
        }
        self.state = if chunked {
            State::Chunked(Chunked::new())
        } else if let Some(n) = length.filter(|&n| n > 0) {
            State::Body(n)
        } else if upgrade {
            State::AwaitUpgrade
        } else {
            State::Head
        };
        Ok(())
    }
}

impl RequestRewriter {
    /// The backend whose server a request for `path` with `fields` chooses anew, when it is
    /// not the one connected: its sticky cookie names another, or its key is not the one
    /// that chose this one (HAProxy re-balances each request under a deterministic method
    /// too).
    fn moves_server(&self, path: &str, fields: &[httparse::Header<'_>]) -> Option<BackendId> {
        let (Some((routing, then)), Some((server, id))) = (&self.rekey, &self.server) else {
            return None;
        };
        let pairs: Vec<(&[u8], &[u8])> = fields
            .iter()
            .map(|h| (h.name.as_bytes(), h.value))
            .collect();
        let now = routing
            .backend(*id)
            .key_of_request(self.ip, path.as_bytes(), &pairs);
        let moves = match now.sticky {
            Some(s) => s != crate::backend::balance::server_id(server.name()),
            None => now.hash != then.hash,
        };
        moves.then_some(*id)
    }
}

/// An `Upgrade` token naming cleartext HTTP/2 (`h2c`, with or without a version).
fn is_h2c(token: &[u8]) -> bool {
    let name = token.split(|&b| b == b'/').next().unwrap_or(token);
    name.eq_ignore_ascii_case(b"h2c")
}

#[cfg(test)]
mod tests;

/// Methods a request may be sent again with (RFC 9110 §9.2.2; methods are case-sensitive).
fn idempotent(method: &str) -> bool {
    matches!(
        method,
        "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
    )
}
