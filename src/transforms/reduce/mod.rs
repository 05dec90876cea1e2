//! The `reduce` transform: merges the events of a group into one, as Vector's `reduce` does.
//!
//! Events are grouped by the values of their `group_by` fields (all events are one group
//! without it). A group ends, and its merged event goes out, when an event matches
//! `ends_when` (that event is merged in last), when an event matches `starts_when` (the open
//! group goes out, and the event starts the next one), when it reached `max_events`, when no
//! event came for `expire_after_ms` (checked every `flush_period_ms`), when it has been open
//! `end_every_period_ms`, and when the input ends (a stop flushes every open group). How each
//! field's values merge is [`merge`]: `merge_strategies` per field, else Vector's default for
//! the value's type.
//!
//! ```text
//!  starts_when: 'match(string!(.message), r'^[^\s]')'      merge_strategies: { message: concat_newline }
//!  Exception in thread "main" java.lang.IllegalStateException  ─┐ starts a group
//!  \tat com.example.App.run(App.java:12)                        ├─ merged in
//!  \tat com.example.App.main(App.java:5)                        ─┘
//!  next line                                                     ─ starts the next: the trace goes out, one event
//! ```
//!
//! A merged event is built from its group's first event (kept as a copy of its own, see
//! [`loghaul_core::BatchCopy`]) and the merged VRL value, by the same builder as `remap`'s, so
//! what merging left as the first event had it keeps its representation (key order, a
//! timestamp's digits, msgpack types).
//!
//! Acknowledgements: a source's batch is settled only once every event made of it is
//! committed downstream. A group holds, for each batch that gave it an event, a clone of the
//! batch's finalizer and a fork of its delivery's ack; the merged event's batch carries a
//! [`Finalizer::merge`] of those finalizers, and the forks are committed once it is handed on.
//! A reduce that ends with groups still open (it never does but by a crash) drops the forks
//! uncommitted: their sources learn that the events were not delivered.
//!
//! Memory: open groups are at most `max_groups` (a new group then flushes the one that has
//! waited longest for an event, as Vector's `max_groups` does); a group holds a copy of its
//! first event and its merged values (copied out of the input batches, so it pins none of
//! them); their bytes are charged to the memory budget. While the budget is spent and the
//! groups hold more than a quarter of it, the groups that have waited longest are flushed
//! early.

pub mod merge;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use loghaul_config::{ComponentConfig, Validator};
use loghaul_core::finalizer::Ack;
use loghaul_core::{BatchCopy, BatchStatus, Event, EventBatch, Finalizer, Timestamp};
use serde::Deserialize;
use tokio::time::Instant;
use vrl::value::{ObjectMap, Value as Vrl};
use xxhash_rust::xxh3::Xxh3;

use self::merge::{Merger, Strategy, owned};
use super::send_on;
use super::state::{self, Lru, RawCondition, StateCharge};
use super::vrl::convert::{Builder, to_vrl};
use super::vrl::{Program, Runner};
use super::{BuildTransform, TransformContext};
use crate::metrics::{ComponentMetrics, ErrorKind, Health};
use crate::pipeline::{BoxFuture, Fanout, Input};

/// Vector's defaults.
pub const DEFAULT_EXPIRE_AFTER_MS: u64 = 30_000;
pub const DEFAULT_FLUSH_PERIOD_MS: u64 = 1_000;
/// loghaul's bound on open groups (Vector's `max_groups` has none by default).
pub const DEFAULT_MAX_GROUPS: usize = 10_000;

/// `type: reduce`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReduce {
    /// Fields whose values make a group (none: all events are one group).
    #[serde(default)]
    pub group_by: Option<Vec<String>>,
    /// Field → merge strategy (`concat_newline`, `sum`, ...).
    #[serde(default)]
    pub merge_strategies: Option<IndexMap<String, String>>,
    /// A condition that makes an event the last of its group.
    #[serde(default)]
    pub ends_when: Option<RawCondition>,
    /// A condition that makes an event the first of a new group.
    #[serde(default)]
    pub starts_when: Option<RawCondition>,
    /// A group with no new event for this long (ms) goes out.
    #[serde(default)]
    pub expire_after_ms: Option<u64>,
    /// How often expired groups are looked for (ms).
    #[serde(default)]
    pub flush_period_ms: Option<u64>,
    /// A group open this long (ms) goes out, however busy.
    #[serde(default)]
    pub end_every_period_ms: Option<u64>,
    /// The most events merged into one.
    #[serde(default)]
    pub max_events: Option<usize>,
    /// The most groups open at once.
    #[serde(default)]
    pub max_groups: Option<usize>,
}

