//! `--admin-state FILE`: the operator's server settings (drain, maint, weight set through
//! the admin API) and client bans kept on disk, so that a restart or a binary upgrade keeps them, as
//! HAProxy's server-state-file. Written whole (a new file renamed over the old, 0600) after
//! every change; read once at start.

use std::path::Path;

use serde_json::{json, Value};

use super::{setting_json, setting_of, ServerSetting};
use crate::clients::bans::Ban;

/// The largest state file read (a few hundred bytes a server).
const MAX_STATE: u64 = 16 << 20;

/// Why the file could not be read; the settings start empty then.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    /// It cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// It is not a state file.
    #[error("{}: not a shuck server-state file ({reason})", path.display())]
    Malformed {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// What the file keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Saved {
    /// The servers' settings.
    pub servers: Vec<ServerSetting>,
    /// The bans (`POST /clients/ban`), the expired ones dropped as read.
    pub bans: Vec<Ban>,
}

/// What `path` keeps; nothing when it does not exist yet.
pub fn load(path: &Path) -> Result<Saved, StateFileError> {
    let text = match crate::system::files::read_no_link(path, MAX_STATE, "a server-state file") {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Saved::default()),
        Err(source) => {
            return Err(StateFileError::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
    let bad = |reason: String| StateFileError::Malformed {
        path: path.to_owned(),
        reason,
    };
    let v: Value = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    let servers = v
        .get("servers")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no \"servers\" list".into()))?;
    let servers = servers
        .iter()
        .enumerate()
        .map(|(i, s)| {
            setting_of(s).ok_or_else(|| bad(format!("entry {i} is not a server setting")))
        })
        .collect::<Result<_, _>>()?;
    let bans: Vec<Ban> = match v.get("bans") {
        None => Vec::new(),
        Some(b) => serde_json::from_value(b.clone()).map_err(|e| bad(format!("bans: {e}")))?,
    };
    let now = crate::clock::unix_ms();
    Ok(Saved {
        servers,
        bans: bans.into_iter().filter(|b| b.live(now)).collect(),
    })
}

/// Writes `settings` and `bans` to `path` whole.
pub fn save(path: &Path, settings: &[ServerSetting], bans: &[Ban]) -> std::io::Result<()> {
    let body = json!({
        "version": 1,
        "servers": settings.iter().map(setting_json).collect::<Vec<_>>(),
        "bans": bans,
    });
    let mut text = serde_json::to_vec_pretty(&body).unwrap_or_default();
    text.push(b'\n');
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    crate::system::files::write_private(path, &text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::{Admin, ServerChange};

    #[test]
    fn settings_come_back_as_saved_and_garbage_is_named() {
        let dir = std::env::temp_dir().join(format!("shuck-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.json");
        assert_eq!(load(&path).unwrap(), Saved::default());
        let all = vec![ServerSetting {
            backend: "default".into(),
            server: "api1".into(),
            change: ServerChange {
                state: Some(Admin::Drain),
                weight: Some(3),
            },
        }];
        let bans = vec![
            Ban {
                block: "192.0.2.0/24".parse().unwrap(),
                until_ms: None,
                reason: "scan".into(),
            },
            Ban {
                block: "192.0.3.1".parse().unwrap(),
                until_ms: Some(1),
                reason: String::new(),
            },
        ];
        save(&path, &all, &bans).unwrap();
        let back = load(&path).unwrap();
        assert_eq!(back.servers, all);
        assert_eq!(back.bans, bans[..1]);
        std::fs::write(&path, "{\"servers\": [1]}").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("entry 0"), "{e}");
        std::fs::write(&path, "garbage").unwrap();
        assert!(load(&path).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
