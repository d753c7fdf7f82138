//! SIGHUP in the master: read the configuration again as root, check it whole, bind new
//! frontends, and send the worker what it needs to apply it.

use std::os::fd::OwnedFd;

use super::upgrade::sockets_messages;
use crate::runtime::channel::Entry;
use crate::runtime::channel::Msg;
use crate::runtime::error::StartError;
use crate::runtime::inherit::Inherited;
use crate::runtime::rebuild::{self, FrontendDiff, Reread};
use crate::system::{files, notify};

impl super::Run {
    /// SIGHUP (or the admin API's `POST /reload`): reads everything again as root; when
    /// good, binds new frontends and sends the worker what was read. The error says why
    /// nothing changed.
    pub(super) fn reload(&mut self) -> Result<(), String> {
        let r = self.reload_once();
        self.admin.last_reload = Some((std::time::SystemTime::now(), r.clone()));
        r
    }

    fn reload_once(&mut self) -> Result<(), String> {
        if self.phase.handed_over() {
            tracing::warn!(
                name: "reload_during_upgrade",
                "SIGHUP: this process is handing over to a new binary; send SIGHUP to the new master",
            );
            return Err(
                "this process is handing over to a new binary: reload the new master".into(),
            );
        }
        notify::reloading();
        let m = &self.m;
        let (checked, rec) = files::record(|| rebuild::reread(&m.source, &m.config, &m.resumption));
        let Reread {
            config: new,
            tls: built,
            ..
        } = match checked {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(name: "reload_refused", error = %e, "SIGHUP: {e}");
                notify::notify("READY=1");
                return Err(e.to_string());
            }
        };
        // New frontends are bound here, as root; removed ones are closed.
        let bound: Vec<String> = self
            .m
            .listeners
            .bound
            .iter()
            .map(|b| b.name.clone())
            .collect();
        let FrontendDiff { added, removed } = rebuild::diff(&bound, &new);
        let mut fresh: Vec<(Entry, OwnedFd)> = Vec::new();
        for fe in new
            .frontends
            .iter()
            .filter(|f| added.contains(&f.endpoint.to_string()))
        {
            let name = fe.endpoint.to_string();
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
        for name in removed {
            self.m.listeners.close(&name);
        }
        fresh.extend(self.m.services.replug_plain(&new));
        for m in sockets_messages(fresh) {
            self.to_worker(&m);
        }
        // The worker takes the access log's file before the configuration that names it.
        self.hand_access_files(&new);
        self.to_worker(&Msg::Apply(rec));
        self.m.config = new;
        self.m.tls = built;
        self.restore_server_settings();
        notify::notify("READY=1");
        Ok(())
    }
}
