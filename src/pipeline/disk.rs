//! A sink's disk buffer: batches wait for the sink in a segmented log on disk
//! (`loghaul-buffer`) instead of in memory, so a slow or dead sink neither stalls the other
//! sinks of its sources until the log is full, nor loses what it was sent across a restart or a
//! crash.
//!
//! ```text
//!  fan-out ──(encode on the sender's task)──► queue ──► writer thread: append groups; fsync
//!                                                       per `sync` on the blocking pool while
//!                                                       it appends on, then commit the acks
//!                                                           │ segments on disk, and the latest
//!                                                           │ records and batches in memory
//!  sink ◄── the sink's own queue ◄── reader thread: read (from memory while it keeps up),
//!   (encodes)                        decode (or take the kept batch), attach a finalizer per
//!                                    record; Delivered/Rejected ⇒ ack the record (the cursor
//!                                    moves, fully acknowledged segments are deleted)
//! ```
//!
//! A source's acknowledgement covers the write to the buffer: with `sync: every_batch` it comes
//! after the fsync that made the batch durable, with an interval after the next timed fsync,
//! with `never` once written. From there on the buffer owns the events: a record leaves it only
//! when the sink committed it. A record the sink dropped uncommitted (the sink stopped) stays
//! and is delivered again after a restart; so is every record that was in flight at a crash,
//! which bounds the duplicates a crash can cause to what the sink had in hand.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use loghaul_buffer::{AppendError, FileSystem, Reader, RealFs, Shared, Stats, Writer};
use loghaul_config::{SyncMode, WhenFull};
use loghaul_core::{BatchNotifier, BatchStatus, EventBatch};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::ShutdownSignal;
use super::fanout::Fanout;
use super::queue::{Delivery, InputSender, Prepare, Prepared};
use crate::metrics::{ComponentMetrics, DiscardReason, ErrorKind};

/// Batches queued for the writer thread.
const WRITER_QUEUE: usize = 64;
/// The most bytes written (and fsynced) as one group.
const GROUP_BYTES: usize = 8 << 20;
/// The largest batch the buffer takes (an encoded batch; sources' batches are far smaller).
const MAX_RECORD: u32 = loghaul_buffer::Config::DEFAULT_MAX_RECORD;
/// The latest appended bytes the reader takes from memory instead of reading them back: a
/// reader that keeps up with the writer never reads the file (reading back what was just
/// written cost as much as writing it). Two of the largest groups.
const RECENT_BYTES: usize = 2 * GROUP_BYTES;
/// Segment size: small enough that acknowledged space comes back soon, large enough that
/// rotation is rare.
const SEGMENT_SIZE: u64 = 32 << 20;

/// What a disk buffer is built from.
pub struct DiskOptions {
    pub id: String,
    pub dir: PathBuf,
    pub max_size: u64,
    pub sync: SyncMode,
    pub when_full: WhenFull,
    /// The sink's metrics: the buffer reports under the sink it serves.
    pub metrics: Arc<ComponentMetrics>,
    /// The sink's own input queue.
    pub sink: InputSender,
    /// Fires at a stop: the reader then feeds the sink nothing more (see [`read_loop`]).
    pub stop: ShutdownSignal,
}

/// Encodes batches for the log on the sending task (see [`Prepare`]).
struct Encode;

impl Prepare for Encode {
    fn prepare(&self, batch: &EventBatch) -> Prepared {
        let mut bytes = Vec::with_capacity(loghaul_core::encoded_size(batch));
        loghaul_core::encode_batch(batch, &mut bytes);
        Prepared {
            bytes,
            ends: Vec::new(),
        }
    }
}

/// The buffer's series under the sink's metrics. What the log's statistics hold is read from
/// them each time the metrics are rendered, so the series are current whatever the reader is
/// doing (waiting for room in the sink's queue for minutes, or finished at a stop) and agree
/// with `loghaul buffer inspect`; only what the reader counts itself lives here.
struct Gauges {
    redelivered_events: Arc<AtomicI64>,
    /// Records that passed their checksum but did not decode (counted with the damaged ones).
    undecodable: Arc<AtomicI64>,
}

impl Gauges {
    /// Registers the buffer's series for the log that `shared` belongs to (replacing those of a
    /// log opened before it under the same sink).
    fn register(
        metrics: &ComponentMetrics,
        shared: &Arc<Shared>,
        max_size: u64,
        recovery: &loghaul_buffer::Recovery,
    ) -> Gauges {
        let stat = |get: fn(&Stats) -> u64| {
            let shared = shared.clone();
            move || get(&shared.stats) as i64
        };
        let undecodable = Arc::new(AtomicI64::new(0));
        metrics.gauge_read(
            "loghaul_disk_buffer_bytes",
            "Bytes the sink's disk buffer holds on disk.",
            &[],
            stat(|s| s.bytes_on_disk.load(Ordering::Relaxed)),
        );
        metrics.gauge_read(
            "loghaul_disk_buffer_records",
            "Batches in the sink's disk buffer not yet acknowledged by the sink.",
            &[],
            stat(|s| s.records_pending.load(Ordering::Relaxed)),
        );
        metrics.gauge_read(
            "loghaul_disk_buffer_events",
            "Events of those batches: what waits in the sink's disk buffer.",
            &[],
            stat(|s| s.events_pending.load(Ordering::Relaxed)),
        );
        metrics.gauge_read(
            "loghaul_disk_buffer_max_bytes",
            "The disk buffer's max_size.",
            &[],
            move || max_size as i64,
        );
        metrics.counter_read(
            "loghaul_disk_buffer_fsyncs_total",
            "fsyncs of the disk buffer's segments.",
            &[],
            stat(|s| s.fsyncs.load(Ordering::Relaxed)),
        );
        let damaged = stat(|s| s.damaged_records.load(Ordering::Relaxed));
        let skipped = undecodable.clone();
        metrics.counter_read(
            "loghaul_disk_buffer_damaged_records_total",
            "Batches lost to damage found in the disk buffer (at start, including a record cut \
             off its tail, or while reading).",
            &[],
            move || damaged() + skipped.load(Ordering::Relaxed),
        );
        metrics.counter_read(
            "loghaul_disk_buffer_lost_events_total",
            "Events of the lost batches, as far as their damaged records still said how many.",
            &[],
            stat(|s| s.lost_events.load(Ordering::Relaxed)),
        );
        metrics.counter_read(
            "loghaul_disk_buffer_damaged_bytes_total",
            "Damaged bytes skipped in the disk buffer.",
            &[],
            stat(|s| s.damaged_bytes.load(Ordering::Relaxed)),
        );
        metrics.counter_read(
            "loghaul_disk_buffer_torn_bytes_total",
            "Bytes of incomplete records cut from segment tails at start (a crash mid-write).",
            &[],
            stat(|s| s.torn_bytes.load(Ordering::Relaxed)),
        );
        metrics.counter_read(
            "loghaul_disk_buffer_quarantined_segments_total",
            "Damaged segments moved to quarantine/ after their valid records were salvaged.",
            &[],
            stat(|s| s.quarantined_segments.load(Ordering::Relaxed)),
        );
        metrics.counter_read(
            "loghaul_disk_buffer_write_errors_total",
            "Failed writes or fsyncs of the disk buffer (retried).",
            &[],
            stat(|s| {
                s.write_errors.load(Ordering::Relaxed) + s.fsync_failures.load(Ordering::Relaxed)
            }),
        );
        let redelivered = recovery.records_pending as i64;
        metrics.counter_read(
            "loghaul_disk_buffer_redelivered_records_total",
            "Batches found in the buffer at start that the sink may already have had before \
             a crash (delivered again: at-least-once).",
            &[],
            move || redelivered,
        );
        // Counted by the reader as it delivers them: a plain counter of the sink's.
        let redelivered_events = metrics.counter(
            "loghaul_disk_buffer_redelivered_events_total",
            "Events of those batches.",
            &[],
        );
        Gauges {
            redelivered_events,
            undecodable,
        }
    }
}

