//! Recovery on open: reads the cursor, cleans up what interrupted writes left behind, deletes
//! segments that are acked through, cuts torn tails, and salvages segments damaged in the
//! middle (valid records copied to a new file, the original moved to `quarantine/`).
//!
//! Damaged data never makes recovery fail: whatever cannot be read, truncated or salvaged is
//! counted, logged and worked around (the reader skips damage at run time too). Only an error
//! on the directory itself (creating or listing it) is returned.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::cursor::{self, CursorFile};
use crate::format::{
    self, FRAME_HEADER_LEN, HEADER_LEN, RecordPos, SEGMENT_HEADER, Scan, file_name, segment_id,
    segment_path,
};
use crate::fs::{FileSystem, FsFile, read_all, write_all_at};
use crate::shared::SegmentInfo;
use crate::{Config, events_in};

/// The directory damaged segments are moved to.
pub(crate) const QUARANTINE_DIR: &str = "quarantine";
/// What a salvaged copy of `NAME.seg` is written as, before it replaces the original.
pub(crate) const SALVAGE_SUFFIX: &str = ".salvage.tmp";

/// What recovery found and did; `Display` gives one log line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Segment files found.
    pub segments: usize,
    /// Segments deleted because every record in them was acked (or none was valid).
    pub segments_deleted: usize,
    /// Records after the cursor, to be delivered.
    pub records_pending: u64,
    /// The events those records hold, as [`crate::Config::event_count`] reads them (0 without
    /// it): what waits in the buffer, in events.
    pub events_pending: u64,
    /// The cursor: every sequence number up to it is acknowledged.
    pub cursor: u64,
    /// Whether the cursor file was valid, missing or damaged.
    pub cursor_file: CursorFile,
    /// The sequence number the writer goes on with.
    pub next_seq: u64,
    /// Bytes cut off torn segment tails.
    pub torn_bytes: u64,
    /// Bytes of damage followed by valid records (salvaged around, or quarantined).
    pub damaged_bytes: u64,
    /// Records after the cursor that recovery found lost: sequence numbers missing around
    /// damage and between segments, and the records a torn tail begins with whose frame header
    /// survived (a record cut mid-way). A tail cut exactly at a record boundary, or within a
    /// frame header, leaves nothing to count; a gap is counted again at every open until the
    /// cursor passes it.
    pub lost_records: u64,
    /// The events those records held, as far as their payloads' first bytes survived to say
    /// (see [`crate::Config::event_count`]): a lower bound, since a record whose header is gone
    /// too is counted in `lost_records` only.
    pub lost_events: u64,
    /// Where damaged segments were moved.
    pub quarantined: Vec<PathBuf>,
    /// Temporary files of interrupted writes that were removed.
    pub removed_tmp: usize,
}

impl fmt::Display for Recovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "segments={} deleted={} pending={} events_pending={} cursor={} cursor_file={} next_seq={} torn_bytes={} damaged_bytes={} lost_records={} lost_events={} quarantined={}",
            self.segments,
            self.segments_deleted,
            self.records_pending,
            self.events_pending,
            self.cursor,
            match self.cursor_file {
                CursorFile::Valid(_) => "ok",
                CursorFile::Missing => "missing",
                CursorFile::Damaged => "damaged",
            },
            self.next_seq,
            self.torn_bytes,
            self.damaged_bytes,
            self.lost_records,
            self.lost_events,
            self.quarantined.len(),
        )?;
        for path in &self.quarantined {
            write!(f, " {}", path.display())?;
        }
        Ok(())
    }
}

/// The state the writer and reader start from.
pub(crate) struct Recovered {
    pub segments: BTreeMap<u64, SegmentInfo>,
    pub next_segment: u64,
    pub next_seq: u64,
    pub cursor: u64,
    pub bytes_on_disk: u64,
}

