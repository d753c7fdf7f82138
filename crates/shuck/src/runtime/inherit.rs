//! Sockets this process did not bind: those the previous master hands over at a binary
//! upgrade (with its ticket keys, then its sessions), or those systemd passes with socket
//! activation (`LISTEN_FDS`, a `shuck.socket` unit). Frontends and services take theirs by
//! address (or by `LISTEN_FDNAMES`) before binding anything; what nobody takes is closed.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::runtime::channel::{Channel, Kind, Msg};
use crate::session::tickets::RingState;

/// The environment variable naming the master that started this one for an upgrade; its
/// channel is this process's standard input.
pub const UPGRADE_ENV: &str = "SHUCK_UPGRADE_FROM";
/// How long the handover of sockets and keys may take.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// A socket waiting for its frontend or service.
#[derive(Debug)]
struct Offered {
    kind: Kind,
    addr: SocketAddr,
    /// systemd's `FileDescriptorName=`, when given.
    name: Option<String>,
    fd: OwnedFd,
}

/// What this process was given at start.
#[derive(Debug, Default)]
pub struct Inherited {
    offered: Vec<Offered>,
    /// The previous master, at an upgrade.
    pub predecessor: Option<Channel>,
    /// Its ticket key ring.
    pub tickets: Option<RingState>,
    /// Where the sockets came from, for the log.
    pub from: Option<&'static str>,
}

/// Why the handover at start failed.
#[derive(Debug, thiserror::Error)]
pub enum InheritError {
    /// The previous master's handover broke off.
    #[error("binary upgrade: the handover from the previous process failed: {0}")]
    Upgrade(String),
    /// systemd's sockets could not be taken.
    #[error("socket activation: {0}")]
    Systemd(std::io::Error),
}

impl Inherited {
    /// Takes what the previous master or systemd passed, if anything.
    pub fn take() -> Result<Self, InheritError> {
        let from_master = std::env::var(UPGRADE_ENV)
            .ok()
            .and_then(|v| v.parse::<i32>().ok())
            .is_some_and(|pid| pid == nix::unistd::getppid().as_raw());
        if from_master {
            return Self::from_predecessor().map_err(InheritError::Upgrade);
        }
        Self::from_systemd().map_err(InheritError::Systemd)
    }

    fn from_predecessor() -> Result<Self, String> {
        let stdin = std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| e.to_string())?;
        let chan = Channel::from_socket(UnixStream::from(stdin));
        chan.set_timeout(Some(HANDOVER_TIMEOUT))
            .map_err(|e| e.to_string())?;
        let mut got = Inherited {
            from: Some("the previous process"),
            ..Inherited::default()
        };
        loop {
            match chan.recv().map_err(|e| e.to_string())? {
                Msg::Sockets(entries, fds) => {
                    for (e, fd) in entries.into_iter().zip(fds) {
                        got.offered.push(Offered {
                            kind: e.kind,
                            addr: e.addr,
                            name: None,
                            fd,
                        });
                    }
                }
                Msg::Tickets(state) => got.tickets = Some(state),
                Msg::Ready => break,
                m => return Err(format!("unexpected {m:?}")),
            }
        }
        chan.set_timeout(None).map_err(|e| e.to_string())?;
        got.predecessor = Some(chan);
        Ok(got)
    }

    fn from_systemd() -> std::io::Result<Self> {
        let mut fds = listenfd::ListenFd::from_env();
        if fds.len() == 0 {
            return Ok(Inherited::default());
        }
        let names: Vec<String> = std::env::var("LISTEN_FDNAMES")
            .map(|v| v.split(':').map(str::to_owned).collect())
            .unwrap_or_default();
        let mut got = Inherited {
            from: Some("systemd"),
            ..Inherited::default()
        };
        for i in 0..fds.len() {
            let name = names.get(i).filter(|n| !n.is_empty()).cloned();
            if let Ok(Some(l)) = fds.take_tcp_listener(i) {
                got.offered.push(Offered {
                    kind: Kind::Frontend,
                    addr: l.local_addr()?,
                    name,
                    fd: l.into(),
                });
            } else if let Ok(Some(u)) = fds.take_udp_socket(i) {
                got.offered.push(Offered {
                    kind: Kind::Replication,
                    addr: u.local_addr()?,
                    name,
                    fd: u.into(),
                });
            } else {
                tracing::warn!(
                    name: "socket_activation_ignored",
                    fd = i + 3,
                    "socket activation: descriptor {} is neither a TCP listener nor a UDP socket; ignored",
                    i + 3,
                );
            }
        }
        Ok(got)
    }

    /// The listening sockets offered for `addr` (or named `name`), taken out of the offer.
    pub fn take_listeners(&mut self, addr: SocketAddr, name: &str) -> Vec<TcpListener> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.offered.len() {
            let o = &self.offered[i];
            // By name, a socket goes to the address of its family ("[*]:443" is two).
            let named = o.name.as_deref() == Some(name) && o.addr.is_ipv4() == addr.is_ipv4();
            let wanted = o.kind == Kind::Frontend && (o.addr == addr || named);
            if wanted {
                out.push(TcpListener::from(self.offered.remove(i).fd));
            } else {
                i += 1;
            }
        }
        out
    }

    /// A frontend's QUIC sockets offered for `addr`, in their group's order.
    pub fn take_quic(&mut self, addr: SocketAddr) -> Vec<UdpSocket> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.offered.len() {
            if self.offered[i].kind == Kind::Quic && self.offered[i].addr == addr {
                out.push(UdpSocket::from(self.offered.remove(i).fd));
            } else {
                i += 1;
            }
        }
        out
    }

    /// A service's TCP listener (`--stats`, a plain-HTTP one) offered for `addr`.
    pub fn take_tcp(&mut self, addr: SocketAddr) -> Option<TcpListener> {
        let i = self
            .offered
            .iter()
            .position(|o| !matches!(o.kind, Kind::Replication | Kind::Quic) && o.addr == addr)?;
        Some(TcpListener::from(self.offered.remove(i).fd))
    }

    /// The replication socket offered for `addr`.
    pub fn take_udp(&mut self, addr: SocketAddr) -> Option<UdpSocket> {
        let i = self
            .offered
            .iter()
            .position(|o| o.kind == Kind::Replication && o.addr == addr)?;
        Some(UdpSocket::from(self.offered.remove(i).fd))
    }

    /// Closes what nobody took, saying so.
    pub fn close_rest(&mut self) {
        for o in self.offered.drain(..) {
            tracing::info!(
                name: "inherited_socket_unused",
                kind = %(self_name(o.kind)),
                addr = %o.addr,
                "{}: no frontend or service is on {}{}; that socket is closed",
                self_name(o.kind),
                o.addr,
                o.name.map(|n| format!(" ({n})")).unwrap_or_default(),
            );
        }
    }
}

fn self_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Frontend => "inherited listener",
        Kind::Stats => "inherited stats listener",
        Kind::Replication => "inherited replication socket",
        Kind::Plain => "inherited plain HTTP listener",
        Kind::Quic => "inherited QUIC socket",
    }
}
