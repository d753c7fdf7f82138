//! The backend connections of one HTTP/2 client connection: keep-alive HTTP/1.1
//! connections, each carrying one stream at a time and reused for the next once its answer
//! is complete. They serve this client only, so the preamble written when each opens
//! (`--write-proxy-*`, `--proxy-proxy`, `--write-ip`) stays true for every request on it.
//! Servers' maxconn, queues, weights and down-marking are the pool's, as for HTTP/1.1: a
//! stream waiting for a slot also takes a connection another stream of this client frees.
//! A client has at most `--http-max-backend-conns` open; its other streams wait in order.
//! A connection goes back only when its answer ended exactly at a message boundary; while
//! idle it is watched (readable means the backend closed it or wrote bytes nobody asked
//! for: it is dropped), and looked at once more just before it is reused.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use crate::access::record::Waited;
use crate::backend::balance::Key;
use crate::backend::{ConnectError, Lease, Server};
use crate::counters::WorkerCounters;
use crate::edge::preamble::Preambles;
use crate::edge::route::{BackendId, Routing};
use crate::edge::upstream::{self, Upstream};
use crate::edge::Worker;

/// One backend connection and what was read from it ahead.
#[derive(Debug)]
pub struct BackendConn {
    /// The socket.
    pub tcp: Upstream,
    /// Bytes read and not yet used.
    pub buf: BytesMut,
    /// Its maxconn slot; released with it.
    lease: Lease,
    /// Its `--idle-timeout` while an answer is awaited.
    pub silence: Silence,
    /// Its place under `--http-max-backend-conns`; given back when it is dropped.
    _slot: Slot,
    /// The backend it belongs to, in the client connection's routing.
    pub backend: BackendId,
    /// How long its connect took (its server's queue left out), for the first stream's
    /// log line; taken by it, so that a reuse reads none.
    pub connect: Option<Duration>,
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

    /// Its server.
    pub fn server_ref(&self) -> &crate::backend::Server {
        self.lease.server()
    }

    /// Its server, to keep (a count, not a copy).
    pub fn server_arc(&self) -> std::sync::Arc<crate::backend::Server> {
        self.lease.server_arc()
    }
}

/// What an idle connection's socket says when asked without waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Idle {
    /// Nothing to read: it may carry the next stream.
    Quiet,
    /// The backend closed it (or it failed).
    Closed,
    /// The backend wrote bytes no request asked for.
    Stray,
}

/// Looks at an idle connection; `cx` is woken once it becomes readable. tokio clears a
/// socket's readiness when a read fills less than its buffer, which is how an answer's
/// last read ends: a connection given back is normally not ready, and asking costs no
/// system call. A readiness left over is checked with one read.
fn poll_idle(up: &mut Upstream, cx: &mut Context<'_>) -> Idle {
    match up.poll_idle(cx) {
        Poll::Pending => Idle::Quiet,
        Poll::Ready(true) => Idle::Closed,
        Poll::Ready(false) => Idle::Stray,
    }
}

/// What a client connection's streams and its backend connections share.
#[derive(Debug)]
struct Shared {
    /// Connections whose answer ended at a message boundary, ready for the next stream.
    idle: RefCell<Vec<BackendConn>>,
    /// A connection became idle, or one closed while the cap was reached.
    freed: Notify,
    /// Streams of this client waiting for a connection.
    waiting: Cell<usize>,
    /// Backend connections of this client open now (idle or carrying a stream).
    open: Cell<usize>,
    /// The keeper's waker: idle sockets are registered with it (see [`Backends::put`]).
    keeper: RefCell<Option<Waker>>,
    /// Where dropped connections are counted.
    counters: Arc<WorkerCounters>,
}

impl Shared {
    /// Drops what an idle socket said is closed or misbehaving, counted.
    fn dropped(&self, why: Idle) {
        let c = &self.counters.http;
        match why {
            Idle::Quiet => {}
            Idle::Closed => WorkerCounters::bump(&c.backend_closed_idle),
            Idle::Stray => WorkerCounters::bump(&c.backend_stray),
        }
    }

    /// The keeper's turn: every idle connection looked at, those that became readable
    /// dropped, the others registered with `cx`.
    fn sweep(&self, cx: &mut Context<'_>) {
        let mut idle = self.idle.borrow_mut();
        // A server put in maintenance keeps no idle connection.
        idle.retain(|c| c.lease.server().admin() != crate::backend::Admin::Maint);
        idle.retain_mut(|c| match poll_idle(&mut c.tcp, cx) {
            Idle::Quiet => true,
            why => {
                self.dropped(why);
                false
            }
        });
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The keeper ends at its next turn, finding nothing left to keep.
        if let Some(w) = self.keeper.get_mut().take() {
            w.wake();
        }
    }
}

