//! The servers compared: shuck and its peers, each started from a committed configuration
//! under `bench/peers/`, pinned to one CPU, and stopped by its PID.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// TLS 1.2 suites every server is given (AES-128-GCM for both key types).
pub const CIPHERS12: &str = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256";
/// TLS 1.3 suite every server is given.
pub const CIPHERS13: &str = "TLS_AES_128_GCM_SHA256";

/// A server under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// This project.
    Shuck,
    /// This project with replication on, to a peer that never reads and one that is gone:
    /// its cost is shuck-sync's figure over shuck's in the same run.
    #[value(name = "shuck-sync")]
    #[serde(rename = "shuck-sync")]
    ShuckSync,
    /// shuck-sync's baseline: the same settings (stateful sessions, --no-tickets) without
    /// replication.
    #[value(name = "shuck-cache")]
    #[serde(rename = "shuck-cache")]
    ShuckCache,
    /// shuck-cache with its sessions in a redis-server (`--shared-store`) and a local
    /// cache of one session, so that nearly every resumption is fetched from Redis: its
    /// cost is shuck-redis's figure over shuck-cache's.
    #[value(name = "shuck-redis")]
    #[serde(rename = "shuck-redis")]
    ShuckRedis,
    /// hitch (stud's successor).
    Hitch,
    /// HAProxy in TCP mode.
    Haproxy,
    /// nginx's stream module.
    Nginx,
    /// stunnel.
    Stunnel,
    /// Caddy (`reverse_proxy`, HTTP/3 on by default), built with `go install`.
    Caddy,
    /// The honest limit's relay: HAProxy in TCP mode without TLS, the same origin and
    /// pinning, loaded in plain TCP with each scenario's connections and requests. Not a
    /// peer: the limit row of a report is this plus the crypto floor.
    Relay,
}

impl Target {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Target::Shuck => "shuck",
            Target::ShuckSync => "shuck-sync",
            Target::ShuckCache => "shuck-cache",
            Target::ShuckRedis => "shuck-redis",
            Target::Hitch => "hitch",
            Target::Haproxy => "haproxy",
            Target::Nginx => "nginx",
            Target::Stunnel => "stunnel",
            Target::Caddy => "caddy",
            Target::Relay => "relay",
        }
    }

    fn program(self) -> &'static str {
        match self {
            Target::Shuck | Target::ShuckSync | Target::ShuckCache | Target::ShuckRedis => "shuck",
            Target::Hitch => "hitch",
            Target::Haproxy | Target::Relay => "haproxy",
            Target::Nginx => "nginx",
            Target::Stunnel => "stunnel4",
            Target::Caddy => "caddy",
        }
    }

    fn packages(self) -> &'static str {
        match self {
            Target::Shuck | Target::ShuckSync | Target::ShuckCache | Target::ShuckRedis => "",
            Target::Hitch => "hitch",
            Target::Haproxy | Target::Relay => "haproxy",
            Target::Nginx => "nginx libnginx-mod-stream",
            Target::Stunnel => "stunnel4",
            Target::Caddy => "",
        }
    }

    fn template(self) -> &'static str {
        match self {
            Target::Shuck => "shuck.args",
            Target::ShuckSync => "shuck-sync.args",
            Target::ShuckCache => "shuck-cache.args",
            Target::ShuckRedis => "shuck-redis.args",
            Target::Hitch => "hitch.conf",
            Target::Haproxy => "haproxy.cfg",
            Target::Nginx => "nginx.conf",
            Target::Stunnel => "stunnel.conf",
            Target::Caddy => "Caddyfile",
            Target::Relay => "relay.cfg",
        }
    }

    /// shuck itself, with or without replication.
    pub fn is_shuck(self) -> bool {
        matches!(
            self,
            Target::Shuck | Target::ShuckSync | Target::ShuckCache | Target::ShuckRedis
        )
    }

    /// A TLS terminator shuck is compared with (not shuck, not the relay).
    pub fn is_peer(self) -> bool {
        !self.is_shuck() && self != Target::Relay
    }

    /// The version line the program prints, for reports.
    pub fn version(self, shuck: &Path) -> String {
        if self == Target::Caddy {
            // `caddy version` says "unknown" for a `go install` build: name what was built.
            return "caddy v2.11.9 (go install github.com/caddyserver/caddy/v2/cmd/caddy@v2.11.9)"
                .into();
        }
        let (prog, arg) = match self {
            Target::Shuck | Target::ShuckSync | Target::ShuckCache | Target::ShuckRedis => {
                (shuck.to_str().unwrap_or("shuck"), "--version")
            }
            Target::Hitch => ("hitch", "--version"),
            Target::Haproxy | Target::Relay => ("haproxy", "-v"),
            Target::Nginx => ("nginx", "-v"),
            Target::Stunnel => ("stunnel4", "-version"),
            Target::Caddy => (CADDY_BIN, "version"),
        };
        Command::new(prog)
            .arg(arg)
            .stdin(Stdio::null())
            .output()
            .ok()
            .map(|o| {
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                let name = self.program().trim_end_matches('4');
                text.lines()
                    .find(|l| l.to_ascii_lowercase().contains(name))
                    .or_else(|| text.lines().find(|l| !l.trim().is_empty()))
                    .unwrap_or("")
                    .trim()
                    .to_owned()
            })
            .unwrap_or_else(|| "unknown".into())
    }
}

