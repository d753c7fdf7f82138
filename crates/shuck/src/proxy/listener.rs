//! The listener stage: one SO_REUSEPORT socket per worker and frontend, bound by the main
//! thread (so that a taken port is reported before anything serves), and the accept loop
//! that each worker runs on its own sockets.

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;

use std::sync::Arc;

use super::conn;
use crate::edge::{FrontendState, Worker};
use crate::shutdown::Shutdown;

/// How long a worker pauses accepting when the system is out of descriptors or buffers:
/// short, because it keeps serving the connections it has meanwhile.
const ACCEPT_BACKOFF: Duration = crate::backend::SHORTAGE_BACKOFF;

/// Checks that no other socket holds `addr`. SO_REUSEPORT would otherwise let shuck share a
/// port with another process of the same user without a word.
pub fn check_free(addr: SocketAddr) -> io::Result<()> {
    let probe = new_socket(addr)?;
    probe.bind(&addr.into())
}

/// How listening sockets are made.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The listen backlog.
    pub backlog: u32,
    /// Accept TCP Fast Open (data in the SYN), with a queue as long as the backlog.
    pub fastopen: bool,
    /// Wake the accept loop only for connections whose first bytes arrived, waiting for
    /// them at most this long (TCP_DEFER_ACCEPT, whole seconds).
    pub defer_accept: Option<Duration>,
    /// TCP keepalive idle time of client connections (`-k`).
    pub keepalive: Option<Duration>,
}

/// A listening socket for one worker on `addr`.
pub fn bind(addr: SocketAddr, options: Options) -> io::Result<std::net::TcpListener> {
    let Options {
        backlog,
        fastopen,
        defer_accept,
        keepalive,
    } = options;
    let socket = new_socket(addr)?;
    socket.set_reuse_port(true)?;
    set_client_options(&socket, keepalive)?;
    if fastopen {
        // A queue of as many pending Fast Open connections as the backlog.
        let qlen = libc::c_int::try_from(backlog).unwrap_or(libc::c_int::MAX);
        set_tcp_option(&socket, libc::TCP_FASTOPEN, qlen)?;
    }
    if let Some(wait) = defer_accept {
        let secs = libc::c_int::try_from(wait.as_secs().max(1)).unwrap_or(libc::c_int::MAX);
        set_tcp_option(&socket, libc::TCP_DEFER_ACCEPT, secs)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// What every client connection needs, set once on the listener, whose accepted sockets
/// inherit it on Linux (the kernel copies the listener's socket and starts the keepalive
/// timer of a copy that has SO_KEEPALIVE): no Nagle, so small answers do not wait for an
/// ACK, and `-k`'s keepalive, so that dead clients are eventually noticed. Two to three
/// system calls a connection fewer than setting them on each. Also applied to listeners
/// taken from systemd or a previous binary.
pub fn set_client_options(socket: &Socket, keepalive: Option<Duration>) -> io::Result<()> {
    socket.set_tcp_nodelay(true)?;
    if let Some(idle) = keepalive {
        socket.set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(idle))?;
    }
    Ok(())
}

/// An integer option of the TCP level on a listener: `TCP_FASTOPEN` (hitch's
/// `tcp-fastopen`, the queue length) and `TCP_DEFER_ACCEPT` (`--defer-accept`, seconds).
/// Neither socket2 nor nix wraps these for listeners.
#[allow(unsafe_code)]
fn set_tcp_option(socket: &Socket, option: libc::c_int, value: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for the whole call (borrowed from `socket`), and the
    // option value is a pointer to a live `c_int` with its exact size as the length, which
    // is what the kernel reads for both options; nothing is written back.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            option,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn new_socket(addr: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        // `[*]` means every address: take IPv4 clients on the IPv6 socket too.
        socket.set_only_v6(false)?;
    }
    Ok(socket)
}

/// Counts a running accept loop in its worker's `accepting` gauge while it lives, so that a
/// handover knows when no more connection can be accepted.
struct Accepting<'a>(&'a crate::counters::WorkerCounters);

impl<'a> Accepting<'a> {
    fn new(c: &'a crate::counters::WorkerCounters) -> Self {
        c.accepting
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Accepting(c)
    }
}

