//! The worker process's life as the master sees it: forked on the master's sockets, told
//! what to apply, read from, counted when it crashes, retired at an upgrade.

use crate::runtime::channel::{Channel, Msg};
use crate::runtime::error::StartError;
use crate::runtime::fork::{fork_single_threaded, Forked};
use crate::system::notify;

use super::{Phase, Worker};
use crate::runtime::sockets::FrontSockets;
use crate::runtime::sockets::Sockets;
use crate::runtime::worker::{self as serve, Start};

impl super::Run {
    pub(super) fn to_worker(&self, m: &Msg) {
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

    pub(super) fn on_worker_message(&mut self) {
        let Some(w) = &mut self.worker else { return };
        let Some(c) = &w.chan else { return };
        match c.recv() {
            Ok(Msg::Ready) => self.worker_ready(),
            Ok(Msg::Reload) => {
                let _ = self.reload();
            }
            Ok(Msg::AdminReply { id, status, body }) => self.on_admin_reply(id, status, &body),
            Ok(Msg::Upgrade) => self.start_upgrade(),
            Ok(Msg::Reopen) => self.reopen_access_log(),
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

    pub(super) fn on_retiring_message(&mut self, i: usize) {
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

    pub(super) fn worker_ready(&mut self) {
        // Only the first worker's readiness ends the start; later ones just serve.
        match self.phase {
            Phase::Starting { .. } => self.phase = Phase::Serving,
            _ => return,
        }
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
    pub(super) fn spawn_worker(&mut self) -> Result<(), StartError> {
        let (mine, theirs) = Channel::pair().map_err(StartError::System)?;
        let mut sockets = Vec::new();
        for fe in &self.m.config.frontends {
            let name = fe.endpoint.to_string();
            sockets.push(match self.m.listeners.get(&name) {
                Some(b) => b.sockets.try_clone().map_err(StartError::System)?,
                None => FrontSockets::default(),
            });
        }
        let start = Start {
            config: self.m.config.clone(),
            tls: self.m.tls.clone(),
            sockets,
            services: self.m.services.try_clone().map_err(StartError::System)?,
            resumption: self.m.resumption.clone(),
            ocsp_targets: self.m.ocsp_targets.clone(),
            source: self.m.source.clone(),
            channel: theirs,
            await_sessions: self.phase == (Phase::Starting { takeover: true }),
            hold_quic: self.m.predecessor.is_some(),
            access_files: self
                .m
                .access_files
                .iter()
                .map(|(sink, f)| Ok((*sink, f.try_clone()?)))
                .collect::<std::io::Result<_>>()
                .map_err(StartError::System)?,
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
                self.restore_server_settings();
                Ok(())
            }
        }
    }

    /// In a forked child: drops the master's descriptors that are none of its business
    /// (its copies of the sockets: a frontend closed later must really close; the channels
    /// to others; the pid file, never removed by a child) and takes the signals back.
    pub(super) fn become_child(&mut self) {
        self.m.listeners.bound.clear();
        self.m.services = Sockets::none();
        std::mem::forget(self.m.pidfile.take());
        self.m.predecessor = None;
        if let Some(a) = self.m.admin.take() {
            a.close_in_child();
        }
        self.worker = None;
        self.retiring.clear();
        self.upgrade = None;
        self.acme = None;
        let _ = self.mask.thread_unblock();
    }
}
