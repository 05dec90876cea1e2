//! The on-disk framing of segments and records (drawn in the crate's opening comment), and the
//! scan that walks a segment's bytes, telling valid records from damaged regions.
//!
//! A position holds a valid record only when all of these hold: the record magic, a payload
//! length within `max_record` whose frame fits in the bytes at hand, a CRC32C that matches the
//! sequence number and payload, and a sequence number greater than the previous valid one. The
//! magic makes resynchronisation after damage cheap (only positions that start with it are
//! checked), and the CRC makes a false positive negligible.

use std::path::{Path, PathBuf};

/// The first 8 bytes of every segment: magic and format version 1.
pub(crate) const SEGMENT_HEADER: [u8; 8] = *b"LHSEG\0\x01\0";
/// The length of [`SEGMENT_HEADER`].
pub(crate) const HEADER_LEN: u64 = SEGMENT_HEADER.len() as u64;
/// The magic that starts every record, stored little-endian.
pub(crate) const RECORD_MAGIC: u32 = 0x4C48_5245;
/// magic, len, crc, seq.
pub(crate) const FRAME_HEADER_LEN: usize = 4 + 4 + 4 + 8;
/// The file name suffix of segments.
pub(crate) const SEGMENT_SUFFIX: &str = ".seg";

/// The CRC32C of a record: over the little-endian sequence number, then the payload, so that a
/// record copied to another position in the sequence does not pass as valid.
pub(crate) fn record_crc(seq: u64, payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&seq.to_le_bytes()), payload)
}

/// The number of bytes a record with this payload length takes on disk.
pub(crate) fn frame_len(payload_len: usize) -> u64 {
    (FRAME_HEADER_LEN + payload_len) as u64
}

/// Appends the frame of one record to `out` (the writer writes the header and the payload
/// from where they lie; tests build segments with this).
#[cfg(test)]
pub(crate) fn encode(out: &mut Vec<u8>, seq: u64, payload: &[u8]) {
    encode_header(out, seq, payload);
    out.extend_from_slice(payload);
}

/// Appends the frame header of one record ([`FRAME_HEADER_LEN`] bytes) to `out`: the payload
/// follows it.
pub(crate) fn encode_header(out: &mut Vec<u8>, seq: u64, payload: &[u8]) {
    // The caller checked the length against max_record, which is a u32.
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&record_crc(seq, payload).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
}

/// The decoded fixed part of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub len: u32,
    pub crc: u32,
    pub seq: u64,
}

/// Decodes a frame header if `bytes` starts with the record magic.
pub(crate) fn decode_header(bytes: &[u8]) -> Option<FrameHeader> {
    let word = |at: usize| -> Option<u32> {
        let b: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
        Some(u32::from_le_bytes(b))
    };
    if word(0)? != RECORD_MAGIC {
        return None;
    }
    let seq: [u8; 8] = bytes.get(12..20)?.try_into().ok()?;
    Some(FrameHeader {
        len: word(4)?,
        crc: word(8)?,
        seq: u64::from_le_bytes(seq),
    })
}

/// A valid record found by a scan: its frame starts at `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordPos {
    pub offset: u64,
    pub seq: u64,
    pub len: u32,
}

impl RecordPos {
    /// The offset just past this record's frame.
    pub(crate) fn end(&self) -> u64 {
        self.offset + frame_len(self.len as usize)
    }
}

/// A byte range of a segment that holds no valid record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Where the damage starts, from the start of the file.
    pub offset: u64,
    /// How many bytes are damaged.
    pub len: u64,
}

/// Checks whether a valid record starts at `pos` of `data`; `prev_seq` is the sequence number
/// the record must exceed.
pub(crate) fn parse_at(
    data: &[u8],
    pos: usize,
    max_record: u32,
    prev_seq: u64,
) -> Option<RecordPos> {
    let header = decode_header(data.get(pos..)?)?;
    if header.len > max_record || header.seq <= prev_seq {
        return None;
    }
    let start = pos + FRAME_HEADER_LEN;
    let payload = data.get(start..start.checked_add(header.len as usize)?)?;
    (record_crc(header.seq, payload) == header.crc).then_some(RecordPos {
        offset: pos as u64,
        seq: header.seq,
        len: header.len,
    })
}

