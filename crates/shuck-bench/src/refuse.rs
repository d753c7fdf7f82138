//! `shuck-bench connect-load`: new TCP connections as fast as a few threads can open them,
//! each held until the server closes or resets it (a refused client) or for a moment (one
//! let in, which waits for a ClientHello that never comes): what refusing a client over its
//! limit costs a server (bench/client-limits.sh).

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `connect-load`'s options.
#[derive(clap::Args)]
pub struct ConnectOpts {
    /// The server.
    #[arg(long)]
    pub addr: SocketAddr,
    /// How long to load it.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Client threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// The address connections come from (any of 127.0.0.0/8 is this host's).
    #[arg(long)]
    pub from: Option<std::net::IpAddr>,
    /// How long a connect may take (a SYN the server drops is given up on then, and
    /// counted as failed).
    #[arg(long, default_value_t = 1000)]
    pub connect_ms: u64,
}

/// Runs the load; prints `refused served failed` (connections each).
pub fn run(o: &ConnectOpts) -> anyhow::Result<()> {
    let counts: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let until = Instant::now() + Duration::from_secs_f64(o.seconds);
    let workers: Vec<_> = (0..o.threads.max(1))
        .map(|_| {
            let (counts, addr, from) = (counts.clone(), o.addr, o.from);
            let wait = Duration::from_millis(o.connect_ms.max(1));
            std::thread::spawn(move || {
                let mut buf = [0u8; 64];
                while Instant::now() < until {
                    let Ok(mut s) = connect(addr, from, wait) else {
                        counts[2].fetch_add(1, Relaxed);
                        continue;
                    };
                    let _ = s.set_read_timeout(Some(Duration::from_millis(20)));
                    let i = match s.read(&mut buf) {
                        Ok(0) => 0,
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => 0,
                        _ => 1,
                    };
                    counts[i].fetch_add(1, Relaxed);
                    // A reset: no TIME_WAIT on either side to run the ports out.
                    let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    println!(
        "{} {} {}",
        counts[0].load(Relaxed),
        counts[1].load(Relaxed),
        counts[2].load(Relaxed)
    );
    Ok(())
}

/// A connection to `addr` within `wait`, from `from` when given.
fn connect(
    addr: SocketAddr,
    from: Option<std::net::IpAddr>,
    wait: Duration,
) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    if let Some(ip) = from {
        s.bind(&SocketAddr::new(ip, 0).into())?;
    }
    s.connect_timeout(&addr.into(), wait)?;
    Ok(s.into())
}
