//! The access log (`--access-log`): one line per HTTP request, whichever version brought it
//! (HTTP/1.1, HTTP/2, HTTP/3), and one per connection in TCP mode, as HAProxy's `option
//! httplog` and nginx's `access_log` write them. A line is formatted into its worker
//! thread's own buffer (`record.rs`'s facts, `format.rs`'s formats); full buffers, and each
//! thread's every 100 ms, go to one writer thread (`sink.rs`) through a bounded queue. A
//! sink that stalls fills the queue, and then lines are dropped and counted
//! (`shuck_access_log_dropped_total`), never a request slowed.

pub mod format;
pub mod record;
pub mod repeated;
pub mod request_id;
pub mod sink;
pub mod template;
mod write;

use std::cell::RefCell;
use std::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

pub use format::Format;
pub use record::{Cause, Conn, Record, Timings};
pub use sink::{Opened, Target};

/// A worker thread's buffer is handed on when it holds this much: a hand-over wakes the
/// writer thread and costs a write to the sink, about 30 µs on the writer's side whatever
/// its size, and each line about 0.17 µs more (the page cache's copy); at 1 MiB (about
/// 1 600 JSON lines) the writer spends 0.19 µs a line, at 256 KiB 0.25, at 16 KiB 1.1
/// (bench/RESULTS.md). `FLUSH_EVERY` bounds how long a line waits in it.
const BATCH_BYTES: usize = 1024 * 1024;

/// A batch's buffer: lines are written in place into its bytes (zeroed once, when it is
/// made, and written over from then on: the writer gives it back whole), each where the
/// room left holds its bound, so that a line's pieces are not each
/// a `Vec`'s growth check. A line longer than the room left hands the batch on first.
const ROOM: usize = BATCH_BYTES + 64 * 1024;

/// Batches the writer may have waiting: 4 MiB of lines at most.
const QUEUE: usize = 4;

/// How often a worker thread hands on what it has, however little.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// What is written and which requests (`--access-log-format`, `--access-log-errors-only`,
/// `--access-log-sample`): a reload may change it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policy {
    /// How lines are written.
    pub format: Format,
    /// Only errors: a status of 400 or more, or an end that is not normal.
    pub errors_only: bool,
    /// One request in this many (errors always); 1 for all.
    pub sample: u32,
}

/// A frontend's own `access-log` (a key of its block, `;access-log=` in `-f`), over
/// `--access-log`'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Own {
    /// `off`: its requests are not logged.
    Off,
    /// Its lines go here.
    To(Target),
}

impl std::str::FromStr for Own {
    type Err = String;

    /// `off`, or a target as `--access-log` takes it.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Own::Off),
            _ => s.parse().map(Own::To),
        }
    }
}

/// The access log as configured: where lines go and what they say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Where lines go (a writer each): `--access-log`'s target first when it is given,
    /// then each frontend's own, each target once.
    pub sinks: Vec<Target>,
    /// Whether `sinks[0]` is `--access-log`'s, where frontends without their own write.
    pub global: bool,
    /// What they say.
    pub policy: Policy,
}

impl Settings {
    /// `--access-log`'s target (`global`) and the frontends' own, with `policy`; `None`
    /// when nothing is logged.
    pub fn new<'a>(
        global: Option<&Target>,
        own: impl IntoIterator<Item = &'a Own>,
        policy: Policy,
    ) -> Option<Self> {
        let mut sinks: Vec<Target> = global.into_iter().cloned().collect();
        for o in own {
            if let Own::To(t) = o {
                if !sinks.contains(t) {
                    sinks.push(t.clone());
                }
            }
        }
        (!sinks.is_empty()).then_some(Settings {
            sinks,
            global: global.is_some(),
            policy,
        })
    }

    /// The sink a frontend with `own` writes to: its own target's, `--access-log`'s, or
    /// none.
    pub fn sink_of(&self, own: Option<&Own>) -> Option<usize> {
        match own {
            Some(Own::Off) => None,
            Some(Own::To(t)) => self.sinks.iter().position(|s| s == t),
            None => self.global.then_some(0),
        }
    }
}

/// Written batches' buffers kept for the worker threads' next ones: a buffer is
/// allocated once, not once a batch.
const SPARE: usize = 2;

/// What the writer and the worker threads share.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    dropped: AtomicU64,
    episode: AtomicBool,
    /// Emptied buffers, back from the writer.
    spare: std::sync::Mutex<Vec<Vec<u8>>>,
    /// Targets to write to from the next batch on (SIGUSR1, a reload), by sink.
    reopen: std::sync::Mutex<Vec<(usize, Opened)>>,
}

/// The process's access log: its policy and the queue to its writer thread.
#[derive(Debug)]
pub struct AccessLog {
    policy: ArcSwap<Policy>,
    /// Counts [`AccessLog::set_policy`]'s stores: a worker thread keeps the policy it last
    /// loaded and loads it again only when this moves (a counter's load against the
    /// swap's own bookkeeping on every line).
    generation: AtomicU64,
    tx: SyncSender<sink::Item>,
    shared: Arc<Shared>,
}

/// A worker thread's lines for one sink not yet handed on: the first `used` bytes of
/// `bytes`, whose whole length is room to write in.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    used: usize,
    lines: u64,
}

