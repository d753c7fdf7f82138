//! Helpers for end-to-end tests: start the real `shuck` binary, plain origins on 127.0.0.1,
//! certificates made with openssl and rcgen, and a rustls client that records what it saw.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod grpc;
pub mod h1origin;
pub mod h2c;
pub mod h3;
pub mod netns;
pub mod pebble;
pub mod shapes;
pub mod udp_front;

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::thread;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, SignatureScheme, StreamOwned};
use shuck_bench::verifier::AnyCertificate;

pub const BIN: &str = env!("CARGO_BIN_EXE_shuck");

/// True when some socket listens on `port` (any local address), as /proc/net/tcp and tcp6
/// say. A connect is no such test: to a port of the ephemeral range where nothing listens,
/// the kernel may pick that same port as the source and the socket reach itself.
pub fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
        std::fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|line| {
                let mut cols = line.split_whitespace();
                let local = cols.nth(1).unwrap_or("");
                let state = cols.nth(1).unwrap_or("");
                state == "0A" && local.ends_with(&want)
            })
    })
}

/// Ports this test process was given (by [`free_port`] or [`fresh_listener`]).
static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());

/// A port free right now on 127.0.0.1, never one this test process was given before: the
/// kernel may hand the same ephemeral port to two binds in a row once the first is closed,
/// and two frontends (or two tests) would then collide.
pub fn free_port() -> u16 {
    fresh_listener().local_addr().unwrap().port()
}

/// A listener on 127.0.0.1 at a port this test process was never given before, for the
/// tests' own servers: bound to port 0 alone, one could take the port [`free_port`] just
/// gave a test for a frontend that it has yet to open.
pub fn fresh_listener() -> TcpListener {
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        if !given.contains(&port) {
            given.push(port);
            return l;
        }
    }
}

