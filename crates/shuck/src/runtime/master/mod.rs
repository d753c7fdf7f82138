//! The master process: it keeps the starting user (root in production), holds every
//! listening socket, the configuration as read and the ticket key ring, and runs one worker
//! process. It touches no client byte and does no TLS; it waits for signals and for its
//! worker's messages on one thread:
//!
//! - SIGHUP (or a worker's `Reload`): read everything again as root, check it, bind new
//!   frontends, and send the worker what was read and the new sockets; the worker swaps it
//!   in (live connections keep theirs). A reload that fails changes nothing.
//! - a worker that dies is replaced on the same sockets within a second (crash loops back
//!   off; [`CRASH_LIMIT`] crashes within [`CRASH_WINDOW`] and the master gives up, exit 1).
//! - SIGUSR2 (or a worker's `Upgrade`): start the binary on disk with the same arguments,
//!   hand it the sockets and the ticket keys; once its worker serves, this worker stops
//!   accepting, sends its session cache over, drains, and this master exits.
//! - SIGUSR1 (or a worker's `Reopen`): open `--access-log`'s file again and hand it to the
//!   worker (`access_log.rs`), for logrotate.
//! - SIGTERM/SIGINT: the worker drains and the master exits after it.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

pub(crate) mod access_log;
mod acme;
mod admin;
mod listeners;
mod reload;
mod upgrade;
mod worker;

pub use listeners::Listeners;

use crate::config::args::Source;
use crate::config::Config;
use crate::runtime::channel::{Channel, Msg};
use crate::runtime::error::StartError;
use crate::runtime::sockets::Sockets;
use crate::session::Resumption;
use crate::system::daemon::PidFile;
use crate::system::notify;
use crate::tls::ocsp::manager::Target;
use crate::tls::TlsState;

/// Crashes within [`CRASH_WINDOW`] after which the master gives up.
pub const CRASH_LIMIT: usize = 5;
/// The window over which crashes are counted.
pub const CRASH_WINDOW: Duration = Duration::from_secs(60);
/// How long a new binary gets to serve before the upgrade is abandoned.
const UPGRADE_TIMEOUT: Duration = Duration::from_secs(60);
/// The master's clock: ticket rotation and respawns are checked this often.
const TICK: Duration = Duration::from_millis(250);

/// A worker process.
#[derive(Debug)]
struct Worker {
    pid: Pid,
    chan: Option<Channel>,
}

/// A new master started by SIGUSR2, not serving yet.
#[derive(Debug)]
struct Upgrade {
    pid: Pid,
    chan: Option<Channel>,
    since: Instant,
}

/// The ACME client process.
#[derive(Debug)]
struct AcmeChild {
    pid: Pid,
    chan: Option<Channel>,
}

/// How long after the ACME client process died another is started.
const ACME_RESPAWN: Duration = Duration::from_secs(5);

/// What the master holds.
pub struct Master {
    /// The configuration served, as last read.
    pub config: Config,
    /// Every frontend's TLS state for `config`.
    pub tls: Vec<Arc<TlsState>>,
    /// The ticket key ring (and a cache each worker copies).
    pub resumption: Resumption,
    /// Certificates to keep OCSP staples for.
    pub ocsp_targets: Vec<Target>,
    /// Every frontend's sockets.
    pub listeners: Listeners,
    /// `--stats` and replication sockets.
    pub services: Sockets,
    /// Where the configuration is read again from.
    pub source: Source,
    /// The pid file, when asked for.
    pub pidfile: Option<PidFile>,
    /// The previous master, when this one was started by an upgrade.
    pub predecessor: Option<Channel>,
    /// The admin API's sockets, when asked for.
    pub admin: Option<crate::admin::AdminServer>,
    /// The access log's files, opened by the master (as root), with their sinks' indexes.
    pub access_files: Vec<(usize, std::fs::File)>,
}

/// The master's running state.
struct Run {
    m: Master,
    exe: PathBuf,
    args: Vec<OsString>,
    signals: SignalFd,
    mask: SigSet,
    worker: Option<Worker>,
    retiring: Vec<Worker>,
    crashes: VecDeque<Instant>,
    respawn_at: Option<Instant>,
    upgrade: Option<Upgrade>,
    /// Where the master's life is.
    phase: Phase,
    /// The ACME client process, with `--acme-directory`.
    acme: Option<AcmeChild>,
    /// When to start the ACME client again after it died.
    acme_respawn_at: Option<Instant>,
    /// The ACME client's last counters, for a worker started later.
    acme_status: Option<crate::acme::Status>,
    /// The admin API's calls under way, the operator's settings, the last reload.
    admin: admin::AdminState,
    /// When this master started.
    started: std::time::SystemTime,
}

