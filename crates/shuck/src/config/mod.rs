//! Configuration: the command line ([`cli::Cli`]) is parsed, then validated into a
//! [`Config`] that the runtime can serve without further checks. Certificates are loaded
//! here so that every bad file is reported before anything listens.

pub mod cli;
pub mod duration;
pub mod endpoint;
pub mod error;
pub mod file;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tracing::level_filters::LevelFilter;

pub use cli::Cli;
pub use endpoint::Endpoint;
pub use error::ConfigError;

use crate::proxy::preamble::Preamble;
use crate::session::sync;
use crate::tls::tickets::TicketKeys;
use crate::tls::{params, LoadedCert, TlsSettings};

/// A frontend: the endpoint as written and the addresses it listens on.
#[derive(Debug)]
pub struct Frontend {
    /// As the operator wrote it, for messages.
    pub endpoint: Endpoint,
    /// Where to bind.
    pub addrs: Vec<SocketAddr>,
    /// Certificates of this frontend only (`-f HOST:PORT+cert.pem`, or a frontend block's
    /// pem-file); empty: the global ones.
    pub certs: Vec<LoadedCert>,
    /// Also serve the global certificates (by SNI) besides its own.
    pub match_global_certs: bool,
    /// TLS settings of this frontend when they differ from the global ones
    /// (`;ciphers=...;tls-protos=...`, or a frontend block's keys).
    pub tls: Option<TlsSettings>,
}

/// One `-b` server.
#[derive(Debug, Clone)]
pub struct BackendSpec {
    /// As written (without parameters).
    pub endpoint: Endpoint,
    /// Addresses to try in order.
    pub addrs: Vec<SocketAddr>,
    /// Most connections at once; `None` for no limit.
    pub maxconn: Option<usize>,
    /// Round-robin weight.
    pub weight: u32,
}

impl BackendSpec {
    /// Parses `[HOST]:PORT[,maxconn=N][,weight=W]`.
    pub fn parse(spec: &str) -> Result<Self, ConfigError> {
        let mut parts = spec.split(',');
        let endpoint = Endpoint::parse("--backend", parts.next().unwrap_or(""))?;
        let mut maxconn = None;
        let mut weight = 1;
        for p in parts {
            let bad = |reason: String| ConfigError::BadAddress {
                option: "--backend",
                value: spec.to_owned(),
                reason,
            };
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| bad(format!("{p:?}: expected maxconn=N or weight=W")))?;
            let n: u32 = v
                .trim()
                .parse()
                .map_err(|_| bad(format!("{k}={v}: expected a number")))?;
            match k.trim() {
                "maxconn" if n >= 1 => maxconn = Some(n as usize),
                "weight" if (1..=1000).contains(&n) => weight = n,
                "maxconn" => return Err(bad("maxconn must be at least 1".into())),
                "weight" => return Err(bad("weight must be from 1 to 1000".into())),
                other => {
                    return Err(bad(format!(
                        "unknown parameter {other:?} (maxconn, weight)"
                    )))
                }
            }
        }
        let addrs = endpoint.resolve("--backend")?;
        Ok(BackendSpec {
            endpoint,
            addrs,
            maxconn,
            weight,
        })
    }
}

/// Where decrypted traffic goes.
#[derive(Debug, Clone)]
pub enum BackendTarget {
    /// Servers named by `-b`, resolved at start.
    Servers(Vec<BackendSpec>),
    /// No `-b`: the built-in origin, started on a loopback port.
    BuiltinOrigin,
}

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
}

/// A validated configuration.
#[derive(Debug)]
pub struct Config {
    /// Listening endpoints.
    pub frontends: Vec<Frontend>,
    /// The backend.
    pub backend: BackendTarget,
    /// Worker threads.
    pub workers: usize,
    /// Listen backlog.
    pub backlog: u32,
    /// TLS parameters.
    pub tls: TlsSettings,
    /// Certificates; the first is the default.
    pub certs: Vec<LoadedCert>,
    /// True when the certificate was generated because none was given.
    pub self_signed: bool,
    /// Limits and timeouts.
    pub limits: Limits,
    /// Log one line per connection.
    pub log_connections: bool,
    /// What to write before the client's bytes.
    pub preamble: Preamble,
    /// Read a PROXY header from the client side first.
    pub proxy_proxy: bool,
    /// HTTP mode, with the largest request head accepted.
    pub http: Option<usize>,
    /// Session replication between hosts, when on.
    pub replication: Option<sync::Settings>,
    /// Where to serve `/metrics`, when asked.
    pub stats: Option<SocketAddr>,
    /// Pass the client certificate's CN in PROXY v2.
    pub proxy_client_cert: bool,
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
}

