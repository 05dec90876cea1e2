//! Templates over events (file paths, forward tags, HTTP URIs and header values): how a
//! `{{ name }}` (or `{{ name ?? "default" }}`) renders for an event.
//!
//! A name the event's record has (a top-level key, or a dotted path into it) renders the
//! record's value, as in JSON output, where the record's keys shadow loghaul's own; otherwise it
//! is one of loghaul's fields. Scalars render as their text (`42`, `1.5`, `true`); maps, arrays,
//! null and absent fields render as `-`. Every value is made safe by [`push_path_component`]
//! (`[A-Za-z0-9._-]`, no `..`), which also keeps forward tags to the characters tags use.

use loghaul_config::{PathTemplate, TemplateError, TemplatePart, push_path_component};
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
            TemplatePart::FieldOr(name, default) => {
                push_field_or(out, batch, event, name, default);
            }
        }
    }
}

/// Parses a template of `{{ field }}` references only, for text where `%` means itself (URIs
/// use it for percent-encoding, so strftime specifiers are not read there): the literal text
/// around the references is kept as written.
///
/// # Errors
///
/// An unterminated `{{` or a bad field name, at its character offset in `text`.
pub fn parse_fields(text: &str) -> Result<(PathTemplate, Vec<String>), TemplateError> {
    let mut parts = Vec::new();
    let mut warnings = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        let offset = text.len() - rest.len() + open;
        let chars_before = text[..offset].chars().count();
        let Some(close) = rest[open + 2..].find("}}") else {
            return Err(TemplateError {
                message: "unterminated `{{` in template".to_owned(),
                hint: "write a field reference as {{ appname }}".to_owned(),
                offset: chars_before,
            });
        };
        if open > 0 {
            parts.push(TemplatePart::Literal(rest[..open].to_owned()));
        }
        // The reference alone goes through the path-template parser, which owns the rules for
        // field names (and the hints for near misses); it holds no `%`, so no strftime either.
        let reference = &rest[open..open + 2 + close + 2];
        let (one, mut warned) = PathTemplate::parse(reference).map_err(|e| TemplateError {
            offset: chars_before + e.offset,
            ..e
        })?;
        parts.extend(one.parts);
        warnings.append(&mut warned);
        rest = &rest[open + 2 + close + 2..];
    }
    if !rest.is_empty() {
        parts.push(TemplatePart::Literal(rest.to_owned()));
    }
    let has_fields = parts.iter().any(TemplatePart::is_field);
    Ok((
        PathTemplate {
            parts,
            has_time: false,
            has_fields,
        },
        warnings,
    ))
}

/// Appends `template` rendered for `event` to `out` (unlike [`render`], which replaces `out`);
/// returns false when some field had nothing to render and became `-`.
pub fn append_checked(
    template: &PathTemplate,
    batch: &EventBatch,
    event: &Event,
    out: &mut String,
) -> bool {
    let mut complete = true;
    for part in &template.parts {
        match part {
            TemplatePart::Literal(s) => out.push_str(s),
            TemplatePart::Strftime(fmt) => {
                use std::fmt::Write as _;
                let t = chrono::DateTime::from_timestamp(batch.time_of(event).unix_seconds(), 0)
                    .unwrap_or_default();
                let _ = write!(out, "{}", t.format(fmt));
            }
            TemplatePart::Field(name) => complete &= push_field_checked(out, batch, event, name),
            TemplatePart::FieldOr(name, default) => {
                push_field_or(out, batch, event, name, default);
            }
        }
    }
    complete
}

/// Appends a field's value to a path, made safe by [`push_path_component`].
///
/// A name the event's record has (a top-level key, or a dotted path into it) renders the
/// record's value, as in JSON output, where the record's keys shadow loghaul's own; otherwise
/// it is one of loghaul's fields. Scalars render as their text (`42`, `1.5`, `true`); maps,
/// arrays, null and absent fields render as `-`.
pub fn push_field(out: &mut String, batch: &EventBatch, event: &Event, name: &str) {
    push_field_checked(out, batch, event, name);
}

