//! The ACME client process: forked by the master, it keeps the master's user, owns the
//! state directory and talks to the CA. For each `--acme-domain` it serves what the state
//! directory holds and orders what is missing, then renews each certificate when due;
//! a failed order is retried with backoff while the certificate in place stays served.
//!
//! It speaks to the master over its channel: challenge answers to publish (the master
//! relays them to its worker, whose acknowledgement comes back the same way), "new
//! certificates are in the state directory" (the master reads them and the worker swaps
//! them in), and the counters shown in the worker's metrics.
//!
//! In a farm (replication on), it also speaks to the other hosts' clients through the
//! worker's sealed channel ([`super::farm`]): it asks for their certificates at start,
//! orders a certificate only while it holds its lease, publishes its answers on every host
//! before the CA checks, and sends what it got to every host.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use instant_acme::{Account, AccountCredentials, ExternalAccountKey, NewAccount};
use tokio::sync::mpsc;

use super::farm::{self, FarmMsg};
use super::order::{self, OrderError};
use super::schedule;
use super::state::{self, StateDir, Stored};
use super::{Answered, Event, Settings, Status};

mod hub;
mod publisher;

use hub::{lease, Hub};
use publisher::Publisher;

/// Longest an order may take, from the new order to the chain.
const ORDER_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest wait for the worker to confirm that an answer is live.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);
/// The client wakes at least this often (to ask the CA's renewal window again).
const MAX_SLEEP: Duration = Duration::from_secs(3600);
/// How long a lease lasts unless renewed: the time another host waits after the orderer
/// died.
const LEASE_TTL: Duration = Duration::from_secs(15);
/// How often the orderer renews its lease while the order runs.
const LEASE_RENEW: Duration = Duration::from_secs(4);
/// After claiming a lease, how long to listen for a competing claim.
const CLAIM_WAIT: Duration = Duration::from_secs(2);
/// At start in a farm, how long to wait for the peers' certificates before ordering.
const FARM_SETTLE: Duration = Duration::from_secs(3);
/// With multicast peers (how many is unknown), how long the answer is given to spread.
const MULTICAST_SPREAD: Duration = Duration::from_secs(1);

/// One certificate's life.
struct Cert {
    names: Vec<String>,
    /// When to order next.
    due: SystemTime,
    /// Failed orders in a row.
    failures: u32,
    /// The certificate served (DER of the leaf), for the CA's renewal window.
    leaf: Option<Vec<u8>>,
    /// When the certificate served expires, to tell whether a farm's copy is newer.
    not_after: Option<SystemTime>,
}

/// What reaches the client through the master.
#[derive(Debug)]
pub enum Inbound {
    /// The local worker's word on an answer.
    Answered(Answered),
    /// A message from another host of the farm (a [`FarmMsg`], encoded).
    Farm(Vec<u8>),
}

/// The way to the master: events out, the worker's and the farm's messages in.
pub struct Link {
    /// Sends an event to the master.
    pub send: Rc<dyn Fn(Event) -> Result<(), String>>,
    /// What the master relays; ends when the master is gone.
    pub inbox: mpsc::UnboundedReceiver<Inbound>,
}

/// Runs the client until the master goes away; the process's exit code.
pub fn run(settings: Settings, link: Link) -> i32 {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(name: "acme_cannot_start", error = %e, "ACME: cannot start: {e}");
            return 1;
        }
    };
    rt.block_on(async move {
        let state = match StateDir::prepare(&settings.state) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(name: "acme_error", error = %e, "ACME: {e}");
                return 1;
            }
        };
        Client {
            settings,
            state,
            hub: Hub {
                link,
                me: farm::new_id(),
                answered: HashMap::new(),
                leases: HashMap::new(),
                acks: HashMap::new(),
                certs: Vec::new(),
                requested: false,
                closed: false,
            },
            account: None,
            orders_ok: 0,
            orders_failed: 0,
        }
        .serve()
        .await;
        0
    })
}

struct Client {
    settings: Settings,
    state: StateDir,
    hub: Hub,
    account: Option<Account>,
    orders_ok: u64,
    orders_failed: u64,
}

