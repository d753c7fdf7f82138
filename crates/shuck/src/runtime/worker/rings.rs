//! The io_uring prototype's place in a worker thread (`--features io-uring`): a frontend the
//! prototype can serve gets a ring on a thread of its own instead of the epoll accept loop;
//! any other stays on the epoll path, with a log line saying why.

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::edge::{FrontendState, Worker};
use crate::proxy::uring;
use crate::shutdown::Shutdown;

/// The rings one worker thread started.
#[derive(Default)]
pub(super) struct Rings {
    running: Vec<(Arc<AtomicBool>, JoinHandle<()>)>,
}

impl Rings {
    /// Serves `listener` from a ring when the prototype can, returning it otherwise.
    pub(super) fn serve(
        &mut self,
        worker: &Rc<Worker>,
        frontend: &Arc<FrontendState>,
        listener: std::net::TcpListener,
        mut stop: Shutdown,
        drain: Duration,
    ) -> Option<(std::net::TcpListener, Shutdown)> {
        let backend = match uring::backend_for(&worker.state, frontend) {
            Ok(addr) => addr,
            Err(why) => {
                tracing::info!(
                    name: "uring_not_used",
                    worker = worker.id,
                    frontend = %frontend.name,
                    reason = %why,
                    "io_uring prototype not used for this frontend: the epoll path serves it",
                );
                return Some((listener, stop));
            }
        };
        let flag = Arc::new(AtomicBool::new(false));
        let (fe, counters, limits, ring_flag) = (
            frontend.clone(),
            worker.counters.clone(),
            worker.state.limits.clone(),
            flag.clone(),
        );
        let id = worker.id;
        let spawned = std::thread::Builder::new()
            .name(format!("shuck-uring-{id}"))
            .spawn(move || {
                let name = fe.name.clone();
                if let Err(e) = uring::serve(listener, fe, backend, counters, limits, ring_flag, drain)
                {
                    tracing::error!(
                        name: "uring_failed",
                        worker = id,
                        frontend = %name,
                        error = %e,
                        "io_uring prototype: the ring failed; this frontend is no longer served by this worker",
                    );
                }
            });
        match spawned {
            Ok(handle) => {
                tracing::info!(
                    name: "uring_serving",
                    worker = worker.id,
                    frontend = %frontend.name,
                    backend = %backend,
                    "io_uring prototype serves this frontend",
                );
                let removed = flag.clone();
                tokio::task::spawn_local(async move {
                    stop.recv().await;
                    removed.store(true, Ordering::Relaxed);
                });
                self.running.push((flag, handle));
            }
            Err(e) => tracing::error!(
                name: "uring_failed",
                worker = worker.id,
                frontend = %frontend.name,
                error = %e,
                "io_uring prototype: cannot start the ring's thread",
            ),
        }
        None
    }

    /// Tells every ring to stop and waits for them (each drains within its deadline).
    pub(super) fn stop(self) {
        for (flag, _) in &self.running {
            flag.store(true, Ordering::Relaxed);
        }
        for (_, handle) in self.running {
            let _ = handle.join();
        }
    }
}
