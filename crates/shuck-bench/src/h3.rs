//! `shuck-bench h3`: HTTP/3 gateways compared. shuck with `--http --quic` (its HTTP/3 and,
//! on the same process and the same requests, its HTTP/2 through h2load) and Caddy's
//! `reverse_proxy` (HTTP/3 on by default), in front of the same HTTP/1.1 origin. HTTP/3 is
//! loaded by a client of shuck-bench's own on quinn and h3 (`h3-load`, run as a child pinned
//! to the client's CPU, as h2load is): N connections × M streams for each answer size, and
//! full handshakes (a new connection for each request) against full TCP + TLS 1.3 ones
//! (h2load, one request a connection). The server's CPU time per request is read from /proc.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::{Buf, Bytes};
use clap::Args;

use crate::compare::{free_port, make_cert, Bench, BenchOpts, Origin};
use crate::h2::{Measured, Runs};
use crate::peers::{self, which, Params, SyncParams, Target};
use crate::{procfs, report};

/// Options of `h3`.
#[derive(Debug, Clone, Args)]
pub struct H3Opts {
    /// Servers to measure, comma-separated: shuck (HTTP/3 and its own HTTP/2),
    /// shuck-nomtud (HTTP/3 with --quic-mtu-discovery=off), caddy.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "shuck,shuck-nomtud,caddy"
    )]
    pub targets: Vec<String>,
    /// The load and its runs.
    #[command(flatten)]
    pub runs: Runs,
    /// What every comparison takes.
    #[command(flatten)]
    pub bench: BenchOpts,
}

/// Options of `h3-load`, the HTTP/3 load client (one run; prints `ok failed`).
#[derive(Debug, Clone, Args)]
pub struct H3LoadOpts {
    /// The server.
    #[arg(long)]
    pub addr: SocketAddr,
    /// The path to ask for.
    #[arg(long, default_value = "/0")]
    pub path: String,
    /// Connections.
    #[arg(long, default_value_t = 10)]
    pub connections: usize,
    /// Streams in flight per connection.
    #[arg(long, default_value_t = 10)]
    pub streams: usize,
    /// Seconds.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// A new connection (a full handshake) for every request.
    #[arg(long)]
    pub handshakes: bool,
    /// QUIC without HTTP/3 (ALPN `raw`, as `floor-server` answers it): each request is a
    /// bidirectional stream with `GET` on it, the answer whatever comes back before its end;
    /// one at a time on each connection.
    #[arg(long)]
    pub raw: bool,
}

/// What is measured: a server's protocol at one size.
type Row = (String, String, Result<Measured, String>);

/// A load of one kind against one server.
#[derive(Clone, Copy)]
enum Load {
    /// HTTP/3 streams on kept connections.
    H3,
    /// HTTP/2 streams on kept connections (h2load).
    H2,
    /// A full QUIC handshake and one request per connection.
    H3Handshakes,
    /// A full TCP + TLS 1.3 handshake and one HTTP/2 request per connection (h2load).
    TcpHandshakes,
}

