//! The shutdown signals tasks watch: set once, on SIGINT/SIGTERM (or, for one source, when a
//! reload removes or retires it).

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

    /// A signal that fires when this one or `other` does.
    pub fn or(&self, other: &ShutdownSignal) -> ShutdownSignal {
        let (trigger, signal) = shutdown_pair();
        let (mut a, mut b) = (self.clone(), other.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = a.wait() => {}
                () = b.wait() => {}
                // Nobody listens any more: the source has ended.
                () = trigger.0.closed() => return,
            }
            trigger.trigger();
        });
        signal
    }

    /// A signal that never fires (a test's source, which nothing retires).
    #[cfg(test)]
    pub fn never() -> ShutdownSignal {
        let (trigger, signal) = shutdown_pair();
        // Kept alive for ever: a dropped trigger makes `wait` return.
        std::mem::forget(trigger);
        signal
    }
}
