//! The line encoder sinks hand to their input queues: senders run it (see
//! [`crate::pipeline::Prepare`]), and the sink gets each batch as one buffer of JSON or
//! text lines.

use std::sync::Mutex;

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
}

impl LineEncoder {
    /// `per_event`: also record where each event's bytes end (for sinks that route events).
    pub fn new(encoding: Encoding, per_event: bool) -> LineEncoder {
        LineEncoder {
            encoding,
            per_event,
            pool: BufferPool::default(),
        }
    }
}

impl Prepare for LineEncoder {
    fn prepare(&self, batch: &EventBatch) -> Prepared {
        let mut bytes = self.pool.take();
        // JSON is about twice the raw text plus the fixed keys; one reservation up front keeps
        // the per-event reservations from reallocating.
        bytes.reserve(batch.arena.len() * 2 + 160 * batch.len());
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
        Prepared { bytes, ends }
    }
}
