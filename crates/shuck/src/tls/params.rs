//! TLS parameters by their OpenSSL names (as hitch takes them), mapped onto what the rustls
//! aws-lc-rs provider implements. Cipher and protocol lists are lenient as OpenSSL's: a name
//! shuck cannot serve (CBC, DHE, RC4, SSLv3 to TLSv1.1, ...) is dropped and reported in
//! [`Kept::dropped`], for one warning by the caller; only a list left empty is an error.

use rustls::crypto::aws_lc_rs::{cipher_suite as cs, kx_group};
use rustls::crypto::SupportedKxGroup;
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};

use super::{hkdf, TlsError};

/// A TLS 1.2 suite, its OpenSSL name, and the OpenSSL cipher-string tags that select it.
struct Tls12Suite {
    name: &'static str,
    suite: SupportedCipherSuite,
    tags: &'static [&'static str],
}

const ECDHE: &[&str] = &[
    "ALL", "DEFAULT", "HIGH", "ECDHE", "EECDH", "kECDHE", "kEECDH", "ECDH", "AEAD", "TLSv1.2",
];

static TLS12: &[Tls12Suite] = &[
    Tls12Suite {
        name: "ECDHE-ECDSA-AES128-GCM-SHA256",
        suite: cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        tags: &["aECDSA", "ECDSA", "AESGCM", "AES", "AES128", "SHA256"],
    },
    Tls12Suite {
        name: "ECDHE-ECDSA-AES256-GCM-SHA384",
        suite: cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        tags: &["aECDSA", "ECDSA", "AESGCM", "AES", "AES256", "SHA384"],
    },
    Tls12Suite {
        name: "ECDHE-ECDSA-CHACHA20-POLY1305",
        suite: cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        tags: &["aECDSA", "ECDSA", "CHACHA20", "SHA256"],
    },
    Tls12Suite {
        name: "ECDHE-RSA-AES128-GCM-SHA256",
        suite: cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        tags: &["aRSA", "AESGCM", "AES", "AES128", "SHA256"],
    },
    Tls12Suite {
        name: "ECDHE-RSA-AES256-GCM-SHA384",
        suite: cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        tags: &["aRSA", "AESGCM", "AES", "AES256", "SHA384"],
    },
    Tls12Suite {
        name: "ECDHE-RSA-CHACHA20-POLY1305",
        suite: cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        tags: &["aRSA", "CHACHA20", "SHA256"],
    },
];

/// What a lenient list kept, and the names it dropped.
#[derive(Debug)]
pub struct Kept<T> {
    /// What shuck serves of the list, in its order.
    pub kept: Vec<T>,
    /// The names dropped, as written.
    pub dropped: Vec<String>,
}

impl<T> Kept<T> {
    /// The kept items, after one warning naming the dropped ones (if any) and why.
    pub fn warn(self, option: &str, why: &str) -> Vec<T> {
        if !self.dropped.is_empty() {
            tracing::warn!(
                name: "tls_settings_dropped",
                option = %option,
                reason = %why,
                dropped = %(self.dropped.join(", ")),
                "{option}: dropped {} ({why}; see the manual's Migrating to shuck)",
                self.dropped.join(", "),
            );
        }
        self.kept
    }
}

/// Why cipher names are dropped, for [`Kept::warn`].
pub const CIPHERS_DROPPED: &str =
    "shuck serves only ECDHE with AES-GCM or ChaCha20-Poly1305: CBC, RC4, DHE, static RSA and other legacy suites are left out on purpose";
/// Why protocol names are dropped, for [`Kept::warn`].
pub const PROTOCOLS_DROPPED: &str =
    "SSLv3, TLSv1.0 and TLSv1.1 are insecure and shuck does not serve them";

fn tls12_names() -> String {
    TLS12.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
}

