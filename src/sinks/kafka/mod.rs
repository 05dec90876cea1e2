//! The `kafka` sink: one message per event, produced with librdkafka (`rdkafka`, bundled), its
//! delivery reports driving the acknowledgements.
//!
//! ```text
//!  senders: encode (JSON or text, per event)
//!  sink thread: per event ─ topic, key, headers rendered ─► producer.send(opaque = the batch's
//!               tracker) ─ queue full? wait (the sink's own queue fills, sources push back)
//!  librdkafka's thread: delivery report per message ─► tracker: delivered, or a permanent
//!               error (too large, no such topic, not authorised): dead-lettered
//!  tracker, last report of the batch ─► the delivery's ack: Delivered, Rejected (some dead-
//!               lettered) or Errored (a dead letter could not be written, or the stop purged it)
//! ```
//!
//! A message is never given up on for taking long (`message.timeout.ms: 0`): while the brokers
//! are away, librdkafka's queue (`queue_max_bytes`) fills, `send` says so, and the sink waits,
//! which fills its input queue and pushes back on the sources. The idempotent producer (the
//! default, with `acks: all`) keeps librdkafka's own retries from writing a message twice.

pub mod config;

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loghaul_core::finalizer::Ack;
use loghaul_core::{BatchStatus, EventBatch};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, Message as _, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer as _, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, config::RDKafkaLogLevel};

pub use config::KafkaSinkConfig;

use super::encoder::LineEncoder;
use super::{BuildSink, BuiltSink, Retry, SinkContext, SinkError, SinkThread};
use crate::metrics::{ComponentMetrics, ErrorKind, Health};
use crate::pipeline::dlq::DeadLetters;
use crate::pipeline::{Input, Prepare, QUEUE_BATCHES};

/// How long `send` waits before trying again when librdkafka's queue is full.
const QUEUE_FULL_WAIT: Duration = Duration::from_millis(1);

impl BuildSink for KafkaSinkConfig {
    /// At least one bootstrap server accepts a TCP connection.
    fn check(&self) -> Vec<String> {
        let problems: Vec<String> = self
            .bootstrap_servers
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .filter_map(|s| super::reachable(s).err())
            .collect();
        let servers = self
            .bootstrap_servers
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .count();
        if problems.len() < servers {
            Vec::new()
        } else {
            problems
        }
    }

    fn build(&self, cx: SinkContext) -> anyhow::Result<BuiltSink> {
        if cx.retry.is_some() {
            // librdkafka retries what may pass on its own, for ever here (message.timeout.ms:
            // 0): there is no attempt count for `retry` to bound.
            anyhow::bail!(
                "the kafka sink retries until the brokers take the events; `retry` does not apply"
            );
        }
        let dead = Arc::new(DeadLetters::new(&cx.id, &cx.data_dir, &cx.metrics));
        let context = Context {
            metrics: cx.metrics.clone(),
            dead,
            degraded: AtomicBool::new(false),
            reasons: Default::default(),
        };
        let producer: ThreadedProducer<Context> = self
            .client_config()
            .create_with_context(context)
            .map_err(|e| anyhow::anyhow!("cannot create the Kafka producer: {e}"))?;
        let encoder = Arc::new(LineEncoder::new(self.encoding, true));
        let prepare: Arc<dyn Prepare> = encoder.clone();
        let config = Arc::new(self.clone());
        let metrics = cx.metrics;
        Ok(BuiltSink {
            prepare: Some(prepare),
            queue_batches: QUEUE_BATCHES,
            // `send` and the final flush block: a thread of its own.
            thread: SinkThread::Own,
            run: Box::new(move |input| Box::pin(run(config, producer, encoder, metrics, input))),
        })
    }
}

/// What every delivery report needs: where dead letters go and what to count.
struct Context {
    metrics: Arc<ComponentMetrics>,
    dead: Arc<DeadLetters>,
    /// The sink is degraded by a broker error; the next delivery clears it.
    degraded: AtomicBool,
    reasons: crate::kafka::Reasons,
}

