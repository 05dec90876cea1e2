//! The writer: appends groups of records to the current segment, rotates segments, syncs them,
//! and restores a consistent log after every failed write or sync.
//!
//! Invariants:
//! - Sequence numbers are consecutive across successful appends. A failed append whose bytes
//!   were rolled back (`set_len` to the offset before the group) consumes none; one whose
//!   rollback failed too consumes its sequence numbers, so they are never reused: its segment
//!   is sealed at the last good offset and readers never see the group during this run, but a
//!   restart may find the records of it that reached the disk and deliver them (at least once).
//! - After a failed fsync, the segment is sealed and never synced again (a second fsync that
//!   succeeds does not prove the data reached the disk); later appends go to a new segment. A
//!   sync run beside appends ([`Writer::begin_sync`]) can fail after the writer rotated the
//!   segment it covered, which then is synced again with the rotated ones: its records count as
//!   durable only through a copy written after the failure (the server writes everything not
//!   yet acknowledged again).
//! - A record is never split across segments; a group may run past `segment_size`.

use std::fmt;
use std::io;
use std::sync::Arc;

use std::io::IoSlice;

use bytes::Bytes;

use crate::format::{
    FRAME_HEADER_LEN, HEADER_LEN, SEGMENT_HEADER, encode_header, frame_len, segment_path,
};
use crate::fs::{FileSystem, FsFile, write_all_at, write_all_vectored_at};
use crate::shared::{RecentRecord, SegmentInfo, Shared, add};
use crate::{Config, SyncMode, events_in};

/// A record's payload as [`Writer::append`] takes it: its bytes, and how the writer keeps them
/// for the reader (see [`Writer::keep_recent`]). `Bytes` are kept as they are; other payloads
/// are copied.
pub trait Payload: AsRef<[u8]> {
    /// The payload as shared bytes.
    fn shared(&self) -> Bytes {
        Bytes::copy_from_slice(self.as_ref())
    }
}

impl Payload for Bytes {
    fn shared(&self) -> Bytes {
        self.clone()
    }
}

impl Payload for &[u8] {}
impl<const N: usize> Payload for &[u8; N] {}
impl Payload for Vec<u8> {}
impl Payload for &Vec<u8> {}

/// What an append wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    /// The sequence number of the group's first record.
    pub first_seq: u64,
    /// The sequence number of its last record (`first_seq - 1` for an empty group).
    pub last_seq: u64,
    /// The bytes of the group's frames.
    pub bytes: u64,
}

/// Why an append wrote nothing.
#[derive(Debug)]
pub enum AppendError {
    /// The segments on disk would exceed `max_size`. Nothing was written; space comes back as
    /// the reader's acks delete segments (wait on `Shared::space`).
    Full {
        /// The bytes the group needs.
        needed: u64,
        /// The bytes left under `max_size`.
        free: u64,
    },
    /// A payload over `max_record`, or a group larger than `max_size` itself: it can never be
    /// written. Nothing was written.
    TooLarge {
        /// The payload's (or the group's) size.
        size: u64,
        /// The limit it exceeds.
        limit: u64,
    },
    /// The disk failed the write (ENOSPC, EIO, a write that made no progress, ...). The group
    /// was not written and the log is consistent; see [`AppendError::is_retryable`].
    Io(io::Error),
}

impl AppendError {
    /// Whether trying the same append again may succeed: after space is freed for
    /// [`AppendError::Full`], after the disk recovers for most I/O errors; never for
    /// [`AppendError::TooLarge`].
    pub fn is_retryable(&self) -> bool {
        match self {
            AppendError::Full { .. } => true,
            AppendError::TooLarge { .. } => false,
            AppendError::Io(error) => io_retryable(error),
        }
    }

    /// Whether this is [`AppendError::Full`].
    pub fn is_full(&self) -> bool {
        matches!(self, AppendError::Full { .. })
    }
}

/// Errors that come from the state of the disk rather than from how the buffer was set up.
fn io_retryable(error: &io::Error) -> bool {
    use io::ErrorKind as K;
    matches!(
        error.kind(),
        K::StorageFull
            | K::QuotaExceeded
            | K::WriteZero
            | K::Interrupted
            | K::TimedOut
            | K::WouldBlock
    ) || matches!(
        error.raw_os_error(),
        Some(5 /* EIO */ | 28 /* ENOSPC */ | 122 /* EDQUOT */)
    )
}

