//! The services that run beside the workers, off the data path: the `--stats` endpoint,
//! OCSP stapling (`--ocsp-dir`), session replication and the shared store. Their sockets
//! were bound by the master (`runtime/sockets.rs`); their threads start here, after
//! privileges are dropped.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::backend::Server;
use crate::config::Config;
use crate::runtime::error::StartError;
use crate::runtime::sockets::Sockets;
use crate::session::store::StoreThread;
use crate::session::sync::Replication;
use crate::session::Resumption;
use crate::tls::ocsp::manager::{self as ocsp, Target, Updates};

/// The running services.
#[derive(Debug)]
pub struct Services {
    /// The `--stats` listener, served by the supervisor's runtime.
    pub stats: Option<std::net::TcpListener>,
    /// The plain-HTTP listeners (`--redirect-listen`, `--acme-http-listen`), served by the
    /// supervisor's runtime, and what they read.
    pub plain: (
        Vec<(std::net::SocketAddr, std::net::TcpListener)>,
        Arc<crate::redirect::Plain>,
    ),
    /// With ACME and replication: farm messages out to the peers, and in from them.
    pub farm: Option<(
        crate::session::sync::FarmOut,
        mpsc::UnboundedReceiver<Vec<u8>>,
    )>,
    /// Tells the OCSP thread which certificates to keep staples for.
    pub ocsp_updates: Option<Updates>,
    /// A message each time new staples arrived.
    pub restaple: mpsc::UnboundedReceiver<()>,
    /// Replication's threads; dropping this stops them.
    pub replication: Option<Replication>,
    /// The shared store's thread; dropping this stops it.
    _store: Option<StoreThread>,
    /// `--backend-refresh`'s thread, held for its drop, which stops it.
    _backend_refresh: Option<super::refresh::Refresh>,
}

impl Services {
    /// Starts OCSP refreshing and replication on the sockets bound earlier, and the
    /// resolving again of `servers`' names.
    pub fn start(
        config: &Config,
        sockets: Sockets,
        ocsp_targets: Vec<Target>,
        resumption: &Resumption,
        servers: &[Arc<Server>],
        clients: &Arc<crate::clients::Clients>,
        access: Option<&Arc<crate::access::AccessLog>>,
    ) -> Result<Self, StartError> {
        let (restaple_tx, restaple) = mpsc::unbounded_channel::<()>();
        let ocsp_updates = match (&config.ocsp, &config.tls.ocsp) {
            (Some(settings), Some(store)) => Some(ocsp::start(
                settings.clone(),
                store.clone(),
                ocsp_targets,
                Box::new(move || {
                    let _ = restaple_tx.send(());
                }),
            )?),
            _ => None,
        };
        let mut farm = None;
        let replication = match (&config.replication, sockets.replication) {
            (Some(settings), Some(sock)) => {
                // With ACME, the farm's messages ride on replication.
                let (farm_in, farm_rx) = match &config.acme {
                    Some(_) => {
                        let (tx, rx) = mpsc::unbounded_channel::<Vec<u8>>();
                        let f: crate::session::sync::FarmIn = Box::new(move |body: &[u8]| {
                            let _ = tx.send(body.to_vec());
                        });
                        (Some(f), Some(rx))
                    }
                    None => (None, None),
                };
                let r = Replication::start_on(
                    sock,
                    settings,
                    resumption.cache.clone(),
                    resumption.tickets.clone(),
                    farm_in,
                )?;
                farm = farm_rx.map(|rx| (r.farm_out(), rx));
                let peers = if settings.peers.is_empty() {
                    "no peer (receive only)".to_owned()
                } else {
                    let all: Vec<String> = settings.peers.iter().map(|p| p.to_string()).collect();
                    all.join(", ")
                };
                let keys = resumption
                    .tickets
                    .as_ref()
                    .is_some_and(|t| t.file().is_none());
                tracing::info!(
                    name: "replication_started",
                    local = %r.local_addr(),
                    peers = %peers,
                    ticket_keys = keys,
                    "replicating sessions{} on udp {} with {peers}",
                    if keys { " and ticket keys" } else { "" },
                    r.local_addr(),
                );
                Some(r)
            }
            _ => None,
        };
        let store = match &resumption.store {
            Some(store) => {
                let thread = store.start(
                    resumption.cache.clone(),
                    resumption.tickets.clone(),
                    Some((clients.clone(), config.clients.share_interval)),
                )?;
                let settings = store.settings();
                let ring = resumption
                    .tickets
                    .as_ref()
                    .is_some_and(|t| t.file().is_none());
                tracing::info!(
                    name: "store_started",
                    url = %settings.url,
                    prefix = ?settings.prefix,
                    timeout = ?settings.timeout,
                    ticket_keys = ring,
                    "sharing sessions{} through {} (keys prefixed {:?}; a handshake waits at most {:?} for it)",
                    if ring { " and the ticket key ring" } else { "" },
                    settings.url,
                    settings.prefix,
                    settings.timeout,
                );
                Some(thread)
            }
            None => None,
        };
        Ok(Services {
            stats: sockets.stats,
            plain: (
                sockets.plain,
                crate::redirect::Plain::new(config, clients.clone(), access.cloned()),
            ),
            farm,
            ocsp_updates,
            restaple,
            replication,
            _store: store,
            _backend_refresh: super::refresh::start(config, servers),
        })
    }
}
