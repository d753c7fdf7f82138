//! How a stream's exchange with its backend ended, shared by the request's side
//! (`stream.rs`), the answer's (`answer.rs`) and a tunnel's (`tunnel.rs`).

use tokio::io::AsyncWriteExt;

use super::backends::BackendConn;
use super::response::BadAnswer;
use super::Gateway;
use crate::counters::WorkerCounters;

/// Why a stream's exchange ended before the answer's head went to the client.
#[derive(Debug, thiserror::Error)]
pub(super) enum End {
    /// The client reset the stream (or the connection went).
    #[error("the client reset the stream")]
    ClientReset,
    /// A reused connection that the backend had closed: nothing was answered.
    #[error("the backend closed the connection without an answer")]
    Stale,
    /// The backend's answer cannot be passed on (`502`).
    #[error(transparent)]
    Bad(BadAnswer),
    /// The backend went silent past `--idle-timeout` (`504`).
    #[error("no answer within --idle-timeout")]
    Timeout,
    /// Writing to or reading from the backend failed (`502`).
    #[error("backend connection: {0}")]
    Write(std::io::Error),
}

/// How a stream's answer ended once its head was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Done {
    /// Completely, and the backend connection may carry the next stream.
    Reusable,
    /// The backend connection is not reusable (closed framing, a tunnel, a reset).
    Close,
}

/// The client reset the stream: counted, and against the reset limit.
pub(super) fn client_reset(gw: &Gateway) {
    WorkerCounters::bump(&gw.worker.counters.http.h2_resets_received);
    gw.resets.hit();
}

/// Writes the request head; a reused connection that fails here was closed while idle.
pub(super) async fn write_head(conn: &mut BackendConn, head: &[u8]) -> Result<(), End> {
    match conn.tcp.write_all(head).await {
        Ok(()) => Ok(()),
        Err(_) if conn.reused => Err(End::Stale),
        Err(e) => Err(End::Write(e)),
    }
}
