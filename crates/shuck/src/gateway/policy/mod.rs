//! The edge's HTTP policy (issue 61), applied in one place for HTTP/1.1, HTTP/2 and HTTP/3,
//! as Envoy's filter chain and pingora's `request_filter` / `response_filter` phases are:
//! once a request has been judged and its route chosen, [`Effective::of`] resolves what
//! applies to it (the most specific level of each part: route, backend, frontend,
//! global); the request phase writes its rules into the head (`headers.rs`'s
//! [`RequestRules`], which HTTP/1.1's rewriter and the core's `request::build` both call)
//! and holds its body to the limit (`body.rs`); the answer phase rewrites every answer's
//! head, the backend's and shuck's own: [`Answering`] wraps a stream's answer side in the
//! core, and the HTTP/1.1 relay's tracker calls [`headers::rewrite_h1_head`].

pub mod body;
pub mod headers;

use std::sync::Arc;

use bytes::Bytes;
use http::Response;

use crate::config::error_page::{ErrorPage, ErrorPages};
use crate::config::policy::{HeaderRules, Policy};
use crate::edge::route::{Routing, Target};
use crate::gateway::front::{Gone, Note, Outbound, Reset, SendError};

pub use headers::RequestRules;

/// What applies to one request: each part from the most specific level that gives it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Effective<'a> {
    /// Rules on the request's fields.
    pub request: Option<&'a HeaderRules>,
    /// Rules on the answer's fields.
    pub response: Option<&'a Arc<HeaderRules>>,
    /// The body limit.
    pub max_body: Option<u64>,
    /// Pages for shuck's own error answers.
    pub pages: Option<&'a Arc<ErrorPages>>,
    /// The page of a backend in maintenance.
    pub maintenance: Option<&'a Arc<ErrorPage>>,
}

impl<'a> Effective<'a> {
    /// The policy over a request sent to `to` through a frontend whose own level is
    /// `frontend`.
    pub fn of(routing: &'a Routing, to: Target, frontend: Option<&'a Policy>) -> Self {
        if !routing.has_policy() {
            return Effective::default();
        }
        let levels = routing.levels(to, frontend);
        let first = |f: fn(&'a Policy) -> bool| levels.iter().flatten().copied().find(|p| f(p));
        Effective {
            request: first(|p| p.request.is_some()).and_then(|p| p.request.as_deref()),
            response: first(|p| p.response.is_some()).and_then(|p| p.response.as_ref()),
            max_body: first(|p| p.max_body.is_some()).and_then(|p| p.max_body.flatten()),
            pages: first(|p| p.error_pages.is_some()).and_then(|p| p.error_pages.as_ref()),
            maintenance: (first(|p| p.maintenance_page.is_some()))
                .and_then(|p| p.maintenance_page.as_ref()),
        }
    }
}

/// The answer phase's part of [`Effective`], owned, for a stream's answer side (and the
/// HTTP/1.1 tracker's answers): an `Arc` count a request when there are rules (`--hsts`
/// is the first of every level's, set so by the configuration).
#[derive(Debug, Clone, Default)]
pub struct AnswerRules {
    /// The rules.
    pub rules: Option<Arc<HeaderRules>>,
    /// Pages for shuck's own error answers (`error-page`).
    pub pages: Option<Arc<ErrorPages>>,
    /// The page of a backend in maintenance (`maintenance-page`).
    pub maintenance: Option<Arc<ErrorPage>>,
}

impl AnswerRules {
    /// The answer part of `e`.
    pub fn of(e: &Effective<'_>) -> Self {
        AnswerRules {
            rules: e.response.cloned(),
            pages: e.pages.cloned(),
            maintenance: e.maintenance.cloned(),
        }
    }

    /// Whether it changes anything.
    pub fn is_empty(&self) -> bool {
        self.rules.is_none() && self.pages.is_none() && self.maintenance.is_none()
    }

    /// The page for shuck's own answer with `status`, if one is given.
    pub fn page(&self, status: u16) -> Option<&ErrorPage> {
        self.pages.as_deref()?.for_status(status)
    }

    /// The page that takes the place of the backend's own answer with `status`
    /// (`error-page = "... intercept"`), if one does.
    pub fn intercepts(&self, status: u16) -> Option<&ErrorPage> {
        self.page(status).filter(|p| p.intercept)
    }

    /// These rules for the 503 of a backend in maintenance: its `maintenance-page` in
    /// place of the 503 `error-page`, when one is given.
    pub fn in_maintenance(&self) -> Self {
        let mut r = self.clone();
        if let Some(m) = &self.maintenance {
            r.pages = Some(Arc::new(ErrorPages(vec![ErrorPage::clone(m)])));
        }
        r
    }

    /// shuck's own HTTP/1.1 answer `answer` (head and body) under it: as it is when
    /// nothing applies.
    pub fn own_h1<'b>(&self, answer: &'b [u8]) -> std::borrow::Cow<'b, [u8]> {
        let at = answer.windows(4).position(|w| w == b"\r\n\r\n");
        match at {
            Some(at) if !self.is_empty() => {
                let (head, body) = answer.split_at(at + 4);
                let status = (head.get(9..12).and_then(|s| std::str::from_utf8(s).ok()))
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let mut out = Vec::with_capacity(answer.len() + 256);
                match self.page(status) {
                    Some(page) => {
                        let head = with_page_fields(head, page);
                        headers::rewrite_h1_head(&head, self.rules.as_deref(), &[], &mut out);
                        out.extend_from_slice(&page.body);
                    }
                    None => {
                        headers::rewrite_h1_head(head, self.rules.as_deref(), &[], &mut out);
                        out.extend_from_slice(body);
                    }
                }
                std::borrow::Cow::Owned(out)
            }
            _ => std::borrow::Cow::Borrowed(answer),
        }
    }

    /// Applies it to an answer's fields.
    pub fn apply(&self, map: &mut http::HeaderMap) {
        if let Some(rules) = &self.rules {
            headers::apply_map(rules, map);
        }
    }
}

