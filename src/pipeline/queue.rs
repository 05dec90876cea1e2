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
//!
//! At a stop, a memory buffer whose sink cannot drain it in time is taken over ([`Handover`]):
//! the sink's `recv` answers "no more" and the topology writes what is still queued to disk
//! (see `pipeline::spill`), so the receiving end is shared between the two, behind a lock only
//! they ever take.

use std::collections::VecDeque;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use loghaul_config::WhenFull;
use loghaul_core::EventBatch;
use loghaul_core::finalizer::{Ack, Custody};
use tokio::sync::{Semaphore, mpsc, watch};

use crate::metrics::ComponentMetrics;

/// Default capacity of a component's input queue, in batches. Eight keep both cores busy on
/// every path the lab measures; 32 held 55–60 MiB at the peak of `syslog` and `forward` for the
/// same rate (8: 32–38 MiB), and touched more memory per event.
pub const QUEUE_BATCHES: usize = 8;

/// A sink's per-batch work that runs on the sender's task instead of the sink's thread.
pub trait Prepare: Send + Sync {
    fn prepare(&self, batch: &EventBatch) -> Prepared;

    /// Whether the sink takes batches of undecoded records
    /// ([`EventBatch::raw_records`]) as they are: it reads nothing of a record but passes it
    /// on. Every other downstream is given them decoded.
    fn takes_raw_records(&self) -> bool {
        false
    }
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
    shared: Arc<Receiving>,
    /// Fires when the queue has been handed over: `recv` then says "no more". `None` until
    /// [`Input::handover`] makes one.
    handed_over: Option<watch::Receiver<bool>>,
    pub(super) metrics: Arc<ComponentMetrics>,
    /// Whether to list the batches in hand (only a queue that may be handed over needs it).
    track: bool,
}

/// What the component and, at a stop, a [`Handover`] share of the receiving end.
struct Receiving {
    /// Uncontended while the component runs (only it receives); the hand-over takes it once.
    rx: tokio::sync::Mutex<mpsc::Receiver<Delivery>>,
    metrics: Arc<ComponentMetrics>,
    events: Option<Arc<EventLimit>>,
    /// Once a [`Handover`] exists: the batches the component took, oldest first. Each entry
    /// lives as long as the delivery's ack and its forks (see `Ack::holding`), so one that
    /// still upgrades is a batch the component has in hand and has not settled.
    in_hand: std::sync::Mutex<VecDeque<Weak<InHand>>>,
}

/// A batch in its component's hands (see [`Receiving::in_hand`]); a stop that wrote it to disk
/// marks it saved, so that the component's ack reports it delivered however the component ends.
struct InHand {
    batch: Arc<EventBatch>,
    saved: AtomicBool,
}

impl Custody for InHand {
    fn saved(&self) -> bool {
        self.saved.load(Ordering::Acquire)
    }
}

/// A batch a component held when its queue was handed over (see [`Handover::start`]).
pub struct Held(Arc<InHand>);

impl Held {
    pub fn batch(&self) -> &Arc<EventBatch> {
        &self.0.batch
    }

    /// The batch is on disk: from now on the component's ack reports it delivered, whatever
    /// becomes of it (its sources learn they need not send it again).
    pub fn saved(&self) {
        self.0.saved.store(true, Ordering::Release);
    }
}

/// Past this many entries, settled ones are swept out of the middle too, not only the front (a
/// batch a sink retries for long would otherwise keep every later one listed).
const SWEEP_IN_HAND: usize = 64;

impl Receiving {
    /// Gives back what a queued batch held of the queue: its event permits and its gauges.
    fn release(&self, batch: &EventBatch) {
        if let Some(limit) = &self.events {
            limit
                .permits
                .add_permits(events_of(limit, batch.len()) as usize);
        }
        self.metrics
            .buffer_events
            .fetch_sub(batch.len() as i64, Ordering::Relaxed);
        self.metrics.buffer_batches.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Takes a queue away from its component at a stop: from [`Handover::start`] on, the
/// component's `recv` returns `None` (as if its upstreams had gone), and what is queued, or
/// still sent, comes out of [`Handover::recv`] instead.
pub struct Handover {
    shared: Arc<Receiving>,
    trigger: watch::Sender<bool>,
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
            shared: Arc::new(Receiving {
                rx: tokio::sync::Mutex::new(rx),
                metrics: metrics.clone(),
                events,
                in_hand: std::sync::Mutex::new(VecDeque::new()),
            }),
            handed_over: None,
            metrics,
            track: false,
        },
    )
}

