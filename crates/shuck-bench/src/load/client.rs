//! The load generator's TLS client: its rustls configurations (one that resumes, one that
//! never does), a verifier that accepts any certificate, and the check that the target
//! serves the key type asked for.

use std::io;
use std::sync::Arc;

use anyhow::{bail, Context};
use rustls::client::{Resumption, Tls12Resumption};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::verifier::AnyCertificate;

use super::{KeyType, LoadOpts, ResumeBy};

/// The two client configurations a run uses: one that keeps sessions, one that never does.
#[derive(Clone)]
pub(super) struct Clients {
    /// Keeps sessions, for the runs that resume.
    pub resuming: TlsConnector,
    /// Never resumes.
    pub fresh: TlsConnector,
    /// The server name sent.
    pub name: ServerName<'static>,
}

/// The client configurations `o` asks for (versions, cipher, resumption by ID or ticket).
pub(super) fn clients(o: &LoadOpts) -> anyhow::Result<Clients> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if let Some(c) = &o.cipher {
        let wanted = shuck::tls::params::parse_tls12_ciphers(c)
            .or_else(|_| shuck::tls::params::parse_tls13_suites(c))
            .map(|k| k.kept)
            .or_else(|_| {
                provider
                    .cipher_suites
                    .iter()
                    .find(|s| format!("{:?}", s.suite()).eq_ignore_ascii_case(c))
                    .map(|s| vec![*s])
                    .ok_or_else(|| anyhow::anyhow!("unknown cipher {c:?}"))
            })?;
        provider
            .cipher_suites
            .retain(|s| wanted.iter().any(|w| w.suite() == s.suite()));
    }
    let provider = Arc::new(provider);
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = match o.tls.as_deref() {
        Some("1.2") => vec![&rustls::version::TLS12],
        Some("1.3") => vec![&rustls::version::TLS13],
        _ => vec![&rustls::version::TLS13, &rustls::version::TLS12],
    };
    let make = |resumption: Resumption| -> anyhow::Result<TlsConnector> {
        let mut cfg = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .context("cipher and TLS version do not fit together")?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate::new(provider.clone())))
            .with_no_client_auth();
        cfg.resumption = resumption;
        Ok(TlsConnector::from(Arc::new(cfg)))
    };
    let tls12 = match o.resume_by {
        ResumeBy::Ticket => Tls12Resumption::SessionIdOrTickets,
        ResumeBy::Id => Tls12Resumption::SessionIdOnly,
    };
    let store = Arc::new(crate::sessions::DeepStore::default());
    Ok(Clients {
        resuming: make(Resumption::store(store).tls12_resumption(tls12))?,
        fresh: make(Resumption::disabled())?,
        name: ServerName::try_from(o.sni.clone()).context("--sni is not a valid server name")?,
    })
}

/// Fails unless the target's certificate key is of type `want`.
pub(super) fn check_key_type(o: &LoadOpts, c: &Clients, want: KeyType) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let der = rt
        .block_on(async {
            let tcp = TcpStream::connect(o.target).await?;
            let tls = c.fresh.connect(c.name.clone(), tcp).await?;
            let cert = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.to_vec());
            cert.ok_or_else(|| io::Error::other("no certificate"))
        })
        .with_context(|| format!("cannot reach {} to check its key type", o.target))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| anyhow::anyhow!("bad certificate: {e}"))?;
    let spki = cert.public_key();
    let found = match spki.parsed() {
        Ok(x509_parser::public_key::PublicKey::RSA(k)) => match k.key_size() {
            2048 => Some(KeyType::Rsa2048),
            3072 => Some(KeyType::Rsa3072),
            4096 => Some(KeyType::Rsa4096),
            _ => None,
        },
        Ok(x509_parser::public_key::PublicKey::EC(p)) if p.key_size() == 256 => {
            Some(KeyType::EcdsaP256)
        }
        _ => None,
    };
    if found != Some(want) {
        bail!("the target's certificate key is {found:?}, not {want:?} as --key-type says");
    }
    Ok(())
}
