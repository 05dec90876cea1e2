//! What the stateful transforms (`sample`, `throttle`, `dedupe`, `reduce`) share: how they read
//! a field of an event, or render a `{{ field }}` template, as key bytes; how they charge the
//! state they keep between batches to the memory budget; and the least-recently-used order
//! their bounded tables evict by.
//!
//! Fields are read from the event's VRL value ([`super::vrl::convert::to_vrl`]), so a field is
//! named and valued exactly as VRL conditions see it (docs/vrl.md): `hostname`, `timestamp`, a
//! record key, or a dotted path into the record (`kubernetes.pod`, `items.0`).
//!
//! Memory: a transform's state is bounded by a count (its cache size, keys, open groups) and
//! its bytes are held as one [`Charge`] against the global budget (`limits.memory`), resized
//! as the state grows and shrinks, never waited for: a transform that waited for memory
//! while holding it could wait for itself. While the budget is spent, sources wait before
//! reading more, so a growing state pushes back on them like a full queue does.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;

use loghaul_config::{PathTemplate, TemplatePart, Validator};
use loghaul_core::{Charge, MemoryBudget};
use serde::Deserialize;
use vrl::value::Value as Vrl;

use super::vrl::{Expect, Program};

/// A condition as Vector writes one: a VRL expression, or `{ type: vrl, source: EXPR }`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum RawCondition {
    Vrl(String),
    Typed(RawTypedCondition),
}

/// `{ type: vrl, source: EXPR }`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTypedCondition {
    /// The condition's language: `vrl` (the only one loghaul runs).
    #[serde(rename = "type")]
    pub kind: String,
    /// The expression.
    pub source: String,
}

/// Compiles the condition at `key` (errors placed in the configuration file).
pub fn condition(raw: &RawCondition, cx: &mut Validator<'_, '_>, key: &str) -> Option<Program> {
    match raw {
        RawCondition::Vrl(source) => super::vrl::compile(source, Expect::Boolean, cx, &[key]),
        RawCondition::Typed(t) => {
            if t.kind != "vrl" {
                cx.error(
                    &[key, "type"],
                    format!("unsupported condition type `{}`", t.kind),
                    Some("loghaul runs `vrl` conditions (Vector's default)".to_owned()),
                );
                return None;
            }
            super::vrl::compile(&t.source, Expect::Boolean, cx, &[key, "source"])
        }
    }
}

/// The value at a dotted path of an event's VRL value: each segment names an object's key or,
/// when it is a number, indexes an array.
pub fn get<'a>(value: &'a Vrl, path: &str) -> Option<&'a Vrl> {
    let mut at = value;
    for segment in path.split('.') {
        at = match at {
            Vrl::Object(obj) => obj.get(segment)?,
            Vrl::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(at)
}

/// A value as key text, as Vector renders one (`to_string_lossy`): a string as its bytes, a
/// timestamp in RFC 3339, numbers and booleans as their text, objects and arrays as VRL
/// literals.
pub fn text(value: &Vrl) -> Cow<'_, [u8]> {
    match value {
        Vrl::Bytes(b) => Cow::Borrowed(&b[..]),
        Vrl::String(s) => Cow::Borrowed(s.as_bytes()),
        Vrl::Timestamp(t) => Cow::Owned(
            t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
                .into_bytes(),
        ),
        other => Cow::Owned(other.to_string().into_bytes()),
    }
}

/// What names an event's key: one field, or a template of fields and literal text.
#[derive(Clone, Debug, PartialEq)]
pub enum Key {
    Field(String),
    Template(PathTemplate),
}

impl Key {
    /// `{{ field }}` references make a template (Vector's syntax); anything else names a field.
    ///
    /// # Errors
    ///
    /// A template that does not parse, with the character offset of the problem.
    pub fn parse(text: &str) -> Result<Key, loghaul_config::TemplateError> {
        if text.contains("{{") {
            let (template, _) = crate::sinks::template::parse_fields(text)?;
            Ok(Key::Template(template))
        } else {
            Ok(Key::Field(text.to_owned()))
        }
    }

    /// The key of the event whose VRL value is `value`; `None` when a field it names is absent
    /// (Vector's events whose template does not render, which share one bucket).
    pub fn render(&self, value: &Vrl, out: &mut Vec<u8>) -> Option<()> {
        out.clear();
        match self {
            Key::Field(name) => out.extend_from_slice(&text(get(value, name)?)),
            Key::Template(t) => {
                for part in &t.parts {
                    match part {
                        TemplatePart::Literal(s) => out.extend_from_slice(s.as_bytes()),
                        TemplatePart::Field(name) => {
                            out.extend_from_slice(&text(get(value, name)?))
                        }
                        TemplatePart::FieldOr(name, default) => {
                            let v = get(value, name).map(text).unwrap_or_default();
                            out.extend_from_slice(if v.is_empty() {
                                default.as_bytes()
                            } else {
                                &v
                            });
                        }
                        // Field-only templates hold no strftime part.
                        TemplatePart::Strftime(_) => {}
                    }
                }
            }
        }
        Some(())
    }
}

