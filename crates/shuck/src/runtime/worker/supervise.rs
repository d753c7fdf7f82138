//! The worker process's main thread once the worker threads run: it serves `--stats`, logs
//! the counters, applies what the master sends (a reload, new ticket keys, sessions from
//! the previous process), and answers signals: SIGHUP and SIGUSR2 are passed to the master,
//! new OCSP staples are applied, SIGTERM or SIGINT drains (a second one exits at once), and
//! so does a handover to the next process, after sending it the session cache.

use crate::runtime::sockets::FrontSockets;
use std::io;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use tokio::signal::unix::{signal, Signal, SignalKind};

use super::frontends::Frontends;
use super::reload::Reloader;
use super::services::Services;
use super::threads::Workers;
use crate::runtime::channel::{Channel, Kind, Msg, SESSIONS_PER_FRAME};
use crate::runtime::error::StartError;
use crate::session::Resumption;
use crate::shutdown::Trigger;
use crate::stats::{self, Sources};

/// How long a worker started by a binary upgrade waits for the previous process's
/// sessions before it serves without them.
const SESSIONS_WAIT: Duration = Duration::from_secs(5);
/// Longest wait for handshakes under way before the session cache is handed over: a
/// loaded machine's slow handshakes still land their sessions in it (loopback ones take
/// milliseconds, so the wait is that short). Below [`SESSIONS_WAIT`].
const SETTLE: Duration = Duration::from_secs(3);

/// How often the counters are logged (at debug level).
const STATS_EVERY: Duration = Duration::from_secs(10);

/// The main thread's runtime and the signals it catches.
pub struct Supervisor {
    rt: tokio::runtime::Runtime,
    term: Signal,
    int: Signal,
    hup: Signal,
    usr1: Signal,
    usr2: Signal,
}

/// The way to the master process.
#[derive(Debug)]
pub struct MasterLink {
    /// Writes to the master.
    pub to: Channel,
    /// What the master sent, read by a thread of its own.
    pub from: mpsc::UnboundedReceiver<Msg>,
}

impl MasterLink {
    /// Reads `chan` on a thread of its own; the receiver ends when the master is gone.
    pub fn start(chan: Channel) -> io::Result<Self> {
        let reader = chan.try_clone()?;
        let (tx, from) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("shuck-master-link".into())
            .spawn(move || {
                while let Ok(m) = reader.recv() {
                    if tx.send(m).is_err() {
                        break;
                    }
                }
            })?;
        Ok(MasterLink { to: chan, from })
    }

    fn send(&self, m: &Msg) {
        if let Err(e) = self.to.send(m) {
            tracing::warn!(
                name: "master_unreachable",
                error = %e,
                "cannot reach the master process: {e}",
            );
        }
    }
}

/// What the supervisor watches over.
pub struct Supervised {
    /// The frontends being served.
    pub frontends: Frontends,
    /// Applies SIGHUP and new staples.
    pub reloader: Reloader,
    /// The services beside the workers.
    pub services: Services,
    /// The worker threads.
    pub workers: Workers,
    /// What the summary and `--stats` read.
    pub sources: Arc<Sources>,
    /// How long live connections get at shutdown (for the log line).
    pub drain_timeout: Duration,
    /// The session cache and ticket keys.
    pub resumption: Resumption,
    /// The master.
    pub master: MasterLink,
    /// Lets the worker threads accept; held until the previous process's sessions are
    /// in when this worker was started by a binary upgrade.
    pub start: Trigger,
    /// Whether `start` waits for sessions.
    pub await_sessions: bool,
    /// Lets the worker threads read the QUIC sockets; held at a binary upgrade until the
    /// master says the previous process is gone.
    pub quic_start: Trigger,
}