impl ClientContext for Context {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error
            | RDKafkaLogLevel::Warning => {
                crate::warn_limited!(self.metrics, facility, message, "librdkafka says.");
            }
            _ => {
                tracing::debug!(component = %self.metrics.id, facility, message, "librdkafka says.")
            }
        }
    }

    /// Errors of the client as a whole (brokers down, unreachable, refusing): librdkafka keeps
    /// trying; the sink says it is degraded meanwhile.
    fn error(&self, error: KafkaError, reason: &str) {
        self.metrics.error(ErrorKind::Io, 1);
        crate::warn_limited!(self.metrics, %error, reason, "Kafka brokers are not taking events; librdkafka keeps trying.");
        self.degraded.store(true, Ordering::Relaxed);
        let why = self.reasons.describe(&error, reason);
        self.metrics.set_health(Health::Degraded, Some(why));
    }
}

impl ProducerContext for Context {
    type DeliveryOpaque = Arc<Tracker>;

    fn delivery(&self, result: &DeliveryResult<'_>, tracker: Arc<Tracker>) {
        match result {
            Ok(message) => {
                if self.degraded.swap(false, Ordering::Relaxed) {
                    self.reasons.clear();
                    self.metrics.set_health(Health::Running, None);
                }
                tracker.done(BatchStatus::Delivered, message.payload_len());
            }
            Err((error, message)) => {
                let error = judge(error);
                let status = if error.is_retryable() {
                    // The stop purged what was still queued: not delivered, not refused (the
                    // source may send it again).
                    BatchStatus::Errored
                } else {
                    self.dead_letter(message.payload().unwrap_or_default(), &error)
                };
                tracker.done(status, 0);
            }
        }
    }
}

/// What a Kafka error means for one message, by its code. librdkafka retries on its own what
/// may pass between it and the brokers (for ever here), so a message reaches the sink with an
/// error only when:
///
/// - librdkafka's queue is full (`QueueFull`, at `send`): retryable, the sink waits and sends
///   it again;
/// - the stop purged it (`PurgeQueue`, `PurgeInflight`, in its report): retryable, neither
///   delivered nor refused, reported errored so the source may send it again;
/// - anything else (too large, no such topic, not authorised, a topic name librdkafka cannot
///   use): permanent, "Kafka refused the message", and it goes to the dead letters.
fn judge(error: &KafkaError) -> SinkError {
    match error.rdkafka_error_code() {
        Some(
            RDKafkaErrorCode::QueueFull
            | RDKafkaErrorCode::PurgeQueue
            | RDKafkaErrorCode::PurgeInflight,
        ) => SinkError::from_cause(Retry::Retryable, error.clone()),
        _ => SinkError::permanent("Kafka refused the message").with_cause(error.clone()),
    }
}

impl Context {
    /// A message the brokers refused for good (too large, no such topic, not authorised): to
    /// the dead-letter file; `Rejected` once it is there, `Errored` if it could not be written.
    fn dead_letter(&self, payload: &[u8], error: &SinkError) -> BatchStatus {
        self.metrics.error(ErrorKind::Io, 1);
        // The log line's `error` is librdkafka's own (the reason says "Kafka refused").
        let cause: &dyn std::fmt::Display = match error.cause::<KafkaError>() {
            Some(kafka) => kafka,
            None => error,
        };
        crate::warn_limited!(self.metrics, error = %cause, "Kafka refused a message for good; it goes to the dead-letter file.");
        match self.dead.write([payload], error, 1, None) {
            Ok(_) => BatchStatus::Rejected,
            Err(e) => {
                self.metrics
                    .discarded(crate::metrics::DiscardReason::WriteFailed, 1);
                tracing::error!(component = %self.metrics.id, error = %e, "Cannot write a dead letter; the event is reported errored.");
                BatchStatus::Errored
            }
        }
    }
}

