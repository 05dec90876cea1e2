//! End-to-end tests of the buffer through its public API: appends, reads and acks, recovery
//! from torn and damaged segments, injected I/O faults, and `inspect`, on [`MemFs`] and on the
//! real disk.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;

use crate::format::{FRAME_HEADER_LEN, HEADER_LEN, SEGMENT_HEADER, segment_path};
use crate::testing::{CrashMode, MemFs};
use crate::*;

const DIR: &str = "/buf";

fn config() -> Config {
    Config {
        dir: PathBuf::from(DIR),
        max_size: 1 << 20,
        segment_size: 4096,
        max_record: 1024,
        sync: SyncMode::EveryBatch,
        event_count: None,
    }
}

fn payload(i: u64) -> Vec<u8> {
    format!("record-{i:04}").into_bytes()
}

/// The frame size of [`payload`].
const FRAME: u64 = FRAME_HEADER_LEN as u64 + 11;

fn drain<F: FileSystem>(reader: &mut Reader<F>) -> Vec<Record> {
    let mut out = Vec::new();
    while let Some(record) = reader.next().unwrap() {
        out.push(record);
    }
    out
}

fn seqs(records: &[Record]) -> Vec<u64> {
    records.iter().map(|r| r.seq).collect()
}

fn append_range<F: FileSystem>(writer: &mut Writer<F>, range: std::ops::RangeInclusive<u64>) {
    for i in range {
        let appended = writer.append(&[payload(i)]).unwrap();
        assert_eq!(appended.first_seq, i);
    }
}

/// Flips the first payload byte of the `n`th [`payload`] record (from 0) of segment `id`.
fn damage_payload(fs: &MemFs, id: u64, n: u64) {
    fs.corrupt(
        &segment_path(Path::new(DIR), id),
        HEADER_LEN + n * FRAME + FRAME_HEADER_LEN as u64,
        &[0xFF],
    )
    .unwrap();
}

fn segments(fs: &MemFs) -> Vec<String> {
    fs.list(Path::new(DIR))
        .into_iter()
        .filter(|n| n.ends_with(".seg"))
        .collect()
}

fn assert_payloads(records: &[Record]) {
    for record in records {
        assert_eq!(
            record.payload,
            payload(record.seq),
            "payload of seq {}",
            record.seq
        );
    }
}

#[test]
fn round_trip() {
    let fs = MemFs::new();
    let (mut writer, mut reader, recovery) = open(fs.clone(), config()).unwrap();
    assert_eq!(recovery.segments, 0);
    assert_eq!(recovery.cursor_file, CursorFile::Missing);
    let appended = writer.append(&[b"one".as_slice(), b"", b"three"]).unwrap();
    assert_eq!(
        appended,
        Appended {
            first_seq: 1,
            last_seq: 3,
            bytes: 3 * FRAME_HEADER_LEN as u64 + 8
        }
    );
    writer.sync().unwrap();
    let records = drain(&mut reader);
    assert_eq!(seqs(&records), [1, 2, 3]);
    assert_eq!(records[0].payload, "one");
    assert_eq!(records[1].payload, "");
    assert_eq!(records[2].payload, "three");
    assert!(reader.next().unwrap().is_none());

    writer.append(&[b"four"]).unwrap();
    assert_eq!(reader.next().unwrap().unwrap().payload, "four");
    let stats = writer.shared().stats.snapshot();
    assert_eq!(stats.appended_records, 4);
    assert_eq!(stats.records_pending, 4);
    assert_eq!(stats.segments, 1);
    assert_eq!(
        stats.bytes_on_disk,
        HEADER_LEN + 4 * FRAME_HEADER_LEN as u64 + 12
    );
    assert_eq!(
        stats.bytes_on_disk,
        fs.read(&segment_path(Path::new(DIR), 1)).unwrap().len() as u64
    );
    // An empty group writes nothing.
    let empty: &[&[u8]] = &[];
    assert_eq!(
        writer.append(empty).unwrap(),
        Appended {
            first_seq: 5,
            last_seq: 4,
            bytes: 0
        }
    );
}

#[test]
fn rotates_segments_without_splitting_records() {
    let fs = MemFs::new();
    let config = Config {
        segment_size: HEADER_LEN + 3 * FRAME,
        ..config()
    };
    let (mut writer, mut reader, _) = open(fs.clone(), config).unwrap();
    append_range(&mut writer, 1..=10);
    // 3 records per segment: 1-3, 4-6, 7-9, 10.
    assert_eq!(segments(&fs).len(), 4);
    assert_eq!(writer.shared().stats.snapshot().segments, 4);
    // A group runs past segment_size rather than being split.
    writer
        .append(&[payload(11), payload(12), payload(13), payload(14)])
        .unwrap();
    assert_eq!(segments(&fs).len(), 4);
    let records = drain(&mut reader);
    assert_eq!(seqs(&records), (1..=14).collect::<Vec<_>>());
    assert_payloads(&records);
}

#[test]
fn deletes_segments_after_out_of_order_acks() {
    let fs = MemFs::new();
    let config = Config {
        segment_size: HEADER_LEN + 3 * FRAME,
        ..config()
    };
    let (mut writer, mut reader, _) = open(fs.clone(), config).unwrap();
    append_range(&mut writer, 1..=7);
    assert_eq!(segments(&fs).len(), 3);
    let records = drain(&mut reader);
    assert_eq!(records.len(), 7);

    for seq in [3, 2, 5, 6] {
        reader.ack(seq).unwrap();
    }
    assert_eq!(reader.acked(), 0);
    assert_eq!(segments(&fs).len(), 3);
    reader.ack(1).unwrap();
    assert_eq!(reader.acked(), 3);
    assert_eq!(
        segments(&fs).len(),
        2,
        "segment 1 (seqs 1-3) is acked through"
    );
    reader.ack(4).unwrap();
    assert_eq!(reader.acked(), 6);
    assert_eq!(segments(&fs).len(), 1);
    // The segment being written is kept even when acked through.
    reader.ack(7).unwrap();
    assert_eq!(segments(&fs), ["00000000000000000003.seg"]);
    // Repeated and unknown acks change nothing.
    reader.ack(7).unwrap();
    reader.ack(99).unwrap();
    let stats = reader.shared().stats.snapshot();
    assert_eq!(stats.acked_records, 7);
    assert_eq!(stats.records_pending, 0);
    assert_eq!(stats.segments, 1);
    // Deleting a segment persisted the cursor first.
    assert!(crate::cursor::read(&fs, Path::new(DIR)).acked() >= 6);
}

#[test]
fn full_until_acks_free_space() {
    let fs = MemFs::new();
    let config = Config {
        max_size: HEADER_LEN + 4 * FRAME,
        segment_size: HEADER_LEN + 2 * FRAME,
        ..config()
    };
    let (mut writer, mut reader, _) = open(fs.clone(), config).unwrap();
    append_range(&mut writer, 1..=3);
    let before = fs.snapshot();
    let err = writer.append(&[payload(4), payload(5)]).unwrap_err();
    assert!(matches!(err, AppendError::Full { .. }), "{err}");
    assert!(err.is_retryable());
    assert_eq!(fs.snapshot(), before, "nothing written");
    assert_eq!(writer.next_seq(), 4);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let shared = std::sync::Arc::clone(writer.shared());
    let records = drain(&mut reader);
    for record in &records {
        reader.ack(record.seq).unwrap();
    }
    // The acks freed segment 1 and woke a writer waiting for space.
    runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), shared.space.notified())
            .await
            .expect("space notified");
    });
    let appended = writer.append(&[payload(4), payload(5)]).unwrap();
    assert_eq!((appended.first_seq, appended.last_seq), (4, 5));
    assert_eq!(seqs(&drain(&mut reader)), [4, 5]);
}

#[test]
fn full_buffer_with_everything_acked_does_not_stay_full() {
    // The segment being written can only be deleted once sealed; a Full seals it.
    let fs = MemFs::new();
    let config = Config {
        max_size: HEADER_LEN + 3 * FRAME,
        segment_size: 1 << 20,
        ..config()
    };
    let (mut writer, mut reader, _) = open(fs, config).unwrap();
    append_range(&mut writer, 1..=3);
    for record in drain(&mut reader) {
        reader.ack(record.seq).unwrap();
    }
    assert!(writer.append(&[payload(4)]).unwrap_err().is_full());
    assert!(reader.next().unwrap().is_none());
    assert_eq!(writer.append(&[payload(4)]).unwrap().first_seq, 4);
}

