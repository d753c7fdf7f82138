//! SNI: choosing the certificate for the name a client asks for. Exact names first, then a
//! wildcard one label up, then the default (hitch's: the last certificate listed).

use std::collections::HashMap;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::ocsp::OcspStore;
use super::pem::LoadedCert;

/// Maps server names to certificates; built once per configuration, read by every worker.
#[derive(Debug)]
pub struct SniResolver {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// Keyed by the part after `*.`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    default: Arc<CertifiedKey>,
    /// Every certificate as served, in the order given.
    keys: Vec<Arc<CertifiedKey>>,
}

impl SniResolver {
    /// Indexes `certs`; `certs[default]` is served when no name matches (the last one
    /// when out of range). For a name several serve, the first listed wins. Returns
    /// `None` for an empty list.
    pub fn new(certs: &[&LoadedCert], default: usize, staples: Option<&OcspStore>) -> Option<Self> {
        let keys: Vec<Arc<CertifiedKey>> = certs.iter().map(|c| served_key(c, staples)).collect();
        let default = keys.get(default).or(keys.last())?.clone();
        let mut exact = HashMap::new();
        let mut wildcard = HashMap::new();
        for (c, key) in certs.iter().zip(&keys) {
            for n in &c.names {
                let n = n.trim_end_matches('.');
                match n.strip_prefix("*.") {
                    Some(base) => wildcard
                        .entry(base.to_owned())
                        .or_insert_with(|| key.clone()),
                    None => exact.entry(n.to_owned()).or_insert_with(|| key.clone()),
                };
            }
        }
        Some(SniResolver {
            exact,
            wildcard,
            default,
            keys,
        })
    }

    /// The certificate served for `name` (or for no name): its match, else the default.
    pub fn choose(&self, name: Option<&str>) -> &Arc<CertifiedKey> {
        name.and_then(|n| self.lookup(n)).unwrap_or(&self.default)
    }

    /// Every certificate, as served.
    pub fn all(&self) -> &[Arc<CertifiedKey>] {
        &self.keys
    }

    /// The `i`th certificate given to [`SniResolver::new`], as served.
    pub fn served(&self, i: usize) -> Option<&Arc<CertifiedKey>> {
        self.keys.get(i)
    }

    /// The certificate serving `name`, if any serves it (the default is not a match).
    pub fn lookup(&self, name: &str) -> Option<&Arc<CertifiedKey>> {
        let lower;
        let name = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = name.to_ascii_lowercase();
            lower.as_str()
        } else {
            name
        };
        let name = name.trim_end_matches('.');
        self.exact.get(name).or_else(|| {
            let (_, parent) = name.split_once('.')?;
            self.wildcard.get(parent)
        })
    }
}

/// The key as served: with the freshest checked OCSP response (fetched, else from
/// `--ocsp-resp-file`), if any.
fn served_key(c: &LoadedCert, staples: Option<&OcspStore>) -> Arc<CertifiedKey> {
    let fetched = staples
        .zip(c.key.cert.first())
        .and_then(|(s, leaf)| s.get(leaf))
        .map(|s| s.der.clone());
    match fetched.or_else(|| c.ocsp.clone()) {
        Some(der) => {
            let mut k = (*c.key).clone();
            k.ocsp = Some(der);
            Arc::new(k)
        }
        None => c.key.clone(),
    }
}

/// rustls's error when a resolver declines (the handshake answers it with
/// `handshake_failure` in clear, see `proxy::tls_stream`).
pub const NOTHING_RESOLVED: &str = "no server certificate chain resolved";

impl ResolvesServerCert for SniResolver {
    /// The certificate for the name, declined when its key can sign with none of the
    /// schemes the client offers (RFC 8446 4.2.3: abort with handshake_failure), so that
    /// the refusal comes before a ServerHello. rustls gives only the schemes that fit the
    /// cipher suites both sides have: none left means no suite in common, which rustls
    /// names itself.
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let key = self.choose(hello.server_name());
        let offered = hello.signature_schemes();
        if !offered.is_empty() {
            key.key.choose_scheme(offered)?;
        }
        Some(key.clone())
    }
}