impl Client {
    async fn serve(mut self) {
        let now = SystemTime::now();
        let mut certs: Vec<Cert> = self
            .settings
            .domains
            .iter()
            .map(|names| {
                let mut c = Cert {
                    names: names.clone(),
                    due: now,
                    failures: 0,
                    leaf: None,
                    not_after: None,
                };
                match state::load(&self.state, names, now) {
                    Stored::Valid(loaded) => {
                        c.serve(&loaded);
                        c.due = renewal_by_lifetime(&loaded);
                        tracing::info!(
                            name: "acme_serving_stored",
                            path = %(self.state.cert_path(&names[0]).display()),
                            due = %(when(c.due)),
                            certificate = %names[0],
                            "ACME: serving the certificate in {}; renewal due at {}",
                            self.state.cert_path(&names[0]).display(),
                            when(c.due),
                        );
                    }
                    Stored::Missing => tracing::info!(
                        name: "acme_ordering_missing",
                        names = %(names.join(",")),
                        certificate = %names[0],
                        "ACME: no certificate yet for {}; ordering it (meanwhile the default certificate answers)",
                        names.join(","),
                    ),
                    Stored::Unusable(why) => tracing::warn!(
                        name: "acme_ordering_again",
                        reason = %why,
                        certificate = %names[0],
                        "ACME: {why}; ordering a new one",
                    ),
                }
                c
            })
            .collect();
        if self.settings.farm.is_some() {
            // What the farm already holds is not ordered again.
            self.hub.farm(&FarmMsg::Request);
            self.hub.absorb_for(FARM_SETTLE).await;
        }
        loop {
            self.farm_work(&mut certs);
            for i in 0..certs.len() {
                if certs[i].due <= SystemTime::now() {
                    self.renew(&mut certs[i]).await;
                    // Certificates that came while ordering are taken before the next.
                    self.farm_work(&mut certs);
                }
            }
            self.report(&certs);
            if self.hub.closed {
                // The master is gone: nothing to serve for.
                return;
            }
            let next = certs
                .iter()
                .map(|c| c.due)
                .min()
                .and_then(|t| t.duration_since(SystemTime::now()).ok())
                .unwrap_or(Duration::ZERO)
                .min(MAX_SLEEP);
            self.hub.absorb_one(next).await;
        }
    }

    /// Orders `cert` now; on success the master is told, on failure the next attempt is
    /// scheduled with backoff.
    async fn renew(&mut self, cert: &mut Cert) {
        let first = cert.names[0].clone();
        if self.settings.farm.is_some() {
            if !self.claim(cert).await {
                return;
            }
            // A certificate that came while claiming makes the order needless: taking it
            // moves `due` (now, or past) to its renewal.
            self.farm_work(std::slice::from_mut(cert));
            if cert.due > SystemTime::now() {
                return;
            }
        }
        let result = match tokio::time::timeout(ORDER_TIMEOUT, self.order(&cert.names)).await {
            Ok(r) => r,
            Err(_) => Err(OrderError {
                step: "order",
                detail: format!("not done within {}s", ORDER_TIMEOUT.as_secs()),
            }),
        };
        let issued = result.and_then(|issued| {
            let path = self.state.cert_path(&first);
            self.state
                .write_secret(&path, issued.pem.as_bytes())
                .map_err(|e| OrderError {
                    step: "saving",
                    detail: format!("{}: {e}", path.display()),
                })?;
            match state::load(&self.state, &cert.names, SystemTime::now()) {
                Stored::Valid(c) => Ok(c),
                Stored::Missing => Err(OrderError {
                    step: "saving",
                    detail: format!("{} vanished", path.display()),
                }),
                Stored::Unusable(why) => Err(OrderError {
                    step: "checking the certificate issued",
                    detail: why,
                }),
            }
        });
        match issued {
            Ok(loaded) => {
                self.orders_ok += 1;
                let window = self.ari(&first, &loaded).await;
                cert.adopt(&loaded, window, "issued");
                self.hub.send(Event::Issued);
                if self.settings.farm.is_some() {
                    let path = self.state.cert_path(&first);
                    match std::fs::read_to_string(&path) {
                        Ok(pem) => self.hub.farm(&FarmMsg::Cert {
                            cert: first.clone(),
                            pem,
                        }),
                        Err(e) => {
                            tracing::warn!(
                                name: "acme_farm_send_failed",
                                error = %e,
                                certificate = %first,
                                "ACME: cannot send the certificate to the farm: {e}",
                            )
                        }
                    }
                }
            }
            Err(e) => {
                self.orders_failed += 1;
                cert.failures += 1;
                let wait = schedule::backoff(cert.failures);
                cert.due = SystemTime::now() + wait;
                let keeps = if cert.leaf.is_some() {
                    "the certificate in place stays served"
                } else {
                    "the default certificate answers meanwhile"
                };
                tracing::warn!(
                    name: "acme_order_failed",
                    error = %e,
                    keeps = %keeps,
                    names = %(cert.names.join(",")),
                    retry_s = wait.as_secs(),
                    failures = cert.failures,
                    certificate = %first,
                    directory = %self.settings.directory,
                    "ACME: order for {} failed at {e} (CA directory {}); {keeps}; retrying in {}s (failure {} in a row)",
                    cert.names.join(","),
                    self.settings.directory,
                    wait.as_secs(),
                    cert.failures,
                );
            }
        }
        if self.settings.farm.is_some() {
            // Done either way: another host may try at once if this one failed.
            self.hub.farm(&lease(&first, self.hub.me, false));
        }
    }

