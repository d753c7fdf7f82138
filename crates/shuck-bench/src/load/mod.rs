//! `shuck-bench load`: the TLS load generator. Its own client on rustls: each session is a
//! TCP connect, a handshake (resumed or not, as asked), some keep-alive requests, a
//! close_notify and a close; closed loop (`--concurrency` sessions at all times) or open loop
//! (`--rate` new sessions per second attempted, whatever the server does).

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::stats::{Failure, Stats};
use shuck::origin::size::format_size;

mod client;
mod idle;
mod options;

pub use idle::open_idle;
pub use options::{KeyType, LoadOpts, ResumeBy, Reuse};

use client::{check_key_type, clients, Clients};

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
    if o.plain {
        let mut tcp = tcp;
        exchange(o, &mut tcp, timeout, stats).await?;
        let _ = tcp.shutdown().await;
        return Ok(false);
    }
    let mut tls = match tokio::time::timeout(timeout, connector.connect(name.clone(), tcp)).await {
        Err(_) => return Err(Failure::Timeout),
        Ok(Err(e)) => return Err(classify_tls(&e)),
        Ok(Ok(s)) => s,
    };
    Stats::record(&mut stats.borrow_mut().handshake_us, t0.elapsed());
    let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    exchange(o, &mut tls, timeout, stats).await?;
    let _ = tokio::time::timeout(Duration::from_millis(100), tls.shutdown()).await;
    Ok(resumed)
}

/// The session's requests, one at a time, each answer read whole.
async fn exchange<S>(
    o: &LoadOpts,
    s: &mut S,
    timeout: Duration,
    stats: &RefCell<Stats>,
) -> Result<(), Failure>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
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
            s.write_all(request.as_bytes())
                .await
                .map_err(|_| Failure::Io)?;
            read_response(s, &mut buf, &mut filled, o.size, stats).await
        };
        match tokio::time::timeout(timeout, fut).await {
            Err(_) => return Err(Failure::Timeout),
            Ok(Err(f)) => return Err(f),
            Ok(Ok(())) => {}
        }
        let mut st = stats.borrow_mut();
        st.requests += 1;
        Stats::record(&mut st.request_us, t.elapsed());
    }
    Ok(())
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
/// `buf` (there should be none: requests are not pipelined). What was wrong with the first
/// bad answer of the run is kept in `stats`, for its one-line diagnosis.
async fn read_response<S: tokio::io::AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut [u8],
    filled: &mut usize,
    size: usize,
    stats: &RefCell<Stats>,
) -> Result<(), Failure> {
    // Only a bad answer is described: nothing is formatted per good request.
    let bad = |what: String| {
        stats
            .borrow_mut()
            .first_bad
            .get_or_insert_with(|| format!("GET /{}: {what}", format_size(size)));
        Failure::BadResponse
    };
    let head_end = loop {
        if let Some(i) = buf[..*filled].windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if *filled == buf.len() {
            return Err(bad(format!(
                "no end of the response head in {} bytes",
                buf.len()
            )));
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
        Ok(httparse::Status::Complete(_)) => {
            return Err(bad(format!(
                "status {} {}, expected 200",
                resp.code.unwrap_or(0),
                resp.reason.unwrap_or("")
            )))
        }
        _ => {
            let line = buf[..head_end].split(|&b| b == b'\n').next().unwrap_or(&[]);
            return Err(bad(format!(
                "not an HTTP/1.1 response head: {:?}",
                String::from_utf8_lossy(&line[..line.len().min(80)])
            )));
        }
    }
    let len: usize = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
        .ok_or_else(|| {
            bad(format!(
                "status 200 without a Content-Length, expected Content-Length: {size}"
            ))
        })?;
    if len != size {
        return Err(bad(format!(
            "Content-Length {len}, expected {size} (the target's backend must answer \
             GET /N with N bytes, as `shuck-bench origin` does)"
        )));
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
            return Err(bad(format!(
                "{} bytes past the announced Content-Length {len}",
                n - left
            )));
        }
        left -= n;
    }
    Ok(())
}
