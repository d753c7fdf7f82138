//! The set of frontends a worker process serves: hands each one's SO_REUSEPORT sockets
//! (bound by the master, one per worker thread) to the worker threads; a reload updates a
//! frontend's TLS state in place, opens new frontends and closes removed ones.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::UnboundedSender;

use crate::config::{Config, Frontend};
use crate::edge::{Control, FrontendState};
use crate::runtime::error::StartError;
use crate::runtime::sockets::FrontSockets;
use crate::shutdown::{self, Trigger};
use crate::tls::TlsState;

/// Most distinct frontends over the life of the process (each has a row of counters).
pub const MAX_SLOTS: usize = 256;

struct Live {
    state: Arc<FrontendState>,
    addrs: Vec<SocketAddr>,
    stop: Trigger,
}

/// Frontends being served, and the way to the workers.
pub struct Frontends {
    live: Vec<Live>,
    /// Names by counter slot, shared with the metrics.
    pub names: Arc<Mutex<Vec<String>>>,
    /// The frontends served now, shared with the metrics (their certificates).
    pub served: Arc<Mutex<Vec<Arc<FrontendState>>>>,
    workers: Vec<UnboundedSender<Control>>,
}

impl Frontends {
    /// An empty set for these workers.
    pub fn new(workers: Vec<UnboundedSender<Control>>) -> Self {
        Frontends {
            live: Vec::new(),
            names: Arc::new(Mutex::new(Vec::new())),
            served: Arc::new(Mutex::new(Vec::new())),
            workers,
        }
    }

    /// `frontend (address)` for each listening address.
    pub fn describe(&self) -> Vec<String> {
        self.live
            .iter()
            .flat_map(|l| {
                l.addrs
                    .iter()
                    .map(move |a| format!("{} ({a})", l.state.name))
            })
            .collect()
    }

    /// Starts accepting on a frontend's sockets (bound by the master, those of `given` on
    /// its addresses are taken), spread over the worker threads.
    pub fn open(
        &mut self,
        fe: &Frontend,
        tls: Arc<TlsState>,
        given: &mut FrontSockets,
        config: &Config,
    ) -> Result<(), StartError> {
        let limits = &config.limits;
        let name = fe.endpoint.to_string();
        let mut sockets = Vec::new();
        let mut quic = Vec::new();
        for &addr in &fe.addrs {
            let before = sockets.len();
            sockets.extend(take(&mut given.tcp, addr));
            if sockets.len() == before {
                return Err(StartError::bind(
                    &name,
                    addr,
                    std::io::Error::other("the master process passed no socket for it"),
                ));
            }
            if fe.quic {
                let group = take(&mut given.udp, addr);
                if group.is_empty() {
                    return Err(StartError::bind(
                        &format!("{name} (QUIC)"),
                        addr,
                        std::io::Error::other("the master process passed no UDP socket for it"),
                    ));
                }
                quic.push(group);
            }
        }
        let slot = self.slot(&name)?;
        // Alt-Svc names the port; a frontend's addresses share one.
        let alt_svc = (fe.quic && limits.h3.alt_svc_max_age > 0)
            .then(|| fe.addrs.first())
            .flatten()
            .map(|a| crate::gateway::h3::alt_svc(a.port(), limits.h3.alt_svc_max_age));
        let state = Arc::new(FrontendState::new(name, slot, tls, alt_svc));
        state.log_to(access_sink(config, fe));
        state.hold_clients_to(client_policy(config, fe));
        let (stop, stopped) = shutdown::channel();
        let per_worker = self.workers.len().max(1);
        for group in quic {
            let workers = group.len();
            for (index, socket) in group.into_iter().enumerate() {
                // Socket `index` of the group is steered the IDs of worker thread `index`.
                let _ = self.workers[index % per_worker].send(Control::Quic {
                    frontend: state.clone(),
                    socket,
                    index,
                    workers,
                    stop: stopped.clone(),
                });
            }
        }
        for (i, l) in sockets.into_iter().enumerate() {
            let worker = &self.workers[i % per_worker];
            // A worker that is gone is gone for good; shutdown is under way.
            let _ = worker.send(Control::Listen {
                frontend: state.clone(),
                listener: l,
                stop: stopped.clone(),
            });
        }
        self.live.push(Live {
            state,
            addrs: fe.addrs.clone(),
            stop,
        });
        self.share();
        Ok(())
    }

    fn slot(&self, name: &str) -> Result<usize, StartError> {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = names.iter().position(|n| n == name) {
            return Ok(i);
        }
        if names.len() >= MAX_SLOTS {
            return Err(StartError::System(std::io::Error::other(format!(
                "more than {MAX_SLOTS} distinct frontends over the life of the process; restart shuck"
            ))));
        }
        names.push(name.to_owned());
        Ok(names.len() - 1)
    }

    /// The frontend serving `name`, if any.
    pub fn get(&self, name: &str) -> Option<&Arc<FrontendState>> {
        self.live.iter().map(|l| &l.state).find(|s| s.name == name)
    }

    /// Names of the frontends served now.
    pub fn names_live(&self) -> Vec<String> {
        self.live.iter().map(|l| l.state.name.clone()).collect()
    }

    /// Stops accepting on a frontend; its live connections go on.
    pub fn close(&mut self, name: &str) {
        if let Some(i) = self.live.iter().position(|l| l.state.name == name) {
            let l = self.live.remove(i);
            l.stop.fire();
            self.share();
        }
    }

    /// Tells the metrics which frontends are served now.
    fn share(&self) {
        let mut served = self.served.lock().unwrap_or_else(|p| p.into_inner());
        *served = self.live.iter().map(|l| l.state.clone()).collect();
    }
}

/// The sockets of `given` on `addr`, taken out of it in order.
fn take<T>(given: &mut Vec<(SocketAddr, T)>, addr: SocketAddr) -> Vec<T> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < given.len() {
        if given[i].0 == addr {
            out.push(given.remove(i).1);
        } else {
            i += 1;
        }
    }
    out
}

/// What `fe` asks of its clients under `config` (its place in the list names its own
/// counts).
pub fn client_policy(config: &Config, fe: &Frontend) -> crate::clients::Policy {
    let index = config
        .frontends
        .iter()
        .position(|f| f.endpoint == fe.endpoint)
        .unwrap_or(0);
    config.clients.policy(index, &fe.clients)
}

/// Tells the client table every scope's limits under `config` (the farm's reports are
/// charged under them): the global one and each frontend's own.
pub fn note_client_scopes(clients: &crate::clients::Clients, config: &Config) {
    clients.note_scope(&config.clients.global);
    for fe in &config.frontends {
        clients.note_scope(&client_policy(config, fe));
    }
}

/// The access log sink `fe`'s lines go to under `config`, if they are logged.
pub fn access_sink(config: &Config, fe: &Frontend) -> Option<usize> {
    config.access_log.as_ref()?.sink_of(fe.access_log.as_ref())
}
