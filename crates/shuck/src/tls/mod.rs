//! TLS: certificates and SNI, and the rustls `ServerConfig` every worker serves with.
//!
//! This module knows nothing of sockets; the handshake itself is driven by `proxy`.

pub mod cert_store;
pub mod client_auth;
pub mod hello;
mod hkdf;
pub mod ocsp;
pub mod params;
pub mod pem;
pub mod quic_auth;
pub mod quic_tokens;
pub mod selfsigned;
pub mod sni;
pub mod upstream;

use std::path::PathBuf;
use std::sync::Arc;

use rustls::crypto::{CryptoProvider, SupportedKxGroup};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};

pub use pem::LoadedCert;
pub use sni::SniResolver;

/// Bound on a PEM file (a CA bundle is a few hundred KB), so that a wrong path cannot
/// make shuck read a disk image.
pub(crate) const MAX_PEM: u64 = 16 << 20;

use crate::session::store::SharedStore;
use crate::session::tickets::TicketKeys;
use crate::session::{Resumption, SessionCache};

/// What can be wrong with certificates, keys and TLS parameters.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The PEM file cannot be read.
    #[error("cannot read PEM file {}: {reason}", path.display())]
    ReadPem {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        reason: String,
    },
    /// The PEM text is malformed.
    #[error("PEM file {} is malformed: {reason}", path.display())]
    BadPem {
        /// The file.
        path: PathBuf,
        /// The parser's reason.
        reason: String,
    },
    /// No certificate in the file.
    #[error("PEM file {} holds no certificate (expected the chain and its key in one file)", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// No private key in the file.
    #[error("PEM file {} holds no private key (expected the chain and its key in one file)", path.display())]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// More than one private key in the file.
    #[error("PEM file {} holds {count} private keys; expected one", path.display())]
    ManyKeys {
        /// The file.
        path: PathBuf,
        /// How many.
        count: usize,
    },
    /// The key is encrypted with a passphrase.
    #[error("PEM file {}: the private key is encrypted; give shuck an unencrypted key", path.display())]
    EncryptedKey {
        /// The file.
        path: PathBuf,
    },
    /// The key cannot be used for signing.
    #[error("PEM file {}: unusable private key ({reason}); shuck takes RSA, ECDSA P-256/P-384 and Ed25519 keys", path.display())]
    BadKey {
        /// The file.
        path: PathBuf,
        /// The reason.
        reason: String,
    },
    /// The leaf certificate cannot be parsed.
    #[error("PEM file {}: bad certificate: {reason}", path.display())]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// The reason.
        reason: String,
    },
    /// The private key is not the certificate's.
    #[error("PEM file {}: the private key does not match the certificate", path.display())]
    KeyMismatch {
        /// The file.
        path: PathBuf,
    },
    /// The self-signed default could not be made.
    #[error("cannot generate the self-signed certificate: {0}")]
    SelfSigned(String),
    /// A TLS protocol name shuck does not know.
    #[error("unknown TLS protocol {name:?} in --tls-protos; valid: {valid}")]
    UnknownProtocol {
        /// The name given.
        name: String,
        /// The valid names.
        valid: &'static str,
    },
    /// Protocols known but refused as insecure, and nothing else given.
    #[error("--tls-protos names only {name}, which are insecure and not served by shuck; valid: {valid}")]
    UnsupportedProtocol {
        /// The name given.
        name: String,
        /// The valid names.
        valid: &'static str,
    },
    /// A cipher list that selects nothing shuck serves.
    #[error("{option} {value:?} selects no cipher suite shuck supports; valid: {valid}")]
    NoCipherSelected {
        /// The option.
        option: &'static str,
        /// The list given.
        value: String,
        /// The valid names.
        valid: String,
    },
    /// A key exchange group shuck does not know.
    #[error("unknown key exchange group {name:?} in --ecdh-curve; valid: {valid}")]
    UnknownGroup {
        /// The name given.
        name: String,
        /// The valid names.
        valid: &'static str,
    },
    /// A bad ALPN list.
    #[error("--alpn-protos {value:?}: {reason}")]
    BadAlpn {
        /// The list given.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// The client CA file.
    #[error("--client-verify-ca {}: {reason}", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// rustls refused the combination.
    #[error("TLS settings rejected: {0}")]
    Rustls(String),
}

