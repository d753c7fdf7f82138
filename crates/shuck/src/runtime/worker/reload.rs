//! A reload, in the worker process: the master read the configuration again (the same
//! command line and file) as root and sends what it read; the worker parses the same
//! command line over that recording (`system::files`), loads every certificate, key and
//! ticket-key file from it, and only when all of it is good, applies it: each
//! frontend's TLS state is swapped (new connections use the new one, live connections keep
//! theirs), frontends that appeared are opened, those that disappeared are closed. A reload
//! that fails anywhere changes nothing and says why. Settings that only a restart can
//! change (workers, backends, timeouts, ...) are named in a warning.

use crate::runtime::sockets::FrontSockets;
use std::sync::Arc;

use super::frontends::Frontends;
use crate::backend::Pool;
use crate::config::args::Source;
use crate::config::{BackendTarget, Config};
use crate::edge::ProxyState;
use crate::runtime::rebuild::{self, restart_only, FrontendDiff, Reread};
use crate::session::Resumption;
use crate::system::files::{self, Recording};
use crate::tls::ocsp::manager as ocsp;

/// Holds what a reload compares against and builds from.
pub struct Reloader {
    pub(super) current: Config,
    source: Source,
    /// What connections read: its routing is swapped when backends or routes change.
    pub(super) state: Arc<ProxyState>,
    /// The health checks' thread, once some server has a check.
    checks: Option<super::checks::Checks>,
    /// The session cache and ticket keys built at start: they live for the process.
    pub(super) resumption: Resumption,
    /// Tells the OCSP thread which certificates to keep staples for.
    ocsp_updates: Option<ocsp::Updates>,
}

impl Reloader {
    /// Starts from the configuration being served.
    pub fn new(
        current: Config,
        source: Source,
        state: Arc<ProxyState>,
        resumption: Resumption,
        ocsp_updates: Option<ocsp::Updates>,
    ) -> Self {
        Reloader {
            current,
            source,
            checks: super::checks::start(&state),
            state,
            resumption,
            ocsp_updates,
        }
    }

