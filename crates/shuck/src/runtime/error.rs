//! Why shuck could not start serving.

use std::io;
use std::net::SocketAddr;

use crate::tls::TlsError;

/// Why shuck could not start serving.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Another socket holds a frontend's port.
    #[error("frontend {frontend} ({addr}): address already in use")]
    PortInUse {
        /// The frontend as written.
        frontend: String,
        /// The address.
        addr: SocketAddr,
    },
    /// A frontend could not be bound for another reason.
    #[error("frontend {frontend} ({addr}): cannot listen: {source}")]
    Bind {
        /// The frontend as written.
        frontend: String,
        /// The address.
        addr: SocketAddr,
        /// The system's reason.
        source: io::Error,
    },
    /// TLS configuration.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A frontend's TLS state.
    #[error(transparent)]
    FrontendTls(#[from] super::rebuild::FrontendTlsError),
    /// The admin API's socket could not be bound.
    #[error(transparent)]
    Admin(#[from] crate::admin::server::BindError),
    /// The built-in origin could not start.
    #[error("cannot start the built-in origin: {0}")]
    Origin(io::Error),
    /// The metrics port could not be bound.
    #[error("--stats {addr}: cannot listen: {source}")]
    Stats {
        /// The address.
        addr: SocketAddr,
        /// The system's reason.
        source: io::Error,
    },
    /// A plain-HTTP port (`--redirect-listen`, `--acme-http-listen`) could not be bound.
    #[error("--redirect-listen/--acme-http-listen {addr}: cannot listen: {source}")]
    Plain {
        /// The address.
        addr: SocketAddr,
        /// The system's reason.
        source: io::Error,
    },
    /// The ACME state directory cannot be used.
    #[error(transparent)]
    AcmeState(#[from] crate::acme::state::StateError),
    /// Privileges, daemon, pid file.
    #[error(transparent)]
    Privileges(#[from] crate::system::SystemError),
    /// Session replication could not start.
    #[error(transparent)]
    Sync(#[from] crate::session::sync::SyncError),
    /// The shared store (`--shared-store`).
    #[error(transparent)]
    Store(#[from] crate::session::store::StoreError),
    /// Threads, runtimes or signal handlers could not be set up.
    #[error("cannot start: {0}")]
    System(#[from] io::Error),
    /// `--access-log`'s file cannot be opened.
    #[error("--access-log {}: {source}", path.display())]
    AccessLog {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl StartError {
    /// A frontend's socket could not be bound: a taken port is named as such.
    pub fn bind(frontend: &str, addr: SocketAddr, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::AddrInUse {
            StartError::PortInUse {
                frontend: frontend.to_owned(),
                addr,
            }
        } else {
            StartError::Bind {
                frontend: frontend.to_owned(),
                addr,
                source,
            }
        }
    }
}
