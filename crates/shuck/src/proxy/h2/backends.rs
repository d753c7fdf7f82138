//! The backend connections of one HTTP/2 client connection: keep-alive HTTP/1.1
//! connections, each carrying one stream at a time and reused for the next once its answer
//! is complete. They serve this client only, so the preamble written when each opens
//! (`--write-proxy-*`, `--proxy-proxy`, `--write-ip`) stays true for every request on it.
//! Servers' maxconn, queues, weights and down-marking are the pool's, as for HTTP/1.1: a
//! stream waiting for a slot also takes a connection another stream of this client frees.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use crate::backend::{BackendStream, ConnectError, Lease};
use crate::counters::WorkerCounters;
use crate::proxy::Worker;

/// One backend connection and what was read from it ahead.
#[derive(Debug)]
pub struct BackendConn {
    /// The socket.
    pub tcp: BackendStream,
    /// Bytes read and not yet used.
    pub buf: BytesMut,
    /// True once it carried a stream before (it may have been closed by the backend since).
    pub reused: bool,
    /// Its maxconn slot; released with it.
    lease: Lease,
    /// Its `--idle-timeout` while an answer is awaited.
    pub silence: Silence,
}

/// How long a backend may keep an exchange waiting (`--idle-timeout`, and [`PATIENCE`]
/// before a stream's reset is watched for): one timer per backend connection, moved when
/// it fires too early or after a long wait. A timer made and dropped for every read showed
/// in profiles (a wheel insertion and removal, each under the driver's lock, per request).
#[derive(Debug)]
pub struct Silence {
    timer: Pin<Box<Sleep>>,
    /// When the current wait began.
    since: Instant,
    idle: Duration,
    /// The current wait was reported long ([`Wait::Long`]).
    long: bool,
}

/// How long a wait for an answer's head lasts before its stream's reset is watched for:
/// registering for the reset cost 2 % of the gateway's time per stream, and an answer
/// that comes sooner finds the reset when it is sent (see `answer::pass_on`).
pub const PATIENCE: Duration = Duration::from_millis(100);

/// What a wait for the backend has come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// It has lasted [`PATIENCE`] (reported once a wait).
    Long,
    /// It has lasted `--idle-timeout`.
    Over,
}

impl Silence {
    fn new(idle: Duration) -> Self {
        let since = Instant::now();
        Silence {
            timer: Box::pin(tokio::time::sleep_until(since + PATIENCE.min(idle))),
            since,
            idle,
            long: false,
        }
    }

    /// A wait begins now.
    pub fn start(&mut self) {
        self.since = Instant::now();
        self.long = false;
        // Set no later than the wait's PATIENCE. Only a wait that lasted that long left it
        // later (at its --idle-timeout); one that did not left it at most a PATIENCE after
        // its own start, so this moves the timer only after a long wait.
        let patient = self.since + PATIENCE.min(self.idle);
        if self.timer.deadline() > patient {
            self.timer.as_mut().reset(patient);
        }
    }

    /// Ready with [`Wait::Long`] once the wait begun at [`Silence::start`] has lasted
    /// [`PATIENCE`], then with [`Wait::Over`] once it has lasted `--idle-timeout`. The timer
    /// is moved when it fires early: on a busy connection, once a `PATIENCE`, not once a
    /// request.
    pub fn poll_wait(&mut self, cx: &mut Context<'_>) -> Poll<Wait> {
        loop {
            ready!(self.timer.as_mut().poll(cx));
            let now = Instant::now();
            let over = self.since + self.idle;
            if over <= now {
                return Poll::Ready(Wait::Over);
            }
            let long = self.since + PATIENCE;
            if self.long || long >= over {
                self.timer.as_mut().reset(over);
            } else if long <= now {
                self.long = true;
                self.timer.as_mut().reset(over);
                return Poll::Ready(Wait::Long);
            } else {
                self.timer.as_mut().reset(long);
            }
        }
    }

