//! `ExportLogsServiceRequest` (binary protobuf) into a batch: one event per log record, its
//! strings spans into the request itself (the batch's arena starts with the request's bytes).
//!
//! [`decode_within`] builds a batch in one walk as long as it stays within a bound the caller
//! has charged to the memory budget (what exporters send always does). A request that would
//! take more is read twice: [`measure`] checks the whole structure and bounds what the batch
//! will take (records, record entries: a resource's attributes are repeated in each of its
//! records), so the caller charges the memory budget before [`decode`] builds anything.
//! The mapping of each field is the table in `docs/specs/otlp.md`.

use std::sync::Arc;

use bytes::Bytes;
use loghaul_core::{Event, EventBatch, Field, Span, Timestamp, Value};

use super::wire::{Reader, Wire, WireError};
use crate::record::RecordBuilder;

/// Deepest nesting of arrays and maps in a body or attribute value. A record nested deeper is
/// rejected (counted in the answer's `partial_success`); the rest of the request is kept.
pub const MAX_DEPTH: usize = 64;

/// Record entries a log record can have besides its attributes and body (see [`Names`]).
const OWN_ENTRIES: usize = 12;

/// Values shorter than this cannot nest deeper than [`MAX_DEPTH`]: each level of an array or
/// map takes at least four bytes (two fields' key and length).
const SHALLOW_BYTES: usize = 128;

/// What a request will take once decoded: an upper bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Measure {
    /// Log records in the request.
    pub records: usize,
    /// Record entries (every key, array item and nested value) over all events, the
    /// resource's and scope's repeated in each of their records.
    pub fields: usize,
}

impl Measure {
    /// The most memory the decoded batch takes beyond the request's own bytes.
    pub fn bytes(&self) -> usize {
        self.records
            .saturating_mul(std::mem::size_of::<Event>() + 64)
            .saturating_add(self.fields.saturating_mul(std::mem::size_of::<Field>()))
    }
}

/// A decoded request.
#[derive(Debug)]
pub struct Decoded {
    pub batch: EventBatch,
    /// Log records left out (nested deeper than [`MAX_DEPTH`]).
    pub rejected: usize,
}

/// Checks a request's structure and bounds its decoded size.
///
/// # Errors
///
/// The request is not a valid `ExportLogsServiceRequest` (truncated, a wrong wire type for a
/// known field); nothing of it can be kept.
pub fn measure(body: &[u8]) -> Result<Measure, WireError> {
    let mut m = Measure::default();
    let mut walk = Walk {
        b: None,
        names: Names::default(),
        max_records: 0,
        max_bytes: 0,
        taken: Measure::default(),
        over: false,
        attrs: Vec::new(),
        values: 0,
    };
    walk.request(Reader::new(body), &mut |records, fields| {
        m.records += records;
        m.fields = m.fields.saturating_add(fields);
    })?;
    Ok(m)
}

/// Decodes a request that [`measure`] accepted into one batch (`source_type` `opentelemetry`).
///
/// # Errors
///
/// As [`measure`].
pub fn decode(body: &Bytes, source: Arc<str>) -> Result<Decoded, WireError> {
    build(body, source, usize::MAX, usize::MAX)?.ok_or(WireError {
        offset: 0,
        what: "over an unbounded limit",
    })
}

/// Decodes a request in one walk if its batch takes at most `max_bytes` (as
/// [`Measure::bytes`] counts) and `max_records` records; `Ok(None)` as soon as it would take
/// more (nothing is kept: [`measure`] it, charge that, and [`decode`]).
///
/// # Errors
///
/// As [`measure`].
pub fn decode_within(
    body: &Bytes,
    source: Arc<str>,
    max_bytes: usize,
    max_records: usize,
) -> Result<Option<Decoded>, WireError> {
    build(body, source, max_bytes, max_records)
}

