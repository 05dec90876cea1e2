//! Events into an `ExportLogsServiceRequest` (binary protobuf): the `opentelemetry` sink's
//! encoding, the inverse of [`super::logs`], so an OTLP record that came in goes out as it was.
//!
//! Consecutive events with the same resource and scope share one `ResourceLogs`; a change of
//! either closes it. The request is built as the events come: closed groups are appended to the
//! caller's buffer, the open one is held here until [`LogsWriter::finish`].
//!
//! How each field is filled is the table in `docs/specs/otlp.md` ("loghaul events → OTLP").

use loghaul_core::{Event, EventBatch, Field, Value, names};

use super::logs::otlp_severity;
use super::wire::Writer;

/// Record keys that become fields of the log record, not attributes (what the source maps
/// OTLP's fields to).
const MAPPED: [&[u8]; 12] = [
    b"attributes",
    b"resources",
    b"scope",
    b"severity_number",
    b"severity_text",
    b"trace_id",
    b"span_id",
    b"flags",
    b"observed_timestamp",
    b"dropped_attributes_count",
    b"event_name",
    b"message",
];

/// Builds one request's `resource_logs`.
#[derive(Debug, Default)]
pub struct LogsWriter {
    /// The open group's `Resource` and `InstrumentationScope` messages (their bodies).
    resource: Vec<u8>,
    scope: Option<Vec<u8>>,
    /// The open group's `log_records` fields.
    records: Writer,
    /// Scratch for the next event's resource and scope.
    next_resource: Writer,
    next_scope: Writer,
    record: Writer,
}

impl LogsWriter {
    /// Bytes held for the open group.
    pub fn pending(&self) -> usize {
        self.records.buf.len() + self.resource.len()
    }

    /// Adds `event` as a log record; a group it does not belong to is closed into `out`.
    pub fn push(&mut self, batch: &EventBatch, event: &Event, out: &mut Vec<u8>) {
        let record = batch.fields_of(event);
        let find = |name: &[u8]| {
            record
                .iter()
                .find(|f| batch.str(f.name) == name)
                .map(|f| f.value)
        };
        // Resource: the record's `resources`, else hostname and appname.
        self.next_resource.buf.clear();
        match find(b"resources") {
            Some(v @ Value::Map(..)) => {
                for f in batch.children(v) {
                    key_value(&mut self.next_resource, 1, batch, f);
                }
            }
            _ => {
                for (key, span) in [
                    (&b"host.name"[..], event.hostname.get()),
                    (b"service.name", event.appname.get()),
                ] {
                    if let Some(s) = span {
                        self.next_resource.message(1, |w| {
                            w.bytes(1, key);
                            w.message(2, |w| w.bytes(1, batch.str(s)));
                        });
                    }
                }
            }
        }
        self.next_scope.buf.clear();
        let has_scope = match find(b"scope") {
            Some(v @ Value::Map(..)) => {
                for f in batch.children(v) {
                    match (batch.str(f.name), f.value) {
                        (b"name", Value::Str(s)) => self.next_scope.bytes(1, batch.str(s)),
                        (b"version", Value::Str(s)) => self.next_scope.bytes(2, batch.str(s)),
                        (b"attributes", m @ Value::Map(..)) => {
                            for a in batch.children(m) {
                                key_value(&mut self.next_scope, 3, batch, a);
                            }
                        }
                        _ => {}
                    }
                }
                true
            }
            _ => false,
        };
        let same = !self.records.buf.is_empty()
            && self.resource == self.next_resource.buf
            && self.scope.as_deref() == has_scope.then_some(&self.next_scope.buf[..]);
        if !same {
            self.close(out);
            self.resource.clear();
            self.resource.extend_from_slice(&self.next_resource.buf);
            self.scope = has_scope.then(|| self.next_scope.buf.clone());
        }
        self.record.buf.clear();
        log_record(&mut self.record, batch, event, record);
        self.records.bytes(2, &self.record.buf);
    }

    /// Closes the open group into `out`, which then holds every event pushed.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.close(out);
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if self.records.buf.is_empty() {
            return;
        }
        let mut w = Writer {
            buf: std::mem::take(out),
        };
        let (resource, scope, records) = (&self.resource, &self.scope, &self.records.buf);
        w.message(1, |w| {
            w.bytes(1, resource);
            w.message(2, |w| {
                if let Some(scope) = scope {
                    w.bytes(1, scope);
                }
                w.buf.extend_from_slice(records);
            });
        });
        *out = w.buf;
        self.records.buf.clear();
    }
}

