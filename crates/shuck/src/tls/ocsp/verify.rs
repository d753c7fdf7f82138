//! OCSP requests and responses (RFC 6960): the CertID of a certificate, the request that
//! asks about it, and the checks a response must pass before it is stapled: a successful
//! basic response, signed by the issuer (or by a responder the issuer delegated to with
//! the OCSP-signing key usage), about this certificate, saying "good", and current. With
//! a [`Trust`] (`ocsp-verify-staple`), a delegated responder's certificate must also chain to
//! a trust anchor, as hitch's OpenSSL checks it (`OCSP_basic_verify` with the PEM's own chain
//! trusted as signers: an issuer from the PEM file that signs itself needs no store).

use std::time::{Duration, SystemTime};

use aws_lc_rs::{digest, signature};
use der::asn1::{Null, ObjectIdentifier, OctetString};
use der::{Any, Decode, Encode};
use x509_cert::spki::AlgorithmIdentifierOwned;
use x509_cert::Certificate;
use x509_ocsp::{
    BasicOcspResponse, CertId, CertStatus, OcspRequest, OcspResponse, OcspResponseStatus, Request,
    TbsRequest, Version,
};

/// How far a response's thisUpdate may be ahead of our clock.
const CLOCK_SKEW: Duration = Duration::from_secs(300);
/// Lifetime assumed for a response without nextUpdate.
const NO_NEXT_UPDATE: Duration = Duration::from_secs(3600);

const SHA1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.14.3.2.26");
const OCSP_BASIC: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.48.1.1");

/// Why a response is not stapled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OcspError {
    /// Not DER, or not the structure RFC 6960 describes.
    #[error("malformed OCSP data: {0}")]
    Malformed(String),
    /// The responder answered with an error status.
    #[error("the responder said {0}")]
    Status(String),
    /// The signature does not verify with the issuer or a delegated responder.
    #[error("signature does not verify with the issuer's key or a responder it delegated to")]
    Signature,
    /// A signature algorithm shuck does not verify.
    #[error("unsupported signature algorithm {0}")]
    Algorithm(String),
    /// The response is about another certificate.
    #[error("the response is about another certificate")]
    OtherCertificate,
    /// The certificate is revoked or unknown to the responder.
    #[error("certificate status is {0}")]
    NotGood(&'static str),
    /// thisUpdate in the future or nextUpdate in the past.
    #[error("stale: {0}")]
    Stale(String),
    /// A delegated responder's certificate reaches no trusted root.
    #[error("the responder's certificate {0} does not chain to a trusted root: {1}")]
    Untrusted(String, String),
}

/// What a delegated responder's certificate must chain to (`ocsp-verify-staple`).
#[derive(Debug, Clone, Copy)]
pub struct Trust<'a> {
    /// The trust anchors (`--ocsp-verify-ca`, else the system's store), or why there are
    /// none: only a delegated responder needs them, so a host without a store still
    /// staples what issuers sign themselves, as hitch does.
    pub roots: Result<&'a rustls::RootCertStore, &'a str>,
    /// The served chain after the leaf, as intermediates.
    pub chain: &'a [rustls::pki_types::CertificateDer<'a>],
}

/// id-kp-OCSPSigning (1.3.6.1.5.5.7.3.9), as webpki takes an extended key usage.
const OCSP_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x09];

/// Checks that `signer` (a delegated responder) chains to `trust`'s anchors for OCSP
/// signing at `now`, through the served chain and the response's own certificates.
fn chained(
    signer: &Certificate,
    others: &[Certificate],
    trust: Trust<'_>,
    now: SystemTime,
) -> Result<(), OcspError> {
    use rustls::pki_types::{CertificateDer, UnixTime};
    let name = signer.tbs_certificate.subject.to_string();
    let untrusted = |why: String| OcspError::Untrusted(name.clone(), why);
    let roots = trust
        .roots
        .map_err(|e| untrusted(format!("no trust anchors: {e}")))?;
    let der = signer.to_der().map_err(malformed)?;
    let der = CertificateDer::from(der);
    let ee = webpki::EndEntityCert::try_from(&der).map_err(|e| untrusted(format!("{e:?}")))?;
    let mut intermediates: Vec<CertificateDer<'_>> = trust.chain.to_vec();
    for c in others {
        intermediates.push(CertificateDer::from(c.to_der().map_err(malformed)?));
    }
    let since = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let algs = rustls::crypto::aws_lc_rs::default_provider()
        .signature_verification_algorithms
        .all;
    ee.verify_for_usage(
        algs,
        &roots.roots,
        &intermediates,
        UnixTime::since_unix_epoch(since),
        webpki::KeyUsage::required(OCSP_SIGNING),
        None,
        None,
    )
    .map(|_| ())
    .map_err(|e| untrusted(format!("{e:?}")))
}

