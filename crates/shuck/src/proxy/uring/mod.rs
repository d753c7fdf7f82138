//! A prototype of an io_uring data path (issue 26, point 6), built with `--features
//! io-uring`: a plain-relay frontend served from one ring on a thread of its own per worker
//! thread. Accept (multishot), receives, sends, the backend's socket and connect, shutdown
//! and close are all submissions, so that one `io_uring_enter` carries the work of every
//! connection ready at that moment instead of a system call each. It exists to measure what
//! such a path would save against the epoll one (bench/RESULTS.md); it serves only what the
//! measurements need, and a frontend it cannot serve stays on the epoll path.
//!
//! Left out by design: the PROXY protocol both ways, `--http`, `--max-conns`, more than
//! one backend server or a UNIX-socket one, maxconn queues, down-marking, the shared store
//! and per-certificate client verification. Timeouts are checked once a second.

mod conn;
mod op;

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::counters::{FailReason, Failure, WorkerCounters};
use crate::edge::{preamble::Preamble, FrontendState, ProxyState};
use conn::{Conn, Phase};
use op::{tag, untag, Op};

/// Submission queue entries; completions get four times as many.
const ENTRIES: u32 = 1024;
/// The slot of the loop's own operations (accept, tick), which no connection reaches.
const LOOP: usize = (u64::MAX >> 8) as usize;

/// Why the prototype cannot serve this configuration, or the backend it would serve.
pub fn backend_for(state: &ProxyState, frontend: &FrontendState) -> Result<SocketAddr, String> {
    let tls = frontend.tls.load();
    let routing = state.routing.load();
    let refused = [
        (state.proxy_proxy, "--proxy-proxy"),
        (
            routing.backends()[0].preamble != Preamble::None,
            "a backend preamble",
        ),
        (routing.backends().len() > 1, "named backends"),
        (state.http.is_some(), "--http"),
        (state.conn_limit.is_some(), "--max-conns"),
        (tls.store.is_some(), "--shared-store"),
        (!tls.by_cert.is_empty(), "a certificate's own client-verify"),
    ];
    if let Some((_, what)) = refused.iter().find(|(on, _)| *on) {
        return Err(format!("{what} is not in the prototype"));
    }
    match routing.backends()[0].pool.servers() {
        [one] if !one.has_maxconn() => match one.tcp_addrs() {
            Some(addrs) => addrs
                .first()
                .copied()
                .ok_or_else(|| "the backend has no address".to_string()),
            None => Err("a UNIX-socket backend is not in the prototype".into()),
        },
        _ => Err("only one backend server without maxconn is in the prototype".into()),
    }
}

/// Serves `listener` for `frontend` until `stop` is set, then lets live connections finish
/// for up to `drain`. Runs on the calling thread.
pub fn serve(
    listener: std::net::TcpListener,
    frontend: Arc<FrontendState>,
    backend: SocketAddr,
    counters: Arc<WorkerCounters>,
    limits: crate::config::Limits,
    stop: Arc<AtomicBool>,
    drain: Duration,
) -> io::Result<()> {
    let mut ring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(ENTRIES * 4)
        .build(ENTRIES)
        .or_else(|_| IoUring::builder().setup_cqsize(ENTRIES * 4).build(ENTRIES))?;
    let mut l = Loop {
        conns: Vec::new(),
        free: Vec::new(),
        live: 0,
        queue: Vec::with_capacity(64),
        backend: socket2::SockAddr::from(backend),
        frontend,
        counters,
        limits,
        now: 0,
        tick: Box::new(types::Timespec::new().sec(1)),
    };
    let accept = opcode::AcceptMulti::new(types::Fd(listener.as_raw_fd()))
        .flags(libc::SOCK_CLOEXEC)
        .build()
        .user_data(tag(LOOP, Op::Accept));
    let tick = opcode::Timeout::new(&*l.tick)
        .flags(types::TimeoutFlags::MULTISHOT)
        .build()
        .user_data(tag(LOOP, Op::Tick));
    l.queue.push(accept.clone());
    l.queue.push(tick.clone());
    let mut accept_paused = false;
    let mut stopping: Option<Instant> = None;
    let mut completions: Vec<(u64, i32, u32)> = Vec::with_capacity(256);
    loop {
        l.submit(&mut ring)?;
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => return Err(e),
        }
        completions.extend(
            ring.completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        for (data, res, flags) in completions.drain(..) {
            let Some((slot, op)) = untag(data) else {
                continue;
            };
            match op {
                Op::Accept => {
                    // Ended (by an error such as EMFILE, or the cancel at stop): again at
                    // once after a connection, at the next tick after an error.
                    if stopping.is_none() && !cqueue::more(flags) {
                        if res >= 0 {
                            l.queue.push(accept.clone());
                        } else {
                            accept_paused = true;
                        }
                    }
                    if res >= 0 {
                        l.accepted(res);
                    } else if res != -libc::ECANCELED {
                        tracing::debug!(
                            name: "uring_accept_failed",
                            error = %io::Error::from_raw_os_error(-res),
                            "io_uring prototype: accept failed",
                        );
                    }
                }
                Op::Tick => {
                    if !cqueue::more(flags) {
                        l.queue.push(tick.clone());
                    }
                    if std::mem::take(&mut accept_paused) && stopping.is_none() {
                        l.queue.push(accept.clone());
                    }
                    l.now += 1;
                    l.sweep(stopping.is_some_and(|t| t.elapsed() >= drain));
                    if stopping.is_none() && stop.load(Ordering::Relaxed) {
                        stopping = Some(Instant::now());
                        let e = opcode::AsyncCancel::new(tag(LOOP, Op::Accept)).build();
                        l.queue.push(e.user_data(tag(LOOP, Op::Cancel)));
                    }
                }
                _ if slot == LOOP => {}
                _ => l.complete(slot, op, res),
            }
        }
        if let Some(since) = stopping {
            if l.live == 0 {
                return Ok(());
            }
            if since.elapsed() >= drain + Duration::from_secs(2) {
                // Operations still in flight may write into their connections' buffers:
                // those are leaked with the ring's thread rather than freed under them.
                for c in l.conns.drain(..).flatten() {
                    Box::leak(c);
                }
                return Ok(());
            }
        }
    }
}

