//! One connection of the io_uring prototype as a state machine: each completion moves it on
//! and queues the operations that follow. rustls's buffered connection does the TLS; the
//! buffers the ring reads from or writes to belong to the connection, which the ring loop
//! frees only once none of its operations is in flight.

use std::io::{Read, Write};
use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types};
use rustls::{HandshakeKind, ServerConnection};

use super::op::{tag, Op};

/// Bytes asked of one receive: a whole TLS record with its header and tag.
const RECV: usize = 16 * 1024 + 512;
/// Bytes waiting for a busy send past which the other side is not read further.
const HIGH_WATER: usize = 16 * 1024;

/// Bytes on their way to one socket: `sending` is what the ring holds (never touched while
/// a send is in flight), `next` gathers what comes meanwhile.
#[derive(Default)]
struct Out {
    sending: Vec<u8>,
    sent: usize,
    busy: bool,
    next: Vec<u8>,
}

impl Out {
    /// Nothing in flight and nothing waiting.
    fn idle(&self) -> bool {
        !self.busy && self.next.is_empty()
    }

    /// Makes what waits the send to start, when none is in flight; true when there is one.
    fn start(&mut self) -> bool {
        if self.busy || self.next.is_empty() {
            return false;
        }
        // `sending` was emptied when its send completed: the swap keeps both capacities.
        std::mem::swap(&mut self.sending, &mut self.next);
        self.sent = 0;
        self.busy = true;
        true
    }
}

/// A receive into `buf`, which stays untouched until its completion.
fn recv(fd: RawFd, buf: &mut [u8]) -> squeue::Entry {
    opcode::Recv::new(types::Fd(fd), buf.as_mut_ptr(), buf.len() as u32).build()
}

/// Where the connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// TLS handshake under way.
    Handshake,
    /// Handshake done, backend socket being made and connected.
    Connecting,
    /// Both sides up: bytes relayed.
    Relay,
}

/// One client connection.
pub(super) struct Conn {
    slot: usize,
    tls: ServerConnection,
    client: RawFd,
    backend: Option<RawFd>,
    /// Read by the kernel while Connect is in flight: boxed so that it never moves.
    backend_addr: Box<socket2::SockAddr>,
    /// NODELAY's value, read by the kernel while NoDelay is in flight.
    one: Box<libc::c_int>,
    crecv: Box<[u8]>,
    brecv: Box<[u8]>,
    to_client: Out,
    to_backend: Out,
    recv_client: bool,
    recv_backend: bool,
    phase: Phase,
    /// Operations submitted and not completed.
    inflight: u32,
    /// No more bytes will come from the client (end of stream or close_notify).
    client_done: bool,
    /// No more bytes will come from the backend.
    backend_done: bool,
    shut_backend: bool,
    /// Close once everything queued for the client has left (an alert, close_notify).
    ending: bool,
    /// Closed: waiting for the operations in flight to complete.
    closed: bool,
    /// Ticks (seconds) when accepted and when last read from.
    pub(super) born: u64,
    pub(super) active: u64,
}

impl Conn {
    /// A connection accepted as `client`, in `slot`, to be served with `tls`, relayed to
    /// `backend_addr`; queues its first receive.
    pub(super) fn new(
        slot: usize,
        client: RawFd,
        tls: ServerConnection,
        backend_addr: &socket2::SockAddr,
        now: u64,
        q: &mut Vec<squeue::Entry>,
    ) -> Box<Conn> {
        let mut c = Box::new(Conn {
            slot,
            tls,
            client,
            backend: None,
            backend_addr: Box::new(backend_addr.clone()),
            one: Box::new(1),
            crecv: vec![0; RECV].into_boxed_slice(),
            brecv: vec![0; RECV].into_boxed_slice(),
            to_client: Out::default(),
            to_backend: Out::default(),
            recv_client: false,
            recv_backend: false,
            phase: Phase::Handshake,
            inflight: 0,
            client_done: false,
            backend_done: false,
            shut_backend: false,
            ending: false,
            closed: false,
            born: now,
            active: now,
        });
        c.arm_client(q);
        c
    }

    /// True once closed with nothing in flight: the loop may free it.
    pub(super) fn finished(&self) -> bool {
        self.closed && self.inflight == 0
    }

    /// Where it is.
    pub(super) fn phase(&self) -> Phase {
        self.phase
    }

    /// True once closed.
    pub(super) fn is_closed(&self) -> bool {
        self.closed
    }