fn malformed(e: impl std::fmt::Display) -> OcspError {
    OcspError::Malformed(e.to_string())
}

fn sha1(data: &[u8]) -> Vec<u8> {
    digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, data)
        .as_ref()
        .to_vec()
}

/// The CertID of `leaf` under `issuer` (SHA-1, as responders expect).
pub fn cert_id(leaf: &[u8], issuer: &[u8]) -> Result<CertId, OcspError> {
    let leaf = Certificate::from_der(leaf).map_err(malformed)?;
    let issuer = Certificate::from_der(issuer).map_err(malformed)?;
    let name = issuer.tbs_certificate.subject.to_der().map_err(malformed)?;
    let key = issuer
        .tbs_certificate
        .subject_public_key_info
        .subject_public_key
        .raw_bytes();
    Ok(CertId {
        hash_algorithm: AlgorithmIdentifierOwned {
            oid: SHA1,
            parameters: Some(Any::from(Null)),
        },
        issuer_name_hash: OctetString::new(sha1(&name)).map_err(malformed)?,
        issuer_key_hash: OctetString::new(sha1(key)).map_err(malformed)?,
        serial_number: leaf.tbs_certificate.serial_number,
    })
}

/// The DER of a request about `leaf`.
pub fn request(leaf: &[u8], issuer: &[u8]) -> Result<Vec<u8>, OcspError> {
    let req = OcspRequest {
        tbs_request: TbsRequest {
            version: Version::V1,
            requestor_name: None,
            request_list: vec![Request {
                req_cert: cert_id(leaf, issuer)?,
                single_request_extensions: None,
            }],
            request_extensions: None,
        },
        optional_signature: None,
    };
    req.to_der().map_err(malformed)
}

/// A response fit to staple.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staple {
    /// The whole OCSPResponse, as sent in the handshake.
    pub der: Vec<u8>,
    /// When the responder vouched.
    pub this_update: SystemTime,
    /// When it stops vouching (thisUpdate + 1 h when the responder gave none).
    pub next_update: SystemTime,
}

/// Checks `der` as a response about `leaf` (issued by `issuer`) at time `now`; with
/// `trust`, a delegated responder must also chain to its anchors.
pub fn verify(
    der: &[u8],
    leaf: &[u8],
    issuer: &[u8],
    now: SystemTime,
    trust: Option<Trust<'_>>,
) -> Result<Staple, OcspError> {
    let resp = OcspResponse::from_der(der).map_err(malformed)?;
    if resp.response_status != OcspResponseStatus::Successful {
        return Err(OcspError::Status(format!("{:?}", resp.response_status)));
    }
    let bytes = resp
        .response_bytes
        .ok_or_else(|| malformed("successful response without a body"))?;
    if bytes.response_type != OCSP_BASIC {
        return Err(malformed(format!(
            "response type {} is not basic",
            bytes.response_type
        )));
    }
    let basic = BasicOcspResponse::from_der(bytes.response.as_bytes()).map_err(malformed)?;
    let tbs = basic.tbs_response_data.to_der().map_err(malformed)?;
    let issuer_cert = Certificate::from_der(issuer).map_err(malformed)?;

    // Signed by the issuer, or by a delegated responder the issuer signed for OCSP.
    let by_issuer = check_sig(
        &issuer_cert,
        &basic.signature_algorithm,
        &tbs,
        basic.signature.raw_bytes(),
    );
    if by_issuer.is_err() {
        let certs = basic.certs.as_deref().unwrap_or_default();
        let delegate = certs.iter().find(|c| {
            let signed_by_issuer = c.tbs_certificate.to_der().ok().is_some_and(|t| {
                check_sig(
                    &issuer_cert,
                    &c.signature_algorithm,
                    &t,
                    c.signature.raw_bytes(),
                )
                .is_ok()
            });
            signed_by_issuer
                && ocsp_signing(c)
                && check_sig(
                    c,
                    &basic.signature_algorithm,
                    &tbs,
                    basic.signature.raw_bytes(),
                )
                .is_ok()
        });
        let Some(delegate) = delegate else {
            return Err(match by_issuer {
                Err(e @ OcspError::Algorithm(_)) => e,
                _ => OcspError::Signature,
            });
        };
        if let Some(trust) = trust {
            chained(delegate, certs, trust, now)?;
        }
    }

    let want = cert_id(leaf, issuer)?;
    let single = basic
        .tbs_response_data
        .responses
        .iter()
        .find(|r| {
            r.cert_id.serial_number == want.serial_number
                && r.cert_id.issuer_key_hash == want.issuer_key_hash
                && r.cert_id.issuer_name_hash == want.issuer_name_hash
        })
        .ok_or(OcspError::OtherCertificate)?;
    match single.cert_status {
        CertStatus::Good(_) => {}
        CertStatus::Revoked(_) => return Err(OcspError::NotGood("revoked")),
        CertStatus::Unknown(_) => return Err(OcspError::NotGood("unknown")),
    }
    let this_update = single.this_update.0.to_system_time();
    let next_update = single
        .next_update
        .map(|t| t.0.to_system_time())
        .unwrap_or(this_update + NO_NEXT_UPDATE);
    if this_update > now + CLOCK_SKEW {
        return Err(OcspError::Stale("thisUpdate is in the future".into()));
    }
    if next_update <= now {
        return Err(OcspError::Stale(format!(
            "nextUpdate passed {} s ago",
            now.duration_since(next_update)
                .unwrap_or_default()
                .as_secs()
        )));
    }
    Ok(Staple {
        der: der.to_vec(),
        this_update,
        next_update,
    })
}

