//! Counts of what QUIC discarded, by reason (`shuck_quic_dropped_total{reason}`): quinn's
//! own reasons through the drop hook of shuck's quinn-proto patch, and the kernel's count
//! of datagrams the worker's UDP socket had no room for.

use std::net::UdpSocket;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::counters::{WorkerCounters, QUIC_DROPS};

// The labels are quinn-proto's reasons in their order, then the kernel's one.
const _: () = assert!(QUIC_DROPS.len() == quinn_proto::DropReason::ALL.len() + 1);

/// The endpoint's drop hook: bumps the worker's counter of the reason. quinn may call it
/// from any thread of the runtime, so the counters are added to atomically.
pub fn hook(counters: Arc<WorkerCounters>) -> quinn_proto::DropHook {
    Arc::new(move |reason: quinn_proto::DropReason| {
        if let Some(c) = counters.http.h3.dropped.get(reason as usize) {
            c.fetch_add(1, Relaxed);
        }
    })
}

/// The kernel's drops on one worker's UDP socket (a full receive buffer), added to the
/// worker's `socket_buffer` counter as they grow.
pub struct SocketDrops {
    socket: UdpSocket,
    seen: u32,
}

impl SocketDrops {
    /// Watches `socket` (a duplicate of the endpoint's descriptor); `None` when it cannot
    /// be duplicated or read (nothing is counted then).
    pub fn watch(socket: &UdpSocket) -> Option<Self> {
        let socket = socket.try_clone().ok()?;
        let seen = kernel_drops(&socket)?;
        Some(SocketDrops { socket, seen })
    }

    /// Adds the drops since the last look to `counters`.
    pub fn update(&mut self, counters: &WorkerCounters) {
        if let Some(now) = kernel_drops(&self.socket) {
            // The kernel's counter is 32 bits and wraps.
            let new = now.wrapping_sub(self.seen);
            self.seen = now;
            let i = QUIC_DROPS.len() - 1;
            counters.http.h3.dropped[i].fetch_add(u64::from(new), Relaxed);
        }
    }
}

/// `SO_MEMINFO`'s drop count of a socket: datagrams the kernel discarded for it. Neither
/// socket2, nix nor rustix wraps the option.
#[allow(unsafe_code)]
fn kernel_drops(socket: &UdpSocket) -> Option<u32> {
    use std::os::fd::AsRawFd;
    let mut info = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: the descriptor is open for the whole call (borrowed from `socket`); the kernel
    // writes at most `len` bytes into `info`, a live array of exactly that size, and sets
    // `len` to what it wrote, which is checked before the drops are read.
    let r = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    let wanted = std::mem::size_of_val(&info) as libc::socklen_t;
    (r == 0 && len >= wanted).then_some(info[libc::SK_MEMINFO_DROPS as usize])
}