    async fn order(&mut self, names: &[String]) -> Result<order::Issued, OrderError> {
        let account = self.account().await?;
        let send = self.hub.link.send.clone();
        let me = self.hub.me;
        let farm = self.settings.farm.is_some();
        let mut publish = Publisher {
            hub: &mut self.hub,
            peers: self.settings.farm.as_ref().map(|f| f.unicast_peers),
        };
        let run = order::run(
            &account,
            names,
            self.settings.challenge,
            self.settings.key_type,
            &mut publish,
        );
        tokio::pin!(run);
        let mut renew = tokio::time::interval(LEASE_RENEW);
        loop {
            tokio::select! {
                r = &mut run => return r,
                _ = renew.tick() => {
                    // The lease is kept while the order runs.
                    if farm {
                        let _ = send(Event::Farm(lease(&names[0], me, true).encode()));
                    }
                }
            }
        }
    }

    /// The account: as stored for this directory, else a new one (stored).
    async fn account(&mut self) -> Result<Account, OrderError> {
        if let Some(a) = &self.account {
            return Ok(a.clone());
        }
        let builder = || match &self.settings.ca_file {
            Some(path) => Account::builder_with_root(path),
            None => Account::builder(),
        };
        let path = self.state.account_path(&self.settings.directory);
        let account = match std::fs::read(&path) {
            Ok(json) => {
                let creds: AccountCredentials =
                    serde_json::from_slice(&json).map_err(|e| OrderError {
                        step: "account",
                        detail: format!("{}: {e}", path.display()),
                    })?;
                builder()
                    .map_err(OrderError::at("account"))?
                    .from_credentials(creds)
                    .await
                    .map_err(OrderError::at("directory"))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let contacts: Vec<&str> =
                    self.settings.contacts.iter().map(String::as_str).collect();
                let eab = self
                    .settings
                    .eab
                    .as_ref()
                    .map(|(kid, key)| ExternalAccountKey::new(kid.clone(), key));
                let (account, creds) = builder()
                    .map_err(OrderError::at("account"))?
                    .create(
                        &NewAccount {
                            contact: &contacts,
                            terms_of_service_agreed: true,
                            only_return_existing: false,
                        },
                        self.settings.directory.clone(),
                        eab.as_ref(),
                    )
                    .await
                    .map_err(OrderError::at("new account"))?;
                let json = serde_json::to_vec_pretty(&creds).map_err(|e| OrderError {
                    step: "account",
                    detail: e.to_string(),
                })?;
                self.state
                    .write_secret(&path, &json)
                    .map_err(|e| OrderError {
                        step: "saving the account",
                        detail: format!("{}: {e}", path.display()),
                    })?;
                tracing::info!(
                    name: "acme_account_created",
                    path = %path.display(),
                    account = %account.id(),
                    "ACME: account created, kept in {}",
                    path.display(),
                );
                account
            }
            Err(e) => {
                return Err(OrderError {
                    step: "account",
                    detail: format!("{}: {e}", path.display()),
                })
            }
        };
        self.account = Some(account.clone());
        Ok(account)
    }

