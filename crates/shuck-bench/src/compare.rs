//! `shuck-bench compare`: the same scenarios against shuck and each peer in one run, server
//! pinned to CPU 0, client and origin to CPU 1, each measurement repeated (median kept), with
//! server CPU time per connection and per request read from /proc.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::capacity::{self};
use crate::load::{self, KeyType, LoadOpts};
use crate::peers::{self, Params, SyncParams, Target};
use crate::procfs;
use crate::report;
use crate::results::{Idle, Results, Run, ScenarioResult, TargetResult};
use crate::scenarios::{self, Scenario};

/// Options of `compare`.
#[derive(Debug, Clone, Args)]
pub struct CompareOpts {
    /// Scenario names, comma-separated, or `all`.
    #[arg(long, default_value = "all")]
    pub scenario: String,
    /// Servers to measure, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "shuck,hitch,haproxy,nginx,stunnel,caddy,relay"
    )]
    pub targets: Vec<Target>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Measurements per scenario and server (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Sessions in flight (closed loop).
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Idle TLS connections for the memory scenario.
    #[arg(long, default_value_t = 10_000)]
    pub idle_conns: usize,
    /// What every comparison takes.
    #[command(flatten)]
    pub bench: BenchOpts,
}

/// The options every comparison (`compare`, `h2`) takes.
#[derive(Debug, Clone, Args)]
pub struct BenchOpts {
    /// Where reports go.
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    /// The shuck binary (default: next to this one).
    #[arg(long)]
    pub shuck: Option<PathBuf>,
    /// Peer configuration templates.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/peers"))]
    pub peers_dir: PathBuf,
    /// Do not pin server and client to separate CPUs.
    #[arg(long)]
    pub no_pin: bool,
}

/// What a comparison's start settles: the binary, the machine, whether to pin.
pub(crate) struct Bench {
    /// The shuck binary measured.
    pub shuck: PathBuf,
    /// The machine, read before this process is pinned (nproc counts allowed CPUs).
    pub machine: String,
    /// Servers on CPU 0, this process (the client) and the origin on CPU 1.
    pub pin: bool,
}

impl BenchOpts {
    /// Raises the descriptor limit, finds the binary, reads the machine and pins this
    /// process to CPU 1 when pinning.
    pub(crate) fn start(&self) -> Bench {
        raise_fd_limit();
        let shuck = self.shuck.clone().unwrap_or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(|d| d.join("shuck")))
                .unwrap_or_else(|| "shuck".into())
        });
        let machine = report::machine();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let pin = !self.no_pin && cpus >= 2;
        if pin {
            let _ = Command::new("taskset")
                .args(["-a", "-p", "-c", "1", &std::process::id().to_string()])
                .stdout(Stdio::null())
                .status();
        }
        Bench {
            shuck,
            machine,
            pin,
        }
    }
}

