//! The `kafka` sink's configuration: its schema as written, its validation, and the librdkafka
//! producer settings it makes.

use std::collections::BTreeMap;
use std::time::Duration;

use loghaul_config::raw::{RawDuration, RawSize};
use loghaul_config::{ComponentConfig, PathTemplate, TemplatePart, Validator};
use serde::Deserialize;

use crate::sinks::encoder::Encoding;

/// Default `linger`: long enough to fill batches at high rates, short enough to be unnoticed.
pub const DEFAULT_LINGER: Duration = Duration::from_millis(5);
/// Default `batch_max_events` (librdkafka's `batch.num.messages`).
pub const DEFAULT_BATCH_MAX_EVENTS: usize = 10_000;
/// Default `batch_max_bytes` (librdkafka's `batch.size`).
pub const DEFAULT_BATCH_MAX_BYTES: usize = 1 << 20;
/// Default `queue_max_bytes`: what librdkafka may hold unsent. It is outside the memory budget,
/// so it stays well below librdkafka's own default of 1 GiB.
pub const DEFAULT_QUEUE_MAX_BYTES: usize = 64 << 20;

/// `type: kafka`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKafkaSink {
    /// `HOST:PORT` of one or more brokers, comma-separated. Required.
    pub bootstrap_servers: String,
    /// The topic, maybe with `{{ field }}` references (`logs-{{ appname }}`). Required.
    pub topic: String,
    /// The message key, maybe with `{{ field }}` references (`{{ hostname }}`): messages with the
    /// same key go to the same partition, in order. Default: none (spread over partitions).
    #[serde(default)]
    pub key: Option<String>,
    /// `json` (default: the event as a JSON object) or `text` (its message).
    #[serde(default)]
    pub encoding: Option<Encoding>,
    /// `none` (default), `gzip`, `snappy`, `lz4` or `zstd`.
    #[serde(default)]
    pub compression: Option<Compression>,
    /// `all` (default), `1` or `0`: which replicas must have a message before it counts.
    #[serde(default)]
    pub acks: Option<RawAcks>,
    /// The idempotent producer: no duplicates from the producer's own retries. Default `true`
    /// (needs `acks: all`).
    #[serde(default)]
    pub idempotence: Option<bool>,
    /// How long the producer waits to fill a batch. Default `5ms`.
    #[serde(default)]
    pub linger: Option<RawDuration>,
    /// Most messages per batch. Default `10000`.
    #[serde(default)]
    pub batch_max_events: Option<usize>,
    /// Most bytes per batch. Default `1MiB`.
    #[serde(default)]
    pub batch_max_bytes: Option<RawSize>,
    /// Most bytes the producer holds unsent before the sink waits (and its sources push back).
    /// Default `64MiB`.
    #[serde(default)]
    pub queue_max_bytes: Option<RawSize>,
    /// Message headers: name → value, values maybe with `{{ field }}` references.
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// librdkafka settings passed through as they are (`security.protocol`, `sasl.*`,
    /// `ssl.*`, ...); they override the sink's own.
    #[serde(default)]
    pub librdkafka_options: Option<BTreeMap<String, String>>,
}

/// A compression codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    #[default]
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

// librdkafka's name for it: only the client config uses it.
#[cfg(feature = "kafka")]
impl Compression {
    fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// `acks` as written: `all`, or a number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawAcks(pub String);

impl<'de> Deserialize<'de> for RawAcks {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // `acks: 1` is a YAML number, `acks: all` a string.
        let v = serde_json::Value::deserialize(d)?;
        Ok(RawAcks(match v {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        }))
    }
}

/// A kafka sink, validated.
#[derive(Clone, PartialEq, Eq)]
pub struct KafkaSinkConfig {
    pub bootstrap_servers: String,
    pub topic: PathTemplate,
    pub key: Option<PathTemplate>,
    pub encoding: Encoding,
    pub compression: Compression,
    /// `all`, `1` or `0`, as librdkafka spells it.
    pub acks: &'static str,
    pub idempotence: bool,
    pub linger: Duration,
    pub batch_max_events: usize,
    pub batch_max_bytes: usize,
    pub queue_max_bytes: usize,
    pub headers: Vec<(String, PathTemplate)>,
    pub librdkafka_options: BTreeMap<String, String>,
}

impl std::fmt::Debug for KafkaSinkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // librdkafka options may hold credentials (`sasl.password`): their names only.
        f.debug_struct("KafkaSinkConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("topic", &self.topic)
            .field("encoding", &self.encoding)
            .field("compression", &self.compression)
            .field("acks", &self.acks)
            .field(
                "librdkafka_options",
                &self.librdkafka_options.keys().collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "kafka")]
impl KafkaSinkConfig {
    /// The librdkafka producer settings: the sink's, then the pass-through ones over them.
    pub fn client_config(&self) -> rdkafka::ClientConfig {
        let mut c = rdkafka::ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap_servers)
            .set("acks", self.acks)
            .set("enable.idempotence", self.idempotence.to_string())
            .set("compression.codec", self.compression.as_str())
            .set("linger.ms", self.linger.as_millis().to_string())
            .set("batch.num.messages", self.batch_max_events.to_string())
            .set("batch.size", self.batch_max_bytes.to_string())
            .set(
                "queue.buffering.max.kbytes",
                (self.queue_max_bytes / 1024).max(1).to_string(),
            )
            // Messages are never given up on for taking long: a broker outage fills the queue
            // and the sources push back, and only a permanent error ends a message.
            .set("message.timeout.ms", "0")
            .set("statistics.interval.ms", "0");
        for (k, v) in &self.librdkafka_options {
            c.set(k, v);
        }
        c
    }
}