impl Input {
    /// The next batch, or `None` once every upstream is gone (shutdown) or the queue was handed
    /// over. Cancel-safe.
    pub async fn recv(&mut self) -> Option<Delivery> {
        let mut rx = self.shared.rx.lock().await;
        let batch = match &mut self.handed_over {
            None => rx.recv().await?,
            Some(handed_over) => {
                if *handed_over.borrow() {
                    return None;
                }
                tokio::select! {
                    biased;
                    // A hand-over that was dropped unused never comes.
                    Ok(_) = handed_over.wait_for(|v| *v) => return None,
                    batch = rx.recv() => batch?,
                }
            }
        };
        drop(rx);
        Some(self.account(batch))
    }

    /// A batch if one is queued right now.
    pub fn try_recv(&mut self) -> Option<Delivery> {
        if self.handed_over.as_ref().is_some_and(|h| *h.borrow()) {
            return None;
        }
        let batch = self.shared.rx.try_lock().ok()?.try_recv().ok()?;
        Some(self.account(batch))
    }

    /// A handle that can take this queue away from its component at a stop; from now on the
    /// queue lists the batches its component holds, so the hand-over can take those too.
    pub fn handover(&mut self) -> Handover {
        let (trigger, handed_over) = watch::channel(false);
        self.handed_over = Some(handed_over);
        self.track = true;
        Handover {
            shared: self.shared.clone(),
            trigger,
        }
    }

    fn account(&self, mut d: Delivery) -> Delivery {
        self.shared.release(&d.batch);
        self.metrics.received(d.batch.len(), d.batch.arena.len());
        if self.track {
            let entry = Arc::new(InHand {
                batch: d.batch.clone(),
                saved: AtomicBool::new(false),
            });
            if let Ok(mut in_hand) = self.shared.in_hand.lock() {
                while in_hand.front().is_some_and(|e| e.strong_count() == 0) {
                    in_hand.pop_front();
                }
                if in_hand.len() >= SWEEP_IN_HAND {
                    in_hand.retain(|e| e.strong_count() > 0);
                }
                in_hand.push_back(Arc::downgrade(&entry));
            }
            d.ack = d.ack.holding(entry);
        }
        d
    }
}