#[test]
fn too_large_is_refused() {
    let fs = MemFs::new();
    let (mut writer, _, _) = open(
        fs.clone(),
        Config {
            max_record: 8,
            ..config()
        },
    )
    .unwrap();
    let err = writer
        .append(&[b"small".as_slice(), b"far too large"])
        .unwrap_err();
    assert!(
        matches!(err, AppendError::TooLarge { size: 13, limit: 8 }),
        "{err}"
    );
    assert!(!err.is_retryable());
    assert!(segments(&fs).is_empty());
    assert_eq!(writer.append(&[b"small"]).unwrap().first_seq, 1);

    // A group larger than the whole buffer can never fit either.
    let (mut writer, _, _) = open(
        MemFs::new(),
        Config {
            max_size: 100,
            ..config()
        },
    )
    .unwrap();
    let group: Vec<Vec<u8>> = (0..10).map(payload).collect();
    assert!(matches!(
        writer.append(&group),
        Err(AppendError::TooLarge { .. })
    ));
}

#[test]
fn restart_resumes_after_cursor_and_redelivers_unacked() {
    let fs = MemFs::new();
    let config = Config {
        segment_size: HEADER_LEN + 3 * FRAME,
        ..config()
    };
    {
        let (mut writer, mut reader, _) = open(fs.clone(), config.clone()).unwrap();
        append_range(&mut writer, 1..=10);
        writer.sync().unwrap();
        assert_eq!(drain(&mut reader).len(), 10);
        for seq in [1, 2, 3, 4, 5, 7, 9] {
            reader.ack(seq).unwrap();
        }
        reader.persist().unwrap();
    }
    let (mut writer, mut reader, recovery) = open(fs.clone(), config.clone()).unwrap();
    assert_eq!(recovery.cursor, 5);
    assert_eq!(recovery.cursor_file, CursorFile::Valid(5));
    assert_eq!(recovery.records_pending, 5);
    assert_eq!(recovery.lost_records, 0);
    assert_eq!(recovery.next_seq, 11);
    // 7 and 9 were acked but the cursor cannot say so: delivered again (at least once).
    let records = drain(&mut reader);
    assert_eq!(seqs(&records), [6, 7, 8, 9, 10]);
    assert_payloads(&records);
    // A new segment for new records; numbering goes on.
    assert_eq!(writer.append(&[payload(11)]).unwrap().first_seq, 11);
    assert_eq!(segments(&fs).last().unwrap(), "00000000000000000005.seg");
    assert_eq!(seqs(&drain(&mut reader)), [11]);
    assert_eq!(reader.shared().stats.snapshot().records_pending, 6);
}

#[test]
fn restart_with_everything_acked_deletes_segments_and_keeps_numbering() {
    let fs = MemFs::new();
    let config = Config {
        segment_size: HEADER_LEN + 3 * FRAME,
        ..config()
    };
    {
        let (mut writer, mut reader, _) = open(fs.clone(), config.clone()).unwrap();
        append_range(&mut writer, 1..=5);
        for record in drain(&mut reader) {
            reader.ack(record.seq).unwrap();
        }
        reader.persist().unwrap();
    }
    let (mut writer, mut reader, recovery) = open(fs.clone(), config).unwrap();
    assert_eq!(recovery.segments, 1, "segment 1 went while running");
    assert_eq!(recovery.segments_deleted, 1);
    assert_eq!(recovery.records_pending, 0);
    assert!(segments(&fs).is_empty());
    assert_eq!(writer.append(&[payload(6)]).unwrap().first_seq, 6);
    assert_eq!(seqs(&drain(&mut reader)), [6]);
}

#[test]
fn torn_tail_is_truncated() {
    let fs = MemFs::new();
    {
        let (mut writer, _, _) = open(fs.clone(), config()).unwrap();
        append_range(&mut writer, 1..=5);
        writer.sync().unwrap();
    }
    let path = segment_path(Path::new(DIR), 1);
    let mut data = fs.read(&path).unwrap();
    data.truncate(data.len() - 5);
    fs.write_file(&path, &data).unwrap();

    let (mut writer, mut reader, recovery) = open(fs.clone(), config()).unwrap();
    assert_eq!(recovery.torn_bytes, FRAME - 5);
    assert_eq!(recovery.damaged_bytes, 0);
    assert_eq!(
        recovery.lost_records, 1,
        "the cut record's header survived: {recovery}"
    );
    assert_eq!(
        recovery.lost_events, 0,
        "no event count configured: {recovery}"
    );
    assert_eq!(recovery.records_pending, 4);
    assert_eq!(recovery.next_seq, 5);
    assert_eq!(fs.read(&path).unwrap().len() as u64, HEADER_LEN + 4 * FRAME);
    assert_eq!(seqs(&drain(&mut reader)), [1, 2, 3, 4]);
    assert_eq!(writer.append(&[payload(5)]).unwrap().first_seq, 5);
    assert_eq!(reader.shared().stats.snapshot().torn_bytes, FRAME - 5);
}

#[test]
fn torn_tail_of_an_earlier_segment_counts_the_gap() {
    let fs = MemFs::new();
    let config = Config {
        segment_size: HEADER_LEN + 3 * FRAME,
        ..config()
    };
    {
        let (mut writer, _, _) = open(fs.clone(), config.clone()).unwrap();
        append_range(&mut writer, 1..=6);
    }
    let path = segment_path(Path::new(DIR), 1);
    let mut data = fs.read(&path).unwrap();
    data.truncate(data.len() - 1);
    fs.write_file(&path, &data).unwrap();
    let (_, mut reader, recovery) = open(fs, config).unwrap();
    assert_eq!(recovery.torn_bytes, FRAME - 1);
    assert_eq!(recovery.lost_records, 1);
    assert_eq!(seqs(&drain(&mut reader)), [1, 2, 4, 5, 6]);
}

#[test]
fn middle_corruption_is_salvaged_into_quarantine() {
    let fs = MemFs::new();
    let config = Config {
        segment_size: 1 << 20,
        ..config()
    };
    {
        let (mut writer, _, _) = open(fs.clone(), config.clone()).unwrap();
        append_range(&mut writer, 1..=100);
        writer.sync().unwrap();
    }
    let path = segment_path(Path::new(DIR), 1);
    // A byte of record 50's payload.
    fs.corrupt(
        &path,
        HEADER_LEN + 49 * FRAME + FRAME_HEADER_LEN as u64 + 3,
        &[0x20],
    )
    .unwrap();

    let (mut writer, mut reader, recovery) = open(fs.clone(), config.clone()).unwrap();
    assert_eq!(recovery.lost_records, 1);
    assert_eq!(recovery.damaged_bytes, FRAME);
    assert_eq!(recovery.torn_bytes, 0);
    assert_eq!(recovery.records_pending, 99);
    assert_eq!(recovery.quarantined.len(), 1);
    assert!(
        recovery.to_string().contains("lost_records=1"),
        "{recovery}"
    );
    let quarantined = fs.list(&Path::new(DIR).join("quarantine"));
    assert_eq!(quarantined.len(), 1);
    assert!(
        quarantined[0].starts_with("00000000000000000001.seg."),
        "{quarantined:?}"
    );
    assert_eq!(
        fs.read(&path).unwrap().len() as u64,
        HEADER_LEN + 99 * FRAME
    );

    let records = drain(&mut reader);
    assert_eq!(records.len(), 99);
    assert!(!seqs(&records).contains(&50));
    assert_payloads(&records);
    let stats = reader.shared().stats.snapshot();
    assert_eq!(stats.damaged_records, 1);
    assert_eq!(stats.damaged_bytes, FRAME);
    assert_eq!(stats.quarantined_segments, 1);
    assert_eq!(writer.append(&[payload(101)]).unwrap().first_seq, 101);
    drop((writer, reader));

    // The salvaged segment is clean; its gap is counted again until the cursor passes it.
    let (_, _, again) = open(fs, config).unwrap();
    assert_eq!(
        (
            again.damaged_bytes,
            again.lost_records,
            again.quarantined.len()
        ),
        (0, 1, 0)
    );
}

