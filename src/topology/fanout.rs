//! Bounded batch channels between components, and the fan-out that feeds every downstream.
//!
//! A source or transform owns a [`Fanout`]; each downstream transform or sink owns one [`Input`].
//! A batch is wrapped in one `Arc` and the same allocation goes to every downstream, so fan-out
//! to N sinks costs N channel sends, not N copies. Queues are bounded in batches (and batches
//! are bounded in bytes by the sources' read sizes), so memory is bounded: when a sink falls
//! behind, `send` waits, the source stops reading, and TCP pushes back on the sender.
//!
//! A sink may hand its input queue a [`Prepare`] step (the file and console sinks' encoder): the
//! fan-out runs it on the sending task, so encoding happens on the runtime's worker threads, in
//! parallel across connections and while the freshly decoded batch is still in that core's cache.
//! The sink's own thread is left with the writes.

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use loghaul_core::EventBatch;
use tokio::sync::mpsc;

use crate::metrics::{ComponentMetrics, DiscardReason};

/// Capacity of every component's input queue, in batches.
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

/// One batch as one downstream receives it: the shared batch plus what that downstream's
/// [`Prepare`] step made of it.
pub struct Delivery {
    pub batch: Arc<EventBatch>,
    pub prepared: Option<Prepared>,
}

impl Deref for Delivery {
    type Target = EventBatch;

    fn deref(&self) -> &EventBatch {
        &self.batch
    }
}

/// The sending half a fan-out holds for one downstream component.
#[derive(Clone)]
struct Output {
    tx: mpsc::Sender<Delivery>,
    downstream: Arc<ComponentMetrics>,
    prepare: Option<Arc<dyn Prepare>>,
}

/// The receiving end of a component's input queue; keeps its queue gauges honest.
pub struct Input {
    rx: mpsc::Receiver<Delivery>,
    metrics: Arc<ComponentMetrics>,
}

/// A new input queue for the component whose metrics are given, and the sender to hand out.
/// Senders run `prepare`, if given, on every batch before queueing it.
pub fn input_queue(
    metrics: Arc<ComponentMetrics>,
    prepare: Option<Arc<dyn Prepare>>,
) -> (InputSender, Input) {
    let (tx, rx) = mpsc::channel(QUEUE_BATCHES);
    metrics
        .buffer_max_batches
        .store(QUEUE_BATCHES as i64, Ordering::Relaxed);
    (
        InputSender(Output {
            tx,
            downstream: metrics.clone(),
            prepare,
        }),
        Input { rx, metrics },
    )
}

/// A handle used while wiring the graph: turns into a fan-out output.
#[derive(Clone)]
pub struct InputSender(Output);

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

/// Sends each batch to every downstream component.
#[derive(Clone)]
pub struct Fanout {
    outputs: Vec<Output>,
    metrics: Arc<ComponentMetrics>,
}

impl Fanout {
    pub fn new(outputs: Vec<InputSender>, metrics: Arc<ComponentMetrics>) -> Fanout {
        Fanout {
            outputs: outputs.into_iter().map(|o| o.0).collect(),
            metrics,
        }
    }

    /// Delivers to every downstream, waiting while a queue is full (back-pressure).
    pub async fn send(&self, batch: EventBatch) {
        let n = batch.len();
        if n == 0 {
            return;
        }
        let bytes = batch.arena.len();
        let batch = Arc::new(batch);
        let mut delivered = false;
        for out in &self.outputs {
            let prepared = out.prepare.as_ref().map(|p| p.prepare(&batch));
            // Reserve first, count second: if this future is cancelled while waiting for space,
            // nothing was counted, so the queue gauges stay exact.
            match out.tx.reserve().await {
                Ok(permit) => {
                    out.enqueued(n);
                    permit.send(Delivery {
                        batch: batch.clone(),
                        prepared,
                    });
                    delivered = true;
                }
                Err(_) => self
                    .metrics
                    .discarded(DiscardReason::DownstreamClosed, n as u64),
            }
        }
        if delivered {
            self.metrics.sent(n, bytes);
        }
    }

