//! The process and its operating system: dropping privileges (`--user`, `--group`,
//! `--chroot`), running as a daemon with a pid file, telling systemd how it goes
//! (sd_notify), logging to a file or to syslog, and the descriptor limit.

pub mod daemon;
pub mod files;
pub mod json_log;
pub mod limits;
pub mod log;
pub mod notify;
pub mod privileges;

/// What the system refused.
#[derive(Debug, thiserror::Error)]
pub enum SystemError {
    /// A user or group name that does not exist.
    #[error("{option} {name:?}: no such {what} on this system")]
    Unknown {
        /// The option.
        option: &'static str,
        /// The name given.
        name: String,
        /// "user" or "group".
        what: &'static str,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Call {
        /// What was attempted, in the operator's words.
        what: String,
        /// The system's reason.
        source: std::io::Error,
    },
}

impl SystemError {
    pub(crate) fn call(what: impl Into<String>, e: impl Into<std::io::Error>) -> Self {
        SystemError::Call {
            what: what.into(),
            source: e.into(),
        }
    }
}
