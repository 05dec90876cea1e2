//! OTLP, the OpenTelemetry protocol: the logs signal's requests into batches, and the answers
//! a receiver gives, in binary protobuf and in OTLP/JSON.
//!
//! ```text
//! OTLP/HTTP protobuf ─────────────────────────┐
//! OTLP/HTTP JSON ──json::logs_request──► protobuf ─► logs::measure ─► logs::decode ─► EventBatch
//! OTLP/gRPC (5-byte frame, grpc::unframe) ───┘
//! EventBatch ─► encode::LogsWriter ─► ExportLogsServiceRequest (the opentelemetry sink)
//! ```

pub mod encode;
pub mod grpc;
pub mod json;
pub mod logs;
pub mod wire;

use wire::Writer;

/// The body of a successful `ExportLogsServiceResponse`: empty when everything was taken,
/// else `partial_success { rejected_log_records, error_message }`.
pub fn logs_response(rejected: usize, error_message: &str, json: bool) -> Vec<u8> {
    if json {
        if rejected == 0 && error_message.is_empty() {
            return b"{}".to_vec();
        }
        return serde_json::json!({
            "partialSuccess": {
                "rejectedLogRecords": rejected.to_string(),
                "errorMessage": error_message,
            }
        })
        .to_string()
        .into_bytes();
    }
    let mut w = Writer::default();
    if rejected != 0 || !error_message.is_empty() {
        w.message(1, |w| {
            if rejected != 0 {
                w.uint(1, rejected as u64);
            }
            if !error_message.is_empty() {
                w.bytes(2, error_message.as_bytes());
            }
        });
    }
    w.buf
}

/// The `partial_success` of an `ExportLogsServiceResponse`: how many records the server
/// rejected and why; `None` when it took them all (or the body is no such message).
pub fn partial_success(body: &[u8]) -> Option<(u64, String)> {
    let mut r = wire::Reader::new(body);
    while let Ok(Some((n, w))) = r.field() {
        if let (1, wire::Wire::Len(a, b)) = (n, w) {
            let mut p = r.nested(a, b);
            let (mut rejected, mut why) = (0, String::new());
            while let Ok(Some((n, w))) = p.field() {
                match (n, w) {
                    (1, wire::Wire::Varint(v)) => rejected = v,
                    (2, wire::Wire::Len(x, y)) => {
                        why = String::from_utf8_lossy(p.bytes(x, y)).into_owned();
                    }
                    _ => {}
                }
            }
            return (rejected != 0).then_some((rejected, why));
        }
    }
    None
}

/// The `message` of a `google.rpc.Status` (an OTLP/HTTP failure's body).
pub fn status_message(body: &[u8]) -> Option<String> {
    let mut r = wire::Reader::new(body);
    let mut message = None;
    loop {
        match r.field() {
            Ok(Some((2, wire::Wire::Len(a, b)))) => {
                message = Some(String::from_utf8_lossy(r.bytes(a, b)).into_owned());
            }
            Ok(Some(_)) => {}
            Ok(None) => return message,
            Err(_) => return None,
        }
    }
}

/// gRPC's status codes that OTLP answers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Code {
    Ok = 0,
    InvalidArgument = 3,
    ResourceExhausted = 8,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    Unauthenticated = 16,
}

/// A `google.rpc.Status { int32 code = 1; string message = 2; repeated Any details = 3; }`:
/// the body of every OTLP/HTTP failure, and gRPC's `grpc-status-details-bin`. With
/// `retry_after`, a `google.rpc.RetryInfo` detail tells the client how long to wait.
pub fn status(code: Code, message: &str, retry_after: Option<u32>, json: bool) -> Vec<u8> {
    if json {
        return serde_json::json!({ "code": code as u8, "message": message })
            .to_string()
            .into_bytes();
    }
    let mut w = Writer::default();
    if code != Code::Ok {
        w.uint(1, code as u64);
    }
    if !message.is_empty() {
        w.bytes(2, message.as_bytes());
    }
    if let Some(seconds) = retry_after {
        // Any { type_url = 1; value = 2 } holding RetryInfo { Duration retry_delay = 1; }
        w.message(3, |w| {
            w.bytes(1, b"type.googleapis.com/google.rpc.RetryInfo");
            w.message(2, |w| w.message(1, |w| w.uint(1, u64::from(seconds))));
        });
    }
    w.buf
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
