//! loghaul's disk buffer: a segmented, append-only log of records framed with their length and a
//! CRC32C, an ack cursor, crash recovery that truncates torn tails and quarantines damaged
//! segments, and a read-only `inspect`.
//!
//! [`open`] recovers a directory and returns a [`Writer`] (appends groups of records, syncs
//! them), a [`Reader`] (delivers records in sequence order, takes acks in any order, deletes
//! segments once acked through) and a [`Recovery`] report. Both are synchronous: the server
//! drives them from its own threads or tasks, and waits with the [`Shared`] notifications.
//! Every byte goes through the [`FileSystem`] trait, so tests inject faults and power loss with
//! [`testing::MemFs`].
//!
//! Delivery is at least once: a record delivered and not acked before a restart is delivered
//! again, and so is one acked after the cursor was last persisted.
//!
//! # On-disk format
//!
//! ```text
//! dir/
//!   00000000000000000001.seg      segments: 20-digit id, increasing
//!   00000000000000000002.seg
//!   cursor                        the ack cursor
//!   quarantine/00000000000000000001.seg.1732550000    damaged originals (name.unix_secs)
//!
//! segment:
//!   +----------------------------+--------+--------+-----
//!   | "LHSEG\0" 0x01 0x00        | record | record | ...
//!   +----------------------------+--------+--------+-----
//!     8 bytes: magic + version 1
//!
//! record (all integers little-endian):
//!   +------------+------------+---------------------------+---------+-----------+
//!   | magic u32  | len u32    | crc u32                   | seq u64 | payload   |
//!   | 0x4C485245 | <= max_rec | crc32c(seq LE ++ payload) | from 1  | len bytes |
//!   +------------+------------+---------------------------+---------+-----------+
//!     20 bytes of frame header, then the payload
//!
//! cursor (written to cursor.tmp, then renamed):
//!   +----------------------+-------------+-------------------+
//!   | "LHCUR\0" 0x01 0x00  | acked u64   | crc32c(acked) u32 |
//!   +----------------------+-------------+-------------------+
//!     every seq <= acked is acknowledged
//! ```
//!
//! A position holds a record only if the magic, a length within `max_record`, the CRC and a
//! sequence number above the previous valid one all check out; the magic makes finding the next
//! record after damage cheap, and the four checks together make a false match negligible.
//! Sequence numbers are consecutive and never reused within a run: a failed append gives back
//! its numbers when its bytes were rolled back, and gives them up (leaving a gap) only when the
//! rollback failed too. After a restart the writer goes on at `max(last valid seq, cursor) + 1`,
//! so records lost in a crash before they were synced may see their numbers reused.
//!
//! # Recovery
//!
//! On open: read the cursor (missing or damaged means 0); remove leftover `*.tmp` files (a
//! salvage interrupted after its original moved away is completed instead); delete segments
//! whose last record is acked; scan the rest. Damage with nothing valid after it is a torn
//! tail and is cut off; damage with valid records after it is salvaged: the valid records are
//! copied to a new file that replaces the segment, and the original goes to `quarantine/`.
//! What recovery drops after the cursor is counted as lost: missing sequence numbers, and a
//! record at the start of a damaged region or torn tail whose frame header still checks out
//! (the magic, a length within `max_record`, the next sequence number), with the events its
//! payload held when [`Config::event_count`] can read them from what survived. A tail cut at a
//! record boundary, or within a frame header, leaves nothing to count. What it keeps after the
//! cursor is pending, in records and (read with [`Config::event_count`]) in events: the gauges
//! [`Stats::records_pending`] and [`Stats::events_pending`] start from there, the writer adds
//! to them and the reader's acks take off. The writer always starts a new segment (on its first
//! append) and never appends to a recovered one.
//!
//! One process at a time may open a directory; nothing here locks it.

mod cursor;
mod format;
pub mod fs;
mod inspect;
mod pool;
mod reader;
mod recover;
mod shared;
pub mod testing;
mod writer;

#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use cursor::CursorFile;
pub use format::Region;
pub use fs::{FileSystem, FsFile, RealFs};
pub use inspect::{Inspection, SegmentReport, inspect};
pub use reader::{Reader, Record};
pub use recover::Recovery;
pub use shared::{Shared, Stats, StatsSnapshot};
pub use writer::{AppendError, Appended, Payload, PendingSync, SyncOutcome, Writer};

use crate::shared::add;

/// When the server makes appended records durable. The buffer only records it (and skips
/// syncing the cursor with [`SyncMode::Never`]); the server calls [`Writer::sync`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// After every group: an acknowledged group survives a power loss.
    EveryBatch,
    /// On a timer: a power loss loses at most this much.
    Interval(Duration),
    /// Never: the operating system writes back when it likes.
    Never,
}

