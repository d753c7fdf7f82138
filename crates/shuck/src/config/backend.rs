//! Where decrypted traffic goes (`-b`, the built-in origin) and how the backend learns who
//! the client is (`--write-proxy-v1/-v2`, `--write-ip`, `--proxy-proxy`).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use std::time::Duration;

use super::{Cli, ConfigError, Endpoint};
use crate::backend::check::{CheckSpec, Probe};

/// What to write before the client's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preamble {
    /// Nothing.
    None,
    /// PROXY protocol v1 (text).
    ProxyV1,
    /// PROXY protocol v2 (binary, with TLVs).
    ProxyV2,
    /// stud's and hitch's write-ip: the address family (2 or 10, one octet), then the
    /// client address as 4 or 16 bytes (network order).
    WriteIp,
    /// `--proxy-proxy` alone: the PROXY header received from the client side, as received.
    PassThrough,
}

/// Where a `-b` server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendEndpoint {
    /// `[HOST]:PORT`.
    Tcp(Endpoint),
    /// A UNIX-domain socket's absolute path (hitch 1.7's `backend = "/path"`).
    Unix(PathBuf),
}

impl BackendEndpoint {
    /// True when the host is a name (worth resolving again with `--backend-refresh`).
    pub fn is_name(&self) -> bool {
        matches!(self, BackendEndpoint::Tcp(e) if e.is_name())
    }

    /// Parses `[HOST]:PORT` or an absolute path.
    pub fn parse(spec: &str) -> Result<Self, ConfigError> {
        let bad = |reason: &str| ConfigError::BadAddress {
            option: "--backend",
            value: spec.to_owned(),
            reason: reason.to_owned(),
        };
        if !spec.trim_start().starts_with('/') {
            if spec.contains('/') && !spec.contains(':') {
                return Err(bad("a UNIX socket path must be absolute (start with /)"));
            }
            return Endpoint::parse("--backend", spec).map(BackendEndpoint::Tcp);
        }
        let path = spec.trim();
        // sun_path holds 108 bytes with its NUL.
        if path.len() > MAX_SOCKET_PATH {
            return Err(bad(&format!(
                "a UNIX socket path is at most {MAX_SOCKET_PATH} bytes"
            )));
        }
        if path.ends_with('/') {
            return Err(bad("a UNIX socket path names a socket, not a directory"));
        }
        if path.bytes().any(|b| b == 0 || b.is_ascii_control()) {
            return Err(bad("a UNIX socket path holds no control characters"));
        }
        Ok(BackendEndpoint::Unix(PathBuf::from(path)))
    }
}

/// Longest UNIX socket path (sun_path less its terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

impl fmt::Display for BackendEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendEndpoint::Tcp(e) => e.fmt(f),
            BackendEndpoint::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// One `-b` server.
#[derive(Debug, Clone)]
pub struct BackendSpec {
    /// As written (without parameters).
    pub endpoint: BackendEndpoint,
    /// Addresses to try in order (none for a UNIX socket).
    pub addrs: Vec<SocketAddr>,
    /// Most connections at once; `None` for no limit.
    pub maxconn: Option<usize>,
    /// Round-robin weight.
    pub weight: u32,
    /// Its name in logs and metrics (`name=`); else its address.
    pub name: Option<String>,
    /// Its active health check, when on.
    pub check: Option<CheckSpec>,
}

impl BackendSpec {
    /// Its host as written (a name or an address; empty for a UNIX socket): what TLS to
    /// the backend verifies unless the block names another (`sni`).
    pub fn host(&self) -> String {
        match &self.endpoint {
            BackendEndpoint::Tcp(e) => match &e.host {
                super::endpoint::Host::Name(n) => n.clone(),
                super::endpoint::Host::Ip(ip) => ip.to_string(),
                super::endpoint::Host::Any => String::new(),
            },
            BackendEndpoint::Unix(_) => String::new(),
        }
    }

