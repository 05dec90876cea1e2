//! The tailing loop of one `file` source, on a thread of its own: find files, read them in
//! turns, cut lines into batches, follow rotation, and checkpoint what was committed.
//!
//! ```text
//! loop:
//!   every glob_interval   scan: match globs, stat; new files, renamed ones, vanished ones
//!   every pass            poll acks (checkpoint offsets advance, a failed batch rewinds)
//!                         one turn per open file (≤ max_read_size each, round robin):
//!                           region = carried bytes + pread(read_pos) ──Lines::split──► events
//!                         batch full (≥ max_read_size) or pass over ─► Fanout::send
//!                         due partial lines and multiline groups ─► events
//!                         files renamed away or deleted: read to the end, then released
//!                           (closed on a helper thread: closing a deleted file frees its blocks)
//!                         closed files that grew: reopen (least recently active evicted)
//!   every checkpoint_interval   hand checkpoints (committed offsets only) to their writer thread
//!   read a trickle        sleep 20ms, so lines gather into batches
//!   nothing read          wait (1ms doubling to 50ms); shutdown ends it early
//!   file created, renamed or removed in a watched directory (inotify, [`super::events`]):
//!                         scan at the next pass (at most every 20ms)
//! ```
//!
//! Offsets of one file, in order: `committed` ≤ `carry_start` ≤ `read_pos`. Bytes before
//! `committed` are in events every sink committed (or, without acknowledgements, queued);
//! `carry_start` is where the bytes not yet cut into events begin (`carry` holds them up to
//! `read_pos`). A checkpoint records `committed`, so a restart reads again at most what was in
//! flight. Reads use `pread` at `read_pos`: a rewind is an assignment.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use loghaul_core::{BatchStatusReceiver, Event, Field, Span};

use super::checkpoint::{Entry, FileId, Fingerprint, Loaded, Store, Writer};
use super::closer::Closer;
use super::config::FileSourceConfig;
use super::events::Events;
use super::lines::{Lines, Piece};
use crate::metrics::{ComponentMetrics, ErrorKind, Health};
use crate::pipeline::{Fanout, ShutdownSignal};
use crate::sources::SourceContext;

mod acks;
mod discovery;
mod read;
#[cfg(test)]
mod tests;

use acks::checkpoint_reporter;

/// Longest sleep when no file had anything new.
const IDLE_MAX: Duration = Duration::from_millis(50);
/// The sleep after a pass that read only a little: lines gather into batches of a few hundred
/// at tens of thousands of lines/s, which roughly halves the CPU per line downstream (fewer
/// requests and acks at every tier of a forwarding tree) for at most 20ms of delay.
const TRICKLE_NAP: Duration = Duration::from_millis(20);
/// The least time between two scans asked for by file system events.
const RESCAN_GAP: Duration = Duration::from_millis(20);
/// Batches sent but not yet acknowledged, before reading waits for the oldest.
const MAX_PENDING: usize = 1024;
/// How long a file whose batch failed downstream waits before it is read again.
const REWIND_PAUSE: Duration = Duration::from_secs(1);
/// At shutdown, how long the last batch may wait for room.
const SHUTDOWN_SEND: Duration = Duration::from_secs(5);
/// At shutdown, the acknowledgements are awaited until this long before `shutdown_timeout`,
/// leaving time for the last checkpoint.
const SHUTDOWN_MARGIN: Duration = Duration::from_secs(1);

/// Counters of one `include` pattern.
struct PatternMetrics {
    read: Arc<AtomicI64>,
    skipped_long: Arc<AtomicI64>,
    skipped_deleted: Arc<AtomicI64>,
    reread_truncated: Arc<AtomicI64>,
    reread_rewound: Arc<AtomicI64>,
    opened: Arc<AtomicI64>,
    closed: Arc<AtomicI64>,
    released: Arc<AtomicI64>,
    truncations: Arc<AtomicI64>,
    unreadable: Arc<AtomicI64>,
}

impl PatternMetrics {
    fn new(m: &ComponentMetrics, pattern: &str) -> PatternMetrics {
        let p = ("pattern", pattern);
        let skipped = |reason| {
            m.counter(
                "loghaul_file_skipped_bytes_total",
                "Bytes of tailed files never made into events, by reason.",
                &[p, ("reason", reason)],
            )
        };
        let reread = |reason| {
            m.counter(
                "loghaul_file_reread_bytes_total",
                "Bytes of tailed files read a second time, by reason.",
                &[p, ("reason", reason)],
            )
        };
        PatternMetrics {
            read: m.counter(
                "loghaul_file_read_bytes_total",
                "Bytes read from tailed files.",
                &[p],
            ),
            skipped_long: skipped("line_too_long"),
            skipped_deleted: skipped("deleted_unread"),
            reread_truncated: reread("truncated"),
            reread_rewound: reread("rewound"),
            opened: m.counter(
                "loghaul_file_opened_total",
                "Tailed files opened (first seen, or reopened after being closed).",
                &[p],
            ),
            closed: m.counter(
                "loghaul_file_closed_total",
                "Tailed files closed to stay within max_open_files (reopened when they grow).",
                &[p],
            ),
            released: m.counter(
                "loghaul_file_released_total",
                "Files renamed away or deleted, read to their end and let go.",
                &[p],
            ),
            truncations: m.counter(
                "loghaul_file_truncations_total",
                "Files found shorter than what was read, or rewritten from the start: read again from 0.",
                &[p],
            ),
            unreadable: m.counter(
                "loghaul_file_unreadable_total",
                "Failed attempts to open a matched file (permissions): retried at the next scan.",
                &[p],
            ),
        }
    }
}

