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
//! - SIGTERM/SIGINT: the worker drains and the master exits after it.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::channel::{Channel, Entry, Msg, MAX_FDS};
use super::error::StartError;
use super::frontend_tls;
use super::inherit::{Inherited, UPGRADE_ENV};
use super::listeners::{clone_all, Listeners};
use super::serve::{self, Start};
use super::services::Sockets;
use super::Reparse;
use crate::config::Config;
use crate::session::Resumption;
use crate::system::daemon::PidFile;
use crate::system::files;
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
    /// Reads the configuration again.
    pub reparse: Reparse,
    /// The pid file, when asked for.
    pub pidfile: Option<PidFile>,
    /// The previous master, when this one was started by an upgrade.
    pub predecessor: Option<Channel>,
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
    handing_over: bool,
    stopping: bool,
    /// A second SIGTERM/SIGINT: the drain was cut short (exit status 1).
    forced: bool,
    ready_once: bool,
    /// The worker to start waits for the previous process's sessions.
    await_sessions: bool,
    /// The ACME client process, with `--acme-directory`.
    acme: Option<AcmeChild>,
    /// When to start the ACME client again after it died.
    acme_respawn_at: Option<Instant>,
    /// The ACME client's last counters, for a worker started later.
    acme_status: Option<crate::acme::Status>,
}

/// Why the loop woke.
enum Woke {
    Signal,
    Worker,
    Retiring(usize),
    Upgrade,
    Predecessor,
    Acme,
}

/// Runs the master until the service stops (Ok) or gives up.
pub fn run(m: Master) -> Result<(), StartError> {
    let mut mask = SigSet::empty();
    for s in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGUSR2,
        Signal::SIGCHLD,
    ] {
        mask.add(s);
    }
    mask.thread_block()
        .map_err(|e| StartError::System(e.into()))?;
    let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|e| StartError::System(e.into()))?;
    let exe = std::env::current_exe().map_err(StartError::System)?;
    let await_sessions = m.predecessor.is_some();
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
        handing_over: false,
        stopping: false,
        forced: false,
        ready_once: false,
        await_sessions,
        acme: None,
        acme_respawn_at: None,
        acme_status: None,
    };
    run.spawn_acme()?;
    run.spawn_worker()?;
    run.serve()
}

