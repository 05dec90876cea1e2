//! The `dedupe` transform: drops events whose compared fields were seen in the last
//! `cache.num_events` distinct events, as Vector's `dedupe` does.
//!
//! `fields.match` compares the listed fields (Vector's default: `message`, the host, and
//! `timestamp`; the host is loghaul's `hostname`); `fields.ignore` compares every field but the
//! listed ones (and what lies below them). Fields are read as VRL sees them (docs/vrl.md). Values
//! compare with their type: `"123"` and `123` differ, a field that is absent differs from one
//! that is `null`, as in Vector.
//!
//! The cache is least-recently-used, as Vector's: an event seen again counts as used, so a
//! stream that repeats an event keeps it cached. Each entry is a 128-bit XXH3 digest of the
//! compared values (tagged with their types, in the fields' order), not the values themselves:
//! 5000 entries take a few hundred KiB whatever the events hold, charged to the memory budget.
//! Two different events share a digest with a probability of about 2^-128 per pair.
//!
//! The output is a view of the input batch, carrying its finalizer; duplicates count as
//! `discarded{reason="duplicate"}` and are settled as delivered (the user's intent).

use std::sync::Arc;

use loghaul_config::{ComponentConfig, Validator};
use loghaul_core::{BatchStatus, EventBatch};
use serde::Deserialize;
use vrl::value::Value as Vrl;
use xxhash_rust::xxh3::Xxh3;

use super::state::{self, Lru, StateCharge};
use super::view;
use super::{BuildTransform, TransformContext};
use crate::metrics::{ComponentMetrics, DiscardReason, Health};
use crate::pipeline::{BoxFuture, Fanout, Input};

/// Vector's cache size.
pub const DEFAULT_NUM_EVENTS: usize = 5000;

/// Vector's default fields (`message`, `host`, `timestamp` of its log schema), by loghaul's
/// names.
pub const DEFAULT_MATCH: [&str; 3] = ["message", "hostname", "timestamp"];

/// `type: dedupe`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDedupe {
    /// Which fields are compared.
    #[serde(default)]
    pub fields: Option<RawFields>,
    /// The cache of events seen.
    #[serde(default)]
    pub cache: Option<RawCache>,
}

/// `fields: { match: [...] }` or `fields: { ignore: [...] }`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFields {
    /// Compare only these fields.
    #[serde(default, rename = "match")]
    pub matched: Option<Vec<String>>,
    /// Compare every field but these.
    #[serde(default)]
    pub ignore: Option<Vec<String>>,
}

/// `cache: { num_events: N }`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    /// How many distinct events are remembered.
    #[serde(default)]
    pub num_events: Option<usize>,
}

/// Which fields make two events the same.
#[derive(Clone, Debug, PartialEq)]
pub enum Fields {
    Match(Vec<String>),
    Ignore(Vec<String>),
}

/// A dedupe transform.
#[derive(Clone, Debug, PartialEq)]
pub struct DedupeConfig {
    pub fields: Fields,
    pub num_events: usize,
}

impl ComponentConfig for DedupeConfig {
    const TYPE: &'static str = "dedupe";
    type Raw = RawDedupe;

    fn validate(d: RawDedupe, cx: &mut Validator<'_, '_>) -> Option<DedupeConfig> {
        let fields = match d.fields {
            None => Some(Fields::Match(
                DEFAULT_MATCH.iter().map(|f| (*f).to_owned()).collect(),
            )),
            Some(RawFields {
                matched: Some(_),
                ignore: Some(_),
            }) => {
                cx.error_at_key(
                    &["fields", "ignore"],
                    "`fields.match` and `fields.ignore` exclude each other",
                    Some(
                        "compare the fields listed (`match`) or all but them (`ignore`)".to_owned(),
                    ),
                );
                None
            }
            Some(RawFields {
                matched: Some(list),
                ..
            }) if list.is_empty() => {
                cx.error(
                    &["fields", "match"],
                    "`fields.match: []` compares nothing: every event after the first would be a duplicate",
                    Some("list the fields that make two events the same".to_owned()),
                );
                None
            }
            Some(RawFields {
                matched: Some(list),
                ..
            }) => names(cx, "match", list).map(Fields::Match),
            Some(RawFields {
                ignore: Some(list), ..
            }) => names(cx, "ignore", list).map(Fields::Ignore),
            Some(RawFields {
                matched: None,
                ignore: None,
            }) => {
                cx.error(
                    &["fields"],
                    "`fields` needs `match` or `ignore`",
                    Some("e.g. `fields: { match: [message, hostname] }`".to_owned()),
                );
                None
            }
        };
        let num_events = match d.cache.and_then(|c| c.num_events) {
            None => Some(DEFAULT_NUM_EVENTS),
            Some(0) => {
                cx.error(
                    &["cache", "num_events"],
                    "`cache.num_events` must be at least 1",
                    None,
                );
                None
            }
            Some(n) => Some(n),
        };
        Some(DedupeConfig {
            fields: fields?,
            num_events: num_events?,
        })
    }
}

