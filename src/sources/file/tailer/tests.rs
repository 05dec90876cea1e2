//! The tailing loop's steps driven one at a time: a temporary directory is the file system and
//! the `now` every step takes is the clock, so a test crosses a timeout by passing a later
//! instant instead of sleeping, and sees each step's effect before the next one runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use loghaul_core::{BatchStatus, EventBatch};

use super::Tailer;
use crate::metrics::{ComponentKind, Registry};
use crate::pipeline::queue::{Delivery, Input, QUEUE_BATCHES, input_queue};
use crate::pipeline::{Fanout, ShutdownTrigger, shutdown_pair};
use crate::sources::SourceContext;
use crate::sources::file::config::{FileSourceConfig, ReadFrom};
use crate::sources::file::lines::Rules;

const PARTIAL: Duration = Duration::from_secs(1);
const ROTATE_WAIT: Duration = Duration::from_secs(2);

/// One tailer over a temporary directory, its one downstream queue, and the runtime its sends
/// run on (the tests call the steps from their own thread, as the tailer's thread does).
struct Rig {
    tailer: Tailer,
    input: Input,
    dir: tempfile::TempDir,
    /// Runs the sends; kept for the tailer's handle to stay valid.
    _rt: tokio::runtime::Runtime,
    _stop: ShutdownTrigger,
}

impl Rig {
    fn new(acknowledgements: bool) -> Rig {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let dir = tempfile::tempdir().expect("temporary directory");
        let logs = dir.path().join("logs");
        fs::create_dir(&logs).expect("mkdir logs");
        let pattern = format!("{}/*.log", logs.display());
        let config = FileSourceConfig {
            include: vec![glob::Pattern::new(&pattern).expect("pattern")],
            exclude: Vec::new(),
            read_from: ReadFrom::Beginning,
            data_dir: None,
            checkpoint_interval: Duration::from_secs(1),
            glob_interval: Duration::from_secs(1),
            rotate_wait: ROTATE_WAIT,
            max_open_files: 64,
            max_read_size: 64 << 10,
            partial_line_timeout: PARTIAL,
            file_key: None,
            host_key: None,
            offset_key: None,
            rules: Rules {
                max_line: 1 << 20,
                multiline: None,
            },
        };
        let registry = Registry::default();
        let metrics = registry.register("logs", ComponentKind::Source, "file");
        let (tx, input) = input_queue(
            registry.register("out", ComponentKind::Sink, "blackhole"),
            None,
            QUEUE_BATCHES,
        );
        let (stop, shutdown) = shutdown_pair();
        let cx = SourceContext {
            id: "logs".into(),
            metrics: metrics.clone(),
            fanout: Fanout::new(vec![tx], metrics.clone()),
            shutdown,
            retire: crate::pipeline::ShutdownSignal::never(),
            sockets: Default::default(),
            acknowledgements,
            shutdown_timeout: Duration::from_secs(5),
            data_dir: dir.path().join("data"),
            tls: None,
        };
        let tailer = {
            let _runtime = rt.enter();
            Tailer::new(config, cx, dir.path().join("data")).expect("tailer")
        };
        Rig {
            tailer,
            input,
            dir,
            _rt: rt,
            _stop: stop,
        }
    }

    fn log(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join("logs").join(name)
    }

    /// One pass of the loop at `now`, as `Tailer::run` makes it after a due scan.
    fn pass(&mut self, now: Instant) {
        self.tailer.scan(now);
        self.tailer.poll_acks(false);
        self.tailer.read_pass(now);
        self.tailer.flush_due(now, false);
        self.tailer.reopen(now);
        self.tailer.release_gone(now);
    }

    /// The batches queued downstream so far.
    fn take(&mut self) -> Vec<Delivery> {
        std::iter::from_fn(|| self.input.try_recv()).collect()
    }

    /// The messages of the batches queued so far, committed as delivered.
    fn messages(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for d in self.take() {
            out.extend(messages_of(&d.batch));
            d.ack.commit(BatchStatus::Delivered);
        }
        out
    }

    /// The offset the checkpoint would record for `path`.
    fn committed(&self, path: &Path) -> Option<u64> {
        self.tailer
            .files
            .values()
            .find(|w| w.path == path)
            .map(|w| w.committed)
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // The writer thread stops before the directory it writes to is removed.
        self.tailer.checkpoints.close();
    }
}

fn messages_of(batch: &EventBatch) -> Vec<String> {
    batch
        .events
        .iter()
        .filter_map(|e| e.message.get())
        .map(|m| String::from_utf8_lossy(batch.str(m)).into_owned())
        .collect()
}

fn append(path: &Path, bytes: &str) {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(bytes.as_bytes()))
        .expect("append");
}

