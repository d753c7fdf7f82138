//! HAProxy's tls-ticket-keys file format (`--ticket-keys`): one base64 key per line.

use std::path::Path;
use std::sync::Arc;

use base64::Engine;

use super::{aead_key, Ring, TicketError, TicketKey, MAX_KEY_FILE, NAME_LEN};

/// Reads an HAProxy tls-ticket-keys file (see [`parse_key_file`]).
pub(super) fn load_file(path: &Path) -> Result<Ring, TicketError> {
    parse_key_file(&read_key_file(path)?, path)
}

pub(super) fn read_key_file(path: &Path) -> Result<String, TicketError> {
    crate::system::files::read_to_string(path, MAX_KEY_FILE, "a key file").map_err(|e| {
        TicketError::BadKeyFile {
            path: path.to_owned(),
            line: None,
            reason: e.to_string(),
        }
    })
}

/// Parses an HAProxy tls-ticket-keys file's `text` (read from `path`, named in errors):
/// one base64 key per line (48 or 80 bytes, all the same length), `#` comments and blank
/// lines ignored. Every key decrypts; the second-to-last encrypts (HAProxy's rule: the last
/// is the next key, already distributed), or the only one when there is one.
pub(super) fn parse_key_file(text: &str, path: &Path) -> Result<Ring, TicketError> {
    let bad = |line: Option<usize>, reason: String| TicketError::BadKeyFile {
        path: path.to_owned(),
        line,
        reason,
    };
    let mut keys = Vec::new();
    let mut first_len = None;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(line)
            .map_err(|e| bad(Some(line_no), format!("not base64: {e}")))?;
        if raw.len() != 48 && raw.len() != 80 {
            return Err(bad(
                Some(line_no),
                format!("a key is 48 or 80 bytes, this one is {}", raw.len()),
            ));
        }
        match first_len {
            None => first_len = Some(raw.len()),
            Some(n) if n != raw.len() => {
                return Err(bad(
                    Some(line_no),
                    format!(
                        "{}-byte key after {n}-byte keys; do not mix lengths",
                        raw.len()
                    ),
                ));
            }
            Some(_) => {}
        }
        let mut name = [0u8; NAME_LEN];
        name.copy_from_slice(&raw[..NAME_LEN]);
        keys.push(Arc::new(TicketKey {
            name,
            key: aead_key(&raw[NAME_LEN..])
                .map_err(|_| bad(Some(line_no), "cannot derive a key from it".into()))?,
            retire_at: None,
            secret: None,
            foreign: false,
        }));
    }
    if keys.is_empty() {
        return Err(bad(
            None,
            "holds no key (one base64 key of 48 or 80 bytes per line)".into(),
        ));
    }
    let current = keys.len().saturating_sub(2);
    Ok(Ring {
        keys,
        current,
        next: None,
        rotate_at: None,
    })
}
