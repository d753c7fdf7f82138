//! Configuration: the command line ([`cli::Cli`]) is parsed, then validated into a
//! [`Config`] that the runtime can serve without further checks. Certificates are loaded
//! here so that every bad file is reported before anything listens.

pub mod acme;
pub mod admin;
pub mod args;
pub mod backend;
pub mod cli;
pub mod clients;
pub mod duration;
pub mod endpoint;
pub mod error;
pub mod error_page;
pub mod file;
pub mod frontend;
pub mod named_backend;
pub mod pem_file;
pub mod places;
pub mod policy;
pub mod redirect;
pub mod replication;
pub mod rewrite;
pub mod route;
mod services;
pub mod store;
pub mod tls;
mod values;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

pub use backend::{BackendEndpoint, BackendSpec, BackendTarget, Preamble};
pub use cli::Cli;
pub use endpoint::Endpoint;
pub use error::ConfigError;
pub use frontend::Frontend;
pub use route::{NamedBackend, Proto, RouteMatch, RouteSpec, UpstreamTls};
pub use values::log_level;
use values::{client_cert_header, h2_limits, h3_limits, ocsp_trust, stats_addr};

use crate::session::sync;
use crate::tls::{LoadedCert, TlsSettings};

/// Limits and timeouts of the data path.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most open client connections over all workers; 0 for no limit.
    pub max_conns: usize,
    /// Time to complete the TLS handshake.
    pub handshake_timeout: Duration,
    /// Time to connect to the backend.
    pub connect_timeout: Duration,
    /// Time without traffic after which a connection is closed.
    pub idle_timeout: Duration,
    /// TCP keepalive idle time on client sockets; `None` when off.
    pub keepalive: Option<Duration>,
    /// Time live connections get to finish on SIGTERM.
    pub drain_timeout: Duration,
    /// Most connections waiting per server at maxconn.
    pub queue_size: usize,
    /// Longest wait for a server at maxconn.
    pub queue_timeout: Duration,
    /// How long a failed server stays down.
    pub retry_after: Duration,
    /// `--retries`: other servers tried after a failed connect.
    pub retries: usize,
    /// `--http`: time for a whole request head from its first byte.
    pub http_request_timeout: Duration,
    /// `--http-refuse-encoded-slashes`: a path with `%2F`, `%5C` or `\` is refused.
    pub http_refuse_encoded_slashes: bool,
    /// `--http`: longest wait for the next request of a keep-alive connection.
    pub http_keepalive_timeout: Duration,
    /// `--http`: longest time an exchange may make no progress waiting on the client.
    pub http_stall_timeout: Duration,
    /// `--http` over HTTP/2.
    pub h2: H2Limits,
    /// HTTP/3's.
    pub h3: H3Limits,
}

/// The limits of `--http` mode's HTTP/2 side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H2Limits {
    /// `--h2-max-concurrent-streams`.
    pub max_concurrent_streams: u32,
    /// `--h2-max-resets`: streams a client may reset per second.
    pub max_resets: u32,
    /// `--h2-initial-window-size`.
    pub initial_window: u32,
    /// `--http-max-backend-conns`: backend connections one client connection may hold.
    pub max_backend_conns: u32,
}

/// `--quic-retry`: when a new QUIC client must prove its address first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuicRetry {
    /// Every new client.
    Always,
    /// None.
    Never,
    /// Once a worker takes more than this many new connections in a second.
    Above(u32),
}

