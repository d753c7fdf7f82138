//! The worker threads: one per `-n`, each with its own single-threaded runtime, accepting
//! on the SO_REUSEPORT sockets the main thread sends it (stud's process-per-core model
//! without processes).

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::counters::Counters;
use crate::edge::{Control, ProxyState, Worker};
use crate::proxy::listener;
use crate::shutdown::{self, Shutdown, Trigger};

/// The channels to `n` workers: the senders for the frontends, the receivers for
/// [`spawn`].
pub fn channels(
    n: usize,
) -> (
    Vec<mpsc::UnboundedSender<Control>>,
    Vec<mpsc::UnboundedReceiver<Control>>,
) {
    (0..n).map(|_| mpsc::unbounded_channel::<Control>()).unzip()
}

/// The running workers.
#[derive(Debug)]
pub struct Workers {
    /// Their counters, for the summary and the exposition.
    pub counters: Counters,
    /// Announces shutdown to every worker.
    pub trigger: Trigger,
    /// Closes once every worker thread has ended.
    pub done: mpsc::Receiver<()>,
}

/// Starts one worker thread per control channel; each accepts once `start`'s first fires
/// (at a binary upgrade, once the previous process's sessions are in), reads QUIC's
/// sockets once its second does (at a binary upgrade, once the previous process is gone),
/// and drains for up to `drain` at shutdown.
pub fn spawn(
    controls: Vec<mpsc::UnboundedReceiver<Control>>,
    state: &Arc<ProxyState>,
    counter_slots: usize,
    drain: Duration,
    start: (&Shutdown, &Shutdown),
) -> std::io::Result<Workers> {
    let mut counters = Counters::new(counter_slots);
    let (trigger, shutdown) = shutdown::channel();
    let (done_tx, done) = mpsc::channel::<()>(1);
    for (id, control) in controls.into_iter().enumerate() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let state = state.clone();
        let shutdown = shutdown.clone();
        let (start, quic_start) = (start.0.clone(), start.1.clone());
        let done = done_tx.clone();
        let mine = counters.add_worker();
        std::thread::Builder::new()
            .name(format!("shuck-worker-{id}"))
            .spawn(move || {
                let local = tokio::task::LocalSet::new();
                let run = std::panic::AssertUnwindSafe(|| {
                    local.block_on(
                        &rt,
                        worker_main(
                            Worker::new(id, state, mine, shutdown.clone()),
                            control,
                            (start, quic_start),
                            shutdown,
                            drain,
                        ),
                    )
                });
                // A connection's panic is its task's (tokio catches it); one that ends a
                // worker thread ends the worker process, which the master replaces
                // rather than serve on with a thread short.
                if std::panic::catch_unwind(run).is_err() {
                    tracing::error!(
                        name: "worker_thread_panicked",
                        worker = id,
                        "worker thread panicked: the worker process exits; the master starts another",
                    );
                    std::process::exit(70);
                }
                drop(done);
            })?;
    }
    Ok(Workers {
        counters,
        trigger,
        done,
    })
}

/// One worker: accept on the sockets the main thread sends (at start and on reloads) until
/// shutdown, then wait for its connections up to the drain deadline. Tasks still running
/// then are dropped with the runtime.
async fn worker_main(
    worker: Worker,
    mut control: mpsc::UnboundedReceiver<Control>,
    (mut start, quic_start): (Shutdown, Shutdown),
    mut shutdown: Shutdown,
    drain: Duration,
) {
    let worker = Rc::new(worker);
    let anchored = worker.clone();
    tokio::task::spawn_local(async move { anchored.keep_timers_anchored().await });
    // The admin API's maintenance: this thread's idle HTTP/2 backend connections to the
    // server close.
    let state = worker.state.clone();
    tokio::task::spawn_local(async move {
        loop {
            state.maint.notified().await;
            crate::gateway::wake_keepers();
        }
    });
    // The access log's lines of this thread are handed on at least this often.
    if let Some(log) = worker.state.access.clone() {
        tokio::task::spawn_local(async move {
            let mut tick = tokio::time::interval(crate::access::FLUSH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                log.flush_thread();
            }
        });
    }
    // Sockets sent meanwhile wait in the channel; connections, in their backlog.
    tokio::select! {
        _ = start.recv() => {}
        _ = shutdown.recv() => return,
    }
    #[cfg(feature = "io-uring")]
    let mut rings = super::rings::Rings::default();
    loop {
        tokio::select! {
            _ = shutdown.recv() => break,
            c = control.recv() => match c {
                Some(Control::Listen { frontend, listener: s, stop }) => {
                    #[cfg(feature = "io-uring")]
                    let Some((s, stop)) = rings.serve(&worker, &frontend, s, stop, drain) else {
                        continue;
                    };
                    match tokio::net::TcpListener::from_std(s) {
                        Ok(l) => {
                            tokio::task::spawn_local(listener::accept_loop(
                                l,
                                frontend,
                                worker.clone(),
                                shutdown.clone(),
                                stop,
                            ));
                        }
                        Err(e) => tracing::error!(
                            name: "listener_register_failed",
                            worker = worker.id,
                            error = %e,
                            "cannot register a listener",
                        ),
                    }
                }
                Some(Control::Quic { frontend, socket, index, workers, stop }) => {
                    tokio::task::spawn_local(crate::gateway::h3::serve(
                        socket,
                        index,
                        workers,
                        frontend,
                        worker.clone(),
                        [shutdown.clone(), stop, quic_start.clone()],
                    ));
                }
                // The main thread is gone: as good as a shutdown.
                None => break,
            },
        }
    }
    if tokio::time::timeout(drain, worker.all_closed())
        .await
        .is_err()
    {
        tracing::warn!(
            name: "drain_deadline",
            worker = worker.id,
            connections = worker.live(),
            "drain deadline reached: closing the remaining connections",
        );
    }
    #[cfg(feature = "io-uring")]
    rings.stop();
    if let Some(log) = &worker.state.access {
        log.flush_thread();
    }
}