/// Reads what a child that ended still left in its channel, to its end (at most a second
/// a message): SIGCHLD can be read before the child's last words.
fn read_last_words(chan: Option<Channel>, mut each: impl FnMut(Msg)) {
    if let Some(c) = chan {
        let _ = c.set_timeout(Some(Duration::from_secs(1)));
        while let Ok(m) = c.recv() {
            each(m);
        }
    }
}

/// The master's life, one phase at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The first worker is forked and has not served yet: its death is a start failure.
    /// `takeover`: it waits for the previous master's sessions (a binary upgrade).
    Starting { takeover: bool },
    /// A worker has served: one that dies is a crash, and another is forked.
    Serving,
    /// The new binary serves: this master's worker retires, then this master exits and
    /// leaves the pid file to it.
    HandingOver,
    /// SIGTERM or SIGINT: the worker drains, then this master exits. `forced`: a second
    /// signal cut the drain short (exit status 1). `handed_over`: it came while handing
    /// over, so the pid file is the new master's.
    Stopping { forced: bool, handed_over: bool },
}

impl Phase {
    /// A new binary serves in this master's place.
    fn handed_over(self) -> bool {
        matches!(
            self,
            Phase::HandingOver
                | Phase::Stopping {
                    handed_over: true,
                    ..
                }
        )
    }

    /// This master is on its way out.
    fn ending(self) -> bool {
        matches!(self, Phase::HandingOver | Phase::Stopping { .. })
    }

    /// SIGTERM or SIGINT was received.
    fn stopping(self) -> bool {
        matches!(self, Phase::Stopping { .. })
    }
}

/// Why the loop woke.
enum Woke {
    Signal,
    Worker,
    Retiring(usize),
    Upgrade,
    Predecessor,
    Acme,
    Admin,
}

/// Runs the master until the service stops (Ok) or gives up.
pub fn run(m: Master) -> Result<(), StartError> {
    let mut mask = SigSet::empty();
    for s in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGUSR2,
        Signal::SIGUSR1,
        Signal::SIGCHLD,
    ] {
        mask.add(s);
    }
    mask.thread_block()
        .map_err(|e| StartError::System(e.into()))?;
    let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|e| StartError::System(e.into()))?;
    let exe = std::env::current_exe().map_err(StartError::System)?;
    let takeover = m.predecessor.is_some();
    let mut run = Run {
        m,
        exe,
        args: std::env::args_os().collect(),
        signals,
        mask,
        worker: None,
        retiring: Vec::new(),
        crashes: VecDeque::new(),
        respawn_at: None,
        upgrade: None,
        phase: Phase::Starting { takeover },
        acme: None,
        acme_respawn_at: None,
        acme_status: None,
        admin: admin::AdminState::default(),
        started: std::time::SystemTime::now(),
    };
    run.load_server_settings();
    run.spawn_acme()?;
    run.spawn_worker()?;
    run.serve()
}

impl Run {
    fn serve(&mut self) -> Result<(), StartError> {
        loop {
            if self.phase.ending() && self.worker.is_none() && self.retiring.is_empty() {
                if self.phase.handed_over() {
                    // The pid file is the new master's now.
                    std::mem::forget(self.m.pidfile.take());
                    tracing::info!(name: "upgrade_done", "binary upgrade done: this process exits");
                } else if matches!(self.phase, Phase::Stopping { forced: true, .. }) {
                    return Err(StartError::System(std::io::Error::other(
                        "stopped by a second signal before the drain ended",
                    )));
                }
                return Ok(());
            }
            for woke in self.wait()? {
                match woke {
                    Woke::Signal => self.on_signals()?,
                    Woke::Worker => self.on_worker_message(),
                    Woke::Retiring(i) => self.on_retiring_message(i),
                    Woke::Upgrade => self.on_upgrade_message(),
                    Woke::Predecessor => self.on_predecessor_message(),
                    Woke::Acme => self.on_acme_message(),
                    // Served by on_tick, which runs after every wake-up.
                    Woke::Admin => {}
                }
            }
            self.on_tick()?;
        }
    }

