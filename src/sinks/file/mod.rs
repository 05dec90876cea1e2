//! The `file` sink: JSON lines (or message text) into files named by a template.
//!
//! ```text
//! path: /var/log/loghaul/%Y-%m-%d/{{ appname }}.jsonl
//!        strftime fields use the event's timestamp (UTC); {{ field }} uses the event's field,
//!        sanitised to [A-Za-z0-9._-] so a sender cannot climb out of the directory.
//! ```
//!
//! Encoding is not done here: the sink gives its input queue a [`LineEncoder`], which senders run
//! on the runtime's worker threads (see [`Prepare`]). The sink routes the encoded bytes to files
//! and writes them: a whole batch's buffer goes to a single-file sink as is, and reaches the
//! kernel through `writev` without another copy. It runs as a task on the runtime's workers
//! (`thread: shared`, the default), so a batch is written and acknowledged without a hand-over
//! between threads (`otlp` in the lab: 1.7M records/s against 1.33M/s); `thread: own` gives it
//! a thread of its own, for file systems where a write can block for long (a hung network
//! mount holds that thread instead of a worker).
//!
//! Writes are buffered per file and go out when a buffer passes [`WRITE_THRESHOLD`], whenever the
//! sink's input queue runs empty, and at the latest on the `flush_interval` tick. A batch's
//! acknowledgement is committed only after every buffer holding its events has been written to
//! the file (so "delivered" means "in the page cache"). On each tick the sink also closes files
//! idle for `idle_timeout`, reopens files that were renamed or removed under it (logrotate without
//! copytruncate), and on SIGUSR1 or SIGHUP reopens every file.
//!
//! A write that fails for a reason that may pass (ENOSPC, EDQUOT, EIO) drops nothing: the sink
//! cuts the line the failed write left half-written back out of the file (see [`torn`]), keeps
//! that whole line and everything after it buffered, is degraded, and tries again with backoff
//! (100ms doubling to 5s) without taking more input, so its queue fills and the sources push
//! back. So while the process lives, a file ends with a whole line (or with the start of the one
//! being written); a torn tail is only ever left by a crash, and the sink cuts it when it next
//! opens the file, before appending (the cut event was never acknowledged, so it comes again).
//!
//! Several writers may append to one file (two sinks with the same path, `loghaul dlq replay`
//! beside a running server). A cut must not take away what another wrote, nor may another's line
//! land after a torn one, so each write, and its cut when it fails, holds an exclusive `flock`
//! on the file, as does the check at open.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{IoSlice, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use loghaul_config::TemplatePart;
use loghaul_core::finalizer::Ack;
use loghaul_core::{BatchStatus, Event, EventBatch};

pub mod config;
mod torn;

pub use config::FileSinkConfig;

use super::encoder::{BufferPool, LineEncoder};
use super::template::{push_field, push_field_or};
use super::{BuildSink, BuiltSink, ReopenGeneration, Retry, SinkContext, SinkError};
use crate::metrics::{ComponentMetrics, DiscardReason, ErrorKind, Health};
use crate::pipeline::dlq::DeadLetters;
use crate::pipeline::{Delivery, Input, Prepare, Prepared, QUEUE_BATCHES};
use crate::sinks::SinkThread;

/// The input queue of a sink on the workers (`thread: shared`), in batches.
const SHARED_QUEUE_BATCHES: usize = 4;

impl BuildSink for FileSinkConfig {
    /// The directory the path's fixed part names can be written in, or made: tried for real
    /// (a probe file made and removed, or the first missing directory made and removed), since
    /// permission bits say nothing to root (`/proc/nope` is "writable" by them).
    fn check(&self) -> Vec<String> {
        let fixed_end = [self.path_raw.find('%'), self.path_raw.find("{{")]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.path_raw.len());
        let fixed = &self.path_raw[..fixed_end];
        // The directory of the fixed part: all of it when the template starts a file name.
        let dir = match fixed.rfind('/') {
            Some(at) => std::path::Path::new(&fixed[..at.max(1)]).to_path_buf(),
            None => std::path::PathBuf::from("."),
        };
        let problem = |what: String| vec![format!("path `{}`: {what}", self.path_raw)];
        if dir.is_dir() {
            let probe = dir.join(format!(".loghaul-validate-{}", std::process::id()));
            return match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&probe)
            {
                Ok(_) => {
                    let _ = std::fs::remove_file(&probe);
                    Vec::new()
                }
                Err(e) => problem(format!("cannot write in {}: {e}", dir.display())),
            };
        }
        // The first missing directory on the way: making it is what the sink will do first.
        let mut first_missing = dir.as_path();
        while let Some(parent) = first_missing.parent() {
            if parent.as_os_str().is_empty() || parent.exists() {
                break;
            }
            first_missing = parent;
        }
        match std::fs::create_dir(first_missing) {
            Ok(()) => {
                let _ = std::fs::remove_dir(first_missing);
                Vec::new()
            }
            Err(e) => problem(format!("cannot create {}: {e}", first_missing.display())),
        }
    }

    fn build(&self, cx: SinkContext) -> anyhow::Result<BuiltSink> {
        let dead = DeadLetters::new(&cx.id, &cx.data_dir, &cx.metrics);
        let sink =
            FileSink::new(self.clone(), cx.metrics, cx.reopen).with_failure_policy(cx.retry, dead);
        let prepare: Arc<dyn Prepare> = sink.encoder();
        // On the workers the sink's task runs soon after a sender queues a batch, so a shorter
        // queue keeps pace; each queued batch holds its events and their JSON (about 1 MB for
        // a 256 KiB read of a tailed file), and the deeper one only held more of them.
        let queue_batches = match self.thread {
            SinkThread::Shared => SHARED_QUEUE_BATCHES,
            SinkThread::Own => QUEUE_BATCHES,
        };
        Ok(BuiltSink {
            prepare: Some(prepare),
            queue_batches,
            thread: self.thread,
            run: Box::new(move |input| Box::pin(sink.run(input))),
        })
    }

    /// Appends the dead letters' events, one line each, to the sink's file (a static path only:
    /// a templated one cannot be rendered from what a dead letter keeps).
    fn replay(
        &self,
        cx: SinkContext,
        letters: Vec<crate::pipeline::dlq::DeadLetter>,
    ) -> Option<crate::pipeline::BoxFuture<'static, super::Replayed>> {
        if self.path.has_time || self.path.has_fields {
            return None;
        }
        let path = PathBuf::from(&self.path_raw);
        Some(Box::pin(async move {
            let mut out = Vec::new();
            for letter in &letters {
                match serde_json::from_str::<String>(&letter.event) {
                    Ok(line) => out.extend_from_slice(line.as_bytes()),
                    Err(_) => out.extend_from_slice(letter.event.as_bytes()),
                }
                out.push(b'\n');
            }
            let torn_tails = torn_tails_counter(&cx.metrics);
            let written = open_append(&path).and_then(|f| {
                let lock = torn::lock(&f);
                repair_tail(&f, &path, &cx.metrics, &torn_tails);
                if let Err(error) = (&f).write_all(&out) {
                    // Leave no torn line for the server's next append to glue onto.
                    let _ = torn::cut_torn_tail(&f);
                    return Err(error);
                }
                drop(lock);
                f.sync_data()
            });
            match written {
                Ok(()) => super::Replayed {
                    delivered: letters.len(),
                    failed: Vec::new(),
                },
                Err(e) => {
                    let why = write_error(&path, e);
                    super::Replayed {
                        delivered: 0,
                        failed: letters.into_iter().map(|l| (l, why.clone())).collect(),
                    }
                }
            }
        }))
    }
}

