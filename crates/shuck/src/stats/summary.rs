//! The one log line that sums every counter: at debug level every few seconds, and at
//! info level when shuck stops.

use std::sync::atomic::Ordering::Relaxed;

use super::Sources;
use crate::session::sync::wire::Reject;

/// One log line with every counter: handshakes, the session cache, tickets, backends.
pub fn summary(sources: &Sources) -> String {
    let tls = &sources.resumption;
    let t = sources.counters.totals();
    let mut line = format!(
        "connections accepted={} handshakes full={} resumed={} failed={} backend_failures={}",
        t.accepted,
        t.handshakes_full,
        t.handshakes_resumed,
        t.handshakes_failed,
        t.backend_failures
    );
    if let Some(c) = &tls.cache {
        let s = c.stats();
        line.push_str(&format!(
            "; session cache entries={} stores={} hits={} misses={} evictions={} expirations={}",
            s.entries, s.stores, s.hits, s.misses, s.evictions, s.expirations
        ));
    }
    if let Some(k) = &tls.tickets {
        line.push_str(&format!(
            "; tickets issued={} resumed={} refused={}",
            k.stats.issued.load(Relaxed),
            k.stats.accepted.load(Relaxed),
            k.stats.refused.load(Relaxed)
        ));
    }
    if let Some(s) = &sources.replication {
        line.push_str(&format!(
            "; replication sent datagrams={} new={} del={} keys={} queue_full={} too_large={} send_errors={} received datagrams={} new={} del={} keys={} requests={} dropped",
            s.sent_datagrams.load(Relaxed),
            s.sent_new.load(Relaxed),
            s.sent_del.load(Relaxed),
            s.sent_keys.load(Relaxed),
            s.queue_full.load(Relaxed),
            s.too_large.load(Relaxed),
            s.send_errors.load(Relaxed),
            s.received.load(Relaxed),
            s.received_new.load(Relaxed),
            s.received_del.load(Relaxed),
            s.received_keys.load(Relaxed),
            s.requests.load(Relaxed),
        ));
        for reason in Reject::ALL {
            line.push_str(&format!(" {}={}", reason.name(), s.dropped(reason)));
        }
    }
    let routing = sources.state.routing.load();
    for (b, s) in routing
        .backends()
        .iter()
        .flat_map(|b| b.pool.servers().iter().map(move |s| (b, s)))
    {
        let st = &s.stats;
        let name = if routing.backends().len() > 1 {
            format!("{}/{}", b.name, s.name())
        } else {
            s.name().to_owned()
        };
        line.push_str(&format!(
            "; backend {} active={} queued={} queue_timeouts={} connect_failures={} marked_down={}",
            name,
            st.active.load(Relaxed),
            st.queued.load(Relaxed),
            st.queue_timeouts.load(Relaxed),
            st.connect_failures.load(Relaxed),
            st.marked_down.load(Relaxed)
        ));
    }
    line
}