#[test]
fn corruption_seen_while_reading_is_skipped_and_counted() {
    let fs = MemFs::new();
    let (mut writer, mut reader, _) = open(fs.clone(), config()).unwrap();
    append_range(&mut writer, 1..=5);
    damage_payload(&fs, 1, 2);
    let records = drain(&mut reader);
    assert_eq!(seqs(&records), [1, 2, 4, 5]);
    let stats = reader.shared().stats.snapshot();
    assert_eq!(stats.damaged_records, 1);
    assert_eq!(stats.damaged_bytes, FRAME);
    // The skipped record does not hold the cursor back.
    for seq in [1, 2, 4, 5] {
        reader.ack(seq).unwrap();
    }
    assert_eq!(reader.acked(), 5);
}

#[test]
fn a_reader_that_keeps_up_takes_the_latest_records_from_memory() {
    // Damage written into the file after the append is not seen: the reader never reads the
    // file back. Were it read, record 3 would be skipped as damaged (as in the test above).
    let fs = MemFs::new();
    let (mut writer, mut reader, _) = open(fs.clone(), config()).unwrap();
    writer.keep_recent(1 << 20);
    append_range(&mut writer, 1..=5);
    damage_payload(&fs, 1, 2);
    let records = drain(&mut reader);
    assert_eq!(seqs(&records), [1, 2, 3, 4, 5]);
    assert_eq!(records[2].payload, payload(3));
    assert_eq!(reader.shared().stats.snapshot().damaged_records, 0);
}

/// Windows read from the file are reused without being zeroed: a short window after a long one
/// must not keep the long one's tail, or records appended there later would read as its stale
/// bytes (and be skipped as damaged).
#[test]
fn a_reused_read_window_holds_only_what_was_read() {
    let fs = MemFs::new();
    let cfg = Config {
        max_size: 64 << 20,
        segment_size: 32 << 20,
        max_record: 64 << 10,
        ..config()
    };
    let (mut writer, mut reader, _) = open(fs, cfg).unwrap();
    let record = |i: u64| vec![i as u8; 60 << 10];
    // 25 records: a window of 1 MiB, then a short one up to the end.
    for i in 1..=25 {
        writer.append(&[record(i)]).unwrap();
    }
    for i in 1..=25 {
        let r = reader.next().unwrap().unwrap();
        assert!(r.seq == i && r.payload == record(i));
    }
    for i in 26..=30 {
        writer.append(&[record(i)]).unwrap();
    }
    let records = drain(&mut reader);
    assert_eq!(seqs(&records), (26..=30).collect::<Vec<_>>());
    assert!(
        records
            .iter()
            .zip(26..)
            .all(|(r, i)| r.payload == record(i))
    );
    assert_eq!(reader.shared().stats.snapshot().damaged_records, 0);
}

#[test]
fn kept_bytes_payloads_are_shared_not_copied() {
    let fs = MemFs::new();
    let (mut writer, mut reader, _) = open(fs, config()).unwrap();
    writer.keep_recent(1 << 20);
    let sent = [Bytes::from(payload(1)), Bytes::from(payload(2))];
    writer.append(&sent).unwrap();
    let records = drain(&mut reader);
    assert_eq!(seqs(&records), [1, 2]);
    for (r, s) in records.iter().zip(&sent) {
        assert_eq!(
            r.payload.as_ptr(),
            s.as_ptr(),
            "the appended bytes themselves"
        );
    }
}

#[test]
fn a_reader_behind_the_kept_records_reads_the_file() {
    // Room for the last two records only: records 1..=3 come from the file (where the damage
    // is seen), 4 and 5 from memory, in order, across a segment rotation.
    let fs = MemFs::new();
    let small = Config {
        segment_size: HEADER_LEN + 2 * FRAME,
        ..config()
    };
    let (mut writer, mut reader, _) = open(fs.clone(), small).unwrap();
    writer.keep_recent(2 * FRAME as usize);
    append_range(&mut writer, 1..=5);
    damage_payload(&fs, 1, 1);
    let records = drain(&mut reader);
    assert_eq!(seqs(&records), [1, 3, 4, 5]);
    for (record, i) in records.iter().zip([1, 3, 4, 5]) {
        assert_eq!(record.payload, payload(i));
    }
    assert_eq!(reader.shared().stats.snapshot().damaged_records, 1);
}

#[test]
fn bad_header_is_salvaged() {
    let fs = MemFs::new();
    {
        let (mut writer, _, _) = open(fs.clone(), config()).unwrap();
        append_range(&mut writer, 1..=3);
    }
    fs.corrupt(&segment_path(Path::new(DIR), 1), 0, &[0xFF])
        .unwrap();
    let (_, mut reader, recovery) = open(fs.clone(), config()).unwrap();
    assert_eq!(recovery.damaged_bytes, HEADER_LEN);
    assert_eq!(recovery.lost_records, 0);
    assert_eq!(recovery.quarantined.len(), 1);
    assert_eq!(seqs(&drain(&mut reader)), [1, 2, 3]);
}

#[test]
fn damaged_cursor_redelivers_everything() {
    let fs = MemFs::new();
    {
        let (mut writer, mut reader, _) = open(fs.clone(), config()).unwrap();
        append_range(&mut writer, 1..=4);
        for record in drain(&mut reader) {
            reader.ack(record.seq).unwrap();
        }
        reader.persist().unwrap();
    }
    fs.corrupt(&Path::new(DIR).join("cursor"), 10, &[0x01])
        .unwrap();
    let (mut writer, mut reader, recovery) = open(fs.clone(), config()).unwrap();
    assert_eq!(recovery.cursor_file, CursorFile::Damaged);
    assert_eq!(recovery.cursor, 0);
    assert_eq!(recovery.records_pending, 4);
    assert!(
        recovery.to_string().contains("cursor_file=damaged"),
        "{recovery}"
    );
    assert_eq!(seqs(&drain(&mut reader)), [1, 2, 3, 4]);
    assert_eq!(writer.append(&[payload(5)]).unwrap().first_seq, 5);
}

#[test]
fn leftover_tmp_files_are_removed() {
    let fs = MemFs::new();
    {
        let (mut writer, _, _) = open(fs.clone(), config()).unwrap();
        append_range(&mut writer, 1..=2);
    }
    let dir = Path::new(DIR);
    fs.write_file(&dir.join("cursor.tmp"), b"LHCUR").unwrap();
    // A salvage copy next to its original: the salvage did not get as far as the move.
    fs.write_file(&dir.join("00000000000000000001.seg.salvage.tmp"), b"LHSEG")
        .unwrap();
    fs.write_file(&dir.join("notes.txt"), b"not ours").unwrap();
    let (_, mut reader, recovery) = open(fs.clone(), config()).unwrap();
    assert_eq!(recovery.removed_tmp, 2);
    assert_eq!(
        fs.list(dir),
        ["00000000000000000001.seg", "cursor", "notes.txt"]
    );
    assert_eq!(seqs(&drain(&mut reader)), [1, 2]);
}

#[test]
fn interrupted_salvage_is_completed() {
    let fs = MemFs::new();
    {
        let (mut writer, _, _) = open(fs.clone(), config()).unwrap();
        append_range(&mut writer, 1..=3);
    }
    let dir = Path::new(DIR);
    let path = segment_path(dir, 1);
    let data = fs.read(&path).unwrap();
    // As if the original went to quarantine and the process stopped before the last rename.
    fs.create_dir_all(&dir.join("quarantine")).unwrap();
    fs.rename(&path, &dir.join("quarantine/00000000000000000001.seg.1"))
        .unwrap();
    fs.write_file(&dir.join("00000000000000000001.seg.salvage.tmp"), &data)
        .unwrap();
    let (_, mut reader, recovery) = open(fs.clone(), config()).unwrap();
    assert_eq!(recovery.removed_tmp, 0);
    assert_eq!(seqs(&drain(&mut reader)), [1, 2, 3]);
    assert_eq!(segments(&fs), ["00000000000000000001.seg"]);
}

