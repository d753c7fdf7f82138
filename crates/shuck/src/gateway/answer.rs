//! A backend's answer to one stream passed on to the client: its head read (interim `1xx`
//! answers passed on), then sent as the stream's response, then its body streamed under
//! the client's flow control, never ahead of its window. Once the head is out, a body cut
//! short or malformed resets the stream.

use std::future::{poll_fn, Future};
use std::task::{Context, Waker};

use bytes::{Buf, Bytes, BytesMut};
use http::{Response, StatusCode};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::backends::{Silence, Wait, READ_SIZE};
use super::front::{Gone, Outbound, Reset, SendError};
use super::outcome::{client_reset, stalled, Done, End};
use super::request::Kind;
use super::response::{self, Answer, BadAnswer, Dechunk, Framing, Piece};
use super::Gateway;

/// The backend's answer, passed on to the client (with `cookie`, a sticky cookie, set);
/// with `early` (a request sent in 0-RTT) a `425 Too Early` is not: the request goes
/// again after the handshake.
#[allow(clippy::too_many_arguments)]
pub(super) async fn answer<R: AsyncRead + Unpin, O: Outbound>(
    rd: &mut R,
    buf: &mut BytesMut,
    silence: &mut Silence,
    gw: &Gateway,
    respond: &mut O,
    kind: Kind,
    early: bool,
    cookie: Option<http::HeaderValue>,
) -> Result<Done, End> {
    let mut answer = read_head(rd, buf, silence, gw, respond, kind).await?;
    if early && answer.status == StatusCode::TOO_EARLY {
        return Err(End::TooEarly);
    }
    if let Some(c) = cookie {
        answer.headers.append(http::header::SET_COOKIE, c);
    }
    Ok(pass_on(gw, rd, buf, silence, respond, answer).await)
}

/// Reads the backend's answer head, passing interim (`1xx`) answers on; watches for the
/// client resetting the stream once the backend has kept it waiting for
/// [`PATIENCE`](super::backends::PATIENCE).
pub(super) async fn read_head<R: AsyncRead + Unpin, O: Outbound>(
    rd: &mut R,
    buf: &mut BytesMut,
    silence: &mut Silence,
    gw: &Gateway,
    respond: &mut O,
    kind: Kind,
) -> Result<Answer, End> {
    let mut got_any = !buf.is_empty();
    let mut watch_reset = false;
    loop {
        let parsed = if buf.is_empty() {
            None // the usual first turn: nothing read yet
        } else {
            response::parse(buf, kind, gw.max_head).map_err(End::Bad)?
        };
        if let Some((used, answer)) = parsed {
            buf.advance(used);
            let upgrade_accepted = matches!(kind, Kind::Upgrade(_))
                && answer.status == StatusCode::SWITCHING_PROTOCOLS;
            if answer.status.is_informational() && !upgrade_accepted {
                if answer.status == StatusCode::SWITCHING_PROTOCOLS {
                    return Err(End::Bad(BadAnswer(
                        "101 to a request that asked no upgrade",
                    )));
                }
                let mut interim = Response::new(());
                *interim.status_mut() = answer.status;
                *interim.headers_mut() = answer.headers;
                respond.informational(interim).await;
                continue;
            }
            return Ok(answer);
        }
        // The read first: the reset is looked at only while the backend keeps us waiting.
        silence.start();
        let read = loop {
            let waited = tokio::select! {
                biased;
                r = read_more(rd, buf) => break r,
                w = poll_fn(|cx| silence.poll_wait(cx)) => w,
                () = poll_fn(|cx| respond.poll_reset(cx)), if watch_reset => {
                    return Err(End::ClientReset)
                }
            };
            match waited {
                Wait::Long => watch_reset = true,
                Wait::Over => return Err(End::Timeout),
            }
        };
        match read {
            Ok(0) | Err(_) if !got_any => return Err(End::Stale),
            Ok(0) => return Err(End::Bad(BadAnswer("closed in the middle of the head"))),
            Err(e) => return Err(End::Write(e)),
            Ok(_) => got_any = true,
        }
    }
}

/// Reads more of the backend into `buf`.
pub(super) async fn read_more<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
) -> std::io::Result<usize> {
    buf.reserve(READ_SIZE);
    rd.read_buf(buf).await
}

/// Sends the final answer's head and body. Once the head is out, a body cut short or
/// malformed resets the stream (the only way left to tell the client).
///
/// The head is handed over before the future is made, so that the answer's fields are not
/// carried in it.
pub(super) fn pass_on<'a, R: AsyncRead + Unpin, O: Outbound>(
    gw: &'a Gateway,
    rd: &'a mut R,
    buf: &'a mut BytesMut,
    silence: &'a mut Silence,
    respond: &'a mut O,
    answer: Answer,
) -> impl Future<Output = Done> + 'a {
    let Answer {
        status,
        headers,
        framing,
        keep_alive,
    } = answer;
    let mut resp = Response::new(());
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    if let Some(v) = &gw.alt_svc {
        if let http::header::Entry::Vacant(e) = resp.headers_mut().entry(http::header::ALT_SVC) {
            e.insert(v.clone());
        }
    }
    let empty = framing == Framing::Empty;
    let taken = respond.respond(resp, empty);
    let done = if keep_alive {
        Done::Reusable
    } else {
        Done::Close
    };
    if taken.is_err() && was_reset(respond) {
        client_reset(gw); // a reset that came before PATIENCE was up (see read_head)
    }
    async move {
        if taken.is_err() {
            return Done::Cut;
        }
        match respond.flush_head(gw.stall).await {
            Ok(()) => {}
            Err(SendError::Client) => return Done::Cut,
            Err(SendError::Stalled) => {
                respond.reset(Reset::Cancel);
                stalled(gw, respond.id(), "the client's window stayed shut");
                return Done::Cut;
            }
        }
        if empty {
            return done;
        }
        send_all(gw, rd, buf, silence, respond, framing, done).await
    }
}