/// A file's buffer is written out once it holds this much.
const WRITE_THRESHOLD: usize = 256 * 1024;
/// Pending acknowledgements that force a flush even before the tick (bounds ack latency under
/// a steady trickle of tracked batches).
const MAX_PENDING_ACKS: usize = 256;
/// `writev` takes at most this many buffers per call (Linux `IOV_MAX`).
const IOV_MAX: usize = 1024;

struct OpenFile {
    path: PathBuf,
    file: File,
    /// (device, inode) at open: a different pair at the path means the file was rotated away.
    identity: (u64, u64),
    /// Encoded bytes waiting to be written, in order: whole batches' buffers, and for templated
    /// paths buffers this sink appended single events to. They always start at the start of a
    /// line.
    chunks: Vec<Vec<u8>>,
    buf_bytes: usize,
    buf_events: usize,
    /// How many leading bytes of `chunks` are in the file already: the start of a line a failed
    /// write tore that could not be cut back out. Almost always 0; see
    /// [`OpenFile::write_pending`].
    in_file: usize,
    last_write: Instant,
}

/// A write of [`OpenFile::write_pending`] that failed.
struct WriteFailed {
    error: std::io::Error,
    /// Why the line the failed write tore could not be cut back out of the file, if it could
    /// not: the next attempt tries the cut again, or else completes the line.
    cut: Option<std::io::Error>,
}

impl OpenFile {
    /// Appends one event's bytes after everything pending.
    fn append(&mut self, bytes: &[u8], pool: &BufferPool) {
        match self.chunks.last_mut() {
            Some(last) => last.extend_from_slice(bytes),
            None => {
                let mut buf = pool.take();
                buf.extend_from_slice(bytes);
                self.chunks.push(buf);
            }
        }
        self.buf_bytes += bytes.len();
        self.buf_events += 1;
    }

    /// Writes every pending chunk (with `writev`, so whole-batch buffers are not copied again)
    /// and returns the written buffers to `pool`.
    ///
    /// On an error, the whole lines the file took leave the buffer; the line the write tore is
    /// cut back out of the file (ftruncate to just after its last `\n`) and stays pending whole,
    /// with everything after it. So the file never keeps a torn line while the process lives,
    /// and what is pending always starts a line: dead-lettered, it is whole events. Should the
    /// cut fail, `in_file` says how much of the pending line the file holds: the next attempt
    /// cuts it then, or else writes on from there to complete it.
    fn write_pending(&mut self, pool: &BufferPool) -> Result<(), WriteFailed> {
        // No other loghaul writer may append between a failed write and its cut, or glue a line
        // onto the torn one.
        let lock = torn::lock(&self.file);
        if self.in_file > 0 && torn::cut_torn_tail(&self.file).is_ok() {
            self.in_file = 0;
        }
        let skip = self.in_file;
        let mut written = 0;
        let error = match write_all_vectored(&self.file, &self.chunks, skip, &mut written) {
            Ok(()) => {
                drop(lock);
                self.in_file = 0;
                for chunk in self.chunks.drain(..) {
                    pool.put(chunk);
                }
                return Ok(());
            }
            Err(error) => error,
        };
        let (whole, left, cut) = tear_off(&self.file, &self.chunks, skip + written);
        drop(lock);
        self.in_file = left;
        self.consume(whole, pool);
        self.buf_bytes = self.chunks.iter().map(Vec::len).sum();
        Err(WriteFailed { error, cut })
    }

    /// Drops the first `n` pending bytes, returning emptied buffers to `pool`.
    fn consume(&mut self, mut n: usize, pool: &BufferPool) {
        let mut done = 0;
        for chunk in &mut self.chunks {
            if n == 0 {
                break;
            }
            if chunk.len() <= n {
                n -= chunk.len();
                done += 1;
            } else {
                chunk.drain(..n);
                n = 0;
            }
        }
        for chunk in self.chunks.drain(..done) {
            pool.put(chunk);
        }
    }
}

/// After a write that failed having put the first `in_file` bytes of `chunks` in `file` (the
/// file ended with a whole line before them): cuts the line the write tore back out of the file.
/// Returns how many of those bytes are whole lines (done with), how many bytes of the torn line
/// stay in the file (0 unless the cut failed), and why the cut failed.
fn tear_off(
    file: &File,
    chunks: &[Vec<u8>],
    in_file: usize,
) -> (usize, usize, Option<std::io::Error>) {
    let whole = whole_lines(chunks, in_file);
    let torn = in_file - whole;
    if torn == 0 {
        return (whole, 0, None);
    }
    match torn::cut_torn_tail(file) {
        Ok(_) => (whole, 0, None),
        Err(error) => (whole, torn, Some(error)),
    }
}

