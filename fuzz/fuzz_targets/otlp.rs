//! Fuzz the `opentelemetry` source's decoder: the first byte picks binary protobuf or OTLP/JSON
//! (converted to protobuf as the server converts it), or a gRPC frame around protobuf; the rest
//! is the request. What `measure` accepts must decode, within the bounds `measure` gave (the
//! server charges its memory budget with them); spans stay inside the arena, nested ranges
//! point forward inside the fields table, and JSON output parses.
#![no_main]

use std::sync::Arc;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use loghaul_codec::encode_json;
use loghaul_codec::otlp::{grpc, json, logs};
use loghaul_core::{EventBatch, Field, Span, Value};

fn in_arena(batch: &EventBatch, span: Span) {
    assert!(
        span.start <= span.end && span.end as usize <= batch.arena.len(),
        "span {span:?} outside an arena of {}",
        batch.arena.len()
    );
}

fn check_fields(batch: &EventBatch, range: (u32, u32), parent: Option<usize>, depth: usize) {
    assert!(depth <= logs::MAX_DEPTH + 4, "nesting deeper than the decoder allows");
    let (start, end) = (range.0 as usize, range.1 as usize);
    assert!(start <= end && end <= batch.fields.len(), "range outside the table");
    if let Some(parent) = parent {
        assert!(start > parent || start == end, "a child range before its parent");
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

fuzz_target!(|data: &[u8]| {
    let Some((&first, raw)) = data.split_first() else {
        return;
    };
    let proto = match first % 3 {
        0 => raw.to_vec(),
        1 => match json::logs_request(raw) {
            Ok(p) => p,
            Err(_) => return,
        },
        _ => match grpc::unframe(raw) {
            Ok((_, message)) => message.to_vec(),
            Err(_) => return,
        },
    };
    let body = Bytes::from(proto);
    // One walk within a bound: the same verdict as measuring, and within the bound when built.
    let bound = body.len().saturating_mul(8);
    let quick = logs::decode_within(&body, Arc::from("fuzz"), bound, 1000);
    let Ok(measure) = logs::measure(&body) else {
        // Given up before the break is as good: the caller measures next.
        assert!(!matches!(quick, Ok(Some(_))), "decode_within accepted what measure refuses");
        return;
    };
    match quick {
        Err(e) => panic!("measure accepted what decode_within refuses: {e}"),
        Ok(Some(_)) => assert!(measure.bytes() <= bound && measure.records <= 1000, "{measure:?}"),
        Ok(None) => assert!(measure.bytes() > bound || measure.records > 1000, "{measure:?}"),
    }
    let decoded = match logs::decode(&body, Arc::from("fuzz")) {
        Ok(d) => d,
        Err(e) => panic!("measure accepted what decode refuses: {e}"),
    };
    let batch = &decoded.batch;
    assert!(batch.len() + decoded.rejected <= measure.records);
    assert!(batch.fields.len() <= measure.fields, "{measure:?}");
    let mut out = Vec::new();
    for event in &batch.events {
        for span in [event.message.get(), event.hostname.get(), event.appname.get()]
            .into_iter()
            .flatten()
        {
            in_arena(batch, span);
        }
        check_fields(batch, event.fields, None, 0);
        out.clear();
        encode_json(batch, event, &mut out);
        if let Err(e) = serde_json::from_slice::<serde_json::Value>(&out) {
            panic!("JSON output does not parse ({e}): {}", String::from_utf8_lossy(&out));
        }
    }
});
