//! The shutdown signal every task watches: set once, on SIGINT/SIGTERM.

use tokio::sync::watch;

/// Triggers shutdown for everyone holding a [`ShutdownSignal`].
#[derive(Clone)]
pub struct ShutdownTrigger(watch::Sender<bool>);

/// Resolves once shutdown has been triggered.
#[derive(Clone)]
pub struct ShutdownSignal(watch::Receiver<bool>);

pub fn shutdown_pair() -> (ShutdownTrigger, ShutdownSignal) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger(tx), ShutdownSignal(rx))
}

impl ShutdownTrigger {
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }
}

impl ShutdownSignal {
    /// Waits for shutdown. Cancel-safe; returns at once if it was already triggered.
    pub async fn wait(&mut self) {
        // An error means the trigger is gone, which only happens when the process is ending.
        let _ = self.0.wait_for(|v| *v).await;
    }

    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }
}
