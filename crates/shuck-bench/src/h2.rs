//! `shuck-bench h2`: HTTP/2 gateways compared. shuck in `--http` mode, HAProxy in
//! `mode http` with `alpn h2,http/1.1` and nginx with `http2`, each in front of the same
//! HTTP/1.1 origin, loaded by nghttp2's `h2load` (N connections × M streams) for each
//! answer size; the server's CPU time per request is read from /proc, as `compare` does,
//! server on CPU 0, client and origin on CPU 1. The servers run side by side and are
//! measured in turn, a run each per round.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;

use crate::compare::{free_port, make_cert, Bench, BenchOpts, Origin};
use crate::paired;
use crate::peers::{self, which, Params, SyncParams, Target};
use crate::procfs;
use crate::report;

/// Options of `h2`.
#[derive(Debug, Clone, Args)]
pub struct H2Opts {
    /// Servers to measure, comma-separated: shuck, haproxy, nginx, caddy (each with -log, but
    /// caddy); with --h2c shuck-h2c, haproxy-h2c, nginx-grpc and floor-h2c (`floor-h2`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "shuck,haproxy,nginx,caddy"
    )]
    pub targets: Vec<String>,
    /// Clients speak HTTP/1.1 (h2load's `--h1`; with `--streams 1`, one request at a
    /// time on each keep-alive connection) instead of HTTP/2.
    #[arg(long)]
    pub h1: bool,
    /// The origin speaks HTTP/2 in clear (`origin --h2c`): for the gateways' HTTP/2
    /// backends (targets shuck-h2c, haproxy-h2c, nginx-grpc).
    #[arg(long)]
    pub h2c: bool,
    /// Each request is a unary gRPC call (bench.Echo/Unary of `bench/peers/echo.proto`,
    /// a 64-byte message) instead of a GET of each size.
    #[arg(long)]
    pub grpc: bool,
    /// The load client: h2load (nghttp2's) or ghz (a Go gRPC client, for `--grpc`;
    /// `go install github.com/bojand/ghz/cmd/ghz@latest`).
    #[arg(long, default_value = "h2load")]
    pub client: String,
    /// The load and its runs.
    #[command(flatten)]
    pub runs: Runs,
    /// What every comparison takes.
    #[command(flatten)]
    pub bench: BenchOpts,
}

/// The load of an HTTP gateway comparison (`h2`, `h3`) and how often it is measured.
#[derive(Debug, Clone, Args)]
pub struct Runs {
    /// Answer sizes, comma-separated (bytes, or with k/m as the origin reads them).
    #[arg(long, value_delimiter = ',', default_value = "0,4k")]
    pub sizes: Vec<String>,
    /// Client connections.
    #[arg(long, default_value_t = 10)]
    pub connections: usize,
    /// Streams in flight per connection.
    #[arg(long, default_value_t = 10)]
    pub streams: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Measurements per size and server (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
}

/// One measurement.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Measured {
    pub(crate) requests: u64,
    pub(crate) failed: u64,
    pub(crate) cpu_us: u64,
    pub(crate) seconds: f64,
}

impl Measured {
    /// The server's CPU time per request, µs.
    pub(crate) fn cpu_per_req(&self) -> f64 {
        self.cpu_us as f64 / self.requests.max(1) as f64
    }

    /// The median of `runs` by CPU per request (or why there is none).
    pub(crate) fn median(runs: anyhow::Result<Vec<Measured>>) -> Result<Measured, String> {
        let mut runs = runs.map_err(|e| format!("{e:#}"))?;
        if runs.is_empty() {
            return Err("no run".into());
        }
        runs.sort_by(|a, b| a.cpu_per_req().total_cmp(&b.cpu_per_req()));
        Ok(runs[runs.len() / 2])
    }
}

/// A server's median at one size, or why there is none.
type Row = (String, String, Result<Measured, String>);

