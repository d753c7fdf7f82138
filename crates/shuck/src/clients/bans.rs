//! Bans the admin API sets (`POST /clients/ban`): address blocks refused at accept until a
//! time or for ever. The list is replaced whole (the master holds the truth and sends it;
//! `--shared-store` brings the farm's), so a connection reads it without a lock.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::addr::Cidr;

/// One ban.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ban {
    /// The block.
    pub block: Cidr,
    /// Until when (Unix milliseconds); `None`: until lifted.
    pub until_ms: Option<u64>,
    /// Why, as the operator said.
    #[serde(default)]
    pub reason: String,
}

impl Ban {
    /// Whether it still holds at `now_ms`.
    pub fn live(&self, now_ms: u64) -> bool {
        self.until_ms.is_none_or(|u| u > now_ms)
    }
}

#[derive(Debug)]
struct Live {
    ban: Ban,
    /// When a refusal of it was last logged (Unix ms).
    logged: AtomicU64,
}

/// The bans in force: this host's (its operator's) and the farm's other hosts'.
#[derive(Debug, Default)]
pub struct Bans {
    live: ArcSwap<Vec<Live>>,
    /// This host's and the farm's, as last given.
    given: std::sync::Mutex<(Vec<Ban>, Vec<Ban>)>,
}

impl Bans {
    /// Replaces this host's list (the master's, whole).
    pub fn set(&self, bans: &[Ban]) {
        let mut g = self.given.lock().unwrap_or_else(|p| p.into_inner());
        g.0 = bans.to_vec();
        self.rebuild(&g.0, &g.1);
    }

    /// Replaces the farm's other hosts' list (`--shared-store`); whether it changed.
    pub fn set_farm(&self, bans: &[Ban]) -> bool {
        let mut g = self.given.lock().unwrap_or_else(|p| p.into_inner());
        if g.1 == bans {
            return false;
        }
        g.1 = bans.to_vec();
        self.rebuild(&g.0, &g.1);
        true
    }

    /// This host's own bans (what it tells the farm).
    pub fn local(&self) -> Vec<Ban> {
        let now = crate::clock::unix_ms();
        let g = self.given.lock().unwrap_or_else(|p| p.into_inner());
        g.0.iter().filter(|b| b.live(now)).cloned().collect()
    }

    fn rebuild(&self, local: &[Ban], farm: &[Ban]) {
        let now = crate::clock::unix_ms();
        let old = self.live.load();
        let list = local
            .iter()
            .chain(farm)
            .filter(|b| b.live(now))
            .map(|b| Live {
                logged: AtomicU64::new(
                    old.iter()
                        .find(|l| l.ban.block == b.block)
                        .map_or(0, |l| l.logged.load(Relaxed)),
                ),
                ban: b.clone(),
            })
            .collect();
        self.live.store(Arc::new(list));
    }

    /// The bans in force now.
    pub fn list(&self) -> Vec<Ban> {
        let now = crate::clock::unix_ms();
        self.live
            .load()
            .iter()
            .filter(|l| l.ban.live(now))
            .map(|l| l.ban.clone())
            .collect()
    }

    /// Whether a ban holds `ip`: `Some(first)`, `first` when this starts an episode of its
    /// refusals (one log line each ten seconds at most).
    pub fn holds(&self, ip: IpAddr) -> Option<bool> {
        let list = self.live.load();
        if list.is_empty() {
            return None;
        }
        let now = crate::clock::unix_ms();
        let hit = list
            .iter()
            .find(|l| l.ban.block.contains(ip) && l.ban.live(now))?;
        let last = hit.logged.load(Relaxed);
        let first = now.saturating_sub(last) > u64::from(super::table::EPISODE_MS)
            && hit
                .logged
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok();
        Some(first)
    }
}

impl serde::Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bans_hold_until_they_end() {
        let b = Bans::default();
        assert_eq!(b.holds("10.0.0.1".parse().unwrap()), None);
        let now = crate::clock::unix_ms();
        b.set(&[
            Ban {
                block: "10.0.0.0/24".parse().unwrap(),
                until_ms: None,
                reason: String::new(),
            },
            Ban {
                block: "10.1.0.1".parse().unwrap(),
                until_ms: Some(now - 1),
                reason: String::new(),
            },
            Ban {
                block: "10.2.0.1".parse().unwrap(),
                until_ms: Some(now + 60_000),
                reason: "x".into(),
            },
        ]);
        assert_eq!(b.holds("10.0.0.9".parse().unwrap()), Some(true));
        assert_eq!(b.holds("10.0.0.9".parse().unwrap()), Some(false));
        assert_eq!(b.holds("10.1.0.1".parse().unwrap()), None);
        assert_eq!(b.holds("10.2.0.1".parse().unwrap()), Some(true));
        assert_eq!(b.list().len(), 2);
        let _ = b.set_farm(&[Ban {
            block: "10.3.0.0/16".parse().unwrap(),
            until_ms: None,
            reason: String::new(),
        }]);
        assert_eq!(b.holds("10.3.2.1".parse().unwrap()), Some(true));
        assert_eq!(b.local().len(), 2);
        assert_eq!(b.list().len(), 3);
        let _ = b.set_farm(&[]);
        let json = serde_json::to_string(&b.list()).unwrap();
        assert!(json.contains("\"10.0.0.0/24\""), "{json}");
        let back: Vec<Ban> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, b.list());
    }
}
