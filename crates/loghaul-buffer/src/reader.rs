//! The reader: delivers records in sequence order, tracks which of them are acknowledged,
//! persists the ack cursor, and deletes segments once every record in them is acked.
//!
//! Invariants:
//! - It reads a segment only up to the `readable_end` the writer published, so it never sees a
//!   group that is being written or that failed.
//! - `acked` (the cursor) is the highest sequence number such that every record up to it was
//!   acknowledged or will never be delivered (lost to damage, or acked before a restart):
//!   `min(unacked) - 1`, or the last sequence number passed when nothing is unacked.
//! - A segment is deleted only after a cursor covering all of it was persisted, so a restart
//!   never takes a deleted segment's records for lost ones.
//! - `events_pending` holds the events of the records delivered and not acked (kept per record
//!   until its ack) and of those not yet read. The events of records a segment lost to damage
//!   are known only as a total: what the segment's readable part was counted with
//!   (`SegmentInfo::events`) less what the reader delivered from it, taken off once the reader
//!   has read to its `readable_end`.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::format::{
    FRAME_HEADER_LEN, HEADER_LEN, decode_header, frame_len, record_crc, resync, segment_path,
};
use crate::fs::{FileSystem, read_exact_at};
use crate::pool::Pool;
use crate::shared::{SegmentInfo, Shared, add, sub};
use crate::{Config, EventCount, cursor, events_in};

/// The cursor is written at most this often while acks come in.
const PERSIST_INTERVAL: Duration = Duration::from_millis(100);
/// One warning about damage per this period, with the count of the ones held back.
const WARN_INTERVAL: Duration = Duration::from_secs(5);
/// How much a read fetches at least, so small records cost one read per many. Larger than a
/// typical record (a batch of a few hundred KiB): with a window smaller than its records, every
/// record's header read fetched the start of its payload, which was then read again whole.
const READ_AHEAD: usize = 1 << 20;

/// One record read from the buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its sequence number: acknowledge it with [`Reader::ack`].
    pub seq: u64,
    /// The payload as appended.
    pub payload: Bytes,
}

/// Reads records from the buffer and takes their acknowledgements. Obtained from
/// [`crate::open`].
pub struct Reader<F: FileSystem> {
    fs: F,
    dir: PathBuf,
    durable: bool,
    max_record: u32,
    event_count: Option<EventCount>,
    shared: Arc<Shared>,
    /// The segment being read (or the next one to look for).
    seg_id: u64,
    file: Option<F::File>,
    /// The position of the next frame in `seg_id`.
    offset: u64,
    /// The events of the records delivered from `seg_id` so far, or already settled as lost.
    seg_events: u64,
    /// Bytes read ahead from `seg_id`, starting at `window_offset`.
    window: Bytes,
    window_offset: u64,
    /// The windows' buffers.
    pool: Pool,
    /// The last valid sequence number the reader walked over (records must exceed it).
    scan_seq: u64,
    /// The last sequence number delivered, or passed over as acked before a restart.
    last_seq: u64,
    /// Delivered and not yet acknowledged, with the events each holds (taken off
    /// `events_pending` at its ack).
    unacked: BTreeMap<u64, u32>,
    /// The value the cursor file holds.
    persisted: u64,
    last_persist: Instant,
    /// Damage was skipped: the sequence gap before the next valid record is counted as lost.
    damage_pending: bool,
    last_warn: Option<Instant>,
    warns_held_back: u64,
}

impl<F: FileSystem> Reader<F> {
    pub(crate) fn new(
        fs: F,
        config: &Config,
        shared: Arc<Shared>,
        first_segment: u64,
        cursor: u64,
    ) -> Self {
        Reader {
            fs,
            dir: config.dir.clone(),
            durable: config.durable(),
            max_record: config.max_record,
            event_count: config.event_count,
            shared,
            seg_id: first_segment,
            file: None,
            offset: HEADER_LEN,
            seg_events: 0,
            window: Bytes::new(),
            window_offset: 0,
            pool: Pool::default(),
            scan_seq: 0,
            last_seq: cursor,
            unacked: BTreeMap::new(),
            persisted: cursor,
            last_persist: Instant::now(),
            damage_pending: false,
            last_warn: None,
            warns_held_back: 0,
        }
    }

    /// What the reader shares with the writer: notifications and statistics.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The highest sequence number through which every record is acknowledged.
    pub fn acked(&self) -> u64 {
        self.unacked
            .first_key_value()
            .map_or(self.last_seq, |(first, _)| first - 1)
    }

    /// How many delivered records wait for their acknowledgement.
    pub fn unacked(&self) -> usize {
        self.unacked.len()
    }