/// One `merge_strategies` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldStrategy {
    pub path: Vec<String>,
    pub strategy: Strategy,
}

/// A reduce transform.
#[derive(Clone, Debug, PartialEq)]
pub struct ReduceConfig {
    pub group_by: Vec<String>,
    pub strategies: Vec<FieldStrategy>,
    pub ends_when: Option<Program>,
    pub starts_when: Option<Program>,
    pub expire_after: Duration,
    pub flush_period: Duration,
    pub end_every_period: Option<Duration>,
    pub max_events: Option<usize>,
    pub max_groups: usize,
}

impl ComponentConfig for ReduceConfig {
    const TYPE: &'static str = "reduce";
    type Raw = RawReduce;

    fn validate(r: RawReduce, cx: &mut Validator<'_, '_>) -> Option<ReduceConfig> {
        let mut ok = true;
        if r.ends_when.is_some() && r.starts_when.is_some() {
            cx.error_at_key(
                &["starts_when"],
                "only one of `ends_when` and `starts_when` can be given",
                Some(
                    "a group either ends at a known last event or begins at a known first one"
                        .to_owned(),
                ),
            );
            ok = false;
        }
        let mut strategies = Vec::new();
        for (path, name) in r.merge_strategies.iter().flatten() {
            let segments: Vec<String> = path.split('.').map(str::to_owned).collect();
            if segments.iter().any(String::is_empty) {
                cx.error_at_key(
                    &["merge_strategies", path],
                    format!("`{path}` is no field name"),
                    Some("a field (`message`) or a dotted path (`http.status`)".to_owned()),
                );
                ok = false;
            } else if segments.iter().any(|s| s.parse::<usize>().is_ok()) {
                cx.error_at_key(
                    &["merge_strategies", path],
                    format!("merge strategies with indexes are not supported: `{path}`"),
                    Some("name the array itself (`items`), with `array` or `concat`".to_owned()),
                );
                ok = false;
            }
            match Strategy::parse(name) {
                Some(strategy) => strategies.push(FieldStrategy {
                    path: segments,
                    strategy,
                }),
                None => {
                    let names: Vec<&str> = Strategy::NAMES.iter().map(|(n, _)| *n).collect();
                    cx.error(
                        &["merge_strategies", path],
                        format!("unknown merge strategy `{name}`"),
                        Some(format!("one of {}", names.join(", "))),
                    );
                    ok = false;
                }
            }
        }
        let group_by = r.group_by.unwrap_or_default();
        for (i, field) in group_by.iter().enumerate() {
            if field.is_empty() || field.split('.').any(str::is_empty) {
                cx.error(
                    &["group_by", &i.to_string()],
                    format!("`{field}` is no field name"),
                    None,
                );
                ok = false;
            }
        }
        let ends_when = match &r.ends_when {
            None => Some(None),
            Some(c) => state::condition(c, cx, "ends_when").map(Some),
        };
        let starts_when = match &r.starts_when {
            None => Some(None),
            Some(c) => state::condition(c, cx, "starts_when").map(Some),
        };
        let millis =
            |cx: &mut Validator<'_, '_>, value: Option<u64>, key: &str, default| match value {
                None => Some(Duration::from_millis(default)),
                Some(0) => {
                    cx.error(&[key], format!("`{key}` must be at least 1"), None);
                    None
                }
                Some(ms) => Some(Duration::from_millis(ms)),
            };
        let expire_after = millis(
            cx,
            r.expire_after_ms,
            "expire_after_ms",
            DEFAULT_EXPIRE_AFTER_MS,
        );
        let flush_period = millis(
            cx,
            r.flush_period_ms,
            "flush_period_ms",
            DEFAULT_FLUSH_PERIOD_MS,
        );
        let end_every_period = match r.end_every_period_ms {
            None => Some(None),
            Some(ms) => millis(cx, Some(ms), "end_every_period_ms", ms).map(Some),
        };
        let max_events = cx.optional_positive(r.max_events, "max_events");
        let max_groups = cx.positive(r.max_groups, "max_groups", DEFAULT_MAX_GROUPS);
        ok.then_some(())?;
        Some(ReduceConfig {
            group_by,
            strategies,
            ends_when: ends_when?,
            starts_when: starts_when?,
            expire_after: expire_after?,
            flush_period: flush_period?,
            end_every_period: end_every_period?,
            max_events: max_events?,
            max_groups: max_groups?,
        })
    }
}

impl BuildTransform for ReduceConfig {
    fn build(&self, cx: TransformContext) -> anyhow::Result<BoxFuture<'static, ()>> {
        let reduce = Reduce::new(self.clone(), cx.fanout.budget());
        Ok(Box::pin(run(reduce, cx.metrics, cx.input, cx.fanout)))
    }
}

