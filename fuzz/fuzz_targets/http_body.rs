//! Fuzz the `http_server` source's body path: the first byte picks the format (JSON, NDJSON,
//! text), the compression (none, gzip, zstd, or the body compressed here and inflated back) and
//! whether the request adds a tag and extra fields; the rest is the body as it arrived. A
//! compressed body is inflated with a small limit, so a bomb costs that limit and no more. The
//! decoded batch must hold together: spans inside the arena, nested ranges inside the fields table
//! and pointing forward (so walking them ends), one event per record or non-empty line, the tag
//! and extras on every event, and JSON output that is valid JSON; the estimate a server charges
//! before decoding must bound what decoding made. Deep nesting must be an error, never a stack
//! overflow.
#![no_main]

use std::io::Write as _;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use loghaul_codec::http_body::{self, Encoding, Format, InflateError};
use loghaul_codec::{encode_json, encode_text};
use loghaul_core::{EventBatch, Field, Span, Value};

/// The decompressed body's limit: small, so a compression bomb fails fast and cheaply.
const LIMIT: usize = 64 * 1024;
const TAG: &str = "app.fuzz";
const EXTRA: [(&str, &str); 2] = [("x_request_id", "r-1"), ("user_agent", "fuzz/1")];

fn in_arena(batch: &EventBatch, span: Span) {
    assert!(
        span.start <= span.end && span.end as usize <= batch.arena.len(),
        "span {span:?} outside an arena of {}",
        batch.arena.len()
    );
}

/// Checks the fields `range` and, recursively, their children; `depth` bounds the walk the way
/// serde_json's recursion limit bounds the input.
fn check_fields(batch: &EventBatch, range: (u32, u32), parent: Option<usize>, depth: usize) {
    assert!(depth <= 130, "nesting deeper than serde_json allows");
    let (start, end) = (range.0 as usize, range.1 as usize);
    assert!(
        start <= end && end <= batch.fields.len(),
        "range outside the table"
    );
    if let Some(parent) = parent {
        // Children come after their container: a walk of the tree always moves forward.
        assert!(
            start > parent || start == end,
            "a child range before its parent"
        );
    }
    for (i, field) in batch.fields[start..end].iter().enumerate() {
        let Field { name, value } = *field;
        in_arena(batch, name);
        match value {
            Value::Str(s) | Value::Bytes(s) | Value::Ext(_, s) => in_arena(batch, s),
            Value::Map(a, b) | Value::Array(a, b) => {
                check_fields(batch, (a, b), Some(start + i), depth + 1)
            }
            Value::Int(_) | Value::UInt(_) | Value::Float(_) | Value::Bool(_) | Value::Null => {}
        }
    }
}

/// Non-empty lines of a text body, as the decoder cuts them (LF, an optional CR before it).
fn text_lines(body: &[u8]) -> usize {
    body.split(|&b| b == b'\n')
        .filter(|l| !l.strip_suffix(b"\r").unwrap_or(l).is_empty())
        .count()
}

fn compress(encoding: Encoding, data: &[u8]) -> Vec<u8> {
    match encoding {
        Encoding::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        Encoding::Zstd => zstd::bulk::compress(data, 1).unwrap(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, raw)) = data.split_first() else {
        return;
    };
    let format = match first & 3 {
        0 | 3 => Format::Json,
        1 => Format::Ndjson,
        _ => Format::Text,
    };
    let encoding = if first & 0x10 == 0 {
        Encoding::Gzip
    } else {
        Encoding::Zstd
    };
    let body = match (first >> 2) & 3 {
        0 => Bytes::copy_from_slice(raw),
        // As sent: most inputs are not valid gzip or zstd, which must be a clean error.
        1 | 2 => match http_body::inflate(encoding, raw, LIMIT) {
            Ok(b) => {
                assert!(b.len() <= LIMIT, "inflated past the limit");
                b
            }
            Err(InflateError::TooLarge | InflateError::Broken(_)) => return,
        },
        // Compressed here: inflating gives the body back, and one byte less of limit refuses it.
        _ => {
            let packed = compress(encoding, raw);
            let back = http_body::inflate(encoding, &packed, raw.len());
            assert_eq!(back.as_deref(), Ok(raw), "inflate(compress(x)) != x");
            if !raw.is_empty() {
                assert_eq!(
                    http_body::inflate(encoding, &packed, raw.len() - 1),
                    Err(InflateError::TooLarge)
                );
            }
            Bytes::copy_from_slice(raw)
        }
    };
    let tag = (first & 0x20 != 0).then_some(TAG);
    let extra: &[(&str, &str)] = if first & 0x40 != 0 { &EXTRA } else { &[] };

    // As the server decodes: within the estimate it charged to its memory budget first.
    let estimate = http_body::estimate(&body, format, tag, extra);
    let batch = match http_body::decode_within(
        body.clone(),
        format,
        tag,
        extra,
        "fuzz".into(),
        Some(estimate),
    ) {
        Ok(batch) => batch,
        Err(e) => {
            assert!(e.line >= 1, "lines are 1-based");
            assert!(e.offset <= body.len(), "error offset past the body");
            assert!(format != Format::Text, "text bodies always decode");
            return;
        }
    };
    let expected = match format {
        Format::Text => text_lines(&body),
        Format::Ndjson => body
            .split(|&b| b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .count(),
        Format::Json => match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(serde_json::Value::Array(items)) => items.len(),
            Ok(_) => 1,
            Err(e) => panic!("decoded a body serde_json refuses: {e}"),
        },
    };
    assert_eq!(batch.events.len(), expected, "one event per record or line");
    assert!(batch.events.len() <= estimate.events, "{estimate:?}");
    assert!(batch.fields.len() <= estimate.fields, "{estimate:?}");
    assert!(batch.arena.len() <= estimate.arena, "{estimate:?}");

    let mut out = Vec::new();
    for event in &batch.events {
        for span in [event.message.get(), event.tag.get()].into_iter().flatten() {
            in_arena(&batch, span);
        }
        assert_eq!(
            event.tag.get().map(|t| batch.str(t)),
            tag.map(str::as_bytes)
        );
        check_fields(&batch, event.fields, None, 0);
        // The request's extras close every event's record.
        let fields = batch.fields_of(event);
        assert!(fields.len() >= extra.len());
        for (field, (name, value)) in fields[fields.len() - extra.len()..].iter().zip(extra) {
            assert_eq!(batch.str(field.name), name.as_bytes());
            match field.value {
                Value::Str(v) => assert_eq!(batch.str(v), value.as_bytes()),
                other => panic!("extra {name} is {other:?}"),
            }
        }
        out.clear();
        encode_json(&batch, event, &mut out);
        assert_eq!(out.last(), Some(&b'\n'));
        if let Err(e) = serde_json::from_slice::<serde_json::Value>(&out) {
            panic!(
                "JSON output does not parse ({e}): {}",
                String::from_utf8_lossy(&out)
            );
        }
        out.clear();
        encode_text(&batch, event, &mut out);
        assert!(std::str::from_utf8(&out).is_ok(), "text output is UTF-8");
    }
});
