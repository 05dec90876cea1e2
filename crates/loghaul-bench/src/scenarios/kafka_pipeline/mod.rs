//! `kafka_pipeline`: RFC3164 over TCP into loghaul A (`kafka` sink) → a real Kafka broker → two
//! loghaul consumers (`kafka` source, one group) → JSON-lines files; each side on its own too, one
//! consumer killed mid-run, and Kafka's own perf tools on the same broker ([`run`]). Its rows are
//! its phases; what Kafka's side measured goes into each record's `kafka` section.

pub mod run;

use anyhow::{Result, bail};

use super::Scenario;
use crate::payload::{Format, Framing};
use crate::runner::{Driver, Plan};
use crate::subjects::{Input, Peers, SubjectKind};

/// loghaul on both sides of a Kafka broker.
pub struct KafkaPipeline;

impl Scenario for KafkaPipeline {
    fn name(&self) -> &'static str {
        "kafka_pipeline"
    }

    fn about(&self) -> &'static str {
        "RFC3164 over TCP into loghaul A (`kafka` sink) → a real Kafka broker → two loghaul \
         consumers (`kafka` source, one group) → JSON-lines files; each side on its own too, one \
         consumer killed mid-run, and Kafka's own perf tools on the same broker"
    }

    /// JSON events of about 280 bytes through a broker that takes some 200–500k/s here: a few
    /// seconds per phase, and six phases a round.
    fn default_events(&self) -> u64 {
        1_000_000
    }

    fn default_message_size(&self) -> usize {
        128
    }

    fn payload(&self) -> (Format, Framing) {
        (Format::Rfc3164, Framing::Newline)
    }

    fn input(&self) -> Option<Input> {
        None
    }

    fn subjects(&self) -> &'static [SubjectKind] {
        &[SubjectKind::Loghaul]
    }

    /// Every other subject alike: its peers are Kafka's tools, in every round.
    fn unsupported(&self, _: SubjectKind) -> &'static str {
        "n/a: `kafka_pipeline` runs loghaul, with Kafka's own producer and consumer perf tools as \
         its peers in every round"
    }

    fn default_subjects(&self) -> &'static [SubjectKind] {
        &[SubjectKind::Loghaul]
    }

    fn check(&self, plan: &Plan) -> Result<()> {
        if plan.driver == Driver::Loggen {
            bail!("`kafka_pipeline` takes the built-in generator");
        }
        Ok(())
    }

    fn run(&self, plan: &Plan, peers: &Peers) -> Result<String> {
        run::run(plan, peers)
    }
}

/// The producer settings of `kafka_pipeline`: written out in loghaul's sink config, and given to
/// Kafka's `ProducerPerformance` in the same run in the Java producer's names, so that both
/// producers batch alike. They are the sink's defaults (docs/configuration.md) but the
/// compression, which is off (the sink's default too): the perf tool's random payload would not
/// compress as JSON does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KafkaProducer {
    /// `compression` (`compression.type`).
    pub compression: &'static str,
    /// `linger` (`linger.ms`), in milliseconds.
    pub linger_ms: u64,
    /// `batch_max_bytes` (`batch.size`).
    pub batch_max_bytes: u64,
    /// `queue_max_bytes` (`buffer.memory`): what the producer may hold unsent.
    pub queue_max_bytes: u64,
}

/// `kafka_pipeline`'s producer settings.
pub const KAFKA_PRODUCER: KafkaProducer = KafkaProducer {
    compression: "none",
    linger_ms: 5,
    batch_max_bytes: 1 << 20,
    queue_max_bytes: 64 << 20,
};

impl KafkaProducer {
    /// The settings as `ProducerPerformance --producer-props` takes them: `acks=all` with the
    /// idempotent producer, as the sink produces.
    pub fn java_props(&self, bootstrap: &str) -> Vec<String> {
        vec![
            format!("bootstrap.servers={bootstrap}"),
            "acks=all".into(),
            "enable.idempotence=true".into(),
            format!("compression.type={}", self.compression),
            format!("linger.ms={}", self.linger_ms),
            format!("batch.size={}", self.batch_max_bytes),
            format!("buffer.memory={}", self.queue_max_bytes),
        ]
    }
}

/// loghaul A of `kafka_pipeline`: RFC3164 over TCP on `port`, as in `syslog`, into a `kafka`
/// sink `out` producing JSON events to `topic` with [`KAFKA_PRODUCER`]'s settings (acks from
/// every replica, the idempotent producer: the sink's defaults, written out).
pub fn kafka_producer_config(port: u16, api: u16, bootstrap: &str, topic: &str) -> String {
    let p = KAFKA_PRODUCER;
    format!(
        "# loghaul bench: scenario kafka_pipeline; A, the producer: syslog in, a Kafka topic out\n\
         api: {{ address: \"127.0.0.1:{api}\" }}\n\
         sources:\n  \
           in: {{ type: syslog, mode: tcp, address: \"127.0.0.1:{port}\", format: rfc3164, framing: newline }}\n\
         sinks:\n  \
           out: {{ type: kafka, inputs: [in], bootstrap_servers: \"{bootstrap}\", topic: \"{topic}\", \
         encoding: json, acks: all, idempotence: true, compression: {}, linger: {}ms, \
         batch_max_bytes: {}, queue_max_bytes: {} }}\n",
        p.compression, p.linger_ms, p.batch_max_bytes, p.queue_max_bytes,
    )
}

/// A consumer of `kafka_pipeline`: a member of the consumer group `group` reading `topic` with
/// the `kafka` source (JSON decoding, from the earliest offset: its defaults) into a file sink
/// writing JSON lines to `out`. Its session times out after 6 s instead of librdkafka's 45 s, so
/// that the group takes a killed member's partitions over before the lab's idle timeout.
pub fn kafka_consumer_config(
    i: usize,
    api: u16,
    bootstrap: &str,
    group: &str,
    topic: &str,
    out: &str,
) -> String {
    format!(
        "# loghaul bench: scenario kafka_pipeline; consumer {i}: a member of the group {group}, \
         a JSON-lines file out\n\
         # A member that dies is given up after 6 s (librdkafka's default: 45 s), so the round \
         with a consumer killed does not\n\
         # wait 45 s for the group to hand its partitions to the other.\n\
         api: {{ address: \"127.0.0.1:{api}\" }}\n\
         sources:\n  \
           in: {{ type: kafka, bootstrap_servers: \"{bootstrap}\", group_id: \"{group}\", topics: [\"{topic}\"], \
         librdkafka_options: {{ session.timeout.ms: \"6000\", heartbeat.interval.ms: \"1000\" }} }}\n\
         sinks:\n  \
           out: {{ type: file, inputs: [in], path: \"{out}\", encoding: json }}\n"
    )
}
