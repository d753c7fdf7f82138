//! The receiving side of replication: one thread that opens each datagram, checks its
//! seal and freshness, and applies its records to the cache and the ticket ring (or hands a
//! peer's request to the sender).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::SyncSender;
use std::time::Duration;

use super::send::Outgoing;
use super::wire::{self, Record, Reject};
use super::{replay, Shared, MAX_SENDERS, POLL};
use crate::clock::unix_ms;

/// Receives until the stop flag is set.
pub(super) fn receive_loop(shared: &Shared, answers: SyncSender<Outgoing>, window_ms: u64) {
    let mut fresh = replay::Freshness::new(window_ms, MAX_SENDERS);
    // One byte more than the largest datagram accepted, so an oversized one is seen as such.
    let mut buf = vec![0u8; 65536];
    let mut scratch = Vec::new();
    while !shared.stop.load(Relaxed) {
        let (n, from) = match shared.sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(
                    name: "replication_receive_failed",
                    error = %e,
                    "replication: receive failed",
                );
                std::thread::sleep(POLL);
                continue;
            }
        };
        if let Err(reason) = accept(
            shared,
            &mut fresh,
            &mut buf[..n],
            from,
            &answers,
            &mut scratch,
        ) {
            let count = shared.stats.dropped[reason.index()].fetch_add(1, Relaxed);
            // Own multicast loops back on every send: not worth a line.
            if reason != Reject::Own && count % 1000 == 0 {
                tracing::warn!(
                    name: "replication_dropped",
                    from = %from,
                    reason = %reason,
                    "replication: datagram dropped",
                );
            }
        }
    }
}

/// Opens, checks and applies one datagram.
fn accept(
    shared: &Shared,
    fresh: &mut replay::Freshness,
    datagram: &mut [u8],
    from: SocketAddr,
    answers: &SyncSender<Outgoing>,
    keys: &mut Vec<wire::SharedKey>,
) -> Result<(), Reject> {
    let (header, plain) = shared.sealer.open(datagram, &shared.id)?;
    fresh.check(&header, unix_ms())?;
    // Check every record before applying any, so a datagram is taken whole or not at all.
    if wire::records(plain).any(|r| r.is_err()) {
        return Err(Reject::Malformed);
    }
    let s = &shared.stats;
    s.received.fetch_add(1, Relaxed);
    for record in wire::records(plain).flatten() {
        match record {
            Record::New { key, age_ms, value } => {
                if let Some(c) = &shared.cache {
                    let age = Duration::from_millis(u64::from(age_ms));
                    if c.insert_replicated(key.to_vec(), value.to_vec(), age) {
                        s.received_new.fetch_add(1, Relaxed);
                    }
                }
            }
            Record::Del { key } => {
                if let Some(c) = &shared.cache {
                    if c.remove_replicated(key) {
                        s.received_del.fetch_add(1, Relaxed);
                    }
                }
            }
            Record::Keys(body) => {
                if let Some(t) = &shared.tickets {
                    keys.clear();
                    keys.extend(wire::keys(body));
                    let added = t.merge(keys);
                    s.received_keys.fetch_add(added as u64, Relaxed);
                }
            }
            Record::Request { flags } => {
                s.requests.fetch_add(1, Relaxed);
                let _ = answers.try_send(Outgoing::Answer { to: from, flags });
            }
            Record::Farm(body) => {
                if let Some(f) = &shared.farm_in {
                    s.received_farm.fetch_add(1, Relaxed);
                    f(body);
                }
            }
            Record::Unknown(_) => {}
        }
    }
    Ok(())
}
