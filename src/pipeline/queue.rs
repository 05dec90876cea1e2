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

use loghaul_config::WhenFull;
use loghaul_core::EventBatch;
use loghaul_core::finalizer::Ack;
use tokio::sync::{Semaphore, mpsc};

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
    /// A memory buffer's `max_events`: one permit per queued event (see [`events_of`]).
    pub(super) events: Option<Arc<EventLimit>>,
    /// What a full queue does with the next batch.
    pub(super) when_full: WhenFull,
}

/// The receiving end of a component's input queue; keeps its queue gauges honest.
pub struct Input {
    rx: mpsc::Receiver<Delivery>,
    pub(super) metrics: Arc<ComponentMetrics>,
    events: Option<Arc<EventLimit>>,
}

/// A memory buffer's bound in events, besides the queue's bound in batches.
pub(super) struct EventLimit {
    pub(super) permits: Semaphore,
    pub(super) max: usize,
}

/// The permits a batch of `n` events takes: a batch larger than the whole buffer takes all of
/// them (and so moves alone) rather than never fitting.
pub(super) fn events_of(limit: &EventLimit, n: usize) -> u32 {
    n.min(limit.max).min(u32::MAX as usize) as u32
}

/// How a component's input queue is bounded.
#[derive(Debug, Clone, Copy)]
pub struct QueueLimits {
    /// Capacity in batches.
    pub batches: usize,
    /// A cap on the events queued, if any.
    pub max_events: Option<usize>,
    pub when_full: WhenFull,
}

impl QueueLimits {
    /// A queue of `batches` that blocks when full.
    pub fn batches(batches: usize) -> QueueLimits {
        QueueLimits {
            batches,
            max_events: None,
            when_full: WhenFull::Block,
        }
    }
}

/// A new input queue of `capacity` batches for the component whose metrics are given, and the
/// sender to hand out. Senders run `prepare`, if given, on every batch before queueing it.
pub fn input_queue(
    metrics: Arc<ComponentMetrics>,
    prepare: Option<Arc<dyn Prepare>>,
    capacity: usize,
) -> (InputSender, Input) {
    bounded_queue(metrics, prepare, QueueLimits::batches(capacity))
}

/// A new input queue bounded as `limits` says (a sink's memory buffer).
pub fn bounded_queue(
    metrics: Arc<ComponentMetrics>,
    prepare: Option<Arc<dyn Prepare>>,
    limits: QueueLimits,
) -> (InputSender, Input) {
    let capacity = limits.batches.max(1);
    let (tx, rx) = mpsc::channel(capacity);
    metrics
        .buffer_max_batches
        .store(capacity as i64, Ordering::Relaxed);
    let events = limits.max_events.map(|max| {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(EventLimit {
            permits: Semaphore::new(max),
            max,
        })
    });
    (
        InputSender {
            tx,
            downstream: metrics.clone(),
            prepare,
            events: events.clone(),
            when_full: limits.when_full,
        },
        Input {
            rx,
            metrics,
            events,
        },
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
        if let Some(limit) = &self.events {
            limit
                .permits
                .add_permits(events_of(limit, batch.len()) as usize);
        }
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
