//! The process, in the order it starts: **load** what is read from disk, **bind** every
//! socket, **become the service** (detach, pid file, backends), **drop privileges**,
//! **start the services** (OCSP, replication), **spawn the workers**, and **supervise**
//! them until SIGTERM. Each phase is a function or type below; everything privileged is
//! done before the privileges go.

mod error;
mod frontend_tls;
mod frontends;
mod refresh;
mod reload;
mod services;
mod supervise;
mod workers;

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::backend::{Pool, PoolLimits, Server};
use crate::config::{BackendTarget, Config};
use crate::proxy::ProxyState;
use crate::session::Resumption;
use crate::stats::Sources;
use crate::system::daemon::PidFile;
use crate::system::privileges::Target;

pub use error::StartError;
pub use frontend_tls::FrontendTlsError;

use frontends::Frontends;
use reload::Reloader;
use services::{Services, Sockets};
use supervise::{Supervised, Supervisor};

/// Re-reads the configuration for a reload (SIGHUP): the same command line and file.
pub type Reparse = Box<dyn Fn() -> Result<Config, String>>;

/// Serves `config` until SIGTERM/SIGINT and the drain that follows; SIGHUP calls `reparse`
/// and applies what it returns.
pub fn run(mut config: Config, reparse: Reparse) -> Result<(), StartError> {
    raise_nofile_limit();

    // Load: staples cached on disk, then every frontend's TLS state.
    let ocsp_targets = services::load_ocsp_cache(&mut config);
    let resumption = Resumption::new(
        config.tls.session_cache,
        config.tls.session_timeout,
        config.tls.tickets.clone(),
    );
    let tls = frontend_tls::build(&config, &resumption)?;

    // Bind everything before serving anything, so a taken port is a clean start failure.
    let (controls, control_rxs) = workers::channels(config.workers);
    let mut frontends = Frontends::new(
        controls,
        crate::proxy::listener::Options {
            backlog: config.backlog,
            fastopen: config.tcp_fastopen,
        },
    );
    for (fe, tls) in config.frontends.iter().zip(tls) {
        frontends.open(fe, tls)?;
    }
    let sockets = Sockets::bind(&config)?;

    // Become the service, then nobody: detaching forks, so it comes before any thread.
    let _pidfile = daemonize(&config)?;
    let pool = backend_pool(&config)?;
    drop_privileges(&config.privileges)?;

    let mut services =
        Services::start(&config, sockets, ocsp_targets, &resumption, pool.servers())?;
    if config.self_signed {
        tracing::info!(
            names = %crate::tls::selfsigned::NAMES.join(", "),
            "no certificate given: serving a self-signed certificate generated at start"
        );
    }
    let state = Arc::new(proxy_state(&config, pool));
    let supervisor = Supervisor::catch_signals()?;
    tracing::info!(
        "shuck {} listening on {} with {} worker(s), forwarding to {}",
        env!("CARGO_PKG_VERSION"),
        frontends.describe().join(", "),
        config.workers,
        state
            .pool
            .servers()
            .iter()
            .map(|s| s.name())
            .collect::<Vec<_>>()
            .join(", ")
    );

    let drain_timeout = config.limits.drain_timeout;
    let workers = workers::spawn(control_rxs, &state, frontends::MAX_SLOTS, drain_timeout)?;
    crate::system::notify::notify("READY=1");

    let sources = Arc::new(Sources {
        counters: workers.counters.clone(),
        state,
        resumption: resumption.clone(),
        replication: services.replication.as_ref().map(|r| r.stats.clone()),
        frontends: frontends.names.clone(),
    });
    let reloader = Reloader::new(config, reparse, resumption, services.ocsp_updates.take());
    supervisor.run(Supervised {
        frontends,
        reloader,
        services,
        workers,
        sources,
        drain_timeout,
    })
}

/// `--daemon` and `--pidfile`: the pid file is removed when the guard is dropped.
fn daemonize(config: &Config) -> Result<Option<PidFile>, StartError> {
    if config.daemon {
        crate::system::daemon::detach()?;
    }
    Ok(match &config.pidfile {
        Some(p) => Some(PidFile::write(p)?),
        None => None,
    })
}

/// The backend servers, or the built-in origin started on a loopback port.
fn backend_pool(config: &Config) -> Result<Pool, StartError> {
    let servers = match &config.backend {
        BackendTarget::Servers(specs) => specs
            .iter()
            .map(|b| Server::new(b.endpoint.to_string(), b.addrs.clone(), b.maxconn, b.weight))
            .collect(),
        BackendTarget::BuiltinOrigin => {
            let addr = crate::origin::start().map_err(StartError::Origin)?;
            tracing::info!(
                "no certificate, backend or configuration file given: forwarding to the built-in origin, a demonstration default (give -b HOST:PORT for real traffic)"
            );
            vec![Server::new(
                format!("built-in origin [{}]:{}", addr.ip(), addr.port()),
                vec![addr],
                None,
                1,
            )]
        }
    };
    let l = &config.limits;
    Ok(Pool::new(
        servers,
        PoolLimits {
            connect_timeout: l.connect_timeout,
            queue_timeout: l.queue_timeout,
            queue_size: l.queue_size,
            retry_after: l.retry_after,
        },
    ))
}

/// `--user`, `--group`, `--chroot`, and the log line that says who shuck now is.
fn drop_privileges(target: &Target) -> Result<(), StartError> {
    if target.user.is_none() && nix::unistd::geteuid().is_root() {
        // hitch refuses this; shuck serves (the zero-configuration start must work
        // anywhere) but says so.
        tracing::warn!(
            "running as root: every connection is served with root's privileges; give --user (e.g. --user nobody) to drop them after binding"
        );
    }
    if target.is_none() {
        return Ok(());
    }
    target.apply()?;
    tracing::info!(
        "running as {}{}{}",
        target
            .user
            .as_ref()
            .map_or("the same user".to_owned(), |(n, u)| format!(
                "user {n} ({u})"
            )),
        target
            .group
            .as_ref()
            .map_or(String::new(), |(n, g)| format!(", group {n} ({g})")),
        target
            .chroot
            .as_ref()
            .map_or(String::new(), |d| format!(", chroot {}", d.display())),
    );
    Ok(())
}

/// What every connection reads.
fn proxy_state(config: &Config, pool: Pool) -> ProxyState {
    ProxyState {
        pool,
        preamble: config.preamble,
        proxy_proxy: config.proxy_proxy,
        http: config.http,
        limits: config.limits.clone(),
        conn_limit: (config.limits.max_conns > 0)
            .then(|| Arc::new(Semaphore::new(config.limits.max_conns))),
        log_connections: config.log_connections,
        proxy_client_cert: config.proxy_client_cert,
        proxy_authority: config.proxy_authority,
        client_cert_header: config.client_cert_header.clone(),
    }
}

/// A proxy holds two descriptors per connection: take all the system allows.
fn raise_nofile_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => tracing::debug!(limit = n, "RLIMIT_NOFILE raised"),
        Err(e) => tracing::warn!(error = %e, "cannot raise RLIMIT_NOFILE"),
    }
}
