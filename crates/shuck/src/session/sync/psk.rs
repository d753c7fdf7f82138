//! The pre-shared key file (`--shared-cache-key`): base64 of 32 random bytes, one line;
//! `#` comments and blank lines are ignored.

use std::path::Path;

use base64::Engine;

use super::SyncError;

/// Bound on the file, so that a wrong path cannot make shuck read a disk image.
const MAX_FILE: u64 = 4096;

/// Reads the key; errors name the file and what is wrong with it.
pub fn load(path: &Path) -> Result<[u8; 32], SyncError> {
    let bad = |reason: String| SyncError::KeyFile {
        path: path.to_owned(),
        reason,
    };
    let text = crate::system::files::read_to_string(path, MAX_FILE, "a key file")
        .map_err(|e| bad(e.to_string()))?;
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let line = match lines.as_slice() {
        [one] => *one,
        [] => return Err(bad(format!("holds no key; {HOW}"))),
        _ => {
            return Err(bad(format!(
                "holds {} lines; expected one key",
                lines.len()
            )))
        }
    };
    let raw = base64::engine::general_purpose::STANDARD
        .decode(line)
        .map_err(|e| bad(format!("not base64 ({e}); {HOW}")))?;
    let key: [u8; 32] = raw.as_slice().try_into().map_err(|_| {
        bad(format!(
            "the key is {} bytes, expected 32; {HOW}",
            raw.len()
        ))
    })?;
    if key.iter().all(|&b| b == key[0]) {
        return Err(bad(format!("the key is one byte repeated; {HOW}")));
    }
    crate::system::files::warn_if_exposed(path, "the replication key");
    Ok(key)
}

const HOW: &str = "make one with: head -c 32 /dev/urandom | base64";

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("shuck-psk-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn good_and_bad_files() {
        let key: Vec<u8> = (0..32).collect();
        let b64 = base64::engine::general_purpose::STANDARD.encode(&key);
        let p = write("good", &format!("# farm key\n{b64}\n"));
        assert_eq!(load(&p).unwrap().to_vec(), key);
        for (name, text, needle) in [
            ("empty", "\n# nothing\n".to_string(), "no key"),
            ("two", format!("{b64}\n{b64}\n"), "2 lines"),
            ("notb64", "not base64!!\n".to_string(), "not base64"),
            (
                "short",
                base64::engine::general_purpose::STANDARD.encode([1u8, 2, 3]),
                "3 bytes",
            ),
            (
                "zero",
                base64::engine::general_purpose::STANDARD.encode([0u8; 32]),
                "repeated",
            ),
        ] {
            let p = write(name, &text);
            let msg = load(&p).unwrap_err().to_string();
            assert!(
                msg.contains(needle) && msg.contains(&*p.to_string_lossy()),
                "{msg}"
            );
            let _ = std::fs::remove_file(p);
        }
        let msg = load(Path::new("/nonexistent/key")).unwrap_err().to_string();
        assert!(msg.contains("/nonexistent/key"), "{msg}");
        let _ = std::fs::remove_file(p);
    }
}
