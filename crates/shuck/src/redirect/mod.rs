//! The plain-HTTP listener (`--redirect-listen`, and `--acme-http-listen`): port 80 of a
//! TLS-only site. Every request is answered with a redirect to the same URL in https
//! (`--redirect-code`, 308 unless told), ACME http-01 tokens with their key authorization
//! when ACME is on, and a request that names no usable host with 400 (`answer.rs`). The
//! client's bans, rules and limits hold here as on the frontends. A connection carries
//! requests one after another (keep-alive, as nginx's `return 301`), each head bounded,
//! within a deadline: nothing here is worth more than that.

pub mod answer;
mod log;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::clients::{Clients, Policy, Source};
use answer::{After, Kind, Settings};

/// Largest request head read.
const MAX_HEAD: usize = 8 * 1024;
/// Time a client has for each request head, the first included (nginx's
/// `client_header_timeout` is 60 s; a redirect is worth less).
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Most requests one connection carries (nginx's `keepalive_requests` is 1000).
const MAX_REQUESTS: u32 = 1000;

/// What every plain listener of a worker reads, swapped at a reload.
#[derive(Debug)]
pub struct Plain {
    now: ArcSwap<Now>,
    clients: Arc<Clients>,
    /// The answers given, by [`Kind`] (redirects, ACME, refused), and the clients refused.
    counts: [std::sync::atomic::AtomicU64; 4],
    /// How many listeners accept now (a reload may add or close some).
    listeners: std::sync::atomic::AtomicUsize,
    /// `--access-log`: a line a request.
    access: Option<Arc<crate::access::AccessLog>>,
}

/// The settings of the moment.
#[derive(Debug)]
struct Now {
    answer: Settings,
    /// The global `--client-*` policy (the listener is no frontend of its own).
    policy: Policy,
    /// `--access-log`'s own sink, where its lines go (none: not logged).
    sink: Option<usize>,
}

impl Plain {
    /// The listeners' state under `config`, judging clients in `clients`, logging to
    /// `access`.
    pub fn new(
        config: &crate::config::Config,
        clients: Arc<Clients>,
        access: Option<Arc<crate::access::AccessLog>>,
    ) -> Arc<Self> {
        Arc::new(Plain {
            now: ArcSwap::from_pointee(Now::of(config)),
            clients,
            counts: Default::default(),
            listeners: Default::default(),
            access,
        })
    }

    /// Hands on the lines this thread (the supervisor's, where the listeners run) has
    /// buffered: every [`crate::access::FLUSH_EVERY`], and at the end.
    pub fn flush_log(&self) {
        if let Some(a) = &self.access {
            a.flush_thread();
        }
    }

    /// Whether the listeners write an access log.
    pub fn logs(&self) -> bool {
        self.access.is_some()
    }

    /// A reload: the code, the port and the client policy follow `config`.
    pub fn follow(&self, config: &crate::config::Config) {
        self.now.store(Arc::new(Now::of(config)));
    }

    /// Requests answered with a redirect, with an ACME answer, refused; clients refused.
    pub fn counts(&self) -> [u64; 4] {
        self.counts
            .each_ref()
            .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Whether any listener accepts now (its counters are shown then).
    pub fn listening(&self) -> bool {
        self.listeners.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    fn count(&self, i: usize) {
        self.counts[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One listener counted in [`Plain::listening`] while its accept loop lives.
struct Listening(Arc<Plain>);

impl Listening {
    fn new(plain: Arc<Plain>) -> Self {
        plain
            .listeners
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Listening(plain)
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.0
            .listeners
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Now {
    fn of(config: &crate::config::Config) -> Self {
        Now {
            answer: Settings {
                code: config.redirect.code,
                port: config.redirect.port,
                acme: config.acme.is_some(),
            },
            policy: config.clients.global.clone(),
            sink: config.access_log.as_ref().and_then(|a| a.sink_of(None)),
        }
    }
}

/// Serves `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, plain: Arc<Plain>) {
    let _counted = Listening::new(plain.clone());
    let Ok(local) = listener.local_addr() else {
        return;
    };
    loop {
        match listener.accept().await {
            Ok((tcp, peer)) => {
                let now = plain.now.load_full();
                let admitted = match plain.clients.admit(&now.policy, peer.ip(), Source::Tcp) {
                    Ok(a) => a,
                    Err(r) => {
                        crate::clients::log_refused(&r, peer, "redirect-listen");
                        plain.count(3);
                        continue; // dropped: closed at once
                    }
                };
                let plain = plain.clone();
                tokio::spawn(async move {
                    let limit = admitted.as_ref().and_then(|a| a.requests());
                    let log = (plain.access.as_ref())
                        .zip(now.sink)
                        .map(|(a, sink)| (&**a, log::conn(peer, local, sink)));
                    connection(tcp, peer, &plain, limit, log).await;
                    drop(admitted);
                });
            }
            Err(e) => {
                tracing::debug!(
                    name: "redirect_accept_failed",
                    error = %e,
                    "plain HTTP listener: accept failed: {e}",
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One connection's requests, answered in turn until one ends it.
async fn connection(
    mut tcp: TcpStream,
    peer: std::net::SocketAddr,
    plain: &Plain,
    limit: Option<crate::clients::RequestLimit>,
    log: Option<(&crate::access::AccessLog, crate::access::Conn)>,
) {
    let mut buf = vec![0u8; MAX_HEAD];
    let mut filled = 0;
    let mut out = Vec::with_capacity(256);
    for n in 1..=MAX_REQUESTS {
        let began = crate::clock::Tick::now();
        // A head: from what is held, else read until it is whole or there is no room.
        let answered = loop {
            let held = &buf[..filled];
            let len = answer::head_len(held);
            let head = len.map_or(held, |n| &held[..n]);
            let settings = plain.now.load().answer;
            out.clear();
            if let Some(done) = len.and_then(|_| answer::respond(head, false, settings, &mut out)) {
                break Some((done, len.unwrap_or(0)));
            }
            if filled == buf.len() {
                let done = answer::respond(head, true, settings, &mut out);
                break done.map(|d| (d, filled));
            }
            let read = tokio::time::timeout(HEAD_TIMEOUT, tcp.read(&mut buf[filled..])).await;
            match read {
                Ok(Ok(0)) | Ok(Err(_)) => return,
                Ok(Ok(n)) => filled += n,
                Err(_) => {
                    tracing::debug!(
                        name: "redirect_no_request",
                        client = %peer,
                        "plain HTTP listener: no whole request within {HEAD_TIMEOUT:?}",
                    );
                    return;
                }
            }
        };
        let Some(((mut after, kind), used)) = answered else {
            return;
        };
        if let Some(limit) = &limit {
            if let Err(r) = plain.clients.request(limit) {
                crate::clients::log_refused(&r, peer, "redirect-listen");
                out.clear();
                let retry = r.retry_secs();
                // RFC 6585 §4: 429, and when to try again.
                out.extend_from_slice(
                    format!(
                        "HTTP/1.1 429 Too Many Requests\r\nRetry-After: {retry}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                    .as_bytes(),
                );
                after = After::Close;
                plain.count(3);
            }
        }
        if n == MAX_REQUESTS && after == After::KeepAlive {
            // The last this connection carries: said, so that the client opens another
            // (RFC 9112 §9.6) rather than meet a close it cannot tell from a failure.
            say_close(&mut out);
            after = After::Close;
        }
        plain.count(match kind {
            Kind::Redirect => 0,
            Kind::Acme => 1,
            Kind::Bad => 2,
        });
        if let Some((access, conn)) = &log {
            log::line(access, conn, &buf[..used], &out, began);
        }
        if tcp.write_all(&out).await.is_err() || after == After::Close {
            let _ = tcp.shutdown().await;
            return;
        }
        buf.copy_within(used..filled, 0);
        filled -= used;
    }
    let _ = tcp.shutdown().await;
}

/// `Connection: close` added to the answer's head in `out`.
fn say_close(out: &mut Vec<u8>) {
    if let Some(end) = out.windows(4).position(|w| w == b"\r\n\r\n") {
        let at = end + 2;
        out.splice(at..at, b"Connection: close\r\n".iter().copied());
    }
}
