//! The process model: a **master** process that keeps the starting user, and one **worker**
//! process that serves. The master **loads** what is read from disk, **binds** every socket
//! (or takes those of the previous master or of systemd), **becomes the service** (detach,
//! pid file), and forks the worker (`master`); the worker **drops privileges**, **starts
//! the services** (OCSP, replication), **spawns the worker threads** and is **supervised**
//! until it drains (`serve`). Everything privileged stays with the master.

mod channel;
mod error;
mod frontend_tls;
mod frontends;
mod inherit;
mod listeners;
mod master;
mod refresh;
mod reload;
mod serve;
mod services;
mod supervise;
mod workers;

use std::rc::Rc;
use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::backend::{Address, Pool, PoolLimits, Server};
use crate::config::{BackendEndpoint, BackendTarget, Config};
use crate::proxy::ProxyState;
use crate::session::store::SharedStore;
use crate::session::Resumption;
use crate::system::daemon::PidFile;
use crate::system::privileges::Target;

pub use error::StartError;
pub use frontend_tls::FrontendTlsError;
pub use inherit::InheritError;
pub use master::{CRASH_LIMIT, CRASH_WINDOW};

use inherit::Inherited;
use listeners::Listeners;
use services::Sockets;

/// Re-reads the configuration for a reload (SIGHUP): the same command line and file.
pub type Reparse = Rc<dyn Fn() -> Result<Config, String>>;

/// Serves `config` until SIGTERM/SIGINT and the drain that follows; SIGHUP calls `reparse`
/// (in the master, as root) and the worker applies what it returns; SIGUSR2 starts the
/// binary on disk and hands over to it.
pub fn run(mut config: Config, reparse: Reparse) -> Result<(), StartError> {
    raise_nofile_limit();
    let mut inherited =
        Inherited::take().map_err(|e| StartError::System(std::io::Error::other(e.to_string())))?;

    // Load: staples cached on disk, then every frontend's TLS state.
    let ocsp_targets = services::load_ocsp_cache(&mut config);
    let mut resumption = Resumption::new(
        config.tls.session_cache,
        config.tls.session_timeout,
        config.tls.tickets.clone(),
    );
    if let Some(settings) = &config.store {
        resumption.store = Some(Arc::new(SharedStore::new(
            settings.clone(),
            config.tls.session_timeout,
        )?));
    }
    if let (Some(t), Some(state)) = (&resumption.tickets, &inherited.tickets) {
        // Tickets issued by the previous binary still resume.
        t.install(state);
    }
    let tls = frontend_tls::build(&config, &resumption)?;
    if let Some(acme) = &config.acme {
        // Checked before anything is bound: an unusable state directory is a start failure.
        crate::acme::state::StateDir::prepare(&acme.state)?;
    }

    // Bind everything before serving anything, so a taken port is a clean start failure.
    let mut listeners = Listeners::new(
        crate::proxy::listener::Options {
            backlog: config.backlog,
            fastopen: config.tcp_fastopen,
        },
        config.workers,
    );
    for fe in &config.frontends {
        listeners.open(fe, &mut inherited)?;
    }
    let sockets = Sockets::bind(&config, &mut inherited)?;
    if let Some(from) = inherited.from {
        tracing::info!(
            name: "sockets_inherited",
            from = %from,
            "listening sockets taken from {from}, not bound again",
        );
    }
    inherited.close_rest();

    // Become the service. Detaching forks, so it comes before anything else; a new binary
    // started by an upgrade is detached already, as its parent was.
    let upgrading = inherited.predecessor.is_some();
    if config.daemon && !upgrading {
        crate::system::daemon::detach()?;
    }
    let pidfile = match &config.pidfile {
        Some(p) => Some(PidFile::write(p)?),
        None => None,
    };
    master::run(master::Master {
        config,
        tls,
        resumption,
        ocsp_targets,
        listeners,
        services: sockets,
        reparse,
        pidfile,
        predecessor: inherited.predecessor.take(),
    })
}

/// The backend servers, or the built-in origin started on a loopback port.
pub(crate) fn backend_pool(config: &Config) -> Result<Pool, StartError> {
    let servers = match &config.backend {
        BackendTarget::Servers(specs) => specs
            .iter()
            .map(|b| {
                let address = match &b.endpoint {
                    BackendEndpoint::Tcp(_) => Address::Tcp(b.addrs.clone()),
                    BackendEndpoint::Unix(path) => Address::Unix(path.clone()),
                };
                Server::new(b.endpoint.to_string(), address, b.maxconn, b.weight)
            })
            .collect(),
        BackendTarget::BuiltinOrigin => {
            let addr = crate::origin::start().map_err(StartError::Origin)?;
            tracing::info!(
                name: "builtin_origin",
                "no certificate, backend or configuration file given: forwarding to the built-in origin, a demonstration default (give -b HOST:PORT for real traffic)",
            );
            vec![Server::new(
                format!("built-in origin [{}]:{}", addr.ip(), addr.port()),
                Address::Tcp(vec![addr]),
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
pub(crate) fn drop_privileges(target: &Target) -> Result<(), StartError> {
    if target.user.is_none() && nix::unistd::geteuid().is_root() {
        // hitch refuses this; shuck serves (the zero-configuration start must work
        // anywhere) but says so.
        tracing::warn!(
            name: "running_as_root",
            "running as root: every connection is served with root's privileges; give --user (e.g. --user nobody) to drop them after binding"
        );
    }
    if target.is_none() {
        return Ok(());
    }
    target.apply()?;
    let user = target
        .user
        .as_ref()
        .map_or("the same user".to_owned(), |(n, u)| {
            format!("user {n} ({u})")
        });
    let group = target
        .group
        .as_ref()
        .map_or(String::new(), |(n, g)| format!(", group {n} ({g})"));
    let chroot = target
        .chroot
        .as_ref()
        .map_or(String::new(), |d| format!(", chroot {}", d.display()));
    tracing::info!(
        name: "running_as",
        user = %user,
        group = %group.trim_start_matches(", group "),
        chroot = %chroot.trim_start_matches(", chroot "),
        "running as {user}{group}{chroot}"
    );
    Ok(())
}

/// What every connection reads.
pub(crate) fn proxy_state(config: &Config, pool: Pool) -> ProxyState {
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
        Ok(n) => tracing::debug!(name: "nofile_raised", limit = n, "RLIMIT_NOFILE raised"),
        Err(e) => {
            tracing::warn!(name: "nofile_not_raised", error = %e, "cannot raise RLIMIT_NOFILE")
        }
    }
}
