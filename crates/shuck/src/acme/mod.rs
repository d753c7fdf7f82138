//! Certificates that get and renew themselves: an ACME (RFC 8555) client.
//!
//! The client runs in a process of its own, forked by the master and keeping its user
//! (root in production): the master stays single-threaded (it forks workers), and the
//! client needs a runtime, the network and the state directory, which the unprivileged
//! worker may not write. The pieces:
//!
//! - [`state`]: the state directory (account, certificates and keys), read by the master
//!   like any certificate file, written only by the client;
//! - [`order`]: one order, from the account to the certificate;
//! - [`schedule`]: when each certificate is renewed (the CA's renewal window, or two
//!   thirds of its lifetime; backoff after a failure);
//! - [`client`]: the client process's loop;
//! - [`answers`]: in the worker, the challenge answers the CA checks (tls-alpn-01 on the
//!   frontends, http-01 on the plain-HTTP listener, `crate::redirect`).

pub mod answers;
pub mod client;
pub mod farm;
pub mod order;
pub mod schedule;
pub mod state;

use std::net::SocketAddr;
use std::path::PathBuf;

/// How the CA checks that shuck answers for a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Challenge {
    /// RFC 8737: a TLS handshake on the frontends with ALPN `acme-tls/1`.
    TlsAlpn01,
    /// RFC 8555 8.3: `GET /.well-known/acme-challenge/TOKEN` on port 80.
    Http01,
}

impl Challenge {
    /// Its name in flags and logs.
    pub fn name(self) -> &'static str {
        match self {
            Challenge::TlsAlpn01 => "tls-alpn-01",
            Challenge::Http01 => "http-01",
        }
    }
}

/// The key type of the certificates ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// ECDSA on P-256.
    EcdsaP256,
    /// ECDSA on P-384.
    EcdsaP384,
    /// RSA, 2048 bits.
    Rsa2048,
    /// RSA, 3072 bits.
    Rsa3072,
}

impl KeyType {
    /// Every key type, with its name in `--acme-key-type`.
    pub const ALL: [(&'static str, KeyType); 4] = [
        ("ecdsa-p256", KeyType::EcdsaP256),
        ("ecdsa-p384", KeyType::EcdsaP384),
        ("rsa-2048", KeyType::Rsa2048),
        ("rsa-3072", KeyType::Rsa3072),
    ];
}

/// The ACME settings, checked.
#[derive(Clone)]
pub struct Settings {
    /// The directory URL.
    pub directory: String,
    /// One entry per certificate: its names, the first naming it.
    pub domains: Vec<Vec<String>>,
    /// Account contacts (`mailto:` URIs).
    pub contacts: Vec<String>,
    /// The state directory.
    pub state: PathBuf,
    /// The challenge answered.
    pub challenge: Challenge,
    /// Where http-01 is answered.
    pub http_listen: Option<SocketAddr>,
    /// Roots for the ACME server's HTTPS certificate (`--acme-ca-file`).
    pub ca_file: Option<PathBuf>,
    /// The key type of the certificates.
    pub key_type: KeyType,
    /// External account binding: key identifier and HMAC key.
    pub eab: Option<(String, Vec<u8>)>,
    /// With replication on: the farm the certificates are ordered for.
    pub farm: Option<FarmPeers>,
}

/// The other hosts of the farm, as replication reaches them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FarmPeers {
    /// Unicast peers (`-P HOST:PORT`): each must confirm an answer. 0 with multicast
    /// only, where how many hosts listen is unknown.
    pub unicast_peers: usize,
}

/// What the ACME client tells the master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Answer this challenge from now on (the master relays it to its worker).
    Answer {
        /// The domain.
        name: String,
        /// The challenge's token.
        token: String,
        /// The key authorization.
        key_auth: String,
    },
    /// The challenge is over.
    Withdraw {
        /// The domain.
        name: String,
        /// The challenge's token.
        token: String,
    },
    /// New certificates are in the state directory.
    Issued,
    /// What the metrics show.
    Status(Status),
    /// A message for the farm's other hosts (a [`farm::FarmMsg`], encoded).
    Farm(Vec<u8>),
}

/// The worker's word on an answer, relayed back to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// The challenge's token.
    pub token: String,
    /// Why the answer could not be made, when it could not.
    pub error: Option<String>,
}

/// The ACME client's counters, for the worker's metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// Orders that ended with a certificate.
    pub orders_ok: u64,
    /// Orders that failed.
    pub orders_failed: u64,
    /// Each certificate (its first name) and when it is renewed next (seconds since the
    /// epoch).
    pub next: Vec<(String, u64)>,
}

impl std::fmt::Debug for Settings {
    /// Everything but the HMAC key, which is a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("directory", &self.directory)
            .field("domains", &self.domains)
            .field("contacts", &self.contacts)
            .field("state", &self.state)
            .field("challenge", &self.challenge)
            .field("http_listen", &self.http_listen)
            .field("ca_file", &self.ca_file)
            .field("key_type", &self.key_type)
            .field("eab_kid", &self.eab.as_ref().map(|(kid, _)| kid))
            .field("farm", &self.farm)
            .finish()
    }
}