/// Finds the program, installing its Debian package when missing. `Err` says why it cannot
/// be had, for the report.
pub fn ensure_installed(t: Target, shuck: &Path) -> Result<PathBuf, String> {
    if t.is_shuck() {
        return if shuck.exists() {
            Ok(shuck.to_owned())
        } else {
            Err(format!(
                "{} not found: build it with cargo build --release -p shuck",
                shuck.display()
            ))
        };
    }
    if t == Target::Caddy {
        return caddy();
    }
    let find = || which(t.program());
    if let Some(p) = find() {
        return Ok(p);
    }
    let _ = Command::new("sh")
        .args(["-c", &format!("(apt-get install -y -qq {p} || (apt-get update -qq && apt-get install -y -qq {p})) >/dev/null 2>&1", p = t.packages())])
        .status();
    find().ok_or_else(|| {
        format!(
            "{} is not installed and apt-get install {} failed",
            t.program(),
            t.packages()
        )
    })
}

/// Where `go install` puts Caddy.
const CADDY_BIN: &str = "/root/go/bin/caddy";

/// The Caddy the issue names (2.11.9), built with `go install` when missing.
fn caddy() -> Result<PathBuf, String> {
    let bin = std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join("go/bin/caddy"))
        .unwrap_or_else(|| PathBuf::from(CADDY_BIN));
    if bin.exists() {
        return Ok(bin);
    }
    let gobin = bin.parent().map(Path::to_owned).unwrap_or_default();
    let built = Command::new("go")
        .args([
            "install",
            "github.com/caddyserver/caddy/v2/cmd/caddy@v2.11.9",
        ])
        .env("GOBIN", &gobin)
        .status();
    match built {
        Ok(s) if s.success() && bin.exists() => Ok(bin),
        Ok(s) => Err(format!("go install of caddy 2.11.9 failed ({s})")),
        Err(e) => Err(format!("go is needed to build caddy: {e}")),
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}

pub(crate) fn which(program: &str) -> Option<PathBuf> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .ok()?;
    let p = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!p.is_empty()).then(|| PathBuf::from(p))
}

/// Values substituted into a template.
pub struct Params<'a> {
    /// Listening port.
    pub port: u16,
    /// Origin port.
    pub origin_port: u16,
    /// Certificate chain and key, one file.
    pub pem: &'a Path,
    /// Scratch directory for configs, logs and pid files.
    pub dir: &'a Path,
    /// shuck-sync: its UDP port, the port of a peer that never reads, the key file.
    pub sync: SyncParams<'a>,
}

/// What shuck-sync's template needs.
#[derive(Clone, Copy)]
pub struct SyncParams<'a> {
    /// Where it receives.
    pub port: u16,
    /// A bound UDP socket nobody reads (a slow peer).
    pub slow_peer: u16,
    /// The pre-shared key file (also shuck-redis's farm key).
    pub key: &'a Path,
    /// shuck-redis: the port of the redis-server shuck-bench started (0: none).
    pub redis_port: u16,
}

