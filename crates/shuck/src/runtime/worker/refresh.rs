//! `--backend-refresh SECS` (hitch's `backend-refresh`): the backend servers given by name
//! are resolved again every SECS, off the data path; new connections go to the new
//! addresses, live ones stay where they are. A failed lookup keeps the addresses in use.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use crate::backend::Server;
use crate::config::{BackendEndpoint, BackendTarget, Config, Endpoint};

/// The refreshing thread; dropping this stops it.
#[derive(Debug)]
pub struct Refresh {
    _stop: mpsc::Sender<()>,
}

/// Starts refreshing the servers of `servers` (in the order of the configuration's `-b`)
/// whose hosts are names, when `--backend-refresh` asks for it.
pub fn start(config: &Config, servers: &[Arc<Server>]) -> Option<Refresh> {
    let every = config.backend_refresh?;
    let BackendTarget::Servers(specs) = &config.backend else {
        return None;
    };
    let named: Vec<(Endpoint, Arc<Server>)> = specs
        .iter()
        .zip(servers)
        .filter_map(|(spec, server)| match &spec.endpoint {
            BackendEndpoint::Tcp(e) if e.is_name() => Some((e.clone(), server.clone())),
            _ => None,
        })
        .collect();
    if named.is_empty() {
        tracing::info!(
            name: "backend_refresh_nothing",
            "--backend-refresh: every backend is an address; nothing to resolve",
        );
        return None;
    }
    let (stop, stopped) = mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("backend-refresh".into())
        .spawn(move || run(every, &named, &stopped));
    match spawned {
        Ok(_) => Some(Refresh { _stop: stop }),
        Err(e) => {
            tracing::error!(
                name: "backend_refresh_cannot_start",
                error = %e,
                "--backend-refresh: cannot start its thread: {e}",
            );
            None
        }
    }
}

fn run(every: Duration, named: &[(Endpoint, Arc<Server>)], stopped: &mpsc::Receiver<()>) {
    while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
        for (endpoint, server) in named {
            match endpoint.resolve("--backend") {
                Ok(addrs) if !addrs.is_empty() => {
                    if let Some(old) = server.set_addrs(addrs.clone()) {
                        tracing::info!(
                            name: "backend_resolved_again",
                            old = ?old,
                            addrs = ?addrs,
                            backend = %endpoint,
                            "backend name resolved again: {old:?} -> {addrs:?}; new connections go to the new addresses",
                        );
                    }
                }
                Ok(_) => {
                    tracing::warn!(
                        name: "backend_resolves_to_nothing",
                        backend = %endpoint,
                        "backend name resolves to no address; keeping the addresses in use",
                    )
                }
                Err(e) => {
                    tracing::warn!(
                        name: "backend_resolve_failed",
                        error = %e,
                        backend = %endpoint,
                        "{e}; keeping the addresses in use",
                    )
                }
            }
        }
    }
}
