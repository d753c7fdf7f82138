//! `--access-log`'s file in the master: opened as root at start, before the worker gives up
//! its privileges, and opened again on SIGUSR1 (logrotate's `postrotate`) and at every
//! reload, then handed to the worker over the channel, as nginx's master reopens its logs
//! for its workers (`nginx -s reopen`).

use std::fs::File;

use crate::access::Target;
use crate::config::Config;
use crate::runtime::channel::Msg;
use crate::runtime::error::StartError;

/// The file `config`'s access log writes to, opened to append; `None` for another target.
pub(crate) fn open_file(config: &Config) -> Result<Option<File>, StartError> {
    match config.access_log.as_ref().map(|a| &a.target) {
        Some(Target::File(path)) => crate::system::files::create_nofollow(path, true)
            .map(Some)
            .map_err(|source| StartError::AccessLog {
                path: path.clone(),
                source,
            }),
        _ => Ok(None),
    }
}

impl super::Run {
    /// SIGUSR1: the access log's file opened again (a rotated one is let go).
    pub(super) fn reopen_access_log(&mut self) {
        let config = self.m.config.clone();
        if self.hand_access_file(&config) {
            tracing::info!(name: "access_log_reopened", "SIGUSR1: access log opened again");
        }
    }

    /// Opens `config`'s access log file and hands it to the worker; whether there was one.
    /// A failure leaves the worker writing where it was.
    pub(super) fn hand_access_file(&mut self, config: &Config) -> bool {
        match open_file(config) {
            Ok(Some(f)) => {
                match f.try_clone() {
                    Ok(copy) => self.to_worker(&Msg::AccessLog(copy.into())),
                    Err(e) => tracing::warn!(
                        name: "access_log_reopen_failed",
                        error = %e,
                        "access log: {e}; still writing to the file opened before",
                    ),
                }
                self.m.access_file = Some(f);
                true
            }
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(
                    name: "access_log_reopen_failed",
                    error = %e,
                    "{e}; still writing to the file opened before",
                );
                false
            }
        }
    }
}
