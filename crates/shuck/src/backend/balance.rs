//! How a backend's servers share its connections and requests (`balance` in its block):
//! smooth weighted round robin (the default, as nginx's), `leastconn` (the fewest open for
//! its weight, for long streams and WebSockets), `least-requests` (of two servers taken at
//! random, the one with fewer in flight for its weight, as Envoy's), and `hash` (a key of
//! the request: its source address, path, a header or a cookie, on a consistent-hash ring,
//! so that adding a server moves about 1/N of the keys; with `hash-balance-factor`, no
//! server takes more than that share of the average load, as HAProxy's). A `cookie` names
//! the server that served a client before (sticky sessions, HAProxy's insert mode).

/// The balancing method.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Balance {
    /// Smooth weighted round robin.
    #[default]
    RoundRobin,
    /// The fewest connections (streams, over HTTP/2) open for its weight.
    LeastConn,
    /// Of two servers drawn at random, the one with fewer in flight for its weight.
    LeastRequests,
    /// By a key of the request on a consistent-hash ring.
    Hash {
        /// What is hashed.
        key: HashKey,
        /// `hash-balance-factor`: no server above this percent of the average load (0: no
        /// bound).
        factor: u32,
    },
}

impl Balance {
    /// As the configuration and the admin API name it.
    pub fn describe(&self) -> String {
        match self {
            Balance::RoundRobin => "roundrobin".into(),
            Balance::LeastConn => "leastconn".into(),
            Balance::LeastRequests => "least-requests".into(),
            Balance::Hash { key, factor: 0 } => format!("hash {}", key.describe()),
            Balance::Hash { key, factor } => {
                format!("hash {} factor {factor}", key.describe())
            }
        }
    }
}

/// What `balance = hash` hashes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HashKey {
    /// The client's address (the PROXY header's with `--proxy-proxy`).
    #[default]
    Source,
    /// `--http`: the request's path (without its query).
    Path,
    /// `--http`: a request header's value (absent: round robin).
    Header(Box<str>),
    /// `--http`: a cookie's value (absent: round robin).
    Cookie(Box<str>),
}

impl HashKey {
    /// `source`, `path`, `header:NAME`, `cookie:NAME`.
    pub fn parse(v: &str) -> Result<HashKey, String> {
        let named = |n: &str| -> Result<Box<str>, String> {
            if n.is_empty()
                || !n
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            {
                return Err(format!("{v:?}: a name of letters, digits, '-', '_' or '.'"));
            }
            Ok(n.to_ascii_lowercase().into())
        };
        match v.split_once(':') {
            None if v == "source" => Ok(HashKey::Source),
            None if v == "path" => Ok(HashKey::Path),
            Some(("header", n)) => Ok(HashKey::Header(named(n)?)),
            Some(("cookie", n)) => Ok(HashKey::Cookie(named(n)?)),
            _ => Err(format!(
                "{v:?}: expected source, path, header:NAME or cookie:NAME"
            )),
        }
    }

    /// As the configuration spells it.
    pub fn describe(&self) -> String {
        match self {
            HashKey::Source => "source".into(),
            HashKey::Path => "path".into(),
            HashKey::Header(n) => format!("header:{n}"),
            HashKey::Cookie(n) => format!("cookie:{n}"),
        }
    }
}

/// What one connection or request brings to the choice of its server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Key {
    /// `balance = hash`: the hash of its key (`None`: the key is absent).
    pub hash: Option<u64>,
    /// The server its sticky cookie names ([`server_id`]).
    pub sticky: Option<u64>,
}

/// A stable 64-bit hash of `bytes` (FNV-1a, then mixed): the same on every worker, host and
/// release, so that a farm's hosts send a key to the same server.
pub fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    mix(h)
}

/// splitmix64's finaliser: FNV's low bits alone spread poorly over a ring.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The key of sticky cookies' server identities: the farm key's derivation where there is
/// one (so every host of the farm names a server alike), else random per master (set
/// before the worker is forked, so its restarts keep it).
static COOKIE_KEY: std::sync::OnceLock<aws_lc_rs::hmac::Key> = std::sync::OnceLock::new();

/// Keys sticky cookies with `farm_key` (`--shared-cache-key`), or a random key without
/// one; the first call wins (the master's, at start).
pub fn set_cookie_key(farm_key: Option<&[u8; 32]>) {
    let _ = COOKIE_KEY.get_or_init(|| cookie_key(farm_key));
}

fn cookie_key(farm_key: Option<&[u8; 32]>) -> aws_lc_rs::hmac::Key {
    use aws_lc_rs::hmac;
    let secret = match farm_key {
        // A key of its own, derived, so that a cookie never exposes the farm key's uses.
        Some(k) => hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, k),
            b"shuck sticky cookie v1",
        )
        .as_ref()
        .to_vec(),
        None => {
            let mut r = [0u8; 32];
            if aws_lc_rs::rand::fill(&mut r).is_err() {
                // No randomness at all: the names' hash alone, as a last resort.
                r = [0u8; 32];
            }
            r.to_vec()
        }
    };
    hmac::Key::new(hmac::HMAC_SHA256, &secret)
}

/// A server's identity in a sticky cookie: its name under a keyed hash (HMAC-SHA256), so
/// that the cookie says nothing of its name or address (which an unkeyed hash would, to
/// anyone who tries the likely ones) and stays valid across reloads and, with a farm key,
/// across hosts and restarts.
pub fn server_id(name: &str) -> u64 {
    let key = COOKIE_KEY.get_or_init(|| cookie_key(None));
    let tag = aws_lc_rs::hmac::sign(key, name.as_bytes());
    let mut id = [0u8; 8];
    id.copy_from_slice(&tag.as_ref()[..8]);
    u64::from_be_bytes(id)
}