/// The TLS choices of a configuration, validated.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// Session cache entries (0: no cache).
    pub session_cache: usize,
    /// Lifetime of cached sessions.
    pub session_timeout: std::time::Duration,
    /// The ticket key ring, when tickets are on.
    pub tickets: Option<Arc<TicketKeys>>,
    /// Protocol versions accepted.
    pub versions: Vec<&'static SupportedProtocolVersion>,
    /// TLS 1.2 suites then TLS 1.3 suites, in preference order.
    pub suites: Vec<SupportedCipherSuite>,
    /// Key exchange groups, in preference order.
    pub groups: Vec<&'static dyn SupportedKxGroup>,
    /// ALPN protocols offered.
    pub alpn: Vec<Vec<u8>>,
    /// Server's suite order wins.
    pub prefer_server_ciphers: bool,
    /// Refuse unknown server names with unrecognized_name.
    pub sni_nomatch_abort: bool,
    /// Client certificates, when asked for.
    pub client_auth: Option<client_auth::ClientAuth>,
    /// Staples fetched by `--ocsp-dir`, applied when this state is built.
    pub ocsp: Option<Arc<ocsp::OcspStore>>,
}

/// What a worker needs to run handshakes; shared read-only by all workers.
#[derive(Debug)]
pub struct TlsState {
    /// The rustls configuration.
    pub config: Arc<ServerConfig>,
    /// The certificate index, also used to refuse unknown names.
    pub resolver: Arc<SniResolver>,
    /// Refuse unknown server names.
    pub sni_nomatch_abort: bool,
    /// The session cache shared by all workers, when on.
    pub cache: Option<Arc<SessionCache>>,
    /// The ticket key ring, when tickets are on.
    pub tickets: Option<Arc<TicketKeys>>,
    /// Certificates with a client verification of their own (a `pem-file` block's
    /// `client-verify`), and the configuration to serve them with; usually empty.
    pub by_cert: Vec<(Arc<CertifiedKey>, Arc<ServerConfig>)>,
    /// The shared store asked for sessions the cache lacks (`--shared-store`).
    pub store: Option<Arc<SharedStore>>,
    /// How this state resumes, for reading what a ClientHello offers.
    pub resumes: hello::Server,
    /// Whether the frontend verifies client certificates (`--client-verify`).
    pub verifies_clients: bool,
    /// With certificates of their own verification (`by_cert`): QUIC's configuration and
    /// the check after its handshake.
    pub quic_auth: Option<quic_auth::QuicClientAuth>,
}

impl TlsState {
    /// Builds the server configuration from settings and loaded certificates (the last is
    /// the default, as in hitch), with a session cache of its own.
    pub fn build(settings: &TlsSettings, certs: &[LoadedCert]) -> Result<Self, TlsError> {
        let resumption = Resumption::new(
            settings.session_cache,
            settings.session_timeout,
            settings.tickets.clone(),
        );
        let certs: Vec<&LoadedCert> = certs.iter().collect();
        Self::build_with(
            settings,
            &certs,
            certs.len().saturating_sub(1),
            &[],
            &resumption,
        )
    }

    /// The state of one frontend: its settings and certificates (`certs[default]` served
    /// when no name matches), the client verification of the certificates that have their
    /// own (by index in `certs`), with the process's session cache (the settings carry the
    /// ticket keys).
    pub fn for_frontend(
        settings: &TlsSettings,
        certs: &[&LoadedCert],
        default: usize,
        by_cert: &[(usize, Option<client_auth::ClientAuth>)],
        resumption: &Resumption,
    ) -> Result<Self, TlsError> {
        Self::build_with(settings, certs, default, by_cert, resumption)
    }