    /// New OCSP staples arrived: rebuild every frontend's TLS state from the running
    /// configuration (nothing is re-read), so new handshakes staple them.
    pub fn restaple(&mut self, frontends: &Frontends) {
        let built = match self.build(&self.current) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(
                    name: "ocsp_restaple_failed",
                    error = %e,
                    "OCSP: cannot restaple: {e}; the staples in use stay",
                );
                return;
            }
        };
        for (fe, tls) in self.current.frontends.iter().zip(built) {
            if let Some(live) = frontends.get(&fe.endpoint.to_string()) {
                live.tls.store(tls);
            }
        }
    }

    /// The admin API's certificates changed: the master read `--admin-certs` while
    /// recording `rec`; every frontend's TLS state is rebuilt with them.
    pub fn admin_certificates(&mut self, frontends: &Frontends, rec: Recording) {
        let Some(dir) = self.current.admin_certs_dir.clone() else {
            return;
        };
        let certs = match files::replay(rec, || crate::tls::cert_store::load_all(&dir)) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(name: "admin_certificates_refused", error = %e, "admin API: {e}; the certificates in place stay");
                return;
            }
        };
        let new = self.current.with_admin_certs(certs);
        if let Err(e) = self.swap_in(frontends, new) {
            tracing::error!(name: "admin_certificates_refused", error = %e, "admin API: the certificates cannot be served: {e}; the ones in place stay");
        }
    }

    /// Serves `new` (the running configuration with other certificates): every
    /// frontend's TLS state rebuilt and swapped; nothing changes when it does not build.
    fn swap_in(&mut self, frontends: &Frontends, new: Config) -> Result<(), String> {
        let built = self.build(&new)?;
        for (fe, tls) in new.frontends.iter().zip(built) {
            if let Some(live) = frontends.get(&fe.endpoint.to_string()) {
                live.tls.store(tls);
            }
        }
        self.follow_ocsp(&new);
        self.current = new;
        Ok(())
    }

    /// New ACME certificates: the master read the state directory while recording `rec`;
    /// every frontend's TLS state is rebuilt with them (new handshakes get them, live
    /// connections keep theirs).
    pub fn certificates(&mut self, frontends: &Frontends, rec: Recording) {
        let Some(settings) = self.current.acme.clone() else {
            return;
        };
        let certs = files::replay(rec, || crate::acme::state::load_all(&settings));
        let names: Vec<String> = certs.iter().map(|c| c.source.clone()).collect();
        let new = self.current.with_acme_certs(certs);
        if let Err(e) = self.swap_in(frontends, new) {
            tracing::error!(
                name: "acme_certificates_refused",
                error = %e,
                "ACME: the new certificates cannot be served: {e}; the ones in place stay",
            );
            return;
        }
        tracing::info!(
            name: "acme_serving",
            certificates = %(names.join(", ")),
            "ACME: serving {}",
            names.join(", "),
        );
    }

    /// New connections and requests go by `new`'s backends and routes when they changed
    /// (those under way keep the ones they started with; a backend whose servers stayed
    /// keeps them, with their connections and state).
    fn reroute(&mut self, new: &Config) {
        let fronts = |c: &Config| -> Vec<(String, Option<String>, crate::config::policy::Policy)> {
            c.frontends
                .iter()
                .map(|f| (f.endpoint.to_string(), f.backend.clone(), f.policy.clone()))
                .collect()
        };
        let old = &self.current;
        // The default backend's servers, when they changed and may follow (without
        // --backend-refresh, whose thread resolves the start's; restart_only says so).
        let default = match (&old.backend, &new.backend) {
            (BackendTarget::Servers(a), BackendTarget::Servers(b))
                if new.backend_refresh.is_none()
                    && rebuild::default_backend_spec(a) != rebuild::default_backend_spec(b) =>
            {
                let servers = b.iter().map(crate::edge::route::server).collect();
                Some(Pool::new(servers, crate::edge::route::pool_limits(new)))
            }
            _ => None,
        };
        if default.is_none()
            && old.preamble == new.preamble
            && format!("{:?}", old.named_backends) == format!("{:?}", new.named_backends)
            && old.routes == new.routes
            && fronts(old) == fronts(new)
            && old.limits.http_refuse_encoded_slashes == new.limits.http_refuse_encoded_slashes
            && old.policy == new.policy
        {
            return;
        }
        let live = self.state.routing.load();
        let routing = match default {
            Some(pool) => live.reloaded_with(new, pool),
            None => live.reloaded(new),
        };
        let names: Vec<&str> = routing.backends().iter().map(|b| &*b.name).collect();
        let names = names.join(", ");
        self.state.routing.store(Arc::new(routing));
        if self.checks.is_none() {
            self.checks = super::checks::start(&self.state);
        }
        tracing::info!(
            name: "reload_routes",
            backends = %names,
            routes = new.routes.len(),
            "SIGHUP: backends ({names}) and {} route(s) in place for new connections",
            new.routes.len(),
        );
    }

    /// `--trusted-proxies` and `--request-id-header`, when they changed: connections
    /// accepted from now on judge their peers by `new`'s (live ones keep theirs).
    fn retrust(&self, new: &Config) {
        let old = &self.current;
        if old.trusted_proxies == new.trusted_proxies && old.request_id == new.request_id {
            return;
        }
        self.state
            .trust(new.trusted_proxies.clone(), new.request_id.clone());
        let n = new.trusted_proxies.as_ref().map_or(0, |t| t.0.len());
        tracing::info!(
            name: "reload_trusted_proxies",
            ranges = n,
            request_id = new.request_id.is_some(),
            "SIGHUP: {n} trusted proxy range(s) and the request-ID settings in place for new connections",
        );
    }

    /// Tells the OCSP thread which certificates `cfg` serves, so that staples follow a
    /// reload and a newly issued ACME certificate alike.
    fn follow_ocsp(&self, cfg: &Config) {
        if let Some(tx) = &self.ocsp_updates {
            tx.send(ocsp::targets(
                cfg.certs
                    .iter()
                    .chain(cfg.frontends.iter().flat_map(|f| &f.certs)),
            ));
        }
    }

    /// Every frontend's TLS state for `cfg`, on the process's session cache and keys.
    fn build(&self, cfg: &Config) -> Result<Vec<Arc<crate::tls::TlsState>>, String> {
        rebuild::build(cfg, &self.resumption).map_err(|e| e.to_string())
    }

    /// Applies the configuration the master read (`rec`), with the sockets it bound for
    /// new frontends (`given`), or keeps the running one and logs why.
    pub fn apply(&mut self, frontends: &mut Frontends, rec: Recording, given: &mut FrontSockets) {
        files::replay(rec, || self.reload(frontends, given));
        // Sockets for frontends that did not open are closed.
        given.clear();
    }

    fn reload(&mut self, frontends: &mut Frontends, given: &mut FrontSockets) {
        let Reread {
            config: new,
            tls: built,
            restart_only: fixed,
            ticket_keys,
        } = match rebuild::reread(&self.source, &self.current, &self.resumption) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(name: "reload_refused", error = %e, "SIGHUP: {e}");
                return;
            }
        };
        if let Some(n) = ticket_keys {
            tracing::info!(
                name: "reload_ticket_keys",
                keys = n,
                "SIGHUP: {n} ticket key(s) reloaded",
            );
        }

        // Everything loaded: apply.
        super::frontends::note_client_scopes(&self.state.clients, &new);
        let FrontendDiff { removed, .. } = rebuild::diff(&frontends.names_live(), &new);
        let mut opened = Vec::new();
        for (fe, tls) in new.frontends.iter().zip(built) {
            let name = fe.endpoint.to_string();
            match frontends.get(&name) {
                Some(live) => {
                    live.reloaded(tls);
                    live.log_to(super::frontends::access_sink(&new, fe));
                    live.hold_clients_to(super::frontends::client_policy(&new, fe));
                }
                None => match frontends.open(fe, tls, given, &new) {
                    Ok(()) => opened.push(name),
                    Err(e) => {
                        tracing::error!(
                            name: "reload_frontend_failed",
                            name = %name,
                            error = %e,
                            "SIGHUP: cannot open frontend {name}: {e}",
                        )
                    }
                },
            }
        }
        for name in &removed {
            frontends.close(name);
        }
        self.reroute(&new);
        self.retrust(&new);
        let closed = removed;
        let wanted = new.frontends.len();
        let changed: Vec<&str> = restart_only(&self.current)
            .into_iter()
            .zip(fixed)
            .filter(|(a, b)| a != b)
            .map(|(a, _)| a.0)
            .collect();
        if !changed.is_empty() {
            let changed = changed.join(", ");
            tracing::warn!(
                name: "reload_restart_only",
                changed = %changed,
                "SIGHUP: {changed} changed; restart shuck to apply (the running values stay)"
            );
        }
        let (opened, closed) = (opened.join(", "), closed.join(", "));
        tracing::info!(
            name: "reload_done",
            frontends = wanted,
            certificates = new.certs.len(),
            opened = %opened,
            closed = %closed,
            "SIGHUP: configuration reloaded: {} frontend(s), {} certificate(s){}{}",
            wanted,
            new.certs.len(),
            if opened.is_empty() { String::new() } else { format!(", opened {opened}") },
            if closed.is_empty() { String::new() } else { format!(", closed {closed}") },
        );
        self.follow_ocsp(&new);
        self.follow_access_log(&new);
        self.current = new;
    }

    /// One of the master's access log files, opened again: its sink's lines go there
    /// from now on.
    pub fn access_file(&self, sink: usize, fd: std::os::fd::OwnedFd) {
        if let Some(a) = &self.state.access {
            a.reopen(sink, crate::access::Opened::File(fd.into()));
        }
    }

    /// A reload's access log: its policy, and the targets other than files that changed
    /// (files come from the master, before the configuration). How many sinks there are
    /// a reload does not change (`restart_only`).
    fn follow_access_log(&self, new: &Config) {
        let (Some(log), Some(settings)) = (&self.state.access, &new.access_log) else {
            return;
        };
        log.set_policy(settings.policy.clone());
        let old = self.current.access_log.as_ref().map(|a| &a.sinks[..]);
        for (sink, target) in settings.sinks.iter().enumerate() {
            if old.and_then(|o| o.get(sink)) == Some(target)
                || matches!(
                    target,
                    crate::access::Target::File(_) | crate::access::Target::Fifo(_)
                )
            {
                continue;
            }
            match crate::access::sink::open(target, new.syslog_facility) {
                Ok(to) => log.reopen(sink, to),
                Err(e) => tracing::warn!(
                    name: "access_log_reopen_failed",
                    error = %e,
                    "SIGHUP: access log {target}: {e}; still writing where it was",
                ),
            }
        }
    }
}
