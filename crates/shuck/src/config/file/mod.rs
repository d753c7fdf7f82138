//! hitch.conf: `key = value` lines, `frontend = { ... }` and `pem-file = { ... }` blocks,
//! `#` comments, quoted strings (with `\"` and `\\`), bare words (numbers, on/off, and
//! hitch's unquoted `tls-protos = TLSv1.2 TLSv1.3`).
//!
//! A file becomes command-line arguments, one per key, under the flag of the same name (every
//! hitch key shuck supports is spelled as its flag), placed before the real command line so
//! that flags given there win. Each value is checked where it stands, so an error names the
//! file and the line.

use std::path::{Path, PathBuf};

use clap::CommandFactory;

mod blocks;
mod syntax;

pub use syntax::{parse, Entry, Value};

use super::backend::BackendEndpoint;
use super::cli::{parse_on_off, Cli};
use super::endpoint::Endpoint;
pub use super::places::KeyPlaces;
use blocks::{frontend_block, keyed_block, pem_value};

/// Bound on a configuration file, so that a wrong path cannot make shuck read a disk image.
const MAX_FILE: u64 = 1 << 20;

/// A configuration file that cannot be used: the file, the line, what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {reason}", path.display(), line.map(|l| format!(" line {l}")).unwrap_or_default())]
pub struct FileError {
    /// The file.
    pub path: PathBuf,
    /// The line at fault, when one is.
    pub line: Option<usize>,
    /// What is wrong and what was expected.
    pub reason: String,
}

/// hitch keys for features shuck does not have (yet): named in the error.
const HITCH_UNSUPPORTED: &[&str] = &[
    "dhparams",
    "recv-bufsize",
    "send-bufsize",
    "proxy-tlv",
    "host-header",
    "sni-cert-regex",
];

/// Keys whose empty value hitch reads as "not set" (skipped here, before their values are
/// checked; the command line's `--user=` and the like go through `Cli::unset_empty`).
const EMPTY_MEANS_UNSET: &[&str] = &[
    "pem-file",
    "ciphers",
    "ssl-engine",
    "shared-cache-listen",
    "chroot",
    "user",
    "group",
    "log-filename",
    "alpn-protos",
    "pidfile",
];

/// What a file gives: arguments, and warnings to log once logging is set up.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Command-line arguments, one per key.
    pub args: Vec<String>,
    /// Warnings (deprecated keys that do nothing), each naming the file and line.
    pub notes: Vec<String>,
    /// The line each argument came from.
    pub places: KeyPlaces,
}

/// hitch's rule for the protocol keys of one scope (the top level or a block): one of
/// `tls`, `ssl` and `tls-protos`, once. `seen` remembers the first. Returns the protocol
/// list, or `None` for `tls = off`/`ssl = off`, which do nothing but leave a note.
fn protocol_key(
    at: (&Path, usize),
    key: &str,
    value: &str,
    seen: &mut Option<(String, usize)>,
    notes: &mut Vec<String>,
) -> Result<Option<String>, String> {
    let (path, line) = at;
    // As hitch: whatever this key's value (`off` too), it cannot follow one that chose.
    if let Some((first, at)) = seen {
        return Err(format!(
            "{key} after {first} (line {at}): it is illegal to specify {key} after ssl, tls or tls-protos (as in hitch); give one of them, once"
        ));
    }
    let protos = match key {
        "tls" | "ssl" => {
            let on = parse_on_off(value).map_err(|r| format!("{key}: {r}"))?;
            if !on {
                notes.push(format!(
                    "{} line {line}: {key} = off is deprecated and does nothing (as in hitch)",
                    path.display()
                ));
                return Ok(None);
            }
            if key == "tls" {
                crate::tls::params::TLS_SWITCH_PROTOS.to_owned()
            } else {
                crate::tls::params::SSL_SWITCH_PROTOS.to_owned()
            }
        }
        _ => value.to_owned(),
    };
    *seen = Some((key.to_owned(), line));
    Ok(Some(protos))
}