impl Config {
    /// Validates a parsed command line. Warnings (expired certificates) go to the log.
    pub fn from_cli(cli: &Cli) -> Result<Self, ConfigError> {
        let backend = if cli.backends.is_empty() {
            BackendTarget::BuiltinOrigin
        } else {
            BackendTarget::Servers(
                cli.backends
                    .iter()
                    .map(|s| BackendSpec::parse(s))
                    .collect::<Result<_, _>>()?,
            )
        };
        let writes = [
            (cli.write_proxy_v1, Preamble::ProxyV1),
            (cli.write_proxy_v2 || cli.write_proxy, Preamble::ProxyV2),
            (cli.write_ip, Preamble::WriteIp),
        ];
        let chosen: Vec<Preamble> = writes
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, p)| *p)
            .collect();
        let preamble = match chosen.as_slice() {
            [] if cli.proxy_proxy => Preamble::PassThrough,
            [] => Preamble::None,
            [one] => *one,
            _ => {
                return Err(ConfigError::Invalid {
                    option: "--write-proxy-v1/--write-proxy-v2/--write-ip",
                    reason: "choose one way to tell the backend who the client is".into(),
                })
            }
        };
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
        ] {
            if d.is_zero() {
                return Err(ConfigError::Invalid {
                    option,
                    reason: "must be more than 0".into(),
                });
            }
        }

        let replication = replication(cli)?;
        if replication.is_some() && cli.session_cache == 0 && (cli.no_tickets || !cli.tickets) {
            tracing::warn!("replication is on but the session cache and tickets are off: only keys would be shared, and there are none");
        }
        let tls = tls_settings(cli)?;
        let frontends = cli
            .frontends
            .iter()
            .map(|s| parse_frontend(s, &tls))
            .collect::<Result<Vec<_>, ConfigError>>()?;
        let (mut certs, self_signed) = load_certs(cli)?;
        if let Some(dir) = &cli.ocsp_dir {
            if !dir.is_dir() {
                return Err(ConfigError::Invalid {
                    option: "--ocsp-dir",
                    reason: format!("{} is not a directory", dir.display()),
                });
            }
        }
        if !cli.ocsp_verify_staple {
            tracing::warn!(
                "--ocsp-verify-staple=off: shuck always checks OCSP responses before stapling them"
            );
        }
        attach_ocsp_files(cli, &mut certs)?;
        let now = SystemTime::now();
        for c in certs.iter().filter(|c| c.is_expired(now)) {
            tracing::warn!(certificate = %c.source, "certificate has expired; serving it anyway");
        }

        Ok(Config {
            frontends,
            backend,
            workers,
            backlog: cli.backlog,
            tls,
            certs,
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
            },
            log_connections: cli.log_connections,
            preamble,
            proxy_proxy: cli.proxy_proxy,
            http: cli.http.then_some(cli.max_header_bytes),
            replication,
            stats: stats_addr(cli)?,
            proxy_client_cert: cli.proxy_client_cert,
            client_cert_header: client_cert_header(cli)?,
            ocsp: cli
                .ocsp_dir
                .as_ref()
                .map(|dir| crate::tls::ocsp::manager::Settings {
                    dir: dir.clone(),
                    refresh: cli.ocsp_refresh_interval,
                    timeouts: crate::tls::ocsp::fetch::Timeouts {
                        connect: cli.ocsp_connect_tmo,
                        response: cli.ocsp_resp_tmo,
                    },
                }),
            privileges: crate::system::privileges::Target::resolve(
                cli.user.as_deref(),
                cli.group.as_deref(),
                cli.chroot.as_deref(),
            )?,
            daemon: cli.daemon,
            pidfile: cli.pidfile.clone(),
        })
    }
}