    /// The CA's renewal window for the certificate `loaded` (RFC 9773), when the CA has
    /// one: a random point inside it.
    async fn ari(&self, first: &str, loaded: &crate::tls::pem::LoadedCert) -> Option<SystemTime> {
        let account = self.account.as_ref()?;
        let id = cert_id(loaded.key.cert.first()?.as_ref())?;
        match account.renewal_info(&id).await {
            Ok((info, _retry)) => {
                let w = info.suggested_window;
                let at = schedule::in_window(
                    w.start.into(),
                    w.end.into(),
                    schedule::random_fraction(),
                    SystemTime::now(),
                );
                tracing::info!(
                    name: "acme_renewal_window",
                    window_start = %(when(w.start.into())),
                    window_end = %(when(w.end.into())),
                    certificate = %first,
                    "ACME: the CA's renewal window is {} to {}",
                    when(w.start.into()),
                    when(w.end.into()),
                );
                Some(at)
            }
            Err(instant_acme::Error::Unsupported(_)) => None,
            Err(e) => {
                tracing::debug!(
                    name: "acme_no_renewal_info",
                    reason = %(order::describe(&e)),
                    certificate = %first,
                    "ACME: no renewal information: {}",
                    order::describe(&e),
                );
                None
            }
        }
    }

    fn report(&self, certs: &[Cert]) {
        self.hub.send(Event::Status(Status {
            orders_ok: self.orders_ok,
            orders_failed: self.orders_failed,
            next: certs
                .iter()
                .map(|c| (c.names[0].clone(), unix(c.due)))
                .collect(),
        }));
    }
}

impl Cert {
    /// What is kept of the certificate served.
    fn serve(&mut self, loaded: &crate::tls::pem::LoadedCert) {
        self.leaf = loaded.key.cert.first().map(|d| d.to_vec());
        self.not_after = loaded.not_after;
    }

    /// `loaded` is now served: the next renewal is due inside the CA's `window` when it
    /// gave one, else two thirds into its lifetime.
    fn adopt(
        &mut self,
        loaded: &crate::tls::pem::LoadedCert,
        window: Option<SystemTime>,
        how: &str,
    ) {
        self.serve(loaded);
        self.failures = 0;
        self.due = window.unwrap_or_else(|| renewal_by_lifetime(loaded));
        tracing::info!(
            name: "acme_certificate_ready",
            how = %how,
            names = %(self.names.join(",")),
            not_after = %(loaded.not_after.map(when).unwrap_or_default()),
            due = %(when(self.due)),
            certificate = %self.names[0],
            "ACME: certificate for {} {how}, valid until {}; renewal due at {}",
            self.names.join(","),
            loaded.not_after.map(when).unwrap_or_default(),
            when(self.due),
        );
    }
}

/// Two thirds into the certificate's lifetime, with jitter.
fn renewal_by_lifetime(c: &crate::tls::pem::LoadedCert) -> SystemTime {
    let not_after = c.not_after.unwrap_or_else(SystemTime::now);
    let not_before = c
        .key
        .cert
        .first()
        .and_then(|d| x509_parser::parse_x509_certificate(d).ok())
        .map(|(_, x)| SystemTime::from(x.validity().not_before.to_datetime()))
        .unwrap_or_else(SystemTime::now);
    schedule::by_lifetime(not_before, not_after, schedule::random_fraction())
}

/// The certificate's ARI identifier: its authority key identifier and serial.
fn cert_id(der: &[u8]) -> Option<instant_acme::CertificateIdentifier<'static>> {
    use x509_parser::extensions::ParsedExtension;
    let (_, x) = x509_parser::parse_x509_certificate(der).ok()?;
    let aki = x
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(a) => a.key_identifier.as_ref().map(|k| k.0),
            _ => None,
        })?;
    Some(
        instant_acme::CertificateIdentifier::new(aki.into(), x.tbs_certificate.raw_serial().into())
            .into_owned(),
    )
}

/// A time for the log: RFC 3339, UTC, to the second.
fn when(t: SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    let t = t.replace_nanosecond(0).unwrap_or(t);
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| unix(t.into()).to_string())
}

/// Seconds since the epoch.
pub fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