    /// Waits up to a tick for signals or messages.
    fn wait(&self) -> Result<Vec<Woke>, StartError> {
        let mut fds = vec![PollFd::new(self.signals.as_fd(), PollFlags::POLLIN)];
        let mut who = vec![Woke::Signal];
        if let Some(c) = self.worker.as_ref().and_then(|w| w.chan.as_ref()) {
            fds.push(PollFd::new(c.socket().as_fd(), PollFlags::POLLIN));
            who.push(Woke::Worker);
        }
        for (i, w) in self.retiring.iter().enumerate() {
            if let Some(c) = &w.chan {
                fds.push(PollFd::new(c.socket().as_fd(), PollFlags::POLLIN));
                who.push(Woke::Retiring(i));
            }
        }
        if let Some(c) = self.upgrade.as_ref().and_then(|u| u.chan.as_ref()) {
            fds.push(PollFd::new(c.socket().as_fd(), PollFlags::POLLIN));
            who.push(Woke::Upgrade);
        }
        if let Some(c) = &self.m.predecessor {
            fds.push(PollFd::new(c.socket().as_fd(), PollFlags::POLLIN));
            who.push(Woke::Predecessor);
        }
        if let Some(c) = self.acme.as_ref().and_then(|a| a.chan.as_ref()) {
            fds.push(PollFd::new(c.socket().as_fd(), PollFlags::POLLIN));
            who.push(Woke::Acme);
        }
        if let Some(a) = &self.m.admin {
            for (fd, write) in a.fds() {
                let flags = if write {
                    PollFlags::POLLOUT
                } else {
                    PollFlags::POLLIN
                };
                fds.push(PollFd::new(fd, flags));
                who.push(Woke::Admin);
            }
        }
        let timeout = PollTimeout::try_from(TICK).unwrap_or(PollTimeout::NONE);
        match poll(&mut fds, timeout) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => return Ok(Vec::new()),
            Err(e) => return Err(StartError::System(e.into())),
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        Ok(who
            .into_iter()
            .zip(ready)
            .filter(|(_, r)| *r)
            .map(|(w, _)| w)
            .collect())
    }

    fn on_signals(&mut self) -> Result<(), StartError> {
        while let Ok(Some(info)) = self.signals.read_signal() {
            match Signal::try_from(info.ssi_signo as i32) {
                Ok(Signal::SIGCHLD) => self.reap()?,
                Ok(Signal::SIGHUP) => {
                    let _ = self.reload();
                }
                Ok(Signal::SIGUSR2) => self.start_upgrade(),
                Ok(Signal::SIGUSR1) => self.reopen_access_log(),
                Ok(Signal::SIGTERM | Signal::SIGINT) => self.stop(),
                _ => {}
            }
        }
        Ok(())
    }

    fn stop(&mut self) {
        if let Phase::Stopping { forced, .. } = &mut self.phase {
            // A second signal: the worker exits at once on its own second one.
            tracing::warn!(name: "second_signal", "second signal: the worker exits now");
            *forced = true;
        } else {
            self.phase = Phase::Stopping {
                forced: false,
                handed_over: self.phase.handed_over(),
            };
            notify::notify("STOPPING=1");
            // Once the worker stops accepting, the ports close: new connections are
            // refused, not left in a backlog nobody reads.
            self.m.listeners.bound.clear();
            self.m.services = Sockets::none();
        }
        self.respawn_at = None;
        self.stop_acme();
        for pid in self
            .worker
            .iter()
            .chain(self.retiring.iter())
            .map(|w| w.pid)
            .chain(self.upgrade.as_ref().map(|u| u.pid))
        {
            let _ = kill(pid, Signal::SIGTERM);
        }
    }

