//! The access log's files in the master: opened as root at start, before the worker gives up
//! its privileges, and opened again on SIGUSR1 (logrotate's `postrotate`) and at every
//! reload, then handed to the worker over the channel, as nginx's master reopens its logs
//! for its workers (`nginx -s reopen`).

use std::fs::File;

use crate::access::Target;
use crate::config::Config;
use crate::runtime::channel::Msg;
use crate::runtime::error::StartError;

/// The files `config`'s access log writes to, opened to append, with their sinks'
/// indexes (a frontend's own, `--access-log`'s); other targets the worker opens.
pub(crate) fn open_files(config: &Config) -> Result<Vec<(usize, File)>, StartError> {
    let Some(settings) = &config.access_log else {
        return Ok(Vec::new());
    };
    let mut files = Vec::new();
    for (sink, target) in settings.sinks.iter().enumerate() {
        let (path, fifo) = match target {
            Target::File(p) => (p, false),
            Target::Fifo(p) => (p, true),
            _ => continue,
        };
        {
            let f = crate::system::files::open_log(path, fifo).map_err(|source| {
                StartError::AccessLog {
                    path: path.clone(),
                    source,
                }
            })?;
            files.push((sink, f));
        }
    }
    Ok(files)
}

impl super::Run {
    /// SIGUSR1: the access log's files opened again (rotated ones are let go).
    pub(super) fn reopen_access_log(&mut self) {
        let config = self.m.config.clone();
        if self.hand_access_files(&config) {
            tracing::info!(name: "access_log_reopened", "SIGUSR1: access log opened again");
        }
    }

    /// Opens `config`'s access log files and hands them to the worker; whether there
    /// were any. A failure leaves the worker writing where it was.
    pub(super) fn hand_access_files(&mut self, config: &Config) -> bool {
        match open_files(config) {
            Ok(files) if files.is_empty() => false,
            Ok(files) => {
                for (sink, f) in &files {
                    match f.try_clone() {
                        Ok(copy) => self.to_worker(&Msg::AccessLog(*sink, copy.into())),
                        Err(e) => tracing::warn!(
                            name: "access_log_reopen_failed",
                            error = %e,
                            "access log: {e}; still writing to the file opened before",
                        ),
                    }
                }
                self.m.access_files = files;
                true
            }
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