    fn push(&mut self, q: &mut Vec<squeue::Entry>, op: Op, e: squeue::Entry) {
        self.inflight += 1;
        q.push(e.user_data(tag(self.slot, op)));
    }

    fn arm_client(&mut self, q: &mut Vec<squeue::Entry>) {
        if self.recv_client || self.client_done || self.closed || self.ending {
            return;
        }
        if self.to_backend.next.len() >= HIGH_WATER {
            return;
        }
        self.recv_client = true;
        let e = recv(self.client, &mut self.crecv);
        self.push(q, Op::ClientRecv, e);
    }

    fn arm_backend(&mut self, q: &mut Vec<squeue::Entry>) {
        let Some(fd) = self.backend else { return };
        if self.recv_backend || self.backend_done || self.closed || self.ending {
            return;
        }
        if self.phase != Phase::Relay || self.to_client.next.len() >= HIGH_WATER {
            return;
        }
        self.recv_backend = true;
        let e = recv(fd, &mut self.brecv);
        self.push(q, Op::BackendRecv, e);
    }

    /// Starts a send of what waits for the client, when none is in flight.
    fn flush_client(&mut self, q: &mut Vec<squeue::Entry>) {
        while self.tls.wants_write() {
            if self.tls.write_tls(&mut self.to_client.next).is_err() {
                break;
            }
        }
        if !self.closed && self.to_client.start() {
            self.send(q, Op::ClientSend);
        }
    }

    /// Starts a send of what waits for the backend, once connected.
    fn flush_backend(&mut self, q: &mut Vec<squeue::Entry>) {
        if self.phase != Phase::Relay || self.closed {
            return;
        }
        if self.to_backend.start() {
            self.send(q, Op::BackendSend);
        } else if self.to_backend.idle() && self.client_done && !self.shut_backend {
            // The client's end of stream, passed on once its bytes have left.
            self.shut_backend = true;
            if let Some(fd) = self.backend {
                let e = opcode::Shutdown::new(types::Fd(fd), libc::SHUT_WR).build();
                self.push(q, Op::Shutdown, e);
            }
        }
    }

