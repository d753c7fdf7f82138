//! Let's Encrypt's ACME test server, Debian's `pebble`, with its test DNS
//! `pebble-challtestsrv`: every name resolves to the address given, and pebble validates
//! by connecting there, to the ports given (tls-alpn-01 and http-01). Its HTTPS
//! certificate is made here with openssl; its root (which signs what it issues) is new at
//! each start and read from its management API.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::{capture_stderr, free_port, require, sh, TempDir};

/// A running pebble and its DNS; both killed at drop.
pub struct Pebble {
    pebble: Option<Child>,
    dns: Option<Child>,
    log: Arc<Mutex<String>>,
    dir: TempDir,
    /// Where it listens (the directory URL's host).
    pub ip: String,
    /// Its ACME port.
    pub port: u16,
    /// Its management port.
    pub mgmt: u16,
    dns_port: u16,
    env: Vec<(String, String)>,
}

/// How pebble validates and issues.
pub struct PebbleOpts<'a> {
    /// Where pebble listens (ACME and management).
    pub listen: &'a str,
    /// What every name resolves to.
    pub answer: &'a str,
    /// The port tls-alpn-01 is checked on.
    pub tls_port: u16,
    /// The port http-01 is checked on.
    pub http_port: u16,
    /// Lifetime of the certificates issued, in seconds.
    pub validity: u64,
    /// Most seconds pebble waits, at random, before it validates (0: none).
    pub va_sleep: u32,
    /// External account binding required, with this key id and HMAC key (base64url).
    pub eab: Option<(&'a str, &'a str)>,
    /// The OCSP responder named in the certificates issued (none: no AIA OCSP URL).
    pub ocsp_url: Option<&'a str>,
}

impl PebbleOpts<'static> {
    /// Pebble on 127.0.0.1, every name resolving there, checking tls-alpn-01 on
    /// `tls_port`; an hour of validity, no sleep before validating, no account binding.
    pub fn local(tls_port: u16) -> Self {
        PebbleOpts {
            listen: "127.0.0.1",
            answer: "127.0.0.1",
            tls_port,
            http_port: free_port(),
            validity: 3600,
            va_sleep: 0,
            eab: None,
            ocsp_url: None,
        }
    }
}

impl Pebble {
    /// Starts pebble and its DNS (installing Debian's `pebble` when missing); `None` when
    /// it cannot be had (a SKIP, or a failure under CI).
    pub fn start(o: &PebbleOpts<'_>) -> Option<Pebble> {
        if !require("pebble", "pebble") || !require("pebble-challtestsrv", "pebble") {
            return None;
        }
        let dir = TempDir::new("pebble");
        let p = |n: &str| dir.path(n).to_str().unwrap().to_owned();
        sh(&format!(
            "cd {d} && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 30 -subj '/CN=pebble https test CA' 2>/dev/null \
             && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout https.key -out https.csr -subj '/CN=pebble' 2>/dev/null \
             && printf 'subjectAltName=DNS:localhost,IP:{ip}\\n' > ext.cnf \
             && openssl x509 -req -in https.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out https.pem -days 30 -extfile ext.cnf 2>/dev/null",
            d = dir.0.display(),
            ip = o.listen
        ));
        let (port, mgmt, dns_port) = (free_port(), free_port(), free_port());
        std::fs::write(
            dir.path("pebble.json"),
            serde_json::json!({ "pebble": {
                "listenAddress": format!("{}:{port}", o.listen),
                "managementListenAddress": format!("{}:{mgmt}", o.listen),
                "certificate": p("https.pem"),
                "privateKey": p("https.key"),
                "httpPort": o.http_port,
                "tlsPort": o.tls_port,
                "ocspResponderURL": o.ocsp_url.unwrap_or(""),
                "externalAccountBindingRequired": o.eab.is_some(),
                "externalAccountMACKeys": o.eab.map(|(kid, key)| serde_json::json!({ kid: key })).unwrap_or(serde_json::json!({})),
                "certificateValidityPeriod": o.validity,
            }})
            .to_string(),
        )
        .unwrap();
        let dns = Command::new("pebble-challtestsrv")
            .args([
                "-defaultIPv4",
                o.answer,
                "-defaultIPv6",
                "",
                "-dns01",
                &format!("{}:{dns_port}", o.listen),
                "-http01",
                "",
                "-https01",
                "",
                "-tlsalpn01",
                "",
                "-management",
                &format!("{}:{}", o.listen, free_port()),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut pb = Pebble {
            pebble: None,
            dns: Some(dns),
            log: Arc::new(Mutex::new(String::new())),
            dir,
            ip: o.listen.to_owned(),
            port,
            mgmt,
            dns_port,
            env: vec![
                if o.va_sleep == 0 {
                    ("PEBBLE_VA_NOSLEEP".into(), "1".into())
                } else {
                    ("PEBBLE_VA_SLEEPTIME".into(), o.va_sleep.to_string())
                },
                ("PEBBLE_WFE_NONCEREJECT".into(), "0".into()),
                ("PEBBLE_AUTHZREUSE".into(), "0".into()),
            ],
        };
        pb.restart();
        Some(pb)
    }

    /// Starts pebble again (after [`Pebble::kill`]): a new root, no account, no order.
    pub fn restart(&mut self) {
        self.kill();
        let mut cmd = Command::new("pebble");
        cmd.args([
            "-config",
            self.dir.path("pebble.json").to_str().unwrap(),
            "-dnsserver",
            &format!("{}:{}", self.ip, self.dns_port),
        ]);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Pebble logs to standard output.
        let out = child.stdout.take().unwrap();
        let log = self.log.clone();
        thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let mut l = log.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let _ = capture_stderr(&mut child);
        self.pebble = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect((self.ip.as_str(), self.port)).is_err()
            || TcpStream::connect((self.ip.as_str(), self.mgmt)).is_err()
        {
            assert!(
                Instant::now() < deadline,
                "pebble did not start: {}",
                self.log()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills pebble outright (its DNS stays).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.pebble.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The directory URL.
    pub fn directory(&self) -> String {
        format!("https://{}:{}/dir", self.ip, self.port)
    }

    /// The CA file for `--acme-ca-file` (the root of pebble's own HTTPS certificate).
    pub fn https_ca(&self) -> PathBuf {
        self.dir.path("ca.pem")
    }

    /// The root pebble issues under (from its management API), written to a file.
    pub fn issuing_root(&self) -> PathBuf {
        let path = self.dir.path("issuing-root.pem");
        sh(&format!(
            "curl -sf --cacert {} https://{}:{}/roots/0 -o {}",
            self.https_ca().display(),
            self.ip,
            self.mgmt,
            path.display()
        ));
        path
    }

    /// Orders pebble has received since it started.
    pub fn orders(&self) -> usize {
        self.log().matches("Added order").count()
    }

    /// What pebble logged since it (re)started first.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        self.kill();
        if let Some(mut c) = self.dns.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