impl Config {
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

/// The effective log level: `-q` wins over `-L`.
pub fn log_level(cli: &Cli) -> LevelFilter {
    if cli.quiet {
        LevelFilter::ERROR
    } else {
        cli.log_level
    }
}

fn tls_settings(cli: &Cli) -> Result<TlsSettings, ConfigError> {
    let versions = params::parse_protocols(&cli.tls_protos)?;
    let (default12, default13) = params::default_suites();
    let tls12 = match &cli.ciphers {
        Some(s) => params::parse_tls12_ciphers(s)?,
        None => default12,
    };
    let tls13 = match &cli.ciphersuites {
        Some(s) => params::parse_tls13_suites(s)?,
        None => default13,
    };
    let groups = match &cli.ecdh_curve {
        Some(s) => params::parse_groups(s)?,
        None => rustls::crypto::aws_lc_rs::DEFAULT_KX_GROUPS.to_vec(),
    };
    let alpn = match &cli.alpn_protos {
        Some(s) => params::parse_alpn(s)?,
        None => Vec::new(),
    };
    let tickets_on = cli.tickets && !cli.no_tickets;
    let tickets = match (&cli.ticket_keys, tickets_on) {
        (_, false) => None,
        (Some(path), true) => Some(Arc::new(TicketKeys::from_file(path, cli.session_timeout)?)),
        (None, true) => Some(Arc::new(TicketKeys::rotating(
            cli.ticket_rotate,
            cli.session_timeout,
        )?)),
    };
    if cli.ticket_keys.is_some() && !tickets_on {
        tracing::warn!("--ticket-keys is ignored: tickets are off");
    }
    Ok(TlsSettings {
        session_cache: cli.session_cache,
        session_timeout: cli.session_timeout,
        tickets,
        versions,
        suites: tls13.into_iter().chain(tls12).collect(),
        groups,
        alpn,
        prefer_server_ciphers: cli.prefer_server_ciphers,
        sni_nomatch_abort: cli.sni_nomatch_abort,
        ocsp: None,
        client_auth: crate::tls::client_auth::ClientAuth::load(
            cli.client_verify,
            cli.client_verify_ca.as_deref(),
        )?,
    })
}

fn client_cert_header(cli: &Cli) -> Result<Option<String>, ConfigError> {
    let Some(name) = &cli.client_cert_header else {
        return Ok(None);
    };
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(ConfigError::Invalid {
            option: "--client-cert-header",
            reason: format!("{name:?} is not an HTTP header name"),
        });
    }
    let lower = name.to_ascii_lowercase();
    if [
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "x-forwarded-for",
        "x-forwarded-proto",
        "forwarded",
    ]
    .contains(&lower.as_str())
    {
        return Err(ConfigError::Invalid {
            option: "--client-cert-header",
            reason: format!("{name} is a header shuck or HTTP already uses; choose another (e.g. X-SSL-Client-Subject)"),
        });
    }
    if !cli.http {
        tracing::warn!("--client-cert-header needs --http; it is ignored");
    }
    if cli.client_verify == crate::tls::client_auth::Mode::None
        && (cli.proxy_client_cert || cli.client_cert_header.is_some())
    {
        tracing::warn!("--proxy-client-cert/--client-cert-header: --client-verify is none, so no client certificate is ever asked for");
    }
    Ok(Some(name.clone()))
}

fn stats_addr(cli: &Cli) -> Result<Option<SocketAddr>, ConfigError> {
    let Some(spec) = &cli.stats else {
        return Ok(None);
    };
    if let Ok(port) = spec.trim().parse::<u16>() {
        if port == 0 {
            return Err(ConfigError::BadAddress {
                option: "--stats",
                value: spec.clone(),
                reason: "the port must be a number from 1 to 65535".into(),
            });
        }
        return Ok(Some(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)));
    }
    let ep = Endpoint::parse("--stats", spec)?;
    let addrs = ep.listen_addrs("--stats")?;
    Ok(addrs.first().copied())
}

