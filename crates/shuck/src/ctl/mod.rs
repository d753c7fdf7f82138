//! `shuck ctl`: the admin API from a shell, over its UNIX socket. Tables for people,
//! `--json` for scripts; the exit status is 0 when the action was done, 1 when shuck
//! refused it (its reason on stderr), 2 when shuck could not be asked.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::Value;

mod table;

/// Where the Debian package's configuration puts the admin socket.
pub const DEFAULT_SOCKET: &str = "/run/shuck/admin.sock";

/// shuck ctl: ask a running shuck through its admin API (--admin-socket).
#[derive(Debug, Parser)]
#[command(
    name = "shuck ctl",
    bin_name = "shuck ctl",
    version,
    max_term_width = 100
)]
pub struct CtlCli {
    /// The admin API's UNIX socket (shuck's --admin-socket).
    #[arg(long, short = 's', value_name = "PATH", default_value = DEFAULT_SOCKET, global = true)]
    pub socket: PathBuf,

    /// Print the API's JSON answer as it is, for scripts.
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The actions.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Version, uptime, processes, the configuration and the last reload's result.
    Status,
    /// Read the configuration again; its errors (file, line, message) when refused.
    Reload,
    /// Every backend's servers: state, weight, connections, queue, last check.
    Backends,
    /// Take a server (or every server of a backend) out of rotation: no new connection or
    /// request, the open ones finish.
    Drain {
        /// BACKEND/SERVER (`default` is -b's backend), or BACKEND for all its servers.
        server: String,
    },
    /// Put a server (or every server of a backend) back in rotation.
    Ready {
        /// BACKEND/SERVER, or BACKEND.
        server: String,
    },
    /// Maintenance: as drain, and its idle keep-alive connections are closed. A whole
    /// backend in maintenance answers its requests 503 with Retry-After.
    Maint {
        /// BACKEND/SERVER, or BACKEND.
        server: String,
    },
    /// Set a server's weight (1 to 1000).
    Weight {
        /// BACKEND/SERVER.
        server: String,
        /// The new weight.
        weight: u32,
    },
    /// Certificates: list, add (or replace), remove.
    #[command(subcommand)]
    Cert(CertCommand),
    /// Session tickets.
    #[command(subcommand)]
    Tickets(TicketsCommand),
    /// The session cache's and ticket ring's figures.
    Sessions,
    /// The busiest clients (connections open, recent activity, refusals) and the bans.
    Clients {
        /// Rows to show.
        #[arg(long, default_value_t = 20)]
        top: usize,
    },
    /// Refuse an address or CIDR block at accept, on every worker (and, with
    /// --shared-store, every host), until lifted or for SECS; kept across restarts with
    /// --admin-state.
    Ban {
        /// An address or a block (192.0.2.0/24, 2001:db8::/48).
        block: String,
        /// For this long only.
        #[arg(long, value_name = "SECS")]
        seconds: Option<u64>,
        /// Why, for the list.
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Lift a ban.
    Unban {
        /// The block as banned.
        block: String,
    },
}

/// `shuck ctl cert …`.
#[derive(Debug, Subcommand)]
pub enum CertCommand {
    /// Every certificate served: names, not-after, key type, source, OCSP staple.
    List,
    /// Add or replace certificate NAME from FILE (its chain and key, PEM), in every
    /// worker at once, kept in --admin-certs for the next start.
    Add {
        /// Its name (the file in --admin-certs is NAME.pem).
        name: String,
        /// The PEM file: certificate chain and private key.
        file: PathBuf,
    },
    /// Remove a certificate added with `cert add`.
    Rm {
        /// Its name.
        name: String,
    },
}

/// `shuck ctl tickets …`.
#[derive(Debug, Subcommand)]
pub enum TicketsCommand {
    /// Rotate the ticket key ring now.
    Rotate,
}

/// Runs `shuck ctl` with `args` (`ctl` first).
pub fn main(args: &[std::ffi::OsString]) -> ExitCode {
    let cli = match CtlCli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let (method, path, body) = match request_of(&cli.command) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("shuck ctl: {e}");
            return ExitCode::from(2);
        }
    };
    let (status, answer) = match call(&cli.socket, method, &path, &body) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("shuck ctl: {}: {e}", cli.socket.display());
            return ExitCode::from(2);
        }
    };
    if cli.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&answer).unwrap_or_default()
        );
    } else if (200..300).contains(&status) {
        print!("{}", table::render(&cli.command, &answer));
    } else {
        eprint!("{}", table::refusal(status, &answer));
    }
    if (200..300).contains(&status) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The method, path and body of a command.
