//! The replication socket: one UDP socket, bound to `--shared-cache-listen`, that receives
//! from and sends to every peer; multicast groups among the peers are joined on the
//! `--shared-cache-if` interface.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};

use socket2::{Domain, InterfaceIndexOrAddress, Protocol, Socket, Type};

use super::{MulticastIf, SyncError};

/// Kernel buffer asked for: a burst of session dumps must not overflow it.
const RCVBUF: usize = 4 << 20;
const SNDBUF: usize = 1 << 20;

/// Binds the socket and joins the multicast groups among `peers`.
pub fn open(
    listen: SocketAddr,
    peers: &[SocketAddr],
    iface: Option<&MulticastIf>,
) -> Result<UdpSocket, SyncError> {
    let sys = |what: &'static str| {
        move |source| SyncError::Socket {
            what,
            addr: listen,
            source,
        }
    };
    let sock = Socket::new(
        Domain::for_address(listen),
        Type::DGRAM,
        Some(Protocol::UDP),
    )
    .map_err(sys("create"))?;
    if listen.is_ipv6() {
        // `[*]` with IPv4 peers too: one dual-stack socket.
        sock.set_only_v6(false).map_err(sys("set IPV6_V6ONLY on"))?;
    }
    // Best effort: the kernel caps these at its own maximum.
    let _ = sock.set_recv_buffer_size(RCVBUF);
    let _ = sock.set_send_buffer_size(SNDBUF);
    sock.bind(&listen.into())
        .map_err(|source| SyncError::Bind {
            addr: listen,
            source,
        })?;

    let groups: Vec<IpAddr> = peers
        .iter()
        .map(SocketAddr::ip)
        .filter(IpAddr::is_multicast)
        .collect();
    if !groups.is_empty() {
        let index = match iface {
            Some(i) => Some(interface(&i.name)?),
            None => None,
        };
        for group in groups {
            join(&sock, group, index.as_ref(), iface, listen)?;
        }
    }
    Ok(sock.into())
}

/// An interface's index and first IPv4 address.
struct Iface {
    index: u32,
    v4: Option<Ipv4Addr>,
}

fn interface(name: &str) -> Result<Iface, SyncError> {
    let bad = |reason: String| SyncError::Interface {
        name: name.to_owned(),
        reason,
    };
    let all = if_addrs::get_if_addrs().map_err(|e| bad(e.to_string()))?;
    let mine: Vec<_> = all.iter().filter(|i| i.name == name).collect();
    let Some(first) = mine.first() else {
        let mut names: Vec<&str> = all.iter().map(|i| i.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        return Err(bad(format!(
            "no such interface with an address (have: {})",
            names.join(", ")
        )));
    };
    let index = first
        .index
        .ok_or_else(|| bad("the system gives no interface index".into()))?;
    let v4 = mine.iter().find_map(|i| match i.ip() {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(_) => None,
    });
    Ok(Iface { index, v4 })
}

fn join(
    sock: &Socket,
    group: IpAddr,
    iface: Option<&Iface>,
    spec: Option<&MulticastIf>,
    listen: SocketAddr,
) -> Result<(), SyncError> {
    let fail = |source| SyncError::Join { group, source };
    let ttl = spec.map_or(1, |s| s.ttl);
    match (group, listen) {
        (IpAddr::V4(g), SocketAddr::V4(_)) => {
            let on = iface.map_or(InterfaceIndexOrAddress::Index(0), |i| {
                InterfaceIndexOrAddress::Index(i.index)
            });
            sock.join_multicast_v4_n(&g, &on).map_err(fail)?;
            if let Some(i) = iface {
                let addr = i.v4.ok_or_else(|| SyncError::Interface {
                    name: spec.map(|s| s.name.clone()).unwrap_or_default(),
                    reason: format!("has no IPv4 address to send to {g} from"),
                })?;
                sock.set_multicast_if_v4(&addr).map_err(fail)?;
            }
            sock.set_multicast_ttl_v4(ttl).map_err(fail)?;
        }
        (IpAddr::V6(g), SocketAddr::V6(_)) => {
            let index = iface.map_or(0, |i| i.index);
            sock.join_multicast_v6(&g, index).map_err(fail)?;
            if index != 0 {
                sock.set_multicast_if_v6(index).map_err(fail)?;
            }
            sock.set_multicast_hops_v6(ttl).map_err(fail)?;
        }
        _ => {
            return Err(SyncError::Join {
                group,
                source: std::io::Error::other(format!(
                    "the listen address {listen} is of the other IP family"
                )),
            })
        }
    }
    Ok(())
}

/// The address to send to from a socket bound to `listen`: IPv4 peers are reached from a
/// dual-stack IPv6 socket through their mapped address.
pub fn destination(listen: SocketAddr, peer: SocketAddr) -> SocketAddr {
    match (listen, peer) {
        (SocketAddr::V6(_), SocketAddr::V4(p)) => {
            SocketAddr::new(IpAddr::V6(p.ip().to_ipv6_mapped()), p.port())
        }
        _ => peer,
    }
}