#[test]
fn segment_without_valid_records_is_dropped_or_quarantined() {
    let fs = MemFs::new();
    let dir = Path::new(DIR);
    fs.create_dir_all(dir).unwrap();
    // A segment whose creation was torn, and garbage before a good segment.
    fs.write_file(&segment_path(dir, 1), b"garbage garbage garbage garbage")
        .unwrap();
    let mut good = crate::format::SEGMENT_HEADER.to_vec();
    crate::format::encode(&mut good, 1, b"x");
    fs.write_file(&segment_path(dir, 2), &good).unwrap();
    fs.write_file(&segment_path(dir, 3), b"LHS").unwrap();
    let (mut writer, mut reader, recovery) = open(fs.clone(), config()).unwrap();
    assert_eq!(recovery.segments, 3);
    assert_eq!(recovery.quarantined.len(), 1);
    assert_eq!(recovery.damaged_bytes, 31);
    assert_eq!(segments(&fs), ["00000000000000000002.seg"]);
    assert_eq!(seqs(&drain(&mut reader)), [1]);
    assert_eq!(writer.append(&[b"y"]).unwrap().first_seq, 2);
    assert_eq!(segments(&fs).last().unwrap(), "00000000000000000004.seg");
}

/// Appends 1..=3, then a failing group, then checks that the log holds exactly 1..=3 and the
/// next append (numbered 4) works.
fn assert_failed_append_leaves_log_consistent(arm: impl Fn(&MemFs), expect: impl Fn(&io::Error)) {
    let fs = MemFs::new();
    let (mut writer, mut reader, _) = open(fs.clone(), config()).unwrap();
    append_range(&mut writer, 1..=3);
    let path = segment_path(Path::new(DIR), 1);
    let before = fs.read(&path).unwrap();
    arm(&fs);
    let err = writer
        .append(&[payload(4), payload(5), payload(6)])
        .unwrap_err();
    let AppendError::Io(io_error) = &err else {
        panic!("{err}")
    };
    expect(io_error);
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("a retry may help"), "{err}");
    fs.clear_faults();
    assert_eq!(fs.read(&path).unwrap(), before, "the group was rolled back");
    assert_eq!(seqs(&drain(&mut reader)), [1, 2, 3]);
    assert_eq!(writer.next_seq(), 4, "no sequence number consumed");
    let appended = writer.append(&[payload(4), payload(5)]).unwrap();
    assert_eq!((appended.first_seq, appended.last_seq), (4, 5));
    writer.sync().unwrap();
    let records = drain(&mut reader);
    assert_eq!(seqs(&records), [4, 5]);
    assert_payloads(&records);
    let stats = writer.shared().stats.snapshot();
    assert_eq!(stats.write_errors, 1);
    assert_eq!(stats.damaged_bytes, 0);
    // Out of space, the segment that could not grow was sealed, and the retry began another.
    let headers = if io_error.kind() == std::io::ErrorKind::StorageFull {
        2
    } else {
        1
    };
    assert_eq!(stats.bytes_on_disk, headers * HEADER_LEN + 5 * FRAME);
    drop((writer, reader));
    fs.crash(CrashMode::LoseUnsynced);
    let (_, mut reader, recovery) = open(fs, config()).unwrap();
    assert_eq!(
        recovery.lost_records + recovery.damaged_bytes + recovery.torn_bytes,
        0,
        "{recovery}"
    );
    assert_eq!(seqs(&drain(&mut reader)), [1, 2, 3, 4, 5]);
}

#[test]
fn enospc_during_append_rolls_back() {
    assert_failed_append_leaves_log_consistent(
        // The group fits partly: a short write, then ENOSPC.
        |fs| fs.enospc_after(FRAME + 7),
        |e| assert_eq!(e.raw_os_error(), Some(28)),
    );
}

#[test]
fn eio_during_append_rolls_back() {
    assert_failed_append_leaves_log_consistent(
        |fs| {
            fs.short_write_next(FRAME as usize + 3);
            // The write after the short one fails.
            fs.fail_next_write_eio();
        },
        |e| assert_eq!(e.raw_os_error(), Some(5)),
    );
}

#[test]
fn eio_and_short_write_are_handled_in_order() {
    // A short write alone is continued, not an error.
    let fs = MemFs::new();
    let (mut writer, mut reader, _) = open(fs.clone(), config()).unwrap();
    fs.short_write_next(5);
    writer.append(&[payload(1), payload(2)]).unwrap();
    let records = drain(&mut reader);
    assert_eq!(seqs(&records), [1, 2]);
    assert_payloads(&records);
}

#[test]
fn failed_rollback_seals_the_segment_and_skips_the_numbers() {
    let fs = MemFs::new();
    let (mut writer, mut reader, _) = open(fs.clone(), config()).unwrap();
    append_range(&mut writer, 1..=3);
    writer.sync().unwrap();
    // Two of three records reach the file, then ENOSPC, and the truncation fails too.
    fs.enospc_after(2 * FRAME + 4);
    fs.fail_next_set_len();
    let err = writer
        .append(&[payload(4), payload(5), payload(6)])
        .unwrap_err();
    assert!(matches!(err, AppendError::Io(_)));
    fs.clear_faults();
    assert_eq!(writer.next_seq(), 7, "the group's numbers are given up");
    assert_eq!(
        seqs(&drain(&mut reader)),
        [1, 2, 3],
        "readers never see the failed group"
    );
    let appended = writer.append(&[payload(7)]).unwrap();
    assert_eq!(appended.first_seq, 7);
    assert_eq!(segments(&fs).len(), 2, "a new segment after the sealed one");
    writer.sync().unwrap();
    assert_eq!(seqs(&drain(&mut reader)), [7]);
    let stats = reader.shared().stats.snapshot();
    assert_eq!(stats.damaged_records, 0);
    assert_eq!(stats.damaged_bytes, 0);

    // After a restart, the records of the group that reached the disk are delivered (at
    // least once); the torn rest is cut off.
    drop((writer, reader));
    fs.crash(CrashMode::KeepAll);
    let (mut writer, mut reader, recovery) = open(fs, config()).unwrap();
    assert_eq!(recovery.torn_bytes, 4);
    assert_eq!(recovery.lost_records, 1, "seq 6 never reached the disk");
    let records = drain(&mut reader);
    assert_eq!(seqs(&records), [1, 2, 3, 4, 5, 7]);
    assert_payloads(&records);
    assert_eq!(writer.append(&[payload(8)]).unwrap().first_seq, 8);
}

#[test]
fn fsync_failure_seals_the_segment() {
    let fs = MemFs::new();
    let (mut writer, mut reader, _) = open(fs.clone(), config()).unwrap();
    append_range(&mut writer, 1..=2);
    writer.sync().unwrap();
    append_range(&mut writer, 3..=4);
    fs.fail_next_sync();
    assert!(writer.sync().is_err());
    let stats = writer.shared().stats.snapshot();
    assert_eq!(stats.fsync_failures, 1);
    // Readers still get what was written; the next append starts a new segment.
    assert_eq!(seqs(&drain(&mut reader)), [1, 2, 3, 4]);
    append_range(&mut writer, 5..=6);
    assert_eq!(segments(&fs).len(), 2);
    writer.sync().unwrap();
    assert_eq!(seqs(&drain(&mut reader)), [5, 6]);

    // The failed segment's unsynced records were never durable; the ones after are.
    drop((writer, reader));
    fs.crash(CrashMode::LoseUnsynced);
    let (_, mut reader, recovery) = open(fs, config()).unwrap();
    assert_eq!(recovery.lost_records, 2);
    assert_eq!(seqs(&drain(&mut reader)), [1, 2, 5, 6]);
}

#[test]
fn synced_records_survive_power_loss() {
    let fs = MemFs::new();
    let config = Config {
        segment_size: HEADER_LEN + 3 * FRAME,
        ..config()
    };
    let (mut writer, reader, _) = open(fs.clone(), config.clone()).unwrap();
    append_range(&mut writer, 1..=7);
    writer.sync().unwrap();
    append_range(&mut writer, 8..=9);
    drop((writer, reader));
    fs.crash(CrashMode::LoseUnsynced);
    let (mut writer, mut reader, recovery) = open(fs, config).unwrap();
    assert_eq!(recovery.records_pending, 7);
    let records = drain(&mut reader);
    assert_eq!(seqs(&records), (1..=7).collect::<Vec<_>>());
    assert_payloads(&records);
    assert_eq!(writer.append(&[payload(8)]).unwrap().first_seq, 8);
}