fn request_of(c: &Command) -> Result<(&'static str, String, Vec<u8>), String> {
    let server = |s: &str| -> Result<String, String> {
        let (b, srv) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: give BACKEND/SERVER, e.g. default/api1"))?;
        Ok(format!("/backends/{}/servers/{}", escape(b), escape(srv)))
    };
    // BACKEND alone: every server of it.
    let server_or_backend = |s: &str| match s.split_once('/') {
        Some((b, srv)) => format!("/backends/{}/servers/{}", escape(b), escape(srv)),
        None => format!("/backends/{}", escape(s)),
    };
    let state = |s: &str| format!("{{\"state\":\"{s}\"}}").into_bytes();
    Ok(match c {
        Command::Status => ("GET", "/status".into(), Vec::new()),
        Command::Reload => ("POST", "/reload".into(), Vec::new()),
        Command::Backends => ("GET", "/backends".into(), Vec::new()),
        Command::Sessions => ("GET", "/sessions".into(), Vec::new()),
        Command::Clients { top } => ("GET", format!("/clients?top={top}"), Vec::new()),
        Command::Ban {
            block,
            seconds,
            reason,
        } => {
            let mut body = serde_json::json!({ "block": block, "reason": reason });
            if let Some(s) = seconds {
                body["seconds"] = (*s).into();
            }
            ("POST", "/clients/ban".into(), body.to_string().into_bytes())
        }
        Command::Unban { block } => (
            "DELETE",
            format!("/clients/ban/{}", escape(block)),
            Vec::new(),
        ),
        Command::Drain { server: s } => ("PUT", server_or_backend(s), state("drain")),
        Command::Ready { server: s } => ("PUT", server_or_backend(s), state("ready")),
        Command::Maint { server: s } => ("PUT", server_or_backend(s), state("maint")),
        Command::Weight { server: s, weight } => (
            "PUT",
            server(s)?,
            format!("{{\"weight\":{weight}}}").into_bytes(),
        ),
        Command::Tickets(TicketsCommand::Rotate) => ("POST", "/tickets/rotate".into(), Vec::new()),
        Command::Cert(CertCommand::List) => ("GET", "/certificates".into(), Vec::new()),
        Command::Cert(CertCommand::Rm { name }) => (
            "DELETE",
            format!("/certificates/{}", escape(name)),
            Vec::new(),
        ),
        Command::Cert(CertCommand::Add { name, file }) => {
            let pem = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
            ("PUT", format!("/certificates/{}", escape(name)), pem)
        }
    })
}

/// A path segment with what is not unreserved %-escaped.
fn escape(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// One request over the socket: its status and JSON answer.
fn call(
    socket: &std::path::Path,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<(u16, Value), String> {
    let mut s = UnixStream::connect(socket).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => {
            format!("{e} (the admin API is for root and shuck's own user)")
        }
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            format!("{e} (is shuck running with --admin-socket at this path?)")
        }
        _ => e.to_string(),
    })?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: shuck\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(body))
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).map_err(|e| e.to_string())?;
    parse_answer(&answer)
}

/// Status and JSON body of an HTTP/1.1 answer read to its end.
fn parse_answer(raw: &[u8]) -> Result<(u16, Value), String> {
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut resp = httparse::Response::new(&mut headers);
    let n = match resp.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return Err("the answer is not HTTP (is this shuck's admin socket?)".into()),
    };
    let status = resp.code.unwrap_or(0);
    let body = serde_json::from_slice(&raw[n..])
        .map_err(|e| format!("the answer's body is not JSON: {e}"))?;
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_become_requests() {
        let (m, p, b) = request_of(&Command::Drain {
            server: "default/[::1]:80".into(),
        })
        .unwrap();
        assert_eq!(
            (m, p.as_str()),
            ("PUT", "/backends/default/servers/%5B%3A%3A1%5D%3A80")
        );
        assert_eq!(b, b"{\"state\":\"drain\"}");
        let (m, p, b) = request_of(&Command::Maint {
            server: "api".into(),
        })
        .unwrap();
        assert_eq!(
            (m, p.as_str(), &b[..]),
            ("PUT", "/backends/api", &b"{\"state\":\"maint\"}"[..])
        );
        let (s, v) =
            parse_answer(b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}").unwrap();
        assert_eq!((s, v), (404, serde_json::json!({})));
    }
}