/// How a sink's log in `dir` is opened.
pub(super) fn log_config(dir: &Path, max_size: u64, sync: SyncMode) -> loghaul_buffer::Config {
    loghaul_buffer::Config {
        dir: dir.to_path_buf(),
        max_size,
        segment_size: SEGMENT_SIZE.min(max_size / 4).max(64 << 10),
        max_record: MAX_RECORD,
        sync: match sync {
            SyncMode::EveryBatch => loghaul_buffer::SyncMode::EveryBatch,
            SyncMode::Interval(d) => loghaul_buffer::SyncMode::Interval(d),
            SyncMode::Never => loghaul_buffer::SyncMode::Never,
        },
        // Records are encoded batches: what waits, and what recovery loses, is reported in
        // events too.
        event_count: Some(loghaul_buffer::EventCount(loghaul_core::encoded_len_events)),
    }
}

/// A sink's log, opened and recovered, with its gauges registered under the sink.
struct Opened {
    writer: Writer<RealFs>,
    reader: Reader<RealFs>,
    gauges: Gauges,
    /// Records below this were in the log at start: the sink may have had them before.
    first_new: u64,
}

/// Opens (and recovers) the log in `dir`, reports what recovery found, and registers its gauges.
fn open_log(
    id: &str,
    dir: &Path,
    max_size: u64,
    sync: SyncMode,
    metrics: &ComponentMetrics,
) -> anyhow::Result<Opened> {
    let config = log_config(dir, max_size, sync);
    let (writer, reader, recovery) = loghaul_buffer::open(RealFs, config)
        .with_context(|| format!("cannot open {}", dir.display()))?;
    let gauges = Gauges::register(metrics, reader.shared(), max_size, &recovery);
    let damaged = recovery.torn_bytes > 0
        || recovery.damaged_bytes > 0
        || recovery.lost_records > 0
        || !recovery.quarantined.is_empty();
    if damaged {
        metrics.error(ErrorKind::Io, 1);
        tracing::warn!(component = %id, path = %dir.display(), %recovery, "Disk buffer was damaged; salvaged what was valid and goes on.");
    } else if recovery.records_pending > 0 {
        tracing::info!(component = %id, path = %dir.display(), %recovery, "Disk buffer resumes; batches after the cursor are delivered again.");
    }
    Ok(Opened {
        writer,
        reader,
        gauges,
        first_new: recovery.next_seq,
    })
}

/// Opens (and recovers) the buffer, starts its writer thread and reader task, and returns the
/// sender the sink's upstreams feed, and a receiver that resolves once the reader has finished
/// (after the sink took everything it could and the cursor was saved).
///
/// # Errors
///
/// The buffer's directory cannot be created or listed, or the writer thread cannot start.
/// Damaged data is never an error: it is salvaged, quarantined and counted.
pub fn start(options: DiskOptions) -> anyhow::Result<Started> {
    let DiskOptions {
        id,
        dir,
        max_size,
        sync,
        when_full,
        metrics,
        sink,
        stop,
    } = options;
    let Opened {
        mut writer,
        reader,
        gauges,
        first_new,
    } = open_log(&id, &dir, max_size, sync, &metrics)?;
    writer.keep_recent(RECENT_BYTES);
    let hot = Arc::new(Hot::default());

    let (tx, rx) = mpsc::channel::<Delivery>(WRITER_QUEUE);
    let sender = InputSender {
        tx,
        downstream: metrics.clone(),
        prepare: Some(Arc::new(Encode)),
        events: None,
        // The queue in front of the writer is full for moments (an fsync); only the buffer on
        // disk being full is `when_full`'s business, and the writer decides that.
        when_full: WhenFull::Block,
    };
    let (writer_done_tx, writer_done_rx) = oneshot::channel();
    super::spawn_on_own_thread(
        format!("buffer-{id}"),
        id.clone(),
        write_loop(writer, rx, sync, when_full, metrics.clone(), hot.clone()),
        writer_done_tx,
    )
    .with_context(|| format!("cannot start the disk buffer thread of '{id}'"))?;
    let done = ReadTask {
        reader,
        writer_done: writer_done_rx,
        gauges,
        metrics,
        id: id.clone(),
        first_new,
        until: None,
        stop,
        hot,
    }
    .spawn(sink)
    .with_context(|| format!("cannot start the disk buffer reader thread of '{id}'"))?;
    Ok(Started {
        sender,
        done: done.0,
        target: done.1,
    })
}

