//! The worker process, from the moment the master forked it: it dies with the master,
//! becomes the service's user (`--user`, `--group`, `--chroot`), starts the services
//! (OCSP, replication, backend refresh), spawns the worker threads on the sockets the
//! master bound, tells the master it serves, and is supervised until it drains.

use crate::runtime::sockets::FrontSockets;
use std::sync::Arc;

mod admin;
mod checks;
mod frontends;
mod plain;
mod refresh;
mod reload;
#[cfg(feature = "io-uring")]
mod rings;
mod services;
mod supervise;
mod threads;

use crate::backend::{Address, Pool, Server};
use crate::config::args::Source;
use crate::config::BackendTarget;
use crate::config::Config;
use crate::edge::route::{self, Routing};
use crate::edge::ProxyState;
use crate::runtime::channel::{Channel, Msg};
use crate::runtime::error::StartError;
use crate::runtime::sockets::Sockets;
use crate::session::Resumption;
use crate::stats::Sources;
use crate::tls::ocsp::manager::Target;
use crate::tls::TlsState;
use frontends::Frontends;
use reload::Reloader;
use services::Services;
use supervise::{MasterLink, Supervised, Supervisor};
use tokio::sync::Semaphore;

/// What the master gives a new worker process.
pub struct Start {
    /// The configuration served.
    pub config: Config,
    /// Every frontend's TLS state, in configuration order.
    pub tls: Vec<Arc<TlsState>>,
    /// Every frontend's sockets, in the same order.
    pub sockets: Vec<FrontSockets>,
    /// `--stats` and replication.
    pub services: Sockets,
    /// The session cache and ticket keys.
    pub resumption: Resumption,
    /// Certificates to keep OCSP staples for.
    pub ocsp_targets: Vec<Target>,
    /// Parses the configuration again (over the master's recording) on a reload.
    pub source: Source,
    /// To the master.
    pub channel: Channel,
    /// Hold accepting until the previous process's sessions are in (binary upgrade).
    pub await_sessions: bool,
    /// Leave the QUIC sockets unread until the previous process has exited (binary
    /// upgrade): they are the same sockets, and its connections are still draining.
    pub hold_quic: bool,
    /// The access log's files, opened by the master, with their sinks' indexes.
    pub access_files: Vec<(usize, std::fs::File)>,
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
        source,
        channel,
        await_sessions,
        hold_quic,
        access_files,
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

    // The client table and bans: every worker thread's, the store's thread's too.
    let clients = Arc::new(crate::clients::Clients::new(
        config.clients.folding,
        config.clients.table_size,
        config.clients.drop,
    ));
    frontends::note_client_scopes(&clients, &config);
    let access = access_log(&config, access_files)?;
    let mut services = Services::start(
        &config,
        service_sockets,
        ocsp_targets,
        &resumption,
        pool.servers(),
        &clients,
        access.as_ref(),
    )?;
    if config.self_signed {
        tracing::info!(
            name: "self_signed",
            names = %crate::tls::selfsigned::NAMES.join(", "),
            "no certificate given: serving a self-signed certificate generated at start",
        );
    }
    let state = Arc::new(proxy_state(
        &config,
        Routing::new(&config, pool),
        access,
        clients,
    ));
    let supervisor = Supervisor::catch_signals()?;

    let (controls, control_rxs) = threads::channels(config.workers);
    let mut frontends = Frontends::new(controls);
    for ((fe, tls), mut given) in config.frontends.iter().zip(tls).zip(sockets) {
        // Only a frontend the master failed to bind at a reload has no socket.
        if let Err(e) = frontends.open(fe, tls, &mut given, &config) {
            tracing::error!(name: "worker_failed", error = %e, "{e}");
        }
    }
    let fronts = frontends.describe().join(", ");
    let backends = describe_backends(&state.routing.load());
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
    let (quic_start, quic_gate) = crate::shutdown::channel();
    if !hold_quic {
        quic_start.fire();
    }
    let workers = threads::spawn(
        control_rxs,
        &state,
        frontends::MAX_SLOTS,
        drain_timeout,
        (&gate, &quic_gate),
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
        plain: services.plain.1.clone(),
    });
    let access = sources.state.access.clone();
    let reloader = Reloader::new(
        config,
        source,
        sources.state.clone(),
        resumption.clone(),
        services.ocsp_updates.take(),
    );
    let served = supervisor.run(Supervised {
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
        quic_start,
    });
    // The worker threads have handed on their last lines: they are written before exit.
    if let Some(a) = access {
        if !a.flush(std::time::Duration::from_secs(2)) {
            tracing::warn!(name: "access_log_unflushed", "access log: the last lines could not be written within 2 s");
        }
    }
    served
}