#[test]
fn failed_cursor_write_keeps_the_old_cursor() {
    let fs = MemFs::new();
    let (mut writer, mut reader, _) = open(fs.clone(), config()).unwrap();
    append_range(&mut writer, 1..=3);
    drain(&mut reader);
    reader.ack(1).unwrap();
    reader.persist().unwrap();
    reader.ack(2).unwrap();
    fs.fail_next_rename();
    assert!(reader.persist().is_err());
    drop((writer, reader));
    let (_, mut reader, recovery) = open(fs.clone(), config()).unwrap();
    assert_eq!(recovery.cursor, 1);
    assert_eq!(recovery.removed_tmp, 1);
    assert_eq!(seqs(&drain(&mut reader)), [2, 3]);
}

#[test]
fn inspect_reports_damage_and_changes_nothing() {
    let fs = MemFs::new();
    let small = Config {
        segment_size: HEADER_LEN + 10 * FRAME,
        ..config()
    };
    {
        let (mut writer, mut reader, _) = open(fs.clone(), small).unwrap();
        append_range(&mut writer, 1..=25);
        writer.sync().unwrap();
        drain(&mut reader);
        for seq in 1..=4 {
            reader.ack(seq).unwrap();
        }
        reader.persist().unwrap();
    }
    let dir = Path::new(DIR);
    fs.corrupt(&segment_path(dir, 2), HEADER_LEN + 2 * FRAME + 1, &[0xFF])
        .unwrap();
    let seg3 = segment_path(dir, 3);
    let mut data = fs.read(&seg3).unwrap();
    data.truncate(data.len() - 2);
    fs.write_file(&seg3, &data).unwrap();
    fs.write_file(&dir.join("cursor.tmp"), b"x").unwrap();

    let before = fs.snapshot();
    let report = inspect(&fs, dir).unwrap();
    assert_eq!(fs.snapshot(), before, "inspect changed nothing");
    assert_eq!(report.cursor, CursorFile::Valid(4));
    assert_eq!(report.segments.len(), 3);
    assert_eq!(report.records, 23);
    assert_eq!(report.records_pending, 19);
    assert!(report.is_damaged());
    let seg2 = &report.segments[1];
    assert_eq!(
        (seg2.first_seq, seg2.last_seq, seg2.records),
        (Some(11), Some(20), 9)
    );
    assert_eq!(
        seg2.damaged,
        [Region {
            offset: HEADER_LEN + 2 * FRAME,
            len: FRAME
        }]
    );
    let seg3 = &report.segments[2];
    assert_eq!(
        seg3.torn,
        Some(Region {
            offset: HEADER_LEN + 4 * FRAME,
            len: FRAME - 2
        })
    );
    assert_eq!(report.other_files, ["cursor.tmp"]);
    let text = report.to_string();
    assert!(text.contains("damaged: 31 bytes at offset 70"), "{text}");
    assert!(text.contains("torn tail: 29 bytes"), "{text}");
    assert!(text.contains("pending after the cursor: 19"), "{text}");
    assert!(
        text.contains("every record through seq 4 is acked"),
        "{text}"
    );

    // After recovery, inspect sees a clean buffer with the damaged original in quarantine.
    open(fs.clone(), config()).unwrap();
    let report = inspect(&fs, dir).unwrap();
    assert!(!report.is_damaged(), "{report}");
    assert_eq!(report.quarantine.len(), 1);
    assert!(report.to_string().contains("quarantine: 1 file(s)"));
}

#[test]
fn writer_and_reader_on_two_threads() {
    let fs = MemFs::new();
    let config = Config {
        segment_size: 512,
        max_size: 4096,
        ..config()
    };
    let (mut writer, mut reader, _) = open(fs, config).unwrap();
    let total = 2000u64;
    let producer = std::thread::spawn(move || {
        let mut next = 1;
        while next <= total {
            match writer.append(&[payload(next)]) {
                Ok(_) => next += 1,
                Err(e) if e.is_full() => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
    });
    let mut expected = 1;
    while expected <= total {
        match reader.next().unwrap() {
            Some(record) => {
                assert_eq!(record.seq, expected);
                assert_eq!(record.payload, payload(expected));
                reader.ack(record.seq).unwrap();
                expected += 1;
            }
            None => std::thread::yield_now(),
        }
    }
    producer.join().unwrap();
    assert!(reader.shared().stats.snapshot().segments <= 2);
}

mod real_disk {
    use super::*;

    fn real_config(dir: &Path) -> Config {
        Config {
            dir: dir.to_path_buf(),
            segment_size: HEADER_LEN + 3 * FRAME,
            ..config()
        }
    }

    #[test]
    fn round_trip_and_restart() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("buffer");
        {
            let (mut writer, mut reader, _) = open(RealFs, real_config(&dir)).unwrap();
            append_range(&mut writer, 1..=8);
            writer.sync().unwrap();
            let records = drain(&mut reader);
            assert_eq!(seqs(&records), (1..=8).collect::<Vec<_>>());
            assert_payloads(&records);
            for seq in 1..=4 {
                reader.ack(seq).unwrap();
            }
            reader.persist().unwrap();
        }
        let (mut writer, mut reader, recovery) = open(RealFs, real_config(&dir)).unwrap();
        assert_eq!(recovery.cursor, 4);
        assert_eq!(seqs(&drain(&mut reader)), [5, 6, 7, 8]);
        assert_eq!(writer.append(&[payload(9)]).unwrap().first_seq, 9);
        assert!(
            !dir.join("00000000000000000001.seg").exists(),
            "acked through and deleted"
        );
    }

    /// One group of more frames than a vectored write takes (Linux's `IOV_MAX` is 1,024
    /// slices, two a record), with empty and varied payloads: the segment holds exactly their
    /// frames, one after the other, and a reader after a restart gets every one back.
    #[test]
    fn a_group_of_many_records_is_written_frame_by_frame() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("buffer");
        let cfg = Config {
            segment_size: 1 << 20,
            ..real_config(&dir)
        };
        let payloads: Vec<Vec<u8>> = (0..1500u64)
            .map(|i| vec![(i % 251) as u8; (i % 7 * 13) as usize])
            .collect();
        {
            let (mut writer, _, _) = open(RealFs, cfg.clone()).unwrap();
            let appended = writer.append(&payloads).unwrap();
            assert_eq!((appended.first_seq, appended.last_seq), (1, 1500));
            writer.sync().unwrap();
        }
        let mut expected = SEGMENT_HEADER.to_vec();
        for (seq, p) in (1..).zip(&payloads) {
            crate::format::encode(&mut expected, seq, p);
        }
        assert!(std::fs::read(segment_path(&dir, 1)).unwrap() == expected);
        let (_, mut reader, _) = open(RealFs, cfg).unwrap();
        let records = drain(&mut reader);
        assert_eq!(records.len(), payloads.len());
        for (r, p) in records.iter().zip(&payloads) {
            assert_eq!(&r.payload[..], &p[..]);
        }
    }

    #[test]
    fn torn_tail_and_damage_on_disk() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        {
            let (mut writer, _, _) = open(
                RealFs,
                Config {
                    segment_size: 1 << 20,
                    ..real_config(&dir)
                },
            )
            .unwrap();
            append_range(&mut writer, 1..=10);
            writer.sync().unwrap();
        }
        let path = segment_path(&dir, 1);
        let mut data = std::fs::read(&path).unwrap();
        data[(HEADER_LEN + 4 * FRAME + 25) as usize] ^= 0x55;
        data.truncate(data.len() - 3);
        std::fs::write(&path, &data).unwrap();

        let before = std::fs::read(&path).unwrap();
        let report = inspect(&RealFs, &dir).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), before);
        assert_eq!(report.segments[0].damaged.len(), 1);
        assert!(report.segments[0].torn.is_some());

        let (_, mut reader, recovery) = open(
            RealFs,
            Config {
                segment_size: 1 << 20,
                ..real_config(&dir)
            },
        )
        .unwrap();
        // Record 5 damaged, record 10 cut short.
        assert_eq!(recovery.lost_records, 2);
        assert_eq!(recovery.damaged_bytes, FRAME);
        assert_eq!(recovery.torn_bytes, FRAME - 3);
        assert_eq!(recovery.quarantined.len(), 1);
        assert!(recovery.quarantined[0].exists());
        assert_eq!(seqs(&drain(&mut reader)), [1, 2, 3, 4, 6, 7, 8, 9]);
        assert_eq!(
            std::fs::read_dir(dir.join("quarantine")).unwrap().count(),
            1
        );
    }
}

