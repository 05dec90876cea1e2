//! The fan-out that feeds every downstream of a source or transform, and its shedding variant
//! for sources that cannot push back.
//!
//! A batch discarded on the way (its downstream is gone, or shed because its queue stayed full)
//! marks its finalizer `Errored`: whoever waits on it learns the events were not delivered.
//!
//! The list of downstreams is shared by every clone of a fan-out (a source hands one to each
//! connection) and can be replaced while batches flow ([`Readers::replace`]): a reload rewires
//! the graph through it, between two batches, without touching the component that sends.

use std::sync::Arc;

use loghaul_config::WhenFull;
use loghaul_core::{BatchStatus, EventBatch, MemoryBudget};
use tokio::sync::mpsc;

use super::queue::{InputSender, Prepared, events_of};
use crate::metrics::{ComponentMetrics, DiscardReason};

/// The downstreams of one output, shared by every clone of its [`Fanout`].
#[derive(Default)]
pub struct Readers {
    list: std::sync::RwLock<Arc<Vec<InputSender>>>,
    /// How many times the list was replaced.
    version: std::sync::atomic::AtomicU64,
}

impl Readers {
    /// The current list; a send works on one snapshot from start to end.
    fn snapshot(&self) -> Arc<Vec<InputSender>> {
        match self.list.read() {
            Ok(list) => list.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Sends from now on to `readers` only. A downstream left out closes once no other output
    /// feeds it and the sends in flight (holding the old list) are over.
    pub fn replace(&self, readers: Vec<InputSender>) {
        let readers = Arc::new(readers);
        match self.list.write() {
            Ok(mut list) => *list = readers,
            Err(poisoned) => *poisoned.into_inner() = readers,
        }
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// How many times the list was replaced: a sender that sees it change knows its earlier
    /// batches went to downstreams that are no longer there.
    pub fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Sends each batch to every downstream component.
#[derive(Clone)]
pub struct Fanout {
    outputs: Arc<Readers>,
    metrics: Arc<ComponentMetrics>,
    budget: Option<Arc<MemoryBudget>>,
    /// Events sent on this output, for a component with named outputs.
    output: Option<Arc<std::sync::atomic::AtomicU64>>,
    /// Where `loghaul tap` sees what this output sends.
    tap: Option<Arc<crate::tap::TapPoint>>,
    /// Leave the downstreams' prepare steps to the downstreams (see [`Fanout::unprepared`]).
    unprepared: bool,
}

impl Fanout {
    pub fn new(outputs: Vec<InputSender>, metrics: Arc<ComponentMetrics>) -> Fanout {
        Fanout {
            outputs: Arc::new(Readers {
                list: std::sync::RwLock::new(Arc::new(outputs)),
                version: std::sync::atomic::AtomicU64::new(0),
            }),
            metrics,
            budget: None,
            output: None,
            tap: None,
            unprepared: false,
        }
    }

    /// Sends batches without running the downstreams' prepare steps: each downstream then
    /// encodes on its own thread. For a sender that is one serial stage (a disk buffer's
    /// reader) and would otherwise do its sink's encoding too.
    pub fn unprepared(mut self) -> Fanout {
        self.unprepared = true;
        self
    }

    /// Lets `loghaul tap` see what this fan-out sends, through `point`.
    pub fn tapped(mut self, point: Arc<crate::tap::TapPoint>) -> Fanout {
        self.tap = Some(point);
        self
    }

    /// Counts what this fan-out sends as output `name` of its component (`_default` for the
    /// default output of a component with named ones).
    pub fn for_output(mut self, name: &str) -> Fanout {
        self.output = Some(self.metrics.output_counter(name));
        self
    }

    /// Whether any component reads from this fan-out. Sending to one that nobody reads
    /// reports the batch failed; a transform output nobody takes (a route without a reader)
    /// is dropped on purpose instead.
    pub fn is_connected(&self) -> bool {
        !self.outputs.snapshot().is_empty()
    }

    /// Whether every downstream takes batches of undecoded records as they are (see
    /// [`EventBatch::raw_records`]): a source that can leave its records undecoded asks before
    /// each batch. A batch made so while a reload rewires the fan-out is decoded here for any
    /// downstream that reads records.
    pub fn takes_raw_records(&self) -> bool {
        let list = self.outputs.snapshot();
        !list.is_empty() && list.iter().all(InputSender::takes_raw_records)
    }

    /// The list of downstreams this fan-out and its clones send to, for rewiring it.
    pub fn readers(&self) -> Arc<Readers> {
        self.outputs.clone()
    }

    /// Charges every batch against `budget` before it enters a queue (see
    /// [`loghaul_core::budget`]).
    pub fn with_budget(mut self, budget: Arc<MemoryBudget>) -> Fanout {
        self.budget = Some(budget);
        self
    }

    /// The memory budget batches are charged to, for sources that charge before they allocate
    /// (a request body is charged before it is read).
    pub fn budget(&self) -> Option<&Arc<MemoryBudget>> {
        self.budget.as_ref()
    }

    /// Takes the batch's share of the memory budget, waiting while it is spent. A batch that
    /// already holds a charge (a transform's view of its input) is not charged twice.
    async fn admit(&self, batch: &mut EventBatch) {
        if let Some(budget) = &self.budget
            && batch.charge.is_none()
        {
            let charge = budget
                .charge(loghaul_core::budget::batch_bytes(batch))
                .await;
            batch.charge = Some(Arc::new(charge));
        }
    }

    /// Delivers to every downstream, waiting while a queue is full (back-pressure), or dropping
    /// the batch for a downstream whose buffer says `drop_newest`.
    pub async fn send(&self, mut batch: EventBatch) {
        let n = batch.len();
        if n == 0 {
            return;
        }
        let outputs = self.outputs.snapshot();
        if outputs.is_empty() {
            // Nobody reads this component (validation warned): the events go nowhere.
            self.metrics
                .discarded(DiscardReason::DownstreamClosed, n as u64);
            batch.finalizer.update(BatchStatus::Errored);
            return;
        }
        self.admit(&mut batch).await;
        if let Some(tap) = &self.tap {
            offer(tap, &batch);
        }
        let bytes = batch.arena.len();
        let batch = Arc::new(batch);
        let mut decoded = None;
        let mut delivered = false;
        for out in outputs.iter() {
            // Reserve first, count and prepare second: if this future is cancelled while waiting
            // for space, nothing was counted, and a sender blocked on a full queue holds no
            // encoded copy of the batch.
            let permit = match out.when_full {
                WhenFull::Block => match out.tx.reserve().await {
                    Ok(permit) => match &out.events {
                        Some(limit) => {
                            match limit.permits.acquire_many(events_of(limit, n)).await {
                                Ok(p) => {
                                    p.forget();
                                    Ok(permit)
                                }
                                Err(_) => Err(DiscardReason::DownstreamClosed),
                            }
                        }
                        None => Ok(permit),
                    },
                    Err(_) => Err(DiscardReason::DownstreamClosed),
                },
                WhenFull::DropNewest => match out.tx.try_reserve() {
                    Ok(permit) => match &out.events {
                        Some(limit) => match limit.permits.try_acquire_many(events_of(limit, n)) {
                            Ok(p) => {
                                p.forget();
                                Ok(permit)
                            }
                            Err(_) => Err(DiscardReason::BufferFull),
                        },
                        None => Ok(permit),
                    },
                    Err(mpsc::error::TrySendError::Full(())) => Err(DiscardReason::BufferFull),
                    Err(mpsc::error::TrySendError::Closed(())) => {
                        Err(DiscardReason::DownstreamClosed)
                    }
                },
            };
            match permit {
                Ok(permit) => {
                    let batch = given(out, &batch, &mut decoded);
                    let prepared = if self.unprepared {
                        None
                    } else {
                        prepare(out, batch)
                    };
                    out.deliver(permit, batch, prepared);
                    delivered = true;
                }
                Err(reason) => {
                    if reason == DiscardReason::BufferFull {
                        // Counted on the sink whose buffer is full: that is where an operator
                        // looks, and the source's other sinks still got the batch.
                        out.downstream.discarded(reason, n as u64);
                    } else {
                        self.metrics.discarded(reason, n as u64);
                    }
                    batch.finalizer.update(BatchStatus::Errored);
                }
            }
        }
        if delivered {
            self.metrics.sent(n, bytes);
            if let Some(output) = &self.output {
                output.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

/// What `out` is given of `batch`: the batch itself, or, when its records are undecoded and
/// `out` reads records, the batch decoded (once per send, for every such downstream).
fn given<'a>(
    out: &InputSender,
    batch: &'a Arc<EventBatch>,
    decoded: &'a mut Option<Arc<EventBatch>>,
) -> &'a Arc<EventBatch> {
    if !batch.raw_records || out.takes_raw_records() {
        return batch;
    }
    decoded.get_or_insert_with(|| Arc::new(loghaul_codec::forward::decode_raw(batch)))
}

/// Shows `batch` to the tap's viewers, its records decoded if they are not.
fn offer(tap: &crate::tap::TapPoint, batch: &EventBatch) {
    if batch.raw_records && tap.is_active() {
        tap.offer(&loghaul_codec::forward::decode_raw(batch));
    } else {
        tap.offer(batch);
    }
}

/// Runs `out`'s prepare step on the batch, charging what it made to the batch's budget share.
fn prepare(out: &InputSender, batch: &Arc<EventBatch>) -> Option<Prepared> {
    let prepared = out.prepare.as_ref().map(|p| p.prepare(batch));
    if let (Some(p), Some(charge)) = (&prepared, &batch.charge) {
        charge.grow(p.bytes.capacity() + p.ends.capacity() * 4);
    }
    prepared
}

/// A fan-out for sources that cannot push back on their senders (UDP).
///
/// A full queue is waited for at most `wait` per batch: a sink that stalls briefly (its thread
/// descheduled, a file being rotated) loses nothing, while the kernel's socket buffer holds what
/// arrives meanwhile. A downstream still full after that is shed: the batch, and every later one
/// while its queue stays full, is dropped for that downstream at once and counted
/// (`queue_full`), so one stuck sink neither stalls the others for long nor lets the socket
/// overflow unseen. The first batch it has room for ends the shedding.
pub struct Shedding {
    fanout: Fanout,
    wait: std::time::Duration,
    /// Per downstream of `list`: whether it is being shed.
    shed: Vec<bool>,
    /// The list `shed` was made for: a rewired fan-out starts shedding afresh.
    list: Arc<Vec<InputSender>>,
}

impl Shedding {
    pub fn new(fanout: Fanout, wait: std::time::Duration) -> Shedding {
        let list = fanout.outputs.snapshot();
        let shed = vec![false; list.len()];
        Shedding {
            fanout,
            wait,
            shed,
            list,
        }
    }

    /// The fan-out itself, for sends that may wait as long as needed (the shutdown drain).
    pub fn fanout(&self) -> &Fanout {
        &self.fanout
    }

    /// Delivers to every downstream, waiting at most `wait` in all for full queues (and for the
    /// memory budget).
    pub async fn send(&mut self, mut batch: EventBatch) {
        let n = batch.len();
        if n == 0 {
            return;
        }
        let deadline = tokio::time::Instant::now() + self.wait;
        if tokio::time::timeout_at(deadline, self.fanout.admit(&mut batch))
            .await
            .is_err()
        {
            self.fanout
                .metrics
                .discarded(DiscardReason::MemoryLimit, n as u64);
            batch.finalizer.update(BatchStatus::Errored);
            return;
        }
        if let Some(tap) = &self.fanout.tap {
            offer(tap, &batch);
        }
        let bytes = batch.arena.len();
        let batch = Arc::new(batch);
        let mut decoded = None;
        let mut delivered = false;
        let list = self.fanout.outputs.snapshot();
        if !Arc::ptr_eq(&list, &self.list) {
            self.shed = vec![false; list.len()];
            self.list = list.clone();
        }
        for (out, shed) in list.iter().zip(&mut self.shed) {
            let permit = match out.tx.try_reserve() {
                Ok(permit) => Ok(permit),
                Err(mpsc::error::TrySendError::Full(())) if !*shed => {
                    match tokio::time::timeout_at(deadline, out.tx.reserve()).await {
                        Ok(Ok(permit)) => Ok(permit),
                        Ok(Err(_)) => Err(DiscardReason::DownstreamClosed),
                        Err(_) => Err(DiscardReason::QueueFull),
                    }
                }
                Err(mpsc::error::TrySendError::Full(())) => Err(DiscardReason::QueueFull),
                Err(mpsc::error::TrySendError::Closed(())) => Err(DiscardReason::DownstreamClosed),
            };
            match permit {
                Ok(permit) => {
                    *shed = false;
                    // Prepared only once there is room: a batch dropped here costs no encoding.
                    let batch = given(out, &batch, &mut decoded);
                    let prepared = prepare(out, batch);
                    out.deliver(permit, batch, prepared);
                    delivered = true;
                }
                Err(reason) => {
                    *shed |= reason == DiscardReason::QueueFull;
                    self.fanout.metrics.discarded(reason, n as u64);
                    batch.finalizer.update(BatchStatus::Errored);
                }
            }
        }
        if delivered {
            self.fanout.metrics.sent(n, bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{ComponentKind, Registry};
    use crate::pipeline::queue::{QUEUE_BATCHES, input_queue};
    use bytes::Bytes;
    use loghaul_core::{Event, Span};
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    fn batch(n: usize) -> EventBatch {
        let mut b = EventBatch::new(Bytes::from_static(b"x"), "src".into(), "test");
        b.events = vec![
            Event {
                message: Span::new(0, 1).into(),
                ..Event::default()
            };
            n
        ];
        b
    }

    #[tokio::test]
    async fn undecoded_records_reach_only_who_takes_them_and_are_decoded_once_for_the_rest() {
        let reg = Registry::default();
        use crate::pipeline::queue::{PassOn, raw_batch};
        let queue = |id: &str, prepare: Option<Arc<dyn super::super::Prepare>>| {
            input_queue(reg.register(id, ComponentKind::Sink, "x"), prepare, 4)
        };
        let (pass_tx, mut pass) = queue("pass", Some(Arc::new(PassOn)));
        let (a_tx, mut a) = queue("a", None);
        let (b_tx, mut b) = queue("b", None);
        let src = reg.register("s", ComponentKind::Source, "fluent");
        let only_pass = Fanout::new(vec![queue("p2", Some(Arc::new(PassOn))).0], src.clone());
        assert!(only_pass.takes_raw_records());
        let fan = Fanout::new(vec![pass_tx, a_tx, b_tx], src);
        assert!(!fan.takes_raw_records(), "two of its readers read records");
        fan.send(raw_batch()).await;
        let (Some(p), Some(x), Some(y)) = (pass.recv().await, a.recv().await, b.recv().await)
        else {
            panic!("every sink gets the batch");
        };
        assert!(p.batch.raw_records, "passed on as it came");
        assert!(!x.batch.raw_records && Arc::ptr_eq(&x.batch, &y.batch));
        let e = &x.batch.events[0];
        assert_eq!(x.batch.str(e.message.or_empty()), b"hi");
        assert_eq!(
            x.batch.lookup(e, "n"),
            Some(loghaul_core::Value::Int(1)),
            "the record decoded"
        );
    }

    #[tokio::test]
    async fn fans_out_one_allocation_to_every_sink() {
        let reg = Registry::default();
        let (a_tx, mut a) = input_queue(
            reg.register("a", ComponentKind::Sink, "file"),
            None,
            QUEUE_BATCHES,
        );
        let (b_tx, mut b) = input_queue(
            reg.register("b", ComponentKind::Sink, "file"),
            None,
            QUEUE_BATCHES,
        );
        let src = reg.register("s", ComponentKind::Source, "syslog");
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
        let (tx, mut rx) = input_queue(
            reg.register("a", ComponentKind::Sink, "file"),
            None,
            QUEUE_BATCHES,
        );
        let fan = Fanout::new(vec![tx], reg.register("s", ComponentKind::Source, "syslog"));
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

    /// A sink that takes a batch within the wait loses nothing: the sender waits for it.
    #[tokio::test(start_paused = true)]
    async fn shedding_waits_out_a_brief_stall() {
        let reg = Registry::default();
        let (tx, mut rx) = input_queue(
            reg.register("a", ComponentKind::Sink, "file"),
            None,
            QUEUE_BATCHES,
        );
        let src = reg.register("s", ComponentKind::Source, "syslog");
        let mut fan = Shedding::new(Fanout::new(vec![tx], src.clone()), Duration::from_secs(1));
        for _ in 0..QUEUE_BATCHES {
            fan.send(batch(1)).await;
        }
        let sink = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(900)).await;
            let first = rx.recv().await.map(|d| d.len());
            (first, rx)
        });
        let started = tokio::time::Instant::now();
        fan.send(batch(2)).await;
        assert_eq!(started.elapsed(), Duration::from_millis(900));
        assert_eq!(src.discarded_count(DiscardReason::QueueFull), 0);
        let (first, _rx) = sink.await.unwrap_or_else(|e| panic!("sink task: {e}"));
        assert_eq!(first, Some(1));
        assert_eq!(
            src.sent_events.load(Ordering::Relaxed),
            QUEUE_BATCHES as u64 + 2
        );
    }

    /// A sink still full after the wait is shed: that batch and the next ones are dropped at
    /// once and counted, until its queue has room again; then the next stall is waited for anew.
    #[tokio::test(start_paused = true)]
    async fn shedding_drops_and_counts_once_the_wait_is_over() {
        let reg = Registry::default();
        let (tx, mut rx) = input_queue(
            reg.register("a", ComponentKind::Sink, "file"),
            None,
            QUEUE_BATCHES,
        );
        let src = reg.register("s", ComponentKind::Source, "syslog");
        let wait = Duration::from_secs(1);
        let mut fan = Shedding::new(Fanout::new(vec![tx], src.clone()), wait);
        for _ in 0..QUEUE_BATCHES {
            fan.send(batch(1)).await;
        }
        let started = tokio::time::Instant::now();
        fan.send(batch(2)).await;
        assert_eq!(
            started.elapsed(),
            wait,
            "the first batch waits the whole wait"
        );
        let started = tokio::time::Instant::now();
        fan.send(batch(3)).await;
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "later batches are shed at once"
        );
        assert_eq!(src.discarded_count(DiscardReason::QueueFull), 5);

        assert!(rx.recv().await.is_some());
        fan.send(batch(4)).await;
        assert_eq!(src.discarded_count(DiscardReason::QueueFull), 5);
        let started = tokio::time::Instant::now();
        fan.send(batch(5)).await;
        assert_eq!(started.elapsed(), wait, "room again ended the shedding");
        assert_eq!(src.discarded_count(DiscardReason::QueueFull), 10);
        assert_eq!(
            src.sent_events.load(Ordering::Relaxed),
            QUEUE_BATCHES as u64 + 4
        );
    }

    /// With two sinks, the stuck one is shed and the other still gets every batch.
    #[tokio::test(start_paused = true)]
    async fn shedding_one_sink_keeps_feeding_the_other() {
        let reg = Registry::default();
        let (stuck_tx, _stuck) = input_queue(
            reg.register("stuck", ComponentKind::Sink, "file"),
            None,
            QUEUE_BATCHES,
        );
        let (live_tx, mut live) = input_queue(
            reg.register("live", ComponentKind::Sink, "file"),
            None,
            QUEUE_BATCHES,
        );
        let src = reg.register("s", ComponentKind::Source, "syslog");
        let fanout = Fanout::new(vec![stuck_tx, live_tx], src.clone());
        let mut fan = Shedding::new(fanout, Duration::from_secs(1));
        for i in 0..3 * QUEUE_BATCHES {
            fan.send(batch(1)).await;
            assert!(
                live.recv().await.is_some(),
                "batch {i} reached the live sink"
            );
        }
        assert_eq!(
            src.discarded_count(DiscardReason::QueueFull),
            2 * QUEUE_BATCHES as u64
        );
    }

    /// A batch whose source waits for its fate, and the receiver that learns it.
    fn tracked(n: usize) -> (EventBatch, loghaul_core::BatchStatusReceiver) {
        let (finalizer, rx) = loghaul_core::BatchNotifier::new_with_receiver();
        let mut b = batch(n);
        b.finalizer = finalizer;
        (b, rx)
    }

    fn sink_queue(reg: &Registry, id: &str) -> (InputSender, crate::pipeline::Input) {
        input_queue(
            reg.register(id, ComponentKind::Sink, "file"),
            None,
            QUEUE_BATCHES,
        )
    }

    /// Delivered only once the sink commits; a batch the sink drops uncommitted is an error.
    #[tokio::test]
    async fn acknowledgement_waits_for_the_commit() {
        let reg = Registry::default();
        let (tx, mut rx) = sink_queue(&reg, "a");
        let fan = Fanout::new(vec![tx], reg.register("s", ComponentKind::Source, "test"));
        let (b, status) = tracked(2);
        fan.send(b).await;
        let delivery = rx.recv().await.unwrap_or_else(|| panic!("queued"));
        delivery.ack.commit(BatchStatus::Delivered);
        // The batch itself carries the finalizer: the fate is known once the sink lets go.
        drop(delivery.batch);
        assert_eq!(status.await, BatchStatus::Delivered);

        let (b, status) = tracked(2);
        fan.send(b).await;
        drop(rx.recv().await);
        assert_eq!(
            status.await,
            BatchStatus::Errored,
            "dropped, never committed"
        );
    }

    /// A sink that died with batches still queued: every one of them is reported lost.
    #[tokio::test]
    async fn batches_queued_for_a_dead_sink_are_errors() {
        let reg = Registry::default();
        let (tx, rx) = sink_queue(&reg, "a");
        let fan = Fanout::new(vec![tx], reg.register("s", ComponentKind::Source, "test"));
        let (b1, s1) = tracked(1);
        let (b2, s2) = tracked(1);
        fan.send(b1).await;
        fan.send(b2).await;
        drop(rx);
        assert_eq!(s1.await, BatchStatus::Errored);
        assert_eq!(s2.await, BatchStatus::Errored);
    }

    /// A downstream that is gone, or no downstream at all: the events went nowhere, and the
    /// source must not hear "delivered", even when another sink did commit them.
    #[tokio::test]
    async fn a_closed_or_missing_downstream_is_an_error() {
        let reg = Registry::default();
        let src = reg.register("s", ComponentKind::Source, "test");
        let (closed_tx, closed_rx) = sink_queue(&reg, "closed");
        let (live_tx, mut live) = sink_queue(&reg, "live");
        drop(closed_rx);
        let fan = Fanout::new(vec![closed_tx, live_tx], src.clone());
        let (b, status) = tracked(3);
        fan.send(b).await;
        let delivery = live
            .recv()
            .await
            .unwrap_or_else(|| panic!("live sink gets it"));
        delivery.ack.commit(BatchStatus::Delivered);
        drop(delivery.batch);
        assert_eq!(status.await, BatchStatus::Errored);
        assert_eq!(src.discarded_count(DiscardReason::DownstreamClosed), 3);

        let nowhere = Fanout::new(Vec::new(), src.clone());
        let (b, status) = tracked(1);
        nowhere.send(b).await;
        assert_eq!(status.await, BatchStatus::Errored);
    }

    /// A batch shed for a full queue is an error for its source, not a delivery.
    #[tokio::test(start_paused = true)]
    async fn a_shed_batch_is_an_error() {
        let reg = Registry::default();
        let (tx, _stuck) = sink_queue(&reg, "a");
        let src = reg.register("s", ComponentKind::Source, "test");
        let mut fan = Shedding::new(Fanout::new(vec![tx], src), Duration::from_millis(10));
        for _ in 0..QUEUE_BATCHES {
            fan.send(batch(1)).await;
        }
        let (b, status) = tracked(1);
        fan.send(b).await;
        assert_eq!(status.await, BatchStatus::Errored);
    }

    fn limited(
        reg: &Registry,
        id: &str,
        max_events: usize,
        when_full: WhenFull,
    ) -> (InputSender, crate::pipeline::Input) {
        crate::pipeline::bounded_queue(
            reg.register(id, ComponentKind::Sink, "file"),
            None,
            crate::pipeline::QueueLimits {
                batches: 1000,
                max_events: Some(max_events),
                when_full,
            },
        )
    }

    /// A memory buffer bounded in events: the sender waits once the events queued would pass
    /// `max_events`, and goes on when the sink takes some.
    #[tokio::test]
    async fn max_events_bounds_the_queue_in_events() {
        let reg = Registry::default();
        let (tx, mut rx) = limited(&reg, "a", 10, WhenFull::Block);
        let fan = Fanout::new(vec![tx], reg.register("s", ComponentKind::Source, "test"));
        fan.send(batch(6)).await;
        fan.send(batch(4)).await;
        let blocked = tokio::time::timeout(Duration::from_millis(100), fan.send(batch(1))).await;
        assert!(blocked.is_err(), "11 events do not fit in 10");
        assert_eq!(rx.recv().await.map(|d| d.len()), Some(6));
        tokio::time::timeout(Duration::from_secs(5), fan.send(batch(5)))
            .await
            .unwrap_or_else(|_| panic!("room for 6 after the sink took 6"));
        // A batch larger than the whole buffer still moves, alone.
        assert_eq!(rx.recv().await.map(|d| d.len()), Some(4));
        assert_eq!(rx.recv().await.map(|d| d.len()), Some(5));
        tokio::time::timeout(Duration::from_secs(5), fan.send(batch(50)))
            .await
            .unwrap_or_else(|_| panic!("an oversized batch moves when the buffer is empty"));
    }

    /// `drop_newest`: a full buffer drops the batch for that sink only, counted on the sink and
    /// reported errored, while the other sink gets it.
    #[tokio::test]
    async fn drop_newest_drops_for_the_full_sink_only() {
        let reg = Registry::default();
        let (full_tx, mut full) = limited(&reg, "full", 5, WhenFull::DropNewest);
        let (live_tx, mut live) = sink_queue(&reg, "live");
        let src = reg.register("s", ComponentKind::Source, "test");
        let fan = Fanout::new(vec![full_tx, live_tx], src.clone());
        fan.send(batch(5)).await;
        let (b, status) = tracked(3);
        tokio::time::timeout(Duration::from_secs(5), fan.send(b))
            .await
            .unwrap_or_else(|_| panic!("drop_newest never waits"));
        assert_eq!(full.metrics.discarded_count(DiscardReason::BufferFull), 3);
        assert_eq!(src.discarded_count(DiscardReason::BufferFull), 0);
        assert_eq!(full.recv().await.map(|d| d.len()), Some(5));
        for want in [5, 3] {
            let d = live
                .recv()
                .await
                .unwrap_or_else(|| panic!("live sink gets every batch"));
            assert_eq!(d.len(), want);
            d.ack.commit(BatchStatus::Delivered);
        }
        assert_eq!(
            status.await,
            BatchStatus::Errored,
            "dropped for one sink is not delivered"
        );
    }

    /// The memory budget: a sender waits while batches in flight hold it, and goes on when they
    /// are dropped.
    #[tokio::test]
    async fn the_memory_budget_holds_senders_back_until_batches_are_done() {
        let reg = Registry::default();
        let (tx, mut rx) = sink_queue(&reg, "a");
        let one = loghaul_core::budget::batch_bytes(&batch(100));
        let budget = MemoryBudget::new(one * 2 + one / 2);
        let fan = Fanout::new(vec![tx], reg.register("s", ComponentKind::Source, "test"))
            .with_budget(budget.clone());
        fan.send(batch(100)).await;
        fan.send(batch(100)).await;
        let blocked = tokio::time::timeout(Duration::from_millis(100), fan.send(batch(100))).await;
        assert!(blocked.is_err(), "a third batch is over the budget");
        // Taken from the queue but still held by the sink: still charged.
        let held = rx.recv().await;
        let blocked = tokio::time::timeout(Duration::from_millis(100), fan.send(batch(100))).await;
        assert!(blocked.is_err(), "the sink still holds it");
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), fan.send(batch(100)))
            .await
            .unwrap_or_else(|_| panic!("budget came back when the sink dropped the batch"));
        assert!(budget.used() <= one * 2 + one / 2);
    }

    /// A hand-over takes what is queued and lists what the sink holds unsettled (a batch it is
    /// still retrying, or one it split across requests whose forks are alive), but not what it
    /// settled; from then on the sink's `recv` says "no more". A hand-over dropped unused
    /// changes nothing for the sink.
    #[tokio::test]
    async fn a_handover_takes_the_queue_and_lists_what_the_sink_holds() {
        let reg = Registry::default();
        let (tx, mut input) = sink_queue(&reg, "a");
        let fan = Fanout::new(vec![tx], reg.register("s", ComponentKind::Source, "test"));
        let unused = input.handover();
        drop(unused);
        fan.send(batch(1)).await;
        assert!(
            input.recv().await.is_some(),
            "a dropped hand-over never fires"
        );

        let handover = input.handover();
        for n in [2, 3, 4, 5] {
            fan.send(batch(n)).await;
        }
        let settled = input.recv().await.unwrap_or_else(|| panic!("queued"));
        settled.ack.commit(BatchStatus::Delivered);
        let held = input.recv().await.unwrap_or_else(|| panic!("queued"));
        let split = input.recv().await.unwrap_or_else(|| panic!("queued"));
        let fork = split.ack.fork();
        split.ack.commit(BatchStatus::Delivered);
        drop(split.batch);

        let in_hand: Vec<usize> = handover.start().iter().map(|h| h.batch().len()).collect();
        assert_eq!(
            in_hand,
            [3, 4],
            "the held batch and the split one, oldest first"
        );
        assert!(input.recv().await.is_none(), "the sink gets no more");
        assert!(input.try_recv().is_none());
        let rest = handover
            .recv()
            .await
            .unwrap_or_else(|| panic!("still queued"));
        assert_eq!(rest.len(), 5);
        drop((held, fork, fan));
        assert!(handover.recv().await.is_none(), "every upstream gone");
    }
}