/// Flags that make no sense as keys in a file.
pub const NOT_IN_FILE: &[&str] = &["config", "test", "help", "version"];

/// Turns a file's entries into arguments. `on_command_line(id)` tells whether the command
/// line sets the argument with that id (then the file's values for it are left out).
pub fn to_args(
    path: &Path,
    entries: &[Entry],
    on_command_line: &dyn Fn(&str) -> bool,
) -> Result<Loaded, FileError> {
    let err = |line: usize, reason: String| FileError {
        path: path.to_owned(),
        line: Some(line),
        reason,
    };
    let mut cmd = Cli::command();
    // Resolve each argument's number of values (an on|off option, or a plain switch).
    cmd.build();
    let mut args = Vec::new();
    let mut notes = Vec::new();
    let mut protocols: Option<(String, usize)> = None;
    // Where each entry's arguments begin, to tell every argument its line afterwards.
    let mut starts: Vec<(usize, usize)> = Vec::new();
    for e in entries {
        starts.push((args.len(), e.line));
        if EMPTY_MEANS_UNSET.contains(&e.key.as_str())
            && matches!(&e.value, Value::Scalar(s) if s.is_empty())
        {
            continue;
        }
        let scalar = |what: &str| match &e.value {
            Value::Scalar(s) => Ok(s.clone()),
            Value::Block(_) => Err(err(
                e.line,
                format!("{what} takes a value, not a {{ }} block"),
            )),
        };
        match e.key.as_str() {
            // As in hitch, the file's frontends and certificates come first and the command
            // line's are added to them.
            "frontend" => {
                let spec = match &e.value {
                    Value::Scalar(s) => s.clone(),
                    Value::Block(b) => frontend_block(path, b, &err, &mut notes)?,
                };
                check_endpoint("frontend", &spec, e.line, &err)?;
                args.push(format!("--frontend={spec}"));
            }
            // A block is a named backend; `backend = "ADDRESS"` stays hitch's (-b).
            "backend" if matches!(e.value, Value::Block(_)) => {
                let Value::Block(b) = &e.value else { continue };
                let keys = super::route::BACKEND_KEYS;
                let spec = keyed_block("backend", b, e.line, keys, &err)?;
                super::route::parse_backend(&spec)
                    .map_err(|ce| err(e.line, format!("backend block: {}", unquoted(&ce))))?;
                args.push(format!("--named-backend={spec}"));
            }
            "route" => {
                let spec = match &e.value {
                    Value::Scalar(s) => s.clone(),
                    Value::Block(b) => {
                        keyed_block("route", b, e.line, super::route::ROUTE_KEYS, &err)?
                    }
                };
                super::route::parse_route(&spec)
                    .map_err(|ce| err(e.line, format!("route: {}", unquoted(&ce))))?;
                args.push(format!("--route={spec}"));
            }
            "pem-file" => {
                let pem = pem_value(&e.value, e.line, &err)?;
                args.push(format!("--pem-file={}", pem.render()));
            }
            "tls" | "ssl" | "tls-protos" => {
                let value = scalar(&e.key)?;
                let Some(protos) =
                    protocol_key((path, e.line), &e.key, &value, &mut protocols, &mut notes)
                        .map_err(|reason| err(e.line, reason))?
                else {
                    continue;
                };
                if on_command_line("tls") || on_command_line("ssl") {
                    return Err(err(
                        e.line,
                        format!("--tls and --ssl cannot override {} from the configuration file (as in hitch); use --tls-protos", e.key),
                    ));
                }
                check_value("tls-protos", &protos).map_err(|reason| err(e.line, reason))?;
                if !on_command_line("tls_protos") {
                    args.push(format!("--tls-protos={protos}"));
                }
            }
            "ssl-engine" => {
                return Err(err(
                    e.line,
                    "ssl-engine: shuck has no OpenSSL engines (its keys are loaded from PEM files); remove the key or leave it empty".into(),
                ))
            }
            k if NOT_IN_FILE.contains(&k) => {
                return Err(err(
                    e.line,
                    format!("{k} is a command-line option, not a configuration key"),
                ))
            }
            k if HITCH_UNSUPPORTED.contains(&k) => {
                return Err(err(
                    e.line,
                    format!("{k} is a hitch setting shuck does not support (yet); remove it"),
                ))
            }
            k => {
                let Some(arg) = cmd
                    .get_arguments()
                    .find(|a| {
                        !a.is_positional()
                            && (a.get_long() == Some(k)
                                || a.get_all_aliases().is_some_and(|al| al.contains(&k)))
                    })
                else {
                    return Err(err(e.line, format!("unknown key {k:?}")));
                };
                if on_command_line(arg.get_id().as_str()) {
                    continue;
                }
                let value = scalar(k)?;
                let takes_value = arg.get_num_args().is_some_and(|n| n.max_values() > 0);
                let one = if takes_value {
                    format!("--{k}={value}")
                } else {
                    // A plain switch (e.g. no-tickets): on/off in the file.
                    match parse_on_off(&value) {
                        Ok(true) => format!("--{k}"),
                        Ok(false) => continue,
                        Err(reason) => return Err(err(e.line, format!("{k}: {reason}"))),
                    }
                };
                // Check the value where it stands, so the error has its line.
                if let Err(ce) = Cli::command().try_get_matches_from(["shuck", one.as_str()]) {
                    return Err(err(e.line, format!("{k}: {}", clap_reason(&ce))));
                }
                if k == "backend" {
                    let addr = value.split(',').next().unwrap_or("");
                    BackendEndpoint::parse(addr).map_err(|ce| err(e.line, format!("{k}: {ce}")))?;
                }
                if matches!(k, "shared-cache-listen" | "shared-cache-peer") {
                    let addr = value.split(',').next().unwrap_or("");
                    check_endpoint(k, addr, e.line, &err)?;
                }
                check_value(k, &value).map_err(|reason| err(e.line, reason))?;
                args.push(one);
            }
        }
    }
    let mut lines = Vec::with_capacity(args.len());
    for (i, arg) in args.iter().enumerate() {
        let line = starts
            .iter()
            .rev()
            .find(|&&(at, _)| at <= i)
            .map_or(0, |&(_, l)| l);
        let flag = arg.split('=').next().unwrap_or(arg).to_owned();
        lines.push((flag, line));
    }
    Ok(Loaded {
        args,
        notes,
        places: KeyPlaces {
            path: path.to_owned(),
            lines,
        },
    })
}