/// HTTP/3's limits (`--quic`).
#[derive(Debug, Clone, Copy)]
pub struct H3Limits {
    /// `--h3-max-concurrent-streams`.
    pub max_concurrent_streams: u32,
    /// What one request stream may have in flight from the client (bytes); a connection,
    /// eight times it.
    pub stream_window: u32,
    /// Connection attempts a worker holds before refusing more.
    pub max_incoming: usize,
    /// `--alt-svc-max-age`; 0: no Alt-Svc.
    pub alt_svc_max_age: u64,
    /// `--quic-retry`.
    pub retry: QuicRetry,
    /// `--quic-early-data`: 0-RTT accepted.
    pub early_data: bool,
    /// `--quic-mtu-discovery`.
    pub mtu_discovery: bool,
    /// `--quic-migration`.
    pub migration: bool,
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listening endpoints.
    pub frontends: Vec<Frontend>,
    /// The default backend (`-b`, `backend = "ADDRESS"`).
    pub backend: BackendTarget,
    /// Named backends (`--named-backend`, `backend = { ... }` blocks).
    pub named_backends: Vec<NamedBackend>,
    /// Routes to them (`--route`, `route = { ... }` blocks), in the order given.
    pub routes: Vec<RouteSpec>,
    /// Worker threads.
    pub workers: usize,
    /// Listen backlog.
    pub backlog: u32,
    /// TCP Fast Open on the listeners.
    pub tcp_fastopen: bool,
    /// `--defer-accept`: a connection is accepted once its first bytes arrived, waiting for
    /// them at most this long (the handshake timeout).
    pub defer_accept: Option<Duration>,
    /// `--backend-refresh`: how often backend names are resolved again.
    pub backend_refresh: Option<Duration>,
    /// TLS parameters.
    pub tls: TlsSettings,
    /// The global certificates, in hitch's order.
    pub certs: Vec<LoadedCert>,
    /// Which of them is served when no name matches (hitch's: the last PEM file given).
    pub default_cert: usize,
    /// True when the certificate was generated because none was given.
    pub self_signed: bool,
    /// Limits and timeouts.
    pub limits: Limits,
    /// Log one line per connection.
    pub log_connections: bool,
    /// `--access-log`: where request lines go and what they say.
    pub access_log: Option<crate::access::Settings>,
    /// `--client-*`: per-client limits and access rules.
    pub clients: clients::Settings,
    /// `--syslog-facility`'s code, for the access log's syslog targets.
    pub syslog_facility: u8,
    /// `--request-header`, `--response-header`, `--max-body-bytes`: the global level of the
    /// edge's policy (frontends, named backends and routes give their own); `--hsts` leads
    /// every level's answer rules.
    pub policy: policy::Policy,
    /// `--request-id-header` and `--request-id-response`.
    pub request_id: Option<std::sync::Arc<crate::access::request_id::Spec>>,
    /// `--trusted-proxies`: peers whose requests name their clients.
    pub trusted_proxies: Option<std::sync::Arc<crate::clients::CidrList>>,
    /// What to write before the client's bytes.
    pub preamble: Preamble,
    /// Read a PROXY header from the client side first.
    pub proxy_proxy: bool,
    /// HTTP mode, with the largest request head accepted.
    pub http: Option<usize>,
    /// Session replication between hosts, when on.
    pub replication: Option<sync::Settings>,
    /// Automatic certificates (`--acme-*`), when on.
    pub acme: Option<crate::acme::Settings>,
    /// The plain-HTTP listener (`--redirect-*`).
    pub redirect: redirect::Redirect,
    /// How many of `certs`, at their start, come from the ACME state directory.
    pub acme_certs: usize,
    /// `--admin-certs`: where certificates added through the admin API are kept.
    pub admin_certs_dir: Option<PathBuf>,
    /// How many of `certs`, after the ACME ones, come from `admin_certs_dir`.
    pub admin_certs: usize,
    /// The admin API (`--admin-socket`, `--admin-listen`), when on.
    pub admin: Option<admin::AdminSettings>,
    /// Sessions and ticket keys in a shared store (`--shared-store`), when on.
    pub store: Option<crate::session::store::Settings>,
    /// Where to serve `/metrics`, when asked.
    pub stats: Option<SocketAddr>,
    /// Pass the client certificate's CN in PROXY v2.
    pub proxy_client_cert: bool,
    /// Pass the server name in PROXY v2's authority TLV.
    pub proxy_authority: bool,
    /// The HTTP header for the client certificate's subject.
    pub client_cert_header: Option<String>,
    /// `--ocsp-dir`: fetch and refresh staples.
    pub ocsp: Option<crate::tls::ocsp::manager::Settings>,
    /// Whom to become after binding (`--user`, `--group`, `--chroot`).
    pub privileges: crate::system::privileges::Target,
    /// Detach from the terminal.
    pub daemon: bool,
    /// Where to write the process id.
    pub pidfile: Option<PathBuf>,
    /// `--client-verify`, which frontends and certificates may override.
    pub client_verify: crate::tls::client_auth::Mode,
    /// `--client-verify-ca`, loaded: the CAs of every client verification that names none.
    pub client_ca: Option<std::sync::Arc<rustls::RootCertStore>>,
}

