//! sd_notify without libsystemd: one datagram to `$NOTIFY_SOCKET` per state change, so a
//! `Type=notify` unit knows when shuck serves, reloads and stops.

use std::os::unix::net::UnixDatagram;

/// Sends `state` (e.g. `READY=1`) when run under systemd; does nothing otherwise.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        // An abstract socket (systemd's usual choice).
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|addr| sock.send_to_addr(state.as_bytes(), &addr))
    } else {
        sock.send_to(state.as_bytes(), &path)
    };
    if let Err(e) = sent {
        tracing::debug!(name: "sd_notify_failed", error = %e, "sd_notify failed");
    }
}

/// `RELOADING=1` with the monotonic time systemd asks for (systemd 253 and later).
pub fn reloading() {
    let usec = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1000)
        .unwrap_or(0);
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
}
