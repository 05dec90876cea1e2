//! What the writer and the reader share: the segments with how far each may be read, the
//! notifications that wake an async reader or a writer waiting for space, and the statistics.
//!
//! Invariant: a segment's `readable_end` only ever covers records that were written whole; the
//! writer raises it after a successful append and the reader never reads past it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use tokio::sync::Notify;

impl Recent {
    fn evict(&mut self) {
        while self.bytes > self.max {
            let Some(old) = self.records.pop_front() else {
                break;
            };
            self.bytes -= old.frame_len();
        }
    }
}

/// The state of one segment, as the writer and the reader see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentInfo {
    /// Readers may read up to this offset: the end of the last record written whole.
    pub readable_end: u64,
    /// The bytes the file takes on disk (may exceed `readable_end` after a failed rollback).
    pub size: u64,
    /// The last sequence number readable in it; 0 when it holds none.
    pub last_seq: u64,
    /// The events of the records up to `readable_end` that were counted pending: appended in
    /// this run, or found after the cursor at recovery. Raised with `readable_end`, so that a
    /// reader at `readable_end` knows how many of them it never delivered (lost to damage).
    pub events: u64,
    /// The writer no longer writes to it: once all its records are acked it can go.
    pub sealed: bool,
}

/// Shared between a [`crate::Writer`] and its [`crate::Reader`] (reach it with `shared()`).
pub struct Shared {
    /// Notified after every successful append and every segment rotation. An async reader
    /// drains [`crate::Reader::next`] until `None`, then awaits `appended.notified()`; a stored
    /// permit covers an append that lands between the two.
    pub appended: Notify,
    /// Notified after segments are deleted (acked through). A writer that got
    /// [`crate::AppendError::Full`] awaits `space.notified()` and tries again.
    pub space: Notify,
    /// Counters and gauges for metrics.
    pub stats: Stats,
    acked: AtomicU64,
    segments: Mutex<BTreeMap<u64, SegmentInfo>>,
    recent: Mutex<Recent>,
}

/// The latest records the writer appended, as it wrote them (see
/// [`crate::Writer::keep_recent`]), in the order of the log. A reader that keeps up with the
/// writer finds its next records here and does not read the file back: the payloads are the
/// ones just written, the same the page cache would return.
#[derive(Default)]
struct Recent {
    records: VecDeque<RecentRecord>,
    /// The bytes their frames take in the log.
    bytes: usize,
    max: usize,
}

/// One appended record: its frame starts at `offset` of segment `segment`.
#[derive(Clone)]
pub(crate) struct RecentRecord {
    pub segment: u64,
    pub offset: u64,
    pub seq: u64,
    pub payload: Bytes,
}

impl RecentRecord {
    fn frame_len(&self) -> usize {
        crate::format::FRAME_HEADER_LEN + self.payload.len()
    }
}

impl Shared {
    pub(crate) fn new(segments: BTreeMap<u64, SegmentInfo>, acked: u64) -> Self {
        Shared {
            appended: Notify::new(),
            space: Notify::new(),
            stats: Stats::default(),
            acked: AtomicU64::new(acked),
            segments: Mutex::new(segments),
            recent: Mutex::new(Recent::default()),
        }
    }

    fn recent(&self) -> MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the latest appended records, as many as take at most `max` bytes in the log (0: none).
    pub(crate) fn set_recent_max(&self, max: usize) {
        let mut recent = self.recent();
        recent.max = max;
        recent.evict();
    }

    /// Whether appended records are kept at all.
    pub(crate) fn keeps_recent(&self) -> bool {
        self.recent().max > 0
    }

    /// Keeps the records just appended (in the order of the log), letting go of the oldest
    /// ones past the limit.
    pub(crate) fn push_recent(&self, records: impl Iterator<Item = RecentRecord>) {
        let mut recent = self.recent();
        for record in records {
            recent.bytes += record.frame_len();
            recent.records.push_back(record);
        }
        recent.evict();
    }

    /// The kept record whose frame starts at `offset` of `segment`, if there is one.
    pub(crate) fn find_recent(&self, segment: u64, offset: u64) -> Option<RecentRecord> {
        let recent = self.recent();
        let i = recent
            .records
            .binary_search_by(|r| (r.segment, r.offset).cmp(&(segment, offset)))
            .ok()?;
        recent.records.get(i).cloned()
    }

