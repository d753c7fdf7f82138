//! One backend server: its addresses, weight, maxconn slots (a fair semaphore, so waiters
//! are served first come, first served), health and counters.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::check::{CheckSpec, CheckState};
use super::{BackendStream, ConnectError};

/// Where a server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// TCP addresses, tried in order.
    Tcp(Vec<SocketAddr>),
    /// A UNIX-domain stream socket.
    Unix(PathBuf),
}

/// A server's address as connections read it.
#[derive(Debug)]
enum Target {
    /// Swapped whole by `--backend-refresh`; each connection reads the list of its time.
    Tcp(ArcSwap<Vec<SocketAddr>>),
    Unix(PathBuf),
}

/// Counters of one server, shared by all workers (written once per connection, never per
/// byte).
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections open to it now.
    pub active: AtomicUsize,
    /// Connections given to it since it was made (the admin API shows that a drained
    /// server takes no new one).
    pub opened: AtomicU64,
    /// Connections waiting in its queue now.
    pub queued: AtomicUsize,
    /// Waits that ended at the queue timeout or found the queue full.
    pub queue_timeouts: AtomicU64,
    /// Connection attempts that failed.
    pub connect_failures: AtomicU64,
    /// Times it was marked down.
    pub marked_down: AtomicU64,
    /// Handshakes with it that failed (TLS to the backend: its certificate refused).
    pub handshake_failures: AtomicU64,
}

/// A backend server.
#[derive(Debug)]
pub struct Server {
    name: String,
    /// Its identity in a sticky cookie ([`super::balance::server_id`]), made once.
    sticky_id: u64,
    target: Target,
    /// Its weight (the admin API may change it).
    weight: AtomicU32,
    /// The operator's state ([`Admin`]), set through the admin API.
    admin: AtomicU8,
    /// `maxconn` slots; `None` for no limit.
    slots: Option<Arc<Semaphore>>,
    /// Down until this many ms after `epoch`; 0 when up.
    down_until_ms: AtomicU64,
    epoch: Instant,
    /// Counters.
    pub stats: ServerStats,
    /// Its active health check and the state it gives, when it has one.
    pub check: Option<(CheckSpec, CheckState)>,
    /// Wakes the connections waiting in its queue when its checks take it out.
    check_down: tokio::sync::Notify,
}

/// A server's state as the operator sets it (the admin API's `ready`, `drain`, `maint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admin {
    /// In rotation.
    Ready = 0,
    /// Takes no new connection, stream or request; those under way finish.
    Drain = 1,
    /// As drain, and its idle keep-alive connections are closed.
    Maint = 2,
}

impl Admin {
    /// As the admin API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Admin::Ready => "ready",
            Admin::Drain => "drain",
            Admin::Maint => "maint",
        }
    }

    /// From the admin API's spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ready" => Some(Admin::Ready),
            "drain" => Some(Admin::Drain),
            "maint" => Some(Admin::Maint),
            _ => None,
        }
    }
}

/// A connection's hold on a server: its maxconn slot and its place in `active`.
#[derive(Debug)]
pub struct Lease {
    server: Arc<Server>,
    _slot: Option<OwnedSemaphorePermit>,
    queued: Duration,
}

impl Lease {
    /// The server this lease is on.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// How long it waited in the server's queue (maxconn): zero when a slot was free.
    pub fn queued(&self) -> Duration {
        self.queued
    }

    /// The server this lease is on, to keep.
    pub fn server_arc(&self) -> Arc<Server> {
        self.server.clone()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.server.stats.active.fetch_sub(1, Relaxed);
    }
}

impl Server {
    /// A server named `name` (for logs) at `address`.
    pub fn new(name: String, address: Address, maxconn: Option<usize>, weight: u32) -> Self {
        Server {
            sticky_id: super::balance::server_id(&name),
            name,
            target: match address {
                Address::Tcp(addrs) => Target::Tcp(ArcSwap::from_pointee(addrs)),
                Address::Unix(path) => Target::Unix(path),
            },
            weight: AtomicU32::new(weight.max(1)),
            admin: AtomicU8::new(Admin::Ready as u8),
            slots: maxconn.map(|n| Arc::new(Semaphore::new(n))),
            down_until_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            stats: ServerStats::default(),
            check: None,
            check_down: tokio::sync::Notify::new(),
        }
    }

