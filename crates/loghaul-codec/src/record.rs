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

/// A batch being filled with records.
#[derive(Debug, Default)]
pub struct RecordBuilder {
    pub arena: Vec<u8>,
    pub fields: Vec<Field>,
    pub events: Vec<Event>,
    /// Emptied vectors for containers being read, reused so a record costs no allocation once
    /// the batch is warm (one per nesting level in use).
    spare: Vec<Vec<Field>>,
}

impl RecordBuilder {
    /// Appends `s` to the arena.
    pub fn put(&mut self, s: &[u8]) -> Span {
        let start = self.arena.len();
        self.arena.extend_from_slice(s);
        Span::new(start, self.arena.len())
    }

    /// One event from `base` whose message is `text` (copied into the arena), its record
    /// `extra`.
    pub fn text_event(&mut self, text: &[u8], base: Event, extra: &[Field]) {
        let message = self.put(text);
        let start = self.fields.len();
        self.fields.extend_from_slice(extra);
        self.events.push(Event {
            message: message.into(),
            fields: (start as u32, self.fields.len() as u32),
            ..base
        });
    }

    /// One event from `base` whose record is the JSON object `json` (key order kept, a string
    /// `message` lifted into the event), followed by `extra`. Parsed straight into the batch's
    /// tables: no intermediate tree, no allocation per key.
    ///
    /// # Errors
    ///
    /// `json` is not one JSON object (or nests deeper than serde_json's limit of 128); nothing
    /// of it is kept then.
    pub fn json_record(
        &mut self,
        json: &[u8],
        base: Event,
        extra: &[Field],
    ) -> Result<(), serde_json::Error> {
        let mut de = serde_json::Deserializer::from_slice(json);
        self.json_record_from(&mut de, base, extra)?;
        de.end()
    }

    /// As [`RecordBuilder::json_record`], each object of a JSON array, or the one object.
    ///
    /// # Errors
    ///
    /// The JSON is neither an object nor an array of objects.
    pub fn json_records(
        &mut self,
        json: &[u8],
        base: Event,
        extra: &[Field],
    ) -> Result<(), serde_json::Error> {
        let marks = self.marks();
        let mut de = serde_json::Deserializer::from_slice(json);
        let result = serde::de::DeserializeSeed::deserialize(
            Body {
                b: self,
                base,
                extra,
            },
            &mut de,
        )
        .and_then(|()| de.end());
        if result.is_err() {
            self.rollback(marks);
        }
        result
    }

    fn json_record_from<'de, D: serde::Deserializer<'de>>(
        &mut self,
        de: D,
        base: Event,
        extra: &[Field],
    ) -> Result<(), D::Error> {
        let marks = self.marks();
        let mut event = base;
        let entries = serde::de::DeserializeSeed::deserialize(
            Top {
                b: self,
                event: &mut event,
            },
            de,
        );
        let entries = match entries {
            Ok(e) => e,
            Err(e) => {
                self.rollback(marks);
                return Err(e);
            }
        };
        event.fields = self.append(entries, extra);
        self.events.push(event);
        Ok(())
    }

    /// An empty vector for a container's entries.
    fn scratch(&mut self) -> Vec<Field> {
        self.spare.pop().unwrap_or_default()
    }

    /// Moves a container's entries to the end of the table; returns their range and keeps the
    /// vector for the next container.
    fn append(&mut self, mut entries: Vec<Field>, extra: &[Field]) -> (u32, u32) {
        let start = self.fields.len();
        self.fields.extend_from_slice(&entries);
        self.fields.extend_from_slice(extra);
        entries.clear();
        self.spare.push(entries);
        (start as u32, self.fields.len() as u32)
    }

    fn marks(&self) -> (usize, usize, usize) {
        (self.arena.len(), self.fields.len(), self.events.len())
    }

    /// Forgets what a record that failed halfway added.
    fn rollback(&mut self, (arena, fields, events): (usize, usize, usize)) {
        self.arena.truncate(arena);
        self.fields.truncate(fields);
        self.events.truncate(events);
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

/// A JSON body: one object, or an array of objects, each a record.
struct Body<'b, 'e> {
    b: &'b mut RecordBuilder,
    base: Event,
    extra: &'e [Field],
}

impl<'de> serde::de::DeserializeSeed<'de> for Body<'_, '_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Body<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object or an array of objects")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let mut event = self.base;
        let entries = Top {
            b: &mut *self.b,
            event: &mut event,
        }
        .visit_map(map)?;
        event.fields = self.b.append(entries, self.extra);
        self.b.events.push(event);
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Body { b, base, extra } = self;
        while let Some(()) = seq.next_element_seed(Record { b, base, extra })? {}
        Ok(())
    }
}

/// An item of a body's array: an object, as a record.
struct Record<'b, 'e> {
    b: &'b mut RecordBuilder,
    base: Event,
    extra: &'e [Field],
}