/// The first position after `from` (exclusive) that holds a valid record, if any.
pub(crate) fn resync(
    data: &[u8],
    from: usize,
    max_record: u32,
    prev_seq: u64,
) -> Option<RecordPos> {
    let magic = RECORD_MAGIC.to_le_bytes();
    let mut pos = from + 1;
    while pos + FRAME_HEADER_LEN <= data.len() {
        // Only positions that start with the magic's first byte are worth a closer look.
        let skip = data.get(pos..)?.iter().position(|&b| b == magic[0])?;
        pos += skip;
        if data.get(pos..pos + 4) == Some(&magic[..])
            && let Some(found) = parse_at(data, pos, max_record, prev_seq)
        {
            return Some(found);
        }
        pos += 1;
    }
    None
}

/// A record the log lost whose frame header survived: it starts a damaged region or a torn
/// tail, so its payload failed the CRC or was cut off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LostFrame {
    pub seq: u64,
    /// The events its payload held, when the start of the payload survived and says.
    pub events: Option<u64>,
}

/// The lost records whose headers start `region` of `data`: a chain of frame headers from the
/// region's start that check out (the magic, a length within `max_record`, and the sequence
/// numbers `next`, `next + 1`, ..., below `before` when a valid record follows the region),
/// each frame beginning where the previous one ends. A header needs no CRC to be believed here
/// (its payload is what failed): the magic, the length bound and the exact sequence number
/// together make a false match negligible, and the first header that does not pass ends the
/// chain.
///
/// A frame must end within a damaged region followed by a valid record; only a torn tail
/// (`before` is `None`) may hold a frame cut off by the end of the data.
pub(crate) fn lost_frames(
    data: &[u8],
    region: Region,
    max_record: u32,
    next: u64,
    before: Option<u64>,
    events_in: Option<crate::EventCount>,
) -> Vec<LostFrame> {
    let end = usize::try_from(region.offset.saturating_add(region.len))
        .unwrap_or(usize::MAX)
        .min(data.len());
    let mut lost = Vec::new();
    let mut pos = usize::try_from(region.offset).unwrap_or(usize::MAX);
    let mut seq = next;
    while let Some(header) = data.get(pos..end).and_then(decode_header) {
        if header.len > max_record || header.seq != seq || before.is_some_and(|b| seq >= b) {
            break;
        }
        let start = pos + FRAME_HEADER_LEN;
        let frame_end = start.saturating_add(header.len as usize);
        if frame_end > end && before.is_some() {
            break;
        }
        let payload = data.get(start..frame_end.min(end)).unwrap_or_default();
        lost.push(LostFrame {
            seq,
            events: events_in
                .and_then(|count| (count.0)(payload))
                .map(u64::from),
        });
        pos = frame_end;
        seq += 1;
    }
    lost
}

/// What a scan found in a segment's bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Scan {
    /// Whether the file starts with [`SEGMENT_HEADER`].
    pub header_ok: bool,
    /// The valid records, in file order (and so in sequence order).
    pub records: Vec<RecordPos>,
    /// Damaged regions followed by a valid record (including a bad header).
    pub damaged: Vec<Region>,
    /// A damaged region that runs to the end of the data with no valid record after it.
    pub torn: Option<Region>,
}

impl Scan {
    /// The end of the last valid record, or of the header when there is none (0 with a bad
    /// header): where a torn tail is cut off.
    pub(crate) fn valid_end(&self) -> u64 {
        match self.records.last() {
            Some(last) => last.end(),
            None if self.header_ok => HEADER_LEN,
            None => 0,
        }
    }

    pub(crate) fn first_seq(&self) -> Option<u64> {
        self.records.first().map(|r| r.seq)
    }

    pub(crate) fn last_seq(&self) -> Option<u64> {
        self.records.last().map(|r| r.seq)
    }

    pub(crate) fn damaged_bytes(&self) -> u64 {
        self.damaged.iter().map(|r| r.len).sum()
    }
}

