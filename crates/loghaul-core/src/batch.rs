//! `EventBatch`: the unit that moves through loghaul. One arena, many events, side tables for
//! structured data and records, and the finalizer that reports the batch's fate.
//!
//! ```text
//! arena:  <13>Oct 11 22:14:15 host app[1]: hello\n<14>Oct 11 ...   wire bytes, then any bytes
//!                             ^^^^ ^^^ ^    ^^^^^                  a decoder had to create
//!                             hostname/appname/procid/message spans of events[0]
//! sd_elements[e.structured_data.0 .. +1]  -> SdElement { id, params: range into sd_params }
//! fields[e.fields.0 .. e.fields.1]        -> the event's record: Field { name, value }, where a
//!                                            value may be Map(a, b) / Array(a, b): fields[a..b]
//! ```
//!
//! Records (what forward and HTTP/JSON senders send) are trees flattened into `fields`: a map's
//! entries, or an array's items (whose names are empty), sit next to each other in the table and
//! the parent's [`Value::Map`] or [`Value::Array`] holds their range. A decoder that knows a
//! container's length up front (msgpack does) reserves its slots, fills them, and appends the
//! children of nested containers after them, so a record of any depth costs no allocation of its
//! own: the table grows amortised across the batch.
//!
//! Bytes a decoder must create (a decompressed blob, an unescaped string, a tag copied next to
//! decompressed entries) are appended to the arena it is building, after the wire bytes, before
//! it is frozen: spans are offsets, so the arena may move while it grows. One batch, one arena.
//!
//! Invariant: every `Span` stored in the batch (in events, sd tables and fields) lies inside
//! `arena`, and every container range lies inside `fields` and after the field holding it (so a
//! walk down a record always terminates). Decoders uphold it; accessors still clamp, so a bug
//! cannot become a panic.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;

use crate::event::{Event, Span, Timestamp};
use crate::finalizer::Finalizer;

/// One RFC 5424 SD-ELEMENT: its SD-ID and a range into [`EventBatch::sd_params`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdElement {
    pub id: Span,
    pub params: (u32, u32),
}

/// One SD-PARAM. `value` is the raw text between the quotes: `\"`, `\\` and `\]` are still
/// escaped when `escaped` is true, and encoders resolve them on output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdParam {
    pub name: Span,
    pub value: Span,
    pub escaped: bool,
}

/// The value of a record field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// Text (a msgpack `str`, a JSON string). Meant to be UTF-8 but not checked on input:
    /// encoders replace invalid bytes on output, as for every other string.
    Str(Span),
    /// Binary data (a msgpack `bin`). JSON output writes it as a string, like Fluentd does; the
    /// forward protocol's output keeps it binary.
    Bytes(Span),
    Int(i64),
    /// Unsigned integers past `i64::MAX` (msgpack `uint 64`); smaller ones are [`Value::Int`].
    UInt(u64),
    Float(f64),
    Bool(bool),
    Null,
    /// A nested map: its entries are `fields[start..end]`.
    Map(u32, u32),
    /// An array: its items are `fields[start..end]` (their names are empty).
    Array(u32, u32),
    /// A msgpack extension value kept as sent: its type and its data.
    Ext(i8, Span),
}

/// A named field of a record (or, with an empty name, an item of an array).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Field {
    pub name: Span,
    pub value: Value,
}

