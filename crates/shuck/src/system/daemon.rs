//! `--daemon` and `--pidfile`, for init systems that want them.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::SystemError;

/// Detaches from the terminal: fork (the parent exits 0), new session, standard streams to
/// /dev/null. Call it before any thread starts: only the calling thread survives a fork.
/// The working directory is kept, so relative paths still resolve on reload.
pub fn detach() -> Result<(), SystemError> {
    nix::unistd::daemon(true, false).map_err(|e| SystemError::call("--daemon: cannot detach", e))
}

/// A pid file, removed when dropped (if the process still may).
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
}

impl PidFile {
    /// Writes this process's id to `path`.
    pub fn write(path: &Path) -> Result<Self, SystemError> {
        let fail =
            |e: std::io::Error| SystemError::call(format!("--pidfile {}", path.display()), e);
        let mut f = std::fs::File::create(path).map_err(fail)?;
        writeln!(f, "{}", std::process::id()).map_err(fail)?;
        Ok(PidFile {
            path: path.to_owned(),
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // After dropping privileges or into a chroot this may fail: nothing to do then.
        let _ = std::fs::remove_file(&self.path);
    }
}
