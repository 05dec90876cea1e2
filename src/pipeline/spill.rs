//! What a stop does with a memory buffer its sink could not drain in time: it writes it to disk.
//!
//! ```text
//!  stop ─► sources drain ─► sinks drain their memory buffers ──(done in time)──► exit 0
//!                                    │ not done when the spill reserve of shutdown_timeout
//!                                    ▼ begins (a quarter of it, at most 5 s)
//!          Handover: the sink's recv says "no more"; what is queued, and whatever upstreams
//!          still send, is appended to <data_dir>/buffers/<sink>/ (the disk buffer's log),
//!          fsynced, then committed as delivered
//!                                    │ next start
//!                                    ▼
//!          pipeline::disk::resume: a reader feeds the log's records to the sink ahead of new
//!          events and acknowledges each once the sink committed it
//! ```
//!
//! The log is the disk buffer's own format, so `loghaul buffer inspect` reads it, and a sink
//! moved from a disk buffer to a memory one is fed what its old buffer still held. The batches
//! the sink itself holds at the deadline (a request it keeps retrying) are written too, first:
//! the queue lists them until the sink settles their acks. The sink may yet deliver one of those
//! before the exit, and the next start then delivers it again: at least once, never lost.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use loghaul_buffer::{RealFs, Writer};
use loghaul_config::WhenFull;
use loghaul_core::EventBatch;
use tokio::sync::oneshot;

use super::disk;
use super::queue::{Delivery, Handover, Prepared};
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
    /// Takes the queue from the sink and writes it to disk on a thread of its own; the receiver
    /// resolves once the queue is closed (every upstream gone) and all of it is on disk.
    ///
    /// # Errors
    ///
    /// The thread could not be started.
    pub fn start(self) -> std::io::Result<oneshot::Receiver<()>> {
        let in_hand = self.handover.start();
        let (done_tx, done_rx) = oneshot::channel();
        let id = self.id.clone();
        super::spawn_on_own_thread(format!("spill-{id}"), id, self.run(in_hand), done_tx)?;
        Ok(done_rx)
    }

    async fn run(self, in_hand: Vec<Arc<EventBatch>>) {
        let SpillPlan {
            id,
            dir,
            mut writer,
            handover,
            metrics,
        } = self;
        let (mut events, mut batches, mut failed) = (0usize, 0usize, 0usize);
        // The sink still holds these and reports on them itself (its ack): their copies here
        // carry none. Should it still deliver one before the exit, the next start delivers it
        // again (at least once).
        let held = in_hand.len();
        let mut in_hand = in_hand.into_iter().map(|batch| Delivery {
            ack: loghaul_core::Finalizer::none().ack(),
            prepared: None,
            batch,
        });
        loop {
            let next = match in_hand.next() {
                Some(d) => Some(d),
                None => handover.recv().await,
            };
            let Some(first) = next else { break };
            let mut group = vec![encoded(first)];
            let mut bytes = group[0].prepared.as_ref().map_or(0, |p| p.bytes.len());
            while bytes < GROUP_BYTES
                && let Some(d) = in_hand.next().or_else(|| handover.try_recv())
            {
                let d = encoded(d);
                bytes += d.prepared.as_ref().map_or(0, |p| p.bytes.len());
                group.push(d);
            }
            let log = match &mut writer {
                Some(log) => log,
                None => match open(&id, &dir) {
                    Ok(log) => writer.insert(log),
                    Err(error) => {
                        failed += group.iter().map(|d| d.batch.len()).sum::<usize>();
                        tracing::error!(component = %id, error = format!("{error:#}"), "Cannot write the memory buffer to disk at the stop; its events are lost to this sink.");
                        continue;
                    }
                },
            };
            let group = disk::reject_oversized(group, &metrics);
            // A full log is not waited on at a stop: what does not fit is lost, and said so.
            let mut group = group;
            let written = disk::append(log, &group, WhenFull::DropNewest, &metrics).await;
            for d in group.split_off(written) {
                failed += d.batch.len();
                d.ack.commit(loghaul_core::BatchStatus::Errored);
            }
            events += group.iter().map(|d| d.batch.len()).sum::<usize>();
            batches += group.len();
            disk::sync_and_commit(log, &mut group, &metrics).await;
        }
        if batches > 0 {
            tracing::info!(component = %id, events, batches, in_hand = held, path = %dir.display(), "The sink could not drain its memory buffer before the stop; wrote it to disk, to be delivered at the next start.");
        }
        if failed > 0 {
            tracing::error!(component = %id, events = failed, "Events of the memory buffer could not be written to disk at the stop (the log is full or cannot be written); they are lost to this sink.");
        }
    }
}

/// The delivery with its batch encoded for the log, in place of what the sink's own prepare
/// step made of it.
fn encoded(d: Delivery) -> Delivery {
    let mut bytes = Vec::with_capacity(loghaul_core::encoded_size(&d.batch));
    loghaul_core::encode_batch(&d.batch, &mut bytes);
    Delivery {
        prepared: Some(Prepared {
            bytes,
            ends: Vec::new(),
        }),
        ..d
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