/// Runs the comparison and writes the reports.
pub fn run(o: &CompareOpts) -> anyhow::Result<PathBuf> {
    let scenarios = scenarios::select(&o.scenario).map_err(anyhow::Error::msg)?;
    let Bench {
        shuck,
        machine,
        pin,
    } = o.bench.start();
    let fd_limit = rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft);
    // A proxy holds two descriptors per idle client connection.
    let idle_conns = o
        .idle_conns
        .min((fd_limit.saturating_sub(200) / 2) as usize);
    if idle_conns < o.idle_conns {
        eprintln!(
            "idle-memory: {idle_conns} connections, not {}: the descriptor limit is {fd_limit}",
            o.idle_conns
        );
    }
    let dir = std::env::temp_dir().join(format!("shuck-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let _cleanup = RemoveDir(dir.clone());
    let rsa = make_cert(&dir, "rsa2048", "rsa:2048")?;
    let ec = make_cert(&dir, "ecdsa", "ec -pkeyopt ec_paramgen_curve:P-256")?;

    let origin_port = free_port()?;
    let _origin = Origin::start(origin_port, pin)?;
    // shuck-sync's peers: one bound but never read (slow), one where nothing listens (lost).
    let slow_peer = std::net::UdpSocket::bind("127.0.0.1:0")?;
    let sync_key = dir.join("farm.key");
    std::fs::write(&sync_key, "c2h1Y2stYmVuY2ggcmVwbGljYXRpb24ga2V5IDMyIGI=\n")?;
    // shuck-redis's store: a redis-server beside the client (on CPU 1 when pinned).
    let redis = if o.targets.contains(&Target::ShuckRedis) {
        Some(RedisServer::start(&dir, pin)?)
    } else {
        None
    };
    let sync = SyncParams {
        port: free_port()?,
        slow_peer: slow_peer.local_addr()?.port(),
        key: &sync_key,
        redis_port: redis.as_ref().map_or(0, |r| r.port),
    };

    eprintln!("measuring crypto costs (capacity)...");
    let capacity = capacity::measure(Duration::from_millis(300))?;

    let installed: Vec<(Target, Result<PathBuf, String>)> = o
        .targets
        .iter()
        .map(|&t| (t, peers::ensure_installed(t, &shuck)))
        .collect();
    let versions = installed
        .iter()
        .map(|(t, _)| (t.name().to_owned(), t.version(&shuck)))
        .collect();

    let total = scenarios.len() * o.targets.len() * (o.repeats.max(1) + 1);
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );

    let mut results = Vec::new();
    for sc in &scenarios {
        let base = LoadOpts {
            target: SocketAddr::from(([127, 0, 0, 1], 0)),
            concurrency: o.concurrency,
            rate: None,
            max_in_flight: 4096,
            duration: o.duration,
            reuse: sc.reuse,
            resume_by: sc.resume_by,
            requests_per_conn: 1,
            size: 0,
            tls: None,
            cipher: None,
            sni: "localhost".into(),
            key_type: None,
            timeout: 10.0,
            threads: 1,
            plain: false,
        };
        let lo = sc.load_opts(&base);
        let pem = if sc.key == KeyType::Rsa2048 {
            &rsa
        } else {
            &ec
        };
        let mut targets = Vec::new();
        for (t, prog) in &installed {
            bar.set_message(format!("{} / {}", sc.name, t.name()));
            let r = match prog {
                Err(why) => {
                    bar.inc(o.repeats as u64 + 1);
                    TargetResult {
                        target: *t,
                        status: format!("unavailable: {why}"),
                        runs: vec![],
                        median: None,
                        idle: None,
                    }
                }
                Ok(prog) => measure(
                    *t,
                    prog,
                    sc,
                    &lo,
                    pem,
                    &dir,
                    (origin_port, sync),
                    o,
                    idle_conns,
                    pin,
                    &bar,
                ),
            };
            targets.push(r);
        }
        results.push(ScenarioResult {
            scenario: *sc,
            load: lo.describe(),
            targets,
        });
    }
    bar.finish_and_clear();

    let res = Results {
        date: report::utc_now(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine,
        versions,
        pinning: if pin {
            "server on CPU 0; client and origin on CPU 1 (taskset)".into()
        } else {
            "none".into()
        },
        capacity,
        scenarios: results,
    };
    report::write(&res, &o.bench.out)
}

#[allow(clippy::too_many_arguments)]
fn measure(
    t: Target,
    prog: &Path,
    sc: &Scenario,
    lo: &LoadOpts,
    pem: &Path,
    dir: &Path,
    (origin_port, sync): (u16, SyncParams<'_>),
    o: &CompareOpts,
    idle_conns: usize,
    pin: bool,
    bar: &ProgressBar,
) -> TargetResult {
    let fail = |status: String| TargetResult {
        target: t,
        status,
        runs: vec![],
        median: None,
        idle: None,
    };
    if sc.idle && t == Target::Relay {
        bar.inc(o.repeats as u64 + 1);
        return fail("not measured: an idle connection's TLS memory has no relay figure".into());
    }
    let port = match free_port() {
        Ok(p) => p,
        Err(e) => return fail(format!("failed: {e}")),
    };
    let server = match peers::start(
        t,
        prog,
        &o.bench.peers_dir,
        &Params {
            port,
            origin_port,
            pem,
            dir,
            sync,
        },
        pin.then_some(0),
    ) {
        Ok(s) => s,
        Err(e) => {
            bar.inc(o.repeats as u64 + 1);
            return fail(format!("failed to start: {e:#}"));
        }
    };
    let mut lo = lo.clone();
    lo.target = SocketAddr::from(([127, 0, 0, 1], port));
    // The relay is loaded as the scenario loads a terminator, without TLS.
    if t == Target::Relay {
        lo.plain = true;
        lo.key_type = None;
    }
    let lo = &lo;
    let ticks = procfs::clock_ticks();

    if sc.idle {
        let before = procfs::rss_bytes(server.pid());
        let held = load::open_idle(lo, idle_conns, 64);
        std::thread::sleep(Duration::from_secs(1));
        let after = procfs::rss_bytes(server.pid());
        bar.inc(o.repeats as u64 + 1);
        let r = match held {
            Ok(h) if !h.is_empty() => TargetResult {
                target: t,
                status: if h.failed() == 0 {
                    "ok".into()
                } else {
                    format!("ok ({} of {idle_conns} connections failed)", h.failed())
                },
                runs: vec![],
                median: None,
                idle: Some(Idle {
                    established: h.len(),
                    failed: h.failed(),
                    rss_before: before,
                    rss_after: after,
                    bytes_per_conn: after.saturating_sub(before) as f64 / h.len() as f64,
                }),
            },
            Ok(_) => fail("failed: no connection could be established".into()),
            Err(e) => fail(format!("failed: {e:#}")),
        };
        server.stop();
        return r;
    }

    // Warm-up: fills session caches, faults pages in; not measured.
    let mut warm = lo.clone();
    warm.duration = 1.0;
    if let Err(e) = load::run(&warm, None) {
        let tail = server.log_tail();
        server.stop();
        bar.inc(o.repeats as u64 + 1);
        return fail(format!("failed: {e:#} {tail}"));
    }
    bar.inc(1);
    let mut runs = Vec::new();
    for _ in 0..o.repeats.max(1) {
        let cpu0 = procfs::cpu_us(server.pid(), ticks);
        let stats = load::run(lo, None);
        let cpu1 = procfs::cpu_us(server.pid(), ticks);
        bar.inc(1);
        match stats {
            Ok(s) => {
                let rep = s.report();
                let cpu = cpu1.saturating_sub(cpu0);
                runs.push(Run {
                    cpu_us_per_conn: cpu as f64 / (rep.completed.max(1)) as f64,
                    cpu_us_per_req: cpu as f64 / (rep.requests.max(1)) as f64,
                    server_cpu_us: cpu,
                    load: rep,
                });
            }
            Err(e) => {
                server.stop();
                return fail(format!("failed: {e:#}"));
            }
        }
    }
    server.stop();
    let mut sorted = runs.clone();
    sorted.sort_by(|a, b| a.cpu_us_per_conn.total_cmp(&b.cpu_us_per_conn));
    let median = sorted.get(sorted.len() / 2).cloned();
    let status = match &median {
        Some(m) if m.load.completed == 0 => "failed: no session completed".into(),
        _ => "ok".into(),
    };
    TargetResult {
        target: t,
        status,
        runs,
        median,
        idle: None,
    }
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(crate) fn make_cert(dir: &Path, name: &str, newkey: &str) -> anyhow::Result<PathBuf> {
    let pem = dir.join(format!("{name}.pem"));
    let (key, crt) = (
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.crt")),
    );
    let (newkey_alg, opts) = newkey.split_once(' ').unwrap_or((newkey, ""));
    let cmd = format!(
        "openssl req -x509 -newkey {newkey_alg} {opts} -nodes -subj /CN=localhost -addext subjectAltName=DNS:localhost -days 30 -keyout {k} -out {c} 2>/dev/null && cat {c} {k} > {p}",
        k = key.display(), c = crt.display(), p = pem.display()
    );
    let st = Command::new("sh")
        .args(["-c", &cmd])
        .status()
        .context("openssl is needed to make certificates")?;
    anyhow::ensure!(
        st.success(),
        "openssl could not make the {name} certificate"
    );
    Ok(pem)
}

/// The origin, as a child process of this binary, pinned with the client.
pub(crate) struct Origin(Child);

impl Origin {
    pub(crate) fn start(port: u16, pin: bool) -> anyhow::Result<Origin> {
        Self::start_as(port, pin, false)
    }

    /// As [`Origin::start`]; with `h2c`, the HTTP/2 origin (`origin --h2c`).
    pub(crate) fn start_as(port: u16, pin: bool, h2c: bool) -> anyhow::Result<Origin> {
        let me = std::env::current_exe()?;
        let mut cmd = if pin {
            let mut c = Command::new("taskset");
            c.args(["-c", "1"]).arg(&me);
            c
        } else {
            Command::new(&me)
        };
        cmd.args(["origin", "--listen", &format!("127.0.0.1:{port}")]);
        if h2c {
            cmd.arg("--h2c");
        }
        let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(addr).is_err() {
            anyhow::ensure!(Instant::now() < deadline, "the origin did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Origin(child))
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) struct RemoveDir(pub(crate) PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Servers and the client both need a descriptor per connection: as root, lift the limit
/// well past 10,000 idle connections on each side; otherwise take the hard limit.
pub fn raise_fd_limit() {
    if rlimit::setrlimit(rlimit::Resource::NOFILE, 262_144, 262_144).is_err() {
        let _ = rlimit::increase_nofile_limit(u64::MAX);
    }
}

/// The redis-server shuck-redis uses: no persistence, stopped by its PID on drop.
struct RedisServer {
    child: std::process::Child,
    port: u16,
}

impl RedisServer {
    fn start(dir: &Path, pin: bool) -> anyhow::Result<Self> {
        let port = free_port()?;
        let mut cmd = if pin {
            let mut c = Command::new("taskset");
            c.args(["-c", "1", "redis-server"]);
            c
        } else {
            Command::new("redis-server")
        };
        let child = cmd
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--dir"])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start redis-server (apt-get install redis-server) for shuck-redis")?;
        let server = RedisServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                anyhow::bail!("redis-server did not start on port {port}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