/// One open group.
struct Group {
    /// A copy of its first event: what the merged event is built on.
    first: EventBatch,
    /// Field path → merger, in the order the fields came.
    fields: Vec<(Vec<String>, Merger)>,
    index: HashMap<Vec<String>, usize>,
    events: usize,
    created: Instant,
    stale_since: Instant,
    /// For each tracked batch that gave it an event: the batch's finalizer (for the merged
    /// event's batch) and a fork of its delivery's ack (settled once that batch is sent).
    holds: Vec<(Finalizer, Ack)>,
    bytes: usize,
}

/// What flushing made: batches to send, each with the acks to commit once it is sent.
#[derive(Default)]
pub struct Flushed {
    pub batches: Vec<(EventBatch, Vec<Ack>)>,
}

/// Merged events on their way into batches, one per source (a batch has one source).
#[derive(Default)]
struct Collector {
    pending: Vec<Pending>,
}

struct Pending {
    source: Arc<str>,
    source_type: &'static str,
    received: Timestamp,
    copy: BatchCopy,
    finalizers: Vec<Finalizer>,
    acks: Vec<Ack>,
}

impl Collector {
    fn add(&mut self, one: &EventBatch, holds: Vec<(Finalizer, Ack)>) {
        let at = match self
            .pending
            .iter()
            .position(|p| p.source == one.source && p.source_type == one.source_type)
        {
            Some(i) => i,
            None => {
                self.pending.push(Pending {
                    source: one.source.clone(),
                    source_type: one.source_type,
                    received: one.received,
                    copy: BatchCopy::new(),
                    finalizers: Vec::new(),
                    acks: Vec::new(),
                });
                self.pending.len() - 1
            }
        };
        let p = &mut self.pending[at];
        for event in &one.events {
            p.copy.push(one, event);
        }
        for (finalizer, ack) in holds {
            p.finalizers.push(finalizer);
            p.acks.push(ack);
        }
    }

    fn finish(self) -> Flushed {
        Flushed {
            batches: self
                .pending
                .into_iter()
                .map(|p| {
                    let finalizer = Finalizer::merge(p.finalizers);
                    let batch = p
                        .copy
                        .finish(p.source, p.source_type, p.received, finalizer);
                    (batch, p.acks)
                })
                .collect(),
        }
    }
}

/// The open groups.
pub struct Reduce {
    config: ReduceConfig,
    groups: HashMap<u128, Group>,
    /// Groups by their last event: the first is the one that waited longest.
    idle: Lru<u128>,
    bytes: usize,
    charge: StateCharge,
    runner: Runner,
}

impl Reduce {
    pub fn new(config: ReduceConfig, budget: Option<&Arc<loghaul_core::MemoryBudget>>) -> Reduce {
        Reduce {
            config,
            groups: HashMap::new(),
            idle: Lru::new(),
            bytes: 0,
            charge: StateCharge::new(budget),
            runner: Runner::new(vrl::compiler::TimeZone::Local),
        }
    }

    /// Groups open now.
    pub fn open_groups(&self) -> usize {
        self.groups.len()
    }

    /// What the open groups hold, in bytes (what is charged to the budget).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Merges the events of `batch` (delivered with `ack`) into their groups at `now`; returns
    /// the groups that ended.
    pub fn push_batch(
        &mut self,
        batch: &EventBatch,
        ack: &Ack,
        now: Instant,
        metrics: &ComponentMetrics,
    ) -> Flushed {
        let mut out = Collector::default();
        for event in &batch.events {
            self.push_event(batch, event, ack, now, metrics, &mut out);
        }
        self.shed(&mut out, metrics);
        self.charge.set(self.bytes);
        out.finish()
    }

    /// Flushes the groups that expired by `now` (no event for `expire_after`, or open for
    /// `end_every_period`), those that waited longest first.
    pub fn expire(&mut self, now: Instant) -> Flushed {
        let expired: Vec<u128> = self
            .idle
            .iter_oldest()
            .filter(|k| {
                self.groups.get(k).is_some_and(|g| {
                    now.saturating_duration_since(g.stale_since) >= self.config.expire_after
                        || self
                            .config
                            .end_every_period
                            .is_some_and(|p| now.saturating_duration_since(g.created) >= p)
                })
            })
            .copied()
            .collect();
        let mut out = Collector::default();
        for key in expired {
            self.flush(key, &mut out);
        }
        self.charge.set(self.bytes);
        out.finish()
    }