fn build(
    body: &Bytes,
    source: Arc<str>,
    max_bytes: usize,
    max_records: usize,
) -> Result<Option<Decoded>, WireError> {
    // Sized up front (grown as they filled, the arena and the tables were copied again at each
    // doubling), within what the caller charged: the walk gives up past that anyway.
    let records = count_records(body)
        .min(max_records)
        .min(max_bytes / (std::mem::size_of::<Event>() + 64));
    let fields = (body.len() / BYTES_PER_FIELD).min(max_bytes / std::mem::size_of::<Field>());
    let extra = records.saturating_mul(ARENA_PER_RECORD).min(body.len());
    let mut arena = Vec::with_capacity(body.len() + NAMES_BYTES + extra);
    arena.extend_from_slice(body);
    let mut b = RecordBuilder::over(arena);
    b.events.reserve(records);
    b.fields.reserve(fields);
    let names = Names::put(&mut b);
    let rejected = {
        let mut walk = Walk {
            b: Some(&mut b),
            names,
            max_records,
            max_bytes,
            taken: Measure::default(),
            over: false,
            attrs: Vec::new(),
            values: 0,
        };
        match walk.request(Reader::new(body), &mut |_, _| {}) {
            Ok(()) => {}
            Err(_) if walk.over => return Ok(None),
            Err(e) => return Err(e),
        }
        walk.names.rejected
    };
    let batch = b.finish(source, "opentelemetry");
    Ok(Some(Decoded { batch, rejected }))
}

/// The bytes [`Names::put`] appends to the arena (with room to spare).
const NAMES_BYTES: usize = 256;
/// Arena bytes a record may append: an observed timestamp's RFC 3339 text (the ids' hex is rare).
const ARENA_PER_RECORD: usize = 32;
/// Protobuf bytes per record entry, about, in what SDKs send: the fields table's first size.
const BYTES_PER_FIELD: usize = 16;

/// The log records a request holds, counted from its outer messages only (the records are
/// skipped by their lengths), as far as it reads (the walk says why a request does not).
fn count_records(body: &[u8]) -> usize {
    let mut n = 0usize;
    let mut r = Reader::new(body);
    while let Ok(Some((f, w))) = r.field() {
        let (1, Wire::Len(a, b)) = (f, w) else {
            continue;
        };
        let mut rl = r.nested(a, b);
        while let Ok(Some((f, w))) = rl.field() {
            let (2, Wire::Len(a, b)) = (f, w) else {
                continue;
            };
            let mut sl = rl.nested(a, b);
            while let Ok(Some((f, _))) = sl.field() {
                n += usize::from(f == 2);
            }
        }
    }
    n
}

/// The record keys loghaul writes, appended to the arena once per batch.
#[derive(Debug, Default, Clone, Copy)]
struct Names {
    attributes: Span,
    resources: Span,
    scope: Span,
    name: Span,
    version: Span,
    severity_number: Span,
    severity_text: Span,
    trace_id: Span,
    span_id: Span,
    flags: Span,
    observed_timestamp: Span,
    dropped_attributes_count: Span,
    event_name: Span,
    message: Span,
    /// Records left out so far (kept here: the walker's one piece of mutable state besides
    /// the builder).
    rejected: usize,
}

impl Names {
    fn put(b: &mut RecordBuilder) -> Names {
        Names {
            attributes: b.put(b"attributes"),
            resources: b.put(b"resources"),
            scope: b.put(b"scope"),
            name: b.put(b"name"),
            version: b.put(b"version"),
            severity_number: b.put(b"severity_number"),
            severity_text: b.put(b"severity_text"),
            trace_id: b.put(b"trace_id"),
            span_id: b.put(b"span_id"),
            flags: b.put(b"flags"),
            observed_timestamp: b.put(b"observed_timestamp"),
            dropped_attributes_count: b.put(b"dropped_attributes_count"),
            event_name: b.put(b"event_name"),
            message: b.put(b"message"),
            rejected: 0,
        }
    }
}