/// A started disk buffer.
pub struct Started {
    /// What the sink's upstreams send to.
    pub sender: InputSender,
    /// Resolves once the reader has finished.
    pub done: oneshot::Receiver<()>,
    /// The queue the reader feeds: the sink's (see `ReadTask::spawn`).
    pub target: Arc<super::fanout::Readers>,
}

/// A memory-buffered sink's log of what a stop wrote to disk for it (see `pipeline::spill`), if
/// `dir` holds one: a reader task delivers its records to the sink's queue ahead of the new
/// events, and the log's writer is returned for the next stop's spill, with a receiver that
/// resolves once the reader has finished. `None` when there is no such log.
///
/// # Errors
///
/// The directory exists but cannot be opened.
pub fn resume(
    id: &str,
    dir: &Path,
    metrics: &Arc<ComponentMetrics>,
    sink: InputSender,
    stop: ShutdownSignal,
) -> anyhow::Result<Option<(Writer<RealFs>, oneshot::Receiver<()>)>> {
    if !dir.exists() {
        return Ok(None);
    }
    let Opened {
        writer,
        reader,
        gauges,
        first_new,
    } = open_log(id, dir, SPILL_MAX_SIZE, SyncMode::EveryBatch, metrics)?;
    // Nothing more will be written until the next stop: the reader ends once it has delivered
    // what the log held at start (records a spill appends later are the next start's).
    let (writer_done_tx, writer_done_rx) = oneshot::channel();
    let _ = writer_done_tx.send(());
    let done = ReadTask {
        reader,
        writer_done: writer_done_rx,
        gauges,
        metrics: metrics.clone(),
        id: id.to_owned(),
        first_new,
        until: Some(first_new),
        stop,
        hot: Arc::new(Hot::default()),
    }
    .spawn(sink)
    .with_context(|| format!("cannot start the disk buffer reader thread of '{id}'"))?
    .0;
    Ok(Some((writer, done)))
}

/// The largest log a stop may spill a memory buffer into.
pub const SPILL_MAX_SIZE: u64 = loghaul_config::delivery::DEFAULT_DISK_MAX_SIZE;

/// What the task that feeds a sink from its log works with (see [`read_loop`]).
struct ReadTask<F: FileSystem> {
    reader: Reader<F>,
    /// Resolves once the log's writer has finished (its upstreams are gone, its last batch is
    /// synced).
    writer_done: oneshot::Receiver<()>,
    gauges: Gauges,
    metrics: Arc<ComponentMetrics>,
    id: String,
    /// Records below this were in the log at start: the sink may have had them before.
    first_new: u64,
    /// Only records below this are delivered (the rest stay in the log).
    until: Option<u64>,
    stop: ShutdownSignal,
    /// The batches the writer just appended (see [`Hot`]).
    hot: Arc<Hot>,
}

impl ReadTask<RealFs> {
    /// Starts feeding `sink`; the receiver resolves once the task has finished.
    /// The returned list is the sink it feeds: a reload that replaces the sink points it at the
    /// new one's queue, and the buffer carries over.
    ///
    /// The reader runs on a thread of its own, as the writer does: on the runtime's workers it
    /// was one task among every connection's, got that share of the cores, fell behind the
    /// writer, and then had to read back and decode what it could otherwise have taken from
    /// memory (see [`Hot`]).
    fn spawn(
        self,
        sink: InputSender,
    ) -> std::io::Result<(oneshot::Receiver<()>, Arc<super::fanout::Readers>)> {
        let (done_tx, done_rx) = oneshot::channel();
        // The reader's own counts are not the sink's: the sink counts what it takes and writes.
        let reader_metrics = ComponentMetrics::detached(
            &self.id,
            loghaul_config::ComponentKind::Source,
            "disk_buffer",
        );
        // Not charged to the memory budget: what waits in front of the buffer may hold all of it
        // while the buffer's disk is full, and only this reader can free the disk. Its batches
        // are bounded by the sink's own queue instead.
        // The sink encodes on its own thread: this reader is one serial stage already.
        let fanout = Fanout::new(vec![sink], reader_metrics).unprepared();
        let target = fanout.readers();
        let (thread, component) = (format!("bufread-{}", self.id), self.id.clone());
        super::spawn_on_own_thread(thread, component, read_loop(self, fanout), done_tx)?;
        Ok((done_rx, target))
    }
}

