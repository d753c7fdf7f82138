//! The farm's view of its clients (`--shared-store`): at each interval every host publishes
//! a report of its busiest clients (connections open now, new connections and requests
//! since its last report) and its bans, and charges what the other hosts reported to its
//! own table. So a client spread over the farm meets the farm's limits within an interval,
//! and a ban set on one host holds on all. Nothing here touches the data path: the store's
//! thread calls it (`session/store/`), never a connection.

use std::collections::{HashMap, HashSet};

use super::bans::Ban;
use super::table::Remote;
use super::{Clients, Key};

/// Clients in one report at most (each 30 bytes: a sealed store value stays small).
pub const MAX_REPORTED: usize = 512;
/// A report older than this many intervals is of a host gone.
pub const STALE_INTERVALS: u64 = 3;

/// One host's word on its clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The host (random, per process).
    pub host: u64,
    /// Its count of reports: one seen already is not charged twice.
    pub seq: u64,
    /// When it was made (Unix ms).
    pub at_ms: u64,
    /// `(client, scope, what it did)`.
    pub clients: Vec<(Key, u16, Remote)>,
    /// The bans its operator set.
    pub bans: Vec<Ban>,
}

/// Most plain bytes of one stored page of a report: sealed, it stays well under the
/// store's largest value (`session/store/seal.rs`, 24 KiB), whatever the number of bans.
pub const PAGE_BYTES: usize = 20 * 1024;

/// The fixed part of a page: host, seq, time, its index, the page count, its clients.
const PAGE_HEAD: usize = 8 + 8 + 8 + 2 + 2 + 4;

/// One stored value of a report: the first holds its clients, every one a share of its
/// bans, so that a report of any size crosses the store in values that fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The host.
    pub host: u64,
    /// The report's count: pages of one report have the same.
    pub seq: u64,
    /// When the report was made (Unix ms).
    pub at_ms: u64,
    /// Its place, from 0.
    pub index: u16,
    /// The report's pages.
    pub count: u16,
    /// The clients (the first page only).
    pub clients: Vec<(Key, u16, Remote)>,
    /// Its share of the bans.
    pub bans: Vec<Ban>,
}

impl Page {
    /// As stored: the fixed part, the clients 30 bytes each, the bans as JSON.
    pub fn encode(&self) -> Vec<u8> {
        let bans = serde_json::to_vec(&self.bans).unwrap_or_default();
        let mut out = Vec::with_capacity(PAGE_HEAD + self.clients.len() * 30 + bans.len());
        for n in [self.host, self.seq, self.at_ms] {
            out.extend_from_slice(&n.to_be_bytes());
        }
        out.extend_from_slice(&self.index.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.extend_from_slice(&(self.clients.len() as u32).to_be_bytes());
        for (key, scope, r) in &self.clients {
            out.extend_from_slice(&key.0.to_be_bytes());
            out.extend_from_slice(&scope.to_be_bytes());
            for n in [r.conns, r.conn_events, r.requests] {
                out.extend_from_slice(&n.to_be_bytes());
            }
        }
        out.extend_from_slice(&bans);
        out
    }

    /// From the store; `None` when it is not a page.
    pub fn decode(b: &[u8]) -> Option<Page> {
        let u64_at = |i: usize| Some(u64::from_be_bytes(b.get(i..i + 8)?.try_into().ok()?));
        let u32_at = |i: usize| Some(u32::from_be_bytes(b.get(i..i + 4)?.try_into().ok()?));
        let u16_at = |i: usize| Some(u16::from_be_bytes(b.get(i..i + 2)?.try_into().ok()?));
        let (host, seq, at_ms) = (u64_at(0)?, u64_at(8)?, u64_at(16)?);
        let (index, count) = (u16_at(24)?, u16_at(26)?);
        if index >= count {
            return None;
        }
        let n = u32_at(28)? as usize;
        if n > MAX_REPORTED || (index > 0 && n > 0) {
            return None;
        }
        let mut clients = Vec::with_capacity(n);
        let mut i = PAGE_HEAD;
        for _ in 0..n {
            let key = u128::from_be_bytes(b.get(i..i + 16)?.try_into().ok()?);
            let scope = u16_at(i + 16)?;
            let r = Remote {
                conns: u32_at(i + 18)?,
                conn_events: u32_at(i + 22)?,
                requests: u32_at(i + 26)?,
            };
            clients.push((Key(key), scope, r));
            i += 30;
        }
        let bans = serde_json::from_slice(b.get(i..)?).ok()?;
        Some(Page {
            host,
            seq,
            at_ms,
            index,
            count,
            clients,
            bans,
        })
    }
}

impl Report {
    /// Its pages, each at most [`PAGE_BYTES`] encoded: the clients in the first, the bans
    /// in as many as they fill (a ban is at most a few hundred bytes: its reason is 200 at
    /// most).
    pub fn pages(&self) -> Vec<Page> {
        let page = |index: usize, clients: Vec<_>, bans: Vec<Ban>| Page {
            host: self.host,
            seq: self.seq,
            at_ms: self.at_ms,
            index: index as u16,
            count: 0,
            clients,
            bans,
        };
        let mut pages = vec![page(0, self.clients.clone(), Vec::new())];
        // The JSON array's brackets, then each ban and its comma.
        let mut used = PAGE_HEAD + self.clients.len() * 30 + 2;
        for ban in &self.bans {
            let len = serde_json::to_vec(ban).map_or(0, |v| v.len()) + 1;
            let last = pages.len() - 1;
            if used + len > PAGE_BYTES {
                pages.push(page(last + 1, Vec::new(), Vec::new()));
                used = PAGE_HEAD + 2;
            }
            used += len;
            let last = pages.len() - 1;
            pages[last].bans.push(ban.clone());
        }
        let count = pages.len().min(usize::from(u16::MAX)) as u16;
        pages.truncate(usize::from(count));
        for p in &mut pages {
            p.count = count;
        }
        pages
    }

