//! The `throttle` transform: at most `threshold` events per `window_secs` for each key, as
//! Vector's `throttle` does.
//!
//! Each key has a rate limiter of the generic cell rate algorithm (Vector's, through the
//! `governor` crate): a burst of `threshold` events, then one more each `window_secs /
//! threshold`. What a key remembers is one instant, its "theoretical arrival time" (TAT): an
//! event is let through when the TAT is at most `window - window / threshold` ahead of now, and
//! then moves it on by `window / threshold`. A key whose TAT has passed is as good as new, and
//! is forgotten (every `window_secs`, as Vector's limiter does), so the keys held are those
//! seen within the last window.
//!
//! ```text
//! threshold 2, window 5 s (one cell per 2.5 s):   t=0 ✓ ✓ ✗   t=2 ✗   t=2.5 ✓   t=5 ✓ ✗
//! ```
//!
//! `key_field` is a field name or a `{{ field }}` template; events without the field share one
//! key, as Vector's do. Events whose `exclude` condition holds pass, uncounted. Events over the
//! limit go to `ID.dropped` with `reroute_dropped`, else they are counted
//! (`discarded{reason="throttled"}`) and settled as delivered (the user's intent).
//!
//! State: one 128-bit digest of the key and one instant per key, at most `max_keys` keys
//! (when a new key finds the table full, keys whose TAT has passed go first, then those
//! closest to passing), charged to the memory budget. Time is tokio's clock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use loghaul_config::{ComponentConfig, Validator};
use loghaul_core::{BatchStatus, EventBatch};
use serde::Deserialize;
use tokio::time::Instant;

use super::send_on;
use super::state::{self, Key, RawCondition, StateCharge};
use super::view;
use super::vrl::{Program, Runner};
use super::{BuildTransform, TransformContext};
use crate::metrics::{ComponentMetrics, DiscardReason, ErrorKind, Health};
use crate::pipeline::{BoxFuture, Fanout, Input};

/// The most keys held unless `max_keys` says otherwise.
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// What one key costs in the table, for the memory budget: its digest (and the tag saying it
/// has one), its instant, and the hash table's share.
const KEY_BYTES: usize = 64;

/// `type: throttle`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawThrottle {
    /// Events let through per window, for each key.
    #[serde(default)]
    pub threshold: Option<u64>,
    /// The window, in seconds (fractions allowed).
    #[serde(default)]
    pub window_secs: Option<f64>,
    /// What makes a key: a field name or a `{{ field }}` template.
    #[serde(default)]
    pub key_field: Option<String>,
    /// Events for which this condition holds are never throttled.
    #[serde(default)]
    pub exclude: Option<RawCondition>,
    /// Send events over the limit to the `dropped` output instead of discarding them.
    #[serde(default)]
    pub reroute_dropped: Option<bool>,
    /// The most keys remembered at once.
    #[serde(default)]
    pub max_keys: Option<usize>,
}

/// A throttle transform.
#[derive(Clone, Debug, PartialEq)]
pub struct ThrottleConfig {
    pub threshold: u64,
    pub window: Duration,
    pub key: Option<Key>,
    pub exclude: Option<Program>,
    pub reroute_dropped: bool,
    pub max_keys: usize,
}

impl ComponentConfig for ThrottleConfig {
    const TYPE: &'static str = "throttle";
    type Raw = RawThrottle;

    fn validate(t: RawThrottle, cx: &mut Validator<'_, '_>) -> Option<ThrottleConfig> {
        let threshold = match t.threshold {
            None => {
                cx.error_at_key(
                    &[],
                    "`type: throttle` needs `threshold` and `window_secs`",
                    Some("e.g. `threshold: 100` and `window_secs: 1`".to_owned()),
                );
                None
            }
            Some(0) => {
                cx.error(&["threshold"], "`threshold` must be at least 1", None);
                None
            }
            Some(n) => Some(n),
        };
        let window = match t.window_secs {
            None if t.threshold.is_some() => {
                cx.error_at_key(
                    &[],
                    "`type: throttle` needs `window_secs`",
                    Some("e.g. `window_secs: 1` (seconds; fractions allowed)".to_owned()),
                );
                None
            }
            None => None,
            Some(w) if w.is_finite() && w > 0.0 && w < 1e9 => Some(Duration::from_secs_f64(w)),
            Some(w) => {
                cx.error(
                    &["window_secs"],
                    format!("`window_secs` must be a positive number of seconds, not {w}"),
                    None,
                );
                None
            }
        };
        let key = match t.key_field.as_deref() {
            None => Some(None),
            Some("") => {
                cx.error(&["key_field"], "`key_field` is empty", None);
                None
            }
            Some(text) => match Key::parse(text) {
                Ok(k) => Some(Some(k)),
                Err(e) => {
                    cx.error(&["key_field"], e.message, Some(e.hint));
                    None
                }
            },
        };
        let exclude = match &t.exclude {
            None => Some(None),
            Some(c) => state::condition(c, cx, "exclude").map(Some),
        };
        let max_keys = cx.positive(t.max_keys, "max_keys", DEFAULT_MAX_KEYS);
        Some(ThrottleConfig {
            threshold: threshold?,
            window: window?,
            key: key?,
            exclude: exclude?,
            reroute_dropped: t.reroute_dropped.unwrap_or(false),
            max_keys: max_keys?,
        })
    }