/// Parses an OpenSSL cipher string (`-c`) into TLS 1.2 suites in the order it gives them.
/// As OpenSSL, names that select nothing shuck serves (unknown ones included) are dropped;
/// a list that selects nothing at all is an error.
pub fn parse_tls12_ciphers(spec: &str) -> Result<Kept<SupportedCipherSuite>, TlsError> {
    let mut chosen: Vec<usize> = Vec::new();
    let mut banned: Vec<usize> = Vec::new();
    let mut dropped: Vec<String> = Vec::new();
    for token in spec
        .split([':', ',', ' '])
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        if token.starts_with('@') {
            continue; // @STRENGTH, @SECLEVEL=n: ordering and policy knobs with no effect here
        }
        let (op, expr) = match token.as_bytes()[0] {
            b'!' | b'-' | b'+' => (token.as_bytes()[0], &token[1..]),
            _ => (b' ', token),
        };
        let matched = select(expr);
        if matched.is_empty() && matches!(op, b' ' | b'+') {
            dropped.push(expr.to_owned());
        }
        match op {
            b'!' => {
                banned.extend(&matched);
                chosen.retain(|i| !matched.contains(i));
            }
            b'-' => chosen.retain(|i| !matched.contains(i)),
            b'+' => {
                // Move to the end, in their current order.
                let (moved, kept): (Vec<usize>, Vec<usize>) =
                    chosen.iter().partition(|i| matched.contains(i));
                chosen = kept;
                chosen.extend(moved);
            }
            _ => {
                for i in matched {
                    if !chosen.contains(&i) && !banned.contains(&i) {
                        chosen.push(i);
                    }
                }
            }
        }
    }
    if chosen.is_empty() {
        return Err(TlsError::NoCipherSelected {
            option: "--ciphers",
            value: spec.to_owned(),
            valid: tls12_names(),
        });
    }
    Ok(Kept {
        kept: chosen.into_iter().map(|i| TLS12[i].suite).collect(),
        dropped,
    })
}

/// The suites a cipher-string expression (`A+B+C` or an exact name) selects: none for a
/// name shuck does not serve, known to OpenSSL or not (both are dropped alike).
fn select(expr: &str) -> Vec<usize> {
    if let Some(i) = TLS12.iter().position(|s| s.name.eq_ignore_ascii_case(expr)) {
        return vec![i];
    }
    let parts: Vec<&str> = expr.split('+').collect();
    (0..TLS12.len())
        .filter(|&i| {
            parts
                .iter()
                .all(|p| ECDHE.contains(p) || TLS12[i].tags.contains(p))
        })
        .collect()
}

const TLS13: &[(&str, SupportedCipherSuite)] = &[
    ("TLS_AES_128_GCM_SHA256", cs::TLS13_AES_128_GCM_SHA256),
    ("TLS_AES_256_GCM_SHA384", cs::TLS13_AES_256_GCM_SHA384),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        cs::TLS13_CHACHA20_POLY1305_SHA256,
    ),
];

/// Parses `--ciphersuites` (TLS 1.3 suite names separated by ':'). As OpenSSL, names shuck
/// does not serve (the CCM suites, unknown ones) are dropped; an empty result is an error.
pub fn parse_tls13_suites(spec: &str) -> Result<Kept<SupportedCipherSuite>, TlsError> {
    let valid = || TLS13.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
    let mut out = Vec::new();
    let mut dropped = Vec::new();
    for name in spec
        .split([':', ',', ' '])
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        match TLS13.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
            Some((_, suite)) => {
                let suite = hkdf::keyed(*suite);
                if !out.contains(&suite) {
                    out.push(suite);
                }
            }
            None => dropped.push(name.to_owned()),
        }
    }
    if out.is_empty() {
        return Err(TlsError::NoCipherSelected {
            option: "--ciphersuites",
            value: spec.to_owned(),
            valid: valid(),
        });
    }
    Ok(Kept { kept: out, dropped })
}

/// The TLS 1.2 and 1.3 suites offered when none are named.
pub fn default_suites() -> (Vec<SupportedCipherSuite>, Vec<SupportedCipherSuite>) {
    let all = rustls::crypto::aws_lc_rs::DEFAULT_CIPHER_SUITES;
    let tls12 = all
        .iter()
        .filter(|s| s.tls13().is_none())
        .copied()
        .collect();
    let tls13 = all
        .iter()
        .filter(|s| s.tls13().is_some())
        .map(|s| hkdf::keyed(*s))
        .collect();
    (tls12, tls13)
}