/// How many of the first `n` bytes of `chunks` are whole lines: the length up to and including
/// the last `\n` among them.
fn whole_lines(chunks: &[Vec<u8>], n: usize) -> usize {
    let (mut at, mut whole) = (0, 0);
    for chunk in chunks {
        if at >= n {
            break;
        }
        let part = chunk.get(..chunk.len().min(n - at)).unwrap_or_default();
        if let Some(i) = memchr::memrchr(b'\n', part) {
            whole = at + i + 1;
        }
        at += part.len();
    }
    whole
}

/// A failed write to `path`: retryable when the error may go away by itself (space freed, a
/// device back), so the sink keeps the bytes and tries again instead of dropping them.
fn write_error(path: &Path, error: std::io::Error) -> SinkError {
    SinkError::io(format!("cannot write {}", path.display()), error)
}

/// A failed open of `path`: permanent when the path itself is impossible ([`never_opens`]),
/// else retryable (permissions, a full or read-only disk: an operator's to fix).
fn open_error(path: &str, error: std::io::Error) -> SinkError {
    let retry = if never_opens(&error) {
        Retry::Permanent
    } else {
        Retry::Retryable
    };
    SinkError::new(retry, format!("cannot open {path}")).with_cause(error)
}

/// The I/O error under `error`, for the `error` field of a log line (which names the path in a
/// field of its own).
fn io_cause(error: &SinkError) -> &dyn std::fmt::Display {
    match error.cause::<std::io::Error>() {
        Some(io) => io,
        None => error,
    }
}

