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
    /// The nested containers of the record being read (each one's entries appended when it
    /// closes, so children before their parents) and `extra`'s maps, with ranges into this
    /// table; [`place`] copies them into `fields` in the batch's order.
    ///
    /// [`place`]: RecordBuilder::place
    nested: Vec<Field>,
}

impl RecordBuilder {
    /// Appends `s` to the arena.
    pub fn put(&mut self, s: &[u8]) -> Span {
        let start = self.arena.len();
        self.arena.extend_from_slice(s);
        Span::new(start, self.arena.len())
    }

    /// A map of `entries` for a field of `extra` (message headers): kept aside and laid out
    /// after each record that gets it, as nested containers are.
    pub fn nested_map(&mut self, entries: &[Field]) -> Value {
        let start = self.nested.len() as u32;
        self.nested.extend_from_slice(entries);
        Value::Map(start, self.nested.len() as u32)
    }

    /// One event from `base` whose message is `text` (copied into the arena), its record
    /// `extra` (whose containers come from [`RecordBuilder::nested_map`]).
    pub fn text_event(&mut self, text: &[u8], base: Event, extra: &[Field]) {
        let message = self.put(text);
        let entries = self.scratch();
        let base_nested = self.nested.len();
        let fields = self.place(entries, extra, base_nested);
        self.events.push(Event {
            message: message.into(),
            fields,
            ..base
        });
    }