    /// Ready once the wait begun at [`Silence::start`] has lasted `--idle-timeout`.
    pub fn poll_over(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while ready!(self.poll_wait(cx)) == Wait::Long {}
        Poll::Ready(())
    }
}

impl BackendConn {
    /// The server it is on, for logs.
    pub fn server(&self) -> &str {
        self.lease.server().name()
    }
}

/// The idle connections of one client connection.
#[derive(Debug)]
pub struct Backends {
    idle: RefCell<Vec<BackendConn>>,
    /// A connection became idle.
    freed: Notify,
    /// Streams of this client waiting for a connection.
    waiting: Cell<usize>,
    /// Written first on every new connection.
    preamble: Option<Box<[u8]>>,
    /// `--idle-timeout`, for each connection's [`Silence`].
    idle_timeout: Duration,
}

/// Most idle connections kept per client connection.
const MAX_IDLE: usize = 16;

/// Size of a backend connection's read buffer.
pub const READ_SIZE: usize = 16 * 1024;

impl Backends {
    /// No connection yet; `preamble` opens every one, `idle` is `--idle-timeout`.
    pub fn new(preamble: Option<Vec<u8>>, idle: Duration) -> Self {
        Backends {
            idle: RefCell::new(Vec::new()),
            freed: Notify::new(),
            waiting: Cell::new(0),
            preamble: preamble.map(Vec::into_boxed_slice),
            idle_timeout: idle,
        }
    }

    /// An idle connection of this client's, if there is one.
    pub fn idle(&self) -> Option<BackendConn> {
        self.idle.borrow_mut().pop()
    }

    /// An idle connection of this client, or a new one from the pool (waiting in its queue
    /// when the server is at maxconn), whichever comes first.
    pub async fn get(&self, worker: &Worker) -> Result<BackendConn, ConnectError> {
        if let Some(c) = self.idle() {
            return Ok(c);
        }
        self.waiting.set(self.waiting.get() + 1);
        let _done = Unwait(&self.waiting);
        let connect = worker.state.pool.connect(&worker.picker);
        tokio::pin!(connect);
        loop {
            tokio::select! {
                biased;
                () = self.freed.notified() => {
                    if let Some(c) = self.idle() {
                        return Ok(c);
                    }
                }
                r = &mut connect => {
                    let (mut tcp, lease) = r.inspect_err(|_| {
                        WorkerCounters::bump(&worker.counters.backend_failures);
                    })?;
                    if let Some(p) = &self.preamble {
                        if let Err(source) = tcp.write_all(p).await {
                            let to = lease.server().name().to_owned();
                            return Err(ConnectError::Io { to, source });
                        }
                    }
                    return Ok(BackendConn {
                        tcp,
                        buf: BytesMut::with_capacity(READ_SIZE),
                        reused: false,
                        lease,
                        silence: Silence::new(self.idle_timeout),
                    });
                }
            }
        }
    }

    /// Takes back a connection whose exchange is complete, for the next stream. One that
    /// another client's connection is queued for is closed instead, so that keeping it
    /// idle does not hold a maxconn slot they wait for.
    pub fn put(&self, mut c: BackendConn) {
        let others_queued = c.lease.server().stats.queued.load(Relaxed) > self.waiting.get();
        if others_queued && self.waiting.get() == 0 {
            return;
        }
        let mut idle = self.idle.borrow_mut();
        if idle.len() >= MAX_IDLE {
            return;
        }
        c.reused = true;
        idle.push(c);
        drop(idle);
        // Only a stream in `get` waits on it; without one, the notice would be a mutex
        // taken for nothing at the end of every stream (and a permit left for later).
        if self.waiting.get() > 0 {
            self.freed.notify_one();
        }
    }
}

/// Leaves the waiting count however the wait ends.
struct Unwait<'a>(&'a Cell<usize>);

impl Drop for Unwait<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}