/// Appends what the fan-outs send, in groups, and acknowledges each batch once the buffer holds
/// it to the standard `sync` sets.
async fn write_loop<F: FileSystem>(
    mut writer: Writer<F>,
    mut rx: mpsc::Receiver<Delivery>,
    sync: SyncMode,
    when_full: WhenFull,
    metrics: Arc<ComponentMetrics>,
    hot: Arc<Hot>,
) {
    let mut seqs = Vec::new();
    // Written, not yet covered by a sync.
    let mut unsynced: Vec<Entry> = Vec::new();
    // The sync running on the blocking pool, with the batches it covers: the writer goes on
    // appending meanwhile (an fsync waits for the disk, and the appends need only the page
    // cache), and the next sync covers what was appended during this one (group commit).
    let mut in_flight: Option<(JoinHandle<loghaul_buffer::SyncOutcome>, Vec<Entry>)> = None;
    let mut next_sync = tokio::time::Instant::now();
    let mut open = true;
    while open || in_flight.is_some() {
        let due = match sync {
            SyncMode::EveryBatch => true,
            SyncMode::Interval(_) => tokio::time::Instant::now() >= next_sync,
            SyncMode::Never => false,
        };
        if in_flight.is_none() && due && !unsynced.is_empty() {
            let pending = writer.begin_sync();
            let covered = std::mem::take(&mut unsynced);
            in_flight = Some((tokio::task::spawn_blocking(move || pending.run()), covered));
        }
        let first = tokio::select! {
            biased;
            done = async { (&mut in_flight.as_mut()?.0).await.ok() }, if in_flight.is_some() => {
                let mut covered = in_flight.take().map(|(_, c)| c).unwrap_or_default();
                let outcome = done.ok_or_else(|| std::io::Error::other("the sync task failed"));
                let synced = writer.finish_sync(outcome);
                if synced.is_err() {
                    // Nothing since the last good sync is known durable: all of it is written
                    // again to a new segment and synced there, before taking more.
                    covered.append(&mut unsynced);
                }
                commit_once_synced(&mut writer, &mut covered, &metrics, synced).await;
                continue;
            }
            () = tokio::time::sleep_until(next_sync), if in_flight.is_none() && !unsynced.is_empty() => continue,
            d = rx.recv(), if open => d,
        };
        let Some(first) = first else {
            open = false;
            continue;
        };
        let mut group = vec![Entry::new(first)];
        let mut bytes = group[0].record.len();
        while bytes < GROUP_BYTES
            && let Ok(d) = rx.try_recv()
        {
            let e = Entry::new(d);
            bytes += e.record.len();
            group.push(e);
        }
        for e in &group {
            metrics
                .buffer_events
                .fetch_sub(e.d.batch.len() as i64, Ordering::Relaxed);
            metrics.buffer_batches.fetch_sub(1, Ordering::Relaxed);
        }
        let group = reject_oversized(group, &metrics);
        if group.is_empty() {
            continue;
        }
        let mut group = group;
        seqs.clear();
        let written = append_tracked(&mut writer, &group, when_full, &metrics, &mut seqs).await;
        hot.keep(group.iter().zip(&seqs).map(|(e, &seq)| (seq, e)));
        // Dropped for a full buffer (`drop_newest`): counted, reported errored.
        for e in group.split_off(written) {
            metrics.discarded(DiscardReason::BufferFull, e.d.batch.len() as u64);
            e.d.ack.commit(BatchStatus::Errored);
        }
        if group.is_empty() {
            continue;
        }
        match sync {
            SyncMode::EveryBatch => unsynced.extend(group),
            SyncMode::Interval(every) => {
                // Synced `every` after the oldest write it covers (or once the sync before it
                // is done, when that takes longer).
                if unsynced.is_empty() {
                    next_sync = tokio::time::Instant::now() + every;
                }
                unsynced.extend(group);
            }
            SyncMode::Never => commit(group),
        }
    }
    if !unsynced.is_empty() {
        sync_and_commit(&mut writer, &mut unsynced, &metrics).await;
    }
}

/// How the buffer's health reasons start, beside the sink's own in `/health`.
const REASON_PREFIX: &str = "disk buffer: ";

/// A batch on its way into the log: its delivery, acknowledged once the log holds it, and its
/// record (what the sender's prepare step encoded), shared so that the log can keep it for the
/// reader without a copy.
pub(super) struct Entry {
    pub d: Delivery,
    pub record: Bytes,
}

impl Entry {
    pub(super) fn new(mut d: Delivery) -> Entry {
        let record = d
            .prepared
            .take()
            .map_or_else(Bytes::new, |p| Bytes::from(p.bytes));
        Entry { d, record }
    }
}

/// Takes out (and rejects, counted) batches that exceed the buffer's record limit: they can never
/// be written, however long the sink waits.
pub(super) fn reject_oversized(group: Vec<Entry>, metrics: &ComponentMetrics) -> Vec<Entry> {
    let max = MAX_RECORD as usize;
    let (ok, too_large): (Vec<_>, Vec<_>) = group.into_iter().partition(|e| e.record.len() <= max);
    for e in too_large {
        metrics.discarded(DiscardReason::WriteFailed, e.d.batch.len() as u64);
        crate::warn_limited!(
            metrics,
            bytes = e.record.len(),
            "A batch is larger than a disk buffer record may be; it is rejected."
        );
        e.d.ack.commit(BatchStatus::Rejected);
    }
    ok
}

/// Appends the group, waiting for room (`block`) and retrying I/O errors with backoff. Returns
/// how many of the group's batches (a prefix) were written: all of them, unless the buffer is
/// full and `when_full` says drop.
///
/// The group goes in one write while that works. After a failure it goes one batch at a time:
/// a file system with less room than the whole group (smaller than `max_size`, or shared) then
/// still takes it piece by piece as acknowledged segments are deleted.
pub(super) async fn append<F: FileSystem>(
    writer: &mut Writer<F>,
    group: &[Entry],
    when_full: WhenFull,
    metrics: &ComponentMetrics,
) -> usize {
    append_tracked(writer, group, when_full, metrics, &mut Vec::new()).await
}

/// [`append`], pushing each written batch's sequence number onto `seqs`.
async fn append_tracked<F: FileSystem>(
    writer: &mut Writer<F>,
    group: &[Entry],
    when_full: WhenFull,
    metrics: &ComponentMetrics,
    seqs: &mut Vec<u64>,
) -> usize {
    let mut done = 0;
    let mut whole = true;
    let mut backoff = FIRST_BACKOFF;
    while done < group.len() {
        let end = if whole { group.len() } else { done + 1 };
        let payloads: Vec<Bytes> = group[done..end].iter().map(|e| e.record.clone()).collect();
        match writer.append(&payloads) {
            Ok(appended) => {
                seqs.extend((appended.first_seq..).take(end - done));
                // The buffer's failure only: the sink's own reason (its server down) stays.
                metrics.set_buffer_failure(None);
                done = end;
                backoff = FIRST_BACKOFF;
            }
            Err(AppendError::Full { .. }) => match when_full {
                WhenFull::DropNewest => return done,
                WhenFull::Block => {
                    let space = writer.shared().space.notified();
                    // Acknowledgements that free a segment wake us; the timeout covers a wake-up
                    // that came between the failed append and this wait.
                    let _ = tokio::time::timeout(Duration::from_millis(100), space).await;
                }
            },
            // A group larger than the whole buffer: one batch at a time fits (reject_oversized
            // took out the batches that never would).
            Err(AppendError::TooLarge { .. }) if whole => whole = false,
            Err(AppendError::TooLarge { .. }) => return done,
            Err(AppendError::Io(error)) => {
                whole = false;
                let reason = format!("cannot write: {error}; retrying");
                fail_and_back_off(metrics, reason, &mut backoff).await;
            }
        }
    }
    done
}

