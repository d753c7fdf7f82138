//! What can be wrong with a configuration, in words an operator can act on.

use std::path::PathBuf;

use crate::tls::TlsError;

/// A configuration that cannot be served. Every variant names the option or file at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An endpoint that does not parse.
    #[error("{option} {value:?}: {reason}")]
    BadAddress {
        /// The flag or key, e.g. `--frontend`.
        option: &'static str,
        /// What was given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A host name that does not resolve.
    #[error("{option} {value}: cannot resolve the host: {reason}")]
    Resolve {
        /// The flag or key.
        option: &'static str,
        /// The endpoint.
        value: String,
        /// The resolver's answer.
        reason: String,
    },
    /// A value outside what the option accepts.
    #[error("{option}: {reason}")]
    Invalid {
        /// The flag or key.
        option: &'static str,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// A frontend with no certificate where the self-signed default does not stand in (a
    /// configuration file was given), as hitch refuses it.
    #[error("No x509 certificate PEM file specified for frontend '{frontend}': give pem-file (in the configuration file), --pem-file or a PEM file argument; the self-signed certificate is only for a start without a configuration file")]
    NoCertificate {
        /// The frontend, as written (`[*]:8443`).
        frontend: String,
    },
    /// A backend given on the command line but no certificate: the self-signed default
    /// stands in only in front of the built-in origin.
    #[error("No x509 certificate PEM file specified: with --backend, give a PEM file argument, --pem-file, --pem-dir or --acme-directory (as hitch needs one); the self-signed certificate is only for a start with no backend, in front of the built-in origin")]
    NoCertificateForBackend,
    /// A PEM directory that cannot be read or holds no PEM file.
    #[error("--pem-dir {}: {reason}", path.display())]
    PemDir {
        /// The directory.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// Replication settings (the key file).
    #[error(transparent)]
    Sync(#[from] crate::session::sync::SyncError),
    /// Users, groups, directories.
    #[error(transparent)]
    System(#[from] crate::system::SystemError),
    /// The ticket key ring (`--ticket-keys`).
    #[error(transparent)]
    Tickets(#[from] crate::session::tickets::TicketError),
    /// Certificates, keys or TLS parameters.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The `index`-th (from 0) of a repeated option is wrong in a way seen only once the
    /// whole configuration is read (a route naming a backend that does not exist).
    #[error("{option}: {reason}")]
    Nth {
        /// The repeated flag.
        option: &'static str,
        /// Which of its values, from 0 (the file's come first).
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// Any of the above, about a key of the configuration file: where it stands.
    #[error("{} line {line}: {source}", path.display())]
    InFile {
        /// The configuration file.
        path: PathBuf,
        /// The key's line.
        line: usize,
        /// What is wrong with it.
        source: Box<ConfigError>,
    },
}

impl ConfigError {
    /// The flag (or flags, `/`-separated) the error names, when it names one.
    fn option(&self) -> Option<&'static str> {
        match self {
            ConfigError::BadAddress { option, .. }
            | ConfigError::Resolve { option, .. }
            | ConfigError::Invalid { option, .. } => Some(option),
            ConfigError::PemDir { .. } => Some("--pem-dir"),
            _ => None,
        }
    }

    /// The error with the file and line of the key it is about, when that option came
    /// from the configuration file (the command line's own flags are named as they are).
    pub fn located(self, places: Option<&super::places::KeyPlaces>) -> Self {
        let Some(places) = places else { return self };
        let line = match &self {
            ConfigError::Nth { option, index, .. } => places.nth_line(option, *index),
            _ => self
                .option()
                .and_then(|o| o.split('/').find_map(|flag| places.line_of(flag.trim()))),
        };
        match line {
            Some(line) => ConfigError::InFile {
                path: places.path.clone(),
                line,
                source: Box::new(self),
            },
            None => self,
        }
    }
}