pub(crate) fn recover<F: FileSystem>(fs: &F, config: &Config) -> io::Result<(Recovered, Recovery)> {
    let dir = config.dir.as_path();
    fs.create_dir_all(dir)?;
    let entries = fs.read_dir(dir)?;
    let mut report = Recovery::default();
    let names: BTreeSet<&str> = entries.iter().map(|p| file_name(p)).collect();

    let mut segment_ids = BTreeSet::new();
    for entry in &entries {
        let name = file_name(entry);
        if let Some(id) = segment_id(name) {
            segment_ids.insert(id);
        } else if let Some(original) = name.strip_suffix(SALVAGE_SUFFIX)
            && let Some(id) = segment_id(original)
            && !names.contains(original)
        {
            // The original already went to quarantine: finish the salvage.
            match fs.rename(entry, &dir.join(original)) {
                Ok(()) => {
                    segment_ids.insert(id);
                }
                Err(error) => {
                    tracing::warn!(%error, path = %entry.display(), "Failed to finish salvaging a disk buffer segment.");
                }
            }
        } else if name.ends_with(".tmp") {
            match fs.remove_file(entry) {
                Ok(()) => report.removed_tmp += 1,
                Err(error) => {
                    tracing::warn!(%error, path = %entry.display(), "Failed to remove a leftover temporary file.");
                }
            }
        }
    }

    let cursor_file = cursor::read(fs, dir);
    let cursor = cursor_file.acked();
    match cursor_file {
        CursorFile::Damaged => {
            tracing::warn!(dir = %dir.display(), "The disk buffer's ack cursor is damaged; delivering every record again.");
        }
        CursorFile::Missing if !segment_ids.is_empty() => {
            tracing::warn!(dir = %dir.display(), "The disk buffer has no ack cursor; delivering every record.");
        }
        CursorFile::Missing | CursorFile::Valid(_) => {}
    }
    report.cursor_file = cursor_file;
    report.cursor = cursor;

    let last_id = segment_ids.last().copied();
    let mut state = Walk {
        cursor,
        prev_seq: 0,
        max_seq: cursor,
        // Without a trustworthy cursor, deleted segments would look like a gap at the start.
        expected: matches!(cursor_file, CursorFile::Valid(_)).then_some(cursor + 1),
    };
    let mut segments = BTreeMap::new();
    let mut bytes_on_disk = 0;
    for &id in &segment_ids {
        report.segments += 1;
        let path = segment_path(dir, id);
        let is_last = Some(id) == last_id;
        if let Some(info) = recover_segment(fs, config, &path, is_last, &mut state, &mut report) {
            bytes_on_disk += info.size;
            segments.insert(id, info);
        }
    }

    report.next_seq = state.max_seq + 1;
    let recovered = Recovered {
        segments,
        next_segment: last_id.map_or(1, |id| id + 1),
        next_seq: report.next_seq,
        cursor,
        bytes_on_disk,
    };
    Ok((recovered, report))
}

/// What the walk over the segments carries from one to the next.
struct Walk {
    cursor: u64,
    /// The last valid sequence number so far: later records must exceed it.
    prev_seq: u64,
    max_seq: u64,
    /// The sequence number the next record after the cursor should have.
    expected: Option<u64>,
}

