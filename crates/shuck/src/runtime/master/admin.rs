//! The admin API as the master answers it: status, reload, ticket rotation and the
//! certificates kept in `--admin-certs` here (as root, as a reload reads); servers,
//! certificates in use and sessions asked of the worker over the channel. The operator's
//! server settings are kept here, so that a reload or a new worker gets them again.

use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

use crate::admin::server::{error_body, log_request, Incoming};
use crate::admin::{Call, ServerSetting, WorkerCall};
use crate::runtime::channel::Msg;
use crate::runtime::rebuild;
use crate::system::files;
use crate::tls::cert_store::{self, StoreError};

/// How long the worker has to answer a call.
const WORKER_DEADLINE: Duration = Duration::from_secs(5);

/// A call handed to the worker, waiting for its answer.
#[derive(Debug)]
pub(super) struct Pending {
    id: u64,
    inc: Incoming,
    until: Instant,
    /// The answer to give once the worker replied (a reload's result, given when the
    /// worker has applied it), instead of the worker's own.
    then: Option<Value>,
}

/// The admin API's state in the master.
#[derive(Debug, Default)]
pub(super) struct AdminState {
    pending: Vec<Pending>,
    next_id: u64,
    /// The operator's settings, in the order given (a later one for the same server
    /// wins when replayed).
    settings: Vec<ServerSetting>,
    /// The bans (`POST /clients/ban`), sent whole to the worker at each change.
    bans: Vec<crate::clients::bans::Ban>,
    /// The last reload: when, and its result.
    pub(super) last_reload: Option<(SystemTime, Result<(), String>)>,
}

impl super::Run {
    /// After every wake-up of the master's loop (its tick included): the admin sockets'
    /// requests served, connections past their deadline closed, calls the worker did not
    /// answer in time answered 504.
    pub(super) fn admin_tick(&mut self) {
        if self.m.admin.is_none() {
            return;
        }
        let now = Instant::now();
        let late: Vec<Pending> = {
            let (late, kept) = std::mem::take(&mut self.admin.pending)
                .into_iter()
                .partition(|p| now >= p.until);
            self.admin.pending = kept;
            late
        };
        for p in late {
            self.admin_answer(
                &p.inc,
                504,
                error_body("the worker process did not answer in time"),
            );
        }
        if let Some(server) = &mut self.m.admin {
            for inc in server.service() {
                self.admin_call(inc);
            }
        }
    }

    fn admin_answer(&mut self, inc: &Incoming, status: u16, body: Value) {
        let detail = if status >= 400 {
            body.get("error")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        } else {
            String::new()
        };
        log_request(&inc.peer, &inc.req, status, &detail);
        if let Some(server) = &mut self.m.admin {
            server.answer(inc.conn, status, &body);
        }
    }

