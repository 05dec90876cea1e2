//! File path templates: strftime specifiers and `{{ field }}` references (with a default:
//! `{{ field ?? "unknown" }}`), parsed at load time.
//!
//! ```text
//! /var/log/loghaul/%Y-%m-%d/{{ appname }}.jsonl
//! └Literal────────┘└Strftime┘└Literal┘└Field┘└Literal┘
//! ```
//!
//! Parsing once at load time means a bad specifier is a config error, not a runtime surprise, and
//! the sink renders by walking [`TemplatePart`]s with no parsing per event. Runs of specifiers and
//! the literal text between them are merged into one [`TemplatePart::Strftime`] fragment, so
//! `%Y-%m-%d` is formatted by one chrono call.

use std::fmt::Write as _;

use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, TimeZone};

/// Event fields a template may name; any other identifier is a key of the event's record (or a
/// dotted path into it).
pub const KNOWN_FIELDS: [&str; 10] = [
    "hostname",
    "message",
    "appname",
    "procid",
    "msgid",
    "facility",
    "severity",
    "source_ip",
    "source_type",
    "tag",
];

/// A parsed path template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathTemplate {
    /// The pieces, in order.
    pub parts: Vec<TemplatePart>,
    /// True when some part depends on the event's time.
    pub has_time: bool,
    /// True when some part depends on an event field.
    pub has_fields: bool,
}

/// One piece of a [`PathTemplate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplatePart {
    /// Text copied as is.
    Literal(String),
    /// A chrono format string fragment (one or more valid specifiers, maybe with text between).
    Strftime(String),
    /// An event field: one of [`KNOWN_FIELDS`] or an extra field's name.
    Field(String),
    /// `{{ name ?? "default" }}`: the field, or the default text where the field would render
    /// nothing (absent, null, empty, a map or an array).
    FieldOr(String, String),
}

impl TemplatePart {
    /// Whether the part reads an event field.
    pub fn is_field(&self) -> bool {
        matches!(self, TemplatePart::Field(_) | TemplatePart::FieldOr(..))
    }
}

/// Why a template was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateError {
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: String,
    /// Character offset of the problem in the template.
    pub offset: usize,
}

impl PathTemplate {
    /// Parses a template, returning it with warnings (field names that look like typos).
    ///
    /// # Errors
    ///
    /// The first invalid strftime specifier, malformed `{{ }}` or bad field name.
    pub fn parse(text: &str) -> Result<(PathTemplate, Vec<String>), TemplateError> {
        if text.trim().is_empty() {
            return Err(TemplateError {
                message: "path template is empty".to_owned(),
                hint: "give a file path, e.g. ./loghaul-data/%Y-%m-%d.jsonl".to_owned(),
                offset: 0,
            });
        }
        if text.ends_with('/') {
            return Err(TemplateError {
                message: "path template ends with `/`: it names a directory, not a file".to_owned(),
                hint: "add a file name, e.g. .../%Y-%m-%d.jsonl".to_owned(),
                offset: text.chars().count() - 1,
            });
        }
        let mut parts: Vec<TemplatePart> = Vec::new();
        let mut warnings = Vec::new();
        // (byte index, char offset) pairs so errors can point at a character.
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        let mut i = 0;
        while i < chars.len() {
            let (byte, c) = chars[i];
            if c == '{' && text[byte..].starts_with("{{") {
                let Some(close) = text[byte + 2..].find("}}") else {
                    return Err(TemplateError {
                        message: "unterminated `{{` in path template".to_owned(),
                        hint: "write a field reference as {{ appname }}".to_owned(),
                        offset: i,
                    });
                };
                let inner = text[byte + 2..byte + 2 + close].trim();
                match inner.split_once("??") {
                    Some((name, default)) => {
                        let name = name.trim();
                        check_field(name, i, &mut warnings)?;
                        let default = default.trim();
                        // Quoted as VRL and Jinja write it, or bare.
                        let default = default
                            .strip_prefix('"')
                            .and_then(|d| d.strip_suffix('"'))
                            .unwrap_or(default);
                        parts.push(TemplatePart::FieldOr(name.to_owned(), default.to_owned()));
                    }
                    None => {
                        check_field(inner, i, &mut warnings)?;
                        parts.push(TemplatePart::Field(inner.to_owned()));
                    }
                }
                let end = byte + 2 + close + 2;
                while i < chars.len() && chars[i].0 < end {
                    i += 1;
                }
            } else if c == '%' && chars.get(i + 1).is_some_and(|n| n.1 == '%') {
                push_literal(&mut parts, "%");
                i += 2;
            } else if c == '%' {
                let spec = strftime_spec(text, &chars, i)?;
                i += spec.chars().count();
                parts.push(TemplatePart::Strftime(spec));
            } else {
                let mut s = [0u8; 4];
                push_literal(&mut parts, c.encode_utf8(&mut s));
                i += 1;
            }
        }
        let parts = merge_strftime(parts);
        let has_time = parts.iter().any(|p| matches!(p, TemplatePart::Strftime(_)));
        let has_fields = parts.iter().any(TemplatePart::is_field);
        Ok((
            PathTemplate {
                parts,
                has_time,
                has_fields,
            },
            warnings,
        ))
    }