/// Recovers one segment; `None` when it is no longer part of the log.
fn recover_segment<F: FileSystem>(
    fs: &F,
    config: &Config,
    path: &Path,
    is_last: bool,
    walk: &mut Walk,
    report: &mut Recovery,
) -> Option<SegmentInfo> {
    let data = match fs.open(path).and_then(|file| read_all(&file)) {
        Ok(data) => data,
        Err(error) => {
            tracing::warn!(%error, path = %path.display(), "Failed to read a disk buffer segment; moving it to quarantine.");
            if let Some(moved) = quarantine(fs, &config.dir, path) {
                report.quarantined.push(moved);
            }
            return None;
        }
    };
    let scan = format::scan(&data, config.max_record, walk.prev_seq);
    let events = count_records(config, &data, &scan, walk, report);

    let Some(last_seq) = scan.last_seq() else {
        let header_prefix = data.len() < SEGMENT_HEADER.len() && SEGMENT_HEADER.starts_with(&data);
        if scan.header_ok || header_prefix || is_last {
            // Nothing but a torn write (or an empty segment): nothing to keep.
            report.torn_bytes +=
                (data.len() as u64).saturating_sub(if scan.header_ok { HEADER_LEN } else { 0 });
            remove(fs, path, report);
        } else {
            tracing::warn!(path = %path.display(), bytes = data.len(), "A disk buffer segment holds no valid record; moving it to quarantine.");
            report.damaged_bytes += data.len() as u64;
            if let Some(moved) = quarantine(fs, &config.dir, path) {
                report.quarantined.push(moved);
            }
        }
        return None;
    };
    walk.prev_seq = last_seq;
    walk.max_seq = walk.max_seq.max(last_seq);
    if last_seq <= walk.cursor {
        remove(fs, path, report);
        return None;
    }

    let torn = scan.torn.map_or(0, |t| t.len);
    report.torn_bytes += torn;

    if !scan.damaged.is_empty() {
        report.damaged_bytes += scan.damaged_bytes();
        tracing::warn!(
            path = %path.display(),
            damaged_bytes = scan.damaged_bytes(),
            torn_bytes = torn,
            "A disk buffer segment is damaged; salvaging its valid records."
        );
        match salvage(fs, &config.dir, path, &data, &scan) {
            Ok((moved, size)) => {
                report.quarantined.push(moved);
                return Some(SegmentInfo {
                    readable_end: size,
                    size,
                    last_seq,
                    events,
                    sealed: true,
                });
            }
            Err(error) => {
                // The reader skips the damage at run time instead.
                tracing::warn!(%error, path = %path.display(), "Failed to salvage a damaged disk buffer segment; reading around the damage.");
                return Some(SegmentInfo {
                    readable_end: scan.valid_end(),
                    size: data.len() as u64,
                    last_seq,
                    events,
                    sealed: true,
                });
            }
        }
    }

    let valid_end = scan.valid_end();
    let mut size = data.len() as u64;
    if torn > 0 {
        tracing::warn!(path = %path.display(), torn_bytes = torn, "Cut a torn tail off a disk buffer segment.");
        match fs.open(path).and_then(|file| {
            file.set_len(valid_end)?;
            file.sync_data()
        }) {
            Ok(()) => size = valid_end,
            Err(error) => {
                tracing::warn!(%error, path = %path.display(), "Failed to truncate a torn disk buffer segment; reading up to its last valid record.");
            }
        }
    }
    Some(SegmentInfo {
        readable_end: valid_end,
        size,
        last_seq,
        events,
        sealed: true,
    })
}

/// A record of a segment after the cursor, as recovery counts it.
enum Found<'a> {
    Valid(&'a RecordPos),
    /// Lost, with the events its payload said it held (0 when it did not say).
    Lost(u64),
}

/// Counts the segment's records after the cursor, in sequence order: the valid ones are
/// pending, with their events, and the lost ones are those missing from the sequence (a gap)
/// and those whose frame header survived at the start of a damaged region or a torn tail (see
/// [`format::lost_frames`]), with the events they held. Records lost this way are counted here,
/// in their place in the sequence, so a gap after them never counts them a second time.
///
/// Returns the events of the segment's pending records.
fn count_records(
    config: &Config,
    data: &[u8],
    scan: &Scan,
    walk: &mut Walk,
    report: &mut Recovery,
) -> u64 {
    // The sequence number before the segment's first record: the writer goes on from the
    // highest number of the log, or of the cursor after a restart.
    let before_segment = walk.max_seq;
    let mut lost = Vec::new();
    for region in scan.damaged.iter().chain(&scan.torn) {
        let region_end = region.offset + region.len;
        let prev = scan
            .records
            .iter()
            .rev()
            .find(|r| r.end() <= region.offset)
            .map_or(before_segment, |r| r.seq);
        let next_valid = scan
            .records
            .iter()
            .find(|r| r.offset >= region_end)
            .map(|r| r.seq);
        lost.extend(format::lost_frames(
            data,
            *region,
            config.max_record,
            prev + 1,
            next_valid,
            config.event_count,
        ));
    }
    let mut found: Vec<(u64, Found)> = scan
        .records
        .iter()
        .map(|r| (r.seq, Found::Valid(r)))
        .chain(
            lost.iter()
                .map(|l| (l.seq, Found::Lost(l.events.unwrap_or(0)))),
        )
        .filter(|(seq, _)| *seq > walk.cursor)
        .collect();
    found.sort_unstable_by_key(|(seq, _)| *seq);
    let mut pending_events = 0;
    for (seq, record) in found {
        if let Some(expected) = walk.expected {
            report.lost_records += seq.saturating_sub(expected);
        }
        walk.expected = Some(seq + 1);
        match record {
            Found::Valid(r) => {
                report.records_pending += 1;
                let start = r.offset as usize + FRAME_HEADER_LEN;
                let payload = data.get(start..r.end() as usize).unwrap_or_default();
                pending_events += u64::from(events_in(config.event_count, payload));
            }
            Found::Lost(events) => {
                report.lost_records += 1;
                report.lost_events += events;
            }
        }
    }
    report.events_pending += pending_events;
    pending_events
}

