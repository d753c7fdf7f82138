//! A worker's HTTP/2 connections to backend servers (`proto = h2`), shared by all its
//! client connections: a stream takes a slot on a server (its maxconn counts streams),
//! then the first connection to that server with room under the server's
//! `SETTINGS_MAX_CONCURRENT_STREAMS` (and the block's `max-streams`); a new one is opened
//! only when every one is full, one at a time per server, so that a burst of streams
//! shares the connection it waits for. Each connection has a task of its own that drives
//! it, pings it while it carries nothing (one that does not answer within
//! [`PONG_WAIT`] is dead), and closes it after `--http-keepalive-timeout` without a
//! stream. One that received GOAWAY, or failed, takes no new stream.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::balance::Key;
use crate::backend::{ConnectError, Lease, Server};
use crate::config::Proto;
use crate::edge::route::Backend;
use crate::edge::upstream::{self, Upstream};
use crate::edge::Worker;

/// How often a connection that carries nothing is pinged.
pub const PING_EVERY: Duration = Duration::from_secs(10);

/// How long a PING may go unanswered before its connection is taken for dead.
pub const PONG_WAIT: Duration = Duration::from_secs(5);

/// How long a server of a `proto = auto` backend that chose HTTP/1.1 is taken at its
/// word before ALPN asks it again.
const RELEARN: Duration = Duration::from_secs(60);

/// A stream's window, and so the most an answer's stream holds unread here.
const STREAM_WINDOW: u32 = 256 * 1024;

/// A connection's window, over all its streams.
const CONN_WINDOW: u32 = 4 * 1024 * 1024;

/// One shared connection.
#[derive(Debug)]
pub struct Conn {
    /// Opens streams on it.
    send: SendRequest<Bytes>,
    /// Streams it carries now.
    in_flight: Cell<usize>,
    /// Most streams at once: the block's `max-streams`, under the server's own limit.
    cap: usize,
    /// False once it received GOAWAY, failed or idled out: no new stream.
    open: Cell<bool>,
    /// When its last stream ended.
    last_used: Cell<Instant>,
}

impl Conn {
    /// Room for one more stream now.
    fn has_room(&self) -> bool {
        self.open.get() && self.in_flight.get() < self.cap.min(self.send.current_max_send_streams())
    }

    /// Takes no new stream (a GOAWAY, a failure); its streams under way go on.
    pub fn retire(&self) {
        self.open.set(false);
    }
}

/// The connections to one server.
#[derive(Debug, Default)]
struct ServerConns {
    conns: RefCell<Vec<Rc<Conn>>>,
    /// `proto = auto`: when the server last chose HTTP/1.1 by ALPN; asked again
    /// [`RELEARN`] after.
    chose_h1: Cell<Option<Instant>>,
    /// A connection is being opened: others wait for it.
    opening: Cell<bool>,
    /// The opening ended, with a connection or without.
    opened: Notify,
}

/// A server (kept alive by its entry) and its connections, by the server's address in
/// memory: a server kept across a reload keeps its connections.
type Servers = HashMap<usize, (Arc<Server>, Rc<ServerConns>)>;

thread_local! {
    /// This worker thread's connections.
    static SERVERS: RefCell<Servers> = RefCell::new(HashMap::new());
}

fn server_conns(server: &Arc<Server>) -> Rc<ServerConns> {
    let key = Arc::as_ptr(server) as usize;
    SERVERS.with(|m| {
        m.borrow_mut()
            .entry(key)
            .or_insert_with(|| (server.clone(), Rc::default()))
            .1
            .clone()
    })
}

/// A stream's place on a shared connection and its server slot; given back when dropped.
#[derive(Debug)]
pub struct Taken {
    /// The connection.
    pub conn: Rc<Conn>,
    /// The server's slot (maxconn counts streams).
    pub lease: Lease,
}

impl Taken {
    /// A handle to open the stream with.
    pub fn sender(&self) -> SendRequest<Bytes> {
        self.conn.send.clone()
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        let c = &self.conn;
        c.in_flight.set(c.in_flight.get().saturating_sub(1));
        c.last_used.set(Instant::now());
    }
}

/// Ends an opening however its future ends, waking those waiting for it.
struct Opening<'a>(&'a ServerConns);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.opening.set(false);
        self.0.opened.notify_waiters();
    }
}

/// What [`take`] found.
#[derive(Debug)]
pub enum Got {
    /// A place for the stream, and how long opening its connection took (none for a
    /// connection already open).
    Stream(Taken, Option<Duration>),
    /// `proto = auto`: the server chose HTTP/1.1; the stream goes the HTTP/1.1 way.
    Http1,
}

/// Takes a stream's place on one of `backend`'s servers (chosen by its method for `key`): a slot on the server (waiting in
/// its queue at maxconn), then a connection with room, opened if none has. A server that
/// cannot be reached is marked down and the next one tried, `--retries` times.
pub async fn take(
    worker: &Worker,
    backend: &Backend,
    key: &Key,
    idle: Duration,
) -> Result<Got, ConnectError> {
    let max_streams = backend.max_streams;
    let tries = backend.pool.limits().retries + 1;
    let mut last = None;
    for _ in 0..tries {
        let lease = backend.pool.lease(&worker.picker, key).await?;
        let server = lease.server_arc();
        let sc = server_conns(&server);
        if sc.chose_h1.get().is_some_and(|t| t.elapsed() < RELEARN) {
            return Ok(Got::Http1);
        }
        loop {
            let room = sc.conns.borrow().iter().find(|c| c.has_room()).cloned();
            if let Some(conn) = room {
                conn.in_flight.set(conn.in_flight.get() + 1);
                return Ok(Got::Stream(Taken { conn, lease }, None));
            }
            if sc.opening.get() {
                // Registered at its first poll, before the opener can run again.
                sc.opened.notified().await;
                continue;
            }
            sc.opening.set(true);
            let opening = Opening(&sc);
            let began = std::time::Instant::now();
            let opened = open(worker, backend, &server, max_streams, idle, &sc).await;
            drop(opening);
            match opened {
                Ok(Some(conn)) => {
                    conn.in_flight.set(1);
                    return Ok(Got::Stream(Taken { conn, lease }, Some(began.elapsed())));
                }
                Ok(None) => {
                    sc.chose_h1.set(Some(Instant::now()));
                    return Ok(Got::Http1);
                }
                Err(e @ ConnectError::Local { .. }) => return Err(e),
                Err(e) => {
                    last = Some(e);
                    break; // the next server, with a slot of its own
                }
            }
        }
    }
    Err(last.unwrap_or(ConnectError::NoneUp))
}

