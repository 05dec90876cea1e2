//! The line encoder sinks hand to their input queues: senders run it (see
//! [`crate::pipeline::Prepare`]), and the sink gets each batch as one buffer of JSON or
//! text lines.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use loghaul_codec::encode::{encode_json, encode_text};
use loghaul_core::EventBatch;
use serde::Deserialize;

use crate::pipeline::{Prepare, Prepared, QUEUE_BATCHES};

/// How events are written by a line sink (file, console).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// One JSON object per line.
    #[default]
    Json,
    /// The message text, one per line.
    Text,
}

/// Buffers kept for reuse: enough for a full input queue plus the ones being written.
const POOL_BUFFERS: usize = QUEUE_BATCHES + 16;
/// A buffer grown beyond this (one huge batch) is freed rather than kept in the pool.
const POOL_MAX_CAPACITY: usize = 4 * 1024 * 1024;

/// Output buffers handed from the sink back to the encoders. Reusing them keeps their pages
/// mapped and warm: a fresh multi-hundred-KiB allocation per batch costs page faults and zeroing.
#[derive(Default)]
pub struct BufferPool(Mutex<Vec<Vec<u8>>>);

impl BufferPool {
    pub fn take(&self) -> Vec<u8> {
        self.0
            .lock()
            .ok()
            .and_then(|mut pool| pool.pop())
            .unwrap_or_default()
    }

    pub fn put(&self, mut buf: Vec<u8>) {
        if buf.capacity() == 0 || buf.capacity() > POOL_MAX_CAPACITY {
            return;
        }
        buf.clear();
        if let Ok(mut pool) = self.0.lock()
            && pool.len() < POOL_BUFFERS
        {
            pool.push(buf);
        }
    }
}

/// One batch into one buffer of JSON lines or text lines.
pub struct LineEncoder {
    encoding: Encoding,
    /// Sinks that route each event on its own (templated file paths) need where each ends.
    pub per_event: bool,
    pub pool: BufferPool,
    /// Bytes per event of recent batches: the most of them, falling by an eighth a batch. The
    /// next batch's buffer is sized by it.
    line_bytes: AtomicUsize,
}

/// Past the last event's bytes, the room the encoder makes before writing it.
const LAST_EVENT_ROOM: usize = 1024;

impl LineEncoder {
    /// `per_event`: also record where each event's bytes end (for sinks that route events).
    pub fn new(encoding: Encoding, per_event: bool) -> LineEncoder {
        LineEncoder {
            encoding,
            per_event,
            pool: BufferPool::default(),
            line_bytes: AtomicUsize::new(0),
        }
    }
}

impl Prepare for LineEncoder {
    fn prepare(&self, batch: &EventBatch) -> Prepared {
        // One reservation up front keeps the per-event ones from reallocating: by the bytes
        // per event recent batches took, and never more than a guess from this batch's own
        // size (JSON is about twice the raw text plus the fixed keys), so that one batch of
        // huge events does not make the next one of many small events reserve gigabytes.
        let learned = self.line_bytes.load(Ordering::Relaxed);
        let guess = batch.arena.len() * 2 + 160 * batch.len();
        let need = match learned {
            0 => guess,
            n => n
                .saturating_mul(batch.len())
                .saturating_add(LAST_EVENT_ROOM)
                .min(guess),
        };
        let mut bytes = sized(self.pool.take(), need);
        let mut ends = Vec::new();
        if self.per_event {
            ends.reserve_exact(batch.len());
        }
        for event in &batch.events {
            match self.encoding {
                Encoding::Json => encode_json(batch, event, &mut bytes),
                Encoding::Text => encode_text(batch, event, &mut bytes),
            }
            if self.per_event {
                ends.push(u32::try_from(bytes.len()).unwrap_or(u32::MAX));
            }
        }
        if !batch.is_empty() {
            let line = bytes.len().div_ceil(batch.len());
            self.line_bytes
                .store(line.max(learned - learned / 8), Ordering::Relaxed);
        }
        Prepared { bytes, ends }
    }
}

/// `buf` (empty, from the pool) if it holds `need` bytes, else a new buffer with an eighth to
/// spare, so that the next batches of about the same size reuse it. Growing the pooled one
/// instead doubled its capacity and copied all of it, touching pages no batch fills: pooled
/// buffers crept to twice a batch's size. Sized by the bytes per event seen rather than by the
/// guess alone, a file tail's buffers take two thirds of what they did: the pages of a capacity
/// never written to cost nothing at first, but they are resident once the allocator hands them
/// out again after other use.
fn sized(buf: Vec<u8>, need: usize) -> Vec<u8> {
    if buf.capacity() >= need {
        buf
    } else {
        Vec::with_capacity(need.saturating_add(need / 8))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use loghaul_core::{Event, OptSpan, Span};

    use super::*;

    /// `n` events whose messages are `size` bytes each.
    fn batch(n: usize, size: usize) -> EventBatch {
        let mut b = EventBatch::new(Bytes::from(vec![b'x'; size]), "in".into(), "test");
        b.events = (0..n)
            .map(|_| Event {
                message: OptSpan::some(Span::new(0, size)),
                ..Event::default()
            })
            .collect();
        b
    }

    #[test]
    fn buffers_are_sized_by_what_recent_batches_took() {
        let encoder = LineEncoder::new(Encoding::Text, false);
        let first = encoder.prepare(&batch(1000, 100));
        assert_eq!(first.bytes.len(), 101_000);
        // Sized by the guess: twice the arena plus 160 a line.
        assert!(first.bytes.capacity() >= 200 + 160_000);
        let second = encoder.prepare(&batch(1000, 100));
        assert_eq!(second.bytes.len(), 101_000);
        // By what the first took, with an eighth to spare.
        assert!(
            second.bytes.capacity() <= (101 * 1000 + LAST_EVENT_ROOM) * 9 / 8,
            "{}",
            second.bytes.capacity()
        );
    }

    #[test]
    fn a_batch_of_huge_events_does_not_size_the_next_one() {
        let encoder = LineEncoder::new(Encoding::Text, false);
        let _ = encoder.prepare(&batch(2, 1 << 20));
        // Learned: a megabyte a line. Ten thousand short lines still reserve by their own size.
        let next = encoder.prepare(&batch(10_000, 10));
        assert_eq!(next.bytes.len(), 110_000);
        assert!(
            next.bytes.capacity() <= (20 + 160 * 10_000) * 9 / 8,
            "{}",
            next.bytes.capacity()
        );
    }

    #[test]
    fn a_pooled_buffer_too_small_is_replaced_not_grown() {
        let small = Vec::with_capacity(10);
        let buf = sized(small, 1000);
        assert_eq!(buf.capacity(), 1125);
        let big = Vec::with_capacity(5000);
        assert_eq!(sized(big, 1000).capacity(), 5000);
    }
}
