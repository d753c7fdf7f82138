//! Backend → client in HTTP mode: responses pass through unchanged; their framing is
//! followed only to pair each with its request and to see an upgrade accepted (101). When
//! final answers' heads change (`--quic`'s `Alt-Svc`, the request's ID, a sticky cookie,
//! the edge policy's answer rules: `gateway/policy/`), each head is held until whole and
//! written anew ([`ResponseTracker::rewrite`]).

use super::chunked::Chunked;
use super::head::{HeadBuf, Pushed};
use super::{Exchange, Pending, Upgrade};

#[derive(Debug)]
enum State {
    Head,
    Body(u64),
    Chunked(Chunked),
    /// Read until the backend closes; or a tunnel after 101; or framing lost.
    Opaque,
}

/// The response side of HTTP mode.
#[derive(Debug)]
pub struct ResponseTracker {
    state: State,
    head: HeadBuf,
    /// `--quic`: the `Alt-Svc` line final answers get when they have none.
    announce: Option<bytes::Bytes>,
    /// The head just complete is a final answer that gets `extra` or `rules`.
    wants_line: bool,
    /// The edge policy's rules on the answer whose head just completed.
    rules: crate::gateway::policy::AnswerRules,
    /// `--request-id-response`: the header that carries each request's ID back.
    echo: Option<std::sync::Arc<crate::access::request_id::Spec>>,
    /// The lines the answer whose head just completed gets: `Alt-Svc`, its request's ID.
    extra: Vec<u8>,
    /// A sticky cookie's `Set-Cookie` line, for the answers of the backend connection that
    /// set it (the client's request did not name that server).
    cookie: Option<Vec<u8>>,
    /// The answer whose head just completed is replaced by this page (`error-page = "...
    /// intercept"`), and its body (`swallow`) goes nowhere.
    page: Option<crate::config::error_page::ErrorPage>,
    swallow: bool,
}

impl ResponseTracker {
    /// A tracker refusing to follow heads over `max_head` bytes.
    pub fn new(max_head: usize) -> Self {
        ResponseTracker {
            state: State::Head,
            head: HeadBuf::new(max_head),
            announce: None,
            wants_line: false,
            rules: Default::default(),
            echo: None,
            extra: Vec::new(),
            cookie: None,
            page: None,
            swallow: false,
        }
    }

    /// Final answers from now on carry `Set-Cookie: value` (`None`: none).
    pub fn set_cookie(&mut self, value: Option<&[u8]>) {
        self.cookie = value.map(|v| {
            let mut line = b"Set-Cookie: ".to_vec();
            line.extend_from_slice(v);
            line.extend_from_slice(b"\r\n");
            line
        });
    }

    /// Final answers without an `Alt-Svc` of their own get `line` (`Alt-Svc: ...\r\n`).
    pub fn announce(&mut self, line: bytes::Bytes) {
        self.announce = Some(line);
    }

    /// The line to add, when announcing.
    pub fn announced(&self) -> Option<&bytes::Bytes> {
        self.announce.as_ref()
    }

    /// Final answers carry their request's ID back in `spec`'s header.
    pub fn echo_ids(&mut self, spec: std::sync::Arc<crate::access::request_id::Spec>) {
        self.echo = Some(spec);
    }

    /// Whether answers' heads change (`Alt-Svc`, the request's ID, a sticky cookie, the
    /// edge policy): their bytes then go through [`rewrite`](Self::rewrite).
    pub fn rewrites(&self, ex: &Exchange) -> bool {
        self.announce.is_some() || self.echo.is_some() || self.cookie.is_some() || ex.policed
    }

    /// An answer framed by the backend's close (or no longer followed): its end is the
    /// connection's, not a cut.
    pub fn reads_to_close(&self) -> bool {
        matches!(self.state, State::Opaque)
    }

    /// True between two responses: nothing of one is on its way (a 408 may go out).
    pub fn between_messages(&self) -> bool {
        matches!(self.state, State::Head) && self.head.is_empty()
    }

    /// Observes bytes on their way to the client. `Err(at)`: the bytes from `at` on begin
    /// an answer no request asked for (every answer owed is complete): they must not reach
    /// the client, who would take them for the answer to its next request.
    pub fn observe(&mut self, input: &[u8], ex: &mut Exchange) -> Result<(), usize> {
        self.pass(input, ex, None)
    }

