//! Every packet of a QUIC connection to the worker thread that owns it, also after the
//! client's address changed (NAT rebinding, migration), as nginx's `quic_bpf` does: each
//! worker thread has its own UDP socket in one `SO_REUSEPORT` group, the connection IDs a
//! worker issues carry its index (a random byte whose remainder by the number of workers is
//! the index), and a classic BPF program on the group sends each packet to the socket of
//! that remainder of its destination connection ID's first byte. A client's first packets
//! carry an ID of its own choosing: its remainder names a worker just as steadily, so all of
//! them reach the one that answers it.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

use quinn::{ConnectionId, ConnectionIdGenerator};
use socket2::{Domain, Protocol, Socket, Type};

/// Length of the connection IDs shuck issues.
pub const CID_LEN: usize = 8;

/// Most worker threads one group can steer between (an ID's first byte decides).
pub const MAX_WORKERS: usize = 128;

/// The connection IDs of worker `index` of `workers`.
#[derive(Debug, Clone, Copy)]
pub struct WorkerCids {
    index: u8,
    workers: u8,
}

impl WorkerCids {
    /// IDs for worker `index` (below `workers`, at most [`MAX_WORKERS`]).
    pub fn new(index: usize, workers: usize) -> Self {
        let workers = workers.clamp(1, MAX_WORKERS) as u8;
        WorkerCids {
            index: (index % usize::from(workers)) as u8,
            workers,
        }
    }

    /// The worker a connection ID's first byte steers to (what the BPF program computes).
    pub fn owner(first: u8, workers: usize) -> usize {
        usize::from(first) % workers.clamp(1, MAX_WORKERS)
    }
}

impl ConnectionIdGenerator for WorkerCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut id = [0u8; CID_LEN];
        // A failing RNG would leave zeros: the IDs still steer, they only correlate.
        let _ = aws_lc_rs::rand::fill(&mut id);
        // The first byte: random among those whose remainder is this worker's index.
        let (w, i) = (u16::from(self.workers), u16::from(self.index));
        let slots = (256 - i).div_ceil(w); // 1 to 256: how many bytes name this worker
        id[0] = ((u16::from(id[0]) % slots) * w + i) as u8;
        ConnectionId::new(&id)
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// The program: the first byte of the destination connection ID (offset 6 in a long
/// header: flags, version, ID length; 1 in a short one), modulo `workers`, is the index of
/// the socket in the group. A packet too short to hold one goes to the first socket.
fn program(workers: u32) -> Vec<libc::sock_filter> {
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let (ld_b, jset, ja, mod_k, ret_a) = (
        libc::BPF_LD | libc::BPF_B | libc::BPF_ABS,
        libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K,
        libc::BPF_JMP | libc::BPF_JA,
        libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K,
        libc::BPF_RET | libc::BPF_A,
    );
    vec![
        op(ld_b, 0, 0, 0),        // A = first byte
        op(jset, 0, 2, 0x80),     // long header?
        op(ld_b, 0, 0, 6),        //   A = DCID[0] of a long header
        op(ja, 0, 0, 1),          //
        op(ld_b, 0, 0, 1),        //   A = DCID[0] of a short header
        op(mod_k, 0, 0, workers), // A %= workers
        op(ret_a, 0, 0, 0),       // the socket's index in the group
    ]
}

/// `workers` UDP sockets on `addr`, one per worker thread, in one `SO_REUSEPORT` group
/// steered by connection ID (the group's order is the order they are bound in, which is
/// the order of the result).
pub fn bind(addr: SocketAddr, workers: usize) -> io::Result<Vec<UdpSocket>> {
    let workers = workers.clamp(1, MAX_WORKERS);
    // Refused when another socket has the port, as for TCP: SO_REUSEPORT would share it.
    new_socket(addr)?.bind(&addr.into())?;
    let mut out = Vec::with_capacity(workers);
    for _ in 0..workers {
        let s = new_socket(addr)?;
        s.set_reuse_port(true)?;
        s.bind(&addr.into())?;
        s.set_nonblocking(true)?;
        out.push(UdpSocket::from(s));
    }
    if let Some(first) = out.first() {
        attach(first, workers)?;
    }
    Ok(out)
}

/// Puts the steering program on the group `socket` belongs to.
pub fn attach(socket: &UdpSocket, workers: usize) -> io::Result<()> {
    let mut filter = program(workers.clamp(1, MAX_WORKERS) as u32);
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    nix::sys::socket::setsockopt(
        &socket.as_fd(),
        nix::sys::socket::sockopt::AttachReusePortCbpf,
        &prog,
    )
    .map_err(io::Error::from)
}

fn new_socket(addr: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        socket.set_only_v6(false)?;
    }
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_steer_to_their_worker() {
        for workers in [1, 2, 3, 7, 64, 128] {
            for index in 0..workers {
                let mut g = WorkerCids::new(index, workers);
                let mut firsts = std::collections::HashSet::new();
                for _ in 0..200 {
                    let id = g.generate_cid();
                    assert_eq!(id.len(), CID_LEN);
                    assert_eq!(
                        WorkerCids::owner(id[0], workers),
                        index,
                        "{workers} {index}"
                    );
                    firsts.insert(id[0]);
                }
                // Not one fixed byte (unless there is only one to choose).
                assert!(firsts.len() > 1 || workers == 128, "{workers} {index}");
            }
        }
    }
}
