//! shuck's release chores, from its one option table (`shuck::config::Cli`):
//!
//! - `cargo run -p xtask -- dist [DIR]` writes the man pages `shuck.8`, `shuck.conf.5` and
//!   `shuck-bench.1`,
//!   the bash, zsh and fish completions and the commented `shuck.conf` into DIR (default
//!   `target/release/dist`, where the Debian package takes them from);
//! - `cargo run -p xtask -- deb` builds the release binaries, writes the above and runs
//!   `cargo deb` (install it with `cargo install cargo-deb`): `target/debian/shuck_*.deb`
//!   and its debug symbols, `shuck-dbgsym_*.ddeb`;
//! - `cargo run -p xtask -- book [--check]` writes the manual's option reference
//!   (`docs/manual/src/options.md`); `--check` instead fails on a stale reference, an option
//!   it lacks, or a link in the manual or the README that leads nowhere (CI runs it).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::{Arg, ArgAction, CommandFactory};
use clap_complete::Shell;
use shuck::config::Cli;

mod book;
mod conf;
mod roff;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["dist"] => dist(&target_dir(&root).join("release/dist")),
        ["dist", dir] => dist(Path::new(dir)),
        ["deb"] => deb(&root),
        ["book"] => book::write(&root),
        ["book", "--check"] => book::check(&root),
        _ => Err("usage: cargo run -p xtask -- dist [DIR] | deb | book [--check]".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every generated file into `dir`.
fn dist(dir: &Path) -> Result<(), String> {
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).map_err(|e| format!("{}: {e}", p.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    write("shuck.8", &roff::shuck_8()?)?;
    write("shuck.conf.5", roff::shuck_conf_5().as_bytes())?;
    write("shuck-bench.1", &roff::shuck_bench_1()?)?;
    write("shuck-ctl.8", &roff::shuck_ctl_8()?)?;
    write("shuck.conf", conf::sample().as_bytes())?;
    for (shell, name) in [
        (Shell::Bash, "shuck.bash"),
        (Shell::Zsh, "_shuck"),
        (Shell::Fish, "shuck.fish"),
    ] {
        let mut out = Vec::new();
        // `shuck ctl …` completes too: its commands as a subcommand of shuck's table.
        let mut cmd = Cli::command().subcommand(
            shuck::ctl::CtlCli::command()
                .name("ctl")
                .about("Ask a running shuck through its admin API (shuck-ctl(8))"),
        );
        clap_complete::generate(shell, &mut cmd, "shuck", &mut out);
        write(name, &out)?;
    }
    println!("{}", dir.display());
    Ok(())
}

/// The release build, the generated files, then `cargo deb` on them.
fn deb(root: &Path) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let run = |args: &[&str]| -> Result<(), String> {
        let st = Command::new(&cargo)
            .args(args)
            .current_dir(root)
            .status()
            .map_err(|e| format!("{cargo}: {e}"))?;
        st.success()
            .then_some(())
            .ok_or_else(|| format!("cargo {} failed ({st})", args.join(" ")))
    };
    run(&["build", "--release", "-p", "shuck", "-p", "shuck-bench"])?;
    let dir = target_dir(root).join("release/dist");
    dist(&dir)?;
    // Debian installs man pages compressed; -n keeps the package reproducible.
    for page in ["shuck.8", "shuck.conf.5", "shuck-bench.1", "shuck-ctl.8"] {
        let st = Command::new("gzip")
            .args(["-9nkf", page])
            .current_dir(&dir)
            .status()
            .map_err(|e| format!("gzip: {e}"))?;
        st.success()
            .then_some(())
            .ok_or_else(|| format!("gzip {page} failed ({st})"))?;
    }
    // Stripped binaries in the package, their symbols in a -dbgsym one beside it.
    run(&["deb", "-p", "shuck", "--no-build", "--dbgsym"])
}

/// Cargo's target directory: `CARGO_TARGET_DIR` when set (relative to the workspace, as
/// cargo reads it), else `target`; cargo-deb takes the package's files from there.
fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map_or_else(|| root.join("target"), |d| root.join(d))
}

/// The option table, built (so that each argument knows how many values it takes).
fn command() -> clap::Command {
    let mut cmd = Cli::command();
    cmd.build();
    cmd
}

/// shuck's version (this crate's is not).
fn version() -> String {
    Cli::command().get_version().unwrap_or("").to_owned()
}

/// The file keys: every long flag but those that make no sense in a file.
fn keys(cmd: &clap::Command) -> impl Iterator<Item = (&str, &Arg)> {
    cmd.get_arguments().filter_map(|a| {
        let long = a.get_long()?;
        (!a.is_hide_set() && !shuck::config::file::NOT_IN_FILE.contains(&long)).then_some((long, a))
    })
}

/// How a key's value is written: `on|off` for switches, else its value name.
fn value_form(a: &Arg) -> String {
    let takes = a.get_num_args().map(|n| n.max_values()).unwrap_or(0);
    if takes == 0 || matches!(a.get_action(), ArgAction::SetTrue) {
        return "on|off".into();
    }
    let possible: Vec<String> = a
        .get_possible_values()
        .iter()
        .map(|v| v.get_name().to_owned())
        .collect();
    if possible.len() > 1 {
        return possible.join("|");
    }
    a.get_value_names()
        .and_then(|v| v.first())
        .map(|v| v.to_string())
        .unwrap_or_else(|| "VALUE".into())
}

/// The default a key has when not given, if it has one.
fn default_of(a: &Arg) -> Option<String> {
    let d: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| match v.to_string_lossy().as_ref() {
            // Switches are written on/off in a file.
            "false" => "off".to_owned(),
            "true" => "on".to_owned(),
            other => other.to_owned(),
        })
        .collect();
    (!d.is_empty()).then(|| d.join(","))
}

/// A flag's help as plain text (the long help when it has one).
fn help_of(a: &Arg) -> String {
    a.get_long_help()
        .or_else(|| a.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default()
}
