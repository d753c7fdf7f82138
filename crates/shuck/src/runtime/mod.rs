//! The process: bind every socket, start one worker thread per core (each with its own
//! single-threaded runtime and SO_REUSEPORT sockets, stud's process-per-core model without
//! processes), then wait for signals: SIGHUP reloads ([`reload`]), SIGTERM drains.

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, Semaphore};

use crate::backend::{Pool, PoolLimits, Server};
use crate::config::{BackendTarget, Config};
use crate::metrics::{self, Counters};
use crate::proxy::{listener, Control, ProxyState, Worker};
use crate::shutdown::{self, Shutdown};
use crate::tls::ocsp::{self, OcspStore};
use crate::tls::{TlsError, TlsState};

mod frontends;
mod reload;

use frontends::Frontends;

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
    /// Privileges, daemon, pid file.
    #[error(transparent)]
    Privileges(#[from] crate::system::SystemError),
    /// Session replication could not start.
    #[error(transparent)]
    Sync(#[from] crate::session::sync::SyncError),
    /// Threads, runtimes or signal handlers could not be set up.
    #[error("cannot start: {0}")]
    System(#[from] io::Error),
}

/// Re-reads the configuration for a reload (SIGHUP): the same command line and file.
pub type Reparse = Box<dyn Fn() -> Result<Config, String>>;

/// Serves `config` until SIGTERM/SIGINT and the drain that follows; SIGHUP calls `reparse`
/// and applies what it returns.
pub fn run(mut config: Config, reparse: Reparse) -> Result<(), StartError> {
    raise_nofile_limit();
    // --ocsp-dir: cached responses are checked and stapled from the first handshake.
    let ocsp_targets = match &config.ocsp {
        Some(settings) => {
            let store = Arc::new(OcspStore::default());
            let targets = ocsp::manager::targets(
                config
                    .certs
                    .iter()
                    .chain(config.frontends.iter().flat_map(|f| &f.certs)),
            );
            ocsp::manager::load_cached(settings, &targets, &store);
            config.tls.ocsp = Some(store);
            targets
        }
        None => Vec::new(),
    };
    let tls = Arc::new(TlsState::build(&config.tls, &config.certs)?);
    // Bind everything before serving anything, so a taken port is a clean start failure.
    let mut controls = Vec::new();
    let mut control_rxs = Vec::new();
    for _ in 0..config.workers {
        let (tx, rx) = mpsc::unbounded_channel::<Control>();
        controls.push(tx);
        control_rxs.push(rx);
    }
    let mut frontends = Frontends::new(controls, config.backlog);
    for fe in &config.frontends {
        let fe_tls = if fe.certs.is_empty() && fe.tls.is_none() {
            tls.clone()
        } else {
            let (settings, certs) = config.frontend_tls(fe);
            Arc::new(tls.for_frontend(&settings, &certs)?)
        };
        frontends.open(fe, fe_tls)?;
    }
    let stats_listener = match config.stats {
        Some(addr) => Some(
            std::net::TcpListener::bind(addr)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .map_err(|source| StartError::Stats { addr, source })?,
        ),
        None => None,
    };
    let sync_socket = match &config.replication {
        Some(settings) => Some(crate::session::sync::Replication::bind(settings)?),
        None => None,
    };

    // Everything privileged is done: detach, write the pid, become the unprivileged user.
    // Detaching forks, so it comes before any thread starts.
    if config.daemon {
        crate::system::daemon::detach()?;
    }
    let _pidfile = match &config.pidfile {
        Some(p) => Some(crate::system::daemon::PidFile::write(p)?),
        None => None,
    };
    let servers = match &config.backend {
        BackendTarget::Servers(specs) => specs
            .iter()
            .map(|b| Server::new(b.endpoint.to_string(), b.addrs.clone(), b.maxconn, b.weight))
            .collect(),
        BackendTarget::BuiltinOrigin => {
            let addr = crate::origin::start().map_err(StartError::Origin)?;
            vec![Server::new(
                format!("built-in origin [{}]:{}", addr.ip(), addr.port()),
                vec![addr],
                None,
                1,
            )]
        }
    };
    let l = &config.limits;
    let pool = Pool::new(
        servers,
        PoolLimits {
            connect_timeout: l.connect_timeout,
            queue_timeout: l.queue_timeout,
            queue_size: l.queue_size,
            retry_after: l.retry_after,
        },
    );

    if !config.privileges.is_none() {
        config.privileges.apply()?;
        tracing::info!(
            "running as {}{}{}",
            config
                .privileges
                .user
                .as_ref()
                .map_or("the same user".to_owned(), |(n, u)| format!(
                    "user {n} ({u})"
                )),
            config
                .privileges
                .group
                .as_ref()
                .map_or(String::new(), |(n, g)| format!(", group {n} ({g})")),
            config
                .privileges
                .chroot
                .as_ref()
                .map_or(String::new(), |d| format!(", chroot {}", d.display())),
        );
    }
    let (restaple_tx, mut restaple_rx) = mpsc::unbounded_channel::<()>();
    let ocsp_updates = match (&config.ocsp, &config.tls.ocsp) {
        (Some(settings), Some(store)) => Some(ocsp::manager::start(
            settings.clone(),
            store.clone(),
            ocsp_targets,
            Box::new(move || {
                let _ = restaple_tx.send(());
            }),
        )?),
        _ => None,
    };
    let replication = match (&config.replication, sync_socket) {
        (Some(settings), Some(sock)) => {
            let r = crate::session::sync::Replication::start_on(
                sock,
                settings,
                tls.cache.clone(),
                tls.tickets.clone(),
            )?;
            tracing::info!(
                "replicating sessions{} on udp {} with {}",
                if tls.tickets.as_ref().is_some_and(|t| t.file().is_none()) {
                    " and ticket keys"
                } else {
                    ""
                },
                r.local_addr(),
                if settings.peers.is_empty() {
                    "no peer (receive only)".to_owned()
                } else {
                    settings
                        .peers
                        .iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            );
            Some(r)
        }
        _ => None,
    };
    if config.self_signed {
        tracing::info!(
            names = %crate::tls::selfsigned::NAMES.join(", "),
            "no certificate given: serving a self-signed certificate generated at start"
        );
    }
    let forwarding: Vec<String> = pool.servers().iter().map(|s| s.name().to_owned()).collect();
    let state = Arc::new(ProxyState {
        tls: tls.clone(),
        pool,
        preamble: config.preamble,
        proxy_proxy: config.proxy_proxy,
        http: config.http,
        limits: config.limits.clone(),
        conn_limit: (config.limits.max_conns > 0)
            .then(|| Arc::new(Semaphore::new(config.limits.max_conns))),
        log_connections: config.log_connections,
        proxy_client_cert: config.proxy_client_cert,
        client_cert_header: config.client_cert_header.clone(),
        replication,
    });
    // Signals are caught from here on, before anyone is told shuck listens: a SIGTERM
    // right after "listening" is a drain, not a kill.
    let main_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (mut term, mut int, mut hup) = {
        let _in_runtime = main_rt.enter();
        (
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
            signal(SignalKind::hangup())?,
        )
    };
    tracing::info!(
        "shuck {} listening on {} with {} worker(s), forwarding to {}",
        env!("CARGO_PKG_VERSION"),
        frontends.describe().join(", "),
        config.workers,
        forwarding.join(", ")
    );

    let mut counters = Counters::new(frontends::MAX_SLOTS);
    let (trigger, shutdown) = shutdown::channel();
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
    for (id, control) in control_rxs.into_iter().enumerate() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let state = state.clone();
        let shutdown = shutdown.clone();
        let done = done_tx.clone();
        let drain = config.limits.drain_timeout;
        let mine = counters.add_worker();
        std::thread::Builder::new()
            .name(format!("shuck-worker-{id}"))
            .spawn(move || {
                let local = tokio::task::LocalSet::new();
                local.block_on(
                    &rt,
                    worker_main(Worker::new(id, state, mine), control, shutdown, drain),
                );
                drop(done);
            })?;
    }
    drop(done_tx);
    crate::system::notify::notify("READY=1");

    let mut reloader = reload::Reloader::new(config, reparse, tls, ocsp_updates);
    main_rt.block_on(async move {
        if let Some(l) = stats_listener {
            let exposition = Arc::new(metrics::Exposition {
                counters: counters.clone(),
                state: state.clone(),
                frontends: frontends.names.clone(),
            });
            let l = tokio::net::TcpListener::from_std(l)?;
            tracing::info!("metrics at http://{}/metrics", l.local_addr()?);
            tokio::spawn(crate::stats::serve(l, exposition));
        }
        let mut report = tokio::time::interval(STATS_EVERY);
        report.tick().await;
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                Some(()) = restaple_rx.recv() => reloader.restaple(&frontends),
                _ = hup.recv() => {
                    crate::system::notify::reloading();
                    reloader.reload(&mut frontends);
                    crate::system::notify::notify("READY=1");
                }
                _ = report.tick() => tracing::debug!("{}", metrics::summary(&counters, &state)),
                _ = done_rx.recv() => {
                    tracing::error!("workers stopped unexpectedly");
                    return Err(StartError::System(io::Error::other("workers stopped")));
                }
            }
        }
        tracing::info!(
            "stopping: no new connections; live ones get up to {:?} to finish",
            state.limits.drain_timeout
        );
        crate::system::notify::notify("STOPPING=1");
        trigger.fire();
        tokio::select! {
            _ = done_rx.recv() => tracing::info!("stopped; {}", metrics::summary(&counters, &state)),
            _ = term.recv() => exit_now(),
            _ = int.recv() => exit_now(),
        }
        Ok(())
    })
}

