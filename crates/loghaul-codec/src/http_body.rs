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

/// At most how much a body decodes to, judged from its bytes without parsing them: a server
/// charges it to its memory budget before decoding, and the decoder reserves it, so that
/// decoding allocates nothing more.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Estimate {
    /// Events: exactly the lines that are not blank (NDJSON, text), at most the objects (JSON).
    pub events: usize,
    /// Fields: at most one per member, array item or extra field.
    pub fields: usize,
    /// Bytes the arena takes: at most the body (strings are copied, never grown) and the extras.
    pub arena: usize,
}

impl Estimate {
    /// The bytes the decoded batch may hold (events, fields and arena).
    pub fn bytes(&self) -> usize {
        self.events
            .saturating_mul(std::mem::size_of::<Event>())
            .saturating_add(self.fields.saturating_mul(std::mem::size_of::<Field>()))
            .saturating_add(self.arena)
    }
}

/// How many times `a`, `b` or `c` occur in `bytes` (written so that the compiler vectorises it:
/// it runs at several GB/s, a few percent of what parsing the same bytes costs).
fn count3(bytes: &[u8], a: u8, b: u8, c: u8) -> usize {
    let mut n = 0usize;
    for chunk in bytes.chunks(255) {
        let mut lane = 0u8;
        for &x in chunk {
            lane += u8::from(x == a) + u8::from(x == b) + u8::from(x == c);
        }
        n += usize::from(lane);
    }
    n
}

/// The lines of `body` that hold something besides whitespace (NDJSON records), or, with
/// `text`, anything besides a line end (`\r\n` too: text events).
fn lines_with_content(body: &[u8], text: bool) -> usize {
    let mut n = 0;
    let mut pos = 0;
    while pos < body.len() {
        let end = memchr::memchr(b'\n', &body[pos..]).map_or(body.len(), |i| pos + i);
        let line = &body[pos..end];
        let counts = if text {
            !line.strip_suffix(b"\r").unwrap_or(line).is_empty()
        } else {
            line.iter().any(|b| !b.is_ascii_whitespace())
        };
        n += usize::from(counts);
        pos = end + 1;
    }
    n
}

/// What decoding `body` as `format`, with `tag` and `extra` fields added to every event, can
/// take at most.
pub fn estimate(body: &[u8], format: Format, tag: Option<&str>, extra: Extra<'_>) -> Estimate {
    let extra_bytes: usize =
        extra.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() + tag.map_or(0, str::len);
    let extra = extra.len();
    match format {
        Format::Text => Estimate {
            events: lines_with_content(body, true),
            fields: extra,
            arena: body.len() + extra_bytes,
        },
        Format::Ndjson | Format::Json => {
            let events = if format == Format::Ndjson {
                lines_with_content(body, false)
            } else {
                memchr::memchr_iter(b'{', body).count()
            };
            Estimate {
                events,
                // A member needs its `:`, an array item its `,` or its array's `[`.
                fields: count3(body, b':', b',', b'[').saturating_add(events.saturating_mul(extra)),
                arena: body.len() + extra_bytes,
            }
        }
    }
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
    decode_within(body, format, tag, extra, source, None)
}

/// As [`decode`], with the batch's tables and arena reserved to `estimate` first (what
/// [`estimate`] said of this body), so that decoding allocates within it; room left over is
/// given back at the end.
///
/// # Errors
///
/// As [`decode`].
pub fn decode_within(
    body: Bytes,
    format: Format,
    tag: Option<&str>,
    extra: Extra<'_>,
    source: std::sync::Arc<str>,
    estimate: Option<Estimate>,
) -> Result<EventBatch, DecodeError> {
    let mut b = Builder {
        records: RecordBuilder::default(),
        extra: Vec::new(),
        tag: OptSpan::NONE,
    };
    if let Some(e) = estimate {
        b.records.events.reserve_exact(e.events);
        b.records.fields.reserve_exact(e.fields);
        if format != Format::Text {
            b.records.arena.reserve_exact(e.arena);
        }
    }
    if format == Format::Text {
        // Lines are spans of the body: the arena is the body, with the extras after it.
        let room = estimate.map_or(body.len(), |e| e.arena.max(body.len()));
        b.records.arena = Vec::with_capacity(room);
        b.records.arena.extend_from_slice(&body);
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
    if estimate.is_some() {
        shrink(&mut b.records.events);
        shrink(&mut b.records.fields);
        shrink(&mut b.records.arena);
    }
    Ok(b.records.finish(source, "http_server"))
}

/// Gives back the room an estimate reserved and decoding did not use, when it is worth a copy.
fn shrink<T>(v: &mut Vec<T>) {
    if v.capacity() > v.len() + v.len() / 8 + 64 {
        v.shrink_to_fit();
    }
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

    /// The estimate bounds what decoding takes, whatever the body; decoding within it keeps
    /// the same events.
    #[test]
    fn the_estimate_bounds_the_decoded_batch() {
        let extra = [("x_request", "r1"), ("h", "v")];
        for (body, format) in [
            (
                &br#"[{"message":"a","n":{"deep":[1,2,{"k":null}]}},{"v":1.5},{}]"#[..],
                Format::Json,
            ),
            (
                br#"{"a":[[],[1],{"b":[{}]}],"s":"x,y:z[","m":"hi"}"#,
                Format::Json,
            ),
            (b"{\"a\":1}\n\n  \n{\"a\":[2,3]}\n{}\n", Format::Ndjson),
            (b"one\r\ntwo\n\nthree", Format::Text),
            (b"\t\n \r\n\r\nx", Format::Text),
            (b"", Format::Ndjson),
        ] {
            let e = estimate(body, format, Some("tag.x"), &extra);
            let plain = decode(
                Bytes::copy_from_slice(body),
                format,
                Some("tag.x"),
                &extra,
                "s".into(),
            );
            let within = decode_within(
                Bytes::copy_from_slice(body),
                format,
                Some("tag.x"),
                &extra,
                "s".into(),
                Some(e),
            );
            let (Ok(plain), Ok(mut within)) = (plain, within) else {
                panic!("{body:?} decodes");
            };
            within.received = plain.received;
            assert!(within.events.len() <= e.events, "{body:?} {e:?}");
            assert!(within.fields.len() <= e.fields, "{body:?} {e:?}");
            assert!(within.arena.len() <= e.arena, "{body:?} {e:?}");
            assert_eq!(json(&plain), json(&within));
            if format != Format::Json {
                assert_eq!(within.events.len(), e.events, "exact for lines: {body:?}");
            }
        }
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
