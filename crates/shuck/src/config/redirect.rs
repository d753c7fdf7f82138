//! The plain-HTTP listener's settings (`--redirect-listen`, `--redirect-code`,
//! `--redirect-port`; read in `services.rs`), and where plain HTTP is listened on: those
//! addresses and `--acme-http-listen`'s, one listener each.

use std::net::SocketAddr;

/// The redirect codes `--redirect-code` takes (RFC 9110 §15.4).
pub const CODES: [u16; 5] = [301, 302, 303, 307, 308];

/// How plain HTTP is answered, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// `--redirect-listen`'s addresses.
    pub listen: Vec<SocketAddr>,
    /// `--redirect-code`.
    pub code: u16,
    /// `--redirect-port`: the port written in the `Location` (none: 443, unwritten).
    pub port: Option<u16>,
}

impl Default for Redirect {
    fn default() -> Self {
        Redirect {
            listen: Vec::new(),
            code: 308,
            port: None,
        }
    }
}

/// `--redirect-code`'s value.
pub fn parse_code(s: &str) -> Result<u16, String> {
    s.trim()
        .parse::<u16>()
        .ok()
        .filter(|c| CODES.contains(c))
        .ok_or_else(|| format!("{s:?} is not a redirect code (301, 302, 303, 307 or 308)"))
}

/// The reason phrase of a redirect status (RFC 9110 §15.4).
pub fn reason(code: u16) -> &'static str {
    match code {
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        307 => "Temporary Redirect",
        _ => "Permanent Redirect",
    }
}

impl super::Config {
    /// Every plain-HTTP listener's address: `--redirect-listen`'s, then
    /// `--acme-http-listen`'s.
    pub fn plain_listen(&self) -> Vec<SocketAddr> {
        let acme = self.acme.as_ref().and_then(|a| a.http_listen);
        self.redirect.listen.iter().copied().chain(acme).collect()
    }
}
