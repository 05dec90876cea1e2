//! What a stop does with a memory buffer its sink could not drain in time: it writes it to disk.
//!
//! ```text
//!  stop ─► sources drain ─► sinks drain their memory buffers ──(done in time)──► exit 0
//!                                    │ not done when the spill reserve of shutdown_timeout
//!                                    ▼ begins (a quarter of it, at most 5 s)
//!          Handover: the sink's recv says "no more"; what the sink holds, what is queued, and
//!          whatever upstreams still send, is appended to <data_dir>/buffers/<sink>/ (the disk
//!          buffer's log), fsynced, then settled as delivered for the sources; then the sink is
//!          stopped where it is (everything it held is on disk)
//!                                    │ next start
//!                                    ▼
//!          pipeline::disk::resume: a reader feeds the log's records to the sink ahead of new
//!          events and acknowledges each once the sink committed it
//! ```
//!
//! The log is the disk buffer's own format, so `loghaul buffer inspect` reads it, and a sink
//! moved from a disk buffer to a memory one is fed what its old buffer still held. The batches
//! the sink itself holds at the deadline (a request it keeps retrying) are written too, first:
//! the queue lists them until the sink settles their acks. Once they are durable they are
//! marked saved ([`Held::saved`]), so the sink's ack for them reports them delivered however the
//! sink ends: the sources settle them (a file source's checkpoint moves past them, a forward
//! client gets its ack) and do not send them again. The sink may yet deliver one of those in its
//! last moments, and the next start then delivers it again: duplicates are bounded by what the
//! sink had in flight, never a loss.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use bytes::Bytes;
use loghaul_buffer::{RealFs, Writer};
use loghaul_config::WhenFull;
use tokio::sync::oneshot;

use super::disk::{self, Entry};
use super::queue::{Delivery, Handover, Held};
use crate::metrics::ComponentMetrics;

/// Up to this many bytes are appended, then fsynced and committed, at a time.
const GROUP_BYTES: usize = 8 << 20;

/// How one memory-buffered sink's queue would be spilled at a stop.
pub struct SpillPlan {
    pub id: String,
    pub dir: PathBuf,
    /// The log's writer when the log was opened at start (to resume a previous spill); opened
    /// at the spill otherwise.
    pub writer: Option<Writer<RealFs>>,
    pub handover: Handover,
    pub metrics: Arc<ComponentMetrics>,
}

impl SpillPlan {
    /// Takes the queue from the sink and writes it to disk on a thread of its own. The first
    /// receiver resolves once what the sink holds is on disk (the sink may then be stopped:
    /// its sources settle those batches); the second once the queue is closed (every upstream
    /// gone) and all of it is on disk, with whether all of it could be written.
    ///
    /// # Errors
    ///
    /// The thread could not be started.
    pub fn start(self) -> std::io::Result<(oneshot::Receiver<bool>, oneshot::Receiver<bool>)> {
        let in_hand = self.handover.start();
        let (done_tx, done_rx) = oneshot::channel();
        let (held_tx, held_rx) = oneshot::channel();
        let (written_tx, written_rx) = oneshot::channel();
        let id = self.id.clone();
        let run = async move {
            let _ = written_tx.send(self.run(in_hand, held_tx).await);
        };
        super::spawn_on_own_thread(format!("spill-{id}"), id, run, done_tx)?;
        drop(done_rx);
        Ok((held_rx, written_rx))
    }

