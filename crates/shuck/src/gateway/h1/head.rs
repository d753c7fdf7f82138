//! A message head being received, up to `--max-header-bytes`: the one place that counts
//! a head's bytes against its limit, for requests and responses alike (a security
//! boundary: no head grows past the limit, however its bytes arrive).

/// What [`HeadBuf::push`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed {
    /// A whole head; `used` bytes of the input were its last ones.
    Complete {
        /// Input bytes taken.
        used: usize,
        /// The head, `\r\n\r\n` included.
        head: Vec<u8>,
    },
    /// All the input was taken; the head goes on.
    Partial,
    /// The head is longer than the limit.
    TooLarge,
    /// A line ends in a bare LF (no CR before it) or a bare CR (no LF after it): refused
    /// at once rather than waited on (the head would never end in CRLF CRLF).
    BareLineEnd,
}

/// The bytes of a head received so far.
#[derive(Debug)]
pub struct HeadBuf {
    buf: Vec<u8>,
    max: usize,
}

impl HeadBuf {
    /// An empty head that may grow to `max` bytes.
    pub fn new(max: usize) -> Self {
        HeadBuf {
            buf: Vec::new(),
            max,
        }
    }

    /// True when no byte of a head has arrived.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// How many bytes of a head have arrived.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// What was received, taken (the buffer is empty after).
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Forgets what was received (and frees it).
    pub fn clear(&mut self) {
        self.buf = Vec::new();
    }

    /// Takes bytes of `input` until the head ends. At most one byte past the limit is
    /// ever kept, which is what tells a head of exactly `max` bytes from a longer one; a
    /// head that ends in that byte is too large too.
    pub fn push(&mut self, input: &[u8]) -> Pushed {
        let before = self.buf.len();
        let room = self.max.saturating_sub(before);
        let take = input.len().min(room + 1);
        self.buf.extend_from_slice(&input[..take]);
        let end = head_end(&self.buf, before);
        let scanned = &self.buf[..end.unwrap_or(self.buf.len())];
        // A CR is judged once the byte after it has arrived, so look back one byte.
        let bare = |i: usize| match scanned[i] {
            b'\n' => i == 0 || scanned[i - 1] != b'\r',
            b'\r' => scanned.get(i + 1).is_some_and(|&next| next != b'\n'),
            _ => false,
        };
        if (before.saturating_sub(1)..scanned.len()).any(bare) {
            return Pushed::BareLineEnd;
        }
        match end {
            Some(end) if end <= self.max => {
                self.buf.truncate(end);
                Pushed::Complete {
                    used: end - before,
                    head: std::mem::take(&mut self.buf),
                }
            }
            Some(_) => Pushed::TooLarge,
            None if self.buf.len() > self.max => Pushed::TooLarge,
            None => Pushed::Partial,
        }
    }
}

/// Finds the end of a head (`\r\n\r\n`) in `buf`, searching from `from`.
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let start = from.saturating_sub(3);
    buf[start..]
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| start + i + 4)
}

/// What the request `head` (HTTP/1.1's bytes) brings to the choice of `backend`'s server
/// for `client`: its path, a header, a cookie, as the backend's method reads them.
pub fn key_of_head(
    backend: &crate::edge::route::Backend,
    client: std::net::IpAddr,
    head: &[u8],
) -> crate::backend::balance::Key {
    if !backend.reads_requests() {
        return backend.key_of_client(client);
    }
    let mut fields = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut fields);
    if req.parse(head).is_err() {
        return backend.key_of_client(client);
    }
    let path = req.path.unwrap_or("/").as_bytes();
    let pairs: Vec<(&[u8], &[u8])> = req
        .headers
        .iter()
        .map(|h| (h.name.as_bytes(), h.value))
        .collect();
    backend.key_of_request(client, path, &pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_split_anywhere_is_found_whole() {
        let msg = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nBODY";
        for cut in 1..msg.len() - 4 {
            let mut h = HeadBuf::new(64);
            assert_eq!(h.push(&msg[..cut]), Pushed::Partial, "cut {cut}");
            match h.push(&msg[cut..]) {
                Pushed::Complete { used, head } => {
                    assert_eq!(head, &msg[..msg.len() - 4]);
                    assert_eq!(cut + used, msg.len() - 4);
                }
                other => panic!("cut {cut}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_bare_lf_or_cr_is_found_however_the_bytes_arrive() {
        let bare_lf = b"GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n";
        let bare_cr = b"GET / HTTP/1.1\r\nHost: a\rX: b\r\r\r\r";
        for msg in [&bare_lf[..], &bare_cr[..]] {
            for cut in 1..msg.len() {
                let mut h = HeadBuf::new(64);
                let first = h.push(&msg[..cut]);
                let got = if first == Pushed::Partial {
                    h.push(&msg[cut..])
                } else {
                    first
                };
                assert_eq!(got, Pushed::BareLineEnd, "cut {cut}");
            }
        }
        let mut h = HeadBuf::new(64);
        assert_eq!(h.push(b"\n"), Pushed::BareLineEnd);
        // A CR at the end of what arrived waits for the byte after it.
        let mut h = HeadBuf::new(64);
        assert_eq!(h.push(b"GET / HTTP/1.1\r"), Pushed::Partial);
        assert_eq!(h.push(b"\rHost"), Pushed::BareLineEnd);
    }

    #[test]
    fn the_limit_is_exact() {
        let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        let mut h = HeadBuf::new(head.len());
        assert!(matches!(h.push(head), Pushed::Complete { .. }));
        let mut h = HeadBuf::new(head.len() - 1);
        assert_eq!(h.push(head), Pushed::TooLarge);
        // Byte by byte, the buffer never holds more than one byte past the limit.
        let mut h = HeadBuf::new(8);
        let mut last = Pushed::Partial;
        for b in b"GET /aaaaaaaaaaaaaaaa" {
            last = h.push(std::slice::from_ref(b));
            assert!(h.buf.len() <= 9);
            if last == Pushed::TooLarge {
                break;
            }
        }
        assert_eq!(last, Pushed::TooLarge);
    }
}
