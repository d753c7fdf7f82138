//! The admin API (`--admin-socket`, `--admin-listen`): HTTP/1.1 with JSON on a UNIX socket
//! (and, with a token, on TCP), answered by the master so that it lives across worker
//! restarts. `request.rs` reads a request and says what it asks; `server.rs` serves the
//! sockets from the master's loop; what only the worker knows (servers, certificates in
//! use, sessions) is asked of it as a [`WorkerCall`] over the channel.

pub mod clients;
pub mod request;
pub mod server;
pub mod state_file;

pub use request::{Admin, Call, Request, ServerChange, EVERY_SERVER};
pub use server::AdminServer;

use serde_json::{json, Value};

/// A server's operator state as the master keeps it across reloads and worker restarts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSetting {
    /// The backend's name (`default` for `-b`'s servers).
    pub backend: String,
    /// The server's name.
    pub server: String,
    /// What the operator set.
    pub change: ServerChange,
}

/// What the master asks of the worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerCall {
    /// Every backend's servers and their state.
    Backends,
    /// Sets a server's state or weight.
    SetServer(ServerSetting),
    /// Every operator setting again, after a reload or for a new worker (no answer).
    Restore(Vec<ServerSetting>),
    /// The certificates served.
    Certificates,
    /// The session cache's and the shared store's figures.
    Sessions,
    /// Nothing: answered once what was sent before it is done.
    Barrier,
    /// The client table's busiest clients and the bans.
    Clients(usize),
    /// The bans in force, the whole list (the master keeps it).
    Bans(Vec<crate::clients::bans::Ban>),
}

/// One setting as JSON (the channel's and the state file's form).
pub fn setting_json(s: &ServerSetting) -> Value {
    json!({
        "backend": s.backend,
        "server": s.server,
        "state": s.change.state.map(Admin::as_str),
        "weight": s.change.weight,
    })
}

/// A setting from its JSON form; `None` when a field is missing or wrong.
pub fn setting_of(v: &Value) -> Option<ServerSetting> {
    Some(ServerSetting {
        backend: v.get("backend")?.as_str()?.to_owned(),
        server: v.get("server")?.as_str()?.to_owned(),
        change: ServerChange {
            state: v
                .get("state")
                .and_then(Value::as_str)
                .and_then(Admin::parse),
            weight: v
                .get("weight")
                .and_then(Value::as_u64)
                .and_then(|w| u32::try_from(w).ok()),
        },
    })
}

impl WorkerCall {
    /// As it crosses the channel.
    pub fn encode(&self) -> Vec<u8> {
        let v = match self {
            WorkerCall::Backends => json!({ "call": "backends" }),
            WorkerCall::SetServer(s) => json!({ "call": "set-server", "setting": setting_json(s) }),
            WorkerCall::Restore(all) => json!({
                "call": "restore",
                "settings": all.iter().map(setting_json).collect::<Vec<_>>(),
            }),
            WorkerCall::Certificates => json!({ "call": "certificates" }),
            WorkerCall::Sessions => json!({ "call": "sessions" }),
            WorkerCall::Barrier => json!({ "call": "barrier" }),
            WorkerCall::Clients(top) => json!({ "call": "clients", "top": top }),
            WorkerCall::Bans(bans) => json!({ "call": "bans", "bans": bans }),
        };
        serde_json::to_vec(&v).unwrap_or_default()
    }

    /// From the channel; `None` for what this side does not know.
    pub fn decode(b: &[u8]) -> Option<WorkerCall> {
        let v: Value = serde_json::from_slice(b).ok()?;
        Some(match v.get("call")?.as_str()? {
            "backends" => WorkerCall::Backends,
            "set-server" => WorkerCall::SetServer(setting_of(v.get("setting")?)?),
            "restore" => WorkerCall::Restore(
                v.get("settings")?
                    .as_array()?
                    .iter()
                    .filter_map(setting_of)
                    .collect(),
            ),
            "certificates" => WorkerCall::Certificates,
            "sessions" => WorkerCall::Sessions,
            "barrier" => WorkerCall::Barrier,
            "clients" => WorkerCall::Clients(usize::try_from(v.get("top")?.as_u64()?).ok()?),
            "bans" => WorkerCall::Bans(serde_json::from_value(v.get("bans")?.clone()).ok()?),
            _ => return None,
        })
    }
}

/// A configuration error as the API lists it: `{file, line, message}`, from the
/// `PATH line N: message` shuck's errors are written as (file and line null when the
/// error is about the command line or names no key).
pub fn config_error_json(message: &str) -> Value {
    if let Some((file, rest)) = message.split_once(" line ") {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if let (Ok(line), Some(msg)) = (
            digits.parse::<u64>(),
            rest.get(digits.len()..).and_then(|r| r.strip_prefix(": ")),
        ) {
            // The file is what comes after the last ": " before it (the reason's prefix).
            let file = file.rsplit(": ").next().unwrap_or(file);
            return json!({ "file": file, "line": line, "message": msg });
        }
    }
    json!({ "file": null, "line": null, "message": message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_cross_the_channel_whole() {
        let s = ServerSetting {
            backend: "api".into(),
            server: "a".into(),
            change: ServerChange {
                state: Some(Admin::Maint),
                weight: Some(7),
            },
        };
        for c in [
            WorkerCall::Backends,
            WorkerCall::SetServer(s.clone()),
            WorkerCall::Restore(vec![s]),
            WorkerCall::Certificates,
            WorkerCall::Sessions,
            WorkerCall::Barrier,
            WorkerCall::Clients(7),
            WorkerCall::Bans(vec![crate::clients::bans::Ban {
                block: "192.0.2.0/24".parse().unwrap(),
                until_ms: Some(5),
                reason: "r".into(),
            }]),
        ] {
            assert_eq!(WorkerCall::decode(&c.encode()), Some(c));
        }
        assert_eq!(WorkerCall::decode(b"{}"), None);
    }

    #[test]
    fn errors_name_file_and_line() {
        let v = config_error_json(
            "configuration refused, the running one stays: /etc/shuck.conf line 3: unknown key \"x\"",
        );
        assert_eq!(v["file"], "/etc/shuck.conf");
        assert_eq!(v["line"], 3);
        assert_eq!(v["message"], "unknown key \"x\"");
        assert_eq!(config_error_json("--workers: bad")["line"], Value::Null);
    }
}
