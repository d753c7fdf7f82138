//! A stream's request body up a shared HTTP/2 backend connection: what was kept from an
//! earlier try first, then the client's as it comes, each piece within the backend's
//! window, then its trailers ([`upload`]); and what it keeps to send again when the backend
//! turns the stream away unprocessed ([`Replay`]).

use std::cell::Cell;
use std::future::poll_fn;

use bytes::Bytes;
use h2::SendStream;
use http::HeaderMap;

use crate::gateway::front::{next_piece, trailers_within, BodyWait, Inbound};
use crate::gateway::request::Body;
use crate::gateway::response::allowed_trailer;
use crate::gateway::Gateway;

/// Most request body kept to send again when a backend turns a stream away unprocessed:
/// a gRPC call's messages are mostly far smaller; a longer body that is turned away is
/// answered `502` (`UNAVAILABLE`).
pub const REPLAY_MAX: usize = 64 * 1024;

/// The body sent so far, to send again.
#[derive(Debug, Default)]
pub(super) struct Replay {
    pieces: Vec<Bytes>,
    len: usize,
    /// More than [`REPLAY_MAX`] went: it cannot be sent again.
    pub(super) over: bool,
}

impl Replay {
    fn keep(&mut self, data: &Bytes) {
        if self.over || self.len + data.len() > REPLAY_MAX {
            self.over = true;
            self.pieces = Vec::new();
            return;
        }
        self.len += data.len();
        self.pieces.push(data.clone());
    }
}

/// Why the body's way up stopped.
pub(super) enum Up {
    /// The client's side of it.
    Wait(BodyWait),
    /// The backend's stream closed or its window stayed shut for `--idle-timeout`.
    Backend,
}

/// Trailers without what may not travel as one, nor the forwarding names.
pub(super) fn filtered(gw: &Gateway, mut t: HeaderMap) -> HeaderMap {
    let drop: Vec<_> = t
        .keys()
        .filter(|n| gw.fwd.strips(n.as_str().as_bytes()) || !allowed_trailer(n))
        .cloned()
        .collect();
    for n in drop {
        t.remove(n);
    }
    t
}

impl From<BodyWait> for Up {
    fn from(w: BodyWait) -> Self {
        Up::Wait(w)
    }
}

/// The body up: what was kept from an earlier try first, then the client's as it comes,
/// each piece sent within the backend's window and its own window given back to the
/// client once sent; then the client's trailers, or the end.
pub(super) async fn upload<I: Inbound>(
    gw: &Gateway,
    tx: &mut SendStream<Bytes>,
    body: &mut I,
    framing: Body,
    replay: &mut Replay,
    processed: &Cell<bool>,
) -> Result<(), Up> {
    if framing == Body::None {
        return Ok(());
    }
    for piece in replay.pieces.clone() {
        send_data(gw, tx, piece).await?;
    }
    let mut left = match framing {
        Body::Length(n) => Some(n.saturating_sub(replay.len as u64)),
        _ => None,
    };
    // What was kept was within the limit when it first came.
    let mut budget = match framing {
        Body::Chunked(b) => b,
        _ => Default::default(),
    };
    budget
        .take(replay.len as u64)
        .map_err(|_| Up::Wait(BodyWait::TooLarge))?;
    if replay.over {
        return Err(Up::Backend); // cannot be whole again: the caller never gets here
    }
    loop {
        // Before the answer the client is waited on for --http-stall-timeout; once the
        // backend answers, a stream both ways may rest for --idle-timeout.
        let wait = if processed.get() { gw.idle } else { gw.stall };
        let Some(data) = next_piece(body, wait, &mut left, &mut budget).await? else {
            break;
        };
        let n = data.len();
        if !processed.get() {
            replay.keep(&data);
        }
        send_data(gw, tx, data).await?;
        body.release(n);
    }
    let trailers = trailers_within(body, gw.stall).await?;
    match trailers.map(|t| filtered(gw, t)).filter(|t| !t.is_empty()) {
        Some(t) => tx.send_trailers(t).map_err(|_| Up::Backend),
        None => tx.send_data(Bytes::new(), true).map_err(|_| Up::Backend),
    }
}

/// `data` to the backend as its window opens, never ahead of it.
async fn send_data(gw: &Gateway, tx: &mut SendStream<Bytes>, mut data: Bytes) -> Result<(), Up> {
    while !data.is_empty() {
        tx.reserve_capacity(data.len());
        let cap = match tokio::time::timeout(gw.idle, poll_fn(|cx| tx.poll_capacity(cx))).await {
            Ok(Some(Ok(n))) => n,
            _ => return Err(Up::Backend),
        };
        if cap == 0 {
            continue;
        }
        let piece = data.split_to(cap.min(data.len()));
        tx.send_data(piece, false).map_err(|_| Up::Backend)?;
    }
    Ok(())
}