/// Walks a request: with a builder it builds, without one it only checks and counts.
struct Walk<'b> {
    b: Option<&'b mut RecordBuilder>,
    names: Names,
    /// Building: the most records and bytes ([`Measure::bytes`]) the batch may take before
    /// the walk gives up (`over`).
    max_records: usize,
    max_bytes: usize,
    /// Building: what the batch takes so far.
    taken: Measure,
    over: bool,
    /// A record's attributes, found before any is built (reused from record to record).
    attrs: Vec<(usize, usize)>,
    /// Key-values and values walked so far: the entries they take, as `depth_and_size` counts.
    values: usize,
}

/// What a resource or scope gives each of its records.
#[derive(Default, Clone, Copy)]
struct Shared {
    /// Entries each record repeats (the map's own entry and all it holds).
    fields: usize,
    hostname: Option<Span>,
    appname: Option<Span>,
}

fn wrong(r: &Reader<'_>, what: &'static str) -> WireError {
    WireError {
        offset: r.offset(),
        what,
    }
}

fn span(start: usize, end: usize) -> Span {
    Span::new(start, end)
}

impl Walk<'_> {
    /// `ExportLogsServiceRequest { repeated ResourceLogs resource_logs = 1; }`; `count` gets
    /// (records, entries) per scope.
    fn request(
        &mut self,
        mut r: Reader<'_>,
        count: &mut dyn FnMut(usize, usize),
    ) -> Result<(), WireError> {
        while let Some((n, w)) = r.field()? {
            if n == 1 {
                let Wire::Len(a, b) = w else {
                    return Err(wrong(&r, "resource_logs is not a message"));
                };
                self.resource_logs(r.nested(a, b), count)?;
            }
        }
        Ok(())
    }

    /// `ResourceLogs { Resource resource = 1; repeated ScopeLogs scope_logs = 2; }`: the
    /// resource is read first wherever it is, since every record repeats it.
    fn resource_logs(
        &mut self,
        r: Reader<'_>,
        count: &mut dyn FnMut(usize, usize),
    ) -> Result<(), WireError> {
        let mark = self.b.as_deref().map_or(0, RecordBuilder::nested_mark);
        let mut resource = None;
        let mut shared = Shared::default();
        let mut it = r;
        while let Some((n, w)) = it.field()? {
            if n == 1 {
                let Wire::Len(a, b) = w else {
                    return Err(wrong(&it, "resource is not a message"));
                };
                // `Resource { repeated KeyValue attributes = 1; }`
                let mut res = it.nested(a, b);
                let mut entries = self.b.as_deref_mut().map(RecordBuilder::scratch);
                let mut fields = 1;
                while let Some((n, w)) = res.field()? {
                    if n == 1 {
                        let Wire::Len(a, b) = w else {
                            return Err(wrong(&res, "an attribute is not a message"));
                        };
                        let (field, size) = self.key_value(res.nested(a, b), 1, true)?;
                        fields += size;
                        if let Value::Str(v) = field.value {
                            let key = res.bytes(field.name.start as usize, field.name.end as usize);
                            if key == b"host.name" {
                                shared.hostname = Some(v);
                            } else if key == b"service.name" {
                                shared.appname = Some(v);
                            }
                        }
                        if let Some(e) = entries.as_mut() {
                            e.push(field);
                        }
                    }
                }
                resource = match (entries, self.b.as_deref_mut()) {
                    (Some(e), Some(b)) => Some(b.close_map(e)),
                    _ => None,
                };
                shared.fields = fields;
            }
        }
        let mut it = r;
        while let Some((n, w)) = it.field()? {
            if n == 2 {
                let Wire::Len(a, b) = w else {
                    return Err(wrong(&it, "scope_logs is not a message"));
                };
                self.scope_logs(it.nested(a, b), resource, shared, count)?;
            }
        }
        if let Some(b) = self.b.as_deref_mut() {
            b.forget_nested(mark);
        }
        Ok(())
    }

    /// `ScopeLogs { InstrumentationScope scope = 1; repeated LogRecord log_records = 2; }`.
    fn scope_logs(
        &mut self,
        r: Reader<'_>,
        resource: Option<Value>,
        shared: Shared,
        count: &mut dyn FnMut(usize, usize),
    ) -> Result<(), WireError> {
        let mark = self.b.as_deref().map_or(0, RecordBuilder::nested_mark);
        let mut scope = None;
        let mut scope_fields = 0;
        let mut it = r;
        while let Some((n, w)) = it.field()? {
            if n == 1 {
                let Wire::Len(a, b) = w else {
                    return Err(wrong(&it, "scope is not a message"));
                };
                let (value, size) = self.scope(it.nested(a, b))?;
                scope = value;
                scope_fields = size;
            }
        }
        let mut extra = [Field {
            name: self.names.resources,
            value: Value::Null,
        }; 2];
        let mut n_extra = 0;
        if let Some(res) = resource {
            extra[n_extra].value = res;
            n_extra += 1;
        }
        if let Some(s) = scope {
            extra[n_extra] = Field {
                name: self.names.scope,
                value: s,
            };
            n_extra += 1;
        }
        // The records' own containers come after the scope's, which every record keeps.
        let record_mark = self.b.as_deref().map_or(0, RecordBuilder::nested_mark);
        let per_record = shared.fields + scope_fields;
        let mut records = 0;
        let mut fields = 0usize;
        let mut it = r;
        while let Some((n, w)) = it.field()? {
            if n == 2 {
                let Wire::Len(a, b) = w else {
                    return Err(wrong(&it, "a log record is not a message"));
                };
                let size =
                    self.log_record(it.nested(a, b), shared, &extra[..n_extra], record_mark)?;
                records += 1;
                fields = fields.saturating_add(size + per_record);
                if self.b.is_some() {
                    self.taken.records += 1;
                    self.taken.fields = self.taken.fields.saturating_add(size + per_record);
                    if self.taken.records > self.max_records || self.taken.bytes() > self.max_bytes
                    {
                        self.over = true;
                        return Err(wrong(&it, "over the decode limit"));
                    }
                }
            }
        }
        count(records, fields);
        if let Some(b) = self.b.as_deref_mut() {
            b.forget_nested(mark);
        }
        Ok(())
    }

    /// `InstrumentationScope { string name = 1; string version = 2; repeated KeyValue
    /// attributes = 3; }` as a map of what it has (`None` when it has nothing), and its size.
    fn scope(&mut self, mut r: Reader<'_>) -> Result<(Option<Value>, usize), WireError> {
        let mut entries = self.b.as_deref_mut().map(RecordBuilder::scratch);
        let mut attrs = self.b.as_deref_mut().map(RecordBuilder::scratch);
        let mut size = 1;
        let mut any_attr = false;
        while let Some((n, w)) = r.field()? {
            match (n, w) {
                (1 | 2, Wire::Len(a, b)) => {
                    size += 1;
                    if let Some(e) = entries.as_mut()
                        && a < b
                    {
                        let name = if n == 1 {
                            self.names.name
                        } else {
                            self.names.version
                        };
                        e.push(Field {
                            name,
                            value: Value::Str(span(a, b)),
                        });
                    }
                }
                (3, Wire::Len(a, b)) => {
                    let (field, s) = self.key_value(r.nested(a, b), 2, true)?;
                    size += s;
                    any_attr = true;
                    if let Some(e) = attrs.as_mut() {
                        e.push(field);
                    }
                }
                (1..=3, _) => return Err(wrong(&r, "a scope field has the wrong wire type")),
                _ => {}
            }
        }
        size += 1;
        let Some(b) = self.b.as_deref_mut() else {
            return Ok((None, size));
        };
        let (Some(mut entries), Some(attrs)) = (entries, attrs) else {
            return Ok((None, size));
        };
        if any_attr {
            let value = b.close_map(attrs);
            entries.push(Field {
                name: self.names.attributes,
                value,
            });
        }
        if entries.is_empty() {
            return Ok((None, size));
        }
        Ok((Some(b.close_map(entries)), size))
    }

    /// One `LogRecord`: an event (or a rejected record), and the entries it takes.
    fn log_record(
        &mut self,
        r: Reader<'_>,
        shared: Shared,
        extra: &[Field],
        mark: usize,
    ) -> Result<usize, WireError> {
        let mut time = 0u64;
        let mut observed = 0u64;
        let mut severity_number: Option<i64> = None;
        let mut severity_text = None;
        let mut body = None;
        let mut dropped = 0u64;
        let mut flags = 0u32;
        let mut trace_id = None;
        let mut span_id = None;
        let mut event_name = None;
        let mut attrs_at = std::mem::take(&mut self.attrs);
        attrs_at.clear();
        let mut it = r;
        while let Some((n, w)) = it.field()? {
            match (n, w) {
                (1, Wire::Fixed64(v)) => time = v,
                (11, Wire::Fixed64(v)) => observed = v,
                (2, Wire::Varint(v)) => severity_number = Some(v as i32 as i64),
                (3, Wire::Len(a, b)) => severity_text = Some(span(a, b)),
                (5, Wire::Len(a, b)) => body = Some((a, b)),
                (6, Wire::Len(a, b)) => attrs_at.push((a, b)),
                (7, Wire::Varint(v)) => dropped = v & u64::from(u32::MAX),
                (8, Wire::Fixed32(v)) => flags = v,
                (9, Wire::Len(a, b)) => trace_id = Some((a, b)),
                (10, Wire::Len(a, b)) => span_id = Some((a, b)),
                (12, Wire::Len(a, b)) => event_name = Some(span(a, b)),
                (1..=3 | 5..=12, _) => {
                    return Err(wrong(&it, "a log record field has the wrong wire type"));
                }
                _ => {}
            }
        }
        // Too deep anywhere: the whole record is left out, and nothing of it was built. A value
        // shorter than SHALLOW_BYTES cannot nest that deep (a level takes at least four bytes),
        // nor can one without containers (a long string), so building walks only the others
        // first; measuring walks them all.
        let building = self.b.is_some();
        let mut size = OWN_ENTRIES;
        let mut deep = false;
        let values = attrs_at
            .iter()
            .map(|&(a, b)| (a, b, Kind::KeyValue))
            .chain(body.map(|(a, b)| (a, b, Kind::AnyValue)));
        for (a, b, kind) in values {
            if building && (b - a < SHALLOW_BYTES || flat(r.nested(a, b), kind)) {
                continue;
            }
            match depth_and_size(r.nested(a, b), kind, 1)? {
                // Building counts every value's entries as it goes.
                Some(s) if !building => size += s,
                Some(_) => {}
                None => deep = true,
            }
        }
        if deep {
            self.names.rejected += 1;
            self.attrs = attrs_at;
            return Ok(0);
        }
        if self.b.is_none() {
            self.attrs = attrs_at;
            return Ok(size);
        }
        let names = self.names;
        let mut event = Event {
            hostname: shared.hostname.into(),
            appname: shared.appname.into(),
            ..Event::default()
        };
        let when = if time != 0 { time } else { observed };
        if when != 0 {
            event.timestamp = Some(Timestamp::from_nanos(clamp(when), 9));
        }
        // Every value's entries, counted as it is built (the walk above only looked for depth).
        let counted = self.values;
        let mut entries = self.scratch();
        if let Some((a, b)) = body {
            match self.any_value(r.nested(a, b), 1)? {
                Value::Str(s) => event.message = s.into(),
                Value::Null => {}
                v => entries.push(Field {
                    name: names.message,
                    value: v,
                }),
            }
        }
        if let Some(n) = severity_number.filter(|&n| n != 0) {
            entries.push(Field {
                name: names.severity_number,
                value: Value::Int(n),
            });
        }
        if let Some(s) = severity_text.filter(|s| !s.is_empty()) {
            entries.push(Field {
                name: names.severity_text,
                value: Value::Str(s),
            });
        }
        event.severity = severity_number.and_then(syslog_severity).or_else(|| {
            severity_text.and_then(|s| severity_by_name(r.bytes(s.start as usize, s.end as usize)))
        });
        if !attrs_at.is_empty() {
            let mut attrs = self.scratch();
            for &(a, b) in &attrs_at {
                let (field, _) = self.key_value(r.nested(a, b), 1, false)?;
                attrs.push(field);
            }
            let value = self.close_map(attrs);
            entries.push(Field {
                name: names.attributes,
                value,
            });
        }
        size = size.saturating_add(self.values - counted);
        for (id, name) in [(trace_id, names.trace_id), (span_id, names.span_id)] {
            let Some((a, b)) = id else { continue };
            let raw = r.bytes(a, b);
            if raw.iter().all(|&x| x == 0) {
                continue;
            }
            let value = self.hex(raw);
            entries.push(Field { name, value });
        }
        if flags != 0 {
            entries.push(Field {
                name: names.flags,
                value: Value::Int(i64::from(flags)),
            });
        }
        if observed != 0 {
            let value = self.rfc3339(observed);
            entries.push(Field {
                name: names.observed_timestamp,
                value,
            });
        }
        if dropped != 0 {
            entries.push(Field {
                name: names.dropped_attributes_count,
                value: Value::Int(dropped as i64),
            });
        }
        if let Some(s) = event_name.filter(|s| !s.is_empty()) {
            entries.push(Field {
                name: names.event_name,
                value: Value::Str(s),
            });
        }
        if let Some(b) = self.b.as_deref_mut() {
            b.push_record(event, entries, extra, mark);
        }
        self.attrs = attrs_at;
        Ok(size)
    }

    fn scratch(&mut self) -> Vec<Field> {
        self.b
            .as_deref_mut()
            .map(RecordBuilder::scratch)
            .unwrap_or_default()
    }

    fn close_map(&mut self, entries: Vec<Field>) -> Value {
        match self.b.as_deref_mut() {
            Some(b) => b.close_map(entries),
            None => Value::Null,
        }
    }

    fn hex(&mut self, raw: &[u8]) -> Value {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let Some(b) = self.b.as_deref_mut() else {
            return Value::Null;
        };
        let start = b.arena.len();
        for &x in raw {
            b.arena.push(HEX[usize::from(x >> 4)]);
            b.arena.push(HEX[usize::from(x & 15)]);
        }
        Value::Str(span(start, b.arena.len()))
    }

    fn rfc3339(&mut self, nanos: u64) -> Value {
        let Some(b) = self.b.as_deref_mut() else {
            return Value::Null;
        };
        let start = b.arena.len();
        crate::time::write_rfc3339(Timestamp::from_nanos(clamp(nanos), 9), &mut b.arena);
        Value::Str(span(start, b.arena.len()))
    }

    /// `KeyValue { string key = 1; AnyValue value = 2; }`, and how many entries it takes.
    /// A `KeyValue` and the entries it takes: always when only measuring, and when building
    /// only if `sized` (a resource's and a scope's, which every record repeats; a record's own
    /// were sized before it was built).
    fn key_value(
        &mut self,
        mut r: Reader<'_>,
        depth: usize,
        sized: bool,
    ) -> Result<(Field, usize), WireError> {
        self.values += 1;
        let mut key = Span::EMPTY;
        let mut value = None;
        while let Some((n, w)) = r.field()? {
            match (n, w) {
                (1, Wire::Len(a, b)) => key = span(a, b),
                (2, Wire::Len(a, b)) => {
                    // A value the last one replaces is not built, but checked and counted as
                    // measuring does (a record's values are not always walked before).
                    if let Some((x, y)) = value
                        && self.b.is_some()
                        && !sized
                    {
                        let size = depth_and_size(r.nested(x, y), Kind::AnyValue, depth)?
                            .ok_or_else(|| wrong(&r, "a value nests deeper than 64 levels"))?;
                        self.values += size;
                    }
                    value = Some((a, b));
                }
                (1 | 2, _) => return Err(wrong(&r, "a key-value field has the wrong wire type")),
                _ => {}
            }
        }
        let Some((a, b)) = value else {
            return Ok((
                Field {
                    name: key,
                    value: Value::Null,
                },
                1,
            ));
        };
        if self.b.is_none() {
            let size = depth_and_size(r.nested(a, b), Kind::AnyValue, depth)?
                .ok_or_else(|| wrong(&r, "an attribute nests deeper than 64 levels"))?;
            return Ok((
                Field {
                    name: key,
                    value: Value::Null,
                },
                size + 1,
            ));
        }
        let value = self.any_value(r.nested(a, b), depth)?;
        let size = if sized {
            // any_value refused what nests too deep: this finds a size.
            depth_and_size(r.nested(a, b), Kind::AnyValue, depth)?.map_or(0, |s| s + 1)
        } else {
            0
        };
        Ok((Field { name: key, value }, size))
    }

    /// `AnyValue`: one of string (1), bool (2), int64 (3), double (4), ArrayValue (5),
    /// KeyValueList (6), bytes (7); none set is null. The last one set wins, as protobuf's
    /// `oneof` says.
    fn any_value(&mut self, mut r: Reader<'_>, depth: usize) -> Result<Value, WireError> {
        if depth > MAX_DEPTH {
            return Err(wrong(&r, "a value nests deeper than 64 levels"));
        }
        self.values += 1;
        let mut value = Value::Null;
        while let Some((n, w)) = r.field()? {
            value = match (n, w) {
                (1, Wire::Len(a, b)) => Value::Str(span(a, b)),
                (2, Wire::Varint(v)) => Value::Bool(v != 0),
                (3, Wire::Varint(v)) => Value::Int(v as i64),
                (4, Wire::Fixed64(v)) => Value::Float(f64::from_bits(v)),
                (7, Wire::Len(a, b)) => Value::Bytes(span(a, b)),
                (5, Wire::Len(a, b)) => {
                    // `ArrayValue { repeated AnyValue values = 1; }`
                    let mut inner = r.nested(a, b);
                    let mut items = self.scratch();
                    while let Some((n, w)) = inner.field()? {
                        if n == 1 {
                            let Wire::Len(x, y) = w else {
                                return Err(wrong(&inner, "an array item is not a message"));
                            };
                            let v = self.any_value(inner.nested(x, y), depth + 1)?;
                            items.push(Field {
                                name: Span::EMPTY,
                                value: v,
                            });
                        }
                    }
                    match self.b.as_deref_mut() {
                        Some(b) => b.close_array(items),
                        None => Value::Null,
                    }
                }
                (6, Wire::Len(a, b)) => {
                    // `KeyValueList { repeated KeyValue values = 1; }`
                    let mut inner = r.nested(a, b);
                    let mut entries = self.scratch();
                    while let Some((n, w)) = inner.field()? {
                        if n == 1 {
                            let Wire::Len(x, y) = w else {
                                return Err(wrong(&inner, "a map entry is not a message"));
                            };
                            let (f, _) = self.key_value(inner.nested(x, y), depth + 1, false)?;
                            entries.push(f);
                        }
                    }
                    self.close_map(entries)
                }
                (1..=7, _) => return Err(wrong(&r, "a value field has the wrong wire type")),
                _ => value,
            };
        }
        Ok(value)
    }
}