impl<'de> serde::de::DeserializeSeed<'de> for Record<'_, '_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        self.b.json_record_from(de, self.base, self.extra)
    }
}

/// A record's top level: its entries (the first string `message` lifted into the event).
struct Top<'b, 'e> {
    b: &'b mut RecordBuilder,
    event: &'e mut Event,
}

impl<'de> serde::de::DeserializeSeed<'de> for Top<'_, '_> {
    type Value = Vec<Field>;

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<Vec<Field>, D::Error> {
        de.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Top<'_, '_> {
    type Value = Vec<Field>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Vec<Field>, A::Error> {
        let mut entries = self.b.scratch();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let value = map.next_value_seed(ValueSeed { b: &mut *self.b })?;
            if key.as_str() == "message"
                && let Value::Str(span) = value
                && self.event.message.is_none()
            {
                self.event.message = span.into();
                continue;
            }
            let name = self.b.put(key.as_str().as_bytes());
            entries.push(Field { name, value });
        }
        Ok(entries)
    }
}

/// A map key: borrowed from the input when it has no escapes.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v))
            }
        }
        de.deserialize_str(V)
    }
}

/// Any JSON value, into the batch's tables.
struct ValueSeed<'b> {
    b: &'b mut RecordBuilder,
}

impl<'de> serde::de::DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<Value, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(i64::try_from(v).map_or(Value::UInt(v), Value::Int))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(self.b.put(v.as_bytes())))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        // Items are collected first: a nested container's own entries land in the table while
        // its parent is still being read, and a container's entries must stay contiguous.
        let mut items = self.b.scratch();
        while let Some(value) = seq.next_element_seed(ValueSeed { b: &mut *self.b })? {
            items.push(Field {
                name: Span::EMPTY,
                value,
            });
        }
        let (start, end) = self.b.append(items, &[]);
        Ok(Value::Array(start, end))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = self.b.scratch();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let value = map.next_value_seed(ValueSeed { b: &mut *self.b })?;
            let name = self.b.put(key.as_str().as_bytes());
            entries.push(Field { name, value });
        }
        let (start, end) = self.b.append(entries, &[]);
        Ok(Value::Map(start, end))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn str_of(batch: &EventBatch, v: Value) -> &[u8] {
        match v {
            Value::Str(s) => batch.str(s),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_json_record_keeps_key_order_nesting_and_lifts_the_message() {
        let mut b = RecordBuilder::default();
        let extra_name = b.put(b"kafka_topic");
        let extra_value = b.put(b"logs");
        let extra = [Field {
            name: extra_name,
            value: Value::Str(extra_value),
        }];
        b.json_record(
            br#"{"z":1,"message":"hi \"you\"","a":{"n":[1,"two",{"x":null}],"b":true},"u":18446744073709551615}"#,
            Event::default(),
            &extra,
        )
        .unwrap();
        assert!(b.json_record(br#"[1]"#, Event::default(), &extra).is_err());
        assert!(
            b.json_record(br#"{"a":"#, Event::default(), &extra)
                .is_err()
        );
        let batch = b.finish("t".into(), "kafka");
        assert_eq!(batch.len(), 1, "the bad ones left nothing");
        let e = batch.events[0];
        assert_eq!(batch.str(e.message.get().unwrap()), br#"hi "you""#);
        let names: Vec<&[u8]> = batch
            .fields_of(&e)
            .iter()
            .map(|f| batch.str(f.name))
            .collect();
        assert_eq!(names, [&b"z"[..], b"a", b"u", b"kafka_topic"], "as written");
        assert_eq!(
            batch.lookup(&e, "a.n.1").map(|v| str_of(&batch, v)),
            Some(&b"two"[..])
        );
        assert_eq!(batch.lookup(&e, "a.n.2.x"), Some(Value::Null));
        assert_eq!(batch.lookup(&e, "a.b"), Some(Value::Bool(true)));
        assert_eq!(batch.lookup(&e, "u"), Some(Value::UInt(u64::MAX)));
        assert_eq!(batch.lookup(&e, "z"), Some(Value::Int(1)));
    }

    #[test]
    fn a_body_is_an_object_or_an_array_of_objects() {
        let mut b = RecordBuilder::default();
        b.json_records(br#"[{"a":1},{"message":"m"}]"#, Event::default(), &[])
            .unwrap();
        b.json_records(br#"{"a":2}"#, Event::default(), &[])
            .unwrap();
        assert!(
            b.json_records(br#"[{"a":1},2]"#, Event::default(), &[])
                .is_err()
        );
        assert!(b.json_records(br#""text""#, Event::default(), &[]).is_err());
        let batch = b.finish("t".into(), "http_server");
        assert_eq!(batch.len(), 3);
    }

    #[test]
    fn nesting_past_serde_json_s_limit_is_an_error_not_a_crash() {
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
        let mut b = RecordBuilder::default();
        assert!(
            b.json_record(deep.as_bytes(), Event::default(), &[])
                .is_err()
        );
    }
}
