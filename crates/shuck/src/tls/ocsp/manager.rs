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
            tracing::info!(certificate = %c.source, "OCSP: no responder URL in the certificate; not stapling");
            continue;
        };
        let Some(issuer) = chain.get(1) else {
            tracing::warn!(certificate = %c.source, "OCSP: the issuer is not in the PEM file (put the chain after the certificate); not stapling");
            continue;
        };
        out.push(Target {
            name: c.source.clone(),
            leaf: leaf.to_vec(),
            issuer: issuer.to_vec(),
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
        match verify::verify(&der, &t.leaf, &t.issuer, SystemTime::now()) {
            Ok(s) => {
                store.put(&t.leaf, s);
                tracing::info!(certificate = %t.name, "OCSP: stapling the cached response");
            }
            Err(e) => tracing::info!(certificate = %t.name, "OCSP: cached response not used: {e}"),
        }
    }
}

/// Starts the refresh thread; send it a new target list after a reload.
pub fn start(
    settings: Settings,
    store: Arc<OcspStore>,
    targets: Vec<Target>,
    on_change: Box<dyn Fn() + Send>,
) -> std::io::Result<Sender<Vec<Target>>> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("shuck-ocsp".into())
        .spawn(move || run(&settings, &store, targets, &rx, &*on_change))?;
    Ok(tx)
}

fn run(
    settings: &Settings,
    store: &OcspStore,
    mut targets: Vec<Target>,
    rx: &Receiver<Vec<Target>>,
    on_change: &dyn Fn(),
) {
    // When to ask next, per target (by leaf).
    let mut due: Vec<(Vec<u8>, Instant)> = Vec::new();
    loop {
        let now = Instant::now();
        let mut changed = false;
        for t in &targets {
            let when = due.iter().find(|(l, _)| *l == t.leaf).map(|(_, w)| *w);
            let when = when.unwrap_or_else(|| match store.get(&t.leaf) {
                // A cached staple: refresh on the usual schedule.
                Some(s) => now + next_in(settings, &s),
                None => now,
            });
            let next = if when <= now {
                match refresh(settings, t) {
                    Ok(s) => {
                        let wait = next_in(settings, &s);
                        tracing::info!(certificate = %t.name, "OCSP: fetched a good response from {}; next fetch in {} s", t.url, wait.as_secs());
                        store.put(&t.leaf, s);
                        changed = true;
                        now + wait
                    }
                    Err(e) => {
                        let retry = RETRY.min(settings.refresh);
                        tracing::warn!(certificate = %t.name, "OCSP: {e}; not stapling a new response, retrying in {} s", retry.as_secs());
                        now + retry
                    }
                }
            } else {
                when
            };
            match due.iter_mut().find(|(l, _)| *l == t.leaf) {
                Some(d) => d.1 = next,
                None => due.push((t.leaf.clone(), next)),
            }
        }
        if changed {
            on_change();
        }
        let earliest = due
            .iter()
            .filter(|(l, _)| targets.iter().any(|t| t.leaf == *l))
            .map(|(_, w)| *w)
            .min()
            .unwrap_or(now + settings.refresh);
        match rx.recv_timeout(earliest.saturating_duration_since(Instant::now())) {
            Ok(new) => targets = new,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
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
    let staple = verify::verify(&der, &t.leaf, &t.issuer, SystemTime::now())
        .map_err(|e| format!("response from {} refused: {e}", t.url))?;
    let path = cache_path(&settings.dir, &t.leaf);
    let tmp = path.with_extension("tmp");
    if let Err(e) = std::fs::write(&tmp, &der).and_then(|()| std::fs::rename(&tmp, &path)) {
        tracing::warn!(certificate = %t.name, "OCSP: cannot cache the response in {}: {e}", settings.dir.display());
    }
    Ok(staple)
}