#[test]
fn a_full_file_system_frees_space_once_the_sealed_segment_is_acknowledged() {
    // The file system is smaller than max_size: space comes back only when acknowledged
    // segments are deleted, so the writer must seal the segment it could not extend.
    let fs = MemFs::new();
    let (mut writer, mut reader, _) = open(fs.clone(), config()).unwrap();
    append_range(&mut writer, 1..=3);
    writer.sync().unwrap();
    fs.enospc_after(FRAME / 2);
    assert!(matches!(
        writer.append(&[payload(4)]),
        Err(AppendError::Io(_))
    ));
    // Nothing to delete yet: the retry fails too (a new segment's header does not fit).
    assert!(writer.append(&[payload(4)]).is_err());
    for record in drain(&mut reader) {
        reader
            .ack(record.seq)
            .unwrap_or_else(|e| panic!("ack {}: {e}", record.seq));
    }
    assert!(
        !segments(&fs).contains(&"00000000000000000001.seg".to_owned()),
        "the sealed, acknowledged segment is gone: {:?}",
        fs.list(Path::new(DIR))
    );
    let appended = writer.append(&[payload(4)]).unwrap();
    assert_eq!(appended.first_seq, 4);
    writer.sync().unwrap();
    assert_eq!(seqs(&drain(&mut reader)), [4]);
}

/// A payload laid out as the server's encoded batches are: a tag with the format version, then
/// the event count as a u32 (little-endian) at offset 4; padded to `len` bytes.
fn batch_payload(events: u32, len: usize) -> Vec<u8> {
    let mut payload = b"LHB\x01".to_vec();
    payload.extend_from_slice(&events.to_le_bytes());
    payload.resize(len, b'.');
    payload
}

/// The event count of a [`batch_payload`], as the server reads it from an encoded batch.
fn batch_events(payload: &[u8]) -> Option<u32> {
    let head = payload.first_chunk::<8>()?;
    (head[..4] == *b"LHB\x01").then(|| u32::from_le_bytes([head[4], head[5], head[6], head[7]]))
}

/// Batch payloads of this size: record `i` holds `100 * i` events.
const BATCH_LEN: usize = 200;
const BATCH_FRAME: u64 = FRAME_HEADER_LEN as u64 + BATCH_LEN as u64;

fn counting_config() -> Config {
    Config {
        event_count: Some(EventCount(batch_events)),
        ..config()
    }
}

fn append_batches<F: FileSystem>(writer: &mut Writer<F>, range: std::ops::RangeInclusive<u64>) {
    for i in range {
        let appended = writer
            .append(&[batch_payload(100 * i as u32, BATCH_LEN)])
            .unwrap();
        assert_eq!(appended.first_seq, i);
    }
    writer.sync().unwrap();
}

/// Cuts `path` to `len` bytes, as a lost write or damage would.
fn cut(fs: &MemFs, path: &Path, len: u64) {
    let mut data = fs.read(path).unwrap();
    data.truncate(len as usize);
    fs.write_file(path, &data).unwrap();
}

#[test]
fn a_cut_tail_reports_the_record_and_the_events_it_lost() {
    let path = segment_path(Path::new(DIR), 1);
    let record_4 = HEADER_LEN + 3 * BATCH_FRAME;
    // (bytes of record 4 left, records lost, events lost)
    let cases = [
        // Mid-payload: the header and the event count survive.
        (FRAME_HEADER_LEN as u64 + 50, 1, 400),
        // Exactly the header and the count.
        (FRAME_HEADER_LEN as u64 + 8, 1, 400),
        // The header, and too little of the payload to say how many events it held.
        (FRAME_HEADER_LEN as u64 + 7, 1, 0),
        (FRAME_HEADER_LEN as u64, 1, 0),
        // Within the frame header: nothing says which record this was.
        (10, 0, 0),
        // At the boundary: no trace of record 4 is left.
        (0, 0, 0),
    ];
    for (left, lost_records, lost_events) in cases {
        let fs = MemFs::new();
        {
            let (mut writer, _, _) = open(fs.clone(), counting_config()).unwrap();
            append_batches(&mut writer, 1..=4);
        }
        cut(&fs, &path, record_4 + left);

        let (mut writer, mut reader, recovery) = open(fs.clone(), counting_config()).unwrap();
        let case = format!("{left} bytes of record 4 left: {recovery}");
        assert_eq!(recovery.lost_records, lost_records, "{case}");
        assert_eq!(recovery.lost_events, lost_events, "{case}");
        assert_eq!(recovery.torn_bytes, left, "{case}");
        assert_eq!(recovery.records_pending, 3, "{case}");
        assert_eq!(recovery.next_seq, 4, "{case}");
        assert!(
            recovery.to_string().contains(&format!(
                "lost_records={lost_records} lost_events={lost_events} "
            )),
            "{case}"
        );
        let stats = reader.shared().stats.snapshot();
        assert_eq!(stats.damaged_records, lost_records, "{case}");
        assert_eq!(stats.lost_events, lost_events, "{case}");
        assert_eq!(seqs(&drain(&mut reader)), [1, 2, 3], "{case}");

        // The tail is cut off and its number goes to the next record: counted once only.
        append_batches(&mut writer, 4..=4);
        drop((writer, reader));
        let (_, mut reader, again) = open(fs, counting_config()).unwrap();
        assert_eq!((again.lost_records, again.lost_events), (0, 0), "{again}");
        assert_eq!(seqs(&drain(&mut reader)), [1, 2, 3, 4]);
    }
}

#[test]
fn a_cut_record_alone_in_its_segment_is_counted() {
    let config = Config {
        segment_size: HEADER_LEN + 3 * BATCH_FRAME,
        ..counting_config()
    };
    let dir = Path::new(DIR);

    // Records 1-3 fill segment 1; record 4 opens segment 2 and is cut.
    let fs = MemFs::new();
    {
        let (mut writer, _, _) = open(fs.clone(), config.clone()).unwrap();
        append_batches(&mut writer, 1..=4);
    }
    cut(&fs, &segment_path(dir, 2), HEADER_LEN + 100);
    let (_, mut reader, recovery) = open(fs.clone(), config.clone()).unwrap();
    assert_eq!(
        (recovery.lost_records, recovery.lost_events),
        (1, 400),
        "{recovery}"
    );
    assert_eq!(recovery.segments_deleted, 1, "nothing valid in segment 2");
    assert_eq!(seqs(&drain(&mut reader)), [1, 2, 3]);

    // As before, after 1-3 were acknowledged and their segment deleted: the cursor says which
    // number the next record had.
    let fs = MemFs::new();
    {
        let (mut writer, mut reader, _) = open(fs.clone(), config.clone()).unwrap();
        append_batches(&mut writer, 1..=4);
        for record in drain(&mut reader).iter().take(3) {
            reader.ack(record.seq).unwrap();
        }
        reader.persist().unwrap();
    }
    assert_eq!(segments(&fs), ["00000000000000000002.seg"]);
    cut(&fs, &segment_path(dir, 2), HEADER_LEN + 100);
    let (_, mut reader, recovery) = open(fs, config).unwrap();
    assert_eq!(recovery.cursor, 3);
    assert_eq!(recovery.segments, 1);
    assert_eq!(
        (recovery.lost_records, recovery.lost_events),
        (1, 400),
        "{recovery}"
    );
    assert!(drain(&mut reader).is_empty());
}

