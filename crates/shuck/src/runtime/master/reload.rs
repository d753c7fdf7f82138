//! SIGHUP in the master: read the configuration again as root, check it whole, bind new
//! frontends, and send the worker what it needs to apply it.

use std::os::fd::OwnedFd;

use super::upgrade::sockets_messages;
use super::Inherited;
use crate::runtime::channel::Entry;
use crate::runtime::channel::Msg;
use crate::runtime::error::StartError;
use crate::runtime::frontend_tls;
use crate::system::{files, notify};

impl super::Run {
    /// SIGHUP: reads everything again as root; when good, binds new frontends and sends
    /// the worker what was read.
    pub(super) fn reload(&mut self) {
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
        let source = &self.m.source;
        let (checked, rec) = files::record(|| {
            let mut new = source.read().map_err(|e| {
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
}
