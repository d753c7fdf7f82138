//! An HTTP/3 request stream as the gateway core sees it: h3's receiving half as the
//! request's body ([`Inbound`]), its sending half as the answer ([`Outbound`]). QUIC's flow
//! control is quinn's: a send waits until the client's window takes it.

use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use h3::error::Code;
use h3::server::RequestStream;
use http::{HeaderMap, Response};

use crate::gateway::front::{Gone, Inbound, Outbound, Reset, SendError};

/// The sending half of a request stream.
pub type Tx = RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
/// The receiving half of a request stream.
pub type Rx = RequestStream<h3_quinn::RecvStream, Bytes>;

/// The request body: h3's receiving half, with what was read of it to learn whether it
/// has one.
pub struct Body {
    rx: Rx,
    first: Option<Bytes>,
}

impl Body {
    /// Reads until the body's first bytes or its end, within `wait`: HTTP/3 says no more
    /// than HTTP/2's END_STREAM on the head whether a body follows, and the stream's end
    /// usually came in the head's own packet. True: there is none.
    pub async fn peek(rx: Rx, wait: Duration) -> Result<(Self, bool), Gone> {
        let mut body = Body { rx, first: None };
        match tokio::time::timeout(wait, body.rx.recv_data()).await {
            Ok(Ok(None)) => Ok((body, true)),
            Ok(Ok(Some(mut b))) => {
                body.first = Some(b.copy_to_bytes(b.remaining()));
                Ok((body, false))
            }
            // A body announced by nothing yet: it will be streamed as it comes.
            Err(_) => Ok((body, false)),
            Ok(Err(_)) => Err(Gone),
        }
    }
}

impl Inbound for Body {
    async fn data(&mut self) -> Option<Result<Bytes, Gone>> {
        if let Some(b) = self.first.take() {
            return Some(Ok(b));
        }
        match self.rx.recv_data().await {
            Ok(Some(mut b)) => Some(Ok(b.copy_to_bytes(b.remaining()))),
            Ok(None) => None,
            Err(_) => Some(Err(Gone)),
        }
    }

    fn release(&mut self, _n: usize) {
        // quinn gives the window back as the bytes are read.
    }

    async fn trailers(&mut self) -> Result<Option<HeaderMap>, Gone> {
        self.rx.recv_trailers().await.map_err(|_| Gone)
    }
}

/// The answer: h3's sending half, and the head waiting to go out.
pub struct Answer {
    tx: Option<Tx>,
    head: Option<(Response<()>, bool)>,
    id: u64,
    /// `--http-stall-timeout`: the longest an interim answer waits for the client's window.
    stall: Duration,
}

impl Answer {
    /// The stream's sending half.
    pub fn new(tx: Tx, stall: Duration) -> Self {
        let id = tx.send_id().into_inner();
        Answer {
            tx: Some(tx),
            head: None,
            id,
            stall,
        }
    }
}

fn code(why: Reset) -> Code {
    match why {
        Reset::Malformed => Code::H3_MESSAGE_ERROR,
        Reset::Cancel => Code::H3_REQUEST_CANCELLED,
        Reset::Internal => Code::H3_INTERNAL_ERROR,
    }
}

impl Outbound for Answer {
    fn poll_reset(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        // h3 tells of a STOP_SENDING only when a write fails: a client that gave up is
        // noticed at the answer's first bytes.
        Poll::Pending
    }

    async fn informational(&mut self, resp: Response<()>) {
        if let Some(tx) = &mut self.tx {
            // A window kept shut shows at the final answer's head, which waits as long.
            let _ = tokio::time::timeout(self.stall, tx.send_response(resp)).await;
        }
    }

    fn respond(&mut self, resp: Response<()>, end: bool) -> Result<(), Gone> {
        if self.tx.is_none() {
            return Err(Gone);
        }
        self.head = Some((resp, end));
        Ok(())
    }

    async fn flush_head(&mut self, stall: Duration) -> Result<(), SendError> {
        let tx = self.tx.as_mut().ok_or(SendError::Client)?;
        let Some((resp, end)) = self.head.take() else {
            return Ok(());
        };
        // A HEADERS frame is stream data, under the client's windows: one kept shut holds it.
        match tokio::time::timeout(stall, tx.send_response(resp)).await {
            Err(_) => return Err(SendError::Stalled),
            Ok(Err(_)) => return Err(SendError::Client),
            Ok(Ok(())) => {}
        }
        if end {
            match tokio::time::timeout(stall, tx.finish()).await {
                Err(_) => return Err(SendError::Stalled),
                Ok(Err(_)) => return Err(SendError::Client),
                Ok(Ok(())) => {}
            }
        }
        Ok(())
    }

    async fn send(&mut self, data: Bytes, last: bool, stall: Duration) -> Result<(), SendError> {
        let tx = self.tx.as_mut().ok_or(SendError::Client)?;
        if !data.is_empty() {
            match tokio::time::timeout(stall, tx.send_data(data)).await {
                Err(_) => return Err(SendError::Stalled),
                Ok(Err(_)) => return Err(SendError::Client),
                Ok(Ok(())) => {}
            }
        }
        if last {
            match tokio::time::timeout(stall, tx.finish()).await {
                Err(_) => return Err(SendError::Stalled),
                Ok(Err(_)) => return Err(SendError::Client),
                Ok(Ok(())) => {}
            }
        }
        Ok(())
    }

    async fn trailers(&mut self, trailers: HeaderMap) -> Result<(), Gone> {
        let tx = self.tx.as_mut().ok_or(Gone)?;
        tx.send_trailers(trailers).await.map_err(|_| Gone)?;
        tx.finish().await.map_err(|_| Gone)
    }

    fn answer_now(&mut self, resp: Response<()>, body: Bytes) {
        // h3 sends only by waiting: a task of its own does, for at most a few seconds.
        let Some(mut tx) = self.tx.take() else {
            return;
        };
        tokio::task::spawn_local(async move {
            let send = async {
                tx.send_response(resp).await?;
                if !body.is_empty() {
                    tx.send_data(body).await?;
                }
                tx.finish().await
            };
            let _ = tokio::time::timeout(Duration::from_secs(5), send).await;
        });
    }

    fn reset(&mut self, why: Reset) {
        if let Some(tx) = &mut self.tx {
            tx.stop_stream(code(why));
        }
    }

    fn id(&self) -> u64 {
        self.id
    }
}
