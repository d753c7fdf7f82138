//! One way to read and write shuck's own binary formats (the process channel, replication
//! records, the farm's messages, the ticket ring, sealed store values), as rustls's `Codec`
//! does it: a [`Reader`] whose every read is checked against what is left and fails with a
//! typed [`CodecError`] naming the field, and `put_*` writers. Integers are big endian.
//!
//! Not for protocols others define (TLS, PROXY, HTTP): those have parsers of their own.

/// Why bytes do not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Fewer bytes left than the field needs.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// A field whose value the format does not allow.
    #[error("bad {what} ({value})")]
    Invalid {
        /// The field.
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// A field that is not UTF-8 text.
    #[error("{0} is not UTF-8")]
    NotText(&'static str),
    /// A count of items the bytes left cannot hold.
    #[error("{count} {what} in {left} bytes")]
    TooMany {
        /// The items.
        what: &'static str,
        /// How many were announced.
        count: u64,
        /// Bytes left.
        left: usize,
    },
    /// Bytes after the end of what was read.
    #[error("{0} bytes after the end")]
    Trailing(usize),
}

/// Reads fields off the front of a byte slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    /// Bytes not read yet.
    pub fn left(&self) -> usize {
        self.rest.len()
    }

    /// What is not read yet, as it is.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }

    /// The next `n` bytes (the field `what`).
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], CodecError> {
        let (a, b) = self
            .rest
            .split_at_checked(n)
            .ok_or(CodecError::Truncated(what))?;
        self.rest = b;
        Ok(a)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], CodecError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    /// A byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, CodecError> {
        Ok(self.array::<1>(what)?[0])
    }

    /// A big-endian u16.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, CodecError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    /// A big-endian u32.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, CodecError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    /// A big-endian u64.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, CodecError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    /// Bytes after their u8 length.
    pub fn bytes_u8(&mut self, what: &'static str) -> Result<&'a [u8], CodecError> {
        let n = self.u8(what)?;
        self.take(usize::from(n), what)
    }

    /// Bytes after their u16 length.
    pub fn bytes_u16(&mut self, what: &'static str) -> Result<&'a [u8], CodecError> {
        let n = self.u16(what)?;
        self.take(usize::from(n), what)
    }

    /// Bytes after their u32 length.
    pub fn bytes_u32(&mut self, what: &'static str) -> Result<&'a [u8], CodecError> {
        let n = self.u32(what)?;
        self.take(n as usize, what)
    }

    /// UTF-8 text after its u16 length.
    pub fn text_u16(&mut self, what: &'static str) -> Result<String, CodecError> {
        let b = self.bytes_u16(what)?;
        String::from_utf8(b.to_vec()).map_err(|_| CodecError::NotText(what))
    }

    /// A u32 count of items of at least `min` bytes each, refused when the bytes left
    /// cannot hold that many (so a forged count cannot make the reader allocate).
    pub fn count(&mut self, min: usize, what: &'static str) -> Result<usize, CodecError> {
        let n = self.u32(what)?;
        let left = self.rest.len();
        if (n as usize).saturating_mul(min.max(1)) > left {
            return Err(CodecError::TooMany {
                what,
                count: u64::from(n),
                left,
            });
        }
        Ok(n as usize)
    }

    /// Checks that everything was read.
    pub fn end(&self) -> Result<(), CodecError> {
        match self.rest.len() {
            0 => Ok(()),
            n => Err(CodecError::Trailing(n)),
        }
    }
}

/// Appends a big-endian u16.
pub fn put_u16(w: &mut Vec<u8>, n: u16) {
    w.extend_from_slice(&n.to_be_bytes());
}

/// Appends a big-endian u32.
pub fn put_u32(w: &mut Vec<u8>, n: u32) {
    w.extend_from_slice(&n.to_be_bytes());
}

/// Appends a big-endian u64.
pub fn put_u64(w: &mut Vec<u8>, n: u64) {
    w.extend_from_slice(&n.to_be_bytes());
}

/// Appends `b` after its u32 length (at most 4 GiB: callers bound what they write).
pub fn put_bytes_u32(w: &mut Vec<u8>, b: &[u8]) {
    put_u32(w, u32::try_from(b.len()).unwrap_or(u32::MAX));
    w.extend_from_slice(&b[..b.len().min(u32::MAX as usize)]);
}

/// Appends `b` after its u16 length, cut at 65 535 bytes.
pub fn put_bytes_u16(w: &mut Vec<u8>, b: &[u8]) {
    let n = u16::try_from(b.len()).unwrap_or(u16::MAX);
    put_u16(w, n);
    w.extend_from_slice(&b[..usize::from(n)]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_cross_whole_and_every_cut_is_named() {
        let mut w = Vec::new();
        w.push(7);
        put_u16(&mut w, 513);
        put_u32(&mut w, 2);
        put_u64(&mut w, u64::MAX - 1);
        put_bytes_u16(&mut w, b"name");
        put_bytes_u32(&mut w, b"body");
        type Fields = (u8, u16, usize, u64, String, Vec<u8>);
        let read = |b: &[u8]| -> Result<Fields, CodecError> {
            let mut r = Reader::new(b);
            let v = (
                r.u8("kind")?,
                r.u16("port")?,
                r.count(1, "items")?,
                r.u64("time")?,
                r.text_u16("name")?,
                r.bytes_u32("body")?.to_vec(),
            );
            r.end()?;
            Ok(v)
        };
        assert_eq!(
            read(&w),
            Ok((7, 513, 2, u64::MAX - 1, "name".into(), b"body".to_vec()))
        );
        for cut in 0..w.len() {
            // Cut short: a field is truncated, or the count no longer fits what is left.
            assert!(
                matches!(
                    read(&w[..cut]),
                    Err(CodecError::Truncated(_) | CodecError::TooMany { .. })
                ),
                "cut {cut}"
            );
        }
        let mut longer = w.clone();
        longer.push(0);
        assert_eq!(read(&longer), Err(CodecError::Trailing(1)));
    }

    #[test]
    fn counts_beyond_the_bytes_left_and_bad_text_are_refused() {
        let mut w = Vec::new();
        put_u32(&mut w, 1_000_000);
        assert!(matches!(
            Reader::new(&w).count(8, "keys"),
            Err(CodecError::TooMany {
                count: 1_000_000,
                ..
            })
        ));
        let mut w = Vec::new();
        put_bytes_u16(&mut w, &[0xff, 0xfe]);
        assert_eq!(
            Reader::new(&w).text_u16("cert"),
            Err(CodecError::NotText("cert"))
        );
    }
}