    fn admin_call(&mut self, inc: Incoming) {
        let call = match Call::of(&inc.req) {
            Ok(c) => c,
            Err(r) => return self.admin_answer(&inc, r.status, error_body(&r.reason)),
        };
        match call {
            Call::Status => {
                let body = self.status_json();
                self.admin_answer(&inc, 200, body);
            }
            Call::Reload => match self.reload() {
                // Answered once the worker has applied it: the channel keeps the order.
                Ok(()) => {
                    let done =
                        json!({ "result": "reloaded", "config": self.status_json()["config"] });
                    self.ask_worker_then(inc, WorkerCall::Barrier, Some(done));
                }
                Err(e) => {
                    let body = json!({
                        "error": e,
                        "errors": [crate::admin::config_error_json(&e)],
                    });
                    self.admin_answer(&inc, 400, body);
                }
            },
            Call::RotateTickets => {
                let (status, body) = self.rotate_tickets();
                self.answer_once_applied(inc, status, body);
            }
            Call::PutCertificate { name, pem } => {
                let (status, body) = self.put_certificate(&name, &pem);
                self.answer_once_applied(inc, status, body);
            }
            Call::DeleteCertificate { name } => {
                let (status, body) = self.delete_certificate(&name);
                self.answer_once_applied(inc, status, body);
            }
            Call::SetServer {
                backend,
                server,
                change,
            } => {
                let s = ServerSetting {
                    backend,
                    server,
                    change,
                };
                self.ask_worker(inc, WorkerCall::SetServer(s));
            }
            Call::Backends => self.ask_worker(inc, WorkerCall::Backends),
            Call::Certificates => self.ask_worker(inc, WorkerCall::Certificates),
            Call::Sessions => self.ask_worker(inc, WorkerCall::Sessions),
            Call::Clients { top } => self.ask_worker(inc, WorkerCall::Clients(top)),
            Call::Ban(ban) => {
                let now = crate::clock::unix_ms();
                self.admin
                    .bans
                    .retain(|b| b.live(now) && b.block != ban.block);
                let body = json!({ "banned": crate::admin::clients::ban_json(&ban) });
                tracing::info!(name: "client_banned", block = %ban.block, reason = ?ban.reason, "admin API: {} banned", ban.block);
                self.admin.bans.push(ban);
                self.save_server_settings();
                let call = WorkerCall::Bans(self.admin.bans.clone());
                self.ask_worker_then(inc, call, Some(body));
            }
            Call::Unban(block) => {
                let now = crate::clock::unix_ms();
                self.admin.bans.retain(|b| b.live(now));
                if !self.admin.bans.iter().any(|b| b.block == block) {
                    let body = error_body(&format!("no ban of {block} in force"));
                    return self.admin_answer(&inc, 404, body);
                }
                self.admin.bans.retain(|b| b.block != block);
                tracing::info!(name: "client_unbanned", block = %block, "admin API: ban of {block} lifted");
                self.save_server_settings();
                let call = WorkerCall::Bans(self.admin.bans.clone());
                let body = json!({ "lifted": block.to_string() });
                self.ask_worker_then(inc, call, Some(body));
            }
        }
    }

    /// A change the master sent the worker: answered once the worker has it (the next
    /// handshake sees it); a refusal at once.
    fn answer_once_applied(&mut self, inc: Incoming, status: u16, body: Value) {
        if status == 200 {
            self.ask_worker_then(inc, WorkerCall::Barrier, Some(body));
        } else {
            self.admin_answer(&inc, status, body);
        }
    }

    fn ask_worker(&mut self, inc: Incoming, call: WorkerCall) {
        self.ask_worker_then(inc, call, None);
    }

    fn ask_worker_then(&mut self, inc: Incoming, call: WorkerCall, then: Option<Value>) {
        let chan = self.worker.as_ref().and_then(|w| w.chan.as_ref());
        let Some(chan) = chan else {
            return self.admin_answer(
                &inc,
                503,
                error_body("no worker process serves right now (it is starting again); try again"),
            );
        };
        self.admin.next_id += 1;
        let id = self.admin.next_id;
        if let Err(e) = chan.send(&Msg::AdminCall {
            id,
            call: call.encode(),
        }) {
            return self.admin_answer(
                &inc,
                503,
                error_body(&format!("cannot reach the worker process: {e}")),
            );
        }
        self.admin.pending.push(Pending {
            id,
            inc,
            until: Instant::now() + WORKER_DEADLINE,
            then,
        });
    }

