//! The challenge answers a worker gives while an order is under way: for tls-alpn-01
//! (RFC 8737) a self-signed certificate carrying the key authorization's digest, served
//! to a ClientHello that names the domain and offers only ALPN `acme-tls/1`; for http-01
//! the key authorization itself, at `/.well-known/acme-challenge/TOKEN`.
//!
//! One table per process: the supervisor writes it as the master relays the client's
//! answers, and every handshake reads it. It lives outside the frontends' TLS states so
//! that a reload or a new certificate, which rebuild those, cannot drop an answer the CA
//! is about to check.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::ServerConfig;

/// The ALPN protocol of tls-alpn-01.
pub use crate::tls::hello::ACME_TLS_ALPN;

/// Why an answer could not be made.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// rcgen refused the certificate.
    #[error("cannot make the tls-alpn-01 certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("cannot serve the tls-alpn-01 certificate: {0}")]
    Tls(#[from] rustls::Error),
}

#[derive(Default)]
struct Table {
    /// Domain → the configuration answering tls-alpn-01 for it, and since when.
    tls: HashMap<String, (Arc<ServerConfig>, Instant)>,
    /// Token → key authorization, and since when.
    http: HashMap<String, (String, Instant)>,
}

/// An answer nobody withdrew (its orderer died) is dropped after this: a CA checks within
/// minutes, and a pending answer costs every handshake a look at its ClientHello.
pub const MAX_AGE: Duration = Duration::from_secs(600);

/// The answers of one process.
#[derive(Default)]
pub struct Answers {
    table: Mutex<Table>,
    /// Whether any answer is pending: the one thing an ordinary handshake reads.
    any: AtomicBool,
}

/// This process's answers.
pub fn answers() -> &'static Answers {
    static ANSWERS: OnceLock<Answers> = OnceLock::new();
    ANSWERS.get_or_init(Answers::default)
}

impl Answers {
    /// Whether an answer is pending (a relaxed load: an answer arrives before the CA is
    /// told to check it, through the master, so it is long visible when the CA connects).
    pub fn pending(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// Answers the challenge `token` for `name` with `key_auth`, both ways.
    pub fn add(&self, name: &str, token: &str, key_auth: &str) -> Result<(), AnswerError> {
        let config = tls_alpn_config(name, key_auth)?;
        let now = Instant::now();
        let mut t = self.lock();
        t.tls.insert(name.to_owned(), (config, now));
        t.http.insert(token.to_owned(), (key_auth.to_owned(), now));
        self.any.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Drops the answers older than `max_age`.
    pub fn expire(&self, max_age: Duration) {
        if !self.pending() {
            return;
        }
        let mut t = self.lock();
        t.tls.retain(|_, (_, at)| at.elapsed() < max_age);
        t.http.retain(|_, (_, at)| at.elapsed() < max_age);
        self.any
            .store(!t.tls.is_empty() || !t.http.is_empty(), Ordering::Relaxed);
    }

    /// Forgets the answer for `name` and `token`.
    pub fn remove(&self, name: &str, token: &str) {
        let mut t = self.lock();
        t.tls.remove(name);
        t.http.remove(token);
        self.any
            .store(!t.tls.is_empty() || !t.http.is_empty(), Ordering::Relaxed);
    }

    /// The configuration answering tls-alpn-01 for `name`.
    pub fn tls_alpn(&self, name: &str) -> Option<Arc<ServerConfig>> {
        self.lock()
            .tls
            .get(&name.to_ascii_lowercase())
            .map(|(c, _)| c.clone())
    }

    /// The key authorization for `token`.
    pub fn http(&self, token: &str) -> Option<String> {
        self.lock().http.get(token).map(|(k, _)| k.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // A panic while holding it cannot leave the maps half-written (single inserts).
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The RFC 8737 certificate for `name` (SAN `name`, the critical acmeIdentifier extension
/// holding SHA-256 of `key_auth`) in a configuration that speaks only `acme-tls/1`.
fn tls_alpn_config(name: &str, key_auth: &str) -> Result<Arc<ServerConfig>, AnswerError> {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, key_auth.as_bytes());
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()])?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest.as_ref())];
    let cert = params.self_signed(&key)?;
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    // Not `with_single_cert`: it parses the certificate with webpki, which refuses the
    // critical acmeIdentifier extension that is the whole point here.
    let signing = provider.key_provider.load_private_key(key_der)?;
    let certified = CertifiedKey::new(vec![cert.der().clone()], signing);
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
    config.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_kept_both_ways_and_forgotten() {
        let a = Answers::default();
        assert!(!a.pending());
        a.add("a.test", "tok", "tok.thumb").unwrap();
        assert!(a.pending());
        assert!(a.tls_alpn("A.test").is_some());
        assert_eq!(a.http("tok").as_deref(), Some("tok.thumb"));
        assert!(a.http("other").is_none());
        a.remove("a.test", "tok");
        assert!(!a.pending());
        assert!(a.tls_alpn("a.test").is_none());
        // One nobody withdrew lapses.
        a.add("b.test", "tok2", "tok2.thumb").unwrap();
        a.expire(Duration::from_secs(60));
        assert!(a.pending());
        a.expire(Duration::ZERO);
        assert!(!a.pending() && a.http("tok2").is_none());
    }
}
