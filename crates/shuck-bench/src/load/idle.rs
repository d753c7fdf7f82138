//! Established TLS sessions held open and idle, for the memory measurement.

use std::rc::Rc;
use std::time::Duration;

use tokio::net::TcpStream;

use super::client::clients;
use super::LoadOpts;

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