/// An HTTP/1.1 head (`head`, its blank line included) with `page`'s type and length in
/// place of its own framing and coding.
pub fn with_page_fields(head: &[u8], page: &ErrorPage) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + 64);
    for line in head.split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        let replaced = [
            &b"content-type"[..],
            b"content-length",
            b"transfer-encoding",
            b"content-encoding",
        ];
        if line == b"\r\n" || replaced.iter().any(|r| name.eq_ignore_ascii_case(r)) {
            continue;
        }
        out.extend_from_slice(line);
    }
    out.extend_from_slice(b"Content-Type: ");
    out.extend_from_slice(page.content_type.as_bytes());
    out.extend_from_slice(format!("\r\nContent-Length: {}\r\n\r\n", page.body.len()).as_bytes());
    out
}

/// A stream's answer side with the answer phase applied to every final answer's head,
/// the backend's and shuck's own alike. The rules are the connection's until a route is
/// chosen ([`Answering::set`]).
pub struct Answering<O> {
    inner: O,
    rules: AnswerRules,
    /// A final answer's head was given.
    began: bool,
    /// The backend's answer was replaced by a page (`intercept`): its body goes nowhere.
    swallow: bool,
}

impl<O: Outbound> Answering<O> {
    /// `inner`, its answers under `rules`.
    pub fn new(inner: O, rules: AnswerRules) -> Self {
        Answering {
            inner,
            rules,
            began: false,
            swallow: false,
        }
    }

    /// The chosen route's rules from now on.
    pub fn set(&mut self, rules: AnswerRules) {
        self.rules = rules;
    }

    /// The answer is a backend in maintenance's: its `maintenance-page` is the 503's page.
    pub fn in_maintenance(&mut self) {
        self.rules = self.rules.in_maintenance();
    }
}

impl<O: Outbound> Outbound for Answering<O> {
    fn poll_reset(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        self.inner.poll_reset(cx)
    }

    fn informational(&mut self, resp: Response<()>) -> impl std::future::Future<Output = ()> {
        self.inner.informational(resp)
    }

    fn respond(&mut self, mut resp: Response<()>, end: bool) -> Result<(), Gone> {
        if let Some(page) = self.rules.intercepts(resp.status().as_u16()) {
            // The backend's own error answer, an intercepting page in its place: sent
            // whole now, what the backend sends after it dropped.
            let body = page.body.clone();
            let h = resp.headers_mut();
            for name in [
                http::header::CONTENT_LENGTH,
                http::header::CONTENT_ENCODING,
                http::header::TRANSFER_ENCODING,
            ] {
                h.remove(name);
            }
            h.insert(http::header::CONTENT_TYPE, page.content_type.clone());
            h.insert(http::header::CONTENT_LENGTH, body.len().into());
            self.rules.apply(h);
            self.began = true;
            self.swallow = true;
            self.inner.answer_now(resp, body);
            return Ok(());
        }
        self.rules.apply(resp.headers_mut());
        self.began = true;
        self.inner.respond(resp, end)
    }

    fn flush_head(
        &mut self,
        stall: std::time::Duration,
    ) -> impl std::future::Future<Output = Result<(), SendError>> {
        let inner = (!self.swallow).then(|| self.inner.flush_head(stall));
        async move {
            match inner {
                Some(f) => f.await,
                None => Ok(()),
            }
        }
    }

    fn send(
        &mut self,
        data: Bytes,
        last: bool,
        stall: std::time::Duration,
    ) -> impl std::future::Future<Output = Result<(), SendError>> {
        let inner = (!self.swallow).then(|| self.inner.send(data, last, stall));
        async move {
            match inner {
                Some(f) => f.await,
                None => Ok(()),
            }
        }
    }

    fn trailers(
        &mut self,
        trailers: http::HeaderMap,
    ) -> impl std::future::Future<Output = Result<(), Gone>> {
        let inner = (!self.swallow).then(|| self.inner.trailers(trailers));
        async move {
            match inner {
                Some(f) => f.await,
                None => Ok(()),
            }
        }
    }

    fn answer_now(&mut self, mut resp: Response<()>, body: Bytes) {
        // shuck's own answer: its page, when one is given for its status.
        let body = match self.rules.page(resp.status().as_u16()) {
            Some(page) => {
                let h = resp.headers_mut();
                h.insert(http::header::CONTENT_TYPE, page.content_type.clone());
                h.insert(http::header::CONTENT_LENGTH, page.body.len().into());
                page.body.clone()
            }
            None => body,
        };
        self.rules.apply(resp.headers_mut());
        self.began = true;
        self.inner.answer_now(resp, body)
    }

    fn reset(&mut self, why: Reset) {
        self.inner.reset(why)
    }

    fn reset_status(&self, why: Reset) -> Option<u16> {
        self.inner.reset_status(why)
    }

    fn id(&self) -> u64 {
        self.inner.id()
    }

    fn note(&mut self, note: Note<'_>) {
        self.inner.note(note)
    }

    fn noting(&self) -> bool {
        self.inner.noting()
    }

    fn began(&self) -> bool {
        self.began
    }
}
