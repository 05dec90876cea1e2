//! HTTP request bodies to events: bounded decompression ([`inflate`], gzip or zstd) and decoding
//! ([`decode`]) of JSON (an object or an array of objects), NDJSON and plain text, with the
//! request's own fields (a tag, headers, query parameters) added to every event.
//!
//! ```text
//! body (≤ max_body_size) ─► inflate (≤ limit + 1 bytes read) ─► decode whole ─► EventBatch
//! ```
//!
//! Invariants: nothing here panics on input; inflating never holds more than `limit + 1`
//! decompressed bytes, so a compression bomb costs its limit and no more; JSON nesting is bounded
//! by serde_json's recursion limit (128), so a deeply nested body is an error, not a stack
//! overflow; every span of the batch lies inside its arena.
//!
//! A body is decoded whole before anything is sent on, so a body with one bad line yields an
//! error naming it and no events at all. JSON records land in the batch's `fields` table the way
//! the forward decoder lays them out (a container's entries next to each other, nested
//! containers' children after them, the top-level `message` string lifted into the event's
//! message); strings are copied into the batch's arena. Text lines are spans of the body itself.

use crate::record::RecordBuilder;
use bytes::Bytes;
use loghaul_core::{Event, EventBatch, Field, OptSpan, Span, Value};

/// How the body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object, or an array of objects.
    Json,
    /// One JSON object per line.
    Ndjson,
    /// One event per line.
    Text,
}

/// Why a body was refused: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// 1-based line of the body.
    pub line: usize,
    /// Byte offset in the (decompressed) body.
    pub offset: usize,
    pub message: String,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {}, offset {}: {}",
            self.line, self.offset, self.message
        )
    }
}

impl std::error::Error for DecodeError {}

/// Fields every event of the request gets, as `(name, value)`.
pub type Extra<'a> = &'a [(&'a str, &'a str)];

/// The request-level part of decoding: the records, and what every event of the request gets.
struct Builder {
    records: RecordBuilder,
    /// The extra fields, already in the arena.
    extra: Vec<Field>,
    tag: OptSpan,
}

impl Builder {
    fn put(&mut self, s: &[u8]) -> Span {
        self.records.put(s)
    }

    /// What every event of the request starts from.
    fn base(&self) -> Event {
        Event {
            tag: self.tag,
            ..Event::default()
        }
    }
}

/// Where serde_json's (line, column) is in `body`.
fn offset_of(body: &[u8], line: usize, column: usize) -> usize {
    let mut offset = 0;
    for (i, l) in body.split(|&b| b == b'\n').enumerate() {
        if i + 1 == line {
            return (offset + column.saturating_sub(1)).min(body.len());
        }
        offset += l.len() + 1;
    }
    body.len()
}

/// Decodes `body` into a batch for source `source`, or says where it is wrong.
///
/// # Errors
///
/// The body is not what `format` says (bad JSON, a value that is not an object); nothing of it
/// is kept. A client fixing the body can retry.
pub fn decode(
    body: Bytes,
    format: Format,
    tag: Option<&str>,
    extra: Extra<'_>,
    source: std::sync::Arc<str>,
) -> Result<EventBatch, DecodeError> {
    let mut b = Builder {
        records: RecordBuilder::default(),
        extra: Vec::new(),
        tag: OptSpan::NONE,
    };
    if format == Format::Text {
        // Lines are spans of the body: the arena is the body, with the extras after it.
        b.records.arena = body.to_vec();
    }
    b.tag = tag.map_or(OptSpan::NONE, |t| b.put(t.as_bytes()).into());
    for (k, v) in extra {
        let name = b.put(k.as_bytes());
        let value = Value::Str(b.put(v.as_bytes()));
        b.extra.push(Field { name, value });
    }
    match format {
        Format::Text => {
            let start = b.records.fields.len() as u32;
            b.records.fields.extend_from_slice(&b.extra);
            let range = (start, b.records.fields.len() as u32);
            let mut pos = 0;
            while pos < body.len() {
                let end = memchr::memchr(b'\n', &body[pos..]).map_or(body.len(), |i| pos + i);
                let mut line_end = end;
                if line_end > pos && body[line_end - 1] == b'\r' {
                    line_end -= 1;
                }
                if line_end > pos {
                    b.records.events.push(Event {
                        message: Span::new(pos, line_end).into(),
                        fields: range,
                        tag: b.tag,
                        ..Event::default()
                    });
                }
                pos = end + 1;
            }
        }
        Format::Json => {
            let base = b.base();
            b.records
                .json_records(&body, base, &b.extra)
                .map_err(|e| DecodeError {
                    line: e.line(),
                    offset: offset_of(&body, e.line(), e.column()),
                    message: e.to_string(),
                })?;
        }
        Format::Ndjson => {
            let base = b.base();
            let mut pos = 0;
            let mut line = 0;
            while pos < body.len() {
                line += 1;
                let end = memchr::memchr(b'\n', &body[pos..]).map_or(body.len(), |i| pos + i);
                let text = &body[pos..end];
                if text.iter().all(u8::is_ascii_whitespace) {
                    pos = end + 1;
                    continue;
                }
                if let Err(e) = b.records.json_record(text, base, &b.extra) {
                    return Err(DecodeError {
                        line,
                        offset: pos + e.column().saturating_sub(1),
                        message: e.to_string(),
                    });
                }
                pos = end + 1;
            }
        }
    }
    Ok(b.records.finish(source, "http_server"))
}

pub use crate::inflate::{Encoding, InflateError};

