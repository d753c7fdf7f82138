//! `shuck-bench load`: the TLS load generator. Its own client on rustls: each session is a
//! TCP connect, a handshake (resumed or not, as asked), some keep-alive requests, a
//! close_notify and a close; closed loop (`--concurrency` sessions at all times) or open loop
//! (`--rate` new sessions per second attempted, whatever the server does).

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{Resumption, Tls12Resumption};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::size::{format_size, parse_size};
use crate::stats::{Failure, Stats};

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
            self.tls.as_deref().unwrap_or("any"),
            self.cipher
                .as_deref()
                .map(|c| format!(", {c}"))
                .unwrap_or_default()
        )
    }
}

/// Accepts any certificate but checks handshake signatures: a benchmark client that skips
/// path building, as the seeds' load generators did.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The two client configurations a run uses: one that keeps sessions, one that never does.
#[derive(Clone)]
struct Clients {
    resuming: TlsConnector,
    fresh: TlsConnector,
    name: ServerName<'static>,
}

fn clients(o: &LoadOpts) -> anyhow::Result<Clients> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if let Some(c) = &o.cipher {
        let wanted = shuck::tls::params::parse_tls12_ciphers(c)
            .or_else(|_| shuck::tls::params::parse_tls13_suites(c))
            .or_else(|_| {
                provider
                    .cipher_suites
                    .iter()
                    .find(|s| format!("{:?}", s.suite()).eq_ignore_ascii_case(c))
                    .map(|s| vec![*s])
                    .ok_or_else(|| anyhow::anyhow!("unknown cipher {c:?}"))
            })?;
        provider
            .cipher_suites
            .retain(|s| wanted.iter().any(|w| w.suite() == s.suite()));
    }
    let provider = Arc::new(provider);
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = match o.tls.as_deref() {
        Some("1.2") => vec![&rustls::version::TLS12],
        Some("1.3") => vec![&rustls::version::TLS13],
        _ => vec![&rustls::version::TLS13, &rustls::version::TLS12],
    };
    let make = |resumption: Resumption| -> anyhow::Result<TlsConnector> {
        let mut cfg = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .context("cipher and TLS version do not fit together")?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert(provider.clone())))
            .with_no_client_auth();
        cfg.resumption = resumption;
        Ok(TlsConnector::from(Arc::new(cfg)))
    };
    let tls12 = match o.resume_by {
        ResumeBy::Ticket => Tls12Resumption::SessionIdOrTickets,
        ResumeBy::Id => Tls12Resumption::SessionIdOnly,
    };
    let store = Arc::new(crate::sessions::DeepStore::default());
    Ok(Clients {
        resuming: make(Resumption::store(store).tls12_resumption(tls12))?,
        fresh: make(Resumption::disabled())?,
        name: ServerName::try_from(o.sni.clone()).context("--sni is not a valid server name")?,
    })
}

/// Runs a load as `opts` says and returns its counts. `progress` is bumped per session.
pub fn run(opts: &LoadOpts, progress: Option<Arc<AtomicU64>>) -> anyhow::Result<Stats> {
    let clients = clients(opts)?;
    if let Some(kt) = opts.key_type {
        check_key_type(opts, &clients, kt)?;
    }
    let threads = opts.threads.max(1);
    let seq = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let mut o = opts.clone();
            o.concurrency = share(opts.concurrency, threads, i);
            o.rate = opts.rate.map(|r| r / threads as f64);
            o.max_in_flight = share(opts.max_in_flight, threads, i).max(1);
            let (c, seq, progress) = (clients.clone(), seq.clone(), progress.clone());
            std::thread::spawn(move || -> anyhow::Result<Stats> {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let local = tokio::task::LocalSet::new();
                let stats = Stats::new()?;
                Ok(local.block_on(&rt, run_thread(o, c, seq, progress, stats)))
            })
        })
        .collect();
    let mut total = Stats::new()?;
    for h in handles {
        let s = h
            .join()
            .map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
        total.merge(&s);
    }
    Ok(total)
}

fn share(n: usize, parts: usize, i: usize) -> usize {
    n / parts + usize::from(i < n % parts)
}

