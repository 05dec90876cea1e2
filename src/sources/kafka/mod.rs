//! The `kafka` source: a member of a consumer group (librdkafka, bundled) that turns messages
//! into batches and stores a partition's offset only once every sink committed what came
//! before it: at least once, end to end.
//!
//! ```text
//!  thread kafka-ID: poll ─► batch (≤ max_batch_events; topic, partition, offset, key and headers
//!        as fields) ─► sender task, on the workers ─► fan-out (waits while the sinks are full:
//!        the reading thread waits for the sender, the consumer stops polling)
//!        each turn: settle finished batches ─► store the offsets after every done prefix
//!        (librdkafka commits the stored offsets every second, at rebalances and at the stop)
//!        a batch a sink did not deliver ─► seek its partitions back to it, pause 1 s
//!  rebalance, partitions revoked: wait (≤ 5 s) for their batches, store and commit what is
//!        done; the rest is read again by the next owner
//! ```

pub mod config;
mod offsets;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loghaul_codec::record::RecordBuilder;
use loghaul_core::{
    BatchNotifier, BatchStatus, BatchStatusReceiver, Event, EventBatch, Field, Flags, Span,
    Timestamp, Value,
};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _, ConsumerContext, Rebalance};
use rdkafka::message::{BorrowedMessage, Headers as _, Message as _};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use config::Decoding;
pub use config::KafkaSourceConfig;
use offsets::{Offsets, Partition};

use super::{BuildSource, RunningSource, SourceContext};
use crate::metrics::{ComponentMetrics, ErrorKind, Health};
use crate::pipeline::{BoxFuture, Fanout, ShutdownSignal};

/// How long a poll waits for the first message of a batch (and so how soon a stop is seen).
const POLL_WAIT: Duration = Duration::from_millis(100);
/// How long a rebalance waits for the batches of the partitions it takes away.
const REBALANCE_WAIT: Duration = Duration::from_secs(5);
/// The pause before reading again what a sink did not deliver.
const REWIND_PAUSE: Duration = Duration::from_secs(1);

/// Batches in flight and their fates, shared by the polling thread and the rebalance callback.
#[derive(Default)]
struct State {
    offsets: Offsets,
    pending: Vec<(u64, BatchStatusReceiver)>,
}

impl State {
    /// Collects the fates that are known; returns the partitions to rewind.
    fn settle(&mut self) -> Vec<(Partition, i64)> {
        let mut rewind = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            match self.pending[i].1.try_status() {
                Some(status) => {
                    let (id, _) = self.pending.swap_remove(i);
                    rewind.extend(self.offsets.settle(id, status));
                }
                None => i += 1,
            }
        }
        rewind
    }
}

/// The consumer's callbacks: logs, errors, statistics (the lag) and rebalances.
struct Context {
    metrics: Arc<ComponentMetrics>,
    state: Arc<Mutex<State>>,
    lag: Arc<AtomicI64>,
    reasons: crate::kafka::Reasons,
}

impl ClientContext for Context {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        use rdkafka::config::RDKafkaLogLevel as L;
        match level {
            L::Emerg | L::Alert | L::Critical | L::Error | L::Warning => {
                crate::warn_limited!(self.metrics, facility, message, "librdkafka says.");
            }
            _ => {
                tracing::debug!(component = %self.metrics.id, facility, message, "librdkafka says.")
            }
        }
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        self.metrics.error(ErrorKind::Io, 1);
        crate::warn_limited!(self.metrics, %error, reason, "Kafka brokers are not answering; librdkafka keeps trying.");
        let why = self.reasons.describe(&error, reason);
        self.metrics.set_health(Health::Degraded, Some(why));
    }

    fn stats_raw(&self, statistics: &[u8]) {
        if let Some(lag) = consumer_lag(statistics) {
            self.lag.store(lag, Ordering::Relaxed);
        }
    }
}