/// Inflates `body` whole, reading at most one byte past `limit`, so a bomb costs `limit` bytes.
///
/// It blocks for as long as decompression takes; a caller on an async runtime runs it where
/// blocking is allowed. A caller that charges memory as it grows uses
/// [`crate::inflate::Inflater`] directly.
///
/// # Errors
///
/// [`InflateError::TooLarge`] when the body inflates past `limit`; [`InflateError::Broken`] when
/// it does not decompress.
pub fn inflate(encoding: Encoding, body: &[u8], limit: usize) -> Result<Bytes, InflateError> {
    let mut inflater = crate::inflate::Inflater::new(encoding, limit)?;
    let mut out = Vec::new();
    let mut input = body;
    loop {
        let before = out.len();
        let used = inflater.inflate(input, &mut out, 1 << 20)?;
        input = input.get(used..).unwrap_or_default();
        if used == 0 && out.len() == before {
            break;
        }
    }
    if !input.is_empty() {
        return Err(InflateError::Broken(
            "bytes after the end of the compressed data".to_owned(),
        ));
    }
    inflater.finish()?;
    Ok(Bytes::from(out))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn json(batch: &EventBatch) -> Vec<serde_json::Value> {
        batch
            .events
            .iter()
            .map(|e| {
                let mut out = Vec::new();
                crate::encode::encode_json(batch, e, &mut out);
                serde_json::from_slice(&out).unwrap()
            })
            .collect()
    }

    #[test]
    fn objects_arrays_and_lines_become_events_with_the_extras() {
        let extra = [("x_request", "r1")];
        let b = decode(
            Bytes::from_static(br#"[{"message":"a","n":{"deep":[1,2,{"k":null}]}},{"v":1.5}]"#),
            Format::Json,
            Some("app.web"),
            &extra,
            "s".into(),
        )
        .unwrap();
        let out = json(&b);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["message"], "a");
        assert_eq!(out[0]["n"]["deep"][2]["k"], serde_json::Value::Null);
        assert_eq!(out[0]["x_request"], "r1");
        assert_eq!(out[0]["tag"], "app.web");
        assert_eq!(out[1]["v"], 1.5);
        let b = decode(
            Bytes::from_static(b"{\"a\":1}\n\n{\"a\":2}\n"),
            Format::Ndjson,
            None,
            &[],
            "s".into(),
        )
        .unwrap();
        assert_eq!(json(&b).len(), 2);
        let b = decode(
            Bytes::from_static(b"one\r\ntwo\n\nthree"),
            Format::Text,
            None,
            &extra,
            "s".into(),
        )
        .unwrap();
        let out = json(&b);
        assert_eq!(
            out.iter()
                .map(|e| e["message"].as_str().unwrap())
                .collect::<Vec<_>>(),
            ["one", "two", "three"]
        );
        assert_eq!(out[2]["x_request"], "r1");
    }

    #[test]
    fn bad_json_names_its_line_and_offset() {
        let e = decode(
            Bytes::from_static(b"{\"a\":1}\n{\"a\":2}\n{\"a\":,}\n"),
            Format::Ndjson,
            None,
            &[],
            "s".into(),
        )
        .unwrap_err();
        assert_eq!(e.line, 3);
        assert_eq!(e.offset, 21);
        let e = decode(
            Bytes::from_static(b"[{\"a\":1},\n {\"b\": tru}]"),
            Format::Json,
            None,
            &[],
            "s".into(),
        )
        .unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.offset > 10 && e.offset < 22, "{e:?}");
        let deep = "[".repeat(100_000);
        assert!(
            decode(Bytes::from(deep), Format::Json, None, &[], "s".into()).is_err(),
            "nesting past serde_json's limit is refused, not a stack overflow"
        );
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn gzip_and_zstd_inflate_within_the_limit() {
        let body = b"{\"message\":\"hi\"}\n".repeat(10);
        assert_eq!(
            inflate(Encoding::Gzip, &gzip(&body), body.len()).unwrap(),
            body
        );
        // Members back to back are one body, as `cat a.gz b.gz` makes them.
        let two = [gzip(b"one\n"), gzip(b"two\n")].concat();
        assert_eq!(
            inflate(Encoding::Gzip, &two, 100).unwrap(),
            &b"one\ntwo\n"[..]
        );
        let z = zstd::bulk::compress(&body, 3).unwrap();
        assert_eq!(inflate(Encoding::Zstd, &z, body.len()).unwrap(), body);
        assert_eq!(inflate(Encoding::Gzip, &gzip(b""), 0).unwrap(), &b""[..]);
    }

    #[test]
    fn a_bomb_stops_one_byte_past_the_limit() {
        let zeros = vec![0u8; 4 << 20];
        assert_eq!(
            inflate(Encoding::Gzip, &gzip(&zeros), 1024),
            Err(InflateError::TooLarge)
        );
        let z = zstd::bulk::compress(&zeros, 3).unwrap();
        assert_eq!(
            inflate(Encoding::Zstd, &z, 1024),
            Err(InflateError::TooLarge)
        );
        assert_eq!(
            inflate(Encoding::Zstd, &z, usize::MAX).map(|b| b.len()),
            Ok(zeros.len())
        );
    }

    #[test]
    fn broken_bodies_say_why() {
        for encoding in [Encoding::Gzip, Encoding::Zstd] {
            assert!(matches!(
                inflate(encoding, b"not compressed at all", 100),
                Err(InflateError::Broken(_))
            ));
        }
        let mut cut = gzip(b"a longer body that is cut short");
        cut.truncate(cut.len() - 6);
        assert!(matches!(
            inflate(Encoding::Gzip, &cut, 100),
            Err(InflateError::Broken(_))
        ));
        assert_eq!(Encoding::from_name("zstd"), Some(Encoding::Zstd));
        assert_eq!(Encoding::from_name("br"), None);
        assert_eq!(Encoding::Gzip.to_string(), "gzip");
    }
}