    /// The worker answered call `id`.
    pub(super) fn on_admin_reply(&mut self, id: u64, status: u16, body: &[u8]) {
        let Some(at) = self.admin.pending.iter().position(|p| p.id == id) else {
            return;
        };
        let p = self.admin.pending.remove(at);
        if let (200, Some(then)) = (status, p.then.clone()) {
            return self.admin_answer(&p.inc, 200, then);
        }
        let body: Value = serde_json::from_slice(body)
            .unwrap_or_else(|_| error_body("the worker's answer is not JSON"));
        if status == 200 {
            if let Ok(Call::SetServer {
                backend,
                server,
                change,
            }) = Call::of(&p.inc.req)
            {
                // Kept for the next reload and the next worker, in the order given (they
                // are applied so): one entry a server, and a whole backend's state (server
                // `*`) in place of its servers' own states, their weights kept.
                let all = &mut self.admin.settings;
                let mut merged = change;
                if server == crate::admin::EVERY_SERVER {
                    for s in all.iter_mut().filter(|s| s.backend == backend) {
                        s.change.state = None;
                    }
                    all.retain(|s| s.change.state.is_some() || s.change.weight.is_some());
                } else if let Some(at) =
                    (all.iter()).position(|s| s.backend == backend && s.server == server)
                {
                    let old = all.remove(at);
                    merged.state = change.state.or(old.change.state);
                    merged.weight = change.weight.or(old.change.weight);
                }
                all.push(ServerSetting {
                    backend,
                    server,
                    change: merged,
                });
                self.save_server_settings();
            }
        }
        self.admin_answer(&p.inc, status, body);
    }

    /// `--admin-state`: the settings read at start (a restart, a binary upgrade).
    pub(super) fn load_server_settings(&mut self) {
        let Some(path) = self.admin_state_path() else {
            return;
        };
        match crate::admin::state_file::load(&path) {
            Ok(saved) => {
                let (all, bans) = (saved.servers, saved.bans);
                if !all.is_empty() || !bans.is_empty() {
                    tracing::info!(name: "admin_state_loaded", file = %path.display(), servers = all.len(), bans = bans.len(), "admin API: {} server setting(s) from {}, and {} ban(s)", all.len(), path.display(), bans.len());
                }
                self.admin.settings = all;
                self.admin.bans = bans;
            }
            Err(e) => {
                tracing::warn!(name: "admin_state_unreadable", error = %e, "admin API: {e}; every server starts ready")
            }
        }
    }

    /// `--admin-state`: the settings written after a change.
    fn save_server_settings(&self) {
        let Some(path) = self.admin_state_path() else {
            return;
        };
        if let Err(e) =
            crate::admin::state_file::save(&path, &self.admin.settings, &self.admin.bans)
        {
            tracing::warn!(name: "admin_state_not_saved", file = %path.display(), error = %e, "admin API: cannot write {}: {e}; the settings hold until shuck stops", path.display());
        }
    }

    fn admin_state_path(&self) -> Option<std::path::PathBuf> {
        self.m.config.admin.as_ref().and_then(|a| a.state.clone())
    }

    /// The operator's settings again: after a reload (new pools) and for a new worker.
    pub(super) fn restore_server_settings(&self) {
        if !self.admin.settings.is_empty() {
            self.to_worker(&Msg::AdminCall {
                id: 0,
                call: WorkerCall::Restore(self.admin.settings.clone()).encode(),
            });
        }
        if !self.admin.bans.is_empty() {
            self.to_worker(&Msg::AdminCall {
                id: 0,
                call: WorkerCall::Bans(self.admin.bans.clone()).encode(),
            });
        }
    }