/// A worker thread's batches, one a sink, its count for sampling, and the policy it last
/// loaded with its generation.
struct Batches {
    each: Vec<Batch>,
    seen: u32,
    policy: Option<(u64, Arc<Policy>)>,
}

thread_local! {
    static BATCH: RefCell<Batches> = const {
        RefCell::new(Batches { each: Vec::new(), seen: 0, policy: None })
    };
}

impl AccessLog {
    /// Starts the writer thread on `to`, the sinks in [`Settings::sinks`]'s order. One
    /// access log a process: the worker threads' buffers are per thread, not per log.
    pub fn start(to: Vec<Opened>, policy: Policy) -> std::io::Result<Arc<Self>> {
        let (tx, rx) = sync_channel(QUEUE);
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        std::thread::Builder::new()
            .name("shuck-access-log".into())
            .spawn(move || sink::run(rx, to, s))?;
        Ok(Arc::new(AccessLog {
            policy: ArcSwap::from_pointee(policy),
            generation: AtomicU64::new(0),
            tx,
            shared,
        }))
    }

    /// Writes `rec`'s line, if the policy takes it, into this thread's buffer.
    pub fn log(&self, rec: &Record<'_>) {
        let error = rec.is_error();
        BATCH.with(|b| {
            let mut all = b.borrow_mut();
            let Batches { each, seen, policy } = &mut *all;
            let generation = self.generation.load(Acquire);
            let policy = match policy {
                Some((g, p)) if *g == generation => p,
                stale => &stale.insert((generation, self.policy.load_full())).1,
            };
            if policy.errors_only && !error {
                return;
            }
            if policy.sample > 1 && !error {
                *seen = seen.wrapping_add(1);
                if *seen % policy.sample != 0 {
                    return;
                }
            }
            let sink = rec.conn.sink;
            if each.len() <= sink {
                each.resize_with(sink + 1, Batch::default);
            }
            let b = &mut each[sink];
            let need = policy.format.bound(rec);
            if b.bytes.len() - b.used < need {
                if b.lines > 0 {
                    self.hand_on(sink, b);
                }
                if b.bytes.len() < need {
                    b.bytes.resize(need.max(ROOM), 0);
                }
            }
            match policy.format.write_into(rec, &mut b.bytes[b.used..]) {
                Some(n) => {
                    b.used += n;
                    b.lines += 1;
                }
                // Never so: the bound is an upper one. A line is lost, not a batch.
                None => self.shared.dropped(1, "a line was longer than its bound"),
            }
            if b.used >= BATCH_BYTES {
                self.hand_on(sink, b);
            }
        });
    }

    /// Hands on what this thread has buffered (each worker thread every [`FLUSH_EVERY`],
    /// and as it ends).
    pub fn flush_thread(&self) {
        BATCH.with(|b| {
            for (sink, b) in b.borrow_mut().each.iter_mut().enumerate() {
                if b.lines > 0 {
                    self.hand_on(sink, b);
                }
            }
        });
    }

    fn hand_on(&self, sink: usize, b: &mut Batch) {
        let next = self
            .shared
            .spare
            .lock()
            .ok()
            .and_then(|mut s| s.pop())
            .unwrap_or_else(|| vec![0; ROOM]);
        let bytes = std::mem::replace(&mut b.bytes, next);
        let used = std::mem::take(&mut b.used);
        let lines = std::mem::take(&mut b.lines);
        match self
            .tx
            .try_send(sink::Item::Lines(sink, bytes, used, lines))
        {
            Ok(()) => {}
            Err(TrySendError::Full(item)) => {
                self.shared.dropped(lines, "the sink is not keeping up");
                if let sink::Item::Lines(_, bytes, ..) = item {
                    self.shared.give_back(bytes);
                }
            }
            Err(TrySendError::Disconnected(_)) => {
                self.shared.dropped(lines, "the writer thread is gone")
            }
        }
    }

    /// Writes sink `sink`'s lines to `to` (SIGUSR1, a reload), from the writer's next
    /// batch on. Never waits: a full queue (a stalled sink) must not hold up the one who
    /// asks.
    pub fn reopen(&self, sink: usize, to: Opened) {
        if let Ok(mut next) = self.shared.reopen.lock() {
            next.push((sink, to));
        }
        // Full: the writer has batches to take, and looks before each.
        let _ = self.tx.try_send(sink::Item::Wake);
    }

    /// A reload's policy.
    pub fn set_policy(&self, policy: Policy) {
        self.policy.store(Arc::new(policy));
        // After the store: a thread that sees the new count loads the new policy.
        self.generation.fetch_add(1, Release);
    }

    /// Hands on this thread's lines and waits (up to `within`) until the writer has
    /// written everything before; whether it had.
    pub fn flush(&self, within: Duration) -> bool {
        let deadline = std::time::Instant::now() + within;
        self.flush_thread();
        let (done, wait) = std::sync::mpsc::channel();
        // Behind the batches already queued; while the queue is full (a slow or stalled
        // sink), tried again until the deadline, never waited on for good.
        let mut item = sink::Item::Flush(done);
        loop {
            match self.tx.try_send(item) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(back)) => {
                    if std::time::Instant::now() >= deadline {
                        return false;
                    }
                    item = back;
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        wait.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .is_ok()
    }

    /// Lines lost so far (a stalled or failing sink).
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Relaxed)
    }
}
