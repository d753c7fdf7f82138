//! A replication datagram's clear header and its seal (`docs/replication.md`): sealing
//! records under the key derived from the pre-shared key, and opening what arrives after
//! checking its size, version and sender. The records inside are `wire.rs`'s.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, NONCE_LEN};
use aws_lc_rs::rand;

use super::wire::{
    Reject, SenderId, AAD_LEN, CIPHER_AES_256_GCM, HEADER_LEN, MAX_DATAGRAM, MAX_PLAINTEXT,
    TAG_LEN, VERSION,
};

/// Why a datagram could not be sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// More than [`MAX_PLAINTEXT`] bytes of records.
    #[error("records too long for one datagram")]
    TooLong,
    /// The system gave no randomness for the nonce, or the cipher refused.
    #[error("cannot seal (no randomness?)")]
    Crypto,
}

/// The clear part of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Who sent it.
    pub sender: SenderId,
    /// When, unix ms.
    pub timestamp: u64,
    /// The sender's sequence number.
    pub sequence: u64,
}

/// The AEAD key derived from the pre-shared key.
pub struct Sealer {
    key: LessSafeKey,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(AES-256-GCM)")
    }
}

impl Sealer {
    /// Derives the datagram key from a 32-byte pre-shared key (HKDF-SHA256, so the file's
    /// bytes are never used as a cipher key directly).
    pub fn new(psk: &[u8; 32]) -> Result<Self, aws_lc_rs::error::Unspecified> {
        Ok(Sealer {
            key: crate::session::aead::derive_aes_256_gcm(b"shuck replication v1", psk)?,
        })
    }

    /// Seals `records` (at most [`MAX_PLAINTEXT`] bytes) into `out`, which is cleared first.
    /// Fails only when the system has no randomness or the records are too long.
    pub fn seal(
        &self,
        header: &Header,
        records: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), SealError> {
        if records.len() > MAX_PLAINTEXT {
            return Err(SealError::TooLong);
        }
        let mut nonce = [0u8; NONCE_LEN];
        rand::fill(&mut nonce).map_err(|_| SealError::Crypto)?;
        out.clear();
        out.push(VERSION);
        out.push(CIPHER_AES_256_GCM);
        out.extend_from_slice(&header.sender);
        out.extend_from_slice(&header.timestamp.to_be_bytes());
        out.extend_from_slice(&header.sequence.to_be_bytes());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(records);
        let (aad, rest) = out.split_at_mut(HEADER_LEN);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad[..AAD_LEN]),
                rest,
            )
            .map_err(|_| SealError::Crypto)?;
        out.extend_from_slice(tag.as_ref());
        Ok(())
    }

    /// Opens a datagram in place; returns its header and records. Checks, in order: size,
    /// version, own sender, then the seal. Time and sequence are the caller's to check.
    pub fn open<'a>(
        &self,
        datagram: &'a mut [u8],
        me: &SenderId,
    ) -> Result<(Header, &'a [u8]), Reject> {
        let header = peek_header(datagram)?;
        if header.sender == *me {
            return Err(Reject::Own);
        }
        let (head, sealed) = datagram.split_at_mut(HEADER_LEN);
        let nonce =
            Nonce::try_assume_unique_for_key(&head[AAD_LEN..]).map_err(|_| Reject::Malformed)?;
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(&head[..AAD_LEN]), sealed)
            .map_err(|_| Reject::Forged)?;
        Ok((header, plain))
    }
}

/// Reads the clear header after checking size and version.
pub fn peek_header(datagram: &[u8]) -> Result<Header, Reject> {
    if datagram.len() > MAX_DATAGRAM {
        return Err(Reject::Oversized);
    }
    if datagram.len() < HEADER_LEN + TAG_LEN {
        return Err(Reject::Malformed);
    }
    if datagram[0] != VERSION || datagram[1] != CIPHER_AES_256_GCM {
        return Err(Reject::Version);
    }
    let mut sender = [0u8; 8];
    sender.copy_from_slice(&datagram[2..10]);
    let mut ts = [0u8; 8];
    ts.copy_from_slice(&datagram[10..18]);
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&datagram[18..26]);
    Ok(Header {
        sender,
        timestamp: u64::from_be_bytes(ts),
        sequence: u64::from_be_bytes(seq),
    })
}