/// Runs the comparison; returns the report's path.
pub fn run(o: &H2Opts) -> anyhow::Result<PathBuf> {
    let h2load = which("h2load")
        .or_else(|| {
            let _ = Command::new("sh")
                .args(["-c", "(apt-get install -y -qq nghttp2-client || (apt-get update -qq && apt-get install -y -qq nghttp2-client)) >/dev/null 2>&1"])
                .status();
            which("h2load")
        })
        .context("h2load is needed (apt-get install nghttp2-client)")?;
    let Bench {
        shuck,
        machine,
        pin,
    } = o.bench.start();
    let dir = std::env::temp_dir().join(format!("shuck-bench-h2-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let _cleanup = crate::compare::RemoveDir(dir.clone());
    let pem = make_cert(&dir, "ecdsa", "ec -pkeyopt ec_paramgen_curve:P-256")?;
    let origin_port = free_port()?;
    let _origin = Origin::start_as(origin_port, pin, o.h2c)?;
    let key = dir.join("unused.key");
    let grpc_body = dir.join("grpc.bin");
    std::fs::write(&grpc_body, grpc_message())?;
    // HAProxy's syslog lines (haproxy-log) go here: bound, never read, so that sending them
    // costs what it costs and reading them costs nothing on the server's CPU.
    let syslog = std::net::UdpSocket::bind("127.0.0.1:0")?;
    let syslog_port = syslog.local_addr()?.port();
    let mut rows: Vec<Row> = Vec::new();
    // Every run of each server and size, for the log's cost taken a round at a time.
    let mut kept: Vec<(String, String, Vec<Measured>)> = Vec::new();
    let mut versions = Vec::new();
    // All servers are started first and measured in turn, one run each per round, so that
    // the machine's drift over the minutes a comparison takes falls on all of them alike
    // instead of on whichever was measured last.
    let mut servers = Vec::new();
    for name in &o.targets {
        let (target, template) = match name.as_str() {
            "shuck" => (Target::Shuck, "shuck-h2.args"),
            "haproxy" => (Target::Haproxy, "haproxy-h2.cfg"),
            "nginx" => (Target::Nginx, "nginx-h2.conf"),
            "caddy" => (Target::Caddy, "Caddyfile-h2"),
            // The same with each one's access log on, to measure what a line costs.
            "shuck-log" => (Target::Shuck, "shuck-h2-log.args"),
            "haproxy-log" => (Target::Haproxy, "haproxy-h2-log.cfg"),
            "nginx-log" => (Target::Nginx, "nginx-h2-log.conf"),
            // The same with ten header rules (five on requests, five on answers).
            "shuck-rules" => (Target::Shuck, "shuck-h2-rules.args"),
            "haproxy-rules" => (Target::Haproxy, "haproxy-h2-rules.cfg"),
            "nginx-rules" => (Target::Nginx, "nginx-h2-rules.conf"),
            // HTTP/2 to the origin (--h2c): shuck's proto = h2, HAProxy's proto h2, nginx's
            // grpc_pass.
            "shuck-h2c" => (Target::Shuck, "shuck-h2c.args"),
            "haproxy-h2c" => (Target::Haproxy, "haproxy-h2c.cfg"),
            "nginx-grpc" => (Target::Nginx, "nginx-grpc.conf"),
            // The port-80 redirect (with --h1): shuck's --redirect-listen, nginx's
            // `return 301 https://$host$request_uri`, each over plain HTTP/1.1.
            "shuck-redirect" => (Target::Shuck, "shuck-redirect.args"),
            "nginx-redirect" => (Target::Nginx, "nginx-redirect.conf"),
            // The libraries alone (`floor-h2`, this program), the floor under shuck-h2c.
            "floor-h2c" => (Target::Shuck, "floor-h2c.args"),
            other => bail!("no HTTP/2 configuration for {other:?}: shuck, haproxy, nginx or caddy (with -log for its access log on, -rules for ten header rules, but caddy), shuck-redirect and nginx-redirect (with --h1), or with --h2c shuck-h2c, haproxy-h2c, nginx-grpc, floor-h2c"),
        };
        let installed = match name.as_str() {
            "floor-h2c" => std::env::current_exe()
                .map(|p| (p, "shuck-bench floor-h2 (tokio-rustls, h2)".to_owned()))
                .map_err(|e| e.to_string()),
            _ => peers::ensure_installed(target, &shuck).map(|p| (p, target.version(&shuck))),
        };
        let program = match installed {
            Ok((p, version)) => {
                versions.push(format!("{name}: {version}"));
                p
            }
            Err(why) => {
                not_measured(
                    &mut rows,
                    name,
                    &o.runs.sizes,
                    &format!("unavailable: {why}"),
                );
                continue;
            }
        };
        let params = Params {
            port: free_port()?,
            origin_port,
            pem: &pem,
            dir: &dir,
            sync: SyncParams {
                port: 0,
                slow_peer: syslog_port,
                key: &key,
                redis_port: 0,
            },
        };
        match peers::start_template(
            target,
            &program,
            &o.bench.peers_dir,
            template,
            &params,
            pin.then_some(0),
        ) {
            Ok(server) => servers.push((name.clone(), params.port, server)),
            Err(e) => not_measured(
                &mut rows,
                name,
                &o.runs.sizes,
                &format!("failed to start: {e:#}"),
            ),
        }
    }
    let grpc_sizes = ["grpc".to_owned()];
    let sizes = if o.grpc {
        &grpc_sizes[..]
    } else {
        &o.runs.sizes[..]
    };
    let client = Client {
        h2load: &h2load,
        ghz: o.client == "ghz",
        grpc: o.grpc.then_some(grpc_body.as_path()),
    };
    for size in sizes {
        let url = |name: &str, port: u16| match o.grpc {
            true => format!("https://127.0.0.1:{port}/bench.Echo/Unary"),
            // The redirect listeners answer plain HTTP.
            false if name.ends_with("-redirect") => format!("http://127.0.0.1:{port}/{size}"),
            false => format!("https://127.0.0.1:{port}/{size}"),
        };
        // Each server's runs, or why it has none.
        let mut runs: Vec<anyhow::Result<Vec<Measured>>> = servers
            .iter()
            .map(|(name, port, server)| {
                eprintln!("h2: {name}, {size} answers, warm-up...");
                // Warm-up: connections, caches, page faults; not measured.
                run_h2load(&client, o, &url(name, *port), 1.0, server.pid(), pin)
                    .map(|_| Vec::new())
            })
            .collect();
        for round in 1..=o.runs.repeats.max(1) {
            for ((name, port, server), got) in servers.iter().zip(runs.iter_mut()) {
                let Ok(done) = got else { continue };
                eprintln!("h2: {name}, {size} answers, run {round}...");
                match run_h2load(
                    &client,
                    o,
                    &url(name, *port),
                    o.runs.duration,
                    server.pid(),
                    pin,
                ) {
                    Ok(m) => done.push(m),
                    Err(e) => *got = Err(e),
                }
            }
        }
        for ((name, ..), got) in servers.iter().zip(runs) {
            if let Ok(done) = &got {
                kept.push((name.clone(), size.clone(), done.clone()));
            }
            rows.push((name.clone(), size.clone(), Measured::median(got)));
        }
    }
    for (_, _, server) in servers {
        server.stop();
    }
    let mut text = render(o, &rows, &versions, &machine, pin);
    let paired: Vec<paired::Runs<'_>> = kept
        .iter()
        .map(|(target, size, runs)| paired::Runs {
            target,
            size,
            runs: runs.iter().map(Measured::cpu_per_req).collect(),
        })
        .collect();
    text.push_str(&paired::render(&paired));
    print!("{text}");
    std::fs::create_dir_all(&o.bench.out)?;
    let path = o
        .bench
        .out
        .join(format!("h2-{}.md", report::utc_now().replace(':', "")));
    std::fs::write(&path, text)?;
    Ok(path)
}

/// A row for each size, saying why `target` has no figure.
fn not_measured(rows: &mut Vec<Row>, target: &str, sizes: &[String], why: &str) {
    for size in sizes {
        rows.push((target.to_owned(), size.clone(), Err(why.to_owned())));
    }
}

/// The load client of a run.
struct Client<'a> {
    h2load: &'a Path,
    /// ghz instead of h2load (`--grpc` only).
    ghz: bool,
    /// `--grpc`: the message every call sends.
    grpc: Option<&'a Path>,
}

/// A unary call's request: one gRPC message (uncompressed, its length first) holding a
/// `bench.Msg` of 64 bytes (protobuf: field 1, bytes).
fn grpc_message() -> Vec<u8> {
    let mut msg = vec![0x0a, 64];
    msg.extend(std::iter::repeat_n(b'x', 64));
    let mut framed = vec![0];
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(&msg);
    framed
}

/// One load run (h2load's, or ghz's for gRPC) against `url` for `seconds`; the server's
/// CPU time is taken around it.
fn run_h2load(
    client: &Client<'_>,
    o: &H2Opts,
    url: &str,
    seconds: f64,
    server: u32,
    pin: bool,
) -> anyhow::Result<Measured> {
    let ticks = procfs::clock_ticks();
    let program = if client.ghz {
        which("ghz")
            .or_else(|| {
                let home = std::env::var("HOME").unwrap_or_default();
                let p = PathBuf::from(home).join("go/bin/ghz");
                p.exists().then_some(p)
            })
            .context("ghz is needed: go install github.com/bojand/ghz/cmd/ghz@latest")?
    } else {
        client.h2load.to_path_buf()
    };
    let mut cmd = if pin {
        let mut c = Command::new("taskset");
        c.args(["-c", "1"]).arg(&program);
        c
    } else {
        Command::new(&program)
    };
    let secs = seconds.ceil().max(1.0) as u64;
    if client.ghz {
        let proto = o.bench.peers_dir.join("echo.proto");
        let target = url
            .trim_start_matches("https://")
            .split('/')
            .next()
            .unwrap_or_default();
        cmd.args(["--skipTLS", "--proto"])
            .arg(&proto)
            .args(["--call", "bench.Echo/Unary", "-d"])
            .arg(format!("{{\"data\":\"{}\"}}", "eHh4".repeat(21) + "eA=="))
            .args([
                "--connections",
                &o.runs.connections.to_string(),
                "-c",
                &(o.runs.connections * o.runs.streams).to_string(),
                "-z",
                &format!("{secs}s"),
                "--format",
                "json",
                target,
            ]);
    } else {
        cmd.args([
            "-c",
            &o.runs.connections.to_string(),
            "-m",
            &o.runs.streams.to_string(),
            "-D",
            &secs.to_string(),
            url,
        ]);
        if let Some(body) = client.grpc {
            cmd.arg("-d").arg(body).args([
                "-H",
                "content-type: application/grpc",
                "-H",
                "te: trailers",
            ]);
        }
    }
    if o.h1 {
        cmd.arg("--h1");
    }
    let cpu0 = procfs::cpu_us(server, ticks);
    let start = std::time::Instant::now();
    let out = cmd.output().context("cannot run the load client")?;
    let elapsed = start.elapsed();
    let cpu1 = procfs::cpu_us(server, ticks);
    let text = String::from_utf8_lossy(&out.stdout);
    let counted = if client.ghz {
        parse_ghz(&text)
    } else {
        parse_requests(&text)
    };
    let (requests, failed) =
        counted.with_context(|| format!("the load client printed no request count: {text}"))?;
    if requests == 0 {
        bail!(
            "no request succeeded: {}",
            text.lines().rev().take(8).collect::<Vec<_>>().join(" | ")
        );
    }
    Ok(Measured {
        requests,
        failed,
        cpu_us: cpu1.saturating_sub(cpu0),
        seconds: elapsed.max(Duration::from_millis(1)).as_secs_f64(),
    })
}

/// From ghz's JSON report: the calls that ended OK, and the others.
fn parse_ghz(text: &str) -> Option<(u64, u64)> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let codes = v["statusCodeDistribution"].as_object()?;
    let ok = codes.get("OK").and_then(|n| n.as_u64()).unwrap_or(0);
    let all: u64 = codes.values().filter_map(|n| n.as_u64()).sum();
    Some((ok, all - ok))
}

