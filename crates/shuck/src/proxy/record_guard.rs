//! What the client's records must respect while a handshake runs, checked on the bytes as
//! they arrive and before rustls sees them, so that the client gets the alert RFC 8446 names
//! in clear: a plaintext record over 2^14 bytes is `record_overflow` (§5.1), a ClientHello
//! whose `legacy_version` is 0x0300 or lower is `protocol_version` (D.5), also when its
//! `supported_versions` lists TLS 1.3. rustls takes the first and serves the second.
//!
//! Not for the data path: the stream stops asking once the handshake is over.

use rustls::AlertDescription;

/// Largest plaintext record (RFC 8446 §5.1).
const MAX_PLAINTEXT: usize = 1 << 14;

/// A handshake refused by shuck itself, with the alert the client gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct Refused {
    /// The fatal alert sent in clear.
    pub alert: AlertDescription,
    /// Why, for the log.
    pub why: &'static str,
}

impl Refused {
    /// The refusal `e` carries, if it is one.
    pub fn of(e: &std::io::Error) -> Option<Refused> {
        e.get_ref()?.downcast_ref::<Refused>().copied()
    }

    /// As an I/O error, the way the handshake's errors travel.
    pub fn into_io(self) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, self)
    }
}

/// Walks the record headers of the client's byte stream, however the reads cut it.
#[derive(Debug, Default)]
pub struct RecordGuard {
    /// The record header being read, `header[..have]`.
    header: [u8; 5],
    have: u8,
    /// Bytes of the current record's body still to come.
    left: u16,
    /// The current record is a handshake record.
    handshake: bool,
    /// The first bytes of the first handshake message: type, length, legacy_version.
    hello: [u8; 6],
    hello_have: u8,
}

impl RecordGuard {
    /// Looks at `bytes`, the next bytes the client sent.
    pub fn scan(&mut self, mut bytes: &[u8]) -> Result<(), Refused> {
        while !bytes.is_empty() {
            if self.left == 0 {
                let take = (5 - usize::from(self.have)).min(bytes.len());
                let at = usize::from(self.have);
                self.header[at..at + take].copy_from_slice(&bytes[..take]);
                self.have += take as u8;
                bytes = &bytes[take..];
                if self.have < 5 {
                    return Ok(());
                }
                self.have = 0;
                let len = u16::from_be_bytes([self.header[3], self.header[4]]);
                // change_cipher_spec, alert, handshake: plaintext while the handshake runs
                // (TLS 1.3 encrypts under application_data; TLS 1.2's encrypted Finished is
                // a few dozen bytes).
                let plaintext = matches!(self.header[0], 20..=22);
                if plaintext && usize::from(len) > MAX_PLAINTEXT {
                    return Err(Refused {
                        alert: AlertDescription::RecordOverflow,
                        why: "a plaintext record longer than 2^14 bytes (RFC 8446 5.1)",
                    });
                }
                self.left = len;
                self.handshake = self.header[0] == 22;
                continue;
            }
            let n = usize::from(self.left).min(bytes.len());
            if self.handshake && self.hello_have < 6 {
                let at = usize::from(self.hello_have);
                let take = (6 - at).min(n);
                self.hello[at..at + take].copy_from_slice(&bytes[..take]);
                self.hello_have += take as u8;
                if self.hello_have == 6 {
                    self.check_hello()?;
                }
            }
            self.left -= n as u16;
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// The first handshake message's head: a ClientHello's legacy_version.
    fn check_hello(&self) -> Result<(), Refused> {
        const CLIENT_HELLO: u8 = 1;
        let version = u16::from_be_bytes([self.hello[4], self.hello[5]]);
        if self.hello[0] == CLIENT_HELLO && version <= 0x0300 {
            return Err(Refused {
                alert: AlertDescription::ProtocolVersion,
                why: "a ClientHello with legacy_version SSLv3 or older (RFC 8446 D.5)",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(typ: u8, body: &[u8]) -> Vec<u8> {
        let mut r = vec![typ, 3, 1];
        r.extend_from_slice(&(body.len() as u16).to_be_bytes());
        r.extend_from_slice(body);
        r
    }

    fn hello(version: [u8; 2]) -> Vec<u8> {
        let mut h = vec![1, 0, 0, 40, version[0], version[1]];
        h.resize(44, 0);
        h
    }

    /// Feeds `bytes` cut into pieces of `step` bytes.
    fn scan_in(bytes: &[u8], step: usize) -> Result<(), Refused> {
        let mut g = RecordGuard::default();
        bytes.chunks(step).try_for_each(|c| g.scan(c))
    }

    #[test]
    fn an_ordinary_hello_passes_however_it_is_cut() {
        let mut stream = record(22, &hello([3, 3]));
        stream.extend(record(20, &[1]));
        stream.extend(record(23, &vec![0; MAX_PLAINTEXT + 256]));
        for step in [1, 2, 3, 5, 7, 4096] {
            assert_eq!(scan_in(&stream, step), Ok(()), "step {step}");
        }
    }

    #[test]
    fn an_sslv3_hello_is_refused_also_split_over_records() {
        let h = hello([3, 0]);
        let mut split = record(22, &h[..3]);
        split.extend(record(22, &h[3..]));
        for stream in [record(22, &h), split] {
            for step in [1, 4, 4096] {
                let e = scan_in(&stream, step).unwrap_err();
                assert_eq!(e.alert, AlertDescription::ProtocolVersion);
            }
        }
        let e = scan_in(&record(22, &hello([2, 0])), 9).unwrap_err();
        assert_eq!(e.alert, AlertDescription::ProtocolVersion);
    }

    #[test]
    fn a_plaintext_record_over_two_to_the_fourteen_is_an_overflow() {
        let ok = record(22, &vec![0; MAX_PLAINTEXT]);
        assert_eq!(scan_in(&ok, 1000), Ok(()));
        for typ in [20, 21, 22] {
            let mut head = vec![typ, 3, 3];
            head.extend_from_slice(&(MAX_PLAINTEXT as u16 + 1).to_be_bytes());
            let e = scan_in(&head, 1).unwrap_err();
            assert_eq!(e.alert, AlertDescription::RecordOverflow);
        }
    }
}