/// A spec's error without the spec itself (the file's line already says where): the
/// reason of a `BadAddress`, else the whole message.
fn unquoted(e: &super::ConfigError) -> String {
    match e {
        super::ConfigError::BadAddress { option, reason, .. }
            if matches!(*option, "--named-backend" | "--route") =>
        {
            reason.clone()
        }
        other => other.to_string(),
    }
}

/// Values whose meaning is checked past their syntax (names of ciphers, protocols,
/// groups, users, ...), so that the error carries the line.
fn check_value(key: &str, value: &str) -> Result<(), String> {
    use crate::system::privileges::Target;
    use crate::tls::params;
    fn checked<T, E: std::fmt::Display>(r: Result<T, E>) -> Result<(), String> {
        r.map(drop).map_err(|e| e.to_string())
    }
    match key {
        "ciphers" => checked(params::parse_tls12_ciphers(value)),
        "ciphersuites" => checked(params::parse_tls13_suites(value)),
        "tls-protos" => checked(params::parse_protocols(value)),
        "ecdh-curve" => checked(params::parse_groups(value)),
        "alpn-protos" => checked(params::parse_alpn(value)),
        "user" => checked(Target::resolve(Some(value), None, None)),
        "group" => checked(Target::resolve(None, Some(value), None)),
        "syslog-facility" => checked(crate::system::log::facility(value))
            .map_err(|e| format!("syslog-facility: {e}")),
        _ => Ok(()),
    }
}