/// A transform's state, charged to the memory budget.
pub struct StateCharge {
    charge: Option<Charge>,
    budget: Option<Arc<MemoryBudget>>,
}

impl StateCharge {
    /// Charges to `budget` (the transform's fan-out's); nothing is charged without one (tests).
    pub fn new(budget: Option<&Arc<MemoryBudget>>) -> StateCharge {
        StateCharge {
            charge: budget.map(MemoryBudget::hold),
            budget: budget.cloned(),
        }
    }

    /// The state now holds `bytes`.
    pub fn set(&self, bytes: usize) {
        if let Some(c) = &self.charge
            && c.bytes() != bytes
        {
            c.resize(bytes);
        }
    }

    /// Whether a state that can shed (reduce's groups) should: the budget is spent (used
    /// beyond its limit) and the state, at `held` bytes, holds more than a quarter of it.
    pub fn should_shed(&self, held: usize) -> bool {
        self.budget
            .as_ref()
            .is_some_and(|b| b.used() > b.limit() && held > b.limit() / 4)
    }
}

/// Keys in the order they were last used: the least recently used is evicted first.
pub struct Lru<K> {
    last_use: HashMap<K, u64>,
    by_use: BTreeMap<u64, K>,
    tick: u64,
}

impl<K: Hash + Eq + Clone> Lru<K> {
    pub fn new() -> Lru<K> {
        Lru {
            last_use: HashMap::new(),
            by_use: BTreeMap::new(),
            tick: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.last_use.len()
    }

    pub fn is_empty(&self) -> bool {
        self.last_use.is_empty()
    }

    /// Marks `key` used now, adding it if it is new; returns whether it was there.
    pub fn touch(&mut self, key: &K) -> bool {
        self.tick += 1;
        let tick = self.tick;
        match self.last_use.insert(key.clone(), tick) {
            Some(old) => {
                if let Some(k) = self.by_use.remove(&old) {
                    self.by_use.insert(tick, k);
                }
                true
            }
            None => {
                self.by_use.insert(tick, key.clone());
                false
            }
        }
    }

    pub fn contains(&self, key: &K) -> bool {
        self.last_use.contains_key(key)
    }

    /// Removes and returns the least recently used key.
    pub fn pop_oldest(&mut self) -> Option<K> {
        let (_, key) = self.by_use.pop_first()?;
        self.last_use.remove(&key);
        Some(key)
    }

    /// The keys, least recently used first.
    pub fn iter_oldest(&self) -> impl Iterator<Item = &K> {
        self.by_use.values()
    }

    /// The least recently used key.
    pub fn oldest(&self) -> Option<&K> {
        self.by_use.first_key_value().map(|(_, k)| k)
    }

    pub fn remove(&mut self, key: &K) {
        if let Some(t) = self.last_use.remove(key) {
            self.by_use.remove(&t);
        }
    }

    /// What one entry costs, roughly: the key twice (in both maps), a tick twice, and the maps'
    /// own overhead per entry.
    pub fn entry_bytes(key_bytes: usize) -> usize {
        2 * (key_bytes + 8) + 32
    }
}

impl<K: Hash + Eq + Clone> Default for Lru<K> {
    fn default() -> Lru<K> {
        Lru::new()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_goes_first() {
        let mut lru = Lru::new();
        assert!(!lru.touch(&1));
        assert!(!lru.touch(&2));
        assert!(!lru.touch(&3));
        assert!(lru.touch(&1), "1 again: now the newest");
        assert_eq!(lru.oldest(), Some(&2));
        assert_eq!(lru.pop_oldest(), Some(2));
        lru.remove(&3);
        assert_eq!((lru.pop_oldest(), lru.pop_oldest()), (Some(1), None));
        assert!(lru.is_empty());
    }

    #[test]
    fn keys_render_fields_and_templates_as_vrl_sees_them() {
        let value: Vrl = serde_json::from_str::<serde_json::Value>(
            r#"{"host":"h1","n":42,"k":{"items":["a","b"]}}"#,
        )
        .map(Vrl::from)
        .unwrap();
        let mut out = Vec::new();
        let key = Key::parse("host").unwrap();
        assert!(key.render(&value, &mut out).is_some());
        assert_eq!(out, b"h1");
        let key = Key::parse("{{ host }}-{{ n }}/{{ k.items.1 }}").unwrap();
        assert!(key.render(&value, &mut out).is_some());
        assert_eq!(out, b"h1-42/b");
        assert!(
            Key::parse("{{ nope }}")
                .unwrap()
                .render(&value, &mut out)
                .is_none()
        );
        assert!(Key::parse("{{ host").is_err());
    }
}