    /// The server with an active health check.
    pub fn with_check(mut self, spec: CheckSpec) -> Self {
        self.check = Some((spec, CheckState::default()));
        self
    }

    /// True while its health checks keep it out of rotation: it takes nothing new.
    pub fn is_check_down(&self) -> bool {
        self.check.as_ref().is_some_and(|(_, s)| s.is_down())
    }

    /// Its address, for a check to connect to (as connections do).
    pub fn address(&self) -> Address {
        match &self.target {
            Target::Tcp(addrs) => Address::Tcp(addrs.load().to_vec()),
            Target::Unix(path) => Address::Unix(path.clone()),
        }
    }

    /// Sends new connections to `addrs` (a name resolved again); live ones stay where
    /// they are. Returns the addresses replaced, when they differ (never for a UNIX
    /// socket, which has no name to resolve).
    pub fn set_addrs(&self, addrs: Vec<SocketAddr>) -> Option<Arc<Vec<SocketAddr>>> {
        let Target::Tcp(current) = &self.target else {
            return None;
        };
        if **current.load() == addrs {
            return None;
        }
        Some(current.swap(Arc::new(addrs)))
    }

    /// True when `maxconn` limits it.
    pub fn has_maxconn(&self) -> bool {
        self.slots.is_some()
    }

    /// Its TCP addresses of this moment; `None` for a UNIX socket.
    pub fn tcp_addrs(&self) -> Option<Arc<Vec<SocketAddr>>> {
        match &self.target {
            Target::Tcp(addrs) => Some(addrs.load_full()),
            Target::Unix(_) => None,
        }
    }

    /// Its name in logs.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its identity in a sticky cookie: keyed, so that the cookie tells nothing of it.
    pub fn sticky_id(&self) -> u64 {
        self.sticky_id
    }

    /// Its weight.
    pub fn weight(&self) -> u32 {
        self.weight.load(Relaxed)
    }

    /// Sets its weight (the admin API): new choices follow at once.
    pub fn set_weight(&self, w: u32) {
        self.weight.store(w.max(1), Relaxed);
    }

    /// The operator's state.
    pub fn admin(&self) -> Admin {
        match self.admin.load(Relaxed) {
            1 => Admin::Drain,
            2 => Admin::Maint,
            _ => Admin::Ready,
        }
    }

    /// Sets the operator's state. Out of rotation, the connections waiting in its queue
    /// go to a server that is up, as when its checks take it out.
    pub fn set_admin(&self, state: Admin) {
        self.admin.store(state as u8, Relaxed);
        if state != Admin::Ready {
            self.check_down.notify_waiters();
        }
    }

    /// True when it takes nothing new: out by its checks, drained or in maintenance.
    pub fn is_out(&self) -> bool {
        self.admin.load(Relaxed) != Admin::Ready as u8 || self.is_check_down()
    }

    /// True while marked down.
    pub fn is_down(&self) -> bool {
        self.down_until_ms.load(Relaxed) > crate::clock::ms_since(self.epoch)
    }

    /// Its health checks took it out: the connections waiting in its queue go elsewhere.
    pub fn taken_out(&self) {
        self.check_down.notify_waiters();
    }

    /// Ends a mark-down: its health checks say it is back.
    pub fn mark_up(&self) {
        self.down_until_ms.store(0, Relaxed);
    }

    /// Marks the server down for `d`.
    pub fn mark_down(&self, d: Duration) {
        self.stats.connect_failures.fetch_add(1, Relaxed);
        self.stats.marked_down.fetch_add(1, Relaxed);
        self.down_until_ms.store(
            crate::clock::ms_since(self.epoch) + d.as_millis() as u64,
            Relaxed,
        );
    }