    fn status_json(&self) -> Value {
        let started = self.started;
        let uptime = started.elapsed().map_or(0, |d| d.as_secs());
        let reload = self.admin.last_reload.as_ref().map(|(t, r)| {
            json!({
                "at": crate::clock::rfc3339(*t),
                "result": if r.is_ok() { "ok" } else { "refused" },
                "error": r.as_ref().err(),
            })
        });
        let c = &self.m.config;
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "commit": env!("SHUCK_GIT_COMMIT"),
            "started": crate::clock::rfc3339(started),
            "uptime_s": uptime,
            "master_pid": std::process::id(),
            "worker_pid": self.worker.as_ref().map(|w| w.pid.as_raw()),
            "workers": c.workers,
            "phase": format!("{:?}", self.phase),
            "config": {
                "command_line": self.m.source.describe(),
                "frontends": c.frontends.iter().map(|f| f.endpoint.to_string()).collect::<Vec<_>>(),
                "certificates": c.certs.len(),
                "named_backends": c.named_backends.iter().map(|b| b.name.clone()).collect::<Vec<_>>(),
                "routes": c.routes.len(),
            },
            "last_reload": reload,
        })
    }

    fn rotate_tickets(&mut self) -> (u16, Value) {
        if self.m.resumption.store.is_some() {
            return (409, error_body("with --shared-store the farm's ticket ring rotates in the store, on its own schedule"));
        }
        let Some(t) = self.m.resumption.tickets.clone() else {
            return (409, error_body("session tickets are off"));
        };
        if !t.rotate_now() {
            return (409, error_body("ticket keys come from --ticket-keys: rotate them by changing the file and reloading"));
        }
        if let Some(state) = t.state() {
            self.to_worker(&Msg::Tickets(state));
        }
        tracing::info!(name: "tickets_rotated", key = ?t.current_name(), "admin API: the ticket key ring was rotated");
        (
            200,
            json!({ "result": "rotated", "current_key": t.current_name(), "keys": t.key_count() }),
        )
    }

    fn put_certificate(&mut self, name: &str, pem: &[u8]) -> (u16, Value) {
        let Some(dir) = self.m.config.admin_certs_dir.clone() else {
            return (
                409,
                error_body("no --admin-certs directory: certificates cannot be added at run time"),
            );
        };
        let cert = match cert_store::check(name, pem) {
            Ok(c) => c,
            Err(e) => return (400, error_body(&e.to_string())),
        };
        let before = match cert_store::write(&dir, name, pem) {
            Ok(b) => b,
            Err(e) => return (500, error_body(&e.to_string())),
        };
        let replaced = before.is_some();
        match self.rebuild_admin_certs(&dir) {
            Ok(()) => {
                tracing::info!(name: "admin_certificate_added", certificate = %name, names = %cert.names.join(","), "admin API: certificate {name} ({}) serving", cert.names.join(", "));
                (
                    200,
                    json!({
                        "result": if replaced { "replaced" } else { "added" },
                        "name": name,
                        "names": cert.names,
                        "file": cert_store::path_of(&dir, name),
                        "not_after": cert.not_after.map(crate::clock::rfc3339),
                    }),
                )
            }
            Err(e) => {
                cert_store::restore(&dir, name, before);
                (400, error_body(&e))
            }
        }
    }

    fn delete_certificate(&mut self, name: &str) -> (u16, Value) {
        let Some(dir) = self.m.config.admin_certs_dir.clone() else {
            return (409, error_body("no --admin-certs directory: only certificates added through the admin API can be removed"));
        };
        let before = match cert_store::remove(&dir, name) {
            Ok(b) => b,
            Err(e @ StoreError::NotFound(_)) => {
                return (404, error_body(&format!("{e}; the configuration's own certificates are removed by editing it and reloading")))
            }
            Err(e) => return (400, error_body(&e.to_string())),
        };
        match self.rebuild_admin_certs(&dir) {
            Ok(()) => {
                tracing::info!(name: "admin_certificate_removed", certificate = %name, "admin API: certificate {name} removed");
                (200, json!({ "result": "removed", "name": name }))
            }
            Err(e) => {
                cert_store::restore(&dir, name, Some(before));
                (400, error_body(&e))
            }
        }
    }

    /// Reads `--admin-certs` again (recording it), rebuilds every frontend's TLS state
    /// with it, and sends the worker what was read.
    fn rebuild_admin_certs(&mut self, dir: &std::path::Path) -> Result<(), String> {
        let (loaded, rec) = files::record(|| cert_store::load_all(dir));
        let certs = loaded.map_err(|e| e.to_string())?;
        let new = self.m.config.with_admin_certs(certs);
        let built = rebuild::build(&new, &self.m.resumption).map_err(|e| e.to_string())?;
        self.m.config = new;
        self.m.tls = built;
        self.to_worker(&Msg::AdminCertificates(rec));
        Ok(())
    }
}
