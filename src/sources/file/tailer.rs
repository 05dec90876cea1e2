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
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use loghaul_core::{
    BatchNotifier, BatchStatus, BatchStatusReceiver, Event, EventBatch, Field, Flags, OptSpan,
    Span, Timestamp, Value,
};

use super::checkpoint::{Check, Entry, FileId, Fingerprint, Loaded, Store, Writer};
use super::closer::Closer;
use super::config::{FileSourceConfig, ReadFrom};
use super::events::{Events, fixed_dir};
use super::lines::{Lines, Piece};
use crate::metrics::{ComponentMetrics, ErrorKind, Health};
use crate::pipeline::{Fanout, ShutdownSignal};
use crate::sources::SourceContext;

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

    // ---- scanning ------------------------------------------------------------------------

    fn scan(&mut self, now: Instant) {
        let mut seen: HashSet<FileId> = HashSet::new();
        for pi in 0..self.config.include.len() {
            let pattern = self.config.include[pi].as_str().to_owned();
            let Ok(paths) = glob::glob(&pattern) else {
                continue;
            };
            for entry in paths {
                let path = match entry {
                    Ok(p) => p,
                    Err(e) => {
                        // A directory on the way that cannot be listed.
                        let path = e.path().to_path_buf();
                        self.report_unreadable(pi, &path, e.error());
                        continue;
                    }
                };
                if self.config.exclude.iter().any(|x| x.matches_path(&path)) {
                    continue;
                }
                let Ok(meta) = std::fs::metadata(&path) else {
                    // Gone between listing and stat.
                    continue;
                };
                if !meta.is_file() {
                    continue;
                }
                let id = FileId::of(&meta);
                if !seen.insert(id) {
                    // Another path (a hard link, a symlink, a second pattern) to a file already
                    // followed.
                    continue;
                }
                if let Some(w) = self.files.get_mut(&id) {
                    if w.path != path {
                        w.path = path;
                        self.dirty = true;
                    }
                    w.size_seen = meta.len();
                    w.gone_since = None;
                    continue;
                }
                self.discover(pi, path, id, meta.len(), now);
            }
        }
        for w in self.files.values_mut() {
            if !seen.contains(&w.id) && w.gone_since.is_none() {
                w.gone_since = Some(now);
            }
        }
        self.check_fingerprints();
        self.first_scan = false;
    }

    /// Watches the directories new matches may appear in, and those of the files followed.
    fn watch_dirs(&self, events: &mut Events) {
        for pattern in &self.config.include {
            events.watch(&fixed_dir(pattern.as_str()));
        }
        for w in self.files.values() {
            if let Some(dir) = w.path.parent() {
                events.watch(if dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    dir
                });
            }
        }
    }

    /// Start-up: a checkpointed file that no glob matches any more was most likely rotated by
    /// rename while loghaul was stopped. Look for it in its old directory by identity, and read
    /// it to its end before letting it go.
    fn adopt_rotated_while_stopped(&mut self, now: Instant) {
        if self.saved.is_empty() {
            return;
        }
        let saved: Vec<Entry> = std::mem::take(&mut self.saved).into_values().collect();
        for entry in saved {
            if self.files.contains_key(&entry.id) {
                continue;
            }
            let found = entry
                .path
                .parent()
                .and_then(|dir| find_by_identity(dir, entry.id));
            let Some(path) = found else {
                tracing::debug!(component = %self.id, path = %entry.path.display(), "A checkpointed file is gone; forgetting it.");
                self.dirty = true;
                continue;
            };
            let pattern = self.pattern_of(&entry.path);
            match open_checked(&path, entry.id, &entry.fingerprint) {
                Ok(Some((file, fingerprint, size))) => {
                    // Shorter than the checkpoint says: the first turn sees it and starts over.
                    let mut w =
                        self.watched(entry.id, path, pattern, fingerprint, entry.offset, now);
                    w.size_seen = size;
                    w.gone_since = Some(now);
                    self.insert(w, Some(file));
                }
                Ok(None) => self.dirty = true,
                Err(e) => {
                    // Kept, and tried again at the next scan: its checkpoint must not be lost.
                    self.report_unreadable(pattern, &path, &e);
                    self.saved.insert(entry.id, entry);
                }
            }
        }
    }

    /// The include pattern a path belongs to (for counters), the first one when none matches.
    fn pattern_of(&self, path: &Path) -> usize {
        self.config
            .include
            .iter()
            .position(|p| p.matches_path(path))
            .unwrap_or(0)
    }

    fn discover(&mut self, pattern: usize, path: PathBuf, id: FileId, size: u64, now: Instant) {
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                self.report_unreadable(pattern, &path, &e);
                return;
            }
        };
        self.unreadable.remove(&path);
        let fingerprint = match Fingerprint::read(&file) {
            Ok(fp) => fp,
            Err(e) => {
                self.report_unreadable(pattern, &path, &e);
                return;
            }
        };
        let mut truncated = false;
        let offset = match self.saved.remove(&id) {
            Some(entry) => match entry.fingerprint.check(&file) {
                Ok(Check::Same(_)) if entry.offset <= size => entry.offset,
                Ok(Check::Same(_)) => {
                    truncated = true;
                    0
                }
                // Another file on a reused inode, or rewritten from the start: new to us.
                _ => 0,
            },
            None if self.first_scan && self.fresh && self.config.read_from == ReadFrom::End => size,
            None => 0,
        };
        let mut w = self.watched(id, path, pattern, fingerprint, offset, now);
        w.size_seen = size;
        if truncated {
            self.count_truncation(&mut w);
        }
        self.insert(w, Some(file));
    }

    fn watched(
        &self,
        id: FileId,
        path: PathBuf,
        pattern: usize,
        fingerprint: Fingerprint,
        offset: u64,
        now: Instant,
    ) -> Watched {
        Watched {
            id,
            path,
            pattern,
            fingerprint,
            file: None,
            read_pos: offset,
            carry: Vec::new(),
            carry_start: offset,
            committed: offset,
            lines: Lines::default(),
            generation: 0,
            last_growth: now,
            last_active: now,
            at_eof: false,
            size_seen: 0,
            gone_since: None,
            paused_until: None,
        }
    }

    /// Starts following `w`, holding `file` open if the limit allows.
    fn insert(&mut self, mut w: Watched, file: Option<File>) {
        self.patterns[w.pattern]
            .opened
            .fetch_add(1, Ordering::Relaxed);
        if let Some(file) = file {
            if self.open < self.config.max_open_files || self.evict_one(None) {
                w.file = Some(file);
                self.open += 1;
            } else {
                self.patterns[w.pattern]
                    .closed
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        self.order.push(w.id);
        self.files.insert(w.id, w);
        self.dirty = true;
    }

    fn report_unreadable(&mut self, pattern: usize, path: &Path, error: &io::Error) {
        if let Some(p) = self.patterns.get(pattern) {
            p.unreadable.fetch_add(1, Ordering::Relaxed);
        }
        if self.unreadable.insert(path.to_path_buf()) {
            tracing::warn!(component = %self.id, path = %path.display(), %error, "Cannot read a matched file; it is tried again at every scan (glob_interval).");
        }
    }

    /// Open files whose first bytes changed were rewritten (copytruncate, then written past our
    /// offset before we noticed it shrink): read them again from the start. Files that grew get
    /// a longer fingerprint.
    fn check_fingerprints(&mut self) {
        let ids: Vec<FileId> = self
            .files
            .values()
            .filter(|w| w.file.is_some() && w.gone_since.is_none())
            .map(|w| w.id)
            .collect();
        for id in ids {
            let Some(mut w) = self.files.remove(&id) else {
                continue;
            };
            self.recheck(&mut w);
            self.files.insert(id, w);
        }
    }

    /// Compares an open file's first bytes with its fingerprint: the same content (the
    /// fingerprint grows with the file) or rewritten, then read again from 0. Returns whether
    /// it was rewritten. An unreadable prefix changes nothing (the next check tries again).
    fn recheck(&mut self, w: &mut Watched) -> bool {
        let Some(file) = &w.file else {
            return false;
        };
        match w.fingerprint.check(file) {
            Ok(Check::Same(fp)) => {
                if fp != w.fingerprint {
                    w.fingerprint = fp;
                    self.dirty = true;
                }
                false
            }
            Ok(Check::Different | Check::Shorter) => {
                self.restart_truncated(w);
                true
            }
            Err(_) => false,
        }
    }

    fn count_truncation(&self, w: &mut Watched) {
        self.patterns[w.pattern]
            .truncations
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(component = %self.id, path = %w.path.display(), "File truncated or rewritten; reading it from the start.");
    }

    /// The file was truncated or rewritten: everything is read again from offset 0.
    fn restart_truncated(&mut self, w: &mut Watched) {
        self.count_truncation(w);
        // Offsets already read once that hold bytes again (a rewrite; after a plain truncation
        // to 0 there are none yet).
        let size = w
            .file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map_or(0, |m| m.len());
        self.patterns[w.pattern]
            .reread_truncated
            .fetch_add(size.min(w.read_pos) as i64, Ordering::Relaxed);
        if let Some(file) = &w.file
            && let Ok(fp) = Fingerprint::read(file)
        {
            w.fingerprint = fp;
        }
        w.read_pos = 0;
        w.carry.clear();
        w.carry_start = 0;
        w.committed = 0;
        w.lines.reset();
        w.generation = w.generation.wrapping_add(1);
        w.at_eof = false;
        self.dirty = true;
    }

    // ---- reading -------------------------------------------------------------------------

    /// One turn for every open file, batches sent as they fill. Returns how many bytes were
    /// read.
    fn read_pass(&mut self, now: Instant) -> u64 {
        if self.pending.len() >= MAX_PENDING {
            // Acks lag far behind: wait a little for the oldest, and read nothing more until it
            // comes (what may need rewinding stays bounded).
            self.poll_acks(true);
            if self.pending.len() >= MAX_PENDING {
                return 0;
            }
        }
        let mut builder = self.new_builder();
        let mut progress = 0;
        let n = self.order.len();
        let start = self.next_turn % n.max(1);
        self.next_turn = self.next_turn.wrapping_add(1);
        for k in 0..n {
            let id = self.order[(start + k) % n];
            let Some(mut w) = self.files.remove(&id) else {
                continue;
            };
            progress += self.turn(&mut w, &mut builder, now);
            self.files.insert(id, w);
            if builder.arena.len() >= self.config.max_read_size {
                let full = std::mem::replace(&mut builder, self.new_builder());
                self.send(full);
                if self.shutdown.is_triggered() {
                    break;
                }
            }
        }
        self.send(builder);
        progress
    }

    /// Reads one file's next bytes into the batch. Returns how many were read (at least 1 when
    /// the file was found truncated: that is progress too).
    fn turn(&mut self, w: &mut Watched, b: &mut Builder, now: Instant) -> u64 {
        let Some(file) = &w.file else {
            return 0;
        };
        if w.paused_until.is_some_and(|t| t > now) {
            return 0;
        }
        w.paused_until = None;
        // The size first: an idle file costs one fstat, and a read is sized to what is there
        // (the buffer is zeroed before reading, which should not happen for bytes not read).
        let size = match file.metadata() {
            Ok(meta) => meta.len(),
            Err(e) => {
                self.metrics.error(ErrorKind::Io, 1);
                crate::warn_limited!(self.metrics, path = %w.path.display(), error = %e, "Failed to stat a tailed file; trying again.");
                return 0;
            }
        };
        if size < w.read_pos {
            // Shorter than what was read: truncated (copytruncate, `> file`).
            self.restart_truncated(w);
            return 1;
        }
        let available = size - w.read_pos;
        if available == 0 {
            w.at_eof = true;
            return 0;
        }
        // A file that was at its end grew: make sure it is still the same content before
        // reading on at the old offset (copytruncate, then more written than was read: the size
        // alone cannot tell).
        if w.at_eof && self.recheck(w) {
            return 1;
        }
        let want = (self.config.max_read_size as u64).min(available) as usize;
        let base = b.arena.len();
        let from = w.carry.len();
        b.arena.reserve(from + want + w.path.as_os_str().len() + 64);
        b.arena.extend_from_slice(&w.carry);
        b.arena.resize(base + from + want, 0);
        let Some(file) = &w.file else {
            b.arena.truncate(base);
            return 0;
        };
        let read = pread_full(file, &mut b.arena[base + from..], w.read_pos);
        let n = match read {
            Ok(n) => n,
            Err(e) => {
                b.arena.truncate(base);
                self.metrics.error(ErrorKind::Io, 1);
                crate::warn_limited!(self.metrics, path = %w.path.display(), error = %e, "Failed to read a tailed file; trying again.");
                return 0;
            }
        };
        b.arena.truncate(base + from + n);
        if n == 0 {
            // Shrank between the fstat and the read: the next turn sees it.
            b.arena.truncate(base);
            return 0;
        }
        w.at_eof = n as u64 == available;
        w.read_pos += n as u64;
        w.last_growth = now;
        w.last_active = now;
        let pm = &self.patterns[w.pattern];
        pm.read.fetch_add(n as i64, Ordering::Relaxed);
        self.pieces.clear();
        let progress = w.lines.split(
            &b.arena[base..],
            from,
            &self.config.rules,
            now,
            &mut self.pieces,
        );
        pm.skipped_long
            .fetch_add(progress.skipped as i64, Ordering::Relaxed);
        if progress.skipped > 0 {
            self.metrics.error(ErrorKind::Oversized, 1);
        }
        // Nearly every read is ASCII (one vectorised pass); only the others are checked line
        // by line.
        let check_utf8 = !loghaul_codec::is_ascii(&b.arena[base..]);
        self.emit(w, b, base, progress.keep_from, check_utf8);
        n as u64
    }

    /// Emits what is due in every file's carried bytes: partial lines whose writer paused for
    /// `partial_line_timeout` (all of them when `all`), multiline groups past their timeout.
    fn flush_due(&mut self, now: Instant, all: bool) -> bool {
        let mut builder = self.new_builder();
        let mut any = false;
        let ids: Vec<FileId> = self
            .files
            .values()
            .filter(|w| {
                let partial = w.lines.holds(w.carry.len())
                    && (all || now >= w.last_growth + self.config.partial_line_timeout);
                let group = w
                    .lines
                    .group_deadline(&self.config.rules)
                    .is_some_and(|d| d <= now);
                partial || group
            })
            .map(|w| w.id)
            .collect();
        for id in ids {
            let Some(mut w) = self.files.remove(&id) else {
                continue;
            };
            let partial_due = all || now >= w.last_growth + self.config.partial_line_timeout;
            any |= self.flush_file(&mut w, &mut builder, partial_due, now);
            self.files.insert(id, w);
        }
        self.send(builder);
        any
    }

    fn flush_file(
        &mut self,
        w: &mut Watched,
        b: &mut Builder,
        partial_due: bool,
        now: Instant,
    ) -> bool {
        let base = b.arena.len();
        b.arena.extend_from_slice(&w.carry);
        let from_len = w.carry.len();
        self.pieces.clear();
        let progress = w.lines.flush(
            &b.arena[base..],
            partial_due,
            &self.config.rules,
            now,
            &mut self.pieces,
        );
        let emitted = !self.pieces.is_empty();
        if progress.keep_from == 0 && !emitted {
            b.arena.truncate(base);
            return false;
        }
        debug_assert!(progress.keep_from <= from_len);
        self.emit(w, b, base, progress.keep_from, true);
        emitted
    }

    /// Turns `self.pieces` (spans of the region at `b.arena[base..]`) into events, carries the
    /// region's bytes from `keep_from` on, and records where this file's events end.
    fn emit(
        &mut self,
        w: &mut Watched,
        b: &mut Builder,
        base: usize,
        keep_from: usize,
        check_utf8: bool,
    ) {
        let region_offset = w.carry_start;
        w.carry.clear();
        w.carry.extend_from_slice(&b.arena[base + keep_from..]);
        b.arena.truncate(base + keep_from);
        w.carry_start = region_offset + keep_from as u64;
        if self.pieces.is_empty() && keep_from == 0 {
            return;
        }
        b.ends.push((w.id, w.generation, w.carry_start));
        if self.pieces.is_empty() {
            return;
        }
        let keys = b.keys;
        let path = keys.file.map(|_| {
            let start = b.arena.len();
            b.arena.extend_from_slice(w.path.as_os_str().as_bytes());
            Span::new(start, b.arena.len())
        });
        let shared = |fields: &mut Vec<Field>| {
            if let (Some(name), Some(value)) = (keys.file, path) {
                fields.push(Field {
                    name,
                    value: Value::Str(value),
                });
            }
            if let Some((name, value)) = keys.host {
                fields.push(Field {
                    name,
                    value: Value::Str(value),
                });
            }
        };
        // Without an offset field, every event of this file's turn shares one record range.
        let shared_range = if keys.offset.is_none() {
            let start = b.fields.len() as u32;
            shared(&mut b.fields);
            Some((start, b.fields.len() as u32))
        } else {
            None
        };
        let mut invalid_utf8 = 0u64;
        for i in 0..self.pieces.len() {
            let piece = self.pieces[i];
            let (mut start, mut end) = (base + piece.start, base + piece.end);
            if piece.inner_cr {
                // A multiline group written with CRLF: its inner `\r`s go, which needs a copy.
                let text = b.arena[start..end].to_vec();
                start = b.arena.len();
                let mut rest = &text[..];
                while let Some(i) = memchr::memchr(b'\n', rest) {
                    let line = &rest[..i];
                    b.arena
                        .extend_from_slice(line.strip_suffix(b"\r").unwrap_or(line));
                    b.arena.push(b'\n');
                    rest = &rest[i + 1..];
                }
                b.arena.extend_from_slice(rest);
                end = b.arena.len();
            }
            let fields = match shared_range {
                Some(range) => range,
                None => {
                    let first = b.fields.len() as u32;
                    shared(&mut b.fields);
                    if let Some(name) = keys.offset {
                        let offset = region_offset + piece.start as u64;
                        b.fields.push(Field {
                            name,
                            value: Value::Int(offset.min(i64::MAX as u64) as i64),
                        });
                    }
                    (first, b.fields.len() as u32)
                }
            };
            let mut flags = Flags::default();
            if piece.truncated {
                flags.insert(Flags::TRUNCATED);
            }
            if check_utf8 && std::str::from_utf8(&b.arena[start..end]).is_err() {
                // Kept as read; encoders replace the bad bytes on output.
                flags.insert(Flags::INVALID_UTF8);
                invalid_utf8 += 1;
            }
            b.events.push(Event {
                message: OptSpan::some(Span::new(start, end)),
                fields,
                flags,
                ..Event::default()
            });
        }
        if invalid_utf8 > 0 {
            self.metrics.error(ErrorKind::InvalidUtf8, invalid_utf8);
        }
    }

    fn send(&mut self, b: Builder) {
        if b.ends.is_empty() {
            return;
        }
        if b.events.is_empty() {
            // Only skipped bytes: nothing to deliver, but with acknowledgements the checkpoint
            // must still not pass batches sent before and not yet acknowledged, so the ends
            // queue behind them (a receiver resolved at once).
            if self.acknowledgements && !self.pending.is_empty() {
                let (finalizer, status) = BatchNotifier::new_with_receiver();
                drop(finalizer);
                self.pending.push_back(Pending {
                    status,
                    ends: b.ends,
                });
            } else {
                self.apply_ends(&b.ends);
            }
            return;
        }
        let bytes = b.arena.len();
        let mut batch = EventBatch::new(Bytes::from(b.arena), self.id.clone(), "file");
        batch.events = b.events;
        batch.fields = b.fields;
        batch.received = Timestamp::now();
        self.metrics.received(batch.len(), bytes);
        let status = if self.acknowledgements {
            let (finalizer, status) = BatchNotifier::new_with_receiver();
            batch.finalizer = finalizer;
            Some(status)
        } else {
            None
        };
        let fanout = &self.fanout;
        let mut shutdown = self.shutdown.clone();
        // Waits as long as the sinks push back, except once the server stops: then a sink that
        // takes nothing more for SHUTDOWN_SEND does not hold the stop up (the batch is dropped,
        // its lines stay past the checkpoint and are read again at the next start).
        let sent = self.handle.block_on(async move {
            let send = fanout.send(batch);
            tokio::pin!(send);
            tokio::select! {
                () = &mut send => true,
                () = shutdown.wait() => tokio::time::timeout(SHUTDOWN_SEND, &mut send).await.is_ok(),
            }
        });
        match status {
            Some(status) => self.pending.push_back(Pending {
                status,
                ends: b.ends,
            }),
            None if sent => self.apply_ends(&b.ends),
            // Not queued: the checkpoint stays before these lines, so a restart reads them.
            None => {}
        }
    }

    fn apply_ends(&mut self, ends: &[(FileId, u32, u64)]) {
        for &(id, generation, end) in ends {
            if let Some(w) = self.files.get_mut(&id)
                && w.generation == generation
                && end > w.committed
            {
                w.committed = end;
                self.dirty = true;
            }
        }
    }

    /// Takes the fates of sent batches, oldest first (`wait`: wait up to 100ms for the oldest).
    fn poll_acks(&mut self, wait: bool) {
        while let Some(front) = self.pending.front_mut() {
            let status = if wait {
                let status = &mut front.status;
                self.handle.block_on(async {
                    tokio::time::timeout(Duration::from_millis(100), status)
                        .await
                        .ok()
                })
            } else {
                front.status.try_status()
            };
            let Some(status) = status else {
                return;
            };
            let Some(done) = self.pending.pop_front() else {
                return;
            };
            match status {
                BatchStatus::Delivered => self.apply_ends(&done.ends),
                BatchStatus::Rejected => {
                    // A sink refused these events for good (and counted them): reading them
                    // again would only be refused again.
                    crate::warn_limited!(
                        self.metrics,
                        "A sink rejected tailed lines for good; the checkpoint moves past them."
                    );
                    self.apply_ends(&done.ends);
                }
                BatchStatus::Errored => self.rewind(&done.ends),
            }
            if wait {
                return;
            }
        }
    }

    /// A batch was not committed: its files are read again from their last committed offset
    /// (after a pause), so nothing is lost; what later batches delivered meanwhile comes again.
    fn rewind(&mut self, ends: &[(FileId, u32, u64)]) {
        let now = Instant::now();
        for &(id, generation, _) in ends {
            let Some(w) = self.files.get_mut(&id) else {
                continue;
            };
            if w.generation != generation {
                continue;
            }
            let again = w.read_pos.saturating_sub(w.committed);
            self.patterns[w.pattern]
                .reread_rewound
                .fetch_add(again as i64, Ordering::Relaxed);
            w.read_pos = w.committed;
            w.carry_start = w.committed;
            w.carry.clear();
            w.lines.reset();
            w.generation = w.generation.wrapping_add(1);
            w.paused_until = Some(now + REWIND_PAUSE);
            w.at_eof = false;
        }
        crate::warn_limited!(
            self.metrics,
            files = ends.len(),
            "A batch of tailed lines was not committed downstream; reading those files again from their last checkpoint."
        );
    }

    // ---- open files, rotation --------------------------------------------------------------

    /// Closes the least recently active open file that is idle (at its end, nothing held), to
    /// make room; never one renamed away or deleted (it could not be reopened). `except` is the
    /// file the room is for.
    fn evict_one(&mut self, except: Option<FileId>) -> bool {
        let victim = self
            .files
            .values()
            .filter(|w| {
                w.file.is_some()
                    && w.gone_since.is_none()
                    && w.at_eof
                    && w.carry.is_empty()
                    && Some(w.id) != except
            })
            .min_by_key(|w| w.last_active)
            .map(|w| w.id);
        let Some(id) = victim else {
            return false;
        };
        if let Some(w) = self.files.get_mut(&id) {
            w.file = None;
            self.open -= 1;
            self.patterns[w.pattern]
                .closed
                .fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Reopens closed files that grew (by the last scan), least recently active first, as long
    /// as room can be made.
    fn reopen(&mut self, now: Instant) {
        let mut wanting: Vec<(Instant, FileId)> = self
            .files
            .values()
            .filter(|w| w.file.is_none() && (w.size_seen != w.read_pos || w.gone_since.is_some()))
            .map(|w| (w.last_active, w.id))
            .collect();
        if wanting.is_empty() {
            return;
        }
        wanting.sort();
        for (_, id) in wanting {
            if self.open >= self.config.max_open_files && !self.evict_one(Some(id)) {
                return;
            }
            let Some(mut w) = self.files.remove(&id) else {
                continue;
            };
            // A file renamed away while closed is looked for in its directory.
            let path = if w.gone_since.is_some() {
                w.path.parent().and_then(|d| find_by_identity(d, w.id))
            } else {
                Some(w.path.clone())
            };
            let reopened = match path.map(|p| (open_checked(&p, w.id, &w.fingerprint), p)) {
                Some((Ok(Some((file, fp, size))), p)) => Some((p, file, fp, size)),
                Some((Err(e), p)) => {
                    // Unreadable for now (permissions): tried again on the next pass.
                    self.report_unreadable(w.pattern, &p, &e);
                    self.files.insert(id, w);
                    continue;
                }
                _ => None,
            };
            match reopened {
                Some((path, file, fingerprint, size)) => {
                    w.path = path;
                    w.fingerprint = fingerprint;
                    w.size_seen = size;
                    w.file = Some(file);
                    w.last_active = now;
                    w.at_eof = false;
                    self.open += 1;
                    self.patterns[w.pattern]
                        .opened
                        .fetch_add(1, Ordering::Relaxed);
                    self.files.insert(id, w);
                }
                None => {
                    // Deleted (or replaced: a new file, perhaps on the same inode) while closed:
                    // what was not read is lost, and said so. A new file at the path is found
                    // by the next scan.
                    let lost = w.size_seen.saturating_sub(w.read_pos);
                    self.patterns[w.pattern]
                        .skipped_deleted
                        .fetch_add(lost as i64, Ordering::Relaxed);
                    if lost > 0 {
                        crate::warn_limited!(self.metrics, path = %w.path.display(), bytes = lost, "A file was deleted while closed (max_open_files) before it was read to its end.");
                    }
                    self.forget(w.id);
                }
            }
        }
    }

    /// Lets go of files renamed away or deleted once they are read to their end, all their
    /// lines are committed and `rotate_wait` has passed without growth.
    fn release_gone(&mut self, now: Instant) {
        let wait = self.config.rotate_wait;
        let done: Vec<FileId> = self
            .files
            .values()
            .filter(|w| {
                w.gone_since.is_some_and(|t| now >= t + wait)
                    && now >= w.last_growth + wait
                    && w.file.is_some()
                    && w.at_eof
            })
            .map(|w| w.id)
            .collect();
        if done.is_empty() {
            return;
        }
        let mut builder = self.new_builder();
        let mut release = Vec::new();
        for id in done {
            let Some(mut w) = self.files.remove(&id) else {
                continue;
            };
            // Its last line will get no newline now.
            self.flush_file(&mut w, &mut builder, true, now);
            self.files.insert(id, w);
            release.push(id);
        }
        // Without acknowledgements the flushed lines count as committed once sent; with them,
        // the file waits for a later pass.
        self.send(builder);
        for id in release {
            let Some(w) = self.files.get(&id) else {
                continue;
            };
            if w.committed < w.carry_start || !w.carry.is_empty() {
                continue;
            }
            if w.file.is_some() {
                self.open -= 1;
            }
            self.patterns[w.pattern]
                .released
                .fetch_add(1, Ordering::Relaxed);
            self.forget(id);
        }
    }

    fn forget(&mut self, id: FileId) {
        if let Some(file) = self.files.remove(&id).and_then(|w| w.file) {
            self.closer.close(file);
        }
        self.order.retain(|o| *o != id);
        self.dirty = true;
    }

    // ---- checkpoints ---------------------------------------------------------------------

    fn checkpoint(&mut self) {
        if !self.dirty {
            return;
        }
        let mut entries: Vec<Entry> = self
            .files
            .values()
            .map(|w| Entry {
                path: w.path.clone(),
                id: w.id,
                fingerprint: w.fingerprint,
                offset: w.committed,
            })
            .collect();
        // Checkpoints of files not found again (unreadable for now) are kept.
        entries.extend(self.saved.values().cloned());
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        self.checkpoints.submit(entries);
        self.dirty = false;
    }
}

/// What the checkpoint writer does with each save's result: a failure degrades the source's
/// health and is counted and logged (rate-limited); the first success after it restores both.
fn checkpoint_reporter(
    id: Arc<str>,
    metrics: Arc<ComponentMetrics>,
) -> impl FnMut(&Store, io::Result<()>) + Send + 'static {
    let mut failing = false;
    move |store, result| match result {
        Ok(()) => {
            if failing {
                failing = false;
                metrics.set_health(Health::Running, None);
                tracing::info!(component = %id, "Checkpoints are written again.");
            }
        }
        Err(e) => {
            metrics.error(ErrorKind::Checkpoint, 1);
            if !failing {
                failing = true;
                metrics.set_health(
                    Health::Degraded,
                    Some(format!(
                        "cannot write checkpoints to {}: {e}",
                        store.path().display()
                    )),
                );
            }
            crate::warn_limited!(metrics, path = %store.path().display(), error = %e, "Failed to write checkpoints; tailing goes on and the write is retried (a restart now would read again what was read since the last checkpoint).");
        }
    }
}

/// Reads up to `buf.len()` bytes at `offset`; fewer only at the end of the file.
fn pread_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                // A short read of a regular file is its end: save the call that returns 0.
                if n < buf.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Opens `path` if it is still the file `id` with these first bytes: `Ok(None)` when it is
/// another file now.
fn open_checked(
    path: &Path,
    id: FileId,
    fingerprint: &Fingerprint,
) -> io::Result<Option<(File, Fingerprint, u64)>> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if FileId::of(&meta) != id {
        return Ok(None);
    }
    match fingerprint.check(&file)? {
        Check::Same(fp) => Ok(Some((file, fp, meta.len()))),
        Check::Different | Check::Shorter => Ok(None),
    }
}

/// The entry of `dir` that is the file `id` (a file renamed within its directory).
fn find_by_identity(dir: &Path, id: FileId) -> Option<PathBuf> {
    let entries = std::fs::read_dir(if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    })
    .ok()?;
    use std::os::unix::fs::DirEntryExt as _;
    for entry in entries.flatten() {
        if entry.ino() != id.ino {
            continue;
        }
        if let Ok(meta) = entry.metadata()
            && meta.is_file()
            && FileId::of(&meta) == id
        {
            return Some(entry.path());
        }
    }
    None
}