    /// Flushes every open group (the input ended), those that waited longest first.
    pub fn flush_all(&mut self) -> Flushed {
        let mut out = Collector::default();
        while let Some(key) = self.idle.oldest().copied() {
            self.flush(key, &mut out);
        }
        self.charge.set(self.bytes);
        out.finish()
    }

    fn push_event(
        &mut self,
        batch: &EventBatch,
        event: &Event,
        ack: &Ack,
        now: Instant,
        metrics: &ComponentMetrics,
        out: &mut Collector,
    ) {
        let mut target = super::vrl::target(batch, event);
        let mut test = |runner: &mut Runner, condition: &Option<Program>, what: &str| {
            condition.as_ref().is_some_and(|c| {
                runner.test(c, &mut target).unwrap_or_else(|error| {
                    metrics.error(ErrorKind::Program, 1);
                    crate::warn_limited!(metrics, %error, condition = what, "reduce condition failed on an event");
                    false
                })
            })
        };
        let starts = test(&mut self.runner, &self.config.starts_when, "starts_when");
        let ends = test(&mut self.runner, &self.config.ends_when, "ends_when");
        let key = self.group_key(&target.value);
        if starts {
            self.flush(key, out);
        }
        // After a start, the count is the new group's.
        let count = self.groups.get(&key).map_or(0, |g| g.events);
        let ends_here = ends || self.config.max_events.is_some_and(|max| count + 1 >= max);
        let value = target.value;
        if !self.groups.contains_key(&key) {
            self.open(key, batch, event, now, out, metrics);
            if let Some(g) = self.groups.get_mut(&key) {
                // The first event's values, read from its copy: slices of the copy's arena.
                let first = to_vrl(&g.first, &g.first.events[0]);
                let before = g.bytes;
                g.add(first, &self.config.strategies, metrics);
                self.bytes = self.bytes + g.bytes - before;
            }
        } else if let Some(g) = self.groups.get_mut(&key) {
            let before = g.bytes;
            g.add(owned(value), &self.config.strategies, metrics);
            self.bytes = self.bytes + g.bytes - before;
        }
        if let Some(g) = self.groups.get_mut(&key) {
            g.stale_since = now;
            if batch.finalizer.is_tracked()
                && !g.holds.iter().any(|(f, _)| f.same(&batch.finalizer))
            {
                g.holds.push((batch.finalizer.clone(), ack.fork()));
            }
        }
        self.idle.touch(&key);
        if ends_here {
            self.flush(key, out);
        }
    }

    /// Opens a group for `event`, first flushing the one that waited longest when
    /// `max_groups` are open.
    fn open(
        &mut self,
        key: u128,
        batch: &EventBatch,
        event: &Event,
        now: Instant,
        out: &mut Collector,
        metrics: &ComponentMetrics,
    ) {
        while self.groups.len() >= self.config.max_groups {
            let Some(oldest) = self.idle.oldest().copied() else {
                break;
            };
            crate::warn_limited!(
                metrics,
                max_groups = self.config.max_groups,
                "reduce flushed a group early: max_groups are open"
            );
            self.flush(oldest, out);
        }
        let mut copy = BatchCopy::new();
        copy.push(batch, event);
        let first = copy.finish(
            batch.source.clone(),
            batch.source_type,
            batch.received,
            Finalizer::none(),
        );
        let bytes = loghaul_core::budget::batch_bytes(&first);
        self.bytes += bytes;
        self.groups.insert(
            key,
            Group {
                first,
                fields: Vec::new(),
                index: HashMap::new(),
                events: 0,
                created: now,
                stale_since: now,
                holds: Vec::new(),
                bytes,
            },
        );
    }

    /// Flushes group `key`, if open, into `out`.
    fn flush(&mut self, key: u128, out: &mut Collector) {
        let Some(g) = self.groups.remove(&key) else {
            return;
        };
        self.idle.remove(&key);
        self.bytes -= g.bytes;
        let mut merged = ObjectMap::new();
        for (path, merger) in g.fields {
            insert_at(&mut merged, &path, merger);
        }
        let mut builder = Builder::new(&g.first);
        if let Some(first) = g.first.events.first() {
            builder.push(first, &Vrl::Object(merged));
        }
        out.add(&builder.finish(), g.holds);
    }

    /// Flushes the groups that waited longest while the memory budget is spent and the groups
    /// hold more than a quarter of it.
    fn shed(&mut self, out: &mut Collector, metrics: &ComponentMetrics) {
        while self.charge.should_shed(self.bytes) {
            let Some(oldest) = self.idle.oldest().copied() else {
                break;
            };
            crate::warn_limited!(
                metrics,
                bytes = self.bytes,
                "reduce flushed a group early: the memory budget is spent"
            );
            self.flush(oldest, out);
        }
    }

