//! ACME across a farm: what the hosts tell each other over replication's sealed channel
//! (`-U`/`-P`; a `Farm` record, type 5 in `docs/replication.md`), so that each certificate
//! is ordered once and served everywhere.
//!
//! - `Lease`: "I order this certificate until then". One host at a time holds a
//!   certificate's lease and renews it while its order runs; a lease that is not renewed
//!   (its holder died) lapses, and another host takes over. Two claims at once: the lower
//!   holder id wins.
//! - `Answer` / `Withdraw`: the orderer's challenge answer, installed by every host's
//!   worker before the CA is asked to check (the CA's connection may land on any host
//!   behind the balancer); each worker confirms with `Answered`.
//! - `Cert`: the issued certificate and key, sent to every host, which keeps it in its own
//!   state directory and serves it.
//! - `Request`: a host that starts asks for the certificates its peers hold.
//!
//! Body of the record: `subtype (1) ‖ fields`, each field `length (2, big endian) ‖ bytes`
//! (ids are 8 bytes, times 8 bytes big endian).

/// A host's id in leases and acknowledgements: random per process start.
pub type HostId = [u8; 8];

/// One farm message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FarmMsg {
    /// `holder` orders the certificate named `cert` until `until_ms` (unix ms); an
    /// `until_ms` in the past releases it.
    Lease {
        /// The certificate's first name.
        cert: String,
        /// Who orders it.
        holder: HostId,
        /// Until when (unix ms).
        until_ms: u64,
    },
    /// Answer this challenge from now on.
    Answer {
        /// The domain.
        name: String,
        /// The challenge's token.
        token: String,
        /// The key authorization.
        key_auth: String,
    },
    /// The worker `by` answers `token`.
    Answered {
        /// The challenge's token.
        token: String,
        /// The worker's id.
        by: HostId,
    },
    /// Stop answering.
    Withdraw {
        /// The domain.
        name: String,
        /// The challenge's token.
        token: String,
    },
    /// A certificate issued: key and chain, PEM.
    Cert {
        /// The certificate's first name.
        cert: String,
        /// Key, then chain.
        pem: String,
    },
    /// Send me the certificates you hold.
    Request,
}

const LEASE: u8 = 1;
const ANSWER: u8 = 2;
const ANSWERED: u8 = 3;
const WITHDRAW: u8 = 4;
const CERT: u8 = 5;
const REQUEST: u8 = 6;

impl FarmMsg {
    /// The record body.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Vec::new();
        let field = |w: &mut Vec<u8>, b: &[u8]| {
            let n = u16::try_from(b.len()).unwrap_or(u16::MAX);
            w.extend_from_slice(&n.to_be_bytes());
            w.extend_from_slice(&b[..usize::from(n)]);
        };
        match self {
            FarmMsg::Lease {
                cert,
                holder,
                until_ms,
            } => {
                w.push(LEASE);
                field(&mut w, cert.as_bytes());
                field(&mut w, holder);
                field(&mut w, &until_ms.to_be_bytes());
            }
            FarmMsg::Answer {
                name,
                token,
                key_auth,
            } => {
                w.push(ANSWER);
                field(&mut w, name.as_bytes());
                field(&mut w, token.as_bytes());
                field(&mut w, key_auth.as_bytes());
            }
            FarmMsg::Answered { token, by } => {
                w.push(ANSWERED);
                field(&mut w, token.as_bytes());
                field(&mut w, by);
            }
            FarmMsg::Withdraw { name, token } => {
                w.push(WITHDRAW);
                field(&mut w, name.as_bytes());
                field(&mut w, token.as_bytes());
            }
            FarmMsg::Cert { cert, pem } => {
                w.push(CERT);
                field(&mut w, cert.as_bytes());
                field(&mut w, pem.as_bytes());
            }
            FarmMsg::Request => w.push(REQUEST),
        }
        w
    }

    /// Parses a record body; `None` for anything malformed (a peer of a later version may
    /// send subtypes this one does not know: also `None`).
    pub fn decode(body: &[u8]) -> Option<FarmMsg> {
        let (&kind, mut rest) = body.split_first()?;
        let mut field = || -> Option<&[u8]> {
            if rest.len() < 2 {
                return None;
            }
            let n = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
            let b = rest.get(2..2 + n)?;
            rest = &rest[2 + n..];
            Some(b)
        };
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).ok();
        let id = |b: &[u8]| <HostId>::try_from(b).ok();
        let msg = match kind {
            LEASE => FarmMsg::Lease {
                cert: text(field()?)?,
                holder: id(field()?)?,
                until_ms: u64::from_be_bytes(<[u8; 8]>::try_from(field()?).ok()?),
            },
            ANSWER => FarmMsg::Answer {
                name: text(field()?)?,
                token: text(field()?)?,
                key_auth: text(field()?)?,
            },
            ANSWERED => FarmMsg::Answered {
                token: text(field()?)?,
                by: id(field()?)?,
            },
            WITHDRAW => FarmMsg::Withdraw {
                name: text(field()?)?,
                token: text(field()?)?,
            },
            CERT => FarmMsg::Cert {
                cert: text(field()?)?,
                pem: text(field()?)?,
            },
            REQUEST => FarmMsg::Request,
            _ => return None,
        };
        rest.is_empty().then_some(msg)
    }
}

/// A random host id.
pub fn new_id() -> HostId {
    let mut id = [0u8; 8];
    if aws_lc_rs::rand::fill(&mut id).is_err() {
        // No randomness: the pid and the time still tell hosts apart in practice.
        let t = crate::clock::unix_ms() ^ u64::from(std::process::id()) << 40;
        id = t.to_be_bytes();
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_crosses_whole_and_junk_is_refused() {
        let all = [
            FarmMsg::Lease {
                cert: "a.test".into(),
                holder: [1; 8],
                until_ms: 1234,
            },
            FarmMsg::Answer {
                name: "a.test".into(),
                token: "tok".into(),
                key_auth: "tok.thumb".into(),
            },
            FarmMsg::Answered {
                token: "tok".into(),
                by: [2; 8],
            },
            FarmMsg::Withdraw {
                name: "a.test".into(),
                token: "tok".into(),
            },
            FarmMsg::Cert {
                cert: "a.test".into(),
                pem: "-----BEGIN...".into(),
            },
            FarmMsg::Request,
        ];
        for m in all {
            let b = m.encode();
            assert_eq!(FarmMsg::decode(&b), Some(m.clone()));
            // Every truncation and an extra byte are refused.
            for n in 0..b.len() {
                assert_eq!(FarmMsg::decode(&b[..n]), None, "{m:?} cut at {n}");
            }
            let mut longer = b.clone();
            longer.push(0);
            assert_eq!(FarmMsg::decode(&longer), None);
        }
        assert_eq!(FarmMsg::decode(&[99]), None);
        assert_eq!(FarmMsg::decode(&[LEASE, 0, 1, 0xff, 0, 8]), None);
    }
}
