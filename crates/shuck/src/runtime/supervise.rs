//! The main thread once the workers run: it serves `--stats`, logs the counters, and
//! answers signals: SIGHUP reloads, new OCSP staples are applied, SIGTERM or SIGINT
//! drains (a second one exits at once).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{signal, Signal, SignalKind};

use super::error::StartError;
use super::frontends::Frontends;
use super::reload::Reloader;
use super::services::Services;
use super::workers::Workers;
use crate::stats::{self, Sources};

/// How often the counters are logged (at debug level).
const STATS_EVERY: Duration = Duration::from_secs(10);

/// The main thread's runtime and the signals it catches.
pub struct Supervisor {
    rt: tokio::runtime::Runtime,
    term: Signal,
    int: Signal,
    hup: Signal,
}

/// What the supervisor watches over.
pub struct Supervised {
    /// The frontends being served.
    pub frontends: Frontends,
    /// Applies SIGHUP and new staples.
    pub reloader: Reloader,
    /// The services beside the workers.
    pub services: Services,
    /// The worker threads.
    pub workers: Workers,
    /// What the summary and `--stats` read.
    pub sources: Arc<Sources>,
    /// How long live connections get at shutdown (for the log line).
    pub drain_timeout: Duration,
}

impl Supervisor {
    /// Catches the signals from now on, before anyone is told shuck listens: a SIGTERM
    /// right after "listening" is a drain, not a kill.
    pub fn catch_signals() -> io::Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let _in_runtime = rt.enter();
        Ok(Supervisor {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            rt,
        })
    }

    /// Runs until SIGTERM/SIGINT and the drain that follows.
    pub fn run(self, s: Supervised) -> Result<(), StartError> {
        let Supervisor {
            rt,
            mut term,
            mut int,
            mut hup,
        } = self;
        let Supervised {
            mut frontends,
            mut reloader,
            mut services,
            mut workers,
            sources,
            drain_timeout,
        } = s;
        rt.block_on(async move {
            if let Some(l) = services.stats.take() {
                let l = tokio::net::TcpListener::from_std(l)?;
                tracing::info!("metrics at http://{}/metrics", l.local_addr()?);
                tokio::spawn(stats::serve(l, sources.clone()));
            }
            let mut report = tokio::time::interval(STATS_EVERY);
            report.tick().await;
            loop {
                tokio::select! {
                    _ = term.recv() => break,
                    _ = int.recv() => break,
                    Some(()) = services.restaple.recv() => reloader.restaple(&frontends),
                    _ = hup.recv() => {
                        crate::system::notify::reloading();
                        reloader.reload(&mut frontends);
                        crate::system::notify::notify("READY=1");
                    }
                    _ = report.tick() => tracing::debug!("{}", stats::summary(&sources)),
                    _ = workers.done.recv() => {
                        tracing::error!("workers stopped unexpectedly");
                        return Err(StartError::System(io::Error::other("workers stopped")));
                    }
                }
            }
            tracing::info!(
                "stopping: no new connections; live ones get up to {drain_timeout:?} to finish"
            );
            crate::system::notify::notify("STOPPING=1");
            workers.trigger.fire();
            tokio::select! {
                _ = workers.done.recv() => tracing::info!("stopped; {}", stats::summary(&sources)),
                _ = term.recv() => exit_now(),
                _ = int.recv() => exit_now(),
            }
            // Replication stops with the workers, not before.
            drop(services);
            Ok(())
        })
    }
}

fn exit_now() {
    tracing::warn!("second signal: exiting now");
    std::process::exit(1);
}