impl fmt::Display for AppendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppendError::Full { needed, free } => {
                write!(
                    f,
                    "disk buffer full: {needed} bytes needed, {free} free (retry once records are acked)"
                )
            }
            AppendError::TooLarge { size, limit } => {
                write!(
                    f,
                    "record of {size} bytes over the disk buffer's limit of {limit} (a retry cannot help)"
                )
            }
            AppendError::Io(error) => {
                let retry = if io_retryable(error) {
                    "a retry may help"
                } else {
                    "a retry is unlikely to help"
                };
                write!(f, "failed to write to the disk buffer ({retry}): {error}")
            }
        }
    }
}

impl std::error::Error for AppendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AppendError::Io(error) => Some(error),
            AppendError::Full { .. } | AppendError::TooLarge { .. } => None,
        }
    }
}

/// The segment being written.
struct Current<File> {
    id: u64,
    /// Shared with a sync running elsewhere (see [`Writer::begin_sync`]).
    file: Arc<File>,
    /// The end of the last record written whole.
    len: u64,
    /// Written since the last successful sync.
    dirty: bool,
}

/// Appends records to the buffer. Obtained from [`crate::open`].
pub struct Writer<F: FileSystem> {
    fs: F,
    config: Config,
    shared: Arc<Shared>,
    /// `None` until the first append, and after a seal: the next append starts a segment.
    current: Option<Current<F::File>>,
    /// Rotated segments with writes not yet synced.
    unsynced: Vec<Arc<F::File>>,
    /// The same with [`SyncMode::Never`], by id: nothing may call sync for a long time, and
    /// their handles would pile up; a sync reopens them.
    unsynced_ids: Vec<u64>,
    next_segment: u64,
    next_seq: u64,
    /// A segment was created since the directory was last synced.
    dir_dirty: bool,
    /// The frame headers of the group being written (reused).
    headers: Vec<u8>,
}

impl<F: FileSystem> Writer<F> {
    pub(crate) fn new(
        fs: F,
        config: Config,
        shared: Arc<Shared>,
        next_segment: u64,
        next_seq: u64,
    ) -> Self {
        Writer {
            fs,
            config,
            shared,
            current: None,
            unsynced: Vec::new(),
            unsynced_ids: Vec::new(),
            next_segment,
            next_seq,
            dir_dirty: false,
            headers: Vec::new(),
        }
    }

    /// What the writer shares with the reader: notifications and statistics.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Keeps the latest appended records, as many as take `max_bytes` in the log, in memory for
    /// the reader, which then takes them from there instead of reading the segment back while
    /// it keeps up with the writer (0, the default: it always reads the file). A payload given
    /// as [`Bytes`] is kept as it is, others are copied. The bytes are exactly the ones
    /// written, which is also what reading them back from the page cache returns; only a file
    /// changed behind the buffer's back reads differently, and a kept record is not checked
    /// against its CRC.
    pub fn keep_recent(&mut self, max_bytes: usize) {
        self.shared.set_recent_max(max_bytes);
    }