    fn outputs(&self) -> Vec<String> {
        if self.reroute_dropped {
            vec!["dropped".to_owned()]
        } else {
            Vec::new()
        }
    }
}

impl BuildTransform for ThrottleConfig {
    fn build(&self, cx: TransformContext) -> anyhow::Result<BoxFuture<'static, ()>> {
        let mut outputs = cx.outputs;
        let dropped = outputs.remove("dropped");
        let throttle = Throttle::new(self.clone(), Instant::now(), cx.fanout.budget());
        Ok(Box::pin(run(
            throttle, cx.metrics, cx.input, cx.fanout, dropped,
        )))
    }
}

/// The limiters of every key.
pub struct Throttle {
    config: ThrottleConfig,
    /// Nanoseconds between cells: `window / threshold`.
    interval: u64,
    /// How far ahead of now a key's TAT may be and still let an event through.
    tolerance: u64,
    /// Instants are nanoseconds since this.
    epoch: Instant,
    /// Key digest (`None`: events without the key) → TAT.
    keys: HashMap<Option<u128>, u64>,
    next_sweep: u64,
    charge: StateCharge,
    runner: Runner,
    text: Vec<u8>,
}

impl Throttle {
    pub fn new(
        config: ThrottleConfig,
        epoch: Instant,
        budget: Option<&Arc<loghaul_core::MemoryBudget>>,
    ) -> Throttle {
        let window = config.window.as_nanos().min(u128::from(u64::MAX)) as u64;
        let interval = (window / config.threshold).max(1);
        Throttle {
            tolerance: interval.saturating_mul(config.threshold - 1),
            interval,
            epoch,
            keys: HashMap::new(),
            next_sweep: window,
            charge: StateCharge::new(budget),
            runner: Runner::new(vrl::compiler::TimeZone::Local),
            text: Vec::new(),
            config,
        }
    }

    /// Keys held now.
    pub fn keys(&self) -> usize {
        self.keys.len()
    }

    /// Whether an event of `key` passes at `now` (nanoseconds since the epoch); one that
    /// passes takes its cell.
    fn check(&mut self, key: Option<u128>, now: u64) -> bool {
        let tat = match self.keys.get(&key) {
            Some(tat) => *tat,
            None => {
                self.make_room(now);
                now
            }
        };
        if tat > now.saturating_add(self.tolerance) {
            return false;
        }
        self.keys
            .insert(key, tat.max(now).saturating_add(self.interval));
        true
    }

    /// Keeps the table under `max_keys` before a new key goes in: keys whose TAT has passed
    /// are forgotten first (they let the next event through as a new key would); if that is
    /// not enough, an eighth of the table, those whose TAT is nearest, goes too.
    fn make_room(&mut self, now: u64) {
        if self.keys.len() < self.config.max_keys {
            return;
        }
        self.keys.retain(|_, tat| *tat > now);
        if self.keys.len() < self.config.max_keys {
            return;
        }
        let mut tats: Vec<u64> = self.keys.values().copied().collect();
        let n = (self.config.max_keys / 8).max(1).min(tats.len() - 1);
        let (_, cut, _) = tats.select_nth_unstable(n);
        let cut = *cut;
        let mut removed = 0;
        self.keys.retain(|_, tat| {
            let keep = *tat > cut || removed >= n;
            removed += usize::from(!keep);
            keep
        });
    }

