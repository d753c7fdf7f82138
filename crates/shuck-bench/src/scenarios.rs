//! The seed articles' scenarios, by name.

use serde::Serialize;

use crate::load::{KeyType, LoadOpts, ResumeBy, Reuse};

/// One benchmark scenario.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Scenario {
    /// Its name on the command line.
    pub name: &'static str,
    /// What it measures.
    pub about: &'static str,
    /// The server certificate's key.
    pub key: KeyType,
    /// TLS version.
    pub tls: &'static str,
    /// Session reuse.
    #[serde(skip)]
    pub reuse: Reuse,
    /// How TLS 1.2 resumes.
    pub resume_by: ResumeBy,
    /// Requests per session.
    pub requests: u32,
    /// Object size, bytes.
    pub size: usize,
    /// Idle-memory measurement instead of a load.
    pub idle: bool,
}

#[allow(clippy::too_many_arguments)] // a table row, read as one
const fn s(
    name: &'static str,
    about: &'static str,
    key: KeyType,
    tls: &'static str,
    reuse: Reuse,
    resume_by: ResumeBy,
    requests: u32,
    size: usize,
) -> Scenario {
    Scenario {
        name,
        about,
        key,
        tls,
        reuse,
        resume_by,
        requests,
        size,
        idle: false,
    }
}

use KeyType::{EcdsaP256 as Ec, Rsa2048 as Rsa};
use ResumeBy::{Id, Ticket};
use Reuse::{Always, Never};

/// Every scenario, in report order.
pub const ALL: &[Scenario] = &[
    s(
        "full-rsa2048-tls12",
        "full handshake, RSA-2048, TLS 1.2",
        Rsa,
        "1.2",
        Never,
        Ticket,
        1,
        0,
    ),
    s(
        "full-rsa2048-tls13",
        "full handshake, RSA-2048, TLS 1.3",
        Rsa,
        "1.3",
        Never,
        Ticket,
        1,
        0,
    ),
    s(
        "full-ecdsa-tls12",
        "full handshake, ECDSA P-256, TLS 1.2",
        Ec,
        "1.2",
        Never,
        Ticket,
        1,
        0,
    ),
    s(
        "full-ecdsa-tls13",
        "full handshake, ECDSA P-256, TLS 1.3",
        Ec,
        "1.3",
        Never,
        Ticket,
        1,
        0,
    ),
    s(
        "resume-id-tls12",
        "resumed by session ID, TLS 1.2",
        Ec,
        "1.2",
        Always,
        Id,
        1,
        0,
    ),
    s(
        "resume-ticket-tls12",
        "resumed by ticket, TLS 1.2",
        Ec,
        "1.2",
        Always,
        Ticket,
        1,
        0,
    ),
    s(
        "resume-ticket-tls13",
        "resumed by ticket, TLS 1.3",
        Ec,
        "1.3",
        Always,
        Ticket,
        1,
        0,
    ),
    s(
        "keepalive-4",
        "4 requests per resumed session, 0 B objects",
        Ec,
        "1.3",
        Always,
        Ticket,
        4,
        0,
    ),
    s(
        "keepalive-80",
        "80 requests per resumed session, 0 B objects",
        Ec,
        "1.3",
        Always,
        Ticket,
        80,
        0,
    ),
    s(
        "size-1k",
        "1 KB object per resumed session",
        Ec,
        "1.3",
        Always,
        Ticket,
        1,
        1024,
    ),
    s(
        "size-100k",
        "100 KB object per resumed session",
        Ec,
        "1.3",
        Always,
        Ticket,
        1,
        100 * 1024,
    ),
    s(
        "size-1m",
        "1 MB object per resumed session",
        Ec,
        "1.3",
        Always,
        Ticket,
        1,
        1 << 20,
    ),
    Scenario {
        name: "idle-memory",
        about: "server memory per idle TLS connection",
        key: Ec,
        tls: "1.3",
        reuse: Never,
        resume_by: Ticket,
        requests: 0,
        size: 0,
        idle: true,
    },
];

/// Resolves `all` or a comma-separated list of names.
pub fn select(spec: &str) -> Result<Vec<Scenario>, String> {
    if spec == "all" {
        return Ok(ALL.to_vec());
    }
    spec.split(',')
        .map(|n| {
            ALL.iter()
                .find(|s| s.name == n.trim())
                .copied()
                .ok_or_else(|| {
                    format!(
                        "unknown scenario {n:?}; known: all, {}",
                        ALL.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
                    )
                })
        })
        .collect()
}

impl Scenario {
    /// The load options for this scenario against `base`.
    pub fn load_opts(&self, base: &LoadOpts) -> LoadOpts {
        let mut o = base.clone();
        o.tls = Some(self.tls.to_owned());
        o.reuse = self.reuse;
        o.resume_by = self.resume_by;
        o.requests_per_conn = self.requests.max(1);
        o.size = self.size;
        o.key_type = Some(self.key);
        o.cipher = Some(if self.tls == "1.2" {
            "AES128+AESGCM".into()
        } else {
            "TLS_AES_128_GCM_SHA256".into()
        });
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection() {
        assert_eq!(select("all").unwrap().len(), ALL.len());
        let two = select("full-ecdsa-tls13,idle-memory").unwrap();
        assert_eq!(two.len(), 2);
        assert!(two[1].idle);
        assert!(select("nope").unwrap_err().contains("full-rsa2048-tls12"));
    }
}
