//! The Fluentd forward protocol (v1 with the v1.5 additions): splitting a connection's stream
//! into requests, decoding requests into events, encoding events into requests, acks and the
//! handshake. `docs/specs/forward.md` says what real clients send and how loghaul answers.
//!
//! ```text
//! TCP bytes ─Splitter::split─► complete requests ─Decoder::decode─► events in an EventBatch
//!                                                    (records in its fields table, spans into
//!                                                     the arena; decompressed entries appended)
//! events ─encode_entry─► [time, record] entries ─begin/finish_packed─► PackedForward request
//! ```

mod decode;
mod encode;
pub mod handshake;
pub mod msgpack;
mod split;
mod stream;

pub use decode::{
    DecodeStats, Decoder, Limits, MAX_INVALID, MAX_RECORD_DEPTH, Mode, Request, RequestError,
    decode_raw, is_compressed,
};
pub use encode::{
    CHUNK_ID_LEN, FORWARD_SOURCE_TYPE, PackedStart, begin_packed, chunk_id, encode_entry,
    encode_record, entry_as_is, finish_packed, read_ack, write_ack,
};
pub use split::{MAX_DEPTH, SplitError, Splitter};
pub use stream::{Step, Stream, WORST_PER_BYTE, carries_entries, entry_cost};

#[cfg(test)]
mod tests;