    /// Parses `[HOST]:PORT` or `/PATH`, then its options: `maxconn=N`, `weight=W`,
    /// `name=NAME` (its name in logs and metrics), and its health check as HAProxy names
    /// it: `check` (a connection), `check-tls` (a TLS handshake), `check-http=/PATH`,
    /// `check-grpc[=SERVICE]` (gRPC's health service), `check-status=200|2xx|300-399`,
    /// `check-interval=T`, `rise=N`, `fall=N`, `check-send-proxy`.
    pub fn parse(spec: &str) -> Result<Self, ConfigError> {
        let mut parts = spec.split(',');
        let endpoint = BackendEndpoint::parse(parts.next().unwrap_or(""))?;
        let mut maxconn = None;
        let mut weight = 1;
        let mut name = None;
        let bad = |reason: String| ConfigError::BadAddress {
            option: "--backend",
            value: spec.to_owned(),
            reason,
        };
        let (mut probe, mut tls, mut http) = (false, false, None);
        let mut grpc: Option<String> = None;
        let mut check = CheckSpec {
            probe: Probe::Connect,
            statuses: vec![(200, 399)],
            interval: Duration::from_secs(2),
            rise: 2,
            fall: 3,
            send_proxy: false,
        };
        let mut check_options = Vec::new();
        for p in parts {
            let (k, v) = match p.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (p.trim(), None),
            };
            let number = |lo: u32, hi: u32| -> Result<u32, ConfigError> {
                let v = v.ok_or_else(|| bad(format!("{k}: expected {k}=N")))?;
                match v.parse::<u32>() {
                    Ok(n) if (lo..=hi).contains(&n) => Ok(n),
                    Ok(_) if hi == u32::MAX => Err(bad(format!("{k} must be at least {lo}"))),
                    Ok(_) => Err(bad(format!("{k} must be from {lo} to {hi}"))),
                    Err(_) => Err(bad(format!("{k}={v}: expected a number"))),
                }
            };
            match (k, v) {
                ("maxconn", _) => maxconn = Some(number(1, u32::MAX)? as usize),
                ("weight", _) => weight = number(1, 1000)?,
                ("name", Some(v)) => {
                    if v.is_empty()
                        || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                    {
                        return Err(bad(format!("name={v}: letters, digits, '-', '_' or '.'")));
                    }
                    name = Some(v.to_owned());
                }
                ("check", None) => probe = true,
                ("check-tls", None) => tls = true,
                ("check-http", Some(path)) => {
                    if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
                        return Err(bad(format!(
                            "check-http={path}: a path starting with /, without spaces"
                        )));
                    }
                    http = Some(path.to_owned());
                }
                ("check-grpc", service) => {
                    let service = service.unwrap_or("");
                    if service.len() > 200
                        || !service
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b))
                    {
                        return Err(bad(format!(
                            "check-grpc={service}: a gRPC service name (letters, digits, '.', '_', '-', '/')"
                        )));
                    }
                    grpc = Some(service.to_owned());
                }
                ("check-status", Some(v)) => {
                    check.statuses = crate::backend::check::parse_statuses(v).map_err(&bad)?;
                    check_options.push(k);
                }
                ("check-interval", Some(v)) => {
                    let d = super::duration::parse_duration(v)
                        .map_err(|r| bad(format!("check-interval: {r}")))?;
                    if d < Duration::from_millis(10) || d > Duration::from_secs(3600) {
                        return Err(bad(format!("check-interval={v}: from 10ms to 1h")));
                    }
                    check.interval = d;
                    check_options.push(k);
                }
                ("rise", _) => {
                    check.rise = number(1, 1000)?;
                    check_options.push(k);
                }
                ("fall", _) => {
                    check.fall = number(1, 1000)?;
                    check_options.push(k);
                }
                ("check-send-proxy", None) => {
                    check.send_proxy = true;
                    check_options.push(k);
                }
                (other, _) => {
                    return Err(bad(format!(
                        "unknown or malformed parameter {other:?} (maxconn=N, weight=W, name=NAME, check, check-tls, check-http=/PATH, check-grpc[=SERVICE], check-status=LIST, check-interval=T, rise=N, fall=N, check-send-proxy)"
                    )))
                }
            }
        }
        if grpc.is_some() && http.is_some() {
            return Err(bad("choose check-http or check-grpc, not both".into()));
        }
        let check = if probe || tls || http.is_some() || grpc.is_some() {
            check.probe = match (http, grpc) {
                (Some(path), _) => Probe::Http { path, tls },
                (None, Some(service)) => Probe::Grpc { service },
                (None, None) if tls => Probe::Tls,
                (None, None) => Probe::Connect,
            };
            if check.statuses != [(200, 399)] && !matches!(check.probe, Probe::Http { .. }) {
                return Err(bad("check-status needs check-http".into()));
            }
            Some(check)
        } else {
            if let Some(k) = check_options.first() {
                return Err(bad(format!(
                    "{k} needs check, check-tls, check-http or check-grpc (no health check is on)"
                )));
            }
            None
        };
        let addrs = match &endpoint {
            BackendEndpoint::Tcp(e) => e.resolve("--backend")?,
            BackendEndpoint::Unix(_) => Vec::new(),
        };
        Ok(BackendSpec {
            endpoint,
            addrs,
            maxconn,
            weight,
            name,
            check,
        })
    }
}

