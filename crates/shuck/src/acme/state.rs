//! The state directory (`--acme-state`): `account-<hash>.json` (the account's key and URL,
//! one per directory URL), `certificates/<first name>.pem` (the private key and the chain,
//! as a hitch `pem-file`). Directories are 0700 and files 0600; files are replaced whole
//! (written aside, then renamed), so a reader never sees half a certificate.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::Settings;
use crate::tls::pem::LoadedCert;

/// Bound on a certificate file read back.
const MAX_FILE: u64 = 1 << 20;

/// A state directory that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("--acme-state {}: {reason}", path.display())]
pub struct StateError {
    /// The path at fault.
    pub path: PathBuf,
    /// What went wrong.
    pub reason: String,
}

/// The state directory, checked writable.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// Creates the directory and its `certificates/` (0700) when missing and checks that
    /// a file can be written there.
    pub fn prepare(root: &Path) -> Result<Self, StateError> {
        let fail = |path: &Path, e: io::Error| StateError {
            path: path.to_owned(),
            reason: e.to_string(),
        };
        let certs = root.join("certificates");
        for dir in [root, certs.as_path()] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| fail(dir, e))?;
            let meta = std::fs::metadata(dir).map_err(|e| fail(dir, e))?;
            if !meta.is_dir() {
                return Err(StateError {
                    path: dir.to_owned(),
                    reason: "is not a directory".into(),
                });
            }
            // Keys live here: nobody else reads it.
            if meta.permissions().mode() & 0o077 != 0 {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| fail(dir, e))?;
            }
        }
        let state = StateDir {
            root: root.to_owned(),
        };
        let probe = root.join(".shuck-write-check");
        state
            .write_secret(&probe, b"")
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(|e| StateError {
                path: root.to_owned(),
                reason: format!("cannot write there: {e}"),
            })?;
        Ok(state)
    }

    /// The directory as given, without checking it (the master reads certificates only).
    pub fn unchecked(root: &Path) -> Self {
        StateDir {
            root: root.to_owned(),
        }
    }

    /// The file of the certificate whose names start with `first`.
    pub fn cert_path(&self, first: &str) -> PathBuf {
        self.root.join("certificates").join(format!("{first}.pem"))
    }

    /// The account file for the directory at `url`.
    pub fn account_path(&self, url: &str) -> PathBuf {
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, url.as_bytes());
        let hex: String = digest.as_ref()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.root.join(format!("account-{hex}.json"))
    }

    /// Writes `data` to `path` readable by its owner only: aside first, then renamed over.
    pub fn write_secret(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        crate::system::files::write_private(path, data)
    }
}

/// What the state directory holds for one certificate.
#[derive(Debug)]
pub enum Stored {
    /// Nothing yet.
    Missing,
    /// A certificate that cannot be served (unreadable, expired, other names): ordered
    /// again.
    Unusable(String),
    /// A certificate to serve.
    Valid(LoadedCert),
}

/// Reads the certificate for `names` (through [`crate::system::files`], so that the master
/// records it for its worker).
pub fn load(state: &StateDir, names: &[String], now: SystemTime) -> Stored {
    let Some(first) = names.first() else {
        return Stored::Missing;
    };
    let path = state.cert_path(first);
    let data = match crate::system::files::read(&path, MAX_FILE, "a certificate") {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Stored::Missing,
        Err(e) => return Stored::Unusable(format!("{}: {e}", path.display())),
    };
    let cert = match LoadedCert::from_pem(&data, &path.display().to_string(), Some(&path)) {
        Ok(c) => c,
        Err(e) => return Stored::Unusable(e.to_string()),
    };
    if cert.is_expired(now) {
        return Stored::Unusable(format!("{} has expired", path.display()));
    }
    if let Some(missing) = names.iter().find(|n| !cert.names.contains(n)) {
        return Stored::Unusable(format!(
            "{} does not name {missing} (the names asked for changed)",
            path.display()
        ));
    }
    Stored::Valid(cert)
}

/// Every certificate to serve from the state directory, in the order of
/// `--acme-domain`; missing and unusable ones are left out (they are being ordered).
pub fn load_all(settings: &Settings) -> Vec<LoadedCert> {
    let state = StateDir::unchecked(&settings.state);
    let now = SystemTime::now();
    settings
        .domains
        .iter()
        .filter_map(|names| match load(&state, names, now) {
            Stored::Valid(c) => Some(c),
            _ => None,
        })
        .collect()
}
