//! The Prometheus exposition of `--stats`: every counter, read at scrape time.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;

use super::families::{as_i64, counter, gauge, gauge_by_name, Enc};
use super::http_metrics::http_metrics;
use super::Sources;
use crate::backend::Server;
use crate::counters::{FrontendTotals, SHORTAGES};
use crate::session::store::stats::{Op, Outcome, StoreStats};
use crate::session::sync::wire::Reject;

/// A TLS alert's name in snake case (`handshake_failure`).
pub fn alert_name(code: u8) -> String {
    let camel = format!("{:?}", rustls::AlertDescription::from(code));
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() {
            out.push(c);
        }
    }
    out
}

/// `--shared-store`: operations by kind and result, reachability, lookup latency.
fn store_metrics(enc: &mut Enc<'_>, stats: &StoreStats) -> std::fmt::Result {
    let pairs: Vec<(Op, Outcome)> = Op::ALL
        .iter()
        .flat_map(|&op| Outcome::ALL.iter().map(move |&o| (op, o)))
        .collect();
    let labels: Vec<[(&str, &str); 2]> = pairs
        .iter()
        .map(|(op, o)| [("op", op.name()), ("result", o.name())])
        .collect();
    let rows: Vec<(&[(&str, &str)], u64)> = labels
        .iter()
        .zip(&pairs)
        .map(|(l, &(op, o))| (&l[..], stats.get(op, o)))
        .collect();
    counter(
        enc,
        "shuck_store_operations",
        "Shared store operations by kind (get, take, put, ring_read, ring_write, lock) and result.",
        &rows,
    )?;
    gauge(
        enc,
        "shuck_store_up",
        "1 while the shared store answers, 0 while it is unreachable.",
        &[(&[], as_i64(stats.up.load(Relaxed)))],
    )?;
    let (sum, count, buckets) = stats.latency();
    let m = enc.encode_descriptor(
        "shuck_store_lookup_seconds",
        "How long handshakes waited for shared store lookups.",
        None,
        MetricType::Histogram,
    )?;
    Latency {
        sum,
        count,
        buckets,
    }
    .encode(m)
}

/// `--client-*`: refusals by reason, and the client table's fill and evictions.
fn client_metrics(enc: &mut Enc<'_>, clients: &crate::clients::Clients) -> std::fmt::Result {
    use crate::clients::Reason;
    let labels: Vec<[(&str, &str); 1]> =
        Reason::ALL.iter().map(|r| [("reason", r.name())]).collect();
    let rows: Vec<(&[(&str, &str)], u64)> = labels
        .iter()
        .zip(clients.refused())
        .map(|(l, n)| (&l[..], n))
        .collect();
    counter(
        enc,
        "shuck_client_refused",
        "Client connections and requests refused, by reason (conn_limit, conn_rate, request_rate, deny, ban).",
        &rows,
    )?;
    let Some(t) = clients.table_if_made() else {
        return Ok(());
    };
    gauge(
        enc,
        "shuck_client_table_entries",
        "Clients tracked in the client table.",
        &[(&[], as_i64(t.len()))],
    )?;
    gauge(
        enc,
        "shuck_client_table_capacity",
        "Clients the table holds at most (--client-table-size, rounded up).",
        &[(&[], as_i64(t.capacity() as u64))],
    )?;
    counter(
        enc,
        "shuck_client_table_evictions",
        "Clients pushed out of a full table by a new one (the least active of its set).",
        &[(&[], t.evictions())],
    )
}

/// A histogram read at scrape time.
struct Latency {
    sum: f64,
    count: u64,
    buckets: Vec<(f64, u64)>,
}

