//! The layer rules of docs/ARCHITECTURE.md, checked on the source: every `crate::` and
//! `super::` path of every module is an import edge; an edge from a lower layer to a higher
//! one, or between two modules of one layer, fails, and so do two files that import each
//! other, a phase of `runtime/` that reaches back into `runtime/mod.rs`, a file of
//! `runtime/` shared by the master and the worker that imports either of them, a file of
//! the gateway's core that imports an HTTP version's folder or a version's folder that
//! imports another's, and a stage of the TCP terminator other than `conn/` and `relay.rs`
//! (where HTTP is handed over) that imports the gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules from the bottom up, as docs/ARCHITECTURE.md draws them; a module
/// may import only those of a lower rank.
const LAYERS: &[&[&str]] = &[
    &["clock"],
    &[
        "system",
        "counters",
        "shutdown",
        "origin",
        "http_host",
        "codec",
    ],
    &["clients"],
    &["backend", "session", "access"],
    &["tls"],
    &["acme"],
    &["config"],
    &["edge"],
    &["gateway"],
    &["proxy"],
    &["redirect"],
    &["stats"],
    &["admin", "ctl"],
    &["runtime"],
    &["fuzzing"],
];

fn rank(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&module))
        .unwrap_or_else(|| {
            panic!("module {module} is in no layer: add it to LAYERS and to docs/ARCHITECTURE.md")
        })
}

/// Every `.rs` file under `dir`, as paths relative to `root`.
fn sources(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(root, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p.strip_prefix(root).unwrap().to_owned());
        }
    }
}

/// The module path of a file: `tls/pem.rs` → [tls, pem]; `tls/mod.rs` → [tls].
fn module_of(file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The code of a file without comments and without its unit tests.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a file names: each `crate::a::b` or `super::a` (with `use` groups opened), as
/// module paths from the crate root.
fn references(module: &[String], code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // The module `super` names: the parent of a file's module.
    let parent: Vec<String> = module[..module.len().saturating_sub(1)].to_vec();
    for (prefix, base) in [("crate::", Vec::new()), ("super::", parent)] {
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            let before = rest[..at].chars().last();
            rest = &rest[at + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut heads = Vec::new();
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    heads.push(item.trim().to_owned());
                }
            } else {
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len());
                heads.push(rest[..end].to_owned());
            }
            for h in heads {
                let mut path = base.clone();
                path.extend(
                    h.split("::")
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty() && s != "self"),
                );
                if path.len() > base.len() || !base.is_empty() {
                    out.push(path);
                }
            }
        }
    }
    out
}

#[test]
fn layers_import_one_way() {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let mut files = Vec::new();
    sources(&root, &root, &mut files);
    files.retain(|f| f != Path::new("main.rs") && f != Path::new("lib.rs"));
    let modules: BTreeMap<Vec<String>, PathBuf> =
        files.iter().map(|f| (module_of(f), f.clone())).collect();
    // The deepest module file a path lands in.
    let file_of = |path: &[String]| -> Option<&PathBuf> {
        (1..=path.len()).rev().find_map(|n| modules.get(&path[..n]))
    };
    let mut problems = BTreeSet::new();
    let mut edges: BTreeSet<(PathBuf, PathBuf)> = BTreeSet::new();
    for f in &files {
        let module = module_of(f);
        let text = std::fs::read_to_string(root.join(f)).unwrap();
        for path in references(&module, &code(&text)) {
            let Some(first) = path.first() else { continue };
            let (from, to) = (&module[0], first);
            if from != to {
                if rank(to) > rank(from) {
                    problems.insert(format!(
                        "{}: imports {} from {to}, a higher layer",
                        f.display(),
                        path.join("::")
                    ));
                } else if rank(to) == rank(from) {
                    problems.insert(format!(
                        "{}: imports {} from {to}, a module of its own layer",
                        f.display(),
                        path.join("::")
                    ));
                }
            }
            if let Some(target) = file_of(&path) {
                if target != f {
                    edges.insert((f.clone(), target.clone()));
                }
                // runtime's phases use runtime/error.rs and each other, never runtime/mod.rs.
                if module.len() > 1
                    && module[0] == "runtime"
                    && target == Path::new("runtime/mod.rs")
                    && path.len() > 1
                {
                    problems.insert(format!(
                        "{}: reaches back into runtime/mod.rs for {}",
                        f.display(),
                        path.join("::")
                    ));
                }
                // The gateway's core is shared by the versions, which never share with each
                // other: gateway/h1, h2 and h3 import the core, never one another, and the
                // core imports none of them.
                let version = |m: &[String]| {
                    (m.len() > 1
                        && m[0] == "gateway"
                        && ["h1", "h2", "h3"].contains(&m[1].as_str()))
                    .then(|| m[1].clone())
                };
                if module[0] == "gateway" && path.len() > 1 && path[0] == "gateway" {
                    let (mine, theirs) = (version(&module), version(&path));
                    if theirs.is_some() && mine != theirs {
                        problems.insert(format!(
                            "{}: imports {} from another HTTP version's folder",
                            f.display(),
                            path.join("::")
                        ));
                    }
                }
                // The terminator's stages know nothing of HTTP but where a connection is
                // handed to the gateway: conn/ (HTTP/2, the first HTTP/1.1 request) and the
                // relay (HTTP/1.1's filter).
                let hands_over = module.len() > 1 && (module[1] == "conn" || module[1] == "relay");
                if module[0] == "proxy" && path[0] == "gateway" && !hands_over {
                    problems.insert(format!(
                        "{}: a TLS stage of the terminator imports {} from the gateway",
                        f.display(),
                        path.join("::")
                    ));
                }
                // What the master and the worker share (runtime's files outside master/ and
                // worker/) never imports either of them.
                let process = |m: &[String]| {
                    m.len() > 1 && m[0] == "runtime" && (m[1] == "master" || m[1] == "worker")
                };
                if module.len() > 1
                    && module[0] == "runtime"
                    && !process(&module)
                    && process(&module_of(target))
                {
                    problems.insert(format!(
                        "{}: shared by both processes, imports {} from one of them",
                        f.display(),
                        path.join("::")
                    ));
                }
            }
        }
    }
    for (a, b) in &edges {
        // A folder's mod.rs declares its children: that is not an import.
        let declares = a.ends_with("mod.rs") && b.starts_with(a.parent().unwrap());
        if !declares && a < b && edges.contains(&(b.clone(), a.clone())) {
            let back_declares = b.ends_with("mod.rs") && a.starts_with(b.parent().unwrap());
            if !back_declares {
                problems.insert(format!(
                    "{} and {} import each other",
                    a.display(),
                    b.display()
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "imports against docs/ARCHITECTURE.md's layers:\n{}",
        problems.into_iter().collect::<Vec<_>>().join("\n")
    );
    assert!(edges.len() > 100, "only {} import edges found", edges.len());
}