/// One input delivery's messages: its ack is committed once every message has its report.
pub struct Tracker {
    remaining: AtomicUsize,
    /// The worst status so far (as `BatchStatus as u8`).
    worst: AtomicU8,
    bytes: AtomicUsize,
    events: usize,
    ack: Mutex<Option<Ack>>,
    metrics: Arc<ComponentMetrics>,
}

impl Tracker {
    fn new(ack: Ack, events: usize, metrics: Arc<ComponentMetrics>) -> Tracker {
        Tracker {
            remaining: AtomicUsize::new(events),
            worst: AtomicU8::new(BatchStatus::Delivered as u8),
            bytes: AtomicUsize::new(0),
            events,
            ack: Mutex::new(Some(ack)),
            metrics,
        }
    }

    /// One message has its verdict; the last one commits the ack.
    fn done(&self, status: BatchStatus, bytes: usize) {
        self.worst.fetch_max(status as u8, Ordering::AcqRel);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.finish();
        }
    }

    fn finish(&self) {
        let status = match self.worst.load(Ordering::Acquire) {
            0 => BatchStatus::Delivered,
            1 => BatchStatus::Errored,
            _ => BatchStatus::Rejected,
        };
        if status == BatchStatus::Delivered {
            self.metrics
                .sent(self.events, self.bytes.load(Ordering::Relaxed));
        }
        let ack = self.ack.lock().ok().and_then(|mut a| a.take());
        if let Some(ack) = ack {
            ack.commit(status);
        }
    }
}

async fn run(
    config: Arc<KafkaSinkConfig>,
    producer: ThreadedProducer<Context>,
    encoder: Arc<LineEncoder>,
    metrics: Arc<ComponentMetrics>,
    mut input: Input,
) {
    metrics.set_health(Health::Running, None);
    let mut out = Out::default();
    while let Some(delivery) = input.recv().await {
        let batch = delivery.batch;
        let prepared = match delivery.prepared {
            Some(p) if p.ends.len() == batch.len() => p,
            _ => encoder.prepare(&batch),
        };
        if batch.is_empty() {
            delivery.ack.commit(BatchStatus::Delivered);
            encoder.pool.put(prepared.bytes);
            continue;
        }
        let tracker = Arc::new(Tracker::new(delivery.ack, batch.len(), metrics.clone()));
        let mut start = 0usize;
        for (i, event) in batch.events.iter().enumerate() {
            let end = prepared.ends.get(i).map_or(start, |e| *e as usize);
            let line = prepared.bytes.get(start..end).unwrap_or_default();
            start = end;
            let payload = line.strip_suffix(b"\n").unwrap_or(line);
            out.render(&config, &batch, event);
            let mut record =
                BaseRecord::with_opaque_to(&out.topic, tracker.clone()).payload(payload);
            if config.key.is_some() {
                record = record.key(&out.key[..]);
            }
            if !config.headers.is_empty() {
                let mut headers = OwnedHeaders::new_with_capacity(config.headers.len());
                for (name, value) in out.header_names.iter().zip(&out.header_values) {
                    headers = headers.insert(Header {
                        key: name,
                        value: Some(&value[..]),
                    });
                }
                record = record.headers(headers);
            }
            loop {
                let (error, back) = match producer.send(record) {
                    Ok(()) => break,
                    Err(refused) => refused,
                };
                let error = judge(&error);
                if error.is_retryable() {
                    // librdkafka's queue is full: the brokers are slow or away.
                    record = back;
                    tokio::time::sleep(QUEUE_FULL_WAIT).await;
                    continue;
                }
                // Refused before it was queued (larger than message.max.bytes, a topic name
                // librdkafka cannot use): no report will come for it.
                let status = producer.context().dead_letter(payload, &error);
                tracker.done(status, 0);
                break;
            }
        }
        drop(batch);
        encoder.pool.put(prepared.bytes);
    }
    // Everything sent is delivered (or refused) before the sink says it is done; the stop's
    // own deadline bounds the wait, and what is still queued then stays unacknowledged.
    loop {
        match producer.flush(Duration::from_secs(1)) {
            Ok(()) => break,
            Err(_) if producer.in_flight_count() > 0 => {}
            Err(_) => break,
        }
    }
    metrics.set_health(Health::Stopped, None);
}

