//! `--ocsp-dir`: a thread that keeps a fresh, checked response for every certificate that
//! names a responder, caches it in the directory, and tells the main thread to restaple.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::fetch::{self, Timeouts};
use super::{fingerprint, verify, OcspStore};
use crate::tls::LoadedCert;

/// Retry delay after a failed fetch (or sooner, if the refresh interval is shorter).
const RETRY: Duration = Duration::from_secs(30);
/// Fetches under way at once at most.
const PARALLEL: usize = 8;
/// Ask again this long before nextUpdate at the latest.
const BEFORE_EXPIRY: Duration = Duration::from_secs(60);

/// `--ocsp-dir` and its knobs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where responses are cached.
    pub dir: PathBuf,
    /// Longest time between two fetches for one certificate (`--ocsp-refresh-interval`).
    pub refresh: Duration,
    /// Talking to responders.
    pub timeouts: Timeouts,
    /// With `--ocsp-verify-staple`: what a delegated responder must chain to.
    pub trust: Option<Anchors>,
}

/// Trust anchors, or why the system's store could not be read.
pub type Anchors = Result<Arc<rustls::RootCertStore>, String>;

impl Settings {
    /// The trust a response about `t` is checked under.
    fn trust<'a>(&'a self, t: &'a Target) -> Option<verify::Trust<'a>> {
        self.trust.as_ref().map(|a| verify::Trust {
            roots: a.as_deref().map_err(String::as_str),
            chain: &t.chain,
        })
    }
}

/// A certificate to keep a staple for.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its source, for the log.
    pub name: String,
    /// Leaf certificate, DER.
    pub leaf: Vec<u8>,
    /// Its issuer (the next certificate of the chain), DER.
    pub issuer: Vec<u8>,
    /// The chain after the leaf (the issuer first), for a delegated responder's path.
    pub chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// The responder.
    pub url: String,
}

/// The certificates of `certs` that can be stapled (a responder URL and the issuer in the
/// chain); the others are named in the log.
pub fn targets<'a>(certs: impl IntoIterator<Item = &'a LoadedCert>) -> Vec<Target> {
    let mut out: Vec<Target> = Vec::new();
    for c in certs {
        let chain = &c.key.cert;
        let Some(leaf) = chain.first() else { continue };
        if out.iter().any(|t| t.leaf == leaf.as_ref()) {
            continue;
        }
        let Some(url) = verify::responder_url(leaf) else {
            tracing::info!(
                name: "ocsp_no_responder",
                certificate = %c.source,
                "OCSP: no responder URL in the certificate; not stapling",
            );
            continue;
        };
        let Some(issuer) = chain.get(1) else {
            tracing::warn!(
                name: "ocsp_no_issuer",
                certificate = %c.source,
                "OCSP: the issuer is not in the PEM file (put the chain after the certificate); not stapling",
            );
            continue;
        };
        out.push(Target {
            name: c.source.clone(),
            leaf: leaf.to_vec(),
            issuer: issuer.to_vec(),
            chain: chain[1..].to_vec(),
            url,
        });
    }
    out
}

fn cache_path(dir: &Path, leaf: &[u8]) -> PathBuf {
    let hex: String = fingerprint(leaf)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    dir.join(format!("{hex}.der"))
}

/// Loads cached responses that still pass every check (at start, before serving).
pub fn load_cached(settings: &Settings, targets: &[Target], store: &OcspStore) {
    for t in targets {
        let path = cache_path(&settings.dir, &t.leaf);
        let Ok(der) = std::fs::read(&path) else {
            continue;
        };
        match verify::verify(
            &der,
            &t.leaf,
            &t.issuer,
            SystemTime::now(),
            settings.trust(t),
        ) {
            Ok(s) => {
                store.put(&t.leaf, s);
                tracing::info!(
                    name: "ocsp_cached_stapled",
                    certificate = %t.name,
                    "OCSP: stapling the cached response",
                );
            }
            Err(e) => {
                tracing::info!(
                    name: "ocsp_cached_unused",
                    error = %e,
                    certificate = %t.name,
                    "OCSP: cached response not used: {e}",
                )
            }
        }
    }
}

/// Starts the refresh thread; send it a new target list after a reload.
pub fn start(
    settings: Settings,
    store: Arc<OcspStore>,
    targets: Vec<Target>,
    on_change: Box<dyn Fn() + Send>,
) -> std::io::Result<Updates> {
    let (tx, rx) = mpsc::channel();
    let results = tx.clone();
    std::thread::Builder::new()
        .name("shuck-ocsp".into())
        .spawn(move || run(&settings, &store, targets, &rx, &results, &*on_change))?;
    Ok(Updates(tx))
}

/// Tells the OCSP thread which certificates to keep staples for (after a reload).
#[derive(Debug, Clone)]
pub struct Updates(Sender<Msg>);

impl Updates {
    /// Replaces the certificates looked after.
    pub fn send(&self, targets: Vec<Target>) {
        let _ = self.0.send(Msg::Targets(targets));
    }
}

/// What the OCSP thread hears.
#[derive(Debug)]
pub enum Msg {
    /// New certificates to look after (a reload).
    Targets(Vec<Target>),
    /// A fetch ended.
    Fetched {
        /// The certificate's leaf.
        leaf: Vec<u8>,
        /// The checked response, or why there is none.
        result: Result<verify::Staple, String>,
    },
}

