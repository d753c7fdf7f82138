//! The commented `/etc/shuck/shuck.conf` the package installs: a working start (a
//! frontend, a backend, the unprivileged user) and then every other key, commented out,
//! with its help and its default.

use crate::{command, default_of, help_of, keys, value_form, version};

/// Keys the sample sets (or shows first), and hitch's deprecated no-ops: not among the others.
const SET: &[&str] = &[
    "frontend",
    "backend",
    "pem-file",
    "user",
    "group",
    "tls",
    "ssl",
    "admin-socket",
    "admin-certs",
];

/// `text` as `# ` comment lines of at most 78 columns.
fn comment(text: &str) -> String {
    let mut out = String::new();
    for para in text.split("\n\n") {
        let mut line = String::from("#");
        for word in para.split_whitespace() {
            if line.len() + 1 + word.len() > 78 && line.len() > 1 {
                out.push_str(&line);
                out.push('\n');
                line = String::from("#");
            }
            line.push(' ');
            line.push_str(word);
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The file's text.
pub fn sample() -> String {
    let version = version();
    let mut out = format!(
        "# /etc/shuck/shuck.conf: shuck's configuration, in hitch.conf syntax.\n\
         # Generated from shuck {version}'s option table: every key is the long flag of the\n\
         # same name (shuck.conf(5), shuck(8)). Flags on the command line win over this file.\n\
         # Check a change:  shuck --config /etc/shuck/shuck.conf --test\n\
         # Apply it:        systemctl reload shuck\n\
         \n\
         # Where clients connect (repeatable; [*]:PORT is every address).\n\
         frontend = \"[*]:443\"\n\
         \n\
         # Where the plain bytes go (repeatable; ,weight=W and ,maxconn=N spread them).\n\
         backend = \"[127.0.0.1]:8080\"\n\
         \n\
         # Certificate chain and private key in one PEM file, repeatable; the last listed\n\
         # is the default, the others are chosen by SNI. Without one, shuck serves a\n\
         # self-signed certificate for localhost.\n\
         # pem-file = \"/etc/shuck/example.com.pem\"\n\
         \n\
         # The master process stays root (binds, reads keys at reloads); the worker that\n\
         # serves connections runs as this user, created by the package.\n\
         user = \"_shuck\"\n\
         group = \"_shuck\"\n\
         \n\
         # The admin API (`shuck ctl`, curl --unix-socket), for root only; where the\n\
         # certificates it adds and the server states it sets are kept for the next start.\n\
         admin-socket = \"/run/shuck/admin.sock\"\n\
         admin-certs = \"/var/lib/shuck/certs\"\n\
         admin-state = \"/var/lib/shuck/server-state.json\"\n\
         \n\
         # ---- Every other key, with its default ----\n"
    );
    let cmd = command();
    for (long, arg) in keys(&cmd).filter(|(k, _)| !SET.contains(k)) {
        out.push('\n');
        out.push_str(&comment(&help_of(arg)));
        let value = match default_of(arg) {
            Some(d) => format!("\"{d}\""),
            None => format!("<{}>", value_form(arg)),
        };
        out.push_str(&format!("# {long} = {value}\n"));
    }
    out
}