/// fsyncs and, once that succeeded, acknowledges every batch written since the last fsync. A
/// failed fsync leaves nothing known durable: the writer has sealed that segment, so the batches
/// are written again to a new one and synced there.
pub(super) async fn sync_and_commit<F: FileSystem>(
    writer: &mut Writer<F>,
    unsynced: &mut Vec<Entry>,
    metrics: &ComponentMetrics,
) {
    let synced = writer.sync();
    commit_once_synced(writer, unsynced, metrics, synced).await;
}

/// Acknowledges `unsynced` after `synced`, the outcome of a sync that covered it; after a
/// failed one, writes it again and syncs (backing off) until a sync succeeds.
async fn commit_once_synced<F: FileSystem>(
    writer: &mut Writer<F>,
    unsynced: &mut Vec<Entry>,
    metrics: &ComponentMetrics,
    mut synced: std::io::Result<()>,
) {
    let mut backoff = FIRST_BACKOFF;
    while let Err(error) = synced {
        let reason = format!("fsync failed: {error}; writing again");
        fail_and_back_off(metrics, reason, &mut backoff).await;
        // Written again, so a copy that is durable exists; the reader may see both copies
        // (a duplicate, never a loss).
        let _ = append(writer, unsynced, WhenFull::Block, metrics).await;
        synced = writer.sync();
    }
    commit(std::mem::take(unsynced));
}

/// The first and the longest wait before a failed write or fsync is tried again.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Reports a failed write or fsync (counted, the buffer's `reason` shown in the sink's health
/// beside the sink's own, a rate-limited warning), then waits `backoff`, which doubles up to
/// [`MAX_BACKOFF`].
async fn fail_and_back_off(metrics: &ComponentMetrics, reason: String, backoff: &mut Duration) {
    metrics.error(ErrorKind::Io, 1);
    crate::warn_limited!(metrics, %reason, "The disk buffer failed; the sources wait while it retries.");
    metrics.set_buffer_failure(Some(format!("{REASON_PREFIX}{reason}")));
    tokio::time::sleep(*backoff).await;
    *backoff = (*backoff * 2).min(MAX_BACKOFF);
}

fn commit(group: Vec<Entry>) {
    for e in group {
        e.d.ack.commit(BatchStatus::Delivered);
    }
}

/// How long a stop waits for the sink to settle what it took from the log before the task ends
/// (and the sink may be stopped where it is: what it holds stays in the log).
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Feeds the sink from the log and acknowledges records as the sink commits them. With
/// `until`, only records below it are delivered (the rest stay in the log).
///
/// At a stop it feeds nothing more (a batch waiting for room in the sink's queue is let go: it
/// is still in the log), closes the sink's queue, waits for the writer's last sync and, at most
/// [`STOP_GRACE`], for the sink to settle what it holds; then it saves the cursor and says what
/// waits in the log for the next start. Everything not acknowledged is in the log, so the sink
/// may then be stopped without waiting for it.
async fn read_loop<F: FileSystem>(task: ReadTask<F>, fanout: Fanout) {
    let ReadTask {
        mut reader,
        mut writer_done,
        gauges,
        metrics,
        id,
        first_new,
        until,
        mut stop,
        hot,
    } = task;
    let shared = reader.shared().clone();
    let (status_tx, mut status_rx) = mpsc::unbounded_channel::<(u64, BatchStatus)>();
    let mut outstanding: usize = 0;
    let mut writer_finished = false;
    // Which sink the reader feeds: a reload may point it at a replacing sink (see `redeliver`).
    let target = fanout.readers();
    let mut fanout = Some(fanout);
    // The records handed to the sink and not yet settled: their payload, and the target's
    // version when they were sent. A record the sink a reload replaced did not commit is sent
    // again, to the new sink, in this run.
    let mut held: std::collections::HashMap<u64, (Bytes, u64)> = std::collections::HashMap::new();
    let mut redeliver: Vec<u64> = Vec::new();
    // Set at a stop: until when the sink's outstanding batches are waited for.
    let mut grace: Option<tokio::time::Instant> = None;
    let source: Arc<str> = Arc::from(format!("{id} (disk buffer)"));
    loop {
        // Deliver what is readable now.
        let mut caught_up = false;
        if let Some(out) = fanout.as_ref().filter(|_| grace.is_none()) {
            let mut again = std::mem::take(&mut redeliver).into_iter();
            loop {
                let (record, from_log) = match again.next() {
                    Some(seq) => match held.remove(&seq) {
                        Some((payload, _)) => (loghaul_buffer::Record { seq, payload }, false),
                        None => continue,
                    },
                    None => match reader.next() {
                        Ok(Some(record)) if until.is_some_and(|u| record.seq >= u) => {
                            caught_up = true;
                            break;
                        }
                        Ok(Some(record)) => (record, true),
                        Ok(None) => {
                            caught_up = true;
                            break;
                        }
                        Err(error) => {
                            metrics.error(ErrorKind::Io, 1);
                            crate::warn_limited!(metrics, %error, "Cannot read the disk buffer; trying again.");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            break;
                        }
                    },
                };
                let seq = record.seq;
                held.insert(seq, (record.payload.clone(), target.version()));
                let kept = if from_log { hot.take(seq) } else { None };
                let batch = match kept {
                    Some(mut batch) => {
                        if batch.source.is_empty() {
                            batch.source = source.clone();
                        }
                        Ok(batch)
                    }
                    None => decode(record.payload, &source),
                };
                match batch {
                    Ok(mut batch) => {
                        if seq < first_new {
                            gauges
                                .redelivered_events
                                .fetch_add(batch.len() as i64, Ordering::Relaxed);
                        }
                        let (finalizer, status) = BatchNotifier::new_with_receiver();
                        batch.finalizer = finalizer;
                        outstanding += 1;
                        let tx = status_tx.clone();
                        tokio::spawn(async move {
                            let _ = tx.send((seq, status.await));
                        });
                        // A stop does not wait for room in the sink's queue: the batch is let
                        // go (it comes back errored and stays in the log).
                        let sent = tokio::select! {
                            biased;
                            () = out.send(batch) => true,
                            () = stop.wait() => false,
                        };
                        // A long backlog is handed over in this loop: settle what the sink
                        // committed meanwhile, so the cursor moves and segments are freed as it
                        // drains, not only once it is caught up.
                        while let Ok((seq, status)) = status_rx.try_recv() {
                            outstanding -= 1;
                            let sent_to = held.remove(&seq);
                            settle(
                                &mut reader,
                                seq,
                                status,
                                sent_to,
                                &target,
                                &metrics,
                                &mut held,
                                &mut redeliver,
                            );
                        }
                        if !sent {
                            again.for_each(|seq| redeliver.push(seq));
                            break;
                        }
                    }
                    Err(error) => {
                        // The record passed its checksum but does not decode: written by a
                        // different version, or damaged before it was checksummed. It can never
                        // be delivered.
                        metrics.error(ErrorKind::Io, 1);
                        crate::warn_limited!(metrics, %error, seq, "A disk buffer record does not decode; it is skipped.");
                        gauges.undecodable.fetch_add(1, Ordering::Relaxed);
                        held.remove(&seq);
                        ack(&mut reader, seq, &metrics);
                    }
                }
            }
        }
        if grace.is_none() && stop.is_triggered() {
            // Feed nothing more: the sink's queue closes once what it holds is taken.
            grace = Some(tokio::time::Instant::now() + STOP_GRACE);
            fanout = None;
        }
        if writer_finished && caught_up {
            // Everything written was handed to the sink: close its queue so it flushes and ends.
            fanout = None;
        }
        let waiting = outstanding > 0 && grace.is_none_or(|g| tokio::time::Instant::now() < g);
        if fanout.is_none() && writer_finished && !waiting {
            break;
        }
        let appended = shared.appended.notified();
        tokio::select! {
            () = appended, if fanout.is_some() && grace.is_none() => {}
            Some((seq, status)) = status_rx.recv() => {
                outstanding -= 1;
                let sent_to = held.remove(&seq);
                settle(&mut reader, seq, status, sent_to, &target, &metrics, &mut held, &mut redeliver);
                while let Ok((seq, status)) = status_rx.try_recv() {
                    outstanding -= 1;
                    let sent_to = held.remove(&seq);
                    settle(&mut reader, seq, status, sent_to, &target, &metrics, &mut held, &mut redeliver);
                }
            }
            done = &mut writer_done, if !writer_finished => {
                let _ = done;
                writer_finished = true;
            }
            () = stop.wait(), if grace.is_none() => {}
            () = tokio::time::sleep_until(grace.unwrap_or_else(tokio::time::Instant::now)), if waiting && grace.is_some() => {}
        }
    }
    if let Err(error) = reader.persist() {
        tracing::warn!(%error, component = %id, "Cannot save the disk buffer's cursor; batches since the last saved one will be delivered again.");
    }
    if grace.is_some() {
        let left = shared.stats.snapshot();
        if left.records_pending > 0 {
            tracing::info!(component = %id, events = left.events_pending, batches = left.records_pending, bytes = left.bytes_on_disk, "Stopped with events waiting in the disk buffer; the next start delivers them.");
        }
    }
}

