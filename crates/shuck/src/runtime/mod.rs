//! The process model: a **master** process that keeps the starting user, and one **worker**
//! process that serves. The master **loads** what is read from disk, **binds** every socket
//! (or takes those of the previous master or of systemd), **becomes the service** (detach,
//! pid file), and forks the worker (`master`); the worker **drops privileges**, **starts
//! the services** (OCSP, replication), **spawns the worker threads** and is **supervised**
//! until it drains (`serve`). Everything privileged stays with the master.

mod acme_child;
mod channel;
mod error;
mod fork;
mod inherit;
mod master;
mod rebuild;
mod sockets;
mod worker;

use std::sync::Arc;

use crate::config::args::Source;
use crate::config::Config;
use crate::session::store::SharedStore;
use crate::session::Resumption;
use crate::system::daemon::PidFile;

pub use error::StartError;
pub use inherit::InheritError;
pub use master::{CRASH_LIMIT, CRASH_WINDOW};
pub use rebuild::FrontendTlsError;

use inherit::Inherited;
use master::Listeners;
use sockets::Sockets;

/// Serves `config` until SIGTERM/SIGINT and the drain that follows; SIGHUP reads `source`
/// again (in the master, as root) and the worker applies what it gives; SIGUSR2 starts the
/// binary on disk and hands over to it.
pub fn run(mut config: Config, source: Source) -> Result<(), StartError> {
    crate::system::limits::raise_nofile();
    // Before any server is made, and before the worker is forked, which keeps it.
    crate::backend::balance::set_cookie_key(config.farm_key().as_ref());
    let mut inherited =
        Inherited::take().map_err(|e| StartError::System(std::io::Error::other(e.to_string())))?;

    // Load: staples cached on disk, then every frontend's TLS state.
    let ocsp_targets = sockets::load_ocsp_cache(&mut config);
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
    let tls = rebuild::build(&config, &resumption)?;
    if let Some(acme) = &config.acme {
        // Checked before anything is bound: an unusable state directory is a start failure.
        crate::acme::state::StateDir::prepare(&acme.state)?;
    }

    // Bind everything before serving anything, so a taken port is a clean start failure.
    let mut listeners = Listeners::new(
        crate::proxy::listener::Options {
            backlog: config.backlog,
            fastopen: config.tcp_fastopen,
            defer_accept: config.defer_accept,
            keepalive: config.limits.keepalive,
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
    let admin = match &config.admin {
        Some(a) => Some(crate::admin::AdminServer::bind(a, upgrading)?),
        None => None,
    };
    let access_files = master::access_log::open_files(&config)?;
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
        source,
        pidfile,
        predecessor: inherited.predecessor.take(),
        admin,
        access_files,
    })
}
