//! Client → backend in HTTP mode: parse each request head, refuse what is malformed or
//! smuggling-prone, rewrite the forwarding headers, and pass bodies through. Here the
//! stream's framing (heads, bodies, held bytes); one head's judgement and rewrite in
//! `rewrite.rs`.

use std::net::IpAddr;

use super::chunked::Chunked;
use super::head::{HeadBuf, Pushed};
use super::{Exchange, Upgrade};
use crate::backend::balance::Key;
use crate::edge::route::BackendId;
use crate::gateway::choose::Chooser;
use crate::gateway::fields::filter_trailer;
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
    /// Its route answers it a redirect ([`RequestRewriter::redirect`]), once the answers
    /// owed are out.
    Redirect,
}

/// What the edge policy needs to resolve a request's part (`gateway/policy/`).
#[derive(Debug)]
pub struct Police {
    /// The levels.
    pub routing: std::sync::Arc<crate::edge::route::Routing>,
    /// The frontend's own level.
    pub frontend: Option<std::sync::Arc<crate::config::policy::Policy>>,
    /// Where a request no route takes goes.
    pub connection: crate::edge::route::Target,
}

/// The request side of HTTP mode.
#[derive(Debug)]
pub struct RequestRewriter {
    state: State,
    /// A head being received.
    head: HeadBuf,
    /// Client bytes held while an upgrade is pending.
    held: Vec<u8>,
    /// `held` is a head refused as malformed (for the access log's line).
    head_refused: bool,
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
    /// The edge policy, when some level gives one.
    police: Option<Box<Police>>,
    /// `--trusted-proxies`, when the client is one: its requests name their clients.
    behind: Option<Box<crate::gateway::real_ip::Behind>>,
    /// The redirect a held request's route answers: its code and `Location`.
    redirect: Option<(u16, Box<str>)>,
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
            head_refused: false,
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
            police: None,
            behind: None,
            redirect: None,
        }
    }

    /// Each request under the edge policy `police` resolves.
    pub fn police(&mut self, police: Police) {
        self.police = Some(Box::new(police));
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

    /// The client is a trusted proxy (`--trusted-proxies`): each request's client is the one
    /// it names, judged by `behind` (its bans, rules and request rate, in place of
    /// [`Self::limit_requests`]'s), routed and forwarded as that client.
    pub fn behind(&mut self, behind: crate::gateway::real_ip::Behind) {
        self.behind = Some(Box::new(behind));
    }

    /// Holds each request to `limit` (`--client-request-rate`).
    pub fn limit_requests(
        &mut self,
        clients: std::sync::Arc<crate::clients::Clients>,
        limit: crate::clients::RequestLimit,
    ) {
        self.limit = Some((clients, limit));
    }

    /// The redirect the held request's route answers ([`Hold::Redirect`]): its code and
    /// `Location`.
    pub fn redirect(&self) -> Option<(u16, &str)> {
        self.redirect.as_ref().map(|(c, l)| (*c, &**l))
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

    /// The head refused as malformed, when the refusal was of a head (not of a body under
    /// way, whose request has its own line already).
    pub fn refused_head(&self) -> Option<&[u8]> {
        self.head_refused.then_some(&self.held[..])
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
                            if let Err(e) = self.start_message(&head, out, ex) {
                                // Kept for the access log's line, as nginx logs a refused
                                // request's line (fail2ban's filters read it).
                                self.held.clear();
                                self.held.extend_from_slice(&head);
                                self.head_refused = true;
                                return Err(e);
                            }
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
}

mod rewrite;
#[cfg(test)]
mod tests;