    /// Renders the path for an event at `time`, asking `field` for each field's value.
    ///
    /// Field values are made safe as one path component by [`push_path_component`].
    pub fn render<Tz: TimeZone>(
        &self,
        time: &DateTime<Tz>,
        mut field: impl FnMut(&str) -> Option<String>,
    ) -> String
    where
        Tz::Offset: std::fmt::Display,
    {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                TemplatePart::Literal(s) => out.push_str(s),
                // Every fragment was validated by `parse`, so formatting cannot fail.
                TemplatePart::Strftime(f) => {
                    let _ = write!(out, "{}", time.format(f));
                }
                TemplatePart::Field(name) => {
                    push_path_component(&mut out, field(name).as_deref().unwrap_or("").as_bytes())
                }
                TemplatePart::FieldOr(name, default) => {
                    let value = field(name).filter(|v| !v.is_empty());
                    push_path_component(&mut out, value.as_deref().unwrap_or(default).as_bytes())
                }
            }
        }
        out
    }
}

/// Appends `value` to `out` as one safe path component: bytes other than ASCII letters, digits,
/// `.`, `-` and `_` become `_`, at most 128 bytes are kept, and an empty, `.` or `..` value
/// becomes `-`, so an event can never steer a write outside the template's directories. The file
/// sink renders its paths through this function too.
pub fn push_path_component(out: &mut String, value: &[u8]) {
    let start = out.len();
    for &b in value.iter().take(128) {
        let keep = b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_');
        out.push(if keep { b as char } else { '_' });
    }
    if matches!(&out[start..], "" | "." | "..") {
        out.truncate(start);
        out.push('-');
    }
}

fn check_field(name: &str, offset: usize, warnings: &mut Vec<String>) -> Result<(), TemplateError> {
    let mut cs = name.chars();
    let valid = cs
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    if !valid {
        let hint = match crate::diagnostic::closest(name, KNOWN_FIELDS) {
            Some(c) => format!("did you mean '{{{{ {c} }}}}'?"),
            None => format!(
                "a field is one of {} or an extra field name matching [A-Za-z_][A-Za-z0-9_.]*",
                KNOWN_FIELDS.join(", ")
            ),
        };
        let message = if name.is_empty() {
            "empty field reference `{{ }}` in path template".to_owned()
        } else {
            format!("invalid field name `{name}` in path template")
        };
        return Err(TemplateError {
            message,
            hint,
            offset,
        });
    }
    if !KNOWN_FIELDS.contains(&name)
        && let Some(c) = crate::diagnostic::closest(name, KNOWN_FIELDS)
    {
        warnings.push(format!(
            "path template field `{name}` is not a standard field and will be looked up as an extra field; did you mean '{c}'?"
        ));
    }
    Ok(())
}

/// The strftime specifier starting at `chars[i]` (a `%`): the shortest prefix that chrono accepts.
fn strftime_spec(text: &str, chars: &[(usize, char)], i: usize) -> Result<String, TemplateError> {
    let start = chars[i].0;
    // Specifiers are at most 5 characters (`%:::z`); a shorter valid prefix wins, since a valid
    // specifier followed by literal text is also "valid".
    for len in 2..=5 {
        let end = match chars.get(i + len) {
            Some((byte, _)) => *byte,
            None if i + len == chars.len() => text.len(),
            None => break,
        };
        let frag = &text[start..end];
        if frag[1..].contains('%') {
            break;
        }
        if StrftimeItems::new(frag).all(|item| !matches!(item, Item::Error)) {
            return Ok(frag.to_owned());
        }
    }
    let shown: String = chars[i..].iter().take(2).map(|c| c.1).collect();
    Err(TemplateError {
        message: format!("invalid strftime specifier `{shown}` in path template"),
        hint:
            "use chrono's strftime specifiers, e.g. %Y %m %d %H %M %S %j; write %% for a literal %"
                .to_owned(),
        offset: i,
    })
}

