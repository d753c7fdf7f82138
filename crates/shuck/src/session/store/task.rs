//! The store's thread: one current-thread runtime and one reconnecting, multiplexed
//! connection (redis's `ConnectionManager`, with backoff), in RESP3 so that the ticket
//! ring's notifications arrive on it. The requests from handshakes and the cache's sink
//! that wait at once go as one pipeline, a task on it; a second loop keeps the ticket ring
//! and watches the store's health.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ProtocolVersion, RedisError};
use tokio::sync::{mpsc, oneshot};

use super::stats::{Op, Outcome};
use super::{Lookup, Reply, Request, Settings, SharedStore, StoreError};
use crate::clock::unix_ms;
use crate::session::tickets::{RingState, TicketKeys};

/// How often the ring is read and the rotation lock renewed (and, without a ring, the
/// store's health checked).
const TICK: Duration = Duration::from_secs(1);
/// How long the rotation lock outlives its holder's last renewal.
const LOCK_TTL: Duration = Duration::from_secs(10);
/// Most requests sent as one pipeline.
const BATCH: usize = 64;
/// Most a command waits for its answer (handshakes wait far less: `--shared-store-timeout`).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

/// Takes the rotation lock, or renews it when this host holds it: 1 if held, else 0.
const LOCK_SCRIPT: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
";

/// The client of `settings` (RESP3; TLS roots from `--shared-store-ca`; no Nagle delay, or
/// a lookup sent behind a write waits for the write's acknowledgement).
pub(super) fn client(settings: &Settings) -> Result<redis::Client, StoreError> {
    let info = settings
        .connection
        .clone()
        .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
    let redis_settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let info = info.set_redis_settings(redis_settings);
    match &settings.ca {
        Some(pem) => redis::Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.clone()),
            },
        ),
        None => redis::Client::open(info),
    }
    .map_err(|e| StoreError::Client {
        url: settings.url.clone(),
        reason: e.to_string(),
    })
}

/// The thread's body: serves requests until `stop` fires (or its sender is dropped).
pub(super) fn run(
    store: Arc<SharedStore>,
    client: redis::Client,
    mut requests: mpsc::Receiver<Request>,
    mut stop: oneshot::Receiver<()>,
    tickets: Option<Arc<TicketKeys>>,
    clients: Option<(Arc<crate::clients::Clients>, Duration)>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(
                name: "store_cannot_start",
                error = %e,
                "shared store: cannot start its runtime: {e}; sessions stay local",
            );
            return;
        }
    };
    rt.block_on(async move {
        let (push_tx, push_rx) = mpsc::unbounded_channel();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(RESPONSE_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_min_delay(Duration::from_millis(100))
            .set_max_delay(Duration::from_secs(5))
            .set_number_of_retries(2)
            .set_push_sender(push_tx)
            .set_automatic_resubscription();
        let conn = match ConnectionManager::new_lazy_with_config(client, config) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(
                    name: "store_failed",
                    error = %e,
                    url = %store.settings.url,
                    "shared store {}: {e}; sessions stay local",
                    store.settings.url,
                );
                return;
            }
        };
        let health = Arc::new(Health {
            store: store.clone(),
            state: Mutex::new(State::Starting),
        });
        let keeper = tokio::spawn(keep_ring(
            store.clone(),
            conn.clone(),
            health.clone(),
            tickets.filter(|t| t.file().is_none()),
            push_rx,
        ));
        let sharer = clients.map(|(c, every)| {
            tokio::spawn(super::clients::share(store.clone(), conn.clone(), c, every))
        });
        loop {
            tokio::select! {
                _ = &mut stop => break,
                r = requests.recv() => match r {
                    Some(first) => {
                        let mut batch = vec![first];
                        while batch.len() < BATCH {
                            match requests.try_recv() {
                                Ok(r) => batch.push(r),
                                Err(_) => break,
                            }
                        }
                        tokio::spawn(serve_batch(store.clone(), conn.clone(), health.clone(), batch));
                    }
                    None => break,
                },
            }
        }
        keeper.abort();
        if let Some(s) = sharer {
            s.abort();
        }
    });
}