/// Field names, none empty.
fn names(cx: &mut Validator<'_, '_>, key: &str, list: Vec<String>) -> Option<Vec<String>> {
    let mut ok = true;
    for (i, name) in list.iter().enumerate() {
        if name.is_empty() || name.split('.').any(str::is_empty) {
            cx.error(
                &["fields", key, &i.to_string()],
                format!("`{name}` is no field name"),
                Some("a field (`message`) or a dotted path (`kubernetes.pod`)".to_owned()),
            );
            ok = false;
        }
    }
    ok.then_some(list)
}

impl BuildTransform for DedupeConfig {
    fn build(&self, cx: TransformContext) -> anyhow::Result<BoxFuture<'static, ()>> {
        let dedupe = Dedupe::new(self.clone(), cx.fanout.budget());
        Ok(Box::pin(run(dedupe, cx.metrics, cx.input, cx.fanout)))
    }
}

/// The cache of events seen.
pub struct Dedupe {
    config: DedupeConfig,
    cache: Lru<u128>,
    charge: StateCharge,
}

impl Dedupe {
    pub fn new(config: DedupeConfig, budget: Option<&Arc<loghaul_core::MemoryBudget>>) -> Dedupe {
        Dedupe {
            config,
            cache: Lru::new(),
            charge: StateCharge::new(budget),
        }
    }

    /// Entries held now.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Whether each event of `batch` is new (kept) or a duplicate (dropped).
    pub fn decide(&mut self, batch: &EventBatch) -> Vec<bool> {
        let mut keep = Vec::with_capacity(batch.len());
        for event in &batch.events {
            let value = super::vrl::convert::to_vrl(batch, event);
            let digest = self.digest(&value);
            let seen = self.cache.touch(&digest);
            if !seen && self.cache.len() > self.config.num_events {
                self.cache.pop_oldest();
            }
            keep.push(!seen);
        }
        self.charge
            .set(self.cache.len() * Lru::<u128>::entry_bytes(16));
        keep
    }

    fn digest(&self, value: &Vrl) -> u128 {
        let mut h = Xxh3::new();
        match &self.config.fields {
            Fields::Match(names) => {
                for name in names {
                    match state::get(value, name) {
                        // Absent is not null: a tag of its own.
                        None => h.update(&[0xff]),
                        Some(v) => feed(&mut h, v),
                    }
                }
            }
            Fields::Ignore(ignored) => {
                let mut path = String::new();
                feed_pruned(&mut h, value, &mut path, ignored);
            }
        }
        h.digest128()
    }
}

/// Feeds `v` with its type: the same digest only for the same type and value.
pub(crate) fn feed(h: &mut Xxh3, v: &Vrl) {
    let bytes = |h: &mut Xxh3, tag: u8, b: &[u8]| {
        h.update(&[tag]);
        h.update(&(b.len() as u64).to_le_bytes());
        h.update(b);
    };
    match v {
        Vrl::Bytes(b) => bytes(h, 0, b),
        Vrl::String(s) => bytes(h, 0, s.as_bytes()),
        Vrl::Timestamp(t) => {
            h.update(&[1]);
            h.update(&t.timestamp().to_le_bytes());
            h.update(&t.timestamp_subsec_nanos().to_le_bytes());
        }
        Vrl::Integer(i) => {
            h.update(&[2]);
            h.update(&i.to_le_bytes());
        }
        Vrl::Float(f) => {
            h.update(&[3]);
            h.update(&f.into_inner().to_bits().to_le_bytes());
        }
        Vrl::Boolean(b) => h.update(&[4, u8::from(*b)]),
        Vrl::Object(obj) => {
            h.update(&[5]);
            h.update(&(obj.len() as u64).to_le_bytes());
            // An ObjectMap is ordered by key: the same fields in another order digest alike.
            for (k, v) in obj {
                bytes(h, 0, k.as_bytes());
                feed(h, v);
            }
        }
        Vrl::Array(items) => {
            h.update(&[6]);
            h.update(&(items.len() as u64).to_le_bytes());
            for item in items {
                feed(h, item);
            }
        }
        Vrl::Null => h.update(&[7]),
        Vrl::Regex(r) => bytes(h, 8, r.as_str().as_bytes()),
    }
}

