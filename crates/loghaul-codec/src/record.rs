//! Building a batch of record events from JSON: what the HTTP body decoder and the Kafka source
//! share. A record lands in the batch's `fields` table the way the forward decoder lays it out
//! (a container's entries next to each other, nested containers' children after them, the
//! top-level `message` string lifted into the event's message); strings are copied into the
//! arena.
//!
//! ```text
//! arena:  … "k" "v" "message text" …          (strings, appended)
//! fields: [k: "v", n: Map(5..7), extra…] … [a: 1, b: 2]   (one record's top level, then children)
//! ```

use std::sync::Arc;

use bytes::Bytes;
use loghaul_core::{Event, EventBatch, Field, Span, Value};
use serde_json::Value as Json;

const PLACEHOLDER: Field = Field {
    name: Span::EMPTY,
    value: Value::Null,
};

/// A batch being filled with records.
#[derive(Debug, Default)]
pub struct RecordBuilder {
    pub arena: Vec<u8>,
    pub fields: Vec<Field>,
    pub events: Vec<Event>,
}

impl RecordBuilder {
    /// Appends `s` to the arena.
    pub fn put(&mut self, s: &[u8]) -> Span {
        let start = self.arena.len();
        self.arena.extend_from_slice(s);
        Span::new(start, self.arena.len())
    }

    /// A JSON value as a field value (containers' entries appended to the table).
    pub fn value(&mut self, v: &Json) -> Value {
        match v {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Value::Int(i)
                } else if let Some(u) = n.as_u64() {
                    Value::UInt(u)
                } else {
                    Value::Float(n.as_f64().unwrap_or(0.0))
                }
            }
            Json::String(s) => Value::Str(self.put(s.as_bytes())),
            Json::Array(items) => {
                let start = self.fields.len();
                self.fields.resize(start + items.len(), PLACEHOLDER);
                for (i, item) in items.iter().enumerate() {
                    let value = self.value(item);
                    self.fields[start + i] = Field {
                        name: Span::EMPTY,
                        value,
                    };
                }
                Value::Array(start as u32, (start + items.len()) as u32)
            }
            Json::Object(map) => {
                let start = self.fields.len();
                self.fields.resize(start + map.len(), PLACEHOLDER);
                for (i, (k, v)) in map.iter().enumerate() {
                    let name = self.put(k.as_bytes());
                    let value = self.value(v);
                    self.fields[start + i] = Field { name, value };
                }
                Value::Map(start as u32, (start + map.len()) as u32)
            }
        }
    }

    /// One event from `base` (its own fields: tag, timestamp, peer...) whose record is `map`'s
    /// entries (a string `message` lifted into the event) followed by `extra` (fields whose
    /// strings are already in the arena).
    pub fn record(&mut self, map: &serde_json::Map<String, Json>, base: Event, extra: &[Field]) {
        let mut event = base;
        let start = self.fields.len();
        let n = map.len() + extra.len();
        self.fields.resize(start + n, PLACEHOLDER);
        let mut filled = 0;
        for (k, v) in map {
            if k == "message"
                && let Json::String(s) = v
                && event.message.is_none()
            {
                event.message = self.put(s.as_bytes()).into();
                continue;
            }
            let name = self.put(k.as_bytes());
            let value = self.value(v);
            self.fields[start + filled] = Field { name, value };
            filled += 1;
        }
        for field in extra {
            self.fields[start + filled] = *field;
            filled += 1;
        }
        // A lifted message leaves one slot unused at the end of the top level.
        event.fields = (start as u32, (start + filled) as u32);
        self.events.push(event);
    }

    /// The batch, received now.
    pub fn finish(self, source: Arc<str>, source_type: &'static str) -> EventBatch {
        let mut batch = EventBatch::new(Bytes::from(self.arena), source, source_type);
        batch.events = self.events;
        batch.fields = self.fields;
        batch.received = loghaul_core::Timestamp::now();
        batch
    }
}