/// A batch of events sharing one arena.
#[derive(Debug, Clone)]
pub struct EventBatch {
    /// The bytes every span points into.
    pub arena: Bytes,
    pub events: Vec<Event>,
    pub sd_elements: Vec<SdElement>,
    pub sd_params: Vec<SdParam>,
    pub fields: Vec<Field>,
    /// When the batch's bytes were read: the time written for events that carry none of their
    /// own.
    pub received: Timestamp,
    /// The senders' addresses; [`Event::peer`] indexes it. One entry for a TCP connection's
    /// batch, one per run of datagrams from the same sender for UDP.
    pub peers: Vec<IpAddr>,
    /// The id of the component that produced the batch (for metrics and errors).
    pub source: Arc<str>,
    /// `syslog`, `http`, `forward`... written as `source_type` on output.
    pub source_type: &'static str,
    /// Reports the batch's fate to its source; `Finalizer::none()` for sources that cannot ack.
    pub finalizer: Finalizer,
    /// What the batch holds of the memory budget, once a fan-out admitted it; given back when
    /// the last holder drops the batch.
    pub charge: Option<Arc<crate::budget::Charge>>,
    /// The events' records were not decoded: each event's `fields` is the byte range, in the
    /// arena, of its forward-protocol entry's time and record as they arrived (msgpack), and
    /// the `fields` table is empty. A forward source fills such batches when every component it
    /// feeds passes entries through (a `fluent` sink): the fan-out decodes them for any other
    /// reader (`loghaul_codec::forward::decode_raw`), so only a component that asked for them
    /// ever sees one. Until then the events' times carry all nine fraction digits (the time
    /// itself is exact; how many digits it is written with is settled by the decode) and their
    /// flags may hold [`crate::Flags::ENTRY_AS_IS`].
    pub raw_records: bool,
}

impl EventBatch {
    /// An empty batch over `arena`.
    pub fn new(arena: Bytes, source: Arc<str>, source_type: &'static str) -> EventBatch {
        EventBatch {
            arena,
            events: Vec::new(),
            sd_elements: Vec::new(),
            sd_params: Vec::new(),
            fields: Vec::new(),
            received: Timestamp::default(),
            peers: Vec::new(),
            source,
            source_type,
            finalizer: Finalizer::none(),
            charge: None,
            raw_records: false,
        }
    }

