//! `--shared-store*`: sessions and ticket keys in Redis, checked into [`store::Settings`].

use std::time::Duration;

use redis::IntoConnectionInfo;

use super::{Cli, ConfigError};
use crate::session::{store, sync};

/// Bound on the password and CA files, so that a wrong path cannot make shuck read a disk.
const MAX_FILE: u64 = 1024 * 1024;

/// The store's settings, or `None` without `--shared-store`.
pub(super) fn settings(cli: &Cli) -> Result<Option<store::Settings>, ConfigError> {
    let invalid = |option: &'static str, reason: String| ConfigError::Invalid { option, reason };
    let Some(url) = cli.shared_store.as_deref().filter(|u| !u.is_empty()) else {
        if cli.shared_store_ca.is_some() || cli.shared_store_auth_file.is_some() {
            tracing::warn!(
                name: "config_store_options_unused",
                "--shared-store-ca and --shared-store-auth-file do nothing without --shared-store",
            );
        }
        return Ok(None);
    };
    let bad_url = |reason: String| ConfigError::BadAddress {
        option: "--shared-store",
        value: url.to_owned(),
        reason,
    };
    let parsed = redis::parse_redis_url(url).ok_or_else(|| {
        bad_url("not a redis:// or rediss:// URL (expected redis://[USER@]HOST:PORT[/DB] or rediss://...)".into())
    })?;
    let tls = match parsed.scheme() {
        "redis" => false,
        "rediss" => true,
        other => {
            return Err(bad_url(format!(
                "the scheme {other}:// is not redis:// or rediss://"
            )))
        }
    };
    if parsed.password().is_some() {
        return Err(bad_url(
            "holds a password: put it in a file named by --shared-store-auth-file (a command line is visible to every user)".into(),
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad_url("names no host".into()));
    }
    if parsed.query().is_some() {
        return Err(bad_url("takes no ?parameters".into()));
    }
    let info = url
        .into_connection_info()
        .map_err(|e| bad_url(e.to_string()))?;
    let info = match &cli.shared_store_auth_file {
        Some(path) => {
            let text = crate::system::files::read_to_string(path, MAX_FILE, "a password file")
                .map_err(|e| {
                    invalid(
                        "--shared-store-auth-file",
                        format!("{}: {e}", path.display()),
                    )
                })?;
            let password = text.lines().next().unwrap_or("").trim();
            if password.is_empty() {
                return Err(invalid(
                    "--shared-store-auth-file",
                    format!(
                        "{}: its first line is empty; it holds the password",
                        path.display()
                    ),
                ));
            }
            let redis = info.redis_settings().clone().set_password(password);
            info.set_redis_settings(redis)
        }
        None => info,
    };
    let ca = match &cli.shared_store_ca {
        Some(_) if !tls => {
            return Err(invalid(
                "--shared-store-ca",
                "is for a rediss:// (TLS) store; the URL is redis://".into(),
            ))
        }
        Some(path) => Some(super::values::read_ca_file("--shared-store-ca", path)?),
        None => None,
    };
    let prefix = &cli.shared_store_prefix;
    if prefix.len() > 64 || prefix.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(invalid(
            "--shared-store-prefix",
            format!(
                "{prefix:?} must be at most 64 characters, without spaces or control characters"
            ),
        ));
    }
    if cli.shared_store_timeout.is_zero() || cli.shared_store_timeout > Duration::from_secs(1) {
        return Err(invalid(
            "--shared-store-timeout",
            "must be more than 0 and at most 1s (it is added to a handshake)".into(),
        ));
    }
    let Some(key_path) = &cli.shared_cache_key else {
        return Err(invalid(
            "--shared-store",
            "needs --shared-cache-key FILE: every value stored is sealed under the farm key (make one with: head -c 32 /dev/urandom | base64)".into(),
        ));
    };
    let key = sync::psk::load(key_path)?;
    Ok(Some(store::Settings {
        url: url.to_owned(),
        connection: info,
        ca,
        prefix: prefix.clone(),
        timeout: cli.shared_store_timeout,
        key,
    }))
}
