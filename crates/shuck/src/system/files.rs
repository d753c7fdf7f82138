//! Every file the configuration reads goes through here, so that a reload can be read by
//! one process and applied by another: the master (still root) reads the files while
//! [`record`]ing them, and sends the [`Recording`] to the worker (no longer root, perhaps
//! chrooted), which parses the same configuration while [`replay`]ing it and never touches
//! the disk. Outside either scope, the calls go to the file system.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

/// The files one configuration read: contents, and the regular files of each directory
/// listed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recording {
    /// Path → contents, or the error the read gave (replayed as the same kind and text).
    pub files: HashMap<PathBuf, Result<Vec<u8>, String>>,
    /// Directory → its regular files (name, path), or the error the listing gave.
    pub dirs: HashMap<PathBuf, Result<Vec<(OsString, PathBuf)>, String>>,
}

enum Mode {
    Record(Recording),
    Replay(Recording),
}

thread_local! {
    static MODE: RefCell<Option<Mode>> = const { RefCell::new(None) };
}

/// Runs `f`, recording every file it reads through this module.
pub fn record<T>(f: impl FnOnce() -> T) -> (T, Recording) {
    MODE.with(|m| *m.borrow_mut() = Some(Mode::Record(Recording::default())));
    let out = f();
    let rec = MODE.with(|m| match m.borrow_mut().take() {
        Some(Mode::Record(r)) => r,
        _ => Recording::default(),
    });
    (out, rec)
}

/// Runs `f` with every read answered from `rec`; a file not in it is "not found".
pub fn replay<T>(rec: Recording, f: impl FnOnce() -> T) -> T {
    MODE.with(|m| *m.borrow_mut() = Some(Mode::Replay(rec)));
    let out = f();
    MODE.with(|m| *m.borrow_mut() = None);
    out
}

fn not_recorded(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} was not read by the master process", path.display()),
    )
}

/// In a replay, `pick`'s answer from the recording; `None` otherwise.
fn replayed<T>(pick: impl FnOnce(&Recording) -> T) -> Option<T> {
    MODE.with(|m| match &*m.borrow() {
        Some(Mode::Replay(r)) => Some(pick(r)),
        _ => None,
    })
}

/// A recorded answer as the disk gave it (the error kept as its text).
fn replay_answer<T: Clone>(path: &Path, got: Option<&Result<T, String>>) -> io::Result<T> {
    match got {
        Some(Ok(v)) => Ok(v.clone()),
        Some(Err(e)) => Err(io::Error::other(e.clone())),
        None => Err(not_recorded(path)),
    }
}

/// While recording, keeps what the disk answered via `keep`.
fn record_answer<T: Clone>(
    got: &io::Result<T>,
    keep: impl FnOnce(&mut Recording, Result<T, String>),
) {
    MODE.with(|m| {
        if let Some(Mode::Record(r)) = &mut *m.borrow_mut() {
            let kept = match got {
                Ok(v) => Ok(v.clone()),
                Err(e) => Err(e.to_string()),
            };
            keep(r, kept);
        }
    });
}

/// The whole file, at most `max` bytes: a larger one is an error asking whether it is
/// `what` ("a key file").
pub fn read(path: &Path, max: u64, what: &str) -> io::Result<Vec<u8>> {
    read_recorded(path, max, what, nix::fcntl::OFlag::empty())
}

/// As [`read`], but a symbolic link at `path` is refused (`O_NOFOLLOW`): for the files
/// shuck itself writes as root in a directory of its own (`--admin-certs`,
/// `--admin-state`), where a link could only have been planted.
pub fn read_no_link(path: &Path, max: u64, what: &str) -> io::Result<Vec<u8>> {
    read_recorded(path, max, what, nix::fcntl::OFlag::O_NOFOLLOW)
}

/// [`read_regular`] opened with `flags`, replayed or recorded as the mode says.
fn read_recorded(
    path: &Path,
    max: u64,
    what: &str,
    flags: nix::fcntl::OFlag,
) -> io::Result<Vec<u8>> {
    if let Some(r) = replayed(|r| replay_answer(path, r.files.get(path))) {
        return r.and_then(|b| within(b, max, what));
    }
    let got = read_regular(path, max, what, flags);
    record_answer(&got, |r, kept| {
        r.files.insert(path.to_owned(), kept);
    });
    got
}