/// One file being tailed.
struct Watched {
    id: FileId,
    path: PathBuf,
    pattern: usize,
    fingerprint: Fingerprint,
    file: Option<File>,
    read_pos: u64,
    carry: Vec<u8>,
    carry_start: u64,
    committed: u64,
    lines: Lines,
    /// Bumped on every rewind and truncation, so acks of batches read before it are ignored.
    generation: u32,
    last_growth: Instant,
    last_active: Instant,
    at_eof: bool,
    /// The size the last scan saw (to know a closed file has grown).
    size_seen: u64,
    /// When the file stopped matching the globs at its path (renamed away, deleted).
    gone_since: Option<Instant>,
    paused_until: Option<Instant>,
}

/// A sent batch waiting for its fate, and where each of its files' events end.
struct Pending {
    status: BatchStatusReceiver,
    ends: Vec<(FileId, u32, u64)>,
}

/// The batch being filled during a pass.
struct Builder {
    arena: Vec<u8>,
    events: Vec<Event>,
    fields: Vec<Field>,
    ends: Vec<(FileId, u32, u64)>,
    keys: Keys,
}

/// Spans of the field names and the host name, written first into every batch's arena.
#[derive(Clone, Copy)]
struct Keys {
    file: Option<Span>,
    host: Option<(Span, Span)>,
    offset: Option<Span>,
}

pub struct Tailer {
    id: Arc<str>,
    config: FileSourceConfig,
    metrics: Arc<ComponentMetrics>,
    fanout: Fanout,
    handle: tokio::runtime::Handle,
    shutdown: ShutdownSignal,
    shutdown_timeout: Duration,
    acknowledgements: bool,
    /// Writes checkpoints off this thread (a save's fsyncs must not stall the tailing).
    checkpoints: Writer,
    /// Closes released files off this thread (closing a deleted file frees its blocks).
    closer: Closer,
    host: String,
    files: HashMap<FileId, Watched>,
    /// Round-robin order of `files`.
    order: Vec<FileId>,
    next_turn: usize,
    /// Checkpoints loaded at start and not yet matched to a file.
    saved: HashMap<FileId, Entry>,
    /// No checkpoint document existed at start (`read_from` applies to the first scan only then).
    fresh: bool,
    first_scan: bool,
    pending: VecDeque<Pending>,
    open: usize,
    patterns: Vec<PatternMetrics>,
    /// Paths already reported unreadable (logged once each).
    unreadable: HashSet<PathBuf>,
    dirty: bool,
    pieces: Vec<Piece>,
    watched_gauge: Arc<AtomicI64>,
    open_gauge: Arc<AtomicI64>,
}

impl Tailer {
    /// A tailer for `config`, with the source's context, keeping checkpoints in `data_dir`.
    /// Must be called on the runtime (it keeps its handle to send batches from its thread).
    ///
    /// # Errors
    ///
    /// The checkpoint writer's or the file closer's thread cannot be started.
    pub fn new(
        config: FileSourceConfig,
        cx: SourceContext,
        data_dir: PathBuf,
    ) -> io::Result<Tailer> {
        let SourceContext {
            id,
            metrics,
            fanout,
            shutdown,
            acknowledgements,
            shutdown_timeout,
            ..
        } = cx;
        let handle = tokio::runtime::Handle::current();
        let patterns = config
            .include
            .iter()
            .map(|p| PatternMetrics::new(&metrics, p.as_str()))
            .collect();
        let watched_gauge = metrics.gauge(
            "loghaul_file_watched_files",
            "Files the source follows (open or not).",
            &[],
        );
        let open_gauge = metrics.gauge(
            "loghaul_file_open_files",
            "Files the source holds open (at most max_open_files).",
            &[],
        );
        let store = Store::new(data_dir);
        let (saved, fresh) = match store.load() {
            Loaded::Missing => (HashMap::new(), true),
            Loaded::Corrupt(reason) => {
                tracing::warn!(component = %id, %reason, read_from = ?config.read_from, "Checkpoints cannot be read; starting as if there were none (files are read from `read_from`), and they will be rewritten.");
                metrics.error(ErrorKind::Checkpoint, 1);
                (HashMap::new(), true)
            }
            Loaded::Entries(entries) => (entries.into_iter().map(|e| (e.id, e)).collect(), false),
        };
        let checkpoints = Writer::spawn(
            store,
            config.checkpoint_interval,
            checkpoint_reporter(id.clone(), metrics.clone()),
        )?;
        let closer = Closer::spawn()?;
        Ok(Tailer {
            id,
            config,
            metrics,
            fanout,
            handle,
            shutdown,
            shutdown_timeout,
            acknowledgements,
            checkpoints,
            closer,
            host: crate::net::host_name(),
            files: HashMap::new(),
            order: Vec::new(),
            next_turn: 0,
            saved,
            fresh,
            first_scan: true,
            pending: VecDeque::new(),
            open: 0,
            patterns,
            unreadable: HashSet::new(),
            dirty: false,
            pieces: Vec::new(),
            watched_gauge,
            open_gauge,
        })
    }