impl Run {
    fn serve(&mut self) -> Result<(), StartError> {
        loop {
            if (self.stopping || self.handing_over)
                && self.worker.is_none()
                && self.retiring.is_empty()
            {
                if self.handing_over {
                    // The pid file is the new master's now.
                    std::mem::forget(self.m.pidfile.take());
                    tracing::info!(name: "upgrade_done", "binary upgrade done: this process exits");
                } else if self.forced {
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
                Ok(Signal::SIGHUP) => self.reload(),
                Ok(Signal::SIGUSR2) => self.start_upgrade(),
                Ok(Signal::SIGTERM | Signal::SIGINT) => self.stop(),
                _ => {}
            }
        }
        Ok(())
    }

    fn stop(&mut self) {
        if self.stopping {
            // A second signal: the worker exits at once on its own second one.
            tracing::warn!(name: "second_signal", "second signal: the worker exits now");
            self.forced = true;
        } else {
            self.stopping = true;
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
                self.worker = None;
                if !self.stopping && !self.ready_once {
                    // It never served (privileges, chroot, a service that cannot start):
                    // a start failure, said once, not a crash loop.
                    return Err(StartError::System(std::io::Error::other(format!(
                        "the worker process {} before it served (its error is above)",
                        describe(&status)
                    ))));
                }
                if !self.stopping {
                    self.crashed(pid, &status)?;
                }
            } else if let Some(i) = self.retiring.iter().position(|w| w.pid == pid) {
                let w = self.retiring.remove(i);
                // A worker with nothing to drain exits right after its last words (the
                // sessions it hands over), and SIGCHLD can be read before them: they are
                // still in the channel, read to its end now.
                if let Some(c) = w.chan {
                    let _ = c.set_timeout(Some(Duration::from_secs(1)));
                    while let Ok(m) = c.recv() {
                        if matches!(m, Msg::Sessions(_) | Msg::SessionsEnd) {
                            self.to_successor(&m);
                        }
                    }
                }
            } else if self.acme.as_ref().is_some_and(|a| a.pid == pid) {
                self.acme = None;
                if !self.stopping && !self.handing_over {
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
                if self.handing_over {
                    // It served, handed over in turn and is done: the next one serves.
                    tracing::debug!(
                        name: "successor_exited",
                        pid = %pid,
                        status = %(describe(&status)),
                        "the next process {pid} {}",
                        describe(&status),
                    );
                } else if !self.stopping {
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
        if self.acme_respawn_at.is_some_and(|t| Instant::now() >= t) {
            self.acme_respawn_at = None;
            self.spawn_acme()?;
        }
        if self.respawn_at.is_some_and(|t| Instant::now() >= t) {
            self.respawn_at = None;
            // A respawned worker serves at once: what the old one had is gone.
            self.await_sessions = false;
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
            if !self.handing_over && u.since.elapsed() > UPGRADE_TIMEOUT {
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

    fn to_worker(&self, m: &Msg) {
        if let Some(w) = &self.worker {
            if let Some(c) = &w.chan {
                if let Err(e) = c.send(m) {
                    tracing::warn!(
                        name: "worker_unreachable",
                        error = %e,
                        worker_pid = w.pid.as_raw(),
                        "cannot reach the worker process {}: {e}",
                        w.pid,
                    );
                }
            }
        }
    }

    fn on_worker_message(&mut self) {
        let Some(w) = &mut self.worker else { return };
        let Some(c) = &w.chan else { return };
        match c.recv() {
            Ok(Msg::Ready) => self.worker_ready(),
            Ok(Msg::Reload) => self.reload(),
            Ok(Msg::Upgrade) => self.start_upgrade(),
            Ok(m @ (Msg::Sessions(_) | Msg::SessionsEnd)) => self.to_successor(&m),
            Ok(m @ (Msg::AcmeAnswered(_) | Msg::Farm(_))) => self.to_acme(&m),
            Ok(m) => {
                tracing::warn!(
                    name: "worker_message_unexpected",
                    content = ?m,
                    "unexpected message from the worker process: {m:?}",
                )
            }
            // It is ending; SIGCHLD says how.
            Err(_) => w.chan = None,
        }
    }

    fn on_retiring_message(&mut self, i: usize) {
        let Some(w) = self.retiring.get_mut(i) else {
            return;
        };
        let Some(c) = &w.chan else { return };
        match c.recv() {
            Ok(m @ (Msg::Sessions(_) | Msg::SessionsEnd)) => self.to_successor(&m),
            Ok(_) => {}
            Err(_) => w.chan = None,
        }
    }

    /// Sessions from the retiring worker go to the new master.
    fn to_successor(&self, m: &Msg) {
        if let Some(c) = self.upgrade.as_ref().and_then(|u| u.chan.as_ref()) {
            if let Err(e) = c.send(m) {
                tracing::warn!(
                    name: "upgrade_sessions_not_passed",
                    error = %e,
                    "binary upgrade: cannot pass sessions to the new process: {e}",
                );
            }
        }
    }

    fn on_upgrade_message(&mut self) {
        let Some(u) = &mut self.upgrade else { return };
        let Some(c) = &u.chan else { return };
        match c.recv() {
            Ok(Msg::Ready) if !self.handing_over => {
                tracing::info!(
                    name: "upgrade_serving",
                    new_pid = u.pid.as_raw(),
                    "SIGUSR2: the new process (pid {}) serves; this one stops accepting, hands over its sessions and drains its connections",
                    u.pid,
                );
                self.handing_over = true;
                self.respawn_at = None;
                // The new master runs its own ACME client.
                self.stop_acme();
                let Some(w) = self.worker.take() else {
                    // Between a crash and its respawn: no session to hand over.
                    self.to_successor(&Msg::SessionsEnd);
                    return;
                };
                if let Some(c) = &w.chan {
                    if let Err(e) = c.send(&Msg::Handover) {
                        tracing::warn!(
                            name: "worker_unreachable",
                            error = %e,
                            "cannot reach the worker process: {e}",
                        );
                        let _ = kill(w.pid, Signal::SIGTERM);
                    }
                }
                self.retiring.push(w);
            }
            Ok(_) => {}
            Err(_) => u.chan = None,
        }
    }

    /// Sessions from the previous master go to this one's worker.
    fn on_predecessor_message(&mut self) {
        let Some(c) = &self.m.predecessor else { return };
        match c.recv() {
            Ok(m @ (Msg::Sessions(_) | Msg::SessionsEnd)) => self.to_worker(&m),
            Ok(_) => {}
            Err(_) => self.m.predecessor = None,
        }
    }

    fn worker_ready(&mut self) {
        if self.ready_once {
            return;
        }
        self.ready_once = true;
        if let Some(p) = &self.m.predecessor {
            // Our worker serves: the previous master hands over.
            if let Err(e) = p.send(&Msg::Ready) {
                tracing::warn!(
                    name: "upgrade_predecessor_unreachable",
                    error = %e,
                    "binary upgrade: cannot reach the previous process: {e}",
                );
            }
            notify::notify(&format!("MAINPID={}\nREADY=1", std::process::id()));
        } else {
            notify::notify("READY=1");
        }
    }

    /// Forks a worker process on the master's sockets and state.
    fn spawn_worker(&mut self) -> Result<(), StartError> {
        let (mine, theirs) = Channel::pair().map_err(StartError::System)?;
        let mut sockets = Vec::new();
        for fe in &self.m.config.frontends {
            let name = fe.endpoint.to_string();
            sockets.push(match self.m.listeners.get(&name) {
                Some(b) => clone_all(&b.sockets).map_err(StartError::System)?,
                None => Vec::new(),
            });
        }
        let start = Start {
            config: self.m.config.clone(),
            tls: self.m.tls.clone(),
            sockets,
            services: self.m.services.try_clone().map_err(StartError::System)?,
            resumption: self.m.resumption.clone(),
            ocsp_targets: self.m.ocsp_targets.clone(),
            reparse: self.m.reparse.clone(),
            channel: theirs,
            await_sessions: self.await_sessions,
        };
        match fork_single_threaded().map_err(StartError::System)? {
            Forked::Child => {
                drop(mine);
                self.become_child();
                let code = serve::run(start);
                // Never back into the master's code (its pid file, its loop).
                std::process::exit(code);
            }
            Forked::Parent(pid) => {
                tracing::debug!(name: "worker_started", pid = %pid, "worker process {pid} started");
                self.worker = Some(Worker {
                    pid,
                    chan: Some(mine),
                });
                if let Some(st) = self.acme_status.clone() {
                    self.to_worker(&Msg::Acme(crate::acme::Event::Status(st)));
                }
                Ok(())
            }
        }
    }

    /// In a forked child: drops the master's descriptors that are none of its business
    /// (its copies of the sockets: a frontend closed later must really close; the channels
    /// to others; the pid file, never removed by a child) and takes the signals back.
    fn become_child(&mut self) {
        self.m.listeners.bound.clear();
        self.m.services = Sockets::none();
        std::mem::forget(self.m.pidfile.take());
        self.m.predecessor = None;
        self.worker = None;
        self.retiring.clear();
        self.upgrade = None;
        self.acme = None;
        let _ = self.mask.thread_unblock();
    }

    /// Forks the ACME client (with `--acme-directory`): it keeps this process's user.
    fn spawn_acme(&mut self) -> Result<(), StartError> {
        let Some(settings) = self.m.config.acme.clone() else {
            return Ok(());
        };
        let (mine, theirs) = Channel::pair().map_err(StartError::System)?;
        match fork_single_threaded().map_err(StartError::System)? {
            Forked::Child => {
                drop(mine);
                self.become_child();
                std::process::exit(acme_client(settings, theirs));
            }
            Forked::Parent(pid) => {
                tracing::info!(
                    name: "acme_client_started",
                    pid = %pid,
                    uid = %nix::unistd::getuid(),
                    "ACME client running as process {pid} (user {})",
                    nix::unistd::getuid(),
                );
                self.acme = Some(AcmeChild {
                    pid,
                    chan: Some(mine),
                });
                Ok(())
            }
        }
    }

    fn stop_acme(&mut self) {
        self.acme_respawn_at = None;
        if let Some(a) = &mut self.acme {
            a.chan = None;
            let _ = kill(a.pid, Signal::SIGTERM);
        }
    }

    fn to_acme(&self, m: &Msg) {
        if let Some(c) = self.acme.as_ref().and_then(|a| a.chan.as_ref()) {
            if let Err(e) = c.send(m) {
                tracing::warn!(
                    name: "acme_client_unreachable",
                    error = %e,
                    "cannot reach the ACME client process: {e}",
                );
            }
        }
    }

    fn on_acme_message(&mut self) {
        let Some(a) = &mut self.acme else { return };
        let Some(c) = &a.chan else { return };
        match c.recv() {
            Ok(Msg::Acme(crate::acme::Event::Issued)) => self.acme_certificates(),
            Ok(Msg::Acme(crate::acme::Event::Status(st))) => {
                self.acme_status = Some(st.clone());
                self.to_worker(&Msg::Acme(crate::acme::Event::Status(st)));
            }
            Ok(Msg::Acme(crate::acme::Event::Farm(body))) => self.to_worker(&Msg::Farm(body)),
            Ok(m @ Msg::Acme(_)) => self.to_worker(&m),
            Ok(m) => {
                tracing::warn!(
                    name: "acme_client_message_unexpected",
                    content = ?m,
                    "unexpected message from the ACME client process: {m:?}",
                )
            }
            // It is ending; SIGCHLD says how.
            Err(_) => a.chan = None,
        }
    }

    /// New certificates in the ACME state directory: read them as root, rebuild the TLS
    /// states here, and send what was read to the worker, which does the same (new
    /// handshakes get them; live connections keep theirs).
    fn acme_certificates(&mut self) {
        let Some(settings) = self.m.config.acme.clone() else {
            return;
        };
        let (certs, rec) = files::record(|| crate::acme::state::load_all(&settings));
        let new = self.m.config.with_acme_certs(certs);
        match frontend_tls::build(&new, &self.m.resumption) {
            Ok(built) => {
                self.m.config = new;
                self.m.tls = built;
                self.to_worker(&Msg::Certificates(rec));
            }
            Err(e) => tracing::error!(
                name: "acme_certificates_refused",
                error = %e,
                "ACME: the new certificates cannot be served: {e}; the ones in place stay",
            ),
        }
    }

    /// SIGHUP: reads everything again as root; when good, binds new frontends and sends
    /// the worker what was read.
    fn reload(&mut self) {
        if self.handing_over {
            tracing::warn!(
                name: "reload_during_upgrade",
                "SIGHUP: this process is handing over to a new binary; send SIGHUP to the new master",
            );
            return;
        }
        notify::reloading();
        let tickets = self.m.resumption.tickets.clone();
        let ocsp = self.m.config.tls.ocsp.clone();
        let resumption = self.m.resumption.clone();
        let reparse = &self.m.reparse;
        let (checked, rec) = files::record(|| {
            let mut new = reparse().map_err(|e| {
                format!("SIGHUP: configuration refused, the running one stays: {e}")
            })?;
            new.tls.tickets = tickets.clone();
            new.tls.ocsp = ocsp;
            let built = frontend_tls::build(&new, &resumption)
                .map_err(|e| format!("SIGHUP: {e}; the running configuration stays"))?;
            if let Some(keys) = tickets.as_ref().filter(|k| k.file().is_some()) {
                keys.reload()
                    .map_err(|e| format!("SIGHUP: {e}; the running configuration stays"))?;
            }
            Ok::<_, String>((new, built))
        });
        let (new, built) = match checked {
            Ok(x) => x,
            Err(e) => {
                tracing::error!(name: "reload_refused", error = %e, "{e}");
                notify::notify("READY=1");
                return;
            }
        };
        // New frontends are bound here, as root; removed ones are closed.
        let mut fresh: Vec<(Entry, OwnedFd)> = Vec::new();
        for fe in &new.frontends {
            let name = fe.endpoint.to_string();
            if self.m.listeners.get(&name).is_some() {
                continue;
            }
            let opened = self
                .m
                .listeners
                .open(fe, &mut Inherited::default())
                .and_then(|()| match self.m.listeners.get(&name) {
                    Some(b) => b.export().map_err(StartError::System),
                    None => Ok(Vec::new()),
                });
            match opened {
                Ok(sockets) => fresh.extend(sockets),
                Err(e) => {
                    tracing::error!(
                        name: "reload_frontend_failed",
                        name = %name,
                        error = %e,
                        "SIGHUP: cannot open frontend {name}: {e}",
                    )
                }
            }
        }
        let wanted: Vec<String> = new
            .frontends
            .iter()
            .map(|f| f.endpoint.to_string())
            .collect();
        let gone: Vec<String> = self
            .m
            .listeners
            .bound
            .iter()
            .map(|b| b.name.clone())
            .filter(|n| !wanted.contains(n))
            .collect();
        for name in gone {
            self.m.listeners.close(&name);
        }
        for m in sockets_messages(fresh) {
            self.to_worker(&m);
        }
        self.to_worker(&Msg::Apply(rec));
        self.m.config = new;
        self.m.tls = built;
        notify::notify("READY=1");
    }

    /// SIGUSR2: starts the binary on disk with the same arguments and hands it the
    /// sockets and ticket keys; the rest happens when it says it serves.
    fn start_upgrade(&mut self) {
        if self.upgrade.is_some() || self.handing_over {
            tracing::warn!(
                name: "upgrade_already_running",
                "SIGUSR2: a binary upgrade is already under way; this one is refused",
            );
            return;
        }
        if self.stopping {
            return;
        }
        let started = Channel::pair().and_then(|(mine, theirs)| {
            let child = Command::new(&self.exe)
                .args(self.args.iter().skip(1))
                .env(UPGRADE_ENV, std::process::id().to_string())
                .stdin(Stdio::from(OwnedFd::from(theirs.into_socket())))
                .spawn()?;
            Ok((mine, child))
        });
        let (chan, child) = match started {
            Ok(x) => x,
            Err(e) => {
                tracing::error!(
                    name: "upgrade_cannot_start",
                    error = %e,
                    binary = %self.exe.display(),
                    "SIGUSR2: cannot start {}: {e}; this process goes on serving",
                    self.exe.display(),
                );
                return;
            }
        };
        let pid = Pid::from_raw(child.id() as i32);
        // The child is reaped by waitpid with the others.
        drop(child);
        tracing::info!(
            name: "upgrade_started",
            pid = %pid,
            binary = %self.exe.display(),
            "SIGUSR2: started {} (pid {pid}); handing over once it serves",
            self.exe.display(),
        );
        let mut handed = self.m.listeners.export();
        if let Ok(services) = self.m.services.export() {
            if let Ok(h) = &mut handed {
                h.extend(services);
            }
        }
        let mut msgs = match handed {
            Ok(h) => sockets_messages(h),
            Err(e) => {
                tracing::error!(
                    name: "upgrade_sockets_not_passed",
                    error = %e,
                    "SIGUSR2: cannot pass the sockets: {e}; this process goes on serving",
                );
                let _ = kill(pid, Signal::SIGKILL);
                return;
            }
        };
        if let Some(state) = self.m.resumption.tickets.as_ref().and_then(|t| t.state()) {
            msgs.push(Msg::Tickets(state));
        }
        // The end of what it needs to start.
        msgs.push(Msg::Ready);
        for m in &msgs {
            if let Err(e) = chan.send(m) {
                tracing::error!(
                    name: "upgrade_successor_gone",
                    error = %e,
                    "SIGUSR2: the new process went away: {e}; this process goes on serving",
                );
                break;
            }
        }
        self.upgrade = Some(Upgrade {
            pid,
            chan: Some(chan),
            since: Instant::now(),
        });
    }
}

/// The ACME client process's life: its channel to this master, read on a thread of its
/// own (the process is single-threaded until now, as it was forked).
fn acme_client(settings: crate::acme::Settings, chan: Channel) -> i32 {
    // It dies with its master, as the worker does (its writes are renames: never half a
    // file); a new master starts its own.
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        tracing::error!(name: "acme_error", error = %e, "ACME: {e}");
        return 1;
    }
    let reader = match chan.try_clone() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(name: "acme_error", error = %e, "ACME: {e}");
            return 1;
        }
    };
    let (tx, inbox) = tokio::sync::mpsc::unbounded_channel();
    let spawned = std::thread::Builder::new()
        .name("shuck-acme-link".into())
        .spawn(move || {
            while let Ok(m) = reader.recv() {
                let inbound = match m {
                    Msg::AcmeAnswered(a) => crate::acme::client::Inbound::Answered(a),
                    Msg::Farm(body) => crate::acme::client::Inbound::Farm(body),
                    _ => continue,
                };
                if tx.send(inbound).is_err() {
                    break;
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(name: "acme_error", error = %e, "ACME: {e}");
        return 1;
    }
    let link = crate::acme::client::Link {
        send: std::rc::Rc::new(move |e| chan.send(&Msg::Acme(e)).map_err(|e| e.to_string())),
        inbox,
    };
    crate::acme::client::run(settings, link)
}

/// Sockets as messages of at most [`MAX_FDS`] descriptors each.
fn sockets_messages(all: Vec<(Entry, OwnedFd)>) -> Vec<Msg> {
    let mut out = Vec::new();
    let mut it = all.into_iter().peekable();
    while it.peek().is_some() {
        let (entries, fds): (Vec<Entry>, Vec<OwnedFd>) = it.by_ref().take(MAX_FDS).unzip();
        out.push(Msg::Sockets(entries, fds));
    }
    out
}

fn describe(status: &WaitStatus) -> String {
    match status {
        WaitStatus::Exited(_, code) => format!("exited with status {code}"),
        WaitStatus::Signaled(_, sig, _) => format!("was killed by {sig}"),
        other => format!("ended ({other:?})"),
    }
}

enum Forked {
    Child,
    Parent(Pid),
}

/// fork(2), refused unless this process has one thread.
#[allow(unsafe_code)]
fn fork_single_threaded() -> std::io::Result<Forked> {
    let threads = std::fs::read_dir("/proc/self/task")?.count();
    if threads != 1 {
        return Err(std::io::Error::other(format!(
            "the master process has {threads} threads; it forks only with one"
        )));
    }
    // SAFETY: fork is unsound only when another thread may hold a lock (the allocator's,
    // stdio's, a mutex) that the child would then find held forever. The master never
    // starts a thread (it runs no runtime, no service; those live in the worker), and the
    // count just read from /proc says this process has exactly one, this one; so no lock
    // can be held by anyone but the caller, and the child runs ordinary Rust from here.
    match unsafe { nix::unistd::fork() }.map_err(std::io::Error::from)? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child)),
    }
}