/// Opens a connection to `server` and starts the task that drives it; `None` when the
/// server of a `proto = auto` backend chose HTTP/1.1 (the connection is closed).
async fn open(
    worker: &Worker,
    backend: &Backend,
    server: &Arc<Server>,
    max_streams: usize,
    idle: Duration,
    sc: &Rc<ServerConns>,
) -> Result<Option<Rc<Conn>>, ConnectError> {
    let (io, alpn) = upstream::dial(backend, server, &worker.picker).await?;
    if backend.proto == Proto::Auto && alpn.as_deref() != Some(b"h2") {
        tracing::debug!(
            name: "backend_chose_http1",
            backend = %backend.name,
            server = %server.name(),
            "proto = auto: the server chose HTTP/1.1 by ALPN",
        );
        return Ok(None);
    }
    let limits = backend.pool.limits();
    let refused = |reason: String| {
        server.mark_down(limits.retry_after);
        tracing::warn!(
            name: "backend_h2_failed",
            backend = %backend.name,
            server = %server.name(),
            error = %reason,
            "HTTP/2 to the backend failed: {reason}; marked down for {:?}",
            limits.retry_after,
        );
        ConnectError::Handshake {
            to: server.name().to_owned(),
            reason,
        }
    };
    if backend.tls.is_some() && alpn.as_deref() != Some(b"h2") {
        return Err(refused(
            "the server did not agree to h2 by ALPN (proto = h2)".into(),
        ));
    }
    let handshake = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONN_WINDOW)
        .initial_max_send_streams(max_streams)
        .enable_push(false)
        .handshake::<Upstream, Bytes>(io);
    let (send, mut conn) = match tokio::time::timeout(limits.connect_timeout, handshake).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Err(refused(e.to_string())),
        Err(_) => {
            return Err(refused(format!(
                "no HTTP/2 preface within {:?}",
                limits.connect_timeout
            )))
        }
    };
    let ping = conn.ping_pong();
    let shared = Rc::new(Conn {
        send,
        in_flight: Cell::new(0),
        cap: max_streams,
        open: Cell::new(true),
        last_used: Cell::new(Instant::now()),
    });
    sc.conns.borrow_mut().push(shared.clone());
    tokio::task::spawn_local(drive(
        conn,
        ping,
        Rc::downgrade(&shared),
        Rc::downgrade(sc),
        idle,
        server.name().to_owned(),
    ));
    Ok(Some(shared))
}

/// Drives one connection until it ends: pinged every [`PING_EVERY`] while it carries no
/// stream, closed after `idle` without one, given up when a PING goes unanswered.
async fn drive(
    conn: h2::client::Connection<Upstream, Bytes>,
    mut ping: Option<h2::PingPong>,
    shared: Weak<Conn>,
    sc: Weak<ServerConns>,
    idle: Duration,
    server: String,
) {
    tokio::pin!(conn);
    let mut tick = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
    let ended = loop {
        tokio::select! {
            r = &mut conn => break r.err(),
            _ = tick.tick() => {}
        }
        let Some(c) = shared.upgrade() else {
            // Taken out of the table: it ends once its last stream does.
            continue;
        };
        if c.in_flight.get() > 0 {
            continue; // its streams show it alive
        }
        if c.last_used.get().elapsed() >= idle {
            c.retire();
            forget(&sc, &c);
            continue; // h2 sends GOAWAY and ends once the last handle goes
        }
        drop(c);
        let Some(p) = ping.as_mut() else { continue };
        let answered = tokio::select! {
            r = &mut conn => break r.err(),
            r = tokio::time::timeout(PONG_WAIT, p.ping(h2::Ping::opaque())) => matches!(r, Ok(Ok(_))),
        };
        if !answered {
            tracing::warn!(
                name: "backend_h2_dead",
                server = %server,
                "an HTTP/2 backend connection did not answer a PING within {PONG_WAIT:?}: closed",
            );
            break None;
        }
    };
    if let Some(e) = ended {
        tracing::debug!(
            name: "backend_h2_closed",
            server = %server,
            error = %e,
            "an HTTP/2 backend connection ended: {e}",
        );
    }
    if let Some(c) = shared.upgrade() {
        c.retire();
        forget(&sc, &c);
    }
}

/// Takes `c` out of its server's connections; a server left with none (and none being
/// opened) leaves the table, so that the servers a reload replaced are not kept.
fn forget(sc: &Weak<ServerConns>, c: &Rc<Conn>) {
    let Some(sc) = sc.upgrade() else { return };
    let mut conns = sc.conns.borrow_mut();
    conns.retain(|o| !Rc::ptr_eq(o, c));
    if conns.is_empty() && !sc.opening.get() && sc.chose_h1.get().is_none() {
        SERVERS.with(|m| {
            m.borrow_mut()
                .retain(|_, (_, other)| !Rc::ptr_eq(other, &sc));
        });
    }
}