/// Reads a regular file of at most `max` bytes, opened with `flags` besides
/// `O_NONBLOCK`. Non-blocking, so that a FIFO (or a device) planted in a certificate's place
/// is refused at once instead of stalling the master, and measured before it is read, so
/// that a huge file costs nothing.
fn read_regular(
    path: &Path,
    max: u64,
    what: &str,
    flags: nix::fcntl::OFlag,
) -> io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NONBLOCK | flags).bits())
        .open(path)
        .map_err(|e| {
            // Named before it is recorded, so that a worker replaying it says the same.
            let link = e.raw_os_error() == Some(nix::libc::ELOOP);
            if link && flags.contains(nix::fcntl::OFlag::O_NOFOLLOW) {
                io::Error::other("a symbolic link: refused here, where only shuck writes")
            } else {
                e
            }
        })?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    if meta.len() > max {
        return Err(io::Error::other(format!(
            "{} bytes, larger than {max}; is this {what}?",
            meta.len()
        )));
    }
    let mut b = Vec::with_capacity(meta.len() as usize);
    // Bounded even if the file grows while it is read.
    f.by_ref().take(max.saturating_add(1)).read_to_end(&mut b)?;
    within(b, max, what)
}

fn within(b: Vec<u8>, max: u64, what: &str) -> io::Result<Vec<u8>> {
    if b.len() as u64 > max {
        return Err(io::Error::other(format!(
            "larger than {max} bytes; is this {what}?"
        )));
    }
    Ok(b)
}

/// The file as UTF-8 text, at most `max` bytes (see [`read`]).
pub fn read_to_string(path: &Path, max: u64, what: &str) -> io::Result<String> {
    String::from_utf8(read(path, max, what)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// Opens `path` for writing, created if missing (mode 0644), appended to or truncated,
/// never through a symbolic link planted in its place (O_NOFOLLOW: a root process writing
/// its pid or log must not be turned into a writer of another file).
pub fn create_nofollow(path: &Path, append: bool) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = std::fs::OpenOptions::new();
    o.create(true)
        .mode(0o644)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits());
    if append {
        o.append(true);
    } else {
        o.write(true).truncate(true);
    }
    o.open(path).map_err(|e| {
        if e.raw_os_error() == Some(nix::libc::ELOOP) {
            io::Error::other("is a symbolic link; not followed (give the real path)")
        } else {
            e
        }
    })
}

/// Opens an access log at `path` as root, to append: its directory held to
/// [`check_private_dir`]'s rules (a directory another user may write lets them make root
/// create or append to a file anywhere, by a link), never through a link, and never waiting:
/// opened non-blocking, and refused unless a regular file (or, with `fifo`, a named pipe,
/// opened for reading too so that it needs no reader to open; `/dev/null` is let through).
pub fn open_log(path: &Path, fifo: bool) -> io::Result<std::fs::File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    if path == Path::new("/dev/null") {
        return std::fs::OpenOptions::new().append(true).open(path);
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    check_private_dir(dir).map_err(io::Error::other)?;
    let mut o = std::fs::OpenOptions::new();
    o.append(true)
        .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits());
    if fifo {
        o.read(true);
    } else {
        o.create(true).mode(0o644);
    }
    let f = o.open(path).map_err(|e| match e.raw_os_error() {
        Some(nix::libc::ELOOP) => {
            io::Error::other("is a symbolic link; not followed (give the real path)")
        }
        Some(nix::libc::ENXIO) => {
            io::Error::other("is a FIFO (give fifo:PATH to write to a named pipe)")
        }
        _ => e,
    })?;
    let kind = f.metadata()?.file_type();
    let ok = if fifo { kind.is_fifo() } else { kind.is_file() };
    if !ok {
        let what = if kind.is_fifo() {
            "a FIFO (give fifo:PATH to write to a named pipe)"
        } else if kind.is_file() {
            "a regular file, not a FIFO (leave fifo: out)"
        } else {
            "not a regular file (a device, socket or directory)"
        };
        return Err(io::Error::other(format!("is {what}")));
    }
    // The writer thread's writes wait, as a file's do; only the open must not.
    let flags = nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let mut flags = nix::fcntl::OFlag::from_bits_truncate(flags);
    flags.remove(nix::fcntl::OFlag::O_NONBLOCK);
    nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_SETFL(flags)).map_err(io::Error::from)?;
    Ok(f)
}

/// Warns when `path`, which holds `what` (a secret), is open to others. Its group may read
/// it: Debian keeps keys at 0640 `root:ssl-cert`, and a warning at every start for that
/// would teach operators to ignore it. From the disk, not a recording: a worker may not see
/// the file.
pub fn warn_if_exposed(path: &Path, what: &str) {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o007 != 0) {
        tracing::warn!(
            name: "key_file_readable",
            what = %what,
            file = %path.display(),
            "{what} is open to others; chmod o-rwx it (0600, or 0640 for a group such as ssl-cert)",
        );
    }
}

/// Whether `path` is a regular file that can be read.
pub fn is_file(path: &Path) -> bool {
    if let Some(r) = replayed(|r| matches!(r.files.get(path), Some(Ok(_)))) {
        return r;
    }
    // Recorded as a read, so that the replay answers alike.
    path.is_file() && read(path, u64::MAX, "").is_ok()
}

