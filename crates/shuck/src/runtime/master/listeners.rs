//! The master's listening sockets: one SO_REUSEPORT socket per frontend address and worker
//! thread, bound while still privileged (or taken from the previous master or systemd).
//! The master keeps them for its life, so that a worker that dies is replaced on the very
//! same sockets: what arrived meanwhile waits in their backlog.

use std::os::fd::OwnedFd;

use crate::config::Frontend;
use crate::gateway::h3::steer;
use crate::proxy::listener;
use crate::runtime::channel::Entry;
use crate::runtime::error::StartError;
use crate::runtime::inherit::Inherited;
use crate::runtime::sockets::FrontSockets;

/// One frontend's sockets.
#[derive(Debug)]
pub struct Bound {
    /// The frontend's name (its text in the configuration).
    pub name: String,
    /// Sockets, `threads` per address, address by address.
    pub sockets: FrontSockets,
}

/// Every frontend's sockets.
#[derive(Debug)]
pub struct Listeners {
    /// By frontend, in configuration order.
    pub bound: Vec<Bound>,
    options: listener::Options,
    threads: usize,
}

impl Listeners {
    /// None yet; each frontend gets `threads` sockets per address.
    pub fn new(options: listener::Options, threads: usize) -> Self {
        Listeners {
            bound: Vec::new(),
            options,
            threads: threads.max(1),
        }
    }

    /// The frontend named `name`, if bound.
    pub fn get(&self, name: &str) -> Option<&Bound> {
        self.bound.iter().find(|b| b.name == name)
    }

    /// Binds `fe` (or takes its inherited sockets).
    pub fn open(&mut self, fe: &Frontend, inherited: &mut Inherited) -> Result<(), StartError> {
        let name = fe.endpoint.to_string();
        let mut sockets = FrontSockets::default();
        if fe.quic {
            for &addr in &fe.addrs {
                // A binary upgrade's: the same group, in its order; else new ones.
                let given = inherited.take_quic(addr);
                let group = if given.len() == self.threads {
                    given
                } else {
                    drop(given); // another number of threads: a new group, steered anew
                    steer::bind(addr, self.threads).map_err(|source| {
                        StartError::bind(&format!("{name} (QUIC)"), addr, source)
                    })?
                };
                sockets.udp.extend(group.into_iter().map(|s| (addr, s)));
            }
        }
        let sockets_tcp = &mut sockets.tcp;
        for &addr in &fe.addrs {
            let mut given = inherited.take_listeners(addr, &name);
            if given.is_empty() {
                listener::check_free(addr)
                    .map_err(|source| StartError::bind(&name, addr, source))?;
                for _ in 0..self.threads {
                    let l = listener::bind(addr, self.options)
                        .map_err(|source| StartError::bind(&name, addr, source))?;
                    sockets_tcp.push((addr, l));
                }
                continue;
            }
            for l in &given {
                l.set_nonblocking(true)
                    .and_then(|()| {
                        let sock = socket2::SockRef::from(l);
                        listener::set_client_options(&sock, self.options.keepalive)
                    })
                    .map_err(|source| StartError::bind(&name, addr, source))?;
            }
            // As many as there are threads: share a socket when fewer were passed (systemd
            // passes one), close those beyond.
            given.truncate(self.threads);
            for i in 0..self.threads {
                let l = match given.get(i) {
                    Some(l) => l.try_clone(),
                    None => given[i % given.len()].try_clone(),
                }
                .map_err(|source| StartError::bind(&name, addr, source))?;
                sockets_tcp.push((addr, l));
            }
        }
        self.bound.push(Bound { name, sockets });
        Ok(())
    }

    /// Forgets a frontend: the master's sockets for it are closed.
    pub fn close(&mut self, name: &str) {
        self.bound.retain(|b| b.name != name);
    }

    /// Every socket, described, with a copy of each descriptor (for the next master).
    pub fn export(&self) -> std::io::Result<Vec<(Entry, OwnedFd)>> {
        let mut out = Vec::new();
        for b in &self.bound {
            out.extend(b.export()?);
        }
        Ok(out)
    }
}

impl Bound {
    /// Its sockets, described, with a copy of each descriptor (for a worker or the next
    /// master).
    pub fn export(&self) -> std::io::Result<Vec<(Entry, OwnedFd)>> {
        self.sockets.export()
    }
}