    /// Takes a slot, waiting in FIFO order up to `timeout` when the server is at maxconn.
    pub async fn acquire(
        self: &Arc<Self>,
        timeout: Duration,
        queue_size: usize,
    ) -> Result<Lease, ConnectError> {
        let (slot, queued) = match &self.slots {
            None => (None, Duration::ZERO),
            Some(sem) => match sem.clone().try_acquire_owned() {
                Ok(p) => (Some(p), Duration::ZERO),
                Err(_) => {
                    // Only a wait reads the clock: a free slot costs nothing more.
                    let began = std::time::Instant::now();
                    let waiting = self.stats.queued.fetch_add(1, Relaxed);
                    let _unqueue = Unqueue(&self.stats.queued);
                    if waiting >= queue_size {
                        self.stats.queue_timeouts.fetch_add(1, Relaxed);
                        return Err(ConnectError::QueueFull {
                            server: self.name.clone(),
                            size: queue_size,
                        });
                    }
                    // A server taken out by its health checks sends its waiters on.
                    let out = self.check_down.notified();
                    tokio::pin!(out);
                    out.as_mut().enable();
                    if self.is_out() {
                        return Err(ConnectError::TakenOut {
                            server: self.name.clone(),
                        });
                    }
                    let waited = tokio::select! {
                        r = tokio::time::timeout(timeout, sem.clone().acquire_owned()) => r,
                        () = out => {
                            return Err(ConnectError::TakenOut {
                                server: self.name.clone(),
                            })
                        }
                    };
                    match waited {
                        Ok(Ok(p)) => (Some(p), began.elapsed()),
                        _ => {
                            self.stats.queue_timeouts.fetch_add(1, Relaxed);
                            return Err(ConnectError::QueueTimeout {
                                server: self.name.clone(),
                                timeout,
                            });
                        }
                    }
                }
            },
        };
        self.stats.active.fetch_add(1, Relaxed);
        self.stats.opened.fetch_add(1, Relaxed);
        Ok(Lease {
            server: self.clone(),
            _slot: slot,
            queued,
        })
    }

    /// Connects within `timeout`: to the UNIX socket, or to each TCP address in turn (with
    /// TCP_NODELAY).
    pub async fn connect(&self, timeout: Duration) -> Result<BackendStream, ConnectError> {
        match &self.target {
            Target::Unix(path) => {
                let to = || path.display().to_string();
                match tokio::time::timeout(timeout, UnixStream::connect(path)).await {
                    Ok(Ok(stream)) => Ok(BackendStream::Unix(stream)),
                    Ok(Err(source)) => Err(ConnectError::io(to(), source)),
                    Err(_) => Err(ConnectError::Timeout { to: to(), timeout }),
                }
            }
            Target::Tcp(addrs) => {
                let addrs = addrs.load_full();
                connect_tcp(&addrs, timeout).await.map(BackendStream::Tcp)
            }
        }
    }
}

/// Tries each address in turn, all within `timeout`; sets TCP_NODELAY.
async fn connect_tcp(addrs: &[SocketAddr], timeout: Duration) -> Result<TcpStream, ConnectError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = None;
    for &addr in addrs {
        match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                // Without it, small writes wait for ACKs (the seeds' 40 ms per request).
                stream
                    .set_nodelay(true)
                    .map_err(|source| ConnectError::Io {
                        to: addr.to_string(),
                        source,
                    })?;
                return Ok(stream);
            }
            Ok(Err(source)) => match ConnectError::io(addr.to_string(), source) {
                // The next address would need the same descriptor or port.
                e @ ConnectError::Local { .. } => return Err(e),
                e => last = Some(e),
            },
            Err(_) => {
                return Err(ConnectError::Timeout {
                    to: addr.to_string(),
                    timeout,
                })
            }
        }
    }
    Err(last.unwrap_or_else(|| ConnectError::Io {
        to: "-".into(),
        source: std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
    }))
}

/// Leaves the queue count however the wait ends.
struct Unqueue<'a>(&'a AtomicUsize);

impl Drop for Unqueue<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}