/// The ring's connections and what they share.
struct Loop {
    /// Slots; a slot's index is in every `user_data` of its connection.
    conns: Vec<Option<Box<Conn>>>,
    free: Vec<usize>,
    live: usize,
    /// Submissions built by this round's completions.
    queue: Vec<squeue::Entry>,
    backend: socket2::SockAddr,
    frontend: Arc<FrontendState>,
    counters: Arc<WorkerCounters>,
    limits: crate::config::Limits,
    /// Seconds since the start, by the tick.
    now: u64,
    /// Read by the kernel for the tick's whole life: boxed so that it never moves.
    tick: Box<types::Timespec>,
}

impl Loop {
    /// Moves this round's submissions into the ring, submitting whenever it is full.
    #[allow(unsafe_code)]
    fn submit(&mut self, ring: &mut IoUring) -> io::Result<()> {
        for e in self.queue.drain(..) {
            loop {
                // SAFETY: every entry was built by `Conn` or this loop. The buffers,
                // addresses and option values they point to live in a `Box` owned by the
                // connection of the entry's slot (or by `Loop`: the tick), which is freed
                // only when none of its operations is in flight (`Conn::finished`) and
                // otherwise leaked; a receive's or send's buffer is not touched by us
                // between the submission and its completion (`Out::busy`, `recv_*`).
                if unsafe { ring.submission().push(&e) }.is_ok() {
                    break;
                }
                ring.submit()?;
            }
        }
        Ok(())
    }

    fn accepted(&mut self, fd: i32) {
        let fe = self.counters.frontend(self.frontend.slot);
        WorkerCounters::bump(&fe.accepted);
        let tls = self.frontend.tls.load();
        let Ok(session) = rustls::ServerConnection::new(tls.config.clone()) else {
            let e = opcode::Close::new(types::Fd(fd)).build();
            self.queue.push(e.user_data(tag(LOOP, Op::Close)));
            return;
        };
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        let c = Conn::new(slot, fd, session, &self.backend, self.now, &mut self.queue);
        self.conns[slot] = Some(c);
        self.live += 1;
    }

    fn complete(&mut self, slot: usize, op: Op, res: i32) {
        let Some(Some(c)) = self.conns.get_mut(slot) else {
            return;
        };
        if let Some(kind) = c.complete(op, res, self.now, &mut self.queue) {
            self.counters
                .handshake_done(kind == rustls::HandshakeKind::Resumed);
        }
        if c.finished() {
            let fe = self.counters.frontend(self.frontend.slot);
            WorkerCounters::bump(&fe.closed);
            self.conns[slot] = None;
            self.free.push(slot);
            self.live -= 1;
        }
    }

    /// Closes connections past their handshake or idle timeout (all of them once the
    /// drain is over).
    fn sweep(&mut self, all: bool) {
        let handshake = self.limits.handshake_timeout.as_secs().max(1);
        let connect = handshake + self.limits.connect_timeout.as_secs().max(1);
        let idle = self.limits.idle_timeout.as_secs().max(1);
        for c in self.conns.iter_mut().flatten() {
            if c.is_closed() {
                continue;
            }
            let late = match c.phase() {
                Phase::Handshake => self.now - c.born > handshake,
                Phase::Connecting => self.now - c.born > connect,
                Phase::Relay => self.now - c.active > idle,
            };
            if late || all {
                if c.phase() == Phase::Handshake {
                    self.counters.failed(Failure::Reason(FailReason::Timeout));
                }
                c.abort(&mut self.queue);
            }
        }
    }
}