    /// Delivers without waiting: a full queue drops the batch for that downstream and counts it.
    /// For sources that cannot push back on their senders (UDP).
    pub fn try_send(&self, batch: EventBatch) {
        let n = batch.len();
        if n == 0 {
            return;
        }
        let bytes = batch.arena.len();
        let batch = Arc::new(batch);
        let mut delivered = false;
        for out in &self.outputs {
            match out.tx.try_reserve() {
                Ok(permit) => {
                    out.enqueued(n);
                    // Prepared only once there is room: a batch dropped here costs no encoding.
                    let prepared = out.prepare.as_ref().map(|p| p.prepare(&batch));
                    permit.send(Delivery {
                        batch: batch.clone(),
                        prepared,
                    });
                    delivered = true;
                }
                Err(mpsc::error::TrySendError::Full(())) => {
                    self.metrics.discarded(DiscardReason::QueueFull, n as u64)
                }
                Err(mpsc::error::TrySendError::Closed(())) => self
                    .metrics
                    .discarded(DiscardReason::DownstreamClosed, n as u64),
            }
        }
        if delivered {
            self.metrics.sent(n, bytes);
        }
    }
}

impl Output {
    // The gauge goes up before the send so the receiver's decrement can never see it negative.
    fn enqueued(&self, n: usize) {
        self.downstream
            .buffer_events
            .fetch_add(n as i64, Ordering::Relaxed);
        self.downstream
            .buffer_batches
            .fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Registry;
    use bytes::Bytes;
    use loghaul_core::{Event, Span};

    fn batch(n: usize) -> EventBatch {
        let mut b = EventBatch::new(Bytes::from_static(b"x"), "src".into(), "test");
        b.events = vec![
            Event {
                message: Span::new(0, 1),
                ..Event::default()
            };
            n
        ];
        b
    }

    #[tokio::test]
    async fn fans_out_one_allocation_to_every_sink() {
        let reg = Registry::default();
        let (a_tx, mut a) = input_queue(reg.register("a", "sink", "file"), None);
        let (b_tx, mut b) = input_queue(reg.register("b", "sink", "file"), None);
        let src = reg.register("s", "source", "syslog");
        let fan = Fanout::new(vec![a_tx, b_tx], src.clone());
        fan.send(batch(3)).await;
        let (Some(x), Some(y)) = (a.recv().await, b.recv().await) else {
            panic!("both sinks get the batch");
        };
        assert!(Arc::ptr_eq(&x.batch, &y.batch));
        assert_eq!(src.sent_events.load(Ordering::Relaxed), 3);
        assert_eq!(a.metrics.buffer_events.load(Ordering::Relaxed), 0);
        assert_eq!(a.metrics.received_events.load(Ordering::Relaxed), 3);
    }

    #[tokio::test]
    async fn send_waits_while_a_sink_is_full() {
        let reg = Registry::default();
        let (tx, mut rx) = input_queue(reg.register("a", "sink", "file"), None);
        let fan = Fanout::new(vec![tx], reg.register("s", "source", "syslog"));
        for _ in 0..QUEUE_BATCHES {
            fan.send(batch(1)).await;
        }
        // The queue is full: the next send must wait (this is what stops a TCP source reading).
        let blocked =
            tokio::time::timeout(std::time::Duration::from_millis(100), fan.send(batch(1))).await;
        assert!(
            blocked.is_err(),
            "send must not complete while the queue is full"
        );
        assert_eq!(
            rx.metrics.buffer_batches.load(Ordering::Relaxed),
            QUEUE_BATCHES as i64
        );
        // Once the sink takes one batch, the sender proceeds.
        assert!(rx.recv().await.is_some());
        tokio::time::timeout(std::time::Duration::from_secs(5), fan.send(batch(1)))
            .await
            .map_err(|_| "send stayed blocked after space freed")
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[tokio::test]
    async fn try_send_counts_drops_when_full() {
        let reg = Registry::default();
        let (tx, _rx) = input_queue(reg.register("a", "sink", "file"), None);
        let src = reg.register("s", "source", "syslog");
        let fan = Fanout::new(vec![tx], src.clone());
        for _ in 0..QUEUE_BATCHES + 5 {
            fan.try_send(batch(2));
        }
        assert_eq!(src.discarded_count(DiscardReason::QueueFull), 10);
        assert_eq!(
            src.sent_events.load(Ordering::Relaxed),
            2 * QUEUE_BATCHES as u64
        );
    }
}