/// The regular files in `dir`, by name, sorted.
pub fn list_files(dir: &Path) -> io::Result<Vec<(OsString, PathBuf)>> {
    if let Some(r) = replayed(|r| replay_answer(dir, r.dirs.get(dir))) {
        return r;
    }
    let got = std::fs::read_dir(dir).map(|rd| {
        let mut files: Vec<(OsString, PathBuf)> = rd
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| (e.file_name(), e.path()))
            .collect();
        files.sort();
        files
    });
    record_answer(&got, |r, kept| {
        r.dirs.insert(dir.to_owned(), kept);
    });
    got
}

/// Writes `data` to `path` readable by its owner only (0600): into a new file of a random
/// name beside it first (`O_CREAT|O_EXCL|O_NOFOLLOW`: never a file or link someone else put
/// there), synced, then renamed over `path`, which replaces a link at `path` instead of
/// following it; a reader finds the old file or the new one whole.
pub fn write_private(path: &Path, data: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut random = [0u8; 8];
    aws_lc_rs::rand::fill(&mut random).map_err(|_| io::Error::other("no random bytes"))?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("no file name"))?;
    let mut aside_name = std::ffi::OsString::from(".");
    aside_name.push(name);
    aside_name.push(format!(".{:016x}.new", u64::from_le_bytes(random)));
    let aside = path.with_file_name(aside_name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&aside)?;
    let written = f.write_all(data).and_then(|()| f.sync_all());
    drop(f);
    match written.and_then(|()| std::fs::rename(&aside, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&aside);
            Err(e)
        }
    }
}

/// Why a directory root writes into is not safe to (as OpenSSH's StrictModes): it, and
/// every directory above it, must be owned by root (or by the user shuck runs as) and
/// writable by nobody else, unless sticky (`/tmp`: others cannot rename or remove what is
/// not theirs). Else whoever can write there could put a link or a file of theirs in place
/// of what root writes or reads. A directory not there yet is made 0700 by its writer; its
/// parents are checked.
pub fn check_private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // A worker replaying what the master read: the master checked, as root, and the
    // worker may not even see the directory (--chroot).
    if replayed(|_| ()).is_some() {
        return Ok(());
    }
    let me = nix::unistd::geteuid().as_raw();
    let absolute = if dir.is_absolute() {
        dir.to_owned()
    } else {
        std::env::current_dir()
            .map_err(|e| format!("the current directory: {e}"))?
            .join(dir)
    };
    let mut first = true;
    for d in absolute.ancestors() {
        let meta = match std::fs::symlink_metadata(d) {
            Ok(m) => m,
            // Not made yet: its writer makes it (0700); what is above it is checked.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", d.display())),
        };
        if first && meta.file_type().is_symlink() {
            return Err(format!("{} is a symbolic link", d.display()));
        }
        first = false;
        let meta = std::fs::metadata(d).map_err(|e| format!("{}: {e}", d.display()))?;
        if !meta.is_dir() {
            return Err(format!("{} is not a directory", d.display()));
        }
        let owner = meta.uid();
        if owner != 0 && owner != me {
            return Err(format!(
                "{} is owned by uid {owner}, not by root: its owner could put a link there",
                d.display()
            ));
        }
        let mode = meta.permissions().mode();
        let sticky = mode & 0o1000 != 0 && d != absolute;
        if mode & 0o022 != 0 && !sticky {
            return Err(format!(
                "{} is writable by group or others (mode {:o}): they could put a link there",
                d.display(),
                mode & 0o7777
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_answers_as_the_recording_did() {
        let dir = std::env::temp_dir().join(format!("shuck-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = dir.join("a.pem");
        std::fs::write(&a, "A").unwrap();
        let missing = dir.join("missing");
        let (got, rec) = record(|| {
            (
                read(&a, 10, "a").unwrap(),
                read(&missing, 10, "a").is_err(),
                list_files(&dir).unwrap().len(),
            )
        });
        assert_eq!(got, (b"A".to_vec(), true, 1));
        std::fs::remove_dir_all(&dir).unwrap();
        // The disk no longer has them; the replay does.
        let again = replay(rec, || {
            (
                read(&a, 10, "a").unwrap(),
                read(&missing, 10, "a").is_err(),
                list_files(&dir).unwrap().len(),
                is_file(&a),
                read(&dir.join("never-read"), 10, "a").is_err(),
                read(&a, 0, "a").is_err(),
            )
        });
        assert_eq!(again, (b"A".to_vec(), true, 1, true, true, true));
        assert!(
            read(&a, 10, "a").is_err(),
            "outside the replay, the disk answers"
        );
    }
}
