//! loghaul's wire codecs: bytes from the network in, events out, and events back to bytes.
//!
//! ```text
//! TCP bytes ──Framer::decode──► frames (ranges) ──Decoder::decode_batch──► EventBatch
//!                                                         (spans into the same arena)
//! EventBatch ──encode_json / encode_text──► NDJSON or text lines for sinks
//! ```
//!
//! - [`framing`]: newline and RFC 6587 octet-counted framing, with per-message auto-detection.
//! - [`syslog`]: RFC 5424 and RFC 3164 decoders (strict or lenient), zero-copy.
//! - [`forward`]: the Fluentd forward protocol (all modes, gzip and zstd entries).
//! - [`http_body`]: HTTP request bodies (JSON, NDJSON, text).
//! - [`inflate`]: bounded, incremental gzip and zstd decompression (HTTP bodies, forward entries).
//! - [`otlp`]: OTLP logs requests (protobuf, JSON, gRPC frames) and the answers to them.
//! - [`record`]: JSON records into a batch's fields table (HTTP bodies, Kafka messages).
//! - [`encode`]: hand-written JSON and text encoders.
//!
//! Nothing here panics on input, and nothing allocates per event: events are spans into the
//! batch arena and side tables grow amortised.

pub mod encode;
pub mod forward;
pub mod framing;
pub mod http_body;
pub mod inflate;
pub mod otlp;
pub mod record;
mod scan;
pub use scan::{is_ascii, kv_masks64};
mod simd;
pub mod syslog;
mod time;

pub use encode::{encode_json, encode_text, write_rfc3339};
pub use framing::{Frame, Framer, FramingMode, FramingStats};
pub use syslog::{DecodeOptions, DecodeStats, Decoder, Format, TimeZone};
