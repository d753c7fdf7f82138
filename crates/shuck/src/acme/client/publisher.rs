//! Publishing challenge answers through the master to the worker, and in a farm to every
//! host's worker, before the CA is told to check.

use std::collections::HashSet;
use std::time::Duration;

use super::hub::Hub;
use super::{MULTICAST_SPREAD, PUBLISH_TIMEOUT};
use crate::acme::farm::FarmMsg;
use crate::acme::order::Publish;
use crate::acme::Event;

/// Publishes answers through the master to the worker (and, in a farm, to every host's
/// worker), waiting for their word.
pub(super) struct Publisher<'a> {
    pub(super) hub: &'a mut Hub,
    /// In a farm: how many other hosts must confirm (`Some(0)`: multicast, unknown).
    pub(super) peers: Option<usize>,
}

impl Publish for Publisher<'_> {
    async fn publish(&mut self, name: &str, token: &str, key_auth: &str) -> Result<(), String> {
        self.hub.answered.remove(token);
        self.hub.acks.remove(token);
        (self.hub.link.send)(Event::Answer {
            name: name.to_owned(),
            token: token.to_owned(),
            key_auth: key_auth.to_owned(),
        })
        .map_err(|e| format!("cannot reach the master process: {e}"))?;
        let answer = FarmMsg::Answer {
            name: name.to_owned(),
            token: token.to_owned(),
            key_auth: key_auth.to_owned(),
        };
        if self.peers.is_some() {
            self.hub.farm(&answer);
        }
        let deadline = tokio::time::Instant::now() + PUBLISH_TIMEOUT;
        let started = tokio::time::Instant::now();
        let mut resent = false;
        loop {
            if let Some(result) = self.hub.answered.get(token) {
                if let Some(e) = result {
                    return Err(e.clone());
                }
                let confirmed = self.hub.acks.get(token).map_or(0, HashSet::len);
                match self.peers {
                    None => return Ok(()),
                    Some(0) if started.elapsed() >= MULTICAST_SPREAD => return Ok(()),
                    Some(n) if n > 0 && confirmed >= n => return Ok(()),
                    _ => {}
                }
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return match (self.hub.answered.get(token), self.peers) {
                    (None, _) => Err(format!(
                        "the worker did not confirm the answer within {}s",
                        PUBLISH_TIMEOUT.as_secs()
                    )),
                    (Some(_), Some(n)) => {
                        // The CA may still land on a host that has it: go on, say so.
                        tracing::warn!(
                            name: "acme_answer_confirmations",
                            hosts = n,
                            name = %name,
                            confirmed = self.hub.acks.get(token).map_or(0, HashSet::len),
                            "ACME: {} of {n} other hosts confirmed the answer for {name}; asking the CA anyway",
                            self.hub.acks.get(token).map_or(0, HashSet::len),
                        );
                        Ok(())
                    }
                    (Some(_), None) => Ok(()),
                };
            }
            if !resent && started.elapsed() >= Duration::from_secs(2) && self.peers.is_some() {
                // A datagram may be lost: once more.
                self.hub.farm(&answer);
                resent = true;
            }
            let step = (deadline - now).min(Duration::from_millis(200));
            self.hub.absorb_one(step).await;
            if self.hub.closed {
                return Err("the master process is gone".to_owned());
            }
        }
    }

    fn withdraw(&mut self, name: &str, token: &str) {
        self.hub.send(Event::Withdraw {
            name: name.to_owned(),
            token: token.to_owned(),
        });
        if self.peers.is_some() {
            self.hub.farm(&FarmMsg::Withdraw {
                name: name.to_owned(),
                token: token.to_owned(),
            });
        }
    }
}
