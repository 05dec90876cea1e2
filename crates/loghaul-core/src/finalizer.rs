//! End-to-end acknowledgements: a source learns when every sink has committed (or rejected) the
//! events of a batch it produced.
//!
//! The source makes a [`BatchNotifier`] and keeps the [`BatchStatusReceiver`]. The batch carries a
//! [`Finalizer`] (a cheap clone of the notifier). Each sink that takes the batch asks for an
//! [`Ack`], keeps it until its write is committed (written, flushed, or persisted to a buffer),
//! then calls [`Ack::commit`]. When the last clone anywhere is dropped, the receiver resolves with
//! the worst status any holder reported. An `Ack` dropped without `commit` (a sink that died)
//! counts as `Errored`, so a crash can never be mistaken for delivery.
//!
//! A transform that merges events of several batches into one (`reduce`) puts on its output a
//! [`Finalizer::merge`] of their finalizers: a finalizer of its own that holds the others and,
//! when its last holder lets go, reports its worst status to each of them. Every source then
//! learns its fate only once the merged batch is settled downstream.
//!
//! ```text
//!  batch A ─Finalizer A─┐
//!                       ├─► merged Finalizer M (holds A and B) ─► output batch ─► sinks' Acks
//!  batch B ─Finalizer B─┘      M's last holder gone: A.update(worst), B.update(worst), drop A, B
//! ```

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use tokio::sync::oneshot;

/// The outcome of a batch, ordered from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BatchStatus {
    /// Every sink committed every event.
    Delivered = 0,
    /// Some sink failed in a way a retry may fix (I/O error, peer gone).
    Errored = 1,
    /// Some sink refused the events for good (they can never be written).
    Rejected = 2,
}

impl BatchStatus {
    fn from_u8(v: u8) -> BatchStatus {
        match v {
            0 => BatchStatus::Delivered,
            1 => BatchStatus::Errored,
            _ => BatchStatus::Rejected,
        }
    }
}

struct Inner {
    status: AtomicU8,
    // A std Mutex is fine: it is touched once, on the last drop.
    tx: Mutex<Option<oneshot::Sender<BatchStatus>>>,
    /// The finalizers a merged finalizer stands for (see [`Finalizer::merge`]): each is told
    /// this one's status, and let go, when this one's last holder is gone.
    parents: Vec<Finalizer>,
}

impl Inner {
    fn update(&self, status: BatchStatus) {
        self.status.fetch_max(status as u8, Ordering::AcqRel);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let status = BatchStatus::from_u8(self.status.load(Ordering::Acquire));
        for parent in self.parents.drain(..) {
            parent.update(status);
        }
        if let Ok(mut guard) = self.tx.lock()
            && let Some(tx) = guard.take()
        {
            // The source may have stopped waiting; nothing to do then.
            let _ = tx.send(status);
        }
    }
}

/// Created by a source that wants to know the fate of a batch.
pub struct BatchNotifier;

impl BatchNotifier {
    /// A finalizer to put on the batch and the receiver the source awaits.
    pub fn new_with_receiver() -> (Finalizer, BatchStatusReceiver) {
        let (tx, rx) = oneshot::channel();
        let inner = Arc::new(Inner {
            status: AtomicU8::new(BatchStatus::Delivered as u8),
            tx: Mutex::new(Some(tx)),
            parents: Vec::new(),
        });
        (Finalizer { inner: Some(inner) }, BatchStatusReceiver { rx })
    }
}

/// Carried by a batch; cloning it is one atomic increment.
#[derive(Clone, Default)]
pub struct Finalizer {
    inner: Option<Arc<Inner>>,
}

impl std::fmt::Debug for Finalizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Finalizer")
            .field("tracked", &self.inner.is_some())
            .finish()
    }
}

impl Finalizer {
    /// A finalizer that reports to nobody (syslog cannot acknowledge).
    pub fn none() -> Finalizer {
        Finalizer { inner: None }
    }

    /// Whether some source is waiting on this batch.
    pub fn is_tracked(&self) -> bool {
        self.inner.is_some()
    }

    /// A sink's handle: commit it once the sink's write is durable to the sink's standard.
    pub fn ack(&self) -> Ack {
        Ack {
            inner: self.inner.clone(),
            hold: None,
        }
    }

    /// Record an outcome without holding an `Ack` (a transform that rejects events, say).
    pub fn update(&self, status: BatchStatus) {
        if let Some(inner) = &self.inner {
            inner.update(status);
        }
    }

