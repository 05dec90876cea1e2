//! `inspect`: a read-only report on a buffer directory (for `loghaul buffer inspect PATH`).
//!
//! It opens files for reading only and changes nothing: no truncation, no salvage, no cleanup.
//! It scans segments the way recovery does, so it shows what the next open would find.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::cursor::{self, CursorFile};
use crate::format::{self, Region, file_name, segment_id};
use crate::fs::{FileSystem, FsFile, read_all};
use crate::recover::QUARANTINE_DIR;

/// The report on one segment file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentReport {
    /// The file name.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Whether it starts with a valid segment header.
    pub header_ok: bool,
    /// The first valid record's sequence number.
    pub first_seq: Option<u64>,
    /// The last valid record's sequence number.
    pub last_seq: Option<u64>,
    /// Valid records.
    pub records: u64,
    /// Damaged regions followed by valid records (recovery salvages around them).
    pub damaged: Vec<Region>,
    /// A damaged region at the end (recovery cuts it off).
    pub torn: Option<Region>,
    /// Why the file could not be read, when it could not.
    pub error: Option<String>,
}

/// A read-only report on a buffer directory; `Display` renders it as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspection {
    /// The directory inspected.
    pub dir: PathBuf,
    /// The cursor file.
    pub cursor: CursorFile,
    /// The segments, in order.
    pub segments: Vec<SegmentReport>,
    /// Valid records in all segments.
    pub records: u64,
    /// Valid records after the cursor: what the next open delivers.
    pub records_pending: u64,
    /// The files in `quarantine/`, with their sizes.
    pub quarantine: Vec<(String, u64)>,
    /// Other files (leftover temporary files and anything unknown).
    pub other_files: Vec<String>,
}

impl Inspection {
    /// Whether any segment shows damage (a torn tail counts) or could not be read.
    pub fn is_damaged(&self) -> bool {
        self.segments
            .iter()
            .any(|s| !s.damaged.is_empty() || s.torn.is_some() || s.error.is_some())
    }
}

/// Reports on the buffer in `dir` without changing anything.
///
/// # Errors
/// Only when `dir` cannot be listed; unreadable files are reported, not returned.
pub fn inspect<F: FileSystem>(fs: &F, dir: &Path) -> io::Result<Inspection> {
    let mut entries = fs.read_dir(dir)?;
    entries.sort();
    let cursor = cursor::read(fs, dir);
    // The largest payload the format can hold: inspect does not know the configured limit.
    let max_record = u32::MAX;
    let mut report = Inspection {
        dir: dir.to_path_buf(),
        cursor,
        segments: Vec::new(),
        records: 0,
        records_pending: 0,
        quarantine: Vec::new(),
        other_files: Vec::new(),
    };
    let mut prev_seq = 0;
    for path in &entries {
        let name = file_name(path);
        if segment_id(name).is_none() {
            if name != cursor::CURSOR_NAME && name != QUARANTINE_DIR {
                report.other_files.push(name.to_owned());
            }
            continue;
        }
        let mut segment = SegmentReport {
            name: name.to_owned(),
            size: 0,
            header_ok: false,
            first_seq: None,
            last_seq: None,
            records: 0,
            damaged: Vec::new(),
            torn: None,
            error: None,
        };
        match fs.open_read(path).and_then(|file| read_all(&file)) {
            Ok(data) => {
                let scan = format::scan(&data, max_record, prev_seq);
                segment.size = data.len() as u64;
                segment.header_ok = scan.header_ok;
                segment.first_seq = scan.first_seq();
                segment.last_seq = scan.last_seq();
                segment.records = scan.records.len() as u64;
                report.records += segment.records;
                report.records_pending += scan
                    .records
                    .iter()
                    .filter(|r| r.seq > cursor.acked())
                    .count() as u64;
                prev_seq = segment.last_seq.unwrap_or(prev_seq);
                segment.damaged = scan.damaged;
                segment.torn = scan.torn;
            }
            Err(error) => segment.error = Some(error.to_string()),
        }
        report.segments.push(segment);
    }
    match fs.read_dir(&dir.join(QUARANTINE_DIR)) {
        Ok(mut files) => {
            files.sort();
            for path in files {
                let size = fs.open_read(&path).and_then(|f| f.len()).unwrap_or(0);
                report.quarantine.push((file_name(&path).to_owned(), size));
            }
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => report
            .other_files
            .push(format!("{QUARANTINE_DIR}/ (unreadable: {error})")),
    }
    Ok(report)
}

impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Disk buffer {}", self.dir.display())?;
        match self.cursor {
            CursorFile::Valid(acked) => {
                writeln!(f, "cursor: every record through seq {acked} is acked")?
            }
            CursorFile::Missing => writeln!(f, "cursor: missing (every record will be delivered)")?,
            CursorFile::Damaged => writeln!(f, "cursor: DAMAGED (every record will be delivered)")?,
        }
        let bytes: u64 = self.segments.iter().map(|s| s.size).sum();
        writeln!(
            f,
            "segments: {} ({bytes} bytes), records: {}, pending after the cursor: {}",
            self.segments.len(),
            self.records,
            self.records_pending
        )?;
        for s in &self.segments {
            let seqs = match (s.first_seq, s.last_seq) {
                (Some(first), Some(last)) => format!("seq {first}..{last}"),
                _ => "no records".to_owned(),
            };
            write!(
                f,
                "  {}  {} bytes  {seqs}  {} records",
                s.name, s.size, s.records
            )?;
            if !s.header_ok {
                write!(f, "  BAD HEADER")?;
            }
            writeln!(f)?;
            if let Some(error) = &s.error {
                writeln!(f, "    unreadable: {error}")?;
            }
            for region in &s.damaged {
                writeln!(
                    f,
                    "    damaged: {} bytes at offset {}",
                    region.len, region.offset
                )?;
            }
            if let Some(region) = s.torn {
                writeln!(
                    f,
                    "    torn tail: {} bytes at offset {}",
                    region.len, region.offset
                )?;
            }
        }
        if self.quarantine.is_empty() {
            writeln!(f, "quarantine: empty")?;
        } else {
            writeln!(f, "quarantine: {} file(s)", self.quarantine.len())?;
            for (name, size) in &self.quarantine {
                writeln!(f, "  {name}  {size} bytes")?;
            }
        }
        if !self.other_files.is_empty() {
            writeln!(f, "other files: {}", self.other_files.join(", "))?;
        }
        Ok(())
    }
}
