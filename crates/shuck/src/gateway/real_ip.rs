//! `--trusted-proxies`: the client behind a proxy. A request that comes from a trusted
//! peer (a CDN, a cloud load balancer) names its client in `X-Forwarded-For` (else
//! `Forwarded`'s `for=`); the client is the rightmost address there that is not itself
//! trusted, as nginx's `real_ip_recursive on` reads it (each hop appends the address it
//! saw, so only the hops shuck trusts are believed). That address is then what the
//! request's forwarding fields, the access log, the client's bans, rules and request
//! rate, and the routes' `client-allow`/`client-deny` see. One reading for HTTP/1.1,
//! HTTP/2 and HTTP/3; from any other peer those fields are replaced as always.

use std::net::IpAddr;
use std::sync::Arc;

use crate::clients::{CidrList, Clients, Policy, Refused};

/// A connection from a trusted peer: what its requests' clients are judged by.
#[derive(Debug, Clone)]
pub struct Behind {
    /// `--trusted-proxies`.
    pub trusted: Arc<CidrList>,
    /// The client table and the frontend's client policy, when the requests' clients are
    /// judged here (not when another part already judged them: HTTP/1.1 through the core).
    pub judge: Option<(Arc<Clients>, Option<Arc<Policy>>)>,
}

impl Behind {
    /// For a connection from `peer`, when `trusted` holds it.
    pub fn of(
        peer: IpAddr,
        trusted: Option<&Arc<CidrList>>,
        judge: Option<(Arc<Clients>, Option<Arc<Policy>>)>,
    ) -> Option<Self> {
        let trusted = trusted.filter(|t| t.contains(peer))?;
        Some(Behind {
            trusted: trusted.clone(),
            judge,
        })
    }

    /// The client a request with `fields` names, when it names one shuck may believe.
    pub fn client(&self, fields: &[(&[u8], &[u8])]) -> Option<IpAddr> {
        real_client(&self.trusted, fields)
    }

    /// Judges the request's client `ip`: its bans and the frontend's rules, then its
    /// request rate. `Err`: refused (403 for a ban or a rule, 429 for the rate).
    pub fn admit(&self, ip: IpAddr) -> Result<(), Refused> {
        let Some((clients, policy)) = &self.judge else {
            return Ok(());
        };
        let Some(policy) = policy else {
            return clients.judge(&Policy::NONE, ip);
        };
        clients.judge(policy, ip)?;
        match clients.request_limit(policy, ip) {
            Some(limit) => clients.request(&limit),
            None => Ok(()),
        }
    }
}

/// The rightmost address of `X-Forwarded-For` (all its fields, in order; else of
/// `Forwarded`'s `for=`) that `trusted` does not hold; the leftmost when it holds all.
/// `None` when the fields name nobody, or an entry shuck cannot read comes before an
/// untrusted one (`unknown`, an obfuscated name, garbage): then nothing is believed.
pub fn real_client(trusted: &CidrList, fields: &[(&[u8], &[u8])]) -> Option<IpAddr> {
    let named = |want: &'static str| {
        fields
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(want.as_bytes()))
            .map(|&(_, v)| v)
    };
    let xff: Vec<&[u8]> = named("x-forwarded-for")
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|e| !e.is_empty())
        .collect();
    let entries: Vec<&[u8]> = if !xff.is_empty() {
        xff
    } else {
        named("forwarded")
            .flat_map(|v| v.split(|&b| b == b','))
            .filter_map(forwarded_for)
            .collect()
    };
    let mut leftmost = None;
    for e in entries.iter().rev() {
        let ip = parse_node(e)?;
        if !trusted.contains(ip) {
            return Some(ip);
        }
        leftmost = Some(ip);
    }
    leftmost
}

/// The `for=` value of one `Forwarded` element (RFC 7239 §4), quotes removed.
fn forwarded_for(element: &[u8]) -> Option<&[u8]> {
    element.split(|&b| b == b';').find_map(|pair| {
        let pair = pair.trim_ascii();
        let eq = pair.iter().position(|&b| b == b'=')?;
        let (k, v) = (&pair[..eq], &pair[eq + 1..]);
        if !k.trim_ascii().eq_ignore_ascii_case(b"for") {
            return None;
        }
        let v = v.trim_ascii();
        Some(
            v.strip_prefix(b"\"")
                .and_then(|v| v.strip_suffix(b"\""))
                .unwrap_or(v),
        )
    })
}