impl Handover {
    /// Takes the queue: the component's `recv` returns `None` from now on. Returns the batches
    /// the component holds and has not settled, oldest first: it may still deliver them, or
    /// never.
    pub fn start(&self) -> Vec<Held> {
        self.trigger.send_replace(true);
        match self.shared.in_hand.lock() {
            Ok(mut in_hand) => in_hand
                .drain(..)
                .filter_map(|e| e.upgrade())
                .map(Held)
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The next queued batch, waiting for one while upstreams may still send; `None` once they
    /// are all gone. Call [`Handover::start`] first, or this competes with the component.
    pub async fn recv(&self) -> Option<Delivery> {
        let batch = self.shared.rx.lock().await.recv().await?;
        self.shared.release(&batch);
        Some(batch)
    }

    /// A batch if one is queued right now.
    pub fn try_recv(&self) -> Option<Delivery> {
        let batch = self.shared.rx.try_lock().ok()?.try_recv().ok()?;
        self.shared.release(&batch);
        Some(batch)
    }
}

impl InputSender {
    /// Whether the downstream takes batches of undecoded records (see
    /// [`Prepare::takes_raw_records`]).
    pub(super) fn takes_raw_records(&self) -> bool {
        self.prepare.as_ref().is_some_and(|p| p.takes_raw_records())
    }

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

/// A prepare step that takes undecoded records as they are, as the fluent sink's does.
#[cfg(test)]
pub(crate) struct PassOn;

#[cfg(test)]
impl Prepare for PassOn {
    fn prepare(&self, _: &EventBatch) -> Prepared {
        Prepared::default()
    }

    fn takes_raw_records(&self) -> bool {
        true
    }
}

/// A batch of one undecoded forward record `{"message": "hi", "n": 1}` at time 5.
#[cfg(test)]
pub(crate) fn raw_batch() -> EventBatch {
    let body = b"\x05\x82\xa7message\xa2hi\xa1n\x01";
    let mut b = EventBatch::new(bytes::Bytes::from_static(body), "src".into(), "fluent");
    b.raw_records = true;
    b.events = vec![loghaul_core::Event {
        fields: (0, body.len() as u32),
        ..loghaul_core::Event::default()
    }];
    b
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use loghaul_core::{BatchNotifier, BatchStatus, BatchStatusReceiver, Event, Span};

    use super::*;
    use crate::metrics::{ComponentKind, Registry};
    use crate::pipeline::Fanout;

    /// A tracked batch of `n` events whose arena is `tag` (to tell batches apart).
    fn batch(tag: &'static str, n: usize) -> (EventBatch, BatchStatusReceiver) {
        let (finalizer, status) = BatchNotifier::new_with_receiver();
        let mut b = EventBatch::new(Bytes::from_static(tag.as_bytes()), "src".into(), "test");
        b.events = vec![
            Event {
                message: Span::new(0, tag.len()).into(),
                ..Event::default()
            };
            n
        ];
        b.finalizer = finalizer;
        (b, status)
    }

    fn tag(d: &Delivery) -> &[u8] {
        &d.batch.arena[..]
    }

    /// A queue bounded by `limits` behind a fan-out, and the sink's metrics.
    fn queue(limits: QueueLimits) -> (Fanout, Input, Arc<ComponentMetrics>) {
        let reg = Registry::default();
        let metrics = reg.register("sink", ComponentKind::Sink, "test");
        let (tx, input) = bounded_queue(metrics.clone(), None, limits);
        let fanout = Fanout::new(vec![tx], reg.register("src", ComponentKind::Source, "test"));
        (fanout, input, metrics)
    }

    /// Whether `send` is still waiting after a second of virtual time.
    async fn blocks(fanout: &Fanout, b: EventBatch) -> bool {
        tokio::time::timeout(Duration::from_secs(1), fanout.send(b))
            .await
            .is_err()
    }

    #[tokio::test(start_paused = true)]
    async fn batches_come_out_in_order_and_a_full_queue_holds_the_sender() {
        let (fanout, mut input, metrics) = queue(QueueLimits::batches(2));
        let (a, _sa) = batch("a", 1);
        let (b, _sb) = batch("b", 2);
        fanout.send(a).await;
        fanout.send(b).await;
        assert_eq!(metrics.buffer_batches.load(Ordering::Relaxed), 2);
        assert_eq!(metrics.buffer_events.load(Ordering::Relaxed), 3);
        assert_eq!(metrics.buffer_max_batches.load(Ordering::Relaxed), 2);

        // Full: a third send waits (back-pressure) rather than queueing or dropping.
        let (c, _sc) = batch("c", 1);
        assert!(
            blocks(&fanout, c).await,
            "a full queue must hold the sender"
        );
        assert_eq!(metrics.buffer_batches.load(Ordering::Relaxed), 2);

        let first = input.recv().await;
        assert_eq!(first.as_ref().map(tag), Some(&b"a"[..]));
        assert_eq!(metrics.buffer_batches.load(Ordering::Relaxed), 1);
        assert_eq!(metrics.buffer_events.load(Ordering::Relaxed), 2);
        // Room again: the next send goes straight in.
        let (d, _sd) = batch("d", 1);
        assert!(!blocks(&fanout, d).await);
        let rest: Vec<Vec<u8>> = [input.try_recv(), input.try_recv()]
            .into_iter()
            .flatten()
            .map(|d| tag(&d).to_vec())
            .collect();
        assert_eq!(rest, [b"b".to_vec(), b"d".to_vec()]);
        assert!(input.try_recv().is_none());
        assert_eq!(metrics.buffer_events.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn max_events_bounds_the_queue_and_an_oversized_batch_moves_alone() {
        let (fanout, mut input, _) = queue(QueueLimits {
            batches: 32,
            max_events: Some(5),
            when_full: WhenFull::Block,
        });
        let (a, _sa) = batch("a", 3);
        fanout.send(a).await;
        let (b, _sb) = batch("b", 3);
        assert!(blocks(&fanout, b).await, "3 + 3 events exceed max_events 5");
        assert!(input.recv().await.is_some());
        // The first batch's permits came back with its receipt.
        let (b, _sb) = batch("b", 3);
        assert!(!blocks(&fanout, b).await);
        assert!(input.recv().await.is_some());
        // Larger than the whole bound: takes every permit, so it fits an empty queue only.
        let (big, _sbig) = batch("big", 10);
        assert!(!blocks(&fanout, big).await);
        let (small, _ssmall) = batch("s", 1);
        assert!(
            blocks(&fanout, small).await,
            "the oversized batch holds all permits"
        );
        assert_eq!(input.recv().await.map(|d| d.len()), Some(10));
        let (small, _ssmall) = batch("s", 1);
        assert!(!blocks(&fanout, small).await);
    }

    #[tokio::test(start_paused = true)]
    async fn drop_newest_discards_at_once_and_reports_the_batch_errored() {
        let (fanout, mut input, metrics) = queue(QueueLimits {
            batches: 1,
            max_events: None,
            when_full: WhenFull::DropNewest,
        });
        let (a, sa) = batch("a", 1);
        fanout.send(a).await;
        let (b, sb) = batch("b", 4);
        assert!(!blocks(&fanout, b).await, "drop_newest never waits");
        assert_eq!(sb.await, BatchStatus::Errored);
        assert_eq!(
            metrics.discarded_count(crate::metrics::DiscardReason::BufferFull),
            4
        );
        let d = input.recv().await;
        assert_eq!(d.as_ref().map(tag), Some(&b"a"[..]));
        if let Some(d) = d {
            d.ack.commit(BatchStatus::Delivered);
        }
        assert_eq!(sa.await, BatchStatus::Delivered);
    }

    #[tokio::test]
    async fn a_delivery_dropped_uncommitted_reports_errored() {
        let (fanout, mut input, _) = queue(QueueLimits::batches(4));
        let (a, sa) = batch("a", 1);
        let (b, sb) = batch("b", 1);
        fanout.send(a).await;
        fanout.send(b).await;
        let (Some(da), Some(db)) = (input.recv().await, input.recv().await) else {
            panic!("two deliveries");
        };
        da.ack.commit(BatchStatus::Delivered);
        drop(da.batch);
        drop(db);
        assert_eq!(sa.await, BatchStatus::Delivered);
        assert_eq!(sb.await, BatchStatus::Errored);
    }

    #[tokio::test]
    async fn recv_drains_what_is_queued_then_ends_when_every_sender_is_gone() {
        let (fanout, mut input, _) = queue(QueueLimits::batches(4));
        let (a, _sa) = batch("a", 1);
        fanout.send(a).await;
        drop(fanout);
        assert_eq!(input.recv().await.as_ref().map(tag), Some(&b"a"[..]));
        assert!(input.recv().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_handover_ends_the_components_recv_and_takes_the_rest_in_order() {
        let (fanout, mut input, _) = queue(QueueLimits::batches(8));
        let handover = input.handover();
        for t in ["a", "b", "c"] {
            let (b, _s) = batch(t, 1);
            fanout.send(b).await;
        }
        // The component takes "a" and settles it, takes "b" and keeps it in hand.
        let (Some(a), Some(b)) = (input.recv().await, input.recv().await) else {
            panic!("two deliveries");
        };
        a.ack.commit(BatchStatus::Delivered);
        drop(a.batch);
        let held = handover.start();
        assert_eq!(held.len(), 1, "only the unsettled batch is in hand");
        assert_eq!(&held[0].batch().arena[..], b"b");
        assert!(input.recv().await.is_none(), "the component's recv ends");
        assert!(input.try_recv().is_none());
        assert_eq!(handover.recv().await.as_ref().map(tag), Some(&b"c"[..]));
        drop(fanout);
        assert!(handover.recv().await.is_none());
        drop(b);
    }

    #[tokio::test]
    async fn a_batch_saved_by_the_handover_reports_delivered_whatever_the_component_does() {
        let (fanout, mut input, _) = queue(QueueLimits::batches(8));
        let handover = input.handover();
        let (a, sa) = batch("a", 1);
        fanout.send(a).await;
        let Some(d) = input.recv().await else {
            panic!("a delivery");
        };
        let held = handover.start();
        assert_eq!(held.len(), 1);
        held[0].saved();
        drop(held);
        // The component ends without committing: the batch is on disk, so not an error.
        drop(d);
        assert_eq!(sa.await, BatchStatus::Delivered);
    }

    #[tokio::test]
    async fn a_handover_dropped_unused_leaves_the_component_receiving() {
        let (fanout, mut input, _) = queue(QueueLimits::batches(8));
        drop(input.handover());
        let (a, _sa) = batch("a", 1);
        fanout.send(a).await;
        assert_eq!(input.recv().await.as_ref().map(tag), Some(&b"a"[..]));
    }
}