impl ConsumerContext for Context {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(list) = rebalance else {
            return;
        };
        let revoked: Vec<Partition> = list
            .elements()
            .iter()
            .map(|e| (Arc::from(e.topic()), e.partition()))
            .collect();
        // The sinks are given a moment to commit what they hold of these partitions, so that
        // the next owner does not read it again.
        let deadline = Instant::now() + REBALANCE_WAIT;
        let ready = loop {
            let busy = match self.state.lock() {
                Ok(mut state) => {
                    state.settle();
                    state.offsets.in_flight(&revoked)
                }
                Err(_) => false,
            };
            if !busy || Instant::now() >= deadline {
                break !busy;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Ok(mut state) = self.state.lock() {
            let done = state.offsets.committable();
            store(consumer, &self.metrics, &done);
            state.offsets.forget(&revoked);
        }
        if let Err(error) = consumer.commit_consumer_state(CommitMode::Sync) {
            tracing::debug!(component = %self.metrics.id, %error, "Nothing to commit at the rebalance.");
        }
        tracing::info!(component = %self.metrics.id, partitions = revoked.len(), all_committed = ready, "Kafka partitions revoked; what was not committed is read again by their next owner.");
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(list) = rebalance {
            tracing::info!(component = %self.metrics.id, partitions = list.count(), "Kafka partitions assigned.");
        }
    }
}

/// The consumer lag summed over every partition, from librdkafka's statistics JSON.
fn consumer_lag(statistics: &[u8]) -> Option<i64> {
    let stats: serde_json::Value = serde_json::from_slice(statistics).ok()?;
    let mut total = 0i64;
    for topic in stats.get("topics")?.as_object()?.values() {
        let Some(partitions) = topic.get("partitions").and_then(|p| p.as_object()) else {
            continue;
        };
        for (id, p) in partitions {
            // Partition -1 is librdkafka's internal one; -1 lag means unknown.
            let lag = p.get("consumer_lag").and_then(serde_json::Value::as_i64);
            if id != "-1"
                && let Some(lag) = lag.filter(|l| *l >= 0)
            {
                total += lag;
            }
        }
    }
    Some(total)
}

/// Stores `offsets` (the next offset to read, per partition) for librdkafka to commit.
fn store(
    consumer: &BaseConsumer<Context>,
    metrics: &ComponentMetrics,
    offsets: &[(Partition, i64)],
) {
    if offsets.is_empty() {
        return;
    }
    let mut list = TopicPartitionList::new();
    for ((topic, partition), next) in offsets {
        if list
            .add_partition_offset(topic, *partition, Offset::Offset(*next))
            .is_err()
        {
            continue;
        }
    }
    if let Err(error) = consumer.store_offsets(&list) {
        // A partition revoked meanwhile: its next owner reads from the last commit.
        crate::warn_limited!(metrics, %error, "Cannot store Kafka offsets; those messages may be read again.");
    }
}

impl BuildSource for KafkaSourceConfig {
    fn build(&self, cx: SourceContext) -> BoxFuture<'_, anyhow::Result<RunningSource>> {
        Box::pin(async move {
            let state = Arc::new(Mutex::new(State::default()));
            let lag = cx.metrics.gauge(
                "loghaul_kafka_consumer_lag",
                "Messages in the source's partitions not yet read (librdkafka's consumer_lag, summed).",
                &[],
            );
            let context = Context {
                metrics: cx.metrics.clone(),
                state: state.clone(),
                lag,
                reasons: Default::default(),
            };
            let consumer: BaseConsumer<Context> = self
                .client_config()
                .create_with_context(context)
                .map_err(|e| anyhow::anyhow!("cannot create the Kafka consumer: {e}"))?;
            let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
            consumer
                .subscribe(&topics)
                .map_err(|e| anyhow::anyhow!("cannot subscribe to {topics:?}: {e}"))?;
            let job = Job {
                config: self.clone(),
                id: cx.id,
                metrics: cx.metrics,
                fanout: cx.fanout,
                acknowledgements: cx.acknowledgements,
                shutdown: cx.shutdown,
                drain: cx.shutdown_timeout / 2,
                state,
                runtime: tokio::runtime::Handle::current(),
            };
            let running: RunningSource = Box::pin(async move {
                let (done_tx, done_rx) = tokio::sync::oneshot::channel();
                let name = format!("kafka-{}", job.id);
                let spawned = std::thread::Builder::new().name(name).spawn(move || {
                    job.run(consumer);
                    let _ = done_tx.send(());
                });
                match spawned {
                    Ok(_) => {
                        let _ = done_rx.await;
                    }
                    Err(error) => {
                        tracing::error!(%error, "Cannot start the Kafka source's thread.")
                    }
                }
            });
            Ok(running)
        })
    }
}

/// What the polling thread works with.
struct Job {
    config: KafkaSourceConfig,
    id: Arc<str>,
    metrics: Arc<ComponentMetrics>,
    fanout: Fanout,
    acknowledgements: bool,
    shutdown: ShutdownSignal,
    /// How long the stop waits for the sinks to commit what was sent.
    drain: Duration,
    state: Arc<Mutex<State>>,
    runtime: tokio::runtime::Handle,
}