    /// Runs until `stop` is set, then emits what is held, waits a little for the last acks and
    /// writes the last checkpoint.
    pub fn run(mut self) {
        self.metrics.set_health(Health::Running, None);
        let (mut events, unavailable) = Events::new();
        if let Some(e) = unavailable {
            tracing::warn!(component = %self.id, error = %e, "Directory events (inotify) are unavailable; new and rotated files are found every glob_interval.");
        }
        let mut next_scan = Instant::now();
        let mut last_scan: Option<Instant> = None;
        let mut next_checkpoint = Instant::now() + self.config.checkpoint_interval;
        let mut idle = Duration::from_millis(1);
        let mut rescan = false;
        while !self.shutdown.is_triggered() {
            let now = Instant::now();
            rescan |= events.take_rescan();
            let event_scan = rescan && last_scan.is_none_or(|t| now >= t + RESCAN_GAP);
            if now >= next_scan || event_scan {
                rescan = false;
                self.scan(now);
                self.adopt_rotated_while_stopped(now);
                self.watch_dirs(&mut events);
                next_scan = now + self.config.glob_interval;
                last_scan = Some(now);
            }
            self.poll_acks(false);
            let read = self.read_pass(now);
            let flushed = self.flush_due(now, false);
            self.reopen(now);
            self.release_gone(now);
            if now >= next_checkpoint {
                self.checkpoint();
                next_checkpoint = now + self.config.checkpoint_interval;
            }
            self.watched_gauge
                .store(self.files.len() as i64, Ordering::Relaxed);
            self.open_gauge.store(self.open as i64, Ordering::Relaxed);
            if read >= (self.config.max_read_size / 4) as u64 {
                // Busy: straight on to the next pass.
                idle = Duration::from_millis(1);
            } else if read > 0 || flushed {
                // A trickle: a short nap lets a batch's worth gather, instead of a pass (and a
                // request downstream) per few lines.
                idle = Duration::from_millis(1);
                std::thread::park_timeout(TRICKLE_NAP);
            } else if !rescan {
                // Idle: the polls back off to IDLE_MAX; shutdown ends the wait.
                let until_scan = next_scan.saturating_duration_since(Instant::now());
                std::thread::park_timeout(idle.min(until_scan));
                idle = (idle * 2).min(IDLE_MAX);
            } else {
                // A rescan is asked for but the last one was just now: wait out the gap.
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        self.shutdown();
        self.metrics.set_health(Health::Stopped, None);
    }

    fn shutdown(&mut self) {
        let deadline = Instant::now() + self.shutdown_timeout.saturating_sub(SHUTDOWN_MARGIN);
        // What is held back is complete as far as anyone will know: emit it, so it is not lost
        // if the file is never appended to again (bytes appended later start a new line).
        let now = Instant::now();
        self.flush_due(now, true);
        // The sinks drain what is queued; every acknowledgement that comes in before the
        // deadline moves the checkpoint, which is written as it moves, so a stop cut short
        // (a second signal, the deadline) still leaves the latest one on disk.
        let mut next_checkpoint = Instant::now() + self.config.checkpoint_interval;
        while !self.pending.is_empty() && Instant::now() < deadline {
            self.poll_acks(false);
            if Instant::now() >= next_checkpoint {
                self.checkpoint();
                next_checkpoint = Instant::now() + self.config.checkpoint_interval;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.poll_acks(false);
        self.checkpoint();
        // The last snapshot is on disk (or its write was tried once more) before the source
        // reports it stopped.
        self.checkpoints.close();
        if !self.pending.is_empty() {
            tracing::warn!(component = %self.id, batches = self.pending.len(), "Stopped before every tailed line was acknowledged; the next start reads the unacknowledged ones again.");
        }
    }

    /// An empty batch; its arena grows as files are read (most passes read nothing, and must
    /// not cost a large allocation).
    fn new_builder(&self) -> Builder {
        let mut arena = Vec::with_capacity(256);
        let mut put = |s: &[u8]| {
            let start = arena.len();
            arena.extend_from_slice(s);
            Span::new(start, arena.len())
        };
        let file = self.config.file_key.as_ref().map(|k| put(k.as_bytes()));
        let host = self
            .config
            .host_key
            .as_ref()
            .map(|k| (put(k.as_bytes()), put(self.host.as_bytes())));
        let offset = self.config.offset_key.as_ref().map(|k| put(k.as_bytes()));
        Builder {
            arena,
            events: Vec::new(),
            fields: Vec::new(),
            ends: Vec::new(),
            keys: Keys { file, host, offset },
        }
    }
}