/// hitch's `tls = on` (`--tls`): TLSv1.0 to TLSv1.3.
pub const TLS_SWITCH_PROTOS: &str = "TLSv1.0 TLSv1.1 TLSv1.2 TLSv1.3";
/// hitch's `ssl = on` (`--ssl`): SSLv3 to TLSv1.3.
pub const SSL_SWITCH_PROTOS: &str = "SSLv3 TLSv1.0 TLSv1.1 TLSv1.2 TLSv1.3";

/// Parses `--tls-protos` (hitch: `"TLSv1.2 TLSv1.3"`). SSLv3, TLSv1.0 and TLSv1.1 are
/// dropped when TLSv1.2 or TLSv1.3 stands beside them; a list of them only is an error.
pub fn parse_protocols(spec: &str) -> Result<Kept<&'static SupportedProtocolVersion>, TlsError> {
    const VALID: &str = "TLSv1.2, TLSv1.3";
    let mut out: Vec<&'static SupportedProtocolVersion> = Vec::new();
    let mut dropped: Vec<String> = Vec::new();
    for name in spec
        .split([' ', ',', ':'])
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        let v = match name {
            "TLSv1.2" | "TLSv1_2" | "tlsv1.2" => &rustls::version::TLS12,
            "TLSv1.3" | "TLSv1_3" | "tlsv1.3" => &rustls::version::TLS13,
            "SSLv3" | "TLSv1" | "TLSv1.0" | "TLSv1.1" => {
                dropped.push(name.to_owned());
                continue;
            }
            _ => {
                return Err(TlsError::UnknownProtocol {
                    name: name.to_owned(),
                    valid: VALID,
                })
            }
        };
        if !out.iter().any(|o| o.version == v.version) {
            out.push(v);
        }
    }
    if out.is_empty() && !dropped.is_empty() {
        return Err(TlsError::UnsupportedProtocol {
            name: dropped.join(", "),
            valid: VALID,
        });
    }
    if out.is_empty() {
        return Err(TlsError::UnknownProtocol {
            name: spec.to_owned(),
            valid: VALID,
        });
    }
    Ok(Kept { kept: out, dropped })
}

/// Parses `--ecdh-curve` into key exchange groups, in preference order.
pub fn parse_groups(spec: &str) -> Result<Vec<&'static dyn SupportedKxGroup>, TlsError> {
    const VALID: &str = "X25519, P-256 (prime256v1, secp256r1), P-384 (secp384r1), X25519MLKEM768";
    let mut out: Vec<&'static dyn SupportedKxGroup> = Vec::new();
    for name in spec
        .split([':', ',', ' '])
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        let g: &'static dyn SupportedKxGroup = match name.to_ascii_lowercase().as_str() {
            "x25519" => kx_group::X25519,
            "p-256" | "p256" | "prime256v1" | "secp256r1" => kx_group::SECP256R1,
            "p-384" | "p384" | "secp384r1" => kx_group::SECP384R1,
            "x25519mlkem768" => kx_group::X25519MLKEM768,
            _ => {
                return Err(TlsError::UnknownGroup {
                    name: name.to_owned(),
                    valid: VALID,
                })
            }
        };
        if !out.iter().any(|o| o.name() == g.name()) {
            out.push(g);
        }
    }
    if out.is_empty() {
        return Err(TlsError::UnknownGroup {
            name: spec.to_owned(),
            valid: VALID,
        });
    }
    Ok(out)
}