    /// Collects every child that ended.
    fn reap(&mut self) -> Result<(), StartError> {
        loop {
            let status = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => return Ok(()),
                Ok(s) => s,
            };
            let Some(pid) = status.pid() else { continue };
            if self.worker.as_ref().is_some_and(|w| w.pid == pid) {
                let chan = self.worker.take().and_then(|w| w.chan);
                if matches!(self.phase, Phase::Starting { .. }) {
                    // A Ready among its last words means it served: its death is a crash.
                    read_last_words(chan, |m| {
                        if matches!(m, Msg::Ready) {
                            self.worker_ready();
                        }
                    });
                }
                if matches!(self.phase, Phase::Starting { .. }) {
                    // It never served (privileges, chroot, a service that cannot start):
                    // a start failure, said once, not a crash loop.
                    return Err(StartError::System(std::io::Error::other(format!(
                        "the worker process {} before it served (its error is above)",
                        describe(&status)
                    ))));
                }
                if !self.phase.stopping() {
                    self.crashed(pid, &status)?;
                }
            } else if let Some(i) = self.retiring.iter().position(|w| w.pid == pid) {
                let w = self.retiring.remove(i);
                // A worker with nothing to drain exits right after its last words: the
                // sessions it hands over.
                read_last_words(w.chan, |m| {
                    if matches!(m, Msg::Sessions(_) | Msg::SessionsEnd) {
                        self.to_successor(&m);
                    }
                });
            } else if self.acme.as_ref().is_some_and(|a| a.pid == pid) {
                self.acme = None;
                if !self.phase.ending() {
                    tracing::error!(
                        name: "acme_client_died",
                        pid = %pid,
                        status = %(describe(&status)),
                        respawn_s = ACME_RESPAWN.as_secs(),
                        "the ACME client process {pid} {}; starting another in {}s",
                        describe(&status),
                        ACME_RESPAWN.as_secs(),
                    );
                    self.acme_respawn_at = Some(Instant::now() + ACME_RESPAWN);
                }
            } else if self.upgrade.as_ref().is_some_and(|u| u.pid == pid) {
                self.upgrade = None;
                if self.phase.handed_over() {
                    // It served, handed over in turn and is done: the next one serves.
                    tracing::debug!(
                        name: "successor_exited",
                        pid = %pid,
                        status = %(describe(&status)),
                        "the next process {pid} {}",
                        describe(&status),
                    );
                } else if !self.phase.stopping() {
                    tracing::error!(
                        name: "upgrade_failed",
                        binary = %self.exe.display(),
                        status = %(describe(&status)),
                        "SIGUSR2: the new binary {} {} before it served; this process goes on serving",
                        self.exe.display(),
                        describe(&status),
                    );
                }
            }
        }
    }

    fn crashed(&mut self, pid: Pid, status: &WaitStatus) -> Result<(), StartError> {
        let now = Instant::now();
        self.crashes.push_back(now);
        while self
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > CRASH_WINDOW)
        {
            self.crashes.pop_front();
        }
        let n = self.crashes.len();
        if n >= CRASH_LIMIT {
            tracing::error!(
                name: "worker_crash_loop",
                pid = %pid,
                crashes = n,
                status = %(describe(status)),
                window_s = CRASH_WINDOW.as_secs(),
                "worker process {pid} {}: {n} crashes within {}s; giving up",
                describe(status),
                CRASH_WINDOW.as_secs(),
            );
            return Err(StartError::System(std::io::Error::other(format!(
                "the worker process crashed {n} times within {}s",
                CRASH_WINDOW.as_secs()
            ))));
        }
        // The first crash is answered at once; a loop backs off (at most a second).
        let delay = if n <= 1 {
            Duration::ZERO
        } else {
            Duration::from_millis(100 << (n - 1).min(3)).min(Duration::from_secs(1))
        };
        tracing::error!(
            name: "worker_died",
            pid = %pid,
            status = %(describe(status)),
            "worker process {pid} {}; starting another on the same sockets{}",
            describe(status),
            if delay.is_zero() {
                    String::new()
                } else {
                    format!(
                        " in {}ms ({n} crashes within {}s)",
                        delay.as_millis(),
                        CRASH_WINDOW.as_secs()
                    )
                },
        );
        self.respawn_at = Some(now + delay);
        Ok(())
    }

    fn on_tick(&mut self) -> Result<(), StartError> {
        self.admin_tick();
        if self.acme_respawn_at.is_some_and(|t| Instant::now() >= t) {
            self.acme_respawn_at = None;
            self.spawn_acme()?;
        }
        if self.respawn_at.is_some_and(|t| Instant::now() >= t) {
            self.respawn_at = None;
            // A respawned worker serves at once (the phase is no longer Starting): what
            // the old one had is gone.
            self.spawn_worker()?;
        }
        // With a shared store the farm's ring lives there, kept by the worker.
        let own_ring = self.m.resumption.store.is_none();
        if let Some(t) = self.m.resumption.tickets.as_ref().filter(|_| own_ring) {
            if t.rotate_if_due() {
                if let Some(state) = t.state() {
                    self.to_worker(&Msg::Tickets(state));
                }
            }
        }
        if let Some(u) = &self.upgrade {
            if !self.phase.handed_over() && u.since.elapsed() > UPGRADE_TIMEOUT {
                tracing::error!(
                    name: "upgrade_timeout",
                    new_pid = u.pid.as_raw(),
                    timeout_s = UPGRADE_TIMEOUT.as_secs(),
                    "SIGUSR2: the new process (pid {}) did not serve within {}s; stopping it, this process goes on serving",
                    u.pid,
                    UPGRADE_TIMEOUT.as_secs(),
                );
                let _ = kill(u.pid, Signal::SIGKILL);
                if let Some(u) = &mut self.upgrade {
                    u.chan = None;
                }
            }
        }
        Ok(())
    }
}

fn describe(status: &WaitStatus) -> String {
    match status {
        WaitStatus::Exited(_, code) => format!("exited with status {code}"),
        WaitStatus::Signaled(_, sig, _) => format!("was killed by {sig}"),
        other => format!("ended ({other:?})"),
    }
}
