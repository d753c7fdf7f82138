//! The farm's client counts and bans through the store (`clients::farm`'s exchange): at
//! each interval this host's report, in pages sealed under the farm key, goes into hash
//! fields of its own (`PREFIX clients`, `HOST` and `HOST.N`, written in one `HSET`), and
//! every host's are read back, put together and charged. A report that
//! stops coming (a host gone) is dropped after a few intervals; a store that does not
//! answer leaves each host to its own counts, never a request waiting.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;

use super::stats::{Op, Outcome};
use super::SharedStore;
use crate::clients::farm::{Exchange, Page, Report, STALE_INTERVALS};
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
    // Pages this host wrote last time: those past this time's count are deleted.
    let mut written = 0usize;
    // Every host's last whole report, for a round that reads one torn.
    let mut whole: HashMap<u64, Report> = HashMap::new();
    // Fields already said not to open (said once each, counted each time).
    let mut said: HashSet<String> = HashSet::new();
    loop {
        tick.tick().await;
        let now = crate::clock::unix_ms();
        let report = exchange.report(&clients, clients.bans.local(), now);
        let pages = report.pages();
        let mut put = redis::cmd("HSET");
        put.arg(&hash);
        let mut sealed_all = true;
        for p in &pages {
            let f = page_field(&field, p.index);
            let name = format!("{hash}:{f}");
            match store.sealer.seal(name.as_bytes(), &p.encode()) {
                Some(v) => {
                    put.arg(f).arg(v);
                }
                None => sealed_all = false,
            }
        }
        let put: Result<(), String> = if sealed_all {
            put.query_async(&mut conn).await.map_err(|e| e.to_string())
        } else {
            Err("no randomness to seal the report with".into())
        };
        match put {
            Ok(()) => store.stats.count(Op::ClientsWrite, Outcome::Ok),
            Err(e) => {
                store.stats.count(Op::ClientsWrite, Outcome::Error);
                tracing::warn!(
                    name: "clients_share_failed",
                    error = %e,
                    pages = pages.len(),
                    "this host's client counts and bans not shared with the farm: {e}",
                );
                continue;
            }
        }
        if written > pages.len() {
            let old: Vec<String> = (pages.len()..written)
                .map(|i| page_field(&field, i as u16))
                .collect();
            let _: Result<(), _> = redis::cmd("HDEL")
                .arg(&hash)
                .arg(&old)
                .query_async(&mut conn)
                .await;
        }
        written = pages.len();
        let all: Result<HashMap<String, Vec<u8>>, _> = redis::cmd("HGETALL")
            .arg(&hash)
            .query_async(&mut conn)
            .await;
        let all = match all {
            Ok(a) => a,
            Err(e) => {
                store.stats.count(Op::ClientsRead, Outcome::Error);
                tracing::warn!(
                    name: "clients_share_failed",
                    error = %e,
                    "the farm's client counts and bans not read: {e}",
                );
                continue;
            }
        };
        store.stats.count(Op::ClientsRead, Outcome::Ok);
        let mut by_host: HashMap<u64, Vec<Page>> = HashMap::new();
        let mut gone = Vec::new();
        for (f, sealed) in all {
            let name = format!("{hash}:{f}");
            let Some(p) = store
                .sealer
                .open(name.as_bytes(), &sealed)
                .and_then(|plain| Page::decode(&plain))
            else {
                // Another farm's under the same prefix, a report of an older shuck, or a
                // value tampered with: left alone, but not in silence.
                store.stats.count(Op::ClientsRead, Outcome::Unsealed);
                if said.len() < 1024 && said.insert(f.clone()) {
                    tracing::warn!(
                        name: "clients_share_unreadable",
                        field = %f,
                        bytes = sealed.len(),
                        "a farm report in {hash} does not open under this farm's key (another farm's, an older version's, or altered): ignored",
                    );
                }
                continue;
            };
            if now.saturating_sub(p.at_ms) > stale_ms {
                gone.push(f);
            } else {
                by_host.entry(p.host).or_default().push(p);
            }
        }
        if !gone.is_empty() {
            let _: Result<(), _> = redis::cmd("HDEL")
                .arg(&hash)
                .arg(&gone)
                .query_async(&mut conn)
                .await;
        }
        let mut reports = Vec::with_capacity(by_host.len());
        for (host, pages) in by_host {
            match Report::assemble(pages) {
                Some(r) => {
                    whole.insert(host, r.clone());
                    reports.push(r);
                }
                // Pages of two reports (read while the host wrote, or a page lost): its
                // last whole one stands in, so its bans never blink out.
                None => {
                    store.stats.count(Op::ClientsRead, Outcome::Miss);
                    if let Some(r) = whole.get(&host) {
                        reports.push(r.clone());
                    }
                }
            }
        }
        whole.retain(|_, r| now.saturating_sub(r.at_ms) <= stale_ms);
        let bans = exchange.hear(&clients, &reports);
        clients.set_farm_bans(&bans);
    }
}

/// The hash field of a host's page: its name for the first, `NAME.N` for the others.
fn page_field(host: &str, index: u16) -> String {
    if index == 0 {
        host.to_owned()
    } else {
        format!("{host}.{index}")
    }
}
