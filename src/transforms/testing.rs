//! What the transforms' unit tests share: batches made by the real decoders, and readers of
//! what came out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use bytes::Bytes;
use loghaul_codec::http_body::{self, Format};
use loghaul_codec::{DecodeOptions, DecodeStats, Decoder, Frame, TimeZone};
use loghaul_core::{Event, EventBatch, Timestamp, Value};

use crate::metrics::{ComponentKind, ComponentMetrics};

/// When the test batches were read: 2026-01-01T00:00:00Z.
pub const RECEIVED: i64 = 1_767_225_600;

/// A batch of `lines` as the syslog source decodes them (UTC, received at [`RECEIVED`]).
pub fn syslog_batch(lines: &[&str]) -> EventBatch {
    let text = lines.join("\n");
    let mut frames = Vec::new();
    let mut start = 0;
    for line in lines {
        frames.push(Frame {
            start: start as u32,
            end: (start + line.len()) as u32,
            truncated: false,
        });
        start += line.len() + 1;
    }
    let mut batch = EventBatch::new(Bytes::from(text), "in".into(), "syslog");
    let mut decoder = Decoder::new(DecodeOptions {
        timezone: TimeZone::Utc,
        ..DecodeOptions::default()
    });
    decoder.decode_batch(
        &mut batch,
        &frames,
        Timestamp::from_nanos(RECEIVED * 1_000_000_000, 0),
        Some([192, 0, 2, 1].into()),
        &mut DecodeStats::default(),
    );
    batch
}

/// A batch of JSON records as the HTTP source decodes them.
pub fn json_batch(records: &[serde_json::Value]) -> EventBatch {
    let body = Bytes::from(serde_json::to_vec(records).unwrap());
    let mut batch =
        http_body::decode(body, Format::Json, None, &[], Arc::from("in")).expect("JSON records");
    batch.received = Timestamp::from_nanos(RECEIVED * 1_000_000_000, 0);
    batch
}

/// A batch of events whose messages are `lines`.
pub fn batch_of<S: AsRef<str>>(lines: &[S]) -> EventBatch {
    let records: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::json!({ "message": l.as_ref() }))
        .collect();
    json_batch(&records)
}

/// The messages of `batch`, in order.
pub fn messages(batch: &EventBatch) -> Vec<String> {
    batch
        .events
        .iter()
        .map(|e| String::from_utf8_lossy(batch.str(e.message.or_empty())).into_owned())
        .collect()
}

/// A string field of an event's record.
pub fn field(batch: &EventBatch, event: &Event, name: &str) -> Option<String> {
    match batch.lookup(event, name)? {
        Value::Str(s) | Value::Bytes(s) => Some(String::from_utf8_lossy(batch.str(s)).into_owned()),
        other => Some(format!("{other:?}")),
    }
}

/// Every event of `batch` as its JSON output line.
pub fn json_lines(batch: &EventBatch) -> Vec<serde_json::Value> {
    batch
        .events
        .iter()
        .map(|e| {
            let mut out = Vec::new();
            loghaul_codec::encode_json(batch, e, &mut out);
            serde_json::from_slice(&out).unwrap()
        })
        .collect()
}

pub fn test_metrics() -> Arc<ComponentMetrics> {
    ComponentMetrics::detached("x", ComponentKind::Transform, "test")
}