    /// The report whose pages these are, when they are all there and of one report.
    pub fn assemble(mut pages: Vec<Page>) -> Option<Report> {
        pages.sort_by_key(|p| p.index);
        let first = pages.first()?;
        let (host, seq, at_ms, count) = (first.host, first.seq, first.at_ms, first.count);
        let whole = pages.len() == usize::from(count)
            && pages.iter().enumerate().all(|(i, p)| {
                usize::from(p.index) == i && p.host == host && p.seq == seq && p.count == count
            });
        if !whole {
            return None;
        }
        let mut pages = pages.into_iter();
        let first = pages.next()?;
        let mut bans = first.bans;
        for p in pages {
            bans.extend(p.bans);
        }
        Some(Report {
            host,
            seq,
            at_ms,
            clients: first.clients,
            bans,
        })
    }
}

/// This host's side of the exchange: what it reported last, what it heard.
#[derive(Debug)]
pub struct Exchange {
    host: u64,
    seq: u64,
    /// Each reported client's totals at the last report, for the next one's differences.
    sent: HashMap<(Key, u16), (u32, u32)>,
    /// Each host's last report charged.
    heard: HashMap<u64, u64>,
    /// Clients with connections open elsewhere at the last hearing (to clear when gone).
    remote_open: HashSet<(Key, u16)>,
}

impl Exchange {
    /// A host's exchange (`host`: random, its own).
    pub fn new(host: u64) -> Self {
        Exchange {
            host,
            seq: 0,
            sent: HashMap::new(),
            heard: HashMap::new(),
            remote_open: HashSet::new(),
        }
    }

    /// The host's name in the store.
    pub fn host(&self) -> u64 {
        self.host
    }

    /// This host's report now: its busiest clients and `bans` (those its operator set).
    pub fn report(&mut self, clients: &Clients, bans: Vec<Ban>, now_ms: u64) -> Report {
        self.seq += 1;
        let rows = clients
            .table_if_made()
            .map(|t| t.top(MAX_REPORTED))
            .unwrap_or_default();
        let mut sent = HashMap::with_capacity(rows.len());
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let id = (r.key, r.scope);
            let (c0, q0) = self.sent.get(&id).copied().unwrap_or((0, 0));
            // A client pushed out and tracked again starts its totals anew.
            let (dc, dq) = if r.total_conns >= c0 && r.total_requests >= q0 {
                (r.total_conns - c0, r.total_requests - q0)
            } else {
                (r.total_conns, r.total_requests)
            };
            sent.insert(id, (r.total_conns, r.total_requests));
            if r.conns == 0 && dc == 0 && dq == 0 {
                continue;
            }
            let remote = Remote {
                conns: r.conns,
                conn_events: dc,
                requests: dq,
            };
            out.push((r.key, r.scope, remote));
        }
        self.sent = sent;
        Report {
            host: self.host,
            seq: self.seq,
            at_ms: now_ms,
            clients: out,
            bans,
        }
    }