    /// One event from `base` whose record is the JSON object `json` (key order kept, a string
    /// `message` lifted into the event), followed by `extra` (whose containers come from
    /// [`RecordBuilder::nested_map`]). Parsed straight into the batch's
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
        self.json_whole(json, false, base, extra)
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
        self.json_whole(json, true, base, extra)
    }

    /// One record (or, with `many`, a body: an array of records or one) that must be all of
    /// `json`: a record followed by anything else is no record, and leaves nothing behind.
    fn json_whole(
        &mut self,
        json: &[u8],
        many: bool,
        base: Event,
        extra: &[Field],
    ) -> Result<(), serde_json::Error> {
        // One UTF-8 check of the whole text, then serde_json's `str` reader, which checks no
        // string again; its slice reader checks each string on its own, a call per string (a
        // tenth of a Kafka consumer's decoding). Text that is not UTF-8 takes the slice reader,
        // for serde_json's own error.
        match std::str::from_utf8(json) {
            Ok(text) => self.json_from(serde_json::Deserializer::from_str(text), many, base, extra),
            Err(_) => self.json_from(
                serde_json::Deserializer::from_slice(json),
                many,
                base,
                extra,
            ),
        }
    }

    fn json_from<'de, R: serde_json::de::Read<'de>>(
        &mut self,
        mut de: serde_json::Deserializer<R>,
        many: bool,
        base: Event,
        extra: &[Field],
    ) -> Result<(), serde_json::Error> {
        use serde::de::DeserializeSeed as _;
        let marks = self.marks();
        let read = if many {
            Body {
                b: self,
                base,
                extra,
            }
            .deserialize(&mut de)
        } else {
            Record {
                b: self,
                base,
                extra,
            }
            .deserialize(&mut de)
        };
        let result = read.and_then(|()| de.end());
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
        event.fields = self.place(entries, extra, marks.3);
        self.events.push(event);
        Ok(())
    }

    /// A builder whose arena starts with `wire` (a request's bytes), so that a decoder's spans
    /// into the request are spans into the arena, with no copy of each string.
    pub fn over(wire: Vec<u8>) -> RecordBuilder {
        RecordBuilder {
            arena: wire,
            ..RecordBuilder::default()
        }
    }

    /// An empty vector for a container's entries.
    pub fn scratch(&mut self) -> Vec<Field> {
        self.spare.pop().unwrap_or_default()
    }

    /// A closed nested map, set aside until its record is placed (see
    /// [`RecordBuilder::push_record`]).
    pub fn close_map(&mut self, entries: Vec<Field>) -> Value {
        let (a, b) = self.nest(entries);
        Value::Map(a, b)
    }

    /// A closed nested array, as [`RecordBuilder::close_map`].
    pub fn close_array(&mut self, items: Vec<Field>) -> Value {
        let (a, b) = self.nest(items);
        Value::Array(a, b)
    }

    /// How many entries are set aside: containers closed from now on and forgotten once a record
    /// is placed are those past this mark.
    pub fn nested_mark(&self) -> usize {
        self.nested.len()
    }

    /// Forgets containers set aside past `mark` (shared ones, e.g. `extra`'s maps, no longer
    /// needed).
    pub fn forget_nested(&mut self, mark: usize) {
        self.nested.truncate(mark);
    }

    /// One event from `base` with the record `entries` then `extra` (whose containers were
    /// closed before `mark` and stay for the next records; the record's own, closed after it,
    /// are forgotten).
    pub fn push_record(&mut self, base: Event, entries: Vec<Field>, extra: &[Field], mark: usize) {
        let fields = self.place(entries, extra, mark);
        self.events.push(Event { fields, ..base });
    }

    /// Moves a closed nested container's entries to the end of the `nested` table; returns
    /// their range there and keeps the vector for the next container.
    fn nest(&mut self, mut entries: Vec<Field>) -> (u32, u32) {
        let start = self.nested.len();
        self.nested.extend_from_slice(&entries);
        entries.clear();
        self.spare.push(entries);
        (start as u32, self.nested.len() as u32)
    }

    /// Lays a finished record out in `fields` as every reader of a batch expects it (the disk
    /// buffer's decoder refuses anything else): its top-level entries, then `extra`, and each
    /// container's entries after the field holding it, contiguous, copied from `nested` breadth
    /// first. Then forgets the record's own part of `nested` (from `nested_base` on; what is
    /// before it, `extra`'s maps, serves the next records too). Returns the record's range.
    fn place(
        &mut self,
        mut entries: Vec<Field>,
        extra: &[Field],
        nested_base: usize,
    ) -> (u32, u32) {
        let start = self.fields.len();
        self.fields.extend_from_slice(&entries);
        self.fields.extend_from_slice(extra);
        let end = self.fields.len();
        entries.clear();
        self.spare.push(entries);
        let mut k = start;
        while k < self.fields.len() {
            let value = self.fields[k].value;
            if let Value::Map(a, b) | Value::Array(a, b) = value {
                let at = self.fields.len() as u32;
                let (a, b) = (a as usize, b as usize);
                self.fields.extend_from_slice(&self.nested[a..b]);
                let range = (at, self.fields.len() as u32);
                self.fields[k].value = match value {
                    Value::Map(..) => Value::Map(range.0, range.1),
                    _ => Value::Array(range.0, range.1),
                };
            }
            k += 1;
        }
        self.nested.truncate(nested_base);
        (start as u32, end as u32)
    }

    fn marks(&self) -> (usize, usize, usize, usize) {
        (
            self.arena.len(),
            self.fields.len(),
            self.events.len(),
            self.nested.len(),
        )
    }

    /// Forgets what a record that failed halfway added.
    fn rollback(&mut self, (arena, fields, events, nested): (usize, usize, usize, usize)) {
        self.arena.truncate(arena);
        self.fields.truncate(fields);
        self.events.truncate(events);
        self.nested.truncate(nested);
    }

    /// The batch, received now.
    pub fn finish(self, source: Arc<str>, source_type: &'static str) -> EventBatch {
        let mut arena = self.arena;
        // A batch keeps its arena's whole allocation (Bytes takes the vector as it is) while
        // the memory budget is charged its length: an arena that doubled for the few bytes
        // appended after a body (a 2 MiB JSON body and its keys) held twice its charge.
        if arena.capacity() - arena.len() > arena.len() / 4 + 4096 {
            arena.shrink_to_fit();
        }
        let mut batch = EventBatch::new(Bytes::from(arena), source, source_type);
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
        let nested = self.b.nested.len();
        let entries = Top {
            b: &mut *self.b,
            event: &mut event,
        }
        .visit_map(map)?;
        event.fields = self.b.place(entries, self.extra, nested);
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
        // Items are collected first: a nested container's own entries land in `nested` while
        // its parent is still being read, and a container's entries must stay contiguous.
        let mut items = self.b.scratch();
        while let Some(value) = seq.next_element_seed(ValueSeed { b: &mut *self.b })? {
            items.push(Field {
                name: Span::EMPTY,
                value,
            });
        }
        let (start, end) = self.b.nest(items);
        Ok(Value::Array(start, end))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = self.b.scratch();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let value = map.next_value_seed(ValueSeed { b: &mut *self.b })?;
            let name = self.b.put(key.as_str().as_bytes());
            entries.push(Field { name, value });
        }
        let (start, end) = self.b.nest(entries);
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
        // A whole record with more after it, and a string that is not UTF-8 (read by the
        // slice reader, which finds it), are no records either.
        assert!(
            b.json_record(br#"{"a":1} {"b":2}"#, Event::default(), &extra)
                .is_err()
        );
        assert!(
            b.json_record(b"{\"a\":\"\xff\"}", Event::default(), &extra)
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

    /// Every container's entries sit after the field holding it, as the disk buffer's decoder
    /// demands (it refuses a batch otherwise): checked directly, and by a round trip through it.
    #[test]
    fn nested_containers_come_after_their_parents_and_survive_the_disk_buffer() {
        let mut b = RecordBuilder::default();
        // A map in `extra`, as the kafka source gives each message's headers.
        let (hn, hv) = (b.put(b"app"), b.put(b"web"));
        let headers = b.nested_map(&[Field {
            name: hn,
            value: Value::Str(hv),
        }]);
        let extra = [Field {
            name: b.put(b"kafka_headers"),
            value: headers,
        }];
        let records: [&[u8]; 3] = [
            br#"{"a":{"b":{"c":[1,[2,{"d":3}]]},"e":[]},"f":{"g":4}}"#,
            br#"{"broken":{"x":[1,2"#,
            br#"{"message":"m","n":[{"o":{"p":"q"}},{"r":5}]}"#,
        ];
        for r in records {
            if b.json_record(r, Event::default(), &extra).is_err() {
                b.text_event(r, Event::default(), &extra);
            }
        }
        let batch = b.finish("t".into(), "kafka");
        assert_eq!(batch.len(), 3);
        fn walk(batch: &EventBatch, range: (u32, u32), parent: Option<usize>) {
            if let Some(p) = parent {
                assert!(
                    range.0 as usize > p || range.0 == range.1,
                    "{range:?} before {p}"
                );
            }
            for i in range.0..range.1 {
                if let Value::Map(a, c) | Value::Array(a, c) = batch.fields[i as usize].value {
                    walk(batch, (a, c), Some(i as usize));
                }
            }
        }
        for e in &batch.events {
            walk(&batch, e.fields, None);
        }
        let mut bytes = Vec::new();
        loghaul_core::persist::encode_batch(&batch, &mut bytes);
        let back = loghaul_core::persist::decode_batch(Bytes::from(bytes)).unwrap();
        let (e0, e1) = (back.events[0], back.events[2]);
        assert_eq!(
            back.lookup(&back.events[1], "kafka_headers.app")
                .map(|v| str_of(&back, v)),
            Some(&b"web"[..]),
            "the text event of the broken record keeps the headers"
        );
        assert_eq!(back.lookup(&e0, "a.b.c.1.1.d"), Some(Value::Int(3)));
        assert_eq!(back.lookup(&e0, "f.g"), Some(Value::Int(4)));
        assert_eq!(
            back.lookup(&e1, "n.0.o.p").map(|v| str_of(&back, v)),
            Some(&b"q"[..])
        );
        assert_eq!(
            back.lookup(&e1, "kafka_headers.app")
                .map(|v| str_of(&back, v)),
            Some(&b"web"[..])
        );
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
