//! The crypto floor of a scenario, the half of its honest limit that `capacity` gives (the
//! other half is what a plain TCP relay without TLS spends on the same connections and
//! requests, `compare`'s target `relay`, measured in the same run; `report` adds the two):
//! a full handshake's signature and key exchange, a TLS 1.3 resumption's key exchange (rustls
//! resumes with PSK-DHE only), and the cipher over the answers' bytes.

use crate::capacity::Capacity;
use crate::load::{KeyType, Reuse};
use crate::scenarios::Scenario;

/// The crypto a scenario's connection cannot do without, µs.
fn crypto_per_conn(sc: &Scenario, c: &Capacity) -> f64 {
    let full = c.floor_us(sc.key == KeyType::Rsa2048);
    let resumed = if sc.tls == "1.3" { c.x25519_us } else { 0.0 };
    let handshake = match sc.reuse {
        Reuse::Never => full,
        Reuse::Always => resumed,
        // One session in k resumes.
        Reuse::Every(k) => (resumed + f64::from(k.max(1) - 1) * full) / f64::from(k.max(1)),
    };
    let bytes = sc.size as f64 * f64::from(sc.requests.max(1));
    handshake + bytes / c.aes128gcm_bytes_per_s * 1e6
}

/// The crypto floor of the scenario, µs per connection, or per request when `per_request`
/// (the connection's share spread over its requests).
pub fn crypto_floor(sc: &Scenario, c: &Capacity, per_request: bool) -> f64 {
    let conn = crypto_per_conn(sc, c);
    if per_request {
        conn / f64::from(sc.requests.max(1))
    } else {
        conn
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenarios::ALL;

    fn capacity() -> Capacity {
        Capacity {
            rsa2048_sign_us: 300.0,
            rsa3072_sign_us: 0.0,
            rsa4096_sign_us: 0.0,
            ecdsa_p256_sign_us: 20.0,
            x25519_us: 30.0,
            aes128gcm_bytes_per_s: 1e9,
            chacha20_bytes_per_s: 0.0,
        }
    }

    fn scenario(name: &str) -> &'static Scenario {
        ALL.iter().find(|s| s.name == name).unwrap()
    }

    #[test]
    fn each_handshake_kind_costs_its_own_crypto() {
        let c = capacity();
        assert_eq!(crypto_per_conn(scenario("full-rsa2048-tls13"), &c), 330.0);
        assert_eq!(crypto_per_conn(scenario("full-ecdsa-tls12"), &c), 50.0);
        assert_eq!(crypto_per_conn(scenario("resume-ticket-tls13"), &c), 30.0);
        assert_eq!(crypto_per_conn(scenario("resume-id-tls12"), &c), 0.0);
        // 1 MB through AES-GCM at 1 GB/s: 1048.576 µs more than the handshake.
        let big = scenario("size-1m");
        let hs = crypto_per_conn(big, &c) - big.size as f64 / 1e3;
        assert!(hs > 0.0 && hs <= 330.0, "{hs}");
        // A keep-alive scenario's handshake is spread over its requests.
        let ka = scenario("keepalive-80");
        let per_req = crypto_floor(ka, &c, true);
        assert!((per_req * 80.0 - crypto_floor(ka, &c, false)).abs() < 1e-9);
        assert!(per_req > 0.0 && per_req < 5.0, "{per_req}");
    }
}