/// Where decrypted traffic goes.
#[derive(Debug, Clone)]
pub enum BackendTarget {
    /// Servers named by `-b`, resolved at start.
    Servers(Vec<BackendSpec>),
    /// No `-b`, no certificate, no configuration file: the built-in origin, started on a
    /// loopback port (a demonstration default).
    BuiltinOrigin,
}

/// Where hitch forwards when no backend is given.
pub const HITCH_DEFAULT_BACKEND: &str = "[127.0.0.1]:8000";

/// The backend the command line names. Without `-b`, hitch's default `[127.0.0.1]:8000`
/// whenever a certificate (`certificate_given`: global or a frontend's own) or a
/// configuration file is given; the built-in origin only for the zero-configuration start.
pub(super) fn target(cli: &Cli, certificate_given: bool) -> Result<BackendTarget, ConfigError> {
    if !cli.backends.is_empty() {
        return Ok(BackendTarget::Servers(
            cli.backends
                .iter()
                .map(|s| BackendSpec::parse(s))
                .collect::<Result<_, _>>()?,
        ));
    }
    Ok(if certificate_given || cli.config.is_some() {
        BackendTarget::Servers(vec![BackendSpec::parse(HITCH_DEFAULT_BACKEND)?])
    } else {
        BackendTarget::BuiltinOrigin
    })
}

/// `--write-ip`'s raw address bytes have no use on a UNIX socket backend: refused, as
/// the combination most likely means a PROXY header was meant.
pub(super) fn check_preamble(
    preamble: Preamble,
    target: &BackendTarget,
) -> Result<(), ConfigError> {
    let unix = matches!(target, BackendTarget::Servers(s)
        if s.iter().any(|b| matches!(b.endpoint, BackendEndpoint::Unix(_))));
    if preamble == Preamble::WriteIp && unix {
        return Err(ConfigError::Invalid {
            option: "--write-ip",
            reason: "a UNIX socket backend has no use for the client's raw address bytes; use --write-proxy-v1 or --write-proxy-v2 (Varnish: -a /path,PROXY)".into(),
        });
    }
    Ok(())
}

/// The one way of telling the backend who the client is that the command line chose.
pub(super) fn preamble(cli: &Cli) -> Result<Preamble, ConfigError> {
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
    Ok(match chosen.as_slice() {
        [] if cli.proxy_proxy => Preamble::PassThrough,
        [] => Preamble::None,
        [one] => *one,
        _ => {
            return Err(ConfigError::Invalid {
                option: "--write-proxy-v1/--write-proxy-v2/--write-ip",
                reason: "choose one way to tell the backend who the client is".into(),
            })
        }
    })
}