fn remove<F: FileSystem>(fs: &F, path: &Path, report: &mut Recovery) {
    match fs.remove_file(path) {
        Ok(()) => report.segments_deleted += 1,
        Err(error) => {
            tracing::warn!(%error, path = %path.display(), "Failed to delete a disk buffer segment.");
        }
    }
}

/// Replaces a damaged segment with a copy of its valid records; the original goes to
/// quarantine. Returns where it went and the size of the copy.
///
/// The copy is durable under a temporary name before the original moves: should the process
/// stop between the two renames, the next recovery finds the copy and finishes the job.
fn salvage<F: FileSystem>(
    fs: &F,
    dir: &Path,
    path: &Path,
    data: &[u8],
    scan: &Scan,
) -> io::Result<(PathBuf, u64)> {
    let mut copy = SEGMENT_HEADER.to_vec();
    for record in &scan.records {
        let (start, end) = (record.offset as usize, record.end() as usize);
        copy.extend_from_slice(data.get(start..end).unwrap_or_default());
    }
    let tmp = dir.join(format!("{}{SALVAGE_SUFFIX}", file_name(path)));
    let written = fs.create(&tmp).and_then(|file| {
        write_all_at(&file, &copy, 0)?;
        file.sync_data()?;
        fs.sync_dir(dir)
    });
    if let Err(error) = written {
        let _ = fs.remove_file(&tmp);
        return Err(error);
    }
    let quarantine_dir = dir.join(QUARANTINE_DIR);
    let moved = fs
        .create_dir_all(&quarantine_dir)
        .and_then(|()| quarantine_path(fs, dir, path))
        .and_then(|to| {
            fs.rename(path, &to)?;
            Ok(to)
        });
    let moved = match moved {
        Ok(to) => to,
        Err(error) => {
            let _ = fs.remove_file(&tmp);
            return Err(error);
        }
    };
    if let Err(error) = fs.rename(&tmp, path) {
        // Put the original back; failing that, the next recovery completes the salvage.
        if fs.rename(&moved, path).is_ok() {
            let _ = fs.remove_file(&tmp);
        }
        return Err(error);
    }
    for synced in [quarantine_dir.as_path(), dir] {
        if let Err(error) = fs.sync_dir(synced) {
            tracing::warn!(%error, dir = %synced.display(), "Failed to sync a directory after salvaging a segment.");
        }
    }
    Ok((moved, copy.len() as u64))
}

/// Moves a segment to quarantine as it is; `None` when that fails.
fn quarantine<F: FileSystem>(fs: &F, dir: &Path, path: &Path) -> Option<PathBuf> {
    let moved = fs
        .create_dir_all(&dir.join(QUARANTINE_DIR))
        .and_then(|()| quarantine_path(fs, dir, path))
        .and_then(|to| {
            fs.rename(path, &to)?;
            fs.sync_dir(dir)?;
            Ok(to)
        });
    match moved {
        Ok(to) => Some(to),
        Err(error) => {
            tracing::warn!(%error, path = %path.display(), "Failed to move a damaged disk buffer segment to quarantine; leaving it out of the log.");
            None
        }
    }
}

/// `quarantine/<name>.<unix secs>`, with a `.N` suffix when that name is taken.
fn quarantine_path<F: FileSystem>(fs: &F, dir: &Path, path: &Path) -> io::Result<PathBuf> {
    let quarantine_dir = dir.join(QUARANTINE_DIR);
    let taken: BTreeSet<PathBuf> = fs.read_dir(&quarantine_dir)?.into_iter().collect();
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let base = format!("{}.{secs}", file_name(path));
    let mut candidate = quarantine_dir.join(&base);
    let mut n = 1;
    while taken.contains(&candidate) {
        candidate = quarantine_dir.join(format!("{base}.{n}"));
        n += 1;
    }
    Ok(candidate)
}