/// What clap found wrong, on one line: its first line without `error: `, and the values a
/// closed set takes when it lists them (`[possible values: text, json]`). The command line
/// and the file report a bad value alike.
pub fn clap_reason(e: &clap::Error) -> String {
    // A value's own check says what is wrong in its own words, its value escaped: clap's
    // rendering repeats the value raw, and a line feed in it would cut the message short.
    let raw = match e.get(clap::error::ContextKind::InvalidValue) {
        Some(clap::error::ContextValue::String(v)) => v.chars().any(char::is_control),
        _ => false,
    };
    if let (clap::error::ErrorKind::ValueValidation, Some(why), true) =
        (e.kind(), std::error::Error::source(e), raw)
    {
        let arg = match e.get(clap::error::ContextKind::InvalidArg) {
            Some(clap::error::ContextValue::String(a)) => a.as_str(),
            _ => "a value",
        };
        return format!("invalid value for '{arg}': {why}");
    }
    let rendered = e.render().to_string();
    let first = rendered.lines().next().unwrap_or("bad value");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    match rendered
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("[possible values"))
    {
        Some(values) => format!("{first} {values}"),
        None => first.to_owned(),
    }
}

fn check_endpoint(
    key: &str,
    spec: &str,
    line: usize,
    err: &dyn Fn(usize, String) -> FileError,
) -> Result<(), FileError> {
    let addr = spec.split(['+', ';']).next().unwrap_or("");
    Endpoint::parse("address", addr)
        .map(|_| ())
        .map_err(|e| err(line, format!("{key}: {e}")))
}