    /// The configuration to serve the certificate `key` with.
    pub fn config_for(&self, key: &Arc<CertifiedKey>) -> Option<&Arc<ServerConfig>> {
        self.by_cert
            .iter()
            .find(|(k, _)| Arc::ptr_eq(k, key))
            .map(|(_, c)| c)
    }

    fn build_with(
        settings: &TlsSettings,
        certs: &[&LoadedCert],
        default: usize,
        by_cert: &[(usize, Option<client_auth::ClientAuth>)],
        resumption: &Resumption,
    ) -> Result<Self, TlsError> {
        let cache = resumption.cache.clone();
        let resolver = Arc::new(
            SniResolver::new(certs, default, settings.ocsp.as_deref())
                .ok_or_else(|| TlsError::Rustls("no certificate".into()))?,
        );
        let provider = provider(settings);
        let verifier = |auth: Option<&client_auth::ClientAuth>| {
            auth.map(|a| a.verifier(provider.clone())).transpose()
        };
        let default = verifier(settings.client_auth.as_ref())?;
        let config = server_config(settings, &provider, default.clone(), &resolver, &cache)?;
        let policies = by_cert
            .iter()
            .filter_map(|(i, auth)| Some((resolver.served(*i)?.clone(), auth)))
            .map(|(key, auth)| Ok((key, verifier(auth.as_ref())?)))
            .collect::<Result<Vec<_>, TlsError>>()?;
        let by_cert = policies
            .iter()
            .map(|(key, v)| {
                let config = server_config(settings, &provider, v.clone(), &resolver, &cache)?;
                Ok((key.clone(), config))
            })
            .collect::<Result<Vec<_>, TlsError>>()?;
        let quic_auth = if policies.is_empty() {
            None
        } else {
            let any = default
                .iter()
                .chain(policies.iter().filter_map(|(_, v)| v.as_ref()))
                .cloned()
                .collect();
            let any: quic_auth::Verifier = Arc::new(quic_auth::AnyOf(any));
            Some(quic_auth::QuicClientAuth {
                config: server_config(settings, &provider, Some(any), &resolver, &cache)?,
                by_cert: policies,
                default,
            })
        };
        Ok(TlsState {
            config,
            resolver,
            sni_nomatch_abort: settings.sni_nomatch_abort,
            cache,
            tickets: settings.tickets.clone(),
            by_cert,
            store: resumption.store.clone(),
            resumes: hello::Server {
                tls13: settings.versions.contains(&&rustls::version::TLS13),
                tls12: settings.versions.contains(&&rustls::version::TLS12),
                stateless: settings.tickets.is_some(),
            },
            verifies_clients: settings.client_auth.is_some() || quic_auth.is_some(),
            quic_auth,
        })
    }
}

/// The crypto provider of a frontend's settings: its suites and groups.
fn provider(settings: &TlsSettings) -> Arc<CryptoProvider> {
    Arc::new(CryptoProvider {
        cipher_suites: settings.suites.clone(),
        kx_groups: settings.groups.clone(),
        ..rustls::crypto::aws_lc_rs::default_provider()
    })
}

/// One rustls configuration of a frontend, with `verifier` as its client verification.
fn server_config(
    settings: &TlsSettings,
    provider: &Arc<CryptoProvider>,
    verifier: Option<quic_auth::Verifier>,
    resolver: &Arc<SniResolver>,
    cache: &Option<Arc<SessionCache>>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&settings.versions)
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(resolver.clone());
    config.alpn_protocols = settings.alpn.clone();
    config.ignore_client_order = settings.prefer_server_ciphers;
    config.session_storage = match cache {
        Some(c) => c.clone(),
        None => Arc::new(rustls::server::NoServerSessionStorage {}),
    };
    if let Some(t) = &settings.tickets {
        config.ticketer = t.clone();
    }
    Ok(Arc::new(config))
}