/// A scratch directory removed at drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "shuck-test-{}-{}-{}",
            tag,
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port` (at most 10 s);
/// `what` names it in the failure.
pub fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------- peer programs

/// Finds a program, installing its Debian package when missing and we are root. Prints a
/// loud SKIP line and returns false only when it truly cannot be had.
pub fn require(program: &str, package: &str) -> bool {
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let have = || {
        Command::new("sh")
            .args(["-c", &format!("command -v {program}")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if have() {
        return true;
    }
    let _ = Command::new("sh")
        .args(["-c", &format!("(apt-get install -y -qq {package} || (apt-get update -qq && apt-get install -y -qq {package})) >/dev/null 2>&1")])
        .status();
    if have() {
        return true;
    }
    skip(&format!(
        "{program} is not installed and could not be installed (apt-get install {package})"
    ));
    false
}

/// A Python module (`import` is the statement that must run) from PyPI's `packages`,
/// installed when missing, as the Debian packages are by [`require`]. Prints a loud SKIP
/// line and returns false only when it truly cannot be had.
pub fn python_module(import: &str, packages: &str, what: &str) -> bool {
    let have = || {
        Command::new("python3")
            .args(["-c", import])
            .status()
            .is_ok_and(|s| s.success())
    };
    if have() {
        return true;
    }
    let _ = Command::new("sh")
        .args([
            "-c",
            &format!("pip install -q {packages} >/dev/null 2>&1 || pip install -q --break-system-packages {packages} >/dev/null 2>&1 || python3 -m pip install -q --break-system-packages {packages} >/dev/null 2>&1"),
        ])
        .status();
    if have() {
        return true;
    }
    skip(&format!(
        "{what} (PyPI) is not installed and could not be installed"
    ));
    false
}

/// Whether this run is CI's (`CI=true`, as `.ci/run` sets): there every check must run.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A check that cannot run here: a loud `SKIP:` line, or under CI a failure, since CI
/// installs everything the suite needs and a skip there hides a missing step.
pub fn skip(why: &str) {
    assert!(
        !under_ci(),
        "under CI every check must run, and this one cannot: {why}"
    );
    eprintln!("SKIP: {why}; this check did not run");
}

/// The alert a refused handshake received from shuck, if that is why it failed.
pub fn alert_of<T>(r: &Result<T, io::Error>) -> Option<rustls::AlertDescription> {
    let e = r.as_ref().err()?;
    match e.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::AlertReceived(a) => Some(*a),
        _ => None,
    }
}

// ---------------------------------------------------------------- certificates

/// Key kinds and encodings the tests cover.
#[derive(Clone, Copy, Debug)]
pub enum Key {
    /// RSA 2048, PKCS#8.
    Rsa,
    /// RSA 2048, PKCS#1 ("RSA PRIVATE KEY").
    RsaPkcs1,
    /// ECDSA P-256, PKCS#8.
    EcP256,
    /// ECDSA P-256, SEC1 ("EC PRIVATE KEY").
    EcP256Sec1,
    /// ECDSA P-384, SEC1.
    EcP384Sec1,
    /// Ed25519, PKCS#8.
    Ed25519,
}

/// Writes `dir/name.pem` holding a self-signed certificate (CN = first name, SANs = names)
/// followed by its key, made by openssl. Returns the path and the certificate's DER.
pub fn openssl_cert(dir: &TempDir, name: &str, key: Key, names: &[&str]) -> (PathBuf, Vec<u8>) {
    assert!(
        require("openssl", "openssl"),
        "openssl is needed to make test keys"
    );
    let key_path = dir.path(&format!("{name}.key"));
    let cert_path = dir.path(&format!("{name}.crt"));
    let kp = key_path.to_str().unwrap();
    let keygen = match key {
        Key::Rsa => {
            format!("openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out {kp}")
        }
        Key::RsaPkcs1 => format!("openssl genrsa -traditional -out {kp} 2048"),
        Key::EcP256 => {
            format!("openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out {kp}")
        }
        Key::EcP256Sec1 => format!("openssl ecparam -name prime256v1 -genkey -noout -out {kp}"),
        Key::EcP384Sec1 => format!("openssl ecparam -name secp384r1 -genkey -noout -out {kp}"),
        Key::Ed25519 => format!("openssl genpkey -algorithm ED25519 -out {kp}"),
    };
    sh(&keygen);
    let san: Vec<String> = names.iter().map(|n| format!("DNS:{n}")).collect();
    sh(&format!(
        "openssl req -x509 -new -key {kp} -subj /CN={} -addext subjectAltName={} -days 30 -out {}",
        names[0],
        san.join(","),
        cert_path.display()
    ));
    let pem_path = dir.path(&format!("{name}.pem"));
    let mut pem = std::fs::read(&cert_path).unwrap();
    pem.extend(std::fs::read(&key_path).unwrap());
    std::fs::write(&pem_path, pem).unwrap();
    (pem_path, pem_der(&std::fs::read(&cert_path).unwrap()))
}

/// An ECDSA certificate made with rcgen; `expired` makes one whose validity ended in 2020.
pub fn rcgen_cert(dir: &TempDir, name: &str, names: &[&str], expired: bool) -> (PathBuf, Vec<u8>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
    if expired {
        params.not_before = rcgen::date_time_ymd(2019, 1, 1);
        params.not_after = rcgen::date_time_ymd(2020, 1, 1);
    }
    let cert = params.self_signed(&key).unwrap();
    let path = dir.path(&format!("{name}.pem"));
    std::fs::write(&path, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
    (path, cert.der().to_vec())
}

/// A certificate for localhost, 127.0.0.1 and ::1 (the self-signed default's names), made
/// once per test process in cargo's scratch directory, private as a key file should be.
pub fn test_cert() -> &'static str {
    static CERT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    CERT.get_or_init(|| {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ])
        .unwrap();
        let cert = params.self_signed(&key).unwrap();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let path = dir.join(format!("test-cert-{}.pem", std::process::id()));
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        path.to_str().unwrap().to_string()
    })
}

/// `args` with [`test_cert`] first when they name a backend but no certificate: shuck, as
/// hitch, needs one in front of a backend, and most tests do not care which. First, so that
/// it is never the default over a certificate the arguments give.
pub fn with_cert<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let backend = args
        .iter()
        .any(|a| *a == "-b" || a.starts_with("--backend") || (a.starts_with("-b") && a.len() > 2));
    let certificate = args.iter().any(|a| {
        a.ends_with(".pem")
            || a.starts_with("--pem-")
            || a.starts_with("--config")
            || a.starts_with("--acme-directory")
    });
    let mut all = Vec::with_capacity(args.len() + 1);
    if backend && !certificate {
        all.push(test_cert());
    }
    all.extend_from_slice(args);
    all
}

pub fn pem_der(pem: &[u8]) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem).unwrap().to_vec()
}

/// Runs a shell command and returns its stdout and stderr together.
/// A child's standard error, line by line, as it comes (the child must have been spawned
/// with `Stdio::piped()` for it).
pub fn capture_stderr(child: &mut std::process::Child) -> Arc<Mutex<String>> {
    let log = Arc::new(Mutex::new(String::new()));
    let stderr = child.stderr.take().expect("stderr is piped");
    let sink = log.clone();
    thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let mut l = sink.lock().unwrap();
            l.push_str(&line);
            l.push('\n');
        }
    });
    log
}

/// Waits up to `t` for `f`, looking every 5 ms; its last answer.
pub fn wait_until(t: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + t;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        thread::sleep(Duration::from_millis(5));
    }
    f()
}

/// The one child of process `pid` (a master's worker), waiting up to 10 s for there to be
/// exactly one.
pub fn only_child(pid: u32) -> u32 {
    let mut found = Vec::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            found = children_of(pid);
            found.len() == 1
        }),
        "process {pid} has children {found:?}"
    );
    found[0]
}

/// A field of /proc/PID/status (`Uid:`), the whole line.
pub fn status_field(pid: u32, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or("")
        .to_owned()
}

/// The processes whose parent is `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // The fields after the command name (which may hold spaces): state, ppid, ...
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        if rest.split_whitespace().nth(1) == Some(&pid.to_string()) {
            out.push(p);
        }
    }
    out
}