    /// Whether both are the same batch's finalizer (clones of one another); untracked
    /// finalizers are never the same.
    pub fn same(&self, other: &Finalizer) -> bool {
        match (&self.inner, &other.inner) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// One finalizer standing for all of `finalizers`, for a batch whose events were made of
    /// theirs (a merged event): it keeps each of them alive until its own last holder is gone,
    /// then reports its worst status to each. Untracked ones are left out and repeated ones
    /// count once; none left gives an untracked finalizer, one left is that one itself.
    pub fn merge(finalizers: impl IntoIterator<Item = Finalizer>) -> Finalizer {
        let mut parents: Vec<Finalizer> = Vec::new();
        for f in finalizers {
            if f.is_tracked() && !parents.iter().any(|p| p.same(&f)) {
                parents.push(f);
            }
        }
        if parents.len() <= 1 {
            return parents.pop().unwrap_or_default();
        }
        Finalizer {
            inner: Some(Arc::new(Inner {
                status: AtomicU8::new(BatchStatus::Delivered as u8),
                tx: Mutex::new(None),
                parents,
            })),
        }
    }
}

/// What a queue hangs on the ack of a batch its component holds, to follow the batch while the
/// component has it (see [`Ack::holding`]).
pub trait Custody: Send + Sync {
    /// Whether the batch has been saved elsewhere since (written to disk at a stop): the
    /// component's failure to deliver it, or its end with the batch still in hand, is then no
    /// failure of the batch's.
    fn saved(&self) -> bool;
}

/// A sink's obligation to report. Dropping it without [`Ack::commit`] reports `Errored`.
#[must_use = "an Ack dropped without commit reports the batch as Errored"]
pub struct Ack {
    inner: Option<Arc<Inner>>,
    /// Kept alive for as long as this ack or a fork of it is (see [`Ack::holding`]).
    hold: Option<Arc<dyn Custody>>,
}

impl std::fmt::Debug for Ack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ack")
            .field("tracked", &self.inner.is_some())
            .finish()
    }
}

impl Ack {
    /// Report this sink's outcome and release the handle.
    pub fn commit(mut self, status: BatchStatus) {
        if let Some(inner) = self.inner.take() {
            inner.update(self.unless_saved(status));
        }
    }

    /// `Errored` becomes `Delivered` once the batch was saved elsewhere (see [`Custody`]).
    fn unless_saved(&self, status: BatchStatus) -> BatchStatus {
        if status == BatchStatus::Errored && self.hold.as_ref().is_some_and(|h| h.saved()) {
            BatchStatus::Delivered
        } else {
            status
        }
    }

    /// This ack, keeping `token` alive until it and every [`Ack::fork`] of it are committed or
    /// dropped: a queue holds a weak reference to the token to know which batches its
    /// component still has in hand, and may mark it saved (see [`Custody`]).
    pub fn holding(mut self, token: Arc<dyn Custody>) -> Ack {
        self.hold = Some(token);
        self
    }

    /// Another obligation for the same batch, as the sink's own: a sink that splits a batch
    /// across several writes (requests) gives each its fork, so the batch counts as in hand
    /// until the last of them is settled.
    pub fn fork(&self) -> Ack {
        Ack {
            inner: self.inner.clone(),
            hold: self.hold.clone(),
        }
    }
}

impl Drop for Ack {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            inner.update(self.unless_saved(BatchStatus::Errored));
        }
    }
}

/// What a source awaits: resolves once every holder of the batch's finalizer is gone.
pub struct BatchStatusReceiver {
    rx: oneshot::Receiver<BatchStatus>,
}

impl std::fmt::Debug for BatchStatusReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BatchStatusReceiver")
    }
}

impl BatchStatusReceiver {
    /// The batch's fate if it is known already, without waiting (for sources that poll from a
    /// thread of their own, such as the file tailer).
    pub fn try_status(&mut self) -> Option<BatchStatus> {
        match self.rx.try_recv() {
            Ok(status) => Some(status),
            Err(oneshot::error::TryRecvError::Empty) => None,
            // As in `poll`: a vanished sender means delivery is unknown.
            Err(oneshot::error::TryRecvError::Closed) => Some(BatchStatus::Errored),
        }
    }
}

