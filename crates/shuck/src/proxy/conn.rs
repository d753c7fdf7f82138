//! One connection's life, top to bottom as in DESIGN.md:
//! admit → handshake → connect → relay → close.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use super::handshake::handshake;
use super::relay::{relay, RelayEnd};
use super::Worker;
use crate::metrics::WorkerCounters;
use rustls::HandshakeKind;

/// Keeps the worker's live count right however the connection ends (including a task
/// dropped at the drain deadline).
struct LiveGuard<'a>(&'a Worker);

impl Drop for LiveGuard<'_> {
    fn drop(&mut self) {
        self.0.conn_closed();
    }
}

/// Serves one accepted client connection. `_permit` is the `--max-conns` slot, released
/// when the connection ends.
pub async fn serve(
    worker: Rc<Worker>,
    tcp: TcpStream,
    peer: SocketAddr,
    _permit: Option<OwnedSemaphorePermit>,
) {
    worker.conn_opened();
    let _live = LiveGuard(&worker);
    let counters = &worker.counters;
    WorkerCounters::bump(&counters.accepted);
    let state = &worker.state;
    let limits = &state.limits;
    let started = Instant::now();

    // admit
    if let Err(e) = admit(&tcp, limits.keepalive) {
        tracing::debug!(client = %peer, error = %e, "cannot set socket options");
    }

    // handshake: boxed, because its state (ClientHello acceptor and mid-handshake stream,
    // ~3 KB) would otherwise stay reserved in this task for the connection's whole life.
    let mut tls = match Box::pin(handshake(tcp, &state.tls, limits.handshake_timeout)).await {
        Ok(s) => s,
        Err(e) => {
            WorkerCounters::bump(&counters.handshakes_failed);
            tracing::debug!(client = %peer, error = %e, "handshake failed");
            return;
        }
    };
    let resumed = tls.get_ref().1.handshake_kind() == Some(HandshakeKind::Resumed);
    WorkerCounters::bump(if resumed {
        &counters.handshakes_resumed
    } else {
        &counters.handshakes_full
    });

    // connect
    let mut backend = match Box::pin(state.backend.connect(limits.connect_timeout)).await {
        Ok(b) => b,
        Err(e) => {
            WorkerCounters::bump(&counters.backend_failures);
            tracing::warn!(client = %peer, backend = %state.backend, error = %e, "backend connection failed");
            // close_notify, then FIN: the client learns at once that nothing will come.
            let _ = tls.shutdown().await;
            return;
        }
    };

    // relay
    let out = relay(&mut tls, &mut backend, limits.idle_timeout, &worker.scratch).await;

    // close
    if let RelayEnd::Error(side, e) = &out.end {
        tracing::debug!(client = %peer, ?side, error = %e, "connection ended by an error");
    }
    if state.log_connections {
        let (_, conn) = tls.get_ref();
        tracing::info!(
            worker = worker.id,
            client = %peer,
            backend = %state.backend,
            sni = conn.server_name().unwrap_or("-"),
            version = match conn.protocol_version() {
                Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
                Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
                _ => "-",
            },
            handshake = if resumed { "resumed" } else { "full" },
            bytes_in = out.client_to_backend,
            bytes_out = out.backend_to_client,
            ms = started.elapsed().as_millis() as u64,
            end = ?out.end,
            "connection closed"
        );
    }
}

/// Socket options on the client side: no Nagle (small responses must not wait for an ACK),
/// and keepalive so that dead clients are eventually noticed.
fn admit(tcp: &TcpStream, keepalive: Option<std::time::Duration>) -> std::io::Result<()> {
    tcp.set_nodelay(true)?;
    if let Some(idle) = keepalive {
        let ka = socket2::TcpKeepalive::new().with_time(idle);
        socket2::SockRef::from(tcp).set_tcp_keepalive(&ka)?;
    }
    Ok(())
}
