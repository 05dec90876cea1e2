//! A model test of the disk buffer: random sequences of appends, syncs, reads, acks, cursor
//! writes, injected I/O faults, corruption and power losses (with recovery by opening the
//! buffer again) run against `MemFs`, and every step is checked against a plain model of what
//! was appended, what was made durable and what was acked.
//!
//! Properties:
//! 1. Every record delivered was appended, with the same sequence number and payload.
//! 2. Within one run of a reader, sequence numbers increase.
//! 3. After a crash, every record that was durable and not acked is delivered again, unless the
//!    test corrupted its segment; and what corruption destroys shows up in the damage counts.
//! 4. Nothing panics, and opening never fails because of damaged data.
//! 5. Once everything readable was delivered, the events counted pending are those of the
//!    records delivered and not acked: whatever faults, corruption and power losses did, the
//!    gauge holds no event of a record that is gone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use loghaul_buffer::testing::{CrashMode, MemFs};
use loghaul_buffer::{AppendError, Config, EventCount, Reader, SyncMode, Writer, inspect, open};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::FileFailurePersistence;

const DIR: &str = "/buffer";
const MAX_RECORD: u32 = 96;

#[derive(Clone, Debug)]
enum Fault {
    WriteEio,
    Enospc(u64),
    ShortWrite(usize),
    SyncFails,
    /// The write fails and so does the truncation that undoes it.
    WriteAndRollbackFail,
    RenameFails,
}

#[derive(Clone, Debug)]
enum Op {
    Append(Vec<Vec<u8>>),
    Sync,
    Read(usize),
    Ack(Vec<Index>),
    Persist,
    Fault(Fault),
    Crash(CrashMode),
    /// XOR one byte of a segment other than the newest one.
    Corrupt(Index, Index, u8),
}

fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        20 => prop::collection::vec(any::<u8>(), 0..40),
        1 => prop::collection::vec(any::<u8>(), (MAX_RECORD as usize + 1)..(MAX_RECORD as usize + 20)),
    ]
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        Just(Fault::WriteEio),
        (0u64..120).prop_map(Fault::Enospc),
        (1usize..60).prop_map(Fault::ShortWrite),
        Just(Fault::SyncFails),
        Just(Fault::WriteAndRollbackFail),
        Just(Fault::RenameFails),
    ]
}

fn crash_mode() -> impl Strategy<Value = CrashMode> {
    prop_oneof![
        Just(CrashMode::LoseUnsynced),
        Just(CrashMode::KeepAll),
        any::<u64>().prop_map(CrashMode::Random),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => prop::collection::vec(payload(), 1..5).prop_map(Op::Append),
        4 => Just(Op::Sync),
        6 => (1usize..12).prop_map(Op::Read),
        5 => prop::collection::vec(any::<Index>(), 1..6).prop_map(Op::Ack),
        2 => Just(Op::Persist),
        3 => fault().prop_map(Op::Fault),
        2 => crash_mode().prop_map(Op::Crash),
        1 => (any::<Index>(), any::<Index>(), 1u8..=255).prop_map(|(s, b, m)| Op::Corrupt(s, b, m)),
    ]
}

/// The events a payload holds, as the buffer is told to read them: its first byte.
fn events(payload: &[u8]) -> Option<u32> {
    payload.first().map(|&b| u32::from(b))
}

/// The buffer under test and the model it is checked against.
struct Harness {
    fs: MemFs,
    config: Config,
    writer: Writer<MemFs>,
    reader: Reader<MemFs>,
    /// Records appended successfully (in any run), by sequence number.
    appended: BTreeMap<u64, Vec<u8>>,
    /// Records of failed appends whose sequence numbers were given up: they may surface after
    /// a restart.
    maybe: BTreeMap<u64, Vec<u8>>,
    /// Records made durable by a successful sync.
    durable: BTreeMap<u64, Vec<u8>>,
    /// Appended since the last successful sync.
    since_sync: Vec<u64>,
    acked: BTreeSet<u64>,
    /// Records in segments the test corrupted: they may be lost.
    exempt: BTreeSet<u64>,
    /// Delivered by the current reader.
    delivered: BTreeSet<u64>,
    /// Delivered by the current reader and not acked.
    unacked: Vec<u64>,
    last_delivered: u64,
    /// Damage the buffer reported (recoveries and the readers' statistics).
    damage_reported: u64,
}