/// How often the counters are logged (at debug level).
const STATS_EVERY: Duration = Duration::from_secs(10);

fn exit_now() {
    tracing::warn!("second signal: exiting now");
    std::process::exit(1);
}

/// One worker: accept on the sockets the main thread sends (at start and on reloads) until
/// shutdown, then wait for its connections up to the drain deadline. Tasks still running
/// then are dropped with the runtime.
async fn worker_main(
    worker: Worker,
    mut control: mpsc::UnboundedReceiver<Control>,
    mut shutdown: Shutdown,
    drain: Duration,
) {
    let worker = Rc::new(worker);
    loop {
        tokio::select! {
            _ = shutdown.recv() => break,
            c = control.recv() => match c {
                Some(Control::Listen { frontend, listener: s, stop }) => {
                    match tokio::net::TcpListener::from_std(s) {
                        Ok(l) => {
                            tokio::task::spawn_local(listener::accept_loop(
                                l,
                                frontend,
                                worker.clone(),
                                shutdown.clone(),
                                stop,
                            ));
                        }
                        Err(e) => tracing::error!(worker = worker.id, error = %e, "cannot register a listener"),
                    }
                }
                // The main thread is gone: as good as a shutdown.
                None => break,
            },
        }
    }
    if tokio::time::timeout(drain, worker.all_closed())
        .await
        .is_err()
    {
        tracing::warn!(
            worker = worker.id,
            connections = worker.live(),
            "drain deadline reached: closing the remaining connections"
        );
    }
}

fn classify_bind(frontend: &str, addr: SocketAddr, source: io::Error) -> StartError {
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

/// A proxy holds two descriptors per connection: take all the system allows.
fn raise_nofile_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => tracing::debug!(limit = n, "RLIMIT_NOFILE raised"),
        Err(e) => tracing::warn!(error = %e, "cannot raise RLIMIT_NOFILE"),
    }
}
