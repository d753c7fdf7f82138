//! The man pages: `shuck(8)` rendered by clap_mangen from the option table, with the
//! sections an operator looks for next (signals, files, see also); `shuck.conf(5)` written
//! here from the same table, one entry per key.

use crate::{command, default_of, help_of, keys, value_form, version};

/// `text` safe as roff input: backslashes escaped, no line taken for a request.
fn esc(text: &str) -> String {
    text.replace('\\', "\\e")
        .replace('-', "\\-")
        .lines()
        .map(|l| {
            let l = l.trim_end();
            if l.starts_with(['.', '\'']) {
                format!("\\&{l}")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A page's title, name, synopsis and description, ragged right (long flag names cannot
/// be justified without warnings).
fn prologue(man: &clap_mangen::Man, out: &mut Vec<u8>) -> std::io::Result<()> {
    man.render_title(out)?;
    out.extend_from_slice(b".ad l\n");
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)
}

/// `shuck(8)`.
pub fn shuck_8() -> Result<Vec<u8>, String> {
    let man = clap_mangen::Man::new(command())
        .section("8")
        .manual("System Manager's Manual");
    let mut out = Vec::new();
    let io = |e: std::io::Error| e.to_string();
    prologue(&man, &mut out).map_err(io)?;
    man.render_options_section(&mut out).map_err(io)?;
    out.extend_from_slice(EXTRA_8.as_bytes());
    man.render_version_section(&mut out).map_err(io)?;
    Ok(out)
}

const EXTRA_8: &str = r#".SH SIGNALS
.TP
.B SIGHUP
Reload: the master process (root) reads the command line, the configuration file,
certificates, keys and ticket keys again; new connections get the new configuration,
live ones keep theirs. A configuration that does not load is refused and the running
one stays.
.TP
.B SIGUSR2
Binary upgrade: the binary on disk is started with the same arguments and given every
listening socket, the ticket keys and the session cache; the old one drains and exits.
.TP
.BR SIGTERM ", " SIGINT
Stop accepting; live connections get up to \-\-drain\-timeout to finish. A second
signal ends them at once.
.SH EXIT STATUS
0 on a clean stop, for \-\-help, \-\-version and a good \-\-test; 1 for a bad flag, a bad
configuration, a failed \-\-test or a start\-up error (as hitch).
.SH FILES
.TP
.I /etc/shuck/shuck.conf
The configuration file (hitch.conf syntax), see
.BR shuck.conf (5).
.TP
.I /var/lib/shuck
State kept across restarts.
.SH SEE ALSO
.BR shuck.conf (5),
.BR hitch (8),
.BR haproxy (1)
"#;

/// `shuck-bench(1)`: the main page, then each subcommand's synopsis and options (all on
/// one page: its options are the point of the tool).
pub fn shuck_bench_1() -> Result<Vec<u8>, String> {
    use clap::CommandFactory;
    with_subcommands(
        shuck_bench::Cli::command(),
        "shuck-bench",
        "1",
        "User Commands",
        EXTRA_BENCH_1,
    )
}

/// `shuck-ctl(8)`: `shuck ctl`'s commands.
pub fn shuck_ctl_8() -> Result<Vec<u8>, String> {
    use clap::CommandFactory;
    with_subcommands(
        shuck::ctl::CtlCli::command().name("shuck-ctl"),
        "shuck ctl",
        "8",
        "System Manager's Manual",
        EXTRA_CTL_8,
    )
}

/// A page for a command and, on the same page, each of its subcommands.
fn with_subcommands(
    mut cmd: clap::Command,
    name: &str,
    section: &'static str,
    manual: &'static str,
    extra: &str,
) -> Result<Vec<u8>, String> {
    cmd.build();
    let man = clap_mangen::Man::new(cmd.clone())
        .section(section)
        .manual(manual);
    let mut out = Vec::new();
    let io = |e: std::io::Error| e.to_string();
    prologue(&man, &mut out).map_err(io)?;
    // The subcommands are on this page, not on pages of their own.
    out.extend_from_slice(b".SH SUBCOMMANDS\n");
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        let entry = format!(".TP\n.B {}\n{}\n", esc(sub.get_name()), esc(&about));
        out.extend_from_slice(entry.as_bytes());
    }
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let full = format!("{name} {}", sub.get_name());
        let page = clap_mangen::Man::new(sub.clone().bin_name(&full));
        let mut part = Vec::new();
        page.render_synopsis_section(&mut part).map_err(io)?;
        page.render_options_section(&mut part).map_err(io)?;
        let part = String::from_utf8_lossy(&part)
            .replace(".SH SYNOPSIS", &format!(".SH \"{}\"", full.to_uppercase()))
            .replace(".SH OPTIONS", ".SS Options");
        out.extend_from_slice(part.as_bytes());
    }
    out.extend_from_slice(extra.as_bytes());
    man.render_version_section(&mut out).map_err(io)?;
    Ok(out)
}

const EXTRA_CTL_8: &str = r#".SH EXAMPLES
.TP
.B shuck ctl backends
Every backend's servers with their state (up, down (check), down (failure), drain, maint).
.TP
.B shuck ctl drain default/api1
Take api1 out of rotation; its open connections finish. \fBshuck ctl ready default/api1\fR puts it back.
.TP
.B shuck ctl cert add shop /etc/ssl/private/shop.pem
Serve a new certificate in every worker at once, kept for the next start.
.TP
.B shuck ctl reload
Read the configuration again; a refusal lists each error with its file and line.
.SH EXIT STATUS
0 when the action was done, 1 when shuck refused it (the reason on standard error), 2 when
shuck could not be asked (no socket, no permission).
.SH FILES
.TP
.I /run/shuck/admin.sock
The admin socket of the Debian package's configuration (\fB\-\-admin\-socket\fR).
.SH SEE ALSO
.BR shuck (8),
.BR shuck.conf (5)
"#;

const EXTRA_BENCH_1: &str = r#".SH EXAMPLES
.TP
.B shuck\-bench load \-\-target 127.0.0.1:8443 \-\-size 4k
Load a running shuck (or any TLS terminator) and report rates, latency and resumption.
.TP
.B shuck\-bench compare \-\-duration 5 \-\-repeats 3
Run the scenarios against shuck and the peers found on this machine; write a report.
.SH SEE ALSO
.BR shuck (8),
.BR h2load (1)
"#;

/// `shuck.conf(5)`.
pub fn shuck_conf_5() -> String {
    let cmd = command();
    let version = version();
    let mut out = format!(
        ".TH SHUCK.CONF 5 \"\" \"shuck {version}\" \"File Formats Manual\"\n\
         .ad l\n\
         .SH NAME\n\
         shuck.conf \\- configuration file of shuck, the TLS termination proxy\n\
         .SH SYNOPSIS\n\
         .I /etc/shuck/shuck.conf\n\
         .SH DESCRIPTION\n{DESCRIPTION}.SH KEYS\n"
    );
    for (long, arg) in keys(&cmd) {
        out.push_str(&format!(
            ".TP\n.B {} = {}\n",
            esc(long),
            esc(&value_form(arg))
        ));
        out.push_str(&esc(&help_of(arg)));
        out.push('\n');
        if let Some(d) = default_of(arg) {
            out.push_str(&format!(".br\nDefault: {}.\n", esc(&d)));
        }
    }
    out.push_str(EXAMPLE_5);
    out
}

const DESCRIPTION: &str = r#"shuck reads this file when started with
.BR \-\-config .
It has hitch's syntax:
.I key = value
lines,
.B #
comments, quoted strings (with
.B \e"
and
.BR \e\e )
or bare words, and
.BR "frontend = { ... }" ,
.BR "pem\-file = { ... }" ,
.B "backend = { ... }"
and
.B "route = { ... }"
blocks. Every key is the long flag of the same name, with the same meaning and values
(see
.BR shuck (8)),
so a hitch configuration keeps working. Switches take
.B on
or
.BR off .
Flags given on the command line win over the file's keys.
.PP
A
.B frontend
block takes
.BR host ,
.BR port ,
.B pem\-file
(repeatable),
.BR ciphers ,
.BR ciphersuites ,
.BR tls\-protos ,
.BR prefer\-server\-ciphers ,
.BR sni\-nomatch\-abort ,
.BR match\-global\-certs ,
.BR client\-verify ,
.B client\-verify\-ca
and
.B backend
(the name of a backend block: this frontend's backend when no route chooses).
A
.B pem\-file
block takes
.BR cert ,
.BR private\-key ,
.BR ocsp\-resp\-file ,
.BR ocsp\-verify\-staple ,
.B client\-verify
and
.BR client\-verify\-ca .
.PP
A
.B backend
block (with a value instead,
.B backend
is hitch's default backend,
.BR \-b )
is a named backend: its
.B name
(letters, digits,
.BR \- ,
.BR _ ,
.BR . ;
not
.BR default ,
the name of
.BR \-b 's),
.B server
(repeatable; an address as
.B \-b
takes it, with
.B maxconn
and
.BR weight ),
its own preamble
.RB ( write\-proxy\-v1 ,
.BR write\-proxy\-v2 ,
.BR write\-ip ,
.BR proxy\-proxy ;
without one, the global choice),
.BR connect\-timeout ,
and TLS to it:
.B tls = on
with
.B verify
.RB ( required ,
the default, or
.BR none ),
.B ca\-file
(else the system's trust store),
.B sni
(the name verified and sent; default each server's host),
.B cert
(a client certificate and its key) and
.B alpn
(protocols, comma-separated). The PROXY header goes before the TLS handshake.
.PP
A
.B route
block chooses a backend: by the handshake's server name,
.B sni = "NAME"
.RB ( *.NAME
for every subdomain), or with
.BR \-\-http ,
per request,
.B host = "NAME"
with an optional
.BR path\-prefix ;
and
.B backend = "NAME"
(or
.BR default ).
Exact names first, then the longest wildcard, then the longest path prefix; then the
frontend's backend; then the default. With routes, a request for a name the connection's
certificate does not cover is answered 421. A route or frontend naming a backend that does
not exist is an error with its line. SIGHUP adds, changes and removes backends and routes.
.PP
Check a file with
.B shuck \-\-config FILE \-\-test
and apply a change with SIGHUP
.RB ( "systemctl reload shuck" ).
"#;

const EXAMPLE_5: &str = r#".SH EXAMPLE
.nf
frontend = "[*]:443"
backend = "[127.0.0.1]:8080"
pem\-file = "/etc/ssl/private/example.com.pem"
user = "_shuck"
write\-proxy\-v2 = on

frontend = {
    host = "*"
    port = "8443"
    pem\-file = "/etc/ssl/private/admin.example.com.pem"
    tls\-protos = TLSv1.3
}

backend = {
    name = "api"
    server = "[10.0.0.5]:8443,maxconn=100"
    tls = on
    ca\-file = "/etc/shuck/api\-ca.pem"
}
route = { sni = "api.example.com" backend = "api" }
.fi
.SH SEE ALSO
.BR shuck (8),
.BR hitch.conf (5)
"#;
