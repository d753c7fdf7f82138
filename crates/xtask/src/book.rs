//! The manual (`docs/manual`, an mdBook): its option reference is generated from the option
//! table, as the man pages are, and `book --check` fails on a stale reference, an option the
//! reference lacks, or a link inside the manual or the README that leads nowhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::Arg;

use crate::{command, default_of, help_of, keys, value_form};

/// The generated chapter, relative to the workspace root.
pub const OPTIONS: &str = "docs/manual/src/options.md";

const PREFACE: &str = "# Option reference

Generated from shuck's option table (`crates/shuck/src/config/cli.rs`) by `cargo run -p
xtask -- book`, as the man pages `shuck(8)` and `shuck.conf(5)` are: `shuck --help` prints
the same text. Boolean flags take hitch's optional value: `--flag`, `--flag=on`,
`--flag=off`. Durations are seconds (`10`, `1.5`) or carry a unit (`500ms`, `2s`, `5m`,
`1h`). Every long flag is also a key of the configuration file (`key = value`, see
[Configuration file](configuration.md)) unless it says *command line only*; flags given on
the command line win over the file's keys.
";

/// The heading of a flag: `--name` alone, so that its anchor is `#--name`.
fn heading(a: &Arg) -> String {
    match a.get_long() {
        Some(long) => format!("--{long}"),
        None => a
            .get_value_names()
            .and_then(|v| v.first())
            .map(|v| format!("{v}... (positional)"))
            .unwrap_or_else(|| a.get_id().to_string()),
    }
}

/// The reference's text.
pub fn options_md() -> String {
    let cmd = command();
    let in_file: BTreeSet<&str> = keys(&cmd).map(|(k, _)| k).collect();
    let mut out = String::from(PREFACE);
    for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        out.push_str(&format!("\n## {}\n\n", heading(a)));
        let mut usage = Vec::new();
        if let Some(s) = a.get_short() {
            usage.push(format!("`-{s}`"));
        }
        if let Some(long) = a.get_long() {
            let form = value_form(a);
            usage.push(if form == "on|off" {
                format!("`--{long}[=on|off]`")
            } else {
                format!("`--{long} {form}`")
            });
        }
        for alias in a.get_visible_aliases().into_iter().flatten() {
            usage.push(format!("`--{alias}`"));
        }
        if usage.is_empty() {
            usage.push(format!("`{}...`", value_form(a)));
        }
        let mut facts = vec![usage.join(", ")];
        if let Some(d) = default_of(a) {
            facts.push(format!("default `{d}`"));
        }
        match a.get_long() {
            Some(long) if in_file.contains(long) => facts.push(format!("in the file: `{long}`")),
            Some(_) => facts.push("command line only".into()),
            None => {}
        }
        out.push_str(&facts.join(" · "));
        out.push_str("\n\n");
        out.push_str(help_of(a).trim());
        out.push('\n');
    }
    out
}

/// Writes the reference.
pub fn write(root: &Path) -> Result<(), String> {
    let p = root.join(OPTIONS);
    std::fs::write(&p, options_md()).map_err(|e| format!("{}: {e}", p.display()))?;
    println!("{}", p.display());
    Ok(())
}

/// Every problem found, one per line; empty when the manual is sound.
pub fn check(root: &Path) -> Result<(), String> {
    let mut problems = Vec::new();
    let want = options_md();
    let have = std::fs::read_to_string(root.join(OPTIONS)).unwrap_or_default();
    if have != want {
        problems.push(format!(
            "{OPTIONS} is not what the option table gives: run `cargo run -p xtask -- book`"
        ));
    }
    let cmd = command();
    for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        if let Some(long) = a.get_long() {
            if !have.contains(&format!("\n## --{long}\n")) {
                problems.push(format!("{OPTIONS} lacks --{long}"));
            }
        }
    }
    let mut files = markdown(&root.join("docs/manual/src"));
    files.push(root.join("README.md"));
    let mut texts = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        texts.push((f, text));
    }
    let anchors: BTreeMap<PathBuf, BTreeSet<String>> =
        texts.iter().map(|(f, t)| (canonical(f), ids(t))).collect();
    for (f, text) in &texts {
        for (line, target) in links(text) {
            if let Some(why) = broken(f, &target, &anchors) {
                let shown = f.strip_prefix(root).unwrap_or(f).display().to_string();
                problems.push(format!("{shown}:{line}: link {target:?}: {why}"));
            }
        }
    }
    if problems.is_empty() {
        println!(
            "manual: reference current, {} files, links sound",
            files.len()
        );
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned())
}