/// True when the client has reset the stream (looked at without waiting).
fn was_reset<O: Outbound>(respond: &mut O) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    respond.poll_reset(&mut cx).is_ready()
}

/// The answer's body, after its head; `done` is what a complete one leaves.
async fn send_all<R: AsyncRead + Unpin, O: Outbound>(
    gw: &Gateway,
    rd: &mut R,
    buf: &mut BytesMut,
    silence: &mut Silence,
    tx: &mut O,
    framing: Framing,
    done: Done,
) -> Done {
    match send_body(gw, rd, buf, silence, tx, framing).await {
        Ok(()) => done,
        Err(BodyEnd::Client) => {
            client_reset(gw);
            Done::Cut
        }
        Err(BodyEnd::Stalled) => {
            tx.reset(Reset::Cancel);
            stalled(gw, tx.id(), "the client's window stayed shut");
            Done::Cut
        }
        Err(e) => {
            tracing::warn!(
                name: "gateway_backend_answer_cut",
                protocol = gw.version.as_str(),
                client = %gw.client,
                error = %e,
                "backend answer cut short: stream reset",
            );
            tx.reset(Reset::Internal);
            gw.count_reset_sent();
            Done::Cut
        }
    }
}

/// Why an answer's body did not reach its end.
#[derive(Debug, thiserror::Error)]
pub(super) enum BodyEnd {
    /// The client reset the stream or went away.
    #[error("the client reset the stream")]
    Client,
    /// The backend closed before the end.
    #[error("the backend closed before the end of the body")]
    Cut,
    /// The body's framing is broken.
    #[error(transparent)]
    Bad(BadAnswer),
    /// The client's window stayed shut for `--http-stall-timeout`.
    #[error("the client took nothing within --http-stall-timeout")]
    Stalled,
    /// No progress within `--idle-timeout` (the backend silent, a tunnel idle).
    #[error("no progress within --idle-timeout")]
    Silent,
    /// Reading the backend failed.
    #[error("backend connection: {0}")]
    Io(std::io::Error),
}

impl From<SendError> for BodyEnd {
    fn from(e: SendError) -> Self {
        match e {
            SendError::Client => BodyEnd::Client,
            SendError::Stalled => BodyEnd::Stalled,
        }
    }
}

/// Reads more for a body that is not over yet: none more is a cut.
async fn more_body<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    silence: &mut Silence,
) -> Result<(), BodyEnd> {
    silence.start();
    tokio::select! {
        biased;
        r = read_more(rd, buf) => match r {
            Ok(0) => Err(BodyEnd::Cut),
            Ok(_) => Ok(()),
            Err(e) => Err(BodyEnd::Io(e)),
        },
        () = poll_fn(|cx| silence.poll_over(cx)) => Err(BodyEnd::Silent),
    }
}

async fn send_body<R: AsyncRead + Unpin, O: Outbound>(
    gw: &Gateway,
    rd: &mut R,
    buf: &mut BytesMut,
    silence: &mut Silence,
    tx: &mut O,
    framing: Framing,
) -> Result<(), BodyEnd> {
    match framing {
        Framing::Empty => send(gw, tx, Bytes::new(), true).await,
        Framing::Length(mut left) => loop {
            if buf.is_empty() {
                more_body(rd, buf, silence).await?;
            }
            let n = left.min(buf.len() as u64) as usize;
            left -= n as u64;
            // The last bytes end the stream: no empty DATA frame after them.
            send(gw, tx, buf.split_to(n).freeze(), left == 0).await?;
            if left == 0 {
                return Ok(());
            }
        },
        Framing::Chunked => {
            let mut chunks = Dechunk::default();
            loop {
                match chunks.next(buf).map_err(BodyEnd::Bad)? {
                    Piece::Data(d) => send(gw, tx, d, false).await?,
                    Piece::More => more_body(rd, buf, silence).await?,
                    Piece::End(t) if t.is_empty() => return send(gw, tx, Bytes::new(), true).await,
                    Piece::End(t) => return tx.trailers(t).await.map_err(|Gone| BodyEnd::Client),
                }
            }
        }
        Framing::UntilClose => loop {
            if buf.is_empty() {
                match more_body(rd, buf, silence).await {
                    Err(BodyEnd::Cut) => return send(gw, tx, Bytes::new(), true).await,
                    r => r?,
                }
            }
            send(gw, tx, buf.split().freeze(), false).await?;
        },
    }
}

/// Sends `data` on the stream as the client's window allows, never ahead of it: what a
/// client that never opens its window costs is bounded by one read. `last`: the stream
/// ends with these bytes.
pub(super) async fn send<O: Outbound>(
    gw: &Gateway,
    tx: &mut O,
    data: Bytes,
    last: bool,
) -> Result<(), BodyEnd> {
    Ok(tx.send(data, last, gw.stall).await?)
}