    /// Queues the send of the rest of `sending` for `op`'s side.
    fn send(&mut self, q: &mut Vec<squeue::Entry>, op: Op) {
        let (fd, out) = match op {
            Op::ClientSend => (self.client, &self.to_client),
            _ => match self.backend {
                Some(fd) => (fd, &self.to_backend),
                None => return,
            },
        };
        let rest = &out.sending[out.sent..];
        let e = opcode::Send::new(types::Fd(fd), rest.as_ptr(), rest.len() as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build();
        self.push(q, op, e);
    }

    /// Handles the completion of `op` with result `res`; returns the handshake's kind when
    /// this completion finished it.
    pub(super) fn complete(
        &mut self,
        op: Op,
        res: i32,
        now: u64,
        q: &mut Vec<squeue::Entry>,
    ) -> Option<HandshakeKind> {
        self.inflight = self.inflight.saturating_sub(1);
        if self.closed {
            if op == Op::Socket && res >= 0 {
                // Made while the connection was closing: close it too.
                self.push(q, Op::Close, opcode::Close::new(types::Fd(res)).build());
            }
            return None;
        }
        let mut done = None;
        match op {
            Op::ClientRecv => {
                self.recv_client = false;
                self.active = now;
                match usize::try_from(res) {
                    Err(_) => return self.abort(q),
                    Ok(0) => {
                        self.client_done = true;
                        if self.phase == Phase::Handshake {
                            return self.abort(q);
                        }
                    }
                    Ok(n) => done = self.received_from_client(n, q),
                }
                self.flush_client(q);
                self.flush_backend(q);
                self.arm_client(q);
            }
            Op::BackendRecv => {
                self.recv_backend = false;
                self.active = now;
                match usize::try_from(res) {
                    Err(_) => return self.abort(q),
                    Ok(0) => {
                        self.backend_done = true;
                        self.tls.send_close_notify();
                        self.ending = true;
                    }
                    Ok(n) => {
                        if self.tls.writer().write_all(&self.brecv[..n]).is_err() {
                            return self.abort(q);
                        }
                    }
                }
                self.flush_client(q);
                self.arm_backend(q);
            }
            Op::ClientSend | Op::BackendSend => {
                let n = match usize::try_from(res) {
                    Ok(n) if n > 0 => n,
                    _ => return self.abort(q),
                };
                let out = if op == Op::ClientSend {
                    &mut self.to_client
                } else {
                    &mut self.to_backend
                };
                out.sent += n;
                if out.sent < out.sending.len() {
                    self.send(q, op);
                    return None;
                }
                out.busy = false;
                out.sending.clear();
                if op == Op::ClientSend {
                    self.flush_client(q);
                    self.arm_backend(q);
                } else {
                    self.flush_backend(q);
                    self.arm_client(q);
                }
            }
            Op::Socket => {
                let fd: RawFd = res;
                if fd < 0 {
                    return self.abort(q);
                }
                self.backend = Some(fd);
                // Without it, small writes wait for ACKs (the seeds' 40 ms per request).
                let one: *const libc::c_int = &*self.one;
                let e = opcode::SetSockOpt::new(
                    types::Fd(fd),
                    libc::IPPROTO_TCP as u32,
                    libc::TCP_NODELAY as u32,
                    one.cast(),
                    std::mem::size_of::<libc::c_int>() as u32,
                )
                .build();
                self.push(q, Op::NoDelay, e);
                let e = opcode::Connect::new(
                    types::Fd(fd),
                    self.backend_addr.as_ptr().cast(),
                    self.backend_addr.len(),
                )
                .build();
                self.push(q, Op::Connect, e);
            }
            Op::Connect => {
                if res < 0 {
                    tracing::debug!(
                        name: "uring_connect_failed",
                        error = %std::io::Error::from_raw_os_error(-res),
                        "io_uring prototype: backend connect failed",
                    );
                    return self.abort(q);
                }
                self.phase = Phase::Relay;
                self.flush_backend(q);
                self.arm_backend(q);
            }
            Op::NoDelay | Op::Shutdown | Op::Cancel | Op::Close | Op::Accept | Op::Tick => {}
        }
        if self.ending && self.to_client.idle() {
            self.close(q);
        }
        done
    }

    /// Feeds `n` received bytes to rustls, moves the plaintext toward the backend and
    /// starts the backend's connect when the handshake completes.
    fn received_from_client(
        &mut self,
        n: usize,
        q: &mut Vec<squeue::Entry>,
    ) -> Option<HandshakeKind> {
        let mut data = &self.crecv[..n];
        while !data.is_empty() {
            match self.tls.read_tls(&mut data) {
                // After the client's close_notify rustls takes nothing more: what follows
                // it is dropped, not read again forever.
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => {
                    self.ending = true;
                    return None;
                }
            }
            match self.tls.process_new_packets() {
                Ok(state) => {
                    if state.plaintext_bytes_to_read() > 0 {
                        // WouldBlock once drained; whatever was read is kept.
                        let _ = self.tls.reader().read_to_end(&mut self.to_backend.next);
                    }
                    if state.peer_has_closed() {
                        self.client_done = true;
                    }
                }
                Err(_) => {
                    // rustls queued the alert: it leaves before the close.
                    self.ending = true;
                    return None;
                }
            }
        }
        if self.phase == Phase::Handshake && !self.tls.is_handshaking() {
            self.phase = Phase::Connecting;
            let domain = match self.backend_addr.is_ipv6() {
                true => libc::AF_INET6,
                false => libc::AF_INET,
            };
            let e = opcode::Socket::new(domain, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).build();
            self.push(q, Op::Socket, e);
            return Some(self.tls.handshake_kind().unwrap_or(HandshakeKind::Full));
        }
        None
    }

    /// Ends the connection now: receives still waiting are cancelled, both sockets closed.
    pub(super) fn abort(&mut self, q: &mut Vec<squeue::Entry>) -> Option<HandshakeKind> {
        self.close(q);
        None
    }

    fn close(&mut self, q: &mut Vec<squeue::Entry>) {
        if self.closed {
            return;
        }
        self.closed = true;
        for (waiting, op) in [
            (self.recv_client, Op::ClientRecv),
            (self.recv_backend, Op::BackendRecv),
        ] {
            if waiting {
                let e = opcode::AsyncCancel::new(tag(self.slot, op)).build();
                self.push(q, Op::Cancel, e);
            }
        }
        let client = self.client;
        self.push(q, Op::Close, opcode::Close::new(types::Fd(client)).build());
        if let Some(fd) = self.backend.take() {
            self.push(q, Op::Close, opcode::Close::new(types::Fd(fd)).build());
        }
    }
}