    /// [`observe`](Self::observe), writing what goes to the client into `out`: each final
    /// answer's head held until whole, then written with its lines and rules applied.
    pub fn rewrite(
        &mut self,
        input: &[u8],
        ex: &mut Exchange,
        out: &mut Vec<u8>,
    ) -> Result<(), usize> {
        self.pass(input, ex, Some(out))
    }

    fn pass(
        &mut self,
        input: &[u8],
        ex: &mut Exchange,
        mut out: Option<&mut Vec<u8>>,
    ) -> Result<(), usize> {
        let copy = |o: &mut Option<&mut Vec<u8>>, bytes: &[u8]| {
            if let Some(o) = o {
                o.extend_from_slice(bytes);
            }
        };
        let mut i = 0;
        while i < input.len() {
            // An intercepted answer's body: followed, not passed on.
            let mut out = if self.swallow {
                None
            } else {
                out.as_deref_mut()
            };
            match &mut self.state {
                State::Opaque => {
                    copy(&mut out, &input[i..]);
                    return Ok(());
                }
                State::Head if self.head.is_empty() && ex.pending.is_empty() && !ex.lost => {
                    return Err(i)
                }
                State::Body(left) => {
                    let take = (*left).min((input.len() - i) as u64) as usize;
                    copy(&mut out, &input[i..i + take]);
                    i += take;
                    *left -= take as u64;
                    if let Some(l) = &ex.log {
                        l.received(take);
                        if *left == 0 {
                            l.answer_done();
                        }
                    }
                    if *left == 0 {
                        self.state = State::Head;
                        self.swallow = false;
                    }
                }
                State::Chunked(c) => match c.advance(&input[i..]) {
                    Ok(n) => {
                        copy(&mut out, &input[i..i + n]);
                        i += n;
                        if let Some(l) = &ex.log {
                            l.received(n);
                            if c.is_done() {
                                l.answer_done();
                            }
                        }
                        if c.is_done() {
                            self.state = State::Head;
                            self.swallow = false;
                        }
                    }
                    Err(_) => {
                        self.lose(ex);
                        copy(&mut out, &input[i..]);
                        return Ok(());
                    }
                },
                State::Head => {
                    let before = self.head.len();
                    match self.head.push(&input[i..]) {
                        Pushed::Complete { used, head } => {
                            i += used;
                            self.start_response(&head, ex);
                            let changes = std::mem::take(&mut self.wants_line);
                            if let (Some(o), Some(page)) = (&mut out, self.page.take()) {
                                let head = crate::gateway::policy::with_page_fields(&head, &page);
                                crate::gateway::policy::headers::rewrite_h1_head(
                                    &head,
                                    self.rules.rules.as_deref(),
                                    &self.extra,
                                    o,
                                );
                                o.extend_from_slice(&page.body);
                                self.swallow = !matches!(self.state, State::Head);
                            } else if let Some(o) = &mut out {
                                if changes {
                                    crate::gateway::policy::headers::rewrite_h1_head(
                                        &head,
                                        self.rules.rules.as_deref(),
                                        &self.extra,
                                        o,
                                    );
                                } else {
                                    o.extend_from_slice(&head);
                                }
                            }
                        }
                        Pushed::TooLarge | Pushed::BareLineEnd => {
                            // Not followed any more: what earlier reads held goes as it
                            // came, then this read from where the head's bytes in it began.
                            let held = self.head.take();
                            copy(&mut out, &held[..before.min(held.len())]);
                            copy(&mut out, &input[i..]);
                            self.lose(ex);
                            return Ok(());
                        }
                        Pushed::Partial => return Ok(()),
                    }
                }
            }
        }
        Ok(())
    }

    fn lose(&mut self, ex: &mut Exchange) {
        self.state = State::Opaque;
        self.head.clear();
        ex.lost = true;
        ex.ids.clear();
        ex.answers.clear();
    }