pub fn sh_out(cmd: &str) -> String {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    text
}

pub fn sh(cmd: &str) {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------- the shuck process

/// A running shuck; killed at drop if still alive.
pub struct Shuck {
    child: Child,
    log: Arc<Mutex<String>>,
    pub port: u16,
}

impl Shuck {
    /// Starts shuck on a fresh port with `args` (which should not include `-f`), waiting
    /// until it says it listens.
    pub fn start(args: &[&str]) -> Shuck {
        let port = free_port();
        let fe = format!("[127.0.0.1]:{port}");
        let mut all = vec!["-f", &fe];
        all.extend_from_slice(args);
        Self::start_raw(&all, port)
    }

    /// Starts shuck with exactly `args`; `port` is remembered for clients.
    pub fn start_raw(args: &[&str], port: u16) -> Shuck {
        Self::start_with(&[], args, port)
    }

    /// Starts shuck under a wrapper command (e.g. `prlimit --nofile=64:64`).
    pub fn start_with(wrapper: &[&str], args: &[&str], port: u16) -> Shuck {
        let mut cmd = match wrapper.split_first() {
            None => Command::new(BIN),
            Some((prog, rest)) => {
                let mut c = Command::new(prog);
                c.args(rest).arg(BIN);
                c
            }
        };
        let mut child = cmd
            .args(with_cert(args))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = capture_stderr(&mut child);
        let mut s = Shuck { child, log, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !s.log().contains("listening on") {
            if let Ok(Some(st)) = s.child.try_wait() {
                panic!("shuck exited ({st}) before listening: {}", s.log());
            }
            assert!(
                Instant::now() < deadline,
                "shuck did not start: {}",
                s.log()
            );
            thread::sleep(Duration::from_millis(20));
        }
        s
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The master process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The worker process's id (the master's one child; waits up to 10 s for it).
    pub fn worker(&self) -> u32 {
        only_child(self.pid())
    }

    /// Everything shuck logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits up to `timeout` for the log to contain `needle`.
    pub fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.log().contains(needle) {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.log().contains(needle)
    }

    /// Sends a signal (by name, e.g. "TERM") to this process, by its PID.
    pub fn signal(&self, sig: &str) {
        sh(&format!("kill -{sig} {}", self.child.id()));
    }

    /// Waits for exit up to `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            if Instant::now() > deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Shuck {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A CA, a client certificate it signs (CN=alice, O=Example) and one from another CA
/// (CN=mallory), each as a PEM file with its key, made with openssl.
pub struct ClientPki {
    pub ca: PathBuf,
    pub alice: PathBuf,
    pub mallory: PathBuf,
    _dir: TempDir,
}

impl ClientPki {
    pub fn new() -> ClientPki {
        assert!(require("openssl", "openssl"));
        let dir = TempDir::new("pki");
        let d = dir.0.display().to_string();
        for ca in ["ca", "other"] {
            sh(&format!(
                "cd {d} && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
                 -keyout {ca}.key -out {ca}.crt -days 3 -subj '/CN=Test {ca}' \
                 -addext basicConstraints=critical,CA:true -addext keyUsage=critical,keyCertSign 2>/dev/null"
            ));
        }
        std::fs::write(
            dir.path("client.ext"),
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
        )
        .unwrap();
        for (name, ca, subj) in [
            ("alice", "ca", "/CN=alice/O=Example"),
            ("mallory", "other", "/CN=mallory"),
        ] {
            sh(&format!(
                "cd {d} && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
                 -keyout {name}.key -out {name}.csr -subj '{subj}' 2>/dev/null \
                 && openssl x509 -req -in {name}.csr -CA {ca}.crt -CAkey {ca}.key -CAcreateserial \
                 -days 2 -extfile client.ext -out {name}.crt 2>/dev/null \
                 && cat {name}.crt {name}.key > {name}.pem"
            ));
        }
        ClientPki {
            ca: dir.path("ca.crt"),
            alice: dir.path("alice.pem"),
            mallory: dir.path("mallory.pem"),
            _dir: dir,
        }
    }
}

/// A daemon we started, killed by its pid (from its pid file) whatever happens.
pub struct Daemon(pub u32);

impl Daemon {
    /// Waits up to 10 s for `pidfile` to name a process.
    pub fn from_pidfile(pidfile: &std::path::Path) -> Daemon {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(p) = std::fs::read_to_string(pidfile)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                return Daemon(p);
            }
            assert!(Instant::now() < deadline, "no pid in {}", pidfile.display());
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", &self.0.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs shuck expecting it to exit by itself (bad input): status and stderr.
/// `shuck --test` with one named backend (`--named-backend=SPEC`) and `extra`, checking
/// the configuration only: its exit code and output.
pub fn test_backend(spec: &str, extra: &[&str]) -> (Option<i32>, String) {
    let backend = format!("--named-backend={spec}");
    let mut args = vec![
        "-f",
        "[127.0.0.1]:8443",
        "-b",
        "127.0.0.1:1",
        &backend,
        "--test",
    ];
    args.extend_from_slice(extra);
    run_to_exit(&with_cert(&args))
}

pub fn run_to_exit(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(BIN)
        .args(with_cert(args))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("shuck {args:?} did not exit");
        }
        thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Reads a PROXY v2 header over IPv4 from `s` and returns its TLVs as (type, value).
pub fn read_proxy_v2_tlvs(s: &mut impl Read) -> Option<Vec<(u8, Vec<u8>)>> {
    let mut head = [0u8; 16];
    s.read_exact(&mut head).ok()?;
    let len = u16::from_be_bytes([head[14], head[15]]) as usize;
    let mut rest = vec![0u8; len];
    s.read_exact(&mut rest).ok()?;
    // The IPv4 addresses and ports: 12 bytes.
    let mut tlvs = &rest[12..];
    let mut out = Vec::new();
    while tlvs.len() >= 3 {
        let (kind, l) = (tlvs[0], u16::from_be_bytes([tlvs[1], tlvs[2]]) as usize);
        out.push((kind, tlvs[3..3 + l].to_vec()));
        tlvs = &tlvs[3 + l..];
    }
    Some(out)
}

// ---------------------------------------------------------------- origins

/// Serves every connection `accept` returns with `handler`, each on a thread of its own, for
/// ever (the thread ends with the test process); returns the count of connections accepted.
pub fn serve_each<S: Send + 'static>(
    accept: impl Fn() -> io::Result<S> + Send + 'static,
    handler: impl Fn(S) + Send + Sync + 'static,
) -> Arc<AtomicUsize> {
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let handler = Arc::new(handler);
    thread::spawn(move || loop {
        let Ok(s) = accept() else { continue };
        count.fetch_add(1, Ordering::SeqCst);
        let h = handler.clone();
        thread::spawn(move || h(s));
    });
    accepted
}

/// A plain TCP origin on 127.0.0.1 serving each connection with `handler` on its own thread.
pub struct Origin {
    pub port: u16,
    /// `[127.0.0.1]:PORT`, ready for `-b`.
    pub port_spec: String,
    pub accepted: Arc<AtomicUsize>,
}

impl Origin {
    pub fn start<F>(handler: F) -> Origin
    where
        F: Fn(TcpStream) + Send + Sync + 'static,
    {
        let l = fresh_listener();
        let port = l.local_addr().unwrap().port();
        let accepted = serve_each(move || l.accept().map(|(s, _)| s), handler);
        Origin {
            port,
            port_spec: format!("[127.0.0.1]:{port}"),
            accepted,
        }
    }

    /// Echoes every byte; on end of stream, shuts its write side.
    pub fn echo() -> Origin {
        Self::start(|mut s| {
            let mut buf = [0u8; 65536];
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if s.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = s.shutdown(Shutdown::Write);
        })
    }

    /// Answers each HTTP request head with `200` and `body` (keep-alive).
    pub fn http(body: &'static str) -> Origin {
        Self::start(move |s| {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut w = s;
            loop {
                let mut line = String::new();
                let mut got = false;
                loop {
                    line.clear();
                    match r.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    if line == "\r\n" && got {
                        break;
                    }
                    got = true;
                }
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{}",
                    body.len(),
                    body
                );
                if w.write_all(resp.as_bytes()).is_err() {
                    return;
                }
            }
        })
    }

    pub fn addr(&self) -> String {
        format!("[127.0.0.1]:{}", self.port)
    }
}

/// nghttpd (Debian's nghttp2-server) serving `dir` in clear (h2c) on a fresh port, its
/// uploads echoed back, with the address it answers on (`127.0.0.1:PORT` or `[::1]:PORT`);
/// `None` when it cannot be had outside CI.
///
/// nghttpd binds what `getaddrinfo(AI_ADDRCONFIG)` gives: on a host whose only configured
/// address beyond loopback is IPv6 that is `[::]` alone (IPv6-only), so 127.0.0.1 is never
/// answered, and `--address 127.0.0.1` is refused outright. Both loopbacks are tried.
pub fn nghttpd(dir: &TempDir) -> Option<(Proc, String)> {
    if !require("nghttpd", "nghttp2-server") {
        return None;
    }
    // A fresh port can be taken by another test between free_port and nghttpd's bind: one
    // that exits at once is started again on another, three times at most.
    let mut tried = Vec::new();
    for _ in 0..3 {
        let port = free_port();
        let err = dir.path(&format!("nghttpd-{port}.err"));
        let child = Command::new("nghttpd")
            .args(["--no-tls", "--echo-upload", "-d"])
            .arg(&dir.0)
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let mut p = Proc(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            for addr in [format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
                if TcpStream::connect(addr.as_str()).is_ok() {
                    return Some((p, addr));
                }
            }
            if let Ok(Some(status)) = p.0.try_wait() {
                tried.push(format!(
                    "port {port}: exited ({status}): {}",
                    std::fs::read_to_string(&err).unwrap_or_default()
                ));
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if Instant::now() >= deadline {
            tried.push(format!(
                "port {port}: nothing answered on 127.0.0.1 or [::1] in 10 s; listening: {}",
                sh_out("ss -ltnH")
            ));
        }
    }
    panic!("nghttpd did not start: {tried:#?}");
}

/// Reads one HTTP/1.1 head, up to and including its blank line; `None` at end of stream.
pub fn read_http_head(r: &mut impl BufRead) -> Option<String> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
        head.push_str(&line);
        if line == "\r\n" {
            return Some(head);
        }
    }
}

/// An origin that can be stopped: its port then refuses connections.
pub struct StoppableOrigin {
    pub port: u16,
    pub port_spec: String,
    stop: Arc<std::sync::atomic::AtomicBool>,
    pub accepted: Arc<AtomicUsize>,
}

impl StoppableOrigin {
    /// An echo origin.
    pub fn echo() -> StoppableOrigin {
        let l = fresh_listener();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (st, acc) = (stop.clone(), accepted.clone());
        thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                match l.accept() {
                    Ok((mut s, _)) => {
                        acc.fetch_add(1, Ordering::SeqCst);
                        s.set_nonblocking(false).unwrap();
                        thread::spawn(move || {
                            let mut buf = [0u8; 16384];
                            while let Ok(n) = s.read(&mut buf) {
                                if n == 0 || s.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        });
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        StoppableOrigin {
            port,
            port_spec: format!("[127.0.0.1]:{port}"),
            stop,
            accepted,
        }
    }

    /// Stops listening (within a few milliseconds).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(2);
        while TcpStream::connect(("127.0.0.1", self.port)).is_ok() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for StoppableOrigin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------- a rustls client

/// What a test client asks for.
#[derive(Clone, Default)]
pub struct ClientOpts {
    /// `None`: both; `Some(12)` or `Some(13)`: only that version.
    pub version: Option<u8>,
    pub sni: Option<String>,
    pub alpn: Vec<Vec<u8>>,
    /// Restrict to these cipher suites.
    pub suites: Option<Vec<rustls::CipherSuite>>,
    /// TLS 1.2 resumption by session ID only (no tickets).
    pub session_id_only: bool,
    /// No resumption at all: every handshake is full.
    pub no_resumption: bool,
    /// Present this client certificate (a PEM file with the chain and its key).
    pub client_pem: Option<PathBuf>,
    /// Offer only these signature algorithms.
    pub sig_schemes: Option<Vec<SignatureScheme>>,
}

pub type Client = StreamOwned<ClientConnection, TcpStream>;

/// Connects and completes a TLS handshake with shuck at `addr`, with a new client
/// configuration (so no session is resumed).
pub fn tls_connect(addr: SocketAddr, opts: &ClientOpts) -> Result<Client, io::Error> {
    connect_with(addr, &client_config(opts), opts.sni.as_deref())
}

/// A client configuration; connections made with the same one resume sessions.
pub fn client_config(opts: &ClientOpts) -> Arc<ClientConfig> {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    });
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if let Some(s) = &opts.suites {
        provider.cipher_suites.retain(|c| s.contains(&c.suite()));
    }
    let provider = Arc::new(provider);
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = match opts.version {
        Some(12) => vec![&rustls::version::TLS12],
        Some(13) => vec![&rustls::version::TLS13],
        _ => vec![&rustls::version::TLS13, &rustls::version::TLS12],
    };
    let cfg = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate::offering(
            provider,
            opts.sig_schemes.clone(),
        )));
    let mut cfg = match &opts.client_pem {
        None => cfg.with_no_client_auth(),
        Some(pem) => {
            use rustls::pki_types::pem::PemObject;
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(pem)
                .unwrap()
                .map(|c| c.unwrap())
                .collect();
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(pem).unwrap();
            cfg.with_client_auth_cert(chain, key).unwrap()
        }
    };
    cfg.alpn_protocols = opts.alpn.clone();
    cfg.enable_sni = opts.sni.is_some();
    if opts.session_id_only {
        cfg.resumption = rustls::client::Resumption::in_memory_sessions(256)
            .tls12_resumption(rustls::client::Tls12Resumption::SessionIdOnly);
    }
    if opts.no_resumption {
        cfg.resumption = rustls::client::Resumption::disabled();
    }
    Arc::new(cfg)
}

/// Connects with an existing client configuration (resuming when it holds a session).
pub fn connect_with(
    addr: SocketAddr,
    cfg: &Arc<ClientConfig>,
    sni: Option<&str>,
) -> Result<Client, io::Error> {
    tls_over(TcpStream::connect(addr)?, cfg, sni)
}

/// Runs a TLS handshake over an already connected socket (after a PROXY header, say).
pub fn tls_over(
    sock: TcpStream,
    cfg: &Arc<ClientConfig>,
    sni: Option<&str>,
) -> Result<Client, io::Error> {
    let name = ServerName::try_from(sni.unwrap_or("localhost").to_owned())
        .map_err(|e| io::Error::other(e.to_string()))?;
    let conn = ClientConnection::new(cfg.clone(), name).map_err(io::Error::other)?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut s = StreamOwned::new(conn, sock);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

/// Sends a line through an echo backend and reads it back: proves the relay works and
/// makes the client read any session tickets sent after the handshake.
pub fn echo_roundtrip(c: &mut Client) {
    c.write_all(b"ping through shuck\n").unwrap();
    let mut buf = [0u8; 19];
    c.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping through shuck\n");
}

/// True when the handshake resumed a session.
pub fn resumed(c: &Client) -> bool {
    c.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
}

/// The leaf certificate shuck served.
pub fn served_cert(c: &Client) -> Vec<u8> {
    c.conn.peer_certificates().unwrap()[0].to_vec()
}

/// Reads until end of stream (close_notify), returning what came.
pub fn read_all(c: &mut Client) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    c.read_to_end(&mut out)?;
    Ok(out)
}

/// Raises this test process's soft limit on open descriptors to `want` (or to the hard
/// limit, if lower), for tests that hold many sockets at once.
pub fn raise_fd_limit(want: u64) {
    let (soft, hard) = rlimit::Resource::NOFILE.get().expect("getrlimit NOFILE");
    let target = want.min(hard);
    if soft < target {
        rlimit::Resource::NOFILE
            .set(target, hard)
            .expect("setrlimit NOFILE");
    }
    assert!(
        target >= want,
        "the hard limit on descriptors is {hard}, this test needs {want}"
    );
}

// ---------------------------------------------------------------- redis-server

/// A redis-server of the test's own (Debian's `redis-server`, installed when missing), no
/// persistence, killed at drop. `restart` brings it back on the same port, empty.
pub struct Redis {
    child: Option<Child>,
    /// The address it listens on.
    pub addr: SocketAddr,
    args: Vec<String>,
    _dir: TempDir,
}

impl Redis {
    /// Plain TCP on `ip` (a free port), with `extra` arguments (e.g. `--requirepass`).
    pub fn start(ip: &str, extra: &[&str]) -> Option<Redis> {
        let port = free_port();
        let mut args: Vec<String> = vec!["--port".into(), port.to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::start_args(ip, port, args)
    }

    /// TLS only (`tls-port`), with the server's certificate and key, on 127.0.0.1.
    pub fn start_tls(
        cert: &std::path::Path,
        key: &std::path::Path,
        ca: &std::path::Path,
        extra: &[&str],
    ) -> Option<Redis> {
        let port = free_port();
        let p = |p: &std::path::Path| p.to_str().unwrap().to_owned();
        let args = vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            p(cert),
            "--tls-key-file".into(),
            p(key),
            "--tls-ca-cert-file".into(),
            p(ca),
            "--tls-auth-clients".into(),
            "no".into(),
        ];
        let args = args
            .into_iter()
            .chain(extra.iter().map(|s| s.to_string()))
            .collect();
        Self::start_args("127.0.0.1", port, args)
    }

    fn start_args(ip: &str, port: u16, mut args: Vec<String>) -> Option<Redis> {
        if !require("redis-server", "redis-server") {
            return None;
        }
        let dir = TempDir::new("redis");
        args.extend(
            [
                "--bind",
                ip,
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                "--dir",
                dir.0.to_str().unwrap(),
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        let addr = SocketAddr::new(ip.parse().unwrap(), port);
        let mut r = Redis {
            child: None,
            addr,
            args,
            _dir: dir,
        };
        r.restart();
        Some(r)
    }

    /// Starts it again (after [`Redis::kill`]), empty, on the same port.
    pub fn restart(&mut self) {
        self.kill();
        let child = Command::new("redis-server")
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(self.addr).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills it outright (SIGKILL): what it held is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Its redis:// URL.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// One command through redis-cli (shipped with the server); its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args([
                "-h",
                &self.addr.ip().to_string(),
                "-p",
                &self.addr.port().to_string(),
            ])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------- --stats

/// GET `path` from a `--stats` port on 127.0.0.1: the head and the body.
pub fn scrape(port: u16, path: &str) -> (String, String) {
    scrape_at(&format!("127.0.0.1:{port}"), path)
}

/// As [`scrape`], from `--stats` at `addr` (a host in a network namespace).
pub fn scrape_at(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    (head.to_owned(), body.to_owned())
}

/// The value of the sample whose line starts with `series` (name and labels).
pub fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no sample {series} in:\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

/// The system calls process `pid` (all its threads) makes while `work` runs, as `strace -c`
/// prints them; read them with [`syscalls`].
pub fn strace_during(pid: u32, work: impl FnOnce()) -> String {
    let dir = TempDir::new("strace");
    let out = dir.path("strace.txt");
    let mut strace = Command::new("strace")
        .args(["-f", "-c", "-o"])
        .arg(&out)
        .args(["-p", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("strace runs");
    // strace says nothing once attached: give it time.
    thread::sleep(Duration::from_millis(700));
    work();
    // Let the last connection's close reach the process.
    thread::sleep(Duration::from_millis(300));
    sh(&format!("kill -INT {}", strace.id()));
    strace.wait().expect("strace ends");
    std::fs::read_to_string(&out).expect("strace wrote its summary")
}

/// How many `name` calls a `strace -c` summary counts.
pub fn syscalls(summary: &str, name: &str) -> u64 {
    summary
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 5 && f.last() == Some(&name)).then(|| f[3].parse::<u64>().ok())?
        })
        .sum()
}

/// `len` bytes of a pseudo-random pattern that `seed` tells apart from others.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// An origin that reads each connection to its end of stream, keeps what came (the
/// returned cell), then answers `reply` and closes.
pub fn answering_after_eof(reply: Vec<u8>) -> (Origin, Arc<Mutex<Vec<u8>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let got = received.clone();
    let origin = Origin::start(move |mut s| {
        let mut data = Vec::new();
        s.read_to_end(&mut data).unwrap();
        *got.lock().unwrap() = data;
        s.write_all(&reply).unwrap();
    });
    (origin, received)
}

/// Through shuck at `addr` in TLS 1.`version`: writes `sent`, then close_notify and a FIN,
/// and returns everything that came back before the server's close_notify.
pub fn send_all_then_close(addr: SocketAddr, version: u8, sent: &[u8]) -> Vec<u8> {
    let mut c = tls_connect(
        addr,
        &ClientOpts {
            version: Some(version),
            ..Default::default()
        },
    )
    .unwrap();
    c.write_all(sent).unwrap();
    c.conn.send_close_notify();
    c.flush().unwrap();
    c.sock.shutdown(Shutdown::Write).unwrap();
    read_all(&mut c).unwrap()
}

/// A megabyte each way in TLS 1.2 and 1.3, the client closing first: the origin answers
/// only after the client's end of stream, so the client's close_notify must reach it as a
/// FIN while the other direction stays open. `serve` starts shuck in front of the origin.
pub fn check_megabyte_each_way_client_closing_first(serve: impl FnOnce(&Origin) -> Shuck) {
    let reply = pattern(1 << 20, 2);
    let (origin, received) = answering_after_eof(reply.clone());
    let shuck = serve(&origin);
    for v in [12, 13] {
        let sent = pattern(1 << 20, v);
        let back = send_all_then_close(shuck.addr(), v as u8, &sent);
        assert!(
            back == reply,
            "TLS1.{v}: reply differs ({} bytes)",
            back.len()
        );
        assert!(
            *received.lock().unwrap() == sent,
            "TLS1.{v}: request differs"
        );
    }
}
/// shuck-bench, next to shuck; built when this test runs alone.
pub fn bench_bin() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_BIN_EXE_shuck")).with_file_name("shuck-bench");
    if !p.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "-p", "shuck-bench"])
            .status()
            .unwrap();
        assert!(st.success(), "cannot build shuck-bench");
    }
    p
}

