//! The client's side of a connection outside the relay: its request head read before any
//! backend is chosen (the first, and the next one after a backend closed between
//! requests), and how a relay's end is told to it (400, 408, 421, a stall's answer, then
//! close_notify).

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;

use crate::gateway::choose::MISDIRECTED;
use crate::gateway::h1::{self, Http};
use crate::proxy::relay::RelayEnd;

/// How long a closing message (400, 503, close_notify) may take to go out.
pub(super) const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// How a relay's end is told to the client: 400 or 408 in HTTP mode, then close; `http`
/// says what a stalled exchange's client is told ([`Http::stall_answer`]).
pub(super) async fn finish<S>(tls: &mut S, end: &RelayEnd, client: SocketAddr, http: Option<&Http>)
where
    S: tokio::io::AsyncWrite + Unpin,
{
    if let Some(l) = http.and_then(|h| h.exchange.log.as_deref()) {
        log_end(l, end, http.and_then(Http::stall_answer).is_some(), http);
    }
    let refused;
    let redirect;
    let answer = match end {
        RelayEnd::Error(side, e) => {
            tracing::debug!(
                name: "conn_error",
                client = %client,
                ?side,
                error = %e,
                "connection ended by an error",
            );
            return;
        }
        RelayEnd::HttpTimeout(why) => {
            tracing::debug!(name: "conn_http_timeout", client = %client, ?why, "HTTP timeout");
            match why {
                h1::Expired::Request => Some(h1::REQUEST_TIMEOUT),
                h1::Expired::KeepAlive => None,
                h1::Expired::Stall => http.and_then(Http::stall_answer),
            }
        }
        RelayEnd::BadRequest(why) => {
            tracing::debug!(
                name: "conn_request_refused",
                client = %client,
                error = %why,
                "request refused",
            );
            Some(match why.status() {
                501 => h1::NOT_IMPLEMENTED,
                413 => h1::PAYLOAD_TOO_LARGE,
                _ => h1::BAD_REQUEST,
            })
        }
        RelayEnd::Stray => {
            tracing::debug!(
                name: "conn_backend_stray",
                client = %client,
                "the backend wrote an answer no request asked for: closed, those bytes withheld",
            );
            None
        }
        RelayEnd::Misdirected => {
            tracing::debug!(
                name: "conn_request_misdirected",
                client = %client,
                "a request for a name the connection's certificate does not cover: 421",
            );
            Some(MISDIRECTED)
        }
        RelayEnd::Refused(r) => {
            crate::clients::log_refused(r, client, "http/1.1");
            refused = refusal(r);
            Some(refused.as_slice())
        }
        RelayEnd::Redirect => {
            let Some((code, location)) = http.and_then(|h| h.request.redirect()) else {
                return;
            };
            redirect = crate::gateway::route_action::h1_redirect(code, location);
            Some(redirect.as_slice())
        }
        RelayEnd::Closed
        | RelayEnd::IdleTimeout
        | RelayEnd::Switch(_)
        | RelayEnd::BackendClosed
        | RelayEnd::SendAgain => return,
    };
    // The edge policy's answer rules cover shuck's own answers too (nginx's `always`).
    let own = http.map(|h| &h.exchange.own);
    let answer = answer.map(|a| own.map_or(std::borrow::Cow::Borrowed(a), |o| o.own_h1(a)));
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        if let Some(a) = answer {
            tls.write_all(&a).await?;
        }
        tls.shutdown().await
    })
    .await;
}

/// shuck's answer to a request it refuses for its client (429 with `Retry-After`, 403);
/// the connection closes after it.
fn refusal(r: &crate::clients::Refused) -> Vec<u8> {
    match r.reason {
        crate::clients::Reason::RequestRate => format!(
            "HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain\r\nContent-Length: 18\r\nRetry-After: {}\r\nConnection: close\r\n\r\nToo Many Requests\n",
            r.retry_secs()
        )
        .into_bytes(),
        _ => b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 10\r\nConnection: close\r\n\r\nForbidden\n".to_vec(),
    }
}

