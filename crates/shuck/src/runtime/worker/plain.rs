//! The worker's plain-HTTP listeners (`--redirect-listen`, `--acme-http-listen`): served by
//! the supervisor's runtime, and following a reload. The master binds an address a reload
//! adds and sends it before the configuration; an address a reload drops stops being
//! accepted on (the master closed its copy), while its connections finish.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use crate::config::Config;
use crate::redirect::Plain;

/// The listeners served and those sent for the next configuration.
#[derive(Debug)]
pub struct PlainListeners {
    state: Arc<Plain>,
    /// Each address served, with its accept loop.
    served: Vec<(SocketAddr, tokio::task::AbortHandle)>,
    /// Sockets the master bound for a reload, until its configuration is applied.
    given: Vec<(SocketAddr, TcpListener)>,
    /// Whether the task that hands on this thread's access log lines runs.
    flushing: bool,
}

impl PlainListeners {
    /// Nothing served yet; `state` is what every listener reads.
    pub fn new(state: Arc<Plain>) -> Self {
        PlainListeners {
            state,
            served: Vec::new(),
            given: Vec::new(),
            flushing: false,
        }
    }

    /// Serves `listeners` under `config` (from within the runtime).
    pub fn start(
        &mut self,
        listeners: Vec<(SocketAddr, TcpListener)>,
        config: &Config,
    ) -> std::io::Result<()> {
        for (addr, l) in listeners {
            self.serve(addr, l, config)?;
        }
        Ok(())
    }

    /// Hands on the lines not yet written (as the worker stops).
    pub fn flush_log(&self) {
        self.state.flush_log();
    }

    /// A socket the master bound for the configuration it sends next.
    pub fn give(&mut self, addr: SocketAddr, listener: TcpListener) {
        self.given.push((addr, listener));
    }

    /// The configuration in place after a reload: its code, port and client policy for
    /// every request from now on; its new addresses served, those it dropped no longer
    /// accepted on. A socket it does not name is closed.
    pub fn follow(&mut self, config: &Config) {
        self.state.follow(config);
        let wanted = config.plain_listen();
        self.served.retain(|(addr, task)| {
            let keep = wanted.contains(addr);
            if !keep {
                task.abort();
                tracing::info!(
                    name: "redirect_closed",
                    addr = %addr,
                    "SIGHUP: plain HTTP on http://{addr} closed (its connections finish)",
                );
            }
            keep
        });
        for (addr, l) in std::mem::take(&mut self.given) {
            if !wanted.contains(&addr) || self.served.iter().any(|(a, _)| *a == addr) {
                continue;
            }
            if let Err(e) = self.serve(addr, l, config) {
                tracing::error!(
                    name: "reload_redirect_listen_failed",
                    addr = %addr,
                    error = %e,
                    "SIGHUP: plain HTTP on http://{addr}: {e}",
                );
            }
        }
    }

    fn serve(&mut self, addr: SocketAddr, l: TcpListener, config: &Config) -> std::io::Result<()> {
        let l = tokio::net::TcpListener::from_std(l)?;
        let local = l.local_addr()?;
        let code = config.redirect.code;
        let acme = config.acme.is_some();
        tracing::info!(
            name: "redirect_listening",
            addr = %local,
            acme = acme,
            "plain HTTP on http://{local}: {code} to https{}",
            if acme { ", ACME http-01 answered" } else { "" },
        );
        if self.state.logs() && !self.flushing {
            // This thread's lines, handed on as each worker thread's are.
            self.flushing = true;
            let state = self.state.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(crate::access::FLUSH_EVERY);
                loop {
                    tick.tick().await;
                    state.flush_log();
                }
            });
        }
        let task = tokio::spawn(crate::redirect::serve(l, self.state.clone()));
        self.served.push((addr, task.abort_handle()));
        Ok(())
    }
}