fn ocsp_signing(c: &Certificate) -> bool {
    let Ok(der) = c.to_der() else { return false };
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(&der) else {
        return false;
    };
    matches!(parsed.extended_key_usage(), Ok(Some(eku)) if eku.value.ocsp_signing)
}

/// Verifies `sig` over `msg` with `signer`'s public key under `alg`.
fn check_sig(
    signer: &Certificate,
    alg: &AlgorithmIdentifierOwned,
    msg: &[u8],
    sig: &[u8],
) -> Result<(), OcspError> {
    let spki = &signer.tbs_certificate.subject_public_key_info;
    let key = spki.subject_public_key.raw_bytes();
    let curve = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.decode_as::<ObjectIdentifier>().ok())
        .map(|o| o.to_string());
    let p384 = curve.as_deref() == Some("1.3.132.0.34");
    let algorithm: &'static dyn signature::VerificationAlgorithm =
        match alg.oid.to_string().as_str() {
            "1.2.840.113549.1.1.11" => &signature::RSA_PKCS1_2048_8192_SHA256,
            "1.2.840.113549.1.1.12" => &signature::RSA_PKCS1_2048_8192_SHA384,
            "1.2.840.113549.1.1.13" => &signature::RSA_PKCS1_2048_8192_SHA512,
            "1.2.840.113549.1.1.5" => &signature::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
            "1.2.840.10045.4.3.2" if p384 => &signature::ECDSA_P384_SHA256_ASN1,
            "1.2.840.10045.4.3.2" => &signature::ECDSA_P256_SHA256_ASN1,
            "1.2.840.10045.4.3.3" if p384 => &signature::ECDSA_P384_SHA384_ASN1,
            "1.2.840.10045.4.3.3" => &signature::ECDSA_P256_SHA384_ASN1,
            "1.3.101.112" => &signature::ED25519,
            other => return Err(OcspError::Algorithm(other.to_owned())),
        };
    signature::UnparsedPublicKey::new(algorithm, key)
        .verify(msg, sig)
        .map_err(|_| OcspError::Signature)
}

/// The OCSP responder URL of a certificate (its Authority Information Access).
pub fn responder_url(leaf: &[u8]) -> Option<String> {
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).ok()?;
    cert.extensions()
        .iter()
        .find_map(|ext| match ext.parsed_extension() {
            ParsedExtension::AuthorityInfoAccess(aia) => {
                aia.accessdescs.iter().find_map(|d| {
                    match (d.access_method.to_id_string().as_str(), &d.access_location) {
                        ("1.3.6.1.5.5.7.48.1", GeneralName::URI(u)) => Some((*u).to_owned()),
                        _ => None,
                    }
                })
            }
            _ => None,
        })
}