fn check_key_type(o: &LoadOpts, c: &Clients, want: KeyType) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let der = rt
        .block_on(async {
            let tcp = TcpStream::connect(o.target).await?;
            let tls = c.fresh.connect(c.name.clone(), tcp).await?;
            let cert = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.to_vec());
            cert.ok_or_else(|| io::Error::other("no certificate"))
        })
        .with_context(|| format!("cannot reach {} to check its key type", o.target))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| anyhow::anyhow!("bad certificate: {e}"))?;
    let spki = cert.public_key();
    let found = match spki.parsed() {
        Ok(x509_parser::public_key::PublicKey::RSA(k)) => match k.key_size() {
            2048 => Some(KeyType::Rsa2048),
            3072 => Some(KeyType::Rsa3072),
            4096 => Some(KeyType::Rsa4096),
            _ => None,
        },
        Ok(x509_parser::public_key::PublicKey::EC(p)) if p.key_size() == 256 => {
            Some(KeyType::EcdsaP256)
        }
        _ => None,
    };
    if found != Some(want) {
        bail!("the target's certificate key is {found:?}, not {want:?} as --key-type says");
    }
    Ok(())
}

async fn run_thread(
    o: LoadOpts,
    c: Clients,
    seq: Arc<AtomicU64>,
    progress: Option<Arc<AtomicU64>>,
    stats: Stats,
) -> Stats {
    let stats = Rc::new(RefCell::new(stats));
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(o.duration);
    let o = Rc::new(o);
    match o.rate {
        None => {
            let mut tasks = Vec::new();
            for _ in 0..o.concurrency {
                let (o, c, stats, seq, progress) = (
                    o.clone(),
                    c.clone(),
                    stats.clone(),
                    seq.clone(),
                    progress.clone(),
                );
                tasks.push(tokio::task::spawn_local(async move {
                    while Instant::now() < deadline {
                        one(&o, &c, &stats, &seq).await;
                        if let Some(p) = &progress {
                            p.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
        }
        Some(rate) => {
            let in_flight = Rc::new(std::cell::Cell::new(0usize));
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.001)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut tasks = Vec::new();
            while Instant::now() < deadline {
                tick.tick().await;
                if in_flight.get() >= o.max_in_flight {
                    let mut s = stats.borrow_mut();
                    s.attempted += 1;
                    s.fail(Failure::ClientOverload);
                    continue;
                }
                in_flight.set(in_flight.get() + 1);
                let (o, c, stats, seq, progress, in_flight) = (
                    o.clone(),
                    c.clone(),
                    stats.clone(),
                    seq.clone(),
                    progress.clone(),
                    in_flight.clone(),
                );
                tasks.push(tokio::task::spawn_local(async move {
                    one(&o, &c, &stats, &seq).await;
                    in_flight.set(in_flight.get() - 1);
                    if let Some(p) = &progress {
                        p.fetch_add(1, Ordering::Relaxed);
                    }
                }));
                if tasks.len() > 4096 {
                    tasks.retain(|t: &tokio::task::JoinHandle<()>| !t.is_finished());
                }
            }
            for t in tasks {
                let _ = t.await;
            }
        }
    }
    let mut s = stats.borrow().clone();
    s.elapsed = start.elapsed();
    s
}

/// One session: connect, handshake, requests, close. Counts into `stats`.
async fn one(o: &LoadOpts, c: &Clients, stats: &RefCell<Stats>, seq: &AtomicU64) {
    let n = seq.fetch_add(1, Ordering::Relaxed);
    let connector = match o.reuse {
        Reuse::Never => &c.fresh,
        Reuse::Always => &c.resuming,
        Reuse::Every(k) => {
            if n % u64::from(k) == 0 {
                &c.resuming
            } else {
                &c.fresh
            }
        }
    };
    stats.borrow_mut().attempted += 1;
    let timeout = Duration::from_secs_f64(o.timeout);
    let t0 = Instant::now();
    let result = session(o, connector, &c.name, timeout, stats, t0).await;
    let mut s = stats.borrow_mut();
    match result {
        Ok(resumed) => {
            s.completed += 1;
            s.resumed += u64::from(resumed);
            Stats::record(&mut s.session_us, t0.elapsed());
        }
        Err(f) => s.fail(f),
    }
}

async fn session(
    o: &LoadOpts,
    connector: &TlsConnector,
    name: &ServerName<'static>,
    timeout: Duration,
    stats: &RefCell<Stats>,
    t0: Instant,
) -> Result<bool, Failure> {
    let tcp = match tokio::time::timeout(timeout, TcpStream::connect(o.target)).await {
        Err(_) => return Err(Failure::Timeout),
        Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
            return Err(Failure::ConnectRefused)
        }
        Ok(Err(_)) => return Err(Failure::ConnectError),
        Ok(Ok(s)) => s,
    };
    let _ = tcp.set_nodelay(true);
    let mut tls = match tokio::time::timeout(timeout, connector.connect(name.clone(), tcp)).await {
        Err(_) => return Err(Failure::Timeout),
        Ok(Err(e)) => return Err(classify_tls(&e)),
        Ok(Ok(s)) => s,
    };
    Stats::record(&mut stats.borrow_mut().handshake_us, t0.elapsed());
    let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    let request = format!(
        "GET /{} HTTP/1.1\r\nHost: {}\r\n\r\n",
        format_size(o.size),
        o.sni
    );
    let mut buf = vec![0u8; 16 * 1024];
    let mut filled = 0usize;
    for _ in 0..o.requests_per_conn {
        let t = Instant::now();
        let fut = async {
            tls.write_all(request.as_bytes())
                .await
                .map_err(|_| Failure::Io)?;
            read_response(&mut tls, &mut buf, &mut filled, o.size).await
        };
        match tokio::time::timeout(timeout, fut).await {
            Err(_) => return Err(Failure::Timeout),
            Ok(Err(f)) => return Err(f),
            Ok(Ok(())) => {}
        }
        let mut s = stats.borrow_mut();
        s.requests += 1;
        Stats::record(&mut s.request_us, t.elapsed());
    }
    let _ = tokio::time::timeout(Duration::from_millis(100), tls.shutdown()).await;
    Ok(resumed)
}

fn classify_tls(e: &io::Error) -> Failure {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::AlertReceived(_)) => Failure::TlsAlert,
        Some(_) => Failure::TlsError,
        None if e.kind() == io::ErrorKind::TimedOut => Failure::Timeout,
        None => Failure::Io,
    }
}

/// Reads one response: a `200` head and exactly `size` body bytes. Bytes after it stay in
/// `buf` (there should be none: requests are not pipelined).
async fn read_response<S: tokio::io::AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut [u8],
    filled: &mut usize,
    size: usize,
) -> Result<(), Failure> {
    let head_end = loop {
        if let Some(i) = buf[..*filled].windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if *filled == buf.len() {
            return Err(Failure::BadResponse);
        }
        let n = s.read(&mut buf[*filled..]).await.map_err(|_| Failure::Io)?;
        if n == 0 {
            return Err(Failure::Io);
        }
        *filled += n;
    };
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(&buf[..head_end]) {
        Ok(httparse::Status::Complete(_)) if resp.code == Some(200) => {}
        _ => return Err(Failure::BadResponse),
    }
    let len: usize = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
        .ok_or(Failure::BadResponse)?;
    if len != size {
        return Err(Failure::BadResponse);
    }
    let have = *filled - head_end;
    if have >= len {
        buf.copy_within(head_end + len..*filled, 0);
        *filled = have - len;
        return Ok(());
    }
    let mut left = len - have;
    *filled = 0;
    while left > 0 {
        let n = s.read(buf).await.map_err(|_| Failure::Io)?;
        if n == 0 {
            return Err(Failure::Io);
        }
        if n > left {
            return Err(Failure::BadResponse);
        }
        left -= n;
    }
    Ok(())
}

/// Established TLS sessions kept idle (for memory measurements); closed when dropped.
pub struct IdleSessions {
    // Field order matters: the streams go before the runtime that drives them.
    streams: Vec<tokio_rustls::client::TlsStream<TcpStream>>,
    failed: usize,
    _rt: tokio::runtime::Runtime,
}

impl IdleSessions {
    /// Sessions established.
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// True when none was established.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// Sessions that failed to establish.
    pub fn failed(&self) -> usize {
        self.failed
    }
}

/// Opens `count` TLS sessions to the target (full handshakes, `parallel` at a time) and
/// keeps them open and idle.
pub fn open_idle(o: &LoadOpts, count: usize, parallel: usize) -> anyhow::Result<IdleSessions> {
    let c = clients(o)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let timeout = Duration::from_secs_f64(o.timeout);
    let target = o.target;
    let (streams, failed) = rt.block_on(async {
        let next = Rc::new(std::cell::Cell::new(0usize));
        let local = tokio::task::LocalSet::new();
        let mut tasks = Vec::new();
        for _ in 0..parallel.max(1) {
            let (c, next) = (c.clone(), next.clone());
            tasks.push(local.spawn_local(async move {
                let mut mine = Vec::new();
                let mut failed = 0usize;
                while next.get() < count {
                    next.set(next.get() + 1);
                    let r = async {
                        let tcp = TcpStream::connect(target).await?;
                        c.fresh.connect(c.name.clone(), tcp).await
                    };
                    match tokio::time::timeout(timeout, r).await {
                        Ok(Ok(s)) => mine.push(s),
                        _ => failed += 1,
                    }
                }
                (mine, failed)
            }));
        }
        local
            .run_until(async move {
                let mut all = Vec::new();
                let mut failed = 0;
                for t in tasks {
                    if let Ok((mut m, f)) = t.await {
                        all.append(&mut m);
                        failed += f;
                    }
                }
                (all, failed)
            })
            .await
    });
    Ok(IdleSessions {
        streams,
        failed,
        _rt: rt,
    })
}
