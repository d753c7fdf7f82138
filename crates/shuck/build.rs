//! Facts for `shuck --version` that only the build knows: the git commit, the build date,
//! and the versions of the TLS library and its cryptography, as `haproxy -vv` prints its
//! own, so that a bug report carries them.

use std::path::Path;
use std::process::Command;

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let root = Path::new(&manifest).join("../..");
    let lock = root.join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    // HEAD names a branch; the commit is in the branch's ref (or packed-refs). Only files
    // that exist are watched: a missing one would make every build rebuild shuck.
    let mut watch = vec![root.join(".git/HEAD"), root.join(".git/packed-refs")];
    if let Ok(head) = std::fs::read_to_string(root.join(".git/HEAD")) {
        if let Some(r) = head.trim().strip_prefix("ref: ") {
            watch.push(root.join(".git").join(r));
        }
    }
    for f in watch.iter().filter(|f| f.exists()) {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    println!("cargo:rerun-if-env-changed=SHUCK_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");

    // A source tree without git (a release tarball, a package build) may say its commit.
    let commit = std::env::var("SHUCK_GIT_COMMIT").ok().or_else(|| {
        let out = Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(&root)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    });
    println!(
        "cargo:rustc-env=SHUCK_GIT_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );

    // SOURCE_DATE_EPOCH makes package builds reproducible; otherwise, now.
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        });
    println!(
        "cargo:rustc-env=SHUCK_BUILD_DATE={}",
        civil_date(epoch / 86_400)
    );

    let lock = std::fs::read_to_string(&lock).unwrap_or_default();
    for (name, var) in [
        ("rustls", "SHUCK_RUSTLS_VERSION"),
        ("aws-lc-rs", "SHUCK_AWS_LC_RS_VERSION"),
        ("aws-lc-sys", "SHUCK_AWS_LC_SYS_VERSION"),
        ("tokio", "SHUCK_TOKIO_VERSION"),
    ] {
        println!(
            "cargo:rustc-env={var}={}",
            locked_version(&lock, name).unwrap_or("unknown")
        );
    }
}

/// The version Cargo.lock pins for package `name` (the first one, if several).
fn locked_version<'a>(lock: &'a str, name: &str) -> Option<&'a str> {
    let entry = format!("name = \"{name}\"\n");
    let at = lock.find(&entry)? + entry.len();
    lock[at..].strip_prefix("version = \"")?.split('"').next()
}

/// `YYYY-MM-DD` of a day count since 1970-01-01 (Howard Hinnant's civil_from_days).
fn civil_date(days: u64) -> String {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
