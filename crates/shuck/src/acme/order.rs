//! One order, RFC 8555 section 7.4, through `instant-acme`: new order, one challenge per
//! pending authorization (its answer published to the worker before the CA is told to
//! check), wait for the order to be ready, finalize with a CSR for a key of our own, and
//! fetch the chain. Every failure names the step and carries the CA's problem document.

use std::time::Duration;

use instant_acme::{
    Account, AuthorizationStatus, ChallengeType, Identifier, NewOrder, OrderStatus, RetryPolicy,
};

use super::{Challenge, KeyType};

/// Longest wait for the CA to validate, and then to issue.
const POLL_TIMEOUT: Duration = Duration::from_secs(90);

/// A failed order: the step, and what the CA or the network said.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {detail}")]
pub struct OrderError {
    /// What was being done.
    pub step: &'static str,
    /// The CA's problem document (type, detail) or the error met.
    pub detail: String,
}

impl OrderError {
    /// An error of `step`.
    pub fn at(step: &'static str) -> impl FnOnce(instant_acme::Error) -> OrderError {
        move |e| OrderError {
            step,
            detail: describe(&e),
        }
    }
}

/// The CA's problem document in a line: its type, its detail, its subproblems.
pub fn describe(e: &instant_acme::Error) -> String {
    match e {
        instant_acme::Error::Api(p) => problem(p),
        other => {
            // The HTTP client's errors say little at the top ("client error (Connect)"):
            // the causes say what happened.
            let mut s = other.to_string();
            let mut cause = std::error::Error::source(other);
            while let Some(c) = cause {
                let c_text = c.to_string();
                if !s.contains(&c_text) {
                    s.push_str(": ");
                    s.push_str(&c_text);
                }
                cause = c.source();
            }
            s
        }
    }
}

fn problem(p: &instant_acme::Problem) -> String {
    let mut s = format!(
        "{} ({})",
        p.detail.as_deref().unwrap_or("no detail"),
        p.r#type.as_deref().unwrap_or("no type")
    );
    for sub in &p.subproblems {
        s.push_str(&format!(
            "; {}: {} ({})",
            sub.identifier
                .as_ref()
                .map(|i| format!("{i:?}"))
                .unwrap_or_default(),
            sub.detail.as_deref().unwrap_or(""),
            sub.r#type.as_deref().unwrap_or("")
        ));
    }
    s
}

/// Where challenge answers are published while an order runs.
pub trait Publish {
    /// Makes the answer for `name` live everywhere the CA may connect; returns once it is.
    fn publish(
        &mut self,
        name: &str,
        token: &str,
        key_auth: &str,
    ) -> impl std::future::Future<Output = Result<(), String>>;
    /// Takes the answer down.
    fn withdraw(&mut self, name: &str, token: &str);
}

/// A certificate issued: its private key and chain, one PEM text.
pub struct Issued {
    /// Key, then the chain, as a hitch `pem-file`.
    pub pem: String,
}

/// Runs one order for `names`.
pub async fn run(
    account: &Account,
    names: &[String],
    challenge: Challenge,
    key_type: KeyType,
    publish: &mut impl Publish,
) -> Result<Issued, OrderError> {
    let ids: Vec<Identifier> = names.iter().cloned().map(Identifier::Dns).collect();
    let mut order = account
        .new_order(&NewOrder::new(&ids))
        .await
        .map_err(OrderError::at("new order"))?;
    tracing::info!(
        name: "acme_order_created",
        names = %names.join(","),
        url = %order.url(),
        "ACME: order created",
    );
    let wanted = match challenge {
        Challenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
        Challenge::Http01 => ChallengeType::Http01,
    };
    let mut published: Vec<(String, String)> = Vec::new();
    let result = async {
        let mut authzs = order.authorizations();
        while let Some(authz) = authzs.next().await {
            let mut authz = authz.map_err(OrderError::at("authorization"))?;
            match authz.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                other => {
                    return Err(OrderError {
                        step: "authorization",
                        detail: format!("{:?} is {other:?}", authz.identifier()),
                    })
                }
            }
            let name = authz.identifier().to_string();
            let mut ch = authz.challenge(wanted.clone()).ok_or_else(|| OrderError {
                step: "challenge",
                detail: format!("the CA offers no {} challenge for {name}", challenge.name()),
            })?;
            let key_auth = ch.key_authorization();
            let token = ch.token.clone();
            publish
                .publish(&name, &token, key_auth.as_str())
                .await
                .map_err(|detail| OrderError {
                    step: "publishing the answer",
                    detail,
                })?;
            published.push((name.clone(), token));
            ch.set_ready().await.map_err(OrderError::at("challenge"))?;
            tracing::info!(
                name: "acme_challenge_answered",
                name = %name,
                challenge = challenge.name(),
                "ACME: challenge answered, the CA checks it",
            );
        }
        let polled = order
            .poll_ready(&RetryPolicy::new().timeout(POLL_TIMEOUT))
            .await;
        match polled {
            Ok(OrderStatus::Ready) => {}
            Ok(status) => {
                return Err(OrderError {
                    step: "validation",
                    detail: why_invalid(&mut order)
                        .await
                        .unwrap_or_else(|| format!("the order is {status:?}")),
                })
            }
            Err(e) => {
                let detail = match why_invalid(&mut order).await {
                    Some(d) => d,
                    None => describe(&e),
                };
                return Err(OrderError {
                    step: "validation",
                    detail,
                });
            }
        }
        let (key, csr) = key_and_csr(names, key_type)?;
        order
            .finalize_csr(&csr)
            .await
            .map_err(OrderError::at("finalize"))?;
        let chain = order
            .poll_certificate(&RetryPolicy::new().timeout(POLL_TIMEOUT))
            .await
            .map_err(OrderError::at("certificate"))?;
        Ok(Issued {
            pem: format!("{key}{chain}"),
        })
    }
    .await;
    for (name, token) in &published {
        publish.withdraw(name, token);
    }
    result
}

/// The first challenge error the CA recorded in the order's authorizations.
async fn why_invalid(order: &mut instant_acme::Order) -> Option<String> {
    let mut authzs = order.authorizations();
    while let Some(Ok(authz)) = authzs.next().await {
        let name = authz.identifier().to_string();
        if let Some(p) = authz.challenges.iter().find_map(|c| c.error.as_ref()) {
            return Some(format!("{name}: {}", problem(p)));
        }
    }
    None
}

/// A new key of `key_type` (PEM) and a CSR for `names` signed by it (DER).
pub fn key_and_csr(names: &[String], key_type: KeyType) -> Result<(String, Vec<u8>), OrderError> {
    let fail = |e: rcgen::Error| OrderError {
        step: "key and CSR",
        detail: e.to_string(),
    };
    let key = match key_type {
        KeyType::EcdsaP256 => rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256),
        KeyType::EcdsaP384 => rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384),
        KeyType::Rsa2048 => {
            rcgen::KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048)
        }
        KeyType::Rsa3072 => {
            rcgen::KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_3072)
        }
    }
    .map_err(fail)?;
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(fail)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params.serialize_request(&key).map_err(fail)?;
    Ok((key.serialize_pem(), csr.der().to_vec()))
}
