//! The one "read again and build" step: a configuration read from its source again (the
//! master's and the worker's reload) or given (start, ACME certificates, new staples) becomes
//! every frontend's TLS state on the process's session cache and ticket ring, with ticket
//! key files read again; and what it opens and closes against the frontends running. Start,
//! both reloads, ACME and restapling all take it, so none builds a frontend differently.

use std::sync::Arc;

use crate::config::args::Source;
use crate::config::{BackendTarget, Config};
use crate::session::tickets::TicketError;
use crate::session::Resumption;
use crate::tls::{TlsError, TlsState};

/// Why a configuration read again is not applied; the running one stays.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// The command line or its file do not give a configuration.
    #[error("configuration refused, the running one stays: {0}")]
    Read(String),
    /// A frontend's certificates or TLS settings do not load.
    #[error("{0}; the running configuration stays")]
    Tls(#[from] FrontendTlsError),
    /// The ticket key file does not load.
    #[error("{0}; the running configuration stays")]
    Tickets(#[from] TicketError),
}

/// A configuration read again, checked whole and built.
pub struct Reread {
    /// The configuration, carrying the process's ticket ring and OCSP staples.
    pub config: Config,
    /// Every frontend's TLS state for it, in order.
    pub tls: Vec<Arc<TlsState>>,
    /// The settings only a restart can change, as they were read (before the running
    /// ring and staples were carried over), to compare with the running ones.
    pub restart_only: Vec<(&'static str, String)>,
    /// Ticket keys read again from `--ticket-keys`, when there is such a file.
    pub ticket_keys: Option<usize>,
}

/// Reads `source` again and builds it on the process's `resumption`, keeping the staples of
/// `running`; a file of ticket keys is read again last, once everything else loaded.
pub fn reread(
    source: &Source,
    running: &Config,
    resumption: &Resumption,
) -> Result<Reread, RebuildError> {
    let mut config = source.read().map_err(RebuildError::Read)?;
    // Session cache and ticket keys outlive reloads: resumption goes on across them.
    let restart_only = restart_only(&config);
    config.tls.tickets = resumption.tickets.clone();
    config.tls.ocsp = running.tls.ocsp.clone();
    let tls = build(&config, resumption)?;
    let ticket_keys = match resumption.tickets.as_ref().filter(|k| k.file().is_some()) {
        Some(keys) => Some(keys.reload()?),
        None => None,
    };
    Ok(Reread {
        config,
        tls,
        restart_only,
        ticket_keys,
    })
}

/// The frontends of a new configuration against those running.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FrontendDiff {
    /// Frontends to open.
    pub added: Vec<String>,
    /// Frontends to close.
    pub removed: Vec<String>,
}

/// What `new` opens and closes against the frontends `running` (by name).
pub fn diff(running: &[String], new: &Config) -> FrontendDiff {
    let wanted: Vec<String> = new
        .frontends
        .iter()
        .map(|f| f.endpoint.to_string())
        .collect();
    FrontendDiff {
        added: wanted
            .iter()
            .filter(|n| !running.contains(n))
            .cloned()
            .collect(),
        removed: running
            .iter()
            .filter(|n| !wanted.contains(n))
            .cloned()
            .collect(),
    }
}

/// A frontend whose TLS state could not be built.
#[derive(Debug, thiserror::Error)]
#[error("frontend {frontend}: {source}")]
pub struct FrontendTlsError {
    /// The frontend as written.
    pub frontend: String,
    /// Why.
    pub source: TlsError,
}

/// Builds each frontend's TLS state, in the order of `cfg.frontends`, on the process's
/// session cache and ticket keys. Frontends without certificates or settings of their own
/// share one state built from the global ones.
pub fn build(
    cfg: &Config,
    resumption: &Resumption,
) -> Result<Vec<Arc<TlsState>>, FrontendTlsError> {
    let mut global: Option<Arc<TlsState>> = None;
    cfg.frontends
        .iter()
        .map(|fe| {
            let shared = fe.certs.is_empty()
                && fe.tls.is_none()
                && fe.client_verify.is_none()
                && fe.client_ca.is_none();
            if let (true, Some(g)) = (shared, &global) {
                return Ok(g.clone());
            }
            let mut ft = cfg.frontend_tls(fe);
            ft.settings.tickets = resumption.tickets.clone();
            let state = TlsState::for_frontend(
                &ft.settings,
                &ft.certs,
                ft.default,
                &ft.by_cert,
                resumption,
            )
            .map(Arc::new)
            .map_err(|source| FrontendTlsError {
                frontend: fe.endpoint.to_string(),
                source,
            })?;
            if shared {
                global = Some(state.clone());
            }
            Ok(state)
        })
        .collect()
}

/// The default backend's servers as configured, to tell whether a reload changed them.
pub fn default_backend_spec(servers: &[crate::config::BackendSpec]) -> String {
    format!("{servers:?}")
}

/// Settings a reload cannot change, by name, as comparable text.
pub fn restart_only(c: &Config) -> Vec<(&'static str, String)> {
    vec![
        ("workers", c.workers.to_string()),
        // The ACME client runs with the settings it started with.
        ("acme-*", format!("{:?}", c.acme)),
        // The default backend's servers follow a reload, unless --backend-refresh's
        // thread keeps resolving the ones of the start (or they are the built-in origin).
        (
            "backends (with --backend-refresh)",
            match &c.backend {
                BackendTarget::Servers(_) if c.backend_refresh.is_none() => String::new(),
                BackendTarget::Servers(s) => default_backend_spec(s),
                BackendTarget::BuiltinOrigin => "built-in".into(),
            },
        ),
        ("timeouts and limits", format!("{:?}", c.limits)),
        // The writer thread starts with the worker with a sink per target; the targets
        // and the policy follow a reload, their number does not.
        (
            "access-log on or off, and how many targets",
            format!(
                "{:?}",
                c.access_log.as_ref().map(|a| (a.sinks.len(), a.global))
            ),
        ),
        ("backlog", c.backlog.to_string()),
        // The client table, the farm's exchange and how refusals are made start with the
        // worker; the limits and rules follow a reload.
        (
            "client-table-size, client-prefix-v6, client-share-interval, client-refuse",
            format!(
                "{:?}",
                (
                    c.clients.table_size,
                    c.clients.folding,
                    c.clients.share_interval,
                    c.clients.drop
                )
            ),
        ),
        // The master binds the admin API once (the token is never written out).
        (
            "admin-socket, admin-listen",
            format!(
                "{:?}",
                c.admin
                    .as_ref()
                    .map(|a| (a.socket.clone(), a.listen.as_ref().map(|(l, _)| *l)))
            ),
        ),
        ("tcp-fastopen", c.tcp_fastopen.to_string()),
        ("defer-accept", format!("{:?}", c.defer_accept)),
        ("backend-refresh", format!("{:?}", c.backend_refresh)),
        ("proxy-authority", c.proxy_authority.to_string()),
        ("proxy-proxy", c.proxy_proxy.to_string()),
        ("http", format!("{:?}", c.http)),
        ("session-cache", c.tls.session_cache.to_string()),
        (
            "tickets",
            format!(
                "{:?}",
                c.tls
                    .tickets
                    .as_ref()
                    .map(|t| t.file().map(|p| p.to_owned()))
            ),
        ),
        (
            "replication",
            format!(
                "{:?}",
                c.replication.as_ref().map(|r| (r.listen, r.peers.clone()))
            ),
        ),
        (
            "shared store",
            format!(
                "{:?}",
                c.store.as_ref().map(|s| (&s.url, &s.prefix, s.timeout))
            ),
        ),
        ("stats", format!("{:?}", c.stats)),
    ]
}
