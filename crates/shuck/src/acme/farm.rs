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

use crate::codec::{put_bytes_u16, CodecError, Reader};

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
        match self {
            FarmMsg::Lease {
                cert,
                holder,
                until_ms,
            } => {
                w.push(LEASE);
                put_bytes_u16(&mut w, cert.as_bytes());
                put_bytes_u16(&mut w, holder);
                put_bytes_u16(&mut w, &until_ms.to_be_bytes());
            }
            FarmMsg::Answer {
                name,
                token,
                key_auth,
            } => {
                w.push(ANSWER);
                put_bytes_u16(&mut w, name.as_bytes());
                put_bytes_u16(&mut w, token.as_bytes());
                put_bytes_u16(&mut w, key_auth.as_bytes());
            }
            FarmMsg::Answered { token, by } => {
                w.push(ANSWERED);
                put_bytes_u16(&mut w, token.as_bytes());
                put_bytes_u16(&mut w, by);
            }
            FarmMsg::Withdraw { name, token } => {
                w.push(WITHDRAW);
                put_bytes_u16(&mut w, name.as_bytes());
                put_bytes_u16(&mut w, token.as_bytes());
            }
            FarmMsg::Cert { cert, pem } => {
                w.push(CERT);
                put_bytes_u16(&mut w, cert.as_bytes());
                put_bytes_u16(&mut w, pem.as_bytes());
            }
            FarmMsg::Request => w.push(REQUEST),
        }
        w
    }

    /// Parses a record body; `None` for anything malformed (a peer of a later version may
    /// send subtypes this one does not know: also `None`).
    pub fn decode(body: &[u8]) -> Option<FarmMsg> {
        Self::read(body).ok()
    }

    /// Parses a record body, saying what is wrong with one that does not parse.
    pub fn read(body: &[u8]) -> Result<FarmMsg, CodecError> {
        let mut r = Reader::new(body);
        let msg = match r.u8("farm message type")? {
            LEASE => FarmMsg::Lease {
                cert: r.text_u16("leased certificate")?,
                holder: sized(&mut r, "lease holder")?,
                until_ms: u64::from_be_bytes(sized(&mut r, "lease end")?),
            },
            ANSWER => FarmMsg::Answer {
                name: r.text_u16("answer name")?,
                token: r.text_u16("answer token")?,
                key_auth: r.text_u16("key authorization")?,
            },
            ANSWERED => FarmMsg::Answered {
                token: r.text_u16("answered token")?,
                by: sized(&mut r, "answering host")?,
            },
            WITHDRAW => FarmMsg::Withdraw {
                name: r.text_u16("withdrawn name")?,
                token: r.text_u16("withdrawn token")?,
            },
            CERT => FarmMsg::Cert {
                cert: r.text_u16("certificate name")?,
                pem: r.text_u16("certificate")?,
            },
            REQUEST => FarmMsg::Request,
            other => {
                return Err(CodecError::Invalid {
                    what: "farm message type",
                    value: u64::from(other),
                })
            }
        };
        r.end()?;
        Ok(msg)
    }
}

/// A fixed-size field, written like every field after its u16 length.
fn sized<const N: usize>(r: &mut Reader<'_>, what: &'static str) -> Result<[u8; N], CodecError> {
    let b = r.bytes_u16(what)?;
    <[u8; N]>::try_from(b).map_err(|_| CodecError::Invalid {
        what,
        value: b.len() as u64,
    })
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