fn run(
    settings: &Settings,
    store: &OcspStore,
    mut targets: Vec<Target>,
    rx: &Receiver<Msg>,
    results: &Sender<Msg>,
    on_change: &dyn Fn(),
) {
    // When to ask next, per target (by leaf), and the fetches under way: each runs in a
    // thread of its own, so that a slow or unreachable responder holds back no other
    // certificate's staple.
    let mut due: Vec<(Vec<u8>, Instant)> = Vec::new();
    let mut in_flight: Vec<Vec<u8>> = Vec::new();
    loop {
        let now = Instant::now();
        for t in &targets {
            if in_flight.contains(&t.leaf) {
                continue;
            }
            let when = due.iter().find(|(l, _)| *l == t.leaf).map(|(_, w)| *w);
            let when = when.unwrap_or_else(|| match store.get(&t.leaf) {
                // A cached staple: refresh on the usual schedule.
                Some(s) => now + next_in(settings, &s),
                None => now,
            });
            set_due(&mut due, &t.leaf, when);
            if when <= now && in_flight.len() < PARALLEL {
                in_flight.push(t.leaf.clone());
                let (s2, t2, tx) = (settings.clone(), t.clone(), results.clone());
                let spawned = std::thread::Builder::new()
                    .name("shuck-ocsp-fetch".into())
                    .spawn(move || {
                        let result = refresh(&s2, &t2);
                        let _ = tx.send(Msg::Fetched {
                            leaf: t2.leaf,
                            result,
                        });
                    });
                if spawned.is_err() {
                    // No thread to be had: fetch here.
                    let _ = results.send(Msg::Fetched {
                        leaf: t.leaf.clone(),
                        result: refresh(settings, t),
                    });
                }
            }
        }
        let earliest = due
            .iter()
            .filter(|(l, _)| !in_flight.contains(l))
            .map(|(_, w)| *w)
            .min()
            .unwrap_or(now + settings.refresh);
        match rx.recv_timeout(earliest.saturating_duration_since(Instant::now())) {
            Ok(Msg::Targets(new)) => {
                // Certificates a reload dropped are forgotten.
                due.retain(|(l, _)| new.iter().any(|t| t.leaf == *l));
                targets = new;
            }
            Ok(Msg::Fetched { leaf, result }) => {
                in_flight.retain(|l| *l != leaf);
                // A reload may have dropped the certificate meanwhile.
                let Some(t) = targets.iter().find(|t| t.leaf == leaf) else {
                    continue;
                };
                let next = match result {
                    Ok(s) => {
                        let wait = next_in(settings, &s);
                        tracing::info!(
                            name: "ocsp_fetched",
                            url = %t.url,
                            next_s = wait.as_secs(),
                            certificate = %t.name,
                            "OCSP: fetched a good response from {}; next fetch in {} s",
                            t.url,
                            wait.as_secs(),
                        );
                        store.put(&t.leaf, s);
                        on_change();
                        wait
                    }
                    Err(e) => {
                        let retry = RETRY.min(settings.refresh);
                        tracing::warn!(
                            name: "ocsp_fetch_failed",
                            error = %e,
                            retry_s = retry.as_secs(),
                            certificate = %t.name,
                            "OCSP: {e}; not stapling a new response, retrying in {} s",
                            retry.as_secs(),
                        );
                        retry
                    }
                };
                set_due(&mut due, &leaf, Instant::now() + next);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn set_due(due: &mut Vec<(Vec<u8>, Instant)>, leaf: &[u8], when: Instant) {
    match due.iter_mut().find(|(l, _)| *l == leaf) {
        Some(d) => d.1 = when,
        None => due.push((leaf.to_vec(), when)),
    }
}

/// How long until this staple should be replaced.
fn next_in(settings: &Settings, s: &verify::Staple) -> Duration {
    let left = s
        .next_update
        .duration_since(SystemTime::now())
        .unwrap_or_default()
        .saturating_sub(BEFORE_EXPIRY);
    settings.refresh.min(left).max(Duration::from_secs(1))
}

/// Fetches, checks and caches one response.
fn refresh(settings: &Settings, t: &Target) -> Result<verify::Staple, String> {
    let req = verify::request(&t.leaf, &t.issuer).map_err(|e| e.to_string())?;
    let der = fetch::post(&t.url, &req, settings.timeouts)?;
    let staple = verify::verify(
        &der,
        &t.leaf,
        &t.issuer,
        SystemTime::now(),
        settings.trust(t),
    )
    .map_err(|e| format!("response from {} refused: {e}", t.url))?;
    let path = cache_path(&settings.dir, &t.leaf);
    let tmp = path.with_extension("tmp");
    if let Err(e) = std::fs::write(&tmp, &der).and_then(|()| std::fs::rename(&tmp, &path)) {
        tracing::warn!(
            name: "ocsp_cache_failed",
            error = %e,
            dir = %settings.dir.display(),
            certificate = %t.name,
            "OCSP: cannot cache the response in {}: {e}",
            settings.dir.display(),
        );
    }
    Ok(staple)
}
