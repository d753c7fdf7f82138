//! The ACME client process's life as the master sees it: forked with the master's user,
//! restarted when it dies, its answers and certificates carried to the worker.

use nix::sys::signal::{kill, Signal};

use crate::runtime::acme_child::acme_client;
use crate::runtime::channel::{Channel, Msg};
use crate::runtime::error::StartError;
use crate::runtime::fork::{fork_single_threaded, Forked};
use crate::runtime::rebuild;
use crate::system::files;

use super::AcmeChild;

impl super::Run {
    /// Forks the ACME client (with `--acme-directory`): it keeps this process's user.
    pub(super) fn spawn_acme(&mut self) -> Result<(), StartError> {
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

    pub(super) fn stop_acme(&mut self) {
        self.acme_respawn_at = None;
        if let Some(a) = &mut self.acme {
            a.chan = None;
            let _ = kill(a.pid, Signal::SIGTERM);
        }
    }

    pub(super) fn to_acme(&self, m: &Msg) {
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

    pub(super) fn on_acme_message(&mut self) {
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
    pub(super) fn acme_certificates(&mut self) {
        let Some(settings) = self.m.config.acme.clone() else {
            return;
        };
        let (certs, rec) = files::record(|| crate::acme::state::load_all(&settings));
        let new = self.m.config.with_acme_certs(certs);
        match rebuild::build(&new, &self.m.resumption) {
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
}