impl std::future::Future for BatchStatusReceiver {
    type Output = BatchStatus;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<BatchStatus> {
        std::pin::Pin::new(&mut self.rx)
            .poll(cx)
            // A sender that vanished without sending cannot happen (Inner always sends on drop),
            // but if it did, the honest answer is that delivery is unknown.
            .map(|r| r.unwrap_or(BatchStatus::Errored))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn delivered_only_after_every_sink_commits() {
        let (fin, mut rx) = BatchNotifier::new_with_receiver();
        let a = fin.ack();
        let b = fin.ack();
        drop(fin);
        a.commit(BatchStatus::Delivered);
        assert!(
            futures_poll_once(&mut rx).is_none(),
            "b still holds the batch"
        );
        b.commit(BatchStatus::Delivered);
        assert_eq!(rx.await, BatchStatus::Delivered);
    }

    #[tokio::test]
    async fn worst_status_wins() {
        let (fin, rx) = BatchNotifier::new_with_receiver();
        fin.ack().commit(BatchStatus::Rejected);
        fin.ack().commit(BatchStatus::Delivered);
        drop(fin);
        assert_eq!(rx.await, BatchStatus::Rejected);
    }

    #[tokio::test]
    async fn dropped_ack_is_an_error() {
        let (fin, rx) = BatchNotifier::new_with_receiver();
        let ack = fin.ack();
        drop(fin);
        drop(ack);
        assert_eq!(rx.await, BatchStatus::Errored);
    }

    struct Token(std::sync::atomic::AtomicBool);

    impl Custody for Token {
        fn saved(&self) -> bool {
            self.0.load(Ordering::Relaxed)
        }
    }

    /// A batch saved elsewhere is delivered however its holder ends; one not saved is not.
    #[tokio::test]
    async fn a_saved_batch_is_delivered_however_its_holder_ends() {
        for (saved, end, want) in [
            (true, None, BatchStatus::Delivered),
            (true, Some(BatchStatus::Errored), BatchStatus::Delivered),
            (true, Some(BatchStatus::Rejected), BatchStatus::Rejected),
            (false, None, BatchStatus::Errored),
            (false, Some(BatchStatus::Errored), BatchStatus::Errored),
        ] {
            let (fin, rx) = BatchNotifier::new_with_receiver();
            let token = Arc::new(Token(std::sync::atomic::AtomicBool::new(false)));
            let ack = fin.ack().holding(token.clone());
            let fork = ack.fork();
            drop(fin);
            fork.commit(BatchStatus::Delivered);
            token.0.store(saved, Ordering::Relaxed);
            match end {
                None => drop(ack),
                Some(status) => ack.commit(status),
            }
            assert_eq!(rx.await, want, "saved {saved}, ended {end:?}");
        }
    }

    /// A merged finalizer holds every source's batch until the merged batch is settled, and
    /// gives each the worst status; an ack dropped uncommitted is an error for all of them.
    #[tokio::test]
    async fn a_merged_finalizer_settles_every_batch_it_stands_for() {
        for (end, want) in [
            (Some(BatchStatus::Delivered), BatchStatus::Delivered),
            (Some(BatchStatus::Rejected), BatchStatus::Rejected),
            (None, BatchStatus::Errored),
        ] {
            let (a, mut rx_a) = BatchNotifier::new_with_receiver();
            let (b, rx_b) = BatchNotifier::new_with_receiver();
            let merged = Finalizer::merge([a.clone(), Finalizer::none(), b.clone(), a.clone()]);
            drop((a, b));
            assert!(futures_poll_once(&mut rx_a).is_none(), "held by the merge");
            let ack = merged.ack();
            drop(merged);
            assert!(futures_poll_once(&mut rx_a).is_none(), "held by the sink");
            match end {
                Some(status) => ack.commit(status),
                None => drop(ack),
            }
            assert_eq!((rx_a.await, rx_b.await), (want, want), "{end:?}");
        }
        // A source's status stays its worst: an error on its own batch is not hidden.
        let (a, rx_a) = BatchNotifier::new_with_receiver();
        let (b, rx_b) = BatchNotifier::new_with_receiver();
        a.update(BatchStatus::Errored);
        let merged = Finalizer::merge([a, b]);
        merged.ack().commit(BatchStatus::Delivered);
        drop(merged);
        assert_eq!(
            (rx_a.await, rx_b.await),
            (BatchStatus::Errored, BatchStatus::Delivered)
        );
    }

    #[test]
    fn merging_one_or_none_adds_nothing() {
        assert!(!Finalizer::merge([Finalizer::none(), Finalizer::none()]).is_tracked());
        let (a, _rx) = BatchNotifier::new_with_receiver();
        assert!(Finalizer::merge([a.clone(), a.clone()]).same(&a));
        assert!(!Finalizer::none().same(&Finalizer::none()));
    }

    #[test]
    fn untracked_finalizer_is_inert() {
        let fin = Finalizer::none();
        assert!(!fin.is_tracked());
        fin.ack().commit(BatchStatus::Rejected);
    }

    fn futures_poll_once(rx: &mut BatchStatusReceiver) -> Option<BatchStatus> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match std::pin::Pin::new(rx).poll(&mut cx) {
            std::task::Poll::Ready(s) => Some(s),
            std::task::Poll::Pending => None,
        }
    }
}