/// Reads and converts a file (see [`to_args`]).
pub fn load(path: &Path, on_command_line: &dyn Fn(&str) -> bool) -> Result<Loaded, FileError> {
    let bad = |reason: String| FileError {
        path: path.to_owned(),
        line: None,
        reason,
    };
    let text = crate::system::files::read_to_string(path, MAX_FILE, "a configuration file")
        .map_err(|e| bad(e.to_string()))?;
    let entries = parse(&text).map_err(|(line, reason)| FileError {
        path: path.to_owned(),
        line: Some(line),
        reason,
    })?;
    to_args(path, &entries, on_command_line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Result<Vec<String>, String> {
        let entries = parse(text).map_err(|(l, r)| format!("line {l}: {r}"))?;
        to_args(Path::new("t.conf"), &entries, &|_| false)
            .map(|l| l.args)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn hitch_syntax() {
        let a = args(
            r#"
# comment
frontend = "[*]:443"
frontend = {
    host = "127.0.0.1"   # trailing comment
    port = "8443"
    pem-file = "/a.pem"
    pem-file = { cert = "/b.pem" }
}
backend = "[127.0.0.1]:8000"
pem-file = "/c.pem"
tls-protos = TLSv1.2 TLSv1.3
workers = 2
prefer-server-ciphers = on
ciphers = "EECDH+AESGCM"
no-tickets = on
tickets = off
"#,
        )
        .unwrap();
        assert_eq!(
            a,
            [
                "--frontend=[*]:443",
                "--frontend=[127.0.0.1]:8443+/a.pem+/b.pem",
                "--backend=[127.0.0.1]:8000",
                "--pem-file=/c.pem",
                "--tls-protos=TLSv1.2 TLSv1.3",
                "--workers=2",
                "--prefer-server-ciphers=on",
                "--ciphers=EECDH+AESGCM",
                "--no-tickets",
                "--tickets=off",
            ]
        );
    }

    #[test]
    fn errors_name_the_line() {
        for (text, line, needle) in [
            ("workers = 2\nbogus = 1\n", 2, "unknown key \"bogus\""),
            ("\n\nssl-engine = \"x\"\n", 3, "no OpenSSL engines"),
            ("\ndhparams = \"x\"\n", 2, "dhparams is a hitch setting"),
            ("workers = many\n", 1, "many"),
            ("backlog = \n", 1, "no value"),
            ("frontend = \"[1.2.3.4]\"\n", 1, "frontend"),
            ("frontend = {\n host = \"x\"\n", 1, "not closed"),
            (
                "frontend = {\n tls-protos = TLSv9\n port = 1 }\n",
                2,
                "frontend tls-protos",
            ),
            (
                "frontend = {\n port = 1\n colour = red }\n",
                3,
                "unknown key \"colour\"",
            ),
            ("ciphers = \"abc\n", 1, "unterminated"),
            ("= 3\n", 1, "expected a key"),
            ("workers 3\n", 1, "expected ="),
            ("}\n", 1, "without a block"),
            ("config = \"x\"\n", 1, "command-line option"),
            ("quiet = perhaps\n", 1, "perhaps"),
            ("workers = 2\nciphers = \"RC4-MD5\"\n", 2, "RC4-MD5"),
            ("\ntls-protos = SSLv3\n", 2, "SSLv3"),
            ("tls = on\nssl = on\n", 2, "ssl after tls (line 1)"),
            (
                "tls-protos = TLSv1.2\ntls = on\n",
                2,
                "tls after tls-protos",
            ),
            ("tls-protos = TLSv1.2\ntls-protos = TLSv1.3\n", 2, "once"),
            (
                "tls-protos = TLSv1.2\ntls = off\n",
                2,
                "it is illegal to specify tls after ssl, tls or tls-protos",
            ),
            (
                "frontend = {\n port = 1\n tls = on\n ssl = off }\n",
                4,
                "frontend ssl after tls (line 3)",
            ),
            (
                "frontend = {\n port = 1\n ssl = on\n tls-protos = TLSv1.3 }\n",
                4,
                "frontend tls-protos after ssl (line 3)",
            ),
            ("tls = maybe\n", 1, "maybe"),
            ("user = \"no-such-user-x\"\n", 1, "no-such-user-x"),
            ("shared-cache-peer = \"nowhere\"\n", 1, "shared-cache-peer"),
        ] {
            let e = args(text).unwrap_err();
            assert!(e.contains(&format!("line {line}")), "{text:?}: {e}");
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn tls_and_ssl_switches() {
        let l = to_args(
            Path::new("h.conf"),
            &parse("tls = off\nssl = on\nfrontend = {\n port = 2\n tls = on\n}\n").unwrap(),
            &|_| false,
        )
        .unwrap();
        assert_eq!(
            l.args,
            [
                "--tls-protos=SSLv3 TLSv1.0 TLSv1.1 TLSv1.2 TLSv1.3",
                "--frontend=[*]:2;tls-protos=TLSv1.0 TLSv1.1 TLSv1.2 TLSv1.3"
            ]
        );
        assert_eq!(l.notes.len(), 1);
        assert!(l.notes[0].contains("h.conf line 1: tls = off is deprecated"));
        // --tls on the command line cannot override the file's protocols (hitch's rule).
        let e = to_args(
            Path::new("h.conf"),
            &parse("tls-protos = TLSv1.3\n").unwrap(),
            &|id| id == "tls",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("--tls and --ssl cannot override tls-protos"),
            "{e}"
        );
    }

    #[test]
    fn the_command_line_wins() {
        let entries = parse("workers = 4\nfrontend = \"[*]:1\"\nbacklog = 5\n").unwrap();
        let a = to_args(Path::new("t"), &entries, &|id| {
            id == "workers" || id == "frontends"
        })
        .unwrap();
        // Frontends and certificates add up, as in hitch; other keys give way.
        assert_eq!(a.args, ["--frontend=[*]:1", "--backlog=5"]);
    }
}