impl Harness {
    fn new(max_size: u64, sync: SyncMode) -> Self {
        let fs = MemFs::new();
        let config = Config {
            dir: PathBuf::from(DIR),
            max_size,
            segment_size: 256,
            max_record: MAX_RECORD,
            sync,
            event_count: Some(EventCount(events)),
        };
        let (writer, reader, recovery) = open(fs.clone(), config.clone()).unwrap();
        assert_eq!(recovery.segments, 0);
        Harness {
            fs,
            config,
            writer,
            reader,
            appended: BTreeMap::new(),
            maybe: BTreeMap::new(),
            durable: BTreeMap::new(),
            since_sync: Vec::new(),
            acked: BTreeSet::new(),
            exempt: BTreeSet::new(),
            delivered: BTreeSet::new(),
            unacked: Vec::new(),
            last_delivered: 0,
            damage_reported: 0,
        }
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Append(payloads) => self.append(&payloads),
            Op::Sync => match self.writer.sync() {
                Ok(()) => {
                    for seq in self.since_sync.drain(..) {
                        if let Some(payload) = self.appended.get(&seq) {
                            self.durable.insert(seq, payload.clone());
                        }
                    }
                }
                // Not committed, and never will be by a later sync.
                Err(_) => self.since_sync.clear(),
            },
            Op::Read(n) => {
                for _ in 0..n {
                    if !self.read_one() {
                        break;
                    }
                }
            }
            Op::Ack(picks) => {
                for pick in picks {
                    if self.unacked.is_empty() {
                        break;
                    }
                    let seq = self.unacked.swap_remove(pick.index(self.unacked.len()));
                    // An error is about writing the cursor; the ack is recorded all the same.
                    let _ = self.reader.ack(seq);
                    self.acked.insert(seq);
                }
            }
            Op::Persist => {
                let _ = self.reader.persist();
            }
            Op::Fault(fault) => match fault {
                Fault::WriteEio => self.fs.fail_next_write_eio(),
                Fault::Enospc(bytes) => self.fs.enospc_after(bytes),
                Fault::ShortWrite(n) => self.fs.short_write_next(n),
                Fault::SyncFails => self.fs.fail_next_sync(),
                Fault::WriteAndRollbackFail => {
                    self.fs.fail_next_write_eio();
                    self.fs.fail_next_set_len();
                }
                Fault::RenameFails => self.fs.fail_next_rename(),
            },
            Op::Crash(mode) => self.crash(mode),
            Op::Corrupt(segment, byte, mask) => self.corrupt(segment, byte, mask),
        }
    }

    fn append(&mut self, payloads: &[Vec<u8>]) {
        let first = self.writer.next_seq();
        let n = payloads.len() as u64;
        match self.writer.append(payloads) {
            Ok(appended) => {
                assert_eq!(
                    (appended.first_seq, appended.last_seq),
                    (first, first + n - 1)
                );
                for (seq, payload) in (first..).zip(payloads) {
                    self.appended.insert(seq, payload.clone());
                    self.since_sync.push(seq);
                }
            }
            Err(AppendError::Full { .. } | AppendError::TooLarge { .. }) => {
                assert_eq!(
                    self.writer.next_seq(),
                    first,
                    "a refused group consumes no number"
                );
            }
            Err(AppendError::Io(_)) => {
                let next = self.writer.next_seq();
                if next != first {
                    assert_eq!(
                        next,
                        first + n,
                        "a failed group consumes all its numbers or none"
                    );
                    for (seq, payload) in (first..).zip(payloads) {
                        self.maybe.insert(seq, payload.clone());
                    }
                }
            }
        }
        // The disk had room again by the next operation.
        self.fs.clear_capacity();
    }

    /// Reads one record and checks it; false when the reader has caught up.
    fn read_one(&mut self) -> bool {
        let Some(record) = self
            .reader
            .next()
            .expect("reads do not fail without read faults")
        else {
            return false;
        };
        let seq = record.seq;
        assert!(
            seq > self.last_delivered,
            "seq {seq} after {} in one run",
            self.last_delivered
        );
        self.last_delivered = seq;
        let expected = self.appended.get(&seq).or_else(|| self.maybe.get(&seq));
        assert_eq!(
            expected.map(Vec::as_slice),
            Some(&record.payload[..]),
            "record {seq} was never appended as delivered"
        );
        self.delivered.insert(seq);
        self.unacked.push(seq);
        true
    }

    fn drain(&mut self) {
        while self.read_one() {}
    }

    /// Durable records that were not acked: the ones that must be delivered.
    fn owed(&self) -> impl Iterator<Item = u64> + '_ {
        self.durable
            .keys()
            .copied()
            .filter(|s| !self.acked.contains(s) && !self.exempt.contains(s))
    }

    fn crash(&mut self, mode: CrashMode) {
        let stats = self.reader.shared().stats.snapshot();
        self.damage_reported += stats.damaged_records + stats.damaged_bytes;
        self.fs.crash(mode);
        let (writer, reader, recovery) = open(self.fs.clone(), self.config.clone())
            .expect("open never fails because of damaged data");
        self.writer = writer;
        self.reader = reader;
        self.damage_reported += recovery.lost_records
            + recovery.damaged_bytes
            + recovery.torn_bytes
            + recovery.quarantined.len() as u64;

        for seq in &self.unacked {
            assert!(
                *seq > recovery.cursor,
                "cursor {} covers unacked record {seq}",
                recovery.cursor
            );
        }
        for seq in self.owed() {
            assert!(
                seq > recovery.cursor,
                "cursor {} covers durable unacked record {seq}",
                recovery.cursor
            );
        }
        // Numbers from the recovered end on are free again: what held them is gone.
        let next = self.writer.next_seq();
        for seq in self.owed() {
            assert!(
                seq < next,
                "durable record {seq} lost (next_seq {next}): {recovery}"
            );
        }
        self.appended.split_off(&next);
        self.maybe.split_off(&next);
        self.durable.split_off(&next);
        self.acked.split_off(&next);
        self.exempt.split_off(&next);
        self.since_sync.clear();
        self.delivered.clear();
        self.unacked.clear();
        self.last_delivered = 0;
    }

    fn corrupt(&mut self, segment: Index, byte: Index, mask: u8) {
        let dir = Path::new(DIR);
        let mut names: Vec<String> = self
            .fs
            .list(dir)
            .into_iter()
            .filter(|n| n.ends_with(".seg"))
            .collect();
        // Leave the newest segment alone: the writer may still be writing it.
        names.pop();
        if names.is_empty() {
            return;
        }
        let name = names.swap_remove(segment.index(names.len()));
        let path = dir.join(&name);
        let Some(len) = self.fs.read(&path).map(|d| d.len()) else {
            return;
        };
        if len == 0 {
            return;
        }
        let report = inspect(&self.fs, dir).unwrap();
        if let Some(seg) = report.segments.iter().find(|s| s.name == name)
            && let (Some(first), Some(last)) = (seg.first_seq, seg.last_seq)
        {
            self.exempt.extend(first..=last);
        }
        self.fs
            .corrupt(&path, byte.index(len) as u64, &[mask])
            .unwrap();
    }

    /// Drains the reader and checks that every record owed was delivered in this run, and
    /// that the events counted pending are those of the records delivered and not acked.
    fn check_delivered(&mut self) {
        self.drain();
        let unacked_events: u64 = self
            .unacked
            .iter()
            .map(|seq| {
                let payload = self.appended.get(seq).or_else(|| self.maybe.get(seq));
                payload.map_or(0, |p| events(p).map_or(0, u64::from))
            })
            .sum();
        assert_eq!(
            self.reader.shared().stats.snapshot().events_pending,
            unacked_events,
            "events pending with everything readable delivered, {} records unacked",
            self.unacked.len()
        );
        let missing: Vec<u64> = self
            .owed()
            .filter(|s| !self.delivered.contains(s))
            .collect();
        assert!(
            missing.is_empty(),
            "durable unacked records never delivered: {missing:?}"
        );
        let lost_to_corruption = self
            .durable
            .keys()
            .filter(|s| {
                !self.acked.contains(s) && self.exempt.contains(s) && !self.delivered.contains(s)
            })
            .count();
        if lost_to_corruption > 0 {
            let stats = self.reader.shared().stats.snapshot();
            let reported = self.damage_reported + stats.damaged_records + stats.damaged_bytes;
            assert!(
                reported > 0,
                "{lost_to_corruption} records lost to corruption and no damage reported"
            );
        }
    }
}