/// Records the sink's verdict on one record. Delivered and rejected (dead-lettered) records
/// leave the buffer; a record dropped uncommitted stays: it goes to the sink again now when it
/// was sent to a sink a reload has replaced since (`sent_to`: its payload and the target's
/// version then), and otherwise (the sink stopped) at the next start.
#[allow(clippy::too_many_arguments)]
fn settle<F: FileSystem>(
    reader: &mut Reader<F>,
    seq: u64,
    status: BatchStatus,
    sent_to: Option<(Bytes, u64)>,
    target: &super::fanout::Readers,
    metrics: &ComponentMetrics,
    held: &mut std::collections::HashMap<u64, (Bytes, u64)>,
    redeliver: &mut Vec<u64>,
) {
    match status {
        BatchStatus::Delivered | BatchStatus::Rejected => ack(reader, seq, metrics),
        BatchStatus::Errored
            if sent_to
                .as_ref()
                .is_some_and(|(_, v)| *v != target.version()) =>
        {
            if let Some(kept) = sent_to {
                held.insert(seq, kept);
                redeliver.push(seq);
            }
        }
        BatchStatus::Errored => {
            crate::warn_limited!(
                metrics,
                seq,
                "The sink did not commit a batch from its disk buffer; it stays there and is delivered again after a restart."
            );
        }
    }
}

/// Acknowledges a record. A cursor that cannot be saved (the disk is full) is retried with the
/// next acknowledgement; meanwhile a crash would deliver the record again, never lose it.
fn ack<F: FileSystem>(reader: &mut Reader<F>, seq: u64, metrics: &ComponentMetrics) {
    if let Err(error) = reader.ack(seq) {
        crate::warn_limited!(metrics, %error, "Cannot save the disk buffer's cursor; after a crash some batches would be delivered again.");
    }
}

/// The batches of the records the writer just appended, as the reader would decode them from
/// their payloads: a reader that keeps up with the writer takes them from here and decodes
/// nothing. Each is a copy of the sender's batch without its finalizer and budget charge, so
/// the source's acknowledgement still comes with the write and the fsync, whatever the sink
/// does. Bounded like the log's copy of recent records ([`RECENT_BYTES`]): a reader further
/// behind decodes what it reads.
#[derive(Default)]
struct Hot {
    inner: std::sync::Mutex<HotInner>,
}

#[derive(Default)]
struct HotInner {
    batches: std::collections::VecDeque<(u64, usize, EventBatch)>,
    bytes: usize,
}

impl Hot {
    fn lock(&self) -> std::sync::MutexGuard<'_, HotInner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps the batches just appended, with their sequence numbers, letting go of the oldest
    /// past the bound.
    fn keep<'a>(&self, written: impl Iterator<Item = (u64, &'a Entry)>) {
        let mut inner = self.lock();
        for (seq, e) in written {
            let size = e.record.len();
            inner.bytes += size;
            inner.batches.push_back((seq, size, detached(&e.d.batch)));
        }
        while inner.bytes > RECENT_BYTES {
            let Some((_, size, _)) = inner.batches.pop_front() else {
                break;
            };
            inner.bytes -= size;
        }
    }

    /// The batch of record `seq`, if it is still kept; older ones are let go.
    fn take(&self, seq: u64) -> Option<EventBatch> {
        let mut inner = self.lock();
        while let Some(&(first, size, _)) = inner.batches.front() {
            if first > seq {
                return None;
            }
            inner.bytes -= size;
            let (first, _, batch) = inner.batches.pop_front()?;
            if first == seq {
                return Some(batch);
            }
        }
        None
    }
}

