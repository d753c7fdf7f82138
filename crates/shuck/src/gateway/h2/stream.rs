//! An HTTP/2 stream as the gateway core sees it: h2's receiving half as the request's body
//! ([`Inbound`]), its responding half as the answer ([`Outbound`]).

use std::future::poll_fn;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, Response};

use crate::gateway::front::{Gone, Inbound, Outbound, Reset, SendError};

/// The request body: h2's receiving half.
pub struct Body(pub RecvStream);

impl Inbound for Body {
    async fn data(&mut self) -> Option<Result<Bytes, Gone>> {
        self.0.data().await.map(|r| r.map_err(|_| Gone))
    }

    fn release(&mut self, n: usize) {
        let _ = self.0.flow_control().release_capacity(n);
    }

    async fn trailers(&mut self) -> Result<Option<HeaderMap>, Gone> {
        self.0.trailers().await.map_err(|_| Gone)
    }
}

/// The answer: h2's responding half, then the stream it opens.
pub struct Answer {
    respond: SendResponse<Bytes>,
    tx: Option<SendStream<Bytes>>,
}

impl Answer {
    /// The stream's responding half.
    pub fn new(respond: SendResponse<Bytes>) -> Self {
        Answer { respond, tx: None }
    }
}

fn reason(why: Reset) -> Reason {
    match why {
        Reset::Malformed => Reason::PROTOCOL_ERROR,
        Reset::Cancel => Reason::CANCEL,
        Reset::Internal => Reason::INTERNAL_ERROR,
    }
}

impl Outbound for Answer {
    fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let r = match &mut self.tx {
            Some(tx) => tx.poll_reset(cx),
            None => self.respond.poll_reset(cx),
        };
        r.map(|_| ())
    }

    async fn informational(&mut self, resp: Response<()>) {
        // A client gone is noticed at the next step.
        let _ = self.respond.send_informational(resp);
    }

    fn respond(&mut self, resp: Response<()>, end: bool) -> Result<(), Gone> {
        let tx = self.respond.send_response(resp, end).map_err(|_| Gone)?;
        self.tx = Some(tx);
        Ok(())
    }

    async fn flush_head(&mut self, _stall: Duration) -> Result<(), SendError> {
        Ok(()) // h2 queued it with the connection's frames (HEADERS are not flow-controlled)
    }

    async fn send(
        &mut self,
        mut data: Bytes,
        last: bool,
        stall: Duration,
    ) -> Result<(), SendError> {
        let tx = self.tx.as_mut().ok_or(SendError::Client)?;
        if data.is_empty() {
            return match last {
                true => tx.send_data(data, true).map_err(|_| SendError::Client),
                false => Ok(()),
            };
        }
        while !data.is_empty() {
            tx.reserve_capacity(data.len());
            let granted = loop {
                let c = tx.capacity();
                if c > 0 {
                    break c;
                }
                match tokio::time::timeout(stall, poll_fn(|cx| tx.poll_capacity(cx))).await {
                    Err(_) => return Err(SendError::Stalled),
                    Ok(None) | Ok(Some(Err(_))) => return Err(SendError::Client),
                    Ok(Some(Ok(_))) => {}
                }
            };
            let part = data.split_to(granted.min(data.len()));
            tx.send_data(part, last && data.is_empty())
                .map_err(|_| SendError::Client)?;
        }
        Ok(())
    }

    async fn trailers(&mut self, trailers: HeaderMap) -> Result<(), Gone> {
        let tx = self.tx.as_mut().ok_or(Gone)?;
        tx.send_trailers(trailers).map_err(|_| Gone)
    }

    fn answer_now(&mut self, resp: Response<()>, body: Bytes) {
        // Without a body the head ends the stream (gRPC's trailers-only answer).
        if body.is_empty() {
            let _ = self.respond.send_response(resp, true);
        } else if let Ok(mut tx) = self.respond.send_response(resp, false) {
            let _ = tx.send_data(body, true);
        }
    }

    fn reset(&mut self, why: Reset) {
        match &mut self.tx {
            Some(tx) => tx.send_reset(reason(why)),
            None => self.respond.send_reset(reason(why)),
        }
    }

    fn id(&self) -> u64 {
        u64::from(self.respond.stream_id().as_u32())
    }
}