/// The backend servers, or the built-in origin started on a loopback port.
fn backend_pool(config: &Config) -> Result<Pool, StartError> {
    let servers = match &config.backend {
        BackendTarget::Servers(specs) => specs.iter().map(route::server).collect(),
        BackendTarget::BuiltinOrigin => {
            let addr = crate::origin::start().map_err(StartError::Origin)?;
            tracing::info!(
                name: "builtin_origin",
                "no certificate, backend or configuration file given: forwarding to the built-in origin, a demonstration default (for real traffic give -b HOST:PORT and a certificate)",
            );
            vec![Server::new(
                format!("built-in origin [{}]:{}", addr.ip(), addr.port()),
                Address::Tcp(vec![addr]),
                None,
                1,
            )]
        }
    };
    Ok(Pool::new(servers, route::pool_limits(config)))
}

/// The servers of every backend, for the start's log line: the default's alone as before
/// when there is no other, else each backend named.
pub(super) fn describe_backends(routing: &Routing) -> String {
    let list = |b: &route::Backend| {
        let names: Vec<&str> = b.pool.servers().iter().map(|s| s.name()).collect();
        names.join(", ")
    };
    match routing.backends() {
        [one] => list(one),
        all => all
            .iter()
            .map(|b| format!("{} ({})", b.name, list(b)))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// `--user`, `--group`, `--chroot`, and the log line that says who shuck now is.
fn drop_privileges(target: &crate::system::privileges::Target) -> Result<(), StartError> {
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
/// The access log's writer thread, on the master's files and the targets the worker opens
/// itself.
fn access_log(
    config: &Config,
    mut files: Vec<(usize, std::fs::File)>,
) -> Result<Option<Arc<crate::access::AccessLog>>, StartError> {
    use crate::access::{sink, AccessLog, Opened};
    let Some(settings) = &config.access_log else {
        return Ok(None);
    };
    let mut to = Vec::with_capacity(settings.sinks.len());
    for (i, target) in settings.sinks.iter().enumerate() {
        let opened = match files.iter().position(|(s, _)| *s == i) {
            Some(at) => Opened::File(files.swap_remove(at).1),
            None => sink::open(target, config.syslog_facility).map_err(|source| {
                StartError::AccessLog {
                    path: target.to_string().into(),
                    source,
                }
            })?,
        };
        to.push(opened);
    }
    Ok(Some(AccessLog::start(to, settings.policy.clone())?))
}

fn proxy_state(
    config: &Config,
    routing: Routing,
    access: Option<Arc<crate::access::AccessLog>>,
    clients: Arc<crate::clients::Clients>,
) -> ProxyState {
    ProxyState {
        routing: arc_swap::ArcSwap::from_pointee(routing),
        proxy_proxy: config.proxy_proxy,
        http: config.http,
        limits: config.limits.clone(),
        conn_limit: (config.limits.max_conns > 0)
            .then(|| Arc::new(Semaphore::new(config.limits.max_conns))),
        log_connections: config.log_connections,
        proxy_client_cert: config.proxy_client_cert,
        proxy_authority: config.proxy_authority,
        client_cert_header: config.client_cert_header.clone(),
        maint: tokio::sync::Notify::new(),
        quic_tokens: crate::tls::quic_tokens::tokens(config.farm_key()),
        access,
        request_id: arc_swap::ArcSwapOption::new(config.request_id.clone()),
        trusted: arc_swap::ArcSwapOption::new(config.trusted_proxies.clone()),
        clients,
    }
}