impl Supervisor {
    /// Catches the signals from now on, before anyone is told shuck listens: a SIGTERM
    /// right after "listening" is a drain, not a kill.
    pub fn catch_signals() -> io::Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let _in_runtime = rt.enter();
        Ok(Supervisor {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
            rt,
        })
    }

    /// Runs until SIGTERM/SIGINT and the drain that follows.
    pub fn run(self, s: Supervised) -> Result<(), StartError> {
        let Supervisor {
            rt,
            mut term,
            mut int,
            mut hup,
            mut usr1,
            mut usr2,
        } = self;
        let Supervised {
            mut frontends,
            mut reloader,
            mut services,
            mut workers,
            sources,
            drain_timeout,
            resumption,
            mut master,
            start,
            await_sessions,
            quic_start,
        } = s;
        rt.block_on(async move {
            if let Some(l) = services.stats.take() {
                let l = tokio::net::TcpListener::from_std(l)?;
                tracing::info!(
                    name: "stats_listening",
                    addr = %(l.local_addr()?),
                    "metrics at http://{}/metrics",
                    l.local_addr()?,
                );
                tokio::spawn(stats::serve(l, sources.clone()));
            }
            let mut plain = super::plain::PlainListeners::new(services.plain.1.clone());
            plain.start(std::mem::take(&mut services.plain.0), &reloader.current)?;
            let (farm_out, mut farm_in) = match services.farm.take() {
                Some((out, rx)) => (Some(out), Some(rx)),
                None => (None, None),
            };
            let worker_id = crate::acme::farm::new_id();
            let mut report = tokio::time::interval(STATS_EVERY);
            report.tick().await;
            let mut waiting = await_sessions;
            if !waiting {
                start.fire();
            }
            let ready_at = tokio::time::Instant::now();
            let sessions_wait = tokio::time::sleep(SESSIONS_WAIT);
            tokio::pin!(sessions_wait);
            let mut given = FrontSockets::default();
            let mut received = 0usize;
            let mut handover = false;
            loop {
                tokio::select! {
                    _ = term.recv() => break,
                    _ = int.recv() => break,
                    Some(()) = services.restaple.recv() => reloader.restaple(&frontends),
                    _ = hup.recv() => master.send(&Msg::Reload),
                    _ = usr2.recv() => master.send(&Msg::Upgrade),
                    _ = usr1.recv() => master.send(&Msg::Reopen),
                    _ = &mut sessions_wait, if waiting => {
                        tracing::warn!(
                            name: "takeover_sessions_late",
                            "the previous process's sessions did not arrive within {SESSIONS_WAIT:?}; serving without them",
                        );
                        waiting = false;
                        start.fire();
                    }
                    m = master.from.recv() => match m {
                        None => {
                            tracing::warn!(
                                name: "master_gone",
                                "the master process is gone: stopping",
                            );
                            break;
                        }
                        Some(Msg::Sockets(entries, fds)) => {
                            for (e, fd) in entries.into_iter().zip(fds) {
                                match e.kind {
                                    Kind::Frontend => given.tcp.push((e.addr, TcpListener::from(fd))),
                                    Kind::Quic => given.udp.push((e.addr, std::net::UdpSocket::from(fd))),
                                    Kind::Plain => plain.give(e.addr, TcpListener::from(fd)),
                                    _ => {}
                                }
                            }
                        }
                        Some(Msg::Apply(rec)) => {
                            reloader.apply(&mut frontends, rec, &mut given);
                            plain.follow(&reloader.current);
                        }
                        Some(Msg::AccessLog(sink, fd)) => reloader.access_file(sink, fd),
                        Some(Msg::Tickets(state)) => {
                            if let Some(t) = &resumption.tickets {
                                t.install(&state);
                            }
                        }
                        Some(Msg::Sessions(list)) => {
                            if let Some(cache) = &resumption.cache {
                                for s in list {
                                    received += usize::from(cache.insert_replicated(s.key, s.value, s.age));
                                }
                            }
                        }
                        Some(Msg::SessionsEnd) => {
                            tracing::info!(
                                name: "takeover_done",
                                received = received,
                                ms = ready_at.elapsed().as_millis() as u64,
                                "{received} session(s) taken over from the previous process, {} ms after this one was ready",
                                ready_at.elapsed().as_millis(),
                            );
                            if waiting {
                                waiting = false;
                                start.fire();
                            }
                        }
                        Some(Msg::PredecessorGone) => {
                            tracing::info!(
                                name: "takeover_quic",
                                "the previous process has exited: QUIC is served here from now on",
                            );
                            quic_start.fire();
                        }
                        Some(Msg::Handover) => {
                            handover = true;
                            break;
                        }
                        Some(Msg::Acme(e)) => acme_event(e, &master, &sources),
                        Some(Msg::Farm(body)) => {
                            // From this host's ACME client, for the other hosts.
                            if let Some(out) = &farm_out {
                                if !out.send(&body) {
                                    tracing::warn!(
                                        name: "acme_farm_send_failed",
                                        bytes = body.len(),
                                        "ACME: a farm message ({} bytes) could not be sent to the peers",
                                        body.len(),
                                    );
                                }
                            }
                        }
                        Some(Msg::Certificates(rec)) => reloader.certificates(&frontends, rec),
                        Some(Msg::AdminCertificates(rec)) => reloader.admin_certificates(&frontends, rec),
                        Some(Msg::AdminCall { id, call }) => {
                            let (status, body) = match crate::admin::WorkerCall::decode(&call) {
                                Some(c) => reloader.admin(c),
                                None => (500, serde_json::json!({ "error": "the worker does not know this call" })),
                            };
                            if id != 0 {
                                master.send(&Msg::AdminReply { id, status, body: serde_json::to_vec(&body).unwrap_or_default() });
                            }
                        }
                        Some(m) => tracing::warn!(
                            name: "master_message_unexpected",
                            content = ?m,
                            "unexpected message from the master process: {m:?}",
                        ),
                    },
                    Some(body) = async { match &mut farm_in { Some(rx) => rx.recv().await, None => std::future::pending().await } } => {
                        farm_message(&body, &master, farm_out.as_ref(), worker_id);
                    }
                    _ = report.tick() => {
                        // The summary once, as the message (a field beside it printed it
                        // twice on every line).
                        tracing::debug!(name: "summary", "{}", stats::summary(&sources));
                        crate::acme::answers::answers().expire(crate::acme::answers::MAX_AGE);
                    }
                    _ = workers.done.recv() => {
                        tracing::error!(name: "workers_stopped", "workers stopped unexpectedly");
                        return Err(StartError::System(io::Error::other("workers stopped")));
                    }
                }
            }
            tracing::info!(
                name: "stopping",
                drain_timeout = ?drain_timeout,
                "stopping: no new connections; live ones get up to {drain_timeout:?} to finish",
            );
            workers.trigger.fire();
            plain.flush_log();
            if handover {
                let settled = handshakes_settle(&workers.counters).await;
                hand_over_sessions(&master, &resumption, settled);
            }
            tokio::select! {
                _ = workers.done.recv() => tracing::info!(
                    name: "stopped",
                    "stopped; {}",
                    stats::summary(&sources),
                ),
                _ = term.recv() => exit_now(),
                _ = int.recv() => exit_now(),
            }
            // Replication stops with the workers, not before.
            drop(services);
            Ok(())
        })
    }
}

