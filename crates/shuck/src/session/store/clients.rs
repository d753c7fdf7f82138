//! The farm's client counts and bans through the store (`clients::farm`'s exchange): at
//! each interval this host's report, sealed under the farm key, goes into one hash field of
//! its own (`PREFIX clients`), and every host's are read back and charged. A report that
//! stops coming (a host gone) is dropped after a few intervals; a store that does not
//! answer leaves each host to its own counts, never a request waiting.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;

use super::SharedStore;
use crate::clients::farm::{Exchange, Report, STALE_INTERVALS};
use crate::clients::Clients;

/// Exchanges `clients`' counts with the farm every `every` until aborted.
pub(super) async fn share(
    store: Arc<SharedStore>,
    mut conn: ConnectionManager,
    clients: Arc<Clients>,
    every: Duration,
) {
    let mut id = [0u8; 8];
    let _ = aws_lc_rs::rand::fill(&mut id);
    let mut exchange = Exchange::new(u64::from_be_bytes(id));
    let hash = format!("{}clients", store.settings.prefix);
    let field = format!("{:016x}", exchange.host());
    let stale_ms = (every.as_millis() as u64 * STALE_INTERVALS).max(5_000);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = crate::clock::unix_ms();
        let report = exchange.report(&clients, clients.bans.local(), now);
        let name = format!("{hash}:{field}");
        if let Some(sealed) = store.sealer.seal(name.as_bytes(), &report.encode()) {
            let put: Result<(), _> = redis::cmd("HSET")
                .arg(&hash)
                .arg(&field)
                .arg(sealed)
                .query_async(&mut conn)
                .await;
            if let Err(e) = put {
                tracing::debug!(name: "clients_share_failed", error = %e, "client counts not shared: {e}");
                continue;
            }
        }
        let all: Result<HashMap<String, Vec<u8>>, _> = redis::cmd("HGETALL")
            .arg(&hash)
            .query_async(&mut conn)
            .await;
        let Ok(all) = all else {
            continue;
        };
        let mut reports = Vec::with_capacity(all.len());
        let mut gone = Vec::new();
        for (f, sealed) in all {
            let name = format!("{hash}:{f}");
            let Some(r) = store
                .sealer
                .open(name.as_bytes(), &sealed)
                .and_then(|plain| Report::decode(&plain))
            else {
                // Not sealed under this farm's key: another farm's, left alone.
                continue;
            };
            if now.saturating_sub(r.at_ms) > stale_ms {
                gone.push(f);
            } else {
                reports.push(r);
            }
        }
        if !gone.is_empty() {
            let _: Result<(), _> = redis::cmd("HDEL")
                .arg(&hash)
                .arg(&gone)
                .query_async(&mut conn)
                .await;
        }
        let bans = exchange.hear(&clients, &reports);
        clients.set_farm_bans(&bans);
    }
}