/// An address as a hop writes it: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`,
/// `[2001:db8::1]`, `[2001:db8::1]:4711`.
fn parse_node(e: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(e).ok()?;
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Some(rest) = s.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port_ok = after.is_empty()
            || after
                .strip_prefix(':')
                .is_some_and(|p| p.parse::<u16>().is_ok());
        return port_ok
            .then(|| inside.parse::<std::net::Ipv6Addr>().ok())?
            .map(IpAddr::V6);
    }
    let (host, port) = s.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(s: &str) -> CidrList {
        CidrList::parse_value(s).unwrap()
    }

    fn real(trusted: &str, fields: &[(&str, &str)]) -> Option<String> {
        let t = list(trusted);
        let f: Vec<(&[u8], &[u8])> = fields
            .iter()
            .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
            .collect();
        real_client(&t, &f).map(|ip| ip.to_string())
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let t = "10.0.0.0/8, 2001:db8::/32";
        let xff = |v: &'static str| vec![("X-Forwarded-For", v)];
        assert_eq!(real(t, &xff("203.0.113.7")).as_deref(), Some("203.0.113.7"));
        // A forged entry on the left is not believed: the hop the trusted proxy saw is.
        assert_eq!(
            real(t, &xff("1.2.3.4, 203.0.113.7, 10.1.1.1")).as_deref(),
            Some("203.0.113.7")
        );
        // Every hop trusted: the leftmost.
        assert_eq!(
            real(t, &xff("10.0.0.9, 10.1.1.1")).as_deref(),
            Some("10.0.0.9")
        );
        // Two fields are one list, in order.
        assert_eq!(
            real(
                t,
                &[
                    ("x-forwarded-for", "198.51.100.1"),
                    ("X-Forwarded-For", "10.2.2.2")
                ]
            )
            .as_deref(),
            Some("198.51.100.1")
        );
        // Ports and brackets as hops write them.
        assert_eq!(
            real(t, &xff("203.0.113.7:4711")).as_deref(),
            Some("203.0.113.7")
        );
        assert_eq!(
            real(t, &xff("[2001:db9::5]:443")).as_deref(),
            Some("2001:db9::5")
        );
        assert_eq!(
            real(t, &xff("::ffff:192.0.2.1")).as_deref(),
            Some("192.0.2.1")
        );
        // What cannot be read, before any untrusted hop, makes nothing believed.
        for bad in [
            "unknown",
            "203.0.113.7, garbage",
            "1.2.3.4:99999",
            "[::1",
            "",
            " , ",
        ] {
            assert_eq!(real(t, &xff(bad)), None, "{bad:?}");
        }
        assert_eq!(
            real(t, &xff("garbage, 203.0.113.7")).as_deref(),
            Some("203.0.113.7")
        );
        assert_eq!(real(t, &[]), None);
    }

    #[test]
    fn forwarded_when_there_is_no_x_forwarded_for() {
        let t = "10.0.0.0/8";
        let fwd = |v: &'static str| vec![("Forwarded", v)];
        assert_eq!(
            real(t, &fwd("for=192.0.2.60;proto=https;by=203.0.113.43")).as_deref(),
            Some("192.0.2.60")
        );
        assert_eq!(
            real(t, &fwd("for=\"[2001:db8:cafe::17]:4711\", for=10.0.0.1")).as_deref(),
            Some("2001:db8:cafe::17")
        );
        assert_eq!(real(t, &fwd("for=_hidden, for=10.0.0.1")), None);
        assert_eq!(real(t, &fwd("proto=https")), None);
        // X-Forwarded-For first, when both are sent.
        assert_eq!(
            real(
                t,
                &[
                    ("Forwarded", "for=192.0.2.60"),
                    ("X-Forwarded-For", "198.51.100.9")
                ]
            )
            .as_deref(),
            Some("198.51.100.9")
        );
    }
}