    /// The highest sequence number through which every record is acknowledged (as the reader
    /// last computed it; the cursor file may lag behind).
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    pub(crate) fn set_acked(&self, acked: u64) {
        self.acked.store(acked, Ordering::Relaxed);
    }

    pub(crate) fn segments(&self) -> MutexGuard<'_, BTreeMap<u64, SegmentInfo>> {
        // Every critical section leaves the map consistent before anything can panic in it.
        self.segments.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn notify_appended(&self) {
        self.appended.notify_waiters();
        self.appended.notify_one();
    }

    pub(crate) fn notify_space(&self) {
        self.space.notify_waiters();
        self.space.notify_one();
    }
}

/// The buffer's statistics: plain atomics, read with `load(Ordering::Relaxed)` or all at once
/// with [`Stats::snapshot`]. Counters only grow; gauges go up and down.
#[derive(Debug, Default)]
pub struct Stats {
    /// Gauge: the bytes of all segment files on disk (headers included).
    pub bytes_on_disk: AtomicU64,
    /// Gauge: records appended (or recovered after the cursor) and not yet acknowledged.
    pub records_pending: AtomicU64,
    /// Gauge: the events those records hold, as [`crate::Config::event_count`] reads them from
    /// their payloads (a payload it cannot read counts 0; without it the gauge stays 0). The
    /// events of records lost to damage found while reading leave it once the reader has read
    /// to the end of what is readable in their segment.
    pub events_pending: AtomicU64,
    /// Gauge: segment files on disk.
    pub segments: AtomicU64,
    /// Counter: records appended since open.
    pub appended_records: AtomicU64,
    /// Counter: delivered records acknowledged since open.
    pub acked_records: AtomicU64,
    /// Counter: successful fsyncs (segment data, directory).
    pub fsyncs: AtomicU64,
    /// Counter: failed fsyncs; each one sealed a segment whose recent records are not durable.
    pub fsync_failures: AtomicU64,
    /// Counter: appends that failed with an I/O error (nothing of them is readable).
    pub write_errors: AtomicU64,
    /// Counter: records lost to damage: what recovery found lost (see
    /// [`crate::Recovery::lost_records`]) and the sequence gaps around damage skipped while
    /// reading.
    pub damaged_records: AtomicU64,
    /// Counter: events of the lost records whose frame header and payload start survived, read
    /// at recovery (see [`crate::Recovery::lost_events`]).
    pub lost_events: AtomicU64,
    /// Counter: bytes skipped as damaged, at recovery (before valid records) and while reading.
    pub damaged_bytes: AtomicU64,
    /// Counter: bytes cut off torn segment tails at recovery.
    pub torn_bytes: AtomicU64,
    /// Counter: segments moved to `quarantine/` at recovery.
    pub quarantined_segments: AtomicU64,
}

/// The values of [`Stats`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct StatsSnapshot {
    pub bytes_on_disk: u64,
    pub records_pending: u64,
    pub events_pending: u64,
    pub segments: u64,
    pub appended_records: u64,
    pub acked_records: u64,
    pub fsyncs: u64,
    pub fsync_failures: u64,
    pub write_errors: u64,
    pub damaged_records: u64,
    pub lost_events: u64,
    pub damaged_bytes: u64,
    pub torn_bytes: u64,
    pub quarantined_segments: u64,
}

impl Stats {
    /// Reads every statistic.
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            bytes_on_disk: get(&self.bytes_on_disk),
            records_pending: get(&self.records_pending),
            events_pending: get(&self.events_pending),
            segments: get(&self.segments),
            appended_records: get(&self.appended_records),
            acked_records: get(&self.acked_records),
            fsyncs: get(&self.fsyncs),
            fsync_failures: get(&self.fsync_failures),
            write_errors: get(&self.write_errors),
            damaged_records: get(&self.damaged_records),
            lost_events: get(&self.lost_events),
            damaged_bytes: get(&self.damaged_bytes),
            torn_bytes: get(&self.torn_bytes),
            quarantined_segments: get(&self.quarantined_segments),
        }
    }
}

/// Adds to a statistic.
pub(crate) fn add(stat: &AtomicU64, n: u64) {
    stat.fetch_add(n, Ordering::Relaxed);
}

/// Subtracts from a gauge, stopping at 0 (a gauge that went wrong must not wrap around).
pub(crate) fn sub(stat: &AtomicU64, n: u64) {
    let _ = stat.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(n))
    });
}