    /// The sequence number the next record will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The configuration the buffer was opened with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Appends one group of records, in order, to the current segment (starting a new one first
    /// when the current one has reached `segment_size`). The records are readable once this
    /// returns, durable once [`Writer::sync`] returns `Ok`.
    ///
    /// # Errors
    /// [`AppendError::Full`], [`AppendError::TooLarge`] or [`AppendError::Io`]; in every case
    /// no record of the group is readable and the writer can take the next append.
    pub fn append<P: Payload>(&mut self, payloads: &[P]) -> Result<Appended, AppendError> {
        let first_seq = self.next_seq;
        let mut bytes = 0;
        for payload in payloads {
            let len = payload.as_ref().len() as u64;
            if len > u64::from(self.config.max_record) {
                return Err(AppendError::TooLarge {
                    size: len,
                    limit: u64::from(self.config.max_record),
                });
            }
            bytes += frame_len(payload.as_ref().len());
        }
        if payloads.is_empty() {
            return Ok(Appended {
                first_seq,
                last_seq: first_seq - 1,
                bytes: 0,
            });
        }

        let rotate = self
            .current
            .as_ref()
            .is_none_or(|c| c.len >= self.config.segment_size);
        let needed = bytes + if rotate { HEADER_LEN } else { 0 };
        if needed > self.config.max_size {
            return Err(AppendError::TooLarge {
                size: needed,
                limit: self.config.max_size,
            });
        }
        let on_disk = self
            .shared
            .stats
            .bytes_on_disk
            .load(std::sync::atomic::Ordering::Relaxed);
        if on_disk + needed > self.config.max_size {
            // The current segment can only be deleted once sealed: without this, a buffer whose
            // records are all acked could stay full for good.
            if self.current.as_ref().is_some_and(|c| c.len > HEADER_LEN) {
                self.seal_releasing_handle();
            }
            return Err(AppendError::Full {
                needed,
                free: self.config.max_size.saturating_sub(on_disk),
            });
        }
        if rotate {
            self.seal(true);
            if let Err(error) = self.start_segment() {
                add(&self.shared.stats.write_errors, 1);
                return Err(AppendError::Io(error));
            }
        }

        // The frame headers in one buffer, written with the payloads where they lie (one
        // vectored write): copying every payload into one buffer first cost the writer as much
        // as the kernel's copy into the page cache.
        let mut headers = std::mem::take(&mut self.headers);
        headers.clear();
        let mut events = 0;
        for (seq, payload) in (first_seq..).zip(payloads) {
            encode_header(&mut headers, seq, payload.as_ref());
            events += u64::from(events_in(self.config.event_count, payload.as_ref()));
        }
        let count = payloads.len() as u64;
        let Some(current) = self.current.as_mut() else {
            self.headers = headers;
            add(&self.shared.stats.write_errors, 1);
            return Err(AppendError::Io(io::Error::other("no segment to write to")));
        };
        let offset = current.len;
        let written = {
            let mut slices = Vec::with_capacity(payloads.len() * 2);
            for (header, payload) in headers.chunks(FRAME_HEADER_LEN).zip(payloads) {
                slices.push(IoSlice::new(header));
                slices.push(IoSlice::new(payload.as_ref()));
            }
            write_all_vectored_at(&*current.file, &mut slices, offset)
        };
        self.headers = headers;
        if let Err(error) = written {
            self.roll_back(offset, count, &error);
            // A file system that is full (smaller than `max_size`, or shared) frees space only
            // when acknowledged segments are deleted, and the current one never is: seal it, so
            // it goes once read and acknowledged, and the retry starts a new one.
            if is_out_of_space(&error) && self.current.as_ref().is_some_and(|c| c.len > HEADER_LEN)
            {
                self.seal_releasing_handle();
            }
            return Err(AppendError::Io(error));
        }

        let segment = current.id;
        current.len += bytes;
        current.dirty = true;
        if self.shared.keeps_recent() {
            let mut at = offset;
            self.shared
                .push_recent((first_seq..).zip(payloads).map(|(seq, payload)| {
                    let record = RecentRecord {
                        segment,
                        offset: at,
                        seq,
                        payload: payload.shared(),
                    };
                    at += frame_len(payload.as_ref().len());
                    record
                }));
        }
        let last_seq = first_seq + count - 1;
        self.next_seq = last_seq + 1;
        let stats = &self.shared.stats;
        add(&stats.appended_records, count);
        add(&stats.bytes_on_disk, bytes);
        // Counted before the records become readable: a reader that got one and saw it acked
        // first would subtract from gauges that do not hold it yet (a subtraction stops at 0),
        // and they would stay too high for good.
        add(&stats.records_pending, count);
        add(&stats.events_pending, events);
        if let Some(info) = self.shared.segments().get_mut(&current.id) {
            info.readable_end = current.len;
            info.size = current.len;
            info.last_seq = last_seq;
            info.events += events;
        }
        self.shared.notify_appended();
        Ok(Appended {
            first_seq,
            last_seq,
            bytes,
        })
    }