impl Drop for Accepting<'_> {
    fn drop(&mut self) {
        self.0
            .accepting
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Accepts connections on `listener` until shutdown, spawning one task per connection.
pub async fn accept_loop(
    listener: TcpListener,
    frontend: Arc<FrontendState>,
    worker: Rc<Worker>,
    mut shutdown: Shutdown,
    mut stop: Shutdown,
) {
    let _accepting = Accepting::new(&worker.counters);
    let local = listener.local_addr().ok();
    let mut exhausted_logged = false;
    // `--client-refuse drop`: the kernel's filter of refused clients, made again when
    // what it holds changes or a shunned client's time is over.
    let clients = worker.state.clients.clone();
    let mut filters_changed = clients.watch();
    let mut refilter_at = if clients.drops() {
        refilter(&listener, &frontend, &clients)
    } else {
        None
    };
    loop {
        let permit = match &worker.state.conn_limit {
            None => None,
            Some(limit) => tokio::select! {
                biased;
                _ = shutdown.recv() => return,
                p = limit.clone().acquire_owned() => match p {
                    Ok(p) => Some(p),
                    Err(_) => return, // closed: only at exit
                },
            },
        };
        // A backend connection just failed for want of descriptors (or memory, or ports):
        // a client accepted now could not be served either.
        if let Some(until) = worker.picker.short_until() {
            tokio::select! {
                _ = shutdown.recv() => return,
                _ = tokio::time::sleep_until(until) => {}
            }
        }
        let accepted = tokio::select! {
            biased;
            _ = shutdown.recv() => return,
            _ = stop.recv() => {
                tracing::debug!(
                    name: "frontend_socket_closed",
                    worker = worker.id,
                    frontend = %frontend.name,
                    "frontend removed: closing its socket",
                );
                return;
            }
            _ = filters_changed.changed(), if clients.drops() => {
                refilter_at = refilter(&listener, &frontend, &clients);
                continue;
            }
            _ = tokio::time::sleep_until(refilter_at.unwrap_or_else(tokio::time::Instant::now)),
                if refilter_at.is_some() => {
                refilter_at = refilter(&listener, &frontend, &clients);
                continue;
            }
            r = listener.accept() => r,
        };
        match accepted {
            Ok((tcp, peer)) => {
                exhausted_logged = false;
                // Counted here, not in the task: a handover must see every accepted
                // connection, also one whose task has not run yet.
                crate::counters::WorkerCounters::bump(
                    &worker.counters.frontend(frontend.slot).accepted,
                );
                // The client's limits and rules, before a task or any TLS work is spent on
                // it (after its PROXY header, in `serve`, when one is expected).
                let admitted = if worker.state.proxy_proxy {
                    None
                } else {
                    match frontend.admit_client(&worker.state, peer) {
                        Some(a) => a,
                        None => {
                            refuse(tcp);
                            continue;
                        }
                    }
                };
                tokio::task::spawn_local(conn::serve(
                    worker.clone(),
                    frontend.clone(),
                    tcp,
                    peer,
                    permit,
                    admitted,
                ));
            }
            Err(e) => match crate::backend::Shortage::of(&e) {
                Some(kind) => {
                    worker.counters.local_shortage(kind.index());
                    if !exhausted_logged {
                        tracing::error!(
                            name: "accept_out_of_resources",
                            listener = ?local,
                            error = %e,
                            "cannot accept: out of resources; backing off, live connections go on",
                        );
                        exhausted_logged = true;
                    }
                    tokio::select! {
                        _ = shutdown.recv() => return,
                        _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                    }
                }
                // ECONNABORTED and the like concern one client only.
                None => tracing::debug!(
                    name: "accept_failed",
                    listener = ?local,
                    error = %e,
                    "accept failed",
                ),
            },
        }
    }
}

/// Closes a refused client's connection at once with a reset, as HAProxy's `tcp-request
/// connection reject` does: no TIME_WAIT kept on this side for a client over its limit.
pub(crate) fn refuse(tcp: tokio::net::TcpStream) {
    let _ = socket2::SockRef::from(&tcp).set_linger(Some(std::time::Duration::ZERO));
}

/// Puts the clients `frontend` refuses in the kernel's filter on `listener`
/// (`--client-refuse drop`); when to do it again.
fn refilter(
    listener: &TcpListener,
    frontend: &FrontendState,
    clients: &crate::clients::Clients,
) -> Option<tokio::time::Instant> {
    let policy = frontend.client_policy();
    let (program, next) = clients.drop_filter(policy.as_deref());
    let sock = socket2::SockRef::from(listener);
    let done = match &program {
        Some(p) => sock.attach_filter(&crate::clients::filter::filters(p)),
        None => sock.detach_filter(),
    };
    if let Err(e) = done {
        tracing::warn!(
            name: "client_filter_failed",
            frontend = %frontend.name,
            error = %e,
            "cannot set the kernel's filter of refused clients: {e}; they are refused after accept",
        );
    } else if program.is_none() {
        tracing::warn!(
            name: "client_filter_too_long",
            frontend = %frontend.name,
            "too many refused clients for the kernel's filter: they are refused after accept",
        );
    }
    let now = crate::clock::unix_ms();
    next.map(|at| {
        tokio::time::Instant::now() + std::time::Duration::from_millis(at.saturating_sub(now))
    })
}
