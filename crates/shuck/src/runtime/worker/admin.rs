//! The admin API's questions only the worker can answer (the master asks them over the
//! channel): every server's state, an operator's setting applied to a server, the
//! certificates served with their staples, the session figures.

use std::time::UNIX_EPOCH;

use serde_json::{json, Value};

use super::reload::Reloader;
use crate::admin::{ServerSetting, WorkerCall};
use crate::backend::{Address, Admin, Server};

impl Reloader {
    /// Answers `call`: an HTTP status and a JSON body.
    pub fn admin(&self, call: WorkerCall) -> (u16, Value) {
        match call {
            WorkerCall::Backends => (200, self.backends_json()),
            WorkerCall::SetServer(s) => self.set_server(&s),
            WorkerCall::Restore(all) => {
                for s in &all {
                    let _ = self.set_server(s);
                }
                (200, json!({ "restored": all.len() }))
            }
            WorkerCall::Certificates => (200, self.certificates_json()),
            WorkerCall::Sessions => (200, self.sessions_json()),
            WorkerCall::Barrier => (200, json!({})),
            WorkerCall::Clients(top) => {
                let names: Vec<String> = self
                    .current
                    .frontends
                    .iter()
                    .map(|f| f.endpoint.to_string())
                    .collect();
                let body = crate::admin::clients::clients_json(&self.state.clients, top, &names);
                (200, body)
            }
            WorkerCall::Bans(bans) => {
                self.state.clients.set_bans(&bans);
                (200, json!({ "bans": bans.len() }))
            }
        }
    }