#[test]
fn a_scan_finds_a_file_and_a_pass_reads_its_lines_in_order() {
    let mut rig = Rig::new(false);
    append(&rig.log("a.log"), "one\ntwo\nthree\n");
    let t0 = Instant::now();
    rig.pass(t0);
    assert_eq!(rig.messages(), ["one", "two", "three"]);
    append(&rig.log("a.log"), "four\n");
    rig.pass(t0);
    assert_eq!(rig.messages(), ["four"], "only what was appended");
    // Without acknowledgements, a line counts as committed once queued.
    let size = fs::metadata(rig.log("a.log")).expect("stat").len();
    assert_eq!(rig.committed(&rig.log("a.log")), Some(size));
}

#[test]
fn a_partial_line_waits_for_its_timeout_and_is_emitted_once() {
    let mut rig = Rig::new(false);
    append(&rig.log("a.log"), "whole\npartial");
    let t0 = Instant::now();
    rig.pass(t0);
    assert_eq!(rig.messages(), ["whole"]);
    rig.pass(t0 + PARTIAL - Duration::from_millis(1));
    assert!(rig.messages().is_empty(), "emitted before its timeout");
    rig.pass(t0 + PARTIAL);
    assert_eq!(rig.messages(), ["partial"]);
    rig.pass(t0 + 3 * PARTIAL);
    assert!(rig.messages().is_empty(), "the partial line again");
    // What is appended later starts a new line.
    append(&rig.log("a.log"), " continued\n");
    rig.pass(t0 + 3 * PARTIAL);
    assert_eq!(rig.messages(), [" continued"]);
}

#[test]
fn a_renamed_file_is_read_to_its_end_and_released_after_rotate_wait() {
    let mut rig = Rig::new(false);
    let (log, rotated) = (
        rig.log("a.log"),
        rig.dir.path().join("logs").join("a.log.1"),
    );
    append(&log, "before 1\n");
    let t0 = Instant::now();
    rig.pass(t0);
    assert_eq!(rig.messages(), ["before 1"]);
    // logrotate: rename, the writer still appends to the old file, a new file appears.
    fs::rename(&log, &rotated).expect("rename");
    append(&rotated, "before 2\n");
    append(&log, "after 1\n");
    rig.pass(t0);
    let mut got = rig.messages();
    got.sort();
    assert_eq!(
        got,
        ["after 1", "before 2"],
        "the old file's tail and the new file"
    );
    assert_eq!(rig.tailer.files.len(), 2, "both followed");
    rig.pass(t0 + ROTATE_WAIT - Duration::from_millis(1));
    assert_eq!(rig.tailer.files.len(), 2, "released before rotate_wait");
    rig.pass(t0 + ROTATE_WAIT);
    assert_eq!(rig.tailer.files.len(), 1, "the renamed file is released");
    assert_eq!(rig.tailer.patterns[0].released.load(Ordering::Relaxed), 1);
}

#[test]
fn a_truncated_file_is_read_again_from_its_start() {
    let mut rig = Rig::new(false);
    let log = rig.log("a.log");
    append(&log, "a long first line before the truncation\n");
    let t0 = Instant::now();
    rig.pass(t0);
    assert_eq!(rig.messages().len(), 1);
    // copytruncate: emptied in place, then written again (shorter than before).
    fs::write(&log, "new\n").expect("truncate and write");
    rig.pass(t0);
    assert_eq!(rig.messages(), ["new"]);
    assert_eq!(
        rig.tailer.patterns[0].truncations.load(Ordering::Relaxed),
        1
    );
}

#[test]
fn with_acknowledgements_the_checkpoint_moves_only_when_delivered_and_a_failure_rewinds() {
    let mut rig = Rig::new(true);
    let log = rig.log("a.log");
    append(&log, "x1\nx2\n");
    let t0 = Instant::now();
    rig.pass(t0);
    let sent = rig.take();
    assert_eq!(sent.len(), 1);
    rig.pass(t0);
    assert_eq!(rig.committed(&log), Some(0), "moved before any ack");

    // The sink fails the batch: its lines are read again.
    for d in sent {
        d.ack.commit(BatchStatus::Errored);
    }
    // The rewind waits out a pause before reading again.
    let later = t0 + Duration::from_secs(5);
    rig.pass(later);
    rig.pass(later);
    assert_eq!(rig.committed(&log), Some(0));
    assert_eq!(rig.messages(), ["x1", "x2"], "read again after the failure");
    rig.pass(later);
    let size = fs::metadata(&log).expect("stat").len();
    assert_eq!(rig.committed(&log), Some(size), "delivered: committed");
}

#[test]
fn a_file_deleted_while_followed_is_forgotten_after_rotate_wait() {
    let mut rig = Rig::new(false);
    let log = rig.log("a.log");
    append(&log, "last words\n");
    let t0 = Instant::now();
    rig.pass(t0);
    assert_eq!(rig.messages(), ["last words"]);
    fs::remove_file(&log).expect("rm");
    rig.pass(t0);
    assert_eq!(rig.tailer.files.len(), 1, "still held open");
    rig.pass(t0 + ROTATE_WAIT);
    assert!(rig.tailer.files.is_empty(), "released");
    // A new file of the same name is a new file: read from its start.
    append(&log, "reborn\n");
    rig.pass(t0 + ROTATE_WAIT);
    assert_eq!(rig.messages(), ["reborn"]);
}