    /// The digest of an event's `group_by` values (absent differs from null).
    fn group_key(&self, value: &Vrl) -> u128 {
        let mut h = Xxh3::new();
        for field in &self.config.group_by {
            match state::get(value, field) {
                None => h.update(&[0xff]),
                Some(v) => super::dedupe::feed(&mut h, v),
            }
        }
        h.digest128()
    }
}

/// Writes a merged field at its path, making the objects on the way.
fn insert_at(obj: &mut ObjectMap, path: &[String], merger: Merger) {
    match path {
        [] => {}
        [last] => merger.insert_into(obj, last),
        [first, rest @ ..] => {
            let mut child = match obj.remove(first.as_str()) {
                Some(Vrl::Object(o)) => o,
                _ => ObjectMap::new(),
            };
            insert_at(&mut child, rest, merger);
            obj.insert(first.as_str().into(), Vrl::Object(child));
        }
    }
}

impl Group {
    /// Merges an event's value in (Vector's order: the fields `merge_strategies` names, then
    /// every other field, objects walked down to their leaves).
    fn add(&mut self, value: Vrl, strategies: &[FieldStrategy], metrics: &ComponentMetrics) {
        for s in strategies {
            let path = s.path.join(".");
            if let Some(v) = state::get(&value, &path) {
                self.merge(&s.path, v.clone(), Some(s.strategy), metrics);
            }
        }
        let mut leaves = Vec::new();
        walk(value, &mut Vec::new(), &mut leaves);
        for (path, v) in leaves {
            let covered = strategies
                .iter()
                .any(|s| s.path.len() <= path.len() && path[..s.path.len()] == s.path[..]);
            if !covered {
                self.merge(&path, v, None, metrics);
            }
        }
        self.events += 1;
        self.bytes = loghaul_core::budget::batch_bytes(&self.first)
            + self
                .fields
                .iter()
                .map(|(p, m)| m.bytes() + p.iter().map(String::len).sum::<usize>())
                .sum::<usize>();
    }

    fn merge(
        &mut self,
        path: &[String],
        v: Vrl,
        strategy: Option<Strategy>,
        metrics: &ComponentMetrics,
    ) {
        let result = match self.index.get(path) {
            Some(i) => self.fields[*i].1.add(v),
            None => {
                let made = match strategy {
                    Some(s) => Merger::new(s, v),
                    None => Ok(Merger::default_for(&path.join("."), v)),
                };
                made.map(|m| {
                    self.index.insert(path.to_vec(), self.fields.len());
                    self.fields.push((path.to_vec(), m));
                })
            }
        };
        if let Err(error) = result {
            metrics.error(ErrorKind::Merge, 1);
            crate::warn_limited!(metrics, field = %path.join("."), %error, "reduce could not merge a value");
        }
    }
}

/// The leaves of `value`: objects are walked down, anything else (arrays included, as
/// Vector's) is a leaf; an empty object is a leaf.
fn walk(value: Vrl, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, Vrl)>) {
    match value {
        Vrl::Object(obj) if !obj.is_empty() => {
            for (k, v) in obj {
                path.push(k.into());
                walk(v, path, out);
                path.pop();
            }
        }
        leaf => out.push((path.clone(), leaf)),
    }
}

async fn send(fanout: &Fanout, flushed: Flushed, metrics: &ComponentMetrics) {
    for (batch, acks) in flushed.batches {
        send_on(fanout, batch, metrics).await;
        for ack in acks {
            ack.commit(BatchStatus::Delivered);
        }
    }
}

async fn run(mut reduce: Reduce, metrics: Arc<ComponentMetrics>, mut input: Input, fanout: Fanout) {
    metrics.set_health(Health::Running, None);
    let period = reduce.config.flush_period;
    let mut tick = tokio::time::interval_at(Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            delivery = input.recv() => {
                let Some(delivery) = delivery else { break };
                let flushed = crate::pipeline::cpu_heavy(|| {
                    reduce.push_batch(&delivery.batch, &delivery.ack, Instant::now(), &metrics)
                });
                send(&fanout, flushed, &metrics).await;
                delivery.ack.commit(BatchStatus::Delivered);
            }
            _ = tick.tick() => {
                let flushed = reduce.expire(Instant::now());
                send(&fanout, flushed, &metrics).await;
            }
        }
    }
    let flushed = reduce.flush_all();
    send(&fanout, flushed, &metrics).await;
    metrics.set_health(Health::Stopped, None);
}

#[cfg(test)]
mod tests;
