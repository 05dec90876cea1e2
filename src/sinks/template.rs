//! Templates over events (file paths, forward tags): how a `{{ name }}` renders for an event.
//!
//! A name the event's record has (a top-level key, or a dotted path into it) renders the
//! record's value, as in JSON output, where the record's keys shadow loghaul's own; otherwise it
//! is one of loghaul's fields. Scalars render as their text (`42`, `1.5`, `true`); maps, arrays,
//! null and absent fields render as `-`. Every value is made safe by [`push_path_component`]
//! (`[A-Za-z0-9._-]`, no `..`), which also keeps forward tags to the characters tags use.

use loghaul_config::{PathTemplate, TemplatePart, push_path_component};
use loghaul_core::names::{facility_name, severity_name};
use loghaul_core::{Event, EventBatch, OptSpan, Value};

/// Renders `template` for `event` (strftime parts in the event's time, UTC).
pub fn render(template: &PathTemplate, batch: &EventBatch, event: &Event, out: &mut String) {
    out.clear();
    let time = template.has_time.then(|| {
        chrono::DateTime::from_timestamp(batch.time_of(event).unix_seconds(), 0).unwrap_or_default()
    });
    for part in &template.parts {
        match part {
            TemplatePart::Literal(s) => out.push_str(s),
            TemplatePart::Strftime(fmt) => {
                if let Some(t) = &time {
                    use std::fmt::Write as _;
                    let _ = write!(out, "{}", t.format(fmt));
                }
            }
            TemplatePart::Field(name) => push_field(out, batch, event, name),
        }
    }
}

/// Appends a field's value to a path, made safe by [`push_path_component`].
///
/// A name the event's record has (a top-level key, or a dotted path into it) renders the
/// record's value, as in JSON output, where the record's keys shadow loghaul's own; otherwise
/// it is one of loghaul's fields. Scalars render as their text (`42`, `1.5`, `true`); maps,
/// arrays, null and absent fields render as `-`.
pub fn push_field(out: &mut String, batch: &EventBatch, event: &Event, name: &str) {
    let owned;
    let value: &[u8] = match batch.lookup(event, name) {
        Some(Value::Str(s) | Value::Bytes(s)) => batch.str(s),
        Some(Value::Bool(true)) => b"true",
        Some(Value::Bool(false)) => b"false",
        Some(Value::Int(i)) => {
            owned = i.to_string();
            owned.as_bytes()
        }
        Some(Value::UInt(u)) => {
            owned = u.to_string();
            owned.as_bytes()
        }
        Some(Value::Float(f)) if f.is_finite() => {
            owned = f.to_string();
            owned.as_bytes()
        }
        Some(_) => b"",
        None => {
            let span = |s: OptSpan| s.get().map_or(&[][..], |s| batch.str(s));
            match name {
                "hostname" => span(event.hostname),
                "appname" => span(event.appname),
                "procid" => span(event.procid),
                "msgid" => span(event.msgid),
                "tag" => span(event.tag),
                "message" => span(event.message),
                "facility" => event
                    .facility
                    .and_then(facility_name)
                    .unwrap_or("")
                    .as_bytes(),
                "severity" => event
                    .severity
                    .and_then(severity_name)
                    .unwrap_or("")
                    .as_bytes(),
                "source_type" => batch.source_type.as_bytes(),
                "source_ip" => {
                    owned = batch
                        .source_ip(event)
                        .map(|ip| ip.to_string())
                        .unwrap_or_default();
                    owned.as_bytes()
                }
                _ => b"",
            }
        }
    };
    push_path_component(out, value);
}