impl Job {
    fn run(self, consumer: BaseConsumer<Context>) {
        self.metrics.set_health(Health::Running, None);
        // The sinks' share of a batch (the file sink encodes in its sender's task) runs on the
        // runtime's workers while this thread reads the next one; one sender keeps the order.
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let sender = self
            .runtime
            .spawn(forward(self.fanout.clone(), self.state.clone(), rx));
        while !self.shutdown.is_triggered() {
            self.settle(&consumer);
            let mut batch = Batch::default();
            match consumer.poll(POLL_WAIT) {
                None => continue,
                Some(Err(error)) => {
                    self.read_error(&error);
                    continue;
                }
                Some(Ok(message)) => batch.add(&message, self.config.decoding, &self.metrics),
            }
            while batch.len() < self.config.max_batch_events {
                match consumer.poll(Duration::ZERO) {
                    Some(Ok(message)) => batch.add(&message, self.config.decoding, &self.metrics),
                    Some(Err(error)) => {
                        self.read_error(&error);
                        break;
                    }
                    None => break,
                }
            }
            if self.metrics.health().0 == Health::Degraded {
                // Messages arrive: the brokers are back.
                consumer.context().reasons.clear();
                self.metrics.set_health(Health::Running, None);
            }
            if !self.send(batch, &tx) {
                break;
            }
        }
        // The stop: the sender hands on what it holds, then the sinks' verdicts are awaited
        // (bounded), what is done stored and committed.
        let deadline = Instant::now() + self.drain;
        drop(tx);
        let _ = self
            .runtime
            .block_on(async { tokio::time::timeout(self.drain, sender).await });
        loop {
            self.settle(&consumer);
            let left = self.state.lock().map_or(0, |s| s.pending.len());
            if left == 0 || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Err(error) = consumer.commit_consumer_state(CommitMode::Sync) {
            tracing::debug!(component = %self.id, %error, "Nothing to commit at the stop.");
        }
        self.metrics.set_health(Health::Stopped, None);
    }

    fn read_error(&self, error: &rdkafka::error::KafkaError) {
        self.metrics.error(ErrorKind::Io, 1);
        crate::warn_limited!(self.metrics, %error, "Cannot read from Kafka; trying again.");
    }

    /// Hands a batch to the sender (waiting while it is busy) and tracks its offsets; false
    /// once the sender is gone.
    fn send(&self, batch: Batch, tx: &tokio::sync::mpsc::Sender<Handoff>) -> bool {
        let Batch {
            records,
            covers,
            bytes,
            ..
        } = batch;
        let mut events = records.finish(self.id.clone(), "kafka");
        let n = events.len();
        self.metrics.received(n, bytes);
        let id = match self.state.lock() {
            Ok(mut s) => s
                .offsets
                .add(covers.into_iter().map(|((t, p), (f, l))| ((t, p), f, l))),
            Err(_) => return false,
        };
        let status = self.acknowledgements.then(|| {
            let (finalizer, status) = BatchNotifier::new_with_receiver();
            events.finalizer = finalizer;
            status
        });
        // Waits while the sender is busy, and the sender while the sinks are full.
        tx.blocking_send(Handoff { id, events, status }).is_ok()
    }

    /// Collects the sinks' verdicts, stores the offsets they allow, and rewinds what was not
    /// delivered.
    fn settle(&self, consumer: &BaseConsumer<Context>) {
        let (rewind, done) = match self.state.lock() {
            Ok(mut s) => {
                let rewind = s.settle();
                (rewind, s.offsets.committable())
            }
            Err(_) => return,
        };
        store(consumer, &self.metrics, &done);
        if rewind.is_empty() {
            return;
        }
        for ((topic, partition), offset) in &rewind {
            if let Err(error) = consumer.seek(
                topic,
                *partition,
                Offset::Offset(*offset),
                Duration::from_secs(5),
            ) {
                crate::warn_limited!(self.metrics, %error, %topic, partition, "Cannot seek back to read again what a sink did not deliver.");
            }
        }
        crate::warn_limited!(
            self.metrics,
            partitions = rewind.len(),
            "A sink did not deliver a batch; reading its partitions again from it after a pause."
        );
        std::thread::sleep(REWIND_PAUSE);
    }
}

/// A batch on its way from the reading thread to the sender task.
struct Handoff {
    id: u64,
    events: EventBatch,
    status: Option<BatchStatusReceiver>,
}

/// The sender task: hands each batch on (waiting while the sinks are full), then tracks its
/// fate. A batch is pending only once the sinks hold it: one dropped before (a stop cut short)
/// is never settled, so its offsets are never committed and it is read again.
async fn forward(
    fanout: Fanout,
    state: Arc<Mutex<State>>,
    mut rx: tokio::sync::mpsc::Receiver<Handoff>,
) {
    while let Some(Handoff { id, events, status }) = rx.recv().await {
        fanout.send(events).await;
        if let Ok(mut s) = state.lock() {
            match status {
                Some(status) => s.pending.push((id, status)),
                // Without acknowledgements a batch is done once it is queued.
                None => {
                    s.offsets.settle(id, BatchStatus::Delivered);
                }
            }
        }
    }
}

/// A batch being read: its records, and the offsets it covers per partition.
#[derive(Default)]
struct Batch {
    records: RecordBuilder,
    covers: std::collections::HashMap<Partition, (i64, i64)>,
    bytes: usize,
    /// The last message's topic, its name in the arena, and the field names, written once per
    /// batch: most batches read one topic, and a message then costs no allocation here.
    topic: Option<(Arc<str>, Span)>,
    names: Option<Names>,
    /// The fields every event of the message gets, and its headers, rebuilt per message.
    extra: Vec<Field>,
    headers: Vec<Field>,
}

/// The arena spans of the fields' names.
#[derive(Clone, Copy)]
struct Names {
    topic: Span,
    partition: Span,
    offset: Span,
    key: Span,
    headers: Span,
}

impl Batch {
    fn len(&self) -> usize {
        self.records.events.len()
    }