    fn backends_json(&self) -> Value {
        let routing = self.state.routing.load();
        let backends: Vec<Value> = routing
            .backends()
            .iter()
            .map(|b| {
                json!({
                    "name": &*b.name,
                    "tls": b.tls.is_some(),
                    "proto": b.proto.as_str(),
                    "balance": b.pool.balance().describe(),
                    "cookie": b.cookie.as_deref(),
                    "servers": b.pool.servers().iter().map(|s| server_json(s)).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({ "backends": backends })
    }

    fn set_server(&self, s: &ServerSetting) -> (u16, Value) {
        let routing = self.state.routing.load();
        let Some(b) = routing.backends().iter().find(|b| *b.name == *s.backend) else {
            let names: Vec<&str> = routing.backends().iter().map(|b| &*b.name).collect();
            return (
                404,
                json!({ "error": format!("no backend {:?}; there are: {}", s.backend, names.join(", ")) }),
            );
        };
        if s.server == crate::admin::EVERY_SERVER {
            // The whole backend: each of its servers, as if set one by one.
            let servers: Vec<Value> = (b.pool.servers().iter())
                .map(|x| {
                    let one = ServerSetting {
                        server: x.name().to_owned(),
                        ..s.clone()
                    };
                    self.set_server(&one).1
                })
                .collect();
            return (200, json!({ "backend": &*b.name, "servers": servers }));
        }
        let Some(server) = b.pool.servers().iter().find(|x| x.name() == s.server) else {
            let names: Vec<&str> = b.pool.servers().iter().map(|x| x.name()).collect();
            return (
                404,
                json!({ "error": format!("backend {}: no server {:?}; there are: {}", s.backend, s.server, names.join(", ")) }),
            );
        };
        let (was, weight_was) = (server.admin(), server.weight());
        if let Some(w) = s.change.weight {
            server.set_weight(w);
        }
        if let Some(now) = s.change.state {
            server.set_admin(now);
            if now == Admin::Maint && was != Admin::Maint {
                // Idle keep-alive connections to it close at their keeper's next turn.
                self.state.maint.notify_waiters();
            }
        }
        if (was, weight_was) != (server.admin(), server.weight()) {
            tracing::info!(
                name: "backend_server_state",
                backend = %s.backend,
                server = %s.server,
                from = %was.as_str(),
                to = %server.admin().as_str(),
                weight = server.weight(),
                "server {}/{}: {} -> {} (weight {})",
                s.backend,
                s.server,
                was.as_str(),
                server.admin().as_str(),
                server.weight(),
            );
        }
        (200, server_json(server))
    }

    fn certificates_json(&self) -> Value {
        let c = &self.current;
        let ocsp = c.tls.ocsp.as_deref();
        let certs: Vec<Value> = c
            .certs
            .iter()
            .enumerate()
            .map(|(i, cert)| {
                let (source, name) = if i < c.acme_certs {
                    ("acme", cert.names.first().cloned().unwrap_or_default())
                } else if i < c.acme_certs + c.admin_certs {
                    (
                        "admin",
                        crate::tls::cert_store::name_of(std::path::Path::new(&cert.source))
                            .unwrap_or(&cert.source)
                            .to_owned(),
                    )
                } else if c.self_signed {
                    ("self-signed", cert.source.clone())
                } else {
                    ("file", cert.source.clone())
                };
                let leaf = cert.key.cert.first().map(|d| d.as_ref()).unwrap_or(&[]);
                let staple = if cert.ocsp.is_some() {
                    json!({ "status": "stapled", "from": "file" })
                } else if let Some(s) = ocsp.and_then(|o| o.get(leaf)) {
                    json!({ "status": "stapled", "from": "responder", "next_update": crate::clock::rfc3339(s.next_update) })
                } else if c.ocsp.is_some() {
                    json!({ "status": "none yet" })
                } else {
                    json!({ "status": "off" })
                };
                json!({
                    "name": name,
                    "source": source,
                    "file": cert.source,
                    "names": cert.names,
                    "not_after": cert.not_after.map(crate::clock::rfc3339),
                    "key_type": format!("{:?}", cert.key.key.algorithm()),
                    "default": i == c.default_cert,
                    "ocsp": staple,
                })
            })
            .collect();
        json!({ "certificates": certs })
    }

    fn sessions_json(&self) -> Value {
        let r = &self.resumption;
        let cache = r.cache.as_ref().map(|c| {
            let s = c.stats();
            json!({
                "entries": s.entries, "stores": s.stores, "hits": s.hits, "misses": s.misses,
                "evictions": s.evictions, "expirations": s.expirations,
                "lifetime_s": c.lifetime().as_secs(),
            })
        });
        let tickets = r.tickets.as_ref().map(|t| {
            use std::sync::atomic::Ordering::Relaxed;
            json!({
                "source": if t.file().is_some() { "file" } else { "rotating" },
                "current_key": t.current_name(),
                "keys": t.key_count(),
                "issued": t.stats.issued.load(Relaxed),
                "accepted": t.stats.accepted.load(Relaxed),
                "refused": t.stats.refused.load(Relaxed),
            })
        });
        let store = r
            .store
            .as_ref()
            .map(|s| json!({ "up": s.stats.up.load(std::sync::atomic::Ordering::Relaxed) == 1 }));
        json!({ "cache": cache, "tickets": tickets, "store": store })
    }
}

/// One server as `GET /backends` lists it.
fn server_json(s: &Server) -> Value {
    use std::sync::atomic::Ordering::Relaxed;
    let state = match s.admin() {
        Admin::Maint => "maint",
        Admin::Drain => "drain",
        Admin::Ready if s.is_check_down() => "down (check)",
        Admin::Ready if s.is_down() => "down (failure)",
        Admin::Ready => "up",
    };
    let check = s.check.as_ref().map(|(spec, st)| {
        let last = st.last_ms.load(Relaxed);
        json!({
            "probe": match &spec.probe {
                crate::backend::check::Probe::Connect => "connect".to_owned(),
                crate::backend::check::Probe::Tls => "tls".to_owned(),
                crate::backend::check::Probe::Http { path, .. } => format!("http {path}"),
                crate::backend::check::Probe::Grpc { service } => format!("grpc {service}"),
            },
            "up": !st.is_down(),
            "last": (last > 0).then(|| crate::clock::rfc3339(UNIX_EPOCH + std::time::Duration::from_millis(last))),
            "last_ok": (last > 0).then(|| st.last_ok.load(Relaxed)),
            "passed": st.passed.load(Relaxed),
            "failed": st.failed.load(Relaxed),
        })
    });
    json!({
        "name": s.name(),
        "address": match s.address() {
            Address::Tcp(a) => a.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(","),
            Address::Unix(p) => p.display().to_string(),
        },
        "state": state,
        "admin": s.admin().as_str(),
        "weight": s.weight(),
        "active": s.stats.active.load(Relaxed),
        "connections": s.stats.opened.load(Relaxed),
        "queued": s.stats.queued.load(Relaxed),
        "connect_failures": s.stats.connect_failures.load(Relaxed),
        "check": check,
    })
}