pub fn sh_status(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", cmd])
        .status()
        .is_ok_and(|s| s.success())
}

/// A process killed (and reaped) when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// shuck-bench's HTTP origin on a free port.
pub fn bench_origin() -> (Proc, u16) {
    let port = free_port();
    (bench_origin_at(port), port)
}

/// shuck-bench's HTTP origin on `port` (again, after it was stopped).
pub fn bench_origin_at(port: u16) -> Proc {
    let child = Command::new(bench_bin())
        .args(["origin", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let p = Proc(child);
    wait_listening(port, "the origin");
    p
}

// ---------------------------------------------------------------- memory

/// The worker's resident memory in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_field(pid, "VmRSS")
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Samples a process's resident memory every 50 ms until dropped; keeps the largest.
pub struct RssWatch {
    max: Arc<std::sync::atomic::AtomicU64>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl RssWatch {
    pub fn start(pid: u32) -> RssWatch {
        let max = Arc::new(std::sync::atomic::AtomicU64::new(rss_kib(pid)));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (m, s) = (max.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                m.fetch_max(rss_kib(pid), std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        RssWatch { max, stop }
    }
    pub fn max_kib(&self) -> u64 {
        self.max.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for RssWatch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// nginx serving the files of `www` (HTML and PNG) on 127.0.0.1, each request logged to
/// `dir`'s `access.log` as the client's `X-Forwarded-For|X-Forwarded-Proto|request line`;
/// the port it listens on.
pub fn static_nginx(dir: &TempDir, www: &std::path::Path) -> (Proc, u16) {
    let port = free_port();
    let d = dir.0.display();
    let cfg = dir.path("nginx.conf");
    std::fs::write(
        &cfg,
        format!(
            "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\n\
             http {{ log_format fwd '$http_x_forwarded_for|$http_x_forwarded_proto|$request';\n\
             access_log {d}/access.log fwd;\n\
             client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n\
             types {{ text/html html; image/png png; }}\n\
             server {{ listen 127.0.0.1:{port}; root {www}; }} }}\n",
            www = www.display()
        ),
    )
    .unwrap();
    let nginx = Command::new("nginx")
        .args(["-c", cfg.to_str().unwrap(), "-e", &format!("{d}/error.log")])
        .spawn()
        .unwrap();
    let nginx = Proc(nginx);
    wait_listening(port, "nginx");
    (nginx, port)
}

/// The SPKI pin Chromium is told to trust (base64 of the SHA-256 of the key's
/// SubjectPublicKeyInfo), from a certificate's PEM file.
pub fn spki_pin(pem: &str) -> String {
    sh_out(&format!(
        "openssl x509 -in {pem} -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64"
    ))
    .trim()
    .to_owned()
}

/// The first JSON line of the access log at `log` that `pick` takes, waited for up to 5 s
/// (a request's line may come a moment after its answer).
pub fn log_line(
    log: &std::path::Path,
    pick: impl Fn(&serde_json::Value) -> bool,
) -> Option<serde_json::Value> {
    let mut found = None;
    wait_until(Duration::from_secs(5), || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        found = (text.lines())
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| pick(v));
        found.is_some()
    });
    found
}
