//! The request phase's body limit (`--max-body-bytes`, a route's or a backend's
//! `max-body-bytes`), one rule for every version: a declared length over it is refused
//! with 413 before anything reaches the backend; a body without one (chunked, HTTP/2,
//! HTTP/3 streams) is counted as it passes, and the piece that takes it over is never
//! written.

/// Why a request's body was refused, for logs.
pub const TOO_LARGE: &str = "a request body over its limit (max-body-bytes)";

/// What a body may still bring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Budget(Option<u64>);

/// The body went past its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{TOO_LARGE}")]
pub struct Over;

impl Budget {
    /// A body held to `limit` bytes (`None`: not held).
    pub fn new(limit: Option<u64>) -> Self {
        Budget(limit)
    }

    /// Whether a body declared `len` bytes long is over it already.
    pub fn refuses(&self, len: u64) -> bool {
        self.0.is_some_and(|l| len > l)
    }

    /// `n` more bytes of the body: `Err` once they take it past the limit.
    pub fn take(&mut self, n: u64) -> Result<(), Over> {
        match &mut self.0 {
            None => Ok(()),
            Some(left) => {
                *left = left.checked_sub(n).ok_or(Over)?;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_byte_over_is_over() {
        let mut b = Budget::new(Some(10));
        assert!(!b.refuses(10));
        assert!(b.refuses(11));
        assert_eq!(b.take(6), Ok(()));
        assert_eq!(b.take(4), Ok(()));
        assert_eq!(b.take(1), Err(Over));
        let mut none = Budget::new(None);
        assert!(!none.refuses(u64::MAX));
        assert_eq!(none.take(u64::MAX), Ok(()));
    }
}