    /// Makes every record appended so far durable: syncs the current segment, the rotated ones
    /// not yet synced, and the directory when a segment was created. The server calls it after
    /// each group for [`SyncMode::EveryBatch`] and on a timer for [`SyncMode::Interval`].
    ///
    /// # Errors
    /// The first I/O error. The records appended since the last successful sync are then not
    /// committed: the failing segment was sealed, is never synced again, and later appends go
    /// to a new segment.
    pub fn sync(&mut self) -> io::Result<()> {
        let pending = self.begin_sync();
        let outcome = pending.run();
        self.finish_sync(Ok(outcome))
    }

    /// Takes out what the next sync must cover (the segments written since the last one, and
    /// the directory when a segment was created), to run with [`PendingSync::run`] on another
    /// thread while this writer goes on appending; hand the outcome to
    /// [`Writer::finish_sync`]. The sync covers every record appended before this call.
    pub fn begin_sync(&mut self) -> PendingSync<F> {
        let current = self.current.as_mut().filter(|c| c.dirty).map(|c| {
            c.dirty = false;
            (c.id, c.file.clone())
        });
        PendingSync {
            fs: self.fs.clone(),
            dir: self.config.dir.clone(),
            shared: self.shared.clone(),
            ids: std::mem::take(&mut self.unsynced_ids),
            rotated: std::mem::take(&mut self.unsynced),
            current,
            sync_dir: std::mem::take(&mut self.dir_dirty),
        }
    }

    /// Takes the outcome of a sync begun with [`Writer::begin_sync`].
    ///
    /// # Errors
    /// The sync's first I/O error (or why it could not run). The records appended before it
    /// began are then not committed: a segment whose sync failed is sealed and never synced
    /// again (a later sync that succeeds does not prove its data reached the disk), and later
    /// appends go to a new segment.
    pub fn finish_sync(&mut self, outcome: io::Result<SyncOutcome>) -> io::Result<()> {
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(error) => {
                // Nothing is known synced: treat it as a failed sync of everything it covered.
                add(&self.shared.stats.fsync_failures, 1);
                self.seal(false);
                self.dir_dirty = true;
                return Err(error);
            }
        };
        if let Some(id) = outcome.failed_current
            && self.current.as_ref().is_some_and(|c| c.id == id)
        {
            // Not kept for a later sync: that one could succeed without the data.
            self.seal(false);
        }
        if outcome.dir_failed {
            self.dir_dirty = true;
        }
        outcome.error.map_or(Ok(()), Err)
    }

    /// Stops writing to the current segment. With `keep_for_sync`, its unsynced writes are
    /// synced by the next [`Writer::sync`].
    fn seal(&mut self, keep_for_sync: bool) {
        let Some(current) = self.current.take() else {
            return;
        };
        if let Some(info) = self.shared.segments().get_mut(&current.id) {
            info.sealed = true;
        }
        if keep_for_sync && current.dirty {
            if matches!(self.config.sync, SyncMode::Never) {
                self.unsynced_ids.push(current.id);
            } else {
                self.unsynced.push(current.file);
            }
        }
        // The reader moves past a sealed segment and may release it.
        self.shared.notify_appended();
    }

    /// Seals the current segment and lets go of its handle at once (a later sync reopens it by
    /// id): the segment is sealed so that it can be deleted once acknowledged, and a file system
    /// gives a deleted file's space back only when its last handle is closed.
    fn seal_releasing_handle(&mut self) {
        let Some(current) = self.current.as_ref() else {
            return;
        };
        let (id, dirty) = (current.id, current.dirty);
        self.seal(false);
        if dirty {
            self.unsynced_ids.push(id);
        }
    }

    /// Creates the next segment and writes its header.
    fn start_segment(&mut self) -> io::Result<()> {
        let id = self.next_segment;
        // An id is never reused, even when creating its file fails.
        self.next_segment += 1;
        let path = segment_path(&self.config.dir, id);
        let file = self.fs.create(&path)?;
        self.dir_dirty = true;
        if let Err(error) = write_all_at(&file, &SEGMENT_HEADER, 0) {
            // Recovery deletes a segment without records, should this fail too.
            let _ = self.fs.remove_file(&path);
            return Err(error);
        }
        self.shared.segments().insert(
            id,
            SegmentInfo {
                readable_end: HEADER_LEN,
                size: HEADER_LEN,
                last_seq: 0,
                events: 0,
                sealed: false,
            },
        );
        add(&self.shared.stats.segments, 1);
        add(&self.shared.stats.bytes_on_disk, HEADER_LEN);
        self.current = Some(Current {
            id,
            file: Arc::new(file),
            len: HEADER_LEN,
            dirty: true,
        });
        Ok(())
    }

    /// Undoes a failed group write: cuts the segment back to `offset`, or, when even that
    /// fails, seals the segment at `offset` and gives up the group's sequence numbers.
    fn roll_back(&mut self, offset: u64, count: u64, error: &io::Error) {
        add(&self.shared.stats.write_errors, 1);
        let Some(current) = self.current.as_mut() else {
            return;
        };
        match current.file.set_len(offset) {
            Ok(()) => {
                tracing::warn!(%error, segment = current.id, "Failed to append to the disk buffer; the group was rolled back.");
            }
            Err(truncate_error) => {
                tracing::warn!(
                    %error,
                    %truncate_error,
                    segment = current.id,
                    "Failed to append to the disk buffer and to roll the group back; sealed the segment."
                );
                // Whatever the group left behind takes space until the segment is deleted.
                let size = current.file.len().unwrap_or(offset).max(offset);
                if let Some(info) = self.shared.segments().get_mut(&current.id) {
                    add(
                        &self.shared.stats.bytes_on_disk,
                        size.saturating_sub(info.size),
                    );
                    info.size = size;
                }
                self.next_seq += count;
                self.seal(true);
            }
        }
    }
}