fn log_record(w: &mut Writer, batch: &EventBatch, event: &Event, record: &[Field]) {
    let get = |name: &[u8]| {
        record
            .iter()
            .find(|f| batch.str(f.name) == name)
            .map(|f| f.value)
    };
    let time = batch.time_of(event).nanos;
    if time > 0 {
        w.fixed64(1, time as u64);
    }
    let observed = match get(b"observed_timestamp") {
        Some(Value::Str(s)) => crate::time::parse_rfc3339(batch.str(s), false)
            .and_then(|c| c.year.and_then(|y| c.to_timestamp(y, 0)))
            .map_or(batch.received.nanos, |t| t.nanos),
        _ => batch.received.nanos,
    };
    if observed > 0 {
        w.fixed64(11, observed as u64);
    }
    let number = match get(b"severity_number") {
        Some(Value::Int(n)) => Some(n),
        _ => event.severity.map(otlp_severity),
    };
    if let Some(n) = number.filter(|&n| n != 0) {
        w.int(2, n);
    }
    match get(b"severity_text") {
        Some(Value::Str(s)) => w.bytes(3, batch.str(s)),
        _ => {
            if let Some(name) = event.severity.and_then(names::severity_name) {
                w.bytes(3, name.as_bytes());
            }
        }
    }
    match (event.message.get(), get(b"message")) {
        (Some(m), _) => w.message(5, |w| w.bytes(1, batch.str(m))),
        (None, Some(v)) => w.message(5, |w| any_value(w, batch, v)),
        (None, None) => {}
    }
    // Attributes: the record's `attributes`, its other keys, then loghaul's own fields that
    // OTLP has no place for.
    if let Some(m @ Value::Map(..)) = get(b"attributes") {
        for f in batch.children(m) {
            key_value(w, 6, batch, f);
        }
    }
    for f in record {
        let name = batch.str(f.name);
        if !MAPPED.contains(&name) {
            key_value(w, 6, batch, f);
        }
    }
    let own = [
        (
            &b"syslog.facility"[..],
            event
                .facility
                .and_then(names::facility_name)
                .map(str::as_bytes),
        ),
        (b"syslog.procid", event.procid.get().map(|s| batch.str(s))),
        (b"syslog.msgid", event.msgid.get().map(|s| batch.str(s))),
        (b"fluent.tag", event.tag.get().map(|s| batch.str(s))),
    ];
    for (key, value) in own {
        if let Some(v) = value {
            w.message(6, |w| {
                w.bytes(1, key);
                w.message(2, |w| w.bytes(1, v));
            });
        }
    }
    if event.structured_data.is_some() {
        // RFC 5424 structured data: a map of SD-IDs to maps of their parameters.
        let elements = batch.sd_elements_of(event);
        if !elements.is_empty() {
            w.message(6, |w| {
                w.bytes(1, b"syslog.structured_data");
                w.message(2, |w| {
                    w.message(6, |w| {
                        for el in elements {
                            w.message(1, |w| {
                                w.bytes(1, batch.str(el.id));
                                w.message(2, |w| {
                                    w.message(6, |w| {
                                        for p in batch.params_of(el) {
                                            w.message(1, |w| {
                                                w.bytes(1, batch.str(p.name));
                                                let raw = batch.str(p.value);
                                                let value = if p.escaped {
                                                    crate::syslog::unescape_param(raw)
                                                } else {
                                                    raw.to_vec()
                                                };
                                                w.message(2, |w| w.bytes(1, &value));
                                            });
                                        }
                                    });
                                });
                            });
                        }
                    });
                });
            });
        }
    }
    if let Some(ip) = batch.source_ip(event) {
        let ip = ip.to_string();
        w.message(6, |w| {
            w.bytes(1, b"client.address");
            w.message(2, |w| w.bytes(1, ip.as_bytes()));
        });
    }
    if let Some(Value::Int(n)) = get(b"dropped_attributes_count") {
        w.uint(7, n as u64);
    }
    if let Some(Value::Int(n)) = get(b"flags") {
        w.fixed32(8, n as u32);
    }
    for (number, key) in [(9, &b"trace_id"[..]), (10, b"span_id")] {
        if let Some(Value::Str(s)) = get(key)
            && let Some(id) = unhex(batch.str(s))
        {
            w.bytes(number, &id);
        }
    }
    if let Some(Value::Str(s)) = get(b"event_name") {
        w.bytes(12, batch.str(s));
    }
}

fn unhex(s: &[u8]) -> Option<Vec<u8>> {
    if s.is_empty() || !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

/// A `KeyValue` field `number` for a record entry.
fn key_value(w: &mut Writer, number: u32, batch: &EventBatch, f: &Field) {
    w.message(number, |w| {
        w.bytes(1, batch.str(f.name));
        w.message(2, |w| any_value(w, batch, f.value));
    });
}

/// An `AnyValue`'s fields for `v` (null: none).
fn any_value(w: &mut Writer, batch: &EventBatch, v: Value) {
    match v {
        Value::Str(s) => w.bytes(1, batch.str(s)),
        Value::Bool(b) => w.uint(2, u64::from(b)),
        Value::Int(i) => w.int(3, i),
        // Past i64: OTLP has no unsigned integer; the nearest double.
        Value::UInt(u) => w.double(4, u as f64),
        Value::Float(f) => w.double(4, f),
        Value::Bytes(s) | Value::Ext(_, s) => w.bytes(7, batch.str(s)),
        Value::Null => {}
        Value::Array(..) => w.message(5, |w| {
            for item in batch.children(v) {
                w.message(1, |w| any_value(w, batch, item.value));
            }
        }),
        Value::Map(..) => w.message(6, |w| {
            for f in batch.children(v) {
                key_value(w, 1, batch, f);
            }
        }),
    }
}