/// Whether the store answers, with one log line when that changes: at most one outage
/// (and its end) a minute is logged, so a store that fails every other command (full, at
/// maxmemory) cannot flood the log; the outages in between go to debug.
struct Health {
    store: Arc<SharedStore>,
    state: Mutex<State>,
}

enum State {
    Starting,
    Up {
        /// When the last outage logged at warning level began.
        last_logged: Option<Instant>,
    },
    Down {
        since: Instant,
        logged: bool,
    },
}

/// Outages logged at warning level at most this often.
const OUTAGE_LOG_EVERY: Duration = Duration::from_secs(60);

impl Health {
    fn ok(&self) {
        if self.store.is_up() {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let url = &self.store.settings.url;
        let last_logged = match *state {
            State::Starting => {
                tracing::info!(
                    name: "store_connected",
                    url = %url,
                    "shared store {url}: connected",
                );
                None
            }
            State::Down { since, logged } => {
                let after = since.elapsed().as_secs_f64();
                if logged {
                    tracing::info!(
                        name: "store_reachable_again",
                        url = %url,
                        after = after,
                        "shared store {url}: reachable again after {after:.1}s; sessions and ticket keys are shared again",
                    );
                } else {
                    tracing::debug!(
                        name: "store_reachable_again",
                        url = %url,
                        after = after,
                        "shared store {url}: reachable again after {after:.1}s",
                    );
                }
                logged.then_some(since)
            }
            State::Up { last_logged } => last_logged,
        };
        *state = State::Up { last_logged };
        self.store.stats.up.store(1, Relaxed);
    }

    fn failed(&self, what: &str, e: &RedisError) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let log = match *state {
            State::Down { .. } => return,
            State::Starting => true,
            State::Up { last_logged } => {
                last_logged.is_none_or(|t| t.elapsed() >= OUTAGE_LOG_EVERY)
            }
        };
        self.store.stats.up.store(0, Relaxed);
        let url = &self.store.settings.url;
        if log {
            tracing::warn!(
                name: "store_unreachable",
                url = %url,
                what = %what,
                error = %e,
                "shared store {url}: {what} failed: {e}; handshakes resume from this host's cache only until it answers (reconnecting with backoff)",
            );
        } else {
            tracing::debug!(
                name: "store_unreachable",
                url = %url,
                what = %what,
                error = %e,
                "shared store {url}: {what} failed: {e}",
            );
        }
        *state = State::Down {
            since: Instant::now(),
            logged: log,
        };
    }
}

/// What a command of a batch answers for.
enum Pending {
    Put,
    Get { name: Vec<u8>, op: Op, reply: Reply },
}

/// The requests waiting at once, sent as one pipeline: under load many sessions share a
/// write and a wake-up, and Redis answers them in one read.
async fn serve_batch(
    store: Arc<SharedStore>,
    mut conn: ConnectionManager,
    health: Arc<Health>,
    batch: Vec<Request>,
) {
    let now = unix_ms();
    let lifetime = store.lifetime.as_millis() as u64;
    let mut pipe = redis::pipe();
    let mut pending = Vec::with_capacity(batch.len());
    for request in batch {
        match request {
            Request::Put {
                key,
                value,
                stored_ms,
            } => {
                let ttl = lifetime.saturating_sub(now.saturating_sub(stored_ms));
                let name = store.session_name(&key);
                match store.seal_session(&name, &value, stored_ms) {
                    Some(sealed) if ttl > 0 => {
                        pipe.cmd("SET").arg(name).arg(sealed).arg("PX").arg(ttl);
                        pending.push(Pending::Put);
                    }
                    Some(_) => {}
                    None => store.stats.count(Op::Put, Outcome::Error),
                }
            }
            Request::Get { key, take, reply } => {
                let (op, command) = if take {
                    (Op::Take, "GETDEL")
                } else {
                    (Op::Get, "GET")
                };
                let name = store.session_name(&key);
                pipe.cmd(command).arg(&name);
                pending.push(Pending::Get { name, op, reply });
            }
        }
    }
    if pending.is_empty() {
        return;
    }
    let answers: Result<Vec<redis::Value>, _> = pipe.query_async(&mut conn).await;
    let answers = match answers {
        Ok(a) => {
            health.ok();
            a
        }
        Err(e) => {
            health.failed("writing or looking up sessions", &e);
            for p in pending {
                match p {
                    Pending::Put => store.stats.count(Op::Put, Outcome::Error),
                    Pending::Get { op, reply, .. } => {
                        store.stats.count(op, Outcome::Error);
                        reply.send(Lookup::Unavailable);
                    }
                }
            }
            return;
        }
    };
    for (p, answer) in pending.into_iter().zip(answers) {
        match p {
            Pending::Put => store.stats.count(Op::Put, Outcome::Ok),
            Pending::Get { name, op, reply } => {
                let got: Option<Vec<u8>> = redis::from_redis_value(answer).unwrap_or(None);
                reply.send(found(&store, op, &name, got, now));
            }
        }
    }
}

