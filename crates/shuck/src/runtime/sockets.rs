//! What the master binds and loads for the worker's services before it forks: the `--stats`
//! port, the replication socket, the http-01 port (bound while still privileged, handed to
//! the worker), and the OCSP staples cached on disk.

use std::net::UdpSocket;
use std::sync::Arc;

use super::channel::{Entry, Kind};
use super::error::StartError;
use super::inherit::Inherited;
use crate::config::Config;
use crate::session::sync::Replication;
use crate::tls::ocsp::manager::{self as ocsp, Target};
use crate::tls::ocsp::OcspStore;

/// One frontend's sockets, as the master binds them and hands them to a worker: its TCP
/// listeners and, with `--quic`, its UDP sockets, each one per worker thread and address,
/// address by address (a QUIC group's order is its steering's).
#[derive(Debug, Default)]
pub struct FrontSockets {
    /// TCP listeners.
    pub tcp: Vec<(std::net::SocketAddr, std::net::TcpListener)>,
    /// QUIC's UDP sockets.
    pub udp: Vec<(std::net::SocketAddr, UdpSocket)>,
}

impl FrontSockets {
    /// Copies of the descriptors (the same sockets).
    pub fn try_clone(&self) -> std::io::Result<Self> {
        Ok(FrontSockets {
            tcp: self
                .tcp
                .iter()
                .map(|(a, l)| Ok((*a, l.try_clone()?)))
                .collect::<std::io::Result<_>>()?,
            udp: self
                .udp
                .iter()
                .map(|(a, s)| Ok((*a, s.try_clone()?)))
                .collect::<std::io::Result<_>>()?,
        })
    }

    /// Every socket, described, with a copy of each descriptor (for a worker or the next
    /// master).
    pub fn export(&self) -> std::io::Result<Vec<(Entry, std::os::fd::OwnedFd)>> {
        let tcp = self.tcp.iter().map(|(addr, l)| {
            let entry = Entry {
                kind: Kind::Frontend,
                addr: *addr,
            };
            Ok((entry, l.try_clone()?.into()))
        });
        let udp = self.udp.iter().map(|(addr, s)| {
            let entry = Entry {
                kind: Kind::Quic,
                addr: *addr,
            };
            Ok((entry, s.try_clone()?.into()))
        });
        tcp.chain(udp).collect()
    }

    /// Drops them all (those no frontend took).
    pub fn clear(&mut self) {
        self.tcp.clear();
        self.udp.clear();
    }
}

/// Sockets the services need, bound while still privileged.
#[derive(Debug)]
pub struct Sockets {
    pub(super) stats: Option<std::net::TcpListener>,
    pub(super) replication: Option<UdpSocket>,
    /// The plain-HTTP listeners, each with the address it was asked for (what a reload
    /// compares).
    pub(super) plain: Vec<(std::net::SocketAddr, std::net::TcpListener)>,
}

impl Sockets {
    /// Binds the `--stats` port, the replication socket and the plain-HTTP ports, when
    /// asked for (or takes them from those inherited).
    pub fn bind(config: &Config, inherited: &mut Inherited) -> Result<Self, StartError> {
        let stats = config
            .stats
            .map(|addr| {
                tcp_listener(addr, inherited).map_err(|source| StartError::Stats { addr, source })
            })
            .transpose()?;
        let plain = config
            .plain_listen()
            .into_iter()
            .map(|addr| {
                tcp_listener(addr, inherited)
                    .map(|l| (addr, l))
                    .map_err(|source| StartError::Plain { addr, source })
            })
            .collect::<Result<_, _>>()?;
        let replication = match &config.replication {
            Some(settings) => Some(match inherited.take_udp(settings.listen) {
                Some(s) => s,
                None => Replication::bind(settings)?,
            }),
            None => None,
        };
        Ok(Sockets {
            stats,
            replication,
            plain,
        })
    }