fn run(max_size: u64, sync: SyncMode, ops: Vec<Op>) {
    let mut harness = Harness::new(max_size, sync);
    for op in ops {
        harness.apply(op);
    }
    harness.fs.clear_faults();
    harness.check_delivered();
    // And once more after a power loss that keeps only what was synced.
    harness.crash(CrashMode::LoseUnsynced);
    harness.check_delivered();
    // The buffer stays usable: once everything is acked, an append fits (a first one may find
    // the buffer full, which seals the segment for the reader to delete).
    for seq in std::mem::take(&mut harness.unacked) {
        let _ = harness.reader.ack(seq);
    }
    let next = harness.writer.next_seq();
    let mut result = harness.writer.append(&[b"last"]);
    if result.as_ref().is_err_and(AppendError::is_full) {
        harness.drain();
        result = harness.writer.append(&[b"last"]);
    }
    assert_eq!(result.map(|a| a.first_seq).ok(), Some(next));
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("proptest-regressions/model.txt"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn buffer_matches_model(
        max_size in prop_oneof![Just(1024u64), Just(1u64 << 20)],
        // The mode decides whether the cursor is synced, and how rotated segments are synced.
        sync in prop_oneof![3 => Just(SyncMode::EveryBatch), 1 => Just(SyncMode::Never)],
        ops in prop::collection::vec(op(), 1..80),
    ) {
        run(max_size, sync, ops);
    }
}
