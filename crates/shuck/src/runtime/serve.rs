//! The worker process, from the moment the master forked it: it dies with the master,
//! becomes the service's user (`--user`, `--group`, `--chroot`), starts the services
//! (OCSP, replication, backend refresh), spawns the worker threads on the sockets the
//! master bound, tells the master it serves, and is supervised until it drains.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use super::channel::{Channel, Msg};
use super::error::StartError;
use super::frontends::{self, Frontends};
use super::reload::Reloader;
use super::services::{Services, Sockets};
use super::supervise::{MasterLink, Supervised, Supervisor};
use super::{backend_pool, drop_privileges, proxy_state, workers, Reparse};
use crate::config::Config;
use crate::session::Resumption;
use crate::stats::Sources;
use crate::tls::ocsp::manager::Target;
use crate::tls::TlsState;

/// What the master gives a new worker process.
pub struct Start {
    /// The configuration served.
    pub config: Config,
    /// Every frontend's TLS state, in configuration order.
    pub tls: Vec<Arc<TlsState>>,
    /// Every frontend's sockets, in the same order.
    pub sockets: Vec<Vec<(SocketAddr, TcpListener)>>,
    /// `--stats` and replication.
    pub services: Sockets,
    /// The session cache and ticket keys.
    pub resumption: Resumption,
    /// Certificates to keep OCSP staples for.
    pub ocsp_targets: Vec<Target>,
    /// Parses the configuration again (over the master's recording) on a reload.
    pub reparse: Reparse,
    /// To the master.
    pub channel: Channel,
    /// Hold accepting until the previous process's sessions are in (binary upgrade).
    pub await_sessions: bool,
}

/// Runs the worker process; returns its exit status.
pub fn run(start: Start) -> i32 {
    match serve(start) {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!(name: "worker_failed", error = %e, "worker process: {e}");
            1
        }
    }
}

fn serve(start: Start) -> Result<(), StartError> {
    let Start {
        config,
        tls,
        sockets,
        services: service_sockets,
        resumption,
        ocsp_targets,
        reparse,
        channel,
        await_sessions,
    } = start;
    // A master killed outright takes its worker along at once: an orphan draining would
    // hold the ports a restarted service needs.
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(|e| StartError::System(e.into()))?;
    if nix::unistd::getppid() == nix::unistd::Pid::from_raw(1) {
        return Err(StartError::System(std::io::Error::other(
            "the master process died before its worker started",
        )));
    }
    if let Some(t) = &resumption.tickets {
        t.follow();
    }
    let pool = backend_pool(&config)?;
    drop_privileges(&config.privileges)?;

    let mut services = Services::start(
        &config,
        service_sockets,
        ocsp_targets,
        &resumption,
        pool.servers(),
    )?;
    if config.self_signed {
        tracing::info!(
            name: "self_signed",
            names = %crate::tls::selfsigned::NAMES.join(", "),
            "no certificate given: serving a self-signed certificate generated at start",
        );
    }
    let state = Arc::new(proxy_state(&config, pool));
    let supervisor = Supervisor::catch_signals()?;

    let (controls, control_rxs) = workers::channels(config.workers);
    let mut frontends = Frontends::new(controls);
    for ((fe, tls), mut given) in config.frontends.iter().zip(tls).zip(sockets) {
        // Only a frontend the master failed to bind at a reload has no socket.
        if let Err(e) = frontends.open(fe, tls, &mut given) {
            tracing::error!(name: "worker_failed", error = %e, "{e}");
        }
    }
    let fronts = frontends.describe().join(", ");
    let backends: Vec<&str> = state.pool.servers().iter().map(|s| s.name()).collect();
    let backends = backends.join(", ");
    tracing::info!(
        name: "listening",
        version = env!("CARGO_PKG_VERSION"),
        frontends = %fronts,
        workers = config.workers,
        backends = %backends,
        "shuck {} listening on {fronts} with {} worker(s), forwarding to {backends}",
        env!("CARGO_PKG_VERSION"),
        config.workers,
    );
    let drain_timeout = config.limits.drain_timeout;
    let (start, gate) = crate::shutdown::channel();
    let workers = workers::spawn(
        control_rxs,
        &state,
        frontends::MAX_SLOTS,
        drain_timeout,
        &gate,
    )?;
    let master = MasterLink::start(channel)?;
    master
        .to
        .send(&Msg::Ready)
        .map_err(|e| StartError::System(std::io::Error::other(e.to_string())))?;

    let sources = Arc::new(Sources {
        counters: workers.counters.clone(),
        state,
        resumption: resumption.clone(),
        replication: services.replication.as_ref().map(|r| r.stats.clone()),
        frontends: frontends.names.clone(),
        served: frontends.served.clone(),
        acme: config.acme.as_ref().map(|_| Default::default()),
    });
    let reloader = Reloader::new(
        config,
        reparse,
        resumption.clone(),
        services.ocsp_updates.take(),
    );
    supervisor.run(Supervised {
        frontends,
        reloader,
        services,
        workers,
        sources,
        drain_timeout,
        resumption,
        master,
        start,
        await_sessions,
    })
}