    fn start_response(&mut self, head: &[u8], ex: &mut Exchange) {
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut resp = httparse::Response::new(&mut headers);
        let Ok(httparse::Status::Complete(_)) = resp.parse(head) else {
            return self.lose(ex);
        };
        let code = resp.code.unwrap_or(0);
        if code == 101 {
            if let Some(l) = &ex.log {
                l.answered(101);
            }
            ex.pending.pop_front();
            ex.ids.pop_front();
            ex.answers.pop_front();
            ex.upgrade = Upgrade::Tunnel;
            self.state = State::Opaque;
            return;
        }
        if (100..200).contains(&code) {
            return; // interim response: the final one follows
        }
        let Some(req) = ex.pending.pop_front() else {
            return self.lose(ex); // a response nobody asked for
        };
        if req == Pending::Upgrade {
            ex.upgrade = Upgrade::None; // refused: the client's bytes are HTTP again
        }
        if let Some(l) = &ex.log {
            l.answered(code);
        }
        let mut length = None;
        let mut chunked = false;
        self.extra.clear();
        if let Some(line) = &self.announce {
            if !resp
                .headers
                .iter()
                .any(|h| h.name.eq_ignore_ascii_case("alt-svc"))
            {
                self.extra.extend_from_slice(line);
            }
        }
        if let (Some(spec), Some(id)) = (&self.echo, ex.ids.pop_front()) {
            id.write_line(&spec.name, &mut self.extra);
        }
        if let Some(line) = &self.cookie {
            self.extra.extend_from_slice(line);
        }
        if ex.policed {
            self.rules = ex.answers.pop_front().unwrap_or_default();
        }
        self.wants_line = !self.extra.is_empty() || !self.rules.is_empty();
        // A HEAD's answer has no body to replace.
        self.page = (req != Pending::Head)
            .then(|| self.rules.intercepts(code).cloned())
            .flatten();
        for h in resp.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                length = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok());
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = h
                    .value
                    .rsplit(|&b| b == b',')
                    .next()
                    .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            }
        }
        self.state = if req == Pending::Head || code == 204 || code == 304 {
            State::Head
        } else if chunked {
            State::Chunked(Chunked::new())
        } else {
            match length {
                Some(0) => State::Head,
                Some(n) => State::Body(n),
                None => State::Opaque,
            }
        };
        if let (State::Head, Some(l)) = (&self.state, &ex.log) {
            l.answer_done();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_responses_and_sees_upgrades() {
        let mut t = ResponseTracker::new(16 * 1024);
        let mut ex = Exchange::new();
        ex.pending.extend([
            Pending::Normal,
            Pending::Head,
            Pending::Normal,
            Pending::Upgrade,
        ]);
        ex.upgrade = Upgrade::Awaiting;
        let stream = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\nHTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x05hello";
        for part in stream.chunks(7) {
            assert_eq!(t.observe(part, &mut ex), Ok(()));
        }
        assert_eq!(ex.upgrade, Upgrade::Tunnel);
        assert!(ex.pending.is_empty());
        assert!(!ex.lost);
    }

    #[test]
    fn final_answers_without_alt_svc_get_the_line() {
        let mut t = ResponseTracker::new(16 * 1024);
        t.announce(bytes::Bytes::from_static(b"Alt-Svc: h3=\":443\"\r\n"));
        let mut ex = Exchange::new();
        ex.pending
            .extend([Pending::Normal, Pending::Normal, Pending::Normal]);
        let stream = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 200 OK\r\nalt-svc: clear\r\nContent-Length: 0\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
        // In pieces of 5 bytes: a head held over reads is written once whole.
        let mut out = Vec::new();
        for piece in stream.chunks(5) {
            t.rewrite(piece, &mut ex, &mut out).unwrap();
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\nAlt-Svc: h3=\":443\"\r\n\r\nxHTTP/1.1 200 OK\r\nalt-svc: clear\r\nContent-Length: 0\r\n\r\nHTTP/1.1 204 No Content\r\nAlt-Svc: h3=\":443\"\r\n\r\n"
        );
        assert!(ex.pending.is_empty());
    }

    #[test]
    fn a_refused_upgrade_resumes_http() {
        let mut t = ResponseTracker::new(16 * 1024);
        let mut ex = Exchange::new();
        ex.pending.push_back(Pending::Upgrade);
        ex.upgrade = Upgrade::Awaiting;
        let refused = t.observe(
            b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
            &mut ex,
        );
        assert_eq!(refused, Ok(()));
        assert_eq!(ex.upgrade, Upgrade::None);
    }

    #[test]
    fn bytes_past_every_answer_owed_are_stray() {
        let mut t = ResponseTracker::new(16 * 1024);
        let mut ex = Exchange::new();
        ex.pending.push_back(Pending::Head);
        // A HEAD's answer, then its body nonetheless: stray from the body's first byte.
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        assert_eq!(t.observe(head, &mut ex), Ok(()));
        assert_eq!(t.observe(b"hello", &mut ex), Err(0));
        // In the same read as the answer: the offset where it begins.
        let mut t = ResponseTracker::new(16 * 1024);
        ex.pending.push_back(Pending::Normal);
        let both = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n";
        assert_eq!(t.observe(both, &mut ex), Err(40));
    }
}
