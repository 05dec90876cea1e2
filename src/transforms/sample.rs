//! The `sample` transform: keeps one event in `rate` (or a `ratio` of them), as Vector's
//! `sample` does.
//!
//! Without `key_field` the choice is a counter, so it is exact and deterministic: with
//! `rate: 10` the 1st, 11th, 21st... event is kept, whatever the batches' sizes. With
//! `key_field`, the field's text is hashed with SeaHash (Vector's hash) and an event is kept
//! when the hash is a multiple of `rate` (below `ratio` of the hash range): events with the same
//! value are all kept or all dropped, the same ones Vector keeps. Events whose `exclude`
//! condition holds are always kept, untouched; kept events get `sample_rate_key` (the rate as
//! text, as Vector writes it).
//!
//! The output is a view of the input batch, carrying its finalizer; dropped events count as
//! `discarded{reason="sampled"}` and are settled as delivered (the user's intent). The state is
//! a counter: nothing to bound or charge.

use std::sync::Arc;

use loghaul_config::{ComponentConfig, Validator};
use loghaul_core::{BatchStatus, EventBatch};
use serde::Deserialize;

use super::state::{self, RawCondition};
use super::vrl::{Program, Runner};
use super::{BuildTransform, TransformContext};
use crate::metrics::{ComponentMetrics, DiscardReason, ErrorKind, Health};
use crate::pipeline::{BoxFuture, Fanout, Input};

/// The field kept events get, unless `sample_rate_key` says otherwise (Vector's).
pub const DEFAULT_SAMPLE_RATE_KEY: &str = "sample_rate";

/// `type: sample`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSample {
    /// Keep one event in this many.
    #[serde(default)]
    pub rate: Option<u64>,
    /// Keep this fraction of the events, in (0, 1].
    #[serde(default)]
    pub ratio: Option<f64>,
    /// Events with the same value of this field are all kept or all dropped.
    #[serde(default)]
    pub key_field: Option<String>,
    /// Events for which this condition holds are always kept.
    #[serde(default)]
    pub exclude: Option<RawCondition>,
    /// The field kept events get, holding the rate (`""`: none).
    #[serde(default)]
    pub sample_rate_key: Option<String>,
}

/// How many events are kept.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// One in this many.
    Rate(u64),
    /// This fraction.
    Ratio(f64),
}

impl Mode {
    /// The value kept events get: `10`, `0.25` (Vector's text).
    fn label(self) -> String {
        match self {
            Mode::Rate(r) => r.to_string(),
            Mode::Ratio(r) => r.to_string(),
        }
    }

    /// Whether an event whose key hashes to `hash` is kept (Vector's test, so the same keys
    /// are kept).
    fn keeps_hash(self, hash: u64) -> bool {
        match self {
            Mode::Rate(r) => hash.is_multiple_of(r),
            Mode::Ratio(r) => hash <= (r * (u64::MAX as u128) as f64) as u64,
        }
    }
}

/// A sample transform.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleConfig {
    pub mode: Mode,
    pub key_field: Option<String>,
    pub exclude: Option<Program>,
    /// `None`: kept events are not marked.
    pub sample_rate_key: Option<String>,
}

impl ComponentConfig for SampleConfig {
    const TYPE: &'static str = "sample";
    type Raw = RawSample;