/// Points each unit of weight puts on the ring: enough that shares are within a few
/// percent of the weights.
const POINTS_PER_WEIGHT: u32 = 160;

/// A consistent-hash ring: each server's points, sorted.
#[derive(Debug, Default)]
pub struct Ring {
    points: Vec<(u64, u32)>,
}

impl Ring {
    /// The ring of servers named `names` with `weights` (their weights at start).
    pub fn new<'a>(servers: impl Iterator<Item = (&'a str, u32)>) -> Ring {
        let mut points = Vec::new();
        for (i, (name, weight)) in servers.enumerate() {
            let base = hash(name.as_bytes());
            for p in 0..weight.max(1) * POINTS_PER_WEIGHT {
                points.push((
                    mix(base ^ u64::from(p).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                    i as u32,
                ));
            }
        }
        points.sort_unstable();
        Ring { points }
    }

    /// The servers in the order the ring gives them for `key`, each once: the first is the
    /// key's own, the next ones its fallbacks.
    pub fn walk(&self, key: u64) -> impl Iterator<Item = usize> + '_ {
        let start = self.points.partition_point(|&(p, _)| p < key);
        let n = self.points.len();
        let mut seen: u128 = 0;
        let mut more: Vec<usize> = Vec::new();
        (0..n).filter_map(move |k| {
            let i = self.points[(start + k) % n].1 as usize;
            if i < 128 {
                if seen & (1 << i) != 0 {
                    return None;
                }
                seen |= 1 << i;
            } else {
                if more.contains(&i) {
                    return None;
                }
                more.push(i);
            }
            Some(i)
        })
    }
}

/// A small per-worker random source for `least-requests` (xorshift64*; no lock, no system
/// call).
#[derive(Debug)]
pub struct Dice(std::cell::Cell<u64>);

impl Default for Dice {
    fn default() -> Self {
        let mut seed = [0u8; 8];
        // A failed fill leaves a fixed seed: the choices are still spread, only predictable.
        let _ = aws_lc_rs::rand::fill(&mut seed);
        Dice(std::cell::Cell::new(u64::from_le_bytes(seed) | 1))
    }
}

impl Dice {
    /// A number below `n` (> 0).
    pub fn below(&self, n: usize) -> usize {
        let mut x = self.0.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{i}:80")).collect()
    }

    fn first(ring: &Ring, key: u64) -> usize {
        ring.walk(key).next().unwrap()
    }

    #[test]
    fn shares_follow_the_weights_and_a_new_server_moves_about_one_nth() {
        let four = names(4);
        let ring = Ring::new(four.iter().map(|n| (n.as_str(), 1)));
        let keys: Vec<u64> = (0..20_000u32).map(|k| hash(&k.to_le_bytes())).collect();
        let mut counts = [0usize; 4];
        for &k in &keys {
            counts[first(&ring, k)] += 1;
        }
        for c in counts {
            assert!((4000..6000).contains(&c), "{counts:?}");
        }
        let five = names(5);
        let bigger = Ring::new(five.iter().map(|n| (n.as_str(), 1)));
        let moved = keys
            .iter()
            .filter(|&&k| first(&ring, k) != first(&bigger, k))
            .count();
        // 1/5 of the keys is what a fifth server should take; never more than a little.
        assert!(
            (3000..=4800).contains(&moved),
            "{moved} of 20000 keys moved for a fifth server"
        );
        // And they all moved to it.
        assert!(keys
            .iter()
            .filter(|&&k| first(&ring, k) != first(&bigger, k))
            .all(|&k| first(&bigger, k) == 4));
        let weighted = Ring::new(
            four.iter()
                .enumerate()
                .map(|(i, n)| (n.as_str(), 1 + u32::from(i == 0) * 2)),
        );
        let heavy = keys.iter().filter(|&&k| first(&weighted, k) == 0).count();
        assert!((8500..11500).contains(&heavy), "weight 3 of 6 took {heavy}");
    }

    #[test]
    fn the_walk_gives_each_server_once() {
        let six = names(6);
        let ring = Ring::new(six.iter().map(|n| (n.as_str(), 2)));
        let mut order: Vec<usize> = ring.walk(12345).collect();
        order.sort_unstable();
        assert_eq!(order, [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn keys_parse_and_hashes_are_stable() {
        assert_eq!(HashKey::parse("source"), Ok(HashKey::Source));
        assert_eq!(
            HashKey::parse("header:X-User"),
            Ok(HashKey::Header("x-user".into()))
        );
        assert_eq!(
            HashKey::parse("cookie:sid"),
            Ok(HashKey::Cookie("sid".into()))
        );
        assert!(HashKey::parse("header:").is_err());
        assert!(HashKey::parse("uri").is_err());
        // The same on every host and release: a farm sends a key to one server.
        assert_eq!(hash(b"abc"), hash(b"abc"));
        assert_ne!(hash(b"abc"), hash(b"abd"));
        // A server's cookie id is keyed: the same for one key, not the names' plain hash.
        assert_eq!(server_id("a"), server_id("a"));
        assert_ne!(server_id("a"), hash(b"a"));
        let farm = cookie_key(Some(&[7; 32]));
        let id = |k: &aws_lc_rs::hmac::Key| aws_lc_rs::hmac::sign(k, b"a").as_ref()[..8].to_vec();
        assert_eq!(
            id(&farm),
            id(&cookie_key(Some(&[7; 32]))),
            "one farm key, one id"
        );
        assert_ne!(id(&farm), id(&cookie_key(Some(&[8; 32]))));
        assert_ne!(
            id(&cookie_key(None)),
            id(&cookie_key(None)),
            "random without one"
        );
        let d = Dice::default();
        let mut seen = [false; 5];
        for _ in 0..200 {
            seen[d.below(5)] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
