//! `--shared-cache-*`: session replication between hosts, checked into
//! [`sync::Settings`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use super::{endpoint, Cli, ConfigError, Endpoint};
use crate::session::sync;

/// The replication settings, or `None` when `--shared-cache-listen` is not given.
pub(super) fn settings(cli: &Cli) -> Result<Option<sync::Settings>, ConfigError> {
    let Some(listen) = &cli.shared_cache_listen else {
        if !cli.shared_cache_peer.is_empty() {
            return Err(ConfigError::Invalid {
                option: "--shared-cache-peer",
                reason:
                    "needs --shared-cache-listen (replication sends and receives on one socket)"
                        .into(),
            });
        }
        if cli.shared_cache_if.is_some()
            || (cli.shared_cache_key.is_some() && cli.shared_store.is_none())
        {
            tracing::warn!(
                name: "config_replication_unused",
                "--shared-cache-if and --shared-cache-key do nothing without --shared-cache-listen",
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
            name: "config_multicast_if_unused",
            "--shared-cache-if is for multicast, and no --shared-cache-peer is a multicast group",
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