    /// Whether each event of `batch` passes at `now`.
    pub fn decide(
        &mut self,
        batch: &EventBatch,
        now: Instant,
        metrics: &ComponentMetrics,
    ) -> Vec<bool> {
        let now = now
            .saturating_duration_since(self.epoch)
            .as_nanos()
            .min(u128::from(u64::MAX)) as u64;
        if now >= self.next_sweep {
            self.keys.retain(|_, tat| *tat > now);
            self.next_sweep = now.saturating_add(self.tolerance + self.interval);
        }
        let needs_vrl = self.config.exclude.is_some() || self.config.key.is_some();
        let mut pass = Vec::with_capacity(batch.len());
        for event in &batch.events {
            let mut target = needs_vrl.then(|| super::vrl::target(batch, event));
            if let (Some(condition), Some(target)) = (&self.config.exclude, target.as_mut()) {
                match self.runner.test(condition, target) {
                    Ok(true) => {
                        pass.push(true);
                        continue;
                    }
                    Ok(false) => {}
                    Err(error) => {
                        metrics.error(ErrorKind::Program, 1);
                        crate::warn_limited!(metrics, %error, "throttle exclude condition failed on an event");
                    }
                }
            }
            let key = match (&self.config.key, &target) {
                (Some(key), Some(target)) => key
                    .render(&target.value, &mut self.text)
                    .map(|()| xxhash_rust::xxh3::xxh3_128(&self.text)),
                _ => None,
            };
            pass.push(self.check(key, now));
        }
        self.charge.set(self.keys.len() * KEY_BYTES);
        pass
    }
}