impl EncodeMetric for Latency {
    fn encode(&self, mut encoder: prometheus_client::encoding::MetricEncoder) -> std::fmt::Result {
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            self.sum,
            self.count,
            &self.buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// The `--stats` collector: reads every counter at scrape time.
#[derive(Debug)]
pub struct Exposition(pub Arc<Sources>);

impl prometheus_client::collector::Collector for Exposition {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let sources = &self.0;
        let t = sources.counters.totals();
        let names = sources
            .frontends
            .lock()
            .map(|n| n.clone())
            .unwrap_or_default();
        let fe: Vec<[(&str, &str); 1]> = names.iter().map(|n| [("frontend", n.as_str())]).collect();
        let per_fe = |col: fn(&FrontendTotals) -> u64| -> Vec<(&[(&str, &str)], u64)> {
            fe.iter()
                .zip(&t.frontends)
                .map(|(l, row)| (&l[..], col(row)))
                .collect()
        };
        counter(
            &mut enc,
            "shuck_connections_accepted",
            "Client connections accepted.",
            &per_fe(|f| f.accepted),
        )?;
        let active: Vec<(&[(&str, &str)], i64)> = fe
            .iter()
            .zip(&t.frontends)
            .map(|(l, row)| (&l[..], as_i64(row.active())))
            .collect();
        gauge(
            &mut enc,
            "shuck_connections_active",
            "Client connections open now.",
            &active,
        )?;
        counter(
            &mut enc,
            "shuck_connections_refused",
            "Connections closed after the handshake because no backend would take them.",
            &per_fe(|f| f.refused),
        )?;
        counter(
            &mut enc,
            "shuck_bytes_received",
            "Plaintext bytes from clients to backends (counted when a connection closes).",
            &per_fe(|f| f.bytes_in),
        )?;
        counter(
            &mut enc,
            "shuck_bytes_sent",
            "Plaintext bytes from backends to clients (counted when a connection closes).",
            &per_fe(|f| f.bytes_out),
        )?;
        counter(
            &mut enc,
            "shuck_handshakes",
            "Completed TLS handshakes, full or resumed.",
            &[
                (&[("kind", "full")], t.handshakes_full),
                (&[("kind", "resumed")], t.handshakes_resumed),
            ],
        )?;
        let tls = &sources.resumption;
        let cache = tls.cache.as_ref().map(|c| c.stats()).unwrap_or_default();
        let ticket_hits = tls
            .tickets
            .as_ref()
            .map_or(0, |k| k.stats.accepted.load(Relaxed));
        counter(
            &mut enc,
            "shuck_resumptions",
            "Sessions found for resumption: in the session cache, or in a ticket that decrypted.",
            &[
                (&[("by", "cache")], cache.hits),
                (&[("by", "ticket")], ticket_hits),
            ],
        )?;
        let names: Vec<String> = t.alerts.iter().map(|(a, _, _)| alert_name(*a)).collect();
        let mut failed: Vec<(Vec<(&str, &str)>, u64)> = t
            .failed_by
            .iter()
            .map(|(r, n)| (vec![("reason", r.name())], *n))
            .collect();
        for ((_, sent, received), name) in t.alerts.iter().zip(&names) {
            if *sent > 0 {
                failed.push((
                    vec![("reason", "alert_sent"), ("alert", name.as_str())],
                    *sent,
                ));
            }
            if *received > 0 {
                failed.push((
                    vec![("reason", "alert_received"), ("alert", name.as_str())],
                    *received,
                ));
            }
        }
        let rows: Vec<(&[(&str, &str)], u64)> = failed.iter().map(|(l, n)| (&l[..], *n)).collect();
        counter(
            &mut enc,
            "shuck_handshakes_failed",
            "Failed TLS handshakes, by reason (and TLS alert).",
            &rows,
        )?;
        counter(
            &mut enc,
            "shuck_backend_connect_failures",
            "Connections for which no backend could be reached (shuck's own shortages are counted apart).",
            &[(&[], t.backend_failures)],
        )?;
        let labels: Vec<[(&str, &str); 1]> = SHORTAGES.iter().map(|k| [("kind", *k)]).collect();
        let rows: Vec<(&[(&str, &str)], u64)> = labels
            .iter()
            .zip(t.local_shortages)
            .map(|(l, n)| (&l[..], n))
            .collect();
        counter(
            &mut enc,
            "shuck_local_resource_errors",
            "Accepts and backend connections that failed for shuck's own shortage (descriptors, buffers, memory, local ports), by errno; no server is marked down for them.",
            &rows,
        )?;
        if sources.state.http.is_some() {
            http_metrics(&mut enc, &t.http)?;
        }
        client_metrics(&mut enc, &sources.state.clients)?;
        if let Some(log) = &sources.state.access {
            counter(
                &mut enc,
                "shuck_access_log_dropped",
                "Access log lines lost because the sink did not keep up or failed (--access-log).",
                &[(&[], log.dropped())],
            )?;
        }

        if tls.cache.is_some() {
            gauge(
                &mut enc,
                "shuck_session_cache_entries",
                "Sessions in the cache.",
                &[(&[], as_i64(cache.entries as u64))],
            )?;
            counter(
                &mut enc,
                "shuck_session_cache_hits",
                "Cache lookups that found a live session.",
                &[(&[], cache.hits)],
            )?;
            counter(
                &mut enc,
                "shuck_session_cache_misses",
                "Cache lookups that found nothing.",
                &[(&[], cache.misses)],
            )?;
            counter(
                &mut enc,
                "shuck_session_cache_evictions",
                "Sessions pushed out by the size bound.",
                &[(&[], cache.evictions)],
            )?;
            counter(
                &mut enc,
                "shuck_session_cache_stores",
                "Sessions stored.",
                &[(&[], cache.stores)],
            )?;
        }
        if let Some(k) = &tls.tickets {
            counter(
                &mut enc,
                "shuck_tickets",
                "Session tickets issued, accepted and refused.",
                &[
                    (&[("event", "issued")], k.stats.issued.load(Relaxed)),
                    (&[("event", "accepted")], k.stats.accepted.load(Relaxed)),
                    (&[("event", "refused")], k.stats.refused.load(Relaxed)),
                ],
            )?;
        }
        if let Some(s) = &sources.replication {
            counter(
                &mut enc,
                "shuck_replication_sent",
                "Replication: datagrams sent, and records by type.",
                &[
                    (&[("what", "datagrams")], s.sent_datagrams.load(Relaxed)),
                    (&[("what", "new")], s.sent_new.load(Relaxed)),
                    (&[("what", "del")], s.sent_del.load(Relaxed)),
                    (&[("what", "keys")], s.sent_keys.load(Relaxed)),
                ],
            )?;
            counter(
                &mut enc,
                "shuck_replication_received",
                "Replication: datagrams accepted, and records applied by type.",
                &[
                    (&[("what", "datagrams")], s.received.load(Relaxed)),
                    (&[("what", "new")], s.received_new.load(Relaxed)),
                    (&[("what", "del")], s.received_del.load(Relaxed)),
                    (&[("what", "keys")], s.received_keys.load(Relaxed)),
                    (&[("what", "requests")], s.requests.load(Relaxed)),
                ],
            )?;
            let mut dropped: Vec<(Vec<(&str, &str)>, u64)> = Reject::ALL
                .iter()
                .map(|r| (vec![("reason", r.name())], s.dropped(*r)))
                .collect();
            dropped.push((vec![("reason", "queue_full")], s.queue_full.load(Relaxed)));
            dropped.push((vec![("reason", "too_large")], s.too_large.load(Relaxed)));
            dropped.push((vec![("reason", "send_error")], s.send_errors.load(Relaxed)));
            let rows: Vec<(&[(&str, &str)], u64)> =
                dropped.iter().map(|(l, n)| (&l[..], *n)).collect();
            counter(
                &mut enc,
                "shuck_replication_dropped",
                "Replication: datagrams dropped on receipt by reason, and records not sent.",
                &rows,
            )?;
        }
        if let Some(store) = &sources.resumption.store {
            store_metrics(&mut enc, &store.stats)?;
        }
        let routing = sources.state.routing.load();
        let servers: Vec<(&str, &Arc<Server>)> = routing
            .backends()
            .iter()
            .flat_map(|b| b.pool.servers().iter().map(|s| (&*b.name, s)))
            .collect();
        let labels: Vec<[(&str, &str); 2]> = servers
            .iter()
            .map(|(b, s)| [("backend", *b), ("server", s.name())])
            .collect();
        let servers: Vec<&Arc<Server>> = servers.into_iter().map(|(_, s)| s).collect();
        let servers = &servers[..];
        let rows = |f: &dyn Fn(&Server) -> u64| -> Vec<(&[(&str, &str)], i64)> {
            labels
                .iter()
                .zip(servers)
                .map(|(l, s)| (&l[..], as_i64(f(s))))
                .collect()
        };
        gauge(
            &mut enc,
            "shuck_backend_up",
            "1 if the server is up, 0 while marked down.",
            &rows(&|s| u64::from(!s.is_down())),
        )?;
        gauge(
            &mut enc,
            "shuck_backend_active",
            "Connections open to the server.",
            &rows(&|s| s.stats.active.load(Relaxed) as u64),
        )?;
        gauge(
            &mut enc,
            "shuck_backend_admin_state",
            "The operator's state of the server (admin API): 0 ready, 1 drain, 2 maint.",
            &rows(&|s| s.admin() as u64),
        )?;
        gauge(
            &mut enc,
            "shuck_backend_weight",
            "The server's weight (the admin API may change it).",
            &rows(&|s| u64::from(s.weight())),
        )?;
        gauge(
            &mut enc,
            "shuck_backend_queued",
            "Connections waiting in the server's queue.",
            &rows(&|s| s.stats.queued.load(Relaxed) as u64),
        )?;
        let crow = |f: &dyn Fn(&Server) -> u64| -> Vec<(&[(&str, &str)], u64)> {
            labels
                .iter()
                .zip(servers)
                .map(|(l, s)| (&l[..], f(s)))
                .collect()
        };
        counter(
            &mut enc,
            "shuck_backend_connections",
            "Connections given to the server.",
            &crow(&|s| s.stats.opened.load(Relaxed)),
        )?;
        counter(
            &mut enc,
            "shuck_backend_queue_timeouts",
            "Connections that waited too long in the queue.",
            &crow(&|s| s.stats.queue_timeouts.load(Relaxed)),
        )?;
        counter(
            &mut enc,
            "shuck_backend_connect_failures_by_server",
            "Failed connection attempts to the server.",
            &crow(&|s| s.stats.connect_failures.load(Relaxed)),
        )?;
        // Servers with an active health check: their state by it, and its results.
        let checked: Vec<(&[(&str, &str)], &Server)> = labels
            .iter()
            .zip(servers)
            .filter(|(_, s)| s.check.is_some())
            .map(|(l, s)| (&l[..], &***s))
            .collect();
        if !checked.is_empty() {
            let up: Vec<(&[(&str, &str)], i64)> = checked
                .iter()
                .map(|(l, s)| (*l, i64::from(!s.is_check_down())))
                .collect();
            gauge(
                &mut enc,
                "shuck_backend_check_up",
                "1 while the server passes its health checks (rise), 0 once it failed fall in a row.",
                &up,
            )?;
            let mut results: Vec<Vec<(&str, &str)>> = Vec::new();
            let mut values = Vec::new();
            for (l, s) in &checked {
                if let Some((_, st)) = &s.check {
                    for (result, n) in [("passed", &st.passed), ("failed", &st.failed)] {
                        let mut labels = l.to_vec();
                        labels.push(("result", result));
                        results.push(labels);
                        values.push(n.load(Relaxed));
                    }
                }
            }
            let rows: Vec<(&[(&str, &str)], u64)> = results
                .iter()
                .zip(values)
                .map(|(l, n)| (&l[..], n))
                .collect();
            counter(
                &mut enc,
                "shuck_backend_checks",
                "Health checks of the server, by result.",
                &rows,
            )?;
        }
        counter(
            &mut enc,
            "shuck_backend_tls_failures",
            "TLS to the backend: handshakes with the server that failed (its certificate refused, or no handshake in time); each marks it down.",
            &crow(&|s| s.stats.handshake_failures.load(Relaxed)),
        )?;
        let plain = &sources.plain;
        if plain.listening() {
            let [redirect, acme, bad, refused] = plain.counts();
            counter(
                &mut enc,
                "shuck_redirect_answers",
                "The plain-HTTP listener's answers (--redirect-listen), by kind: a redirect to https, an ACME http-01 answer, a request refused (no usable Host, malformed, 429).",
                &[
                    (&[("kind", "redirect")], redirect),
                    (&[("kind", "acme")], acme),
                    (&[("kind", "refused")], bad),
                ],
            )?;
            counter(
                &mut enc,
                "shuck_redirect_clients_refused",
                "Connections and requests to the plain-HTTP listener refused by the client's bans, rules or limits.",
                &[(&[], refused)],
            )?;
        }
        if let Some(acme) = &sources.acme {
            let st = acme.lock().map(|s| s.clone()).unwrap_or_default();
            counter(
                &mut enc,
                "shuck_acme_orders",
                "ACME orders, by result (ok: a certificate issued; failed: retried with backoff).",
                &[
                    (&[("result", "ok")], st.orders_ok),
                    (&[("result", "failed")], st.orders_failed),
                ],
            )?;
            let next: Vec<(String, i64)> =
                st.next.into_iter().map(|(n, t)| (n, as_i64(t))).collect();
            gauge_by_name(
                &mut enc,
                "shuck_acme_next_renewal_seconds",
                "When the ACME certificate (by its first name) is ordered next: its renewal, or the next attempt after a failure (unix seconds).",
                &next,
            )?;
        }
        gauge_by_name(
            &mut enc,
            "shuck_certificate_not_after_seconds",
            "When the certificate served for the name expires (unix seconds; the earliest, when several certificates serve one name).",
            &certificate_expiry(sources),
        )?;
        Ok(())
    }
}

/// Every certificate the live frontends serve, by its first name (its first DNS
/// subjectAltName, else its common name), with the earliest expiry per name; read at
/// scrape time from the TLS state each frontend serves now, so reloads show at once.
fn certificate_expiry(sources: &Sources) -> Vec<(String, i64)> {
    let served = sources.served.lock().map(|s| s.clone()).unwrap_or_default();
    let mut out: std::collections::BTreeMap<String, i64> = Default::default();
    for fe in served {
        let tls = fe.tls.load();
        for key in tls.resolver.all() {
            let Some(leaf) = key.end_entity_cert().ok() else {
                continue;
            };
            let Ok((names, Some(not_after))) = crate::tls::pem::leaf_facts(leaf) else {
                continue;
            };
            let secs = not_after
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| as_i64(d.as_secs()));
            let name = names.into_iter().next().unwrap_or_else(|| "-".into());
            out.entry(name)
                .and_modify(|t| *t = (*t).min(secs))
                .or_insert(secs);
        }
    }
    out.into_iter().collect()
}

/// The text exposition of everything, as `/metrics` serves it.
pub fn render(sources: &Arc<Sources>) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Exposition(sources.clone())));
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        out.clear();
    }
    out
}