impl Config {
    /// This configuration with `certs` as its ACME certificates (the state directory read
    /// again after an order), the rest unchanged.
    pub fn with_acme_certs(&self, certs: Vec<LoadedCert>) -> Config {
        let mut new = self.clone();
        let n = certs.len();
        new.certs.splice(0..self.acme_certs, certs);
        new.default_cert = self.default_cert - self.acme_certs + n;
        new.acme_certs = n;
        new
    }

    /// This configuration with `certs` as the admin API's certificates (`--admin-certs`
    /// read again after a change), the rest unchanged.
    pub fn with_admin_certs(&self, certs: Vec<LoadedCert>) -> Config {
        let mut new = self.clone();
        let n = certs.len();
        let at = self.acme_certs;
        new.certs.splice(at..at + self.admin_certs, certs);
        new.default_cert = self.default_cert - self.admin_certs + n;
        new.admin_certs = n;
        new
    }

    /// Validates a parsed command line. Warnings (expired certificates) go to the log.
    /// An error about a key of the configuration file names the file and the line.
    pub fn from_cli(cli: &Cli) -> Result<Self, ConfigError> {
        for note in &cli.notes {
            tracing::warn!(name: "config_note", note = %note, "{note}");
        }
        Self::build(cli).map_err(|e| e.located(cli.file_places.as_ref()))
    }