/// The `.md` files under `dir`, sorted.
fn markdown(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    out.sort();
    out
}

/// Lines of `text` outside fenced code blocks, numbered from 1.
fn prose(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fenced = false;
    text.lines().enumerate().filter_map(move |(n, l)| {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            return None;
        }
        (!fenced).then_some((n + 1, l))
    })
}

/// The anchors mdBook gives a file's headings: the heading's text without its markup,
/// lower-cased, spaces as `-`, other punctuation dropped; a repeated one gets `-1`, `-2`.
fn ids(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, l) in prose(text) {
        let Some(title) = l.strip_prefix('#').map(|t| t.trim_start_matches('#')) else {
            continue;
        };
        if !title.starts_with(' ') {
            continue;
        }
        let id: String = title
            .trim()
            .chars()
            .filter_map(|c| {
                if c.is_alphanumeric() || c == '_' || c == '-' {
                    Some(c.to_ascii_lowercase())
                } else if c.is_whitespace() {
                    Some('-')
                } else {
                    None
                }
            })
            .collect();
        let n = seen.entry(id.clone()).or_insert(0);
        out.insert(if *n == 0 {
            id.clone()
        } else {
            format!("{id}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of a file's inline links, `[text](target)`, with their line numbers; code
/// spans (which may run on to the next line of their paragraph) and fenced blocks are not
/// links.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_code = false;
    for (n, l) in prose(text) {
        if l.trim().is_empty() {
            in_code = false;
        }
        // Code spans out of the way: `a](b)` inside backticks is not a link.
        let mut plain = String::new();
        for (i, part) in l.split('`').enumerate() {
            if i > 0 {
                in_code = !in_code;
                plain.push(' ');
            }
            if !in_code {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((n, after[..end].to_owned()));
            rest = &after[end..];
        }
    }
    out
}

/// Why a link from `file` to `target` leads nowhere, if it does.
fn broken(
    file: &Path,
    target: &str,
    anchors: &BTreeMap<PathBuf, BTreeSet<String>>,
) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let dest = if path.is_empty() {
        file.to_owned()
    } else {
        file.parent().unwrap_or(Path::new(".")).join(path)
    };
    if !dest.exists() {
        return Some(format!("no file {}", dest.display()));
    }
    let anchor = anchor?;
    match anchors.get(&canonical(&dest)) {
        Some(ids) if ids.contains(anchor) => None,
        Some(_) => Some(format!("no heading #{anchor} there")),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_are_mdbook_s() {
        let ids = ids("# Title\n\n## HTTP/3 (`--quic`)\n```\n# not a heading\n```\n## Title\n");
        assert!(ids.contains("title") && ids.contains("title-1"), "{ids:?}");
        assert!(ids.contains("http3---quic"), "{ids:?}");
        assert!(!ids.contains("not-a-heading"), "{ids:?}");
    }

    #[test]
    fn links_skip_code() {
        let l = links("see [a](x.md#y) and `[b](nope)`\n```\n[c](no)\n```\n");
        assert_eq!(l, [(1, "x.md#y".to_owned())]);
        let l = links("a `span\nends` [d](z.md)\n\n`open\n\n[e](w.md)\n");
        assert_eq!(l, [(2, "z.md".to_owned()), (6, "w.md".to_owned())]);
    }
}