    fn validate(s: RawSample, cx: &mut Validator<'_, '_>) -> Option<SampleConfig> {
        let mode = match (s.rate, s.ratio) {
            (Some(_), Some(_)) => {
                cx.error_at_key(
                    &["ratio"],
                    "`rate` and `ratio` exclude each other",
                    Some("keep one: `rate: 10` keeps 1 in 10, `ratio: 0.1` the same".to_owned()),
                );
                None
            }
            (Some(0), None) => {
                cx.error(&["rate"], "`rate` must be at least 1", None);
                None
            }
            (Some(r), None) => Some(Mode::Rate(r)),
            (None, Some(r)) if r > 0.0 && r <= 1.0 => Some(Mode::Ratio(r)),
            (None, Some(r)) => {
                cx.error(
                    &["ratio"],
                    format!("`ratio` must be above 0 and at most 1, not {r}"),
                    None,
                );
                None
            }
            (None, None) => {
                cx.error_at_key(
                    &[],
                    "`type: sample` needs `rate` or `ratio`",
                    Some("e.g. `rate: 10` keeps one event in 10".to_owned()),
                );
                None
            }
        };
        let key_ok = if s.key_field.as_deref() == Some("") {
            cx.error(&["key_field"], "`key_field` is empty", None);
            false
        } else {
            true
        };
        let exclude = match &s.exclude {
            None => Some(None),
            Some(c) => state::condition(c, cx, "exclude").map(Some),
        };
        let sample_rate_key = match s.sample_rate_key {
            None => Some(DEFAULT_SAMPLE_RATE_KEY.to_owned()),
            Some(k) if k.is_empty() => None,
            Some(k) => Some(k),
        };
        key_ok.then_some(())?;
        Some(SampleConfig {
            mode: mode?,
            key_field: s.key_field,
            exclude: exclude?,
            sample_rate_key,
        })
    }
}

impl BuildTransform for SampleConfig {
    fn build(&self, cx: TransformContext) -> anyhow::Result<BoxFuture<'static, ()>> {
        Ok(Box::pin(run(
            Sampler::new(self.clone()),
            cx.metrics,
            cx.input,
            cx.fanout,
        )))
    }
}

/// The sampling state: where the counter (or the ratio's accumulator) stands.
pub struct Sampler {
    config: SampleConfig,
    label: String,
    counter: u64,
    /// The ratio's accumulator: an event is kept each time it reaches 1 (Vector's).
    accumulated: f64,
    runner: Runner,
    key: Vec<u8>,
}

/// What becomes of one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Sampled in: kept, with the rate added.
    Sampled,
    /// Excluded from sampling: kept as it is.
    Excluded,
    Dropped,
}

impl Sampler {
    pub fn new(config: SampleConfig) -> Sampler {
        let accumulated = match config.mode {
            Mode::Ratio(r) => 1.0 - r,
            Mode::Rate(_) => 0.0,
        };
        Sampler {
            label: config.mode.label(),
            config,
            counter: 0,
            accumulated,
            runner: Runner::new(vrl::compiler::TimeZone::Local),
            key: Vec::new(),
        }
    }

    /// The next decision of the counter (it moves for every event not excluded, keyed or not,
    /// as Vector's does).
    fn count(&mut self) -> bool {
        match self.config.mode {
            Mode::Rate(r) => {
                let n = self.counter;
                self.counter += 1;
                n.is_multiple_of(r)
            }
            Mode::Ratio(r) => {
                let next = self.accumulated + r;
                let keep = next >= 1.0;
                self.accumulated = if keep { next - 1.0 } else { next };
                keep
            }
        }
    }

    /// The fate of every event of `batch`, in order.
    pub fn decide(&mut self, batch: &EventBatch, metrics: &ComponentMetrics) -> Vec<Fate> {
        let needs_vrl = self.config.exclude.is_some() || self.config.key_field.is_some();
        let mut fates = Vec::with_capacity(batch.len());
        for event in &batch.events {
            let mut target = needs_vrl.then(|| super::vrl::target(batch, event));
            if let (Some(condition), Some(target)) = (&self.config.exclude, target.as_mut()) {
                match self.runner.test(condition, target) {
                    Ok(true) => {
                        fates.push(Fate::Excluded);
                        continue;
                    }
                    Ok(false) => {}
                    Err(error) => {
                        metrics.error(ErrorKind::Program, 1);
                        crate::warn_limited!(metrics, %error, "sample exclude condition failed on an event");
                    }
                }
            }
            let keyed = match (&self.config.key_field, &target) {
                (Some(field), Some(target)) => state::get(&target.value, field).map(|v| {
                    self.key.clear();
                    self.key.extend_from_slice(&state::text(v));
                    self.config.mode.keeps_hash(seahash::hash(&self.key))
                }),
                _ => None,
            };
            let counted = self.count();
            fates.push(if keyed.unwrap_or(counted) {
                Fate::Sampled
            } else {
                Fate::Dropped
            });
        }
        fates
    }