    fn build(cli: &Cli) -> Result<Self, ConfigError> {
        let preamble = backend::preamble(cli)?;
        if cli.http && cli.max_header_bytes < 256 {
            return Err(ConfigError::Invalid {
                option: "--max-header-bytes",
                reason: "must be at least 256".into(),
            });
        }
        if cli.queue_size == 0 {
            return Err(ConfigError::Invalid {
                option: "--queue-size",
                reason: "must be at least 1".into(),
            });
        }
        let workers = match cli.workers {
            Some(0) => {
                return Err(ConfigError::Invalid {
                    option: "--workers",
                    reason: "must be at least 1".into(),
                })
            }
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        if cli.backlog == 0 {
            return Err(ConfigError::Invalid {
                option: "--backlog",
                reason: "must be at least 1".into(),
            });
        }
        for (option, d) in [
            ("--session-timeout", cli.session_timeout),
            ("--ticket-rotate", cli.ticket_rotate),
            ("--ssl-handshake-timeout", cli.ssl_handshake_timeout),
            ("--backend-connect-timeout", cli.backend_connect_timeout),
            ("--queue-timeout", cli.queue_timeout),
            ("--idle-timeout", cli.idle_timeout),
            ("--http-request-timeout", cli.http_request_timeout),
            ("--http-keepalive-timeout", cli.http_keepalive_timeout),
            ("--http-stall-timeout", cli.http_stall_timeout),
        ] {
            if d.is_zero() {
                return Err(ConfigError::Invalid {
                    option,
                    reason: "must be more than 0".into(),
                });
            }
        }

        let replication = replication::settings(cli)?;
        let store = store::settings(cli)?;
        if store.is_some() && cli.session_cache == 0 && (cli.no_tickets || !cli.tickets) {
            tracing::warn!(
                name: "config_store_has_nothing_to_share",
                "--shared-store is on but the session cache and tickets are off: there is nothing to share",
            );
        }
        if replication.is_some() && cli.session_cache == 0 && (cli.no_tickets || !cli.tickets) {
            tracing::warn!(
                name: "config_replication_has_nothing_to_share",
                "replication is on but the session cache and tickets are off: only keys would be shared, and there are none",
            );
        }
        let client_ca = cli
            .client_verify_ca
            .as_deref()
            .map(crate::tls::client_auth::load_roots)
            .transpose()?;
        let tls = tls::settings(cli, client_ca.clone())?;
        let frontends = cli
            .frontends
            .iter()
            .map(|s| {
                frontend::parse(
                    s,
                    &tls,
                    cli.quic,
                    cli.ocsp_verify_staple,
                    cli.ocsp_verify_ca.as_deref(),
                )
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        frontend::check_unique(&frontends)?;
        frontend::check_quic(&frontends, &tls, cli.http)?;
        if cli.quic_early_data && !frontends.iter().any(|f| f.quic) {
            return Err(ConfigError::Invalid {
                option: "--quic-early-data",
                reason: "no frontend serves QUIC (--quic, or a frontend's quic=on)".into(),
            });
        }
        let (mut certs, mut default_cert, self_signed) = tls::load_certs(cli)?;
        let mut acme = acme::settings(cli)?;
        if let (Some(a), Some(r)) = (&mut acme, &replication) {
            a.farm = Some(crate::acme::FarmPeers {
                unicast_peers: r.peers.iter().filter(|p| !p.ip().is_multicast()).count(),
            });
        }
        // ACME certificates come first: they are never the default one (hitch's last).
        let acme_loaded = acme
            .as_ref()
            .map(crate::acme::state::load_all)
            .unwrap_or_default();
        let acme_certs = acme_loaded.len();
        default_cert += acme_certs;
        certs.splice(0..0, acme_loaded);
        // The admin API's come next: never the default one either.
        let admin_loaded = match &cli.admin_certs {
            Some(dir) => {
                admin::check_private_dir("--admin-certs", dir)?;
                crate::tls::cert_store::load_all(dir).map_err(|e| ConfigError::Invalid {
                    option: "--admin-certs",
                    reason: e.to_string(),
                })?
            }
            None => Vec::new(),
        };
        let admin_certs = admin_loaded.len();
        default_cert += admin_certs;
        certs.splice(acme_certs..acme_certs, admin_loaded);
        if self_signed && acme.is_none() && cli.config.is_some() {
            // A configuration file that gives no certificate is a mistake, not a wish for
            // the self-signed default: each frontend needs one (hitch's rule).
            if let Some(f) = frontends.iter().find(|f| f.certs.is_empty()) {
                return Err(ConfigError::NoCertificate {
                    frontend: f.endpoint.to_string(),
                });
            }
        }
        let certificate_given =
            !self_signed || acme.is_some() || frontends.iter().any(|f| !f.certs.is_empty());
        let backend = backend::target(cli, certificate_given)?;
        backend::check_preamble(preamble, &backend)?;
        let (mut named_backends, mut routes) = services::resolve(cli, &frontends, preamble)?;
        values::policy_levels(cli, &frontends, &named_backends, &routes)?;
        let mut frontends = frontends;
        let mut global_policy = values::global_policy(cli)?;
        if let Some(v) = &cli.hsts {
            // HSTS is a Set rule before every level's answer rules, and the global level's
            // when it has none: applied with them, in one pass, never lost by inheritance.
            let levels = (frontends.iter_mut().map(|f| &mut f.policy))
                .chain(named_backends.iter_mut().map(|b| &mut b.policy))
                .chain(routes.iter_mut().map(|r| &mut r.policy));
            for p in levels {
                p.lead_with_hsts(v, false);
            }
            global_policy.lead_with_hsts(v, true);
        }
        let access_log = values::access_log(cli, &frontends)?;
        let clients = clients::settings(cli, &frontends)?;
        if !certificate_given && !cli.backends.is_empty() {
            // A real backend means real traffic: the self-signed default is for trying shuck
            // on its built-in origin only (hitch refuses a start without a certificate).
            return Err(ConfigError::NoCertificateForBackend);
        }
        if let Some(dir) = &cli.ocsp_dir {
            if !dir.is_dir() {
                return Err(ConfigError::Invalid {
                    option: "--ocsp-dir",
                    reason: format!("{} is not a directory", dir.display()),
                });
            }
        }
        tls::attach_ocsp_files(cli, &mut certs)?;
        let now = SystemTime::now();
        for c in certs.iter().filter(|c| c.is_expired(now)) {
            tracing::warn!(
                name: "certificate_expired",
                certificate = %c.source,
                "certificate has expired; serving it anyway",
            );
        }

        let config = Config {
            frontends,
            backend,
            named_backends,
            routes,
            workers,
            backlog: cli.backlog,
            tcp_fastopen: cli.tcp_fastopen,
            defer_accept: cli.defer_accept.then_some(cli.ssl_handshake_timeout),
            backend_refresh: (cli.backend_refresh > 0)
                .then(|| Duration::from_secs(cli.backend_refresh)),
            tls,
            certs,
            default_cert,
            self_signed,
            limits: Limits {
                max_conns: cli.max_conns,
                handshake_timeout: cli.ssl_handshake_timeout,
                connect_timeout: cli.backend_connect_timeout,
                idle_timeout: cli.idle_timeout,
                keepalive: (cli.keepalive > 0).then(|| Duration::from_secs(cli.keepalive)),
                drain_timeout: cli.drain_timeout,
                queue_size: cli.queue_size,
                queue_timeout: cli.queue_timeout,
                retry_after: cli.backend_retry_after,
                retries: cli.retries,
                http_request_timeout: cli.http_request_timeout,
                http_refuse_encoded_slashes: cli.http_refuse_encoded_slashes,
                http_keepalive_timeout: cli.http_keepalive_timeout,
                http_stall_timeout: cli.http_stall_timeout,
                h2: h2_limits(cli)?,
                h3: h3_limits(cli)?,
            },
            log_connections: cli.log_connections,
            access_log,
            clients,
            policy: global_policy,
            request_id: values::request_id(cli)?,
            trusted_proxies: values::trusted_proxies(cli)?,
            syslog_facility: crate::system::log::facility(&cli.syslog_facility).map_err(
                |reason| ConfigError::Invalid {
                    option: "--syslog-facility",
                    reason,
                },
            )?,
            preamble,
            proxy_proxy: cli.proxy_proxy,
            http: cli.http.then_some(cli.max_header_bytes),
            replication,
            redirect: services::redirect(cli, acme.as_ref().and_then(|a| a.http_listen))?,
            acme,
            acme_certs,
            admin_certs_dir: cli.admin_certs.clone(),
            admin_certs,
            admin: admin::settings(cli)?,
            store,
            stats: stats_addr(cli)?,
            proxy_client_cert: cli.proxy_client_cert,
            proxy_authority: cli.proxy_authority,
            client_cert_header: client_cert_header(cli)?,
            ocsp: cli
                .ocsp_dir
                .as_ref()
                .map(|dir| {
                    Ok::<_, ConfigError>(crate::tls::ocsp::manager::Settings {
                        dir: dir.clone(),
                        refresh: cli.ocsp_refresh_interval,
                        timeouts: crate::tls::ocsp::fetch::Timeouts {
                            connect: cli.ocsp_connect_tmo,
                            response: cli.ocsp_resp_tmo,
                        },
                        trust: ocsp_trust(cli)?,
                    })
                })
                .transpose()?,
            privileges: crate::system::privileges::Target::resolve(
                cli.user.as_deref(),
                cli.group.as_deref(),
                cli.chroot.as_deref(),
            )?,
            daemon: cli.daemon,
            pidfile: cli.pidfile.clone(),
            client_verify: cli.client_verify,
            client_ca,
        };
        config.check_client_cas()?;
        Ok(config)
    }
}

impl Config {
    /// The key the farm shares (`--shared-cache-key`, for replication or the shared
    /// store), when there is one.
    pub fn farm_key(&self) -> Option<[u8; 32]> {
        self.replication
            .as_ref()
            .map(|r| r.key)
            .or_else(|| self.store.as_ref().map(|s| s.key))
    }

    /// One line for `--test`: what would be served.
    pub fn describe(&self) -> String {
        let own: usize = self.frontends.iter().map(|f| f.certs.len()).sum();
        format!(
            "{} frontend(s) ({}), {} certificate(s){}{}, {} worker(s), backend: {}{}",
            self.frontends.len(),
            self.frontends
                .iter()
                .map(|f| f.endpoint.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            self.certs.len(),
            if self.self_signed {
                " (self-signed, generated)"
            } else {
                ""
            },
            if own > 0 {
                format!(" + {own} frontend-specific")
            } else {
                String::new()
            },
            self.workers,
            match &self.backend {
                BackendTarget::Servers(s) => s
                    .iter()
                    .map(|b| b.endpoint.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                BackendTarget::BuiltinOrigin => "built-in origin".into(),
            },
            match &self.replication {
                Some(r) => format!(
                    ", replication on udp {} to {} peer(s)",
                    r.listen,
                    r.peers.len()
                ),
                None => String::new(),
            }
        )
    }
}