fn replication(cli: &Cli) -> Result<Option<sync::Settings>, ConfigError> {
    let Some(listen) = &cli.shared_cache_listen else {
        if !cli.shared_cache_peer.is_empty() {
            return Err(ConfigError::Invalid {
                option: "--shared-cache-peer",
                reason:
                    "needs --shared-cache-listen (replication sends and receives on one socket)"
                        .into(),
            });
        }
        if cli.shared_cache_if.is_some() || cli.shared_cache_key.is_some() {
            tracing::warn!(
                "--shared-cache-if and --shared-cache-key do nothing without --shared-cache-listen"
            );
        }
        return Ok(None);
    };
    let Some(key_path) = &cli.shared_cache_key else {
        return Err(ConfigError::Invalid {
            option: "--shared-cache-listen",
            reason: "needs --shared-cache-key FILE: replication never runs unsealed (make a key with: head -c 32 /dev/urandom | base64)".into(),
        });
    };
    let key = sync::psk::load(key_path)?;
    let mut peers = Vec::new();
    for p in &cli.shared_cache_peer {
        let endpoint = Endpoint::parse("--shared-cache-peer", p)?;
        if endpoint.host == endpoint::Host::Any {
            return Err(ConfigError::BadAddress {
                option: "--shared-cache-peer",
                value: p.clone(),
                reason: "a peer is a host or a multicast group, not *".into(),
            });
        }
        peers.extend(endpoint.resolve("--shared-cache-peer")?);
    }
    let listen_ep = Endpoint::parse("--shared-cache-listen", listen)?;
    let groups: Vec<IpAddr> = peers
        .iter()
        .map(SocketAddr::ip)
        .filter(IpAddr::is_multicast)
        .collect();
    let listen_addr = match &listen_ep.host {
        // One socket: IPv6 (dual-stack) only when some peer needs it.
        endpoint::Host::Any if peers.iter().any(SocketAddr::is_ipv6) => {
            SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), listen_ep.port)
        }
        endpoint::Host::Any => SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), listen_ep.port),
        _ => *listen_ep
            .resolve("--shared-cache-listen")?
            .first()
            .ok_or_else(|| ConfigError::Invalid {
                option: "--shared-cache-listen",
                reason: "no address".into(),
            })?,
    };
    let bad_listen = |reason: String| ConfigError::BadAddress {
        option: "--shared-cache-listen",
        value: listen.clone(),
        reason,
    };
    for g in &groups {
        let ip = listen_addr.ip();
        if !(ip.is_unspecified() || ip == *g) {
            return Err(bad_listen(format!(
                "to receive the multicast group {g}, listen on [*]:PORT or on the group's address"
            )));
        }
        if g.is_ipv4() != ip.is_ipv4() {
            return Err(bad_listen(format!(
                "the multicast group {g} and the listen address are of different IP families"
            )));
        }
    }
    if peers.iter().any(|p| p.is_ipv6() && listen_addr.is_ipv4()) {
        return Err(bad_listen(
            "an IPv6 peer needs an IPv6 (or [*]) listen address".into(),
        ));
    }
    let iface = match &cli.shared_cache_if {
        Some(s) => Some(
            sync::MulticastIf::parse(s).map_err(|reason| ConfigError::Invalid {
                option: "--shared-cache-if",
                reason,
            })?,
        ),
        None => None,
    };
    if iface.is_some() && groups.is_empty() {
        tracing::warn!(
            "--shared-cache-if is for multicast, and no --shared-cache-peer is a multicast group"
        );
    }
    if cli.shared_cache_window < Duration::from_millis(100) {
        return Err(ConfigError::Invalid {
            option: "--shared-cache-window",
            reason: "must be at least 100ms".into(),
        });
    }
    Ok(Some(sync::Settings {
        listen: listen_addr,
        peers,
        iface,
        key,
        window: cli.shared_cache_window,
    }))
}

/// `--ocsp-resp-file PEM=DER`: checks each response against its certificate and keeps the
/// good ones for stapling; a bad response is logged and not stapled.
fn attach_ocsp_files(cli: &Cli, certs: &mut [LoadedCert]) -> Result<(), ConfigError> {
    for spec in &cli.ocsp_resp_file {
        let bad = |reason: String| ConfigError::Invalid {
            option: "--ocsp-resp-file",
            reason: format!("{spec:?}: {reason}"),
        };
        let (pem, der_path) = spec.rsplit_once('=').ok_or_else(|| {
            bad("expected PEM=DER (a certificate file and its OCSP response)".into())
        })?;
        let cert = certs
            .iter_mut()
            .find(|c| c.source == pem)
            .ok_or_else(|| bad(format!("{pem} is not one of the certificates given")))?;
        let der =
            std::fs::read(der_path).map_err(|e| bad(format!("cannot read {der_path}: {e}")))?;
        let chain = &cert.key.cert;
        let (Some(leaf), Some(issuer)) = (chain.first(), chain.get(1)) else {
            tracing::warn!(certificate = %pem, "OCSP response {der_path} not stapled: the issuer is not in the PEM file, so the response cannot be checked");
            continue;
        };
        match crate::tls::ocsp::verify::verify(&der, leaf, issuer, SystemTime::now()) {
            Ok(_) => {
                tracing::info!(certificate = %pem, "stapling the OCSP response {der_path}");
                cert.ocsp = Some(der);
            }
            Err(e) => {
                tracing::warn!(certificate = %pem, "OCSP response {der_path} not stapled: {e}")
            }
        }
    }
    Ok(())
}

