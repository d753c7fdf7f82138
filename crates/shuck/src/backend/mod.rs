//! Backends: where decrypted connections go. Knows nothing of TLS.
//!
//! A pool of servers, chosen by smooth weighted round robin among those that are up. A
//! server may have a `maxconn`: beyond it, connections wait in that server's FIFO queue
//! (bounded in length and time) instead of being refused, as HAProxy does. A server that
//! refuses or times out is marked down for a while and the connection tries the next.

pub mod balance;
pub mod check;
mod pick;
mod server;
mod stream;

use std::cell::{Cell, RefCell};
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

#[cfg(test)]
use balance::server_id;
use balance::{Balance, Dice, Key, Ring};
pub use server::{Address, Admin, Lease, Server};

/// The `Retry-After` of a backend in maintenance's 503, in seconds.
pub const MAINTENANCE_RETRY_SECS: u64 = 60;
pub use stream::{BackendStream, ReadHalf, WriteHalf};

/// Why a backend connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The connection attempt failed (refused, unreachable, ...).
    #[error("{to}: {source}")]
    Io {
        /// The address (or socket path) tried last.
        to: String,
        /// The system's reason.
        source: io::Error,
    },
    /// No address answered within the connect timeout.
    #[error("{to}: connect timed out after {timeout:?}")]
    Timeout {
        /// The address (or socket path) being tried.
        to: String,
        /// The limit.
        timeout: Duration,
    },
    /// The server's queue is full.
    #[error("{server}: queue full ({size} waiting)")]
    QueueFull {
        /// The server.
        server: String,
        /// The queue bound.
        size: usize,
    },
    /// shuck itself is short of what a connection needs (descriptors, buffers, memory, local
    /// ports): no fault of the server's, which is not marked down for it.
    #[error("{to}: {source} (out of local resources)")]
    Local {
        /// The address (or socket path) being tried.
        to: String,
        /// Which resource.
        kind: Shortage,
        /// The system's reason.
        source: io::Error,
    },
    /// The server's handshake failed (TLS to the backend: a certificate that does not
    /// verify, a timeout); it was marked down.
    #[error("{to}: {reason}")]
    Handshake {
        /// The server.
        to: String,
        /// What failed.
        reason: String,
    },
    /// The server was taken out by its health checks while the connection waited in its
    /// queue: another server is tried.
    #[error("{server}: taken out by its health checks while waiting")]
    TakenOut {
        /// The server.
        server: String,
    },
    /// Every server of the backend is out of rotation by its health checks.
    #[error("no server is up: every one fails its health checks")]
    NoneUp,
    /// Waited in the server's queue past the queue timeout.
    #[error("{server}: waited {timeout:?} in the queue for a free slot (maxconn)")]
    QueueTimeout {
        /// The server.
        server: String,
        /// The limit.
        timeout: Duration,
    },
}

/// A resource of shuck's own that ran out (the errors `socket`, `connect` and `accept` give
/// for it), as `shuck_local_resource_errors_total` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortage {
    /// `EMFILE`: the process is at its `RLIMIT_NOFILE`.
    Emfile = 0,
    /// `ENFILE`: the system is at its file limit.
    Enfile = 1,
    /// `ENOBUFS`: no socket buffers.
    Enobufs = 2,
    /// `ENOMEM`: no memory.
    Enomem = 3,
    /// `EADDRNOTAVAIL`: no local port left for the backend's address.
    Eaddrnotavail = 4,
}

impl Shortage {
    /// The shortage an error reports, if it is one.
    pub fn of(e: &io::Error) -> Option<Shortage> {
        Some(match e.raw_os_error()? {
            libc::EMFILE => Shortage::Emfile,
            libc::ENFILE => Shortage::Enfile,
            libc::ENOBUFS => Shortage::Enobufs,
            libc::ENOMEM => Shortage::Enomem,
            libc::EADDRNOTAVAIL => Shortage::Eaddrnotavail,
            _ => return None,
        })
    }

    /// Its index in [`crate::counters::SHORTAGES`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl ConnectError {
    /// A failed attempt to reach `to`: [`ConnectError::Local`] when the failure is shuck's
    /// own shortage, else [`ConnectError::Io`].
    pub fn io(to: String, source: io::Error) -> Self {
        match Shortage::of(&source) {
            Some(kind) => ConnectError::Local { to, kind, source },
            None => ConnectError::Io { to, source },
        }
    }

    /// True when the client waited in a queue and gave up or found it full, rather than
    /// a server failing.
    pub fn is_queue(&self) -> bool {
        matches!(
            self,
            ConnectError::QueueFull { .. } | ConnectError::QueueTimeout { .. }
        )
    }

