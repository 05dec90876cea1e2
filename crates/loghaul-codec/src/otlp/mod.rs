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
mod tests;
