//! A request's body up to an HTTP/1.1 backend, as the client sends it: in the framing its
//! head announced (its `content-length`, held to it, or chunked with the client's trailers),
//! each piece's window given back to the client once the backend took its bytes.

use bytes::Buf;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::front::{next_piece, trailers_within, BodyWait, Inbound};
use super::request::Body;
use super::response;
use super::Gateway;

/// Why the upload stopped.
pub(super) enum Up {
    /// The client reset the stream.
    Client,
    /// The client sent nothing of its body for `--http-stall-timeout`.
    Stalled,
    /// The body ran past its `content-length`, or ended short of it: what was read past it
    /// is never written.
    Length,
    /// The body ran past the edge policy's limit: what went past is never written.
    TooLarge,
    /// The backend could not take more.
    Backend(std::io::Error),
}

impl From<BodyWait> for Up {
    fn from(w: BodyWait) -> Self {
        match w {
            BodyWait::Client => Up::Client,
            BodyWait::Stalled => Up::Stalled,
            BodyWait::Length => Up::Length,
            BodyWait::TooLarge => Up::TooLarge,
        }
    }
}

/// The request body to the backend, as it arrives, in the framing the head announced;
/// each piece's window is given back once the backend took its bytes.
pub(super) async fn upload<W: AsyncWrite + Unpin, I: Inbound>(
    body: &mut I,
    wr: &mut W,
    framing: Body,
    gw: &Gateway,
) -> Result<(), Up> {
    if matches!(framing, Body::None | Body::Tunnel) {
        return Ok(());
    }
    let (chunked, mut budget) = match framing {
        Body::Chunked(b) => (true, b),
        _ => (false, Default::default()),
    };
    let mut left = match framing {
        Body::Length(n) => Some(n),
        _ => None,
    };
    while let Some(data) = next_piece(body, gw.stall, &mut left, &mut budget).await? {
        let n = data.len();
        let written = if chunked {
            let size = format!("{n:x}\r\n");
            let mut frame = Buf::chain(Buf::chain(size.as_bytes(), data), &b"\r\n"[..]);
            wr.write_all_buf(&mut frame).await
        } else {
            wr.write_all(&data).await
        };
        written.map_err(Up::Backend)?;
        body.release(n);
    }
    if chunked {
        let trailers = trailers_within(body, gw.stall).await?;
        let mut last = b"0\r\n".to_vec();
        for (name, value) in trailers.iter().flatten() {
            if gw.fwd.strips(name.as_str().as_bytes()) || !response::allowed_trailer(name) {
                continue;
            }
            last.extend_from_slice(name.as_str().as_bytes());
            last.extend_from_slice(b": ");
            last.extend_from_slice(value.as_bytes());
            last.extend_from_slice(b"\r\n");
        }
        last.extend_from_slice(b"\r\n");
        wr.write_all(&last).await.map_err(Up::Backend)?;
    }
    Ok(())
}