/// A lookup's answer, counted.
fn found(store: &SharedStore, op: Op, name: &[u8], got: Option<Vec<u8>>, now: u64) -> Lookup {
    let (outcome, lookup) = match got.map(|b| store.open_session(name, &b, now)) {
        None => (Outcome::Miss, Lookup::Absent),
        Some(None) => (Outcome::Unsealed, Lookup::Absent),
        Some(Some((_, age))) if age >= store.lifetime => (Outcome::Miss, Lookup::Absent),
        Some(Some((value, age))) => (Outcome::Hit, Lookup::Found { value, age }),
    };
    store.stats.count(op, outcome);
    lookup
}

/// The ring stored under `store`'s ring entry, opened and decoded.
pub(super) fn open_ring(store: &SharedStore, sealed: &[u8]) -> Option<RingState> {
    let plain = store.sealer.open(ring_name(store).as_bytes(), sealed)?;
    let mut r = crate::codec::Reader::new(&plain);
    let state = RingState::decode(&mut r).ok()?;
    r.end().ok().map(|()| state)
}

fn ring_name(store: &SharedStore) -> String {
    format!("{}ticket-keys", store.settings.prefix)
}

/// The same keys in the same roles (retired keys aside).
fn same_roles(a: &RingState, b: &RingState) -> bool {
    let name = |s: &RingState, i: Option<usize>| i.and_then(|i| s.keys.get(i)).map(|k| k.name);
    a.rotate_at == b.rotate_at
        && name(a, Some(a.current)) == name(b, Some(b.current))
        && name(a, a.next) == name(b, b.next)
}

