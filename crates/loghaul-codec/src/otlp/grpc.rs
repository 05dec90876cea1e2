//! gRPC's message framing on HTTP/2, for OTLP/gRPC's unary `Export` call.
//!
//! ```text
//! | compressed: u8 (0 or 1) | length: u32 big-endian | message: length bytes |
//! ```
//! A unary request carries exactly one message.

/// Path of the logs service's one method.
pub const LOGS_EXPORT: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
/// The other signals' methods, answered UNIMPLEMENTED.
pub const OTHER_EXPORTS: [&str; 3] = [
    "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export",
];

/// The one message of a unary request's body, and whether it is compressed (with the
/// request's `grpc-encoding`).
///
/// # Errors
///
/// The body is not one whole frame: what is wrong, for the `grpc-message`.
pub fn unframe(body: &[u8]) -> Result<(bool, &[u8]), &'static str> {
    let Some((head, rest)) = body.split_first_chunk::<5>() else {
        return Err("the request holds no whole gRPC message (cut before its 5-byte prefix)");
    };
    let compressed = match head[0] {
        0 => false,
        1 => true,
        _ => return Err("the gRPC message's compressed flag is neither 0 nor 1"),
    };
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    match rest.len().cmp(&len) {
        std::cmp::Ordering::Less => Err("the gRPC message is cut short of its length"),
        std::cmp::Ordering::Greater => Err("a unary gRPC request holds more than one message"),
        std::cmp::Ordering::Equal => Ok((compressed, rest)),
    }
}

/// `message` as one uncompressed frame.
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}