    /// The batch of the kept events of `batch` (a view), the sampled ones marked.
    pub fn apply(&self, batch: &EventBatch, fates: &[Fate]) -> EventBatch {
        let mut i = 0;
        let mut kept = batch.retain_view(|_, _| {
            let keep = fates.get(i).is_some_and(|f| *f != Fate::Dropped);
            i += 1;
            keep
        });
        let marked: Vec<bool> = fates
            .iter()
            .filter(|f| **f != Fate::Dropped)
            .map(|f| *f == Fate::Sampled)
            .collect();
        if let Some(key) = &self.config.sample_rate_key
            && marked.iter().any(|m| *m)
        {
            kept.set_field_where(key, &self.label, true, |i| marked[i]);
            // A new arena: charged afresh when sent, not as the view of the input it was.
            kept.charge = None;
        }
        kept
    }
}

async fn run(
    mut sampler: Sampler,
    metrics: Arc<ComponentMetrics>,
    mut input: Input,
    fanout: Fanout,
) {
    metrics.set_health(Health::Running, None);
    while let Some(delivery) = input.recv().await {
        let (kept, dropped) = crate::pipeline::cpu_heavy(|| {
            let fates = sampler.decide(&delivery.batch, &metrics);
            let dropped = fates.iter().filter(|f| **f == Fate::Dropped).count();
            (sampler.apply(&delivery.batch, &fates), dropped)
        });
        metrics.discarded(DiscardReason::Sampled, dropped as u64);
        fanout.send(kept).await;
        delivery.ack.commit(BatchStatus::Delivered);
    }
    metrics.set_health(Health::Stopped, None);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Configuration errors at their keys, and which events are kept: exact counts for
    //! seeded inputs.

    use super::*;
    use crate::config::testing::{error_at, ok, transform};
    use crate::transforms::testing::{batch_of, field, messages, test_metrics};

    #[test]
    fn rate_or_ratio_and_a_valid_condition() {
        error_at(
            &transform("type: sample"),
            "  x:",
            "needs `rate` or `ratio`",
        );
        let t = transform("type: sample\nrate: 10\nratio: 0.5");
        error_at(&t, "ratio:", "exclude each other");
        error_at(&transform("type: sample\nrate: 0"), "rate:", "at least 1");
        error_at(&transform("type: sample\nrate: -3"), "rate:", "");
        error_at(
            &transform("type: sample\nratio: 1.5"),
            "ratio:",
            "at most 1",
        );
        error_at(&transform("type: sample\nratio: 0"), "ratio:", "above 0");
        let t = transform("type: sample\nrate: 2\nexclude: '.message'");
        error_at(&t, "exclude:", "a condition must return a boolean");
        let t = transform("type: sample\nrate: 2\nexclude: { type: vrl, source: 'nope()' }");
        error_at(&t, "exclude:", "VRL error[E105]");
        let t = transform("type: sample\nrate: 2\nexclude:\n  type: datadog_search\n  source: '*'");
        error_at(&t, "type: datadog_search", "unsupported condition type");
        error_at(
            &transform("type: sample\nrate: 2\nkey_field: ''"),
            "key_field",
            "empty",
        );
        error_at(
            &transform("type: sample\nrate: 2\nrates: 3"),
            "rates",
            "unknown key",
        );
        ok(&transform(
            "type: sample\nrate: 2\nkey_field: trace_id\nexclude: '.severity == \"err\"'\nsample_rate_key: ''",
        ));
    }

    fn sampler(body: &str) -> Sampler {
        let config = ok(&transform(body));
        let t = config.transforms.into_iter().next().expect("one transform");
        match t.config {
            crate::transforms::TransformConfig::Sample(s) => Sampler::new(s),
            other => panic!("{other:?}"),
        }
    }

    /// 1 in 10 by a counter that runs across batches: of 95 events in batches of 7, the 1st,
    /// 11th, ... 91st are kept (10 of them), each marked `sample_rate: "10"`.
    #[test]
    fn a_rate_keeps_every_nth_event_across_batches() {
        let metrics = test_metrics();
        let mut s = sampler("type: sample\nrate: 10");
        let mut kept = Vec::new();
        for chunk in (0..95).collect::<Vec<_>>().chunks(7) {
            let lines: Vec<String> = chunk.iter().map(|i| format!("m{i}")).collect();
            let batch = batch_of(&lines);
            let fates = s.decide(&batch, &metrics);
            let out = s.apply(&batch, &fates);
            for e in &out.events {
                assert_eq!(field(&out, e, "sample_rate").as_deref(), Some("10"));
            }
            kept.extend(messages(&out));
        }
        let want: Vec<String> = (0..95).step_by(10).map(|i| format!("m{i}")).collect();
        assert_eq!(kept, want);
    }

    /// A ratio keeps exactly that share, spread out (Vector's accumulator).
    #[test]
    fn a_ratio_keeps_its_share() {
        let metrics = test_metrics();
        let mut s = sampler("type: sample\nratio: 0.25\nsample_rate_key: rate");
        let lines: Vec<String> = (0..100).map(|i| format!("m{i}")).collect();
        let batch = batch_of(&lines);
        let fates = s.decide(&batch, &metrics);
        let out = s.apply(&batch, &fates);
        assert_eq!(out.len(), 25);
        assert_eq!(messages(&out)[..3], ["m0", "m4", "m8"]);
        assert_eq!(field(&out, &out.events[0], "rate").as_deref(), Some("0.25"));
    }

    /// Events with the same key share their fate; excluded events always pass, unmarked.
    #[test]
    fn a_key_decides_for_all_its_events_and_exclusions_always_pass() {
        let metrics = test_metrics();
        let mut s = sampler(
            "type: sample\nrate: 4\nkey_field: message\nexclude: 'starts_with(string!(.message), \"keep\")'",
        );
        // 40 keys, each sent 3 times in a different order each round.
        let mut lines = Vec::new();
        for round in 0..3 {
            for k in 0..40 {
                lines.push(format!("key{}", (k * 7 + round * 13) % 40));
            }
            lines.push(format!("keep{round}"));
        }
        let batch = batch_of(&lines);
        let fates = s.decide(&batch, &metrics);
        let out = s.apply(&batch, &fates);
        let got = messages(&out);
        let kept_keys: std::collections::BTreeSet<&String> =
            got.iter().filter(|m| m.starts_with("key")).collect();
        for k in &kept_keys {
            assert_eq!(got.iter().filter(|m| m == k).count(), 3, "{k}: all or none");
        }
        for k in 0..40 {
            let key = format!("key{k}");
            let want = seahash::hash(key.as_bytes()).is_multiple_of(4);
            assert_eq!(kept_keys.contains(&key), want, "{key}: Vector's choice");
        }
        for round in 0..3 {
            let e = out
                .events
                .iter()
                .find(|e| out.str(e.message.or_empty()) == format!("keep{round}").as_bytes())
                .expect("excluded events pass");
            assert_eq!(field(&out, e, "sample_rate"), None, "excluded: unmarked");
        }
        assert_eq!(
            fates.iter().filter(|f| **f == Fate::Excluded).count(),
            3,
            "{fates:?}"
        );
    }
}
