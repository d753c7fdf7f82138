//! Object sizes as the seeds write them: `0`, `1k`, `4k`, `100k`, `1m` (powers of 1024), or
//! a byte count.

/// Largest object the origin serves.
pub const MAX_SIZE: usize = 64 << 20;

/// Parses a size; `None` when it is not one or exceeds [`MAX_SIZE`].
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim().to_ascii_lowercase();
    let (num, mult) = match s.strip_suffix(['k', 'm']) {
        Some(n) if s.ends_with('k') => (n, 1024),
        Some(n) => (n, 1024 * 1024),
        None => (s.as_str(), 1),
    };
    let n: usize = num.strip_suffix('b').unwrap_or(num).parse().ok()?;
    let v = n.checked_mul(mult)?;
    (v <= MAX_SIZE).then_some(v)
}

/// Writes a size the way it is parsed (`1k`, `1m`, `100`).
pub fn format_size(n: usize) -> String {
    if n >= 1 << 20 && n % (1 << 20) == 0 {
        format!("{}m", n >> 20)
    } else if n >= 1024 && n % 1024 == 0 {
        format!("{}k", n >> 10)
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("1k"), Some(1024));
        assert_eq!(parse_size("100K"), Some(102_400));
        assert_eq!(parse_size("1m"), Some(1 << 20));
        assert_eq!(parse_size("777"), Some(777));
        assert_eq!(parse_size("65m"), None);
        assert_eq!(parse_size("x"), None);
        for n in [0, 1024, 4096, 102_400, 1 << 20, 777] {
            assert_eq!(parse_size(&format_size(n)), Some(n));
        }
    }
}
