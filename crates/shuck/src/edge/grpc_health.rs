//! `check-grpc[=SERVICE]`: gRPC's health service (`grpc.health.v1.Health/Check`) asked over
//! HTTP/2, as Envoy and HAProxy's gRPC checks do. The server passes when the call ends
//! with `grpc-status: 0` and answers `SERVING`; `NOT_SERVING`, an unknown service
//! (`NOT_FOUND`) or any other status fails it, and the reason is kept for the logs.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite};

/// The health service's method.
const PATH: &str = "/grpc.health.v1.Health/Check";

/// Longest answer read.
const MAX_ANSWER: usize = 4096;

/// Asks the server on `io` about `service`: `Ok` when it is `SERVING`.
pub async fn check<S>(io: S, host: &str, service: &str, tls: bool) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (send, conn) = h2::client::handshake(io)
        .await
        .map_err(|e| format!("HTTP/2: {e}"))?;
    let call = ask(send, host, service, tls);
    // The connection is driven beside the call; it ends once the call's handles are gone.
    tokio::select! {
        r = call => r,
        r = conn => Err(match r {
            Ok(()) => "the server closed the connection".into(),
            Err(e) => format!("HTTP/2: {e}"),
        }),
    }
}

async fn ask(
    send: h2::client::SendRequest<Bytes>,
    host: &str,
    service: &str,
    tls: bool,
) -> Result<(), String> {
    let mut send = send.ready().await.map_err(|e| format!("HTTP/2: {e}"))?;
    let scheme = if tls { "https" } else { "http" };
    let req = http::Request::post(format!("{scheme}://{host}{PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("user-agent", "shuck-check")
        .body(())
        .map_err(|e| e.to_string())?;
    let (answer, mut tx) = send
        .send_request(req, false)
        .map_err(|e| format!("HTTP/2: {e}"))?;
    tx.send_data(request(service), true)
        .map_err(|e| format!("HTTP/2: {e}"))?;
    let resp = answer.await.map_err(|e| format!("HTTP/2: {e}"))?;
    if resp.status() != http::StatusCode::OK {
        return Err(format!("status {}", resp.status()));
    }
    // A trailers-only answer carries its status in the head.
    let head_status = grpc_status(resp.headers());
    let mut body = resp.into_body();
    let mut got = BytesMut::new();
    while let Some(d) = body.data().await {
        let d = d.map_err(|e| format!("HTTP/2: {e}"))?;
        let _ = body.flow_control().release_capacity(d.len());
        got.extend_from_slice(&d);
        if got.len() > MAX_ANSWER {
            return Err("an answer longer than 4 KB".into());
        }
    }
    let trailers = body.trailers().await.map_err(|e| format!("HTTP/2: {e}"))?;
    let status = trailers.as_ref().and_then(grpc_status).or(head_status);
    match status {
        Some((0, _)) => {}
        Some((code, message)) => return Err(format!("grpc-status {code}: {message}")),
        None => return Err("no grpc-status".into()),
    }
    match serving(got.freeze()) {
        Some(1) => Ok(()),
        Some(2) => Err("NOT_SERVING".into()),
        Some(3) => Err("SERVICE_UNKNOWN".into()),
        Some(n) => Err(format!("serving status {n}")),
        None => Err("a malformed HealthCheckResponse".into()),
    }
}

/// `grpc-status` and `grpc-message` of a head or trailers.
fn grpc_status(h: &http::HeaderMap) -> Option<(u32, String)> {
    let code = h.get("grpc-status")?.to_str().ok()?.parse().ok()?;
    let message = h
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    Some((code, message))
}

/// One gRPC message (uncompressed, its length first) holding a `HealthCheckRequest` for
/// `service` (protobuf: field 1, a string).
fn request(service: &str) -> Bytes {
    let mut msg = Vec::with_capacity(service.len() + 3);
    if !service.is_empty() {
        msg.push(0x0a);
        let mut n = service.len();
        while n >= 0x80 {
            msg.push((n as u8) | 0x80);
            n >>= 7;
        }
        msg.push(n as u8);
        msg.extend_from_slice(service.as_bytes());
    }
    let mut framed = Vec::with_capacity(msg.len() + 5);
    framed.push(0);
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(&msg);
    Bytes::from(framed)
}

/// The `status` of a `HealthCheckResponse` in one gRPC message (field 1, a varint; fields
/// this does not know are skipped); `None` when it is not one.
fn serving(mut b: Bytes) -> Option<u64> {
    if b.len() < 5 || b.get_u8() != 0 {
        return None; // compressed, or no message
    }
    let len = b.get_u32() as usize;
    if b.len() != len {
        return None;
    }
    let mut status = 0; // protobuf's default: UNKNOWN
    while b.has_remaining() {
        let key = varint(&mut b)?;
        match key & 7 {
            0 => {
                let v = varint(&mut b)?;
                if key >> 3 == 1 {
                    status = v;
                }
            }
            2 => {
                let n = usize::try_from(varint(&mut b)?).ok()?;
                if b.len() < n {
                    return None;
                }
                b.advance(n);
            }
            _ => return None,
        }
    }
    Some(status)
}

fn varint(b: &mut Bytes) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        if !b.has_remaining() {
            return None;
        }
        let byte = b.get_u8();
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_protobufs_and_the_answer_is_read_as_it() {
        assert_eq!(&request("")[..], &[0, 0, 0, 0, 0]);
        assert_eq!(
            &request("a.B")[..],
            &[0, 0, 0, 0, 5, 0x0a, 3, b'a', b'.', b'B']
        );
        let long = "s".repeat(200);
        assert_eq!(&request(&long)[5..8], &[0x0a, 0xc8, 0x01]);
        let msg = |m: &[u8]| {
            let mut v = vec![0, 0, 0, 0, m.len() as u8];
            v.extend_from_slice(m);
            Bytes::from(v)
        };
        assert_eq!(serving(msg(&[0x08, 0x01])), Some(1));
        assert_eq!(serving(msg(&[0x08, 0x02])), Some(2));
        assert_eq!(serving(msg(&[])), Some(0));
        // An unknown field first, then the status.
        assert_eq!(serving(msg(&[0x12, 0x01, b'x', 0x08, 0x01])), Some(1));
        assert_eq!(serving(msg(&[0x08])), None);
        assert_eq!(serving(Bytes::from_static(&[1, 0, 0, 0, 0])), None);
        assert_eq!(serving(Bytes::from_static(&[0, 0, 0, 0, 9, 0x08])), None);
    }
}