#[test]
fn a_cut_tail_of_an_earlier_segment_is_counted_once() {
    let config = Config {
        segment_size: HEADER_LEN + 3 * BATCH_FRAME,
        ..counting_config()
    };
    let fs = MemFs::new();
    {
        let (mut writer, _, _) = open(fs.clone(), config.clone()).unwrap();
        append_batches(&mut writer, 1..=6);
    }
    cut(
        &fs,
        &segment_path(Path::new(DIR), 1),
        HEADER_LEN + 2 * BATCH_FRAME + 60,
    );
    let (_, mut reader, recovery) = open(fs.clone(), config.clone()).unwrap();
    // Record 3 is counted where its header is, not a second time as the gap before 4.
    assert_eq!(
        (recovery.lost_records, recovery.lost_events),
        (1, 300),
        "{recovery}"
    );
    assert_eq!(seqs(&drain(&mut reader)), [1, 2, 4, 5, 6]);
    drop(reader);
    // Cut off now, it is only a gap: still a lost record, its events no longer known.
    let (_, _, again) = open(fs, config).unwrap();
    assert_eq!((again.lost_records, again.lost_events), (1, 0), "{again}");
}

#[test]
fn damage_in_the_middle_reports_the_events_of_records_whose_header_survived() {
    let dir = Path::new(DIR);
    let record_3 = HEADER_LEN + 2 * BATCH_FRAME;
    // (offset of the flipped byte, events lost)
    let cases = [
        // In record 3's payload, past its event count.
        (record_3 + FRAME_HEADER_LEN as u64 + 100, 300),
        // In record 3's magic: the gap says a record is lost, nothing says how many events.
        (record_3, 0),
    ];
    for (at, lost_events) in cases {
        let fs = MemFs::new();
        {
            let (mut writer, _, _) = open(fs.clone(), counting_config()).unwrap();
            append_batches(&mut writer, 1..=5);
        }
        fs.corrupt(&segment_path(dir, 1), at, &[0x40]).unwrap();
        let (_, mut reader, recovery) = open(fs, counting_config()).unwrap();
        assert_eq!(recovery.lost_records, 1, "{recovery}");
        assert_eq!(recovery.lost_events, lost_events, "{recovery}");
        assert_eq!(recovery.damaged_bytes, BATCH_FRAME, "{recovery}");
        assert_eq!(recovery.quarantined.len(), 1, "{recovery}");
        assert_eq!(seqs(&drain(&mut reader)), [1, 2, 4, 5]);
    }
}

/// The pending-events gauge.
fn events_pending<F: FileSystem>(reader: &Reader<F>) -> u64 {
    reader.shared().stats.snapshot().events_pending
}

/// The events [`append_batches`] gives the records of `seqs`.
fn events_of(seqs: impl IntoIterator<Item = u64>) -> u64 {
    seqs.into_iter().map(|i| 100 * i).sum()
}

#[test]
fn events_pending_follow_appends_and_acks_in_any_order() {
    let config = Config {
        segment_size: HEADER_LEN + 3 * BATCH_FRAME,
        ..counting_config()
    };
    let fs = MemFs::new();
    let (mut writer, mut reader, recovery) = open(fs.clone(), config).unwrap();
    assert_eq!(recovery.events_pending, 0);
    assert_eq!(events_pending(&reader), 0);
    append_batches(&mut writer, 1..=4);
    assert_eq!(events_pending(&reader), events_of(1..=4));
    // A group counts each of its records, and a payload that does not say counts none.
    writer
        .append(&[
            batch_payload(500, BATCH_LEN),
            b"not a batch".to_vec(),
            batch_payload(700, BATCH_LEN),
        ])
        .unwrap();
    assert_eq!(events_pending(&reader), events_of(1..=4) + 1200);

    // Reading leaves them pending: the sink has them, the buffer still holds them.
    let records = drain(&mut reader);
    assert_eq!(seqs(&records), (1..=7).collect::<Vec<_>>());
    assert_eq!(events_pending(&reader), events_of(1..=4) + 1200);

    let mut left = events_of(1..=4) + 1200;
    for (seq, events) in [(3, 300), (6, 0), (1, 100), (7, 700), (4, 400)] {
        reader.ack(seq).unwrap();
        left -= events;
        assert_eq!(events_pending(&reader), left, "after the ack of {seq}");
    }
    // Repeated and unknown acks take nothing off.
    reader.ack(3).unwrap();
    reader.ack(99).unwrap();
    assert_eq!(events_pending(&reader), left);
    reader.ack(2).unwrap();
    reader.ack(5).unwrap();
    assert_eq!(events_pending(&reader), 0);
    assert_eq!(reader.shared().stats.snapshot().records_pending, 0);
    assert_eq!(segments(&fs).len(), 1, "acked segments went");
}

#[test]
fn events_pending_stay_0_without_an_event_count() {
    let fs = MemFs::new();
    {
        let (mut writer, mut reader, _) = open(fs.clone(), config()).unwrap();
        append_batches(&mut writer, 1..=3);
        assert_eq!(events_pending(&reader), 0);
        reader.next().unwrap().unwrap();
        reader.ack(1).unwrap();
        assert_eq!(events_pending(&reader), 0);
        reader.persist().unwrap();
    }
    let (_, reader, recovery) = open(fs, config()).unwrap();
    assert_eq!(recovery.records_pending, 2);
    assert_eq!(recovery.events_pending, 0);
    assert_eq!(events_pending(&reader), 0);
}

#[test]
fn a_reopened_buffer_counts_the_events_after_its_cursor() {
    let config = Config {
        segment_size: HEADER_LEN + 3 * BATCH_FRAME,
        ..counting_config()
    };
    let fs = MemFs::new();
    {
        let (mut writer, mut reader, _) = open(fs.clone(), config.clone()).unwrap();
        append_batches(&mut writer, 1..=10);
        drain(&mut reader);
        for seq in [1, 2, 3, 4, 6, 9] {
            reader.ack(seq).unwrap();
        }
        reader.persist().unwrap();
        assert_eq!(events_pending(&reader), events_of([5, 7, 8, 10]));
    }
    let (mut writer, mut reader, recovery) = open(fs.clone(), config.clone()).unwrap();
    assert_eq!(recovery.cursor, 4);
    // 6 and 9 were acked after the cursor: they wait again, and so do their events.
    let waiting = events_of(5..=10);
    assert_eq!(recovery.events_pending, waiting);
    assert!(
        recovery
            .to_string()
            .contains(&format!("pending=6 events_pending={waiting} ")),
        "{recovery}"
    );
    assert_eq!(events_pending(&reader), waiting);

    // The reopened buffer goes on counting: appends add, acks of old and new records subtract.
    append_batches(&mut writer, 11..=11);
    assert_eq!(events_pending(&reader), waiting + 1100);
    assert_eq!(seqs(&drain(&mut reader)), (5..=11).collect::<Vec<_>>());
    for seq in [11, 5, 9] {
        reader.ack(seq).unwrap();
    }
    assert_eq!(events_pending(&reader), events_of([6, 7, 8, 10]));
    drop((writer, reader));

    // Unsaved acks are redelivered; the count follows the cursor the log holds.
    let (_, mut reader, recovery) = open(fs, config).unwrap();
    let cursor = recovery.cursor;
    let expected = events_of((cursor + 1)..=11);
    assert_eq!(recovery.events_pending, expected, "{recovery}");
    assert_eq!(events_pending(&reader), expected);
    for record in drain(&mut reader) {
        reader.ack(record.seq).unwrap();
    }
    assert_eq!(events_pending(&reader), 0);
}

#[test]
fn events_of_records_damaged_on_disk_are_not_pending_after_recovery() {
    let fs = MemFs::new();
    {
        let (mut writer, _, _) = open(fs.clone(), counting_config()).unwrap();
        append_batches(&mut writer, 1..=5);
    }
    let record_3 = HEADER_LEN + 2 * BATCH_FRAME;
    fs.corrupt(
        &segment_path(Path::new(DIR), 1),
        record_3 + FRAME_HEADER_LEN as u64 + 100,
        &[0x40],
    )
    .unwrap();
    let (_, mut reader, recovery) = open(fs, counting_config()).unwrap();
    assert_eq!(recovery.lost_events, 300, "{recovery}");
    assert_eq!(
        recovery.events_pending,
        events_of([1, 2, 4, 5]),
        "{recovery}"
    );
    assert_eq!(events_pending(&reader), events_of([1, 2, 4, 5]));
    for record in drain(&mut reader) {
        reader.ack(record.seq).unwrap();
    }
    assert_eq!(events_pending(&reader), 0);
}