/// `[HOST]:PORT[+PEM...][;key=value...]`: a frontend with, optionally, its own
/// certificates and TLS settings (ciphers, ciphersuites, tls-protos, prefer-server-ciphers,
/// sni-nomatch-abort, match-global-certs), as a hitch frontend block gives them.
fn parse_frontend(spec: &str, global: &TlsSettings) -> Result<Frontend, ConfigError> {
    let bad = |reason: String| ConfigError::BadAddress {
        option: "--frontend",
        value: spec.to_owned(),
        reason,
    };
    let mut sections = spec.split(';');
    let head = sections.next().unwrap_or("");
    let mut parts = head.split('+');
    let endpoint = Endpoint::parse("--frontend", parts.next().unwrap_or(""))?;
    let addrs = endpoint.listen_addrs("--frontend")?;
    let certs = parts
        .map(|p| {
            if p.is_empty() {
                return Err(bad("empty certificate after +".into()));
            }
            Ok(LoadedCert::from_file(std::path::Path::new(p))?)
        })
        .collect::<Result<Vec<_>, ConfigError>>()?;
    let mut tls: Option<TlsSettings> = None;
    let mut match_global_certs = false;
    for setting in sections.filter(|s| !s.trim().is_empty()) {
        let (k, v) = setting
            .split_once('=')
            .ok_or_else(|| bad(format!("{setting:?}: expected key=value")))?;
        let (k, v) = (k.trim(), v.trim());
        let on_off = |v: &str| match v.to_ascii_lowercase().as_str() {
            "on" | "yes" | "true" | "1" => Ok(true),
            "off" | "no" | "false" | "0" => Ok(false),
            _ => Err(bad(format!("{k}={v}: expected on or off"))),
        };
        let t = tls.get_or_insert_with(|| global.clone());
        match k {
            "ciphers" | "ciphersuites" => {
                let (tls12, tls13): (Vec<_>, Vec<_>) = t
                    .suites
                    .iter()
                    .partition(|s| s.version() == &rustls::version::TLS12);
                let (tls12, tls13) = if k == "ciphers" {
                    (params::parse_tls12_ciphers(v)?, tls13)
                } else {
                    (tls12, params::parse_tls13_suites(v)?)
                };
                t.suites = tls13.into_iter().chain(tls12).collect();
            }
            "tls-protos" => t.versions = params::parse_protocols(v)?,
            "prefer-server-ciphers" => t.prefer_server_ciphers = on_off(v)?,
            "sni-nomatch-abort" => t.sni_nomatch_abort = on_off(v)?,
            "match-global-certs" => match_global_certs = on_off(v)?,
            other => {
                return Err(bad(format!(
                    "unknown frontend setting {other:?} (ciphers, ciphersuites, tls-protos, prefer-server-ciphers, sni-nomatch-abort, match-global-certs)"
                )))
            }
        }
    }
    if match_global_certs && certs.is_empty() {
        return Err(bad(
            "match-global-certs needs certificates of the frontend's own".into(),
        ));
    }
    Ok(Frontend {
        endpoint,
        addrs,
        certs,
        match_global_certs,
        tls,
    })
}

impl Config {
    /// The TLS settings and certificates a frontend serves with. Session cache, ticket
    /// keys, OCSP staples and client verification are the process's.
    pub fn frontend_tls<'a>(&'a self, fe: &'a Frontend) -> (TlsSettings, Vec<&'a LoadedCert>) {
        let mut s = fe.tls.clone().unwrap_or_else(|| self.tls.clone());
        s.tickets = self.tls.tickets.clone();
        s.ocsp = self.tls.ocsp.clone();
        s.client_auth = self.tls.client_auth.clone();
        let mut certs: Vec<&LoadedCert> = fe.certs.iter().collect();
        if certs.is_empty() || fe.match_global_certs {
            certs.extend(self.certs.iter());
        }
        (s, certs)
    }
}

fn load_certs(cli: &Cli) -> Result<(Vec<LoadedCert>, bool), ConfigError> {
    let mut paths: Vec<PathBuf> = cli.pem_files.clone();
    if let Some(dir) = &cli.pem_dir {
        let bad = |reason: String| ConfigError::PemDir {
            path: dir.clone(),
            reason,
        };
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| bad(e.to_string()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "pem"))
            .collect();
        if found.is_empty() {
            return Err(bad("holds no *.pem file".into()));
        }
        found.sort();
        paths.extend(found);
    }
    if paths.is_empty() {
        return Ok((vec![crate::tls::selfsigned::generate()?], true));
    }
    let certs = paths
        .iter()
        .map(|p| LoadedCert::from_file(p))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((certs, false))
}
