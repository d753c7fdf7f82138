//! OCSP stapling. A response given per certificate (`--ocsp-resp-file CERT=DER`) is checked
//! once and stapled; with `--ocsp-dir DIR`, shuck asks each certificate's responder itself
//! (the URL in its Authority Information Access), keeps the answers in DIR so that a
//! restart staples at once, and asks again before they expire. A response that fails any
//! check (signature, certificate, status, time) is not stapled, and the log says why.
//!
//! Staples are applied when TLS states are built: a refresh rebuilds them as a reload does
//! (live connections keep theirs), so a handshake never looks anything up.

pub mod fetch;
pub mod manager;
pub mod trust;
pub mod verify;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_lc_rs::digest;

pub use verify::{OcspError, Staple};

/// A certificate's identity for the store: SHA-256 of the leaf.
pub type Fingerprint = [u8; 32];

/// SHA-256 of `der`.
pub fn fingerprint(der: &[u8]) -> Fingerprint {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, der).as_ref());
    out
}

/// The current staples, by certificate. Read only when TLS states are built.
#[derive(Debug, Default)]
pub struct OcspStore {
    staples: Mutex<HashMap<Fingerprint, Arc<Staple>>>,
}

impl OcspStore {
    /// The staple for `leaf`, if one is current.
    pub fn get(&self, leaf: &[u8]) -> Option<Arc<Staple>> {
        let now = std::time::SystemTime::now();
        self.staples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fingerprint(leaf))
            .filter(|s| s.next_update > now)
            .cloned()
    }

    /// Records a checked staple.
    pub fn put(&self, leaf: &[u8], staple: Staple) {
        self.staples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fingerprint(leaf), Arc::new(staple));
    }
}