/// A backend connection's place among its client's (`--http-max-backend-conns`), given
/// back when the connection is dropped.
#[derive(Debug)]
struct Slot(Rc<Shared>);

impl Slot {
    fn take(shared: &Rc<Shared>) -> Slot {
        shared.open.set(shared.open.get() + 1);
        Slot(shared.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let s = &self.0;
        s.open.set(s.open.get().saturating_sub(1));
        if s.waiting.get() > 0 {
            s.freed.notify_one(); // a stream waiting at the cap may open one now
        }
    }
}

/// The backend connections of one client connection.
#[derive(Debug)]
pub struct Backends {
    shared: Rc<Shared>,
    /// The backends, as the client connection found them.
    routing: Arc<Routing>,
    /// Written first on every new connection, by its backend's preamble.
    preambles: Preambles,
    /// `--idle-timeout`, for each connection's [`Silence`].
    idle_timeout: Duration,
    /// `--http-max-backend-conns`: most connections open at once for this client.
    max_conns: usize,
    /// The keeper task was started.
    keeping: Cell<bool>,
}

impl Drop for Backends {
    fn drop(&mut self) {
        // Idle connections hold the shared state (their slots): closed here, with the client
        // connection, or they and the keeper would outlive it.
        let idle = std::mem::take(&mut *self.shared.idle.borrow_mut());
        drop(idle);
    }
}

/// Most idle connections kept per client connection.
const MAX_IDLE: usize = 16;

/// Size of a backend connection's read buffer.
pub const READ_SIZE: usize = 16 * 1024;

impl Backends {
    /// No connection yet; `preambles` open them, `idle` is `--idle-timeout`, `max_conns`
    /// `--http-max-backend-conns`.
    pub fn new(
        routing: Arc<Routing>,
        preambles: Preambles,
        idle: Duration,
        max_conns: usize,
        counters: Arc<WorkerCounters>,
    ) -> Self {
        Backends {
            shared: Rc::new(Shared {
                idle: RefCell::new(Vec::new()),
                freed: Notify::new(),
                waiting: Cell::new(0),
                open: Cell::new(0),
                keeper: RefCell::new(None),
                counters,
            }),
            routing,
            preambles,
            idle_timeout: idle,
            max_conns: max_conns.max(1),
            keeping: Cell::new(false),
        }
    }

    /// The routing the client connection found.
    pub fn routing(&self) -> &Arc<Routing> {
        &self.routing
    }

    /// Backend `id`, as the client connection found it.
    pub fn backend(&self, id: BackendId) -> &Arc<crate::edge::route::Backend> {
        self.routing.backend(id)
    }

    /// The name of backend `id`, for logs.
    pub fn name(&self, id: BackendId) -> &std::sync::Arc<str> {
        &self.routing.backend(id).name
    }

    /// An idle connection of this client's that is still quiet, if there is one: one the
    /// backend closed or wrote to since is dropped (and counted), never reused.
    pub fn idle(&self, backend: BackendId, want: Option<&Arc<Server>>) -> Option<BackendConn> {
        let mut idle = self.shared.idle.borrow_mut();
        let fits = |c: &BackendConn| {
            c.backend == backend && want.is_none_or(|w| std::ptr::eq(c.lease.server(), &**w))
        };
        // Most often every idle connection is the one backend's: the last one is taken.
        loop {
            let mut c = if idle.last().is_some_and(fits) {
                idle.pop()?
            } else {
                let at = idle.iter().rposition(fits)?;
                idle.remove(at)
            };
            // A server out by its health checks takes no new stream: its connection goes.
            if c.lease.server().is_out() {
                continue;
            }
            // Nothing seen since its last read: quiet, known without a registration. Else
            // one read says what came.
            if !c.tcp.seen_readable() {
                return Some(c);
            }
            match poll_idle(&mut c.tcp, &mut Context::from_waker(Waker::noop())) {
                Idle::Quiet => return Some(c),
                why => self.shared.dropped(why),
            }
        }
    }

