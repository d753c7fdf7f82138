//! The client's link to the master and, in a farm, to the other hosts' clients: what has
//! come in (answers confirmed, leases, certificates, requests), and the lease a host must
//! hold to order a certificate.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use super::{schedule, Cert, Inbound, Link, CLAIM_WAIT, LEASE_TTL};
use crate::acme::farm::{FarmMsg, HostId};
use crate::acme::Event;
use crate::clock::unix_ms;

/// The link and what has come in through it, read by whoever waits on it.
pub(super) struct Hub {
    pub(super) link: Link,
    /// This client's id in leases.
    pub(super) me: HostId,
    /// The local worker's answers, by token.
    pub(super) answered: HashMap<String, Option<String>>,
    /// Leases heard of, by certificate: holder and end (unix ms).
    pub(super) leases: HashMap<String, (HostId, u64)>,
    /// Workers of other hosts that confirmed an answer, by token.
    pub(super) acks: HashMap<String, HashSet<HostId>>,
    /// Certificates other hosts sent, not looked at yet.
    pub(super) certs: Vec<(String, String)>,
    /// A host asked for our certificates.
    pub(super) requested: bool,
    /// The master is gone.
    pub(super) closed: bool,
}

impl Hub {
    pub(super) fn send(&self, e: Event) {
        if let Err(e) = (self.link.send)(e) {
            tracing::warn!(
                name: "acme_master_unreachable",
                error = %e,
                "ACME: cannot reach the master process: {e}",
            );
        }
    }

    pub(super) fn farm(&self, m: &FarmMsg) {
        self.send(Event::Farm(m.encode()));
    }

    /// Waits for the next message (at most `within`) and takes it in; false on timeout or
    /// when the master is gone.
    pub(super) async fn absorb_one(&mut self, within: Duration) -> bool {
        match tokio::time::timeout(within, self.link.inbox.recv()).await {
            Ok(Some(m)) => {
                self.take(m);
                true
            }
            Ok(None) => {
                self.closed = true;
                false
            }
            Err(_) => false,
        }
    }

    /// Takes in what came for `d`.
    pub(super) async fn absorb_for(&mut self, d: Duration) {
        let until = tokio::time::Instant::now() + d;
        while !self.closed {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() || !self.absorb_one(left).await {
                return;
            }
        }
    }

    pub(super) fn take(&mut self, m: Inbound) {
        match m {
            Inbound::Answered(a) => {
                self.answered.insert(a.token, a.error);
            }
            Inbound::Farm(body) => match FarmMsg::decode(&body) {
                Some(FarmMsg::Lease {
                    cert,
                    holder,
                    until_ms,
                }) => {
                    if holder != self.me {
                        self.leases.insert(cert, (holder, until_ms));
                    }
                }
                Some(FarmMsg::Answered { token, by }) => {
                    self.acks.entry(token).or_default().insert(by);
                }
                Some(FarmMsg::Cert { cert, pem }) => self.certs.push((cert, pem)),
                Some(FarmMsg::Request) => self.requested = true,
                Some(FarmMsg::Answer { .. } | FarmMsg::Withdraw { .. }) | None => {}
            },
        }
    }

    /// Another host's live lease on `cert`.
    pub(super) fn lease_of_other(&self, cert: &str) -> Option<(HostId, u64)> {
        self.leases
            .get(cert)
            .copied()
            .filter(|(h, until)| *h != self.me && *until > unix_ms())
    }
}

impl super::Client {
    /// The farm's part: certificates other hosts sent are kept and served when newer than
    /// ours; a host that asked gets ours.
    pub(super) fn farm_work(&mut self, certs: &mut [Cert]) {
        for (name, pem) in std::mem::take(&mut self.hub.certs) {
            let Some(cert) = certs.iter_mut().find(|c| c.names[0] == name) else {
                continue;
            };
            let loaded = match crate::tls::pem::LoadedCert::from_pem(pem.as_bytes(), &name, None) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(
                        name: "acme_farm_certificate_unusable",
                        error = %e,
                        certificate = %name,
                        "ACME: a certificate from the farm is unusable: {e}",
                    );
                    continue;
                }
            };
            let now = SystemTime::now();
            if loaded.is_expired(now) || cert.names.iter().any(|n| !loaded.names.contains(n)) {
                continue;
            }
            if cert.not_after.is_some_and(|t| Some(t) >= loaded.not_after) {
                continue;
            }
            let path = self.state.cert_path(&name);
            if let Err(e) = self.state.write_secret(&path, pem.as_bytes()) {
                tracing::error!(
                    name: "acme_farm_certificate_not_kept",
                    error = %e,
                    path = %path.display(),
                    certificate = %name,
                    "ACME: cannot keep the farm's certificate in {}: {e}",
                    path.display(),
                );
                continue;
            }
            cert.adopt(&loaded, None, "received from the farm");
            self.hub.send(Event::Issued);
        }
        if std::mem::take(&mut self.hub.requested) {
            for cert in certs.iter().filter(|c| c.leaf.is_some()) {
                let path = self.state.cert_path(&cert.names[0]);
                if let Ok(pem) = std::fs::read_to_string(&path) {
                    self.hub.farm(&FarmMsg::Cert {
                        cert: cert.names[0].clone(),
                        pem,
                    });
                }
            }
        }
    }

    /// In a farm: whether this host may order `cert` now (it holds the lease); if not,
    /// `cert.due` is moved past the other host's lease.
    pub(super) async fn claim(&mut self, cert: &mut Cert) -> bool {
        let name = cert.names[0].clone();
        let defer = |cert: &mut Cert, until_ms: u64| {
            let jitter = Duration::from_millis((schedule::random_fraction() * 2000.0) as u64);
            cert.due = SystemTime::UNIX_EPOCH + Duration::from_millis(until_ms) + jitter;
        };
        if let Some((_, until)) = self.hub.lease_of_other(&name) {
            tracing::info!(
                name: "acme_farm_orders",
                certificate = %name,
                "ACME: another host of the farm orders {name}; waiting for it",
            );
            defer(cert, until);
            return false;
        }
        self.hub.farm(&lease(&name, self.hub.me, true));
        self.hub.absorb_for(CLAIM_WAIT).await;
        match self.hub.lease_of_other(&name) {
            // Two claims at once: the lower id orders.
            Some((holder, until)) if holder < self.hub.me => {
                tracing::info!(
                    name: "acme_farm_claimed_too",
                    certificate = %name,
                    "ACME: another host of the farm claimed {name} too and orders it; waiting for it",
                );
                defer(cert, until);
                false
            }
            _ => true,
        }
    }
}

/// This host's lease on `cert`: held for [`LEASE_TTL`] from now, or released.
pub(super) fn lease(cert: &str, holder: HostId, hold: bool) -> FarmMsg {
    FarmMsg::Lease {
        cert: cert.to_owned(),
        holder,
        until_ms: if hold {
            unix_ms() + LEASE_TTL.as_millis() as u64
        } else {
            0
        },
    }
}