/// A running server; stopped on drop.
pub struct Server {
    child: Child,
    /// Its standard error, named after its configuration: two targets of one program (shuck
    /// and shuck-log, shuck-h2c and floor-h2c) run side by side and keep their own.
    log: PathBuf,
}

impl Server {
    /// The PID of the server's main process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops it: SIGTERM, then SIGKILL after 5 s.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        let pid = self.child.id();
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The tail of what it logged, for error reports.
    pub fn log_tail(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s.lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join(" | ")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.halt();
        }
    }
}

/// Writes the target's configuration and starts it pinned to `cpu`, waiting until it
/// accepts TCP connections.
pub fn start(
    t: Target,
    program: &Path,
    templates: &Path,
    p: &Params<'_>,
    cpu: Option<usize>,
) -> anyhow::Result<Server> {
    start_template(t, program, templates, t.template(), p, cpu)
}

/// As [`start`], from another of the target's templates (e.g. its HTTP/2 gateway's).
pub fn start_template(
    t: Target,
    program: &Path,
    templates: &Path,
    template_name: &str,
    p: &Params<'_>,
    cpu: Option<usize>,
) -> anyhow::Result<Server> {
    let template = templates.join(template_name);
    let text = std::fs::read_to_string(&template)
        .with_context(|| format!("cannot read {}", template.display()))?;
    let text = text
        .replace("{{PORT}}", &p.port.to_string())
        // A second port for a server that must bind one it is not measured on (shuck's
        // TLS frontend beside its redirect listener).
        .replace(
            "{{PORT_PLUS_1}}",
            &p.port.checked_add(1).unwrap_or(p.port - 1).to_string(),
        )
        .replace("{{ORIGIN_PORT}}", &p.origin_port.to_string())
        .replace("{{PEM}}", &p.pem.display().to_string())
        .replace("{{DIR}}", &p.dir.display().to_string())
        .replace("{{CIPHERS12}}", CIPHERS12)
        .replace("{{CIPHERS13}}", CIPHERS13)
        .replace("{{SYNC_PORT}}", &p.sync.port.to_string())
        .replace("{{SLOW_PEER_PORT}}", &p.sync.slow_peer.to_string())
        .replace("{{SYNC_KEY}}", &p.sync.key.display().to_string())
        .replace("{{REDIS_PORT}}", &p.sync.redis_port.to_string())
        .replace(
            "{{USER_LINE}}",
            if is_root() { "user = \"nobody\"" } else { "" },
        );
    let conf = p.dir.join(template_name);
    std::fs::write(&conf, &text)?;
    let conf_s = conf.display().to_string();
    let args: Vec<String> = match t {
        Target::Shuck | Target::ShuckSync | Target::ShuckCache | Target::ShuckRedis => text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(str::to_owned)
            .collect(),
        Target::Hitch => vec![format!("--config={conf_s}")],
        Target::Haproxy | Target::Relay => vec!["-db".into(), "-f".into(), conf_s],
        Target::Nginx => vec![
            "-c".into(),
            conf_s,
            "-p".into(),
            p.dir.display().to_string(),
        ],
        Target::Stunnel => vec![conf_s],
        Target::Caddy => vec![
            "run".into(),
            "--config".into(),
            conf_s,
            "--adapter".into(),
            "caddyfile".into(),
        ],
    };
    let mut cmd = match cpu {
        Some(c) => {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", &c.to_string()]).arg(program);
            cmd
        }
        None => Command::new(program),
    };
    let log = p.dir.join(format!("{template_name}.stderr"));
    let stderr = std::fs::File::create(&log)?;
    let child = cmd
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("cannot start {}", program.display()))?;
    let mut server = Server { child, log };
    let addr = SocketAddr::from(([127, 0, 0, 1], p.port));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(server);
        }
        if let Ok(Some(st)) = server.child.try_wait() {
            bail!("{} exited ({st}) at start: {}", t.name(), server.log_tail());
        }
        if Instant::now() > deadline {
            let tail = server.log_tail();
            server.halt();
            bail!("{} did not listen on {addr} within 15 s: {tail}", t.name());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
