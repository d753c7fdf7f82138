//! `shuck-bench`: the classic TLS terminator benchmarks (handshakes per second, transactions
//! with session reuse, object sizes, key types, latency and failure limits), run against
//! shuck and its peers on the same machine.
//!
//! A library only so that its one option table ([`Cli`]) also makes its man page
//! (`xtask`); the binary is `main.rs`.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, Subcommand};

mod capacity;
mod compare;
mod floor;
mod floor_h2;
mod h2;
mod h3;
mod limit;
mod load;
mod origin;
mod origin_h2;
mod paired;
mod peers;
mod procfs;
mod ramp;
mod refuse;
mod report;
mod results;
mod scenarios;
mod sessions;
mod stats;
pub mod verifier;

/// shuck-bench: TLS terminator benchmarks.
#[derive(Parser)]
#[command(name = "shuck-bench", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// A lean keep-alive HTTP/1.1 origin: GET /<size> (0, 1k, 4k, 100k, 1m, bytes).
    Origin {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:8000")]
        listen: SocketAddr,
        /// Runtime threads.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// HTTP/2 in clear with prior knowledge instead (h2c), with gRPC calls echoed.
        #[arg(long)]
        h2c: bool,
    },
    /// Load a TLS endpoint and report rates, failures, latency and resumption.
    Load {
        #[command(flatten)]
        opts: load::LoadOpts,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Raise the attempted rate until latency or failures pass their limits.
    Ramp {
        #[command(flatten)]
        opts: ramp::RampOpts,
        /// Print the steps as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run scenarios against shuck and the peers, and write reports.
    Compare(compare::CompareOpts),
    /// Compare HTTP/2 gateways (shuck --http, HAProxy mode http, nginx http2) with h2load.
    H2(h2::H2Opts),
    /// Compare HTTP/3 gateways (shuck --quic, and its own HTTP/2; Caddy) with shuck-bench's
    /// own HTTP/3 client, and full QUIC handshakes with full TCP + TLS 1.3 ones.
    H3(h3::H3Opts),
    /// The HTTP/3 load client `h3` runs (one run: prints `succeeded failed`).
    #[command(name = "h3-load", hide = true)]
    H3Load(h3::H3LoadOpts),
    /// Answer `200` to HTTP/1.1 over TLS 1.3 (TCP) and HTTP/3 (QUIC) on one port, with the
    /// libraries shuck is built on and nothing else: the floor under shuck's own figures
    /// (bench/floor.sh).
    #[command(name = "floor-server")]
    FloorServer {
        /// Where to listen (TCP and UDP).
        #[arg(long)]
        listen: SocketAddr,
        /// A PEM file with the certificate chain and its private key.
        #[arg(long)]
        cert: std::path::PathBuf,
    },
    /// Pass HTTP/2 streams over TLS to an HTTP/2 origin in clear with the libraries shuck's
    /// gateway is built on and nothing else: the floor under `h2 --h2c` (target floor-h2c).
    #[command(name = "floor-h2")]
    FloorH2 {
        /// Where to listen.
        #[arg(long)]
        listen: SocketAddr,
        /// A PEM file with the certificate chain and its private key.
        #[arg(long)]
        cert: std::path::PathBuf,
        /// The h2c origin.
        #[arg(long)]
        origin: SocketAddr,
    },
    /// New TCP connections as fast as it can, each held until the server closes it:
    /// prints `refused served failed` (bench/client-limits.sh).
    #[command(name = "connect-load", hide = true)]
    ConnectLoad(refuse::ConnectOpts),
    /// Measure this machine's crypto costs and the capacity they imply.
    Capacity {
        /// Seconds spent on each operation.
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs the subcommand `cli` names.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::ConnectLoad(o) => refuse::run(&o),
        Cmd::Origin {
            listen,
            threads,
            h2c,
        } => {
            compare::raise_fd_limit();
            origin::run(listen, threads, h2c)
        }
        Cmd::Load { opts, json } => {
            compare::raise_fd_limit();
            let report = load::run(&opts, None)?.report();
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!("load: {} against {}", opts.describe(), opts.target);
                print!("{report}");
            }
            Ok(())
        }
        Cmd::Ramp { opts, json } => {
            compare::raise_fd_limit();
            let (steps, best) = ramp::run(&opts, |s| {
                if !json {
                    println!(
                        "rate {:>8.0}/s  achieved {:>8.0}/s  failures {:>7.3} %  latency mean {:>8.2} ms  {}",
                        s.rate, s.report.conns_per_s, s.report.failure_ratio * 100.0, s.report.session_ms.mean,
                        if s.ok { "ok" } else { "over the limits" }
                    );
                }
            })?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({ "steps": steps, "best_rate": best })
                    )?
                );
            } else {
                match best {
                    Some(r) => println!(
                        "highest rate within {} ms average latency and {} % failures: {r:.0}/s",
                        opts.max_latency_ms, opts.max_failures_pct
                    ),
                    None => println!("no step stayed within the limits"),
                }
            }
            Ok(())
        }
        Cmd::FloorServer { listen, cert } => floor::run(listen, &cert),
        Cmd::FloorH2 {
            listen,
            cert,
            origin,
        } => {
            compare::raise_fd_limit();
            floor_h2::run(listen, &cert, origin)
        }
        Cmd::Compare(o) => {
            let md = compare::run(&o)?;
            println!("report: {}", md.display());
            Ok(())
        }
        Cmd::H2(o) => {
            let md = h2::run(&o)?;
            println!("report: {}", md.display());
            Ok(())
        }
        Cmd::H3(o) => {
            let md = h3::run(&o)?;
            println!("report: {}", md.display());
            Ok(())
        }
        Cmd::H3Load(o) => h3::load(&o),
        Cmd::Capacity { seconds, json } => {
            let c = capacity::measure(Duration::from_secs_f64(seconds))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&c)?);
            } else {
                println!("{c}");
            }
            Ok(())
        }
    }
}
