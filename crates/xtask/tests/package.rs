//! The Debian package, built as the README says (`cargo run -p xtask -- deb`), then taken
//! apart: its file list, its maintainer scripts, lintian, the man pages through man and
//! groff with every warning on, and the packaged binary and configuration run from the
//! unpacked tree. Installs cargo-deb (cargo), lintian and man-db when missing; under CI a
//! tool that cannot be had fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `program` from Debian package `package`, installed with apt-get when missing.
fn require(program: &str, package: &str) {
    if !have(program) {
        let _ = Command::new("apt-get")
            .args(["install", "-y", "-q", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output();
    }
    assert!(have(program), "{program} ({package}) cannot be installed");
}

/// A scratch directory, removed at the end however the test ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_debian_package_installs_what_an_operator_expects() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let has_deb = Command::new(&cargo)
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_deb {
        run(Command::new(&cargo).args(["install", "cargo-deb", "--locked"]));
    }
    require("lintian", "lintian");
    require("man", "man-db");
    require("dpkg-deb", "dpkg");

    let built = run(Command::new(&cargo)
        .args(["run", "-q", "-p", "xtask", "--", "deb"])
        .current_dir(root()));
    let deb = text(&built)
        .lines()
        .map(PathBuf::from)
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("xtask deb names the package it built");
    let shuck_version = {
        let manifest = std::fs::read_to_string(root().join("crates/shuck/Cargo.toml")).unwrap();
        manifest
            .lines()
            .find_map(|l| l.strip_prefix("version = \""))
            .and_then(|v| v.strip_suffix('"'))
            .unwrap()
            .to_owned()
    };
    assert!(
        deb.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&format!("shuck_{shuck_version}-1_")),
        "{}",
        deb.display()
    );

    // The file list.
    let listing = text(&run(Command::new("dpkg-deb").arg("-c").arg(&deb)));
    for path in [
        "./usr/sbin/shuck",
        "./usr/bin/shuck-bench",
        "./etc/shuck/shuck.conf",
        "./usr/share/man/man8/shuck.8.gz",
        "./usr/share/man/man5/shuck.conf.5.gz",
        "./usr/share/man/man1/shuck-bench.1.gz",
        "./usr/share/man/man8/shuck-ctl.8.gz",
        "./usr/share/bash-completion/completions/shuck",
        "./usr/share/zsh/vendor-completions/_shuck",
        "./usr/share/fish/vendor_completions.d/shuck.fish",
        "./usr/lib/systemd/system/shuck.service",
        "./usr/lib/systemd/system/shuck.socket",
        "./usr/share/doc/shuck/copyright",
        "./usr/share/doc/shuck/changelog.Debian.gz",
        "./usr/share/shuck/grafana/shuck.json",
        "./etc/logrotate.d/shuck",
    ] {
        assert!(
            listing.lines().any(|l| l.ends_with(&format!(" {path}"))),
            "{path} is not in the package:\n{listing}"
        );
    }
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("-rwxr-xr-x") && l.ends_with(" ./usr/sbin/shuck")),
        "{listing}"
    );

    let scratch = Scratch(std::env::temp_dir().join(format!("shuck-deb-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0).unwrap();
    let (control, tree) = (scratch.0.join("control"), scratch.0.join("tree"));
    run(Command::new("dpkg-deb").arg("-e").arg(&deb).arg(&control));
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tree));

    // The maintainer scripts: valid shell; the system user and the state directory.
    for script in ["postinst", "prerm", "postrm"] {
        run(Command::new("sh").arg("-n").arg(control.join(script)));
    }
    let postinst = std::fs::read_to_string(control.join("postinst")).unwrap();
    assert!(
        postinst.contains("adduser --system --group") && postinst.contains("_shuck"),
        "{postinst}"
    );
    assert!(
        postinst.contains("install -d -m 0700 -o root -g root /var/lib/shuck"),
        "{postinst}"
    );
    assert!(
        postinst.contains("install -d -m 0750 -o root -g adm /var/log/shuck"),
        "{postinst}"
    );
    // The configuration and logrotate's file are the operator's to edit: conffiles.
    let conffiles = std::fs::read_to_string(control.join("conffiles")).unwrap();
    assert_eq!(
        conffiles.trim(),
        "/etc/shuck/shuck.conf\n/etc/logrotate.d/shuck"
    );
    let rotate = std::fs::read_to_string(tree.join("etc/logrotate.d/shuck")).unwrap();
    assert!(
        rotate.contains("/var/log/shuck/*.log") && rotate.contains("kill -s USR1"),
        "{rotate}"
    );
    let control_text = std::fs::read_to_string(control.join("control")).unwrap();
    assert!(control_text.contains("Depends: adduser"), "{control_text}");

    // The packaged binary says what it is.
    let shuck = tree.join("usr/sbin/shuck");
    let v = text(&run(Command::new(&shuck).arg("--version")));
    assert!(
        v.starts_with(&format!("shuck {shuck_version}\ncommit ")),
        "{v}"
    );
    assert!(v.contains("rustls ") && v.contains("aws-lc-rs "), "{v}");
    let v = text(&run(
        Command::new(tree.join("usr/bin/shuck-bench")).arg("--version")
    ));
    assert!(v.starts_with("shuck-bench "), "{v}");

    // The packaged configuration passes --test with a certificate path filled in (the
    // _shuck user exists only once the package is installed: nobody stands in for it).
    let conf = std::fs::read_to_string(tree.join("etc/shuck/shuck.conf")).unwrap();
    let pem = scratch.0.join("example.pem");
    run(Command::new("sh").arg("-c").arg(format!(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
         -subj /CN=example.com -keyout {d}/k.pem -out {d}/c.pem 2>/dev/null && cat {d}/c.pem {d}/k.pem > {p}",
        d = scratch.0.display(),
        p = pem.display()
    )));
    let commented = "# pem-file = \"/etc/shuck/example.com.pem\"";
    assert!(conf.contains(commented), "{conf}");
    let filled = scratch.0.join("shuck.conf");
    std::fs::write(
        &filled,
        conf.replace(commented, &format!("pem-file = \"{}\"", pem.display())),
    )
    .unwrap();
    let test = |conf: &Path| {
        Command::new(&shuck)
            .arg("--config")
            .arg(conf)
            .args(["--test", "--user", "nobody", "--group", "nogroup"])
            .output()
            .unwrap()
    };
    let ok = test(&filled);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(text(&ok).contains("1 certificate(s)"), "{}", text(&ok));
    // Every commented key with its default, uncommented, still passes: the defaults are
    // written as the file takes them.
    let all: String = std::fs::read_to_string(&filled)
        .unwrap()
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            // A key line, `# KEY = "VALUE"`, not help text that quotes a block.
            Some(kv)
                if kv.split_once(" = \"").is_some_and(|(k, _)| {
                    k.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                }) && !kv.contains('<') =>
            {
                kv.to_owned()
            }
            _ => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let uncommented = all.lines().filter(|l| l.contains(" = \"")).count();
    assert!(uncommented > 40, "{uncommented} keys\n{all}");
    let every = scratch.0.join("every.conf");
    std::fs::write(&every, all).unwrap();
    let ok = test(&every);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );

    // Every man page renders with no warning from man or groff (-ww).
    for page in [
        "usr/share/man/man8/shuck.8.gz",
        "usr/share/man/man5/shuck.conf.5.gz",
        "usr/share/man/man1/shuck-bench.1.gz",
        "usr/share/man/man8/shuck-ctl.8.gz",
    ] {
        let out = run(Command::new("man")
            .args(["--warnings=w", "-l"])
            .arg(tree.join(page))
            .env("MANWIDTH", "80")
            .env("LC_ALL", "C.UTF-8")
            .env("MAN_KEEP_STDERR", "1"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.trim().is_empty(), "{page}: {err}");
        assert!(text(&out).contains("SEE ALSO"), "{page}");
    }
    // The bash completion is valid bash and completes the flags.
    let bash = tree.join("usr/share/bash-completion/completions/shuck");
    run(Command::new("bash").arg("-n").arg(&bash));
    let b = std::fs::read_to_string(&bash).unwrap();
    assert!(b.contains("--log-format") && b.contains("--pem-file"));
    // `shuck ctl`'s commands complete too.
    assert!(
        b.contains("ctl") && b.contains("drain") && b.contains("--socket"),
        "{b}"
    );

    // lintian: no error.
    let lint = Command::new("lintian").arg(&deb).output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );
    let errors: Vec<&str> = report.lines().filter(|l| l.starts_with("E:")).collect();
    assert!(errors.is_empty(), "lintian:\n{report}");
    // Every program has its page (shuck-bench(1) too).
    assert!(!report.contains("no-manual-page"), "lintian:\n{report}");
}