/// Waits (at most [`SETTLE`]) until every accept loop has stopped (the worker threads see
/// the shutdown on their own time, and one may accept a last connection) and the handshakes
/// under way have finished, so that every session this worker will make is in the cache
/// handed over.
/// Returns how long it waited, and whether everything settled.
async fn handshakes_settle(counters: &crate::counters::Counters) -> (Duration, bool) {
    let started = tokio::time::Instant::now();
    while started.elapsed() < SETTLE {
        let t = counters.totals();
        let refused: u64 = t.frontends.iter().map(|f| f.refused).sum();
        let done = t.handshakes_full + t.handshakes_resumed + t.handshakes_failed + refused;
        if t.accepting == 0 && t.accepted <= done {
            return (started.elapsed(), true);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (started.elapsed(), false)
}

/// The session cache, to the next process (through the master), once no new connection
/// is accepted here.
fn hand_over_sessions(master: &MasterLink, resumption: &Resumption, settled: (Duration, bool)) {
    let sessions = resumption
        .cache
        .as_ref()
        .map(|c| c.snapshot())
        .unwrap_or_default();
    let n = sessions.len();
    for chunk in sessions.chunks(SESSIONS_PER_FRAME) {
        master.send(&Msg::Sessions(chunk.to_vec()));
    }
    master.send(&Msg::SessionsEnd);
    let (waited, all) = settled;
    if all {
        tracing::info!(
            name: "handover_done",
            sessions = n,
            ms = waited.as_millis() as u64,
            "handed over: {n} session(s) sent to the next process (handshakes under way settled in {} ms)",
            waited.as_millis(),
        );
    } else {
        tracing::warn!(
            name: "handover_partial",
            sessions = n,
            ms = waited.as_millis() as u64,
            "handed over: {n} session(s) sent to the next process; handshakes still under way after {} ms keep their sessions here",
            waited.as_millis(),
        );
    }
}

/// What the ACME client sent through the master: an answer to publish (and to confirm),
/// one to withdraw, or its counters.
fn acme_event(e: crate::acme::Event, master: &MasterLink, sources: &Sources) {
    use crate::acme::{answers::answers, Answered, Event};
    match e {
        Event::Answer {
            name,
            token,
            key_auth,
        } => {
            let error = answers()
                .add(&name, &token, &key_auth)
                .err()
                .map(|e| e.to_string());
            master.send(&Msg::AcmeAnswered(Answered { token, error }));
        }
        Event::Withdraw { name, token } => answers().remove(&name, &token),
        Event::Status(st) => {
            if let Some(Ok(mut kept)) = sources.acme.as_ref().map(|m| m.lock()) {
                *kept = st;
            }
        }
        Event::Issued | Event::Farm(_) => {}
    }
}

/// A farm message from another host: challenge answers are installed here at once and
/// confirmed to the farm; the rest is for this host's ACME client.
fn farm_message(
    body: &[u8],
    master: &MasterLink,
    out: Option<&crate::session::sync::FarmOut>,
    me: crate::acme::farm::HostId,
) {
    use crate::acme::answers::answers;
    use crate::acme::farm::FarmMsg;
    match FarmMsg::decode(body) {
        Some(FarmMsg::Answer {
            name,
            token,
            key_auth,
        }) => match answers().add(&name, &token, &key_auth) {
            Ok(()) => {
                if let Some(out) = out {
                    out.send(&FarmMsg::Answered { token, by: me }.encode());
                }
            }
            Err(e) => {
                tracing::warn!(
                    name: "acme_farm_answer_failed",
                    name = %name,
                    error = %e,
                    "ACME: cannot answer the farm's challenge for {name}: {e}",
                )
            }
        },
        Some(FarmMsg::Withdraw { name, token }) => answers().remove(&name, &token),
        Some(_) => master.send(&Msg::Farm(body.to_vec())),
        None => tracing::debug!(
            name: "acme_farm_message_malformed",
            bytes = body.len(),
            "ACME: a farm message that does not parse ({} bytes)",
            body.len(),
        ),
    }
}

fn exit_now() {
    tracing::warn!(name: "second_signal", "second signal: exiting now");
    std::process::exit(1);
}