fn push_literal(parts: &mut Vec<TemplatePart>, s: &str) {
    if let Some(TemplatePart::Literal(l)) = parts.last_mut() {
        l.push_str(s);
    } else {
        parts.push(TemplatePart::Literal(s.to_owned()));
    }
}

/// Folds `Strftime Literal Strftime` runs into one fragment; literals holding `%` stay apart
/// because inside a format string they would be read as specifiers.
fn merge_strftime(parts: Vec<TemplatePart>) -> Vec<TemplatePart> {
    let mut out: Vec<TemplatePart> = Vec::with_capacity(parts.len());
    let mut iter = parts.into_iter().peekable();
    while let Some(part) = iter.next() {
        match part {
            TemplatePart::Strftime(s) => {
                if let Some(TemplatePart::Strftime(prev)) = out.last_mut() {
                    prev.push_str(&s);
                } else {
                    out.push(TemplatePart::Strftime(s));
                }
            }
            TemplatePart::Literal(l) => {
                let between = matches!(out.last(), Some(TemplatePart::Strftime(_)))
                    && matches!(iter.peek(), Some(TemplatePart::Strftime(_)))
                    && !l.contains('%');
                match (between, out.last_mut()) {
                    (true, Some(TemplatePart::Strftime(prev))) => prev.push_str(&l),
                    _ => out.push(TemplatePart::Literal(l)),
                }
            }
            field => out.push(field),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn parts(t: &str) -> Vec<TemplatePart> {
        PathTemplate::parse(t).unwrap().0.parts
    }

    #[test]
    fn splits_and_merges() {
        use TemplatePart::*;
        let t = PathTemplate::parse("/var/log/loghaul/%Y-%m-%d/{{ appname }}.jsonl")
            .unwrap()
            .0;
        assert_eq!(
            t.parts,
            vec![
                Literal("/var/log/loghaul/".into()),
                Strftime("%Y-%m-%d".into()),
                Literal("/".into()),
                Field("appname".into()),
                Literal(".jsonl".into()),
            ]
        );
        assert!(t.has_time && t.has_fields);
        assert_eq!(parts("a.log"), vec![Literal("a.log".into())]);
        assert_eq!(parts("%H%M"), vec![Strftime("%H%M".into())]);
        assert_eq!(
            parts("100%%-%.3f"),
            vec![Literal("100%-".into()), Strftime("%.3f".into())]
        );
        assert_eq!(
            parts("x/%-d_%:z{{sd.id}}"),
            vec![
                Literal("x/".into()),
                Strftime("%-d_%:z".into()),
                Field("sd.id".into())
            ]
        );
        assert_eq!(
            parts("{{hostname}}{{tag}}"),
            vec![Field("hostname".into()), Field("tag".into())]
        );
        let plain = PathTemplate::parse("out.log").unwrap().0;
        assert!(!plain.has_time && !plain.has_fields);
    }

    #[test]
    fn rejects_bad_templates() {
        let e = PathTemplate::parse("logs/%Q.log").unwrap_err();
        assert_eq!(e.offset, 5);
        assert!(e.message.contains("`%Q`"), "{}", e.message);
        assert!(PathTemplate::parse("logs/%").is_err());
        assert!(
            PathTemplate::parse("logs/{{ app-name }}.log")
                .unwrap_err()
                .hint
                .contains("appname")
        );
        assert!(
            PathTemplate::parse("logs/{{ }}.log")
                .unwrap_err()
                .message
                .contains("empty")
        );
        assert!(
            PathTemplate::parse("logs/{{ appname.log")
                .unwrap_err()
                .message
                .contains("unterminated")
        );
        assert!(PathTemplate::parse("").is_err());
        assert!(PathTemplate::parse("logs/").is_err());
    }

    #[test]
    fn warns_on_near_misses() {
        let (_, w) = PathTemplate::parse("{{ appnme }}.log").unwrap();
        assert!(w[0].contains("did you mean 'appname'"), "{w:?}");
        let (_, w) = PathTemplate::parse("{{ sd.origin.ip }}.log").unwrap();
        assert!(w.is_empty());
    }

    #[test]
    fn renders_safely() {
        let t = PathTemplate::parse("d/%Y-%m-%d/{{ appname }}-{{ hostname }}.jsonl")
            .unwrap()
            .0;
        let time = Utc.with_ymd_and_hms(2024, 3, 9, 1, 2, 3).unwrap();
        let path = t.render(&time, |f| match f {
            "appname" => Some("../etc/passwd".into()),
            _ => None,
        });
        assert_eq!(path, "d/2024-03-09/.._etc_passwd--.jsonl");
        let mut out = String::new();
        push_path_component(&mut out, b"..");
        assert_eq!(out, "-");
    }
}