    /// One message: its payload as the record (or the message), and where it came from as
    /// fields.
    fn add(&mut self, m: &BorrowedMessage<'_>, decoding: Decoding, metrics: &ComponentMetrics) {
        let payload = m.payload().unwrap_or_default();
        self.bytes += payload.len();
        let r = &mut self.records;
        let names = *self.names.get_or_insert_with(|| Names {
            topic: r.put(b"kafka_topic"),
            partition: r.put(b"kafka_partition"),
            offset: r.put(b"kafka_offset"),
            key: r.put(b"kafka_key"),
            headers: r.put(b"kafka_headers"),
        });
        let (topic, topic_span) = match &self.topic {
            Some((name, span)) if **name == *m.topic() => (name.clone(), *span),
            _ => {
                let name: Arc<str> = Arc::from(m.topic());
                let span = r.put(m.topic().as_bytes());
                self.topic = Some((name.clone(), span));
                (name, span)
            }
        };
        self.covers
            .entry((topic, m.partition()))
            .and_modify(|(_, last)| *last = m.offset())
            .or_insert((m.offset(), m.offset()));
        let extra = &mut self.extra;
        extra.clear();
        let mut field = |name: Span, value: Value| extra.push(Field { name, value });
        field(names.topic, Value::Str(topic_span));
        field(names.partition, Value::Int(i64::from(m.partition())));
        field(names.offset, Value::Int(m.offset()));
        if let Some(key) = m.key() {
            field(names.key, Value::Str(r.put(key)));
        }
        if let Some(headers) = m.headers() {
            let entries = &mut self.headers;
            entries.clear();
            for h in headers.iter() {
                let name = r.put(h.key.as_bytes());
                let value = r.put(h.value.unwrap_or_default());
                entries.push(Field {
                    name,
                    value: Value::Str(value),
                });
            }
            field(names.headers, r.nested_map(entries));
        }
        let extra = &self.extra;
        let base = Event {
            timestamp: m
                .timestamp()
                .to_millis()
                .map(|ms| Timestamp::from_nanos(ms.saturating_mul(1_000_000), 3)),
            ..Event::default()
        };
        let parsed = match decoding {
            Decoding::Json => r.json_record(payload, base, extra).is_ok(),
            Decoding::Text => false,
        };
        if !parsed {
            let mut flags = Flags::default();
            if decoding == Decoding::Json {
                // Kept as its message, flagged: not lost for not being JSON.
                metrics.error(ErrorKind::Parse, 1);
                flags.insert(Flags::PARSE_ERROR);
            }
            r.text_event(payload, Event { flags, ..base }, extra);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_lag_sums_known_partitions_only() {
        let stats = br#"{"topics":{"logs":{"partitions":{
            "0":{"consumer_lag":120},"1":{"consumer_lag":-1},"-1":{"consumer_lag":999}}},
            "other":{"partitions":{"3":{"consumer_lag":5}}}}}"#;
        assert_eq!(consumer_lag(stats), Some(125));
        assert_eq!(consumer_lag(b"{}"), None);
        assert_eq!(consumer_lag(b"not json"), None);
    }
}