    /// Writes everything; true when nothing was lost. `held` tells, once the sink's own batches
    /// are done with, whether all of them are on disk.
    async fn run(self, in_hand: Vec<Held>, held: oneshot::Sender<bool>) -> bool {
        let mut held_tx = Some(held);
        let mut held_saved = true;
        let SpillPlan {
            id,
            dir,
            mut writer,
            handover,
            metrics,
        } = self;
        let (mut events, mut batches, mut failed) = (0usize, 0usize, 0usize);
        // The sink still holds these and reports on them itself (its ack): their copies here
        // carry none, and once durable they are marked saved (see the module's docs).
        let held = in_hand.len();
        let mut in_hand = in_hand.into_iter().map(|h| {
            let d = Delivery {
                ack: loghaul_core::Finalizer::none().ack(),
                prepared: None,
                batch: h.batch().clone(),
            };
            (d, Some(h))
        });
        if in_hand.len() == 0
            && let Some(tx) = held_tx.take()
        {
            let _ = tx.send(true);
        }
        loop {
            let next = match in_hand.next() {
                Some(d) => Some(d),
                None => handover.recv().await.map(|d| (d, None)),
            };
            let Some((first, first_held)) = next else {
                break;
            };
            let mut group = vec![encoded(first)];
            let mut saved: Vec<Held> = first_held.into_iter().collect();
            let mut bytes = group[0].record.len();
            while bytes < GROUP_BYTES
                && let Some((d, h)) = in_hand
                    .next()
                    .or_else(|| handover.try_recv().map(|d| (d, None)))
            {
                let e = encoded(d);
                bytes += e.record.len();
                group.push(e);
                saved.extend(h);
            }
            let log = match &mut writer {
                Some(log) => log,
                None => match open(&id, &dir) {
                    Ok(log) => writer.insert(log),
                    Err(error) => {
                        failed += group.iter().map(|e| e.d.batch.len()).sum::<usize>();
                        held_saved &= saved.is_empty();
                        tracing::error!(component = %id, error = format!("{error:#}"), "Cannot write the memory buffer to disk at the stop; its events are lost to this sink.");
                        continue;
                    }
                },
            };
            // The sink's batches lead the group: they are marked saved as far as the group was
            // written (one the log refuses as too large is no more saved than one that does not
            // fit).
            let before = group.len();
            let group = disk::reject_oversized(group, &metrics);
            let refused = before - group.len();
            // A full log is not waited on at a stop: what does not fit is lost, and said so.
            let mut group = group;
            let written = disk::append(log, &group, WhenFull::DropNewest, &metrics).await;
            for e in group.split_off(written) {
                failed += e.d.batch.len();
                e.d.ack.commit(loghaul_core::BatchStatus::Errored);
            }
            events += group.iter().map(|e| e.d.batch.len()).sum::<usize>();
            batches += group.len();
            disk::sync_and_commit(log, &mut group, &metrics).await;
            if refused == 0 && written >= saved.len() {
                for h in &saved {
                    h.saved();
                }
            } else {
                held_saved &= saved.is_empty();
            }
            if in_hand.len() == 0
                && let Some(tx) = held_tx.take()
            {
                let _ = tx.send(held_saved);
            }
        }
        if batches > 0 {
            tracing::info!(component = %id, events, batches, in_hand = held, path = %dir.display(), "The sink could not drain its memory buffer before the stop; wrote it to disk, to be delivered at the next start.");
        }
        if failed > 0 {
            tracing::error!(component = %id, events = failed, "Events of the memory buffer could not be written to disk at the stop (the log is full or cannot be written); they are lost to this sink.");
        }
        failed == 0
    }
}

/// The delivery with its batch encoded for the log, in place of what the sink's own prepare
/// step made of it.
fn encoded(d: Delivery) -> Entry {
    // The log holds decoded records: whatever sink reads it back at the next start.
    let decoded;
    let batch = if d.batch.raw_records {
        decoded = loghaul_codec::forward::decode_raw(&d.batch);
        &decoded
    } else {
        &*d.batch
    };
    let mut bytes = Vec::with_capacity(loghaul_core::encoded_size(batch));
    loghaul_core::encode_batch(batch, &mut bytes);
    Entry {
        d: Delivery {
            prepared: None,
            ..d
        },
        record: Bytes::from(bytes),
    }
}