/// Walks a whole segment: `prev_seq` is the last valid sequence number of the segments before it
/// (so that stale records never pass as newer ones).
pub(crate) fn scan(data: &[u8], max_record: u32, prev_seq: u64) -> Scan {
    let header_ok = data.get(..SEGMENT_HEADER.len()) == Some(&SEGMENT_HEADER[..]);
    let mut scan = Scan {
        header_ok,
        ..Scan::default()
    };
    // A bad header is damage like any other: the records after it are still looked for.
    let mut pos = if header_ok { SEGMENT_HEADER.len() } else { 0 };
    let mut prev = prev_seq;
    while pos < data.len() {
        let found = match parse_at(data, pos, max_record, prev) {
            Some(found) => found,
            None => match resync(data, pos, max_record, prev) {
                Some(found) => {
                    scan.damaged.push(Region {
                        offset: pos as u64,
                        len: found.offset - pos as u64,
                    });
                    found
                }
                None => {
                    scan.torn = Some(Region {
                        offset: pos as u64,
                        len: (data.len() - pos) as u64,
                    });
                    break;
                }
            },
        };
        scan.records.push(found);
        prev = found.seq;
        pos = found.end() as usize;
    }
    scan
}

/// The path of segment `id` in `dir`.
pub(crate) fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}{SEGMENT_SUFFIX}"))
}

/// The id of a segment file name (`NNNNNNNNNNNNNNNNNNNN.seg`), or `None` for any other file.
pub(crate) fn segment_id(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The final component of `path` as UTF-8, or an empty string.
pub(crate) fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn segment(records: &[(u64, &[u8])]) -> Vec<u8> {
        let mut out = SEGMENT_HEADER.to_vec();
        for (seq, payload) in records {
            encode(&mut out, *seq, payload);
        }
        out
    }

    #[test]
    fn scans_clean_segment() {
        let data = segment(&[(1, b"a"), (2, b""), (3, b"ccc")]);
        let scan = scan(&data, 1024, 0);
        assert!(scan.header_ok);
        assert_eq!(
            scan.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert!(scan.damaged.is_empty());
        assert_eq!(scan.torn, None);
        assert_eq!(scan.valid_end(), data.len() as u64);
    }

    #[test]
    fn finds_torn_tail() {
        let mut data = segment(&[(1, b"hello"), (2, b"world")]);
        let full = data.len();
        data.truncate(full - 3);
        let scan = scan(&data, 1024, 0);
        assert_eq!(scan.records.len(), 1);
        assert_eq!(
            scan.torn,
            Some(Region {
                offset: 8 + 25,
                len: 25 - 3
            })
        );
    }

    #[test]
    fn resyncs_after_middle_damage() {
        let mut data = segment(&[(1, b"one"), (2, b"two"), (3, b"three")]);
        // Flip a payload byte of record 2.
        let at = 8 + 23 + FRAME_HEADER_LEN;
        data[at] ^= 0xFF;
        let scan = scan(&data, 1024, 0);
        assert_eq!(
            scan.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            [1, 3]
        );
        assert_eq!(
            scan.damaged,
            [Region {
                offset: 8 + 23,
                len: 23
            }]
        );
        assert_eq!(scan.torn, None);
    }

    #[test]
    fn bad_header_is_damage() {
        let mut data = segment(&[(1, b"one")]);
        data[0] = b'X';
        let scan = scan(&data, 1024, 0);
        assert!(!scan.header_ok);
        assert_eq!(scan.records.len(), 1);
        assert_eq!(scan.damaged, [Region { offset: 0, len: 8 }]);
    }

    #[test]
    fn rejects_oversized_and_stale_records() {
        let data = segment(&[(5, b"abc")]);
        assert_eq!(scan(&data, 2, 0).records.len(), 0);
        assert_eq!(scan(&data, 1024, 5).records.len(), 0);
        assert_eq!(scan(&data, 1024, 4).records.len(), 1);
    }

    #[test]
    fn segment_names() {
        let path = segment_path(Path::new("/d"), 42);
        assert_eq!(file_name(&path), "00000000000000000042.seg");
        assert_eq!(segment_id("00000000000000000042.seg"), Some(42));
        assert_eq!(segment_id("42.seg"), None);
        assert_eq!(segment_id("00000000000000000042.seg.salvage.tmp"), None);
    }
}