/// What one event's message needs rendered, in buffers reused from event to event.
#[derive(Default)]
struct Out {
    topic: String,
    key: Vec<u8>,
    header_names: Vec<String>,
    header_values: Vec<Vec<u8>>,
}

impl Out {
    fn render(
        &mut self,
        config: &KafkaSinkConfig,
        batch: &EventBatch,
        event: &loghaul_core::Event,
    ) {
        if config.topic.has_fields || self.topic.is_empty() {
            // Field values render as `[A-Za-z0-9._-]`: always a valid topic name.
            crate::sinks::template::render(&config.topic, batch, event, &mut self.topic);
        }
        if let Some(key) = &config.key {
            raw(key, batch, event, &mut self.key);
        }
        if self.header_names.len() != config.headers.len() {
            self.header_names = config.headers.iter().map(|(n, _)| n.clone()).collect();
            self.header_values = vec![Vec::new(); config.headers.len()];
        }
        for ((_, template), value) in config.headers.iter().zip(&mut self.header_values) {
            raw(template, batch, event, value);
        }
    }
}

/// `template` rendered with the fields' values as they are (a key or a header value need not
/// be a path component).
fn raw(
    template: &loghaul_config::PathTemplate,
    batch: &EventBatch,
    event: &loghaul_core::Event,
    out: &mut Vec<u8>,
) {
    out.clear();
    for part in &template.parts {
        match part {
            loghaul_config::TemplatePart::Literal(s)
            | loghaul_config::TemplatePart::Strftime(s) => {
                out.extend_from_slice(s.as_bytes());
            }
            loghaul_config::TemplatePart::Field(name) => {
                crate::sinks::template::with_field(batch, event, name, |v| {
                    out.extend_from_slice(v);
                });
            }
            loghaul_config::TemplatePart::FieldOr(name, default) => {
                crate::sinks::template::with_field(batch, event, name, |v| {
                    out.extend_from_slice(if v.is_empty() { default.as_bytes() } else { v });
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use loghaul_core::{BatchNotifier, Event, Span};
    use rdkafka::error::RDKafkaErrorCode as Code;

    use super::*;
    use crate::metrics::{ComponentKind, DiscardReason, Registry};

    fn metrics() -> Arc<ComponentMetrics> {
        Registry::default().register("k", ComponentKind::Sink, "kafka")
    }

    #[test]
    fn a_full_queue_and_a_purge_are_retryable_and_every_other_code_permanent() {
        for code in [Code::QueueFull, Code::PurgeQueue, Code::PurgeInflight] {
            let e = judge(&KafkaError::MessageProduction(code));
            assert!(e.is_retryable(), "{code:?}: {e}");
        }
        for code in [
            Code::MessageSizeTooLarge,
            Code::UnknownTopicOrPartition,
            Code::UnknownTopic,
            Code::TopicAuthorizationFailed,
            Code::InvalidMessage,
            Code::UnknownPartition,
        ] {
            let e = judge(&KafkaError::MessageProduction(code));
            assert!(e.is_permanent(), "{code:?}: {e}");
            assert!(
                e.to_string().starts_with("Kafka refused the message: "),
                "{e}"
            );
            assert!(e.cause::<KafkaError>().is_some());
        }
        // An error without a code (the client itself failed) refuses too.
        assert!(judge(&KafkaError::Canceled).is_permanent());
    }

    fn context(dir: &std::path::Path, metrics: &Arc<ComponentMetrics>) -> Context {
        Context {
            metrics: metrics.clone(),
            dead: Arc::new(DeadLetters::new("k", dir, metrics)),
            degraded: AtomicBool::new(false),
            reasons: Default::default(),
        }
    }

    #[test]
    fn a_refused_message_is_a_dead_letter_with_kafkas_reason() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let metrics = metrics();
        let cx = context(dir.path(), &metrics);
        let error = judge(&KafkaError::MessageProduction(Code::MessageSizeTooLarge));
        assert_eq!(cx.dead_letter(b"{\"m\":1}", &error), BatchStatus::Rejected);
        assert_eq!(metrics.errors(ErrorKind::Io), 1);
        let text = std::fs::read_to_string(cx.dead.path())?;
        let letter =
            crate::pipeline::dlq::parse_line(text.trim_end()).map_err(anyhow::Error::msg)?;
        assert_eq!(letter.event, "{\"m\":1}");
        assert_eq!(letter.reason, error.to_string());
        assert!(
            letter.reason.contains("MessageSizeTooLarge"),
            "{}",
            letter.reason
        );
        Ok(())
    }

    #[test]
    fn a_dead_letter_that_cannot_be_written_reports_errored() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        // A file where the dead-letter directory should be.
        std::fs::write(dir.path().join("dlq"), b"")?;
        let metrics = metrics();
        let cx = context(dir.path(), &metrics);
        let error = judge(&KafkaError::MessageProduction(Code::UnknownTopic));
        assert_eq!(cx.dead_letter(b"x", &error), BatchStatus::Errored);
        assert_eq!(metrics.discarded_count(DiscardReason::WriteFailed), 1);
        Ok(())
    }

    #[tokio::test]
    async fn a_batch_is_settled_by_its_last_report_with_the_worst_status() {
        let metrics = metrics();
        let (finalizer, mut status) = BatchNotifier::new_with_receiver();
        let tracker = Tracker::new(finalizer.ack(), 3, metrics.clone());
        drop(finalizer);
        tracker.done(BatchStatus::Delivered, 10);
        tracker.done(BatchStatus::Rejected, 0);
        assert_eq!(status.try_status(), None, "a report is still missing");
        tracker.done(BatchStatus::Delivered, 10);
        assert_eq!(status.await, BatchStatus::Rejected);
        // Only a wholly delivered batch counts as sent.
        assert_eq!(metrics.sent_events.load(Ordering::Relaxed), 0);

        let (finalizer, status) = BatchNotifier::new_with_receiver();
        let tracker = Tracker::new(finalizer.ack(), 2, metrics.clone());
        drop(finalizer);
        tracker.done(BatchStatus::Delivered, 10);
        tracker.done(BatchStatus::Delivered, 5);
        assert_eq!(status.await, BatchStatus::Delivered);
        assert_eq!(metrics.sent_events.load(Ordering::Relaxed), 2);
        assert_eq!(metrics.sent_bytes.load(Ordering::Relaxed), 15);
    }

    #[tokio::test]
    async fn errored_is_worse_than_delivered_and_rejected_worst() {
        let (finalizer, status) = BatchNotifier::new_with_receiver();
        let tracker = Tracker::new(finalizer.ack(), 2, metrics());
        drop(finalizer);
        tracker.done(BatchStatus::Errored, 0);
        tracker.done(BatchStatus::Delivered, 1);
        assert_eq!(status.await, BatchStatus::Errored);
    }

    #[test]
    fn keys_and_header_values_render_field_values_as_they_are() -> anyhow::Result<()> {
        let (template, _) = loghaul_config::PathTemplate::parse("{{ appname }}/%Y-{{ hostname }}")
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let mut batch = EventBatch::new(
            bytes::Bytes::from_static(b"a b/chost"),
            "src".into(),
            "test",
        );
        batch.events.push(Event {
            appname: Span::new(0, 3).into(),
            hostname: Span::new(4, 9).into(),
            ..Event::default()
        });
        let mut out = Vec::new();
        raw(&template, &batch, &batch.events[0], &mut out);
        // Not sanitised as a topic or a path would be; strftime parts stay literal.
        assert_eq!(out, b"a b/%Y-chost");
        Ok(())
    }
}