/// Every [`TICK`] and on each notification: reads the farm's ticket ring and uses it,
/// takes or renews the rotation lock, and when it holds it, rotates the ring when due (or
/// publishes this host's when the store has none). Without a timer ring, only checks that
/// the store answers. While the store is unreachable, this host rotates its own ring.
async fn keep_ring(
    store: Arc<SharedStore>,
    mut conn: ConnectionManager,
    health: Arc<Health>,
    tickets: Option<Arc<TicketKeys>>,
    mut notified: mpsc::UnboundedReceiver<redis::PushInfo>,
) {
    let ring = ring_name(&store);
    let lock = format!("{ring}:lock");
    // Who holds the lock, for an operator reading it: host, process, and random bytes
    // (hosts in network namespaces share a host name).
    let mut nonce = [0u8; 4];
    let _ = aws_lc_rs::rand::fill(&mut nonce);
    let me = format!(
        "{}:{}:{:08x}",
        nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default(),
        std::process::id(),
        u32::from_be_bytes(nonce)
    );
    let script = redis::Script::new(LOCK_SCRIPT);
    let mut subscribed = false;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            n = notified.recv() => if n.is_none() { return },
        }
        let Some(tickets) = &tickets else {
            let r: Result<String, _> = redis::cmd("PING").query_async(&mut conn).await;
            match r {
                Ok(_) => health.ok(),
                Err(e) => health.failed("a health check", &e),
            }
            continue;
        };
        if !subscribed {
            subscribed = conn.subscribe(&ring).await.is_ok();
        }
        let read: Result<Option<Vec<u8>>, _> =
            redis::cmd("GET").arg(&ring).query_async(&mut conn).await;
        let remote = match read {
            Err(e) => {
                store.stats.count(Op::RingRead, Outcome::Error);
                health.failed("reading the ticket key ring", &e);
                // Alone until the store is back: keep issuing tickets with fresh keys.
                tickets.rotate_if_due();
                continue;
            }
            Ok(None) => {
                health.ok();
                store.stats.count(Op::RingRead, Outcome::Miss);
                None
            }
            Ok(Some(sealed)) => {
                health.ok();
                let state = open_ring(&store, &sealed);
                let outcome = if state.is_some() {
                    Outcome::Ok
                } else {
                    Outcome::Unsealed
                };
                store.stats.count(Op::RingRead, outcome);
                state
            }
        };
        if let Some(state) = &remote {
            if !tickets.state().is_some_and(|l| same_roles(&l, state)) {
                // This host's keys keep decrypting what it issued before.
                let mine = tickets.export();
                tickets.install(state);
                tickets.merge(&mine);
            }
        }
        let held: Result<i64, _> = script
            .key(&lock)
            .arg(&me)
            .arg(LOCK_TTL.as_millis() as u64)
            .invoke_async(&mut conn)
            .await;
        let owner = match held {
            Ok(1) => {
                store.stats.count(Op::Lock, Outcome::Ok);
                true
            }
            Ok(_) => {
                store.stats.count(Op::Lock, Outcome::Miss);
                false
            }
            Err(e) => {
                store.stats.count(Op::Lock, Outcome::Error);
                health.failed("taking the ticket rotation lock", &e);
                false
            }
        };
        if !owner {
            continue;
        }
        let rotated = tickets.rotate_if_due();
        if remote.is_some() && !rotated {
            continue;
        }
        let Some(state) = tickets.state() else {
            continue;
        };
        let mut plain = Vec::new();
        state.encode(&mut plain);
        let Some(sealed) = store.sealer.seal(ring.as_bytes(), &plain) else {
            store.stats.count(Op::RingWrite, Outcome::Error);
            continue;
        };
        let r: Result<(), _> = redis::pipe()
            .cmd("SET")
            .arg(&ring)
            .arg(sealed)
            .ignore()
            .cmd("PUBLISH")
            .arg(&ring)
            .arg("rotated")
            .ignore()
            .query_async(&mut conn)
            .await;
        match r {
            Ok(()) => {
                store.stats.count(Op::RingWrite, Outcome::Ok);
                tracing::info!(
                    name: "store_ring_written",
                    action = %(if rotated { "rotated" } else { "published" }),
                    "shared store: ticket key ring {} (this host holds the rotation lock)",
                    if rotated { "rotated" } else { "published" },
                );
            }
            Err(e) => {
                store.stats.count(Op::RingWrite, Outcome::Error);
                health.failed("writing the ticket key ring", &e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flapping_store_logs_one_outage_a_minute() {
        let settings = Settings::fixture("redis://127.0.0.1:1").unwrap();
        let store = Arc::new(SharedStore::new(settings, Duration::from_secs(300)).unwrap());
        let health = Health {
            store: store.clone(),
            state: Mutex::new(State::Starting),
        };
        let e = RedisError::from(std::io::Error::other("refused"));
        let logged = |h: &Health| match *h.state.lock().unwrap() {
            State::Down { logged, .. } => Some(logged),
            _ => None,
        };
        health.failed("a lookup", &e);
        assert_eq!((logged(&health), store.is_up()), (Some(true), false));
        health.failed("a lookup", &e);
        assert_eq!(logged(&health), Some(true), "one line per outage");
        health.ok();
        assert!(store.is_up());
        health.failed("a write", &e);
        assert_eq!(
            logged(&health),
            Some(false),
            "the next within a minute: debug"
        );
        health.ok();
        // A minute after the last logged outage began, the next is logged again.
        *health.state.lock().unwrap() = State::Up {
            last_logged: Instant::now().checked_sub(OUTAGE_LOG_EVERY),
        };
        store.stats.up.store(1, Relaxed);
        health.failed("a write", &e);
        assert_eq!(logged(&health), Some(true));
    }
}
