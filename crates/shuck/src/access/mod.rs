//! The access log (`--access-log`): one line per HTTP request, whichever version brought it
//! (HTTP/1.1, HTTP/2, HTTP/3), and one per connection in TCP mode, as HAProxy's `option
//! httplog` and nginx's `access_log` write them. A line is formatted into its worker
//! thread's own buffer (`record.rs`'s facts, `format.rs`'s formats); full buffers, and each
//! thread's every 100 ms, go to one writer thread (`sink.rs`) through a bounded queue. A
//! sink that stalls fills the queue, and then lines are dropped and counted
//! (`shuck_access_log_dropped_total`), never a request slowed.

pub mod format;
pub mod record;
pub mod request_id;
pub mod sink;
mod write;

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

pub use format::Format;
pub use record::{Cause, Conn, Record, Timings};
pub use sink::{Opened, Target};

/// A worker thread's buffer is handed on when it holds this much.
const BATCH_BYTES: usize = 16 * 1024;

/// Batches the writer may have waiting: 4 MiB of lines at most.
const QUEUE: usize = 256;

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

/// `--access-log` and its policy, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Where lines go.
    pub target: Target,
    /// What they say.
    pub policy: Policy,
}

/// Written batches' buffers kept for the worker threads' next ones: a buffer is
/// allocated once, not once a batch (a fresh 20 KiB each time is page faults).
const SPARE: usize = 8;

/// What the writer and the worker threads share.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    dropped: AtomicU64,
    episode: AtomicBool,
    /// Emptied buffers, back from the writer.
    spare: std::sync::Mutex<Vec<Vec<u8>>>,
}

/// The process's access log: its policy and the queue to its writer thread.
#[derive(Debug)]
pub struct AccessLog {
    policy: ArcSwap<Policy>,
    tx: SyncSender<sink::Item>,
    shared: Arc<Shared>,
}

/// A worker thread's lines not yet handed on, and its count for sampling.
struct Batch {
    bytes: Vec<u8>,
    lines: u64,
    seen: u32,
}

thread_local! {
    static BATCH: RefCell<Batch> = const { RefCell::new(Batch { bytes: Vec::new(), lines: 0, seen: 0 }) };
}

impl AccessLog {
    /// Starts the writer thread on `to`. One access log a process: the worker threads'
    /// buffers are per thread, not per log.
    pub fn start(to: Opened, policy: Policy) -> std::io::Result<Arc<Self>> {
        let (tx, rx) = sync_channel(QUEUE);
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        std::thread::Builder::new()
            .name("shuck-access-log".into())
            .spawn(move || sink::run(rx, to, s))?;
        Ok(Arc::new(AccessLog {
            policy: ArcSwap::from_pointee(policy),
            tx,
            shared,
        }))
    }

    /// Writes `rec`'s line, if the policy takes it, into this thread's buffer.
    pub fn log(&self, rec: &Record<'_>) {
        let policy = self.policy.load();
        let error = rec.is_error();
        if policy.errors_only && !error {
            return;
        }
        BATCH.with(|b| {
            let mut b = b.borrow_mut();
            if policy.sample > 1 && !error {
                b.seen = b.seen.wrapping_add(1);
                if b.seen % policy.sample != 0 {
                    return;
                }
            }
            if b.bytes.capacity() == 0 {
                b.bytes.reserve(BATCH_BYTES + 4096);
            }
            policy.format.write(rec, &mut b.bytes);
            b.lines += 1;
            if b.bytes.len() >= BATCH_BYTES {
                self.hand_on(&mut b);
            }
        });
    }

    /// Hands on what this thread has buffered (each worker thread every [`FLUSH_EVERY`],
    /// and as it ends).
    pub fn flush_thread(&self) {
        BATCH.with(|b| {
            let mut b = b.borrow_mut();
            if b.lines > 0 {
                self.hand_on(&mut b);
            }
        });
    }

    fn hand_on(&self, b: &mut Batch) {
        let next = self
            .shared
            .spare
            .lock()
            .ok()
            .and_then(|mut s| s.pop())
            .unwrap_or_else(|| Vec::with_capacity(BATCH_BYTES + 4096));
        let bytes = std::mem::replace(&mut b.bytes, next);
        let lines = std::mem::take(&mut b.lines);
        match self.tx.try_send(sink::Item::Lines(bytes, lines)) {
            Ok(()) => {}
            Err(TrySendError::Full(item)) => {
                self.shared.dropped(lines, "the sink is not keeping up");
                if let sink::Item::Lines(mut bytes, _) = item {
                    bytes.clear();
                    self.shared.give_back(bytes);
                }
            }
            Err(TrySendError::Disconnected(_)) => {
                self.shared.dropped(lines, "the writer thread is gone")
            }
        }
    }

    /// Writes to `to` from now on (SIGUSR1, a reload); waits for room, as this is never on
    /// a request's path.
    pub fn reopen(&self, to: Opened) {
        let _ = self.tx.send(sink::Item::Reopen(to));
    }

    /// A reload's policy.
    pub fn set_policy(&self, policy: Policy) {
        self.policy.store(Arc::new(policy));
    }

    /// Hands on this thread's lines and waits (up to `within`) until the writer has
    /// written everything before; whether it had.
    pub fn flush(&self, within: Duration) -> bool {
        self.flush_thread();
        let (done, wait) = std::sync::mpsc::channel();
        if self.tx.send(sink::Item::Flush(done)).is_err() {
            return false;
        }
        wait.recv_timeout(within).is_ok()
    }

    /// Lines lost so far (a stalled or failing sink).
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Relaxed)
    }
}