#[test]
fn events_of_records_lost_while_reading_leave_the_gauge() {
    let config = Config {
        segment_size: HEADER_LEN + 3 * BATCH_FRAME,
        ..counting_config()
    };
    let dir = Path::new(DIR);
    let fs = MemFs::new();
    let (mut writer, mut reader, _) = open(fs.clone(), config).unwrap();
    // Segments: 1-3, 4-6, 7-9, 10-11 (the one being written).
    append_batches(&mut writer, 1..=11);
    assert_eq!(events_pending(&reader), events_of(1..=11));
    // Record 2's payload, in a sealed segment, and record 11's header, in the one being
    // written; segment 3 goes away under the buffer.
    fs.corrupt(
        &segment_path(dir, 1),
        HEADER_LEN + BATCH_FRAME + FRAME_HEADER_LEN as u64 + 50,
        &[0x01],
    )
    .unwrap();
    fs.corrupt(&segment_path(dir, 4), HEADER_LEN + BATCH_FRAME + 2, &[0x01])
        .unwrap();
    fs.remove_file(&segment_path(dir, 3)).unwrap();

    let records = drain(&mut reader);
    assert_eq!(seqs(&records), [1, 3, 4, 5, 6, 10]);
    assert_eq!(
        events_pending(&reader),
        events_of([1, 3, 4, 5, 6, 10]),
        "what was delivered and waits for its ack"
    );
    // The writer goes on in the damaged segment, past the damage.
    append_batches(&mut writer, 12..=12);
    assert_eq!(seqs(&drain(&mut reader)), [12]);
    assert_eq!(events_pending(&reader), events_of([1, 3, 4, 5, 6, 10, 12]));
    for seq in [12, 1, 10, 3, 4, 5, 6] {
        reader.ack(seq).unwrap();
    }
    assert_eq!(events_pending(&reader), 0);
}

#[test]
fn events_of_recovered_records_lost_while_reading_leave_the_gauge() {
    let config = Config {
        segment_size: HEADER_LEN + 3 * BATCH_FRAME,
        ..counting_config()
    };
    let dir = Path::new(DIR);
    let fs = MemFs::new();
    {
        let (mut writer, _, _) = open(fs.clone(), config.clone()).unwrap();
        append_batches(&mut writer, 1..=9);
    }
    let (_, mut reader, recovery) = open(fs.clone(), config).unwrap();
    assert_eq!(recovery.events_pending, events_of(1..=9));
    // Damaged after recovery checked them: record 5, and all of segment 3.
    fs.corrupt(
        &segment_path(dir, 2),
        HEADER_LEN + BATCH_FRAME + FRAME_HEADER_LEN as u64 + 9,
        &[0x01],
    )
    .unwrap();
    fs.remove_file(&segment_path(dir, 3)).unwrap();
    assert_eq!(seqs(&drain(&mut reader)), [1, 2, 3, 4, 6]);
    assert_eq!(events_pending(&reader), events_of([1, 2, 3, 4, 6]));
    for seq in [6, 4, 3, 2, 1] {
        reader.ack(seq).unwrap();
    }
    assert_eq!(events_pending(&reader), 0);
}

#[test]
fn damage_read_around_after_a_failed_salvage_is_not_taken_off_twice() {
    let fs = MemFs::new();
    {
        let (mut writer, _, _) = open(fs.clone(), counting_config()).unwrap();
        append_batches(&mut writer, 1..=5);
    }
    fs.corrupt(
        &segment_path(Path::new(DIR), 1),
        HEADER_LEN + 2 * BATCH_FRAME + FRAME_HEADER_LEN as u64 + 100,
        &[0x40],
    )
    .unwrap();
    // The salvage cannot move the original to quarantine: the reader reads around the damage.
    fs.fail_next_rename();
    let (_, mut reader, recovery) = open(fs, counting_config()).unwrap();
    assert!(recovery.quarantined.is_empty(), "{recovery}");
    assert_eq!(
        recovery.events_pending,
        events_of([1, 2, 4, 5]),
        "{recovery}"
    );
    assert_eq!(seqs(&drain(&mut reader)), [1, 2, 4, 5]);
    let stats = reader.shared().stats.snapshot();
    assert_eq!(
        stats.damaged_bytes,
        2 * BATCH_FRAME,
        "found at recovery, then skipped while reading"
    );
    assert_eq!(events_pending(&reader), events_of([1, 2, 4, 5]));
    for seq in [1, 2, 4, 5] {
        reader.ack(seq).unwrap();
    }
    assert_eq!(events_pending(&reader), 0);
}

/// A small deterministic random number generator (xorshift64*), so that a failing sequence of
/// operations is found again from its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Random appends (batches, and payloads whose count cannot be read), reads, acks in any
/// order, cursor writes and reopenings, checked after every step against a model: the gauges
/// hold the events and the number of the records after the cursor the buffer was opened with
/// that were not acknowledged since.
#[test]
fn events_pending_match_a_model_of_the_pending_records() {
    for seed in 1..=40u64 {
        let config = Config {
            segment_size: HEADER_LEN + 4 * BATCH_FRAME,
            ..counting_config()
        };
        let fs = MemFs::new();
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let (mut writer, mut reader, _) = open(fs.clone(), config.clone()).unwrap();
        // The records after the cursor: their events, and whether they were acked since open.
        let mut log: std::collections::BTreeMap<u64, (u64, bool)> = Default::default();
        let mut unacked: Vec<u64> = Vec::new();
        let mut reopened = 0;
        for step in 0..300 {
            let what = match rng.below(20) {
                0..=6 => {
                    let group: Vec<(u64, Vec<u8>)> = (0..=rng.below(3))
                        .map(|_| match rng.below(5) {
                            0 => (0, b"opaque".to_vec()),
                            _ => {
                                let events = rng.below(1000);
                                (events, batch_payload(events as u32, BATCH_LEN))
                            }
                        })
                        .collect();
                    let payloads: Vec<&[u8]> = group.iter().map(|(_, p)| p.as_slice()).collect();
                    let appended = writer.append(&payloads).unwrap();
                    for (seq, (events, _)) in (appended.first_seq..).zip(&group) {
                        log.insert(seq, (*events, false));
                    }
                    "append"
                }
                7..=11 => {
                    for _ in 0..=rng.below(4) {
                        match reader.next().unwrap() {
                            Some(record) => unacked.push(record.seq),
                            None => break,
                        }
                    }
                    "read"
                }
                12..=17 if !unacked.is_empty() => {
                    let seq = unacked.swap_remove(rng.below(unacked.len() as u64) as usize);
                    reader.ack(seq).unwrap();
                    log.get_mut(&seq).unwrap().1 = true;
                    "ack"
                }
                18 => {
                    reader.persist().unwrap();
                    "persist"
                }
                19 => {
                    drop((writer, reader));
                    let recovery;
                    (writer, reader, recovery) = open(fs.clone(), config.clone()).unwrap();
                    reopened += 1;
                    // What the cursor covers is gone; acks after it were lost with the reader.
                    log.retain(|seq, _| *seq > recovery.cursor);
                    for (_, acked) in log.values_mut() {
                        *acked = false;
                    }
                    unacked.clear();
                    let events: u64 = log.values().map(|(events, _)| events).sum();
                    assert_eq!(
                        (recovery.events_pending, recovery.records_pending),
                        (events, log.len() as u64),
                        "seed {seed} step {step}: {recovery}"
                    );
                    "reopen"
                }
                _ => "nothing",
            };
            let stats = reader.shared().stats.snapshot();
            let waiting = log.values().filter(|(_, acked)| !acked);
            let (records, events) = waiting.fold((0, 0), |(r, e), (events, _)| (r + 1, e + events));
            assert_eq!(
                (stats.events_pending, stats.records_pending),
                (events, records),
                "seed {seed} step {step} ({what})"
            );
        }
        assert!(reopened > 0, "seed {seed} never reopened the buffer");
    }
}