    /// The bytes of a span; empty if the span is out of range (a decoder bug, never a panic).
    #[inline]
    pub fn str(&self, span: Span) -> &[u8] {
        self.arena
            .get(span.start as usize..span.end as usize)
            .unwrap_or_default()
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.events.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The structured-data elements of an event (empty when it has none).
    #[inline]
    pub fn sd_elements_of(&self, event: &Event) -> &[SdElement] {
        match event.structured_data {
            Some((start, end)) => self
                .sd_elements
                .get(start as usize..end as usize)
                .unwrap_or_default(),
            None => &[],
        }
    }

    /// The params of one structured-data element.
    #[inline]
    pub fn params_of(&self, element: &SdElement) -> &[SdParam] {
        self.sd_params
            .get(element.params.0 as usize..element.params.1 as usize)
            .unwrap_or_default()
    }

    /// The address `event` was received from, when known.
    #[inline]
    pub fn source_ip(&self, event: &Event) -> Option<IpAddr> {
        self.peers.get(usize::from(event.peer)).copied()
    }

    /// The index for [`Event::peer`] of events received from `ip`: the last entry of
    /// [`EventBatch::peers`] when it is the same address, else a new one. [`Event::NO_PEER`] for
    /// `None`, and (never in practice: UDP batches hold at most a few thousand datagrams) when
    /// the table is full.
    pub fn peer_index(&mut self, ip: Option<IpAddr>) -> u16 {
        let Some(ip) = ip else {
            return Event::NO_PEER;
        };
        if self.peers.last() != Some(&ip) {
            if self.peers.len() >= usize::from(Event::NO_PEER) {
                return Event::NO_PEER;
            }
            self.peers.push(ip);
        }
        (self.peers.len() - 1) as u16
    }

    /// When `event` happened: its own timestamp, else when its batch was read.
    #[inline]
    pub fn time_of(&self, event: &Event) -> Timestamp {
        event.timestamp.unwrap_or(self.received)
    }

    /// The top-level fields of an event's record.
    #[inline]
    pub fn fields_of(&self, event: &Event) -> &[Field] {
        debug_assert!(
            !self.raw_records,
            "a batch of undecoded records reached a reader of records"
        );
        self.fields
            .get(event.fields.0 as usize..event.fields.1 as usize)
            .unwrap_or_default()
    }

    /// The entries of a map or the items of an array (empty for other values).
    #[inline]
    pub fn children(&self, value: Value) -> &[Field] {
        match value {
            Value::Map(start, end) | Value::Array(start, end) => self
                .fields
                .get(start as usize..end as usize)
                .unwrap_or_default(),
            _ => &[],
        }
    }

    /// The value at a dotted path into an event's record (`kubernetes.pod_name`): each segment
    /// names a map entry, or indexes an array when it is a number. `None` when any step is
    /// missing. The first entry wins when a map repeats a key.
    pub fn lookup(&self, event: &Event, path: &str) -> Option<Value> {
        let mut entries = self.fields_of(event);
        let mut found = None;
        for segment in path.split('.') {
            let value = match found {
                None => {
                    entries
                        .iter()
                        .find(|f| self.str(f.name) == segment.as_bytes())?
                        .value
                }
                Some(Value::Array(..)) => {
                    let i: usize = segment.parse().ok()?;
                    entries.get(i)?.value
                }
                Some(_) => {
                    entries
                        .iter()
                        .find(|f| self.str(f.name) == segment.as_bytes())?
                        .value
                }
            };
            entries = self.children(value);
            found = Some(value);
            if !matches!(value, Value::Map(..) | Value::Array(..)) {
                // A scalar ends the walk; a path that goes on below it finds nothing.
                entries = &[];
            }
        }
        found
    }

    /// Gives every event the string field `name: value` (a record that already has `name` keeps
    /// its own, as encoders write the first of a repeated key). What a connection knows of its
    /// sender (the subject of its TLS certificate) becomes a field that templates route by and
    /// every encoder writes.
    ///
    /// Costs one copy of the arena (the strings are appended to it) and, for events that
    /// already have a record, a copy of its top-level entries: it is for batches of connections
    /// that have such a thing to say, not for the common path.
    pub fn add_field(&mut self, name: &str, value: &str) {
        self.set_field_where(name, value, false, |_| true);
    }

    /// Gives the events `pick` selects (by index) the string field `name: value`, as
    /// [`EventBatch::add_field`] does; with `replace`, a record that already has `name` gets the
    /// new value in that entry's place (Vector's overwrite) instead of keeping its own.
    pub fn set_field_where(
        &mut self,
        name: &str,
        value: &str,
        replace: bool,
        mut pick: impl FnMut(usize) -> bool,
    ) {
        let mut arena = Vec::with_capacity(self.arena.len() + name.len() + value.len());
        arena.extend_from_slice(&self.arena);
        let span = |arena: &mut Vec<u8>, s: &str| {
            let start = arena.len();
            arena.extend_from_slice(s.as_bytes());
            Span::new(start, arena.len())
        };
        let name_span = span(&mut arena, name);
        let value = span(&mut arena, value);
        self.arena = Bytes::from(arena);
        let added = Field {
            name: name_span,
            value: Value::Str(value),
        };
        // Events without a record all share one entry.
        let shared = self.fields.len() as u32;
        self.fields.push(added);
        for i in 0..self.events.len() {
            if !pick(i) {
                continue;
            }
            let (start, end) = self.events[i].fields;
            if start == end {
                self.events[i].fields = (shared, shared + 1);
                continue;
            }
            // A record's top-level entries are contiguous: copy them, then the new one, to the
            // end of the table (nested maps and arrays keep pointing where they were).
            let at = self.fields.len();
            self.fields.extend_from_within(start as usize..end as usize);
            let mut replaced = false;
            if replace {
                for j in at..self.fields.len() {
                    if self.str(self.fields[j].name) == name.as_bytes() {
                        self.fields[j].value = added.value;
                        replaced = true;
                    }
                }
            }
            if !replaced {
                self.fields.push(added);
            }
            self.events[i].fields = (at as u32, self.fields.len() as u32);
        }
    }

    /// A batch holding only the events `keep` accepts, sharing this batch's arena, side tables
    /// and finalizer (filters use it; no event data is copied).
    pub fn retain_view(&self, mut keep: impl FnMut(&EventBatch, &Event) -> bool) -> EventBatch {
        let mut events: Vec<Event> = self
            .events
            .iter()
            .filter(|e| keep(self, e))
            .copied()
            .collect();
        // A view of part of a batch of records takes only its events' entries (a route's
        // outputs would otherwise each copy the whole table); all of it, the table as it is.
        // Undecoded records are byte ranges of the shared arena: they stay valid as they are.
        let fields = if events.len() == self.events.len() || self.fields.is_empty() {
            self.fields.clone()
        } else {
            let mut fields = Vec::new();
            for e in &mut events {
                e.fields = copy_entries(self, self.fields_of(e), &mut fields, 0);
            }
            fields
        };
        EventBatch {
            arena: self.arena.clone(),
            events,
            sd_elements: self.sd_elements.clone(),
            sd_params: self.sd_params.clone(),
            fields,
            received: self.received,
            peers: self.peers.clone(),
            source: self.source.clone(),
            source_type: self.source_type,
            finalizer: self.finalizer.clone(),
            charge: self.charge.clone(),
            raw_records: self.raw_records,
        }
    }
}

/// Copies `entries` of `from` (and their children) into `out`, next to each other with their
/// children after them, as decoders lay records out; returns their range. Spans still point
/// into `from`'s arena.
fn copy_entries(
    from: &EventBatch,
    entries: &[Field],
    out: &mut Vec<Field>,
    depth: usize,
) -> (u32, u32) {
    let start = out.len();
    out.extend_from_slice(entries);
    for (i, f) in entries.iter().enumerate() {
        let value = match f.value {
            Value::Map(..) | Value::Array(..) if depth >= MAX_COPY_DEPTH => Value::Null,
            Value::Map(..) => {
                let (a, b) = copy_entries(from, from.children(f.value), out, depth + 1);
                Value::Map(a, b)
            }
            Value::Array(..) => {
                let (a, b) = copy_entries(from, from.children(f.value), out, depth + 1);
                Value::Array(a, b)
            }
            _ => continue,
        };
        out[start + i].value = value;
    }
    (start as u32, (start + entries.len()) as u32)
}

/// Deeper than any decoder builds; a guard on the recursion of [`BatchCopy`], not a limit users
/// meet.
const MAX_COPY_DEPTH: usize = 128;

/// Builds a batch of copies of events taken from any batches: each event's bytes and table
/// entries are copied into the new batch's own arena and tables, so the result pins nothing of
/// the batches it was taken from (a transform that keeps an event for long keeps only that), and
/// events of several batches can leave in one.
///
/// An event that had no timestamp of its own takes its batch's receive time, which is what
/// output wrote for it there.
#[derive(Debug, Default)]
pub struct BatchCopy {
    arena: Vec<u8>,
    events: Vec<Event>,
    sd_elements: Vec<SdElement>,
    sd_params: Vec<SdParam>,
    fields: Vec<Field>,
    peers: Vec<IpAddr>,
}

impl BatchCopy {
    pub fn new() -> BatchCopy {
        BatchCopy::default()
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// What the copies hold so far, in bytes (as [`crate::budget::batch_bytes`] counts).
    pub fn bytes(&self) -> usize {
        use std::mem::size_of;
        self.arena.capacity()
            + self.events.capacity() * size_of::<Event>()
            + self.fields.capacity() * size_of::<Field>()
            + self.sd_elements.capacity() * size_of::<SdElement>()
            + self.sd_params.capacity() * size_of::<SdParam>()
            + size_of::<EventBatch>()
    }

    /// Appends a copy of `event` of `from`.
    pub fn push(&mut self, from: &EventBatch, event: &Event) {
        let mut copy = *event;
        copy.timestamp = Some(from.time_of(event));
        copy.hostname = self.opt(from, event.hostname);
        copy.appname = self.opt(from, event.appname);
        copy.procid = self.opt(from, event.procid);
        copy.msgid = self.opt(from, event.msgid);
        copy.message = self.opt(from, event.message);
        copy.tag = self.opt(from, event.tag);
        copy.peer = match from.source_ip(event) {
            None => Event::NO_PEER,
            Some(ip) => match self.peers.iter().position(|p| *p == ip) {
                Some(i) => i as u16,
                None if self.peers.len() < usize::from(Event::NO_PEER) => {
                    self.peers.push(ip);
                    (self.peers.len() - 1) as u16
                }
                None => Event::NO_PEER,
            },
        };
        copy.structured_data = event.structured_data.map(|_| {
            let first = self.sd_elements.len() as u32;
            for el in from.sd_elements_of(event) {
                let id = self.span(from, el.id);
                let p0 = self.sd_params.len() as u32;
                for p in from.params_of(el) {
                    let param = SdParam {
                        name: self.span(from, p.name),
                        value: self.span(from, p.value),
                        escaped: p.escaped,
                    };
                    self.sd_params.push(param);
                }
                self.sd_elements.push(SdElement {
                    id,
                    params: (p0, self.sd_params.len() as u32),
                });
            }
            (first, self.sd_elements.len() as u32)
        });
        copy.fields = self.entries(from, from.fields_of(event), 0);
        self.events.push(copy);
    }

    /// The batch of the copies, from `source` (its `source_type`), read at `received`.
    pub fn finish(
        self,
        source: Arc<str>,
        source_type: &'static str,
        received: Timestamp,
        finalizer: Finalizer,
    ) -> EventBatch {
        let mut batch = EventBatch::new(Bytes::from(self.arena), source, source_type);
        batch.events = self.events;
        batch.sd_elements = self.sd_elements;
        batch.sd_params = self.sd_params;
        batch.fields = self.fields;
        batch.peers = self.peers;
        batch.received = received;
        batch.finalizer = finalizer;
        batch
    }

    fn span(&mut self, from: &EventBatch, span: Span) -> Span {
        let start = self.arena.len();
        self.arena.extend_from_slice(from.str(span));
        Span::new(start, self.arena.len())
    }

    fn opt(&mut self, from: &EventBatch, span: crate::OptSpan) -> crate::OptSpan {
        span.get().map(|s| self.span(from, s)).into()
    }

    /// Copies `entries` (a record's top level, a map's entries or an array's items) next to each
    /// other, their children after them, as decoders lay records out; returns their range.
    fn entries(&mut self, from: &EventBatch, entries: &[Field], depth: usize) -> (u32, u32) {
        let start = self.fields.len();
        self.fields.extend(entries.iter().map(|_| Field {
            name: Span::EMPTY,
            value: Value::Null,
        }));
        for (i, f) in entries.iter().enumerate() {
            let name = self.span(from, f.name);
            let value = match f.value {
                Value::Str(s) => Value::Str(self.span(from, s)),
                Value::Bytes(s) => Value::Bytes(self.span(from, s)),
                Value::Ext(t, s) => Value::Ext(t, self.span(from, s)),
                Value::Map(..) | Value::Array(..) if depth >= MAX_COPY_DEPTH => Value::Null,
                Value::Map(..) => {
                    let (a, b) = self.entries(from, from.children(f.value), depth + 1);
                    Value::Map(a, b)
                }
                Value::Array(..) => {
                    let (a, b) = self.entries(from, from.children(f.value), depth + 1);
                    Value::Array(a, b)
                }
                other => other,
            };
            self.fields[start + i] = Field { name, value };
        }
        (start as u32, (start + entries.len()) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_resolve_and_clamp() {
        let mut b = EventBatch::new(Bytes::from_static(b"hello world"), "src".into(), "test");
        b.events.push(Event {
            message: Span::new(6, 11).into(),
            ..Event::default()
        });
        assert_eq!(
            b.events[0].message.get().map(|m| b.str(m)),
            Some(&b"world"[..])
        );
        assert_eq!(b.str(Span::new(6, 99)), b"");
        assert!(b.sd_elements_of(&b.events[0]).is_empty());
        let only_none = b.retain_view(|_, _| false);
        assert!(only_none.is_empty());
        assert_eq!(only_none.arena, b.arena);
    }

    #[test]
    fn an_added_field_reaches_every_event_and_keeps_records_whole() {
        let mut b = EventBatch::new(Bytes::from_static(b"msgkv"), "src".into(), "test");
        b.fields = vec![
            Field {
                name: Span::new(3, 4),
                value: Value::Map(1, 2),
            },
            Field {
                name: Span::new(3, 4),
                value: Value::Str(Span::new(4, 5)),
            },
        ];
        let plain = Event {
            message: Span::new(0, 3).into(),
            ..Event::default()
        };
        let record = Event {
            fields: (0, 1),
            ..plain
        };
        b.events = vec![plain, record, plain];
        b.add_field("tls_subject", "CN=agent-7");
        assert_eq!(
            b.events[0].message.get().map(|m| b.str(m)),
            Some(&b"msg"[..])
        );
        for e in &b.events {
            match b.lookup(e, "tls_subject") {
                Some(Value::Str(s)) => assert_eq!(b.str(s), b"CN=agent-7"),
                other => panic!("{other:?}"),
            }
        }
        // The record keeps its entry, nested value and all.
        match b.lookup(&b.events[1], "k.k") {
            Some(Value::Str(s)) => assert_eq!(b.str(s), b"v"),
            other => panic!("{other:?}"),
        }
        assert_eq!(b.fields_of(&b.events[1]).len(), 2);
        assert_eq!(b.events[0].fields, b.events[2].fields, "shared");
    }

    #[test]
    fn a_set_field_replaces_or_keeps_and_skips_events_not_picked() {
        let mut b = EventBatch::new(Bytes::from_static(b"msgkv"), "src".into(), "test");
        b.fields = vec![Field {
            name: Span::new(3, 4),
            value: Value::Str(Span::new(4, 5)),
        }];
        let plain = Event {
            message: Span::new(0, 3).into(),
            ..Event::default()
        };
        let record = Event {
            fields: (0, 1),
            ..plain
        };
        b.events = vec![record, plain, record];
        b.set_field_where("k", "new", true, |i| i != 1);
        let k = |b: &EventBatch, i: usize| match b.lookup(&b.events[i], "k") {
            Some(Value::Str(s)) => Some(String::from_utf8_lossy(b.str(s)).into_owned()),
            _ => None,
        };
        assert_eq!(k(&b, 0).as_deref(), Some("new"));
        assert_eq!(b.fields_of(&b.events[0]).len(), 1, "replaced in place");
        assert_eq!(k(&b, 1), None, "not picked");
        let mut kept = b.clone();
        kept.set_field_where("k", "other", false, |_| true);
        assert_eq!(k(&kept, 0).as_deref(), Some("new"), "the record's own wins");
    }

    /// Events of two batches copied into one: every field, record, SD element, sender and time
    /// reads the same, and the copy's arena holds only what they use.
    #[test]
    fn copies_of_events_of_several_batches_read_as_the_originals() {
        let mut a = EventBatch::new(
            Bytes::from_static(b"ignored bytes host msg id p v k1 x"),
            "a".into(),
            "test",
        );
        a.received = Timestamp::from_nanos(5_000_000_000, 3);
        a.peers = vec![[192, 0, 2, 1].into()];
        a.sd_elements = vec![SdElement {
            id: Span::new(23, 25),
            params: (0, 1),
        }];
        a.sd_params = vec![SdParam {
            name: Span::new(26, 27),
            value: Span::new(28, 29),
            escaped: true,
        }];
        a.fields = vec![
            Field {
                name: Span::new(30, 32),
                value: Value::Map(1, 2),
            },
            Field {
                name: Span::new(33, 34),
                value: Value::Array(2, 3),
            },
            Field {
                name: Span::EMPTY,
                value: Value::Int(7),
            },
        ];
        a.events.push(Event {
            hostname: Span::new(14, 18).into(),
            message: Span::new(19, 22).into(),
            structured_data: Some((0, 1)),
            fields: (0, 1),
            peer: 0,
            ..Event::default()
        });
        let mut b = EventBatch::new(Bytes::from_static(b"second"), "b".into(), "test");
        b.events.push(Event {
            message: Span::new(0, 6).into(),
            timestamp: Some(Timestamp::from_nanos(9, 9)),
            ..Event::default()
        });
        let mut copy = BatchCopy::new();
        copy.push(&a, &a.events[0]);
        copy.push(&b, &b.events[0]);
        copy.push(&a, &a.events[0]);
        let out = copy.finish("r".into(), "test", Timestamp::default(), Finalizer::none());
        assert_eq!(out.len(), 3);
        assert!(
            out.arena.len() < a.arena.len() + b.arena.len(),
            "only what is used"
        );
        let e = out.events[0];
        assert_eq!(out.str(e.hostname.or_empty()), b"host");
        assert_eq!(out.str(e.message.or_empty()), b"msg");
        assert_eq!(out.time_of(&e), a.received, "the receive time is kept");
        assert_eq!(out.source_ip(&e), a.source_ip(&a.events[0]));
        let el = out.sd_elements_of(&e)[0];
        assert_eq!(out.str(el.id), b"id");
        let p = out.params_of(&el)[0];
        assert_eq!(
            (out.str(p.name), out.str(p.value), p.escaped),
            (&b"p"[..], &b"v"[..], true)
        );
        assert_eq!(out.lookup(&e, "k1.x.0"), Some(Value::Int(7)));
        let e = out.events[1];
        assert_eq!(out.str(e.message.or_empty()), b"second");
        assert_eq!(out.time_of(&e), Timestamp::from_nanos(9, 9));
        assert_eq!(out.source_ip(&e), None);
        assert_eq!(out.peers.len(), 1, "one sender, one entry");
        assert_eq!(out.lookup(&out.events[2], "k1.x.0"), Some(Value::Int(7)));
    }

    #[test]
    fn peers_are_shared_by_runs_of_the_same_sender() {
        let a: IpAddr = [192, 0, 2, 1].into();
        let b: IpAddr = [0xfe80, 0, 0, 0, 0, 0, 0, 1].into();
        let mut batch = EventBatch::new(Bytes::from_static(b"x"), "src".into(), "test");
        let idx: Vec<u16> = [Some(a), Some(a), None, Some(b), Some(a)]
            .into_iter()
            .map(|ip| batch.peer_index(ip))
            .collect();
        assert_eq!(idx, [0, 0, Event::NO_PEER, 1, 2]);
        assert_eq!(batch.peers, [a, b, a]);
        for (i, want) in idx.iter().zip([Some(a), Some(a), None, Some(b), Some(a)]) {
            let event = Event {
                peer: *i,
                ..Event::default()
            };
            assert_eq!(batch.source_ip(&event), want);
        }
        // An index past the table is no address, never a panic.
        let stray = Event {
            peer: 9,
            ..Event::default()
        };
        assert_eq!(batch.source_ip(&stray), None);
        // A view keeps the table, so its events keep their senders.
        batch.events.push(Event {
            peer: 1,
            ..Event::default()
        });
        let view = batch.retain_view(|_, _| true);
        assert_eq!(view.source_ip(&view.events[0]), Some(b));
    }

    #[test]
    fn events_without_a_timestamp_take_the_batch_receive_time() {
        let mut batch = EventBatch::new(Bytes::from_static(b"x"), "src".into(), "test");
        batch.received = Timestamp::from_nanos(42_000, 6);
        let own = Timestamp::from_nanos(7, 3);
        let with = Event {
            timestamp: Some(own),
            ..Event::default()
        };
        assert_eq!(batch.time_of(&with), own);
        assert_eq!(batch.time_of(&Event::default()), batch.received);
        assert_eq!(batch.retain_view(|_, _| true).received, batch.received);
    }

    /// A view of some events of a batch of records holds only their entries, nested ones
    /// included, and reads the same values through them.
    #[test]
    fn a_partial_view_takes_only_its_events_entries() {
        let mut b = EventBatch::new(Bytes::from_static(b"abcxyz"), "src".into(), "test");
        let name = |i: usize| Span::new(i, i + 1);
        // Event 0: {a: 1}; event 1: {b: {c: [x]}, a: "y"}; event 2: {z: true}.
        b.fields = vec![
            Field {
                name: name(0),
                value: Value::Int(1),
            },
            Field {
                name: name(1),
                value: Value::Map(3, 4),
            },
            Field {
                name: name(0),
                value: Value::Str(name(4)),
            },
            Field {
                name: name(2),
                value: Value::Array(4, 5),
            },
            Field {
                name: Span::EMPTY,
                value: Value::Str(name(3)),
            },
            Field {
                name: name(5),
                value: Value::Bool(true),
            },
        ];
        for fields in [(0, 1), (1, 3), (5, 6)] {
            b.events.push(Event {
                fields,
                ..Event::default()
            });
        }
        let mut i = 0;
        let view = b.retain_view(|_, _| {
            i += 1;
            i == 2
        });
        assert_eq!(view.len(), 1);
        assert_eq!(
            view.fields.len(),
            4,
            "only event 1's entries: {:?}",
            view.fields
        );
        let e = &view.events[0];
        assert_eq!(view.lookup(e, "a"), Some(Value::Str(name(4))));
        let Some(Value::Map(..)) = view.lookup(e, "b") else {
            panic!("b is a map")
        };
        let c = view.lookup(e, "b.c").map(|v| view.children(v).to_vec());
        assert_eq!(
            c,
            Some(vec![Field {
                name: Span::EMPTY,
                value: Value::Str(name(3))
            }])
        );
        // The events it leaves out are not read (their entries are gone).
        assert_eq!(view.lookup(e, "z"), None);
        // All of the batch: the table as it is.
        assert_eq!(b.retain_view(|_, _| true).fields, b.fields);
    }

    /// `{"a": {"b": [10, {"c": true}]}, "d": 1}` flattened as a decoder lays it out: a container's
    /// slots first, its children after them.
    #[test]
    fn lookup_walks_nested_maps_and_arrays() {
        let mut b = EventBatch::new(Bytes::from_static(b"abcd"), "src".into(), "test");
        let name = |i: usize| Span::new(i, i + 1);
        let item = |value| Field {
            name: Span::EMPTY,
            value,
        };
        b.fields = vec![
            Field {
                name: name(0),
                value: Value::Map(2, 3),
            },
            Field {
                name: name(3),
                value: Value::Int(1),
            },
            Field {
                name: name(1),
                value: Value::Array(3, 5),
            },
            item(Value::Int(10)),
            item(Value::Map(5, 6)),
            Field {
                name: name(2),
                value: Value::Bool(true),
            },
        ];
        b.events.push(Event {
            fields: (0, 2),
            ..Event::default()
        });
        let e = b.events[0];
        assert_eq!(b.lookup(&e, "d"), Some(Value::Int(1)));
        assert_eq!(b.lookup(&e, "a.b.0"), Some(Value::Int(10)));
        assert_eq!(b.lookup(&e, "a.b.1.c"), Some(Value::Bool(true)));
        assert_eq!(b.lookup(&e, "a.b.2"), None);
        assert_eq!(b.lookup(&e, "a.x"), None);
        assert_eq!(b.lookup(&e, "d.x"), None, "nothing below a scalar");
        assert_eq!(b.children(Value::Map(2, 3)).len(), 1);
        // A range out of the table is empty, never a panic.
        assert!(b.children(Value::Array(4, 99)).is_empty());
    }
}
