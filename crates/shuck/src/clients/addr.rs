//! Who a client is: its address folded to the prefix the limits count by (IPv4 /32, IPv6
//! /64 by default), and the CIDR blocks that access rules and bans name.

use std::net::{IpAddr, Ipv6Addr};

/// A client as the table counts it: its address in IPv6 form (IPv4 as `::ffff:a.b.c.d`),
/// cut to its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(pub u128);

/// How addresses fold into clients (`--client-prefix-v6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Folding {
    /// Bits of an IPv6 address that name its client (1 to 128).
    pub v6: u8,
}

impl Default for Folding {
    fn default() -> Self {
        Folding { v6: 64 }
    }
}

impl Folding {
    /// The client `ip` counts as.
    pub fn key(self, ip: IpAddr) -> Key {
        let (bits, len) = bits_of(ip);
        let len = if len == 128 && !is_v4(bits) {
            self.v6
        } else {
            len
        };
        Key(bits & mask(len))
    }
}

/// An address as 128 bits (IPv4 mapped) and its own full length.
fn bits_of(ip: IpAddr) -> (u128, u8) {
    match ip {
        IpAddr::V4(v4) => (u128::from(v4.to_ipv6_mapped()), 128),
        IpAddr::V6(v6) => (u128::from(v6), 128),
    }
}

fn is_v4(bits: u128) -> bool {
    bits >> 32 == 0xffff
}

fn mask(len: u8) -> u128 {
    match len {
        0 => 0,
        l if l >= 128 => u128::MAX,
        l => u128::MAX << (128 - u32::from(l)),
    }
}

/// An address block: `192.0.2.0/24`, `2001:db8::/32`, or one address (its full length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    net: u128,
    /// Its length in the 128-bit space (an IPv4 /24 is 120).
    len: u8,
}

impl Cidr {
    /// The block's first address (IPv4 mapped) and its length in the 128-bit space.
    pub fn parts(self) -> (u128, u8) {
        (self.net, self.len)
    }

    /// Whether `ip` is in the block.
    pub fn contains(self, ip: IpAddr) -> bool {
        let (bits, _) = bits_of(ip);
        bits & mask(self.len) == self.net
    }

    /// Whether the client `key` (a folded address) falls in the block, or the block in it.
    pub fn covers(self, key: Key) -> bool {
        key.0 & mask(self.len) == self.net
    }

    /// The block of exactly one client as the table folds it.
    pub fn of_key(key: Key, folding: Folding) -> Cidr {
        let len = if is_v4(key.0) { 128 } else { folding.v6 };
        Cidr { net: key.0, len }
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let ip: IpAddr = addr
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("{s:?} is not an address or an address/prefix"))?;
        let (bits, _) = bits_of(ip);
        let v4 = matches!(ip, IpAddr::V4(_));
        let max: u8 = if v4 { 32 } else { 128 };
        let own = match len {
            None => max,
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| format!("{s:?}: the prefix length must be 0 to {max}"))?,
        };
        let len = if v4 { own + 96 } else { own };
        if bits & !mask(len) != 0 {
            return Err(format!(
                "{s:?} has bits set past its prefix (the block starts at {})",
                Cidr {
                    net: bits & mask(len),
                    len
                }
            ));
        }
        Ok(Cidr { net: bits, len })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v6 = Ipv6Addr::from(self.net);
        match v6.to_ipv4_mapped().filter(|_| self.len >= 96) {
            Some(v4) if self.len == 128 => write!(f, "{v4}"),
            Some(v4) => write!(f, "{v4}/{}", self.len - 96),
            None if self.len == 128 => write!(f, "{v6}"),
            None => write!(f, "{v6}/{}", self.len),
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => write!(f, "{v4}"),
            None => write!(f, "{v6}"),
        }
    }
}

/// A list of blocks, looked through in order: few entries, no allocation to look.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CidrList(pub Vec<Cidr>);

impl CidrList {
    /// Whether any block holds `ip`.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }

    /// Adds `text`'s blocks: comma- or whitespace-separated CIDRs, `#` comments to the end
    /// of a line (a file's form too). The error names the block at fault.
    pub fn extend_from(&mut self, text: &str) -> Result<(), String> {
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            for word in line.split([',', ' ', '\t']).filter(|w| !w.is_empty()) {
                self.0.push(word.parse()?);
            }
        }
        Ok(())
    }

    /// [`Self::parse_value`] for an allow list: one that reads as no block at all (a file
    /// emptied) is refused, naming it, as an empty allow list would serve everyone.
    pub fn parse_allow(value: &str) -> Result<CidrList, String> {
        let list = Self::parse_value(value)?;
        if list.0.is_empty() && !value.trim().is_empty() {
            return Err(format!(
                "{value:?} holds no address block: an allow list must name one (an empty one would serve everyone; to serve everyone, leave client-allow out)"
            ));
        }
        Ok(list)
    }

    /// Reads a value as `--client-allow` takes it: blocks, or `file:PATH` (one block or more
    /// a line; read through `system::files`, so a reload's recording replays it).
    pub fn parse_value(value: &str) -> Result<CidrList, String> {
        let mut list = CidrList::default();
        for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.strip_prefix("file:") {
                Some(path) => {
                    let text = crate::system::files::read_to_string(
                        std::path::Path::new(path),
                        16 << 20,
                        "address list",
                    )
                    .map_err(|e| format!("{path}: {e}"))?;
                    list.extend_from(&text)
                        .map_err(|e| format!("{path}: {e}"))?;
                }
                None => list.extend_from(part)?,
            }
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_parse_hold_and_print() {
        let c: Cidr = "192.0.2.0/24".parse().unwrap();
        assert!(c.contains("192.0.2.77".parse().unwrap()));
        assert!(!c.contains("192.0.3.1".parse().unwrap()));
        assert!(c.contains("::ffff:192.0.2.1".parse().unwrap()));
        assert_eq!(c.to_string(), "192.0.2.0/24");
        let one: Cidr = "10.1.2.3".parse().unwrap();
        assert_eq!(one.to_string(), "10.1.2.3");
        assert!(!one.contains("10.1.2.4".parse().unwrap()));
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains("2001:db8:1::1".parse().unwrap()));
        assert!(!v6.contains("192.0.2.1".parse().unwrap()));
        assert_eq!(v6.to_string(), "2001:db8::/32");
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        assert!(!all.contains("2001:db8::1".parse().unwrap()));
        for bad in [
            "10.0.0.1/24",
            "10.0.0.0/33",
            "2001:db8::/129",
            "nope",
            "10.0.0.0/x",
            "",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn addresses_fold_to_their_client() {
        let f = Folding::default();
        let a = f.key("2001:db8:1:2:aaaa::1".parse().unwrap());
        let b = f.key("2001:db8:1:2:bbbb::9".parse().unwrap());
        let c = f.key("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.to_string(), "2001:db8:1:2::");
        let v4 = f.key("127.0.0.9".parse().unwrap());
        assert_ne!(v4, f.key("127.0.0.10".parse().unwrap()));
        assert_eq!(v4, f.key("::ffff:127.0.0.9".parse().unwrap()));
        assert_eq!(v4.to_string(), "127.0.0.9");
        let block = Cidr::of_key(a, f);
        assert_eq!(block.to_string(), "2001:db8:1:2::/64");
        assert!(block.covers(b));
        let whole = Folding { v6: 128 };
        assert_ne!(
            whole.key("2001:db8::1".parse().unwrap()),
            whole.key("2001:db8::2".parse().unwrap())
        );
    }

    #[test]
    fn lists_take_commas_lines_and_comments() {
        let mut l = CidrList::default();
        l.extend_from("10.0.0.0/8, 192.0.2.1 # one host\n\n# all of it\n2001:db8::/32\n")
            .unwrap();
        assert_eq!(l.0.len(), 3);
        assert!(l.contains("10.9.9.9".parse().unwrap()));
        let e = l.extend_from("10.0.0.0/8 300.1.1.1").unwrap_err();
        assert!(e.contains("300.1.1.1"), "{e}");
    }
}
