//! Bounded batch queues between components: the sending half a fan-out holds ([`InputSender`])
//! and the receiving end a transform or sink owns ([`Input`]).
//!
//! A batch is wrapped in one `Arc` and the same allocation goes to every downstream, so fan-out
//! to N sinks costs N channel sends, not N copies. Queues are bounded in batches (each sink sets
//! its own capacity; batches are bounded in bytes by the sources' read sizes), so memory is
//! bounded: when a sink falls behind, `send` waits, the source stops reading, and TCP pushes back
//! on the sender.
//!
//! Every [`Delivery`] carries an [`Ack`]: the downstream's obligation to report what became of
//! the batch. A delivery dropped without a commit (a sink that died with batches still queued,
//! or that dropped one on the floor) reports `Errored`, so a lost batch is never taken for a
//! delivered one.
//!
//! A sink may hand its input queue a [`Prepare`] step (the file and console sinks' encoder): the
//! sender runs it on its own task, so encoding happens on the runtime's worker threads, in
//! parallel across connections and while the freshly decoded batch is still in that core's cache.
//! The sink's own thread is left with the writes.

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use loghaul_core::EventBatch;
use loghaul_core::finalizer::Ack;
use tokio::sync::mpsc;

use crate::metrics::ComponentMetrics;

/// Default capacity of a component's input queue, in batches.
pub const QUEUE_BATCHES: usize = 32;

/// A sink's per-batch work that runs on the sender's task instead of the sink's thread.
pub trait Prepare: Send + Sync {
    fn prepare(&self, batch: &EventBatch) -> Prepared;
}

/// What a [`Prepare`] step made of one batch: the batch's encoded bytes, and, when the sink
/// asked for them, where each event's bytes end (`ends[i]` is the end offset of event `i`).
#[derive(Debug, Default)]
pub struct Prepared {
    pub bytes: Vec<u8>,
    pub ends: Vec<u32>,
}

/// One batch as one downstream receives it: the shared batch, what that downstream's
/// [`Prepare`] step made of it, and the downstream's [`Ack`] for it.
pub struct Delivery {
    pub batch: Arc<EventBatch>,
    pub prepared: Option<Prepared>,
    /// Commit it once the batch is handled (written, passed on, filtered); dropping it
    /// uncommitted reports the batch as `Errored`. The batch carries its finalizer too, so the
    /// source learns the fate once every holder has committed *and* let go of the batch: a sink
    /// keeps neither longer than its write.
    pub ack: Ack,
}

impl Deref for Delivery {
    type Target = EventBatch;

    fn deref(&self) -> &EventBatch {
        &self.batch
    }
}

/// The sending half of one component's input queue, as a fan-out holds it.
#[derive(Clone)]
pub struct InputSender {
    pub(super) tx: mpsc::Sender<Delivery>,
    pub(super) downstream: Arc<ComponentMetrics>,
    pub(super) prepare: Option<Arc<dyn Prepare>>,
}

/// The receiving end of a component's input queue; keeps its queue gauges honest.
pub struct Input {
    rx: mpsc::Receiver<Delivery>,
    pub(super) metrics: Arc<ComponentMetrics>,
}

/// A new input queue of `capacity` batches for the component whose metrics are given, and the
/// sender to hand out. Senders run `prepare`, if given, on every batch before queueing it.
pub fn input_queue(
    metrics: Arc<ComponentMetrics>,
    prepare: Option<Arc<dyn Prepare>>,
    capacity: usize,
) -> (InputSender, Input) {
    let capacity = capacity.max(1);
    let (tx, rx) = mpsc::channel(capacity);
    metrics
        .buffer_max_batches
        .store(capacity as i64, Ordering::Relaxed);
    (
        InputSender {
            tx,
            downstream: metrics.clone(),
            prepare,
        },
        Input { rx, metrics },
    )
}

impl Input {
    /// The next batch, or `None` once every upstream is gone (shutdown).
    pub async fn recv(&mut self) -> Option<Delivery> {
        let batch = self.rx.recv().await?;
        self.account(&batch);
        Some(batch)
    }

    /// A batch if one is queued right now.
    pub fn try_recv(&mut self) -> Option<Delivery> {
        let batch = self.rx.try_recv().ok()?;
        self.account(&batch);
        Some(batch)
    }

    fn account(&self, batch: &EventBatch) {
        self.metrics
            .buffer_events
            .fetch_sub(batch.len() as i64, Ordering::Relaxed);
        self.metrics.buffer_batches.fetch_sub(1, Ordering::Relaxed);
        self.metrics.received(batch.len(), batch.arena.len());
    }
}

impl InputSender {
    /// Queues `batch` into the reserved slot, with a fresh [`Ack`], and counts it in the
    /// downstream's queue gauges.
    pub(super) fn deliver(
        &self,
        permit: mpsc::Permit<'_, Delivery>,
        batch: &Arc<EventBatch>,
        prepared: Option<Prepared>,
    ) {
        // The gauges go up before the send so the receiver's decrement can never see them
        // negative.
        self.downstream
            .buffer_events
            .fetch_add(batch.len() as i64, Ordering::Relaxed);
        self.downstream
            .buffer_batches
            .fetch_add(1, Ordering::Relaxed);
        permit.send(Delivery {
            batch: batch.clone(),
            prepared,
            ack: batch.finalizer.ack(),
        });
    }
}