    /// True when shuck itself was short of what the connection needed (logged once an
    /// episode by the pool, not once a client).
    pub fn is_local(&self) -> bool {
        matches!(self, ConnectError::Local { .. })
    }
}

/// Timeouts and bounds of the pool.
#[derive(Debug, Clone, Copy)]
pub struct PoolLimits {
    /// Time to connect.
    pub connect_timeout: Duration,
    /// Longest wait in a server's queue.
    pub queue_timeout: Duration,
    /// Most connections waiting per server.
    pub queue_size: usize,
    /// How long a failed server stays down.
    pub retry_after: Duration,
    /// Other servers tried after a failed connect (`--retries`).
    pub retries: usize,
}

/// The servers connections are spread over; shared by every worker.
#[derive(Debug)]
pub struct Pool {
    servers: Vec<Arc<Server>>,
    limits: PoolLimits,
    /// Its row in each worker's [`Picker`] (the backend's index where there are several).
    slot: usize,
    /// How its servers share the work.
    balance: Balance,
    /// `balance = hash`: the ring of its servers.
    ring: Ring,
    /// Each server's identity in a sticky cookie, in order.
    ids: Vec<u64>,
}

/// One worker's round-robin position (smooth weighted round robin, as nginx does it):
/// per worker, so choosing a server takes no lock.
#[derive(Debug, Default)]
pub struct Picker {
    /// Each pool's position, by [`Pool::with_slot`]'s slot.
    current: RefCell<Vec<Vec<i64>>>,
    /// Until when this worker is short of local resources (its accept loop waits).
    short_until: Cell<Option<Instant>>,
    /// The last local shortage, for one warning an episode.
    warned: Cell<Option<Instant>>,
    /// `least-requests`' draws.
    dice: Dice,
}

/// How long without a local shortage ends an episode (the next one is warned of again).
const SHORTAGE_QUIET: Duration = Duration::from_secs(10);

/// How long a worker that ran short of local resources waits before accepting again (as
/// its accept loop does after `EMFILE`).
pub const SHORTAGE_BACKOFF: Duration = Duration::from_millis(20);

impl Picker {
    /// Until when this worker backs off for a local shortage, if it does now.
    pub fn short_until(&self) -> Option<Instant> {
        self.short_until.get().filter(|&t| t > Instant::now())
    }
}

impl Pool {
    /// A pool of `servers` (at least one).
    pub fn new(servers: Vec<Server>, limits: PoolLimits) -> Self {
        let servers: Vec<Arc<Server>> = servers.into_iter().map(Arc::new).collect();
        let ids = servers.iter().map(|s| s.sticky_id()).collect();
        Pool {
            servers,
            limits,
            slot: 0,
            balance: Balance::RoundRobin,
            ring: Ring::default(),
            ids,
        }
    }

    /// A pool of the same servers (their connections, queues and down-marking carried
    /// on), with `limits`, row `slot` and `balance`: a reload that left a backend's servers
    /// as they were.
    pub fn sharing(&self, limits: PoolLimits, slot: usize, balance: Balance) -> Self {
        Pool {
            servers: self.servers.clone(),
            limits,
            slot,
            balance: Balance::RoundRobin,
            ring: Ring::default(),
            ids: self.ids.clone(),
        }
        .with_balance(balance)
    }

    /// The pool with `balance` as its method (a ring made for `hash`, from the servers'
    /// weights now).
    pub fn with_balance(mut self, balance: Balance) -> Self {
        if matches!(balance, Balance::Hash { .. }) {
            self.ring = Ring::new(self.servers.iter().map(|s| (s.name(), s.weight())));
        }
        self.balance = balance;
        self
    }

    /// Its balancing method.
    pub fn balance(&self) -> &Balance {
        &self.balance
    }

    /// The one server `key` must go to, when the method says (a sticky cookie's server
    /// that is up, `hash`'s server for it): a connection kept open to another server does
    /// not serve it. `None` when any server may.
    pub fn wanted(&self, key: &Key) -> Option<&Arc<Server>> {
        self.fixed(key).map(|i| &self.servers[i])
    }

    /// The pool with its own row `slot` in each worker's [`Picker`], so that several
    /// pools keep their own round robin.
    pub fn with_slot(mut self, slot: usize) -> Self {
        self.slot = slot;
        self
    }

    /// Its timeouts and bounds.
    pub fn limits(&self) -> PoolLimits {
        self.limits
    }

    /// The servers, for counters and logs.
    pub fn servers(&self) -> &[Arc<Server>] {
        &self.servers
    }

    /// Every server is in maintenance (`shuck ctl maint BACKEND`): its requests are
    /// answered 503 with `Retry-After`, no connect tried.
    pub fn in_maintenance(&self) -> bool {
        !self.servers.is_empty() && self.servers.iter().all(|s| s.admin() == Admin::Maint)
    }