    /// The next record in sequence order, or `None` when the reader has caught up with the
    /// writer. Never blocks: await `shared().appended.notified()` for more.
    ///
    /// Damaged bytes (a record whose check fails) are skipped up to the next valid record and
    /// counted in the statistics.
    ///
    /// # Errors
    /// An I/O error reading a segment; calling again retries from the same record.
    // Not an Iterator: `None` means "caught up for now", and more records may follow.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> io::Result<Option<Record>> {
        loop {
            let view = {
                let segments = self.shared.segments();
                segments
                    .range(self.seg_id..)
                    .next()
                    .map(|(id, info)| (*id, *info))
            };
            let Some((id, info)) = view else {
                return Ok(None);
            };
            if id != self.seg_id || self.file.is_none() {
                self.seg_id = id;
                self.offset = HEADER_LEN;
                self.seg_events = 0;
                self.window = Bytes::new();
                match self.fs.open_read(&segment_path(&self.dir, id)) {
                    Ok(file) => self.file = Some(file),
                    Err(error) if error.kind() == io::ErrorKind::NotFound && info.sealed => {
                        // The file went away under the buffer: its records are lost.
                        self.skipped(info.readable_end.saturating_sub(HEADER_LEN));
                        self.offset = info.readable_end;
                    }
                    Err(error) => return Err(error),
                }
            }
            if self.offset >= info.readable_end {
                self.settle_lost_events(&info);
                if !info.sealed {
                    return Ok(None);
                }
                self.seg_id = id + 1;
                self.file = None;
                self.window = Bytes::new();
                if let Err(error) = self.release() {
                    tracing::warn!(%error, "Failed to delete acked disk buffer segments; will try again.");
                }
                continue;
            }
            if let Some(record) = self.read_record(info.readable_end)? {
                return Ok(Some(record));
            }
        }
    }

    /// Reads the frame at `offset`: the record if it is valid and not yet acked, `None` after
    /// skipping an acked record or damage.
    fn read_record(&mut self, end: u64) -> io::Result<Option<Record>> {
        let offset = self.offset;
        // Just written and still kept: taken as the writer wrote it, neither read back nor
        // checked (the checks are for what a disk hands back).
        let recent = self
            .shared
            .find_recent(self.seg_id, offset)
            .filter(|r| r.seq > self.scan_seq && offset + frame_len(r.payload.len()) <= end);
        if let Some(r) = recent {
            return Ok(self.found(r.seq, r.payload));
        }
        let header = match self.bytes(offset, FRAME_HEADER_LEN, end)? {
            Some(bytes) => decode_header(&bytes),
            None => None,
        };
        let valid = match header {
            Some(h) if h.len <= self.max_record && h.seq > self.scan_seq => {
                match self.bytes(offset + FRAME_HEADER_LEN as u64, h.len as usize, end)? {
                    Some(payload) if record_crc(h.seq, &payload) == h.crc => Some((h.seq, payload)),
                    _ => None,
                }
            }
            _ => None,
        };
        let Some((seq, payload)) = valid else {
            self.skip_damage(end)?;
            return Ok(None);
        };
        Ok(self.found(seq, payload))
    }

    /// Moves past the valid record `seq` at the reader's offset: the record, unless it was
    /// acked before a restart.
    fn found(&mut self, seq: u64, payload: Bytes) -> Option<Record> {
        self.offset += frame_len(payload.len());
        if self.damage_pending {
            self.damage_pending = false;
            let base = self.scan_seq.max(self.last_seq);
            if base > 0 {
                let lost = seq.saturating_sub(base + 1);
                add(&self.shared.stats.damaged_records, lost);
                sub(&self.shared.stats.records_pending, lost);
            }
        }
        self.scan_seq = seq;
        if seq <= self.last_seq {
            // Acked before the restart: a segment is kept until all of it is acked.
            return None;
        }
        self.last_seq = seq;
        let events = events_in(self.event_count, &payload);
        self.seg_events += u64::from(events);
        self.unacked.insert(seq, events);
        Some(Record { seq, payload })
    }

    /// With the reader at `info.readable_end` of its segment: takes the events of the records
    /// there that it never delivered (lost to damage, or to the file going away) off the
    /// gauge. The writer raises `info.events` with `readable_end`, under one lock, so they
    /// cover the same records.
    fn settle_lost_events(&mut self, info: &SegmentInfo) {
        if let Some(lost) = info.events.checked_sub(self.seg_events)
            && lost > 0
        {
            sub(&self.shared.stats.events_pending, lost);
            self.seg_events = info.events;
        }
    }

    /// `len` bytes at `at`, if they lie before `end`.
    fn bytes(&mut self, at: u64, len: usize, end: u64) -> io::Result<Option<Bytes>> {
        if at + len as u64 > end {
            return Ok(None);
        }
        let in_window = at >= self.window_offset
            && at + len as u64 <= self.window_offset + self.window.len() as u64;
        if !in_window {
            let Some(file) = self.file.as_ref() else {
                return Ok(None);
            };
            let want = len
                .max(READ_AHEAD)
                .min(usize::try_from(end - at).unwrap_or(usize::MAX));
            let mut buf = self.pool.take_len(want);
            read_exact_at(file, &mut buf, at)?;
            self.window = self.pool.share(buf);
            self.window_offset = at;
        }
        let start = (at - self.window_offset) as usize;
        Ok(Some(self.window.slice(start..start + len)))
    }

    /// Skips from `offset` to the next valid record before `end` (or to `end`).
    fn skip_damage(&mut self, end: u64) -> io::Result<()> {
        let Some(file) = self.file.as_ref() else {
            return Ok(());
        };
        // Damage is rare: read the rest of the readable part whole and search it.
        let mut rest = vec![0; usize::try_from(end - self.offset).unwrap_or(usize::MAX)];
        read_exact_at(file, &mut rest, self.offset)?;
        let skip = resync(&rest, 0, self.max_record, self.scan_seq)
            .map_or(rest.len() as u64, |found| found.offset);
        let at = self.offset;
        self.offset += skip;
        self.skipped(skip);
        self.warn_damage(at, skip);
        Ok(())
    }

    fn skipped(&mut self, bytes: u64) {
        add(&self.shared.stats.damaged_bytes, bytes);
        self.damage_pending = true;
    }

    fn warn_damage(&mut self, offset: u64, bytes: u64) {
        let now = Instant::now();
        if self
            .last_warn
            .is_none_or(|last| now.duration_since(last) >= WARN_INTERVAL)
        {
            tracing::warn!(
                segment = self.seg_id,
                offset,
                bytes,
                held_back = self.warns_held_back,
                "Skipped damaged bytes in a disk buffer segment."
            );
            self.last_warn = Some(now);
            self.warns_held_back = 0;
        } else {
            self.warns_held_back += 1;
        }
    }

    /// Acknowledges a delivered record. Acks may come in any order; unknown or repeated ones
    /// are ignored. Persists the cursor when the last write is 100 ms old, and deletes the
    /// segments that are acked through.
    ///
    /// # Errors
    /// An I/O error writing the cursor or deleting a segment. The ack itself is recorded; the
    /// write is tried again with a later ack or [`Reader::persist`].
    pub fn ack(&mut self, seq: u64) -> io::Result<()> {
        if let Some(events) = self.unacked.remove(&seq) {
            add(&self.shared.stats.acked_records, 1);
            sub(&self.shared.stats.records_pending, 1);
            sub(&self.shared.stats.events_pending, u64::from(events));
        }
        let acked = self.acked();
        self.shared.set_acked(acked);
        if acked != self.persisted && self.last_persist.elapsed() >= PERSIST_INTERVAL {
            self.persist()?;
        }
        self.release()
    }

    /// Writes the cursor now (on shutdown, or on the server's own schedule).
    ///
    /// # Errors
    /// Any I/O error; the previous cursor stays in place.
    pub fn persist(&mut self) -> io::Result<()> {
        let acked = self.acked();
        self.last_persist = Instant::now();
        cursor::write(&self.fs, &self.dir, acked, self.durable)?;
        self.persisted = acked;
        Ok(())
    }

    /// Deletes the segments the reader has moved past whose records are all acked.
    fn release(&mut self) -> io::Result<()> {
        let acked = self.acked();
        let doomed: Vec<(u64, u64, u64)> = self
            .shared
            .segments()
            .range(..self.seg_id)
            .filter(|(_, info)| info.sealed && info.last_seq <= acked)
            .map(|(id, info)| (*id, info.size, info.last_seq))
            .collect();
        let Some(covers) = doomed.iter().map(|d| d.2).max() else {
            return Ok(());
        };
        if self.persisted < covers {
            self.persist()?;
        }
        let mut result = Ok(());
        let mut freed = false;
        for (id, size, _) in doomed {
            match self.fs.remove_file(&segment_path(&self.dir, id)) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => {
                    result = Err(error);
                    continue;
                }
            }
            self.shared.segments().remove(&id);
            sub(&self.shared.stats.segments, 1);
            sub(&self.shared.stats.bytes_on_disk, size);
            freed = true;
        }
        if freed {
            self.shared.notify_space();
        }
        result
    }
}
