//! Endpoints written as hitch writes them: `[HOST]:PORT`, `[*]:PORT`, `[::1]:PORT`, and the
//! bare forms `HOST:PORT` and `*:PORT`.
//!
//! Parsing is pure; resolving a host name to addresses is a separate step so that errors can
//! say which of the two went wrong.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

use super::error::ConfigError;

/// The host part of an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// `*`: every local address (dual-stack when the machine has IPv6).
    Any,
    /// A literal IPv4 or IPv6 address.
    Ip(IpAddr),
    /// A name to resolve once at start.
    Name(String),
}

/// A parsed `[HOST]:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Where to listen or connect.
    pub host: Host,
    /// The TCP port.
    pub port: u16,
}

impl Endpoint {
    /// Parses hitch's endpoint syntax; `what` names the option in error messages.
    pub fn parse(what: &'static str, spec: &str) -> Result<Self, ConfigError> {
        let bad = |reason: &str| ConfigError::BadAddress {
            option: what,
            value: spec.to_owned(),
            reason: reason.to_owned(),
        };
        let spec_trim = spec.trim();
        let (host, port) = if let Some(rest) = spec_trim.strip_prefix('[') {
            let (host, after) = rest
                .split_once(']')
                .ok_or_else(|| bad("missing ']' after the host"))?;
            let port = after
                .strip_prefix(':')
                .ok_or_else(|| bad("expected ':PORT' after ']'"))?;
            (host, port)
        } else {
            let (host, port) = spec_trim
                .rsplit_once(':')
                .ok_or_else(|| bad("expected [HOST]:PORT"))?;
            if host.contains(':') {
                return Err(bad(
                    "IPv6 addresses must be written in brackets, e.g. [::1]:443",
                ));
            }
            (host, port)
        };
        let port: u16 = port
            .parse()
            .map_err(|_| bad("the port must be a number from 1 to 65535"))?;
        if port == 0 {
            return Err(bad("the port must be a number from 1 to 65535"));
        }
        let host = match host {
            "" => return Err(bad("the host is empty (use * for every address)")),
            "*" => Host::Any,
            h => match h.parse::<IpAddr>() {
                Ok(ip) => Host::Ip(ip),
                Err(_) if is_plausible_name(h) => Host::Name(h.to_owned()),
                Err(_) => return Err(bad("the host is neither an IP address nor a host name")),
            },
        };
        Ok(Endpoint { host, port })
    }

    /// The socket addresses to listen on for this endpoint. `*` is the IPv6 wildcard
    /// (dual-stack) when IPv6 is available, else the IPv4 one.
    pub fn listen_addrs(&self, what: &'static str) -> Result<Vec<SocketAddr>, ConfigError> {
        match &self.host {
            Host::Any => {
                if ipv6_available() {
                    Ok(vec![SocketAddr::new(
                        Ipv6Addr::UNSPECIFIED.into(),
                        self.port,
                    )])
                } else {
                    Ok(vec![SocketAddr::new(
                        Ipv4Addr::UNSPECIFIED.into(),
                        self.port,
                    )])
                }
            }
            _ => self.resolve(what),
        }
    }

    /// True when the host is a name (resolved, and so worth resolving again).
    pub fn is_name(&self) -> bool {
        matches!(self.host, Host::Name(_))
    }

    /// Resolves the endpoint to addresses to connect to (`*` means this host's loopback).
    pub fn resolve(&self, what: &'static str) -> Result<Vec<SocketAddr>, ConfigError> {
        match &self.host {
            Host::Any => Ok(vec![SocketAddr::new(Ipv4Addr::LOCALHOST.into(), self.port)]),
            Host::Ip(ip) => Ok(vec![SocketAddr::new(*ip, self.port)]),
            Host::Name(name) => {
                let addrs: Vec<SocketAddr> = (name.as_str(), self.port)
                    .to_socket_addrs()
                    .map_err(|e| ConfigError::Resolve {
                        option: what,
                        value: self.to_string(),
                        reason: e.to_string(),
                    })?
                    .collect();
                if addrs.is_empty() {
                    return Err(ConfigError::Resolve {
                        option: what,
                        value: self.to_string(),
                        reason: "no address found".into(),
                    });
                }
                Ok(addrs)
            }
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Any => write!(f, "[*]:{}", self.port),
            Host::Ip(ip) => write!(f, "[{ip}]:{}", self.port),
            Host::Name(n) => write!(f, "[{n}]:{}", self.port),
        }
    }
}

fn is_plausible_name(h: &str) -> bool {
    h.len() <= 253
        && h.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

fn ipv6_available() -> bool {
    std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Endpoint {
        Endpoint::parse("--frontend", s).expect(s)
    }

    #[test]
    fn hitch_forms() {
        assert_eq!(
            ok("[127.0.0.1]:443").host,
            Host::Ip("127.0.0.1".parse().unwrap())
        );
        assert_eq!(ok("[*]:8443").host, Host::Any);
        assert_eq!(ok("[::1]:443").host, Host::Ip("::1".parse().unwrap()));
        assert_eq!(ok("[localhost]:80").host, Host::Name("localhost".into()));
        assert_eq!(ok("127.0.0.1:443").port, 443);
        assert_eq!(ok("*:443").host, Host::Any);
        assert_eq!(ok("example.com:443").host, Host::Name("example.com".into()));
    }

    #[test]
    fn bad_forms_say_why() {
        for bad in [
            "",
            "443",
            "[127.0.0.1:443",
            "[1.2.3.4]443",
            "1.2.3.4:0",
            "1.2.3.4:70000",
            "::1:443",
            ":443",
            "bad host:1",
            "[x]:port",
        ] {
            let e = Endpoint::parse("--frontend", bad).unwrap_err().to_string();
            assert!(e.contains("--frontend"), "{bad}: {e}");
        }
    }

    #[test]
    fn display_roundtrips() {
        for s in ["[127.0.0.1]:443", "[*]:8443", "[::1]:443", "[localhost]:80"] {
            assert_eq!(ok(s).to_string(), s);
        }
    }
}