    /// Connects to a server: the round robin's choice first, then the others in order,
    /// skipping servers marked down (unless all are). Waits in a server's queue when it is
    /// at maxconn. Each failure marks its server down and is logged.
    pub async fn connect(
        &self,
        picker: &Picker,
        key: &Key,
    ) -> Result<(BackendStream, Lease), ConnectError> {
        let n = self.servers.len();
        let first = self.pick(picker, key);
        // Servers out by their health checks take nothing; of the others, those marked
        // down by a failure are tried only when all are.
        let all_down = self.servers.iter().all(|s| s.is_down() || s.is_out());
        let mut last = None;
        let mut tries = 0usize;
        for k in 0..n {
            if tries > self.limits.retries {
                break;
            }
            let server = &self.servers[(first + k) % n];
            if server.is_out() || (server.is_down() && !all_down) {
                continue;
            }
            let lease = match server
                .acquire(self.limits.queue_timeout, self.limits.queue_size)
                .await
            {
                Ok(l) => l,
                // Its checks took it out while we waited: the next server that is up.
                Err(e @ ConnectError::TakenOut { .. }) => {
                    last = Some(e);
                    continue;
                }
                Err(e) => return Err(e), // queueing is the answer to overload, not a reason to spill
            };
            tries += 1;
            match self.dial(server, picker).await {
                Ok(stream) => return Ok((stream, lease)),
                Err(e @ ConnectError::Local { .. }) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(ConnectError::NoneUp))
    }

    /// Connects to `server` (its slot already taken). A failure marks it down and is
    /// logged; a shortage of shuck's own is not the server's fault: the worker backs off
    /// as its accept loop does, and no server is marked down.
    pub async fn dial(
        &self,
        server: &Server,
        picker: &Picker,
    ) -> Result<BackendStream, ConnectError> {
        match server.connect(self.limits.connect_timeout).await {
            Ok(stream) => Ok(stream),
            Err(e @ ConnectError::Local { .. }) => {
                let now = Instant::now();
                // One warning an episode (none in the last ten seconds), as accept's.
                if picker
                    .warned
                    .get()
                    .is_none_or(|t| now >= t + SHORTAGE_QUIET)
                {
                    tracing::warn!(
                        name: "backend_local_shortage",
                        backend = %server.name(),
                        error = %e,
                        "cannot open a backend connection: out of local resources; the clients meanwhile are refused, no server is marked down",
                    );
                }
                picker.warned.set(Some(now));
                picker.short_until.set(Some(now + SHORTAGE_BACKOFF));
                Err(e)
            }
            Err(e) => {
                server.mark_down(self.limits.retry_after);
                tracing::warn!(
                    name: "backend_down",
                    retry_after = ?self.limits.retry_after,
                    backend = %server.name(),
                    error = %e,
                    "backend connection failed; marked down for {:?}",
                    self.limits.retry_after,
                );
                Err(e)
            }
        }
    }

    /// A slot on a server, without a connection: the round robin's choice first, then the
    /// others in order, skipping servers marked down (unless all are) or taken out by
    /// their checks; waits in a server's queue when it is at maxconn. For connections the
    /// caller shares (HTTP/2's streams), where maxconn counts streams.
    pub async fn lease(&self, picker: &Picker, key: &Key) -> Result<Lease, ConnectError> {
        let n = self.servers.len();
        let first = self.pick(picker, key);
        let all_down = self.servers.iter().all(|s| s.is_down() || s.is_out());
        let mut last = None;
        for k in 0..n {
            let server = &self.servers[(first + k) % n];
            if server.is_out() || (server.is_down() && !all_down) {
                continue;
            }
            match server
                .acquire(self.limits.queue_timeout, self.limits.queue_size)
                .await
            {
                Ok(l) => return Ok(l),
                Err(e @ ConnectError::TakenOut { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(ConnectError::NoneUp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    fn pool(weights: &[u32]) -> Pool {
        let servers = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                Server::new(
                    format!("s{i}"),
                    Address::Tcp(vec![std::net::SocketAddr::from(([127, 0, 0, 1], 1))]),
                    None,
                    w,
                )
            })
            .collect();
        Pool::new(
            servers,
            PoolLimits {
                connect_timeout: Duration::from_secs(1),
                queue_timeout: Duration::from_secs(1),
                queue_size: 10,
                retry_after: Duration::from_secs(2),
                retries: 3,
            },
        )
    }

    #[test]
    fn shortages_are_labelled_in_order() {
        for (errno, kind) in [
            (libc::EMFILE, Shortage::Emfile),
            (libc::ENFILE, Shortage::Enfile),
            (libc::ENOBUFS, Shortage::Enobufs),
            (libc::ENOMEM, Shortage::Enomem),
            (libc::EADDRNOTAVAIL, Shortage::Eaddrnotavail),
        ] {
            let e = io::Error::from_raw_os_error(errno);
            assert_eq!(Shortage::of(&e), Some(kind));
            let label = crate::counters::SHORTAGES[kind.index()];
            assert_eq!(label, format!("{kind:?}").to_ascii_lowercase());
            assert!(ConnectError::io("x".into(), e).is_local());
        }
        let refused = io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert_eq!(Shortage::of(&refused), None);
        assert!(!ConnectError::io("x".into(), refused).is_local());
    }

    #[test]
    fn weighted_round_robin_is_smooth_and_proportional() {
        let p = pool(&[5, 1, 1]);
        let picker = Picker::default();
        let picks: Vec<usize> = (0..7).map(|_| p.pick(&picker, &Key::default())).collect();
        assert_eq!(picks.iter().filter(|&&i| i == 0).count(), 5);
        assert_eq!(picks.iter().filter(|&&i| i == 1).count(), 1);
        // Smooth: the heavy server never takes more than 3 in a row here (nginx: a a b a c a a).
        assert_eq!(picks, [0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn down_servers_are_skipped_until_they_come_back() {
        let p = pool(&[1, 1]);
        let picker = Picker::default();
        p.servers[0].mark_down(Duration::from_millis(100));
        for _ in 0..4 {
            assert_eq!(p.pick(&picker, &Key::default()), 1);
        }
        std::thread::sleep(Duration::from_millis(150));
        let picks: Vec<usize> = (0..4).map(|_| p.pick(&picker, &Key::default())).collect();
        assert!(picks.contains(&0));
    }

    #[test]
    fn leastconn_and_least_requests_go_where_fewest_are_for_their_weight() {
        let mut p = pool(&[1, 1, 2]);
        let picker = Picker::default();
        let active = |p: &Pool, n: [usize; 3]| {
            for (s, n) in p.servers.iter().zip(n) {
                s.stats.active.store(n, Relaxed);
            }
        };
        p = p.with_balance(Balance::LeastConn);
        active(&p, [3, 1, 4]);
        // 1 of weight 1 before 4 of weight 2 (2 each) and 3 of weight 1.
        assert_eq!(p.pick(&picker, &Key::default()), 1);
        active(&p, [3, 3, 2]);
        assert_eq!(p.pick(&picker, &Key::default()), 2);
        p.servers[2].mark_down(Duration::from_secs(5));
        assert_ne!(p.pick(&picker, &Key::default()), 2);
        let p = pool(&[1, 1]).with_balance(Balance::LeastRequests);
        active(&p, [0, 9, 0]);
        for _ in 0..20 {
            // Of the two it draws, the lighter: with two servers, always the idle one.
            assert_eq!(p.pick(&picker, &Key::default()), 0);
        }
    }

    #[test]
    fn hash_keeps_a_key_on_its_server_within_the_balance_factor() {
        let hash = |factor| {
            pool(&[1, 1]).with_balance(Balance::Hash {
                key: balance::HashKey::Source,
                factor,
            })
        };
        let picker = Picker::default();
        let p = hash(0);
        let keys: Vec<Key> = (0..64u32)
            .map(|k| Key {
                hash: Some(balance::hash(&k.to_le_bytes())),
                sticky: None,
            })
            .collect();
        let home: Vec<usize> = keys.iter().map(|k| p.pick(&picker, k)).collect();
        assert!(home.contains(&0) && home.contains(&1), "{home:?}");
        // The same key, the same server, on any worker.
        let other = Picker::default();
        assert!(keys.iter().zip(&home).all(|(k, &h)| p.pick(&other, k) == h));
        // A server over 125 % of the average load sends its keys to the next on the ring.
        let p = hash(125);
        p.servers[0].stats.active.store(10, Relaxed);
        for (k, &h) in keys.iter().zip(&home) {
            assert_eq!(p.pick(&picker, k), 1, "key homed on {h}");
        }
        // Without a key (a header that is absent): round robin.
        let picks: Vec<usize> = (0..4).map(|_| p.pick(&picker, &Key::default())).collect();
        assert_eq!(picks, [0, 1, 0, 1]);
        // A sticky cookie's server first, while it is up.
        let sticky = Key {
            hash: keys[0].hash,
            sticky: Some(server_id("s0")),
        };
        assert_eq!(p.pick(&picker, &sticky), 0);
        p.servers[0].mark_down(Duration::from_secs(5));
        assert_eq!(p.pick(&picker, &sticky), 1);
    }
}