/// The access log's lines of an HTTP/1.1 connection that ends with `end`: the answer
/// under way, the requests never answered, and shuck's own answer (`stalled_408`: a stall
/// answered 408).
fn log_end(l: &h1::log::H1Log, end: &RelayEnd, stalled_408: bool, http: Option<&Http>) {
    use crate::access::Cause as C;
    use crate::proxy::relay::Side;
    // An answer still under way when both sides closed was cut, unless its end is the
    // close (no length given).
    let closed = if http.is_some_and(|h| h.response.reads_to_close()) {
        C::Normal
    } else {
        C::AnswerCut
    };
    let (cut, unanswered, own) = match end {
        RelayEnd::Closed | RelayEnd::Stray => (closed, C::BackendReset, None),
        RelayEnd::IdleTimeout => (C::BackendTimeout, C::BackendTimeout, None),
        RelayEnd::Error(Side::Client, _) => (C::ClientClosed, C::ClientClosed, None),
        RelayEnd::Error(Side::Backend, _) => (C::AnswerCut, C::BackendReset, None),
        RelayEnd::BadRequest(why) => {
            let own = (why.status(), C::BadRequest);
            // A head refused: its own line, with its request line. A body refused: the
            // line of its request, already open, takes the status.
            if let Some(head) = http.and_then(|h| h.request.refused_head()) {
                return l.ended_refused(head, C::BadRequest, C::BadRequest, own);
            }
            (C::BadRequest, C::BadRequest, Some(own))
        }
        RelayEnd::HttpTimeout(h1::Expired::Request) => (
            C::RequestTimeout,
            C::RequestTimeout,
            Some((408, C::RequestTimeout)),
        ),
        RelayEnd::HttpTimeout(h1::Expired::KeepAlive) => (C::Normal, C::ClientTimeout, None),
        RelayEnd::HttpTimeout(h1::Expired::Stall) => (
            C::ClientTimeout,
            C::ClientTimeout,
            stalled_408.then_some((408, C::ClientTimeout)),
        ),
        RelayEnd::Misdirected => {
            let head = http.map_or(&[][..], |h| h.request.held_head());
            return l.ended_held(head, C::Normal, C::Misdirected, (421, C::Misdirected));
        }
        RelayEnd::Redirect => {
            let head = http.map_or(&[][..], |h| h.request.held_head());
            let code = http.and_then(|h| h.request.redirect()).map_or(308, |r| r.0);
            return l.ended_held(head, C::Normal, C::Normal, (code, C::Normal));
        }
        RelayEnd::Refused(r) => {
            let head = http.map_or(&[][..], |h| h.request.held_head());
            let status = if r.reason == crate::clients::Reason::RequestRate {
                429
            } else {
                403
            };
            return l.ended_held(head, C::Normal, C::Refused, (status, C::Refused));
        }
        RelayEnd::Switch(_) | RelayEnd::BackendClosed | RelayEnd::SendAgain => {
            (C::Normal, C::BackendReset, None)
        }
    };
    l.ended(cut, unanswered, own, None);
}

/// HTTP mode: reads the client until its first request head is accepted, and returns it
/// rewritten (with any body bytes that came with it); the end to report otherwise. Reads
/// land in the worker's scratch buffer, as the relay's do.
pub(super) async fn first_request<S>(
    tls: &mut S,
    http: &mut Http,
    idle: std::time::Duration,
) -> Result<Vec<u8>, RelayEnd>
where
    S: tokio::io::AsyncRead + Unpin,
{
    use std::task::Poll;
    let start = tokio::time::Instant::now();
    let mut out = Vec::new();
    use crate::gateway::h1::request::Hold;
    while http.exchange.pending.is_empty() {
        match http.request.held() {
            Some(Hold::Misdirected) => return Err(RelayEnd::Misdirected),
            Some(Hold::Refused(r)) => return Err(RelayEnd::Refused(r)),
            Some(Hold::Redirect) => return Err(RelayEnd::Redirect),
            // After a backend closed, a request for another: no backend is open to owe
            // answers first, so it goes at once (it was waited on for ever).
            Some(Hold::Switch(_)) => {
                http.request
                    .moved(&mut out, &mut http.exchange)
                    .map_err(RelayEnd::BadRequest)?;
                continue;
            }
            None => {}
        }
        let due = http.deadline(start, false, false);
        let deadline = due.map_or(start + idle, |(at, _)| at.min(start + idle));
        let read = std::future::poll_fn(|cx| {
            crate::edge::buffers::with_scratch(|buf| {
                let mut rb = tokio::io::ReadBuf::new(buf);
                match std::pin::Pin::new(&mut *tls).poll_read(cx, &mut rb) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Err(e)) => {
                        Poll::Ready(Err(RelayEnd::Error(crate::proxy::relay::Side::Client, e)))
                    }
                    Poll::Ready(Ok(())) if rb.filled().is_empty() => {
                        Poll::Ready(Err(RelayEnd::Closed))
                    }
                    Poll::Ready(Ok(())) => Poll::Ready(
                        http.request
                            .feed(rb.filled(), &mut out, &mut http.exchange)
                            .map_err(RelayEnd::BadRequest),
                    ),
                }
            })
        });
        match tokio::time::timeout_at(deadline, read).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(match due {
                    Some((at, why)) if at <= deadline => RelayEnd::HttpTimeout(why),
                    _ => RelayEnd::IdleTimeout,
                })
            }
        }
    }
    Ok(out)
}