async fn run(
    mut throttle: Throttle,
    metrics: Arc<ComponentMetrics>,
    mut input: Input,
    fanout: Fanout,
    dropped: Option<Fanout>,
) {
    metrics.set_health(Health::Running, None);
    while let Some(delivery) = input.recv().await {
        let now = Instant::now();
        let pass = crate::pipeline::cpu_heavy(|| throttle.decide(&delivery.batch, now, &metrics));
        let over: Vec<bool> = pass.iter().map(|p| !p).collect();
        if dropped.is_none() {
            let n = over.iter().filter(|o| **o).count();
            metrics.discarded(DiscardReason::Throttled, n as u64);
        }
        send_on(&fanout, view(&delivery.batch, &pass), &metrics).await;
        if let Some(output) = &dropped {
            send_on(output, view(&delivery.batch, &over), &metrics).await;
        }
        delivery.ack.commit(BatchStatus::Delivered);
    }
    metrics.set_health(Health::Stopped, None);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Configuration errors at their keys, and how many events pass, on tokio's paused clock.

    use std::time::Duration;

    use super::*;
    use crate::config::testing::{error_at, ok, transform};
    use crate::transforms::testing::{json_batch, test_metrics};

    #[test]
    fn threshold_and_window_are_required_and_positive() {
        let t = transform("type: throttle");
        error_at(&t, "  x:", "needs `threshold` and `window_secs`");
        let t = transform("type: throttle\nthreshold: 10");
        error_at(&t, "  x:", "needs `window_secs`");
        let t = transform("type: throttle\nthreshold: 0\nwindow_secs: 1");
        error_at(&t, "threshold:", "at least 1");
        let t = transform("type: throttle\nthreshold: 1\nwindow_secs: -2");
        error_at(&t, "window_secs:", "positive number of seconds");
        let t = transform("type: throttle\nthreshold: 1\nwindow_secs: 1\nkey_field: '{{ host'");
        error_at(&t, "key_field:", "unterminated `{{`");
        let t = transform("type: throttle\nthreshold: 1\nwindow_secs: 1\nmax_keys: 0");
        error_at(&t, "max_keys:", "");
        let t = transform("type: throttle\nthreshold: 1\nwindow_secs: 1\nexclude: 'nope'");
        error_at(&t, "exclude:", "VRL error");
        let t = transform("type: throttle\nthreshold: 1\nwindow_secs: 1\nwindow: 3");
        error_at(&t, "window:", "unknown key `window`");
        ok(&transform(
            "type: throttle\nthreshold: 5\nwindow_secs: 0.5\nkey_field: '{{ hostname }}-{{ appname }}'",
        ));
    }

    #[test]
    fn dropped_is_an_output_only_when_rerouted() {
        let with = |reroute: bool| {
            format!(
                "sources:\n  in: {{ type: syslog, mode: udp, address: \"127.0.0.1:5514\" }}\n\
                 transforms:\n  x: {{ type: throttle, inputs: [in], threshold: 1, window_secs: 1, reroute_dropped: {reroute} }}\n\
                 sinks:\n  out: {{ type: blackhole, inputs: [x, x.dropped] }}\n"
            )
        };
        ok(&with(true));
        error_at(&with(false), "x.dropped", "`x` has no output `dropped`");
    }

    fn throttle(body: &str) -> Throttle {
        let config = ok(&transform(body));
        let t = config.transforms.into_iter().next().expect("one transform");
        match t.config {
            crate::transforms::TransformConfig::Throttle(c) => {
                Throttle::new(c, Instant::now(), None)
            }
            other => panic!("{other:?}"),
        }
    }

    fn events(hosts: &[&str]) -> EventBatch {
        let records: Vec<serde_json::Value> = hosts
            .iter()
            .map(|h| serde_json::json!({ "host": h, "message": format!("from {h}") }))
            .collect();
        json_batch(&records)
    }

    fn passed(pass: &[bool]) -> usize {
        pass.iter().filter(|p| **p).count()
    }

    /// Vector's own example, on the paused clock: threshold 2 in 5 s lets a burst of 2 through,
    /// nothing at 2 s, one at 2.5 s (a cell back), and at 10 s a full burst again.
    #[tokio::test(start_paused = true)]
    async fn a_burst_then_one_cell_per_interval() {
        let metrics = test_metrics();
        let mut t = throttle("type: throttle\nthreshold: 2\nwindow_secs: 5");
        let at = |s: f64| Instant::now() + Duration::from_secs_f64(s);
        let start = at(0.0);
        assert_eq!(
            t.decide(&events(&["a", "a", "a"]), start, &metrics),
            [true, true, false]
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(t.decide(&events(&["a"]), Instant::now(), &metrics), [false]);
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(
            t.decide(&events(&["a", "a"]), Instant::now(), &metrics),
            [true, false]
        );
        tokio::time::advance(Duration::from_millis(7500)).await;
        assert_eq!(
            passed(&t.decide(&events(&["a"; 5]), Instant::now(), &metrics)),
            2
        );
    }

    /// Keys are limited apart (a field or a template); events without the field share a key;
    /// excluded events pass, uncounted. Exact counts for a seeded input.
    #[tokio::test(start_paused = true)]
    async fn keys_are_limited_apart_and_exclusions_pass() {
        let metrics = test_metrics();
        let mut by_field =
            throttle("type: throttle\nthreshold: 3\nwindow_secs: 60\nkey_field: host");
        let mut by_template = throttle(
            "type: throttle\nthreshold: 3\nwindow_secs: 60\nkey_field: '{{ host }}!'\nexclude: '.host == \"vip\"'",
        );
        // A seeded stream over 5 hosts (and some events with no host).
        let mut seed = 7u64;
        let mut records = Vec::new();
        let mut counts = std::collections::BTreeMap::new();
        for _ in 0..200 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let h = (seed >> 33) % 6;
            let host = ["a", "b", "c", "d", "vip"].get(h as usize).copied();
            *counts.entry(host).or_insert(0) += 1;
            records.push(match host {
                Some(h) => serde_json::json!({ "host": h }),
                None => serde_json::json!({ "message": "no host" }),
            });
        }
        let batch = json_batch(&records);
        let now = Instant::now();
        // Every key (5 hosts and "no host") lets 3 through.
        assert_eq!(passed(&by_field.decide(&batch, now, &metrics)), 6 * 3);
        assert_eq!(by_field.keys(), 6);
        // "vip" is excluded: all of its events pass.
        let vip = counts[&Some("vip")];
        assert_eq!(
            passed(&by_template.decide(&batch, now, &metrics)),
            5 * 3 + vip
        );
    }

    /// The table never holds more than `max_keys`; keys whose time has passed go first.
    #[tokio::test(start_paused = true)]
    async fn the_key_table_is_bounded() {
        let metrics = test_metrics();
        let mut t = throttle(
            "type: throttle\nthreshold: 1\nwindow_secs: 10\nkey_field: host\nmax_keys: 16",
        );
        let hosts: Vec<String> = (0..100).map(|i| format!("h{i}")).collect();
        let names: Vec<&str> = hosts.iter().map(String::as_str).collect();
        assert_eq!(
            passed(&t.decide(&events(&names), Instant::now(), &metrics)),
            100
        );
        assert!(t.keys() <= 16, "{}", t.keys());
        // After the window every key is as good as new: forgotten at the next batch.
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(
            t.decide(&events(&["h99", "h99"]), Instant::now(), &metrics),
            [true, false]
        );
        assert_eq!(t.keys(), 1);
    }
}
