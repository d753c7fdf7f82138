//! The knobs of a load run (`shuck-bench load`'s flags, shared by `ramp` and `compare`).

use std::net::SocketAddr;

use clap::Args;

use shuck::origin::size::{format_size, parse_size};

/// When to resume a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Reuse {
    /// Every session is a full handshake.
    Never,
    /// Every session resumes (after the first).
    Always,
    /// One session in N resumes.
    Every(u32),
}

fn parse_reuse(s: &str) -> Result<Reuse, String> {
    match s {
        "never" => Ok(Reuse::Never),
        "always" => Ok(Reuse::Always),
        _ => s
            .strip_prefix("every:")
            .and_then(|n| n.parse().ok())
            .filter(|&n: &u32| n >= 1)
            .map(Reuse::Every)
            .ok_or_else(|| format!("{s:?}: expected never, always or every:N")),
    }
}

/// How TLS 1.2 sessions resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum ResumeBy {
    /// Session tickets when the server offers them, else session IDs.
    Ticket,
    /// Session IDs only.
    Id,
}

/// Key types for `--key-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum KeyType {
    /// RSA 2048.
    Rsa2048,
    /// RSA 3072.
    Rsa3072,
    /// RSA 4096.
    Rsa4096,
    /// ECDSA P-256.
    EcdsaP256,
}

/// The knobs of a load run; shared by `load`, `ramp` and `compare`.
#[derive(Debug, Clone, Args, serde::Serialize)]
pub struct LoadOpts {
    /// Target TLS endpoint.
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub target: SocketAddr,
    /// Sessions kept in flight (closed loop). Ignored with --rate.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// New sessions attempted per second (open loop).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Most sessions in flight in open loop; beyond, attempts count as client_overload.
    #[arg(long, default_value_t = 4096)]
    pub max_in_flight: usize,
    /// How long to run, seconds.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// never | always | every:N (resume one session in N).
    #[arg(long, default_value = "never", value_parser = parse_reuse)]
    #[serde(skip)]
    pub reuse: Reuse,
    /// How TLS 1.2 sessions resume.
    #[arg(long, value_enum, default_value = "ticket")]
    pub resume_by: ResumeBy,
    /// Requests per TLS session (1, 4, 8, 80 in the seeds).
    #[arg(long, default_value_t = 1)]
    pub requests_per_conn: u32,
    /// Object size: 0, 1k, 4k, 100k, 1m or bytes.
    #[arg(long, default_value = "0", value_parser = parse_size_arg)]
    pub size: usize,
    /// TLS version: 1.2 or 1.3 (default: either).
    #[arg(long, value_parser = ["1.2", "1.3"])]
    pub tls: Option<String>,
    /// Cipher suite, by OpenSSL or IANA-style name.
    #[arg(long)]
    pub cipher: Option<String>,
    /// Server name to send.
    #[arg(long, default_value = "localhost")]
    pub sni: String,
    /// Expected key type of the target's certificate; the run stops if it differs.
    #[arg(long, value_enum)]
    pub key_type: Option<KeyType>,
    /// Timeout for connect, handshake and each response, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Client threads, each with its own runtime.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Plain TCP, no TLS: the same connections and requests against a relay without TLS
    /// (the honest limit's relay, `compare`'s target `relay`).
    #[arg(long)]
    pub plain: bool,
}

fn parse_size_arg(s: &str) -> Result<usize, String> {
    parse_size(s).ok_or_else(|| format!("{s:?} is not a size (0, 1k, 4k, 100k, 1m, bytes)"))
}

impl LoadOpts {
    /// A one-line description, for reports.
    pub fn describe(&self) -> String {
        let loop_ = match self.rate {
            Some(r) => format!("rate {r}/s"),
            None => format!("concurrency {}", self.concurrency),
        };
        format!(
            "{loop_}, reuse {:?}, {} req/conn, size {}, TLS {}{}",
            self.reuse,
            self.requests_per_conn,
            format_size(self.size),
            if self.plain {
                "none (plain TCP)"
            } else {
                self.tls.as_deref().unwrap_or("any")
            },
            self.cipher
                .as_deref()
                .map(|c| format!(", {c}"))
                .unwrap_or_default()
        )
    }
}