    /// An idle connection of this client, or a new one from the pool (waiting in its queue
    /// when the server is at maxconn, or for one of this client's own once it has
    /// `--http-max-backend-conns` open), whichever comes first. Waiters are served in order.
    pub async fn get(
        &self,
        worker: &Worker,
        backend: BackendId,
        key: &Key,
        want: Option<&Arc<Server>>,
    ) -> Result<BackendConn, ConnectError> {
        if let Some(c) = self.idle(backend, want) {
            return Ok(c);
        }
        let shared = &self.shared;
        shared.waiting.set(shared.waiting.get() + 1);
        let _done = Unwait(&shared.waiting);
        loop {
            if shared.open.get() >= self.max_conns {
                // At the cap with idle connections to other backends: the oldest is closed
                // to make room, or this stream would wait for one it cannot use.
                let other = shared
                    .idle
                    .borrow()
                    .iter()
                    .position(|c| c.backend != backend);
                if let Some(at) = other {
                    drop(shared.idle.borrow_mut().remove(at));
                    continue;
                }
                shared.freed.notified().await;
                if let Some(c) = self.idle(backend, want) {
                    return Ok(c);
                }
                continue;
            }
            let slot = Slot::take(shared);
            let b = self.routing.backend(backend);
            let pre = self.preambles.get(b.preamble);
            let began = Instant::now();
            let connect = upstream::open(b, &worker.picker, pre, key);
            tokio::pin!(connect);
            loop {
                tokio::select! {
                    biased;
                    () = shared.freed.notified() => {
                        if let Some(c) = self.idle(backend, want) {
                            return Ok(c);
                        }
                    }
                    r = &mut connect => {
                        let (mut tcp, lease) = r?;
                        if let Some(p) = pre.filter(|_| tcp.is_plain()) {
                            if let Err(source) = tcp.write_all(p).await {
                                let to = lease.server().name().to_owned();
                                return Err(ConnectError::Io { to, source });
                            }
                        }
                        let took = Waited::since(began.into_std(), lease.queued());
                        return Ok(BackendConn {
                            connect: Some(took.connect),
                            tcp,
                            buf: BytesMut::with_capacity(READ_SIZE),
                            lease,
                            silence: Silence::new(self.idle_timeout),
                            _slot: slot,
                            backend,
                        });
                    }
                }
            }
        }
    }

    /// Takes back a connection whose exchange is complete, for the next stream. One with
    /// bytes past its answer is dropped (and counted); one that another client's
    /// connection is queued for is closed instead, so that keeping it idle does not hold
    /// a maxconn slot they wait for. Kept ones are watched by the keeper while idle.
    pub fn put(&self, mut c: BackendConn) {
        if !c.buf.is_empty() {
            self.shared.dropped(Idle::Stray);
            return;
        }
        // Drained or in maintenance: it takes no new stream, so it is not kept.
        if c.lease.server().is_out() {
            return;
        }
        let waiting = self.shared.waiting.get();
        let others_queued = c.lease.server().stats.queued.load(Relaxed) > waiting;
        if others_queued && waiting == 0 {
            return;
        }
        let mut idle = self.shared.idle.borrow_mut();
        if idle.len() >= MAX_IDLE {
            return;
        }
        // Registered with the keeper's waker: an idle socket that becomes readable (the
        // backend closed it, or wrote what nobody asked for) wakes it, and it drops that one.
        // Before the keeper's first turn there is no waker yet; that turn looks at all.
        if let Some(w) = self.shared.keeper.borrow().as_ref() {
            let why = poll_idle(&mut c.tcp, &mut Context::from_waker(w));
            if why != Idle::Quiet {
                self.shared.dropped(why);
                return;
            }
        }
        idle.push(c);
        drop(idle);
        if !self.keeping.replace(true) {
            let weak = Rc::downgrade(&self.shared);
            KEEPERS.with(|k| {
                let mut k = k.borrow_mut();
                // Pruned when full, so it stays within twice the keepers alive.
                if k.len() == k.capacity() {
                    k.retain(|w| w.strong_count() > 0);
                }
                k.push(weak.clone());
            });
            tokio::task::spawn_local(keep(weak));
        }
        // Only a stream in `get` waits on it; without one, the notice would be a mutex
        // taken for nothing at the end of every stream (and a permit left for later).
        if waiting > 0 {
            self.shared.freed.notify_one();
        }
    }
}

thread_local! {
    /// This worker thread's keepers, for [`wake_keepers`].
    static KEEPERS: RefCell<Vec<Weak<Shared>>> = const { RefCell::new(Vec::new()) };
}

/// Wakes every keeper of this worker thread: a server was put in maintenance, and they
/// close their idle connections to it.
pub fn wake_keepers() {
    KEEPERS.with(|k| {
        k.borrow_mut().retain(|w| match w.upgrade() {
            Some(s) => {
                if let Some(waker) = s.keeper.borrow().as_ref() {
                    waker.wake_by_ref();
                }
                true
            }
            None => false,
        })
    });
}

/// The keeper of a client connection's idle backend connections: woken only when one of
/// them becomes readable, it drops that one. One task per client connection, started at
/// its first idle connection, ending with the connection.
async fn keep(shared: Weak<Shared>) {
    std::future::poll_fn(|cx| {
        let Some(s) = shared.upgrade() else {
            return Poll::Ready(());
        };
        {
            let mut w = s.keeper.borrow_mut();
            if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *w = Some(cx.waker().clone());
            }
        }
        s.sweep(cx);
        Poll::Pending
    })
    .await
}

/// Leaves the waiting count however the wait ends.
struct Unwait<'a>(&'a Cell<usize>);

impl Drop for Unwait<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}
