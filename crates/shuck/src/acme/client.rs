//! The ACME client process: forked by the master, it keeps the master's user, owns the
//! state directory and talks to the CA. For each `--acme-domain` it serves what the state
//! directory holds and orders what is missing, then renews each certificate when due;
//! a failed order is retried with backoff while the certificate in place stays served.
//!
//! It speaks to the master over its channel: challenge answers to publish (the master
//! relays them to its worker, whose acknowledgement comes back the same way), "new
//! certificates are in the state directory" (the master reads them and the worker swaps
//! them in), and the counters shown in the worker's metrics.

use std::time::{Duration, SystemTime};

use instant_acme::{Account, AccountCredentials, ExternalAccountKey, NewAccount};
use tokio::sync::mpsc;

use super::order::{self, OrderError, Publish};
use super::schedule;
use super::state::{self, StateDir, Stored};
use super::{Answered, Event, Settings, Status};

/// Longest an order may take, from the new order to the chain.
const ORDER_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest wait for the worker to confirm that an answer is live.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);
/// The client wakes at least this often (to ask the CA's renewal window again).
const MAX_SLEEP: Duration = Duration::from_secs(3600);

/// One certificate's life.
struct Cert {
    names: Vec<String>,
    /// When to order next.
    due: SystemTime,
    /// Failed orders in a row.
    failures: u32,
    /// The certificate served (DER of the leaf), for the CA's renewal window.
    leaf: Option<Vec<u8>>,
}

/// The way to the master: events out, the worker's acknowledgements in.
pub struct Link {
    /// Sends an event to the master.
    pub send: Box<dyn Fn(Event) -> Result<(), String>>,
    /// The worker's word on answers; ends when the master is gone.
    pub answered: mpsc::UnboundedReceiver<Answered>,
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
            tracing::error!("ACME: cannot start: {e}");
            return 1;
        }
    };
    rt.block_on(async move {
        let state = match StateDir::prepare(&settings.state) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("ACME: {e}");
                return 1;
            }
        };
        Client {
            settings,
            state,
            link,
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
    link: Link,
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
                };
                match state::load(&self.state, names, now) {
                    Stored::Valid(loaded) => {
                        c.leaf = loaded.key.cert.first().map(|d| d.to_vec());
                        c.due = renewal_by_lifetime(&loaded);
                        tracing::info!(
                            certificate = %names[0],
                            "ACME: serving the certificate in {}; renewal due at {}",
                            self.state.cert_path(&names[0]).display(),
                            when(c.due)
                        );
                    }
                    Stored::Missing => tracing::info!(
                        certificate = %names[0],
                        "ACME: no certificate yet for {}; ordering it (meanwhile the default certificate answers)",
                        names.join(",")
                    ),
                    Stored::Unusable(why) => tracing::warn!(
                        certificate = %names[0],
                        "ACME: {why}; ordering a new one"
                    ),
                }
                c
            })
            .collect();
        loop {
            for cert in certs.iter_mut() {
                if cert.due <= SystemTime::now() {
                    self.renew(cert).await;
                }
            }
            self.report(&certs);
            let next = certs
                .iter()
                .map(|c| c.due)
                .min()
                .and_then(|t| t.duration_since(SystemTime::now()).ok())
                .unwrap_or(Duration::ZERO)
                .min(MAX_SLEEP);
            tokio::select! {
                _ = tokio::time::sleep(next) => {}
                m = self.link.answered.recv() => if m.is_none() {
                    // The master is gone: nothing to serve for.
                    return;
                },
            }
        }
    }

    /// Orders `cert` now; on success the master is told, on failure the next attempt is
    /// scheduled with backoff.
    async fn renew(&mut self, cert: &mut Cert) {
        let first = cert.names[0].clone();
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
                cert.failures = 0;
                cert.leaf = loaded.key.cert.first().map(|d| d.to_vec());
                cert.due = renewal_by_lifetime(&loaded);
                if let Some(at) = self.ari(cert).await {
                    cert.due = at;
                }
                tracing::info!(
                    certificate = %first,
                    "ACME: certificate for {} issued, valid until {}; renewal due at {}",
                    cert.names.join(","),
                    loaded.not_after.map(when).unwrap_or_default(),
                    when(cert.due)
                );
                self.send(Event::Issued);
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
                    certificate = %first,
                    "ACME: order for {} failed at {e}; {keeps}; retrying in {}s (failure {} in a row)",
                    cert.names.join(","),
                    wait.as_secs(),
                    cert.failures
                );
            }
        }
    }

    async fn order(&mut self, names: &[String]) -> Result<order::Issued, OrderError> {
        let account = self.account().await?;
        let mut publish = Publisher {
            link: &mut self.link,
        };
        order::run(
            &account,
            names,
            self.settings.challenge,
            self.settings.key_type,
            &mut publish,
        )
        .await
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
                tracing::info!(account = %account.id(), "ACME: account created, kept in {}", path.display());
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

    /// The CA's renewal window for `cert` (RFC 9773), when the CA has one: a random
    /// point inside it.
    async fn ari(&self, cert: &Cert) -> Option<SystemTime> {
        let account = self.account.as_ref()?;
        let id = cert_id(cert.leaf.as_deref()?)?;
        match account.renewal_info(&id).await {
            Ok((info, _retry)) => {
                let w = info.suggested_window;
                let at = schedule::in_window(
                    w.start.into(),
                    w.end.into(),
                    schedule::random_fraction(),
                    SystemTime::now(),
                );
                tracing::info!(certificate = %cert.names[0], "ACME: the CA's renewal window is {} to {}", when(w.start.into()), when(w.end.into()));
                Some(at)
            }
            Err(instant_acme::Error::Unsupported(_)) => None,
            Err(e) => {
                tracing::debug!(certificate = %cert.names[0], "ACME: no renewal information: {}", order::describe(&e));
                None
            }
        }
    }

    fn report(&self, certs: &[Cert]) {
        self.send(Event::Status(Status {
            orders_ok: self.orders_ok,
            orders_failed: self.orders_failed,
            next: certs
                .iter()
                .map(|c| (c.names[0].clone(), unix(c.due)))
                .collect(),
        }));
    }

    fn send(&self, e: Event) {
        if let Err(e) = (self.link.send)(e) {
            tracing::warn!("ACME: cannot reach the master process: {e}");
        }
    }
}

/// Publishes answers through the master to the worker, waiting for its word.
struct Publisher<'a> {
    link: &'a mut Link,
}

impl Publish for Publisher<'_> {
    async fn publish(&mut self, name: &str, token: &str, key_auth: &str) -> Result<(), String> {
        (self.link.send)(Event::Answer {
            name: name.to_owned(),
            token: token.to_owned(),
            key_auth: key_auth.to_owned(),
        })
        .map_err(|e| format!("cannot reach the master process: {e}"))?;
        let wait = async {
            loop {
                match self.link.answered.recv().await {
                    Some(Answered { token: t, error }) if t == token => {
                        return match error {
                            None => Ok(()),
                            Some(e) => Err(e),
                        }
                    }
                    Some(_) => {}
                    None => return Err("the master process is gone".to_owned()),
                }
            }
        };
        tokio::time::timeout(PUBLISH_TIMEOUT, wait)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "the worker did not confirm the answer within {}s",
                    PUBLISH_TIMEOUT.as_secs()
                ))
            })
    }

    fn withdraw(&mut self, name: &str, token: &str) {
        let _ = (self.link.send)(Event::Withdraw {
            name: name.to_owned(),
            token: token.to_owned(),
        });
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