/// Runs the comparison; returns the report's path.
pub fn run(o: &H3Opts) -> anyhow::Result<PathBuf> {
    let h2load = which("h2load").context("h2load is needed (apt-get install nghttp2-client)")?;
    let me = std::env::current_exe().context("where shuck-bench is")?;
    let Bench {
        shuck,
        machine,
        pin,
    } = o.bench.start();
    let dir = std::env::temp_dir().join(format!("shuck-bench-h3-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let _cleanup = crate::compare::RemoveDir(dir.clone());
    let pem = make_cert(&dir, "ecdsa", "ec -pkeyopt ec_paramgen_curve:P-256")?;
    let origin_port = free_port()?;
    let _origin = Origin::start(origin_port, pin)?;
    let key = dir.join("unused.key");
    let mut rows: Vec<Row> = Vec::new();
    let mut versions = Vec::new();
    let mut servers = Vec::new();
    for name in &o.targets {
        let (target, template, loads): (_, _, &[(&str, Load)]) = match name.as_str() {
            "shuck" => (
                Target::Shuck,
                "shuck-h3.args",
                &[("h3", Load::H3), ("h2", Load::H2)],
            ),
            // shuck with --quic-mtu-discovery=off: no path MTU probes (HAProxy's way).
            "shuck-nomtud" => (Target::Shuck, "shuck-h3-nomtud.args", &[("h3", Load::H3)]),
            "caddy" => (Target::Caddy, "Caddyfile-h3", &[("h3", Load::H3)]),
            other => bail!("no HTTP/3 configuration for {other:?}: shuck, shuck-nomtud or caddy"),
        };
        let program = match peers::ensure_installed(target, &shuck) {
            Ok(p) => {
                versions.push(format!("{}: {}", target.name(), target.version(&shuck)));
                p
            }
            Err(why) => {
                for size in &o.runs.sizes {
                    rows.push((format!("{name} h3"), size.clone(), Err(why.clone())));
                }
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
                slow_peer: 0,
                key: &key,
                redis_port: 0,
            },
        };
        let started = peers::start_template(
            target,
            &program,
            &o.bench.peers_dir,
            template,
            &params,
            pin.then_some(0),
        );
        match started {
            Ok(server) => servers.push((name.clone(), params.port, server, loads)),
            Err(e) => {
                for size in &o.runs.sizes {
                    rows.push((name.clone(), size.clone(), Err(format!("{e:#}"))));
                }
            }
        }
    }
    // Let the QUIC side bind beside the TCP one.
    std::thread::sleep(Duration::from_millis(500));
    let run_one = |load: Load, port: u16, size: &str, seconds: f64, pid: u32| {
        measure(&me, &h2load, o, load, port, size, seconds, pid, pin)
    };
    let mut cases: Vec<(String, String, Load)> = o
        .runs
        .sizes
        .iter()
        .flat_map(|s| {
            [Load::H3, Load::H2]
                .into_iter()
                .map(move |l| (s.clone(), s.clone(), l))
        })
        .collect();
    cases.push(("handshake".into(), "0".into(), Load::H3Handshakes));
    cases.push(("handshake".into(), "0".into(), Load::TcpHandshakes));
    for (label, size, load) in cases {
        for (name, port, server, loads) in &servers {
            let kind = match load {
                Load::H3 | Load::H3Handshakes => "h3",
                Load::H2 | Load::TcpHandshakes => "h2",
            };
            if !loads.iter().any(|(k, _)| *k == kind) {
                continue;
            }
            let proto = match load {
                Load::H3 => "h3",
                Load::H2 => "h2",
                Load::H3Handshakes => "QUIC handshake",
                Load::TcpHandshakes => "TCP+TLS 1.3 handshake",
            };
            eprintln!("h3: {name} {proto}, {label}, warm-up...");
            let mut got = run_one(load, *port, &size, 1.0, server.pid()).map(|_| Vec::new());
            for round in 1..=o.runs.repeats.max(1) {
                let Ok(done) = &mut got else { break };
                eprintln!("h3: {name} {proto}, {label}, run {round}...");
                match run_one(load, *port, &size, o.runs.duration, server.pid()) {
                    Ok(m) => done.push(m),
                    Err(e) => got = Err(e),
                }
            }
            rows.push((
                format!("{name} {proto}"),
                label.clone(),
                Measured::median(got),
            ));
        }
    }
    for (_, _, server, _) in servers {
        server.stop();
    }
    let text = render(o, &rows, &versions, &machine, pin);
    print!("{text}");
    std::fs::create_dir_all(&o.bench.out)?;
    let path = o
        .bench
        .out
        .join(format!("h3-{}.md", report::utc_now().replace(':', "")));
    std::fs::write(&path, text)?;
    Ok(path)
}

/// One run of `load` for `seconds`; the server's CPU time is taken around it.
#[allow(clippy::too_many_arguments)]
fn measure(
    me: &Path,
    h2load: &Path,
    o: &H3Opts,
    load: Load,
    port: u16,
    size: &str,
    seconds: f64,
    server: u32,
    pin: bool,
) -> anyhow::Result<Measured> {
    let ticks = procfs::clock_ticks();
    let mut cmd = if pin {
        let mut c = Command::new("taskset");
        c.args(["-c", "1"]);
        c
    } else {
        Command::new("env")
    };
    let secs = format!("{}", seconds.ceil().max(1.0) as u64);
    let (c, m) = (o.runs.connections.to_string(), o.runs.streams.to_string());
    match load {
        Load::H3 | Load::H3Handshakes => {
            cmd.arg(me).args([
                "h3-load",
                "--addr",
                &format!("127.0.0.1:{port}"),
                "--path",
                &format!("/{size}"),
                "--connections",
                &c,
                "--streams",
                &m,
                "--duration",
                &secs,
            ]);
            if matches!(load, Load::H3Handshakes) {
                cmd.arg("--handshakes");
            }
        }
        Load::H2 => {
            cmd.arg(h2load).args([
                "-c",
                &c,
                "-m",
                &m,
                "-D",
                &secs,
                &format!("https://127.0.0.1:{port}/{size}"),
            ]);
        }
        Load::TcpHandshakes => {
            // shuck-bench's own TLS load: a new connection and a full TLS 1.3 handshake
            // for each request, `connections` at a time.
            cmd.arg(me).args([
                "load",
                "--target",
                &format!("127.0.0.1:{port}"),
                "--concurrency",
                &c,
                "--duration",
                &secs,
                "--reuse",
                "never",
                "--tls",
                "1.3",
                "--size",
                size,
                "--json",
            ]);
        }
    }
    let cpu0 = procfs::cpu_us(server, ticks);
    let start = Instant::now();
    let out = cmd.output().context("cannot run the load client")?;
    let elapsed = start.elapsed().as_secs_f64().max(0.001);
    let cpu1 = procfs::cpu_us(server, ticks);
    let text = String::from_utf8_lossy(&out.stdout);
    let (requests, failed) = match load {
        Load::H3 | Load::H3Handshakes => {
            let mut w = text.split_whitespace().map(|n| n.parse::<u64>());
            match (w.next(), w.next()) {
                (Some(Ok(ok)), Some(Ok(bad))) => (ok, bad),
                _ => bail!(
                    "h3-load printed no counts: {text} {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
        }
        Load::H2 => crate::h2::parse_requests(&text)
            .with_context(|| format!("h2load printed no request count: {text}"))?,
        Load::TcpHandshakes => {
            let v: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("load printed no report: {text}"))?;
            let done = v["completed"].as_u64().unwrap_or(0);
            let failed: u64 = v["failures"]
                .as_object()
                .map(|m| m.values().filter_map(|n| n.as_u64()).sum())
                .unwrap_or(0);
            (done, failed)
        }
    };
    if requests == 0 {
        bail!("no request succeeded: {text}");
    }
    Ok(Measured {
        requests,
        failed,
        cpu_us: cpu1.saturating_sub(cpu0),
        seconds: elapsed,
    })
}

/// `h3-load`: loads an HTTP/3 server and prints `succeeded failed`.
pub fn load(o: &H3LoadOpts) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (ok, bad) = rt.block_on(run_load(o))?;
    println!("{ok} {bad}");
    Ok(())
}

async fn run_load(o: &H3LoadOpts) -> anyhow::Result<(u64, u64)> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(crate::verifier::AnyCertificate::new(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![if o.raw {
        b"raw".to_vec()
    } else {
        b"h3".to_vec()
    }];
    // No resumption: a handshake run measures full handshakes.
    tls.resumption = rustls::client::Resumption::disabled();
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
    let client = quinn::ClientConfig::new(Arc::new(quic));
    let mut endpoint = quinn::Endpoint::client("0.0.0.0:0".parse()?)?;
    endpoint.set_default_client_config(client);
    let ok = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs_f64(o.duration);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..o.connections {
        let (endpoint, ok, bad, o) = (endpoint.clone(), ok.clone(), bad.clone(), o.clone());
        tasks.spawn(async move {
            while Instant::now() < end {
                let streams = if o.handshakes { 1 } else { o.streams };
                match connection(&endpoint, &o, streams, end, &ok, o.handshakes).await {
                    Ok(()) => {}
                    Err(_) => {
                        bad.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    endpoint.wait_idle().await;
    Ok((ok.load(Ordering::Relaxed), bad.load(Ordering::Relaxed)))
}

/// One connection: `streams` loops of requests until `end` (one request when `once`).
async fn connection(
    endpoint: &quinn::Endpoint,
    o: &H3LoadOpts,
    streams: usize,
    end: Instant,
    ok: &AtomicU64,
    once: bool,
) -> anyhow::Result<()> {
    let conn = endpoint.connect(o.addr, "localhost")?.await?;
    if o.raw {
        return crate::floor::raw_requests(conn, once, end, ok).await;
    }
    let (mut driver, sender) = h3::client::new(h3_quinn::Connection::new(conn.clone())).await?;
    let drive = tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    let uri: http::Uri = format!("https://{}{}", o.addr, o.path).parse()?;
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..streams {
        let mut sender = sender.clone();
        let uri = uri.clone();
        set.spawn(async move {
            let mut n = 0u64;
            loop {
                let req = http::Request::get(uri.clone()).body(())?;
                let mut stream = sender.send_request(req).await?;
                stream.finish().await?;
                let resp = stream.recv_response().await?;
                if !resp.status().is_success() {
                    bail!("status {}", resp.status());
                }
                while let Some(mut chunk) = stream.recv_data().await? {
                    let _: Bytes = chunk.copy_to_bytes(chunk.remaining());
                }
                n += 1;
                if once || Instant::now() >= end {
                    return Ok::<u64, anyhow::Error>(n);
                }
            }
        });
    }
    let mut result = Ok(());
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(n)) => {
                ok.fetch_add(n, Ordering::Relaxed);
            }
            Ok(Err(e)) => result = Err(e),
            Err(e) => result = Err(e.into()),
        }
    }
    drop(sender);
    conn.close(0u32.into(), b"");
    drive.abort();
    result
}

fn render(o: &H3Opts, rows: &[Row], versions: &[String], machine: &str, pin: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# shuck-bench h3: HTTP/3 gateways\n");
    let _ = writeln!(s, "- date: {}", report::utc_now());
    let _ = writeln!(s, "- machine: {machine}");
    let _ = writeln!(
        s,
        "- load: {} connections × {} streams, {} s a run, median of {} (server on CPU 0, client on CPU 1: {pin}); handshakes: one request on a new connection each, {} at a time (QUIC: h3-load; TCP + TLS 1.3: shuck-bench load --reuse never --tls 1.3)",
        o.runs.connections, o.runs.streams, o.runs.duration, o.runs.repeats, o.runs.connections
    );
    for v in versions {
        let _ = writeln!(s, "- {v}");
    }
    let _ = writeln!(
        s,
        "\n| server and protocol | answer | requests/s | failed | server CPU µs / request |\n|---|---|---|---|---|"
    );
    for (who, size, r) in rows {
        match r {
            Ok(m) => {
                let _ = writeln!(
                    s,
                    "| {who} | {size} | {:.0} | {} | {:.1} |",
                    m.requests as f64 / m.seconds,
                    m.failed,
                    m.cpu_per_req()
                );
            }
            Err(e) => {
                let _ = writeln!(s, "| {who} | {size} | – | – | not measured: {e} |");
            }
        }
    }
    s
}
