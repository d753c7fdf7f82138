//! `--http`'s families in the exposition: requests by protocol, HTTP/2's and HTTP/3's
//! connections, resets and GOAWAYs, QUIC's connections and retries, backend connections
//! dropped or switched, retries, stalls.

use super::families::{counter, Enc};
use crate::counters::{HttpTotals, EARLY_OUTCOMES, H2_REASONS, QUIC_DROPS};

/// `--http`: requests by protocol, HTTP/2 connections, resets and GOAWAYs.
pub(super) fn http_metrics(enc: &mut Enc<'_>, h: &HttpTotals) -> std::fmt::Result {
    counter(
        enc,
        "shuck_http_requests",
        "HTTP mode: requests passed to backends, by the client's protocol.",
        &[
            (&[("protocol", "http/1.1")], h.requests_h1),
            (&[("protocol", "h2")], h.requests_h2),
            (&[("protocol", "h3")], h.h3.requests),
        ],
    )?;
    counter(
        enc,
        "shuck_quic_connections",
        "--quic: QUIC connections by stage (incoming: attempts taken; established: handshake done; failed: handshakes failed or timed out).",
        &[
            (&[("stage", "incoming")], h.h3.incoming),
            (&[("stage", "established")], h.h3.connections),
            (&[("stage", "failed")], h.h3.handshake_failures),
        ],
    )?;
    let resumed = h.h3.resumed.min(h.h3.connections);
    counter(
        enc,
        "shuck_quic_handshakes",
        "--quic: QUIC handshakes completed, by kind (full; resumed: a session resumed; 0rtt: of those, ones that sent requests in 0-RTT, --quic-early-data).",
        &[
            (&[("kind", "full")], h.h3.connections - resumed),
            (&[("kind", "resumed")], resumed),
            (&[("kind", "0rtt")], h.h3.zero_rtt),
        ],
    )?;
    counter(
        enc,
        "shuck_h3_early_requests",
        "--quic-early-data: HTTP/3 requests that came in 0-RTT, by outcome (passed: sent on with Early-Data: 1; waited: held until the handshake completed; retried: sent again after the backend's 425).",
        &[
            (&[("outcome", EARLY_OUTCOMES[0])], h.h3.early_requests[0]),
            (&[("outcome", EARLY_OUTCOMES[1])], h.h3.early_requests[1]),
            (&[("outcome", EARLY_OUTCOMES[2])], h.h3.early_requests[2]),
        ],
    )?;
    counter(
        enc,
        "shuck_quic_datagrams",
        "--quic: UDP datagrams of ended QUIC connections, by direction.",
        &[
            (&[("dir", "in")], h.h3.datagrams_in),
            (&[("dir", "out")], h.h3.datagrams_out),
        ],
    )?;
    counter(
        enc,
        "shuck_quic_packets_lost",
        "--quic: packets ended QUIC connections declared lost (and sent again).",
        &[(&[], h.h3.lost)],
    )?;
    let labels: Vec<[(&str, &str); 1]> = QUIC_DROPS.iter().map(|r| [("reason", *r)]).collect();
    let dropped: Vec<(&[(&str, &str)], u64)> = labels
        .iter()
        .zip(h.h3.dropped)
        .map(|(l, n)| (&l[..], n))
        .collect();
    counter(
        enc,
        "shuck_quic_dropped",
        "--quic: UDP datagrams (or QUIC packets within them) discarded, by reason (socket_buffer: the kernel's, the worker's receive buffer was full; the others QUIC's own).",
        &dropped,
    )?;
    counter(
        enc,
        "shuck_quic_migrations",
        "--quic: QUIC connections whose client address changed (NAT rebinding or migration).",
        &[(&[], h.h3.migrated)],
    )?;
    counter(
        enc,
        "shuck_quic_retries",
        "--quic: Retry packets sent (--quic-retry): new clients asked to prove their address first.",
        &[(&[], h.h3.retries)],
    )?;
    counter(
        enc,
        "shuck_h3_streams_reset",
        "HTTP/3 request streams reset before their answer was complete, by who reset them.",
        &[
            (&[("by", "client")], h.h3.resets_received),
            (&[("by", "shuck")], h.h3.resets_sent),
        ],
    )?;
    counter(
        enc,
        "shuck_h3_goaway",
        "HTTP/3 GOAWAYs sent (drain, reload, keep-alive timeout).",
        &[(&[], h.h3.goaway)],
    )?;
    counter(
        enc,
        "shuck_h2_connections",
        "HTTP mode: client connections served over HTTP/2.",
        &[(&[], h.h2_connections)],
    )?;
    counter(
        enc,
        "shuck_h2_streams_reset",
        "HTTP/2 streams reset before their answer was complete, by who reset them.",
        &[
            (&[("by", "client")], h.h2_resets_received),
            (&[("by", "shuck")], h.h2_resets_sent),
        ],
    )?;
    counter(
        enc,
        "shuck_http_backend_dropped",
        "HTTP mode: keep-alive backend connections dropped instead of reused, by why (stray_bytes: the backend wrote past a complete answer; closed_idle: it closed one while idle).",
        &[
            (&[("reason", "stray_bytes")], h.backend_stray),
            (&[("reason", "closed_idle")], h.backend_closed_idle),
        ],
    )?;
    counter(
        enc,
        "shuck_http_backend_switches",
        "HTTP mode with routes: HTTP/1.1 keep-alive connections moved to another backend by a request's Host or path.",
        &[(&[], h.backend_switches)],
    )?;
    counter(
        enc,
        "shuck_http_misdirected",
        "HTTP mode with routes: requests answered 421, their name not covered by the connection's certificate (an HTTP/1.1 connection ends with it).",
        &[(&[], h.misdirected)],
    )?;
    counter(
        enc,
        "shuck_http_retries",
        "HTTP mode: requests sent again on a new backend connection (idempotent, or not yet written, with nothing answered; or a gRPC status the backend's retry-on names).",
        &[(&[], h.retries)],
    )?;
    counter(
        enc,
        "shuck_http_stalled",
        "HTTP mode: exchanges ended for no progress within --http-stall-timeout, by the client's protocol (h2: the stream reset; http/1.1: the connection closed).",
        &[
            (&[("protocol", "http/1.1")], h.stalled_h1),
            (&[("protocol", "h2")], h.stalled_h2),
            (&[("protocol", "h3")], h.h3.stalled),
        ],
    )?;
    let labels: Vec<[(&str, &str); 1]> = H2_REASONS.iter().map(|r| [("reason", *r)]).collect();
    let rows: Vec<(&[(&str, &str)], u64)> = labels
        .iter()
        .zip(h.goaway)
        .map(|(l, n)| (&l[..], n))
        .collect();
    counter(
        enc,
        "shuck_h2_goaway",
        "HTTP/2 GOAWAY frames shuck sent, by error code (no_error: drain, reload, idle).",
        &rows,
    )
}
