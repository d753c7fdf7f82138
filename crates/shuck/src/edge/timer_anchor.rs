//! Keeps one timer of a worker's runtime due before any connection's while connections
//! arrive, so that tokio never has to wake its own driver for them.
//!
//! tokio's timer wakes its I/O driver (an eventfd write, and a spurious `epoll_wait` return)
//! whenever a timer is set to fire before the earliest one the driver last went to sleep
//! with, or when it slept with none; it does so even on the driver's own thread, where
//! nothing needs waking. A connection sets two such timers (its handshake's and its
//! backend connect's): two `write` system calls a connection. With this anchor due within
//! [`PERIOD`], shorter than the default timeouts, they are never the earliest (the anchor
//! itself costs one such write each time it is set again: one a period). An idle worker
//! stops the anchor after one period without a new connection: no wake-ups then.

use std::time::Duration;

use super::Worker;

/// How far ahead the anchor is due: below the shortest default timeout a connection sets
/// (--backend-connect-timeout, 3 s). A shorter timeout set by the operator only brings
/// the wake-up back, never a late timer.
const PERIOD: Duration = Duration::from_secs(1);

impl Worker {
    /// Runs for the worker's life: idle without a timer, anchored while connections come.
    pub async fn keep_timers_anchored(&self) {
        loop {
            while !self.anchor.opened.take() {
                self.anchor.arrived.notified().await;
            }
            self.anchor.running.set(true);
            let sleep = tokio::time::sleep(PERIOD);
            tokio::pin!(sleep);
            loop {
                sleep.as_mut().await;
                if !self.anchor.opened.take() {
                    break;
                }
                sleep.as_mut().reset(tokio::time::Instant::now() + PERIOD);
            }
            self.anchor.running.set(false);
        }
    }
}

/// The anchor's state in a [`Worker`] (single-threaded: plain cells).
#[derive(Debug, Default)]
pub struct Anchor {
    /// A connection was opened since the anchor last looked.
    opened: std::cell::Cell<bool>,
    /// The anchor's timer is set.
    running: std::cell::Cell<bool>,
    /// Wakes an idle anchor.
    arrived: tokio::sync::Notify,
}

impl Anchor {
    /// Notes a new connection; wakes the anchor only if it idles (no cost otherwise).
    pub fn opened(&self) {
        self.opened.set(true);
        if !self.running.get() {
            self.arrived.notify_one();
        }
    }
}
