//! What happened to sent batches: acknowledgements move committed offsets, a failed batch
//! rewinds its files, and committed offsets become checkpoints.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use loghaul_core::BatchStatus;

use crate::metrics::{ComponentMetrics, ErrorKind, Health};
use crate::sources::file::checkpoint::{Entry, FileId, Store};

use super::{REWIND_PAUSE, Tailer};

impl Tailer {
    pub(super) fn apply_ends(&mut self, ends: &[(FileId, u32, u64)]) {
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
    pub(super) fn poll_acks(&mut self, wait: bool) {
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
    pub(super) fn rewind(&mut self, ends: &[(FileId, u32, u64)]) {
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

    pub(super) fn checkpoint(&mut self) {
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
pub(super) fn checkpoint_reporter(
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
