//! Where decrypted traffic goes (`-b`, the built-in origin) and how the backend learns who
//! the client is (`--write-proxy-v1/-v2`, `--write-ip`, `--proxy-proxy`).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::{Cli, ConfigError, Endpoint};

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

    /// Parses `[HOST]:PORT[,maxconn=N][,weight=W]` or `/PATH[,maxconn=N][,weight=W]`.
    pub fn parse(spec: &str) -> Result<Self, ConfigError> {
        let mut parts = spec.split(',');
        let endpoint = BackendEndpoint::parse(parts.next().unwrap_or(""))?;
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
        let addrs = match &endpoint {
            BackendEndpoint::Tcp(e) => e.resolve("--backend")?,
            BackendEndpoint::Unix(_) => Vec::new(),
        };
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