fn open(id: &str, dir: &std::path::Path) -> anyhow::Result<Writer<RealFs>> {
    let config = disk::log_config(
        dir,
        disk::SPILL_MAX_SIZE,
        loghaul_config::SyncMode::EveryBatch,
    );
    let (writer, _reader, recovery) = loghaul_buffer::open(RealFs, config)
        .with_context(|| format!("cannot open {}", dir.display()))?;
    if recovery.records_pending > 0 {
        tracing::info!(component = %id, %recovery, "The memory buffer's log still held batches; the new ones go after them.");
    }
    Ok(writer)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use loghaul_core::{BatchNotifier, BatchStatus, BatchStatusReceiver, Event, EventBatch, Span};

    use super::*;
    use crate::metrics::{ComponentKind, Registry};
    use crate::pipeline::{Fanout, Input, QueueLimits, bounded_queue};

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

    struct Setup {
        fanout: Fanout,
        input: Input,
        plan: SpillPlan,
    }

    fn setup(dir: PathBuf) -> Setup {
        let reg = Registry::default();
        let metrics = reg.register("out", ComponentKind::Sink, "test");
        let (tx, mut input) = bounded_queue(metrics.clone(), None, QueueLimits::batches(8));
        let handover = input.handover();
        let fanout = Fanout::new(vec![tx], reg.register("src", ComponentKind::Source, "test"));
        let plan = SpillPlan {
            id: "out".into(),
            dir,
            writer: None,
            handover,
            metrics,
        };
        Setup {
            fanout,
            input,
            plan,
        }
    }

    /// The messages of the batches in the log at `dir`, in order.
    fn logged(dir: &std::path::Path) -> anyhow::Result<Vec<Vec<u8>>> {
        let config = disk::log_config(dir, disk::SPILL_MAX_SIZE, loghaul_config::SyncMode::Never);
        let (_w, mut reader, _) = loghaul_buffer::open(RealFs, config)?;
        let mut out = Vec::new();
        while let Some(record) = reader.next()? {
            let batch = loghaul_core::decode_batch(record.payload)?;
            out.push(batch.arena.to_vec());
        }
        Ok(out)
    }

    #[tokio::test]
    async fn what_the_sink_holds_goes_first_then_the_queue_and_all_settle_delivered()
    -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("buffers/out");
        let Setup {
            fanout,
            mut input,
            plan,
        } = setup(dir.clone());
        let (a, a_status) = batch("held");
        let (b, b_status) = batch("queued-1");
        let (c, c_status) = batch("queued-2");
        fanout.send(a).await;
        fanout.send(b).await;
        fanout.send(c).await;
        // The sink took "held" and is still retrying it.
        let Some(held) = input.recv().await else {
            anyhow::bail!("the sink's batch");
        };
        let (held_rx, written_rx) = plan.start()?;
        assert!(held_rx.await?, "the sink's batch is on disk");
        // The sink gets nothing more. (`try_recv`: `recv` would wait for the queue's lock,
        // which the spill holds while it waits for upstreams, and return `None` after.)
        assert!(input.try_recv().is_none(), "the sink gets nothing more");
        // Stopped where it is: its ack, dropped uncommitted, still reports the batch delivered.
        drop(held);
        drop(fanout);
        assert!(written_rx.await?, "nothing lost");
        assert_eq!(a_status.await, BatchStatus::Delivered);
        assert_eq!(b_status.await, BatchStatus::Delivered);
        assert_eq!(c_status.await, BatchStatus::Delivered);
        assert_eq!(
            logged(&dir)?,
            [b"held".to_vec(), b"queued-1".to_vec(), b"queued-2".to_vec()]
        );
        Ok(())
    }

    /// A deliver's queue holds records it never decoded; the log holds them decoded, for
    /// whatever sink reads it at the next start.
    #[tokio::test]
    async fn undecoded_records_are_spilled_decoded() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("buffers/out");
        let reg = Registry::default();
        let metrics = reg.register("out", ComponentKind::Sink, "fluent");
        let (tx, mut input) = bounded_queue(
            metrics.clone(),
            Some(Arc::new(crate::pipeline::queue::PassOn)),
            QueueLimits::batches(8),
        );
        let plan = SpillPlan {
            id: "out".into(),
            dir: dir.clone(),
            writer: None,
            handover: input.handover(),
            metrics,
        };
        let fanout = Fanout::new(
            vec![tx],
            reg.register("src", ComponentKind::Source, "fluent"),
        );
        fanout.send(crate::pipeline::queue::raw_batch()).await;
        let (_, written_rx) = plan.start()?;
        drop(fanout);
        assert!(written_rx.await?, "nothing lost");
        let config = disk::log_config(&dir, disk::SPILL_MAX_SIZE, loghaul_config::SyncMode::Never);
        let (_w, mut reader, _) = loghaul_buffer::open(RealFs, config)?;
        let Some(record) = reader.next()? else {
            anyhow::bail!("the batch is in the log");
        };
        let batch = loghaul_core::decode_batch(record.payload)?;
        assert!(!batch.raw_records);
        let e = &batch.events[0];
        assert_eq!(batch.str(e.message.or_empty()), b"hi");
        assert_eq!(batch.lookup(e, "n"), Some(loghaul_core::Value::Int(1)));
        Ok(())
    }

    #[tokio::test]
    async fn a_log_that_cannot_be_opened_loses_the_queue_and_says_so() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        // A file where the log's directory should be.
        std::fs::write(tmp.path().join("blocker"), b"")?;
        let Setup {
            fanout,
            mut input,
            plan,
        } = setup(tmp.path().join("blocker/out"));
        let (a, a_status) = batch("held");
        let (b, b_status) = batch("queued");
        fanout.send(a).await;
        fanout.send(b).await;
        let Some(held) = input.recv().await else {
            anyhow::bail!("the sink's batch");
        };
        let (held_rx, written_rx) = plan.start()?;
        // The upstreams end first: after a failed open, the answer for the sink's batches
        // comes only once the spill is over (as the topology's `unwrap_or(false)` reads it).
        drop(fanout);
        assert!(
            !held_rx.await.unwrap_or(false),
            "the sink's batch is not on disk"
        );
        assert!(!written_rx.await?, "the queued batch was lost");
        assert_eq!(b_status.await, BatchStatus::Errored);
        // Not saved: the sink's own verdict stands.
        held.ack.commit(BatchStatus::Delivered);
        drop(held.batch);
        assert_eq!(a_status.await, BatchStatus::Delivered);
        Ok(())
    }

    #[tokio::test]
    async fn an_empty_queue_with_nothing_in_hand_writes_no_log() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("buffers/out");
        let Setup { fanout, plan, .. } = setup(dir.clone());
        let (held_rx, written_rx) = plan.start()?;
        assert!(held_rx.await?, "nothing held: done at once");
        drop(fanout);
        assert!(written_rx.await?);
        assert!(!dir.exists(), "no log is created for nothing");
        Ok(())
    }
}