/// Parses `--alpn-protos` (comma-separated protocol ids).
pub fn parse_alpn(spec: &str) -> Result<Vec<Vec<u8>>, TlsError> {
    let mut out = Vec::new();
    for p in spec.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if p.len() > 255 {
            return Err(TlsError::BadAlpn {
                value: spec.to_owned(),
                reason: format!("{p:?} is longer than 255 bytes"),
            });
        }
        out.push(p.as_bytes().to_vec());
    }
    if out.is_empty() {
        return Err(TlsError::BadAlpn {
            value: spec.to_owned(),
            reason: "no protocol given".into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::CipherSuite as C;

    fn ids(v: &[SupportedCipherSuite]) -> Vec<C> {
        v.iter().map(|s| s.suite()).collect()
    }

    #[test]
    fn exact_names() {
        let v = parse_tls12_ciphers("ECDHE-RSA-AES128-GCM-SHA256").unwrap();
        assert_eq!(ids(&v.kept), [C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]);
        assert!(v.dropped.is_empty());
    }

    #[test]
    fn hitch_default_expression() {
        let v = parse_tls12_ciphers("EECDH+AESGCM:EDH+AESGCM:AES256+EECDH:AES256+EDH").unwrap();
        assert_eq!(v.kept.len(), 4, "{:?}", ids(&v.kept));
        assert!(ids(&v.kept)
            .iter()
            .all(|c| !format!("{c:?}").contains("CHACHA")));
        assert_eq!(v.dropped, ["EDH+AESGCM", "AES256+EDH"]);
    }

    #[test]
    fn exclusions() {
        let v = parse_tls12_ciphers("HIGH:!aECDSA:!CHACHA20:!RC4").unwrap();
        assert_eq!(
            ids(&v.kept),
            [
                C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
                C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
            ]
        );
        assert!(v.dropped.is_empty(), "an exclusion is never a dropped name");
    }

    #[test]
    fn unservable_names_are_dropped_as_openssl_does() {
        let v = parse_tls12_ciphers(
            "ECDHE-RSA-AES128-GCM-SHA256:AES128-SHA:DHE-RSA-AES256-GCM-SHA384:BOGUS",
        )
        .unwrap();
        assert_eq!(ids(&v.kept), [C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]);
        assert_eq!(
            v.dropped,
            ["AES128-SHA", "DHE-RSA-AES256-GCM-SHA384", "BOGUS"]
        );
        let e = parse_tls12_ciphers("AES128-SHA:EDH+AESGCM")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("AES128-SHA:EDH+AESGCM") && e.contains("ECDHE-ECDSA-AES128-GCM-SHA256"),
            "{e}"
        );
        let v = parse_tls13_suites("TLS_AES_128_CCM_SHA256:TLS_AES_256_GCM_SHA384").unwrap();
        assert_eq!(ids(&v.kept), [C::TLS13_AES_256_GCM_SHA384]);
        assert_eq!(v.dropped, ["TLS_AES_128_CCM_SHA256"]);
        // A name given twice is served once.
        let v = parse_tls13_suites("TLS_AES_256_GCM_SHA384:tls_aes_256_gcm_sha384").unwrap();
        assert_eq!(ids(&v.kept), [C::TLS13_AES_256_GCM_SHA384]);
        let e = parse_tls13_suites("TLS_AES_128_CCM_SHA256")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("TLS_AES_128_CCM_SHA256") && e.contains("TLS_AES_256_GCM_SHA384"),
            "{e}"
        );
    }

    #[test]
    fn protocols_and_groups() {
        assert_eq!(parse_protocols("TLSv1.2 TLSv1.3").unwrap().kept.len(), 2);
        assert_eq!(parse_protocols("TLSv1.3").unwrap().kept.len(), 1);
        let v = parse_protocols(SSL_SWITCH_PROTOS).unwrap();
        assert_eq!(v.kept.len(), 2);
        assert_eq!(v.dropped, ["SSLv3", "TLSv1.0", "TLSv1.1"]);
        let e = parse_protocols("TLSv1.0 TLSv1.1").unwrap_err().to_string();
        assert!(
            e.contains("TLSv1.0, TLSv1.1") && e.contains("TLSv1.2, TLSv1.3"),
            "{e}"
        );
        assert!(parse_protocols("TLSv9 TLSv1.2")
            .unwrap_err()
            .to_string()
            .contains("TLSv9"));
        assert_eq!(parse_groups("X25519:prime256v1,P-384").unwrap().len(), 3);
        assert!(parse_groups("brainpool")
            .unwrap_err()
            .to_string()
            .contains("brainpool"));
        assert_eq!(
            parse_alpn("h2,http/1.1").unwrap(),
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        assert!(parse_alpn(",").is_err());
    }
}
