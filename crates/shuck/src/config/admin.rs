//! The admin API's settings: where it listens (`--admin-socket`, `--admin-listen` with
//! `--admin-token-file`) and where certificates added through it are kept
//! (`--admin-certs`).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use super::{Cli, ConfigError, Endpoint};

/// The admin API as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSettings {
    /// The UNIX socket it answers on.
    pub socket: Option<PathBuf>,
    /// The TCP address it answers on, with the token every request must carry.
    pub listen: Option<(SocketAddr, String)>,
    /// Where the operator's server settings are kept (`--admin-state`).
    pub state: Option<PathBuf>,
}

/// `--admin-socket`, `--admin-listen` and `--admin-token-file`, checked.
pub fn settings(cli: &Cli) -> Result<Option<AdminSettings>, ConfigError> {
    let listen = match &cli.admin_listen {
        None => None,
        Some(spec) => {
            let addr = listen_addr(spec)?;
            let Some(file) = &cli.admin_token_file else {
                return Err(ConfigError::Invalid {
                    option: "--admin-listen",
                    reason: "needs --admin-token-file: the TCP admin API answers only requests that carry its token".into(),
                });
            };
            Some((addr, token(file)?))
        }
    };
    if cli.admin_socket.is_none() && listen.is_none() {
        if cli.admin_state.is_some() {
            return Err(ConfigError::Invalid {
                option: "--admin-state",
                reason: "needs the admin API (--admin-socket or --admin-listen), through which servers are set".into(),
            });
        }
        return Ok(None);
    }
    if let Some(state) = &cli.admin_state {
        let parent = state.parent().filter(|p| !p.as_os_str().is_empty());
        check_private_dir("--admin-state", parent.unwrap_or(Path::new(".")))?;
    }
    if let Some(p) = &cli.admin_socket {
        if p.as_os_str().len() > 100 {
            return Err(ConfigError::Invalid {
                option: "--admin-socket",
                reason: format!("{}: a UNIX socket's path is at most 100 bytes", p.display()),
            });
        }
    }
    Ok(Some(AdminSettings {
        socket: cli.admin_socket.clone(),
        listen,
        state: cli.admin_state.clone(),
    }))
}

/// Refuses a directory root would write into that others could put a link in (see
/// `system::files::check_private_dir`), naming `option`.
pub(super) fn check_private_dir(option: &'static str, dir: &Path) -> Result<(), ConfigError> {
    crate::system::files::check_private_dir(dir).map_err(|reason| ConfigError::Invalid {
        option,
        reason: format!("{reason}; shuck writes there as root, so it must be root's alone"),
    })
}

/// A bare port is loopback's; anything else as the operator names it.
fn listen_addr(spec: &str) -> Result<SocketAddr, ConfigError> {
    if let Ok(port) = spec.trim().parse::<u16>() {
        if port == 0 {
            return Err(ConfigError::BadAddress {
                option: "--admin-listen",
                value: spec.into(),
                reason: "the port must be a number from 1 to 65535".into(),
            });
        }
        return Ok(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port));
    }
    let ep = Endpoint::parse("--admin-listen", spec)?;
    let addrs = ep.listen_addrs("--admin-listen")?;
    addrs
        .first()
        .copied()
        .ok_or_else(|| ConfigError::BadAddress {
            option: "--admin-listen",
            value: spec.into(),
            reason: "no address".into(),
        })
}

/// The token: the file's first line, at least 16 characters, in a file only its owner
/// may read.
fn token(file: &Path) -> Result<String, ConfigError> {
    use std::os::unix::fs::PermissionsExt;
    let bad = |reason: String| ConfigError::Invalid {
        option: "--admin-token-file",
        reason: format!("{}: {reason}", file.display()),
    };
    let meta = std::fs::metadata(file).map_err(|e| bad(e.to_string()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(bad(format!(
            "mode {:o}: others may read the token; chmod 600 it",
            meta.permissions().mode() & 0o777
        )));
    }
    let text =
        crate::system::files::read(file, 4096, "a token file").map_err(|e| bad(e.to_string()))?;
    let text = String::from_utf8(text).map_err(|_| bad("not UTF-8 text".into()))?;
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.len() < 16 || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(
            "the token (its first line) must be at least 16 printable characters without spaces"
                .into(),
        ));
    }
    Ok(token)
}
