//! The honest limit of a scenario: what a plain TCP relay without TLS spends on the same
//! connections and requests (`compare`'s target `relay`, measured in the same run), plus
//! the crypto no terminator can avoid, from `capacity`: a full handshake's signature and
//! key exchange, a TLS 1.3 resumption's key exchange (rustls resumes with PSK-DHE only),
//! and the cipher over the answers' bytes.

use crate::capacity::Capacity;
use crate::load::{KeyType, Reuse};
use crate::peers::Target;
use crate::report::{criterion, figure};
use crate::results::ScenarioResult;
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

/// The limit of the figure the scenario is judged by (per connection or per request),
/// when the relay was measured.
pub fn limit(sc: &ScenarioResult, c: &Capacity) -> Option<f64> {
    let relay = sc
        .targets
        .iter()
        .find(|t| t.target == Target::Relay)
        .and_then(|t| figure(sc, t))?;
    let crypto = crypto_per_conn(&sc.scenario, c);
    Some(match criterion(sc.scenario.name) {
        Some(("CPU µs/req", _)) => relay + crypto / f64::from(sc.scenario.requests.max(1)),
        Some(("CPU µs/conn", _)) => relay + crypto,
        _ => return None,
    })
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
    }
}