/// From h2load's `requests: 9 total, 9 started, 9 done, 8 succeeded, 1 failed, ...`: the
/// succeeded and the failed (failed, errored and timed out).
pub(crate) fn parse_requests(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("requests:"))?;
    let mut ok = None;
    let mut bad = 0;
    for part in line.trim_start_matches("requests:").split(',') {
        let mut w = part.split_whitespace();
        let n: u64 = w.next()?.parse().ok()?;
        match w.next()? {
            "succeeded" => ok = Some(n),
            "failed" | "errored" | "timeout" => bad += n,
            _ => {}
        }
    }
    Some((ok?, bad))
}

fn render(o: &H2Opts, rows: &[Row], versions: &[String], machine: &str, pin: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# shuck-bench h2: HTTP/2 gateways\n");
    let _ = writeln!(s, "- date: {}", report::utc_now());
    let _ = writeln!(
        s,
        "- command: `{}`",
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    let _ = writeln!(s, "- machine: {machine}");
    let _ = writeln!(
        s,
        "- load: {}{}{}, {} connections × {} streams, {} s per run, median of {} (the servers measured in turn, a run each per round); TLS 1.3, ECDSA P-256",
        if o.client == "ghz" { "ghz" } else { "h2load" },
        if o.h1 { " --h1 (HTTP/1.1 clients)" } else { "" },
        match (o.grpc, o.h2c) {
            (true, _) => ", unary gRPC calls (bench.Echo/Unary, 64-byte messages) to an HTTP/2 origin in clear",
            (false, true) => ", to an HTTP/2 origin in clear",
            (false, false) => "",
        },
        o.runs.connections, o.runs.streams, o.runs.duration, o.runs.repeats
    );
    let _ = writeln!(
        s,
        "- pinning: {}",
        if pin {
            "server on CPU 0; h2load and origin on CPU 1"
        } else {
            "none"
        }
    );
    for v in versions {
        let _ = writeln!(s, "- {v}");
    }
    let _ = writeln!(
        s,
        "\n| size | server | requests/s | server CPU µs/request | × best peer | failed |\n|---|---|---|---|---|---|"
    );
    let mut sizes: Vec<&String> = Vec::new();
    for (_, size, _) in rows {
        if !sizes.contains(&size) {
            sizes.push(size);
        }
    }
    for size in sizes {
        let best_peer = rows
            .iter()
            // The floor is no peer: its row is set against the peers as shuck's is.
            .filter(|(t, sz, _)| sz == size && !t.starts_with("shuck") && !t.starts_with("floor"))
            .filter_map(|(_, _, r)| r.as_ref().ok().map(Measured::cpu_per_req))
            .min_by(f64::total_cmp);
        for (t, _, r) in rows.iter().filter(|(_, sz, _)| sz == size) {
            match r {
                Ok(m) => {
                    let ratio = best_peer
                        .map(|b| format!("{:.2}", m.cpu_per_req() / b))
                        .unwrap_or_else(|| "–".into());
                    let _ = writeln!(
                        s,
                        "| {size} | {t} | {:.0} | {:.2} | {ratio} | {} |",
                        m.requests as f64 / m.seconds,
                        m.cpu_per_req(),
                        m.failed
                    );
                }
                Err(e) => {
                    let _ = writeln!(s, "| {size} | {t} | – | – | – | {e} |");
                }
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_h2loads_request_line() {
        let text = "finished in 5.00s, 41234.20 req/s, 1.2MB/s\nrequests: 206171 total, 206271 started, 206171 done, 206100 succeeded, 71 failed, 0 errored, 3 timeout\n";
        assert_eq!(parse_requests(text), Some((206_100, 74)));
        assert_eq!(parse_requests("nothing"), None);
    }
}