/// Writes `chunks` from byte `skip` on; `written` counts the bytes written (after `skip`), also
/// when it fails.
fn write_all_vectored(
    mut file: &File,
    chunks: &[Vec<u8>],
    skip: usize,
    written: &mut usize,
) -> std::io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = chunks
        .iter()
        .filter(|c| !c.is_empty())
        .map(|c| IoSlice::new(c))
        .collect();
    let total: usize = chunks.iter().map(Vec::len).sum();
    let mut rest = &mut slices[..];
    IoSlice::advance_slices(&mut rest, skip.min(total));
    while !rest.is_empty() {
        let upto = rest.len().min(IOV_MAX);
        match file.write_vectored(&rest[..upto]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                *written += n;
                IoSlice::advance_slices(&mut rest, n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub struct FileSink {
    config: FileSinkConfig,
    encoder: Arc<LineEncoder>,
    metrics: Arc<ComponentMetrics>,
    reopen: ReopenGeneration,
    seen_generation: u64,
    /// Open files; closed slots are `None` and reused.
    files: Vec<Option<OpenFile>>,
    by_path: HashMap<String, usize>,
    /// The file the previous event went to, and the path it was rendered as.
    current: Option<usize>,
    current_path: String,
    scratch: String,
    /// The time parts rendered for `time_cache_second`.
    time_cache_second: Option<i64>,
    time_cache: Vec<String>,
    pending: Vec<Ack>,
    /// Some event since the last flush could not be written (its file would not open), so the
    /// pending acknowledgements must report an error even if every buffer writes fine.
    lost_since_flush: bool,
    /// Some event since the last flush went to the dead-letter file instead: the pending
    /// acknowledgements report it rejected.
    rejected_since_flush: bool,
    /// Why the last open failed (the dead letters' reason), and whether a retry can help.
    open_error: Option<SinkError>,
    retry: loghaul_config::RetryConfig,
    dead: Option<DeadLetters>,
    /// `loghaul_file_sink_torn_tails_repaired_total`.
    torn_tails: Arc<AtomicI64>,
}

impl FileSink {
    pub fn new(
        config: FileSinkConfig,
        metrics: Arc<ComponentMetrics>,
        reopen: ReopenGeneration,
    ) -> FileSink {
        let seen_generation = reopen.load(Ordering::Acquire);
        let torn_tails = torn_tails_counter(&metrics);
        FileSink {
            encoder: Arc::new(LineEncoder::new(
                config.encoding,
                config.path.has_time || config.path.has_fields,
            )),
            config,
            metrics,
            reopen,
            seen_generation,
            files: Vec::new(),
            by_path: HashMap::new(),
            current: None,
            current_path: String::new(),
            scratch: String::new(),
            time_cache_second: None,
            time_cache: Vec::new(),
            pending: Vec::new(),
            lost_since_flush: false,
            rejected_since_flush: false,
            open_error: None,
            retry: loghaul_config::RetryConfig {
                max: std::time::Duration::from_secs(5),
                ..loghaul_config::RetryConfig::default()
            },
            dead: None,
            torn_tails,
        }
    }

    /// How long retryable write failures are retried, and where events that cannot be written
    /// go (without it they are counted and lost).
    pub fn with_failure_policy(
        mut self,
        retry: Option<loghaul_config::RetryConfig>,
        dead: DeadLetters,
    ) -> FileSink {
        if let Some(retry) = retry {
            self.retry = retry;
        }
        self.dead = Some(dead);
        self
    }

    /// Events whose file would not open. While the failure may pass (permissions, a full or
    /// read-only disk), events a source waits for are reported errored, so it sends them again
    /// (a forward client re-sends, the file source reads them again) and they reach the file once
    /// it opens; events nobody would send again go to the dead letters rather than be lost. A
    /// path that can never be opened (a name too long for the file system, a symlink loop)
    /// sends everything to the dead letters.
    fn unopenable(&mut self, bytes: &[u8], events: usize, tracked: bool) {
        let error = self
            .open_error
            .clone()
            .unwrap_or_else(|| SinkError::retryable("cannot open the file"));
        if tracked && error.is_retryable() {
            self.metrics
                .discarded(DiscardReason::WriteFailed, events as u64);
            self.lost_since_flush = true;
            return;
        }
        self.dead_letter(bytes, events, &error, 1);
    }

    /// Sends encoded events (lines) to the dead-letter file. Returns whether they are safe there;
    /// if not, they are counted lost.
    fn dead_letter(
        &mut self,
        bytes: &[u8],
        events: usize,
        error: &SinkError,
        attempts: u32,
    ) -> bool {
        let written = match &self.dead {
            Some(dead) => dead
                .write(
                    bytes.split_inclusive(|&b| b == b'\n'),
                    error,
                    attempts,
                    None,
                )
                .map_err(|e| format!("cannot write {}: {e}", dead.path().display())),
            None => Err("no dead-letter file".to_owned()),
        };
        match written {
            Ok(_) => {
                self.rejected_since_flush = true;
                true
            }
            Err(why) => {
                self.metrics
                    .discarded(DiscardReason::WriteFailed, events as u64);
                crate::warn_limited!(self.metrics, reason = %why, events, "Events could not be dead-lettered; they are lost to this sink.");
                self.lost_since_flush = true;
                false
            }
        }
    }

    /// The encoder senders run for this sink (give it to the sink's input queue).
    pub fn encoder(&self) -> Arc<LineEncoder> {
        self.encoder.clone()
    }

    /// Consumes batches until every upstream is gone, then flushes and closes everything.
    pub async fn run(mut self, mut input: Input) {
        self.metrics.set_health(Health::Running, None);
        let mut tick = tokio::time::interval(self.config.flush_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_flush = Instant::now();
        loop {
            tokio::select! {
                biased;
                batch = input.recv() => match batch {
                    Some(batch) => {
                        self.check_reopen().await;
                        self.write_batch(batch);
                        while let Some(batch) = input.try_recv() {
                            self.write_batch(batch);
                            // Under steady load the queue never runs empty (and the tick never
                            // wins the biased select): acknowledgements are still given at least
                            // every flush_interval, so acknowledging sources move on.
                            if self.pending.len() >= MAX_PENDING_ACKS
                                || last_flush.elapsed() >= self.config.flush_interval
                            {
                                self.flush_all().await;
                                last_flush = Instant::now();
                            }
                        }
                        // The queue ran empty: write now instead of at the next tick, as rsyslog
                        // and syslog-ng do. Under load the queue is rarely empty, so writes stay
                        // large; when it is quiet, events reach the file without delay.
                        self.flush_all().await;
                        last_flush = Instant::now();
                    }
                    None => break,
                },
                _ = tick.tick() => self.on_tick().await,
            }
        }
        self.flush_all().await;
        self.files.clear();
        self.metrics.set_health(Health::Stopped, None);
    }

    fn write_batch(&mut self, delivery: Delivery) {
        let Delivery {
            batch,
            prepared,
            ack,
        } = delivery;
        if batch.finalizer.is_tracked() {
            self.pending.push(ack);
        } else {
            ack.commit(BatchStatus::Delivered);
        }
        let prepared = match prepared {
            Some(p) if !self.encoder.per_event || p.ends.len() == batch.len() => p,
            // Not prepared by the sender (or not per event): encode here.
            _ => self.encoder.prepare(&batch),
        };
        if self.encoder.per_event {
            self.route_events(&batch, &prepared);
            self.encoder.pool.put(prepared.bytes);
            return;
        }
        let idx = match self.current {
            Some(i) if self.files.get(i).is_some_and(Option::is_some) => Some(i),
            _ => {
                self.scratch.clear();
                self.scratch.push_str(&self.config.path_raw);
                self.select_file()
            }
        };
        let Some((idx, Some(file))) =
            idx.map(|i| (i, self.files.get_mut(i).and_then(Option::as_mut)))
        else {
            // Opening failed (counted and logged in open).
            self.unopenable(&prepared.bytes, batch.len(), batch.finalizer.is_tracked());
            self.encoder.pool.put(prepared.bytes);
            return;
        };
        file.buf_bytes += prepared.bytes.len();
        file.buf_events += batch.len();
        file.chunks.push(prepared.bytes);
        // Acknowledged as soon as a write leaves nothing unwritten, not only at the next flush:
        // each pending acknowledgement holds its batch, and a sink that falls behind (its
        // queue never running empty) kept up to MAX_PENDING_ACKS of them, a few hundred MiB.
        if file.buf_bytes >= WRITE_THRESHOLD && self.write_out(idx) && !self.has_unwritten() {
            self.settle();
        }
    }

    /// Templated paths: each event's bytes go to the file its path renders to.
    fn route_events(&mut self, batch: &EventBatch, prepared: &Prepared) {
        let mut start = 0;
        for (event, &end) in batch.events.iter().zip(&prepared.ends) {
            let end = end as usize;
            let bytes = prepared.bytes.get(start..end).unwrap_or_default();
            start = end;
            let idx = if self.render_path(batch, event) || self.current.is_none() {
                self.select_file()
            } else {
                self.current
            };
            let Some((idx, Some(file))) =
                idx.map(|i| (i, self.files.get_mut(i).and_then(Option::as_mut)))
            else {
                // Opening failed (counted and logged in open).
                self.unopenable(bytes, 1, batch.finalizer.is_tracked());
                continue;
            };
            file.append(bytes, &self.encoder.pool);
            if file.buf_bytes >= WRITE_THRESHOLD {
                self.write_out(idx);
            }
        }
    }

    /// Renders the path for `event` into `scratch`; returns whether it differs from the
    /// current file's path. Time parts are formatted once per second of event time.
    fn render_path(&mut self, batch: &EventBatch, event: &Event) -> bool {
        let tmpl = &self.config.path;
        if tmpl.has_time {
            let second = batch.time_of(event).unix_seconds();
            if self.time_cache_second != Some(second) {
                self.time_cache_second = Some(second);
                self.time_cache.clear();
                let dt = chrono::DateTime::from_timestamp(second, 0).unwrap_or_default();
                for part in &tmpl.parts {
                    if let TemplatePart::Strftime(fmt) = part {
                        self.time_cache.push(dt.format(fmt).to_string());
                    }
                }
            } else if !tmpl.has_fields {
                // Same second, nothing else varies: the path is the current one.
                return false;
            }
        }
        self.scratch.clear();
        let mut times = self.time_cache.iter();
        for part in &tmpl.parts {
            match part {
                TemplatePart::Literal(s) => self.scratch.push_str(s),
                TemplatePart::Strftime(_) => self
                    .scratch
                    .push_str(times.next().map_or("", |s| s.as_str())),
                TemplatePart::Field(name) => push_field(&mut self.scratch, batch, event, name),
                TemplatePart::FieldOr(name, default) => {
                    push_field_or(&mut self.scratch, batch, event, name, default);
                }
            }
        }
        self.scratch != self.current_path
    }

    /// Makes the file for `scratch` current, opening it if needed.
    fn select_file(&mut self) -> Option<usize> {
        if let Some(&idx) = self.by_path.get(&self.scratch) {
            self.current = Some(idx);
            self.current_path.clone_from(&self.scratch);
            return Some(idx);
        }
        let path = PathBuf::from(&self.scratch);
        match open_append(&path) {
            Ok(file) => {
                // This sink holds no bytes for this file (a closed file keeps none), so whatever
                // ends it without a newline is no line of ours to complete: a crash's.
                let lock = torn::lock(&file);
                repair_tail(&file, &path, &self.metrics, &self.torn_tails);
                drop(lock);
                let identity = file
                    .metadata()
                    .map(|m| (m.dev(), m.ino()))
                    .unwrap_or_default();
                if self.by_path.len() >= self.config.max_open_files {
                    self.close_least_recent();
                }
                let slot = OpenFile {
                    path,
                    file,
                    identity,
                    chunks: Vec::new(),
                    buf_bytes: 0,
                    buf_events: 0,
                    in_file: 0,
                    last_write: Instant::now(),
                };
                let idx = match self.files.iter().position(Option::is_none) {
                    Some(free) => {
                        self.files[free] = Some(slot);
                        free
                    }
                    None => {
                        self.files.push(Some(slot));
                        self.files.len() - 1
                    }
                };
                self.by_path.insert(self.scratch.clone(), idx);
                self.current = Some(idx);
                self.current_path.clone_from(&self.scratch);
                Some(idx)
            }
            Err(error) => {
                let error = open_error(&self.scratch, error);
                self.metrics.error(ErrorKind::Io, 1);
                self.metrics
                    .set_health(Health::Degraded, Some(error.to_string()));
                crate::warn_limited!(self.metrics, error = %io_cause(&error), path = %self.scratch, "Failed to open output file.");
                self.open_error = Some(error);
                self.current = None;
                None
            }
        }
    }

    /// Writes one file's buffer to the file. A failure that may pass (a full disk, EIO) keeps the
    /// unwritten bytes for [`Self::flush_all`] to retry and marks the sink degraded; any other
    /// failure loses the buffered events to this sink: they are counted, the pending acks will
    /// report an error, and the file is reopened on its next event. Returns whether it wrote.
    fn write_out(&mut self, idx: usize) -> bool {
        let Some(Some(file)) = self.files.get_mut(idx) else {
            return true;
        };
        if file.chunks.is_empty() {
            return true;
        }
        let bytes = file.buf_bytes;
        let result = file
            .write_pending(&self.encoder.pool)
            .map_err(|WriteFailed { error, cut }| (write_error(&file.path, error), cut));
        if let Err((error, cut)) = &result
            && error.is_retryable()
        {
            // Nothing is dropped: the rest stays pending and flush_all tries again, holding the
            // sink's input (its queue fills and the sources push back) until the write goes in.
            let path = file.path.display().to_string();
            self.metrics.error(ErrorKind::Io, 1);
            self.metrics
                .set_health(Health::Degraded, Some(format!("{error}; retrying")));
            let cut_error = cut.as_ref().map(tracing::field::display);
            crate::warn_limited!(self.metrics, error = %io_cause(error), %path, cut_error, "Failed to write to output file; keeping the events and retrying.");
            return false;
        }
        let events = file.buf_events;
        file.buf_bytes = 0;
        file.buf_events = 0;
        file.last_write = Instant::now();
        match result {
            Ok(()) => {
                self.metrics.sent(events, bytes);
                if matches!(self.metrics.health().0, Health::Degraded) {
                    self.metrics.set_health(Health::Running, None);
                }
                true
            }
            Err((error, _)) => {
                let path = file.path.display().to_string();
                self.metrics.error(ErrorKind::Io, 1);
                self.metrics
                    .set_health(Health::Degraded, Some(error.to_string()));
                crate::warn_limited!(self.metrics, error = %io_cause(&error), %path, events, "Failed to write to output file; the events go to the dead-letter file.");
                self.dead_letter_unwritten(idx, events, &error, 1);
                self.close(idx);
                false
            }
        }
    }

    /// Sends a file's unwritten bytes to the dead letters and empties its buffer.
    fn dead_letter_unwritten(
        &mut self,
        idx: usize,
        events: usize,
        error: &SinkError,
        attempts: u32,
    ) {
        let Some(Some(file)) = self.files.get_mut(idx) else {
            return;
        };
        let chunks: Vec<Vec<u8>> = file.chunks.drain(..).collect();
        file.buf_bytes = 0;
        file.buf_events = 0;
        let bytes = chunks.concat();
        self.dead_letter(&bytes, events, error, attempts);
        for chunk in chunks {
            self.encoder.pool.put(chunk);
        }
    }

    /// Whether some file still holds bytes a write failed to take (a retryable failure).
    fn has_unwritten(&self) -> bool {
        self.files.iter().flatten().any(|f| !f.chunks.is_empty())
    }

    /// Writes every buffer, retrying (with backoff) writes that failed for a reason that may
    /// pass, and then reports the pending acknowledgements.
    async fn flush_all(&mut self) {
        let mut attempts = 0;
        loop {
            for idx in 0..self.files.len() {
                self.write_out(idx);
            }
            if !self.has_unwritten() {
                break;
            }
            attempts += 1;
            if self.retry.exhausted(attempts) {
                // Retries exhausted (a finite `retry.max_attempts`): what is still unwritten
                // goes to the dead letters, and the files are reopened on their next event.
                for idx in 0..self.files.len() {
                    let Some(Some(file)) = self.files.get(idx) else {
                        continue;
                    };
                    if file.chunks.is_empty() {
                        continue;
                    }
                    let (events, path) = (file.buf_events, file.path.display().to_string());
                    let error = SinkError::permanent(format!(
                        "cannot write {path} after {attempts} attempts"
                    ));
                    self.dead_letter_unwritten(idx, events, &error, attempts);
                    self.close(idx);
                }
                break;
            }
            tokio::time::sleep(self.retry.backoff(attempts)).await;
        }
        self.settle();
    }

    /// Commits the pending acknowledgements: everything their batches hold is written (or
    /// dead-lettered, or lost, as the flags say).
    fn settle(&mut self) {
        let lost = std::mem::take(&mut self.lost_since_flush);
        let rejected = std::mem::take(&mut self.rejected_since_flush);
        let status = if lost {
            BatchStatus::Errored
        } else if rejected {
            BatchStatus::Rejected
        } else {
            BatchStatus::Delivered
        };
        for ack in self.pending.drain(..) {
            ack.commit(status);
        }
    }

    async fn on_tick(&mut self) {
        self.flush_all().await;
        self.check_reopen().await;
        let now = Instant::now();
        for idx in 0..self.files.len() {
            let Some(Some(file)) = self.files.get(idx) else {
                continue;
            };
            if now.duration_since(file.last_write) >= self.config.idle_timeout {
                self.close(idx);
                continue;
            }
            // Rotated away (renamed or removed): reopen by path on the next event.
            let rotated = match std::fs::metadata(&file.path) {
                Ok(m) => (m.dev(), m.ino()) != file.identity,
                Err(_) => true,
            };
            if rotated {
                tracing::info!(component = %self.metrics.id, path = %file.path.display(), "Reopening output file that was moved or removed.");
                self.close(idx);
            }
        }
    }

    async fn check_reopen(&mut self) {
        let generation = self.reopen.load(Ordering::Acquire);
        if generation != self.seen_generation {
            self.seen_generation = generation;
            // Everything buffered goes to the old files first (retried if the disk is full).
            self.flush_all().await;
            for idx in 0..self.files.len() {
                self.close(idx);
            }
        }
    }

    fn close(&mut self, idx: usize) {
        let Some(slot) = self.files.get_mut(idx) else {
            return;
        };
        if let Some(file) = slot.as_mut()
            && !file.chunks.is_empty()
        {
            // Closing with buffered data happens only via idle/rotate paths after a flush, but
            // never silently drop it. Should this write fail, its torn line is cut (or, if that
            // fails too, cut when the file is next opened).
            let _ = file.write_pending(&self.encoder.pool);
        }
        if let Some(file) = slot.take() {
            self.by_path.retain(|_, v| *v != idx);
            drop(file);
        }
        if self.current == Some(idx) {
            self.current = None;
            self.current_path.clear();
        }
    }

    fn close_least_recent(&mut self) {
        let oldest = self
            .files
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.as_ref().map(|f| (i, f.last_write)))
            .min_by_key(|(_, t)| *t)
            .map(|(i, _)| i);
        if let Some(idx) = oldest {
            // A file whose write failed for a reason that may pass keeps its bytes and stays
            // open (briefly over max_open_files) until flush_all gets them in.
            if self.write_out(idx) || self.files.get(idx).is_some_and(Option::is_none) {
                self.close(idx);
            }
        }
    }
}

/// Whether an open failed for a reason no wait can fix: the path itself is impossible.
fn never_opens(error: &std::io::Error) -> bool {
    // A file where a directory should be (ENOTDIR, EEXIST) or the reverse is an operator's to
    // fix, like permissions; a name the file system cannot hold is not.
    matches!(
        error.raw_os_error(),
        Some(libc::ENAMETOOLONG | libc::EINVAL | libc::ELOOP)
    )
}

/// Opens (creating it and its directories) `path` for appending, and for reading too, so that
/// a torn tail can be found (see [`torn`]). A file the process may write but not read is opened
/// for appending only, as before the check existed; its tail then goes unchecked.
fn open_append(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    match OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)
    {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            OpenOptions::new().create(true).append(true).open(path)
        }
        opened => opened,
    }
}

/// The file sink's `loghaul_file_sink_torn_tails_repaired_total`.
fn torn_tails_counter(metrics: &ComponentMetrics) -> Arc<AtomicI64> {
    metrics.counter(
        "loghaul_file_sink_torn_tails_repaired_total",
        "Output files found ending inside a line when opened (an interrupted write before a \
         crash), cut back to their last whole line.",
        &[],
    )
}

/// Cuts the torn last line a crash left in `file`, just opened at `path`, before anything is
/// appended to it (see [`torn`]): logged, and counted in `torn_tails`. Call it holding the
/// file's [`torn::lock`].
fn repair_tail(file: &File, path: &Path, metrics: &ComponentMetrics, torn_tails: &AtomicI64) {
    match torn::cut_torn_tail(file) {
        Ok(0) => {}
        Ok(bytes) => {
            torn_tails.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(component = %metrics.id, path = %path.display(), bytes, "Cut a torn last line from output file before appending; its event was never acknowledged.");
        }
        Err(error) => {
            crate::warn_limited!(metrics, %error, path = %path.display(), "Failed to check output file for a torn last line; appending anyway.");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;
    use std::time::Duration;

    use bytes::Bytes;
    use loghaul_config::PathTemplate;
    use loghaul_core::{BatchNotifier, BatchStatusReceiver, Span};

    use super::*;
    use crate::metrics::ComponentKind;
    use crate::metrics::Registry;
    use crate::pipeline::{Fanout, QUEUE_BATCHES, input_queue};
    use crate::sinks::encoder::Encoding;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn config(path: &str) -> Result<FileSinkConfig, Box<dyn std::error::Error>> {
        let (template, _) = PathTemplate::parse(path).map_err(|e| format!("{e:?}"))?;
        Ok(FileSinkConfig {
            path: template,
            path_raw: path.to_string(),
            encoding: Encoding::Json,
            flush_interval: Duration::from_millis(50),
            idle_timeout: Duration::from_secs(30),
            max_open_files: 4,
            thread: crate::sinks::SinkThread::Shared,
        })
    }

    fn tracked_batch(text: &'static [u8], app: Option<Span>) -> (EventBatch, BatchStatusReceiver) {
        let (finalizer, rx) = BatchNotifier::new_with_receiver();
        let mut batch = EventBatch::new(Bytes::from_static(text), "src".into(), "test");
        batch.events.push(Event {
            message: Span::new(0, text.len()).into(),
            appname: app.into(),
            ..Event::default()
        });
        batch.finalizer = finalizer;
        (batch, rx)
    }

    type Running = (Fanout, Arc<ComponentMetrics>, tokio::task::JoinHandle<()>);

    /// Runs a file sink on `path` and returns the fan-out feeding it.
    fn start(path: &str) -> Result<Running, Box<dyn std::error::Error>> {
        let reg = Registry::default();
        let metrics = reg.register("out", ComponentKind::Sink, "file");
        let sink = FileSink::new(config(path)?, metrics.clone(), Arc::new(AtomicU64::new(0)));
        let (tx, input) = input_queue(metrics.clone(), Some(sink.encoder()), QUEUE_BATCHES);
        let fanout = Fanout::new(vec![tx], reg.register("src", ComponentKind::Source, "test"));
        Ok((fanout, metrics, tokio::spawn(sink.run(input))))
    }

    #[tokio::test]
    async fn acknowledges_after_the_write() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("out.jsonl");
        let (fanout, metrics, task) = start(&path.to_string_lossy())?;
        let (batch, rx) = tracked_batch(b"hello", None);
        fanout.send(batch).await;
        let status = tokio::time::timeout(Duration::from_secs(5), rx).await?;
        assert_eq!(status, BatchStatus::Delivered);
        // Delivered means written: the line is in the file before the sink stops.
        let text = std::fs::read_to_string(&path)?;
        assert!(text.contains(r#""message":"hello""#), "{text}");
        assert_eq!(metrics.sent_events.load(Ordering::Relaxed), 1);
        drop(fanout);
        task.await?;
        Ok(())
    }

    /// A sink behind its queue never reaches a flush between batches: each write that leaves
    /// nothing unwritten acknowledges what it wrote, so the acknowledgements (which hold their
    /// batches) do not pile up until the next flush.
    #[tokio::test]
    async fn a_write_that_leaves_nothing_unwritten_acknowledges_at_once() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("out.jsonl");
        let reg = Registry::default();
        let metrics = reg.register("out", ComponentKind::Sink, "file");
        let mut sink = FileSink::new(
            config(&path.to_string_lossy())?,
            metrics,
            Arc::new(AtomicU64::new(0)),
        );
        let mut statuses = Vec::new();
        for _ in 0..3 {
            // Over the write threshold in one batch.
            let (finalizer, rx) = BatchNotifier::new_with_receiver();
            let text = Bytes::from(vec![b'x'; WRITE_THRESHOLD]);
            let mut batch = EventBatch::new(text, "src".into(), "test");
            batch.events.push(Event {
                message: Span::new(0, WRITE_THRESHOLD).into(),
                ..Event::default()
            });
            batch.finalizer = finalizer;
            let batch = Arc::new(batch);
            let ack = batch.finalizer.ack();
            sink.write_batch(Delivery {
                batch,
                prepared: None,
                ack,
            });
            statuses.push(rx);
        }
        for rx in &mut statuses {
            assert_eq!(rx.try_status(), Some(BatchStatus::Delivered));
        }
        assert_eq!(std::fs::read_to_string(&path)?.lines().count(), 3);
        Ok(())
    }

    #[tokio::test]
    async fn reports_an_error_when_the_file_cannot_be_opened() -> TestResult {
        let dir = tempfile::tempdir()?;
        // A path under a regular file can never be created.
        std::fs::write(dir.path().join("blocker"), b"")?;
        let path = dir.path().join("blocker/out.jsonl");
        let (fanout, metrics, task) = start(&path.to_string_lossy())?;
        let (batch, rx) = tracked_batch(b"lost", None);
        fanout.send(batch).await;
        let status = tokio::time::timeout(Duration::from_secs(5), rx).await?;
        assert_eq!(status, BatchStatus::Errored);
        assert_eq!(metrics.discarded_count(DiscardReason::WriteFailed), 1);
        assert!(matches!(metrics.health().0, Health::Degraded));
        drop(fanout);
        task.await?;
        Ok(())
    }

    #[tokio::test]
    async fn field_templates_split_files_and_cannot_escape_the_directory() -> TestResult {
        let dir = tempfile::tempdir()?;
        let template = format!("{}/{{{{ appname }}}}.log", dir.path().display());
        let (fanout, _, task) = start(&template)?;
        // appname "../x" must land in dir/.._x.log, not outside dir.
        let (batch, _rx) = tracked_batch(b"../x", Some(Span::new(0, 4)));
        fanout.send(batch).await;
        let (batch, _rx2) = tracked_batch(b"app", None);
        fanout.send(batch).await;
        drop(fanout);
        task.await?;
        assert!(dir.path().join(".._x.log").exists());
        assert!(
            dir.path().join("-.log").exists(),
            "an absent field renders as '-'"
        );
        assert!(
            !dir.path()
                .parent()
                .map(|p| p.join("x.log").exists())
                .unwrap_or(false)
        );
        Ok(())
    }

    /// The sink's `loghaul_file_sink_torn_tails_repaired_total` (asked for again: the same series).
    fn torn_tails(metrics: &ComponentMetrics) -> i64 {
        torn_tails_counter(metrics).load(Ordering::Relaxed)
    }

    #[tokio::test]
    async fn a_torn_last_line_is_cut_before_the_first_append() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, b"{\"message\":\"whole\"}\n{\"message\":\"to")?;
        let (fanout, metrics, task) = start(&path.to_string_lossy())?;
        let (batch, rx) = tracked_batch(b"after", None);
        fanout.send(batch).await;
        let status = tokio::time::timeout(Duration::from_secs(5), rx).await?;
        assert_eq!(status, BatchStatus::Delivered);
        let text = std::fs::read_to_string(&path)?;
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0], "{\"message\":\"whole\"}\n");
        assert!(lines[1].ends_with('\n'), "{text}");
        let after: serde_json::Value = serde_json::from_str(lines[1])?;
        assert_eq!(after["message"], "after", "{text}");
        assert_eq!(torn_tails(&metrics), 1);
        drop(fanout);
        task.await?;
        Ok(())
    }

    #[tokio::test]
    async fn a_file_ending_with_a_whole_line_is_appended_to_as_is() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, b"{\"message\":\"whole\"}\n")?;
        let (fanout, metrics, task) = start(&path.to_string_lossy())?;
        let (batch, rx) = tracked_batch(b"after", None);
        fanout.send(batch).await;
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), rx).await?,
            BatchStatus::Delivered
        );
        let text = std::fs::read_to_string(&path)?;
        assert!(text.starts_with("{\"message\":\"whole\"}\n{"), "{text}");
        assert_eq!(text.lines().count(), 2, "{text}");
        assert_eq!(torn_tails(&metrics), 0);
        drop(fanout);
        task.await?;
        Ok(())
    }

    #[tokio::test]
    async fn replayed_dead_letters_do_not_glue_onto_a_torn_last_line() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, b"{\"message\":\"whole\"}\n{\"message\":\"to")?;
        let reg = Registry::default();
        let metrics = reg.register("out", ComponentKind::Sink, "file");
        let cx = SinkContext {
            id: "out".into(),
            metrics: metrics.clone(),
            reopen: Arc::new(AtomicU64::new(0)),
            retry: None,
            data_dir: dir.path().join("data"),
            tls: None,
        };
        let letter = crate::pipeline::dlq::DeadLetter {
            reason: "cannot write".into(),
            attempts: 1,
            target: None,
            event: serde_json::to_string("{\"message\":\"replayed\"}")?,
        };
        let replay = config(&path.to_string_lossy())?
            .replay(cx, vec![letter])
            .ok_or("a static path replays")?;
        let replayed = replay.await;
        assert_eq!((replayed.delivered, replayed.failed.len()), (1, 0));
        assert_eq!(
            std::fs::read_to_string(&path)?,
            "{\"message\":\"whole\"}\n{\"message\":\"replayed\"}\n"
        );
        assert_eq!(torn_tails(&metrics), 1);
        Ok(())
    }

    /// An [`OpenFile`] on `path` (opened as the sink opens it) holding `chunks`.
    fn open_file(path: &Path, chunks: &[&[u8]]) -> Result<OpenFile, Box<dyn std::error::Error>> {
        let file = open_append(path)?;
        Ok(OpenFile {
            path: path.to_owned(),
            file,
            identity: (0, 0),
            chunks: chunks.iter().map(|c| c.to_vec()).collect(),
            buf_bytes: chunks.iter().map(|c| c.len()).sum(),
            buf_events: 0,
            in_file: 0,
            last_write: Instant::now(),
        })
    }

    #[test]
    fn a_failed_write_leaves_whole_lines_and_keeps_the_torn_one_whole() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, b"old\n")?;
        let pool = BufferPool::default();
        let mut f = open_file(&path, &[b"a\nbb\n", b"ccc\ndd", b"d\n"])?;
        // The disk filled after 7 bytes: "a\n" and "bb\n" whole, and "cc" of "ccc\n".
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)?
            .write_all(b"a\nbb\ncc")?;
        let (whole, left, cut) = tear_off(&f.file, &f.chunks, 7);
        assert_eq!((whole, left), (5, 0));
        assert!(cut.is_none());
        assert_eq!(
            std::fs::read(&path)?,
            b"old\na\nbb\n",
            "the torn line is cut"
        );
        f.consume(whole, &pool);
        assert_eq!(
            f.chunks.concat(),
            b"ccc\nddd\n",
            "pending starts the torn line"
        );
        // The retry writes the cut line again, whole.
        assert!(f.write_pending(&pool).is_ok());
        assert_eq!(std::fs::read(&path)?, b"old\na\nbb\nccc\nddd\n");
        assert!(f.chunks.is_empty());
        Ok(())
    }

    #[test]
    fn a_torn_line_that_cannot_be_cut_is_completed_by_the_retry() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, b"old\n")?;
        let pool = BufferPool::default();
        let mut f = open_file(&path, &[b"a\nbb", b"b\n"])?;
        // Appending only: the tail cannot be read, so it cannot be cut.
        f.file = std::fs::OpenOptions::new().append(true).open(&path)?;
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)?
            .write_all(b"a\nb")?;
        let (whole, left, cut) = tear_off(&f.file, &f.chunks, 3);
        assert_eq!((whole, left), (2, 1));
        assert!(cut.is_some(), "the cut needs to read the file");
        assert_eq!(std::fs::read(&path)?, b"old\na\nb", "nothing cut blind");
        f.consume(whole, &pool);
        f.in_file = left;
        assert!(f.write_pending(&pool).is_ok());
        assert_eq!(
            std::fs::read(&path)?,
            b"old\na\nbbb\n",
            "the line is completed"
        );
        assert_eq!(f.in_file, 0);
        Ok(())
    }

    #[test]
    fn whole_lines_counts_up_to_the_last_newline_across_buffers() {
        let chunks = [b"a\nb".to_vec(), b"c\nd".to_vec(), b"\n".to_vec()];
        assert_eq!(whole_lines(&chunks, 0), 0);
        assert_eq!(whole_lines(&chunks, 1), 0);
        assert_eq!(whole_lines(&chunks, 2), 2);
        assert_eq!(whole_lines(&chunks, 5), 5);
        assert_eq!(whole_lines(&chunks, 6), 5);
        assert_eq!(whole_lines(&chunks, 7), 7);
        assert_eq!(whole_lines(&chunks, 100), 7);
    }
}
