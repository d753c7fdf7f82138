//! The binary upgrade (SIGUSR2) from both sides: starting the new binary and handing it
//! the sockets, the ticket keys and the sessions; and, in the new master, taking them over.

use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::time::Instant;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{Phase, Upgrade};
use crate::runtime::channel::MAX_FDS;
use crate::runtime::channel::{Channel, Entry, Msg};
use crate::runtime::inherit::UPGRADE_ENV;

impl super::Run {
    /// Sessions from the retiring worker go to the new master.
    pub(super) fn to_successor(&self, m: &Msg) {
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

    pub(super) fn on_upgrade_message(&mut self) {
        let Some(u) = &mut self.upgrade else { return };
        let Some(c) = &u.chan else { return };
        match c.recv() {
            Ok(Msg::Ready) if !self.phase.handed_over() => {
                tracing::info!(
                    name: "upgrade_serving",
                    new_pid = u.pid.as_raw(),
                    "SIGUSR2: the new process (pid {}) serves; this one stops accepting, hands over its sessions and drains its connections",
                    u.pid,
                );
                self.phase = match self.phase {
                    Phase::Stopping { forced, .. } => Phase::Stopping {
                        forced,
                        handed_over: true,
                    },
                    _ => Phase::HandingOver,
                };
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
    pub(super) fn on_predecessor_message(&mut self) {
        let Some(c) = &self.m.predecessor else { return };
        match c.recv() {
            Ok(m @ (Msg::Sessions(_) | Msg::SessionsEnd)) => self.to_worker(&m),
            Ok(_) => {}
            // It has exited (its worker first): the QUIC sockets are this worker's alone.
            Err(_) => {
                self.m.predecessor = None;
                self.to_worker(&Msg::PredecessorGone);
            }
        }
    }

    /// SIGUSR2: starts the binary on disk with the same arguments and hands it the
    /// sockets and ticket keys; the rest happens when it says it serves.
    pub(super) fn start_upgrade(&mut self) {
        if self.upgrade.is_some() || self.phase.handed_over() {
            tracing::warn!(
                name: "upgrade_already_running",
                "SIGUSR2: a binary upgrade is already under way; this one is refused",
            );
            return;
        }
        if self.phase.stopping() {
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

/// Sockets as messages of at most [`MAX_FDS`] descriptors each.
pub(super) fn sockets_messages(all: Vec<(Entry, OwnedFd)>) -> Vec<Msg> {
    let mut out = Vec::new();
    let mut it = all.into_iter().peekable();
    while it.peek().is_some() {
        let (entries, fds): (Vec<Entry>, Vec<OwnedFd>) = it.by_ref().take(MAX_FDS).unzip();
        out.push(Msg::Sockets(entries, fds));
    }
    out
}
