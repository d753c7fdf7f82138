//! One request head accepted: judged (framing, smuggling-prone fields, Host), held when it
//! goes elsewhere (another backend, 421, a limit, another server by its balancing key), and
//! rewritten for the backend (the client's forwarding claims out, ours in).

use super::{Hold, RequestRewriter, State};
use crate::edge::route::BackendId;
use crate::gateway::choose::{path_of, Choice, ENCODED_SLASH};
use crate::gateway::fields::{
    check_host, content_length, is_forwarding, is_request_id, Rejected, UNSUPPORTED_CODING,
};
use crate::gateway::h1::chunked::Chunked;
use crate::gateway::h1::{Exchange, Pending, Upgrade, MAX_PIPELINE};
use crate::gateway::policy::body::{Budget, TOO_LARGE};
use crate::gateway::policy::{AnswerRules, Effective, RequestRules};
use crate::gateway::request::HeadOut;
use crate::gateway::route_action::{act, Acted};

impl RequestRewriter {
    /// Judges, routes and rewrites one whole head into `out`.
    pub(super) fn start_message(
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
        // --trusted-proxies: the client a trusted peer names is judged as a connection's
        // client is (bans, the frontend's rules, its request rate), in the peer's stead.
        let real = self.behind.as_ref().and_then(|b| {
            let fields: Vec<(&[u8], &[u8])> = (req.headers.iter())
                .map(|h| (h.name.as_bytes(), h.value))
                .collect();
            b.client(&fields).map(|ip| (ip, b.admit(ip)))
        });
        let judged = match &real {
            Some((_, verdict)) => *verdict,
            None => match &self.limit {
                Some((clients, limit)) => clients.request(limit),
                None => Ok(()),
            },
        };
        if let Err(r) = judged {
            self.state = State::Held(Hold::Refused(r));
            self.held.clear();
            self.held.extend_from_slice(head);
            return Ok(());
        }
        let real = real.map(|(ip, _)| ip);
        // Its server was taken out of rotation since the last request: the next one that
        // is up takes this request (HAProxy's drain: no new request, the last answers end).
        if let Some((_, id)) = self.server.as_ref().filter(|(s, _)| s.is_out()) {
            self.state = State::Held(Hold::Switch(*id));
            self.held.clear();
            self.held.extend_from_slice(head);
            return Ok(());
        }
        let mut routed = None;
        let mut rewritten = None;
        if let Some(c) = &self.choose {
            // A Host that passed check_host is ASCII.
            let host = host.and_then(|h| std::str::from_utf8(h).ok());
            let choice = match real {
                Some(ip) => c.choose_for(host, path_of(path), ip),
                None => c.choose(host, path_of(path)),
            };
            if let Choice::Backend(t) = choice {
                routed = Some(t);
                match act(c.routing(), t, host, path_of(path)) {
                    Acted::Pass => {}
                    Acted::Rewritten(p) => rewritten = Some(p),
                    Acted::Redirect(code, location) => {
                        self.redirect = Some((code, location.into()));
                        // The connection's last answer is its route's (as the core's
                        // redirects over HTTP/2 and HTTP/3): its answer rules cover it.
                        if let Some(p) = self.police.as_deref() {
                            let route = Effective::of(&p.routing, t, p.frontend.as_deref());
                            ex.own = AnswerRules::of(&route);
                        }
                        self.state = State::Held(Hold::Redirect);
                        self.held.clear();
                        self.held.extend_from_slice(head);
                        return Ok(());
                    }
                }
            }
            let hold = match choice {
                Choice::Misdirected => Some(Hold::Misdirected),
                Choice::Forbidden => Some(Hold::Refused(crate::clients::Refused {
                    reason: crate::clients::Reason::Deny,
                    retry_ms: None,
                    first: false,
                })),
                Choice::Backend(t) if self.current.is_none_or(|c| c == t.backend) => {
                    self.current = Some(t.backend);
                    None
                }
                Choice::Backend(t) => Some(Hold::Switch(t.backend)),
                Choice::EncodedSlash => return Err(Rejected(ENCODED_SLASH)),
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
        // The edge policy's request phase: what applies to where it goes.
        let policy = self.police.as_deref().map_or_else(Effective::default, |p| {
            Effective::of(
                &p.routing,
                routed.unwrap_or(p.connection),
                p.frontend.as_deref(),
            )
        });
        let mut rules = RequestRules::new(policy.request);
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
        out.extend_from_slice(rewritten.as_deref().unwrap_or(path).as_bytes());
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
                // chunked, once, is the only coding shuck reads: anything else before it
                // (`gzip, chunked`) would reach the backend decoded of the chunks alone,
                // its coding lost on the way to an HTTP/2 backend.
                for coding in v.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                    if !coding.eq_ignore_ascii_case("chunked") {
                        return Err(Rejected(UNSUPPORTED_CODING));
                    }
                    if chunked {
                        return Err(Rejected("chunked twice in Transfer-Encoding"));
                    }
                    chunked = true;
                }
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
            } else if !rules.is_empty() && !rules.keeps(name.as_bytes()) {
                continue; // a rule's own value, written below
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
        let budget = Budget::new(policy.max_body);
        if length.is_some_and(|n| budget.refuses(n)) {
            return Err(Rejected(TOO_LARGE));
        }
        let id = self.request_id.as_ref().map(|spec| {
            let trusted = spec.trusts(self.ip);
            let id = crate::access::request_id::RequestId::of(trusted, given_id.into_iter());
            id.write_line(&spec.name, out);
            if spec.respond {
                ex.ids.push_back(id);
            }
            id
        });
        rules.finish(|r| HeadOut::rule(out, r));
        match real {
            Some(ip) => out.extend_from_slice(self.fwd.for_client(ip).lines.as_bytes()),
            None => out.extend_from_slice(self.fwd.lines.as_bytes()),
        }
        if ex.policed {
            ex.answers.push_back(AnswerRules::of(&policy));
        }

        self.requests += 1;
        self.closing = close;
        let upgrade = upgrade_header && connection_upgrade && version == 1;
        if let Some(l) = &ex.log {
            let mut asked = crate::gateway::h1::log::Asked::of(method, path, req.headers);
            if let Some(id) = &id {
                asked.request_id = id.as_bytes();
            }
            asked.client = real;
            asked.rewritten = rewritten.as_deref().map(str::as_bytes);
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
            State::Chunked(Chunked::within(budget))
        } else if let Some(n) = length.filter(|&n| n > 0) {
            State::Body(n)
        } else if upgrade {
            State::AwaitUpgrade
        } else {
            State::Head
        };
        Ok(())
    }

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
            Some(s) => s != server.sticky_id(),
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

/// Methods a request may be sent again with (RFC 9110 §9.2.2; methods are case-sensitive).
fn idempotent(method: &str) -> bool {
    matches!(
        method,
        "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
    )
}