/// What decoding the batch's record gives: the same events, without the finalizer and the
/// budget charge (their arena is shared, not copied).
fn detached(batch: &EventBatch) -> EventBatch {
    EventBatch {
        arena: batch.arena.clone(),
        events: batch.events.clone(),
        sd_elements: batch.sd_elements.clone(),
        sd_params: batch.sd_params.clone(),
        fields: batch.fields.clone(),
        received: batch.received,
        peers: batch.peers.clone(),
        source: batch.source.clone(),
        source_type: batch.source_type,
        finalizer: loghaul_core::Finalizer::none(),
        charge: None,
        raw_records: batch.raw_records,
    }
}

fn decode(payload: Bytes, source: &Arc<str>) -> Result<EventBatch, loghaul_core::DecodeError> {
    let mut batch = loghaul_core::decode_batch(payload)?;
    if batch.source.is_empty() {
        batch.source = source.clone();
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use loghaul_buffer::testing::MemFs;
    use loghaul_core::{BatchStatusReceiver, Event, Span};

    use super::*;
    use crate::metrics::{ComponentKind, Registry};
    use crate::pipeline::{QUEUE_BATCHES, input_queue, shutdown_pair};

    fn metrics() -> Arc<ComponentMetrics> {
        Registry::default().register("out", ComponentKind::Sink, "test")
    }

    /// A tracked batch of one event whose message is `text`.
    fn batch(text: &'static str) -> (EventBatch, BatchStatusReceiver) {
        let (finalizer, status) = BatchNotifier::new_with_receiver();
        let mut b = EventBatch::new(Bytes::from_static(text.as_bytes()), "src".into(), "test");
        b.events.push(Event {
            message: Span::new(0, text.len()).into(),
            ..Event::default()
        });
        b.finalizer = finalizer;
        (b, status)
    }

    /// `batch(text)` as the fan-out queues it for the writer: encoded, with an ack.
    fn delivery(text: &'static str) -> (Delivery, BatchStatusReceiver) {
        let (b, status) = batch(text);
        let prepared = Encode.prepare(&b);
        let ack = b.finalizer.ack();
        let d = Delivery {
            batch: Arc::new(b),
            prepared: Some(prepared),
            ack,
        };
        (d, status)
    }

    /// `delivery(text)` as the writer takes it from its queue.
    fn entry(text: &'static str) -> (Entry, BatchStatusReceiver) {
        let (d, status) = delivery(text);
        (Entry::new(d), status)
    }

    #[test]
    fn a_kept_batch_is_what_its_record_decodes_to() {
        let (mut b, _status) = batch("<13>Nov 27 12:00:00 host app: kept");
        b.peers.push(std::net::IpAddr::from([192, 0, 2, 7]));
        b.received = loghaul_core::Timestamp::from_nanos_shortest(1_764_244_800_123_456_000);
        let source: Arc<str> = Arc::from("out (disk buffer)");
        let Ok(decoded) = decode(Bytes::from(Encode.prepare(&b).bytes), &source) else {
            panic!("the record does not decode");
        };
        let kept = detached(&b);
        assert!(!kept.finalizer.is_tracked() && kept.charge.is_none());
        let (mut a, mut c) = (Vec::new(), Vec::new());
        loghaul_core::encode_batch(&kept, &mut a);
        loghaul_core::encode_batch(&decoded, &mut c);
        assert_eq!(a, c);
    }

    #[test]
    fn hot_gives_each_batch_once_in_order_and_lets_older_ones_go() {
        let hot = Hot::default();
        let ds: Vec<_> = ["a", "b", "c"].map(|t| entry(t).0).into_iter().collect();
        hot.keep([10, 11, 12].into_iter().zip(&ds));
        // 10 was read from the log (the reader fell behind): asking for 11 lets it go.
        assert_eq!(
            hot.take(11).map(|b| b.arena),
            Some(Bytes::from_static(b"b"))
        );
        assert!(hot.take(10).is_none());
        assert!(hot.take(11).is_none());
        assert_eq!(
            hot.take(12).map(|b| b.arena),
            Some(Bytes::from_static(b"c"))
        );
        assert_eq!(hot.lock().bytes, 0);
    }

    fn mem_log(fs: &MemFs, max_size: u64) -> (Writer<MemFs>, Reader<MemFs>) {
        let mut config = log_config(Path::new("/buf"), max_size, SyncMode::EveryBatch);
        config.segment_size = 4096;
        match loghaul_buffer::open(fs.clone(), config) {
            Ok((w, r, _)) => (w, r),
            Err(e) => panic!("open the log: {e}"),
        }
    }

    fn settled(status: &mut BatchStatusReceiver) -> Option<BatchStatus> {
        status.try_status()
    }

    #[tokio::test(start_paused = true)]
    async fn interval_sync_acknowledges_at_the_timed_fsync_not_before() {
        let fs = MemFs::new();
        let (writer, _reader) = mem_log(&fs, 1 << 20);
        let (tx, rx) = mpsc::channel(8);
        let every = Duration::from_secs(1);
        let task = tokio::spawn(write_loop(
            writer,
            rx,
            SyncMode::Interval(every),
            WhenFull::Block,
            metrics(),
            Arc::default(),
        ));
        let (d, mut status) = delivery("a");
        let _ = tx.send(d).await;
        tokio::time::sleep(Duration::from_millis(999)).await;
        assert_eq!(settled(&mut status), None, "written but not yet synced");
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(settled(&mut status), Some(BatchStatus::Delivered));
        // Closing the queue syncs and acknowledges what is left at once.
        let (d, mut status) = delivery("b");
        let _ = tx.send(d).await;
        drop(tx);
        let _ = task.await;
        assert_eq!(settled(&mut status), Some(BatchStatus::Delivered));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_fsync_is_written_again_after_the_backoff_then_acknowledged() {
        let fs = MemFs::new();
        let (writer, mut reader) = mem_log(&fs, 1 << 20);
        let metrics = metrics();
        let (tx, rx) = mpsc::channel(8);
        let task = tokio::spawn(write_loop(
            writer,
            rx,
            SyncMode::EveryBatch,
            WhenFull::Block,
            metrics.clone(),
            Arc::default(),
        ));
        fs.fail_next_sync();
        let (d, mut status) = delivery("a");
        let started = tokio::time::Instant::now();
        let _ = tx.send(d).await;
        tokio::time::sleep(FIRST_BACKOFF - Duration::from_millis(1)).await;
        assert_eq!(settled(&mut status), None, "not durable: not acknowledged");
        assert_eq!(metrics.errors(ErrorKind::Io), 1);
        assert!(
            metrics
                .reported_health()
                .1
                .is_some_and(|r| r.contains("fsync failed")),
            "{:?}",
            metrics.reported_health()
        );
        drop(tx);
        let _ = task.await;
        assert!(started.elapsed() >= FIRST_BACKOFF);
        assert_eq!(settled(&mut status), Some(BatchStatus::Delivered));
        // Both copies are in the log (a duplicate, never a loss).
        let mut seen = 0;
        while let Ok(Some(_)) = reader.next() {
            seen += 1;
        }
        assert_eq!(seen, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_log_drops_newest_or_blocks_as_when_full_says() {
        let fs = MemFs::new();
        let (mut writer, mut reader) = mem_log(&fs, 16 << 10);
        let metrics = metrics();
        let big: &'static str = "x".repeat(3000).leak();
        // A group larger than the whole log goes in one batch at a time, as far as it fits.
        let group: Vec<Entry> = (0..8).map(|_| entry(big).0).collect();
        let fitted = append(&mut writer, &group, WhenFull::DropNewest, &metrics).await;
        assert!((2..8).contains(&fitted), "{fitted}");
        // Full: drop_newest drops at once.
        assert_eq!(
            append(&mut writer, &[entry(big).0], WhenFull::DropNewest, &metrics).await,
            0
        );
        assert!(fitted >= 2, "{fitted}");
        // Blocking: the append waits for the reader to free a segment.
        let more = vec![entry(big).0];
        let blocked = tokio::time::timeout(
            Duration::from_secs(10),
            append(&mut writer, &more, WhenFull::Block, &metrics),
        )
        .await;
        assert!(blocked.is_err(), "a full log holds a blocking append");
        for _ in 0..fitted {
            match reader.next() {
                Ok(Some(record)) => ack(&mut reader, record.seq, &metrics),
                other => panic!("a record: {:?}", other.map(|r| r.map(|r| r.seq))),
            }
        }
        let done = tokio::time::timeout(
            Duration::from_secs(10),
            append(&mut writer, &more, WhenFull::Block, &metrics),
        )
        .await;
        assert_eq!(done.ok(), Some(1), "room again once the records are acked");
    }

    #[tokio::test]
    async fn a_batch_larger_than_a_record_is_rejected_and_counted() {
        let metrics = metrics();
        let (small, mut small_status) = entry("a");
        let (mut huge, mut huge_status) = entry("b");
        huge.record = Bytes::from(vec![0; MAX_RECORD as usize + 1]);
        let kept = reject_oversized(vec![small, huge], &metrics);
        assert_eq!(kept.len(), 1);
        assert_eq!(&kept[0].d.batch.arena[..], b"a");
        assert_eq!(
            metrics.discarded_count(DiscardReason::WriteFailed),
            1,
            "the huge batch's one event"
        );
        assert_eq!(settled(&mut huge_status), Some(BatchStatus::Rejected));
        assert_eq!(settled(&mut small_status), None);
        drop(kept);
    }

    #[tokio::test]
    async fn records_leave_the_log_once_the_sink_commits_and_stay_otherwise() -> anyhow::Result<()>
    {
        let dir = tempfile::tempdir()?;
        let metrics = metrics();
        let open = |metrics: &Arc<ComponentMetrics>| {
            let (sink_tx, input) = input_queue(metrics.clone(), None, QUEUE_BATCHES);
            let (trigger, stop) = shutdown_pair();
            let Started {
                sender: tx, done, ..
            } = start(DiskOptions {
                id: "out".into(),
                dir: dir.path().join("buf"),
                max_size: 1 << 20,
                sync: SyncMode::EveryBatch,
                when_full: WhenFull::Block,
                metrics: metrics.clone(),
                sink: sink_tx,
                stop,
            })?;
            let fanout = Fanout::new(
                vec![tx],
                Registry::default().register("src", ComponentKind::Source, "test"),
            );
            anyhow::Ok((fanout, input, done, trigger))
        };
        let (fanout, mut input, done, _trigger) = open(&metrics)?;
        let (a, a_status) = batch("a");
        let (b, b_status) = batch("b");
        fanout.send(a).await;
        fanout.send(b).await;
        // The source's acknowledgement covers the write to the buffer, not the sink.
        assert_eq!(a_status.await, BatchStatus::Delivered);
        assert_eq!(b_status.await, BatchStatus::Delivered);
        let (Some(da), Some(db)) = (input.recv().await, input.recv().await) else {
            anyhow::bail!("the sink gets both batches");
        };
        assert_eq!(
            (&da.batch.arena[..], &db.batch.arena[..]),
            (&b"a"[..], &b"b"[..])
        );
        da.ack.commit(BatchStatus::Delivered);
        drop(da.batch);
        // "b" is dropped uncommitted: it stays in the log.
        drop(db);
        drop(fanout);
        while input.recv().await.is_some() {}
        done.await?;

        let metrics = crate::metrics::Registry::default().register("out", ComponentKind::Sink, "t");
        let (fanout, mut input, done, _trigger) = open(&metrics)?;
        let Some(again) = input.recv().await else {
            anyhow::bail!("the uncommitted batch comes again");
        };
        assert_eq!(&again.batch.arena[..], b"b");
        again.ack.commit(BatchStatus::Delivered);
        drop(again.batch);
        drop(fanout);
        assert!(input.recv().await.is_none(), "only b was left");
        done.await?;
        Ok(())
    }
}
