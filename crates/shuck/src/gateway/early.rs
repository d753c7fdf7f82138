//! Requests that arrive before the client's handshake completes (HTTP/3's 0-RTT,
//! `--quic-early-data`), as RFC 8470 has an intermediary treat them: early data may be a
//! replay, so only a safe request without a body goes on at once, marked `Early-Data: 1`;
//! anything else waits for the handshake, whose completion proves the client live. A
//! backend that answers `425 Too Early` gets the request again once the handshake is done.

use std::cell::Cell;

use tokio::sync::Notify;

use super::request::{Body, Kind};

/// Where a connection's handshake stands, for its early requests.
#[derive(Debug)]
pub struct Handshake {
    state: Cell<State>,
    settled: Notify,
    /// A request came before it completed: the client used 0-RTT.
    early_requests: Cell<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Done,
    Failed,
}

impl Handshake {
    /// A handshake still under way.
    pub fn pending() -> Self {
        Handshake {
            state: Cell::new(State::Pending),
            settled: Notify::new(),
            early_requests: Cell::new(false),
        }
    }

    /// The handshake ended, completed or not: the requests waiting for it go on (or end).
    pub fn settle(&self, completed: bool) {
        self.state.set(if completed {
            State::Done
        } else {
            State::Failed
        });
        self.settled.notify_waiters();
    }

    /// Whether it is still under way: what arrives now is early data.
    pub fn is_pending(&self) -> bool {
        self.state.get() == State::Pending
    }

    /// Whether requests came before it completed (quinn does not tell a server whether it
    /// took 0-RTT; a request taken as the handshake completes may be counted too).
    pub fn had_early_requests(&self) -> bool {
        self.early_requests.get()
    }

    /// Waits for it to end; whether it completed.
    pub async fn completed(&self) -> bool {
        loop {
            let settled = self.settled.notified();
            match self.state.get() {
                State::Done => return true,
                State::Failed => return false,
                State::Pending => settled.await,
            }
        }
    }
}

/// What is done with a request, by when it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Early {
    /// After the handshake: as any other.
    No,
    /// In early data, safe and without a body: on at once, marked.
    Passed,
    /// In early data, not safe or with a body: held until the handshake completes.
    Waited,
}

impl Early {
    /// What to do with a request taken while `handshake` is where it is.
    pub(super) fn of(
        handshake: Option<&Handshake>,
        method: &http::Method,
        framing: Body,
        kind: Kind,
    ) -> Early {
        use http::Method;
        let Some(h) = handshake.filter(|h| h.is_pending()) else {
            return Early::No;
        };
        h.early_requests.set(true);
        // RFC 9110 §9.2.1's safe methods; a tunnel or a body waits.
        let safe = *method == Method::GET
            || *method == Method::HEAD
            || *method == Method::OPTIONS
            || *method == Method::TRACE;
        if safe && framing == Body::None && !matches!(kind, Kind::Upgrade(_)) {
            Early::Passed
        } else {
            Early::Waited
        }
    }
}

/// The header an early request carries to the backend (RFC 8470 §5.1).
const MARK: &[u8] = b"Early-Data: 1\r\n";

/// Marks a request head (ending in its blank line) as early.
pub(super) fn mark(head: &mut Vec<u8>) {
    let at = head.len().saturating_sub(2);
    head.splice(at..at, MARK.iter().copied());
}

/// Takes the mark off again, for the request's retry after the handshake.
pub(super) fn unmark(head: &mut Vec<u8>) {
    let end = head.len().saturating_sub(2);
    if let Some(start) = end.checked_sub(MARK.len()) {
        if head.get(start..end) == Some(MARK) {
            head.drain(start..end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_goes_before_the_blank_line_and_comes_off() {
        let plain = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
        let mut head = plain.clone();
        mark(&mut head);
        assert_eq!(head, b"GET / HTTP/1.1\r\nHost: a\r\nEarly-Data: 1\r\n\r\n");
        unmark(&mut head);
        assert_eq!(head, plain);
        unmark(&mut head);
        assert_eq!(head, plain);
    }

    #[test]
    fn only_safe_bodiless_requests_go_early() {
        let h = Handshake::pending();
        let of = |m: http::Method, b| Early::of(Some(&h), &m, b, Kind::Normal);
        assert_eq!(of(http::Method::GET, Body::None), Early::Passed);
        assert_eq!(of(http::Method::HEAD, Body::None), Early::Passed);
        assert_eq!(of(http::Method::POST, Body::None), Early::Waited);
        assert_eq!(of(http::Method::DELETE, Body::None), Early::Waited);
        assert_eq!(
            of(http::Method::GET, Body::Chunked(Default::default())),
            Early::Waited
        );
        h.settle(true);
        assert_eq!(
            of(http::Method::POST, Body::Chunked(Default::default())),
            Early::No
        );
        assert_eq!(
            Early::of(None, &http::Method::GET, Body::None, Kind::Normal),
            Early::No
        );
    }
}