#[derive(Clone, Copy)]
enum Kind {
    AnyValue,
    KeyValue,
}

/// Whether a value (or a key-value's value) holds no array or map: a scalar or a string,
/// however long. `false` when unsure (a malformed value too: [`depth_and_size`] says why).
fn flat(mut r: Reader<'_>, kind: Kind) -> bool {
    loop {
        match (kind, r.field()) {
            (_, Ok(None)) => return true,
            (Kind::KeyValue, Ok(Some((2, Wire::Len(a, b)))))
                if !flat(r.nested(a, b), Kind::AnyValue) =>
            {
                return false;
            }
            (Kind::AnyValue, Ok(Some((5 | 6, _)))) | (_, Err(_)) => return false,
            _ => {}
        }
    }
}

/// Entries a value takes, or `None` past [`MAX_DEPTH`]; checks its structure too.
fn depth_and_size(mut r: Reader<'_>, kind: Kind, depth: usize) -> Result<Option<usize>, WireError> {
    if depth > MAX_DEPTH {
        return Ok(None);
    }
    let mut size = 1usize;
    while let Some((n, w)) = r.field()? {
        let inner = match (kind, n, w) {
            (Kind::KeyValue, 2, Wire::Len(a, b)) => Some((Kind::AnyValue, a, b, depth)),
            (Kind::AnyValue, 5 | 6, Wire::Len(a, b)) => {
                // The container's items.
                let mut list = r.nested(a, b);
                let item = if n == 5 {
                    Kind::AnyValue
                } else {
                    Kind::KeyValue
                };
                while let Some((m, w)) = list.field()? {
                    if m == 1 {
                        let Wire::Len(x, y) = w else {
                            return Err(wrong(&list, "a container item is not a message"));
                        };
                        match depth_and_size(list.nested(x, y), item, depth + 1)? {
                            Some(s) => size = size.saturating_add(s),
                            None => return Ok(None),
                        }
                    }
                }
                None
            }
            (Kind::KeyValue, 1, Wire::Len(..))
            | (Kind::AnyValue, 1 | 7, Wire::Len(..))
            | (Kind::AnyValue, 2 | 3, Wire::Varint(_))
            | (Kind::AnyValue, 4, Wire::Fixed64(_)) => None,
            (Kind::KeyValue, 1 | 2, _) => {
                return Err(wrong(&r, "a key-value field has the wrong wire type"));
            }
            (Kind::AnyValue, 1..=7, _) => {
                return Err(wrong(&r, "a value field has the wrong wire type"));
            }
            _ => None,
        };
        if let Some((k, a, b, d)) = inner {
            match depth_and_size(r.nested(a, b), k, d)? {
                Some(s) => size = size.saturating_add(s),
                None => return Ok(None),
            }
        }
    }
    Ok(Some(size))
}