    /// No socket.
    pub fn none() -> Self {
        Sockets {
            stats: None,
            replication: None,
            plain: Vec::new(),
        }
    }

    /// Copies of the descriptors (the same sockets), for a worker process.
    pub fn try_clone(&self) -> std::io::Result<Self> {
        Ok(Sockets {
            stats: self.stats.as_ref().map(|l| l.try_clone()).transpose()?,
            replication: self
                .replication
                .as_ref()
                .map(|s| s.try_clone())
                .transpose()?,
            plain: self
                .plain
                .iter()
                .map(|(a, l)| Ok((*a, l.try_clone()?)))
                .collect::<std::io::Result<_>>()?,
        })
    }

    /// Each socket, described, with a copy of its descriptor (for the next master).
    pub fn export(&self) -> std::io::Result<Vec<(Entry, std::os::fd::OwnedFd)>> {
        let mut out = Vec::new();
        if let Some(l) = &self.stats {
            let addr = l.local_addr()?;
            out.push((
                Entry {
                    kind: Kind::Stats,
                    addr,
                },
                l.try_clone()?.into(),
            ));
        }
        if let Some(s) = &self.replication {
            let addr = s.local_addr()?;
            out.push((
                Entry {
                    kind: Kind::Replication,
                    addr,
                },
                s.try_clone()?.into(),
            ));
        }
        for (addr, l) in &self.plain {
            let addr = *addr;
            out.push((
                Entry {
                    kind: Kind::Plain,
                    addr,
                },
                l.try_clone()?.into(),
            ));
        }
        Ok(out)
    }

    /// A reload's plain-HTTP listeners: those of `config` not yet bound are bound (here, as
    /// root) and returned for the worker; those it no longer names are closed here (the
    /// worker stops accepting on its copies). An address that cannot be bound is logged
    /// and left out; the others go on.
    pub fn replug_plain(&mut self, config: &Config) -> Vec<(Entry, std::os::fd::OwnedFd)> {
        let wanted = config.plain_listen();
        self.plain.retain(|(a, _)| wanted.contains(a));
        let mut fresh = Vec::new();
        for addr in wanted {
            if self.plain.iter().any(|(a, _)| *a == addr) {
                continue;
            }
            let bound =
                tcp_listener(addr, &mut Inherited::default()).and_then(|l| Ok((l.try_clone()?, l)));
            match bound {
                Ok((copy, l)) => {
                    self.plain.push((addr, l));
                    let kind = Kind::Plain;
                    fresh.push((Entry { kind, addr }, copy.into()));
                }
                Err(source) => {
                    let e = StartError::Plain { addr, source };
                    tracing::error!(
                        name: "reload_redirect_listen_failed",
                        addr = %addr,
                        error = %e,
                        "SIGHUP: {e}; the other plain-HTTP listeners go on",
                    );
                }
            }
        }
        fresh
    }
}

/// A service's listener on `addr`: the one inherited, else a new one; non-blocking.
fn tcp_listener(
    addr: std::net::SocketAddr,
    inherited: &mut Inherited,
) -> std::io::Result<std::net::TcpListener> {
    let l = match inherited.take_tcp(addr) {
        Some(l) => l,
        None => std::net::TcpListener::bind(addr)?,
    };
    l.set_nonblocking(true)?;
    Ok(l)
}

/// `--ocsp-dir`: the staples cached on disk are checked and attached to the configuration
/// so that the first handshakes staple them. Returns the certificates to keep staples for.
pub fn load_ocsp_cache(config: &mut Config) -> Vec<Target> {
    let Some(settings) = &config.ocsp else {
        return Vec::new();
    };
    let store = Arc::new(OcspStore::default());
    let targets = ocsp::targets(
        config
            .certs
            .iter()
            .chain(config.frontends.iter().flat_map(|f| &f.certs)),
    );
    ocsp::load_cached(settings, &targets, &store);
    config.tls.ocsp = Some(store);
    targets
}