/// How a buffer is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The buffer's directory (created if missing).
    pub dir: PathBuf,
    /// The most bytes all segments together may take; appends past it get
    /// [`AppendError::Full`].
    pub max_size: u64,
    /// A segment is rotated once it reaches this size.
    pub segment_size: u64,
    /// The largest payload accepted.
    pub max_record: u32,
    /// When records are made durable.
    pub sync: SyncMode,
    /// How to read the number of events a payload holds, so that recovery reports what it
    /// loses in events as well as in records; `None` reports records only.
    pub event_count: Option<EventCount>,
}

/// Reads how many events a record's payload holds from its first bytes, or `None` when they do
/// not say (too few of them survived, or the payload is not of the kind expected). The buffer
/// stores opaque payloads: the server, which knows what it writes, supplies this.
#[derive(Clone, Copy)]
pub struct EventCount(pub fn(&[u8]) -> Option<u32>);

impl fmt::Debug for EventCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EventCount(..)")
    }
}

impl PartialEq for EventCount {
    fn eq(&self, other: &Self) -> bool {
        // Configs are compared in tests only; the same function there is the same pointer.
        std::ptr::fn_addr_eq(self.0, other.0)
    }
}

impl Eq for EventCount {}

/// The events `payload` holds as `count` reads them; 0 when it cannot say or there is no
/// `count`: the gauge of pending events counts what it knows.
pub(crate) fn events_in(count: Option<EventCount>, payload: &[u8]) -> u32 {
    count.and_then(|count| (count.0)(payload)).unwrap_or(0)
}

impl Config {
    /// The default segment size: 32 MiB.
    pub const DEFAULT_SEGMENT_SIZE: u64 = 32 << 20;
    /// The default largest payload: 64 MiB.
    pub const DEFAULT_MAX_RECORD: u32 = 64 << 20;

    /// A buffer in `dir` of at most `max_size` bytes, with the default segment size and
    /// record limit, synced after every group.
    pub fn new(dir: impl Into<PathBuf>, max_size: u64) -> Self {
        Config {
            dir: dir.into(),
            max_size,
            segment_size: Self::DEFAULT_SEGMENT_SIZE,
            max_record: Self::DEFAULT_MAX_RECORD,
            sync: SyncMode::EveryBatch,
            event_count: None,
        }
    }

    /// Whether the cursor is synced when written (not with [`SyncMode::Never`]).
    fn durable(&self) -> bool {
        !matches!(self.sync, SyncMode::Never)
    }

    fn validate(&self) -> io::Result<()> {
        let invalid =
            |what: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, what.to_owned()));
        if self.max_size <= format::HEADER_LEN + format::FRAME_HEADER_LEN as u64 {
            return invalid("disk buffer max_size is too small to hold a record");
        }
        if self.segment_size == 0 {
            return invalid("disk buffer segment_size must be positive");
        }
        Ok(())
    }
}

/// Opens (creating it if needed) and recovers the buffer in `config.dir`.
///
/// Damaged data never makes this fail: it is truncated, salvaged or quarantined, and reported
/// in the returned [`Recovery`].
///
/// # Errors
/// An invalid configuration (`InvalidInput`), or an I/O error creating or listing the
/// directory.
pub fn open<F: FileSystem>(fs: F, config: Config) -> io::Result<(Writer<F>, Reader<F>, Recovery)> {
    config.validate()?;
    let (recovered, recovery) = recover::recover(&fs, &config)?;
    let first_segment = recovered
        .segments
        .keys()
        .next()
        .copied()
        .unwrap_or(recovered.next_segment);
    let segment_count = recovered.segments.len() as u64;
    let shared = Arc::new(Shared::new(recovered.segments, recovered.cursor));
    let stats = &shared.stats;
    add(&stats.bytes_on_disk, recovered.bytes_on_disk);
    add(&stats.records_pending, recovery.records_pending);
    add(&stats.events_pending, recovery.events_pending);
    add(&stats.segments, segment_count);
    add(&stats.damaged_records, recovery.lost_records);
    add(&stats.lost_events, recovery.lost_events);
    add(&stats.damaged_bytes, recovery.damaged_bytes);
    add(&stats.torn_bytes, recovery.torn_bytes);
    add(
        &stats.quarantined_segments,
        recovery.quarantined.len() as u64,
    );

    let durable = config.durable();
    if !matches!(recovery.cursor_file, CursorFile::Valid(_)) {
        // A cursor file from the start: on a file system that later fills up, the cursor can
        // still be overwritten in place, and so segments deleted and space won back. Best
        // effort: a missing cursor only means delivering again.
        if let Err(error) = cursor::write(&fs, &config.dir, recovered.cursor, durable) {
            tracing::warn!(%error, dir = %config.dir.display(), "Failed to write the buffer's ack cursor.");
        }
    }
    let reader = Reader::new(
        fs.clone(),
        &config,
        Arc::clone(&shared),
        first_segment,
        recovered.cursor,
    );
    let writer = Writer::new(
        fs,
        config,
        shared,
        recovered.next_segment,
        recovered.next_seq,
    );
    Ok((writer, reader, recovery))
}