/// Feeds `v` without the fields at `ignored` paths (nor what lies below them).
fn feed_pruned(h: &mut Xxh3, v: &Vrl, path: &mut String, ignored: &[String]) {
    let child = |h: &mut Xxh3, path: &mut String, segment: &str, child: &Vrl| {
        let len = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(segment);
        if !ignored.iter().any(|i| i == path) {
            h.update(&(path.len() as u64).to_le_bytes());
            h.update(path.as_bytes());
            feed_pruned(h, child, path, ignored);
        }
        path.truncate(len);
    };
    match v {
        Vrl::Object(obj) => {
            h.update(&[5]);
            for (k, v) in obj {
                child(h, path, k.as_str(), v);
            }
            h.update(&[0xfe]);
        }
        Vrl::Array(items) => {
            h.update(&[6]);
            for (i, item) in items.iter().enumerate() {
                child(h, path, &i.to_string(), item);
            }
            h.update(&[0xfe]);
        }
        leaf => feed(h, leaf),
    }
}

async fn run(mut dedupe: Dedupe, metrics: Arc<ComponentMetrics>, mut input: Input, fanout: Fanout) {
    metrics.set_health(Health::Running, None);
    while let Some(delivery) = input.recv().await {
        let keep = crate::pipeline::cpu_heavy(|| dedupe.decide(&delivery.batch));
        let duplicates = keep.iter().filter(|k| !**k).count();
        metrics.discarded(DiscardReason::Duplicate, duplicates as u64);
        fanout.send(view(&delivery.batch, &keep)).await;
        delivery.ack.commit(BatchStatus::Delivered);
    }
    metrics.set_health(Health::Stopped, None);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Configuration errors at their keys, and which events are duplicates.

    use serde_json::json;

    use super::*;
    use crate::config::testing::{error_at, ok, transform};
    use crate::transforms::testing::{json_batch, messages, syslog_batch};

    #[test]
    fn match_or_ignore_and_a_positive_cache() {
        let t = transform("type: dedupe\nfields:\n  match: [a]\n  ignore: [b]");
        error_at(&t, "ignore:", "exclude each other");
        let t = transform("type: dedupe\nfields:\n  match: []");
        error_at(&t, "match:", "compares nothing");
        let t = transform("type: dedupe\nfields: {}");
        error_at(&t, "fields:", "needs `match` or `ignore`");
        let t = transform("type: dedupe\nfields:\n  match:\n    - a\n    - 'b..c'");
        error_at(&t, "'b..c'", "no field name");
        let t = transform("type: dedupe\ncache:\n  num_events: 0");
        error_at(&t, "num_events:", "at least 1");
        let t = transform("type: dedupe\ncache:\n  size: 10");
        error_at(&t, "size:", "unknown key `size`");
        let t = transform("type: dedupe\nfields:\n  mtch: [a]");
        error_at(&t, "mtch:", "unknown key `mtch`");
        ok(&transform("type: dedupe"));
        ok(&transform(
            "type: dedupe\nfields:\n  ignore: [timestamp]\ncache: { num_events: 10 }",
        ));
    }

    fn dedupe(body: &str) -> Dedupe {
        let config = ok(&transform(body));
        let t = config.transforms.into_iter().next().expect("one transform");
        match t.config {
            crate::transforms::TransformConfig::Dedupe(c) => Dedupe::new(c, None),
            other => panic!("{other:?}"),
        }
    }

    fn kept(d: &mut Dedupe, batch: &EventBatch) -> Vec<String> {
        messages(&view(batch, &d.decide(batch)))
    }

    /// The default fields (message, hostname, timestamp): a line repeated with the same header
    /// is a duplicate; the same message from another host or at another time is not.
    #[test]
    fn by_default_message_host_and_time_make_a_duplicate() {
        let mut d = dedupe("type: dedupe");
        let batch = syslog_batch(&[
            "<13>Oct 11 22:14:15 h1 app: one",
            "<13>Oct 11 22:14:15 h1 app: one",
            "<13>Oct 11 22:14:15 h2 app: one",
            "<13>Oct 11 22:14:16 h1 app: one",
            "<13>Oct 11 22:14:15 h1 other[9]: one",
        ]);
        assert_eq!(kept(&mut d, &batch), ["one", "one", "one"]);
        // A later batch is compared with what came before.
        let again = syslog_batch(&[
            "<13>Oct 11 22:14:16 h1 app: one",
            "<13>Oct 11 22:14:17 h1 app: one",
        ]);
        assert_eq!(kept(&mut d, &again).len(), 1);
    }

    /// Types matter, absence is not null, field order does not matter; `ignore` compares the
    /// rest, nested paths included.
    #[test]
    fn values_compare_with_their_types() {
        let mut d = dedupe("type: dedupe\nfields:\n  match: [id, nested.k]");
        let batch = json_batch(&[
            json!({"message": "1", "id": "123", "nested": {"k": 1, "z": 0}}),
            json!({"message": "2", "id": 123, "nested": {"k": 1}}),
            json!({"message": "3", "nested": {"z": 5, "k": 1}, "id": "123"}),
            json!({"message": "4", "id": null, "nested": {"k": 1}}),
            json!({"message": "5", "nested": {"k": 1}}),
            json!({"message": "6", "nested": {"k": 1}, "other": true}),
        ]);
        assert_eq!(kept(&mut d, &batch), ["1", "2", "4", "5"]);
        let mut d = dedupe("type: dedupe\nfields:\n  ignore: [message, timestamp, nested.z]");
        let batch = json_batch(&[
            json!({"message": "1", "id": 1, "nested": {"k": 1, "z": 0}}),
            json!({"message": "2", "id": 1, "nested": {"k": 1, "z": 9}}),
            json!({"message": "3", "id": 1, "nested": {"k": 2}}),
            json!({"message": "4", "id": 1, "nested": {"k": 1}}),
            json!({"message": "5", "id": 1, "nested": {"k": 1}, "extra": 0}),
        ]);
        assert_eq!(kept(&mut d, &batch), ["1", "3", "5"]);
    }

    /// The cache forgets the least recently used beyond `num_events`, and a duplicate counts
    /// as a use. Exact counts for a seeded stream against a model of the same cache.
    #[test]
    fn the_cache_is_least_recently_used_and_bounded() {
        let mut d = dedupe("type: dedupe\nfields:\n  match: [message]\ncache:\n  num_events: 2");
        let batch = json_batch(&[
            json!({"message": "a"}),
            json!({"message": "b"}),
            json!({"message": "a"}),
            json!({"message": "c"}),
            json!({"message": "a"}),
            json!({"message": "b"}),
        ]);
        // `a` used again before `c` comes, so `b` is the one forgotten.
        assert_eq!(kept(&mut d, &batch), ["a", "b", "c", "b"]);
        assert_eq!(d.cached(), 2);

        let mut d = dedupe("type: dedupe\nfields:\n  match: [message]\ncache:\n  num_events: 50");
        let mut model: Vec<u64> = Vec::new();
        let (mut seed, mut want, mut got) = (42u64, 0, 0);
        for _ in 0..20 {
            let mut records = Vec::new();
            for _ in 0..100 {
                seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let v = (seed >> 33) % 80;
                match model.iter().position(|m| *m == v) {
                    Some(i) => {
                        model.remove(i);
                    }
                    None => {
                        want += 1;
                        if model.len() == 50 {
                            model.remove(0);
                        }
                    }
                }
                model.push(v);
                records.push(json!({ "message": v.to_string() }));
            }
            got += kept(&mut d, &json_batch(&records)).len();
        }
        assert_eq!(got, want);
        assert_eq!(d.cached(), 50);
    }
}
