//! The directory of certificates added at run time through the admin API
//! (`--admin-certs`): one `NAME.pem` each (chain and key, mode 0600), read at every start
//! and reload, and written only after the certificate was checked whole.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{LoadedCert, TlsError};
use crate::system::files;

/// The largest PEM text accepted for one certificate (chain and key).
pub const MAX_PEM: usize = 1 << 20;

/// Why a certificate is not added or removed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A name that cannot be a file name here.
    #[error("bad certificate name {0:?}: 1 to 64 of A-Z a-z 0-9 . _ -, not starting with a dot")]
    BadName(String),
    /// The PEM does not give a certificate shuck can serve.
    #[error("{0}")]
    Refused(String),
    /// The file cannot be written or removed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// No such certificate in the directory.
    #[error("no certificate {0:?} was added through the admin API")]
    NotFound(String),
    /// The directory cannot be listed.
    #[error("{}: {source}", path.display())]
    List {
        /// The directory.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// A file of the directory does not load.
    #[error(transparent)]
    Load(#[from] TlsError),
}

/// True for a name that is one plain file name.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The file `name` is kept in.
pub fn path_of(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.pem"))
}

/// The name of the certificate kept in `path`, when it is one of the directory's.
pub fn name_of(path: &Path) -> Option<&str> {
    let file = path.file_name()?.to_str()?;
    file.strip_suffix(".pem").filter(|n| valid_name(n))
}

/// Every certificate of `dir`, by name; a directory that does not exist holds none, one
/// that cannot be read or a file that does not load is an error naming it.
pub fn load_all(dir: &Path) -> Result<Vec<LoadedCert>, StoreError> {
    let listed = match files::list_files(dir) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(StoreError::List {
                path: dir.to_owned(),
                source,
            })
        }
    };
    let mut out = Vec::new();
    for (_, path) in listed {
        if name_of(&path).is_none() {
            continue;
        }
        // Read without following a link (only shuck writes here), then parsed as any PEM.
        let pem = files::read_no_link(&path, MAX_PEM as u64, "a PEM file").map_err(|e| {
            TlsError::ReadPem {
                path: path.clone(),
                reason: e.to_string(),
            }
        })?;
        out.push(LoadedCert::from_pem(
            &pem,
            &path.display().to_string(),
            Some(&path),
        )?);
    }
    Ok(out)
}

/// Checks `pem` as the certificate `name`: one chain and its matching key, a name to
/// serve, not expired. Nothing is written.
pub fn check(name: &str, pem: &[u8]) -> Result<LoadedCert, StoreError> {
    if !valid_name(name) {
        return Err(StoreError::BadName(name.into()));
    }
    if pem.len() > MAX_PEM {
        return Err(StoreError::Refused(format!(
            "{} bytes of PEM: at most {MAX_PEM}",
            pem.len()
        )));
    }
    let cert = LoadedCert::from_pem(pem, name, None).map_err(|e| StoreError::Refused(why(e)))?;
    if cert.is_expired(SystemTime::now()) {
        return Err(StoreError::Refused(format!(
            "{name}: the certificate has expired"
        )));
    }
    if cert.names.is_empty() {
        return Err(StoreError::Refused(format!(
            "{name}: the certificate names no host (no DNS subject alternative name, no common name)"
        )));
    }
    Ok(cert)
}

/// The reason alone, without the path the parser puts first (the name stands there).
fn why(e: TlsError) -> String {
    e.to_string().replacen("PEM file ", "", 1)
}

/// Writes `pem` as `name` in `dir` (made 0700 when missing), replacing it whole: a new
/// file renamed over the old. Returns what was there before, to put back.
pub fn write(dir: &Path, name: &str, pem: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| StoreError::Io { path, source }
    };
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io(dir))?;
    }
    let path = path_of(dir, name);
    let before = files::read_no_link(&path, MAX_PEM as u64, "a PEM file").ok();
    files::write_private(&path, pem).map_err(io(&path))?;
    Ok(before)
}

/// Puts back what [`write`] replaced (`None`: removes what it added).
pub fn restore(dir: &Path, name: &str, before: Option<Vec<u8>>) {
    let path = path_of(dir, name);
    let _ = match before {
        Some(b) => write(dir, name, &b).map(drop),
        None => std::fs::remove_file(&path).map_err(|source| StoreError::Io { path, source }),
    };
}

/// Removes `name` from `dir`, returning its text (to put back if the rebuild fails).
pub fn remove(dir: &Path, name: &str) -> Result<Vec<u8>, StoreError> {
    if !valid_name(name) {
        return Err(StoreError::BadName(name.into()));
    }
    let path = path_of(dir, name);
    let before = match files::read_no_link(&path, MAX_PEM as u64, "a PEM file") {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StoreError::NotFound(name.into()))
        }
        Err(source) => return Err(StoreError::Io { path, source }),
    };
    std::fs::remove_file(&path).map_err(|source| StoreError::Io { path, source })?;
    Ok(before)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_file_names() {
        for ok in ["a", "example.com", "api_1-x", &"a".repeat(64)] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", ".hidden", "a/b", "..", "a b", "é", &"a".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert_eq!(name_of(Path::new("/d/x.pem")), Some("x"));
        assert_eq!(name_of(Path::new("/d/.x.pem.new")), None);
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        let e = check("x", b"not a pem").unwrap_err().to_string();
        assert!(e.contains("x"), "{e}");
        assert!(matches!(check("../x", b""), Err(StoreError::BadName(_))));
    }
}
