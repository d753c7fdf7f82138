//! `--daemon` and `--pidfile`, for init systems that want them.

use std::io::Write;
use std::path::Path;

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
    /// The directory that holds it, opened before any chroot, so that the file can still
    /// be removed from inside one.
    dir: std::fs::File,
    name: std::ffi::OsString,
}

impl PidFile {
    /// Writes this process's id to `path`.
    pub fn write(path: &Path) -> Result<Self, SystemError> {
        let fail =
            |e: std::io::Error| SystemError::call(format!("--pidfile {}", path.display()), e);
        let name = path
            .file_name()
            .ok_or_else(|| fail(std::io::Error::other("not a file name")))?
            .to_owned();
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = std::fs::File::open(parent).map_err(fail)?;
        let mut f = super::files::create_nofollow(path, false).map_err(fail)?;
        writeln!(f, "{}", std::process::id()).map_err(fail)?;
        Ok(PidFile { dir, name })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // Relative to the directory opened at start, so a chroot does not hide it. After
        // dropping privileges this may be refused: nothing to do then.
        let _ = nix::unistd::unlinkat(
            &self.dir,
            self.name.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
}