/// ENOSPC or EDQUOT: space may come back once segments are deleted.
fn is_out_of_space(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// A sync taken out of a [`Writer`] with [`Writer::begin_sync`]: run it anywhere, once.
pub struct PendingSync<F: FileSystem> {
    fs: F,
    dir: std::path::PathBuf,
    shared: Arc<Shared>,
    /// Rotated segments to reopen by id (their handles were let go).
    ids: Vec<u64>,
    /// Rotated segments with their handles.
    rotated: Vec<Arc<F::File>>,
    /// The segment being written, if written since the last sync.
    current: Option<(u64, Arc<F::File>)>,
    sync_dir: bool,
}

/// What a [`PendingSync`] did, for [`Writer::finish_sync`].
#[derive(Debug)]
pub struct SyncOutcome {
    error: Option<io::Error>,
    /// The segment being written failed its sync.
    failed_current: Option<u64>,
    /// The directory's sync failed: it is synced again next time.
    dir_failed: bool,
}

impl<F: FileSystem> PendingSync<F> {
    /// fsyncs the segments and the directory (blocking).
    pub fn run(self) -> SyncOutcome {
        let stats = &self.shared.stats;
        let mut outcome = SyncOutcome {
            error: None,
            failed_current: None,
            dir_failed: false,
        };
        let mut files = self.rotated;
        for id in self.ids {
            match self.fs.open(&segment_path(&self.dir, id)) {
                Ok(file) => files.push(Arc::new(file)),
                // Acked through and deleted already.
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => {
                    add(&stats.fsync_failures, 1);
                    outcome.error.get_or_insert(error);
                }
            }
        }
        for file in files {
            match file.sync_data() {
                Ok(()) => add(&stats.fsyncs, 1),
                Err(error) => {
                    add(&stats.fsync_failures, 1);
                    tracing::warn!(%error, "Failed to sync a disk buffer segment; its recent records are not durable.");
                    outcome.error.get_or_insert(error);
                }
            }
        }
        if let Some((id, file)) = self.current {
            match file.sync_data() {
                Ok(()) => add(&stats.fsyncs, 1),
                Err(error) => {
                    add(&stats.fsync_failures, 1);
                    tracing::warn!(%error, segment = id, "Failed to sync a disk buffer segment; its recent records are not durable.");
                    outcome.failed_current = Some(id);
                    outcome.error.get_or_insert(error);
                }
            }
        }
        if self.sync_dir {
            match self.fs.sync_dir(&self.dir) {
                Ok(()) => add(&stats.fsyncs, 1),
                Err(error) => {
                    add(&stats.fsync_failures, 1);
                    outcome.dir_failed = true;
                    outcome.error.get_or_insert(error);
                }
            }
        }
        outcome
    }
}