/// [`push_field`], or `default` (made safe the same way) where the field has nothing to render.
pub fn push_field_or(
    out: &mut String,
    batch: &EventBatch,
    event: &Event,
    name: &str,
    default: &str,
) {
    let start = out.len();
    if !push_field_checked(out, batch, event, name) {
        out.truncate(start);
        push_path_component(out, default.as_bytes());
    }
}

/// [`push_field`], returning whether the field had a value (false when it rendered `-` for want
/// of one: absent, null, a map, an array or empty).
pub fn push_field_checked(out: &mut String, batch: &EventBatch, event: &Event, name: &str) -> bool {
    with_field(batch, event, name, |value| {
        push_path_component(out, value);
        !value.is_empty()
    })
}

/// Calls `f` with a field's value as it is, not made safe for a path (a Kafka message key or
/// header): the record's value first, then loghaul's field; empty for maps, arrays, null and
/// absent fields.
pub fn with_field<R>(
    batch: &EventBatch,
    event: &Event,
    name: &str,
    f: impl FnOnce(&[u8]) -> R,
) -> R {
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
    f(value)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use bytes::Bytes;
    use loghaul_core::Span;

    use super::*;

    #[test]
    fn field_only_templates_keep_percent_signs() {
        let (t, warnings) = parse_fields("http://h/a%20b/{{ appname }}?q=%Y").unwrap();
        assert_eq!(
            t.parts,
            [
                TemplatePart::Literal("http://h/a%20b/".into()),
                TemplatePart::Field("appname".into()),
                TemplatePart::Literal("?q=%Y".into()),
            ]
        );
        assert!(t.has_fields && !t.has_time && warnings.is_empty());
        let (_, warnings) = parse_fields("x{{ appnme }}").unwrap();
        assert!(warnings[0].contains("appname"), "{warnings:?}");
        // Offsets count characters of the whole text.
        assert_eq!(parse_fields("é/{{ a-b }}").unwrap_err().offset, 2);
        assert_eq!(parse_fields("ab{{ c").unwrap_err().offset, 2);
        let (plain, _) = parse_fields("no fields").unwrap();
        assert!(!plain.has_fields);
    }

    #[test]
    fn appending_says_whether_every_field_had_a_value() {
        let mut batch = EventBatch::new(Bytes::from_static(b"web"), "src".into(), "test");
        batch.events.push(Event {
            appname: Span::new(0, 3).into(),
            ..Event::default()
        });
        let (t, _) = parse_fields("/{{ appname }}/{{ hostname }}").unwrap();
        let mut out = "keep:".to_owned();
        assert!(!append_checked(&t, &batch, &batch.events[0], &mut out));
        assert_eq!(out, "keep:/web/-");
        let (t, _) = parse_fields("/{{ appname }}").unwrap();
        assert!(append_checked(&t, &batch, &batch.events[0], &mut out));
    }

    /// `{{ name ?? "default" }}` renders the field, or the default (made as safe as a value)
    /// where the field has nothing; the quotes are optional.
    #[test]
    fn a_field_with_a_default_renders_it_when_the_field_has_nothing() {
        let mut batch = EventBatch::new(Bytes::from_static(b"web"), "src".into(), "test");
        batch.events.push(Event {
            appname: Span::new(0, 3).into(),
            ..Event::default()
        });
        let (t, warnings) = parse_fields(
            "agent.{{ appname ?? \"unknown\" }}.{{ hostname ?? \"no host/x\" }}.{{ msgid??bare }}",
        )
        .unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            t.parts[1],
            TemplatePart::FieldOr("appname".into(), "unknown".into())
        );
        let mut out = String::new();
        assert!(append_checked(&t, &batch, &batch.events[0], &mut out));
        assert_eq!(out, "agent.web.no_host_x.bare");
        render(&t, &batch, &batch.events[0], &mut out);
        assert_eq!(out, "agent.web.no_host_x.bare");
        // The name is checked as any field's.
        assert!(parse_fields("{{ a-b ?? \"x\" }}").is_err());
    }
}
