//! Active health checks, once per server for the whole process: one thread, with its own
//! current-thread runtime, looks every 50 ms at the backends of the moment (a reload's
//! new ones included) and starts each due check (`edge/check.rs`); a server that fails
//! `fall` in a row is taken out of rotation and one that passes `rise` brought back, said
//! in the log (`backend_check_down`, `backend_check_up`) and the metrics.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::check::Transition;
use crate::edge::ProxyState;

/// How often due checks are looked for.
const TICK: Duration = Duration::from_millis(50);

/// The checking thread; dropping this stops it.
#[derive(Debug)]
pub struct Checks {
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// Starts the checks when some server of the configuration has one (a reload that adds
/// the first check needs a restart, as a message then says).
pub fn start(state: &Arc<ProxyState>) -> Option<Checks> {
    let any = state
        .routing
        .load()
        .backends()
        .iter()
        .any(|b| b.pool.servers().iter().any(|s| s.check.is_some()));
    if !any {
        return None;
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let state = state.clone();
    let spawned = std::thread::Builder::new()
        .name("health-checks".into())
        .spawn(move || run(&state, stopped));
    match spawned {
        Ok(_) => Some(Checks { _stop: stop }),
        Err(e) => {
            tracing::error!(
                name: "backend_checks_cannot_start",
                error = %e,
                "health checks: cannot start their thread: {e}",
            );
            None
        }
    }
}

fn run(state: &Arc<ProxyState>, mut stopped: tokio::sync::oneshot::Receiver<()>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(
                name: "backend_checks_cannot_start",
                error = %e,
                "health checks: cannot start their runtime: {e}",
            );
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut stopped => return,
                _ = tick.tick() => {}
            }
            let routing = state.routing.load_full();
            let now = crate::clock::unix_ms();
            for backend in routing.backends() {
                for server in backend.pool.servers() {
                    let Some((spec, st)) = &server.check else {
                        continue;
                    };
                    let due = st.last_ms.load(Relaxed) + spec.interval.as_millis() as u64;
                    if now < due || st.in_flight.swap(true, Relaxed) {
                        continue;
                    }
                    let (backend, server) = (backend.clone(), server.clone());
                    tokio::task::spawn_local(async move {
                        let Some((spec, st)) = &server.check else {
                            return;
                        };
                        let result = crate::edge::check::probe(&server, &backend, spec).await;
                        let change = st.record(result.is_ok(), spec, crate::clock::unix_ms());
                        st.in_flight.store(false, Relaxed);
                        match change {
                            // A failure's mark-down ends too: the checks speak for it now.
                            Transition::Up => server.mark_up(),
                            Transition::Down => server.taken_out(),
                            Transition::None => {}
                        }
                        match (change, &result) {
                            (Transition::Down, Err(why)) => tracing::warn!(
                                name: "backend_check_down",
                                backend = %backend.name,
                                server = %server.name(),
                                error = %why,
                                fall = spec.fall,
                                "health check failed {} times in a row ({why}): {} of backend {} takes nothing new",
                                spec.fall,
                                server.name(),
                                backend.name,
                            ),
                            (Transition::Up, _) => tracing::info!(
                                name: "backend_check_up",
                                backend = %backend.name,
                                server = %server.name(),
                                rise = spec.rise,
                                "health check passed {} times in a row: {} of backend {} is back",
                                spec.rise,
                                server.name(),
                                backend.name,
                            ),
                            (_, Err(why)) => tracing::debug!(
                                name: "backend_check_failed",
                                backend = %backend.name,
                                server = %server.name(),
                                error = %why,
                                "health check failed: {why}",
                            ),
                            _ => {}
                        }
                    });
                }
            }
        }
    });
}