/// A `{{ field }}` template at `key` (no strftime: `%` means itself).
fn template(text: &str, key: &[&str], cx: &mut Validator<'_, '_>) -> Option<PathTemplate> {
    match crate::sinks::template::parse_fields(text) {
        Ok((t, warnings)) => {
            for w in warnings {
                cx.warn(key, w, None);
            }
            Some(t)
        }
        Err(e) => {
            cx.error(
                key,
                format!("{} (at character {})", e.message, e.offset + 1),
                Some(e.hint),
            );
            None
        }
    }
}

/// Kafka topic names: 1 to 249 of `[A-Za-z0-9._-]` (rendered fields already keep to them).
fn valid_topic_literal(text: &str) -> bool {
    text.len() <= 249
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl ComponentConfig for KafkaSinkConfig {
    const TYPE: &'static str = "kafka";
    type Raw = RawKafkaSink;

    fn validate(s: RawKafkaSink, cx: &mut Validator<'_, '_>) -> Option<KafkaSinkConfig> {
        let mut ok = true;
        if s.bootstrap_servers.trim().is_empty() {
            cx.error(
                &["bootstrap_servers"],
                "`bootstrap_servers` is empty",
                Some("e.g. bootstrap_servers: \"kafka-1:9092,kafka-2:9092\"".to_owned()),
            );
            ok = false;
        }
        let topic = template(&s.topic, &["topic"], cx);
        if let Some(t) = &topic {
            let literal_ok = t.parts.iter().all(|p| match p {
                TemplatePart::Literal(l) => valid_topic_literal(l),
                _ => true,
            });
            if t.parts.is_empty() || !literal_ok {
                cx.error(
                    &["topic"],
                    format!("`{}` is not a Kafka topic name", s.topic),
                    Some("topic names hold only letters, digits, `.`, `_` and `-`".to_owned()),
                );
                ok = false;
            }
        }
        let key = match &s.key {
            None => Some(None),
            Some(k) => template(k, &["key"], cx).map(Some),
        };
        let acks = match s.acks.as_ref().map(|a| a.0.as_str()) {
            None | Some("all" | "-1") => Some("all"),
            Some("1") => Some("1"),
            Some("0") => Some("0"),
            Some(other) => {
                cx.error(
                    &["acks"],
                    format!("`acks: {other}` is not one of all, 1 or 0"),
                    None,
                );
                None
            }
        };
        let idempotence = s.idempotence.unwrap_or(true);
        if idempotence && acks.is_some_and(|a| a != "all") {
            cx.error(
                &["acks"],
                "the idempotent producer needs `acks: all`",
                Some("set `idempotence: false` to use fewer acks".to_owned()),
            );
            ok = false;
        }
        let linger = cx.duration_at(s.linger.as_ref(), &["linger"], DEFAULT_LINGER, false);
        let batch_max_events = cx.positive(
            s.batch_max_events,
            "batch_max_events",
            DEFAULT_BATCH_MAX_EVENTS,
        );
        let batch_max_bytes = cx.size(
            s.batch_max_bytes.as_ref(),
            "batch_max_bytes",
            DEFAULT_BATCH_MAX_BYTES,
            true,
        );
        let queue_max_bytes = cx.size(
            s.queue_max_bytes.as_ref(),
            "queue_max_bytes",
            DEFAULT_QUEUE_MAX_BYTES,
            true,
        );
        let mut headers = Vec::new();
        for (name, value) in s.headers.unwrap_or_default() {
            if name.is_empty() {
                cx.error(&["headers"], "a header name is empty", None);
                ok = false;
                continue;
            }
            match template(&value, &["headers", name.as_str()], cx) {
                Some(t) => headers.push((name, t)),
                None => ok = false,
            }
        }
        let config = KafkaSinkConfig {
            bootstrap_servers: s.bootstrap_servers,
            topic: topic?,
            key: key?,
            encoding: s.encoding.unwrap_or_default(),
            compression: s.compression.unwrap_or_default(),
            acks: acks?,
            idempotence,
            linger: linger?,
            batch_max_events: batch_max_events?,
            batch_max_bytes: batch_max_bytes?,
            queue_max_bytes: queue_max_bytes?,
            headers,
            librdkafka_options: s.librdkafka_options.unwrap_or_default(),
        };
        // Without librdkafka (no `kafka` feature) its own checks of the settings are skipped.
        #[cfg(feature = "kafka")]
        let ok = librdkafka_accepts(config.client_config(), cx) && ok;
        ok.then_some(config)
    }

    fn tls_role(&self) -> Result<loghaul_config::TlsRole, String> {
        Err(
            "the kafka sink takes TLS and SASL through `librdkafka_options` \
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