    /// Charges the other hosts' fresh `reports` to `clients`' table, and gives the farm's
    /// bans (every host's, its own left out). Reports of this host are skipped.
    pub fn hear(&mut self, clients: &Clients, reports: &[Report]) -> Vec<Ban> {
        let mut sum: HashMap<(Key, u16), Remote> = HashMap::new();
        let mut bans = Vec::new();
        for r in reports.iter().filter(|r| r.host != self.host) {
            bans.extend(r.bans.iter().cloned());
            // Only a report newer than the last heard is charged: a replayed one, or one
            // read again, is not (its open connections still count, as they are now).
            let last = self.heard.get(&r.host).copied();
            let fresh = last.is_none_or(|l| r.seq > l);
            if fresh {
                self.heard.insert(r.host, r.seq);
            }
            for (key, scope, what) in &r.clients {
                let s = sum.entry((*key, *scope)).or_default();
                s.conns = s.conns.saturating_add(what.conns);
                if fresh {
                    s.conn_events = s.conn_events.saturating_add(what.conn_events);
                    s.requests = s.requests.saturating_add(what.requests);
                }
            }
        }
        let hosts: HashSet<u64> = reports.iter().map(|r| r.host).collect();
        self.heard.retain(|h, _| hosts.contains(h));
        // Clients open elsewhere last time and not now: nothing is open there any more.
        for gone in &self.remote_open {
            sum.entry(*gone).or_default();
        }
        self.remote_open = sum
            .iter()
            .filter(|(_, r)| r.conns > 0)
            .map(|(k, _)| *k)
            .collect();
        if !sum.is_empty() {
            let table = clients.table();
            for ((key, scope), remote) in sum {
                if let Some(limits) = clients.scope_limits(scope) {
                    table.charge(key, scope, &limits, remote);
                }
            }
        }
        bans
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clients::{Folding, Limits, Policy};

    /// One host's clients, holding them to `policy`.
    fn host_of(policy: &Policy) -> std::sync::Arc<Clients> {
        let c = std::sync::Arc::new(Clients::new(Folding::default(), 64, false));
        c.note_scope(policy);
        c
    }

    #[test]
    fn reports_cross_the_store_whole() {
        let r = Report {
            host: 7,
            seq: 3,
            at_ms: 99,
            clients: vec![(
                Key(1 << 100 | 5),
                2,
                Remote {
                    conns: 1,
                    conn_events: 2,
                    requests: 3,
                },
            )],
            bans: vec![Ban {
                block: "192.0.2.0/24".parse().unwrap(),
                until_ms: None,
                reason: "x".into(),
            }],
        };
        let pages = r.pages();
        assert_eq!(pages.len(), 1);
        let bytes = pages[0].encode();
        assert_eq!(Page::decode(&bytes).as_ref(), Some(&pages[0]));
        assert_eq!(Page::decode(&bytes[..40]), None);
        assert_eq!(Page::decode(b"garbage"), None);
        assert_eq!(Report::assemble(pages), Some(r));
    }

    #[test]
    fn a_report_of_any_size_crosses_the_store_in_pages_that_fit() {
        // 512 busy clients and 5 000 bans of long reasons: far past one value's 24 KiB.
        let clients = (0..MAX_REPORTED as u128)
            .map(|i| (Key(i), 0, Remote::default()))
            .collect();
        let bans = (0..5000u32)
            .map(|i| Ban {
                block: format!("10.{}.{}.0/24", i / 256, i % 256).parse().unwrap(),
                until_ms: Some(u64::MAX / 2),
                reason: "r".repeat(200),
            })
            .collect();
        let r = Report {
            host: 9,
            seq: 4,
            at_ms: 5,
            clients,
            bans,
        };
        let pages = r.pages();
        assert!(pages.len() > 40, "{}", pages.len());
        for p in &pages {
            let b = p.encode();
            assert!(
                b.len() <= PAGE_BYTES,
                "page {} is {} bytes",
                p.index,
                b.len()
            );
            assert_eq!(Page::decode(&b).as_ref(), Some(p));
        }
        assert_eq!(Report::assemble(pages.clone()), Some(r.clone()));
        // A page missing, or one of another report: not whole.
        let mut torn = pages.clone();
        torn.remove(3);
        assert_eq!(Report::assemble(torn), None);
        let mut mixed = pages;
        mixed[2].seq = 3;
        assert_eq!(Report::assemble(mixed), None);
    }

    #[test]
    fn a_replayed_report_is_not_charged_again() {
        let policy = Policy {
            limits: Limits {
                request_rate: Some("1/m,burst=5".parse().unwrap()),
                ..Limits::default()
            },
            ..Policy::default()
        };
        let (a, b) = (host_of(&policy), host_of(&policy));
        let ip = "198.51.100.8".parse().unwrap();
        let src = crate::clients::Source::Tcp;
        let limit = a
            .admit(&policy, ip, src)
            .unwrap()
            .unwrap()
            .requests()
            .unwrap();
        let (mut xa, mut xb) = (Exchange::new(1), Exchange::new(2));
        a.request(&limit).unwrap();
        a.request(&limit).unwrap();
        let old = xa.report(&a, Vec::new(), 0);
        a.request(&limit).unwrap();
        let new = xa.report(&a, Vec::new(), 1);
        xb.hear(&b, std::slice::from_ref(&old));
        xb.hear(&b, std::slice::from_ref(&new));
        // The older one again (a replay): 3 of 5 charged, not 5.
        xb.hear(&b, std::slice::from_ref(&old));
        let limit_b = b
            .admit(&policy, ip, src)
            .unwrap()
            .unwrap()
            .requests()
            .unwrap();
        b.request(&limit_b).unwrap();
        b.request(&limit_b).unwrap();
        assert!(b.request(&limit_b).is_err());
    }

    #[test]
    fn what_other_hosts_did_is_charged_once() {
        let policy = Policy {
            limits: Limits {
                max_conns: 2,
                request_rate: Some("1/m,burst=5".parse().unwrap()),
                ..Limits::default()
            },
            ..Policy::default()
        };
        let (a, b) = (host_of(&policy), host_of(&policy));
        let ip = "198.51.100.7".parse().unwrap();
        let held = a
            .admit(&policy, ip, crate::clients::Source::Tcp)
            .unwrap()
            .unwrap();
        let limit = held.requests().unwrap();
        for _ in 0..3 {
            a.request(&limit).unwrap();
        }
        let (mut xa, mut xb) = (Exchange::new(1), Exchange::new(2));
        let report = xa.report(&a, Vec::new(), 0);
        assert_eq!(report.clients.len(), 1);
        xb.hear(&b, std::slice::from_ref(&report));
        // Heard twice, charged once: 3 of 5 used, 2 left on b.
        xb.hear(&b, std::slice::from_ref(&report));
        let on_b = b
            .admit(&policy, ip, crate::clients::Source::Tcp)
            .unwrap()
            .unwrap();
        let limit_b = on_b.requests().unwrap();
        b.request(&limit_b).unwrap();
        b.request(&limit_b).unwrap();
        assert!(b.request(&limit_b).is_err());
        // One connection open on a, one on b: the farm's limit of 2 is reached.
        assert!(b.admit(&policy, ip, crate::clients::Source::Tcp).is_err());
        // a's connection closes: its next report says so, and b lets one more in.
        drop(held);
        let report = xa.report(&a, Vec::new(), 1000);
        xb.hear(&b, &[report]);
        let _again = b.admit(&policy, ip, crate::clients::Source::Tcp).unwrap();
        // Nothing more from a: its open count is cleared.
        xb.hear(&b, &[]);
    }
}
