//! Shutdown signalling: the main thread announces it once; every accept loop and worker
//! listens. A `watch` channel, because a late subscriber must still see that it happened.

use tokio::sync::watch;

/// The sending side, held by the main thread.
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

/// A receiver that resolves once shutdown has been announced.
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

/// A new trigger and its first receiver.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Shutdown(rx))
}

impl Trigger {
    /// Announces shutdown to every receiver, present and future.
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// Waits until shutdown is announced (returns at once if it already was). A dropped
    /// trigger counts as shutdown, so that no worker outlives the main thread's intent.
    pub async fn recv(&mut self) {
        let _ = self.0.wait_for(|&v| v).await;
    }
}
