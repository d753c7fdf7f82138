//! What a `Host` field (or HTTP/2's `:authority`) may hold: `uri-host[:port]` (RFC 9112
//! §3.2, RFC 3986 §3.2.2), so that `--http` refuses what a backend could read two ways and
//! the ACME http-01 port never reflects anything else into a `Location`.
//!
//! Stricter than RFC 3986's reg-name in one place, as HAProxy is: a comma, which some
//! backends read as a list of hosts, is refused.

/// Why a `Host` value was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// A byte no host name or address may hold (space, comma, `/`, `@`, non-ASCII, ...).
    #[error("a character no host may hold")]
    BadCharacter,
    /// `[` without its `]`, or an IP literal that is not one.
    #[error("a bad IP literal")]
    BadLiteral,
    /// The port is not a number from 0 to 65535.
    #[error("a bad port")]
    BadPort,
}

/// A `Host` value taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authority<'a> {
    /// The host: a name, an IPv4 address or a bracketed IP literal (may be empty).
    pub host: &'a str,
    /// The port, when one is given.
    pub port: Option<u16>,
}

impl Authority<'_> {
    /// True when the host is an address or a DNS name (letters, digits, `-`, `_` and
    /// dots): what may be written back into a URL.
    pub fn is_plain_name(&self) -> bool {
        !self.host.is_empty()
            && (self.host.starts_with('[')
                || self
                    .host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)))
    }
}

/// Parses `value` as `uri-host[:port]`.
pub fn parse(value: &[u8]) -> Result<Authority<'_>, HostError> {
    // Every byte checked below is ASCII, so this cannot fail for a value that passes.
    let text = std::str::from_utf8(value).map_err(|_| HostError::BadCharacter)?;
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (literal, after) = rest.split_once(']').ok_or(HostError::BadLiteral)?;
        if literal.is_empty() || !literal.bytes().all(is_literal_byte) {
            return Err(HostError::BadLiteral);
        }
        let host = &text[..literal.len() + 2];
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(after.strip_prefix(':').ok_or(HostError::BadPort)?),
            ),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if !host.starts_with('[') && !host.bytes().all(is_name_byte) {
        return Err(HostError::BadCharacter);
    }
    let port = match port {
        None | Some("") => None,
        Some(p) if p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            Some(p.parse::<u16>().map_err(|_| HostError::BadPort)?)
        }
        Some(_) => return Err(HostError::BadPort),
    };
    Ok(Authority { host, port })
}

/// reg-name's bytes (unreserved, pct-encoded, sub-delims) less the comma.
fn is_name_byte(b: u8) -> bool {
    NAME_BYTES[usize::from(b)]
}

/// An IPv6 address or IPvFuture inside brackets.
fn is_literal_byte(b: u8) -> bool {
    LITERAL_BYTES[usize::from(b)]
}

/// Every request's `Host` goes through these: tables, not a search of the punctuation for
/// every byte.
const NAME_BYTES: [bool; 256] = byte_table(b"-._~%!$&'()*+;=", true);
const LITERAL_BYTES: [bool; 256] = byte_table(b":.vV", false);

/// A table true for ASCII letters and digits (only hex digits unless `alnum`) and `extra`.
const fn byte_table(extra: &[u8], alnum: bool) -> [bool; 256] {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = if alnum {
            c.is_ascii_alphanumeric()
        } else {
            c.is_ascii_hexdigit()
        };
        b += 1;
    }
    let mut i = 0;
    while i < extra.len() {
        t[extra[i] as usize] = true;
        i += 1;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_hold_the_grammar() {
        for b in 0..=255u8 {
            assert_eq!(
                is_name_byte(b),
                b.is_ascii_alphanumeric() || b"-._~%!$&'()*+;=".contains(&b),
                "{b}"
            );
            assert_eq!(
                is_literal_byte(b),
                b.is_ascii_hexdigit() || b":.vV".contains(&b),
                "{b}"
            );
        }
    }

    #[test]
    fn hosts_ports_and_literals_are_taken() {
        for (value, host, port) in [
            ("example.test", "example.test", None),
            ("example.test:8443", "example.test", Some(8443)),
            ("203.0.113.5:0", "203.0.113.5", Some(0)),
            ("[2001:db8::1]", "[2001:db8::1]", None),
            ("[::1]:443", "[::1]", Some(443)),
            ("a.test:", "a.test", None),
            ("", "", None),
            ("xn--bcher-kva.test", "xn--bcher-kva.test", None),
        ] {
            assert_eq!(
                parse(value.as_bytes()),
                Ok(Authority { host, port }),
                "{value}"
            );
        }
    }

    #[test]
    fn what_a_backend_could_read_two_ways_is_refused() {
        use HostError::*;
        for (value, why) in [
            ("a b", BadCharacter),
            ("a,b", BadCharacter),
            ("a/b", BadCharacter),
            ("user@a", BadCharacter),
            ("bücher.test", BadCharacter),
            ("a\tb", BadCharacter),
            ("a:65536", BadPort),
            ("a:99999999", BadPort),
            ("a:-1", BadPort),
            ("a:1:2", BadCharacter),
            ("[::1", BadLiteral),
            ("[]", BadLiteral),
            ("[::1]x", BadPort),
            ("[a b]", BadLiteral),
        ] {
            assert_eq!(parse(value.as_bytes()), Err(why), "{value}");
        }
    }

    #[test]
    fn plain_names_are_what_a_url_may_carry() {
        let plain = |v: &str| parse(v.as_bytes()).unwrap().is_plain_name();
        assert!(plain("a-b.test:80") && plain("[::1]") && plain("10.0.0.1"));
        assert!(!plain("") && !plain("a%20b") && !plain("a;b") && !plain("a'b"));
    }
}