/// OTLP's severity number as a syslog severity: TRACE and DEBUG are debug (7), INFO info
/// (6), WARN warning (4), ERROR err (3), FATAL crit (2).
pub fn syslog_severity(number: i64) -> Option<u8> {
    match number {
        1..=8 => Some(7),
        9..=12 => Some(6),
        13..=16 => Some(4),
        17..=20 => Some(3),
        21..=24 => Some(2),
        _ => None,
    }
}

/// A severity text (`WARN`, `error`, `Fatal`...) as a syslog severity, when the number is
/// unset.
fn severity_by_name(text: &[u8]) -> Option<u8> {
    let mut lower = [0u8; 8];
    if text.len() > lower.len() {
        return None;
    }
    for (l, c) in lower.iter_mut().zip(text) {
        *l = c.to_ascii_lowercase();
    }
    match &lower[..text.len()] {
        b"trace" | b"debug" => Some(7),
        b"info" => Some(6),
        b"notice" => Some(5),
        b"warn" | b"warning" => Some(4),
        b"error" | b"err" => Some(3),
        b"fatal" | b"critical" | b"crit" => Some(2),
        b"alert" => Some(1),
        b"emerg" => Some(0),
        _ => None,
    }
}

/// A syslog severity as OTLP's number (the first of its range; notice is INFO2, alert FATAL2,
/// emerg FATAL4).
pub fn otlp_severity(severity: u8) -> i64 {
    match severity {
        0 => 24,
        1 => 22,
        2 => 21,
        3 => 17,
        4 => 13,
        5 => 10,
        6 => 9,
        _ => 5,
    }
}

/// Nanoseconds since the epoch as loghaul's signed count (times past 2262 are clamped).
fn clamp(nanos: u64) -> i64 {
    i64::try_from(nanos).unwrap_or(i64::MAX)
}
