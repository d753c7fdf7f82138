//! Backends: where decrypted connections go. Knows nothing of TLS.
//!
//! One server for now; the pool, balancing and maxconn queue grow here.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;

/// Why a backend connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The connection attempt failed (refused, unreachable, ...).
    #[error("{addr}: {source}")]
    Io {
        /// The address tried last.
        addr: SocketAddr,
        /// The system's reason.
        source: io::Error,
    },
    /// No address answered within the connect timeout.
    #[error("{addr}: connect timed out after {timeout:?}")]
    Timeout {
        /// The address being tried.
        addr: SocketAddr,
        /// The limit.
        timeout: Duration,
    },
}

/// A backend server: its name as configured and the addresses it resolved to.
#[derive(Debug, Clone)]
pub struct Backend {
    name: String,
    addrs: Vec<SocketAddr>,
}

impl Backend {
    /// A backend reached at `addrs` (tried in order), named `name` in logs.
    pub fn new(name: impl Into<String>, addrs: Vec<SocketAddr>) -> Self {
        Backend {
            name: name.into(),
            addrs,
        }
    }

    /// How the backend is named in logs.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Connects, trying each address in turn, all within `timeout`; sets TCP_NODELAY.
    pub async fn connect(&self, timeout: Duration) -> Result<TcpStream, ConnectError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last = None;
        for &addr in &self.addrs {
            match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    // Without it, small writes wait for ACKs (the seeds' 40 ms per request).
                    stream
                        .set_nodelay(true)
                        .map_err(|source| ConnectError::Io { addr, source })?;
                    return Ok(stream);
                }
                Ok(Err(source)) => last = Some(ConnectError::Io { addr, source }),
                Err(_) => return Err(ConnectError::Timeout { addr, timeout }),
            }
        }
        Err(last.unwrap_or_else(|| ConnectError::Io {
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            source: io::Error::new(io::ErrorKind::NotFound, "no backend address"),
        }))
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}
