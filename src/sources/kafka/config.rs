//! The `kafka` source's configuration: its schema as written, its validation, and the
//! librdkafka consumer settings it makes.

use std::collections::BTreeMap;

use loghaul_config::{ComponentConfig, Validator};
use serde::Deserialize;

/// Default `max_batch_events`: messages read into one batch.
pub const DEFAULT_MAX_BATCH_EVENTS: usize = 10_000;

/// librdkafka's `queued.max.messages.kbytes`: how much the consumer reads ahead, in KiB.
pub const PREFETCH_KIB: u32 = 128 * 1024;

/// `type: kafka` (source), as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKafkaSource {
    /// `HOST:PORT` of one or more brokers, comma-separated. Required.
    pub bootstrap_servers: String,
    /// The consumer group: the group's members share the topics' partitions. Required.
    pub group_id: String,
    /// Topics to read: names, or regular expressions starting with `^`. Required.
    pub topics: Vec<String>,
    /// `json` (default: a JSON object becomes the event's record; anything else its message)
    /// or `text` (the payload is the message).
    #[serde(default)]
    pub decoding: Option<Decoding>,
    /// Where a group without committed offsets starts: `earliest` (default) or `latest`.
    #[serde(default)]
    pub auto_offset_reset: Option<OffsetReset>,
    /// Most messages per batch. Default `10000`.
    #[serde(default)]
    pub max_batch_events: Option<usize>,
    /// librdkafka settings passed through as they are (`security.protocol`, `sasl.*`,
    /// `ssl.*`, `session.timeout.ms`, ...); they override the source's own.
    #[serde(default)]
    pub librdkafka_options: Option<BTreeMap<String, String>>,
}

/// How a message's payload becomes an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decoding {
    #[default]
    Json,
    Text,
}

/// Where a group without committed offsets starts reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OffsetReset {
    #[default]
    Earliest,
    Latest,
}

/// A kafka source, validated.
#[derive(Clone, PartialEq, Eq)]
pub struct KafkaSourceConfig {
    pub bootstrap_servers: String,
    pub group_id: String,
    pub topics: Vec<String>,
    pub decoding: Decoding,
    pub auto_offset_reset: OffsetReset,
    pub max_batch_events: usize,
    pub librdkafka_options: BTreeMap<String, String>,
}

impl std::fmt::Debug for KafkaSourceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // librdkafka options may hold credentials (`sasl.password`): their names only.
        f.debug_struct("KafkaSourceConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("group_id", &self.group_id)
            .field("topics", &self.topics)
            .field("decoding", &self.decoding)
            .field(
                "librdkafka_options",
                &self.librdkafka_options.keys().collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "kafka")]
impl KafkaSourceConfig {
    /// The librdkafka consumer settings: the source's, then the pass-through ones over them.
    pub fn client_config(&self) -> rdkafka::ClientConfig {
        let mut c = rdkafka::ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap_servers)
            .set("group.id", &self.group_id)
            .set(
                "auto.offset.reset",
                match self.auto_offset_reset {
                    OffsetReset::Earliest => "earliest",
                    OffsetReset::Latest => "latest",
                },
            )
            // Offsets are stored by the source once every sink committed a message's batch,
            // and committed from the store on librdkafka's timer (and at rebalances and stop).
            .set("enable.auto.commit", "true")
            .set("auto.commit.interval.ms", "1000")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            // The lag gauge comes from librdkafka's statistics.
            .set("statistics.interval.ms", "1000")
            // librdkafka refills its prefetch queue only below 100,000 messages and 64 MiB by
            // default; at a million small messages a second that queue runs dry between fetch
            // responses and the reader waits (steps of ~250k messages with a second's pause on
            // a local broker). A deeper queue keeps fetches in flight; its bytes are the
            // source's read-ahead, outside `limits.memory`, and can be lowered here.
            .set("queued.min.messages", "1000000")
            .set("queued.max.messages.kbytes", PREFETCH_KIB.to_string());
        for (k, v) in &self.librdkafka_options {
            c.set(k, v);
        }
        c
    }
}

impl ComponentConfig for KafkaSourceConfig {
    const TYPE: &'static str = "kafka";
    type Raw = RawKafkaSource;

    fn validate(s: RawKafkaSource, cx: &mut Validator<'_, '_>) -> Option<KafkaSourceConfig> {
        let mut ok = true;
        for (key, value) in [
            ("bootstrap_servers", &s.bootstrap_servers),
            ("group_id", &s.group_id),
        ] {
            if value.trim().is_empty() {
                cx.error(&[key], format!("`{key}` is empty"), None);
                ok = false;
            }
        }
        if s.topics.is_empty() || s.topics.iter().any(|t| t.trim().is_empty()) {
            cx.error(
                &["topics"],
                "`topics` needs at least one topic, and no empty one",
                Some(
                    "names, or regular expressions starting with ^: [logs, \"^logs-.*\"]"
                        .to_owned(),
                ),
            );
            ok = false;
        }
        for t in s.topics.iter().filter(|t| t.starts_with('^')) {
            if let Err(e) = regex::Regex::new(t) {
                cx.error(
                    &["topics"],
                    format!("`{t}` is not a regular expression: {e}"),
                    None,
                );
                ok = false;
            }
        }
        let max_batch_events = cx.positive(
            s.max_batch_events,
            "max_batch_events",
            DEFAULT_MAX_BATCH_EVENTS,
        );
        let config = KafkaSourceConfig {
            bootstrap_servers: s.bootstrap_servers,
            group_id: s.group_id,
            topics: s.topics,
            decoding: s.decoding.unwrap_or_default(),
            auto_offset_reset: s.auto_offset_reset.unwrap_or_default(),
            max_batch_events: max_batch_events?,
            librdkafka_options: s.librdkafka_options.unwrap_or_default(),
        };
        // Without librdkafka (no `kafka` feature) its own checks of the settings are skipped.
        #[cfg(feature = "kafka")]
        let ok = librdkafka_accepts(config.client_config(), cx) && ok;
        ok.then_some(config)
    }

    fn tls_role(&self) -> Result<loghaul_config::TlsRole, String> {
        Err(
            "the kafka source takes TLS and SASL through `librdkafka_options` \
             (`security.protocol`, `ssl.*`, `sasl.*`)"
                .to_owned(),
        )
    }
}

/// Whether librdkafka takes the settings: what it refuses is reported now (at
/// `librdkafka_options`), not at start.
#[cfg(feature = "kafka")]
fn librdkafka_accepts(settings: rdkafka::ClientConfig, cx: &mut Validator<'_, '_>) -> bool {
    match settings.create_native_config() {
        Ok(_) => true,
        Err(e) => {
            cx.error(
                &["librdkafka_options"],
                format!("librdkafka refuses the settings: {e}"),
                None,
            );
            false
        }
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
