//! Builds the running graph from a validated [`Config`] and stops it cleanly. It knows no
//! component type: every component is built through its kind's trait ([`BuildSource`],
//! [`BuildTransform`], [`BuildSink`]).
//!
//! Start order: register metrics, build every sink and create its input queue (with the
//! capacity and [`crate::pipeline::Prepare`] step the sink asks for, bounded as its `buffer`
//! says; a disk buffer is opened, recovered and put between the sink's inputs and its queue),
//! create the transforms' queues, wire each source's and transform's fan-out to the components
//! that name it in `inputs`, build every source (binding its sockets, so a busy port fails the
//! start before anything runs), then spawn sinks, transforms and sources.
//!
//! Stop order is the data's order: sources stop accepting and drain their connections; when a
//! source ends, its fan-out's senders drop; a transform ends when all its inputs have; a sink
//! ends when its queue is closed and empty, after a final flush. Nothing is cut off mid-batch.
//! A disk buffer's writer ends when its queue closes (after a last fsync), and its reader once
//! the sink has had everything written and settled what it took; what it could not deliver
//! stays on disk for the next start. Memory buffers not drained when the last part of
//! `shutdown_timeout` begins are written to disk (`pipeline::spill`) and fed to their sinks at
//! the next start. Every fan-out charges the global memory budget (`limits.memory`).

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context as _;
use loghaul_config::{BufferKind, ComponentKind, ComponentSet as _};
use loghaul_core::MemoryBudget;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::metrics::Registry;
use crate::pipeline::spill::SpillPlan;
use crate::pipeline::{
    BoxFuture, Fanout, Input, InputSender, QUEUE_BATCHES, QueueLimits, ShutdownSignal,
    ShutdownTrigger, bounded_queue, input_queue, shutdown_pair,
};
use crate::sinks::{BuiltSink, ReopenGeneration, SinkContext, SinkThread};
use crate::sources::{RunningSource, SourceContext};
use crate::transforms::TransformContext;

/// The most batches a memory buffer's queue holds, whatever its `max_events`.
const MAX_QUEUE_BATCHES: usize = 1 << 16;

/// A running graph.
pub struct Topology {
    trigger: ShutdownTrigger,
    signal: ShutdownSignal,
    sources: Vec<JoinHandle<()>>,
    transforms: Vec<JoinHandle<()>>,
    sinks: Vec<(String, tokio::sync::oneshot::Receiver<()>)>,
    /// Memory-buffered sinks' queues, to write to disk if a stop runs out of time.
    spills: Vec<SpillPlan>,
}

/// The part of `shutdown_timeout` kept for writing undrained memory buffers to disk: a quarter
/// of it, at most this.
const SPILL_RESERVE: Duration = Duration::from_secs(5);

/// Starts every component of `config`.
///
/// # Errors
///
/// A component could not be built (a port in use, a sink's thread that would not start); no
/// component has started running then.
pub async fn start(
    config: &Config,
    registry: &Registry,
    reopen: ReopenGeneration,
) -> anyhow::Result<Topology> {
    let (trigger, signal) = shutdown_pair();
    let budget = MemoryBudget::new(config.limits.memory);
    let mut buffer_tasks: Vec<(String, tokio::sync::oneshot::Receiver<()>)> = Vec::new();
    let mut spills = Vec::new();

    // Input queues for everything that has inputs.
    let mut senders: HashMap<&str, InputSender> = HashMap::new();
    let mut sinks_built: Vec<(String, BuiltSink, Input)> = Vec::new();
    for sink in &config.sinks {
        let metrics = registry.register(&sink.id, ComponentKind::Sink, sink.config.type_name());
        let built = sink
            .config
            .component()
            .build(SinkContext {
                id: sink.id.as_str().into(),
                metrics: metrics.clone(),
                reopen: reopen.clone(),
                retry: sink.retry,
                data_dir: config.data_dir.clone(),
                tls: sink.tls.clone(),
            })
            .with_context(|| format!("sink '{}'", sink.id))?;
        let tx = match &sink.buffer.kind {
            BufferKind::Memory { max_events } => {
                let limits = QueueLimits {
                    // The cap in events binds, not the one in batches: small batches (one HTTP
                    // request each) would otherwise fill the queue long before it.
                    batches: max_events.map_or(built.queue_batches, |m| {
                        m.min(MAX_QUEUE_BATCHES).max(built.queue_batches)
                    }),
                    max_events: *max_events,
                    when_full: sink.buffer.when_full,
                };
                let (tx, mut rx) = bounded_queue(metrics.clone(), built.prepare.clone(), limits);
                // What an earlier stop wrote to disk for this sink goes first.
                let dir = config.data_dir.join("buffers").join(&sink.id);
                let resumed =
                    crate::pipeline::disk::resume(&sink.id, &dir, &metrics, tx.clone())
                        .with_context(|| format!("sink '{}': memory buffer's log", sink.id))?;
                let writer = resumed.map(|(writer, done)| {
                    buffer_tasks.push((format!("{} (spilled buffer)", sink.id), done));
                    writer
                });
                spills.push(SpillPlan {
                    id: sink.id.clone(),
                    dir,
                    writer,
                    handover: rx.handover(),
                    metrics,
                });
                sinks_built.push((sink.id.clone(), built, rx));
                tx
            }
            BufferKind::Disk { max_size, sync } => {
                let (sink_tx, rx) =
                    input_queue(metrics.clone(), built.prepare.clone(), built.queue_batches);
                sinks_built.push((sink.id.clone(), built, rx));
                let (tx, done) = crate::pipeline::disk::start(crate::pipeline::disk::DiskOptions {
                    id: sink.id.clone(),
                    dir: config.data_dir.join("buffers").join(&sink.id),
                    max_size: *max_size,
                    sync: *sync,
                    when_full: sink.buffer.when_full,
                    metrics,
                    sink: sink_tx,
                })
                .with_context(|| format!("sink '{}': disk buffer", sink.id))?;
                buffer_tasks.push((format!("{} (disk buffer)", sink.id), done));
                tx
            }
        };
        senders.insert(&sink.id, tx);
    }
    let mut transform_inputs = Vec::new();
    for transform in &config.transforms {
        let metrics = registry.register(
            &transform.id,
            ComponentKind::Transform,
            transform.config.type_name(),
        );
        let (tx, rx) = input_queue(metrics.clone(), None, QUEUE_BATCHES);
        senders.insert(&transform.id, tx);
        transform_inputs.push((transform, metrics, rx));
    }
    // Who reads from whom.
    let mut downstream: HashMap<&str, Vec<InputSender>> = HashMap::new();
    let consumers = config
        .transforms
        .iter()
        .map(|t| (t.id.as_str(), &t.inputs))
        .chain(config.sinks.iter().map(|s| (s.id.as_str(), &s.inputs)));
    for (id, inputs) in consumers {
        for input in inputs {
            if let Some(tx) = senders.get(id) {
                downstream
                    .entry(input.as_str())
                    .or_default()
                    .push(tx.clone());
            }
        }
    }
    // Only fan-outs may hold senders from here on, or queues would never close at shutdown.
    drop(senders);

    // Build (and so bind) every source before anything runs.
    let mut sources_built: Vec<RunningSource> = Vec::new();
    for source in &config.sources {
        let metrics =
            registry.register(&source.id, ComponentKind::Source, source.config.type_name());
        let fanout = Fanout::new(
            downstream.remove(source.id.as_str()).unwrap_or_default(),
            metrics.clone(),
        )
        .with_budget(budget.clone());
        let running = source
            .config
            .component()
            .build(SourceContext {
                id: source.id.as_str().into(),
                metrics,
                fanout,
                shutdown: signal.clone(),
                acknowledgements: source.acknowledgements,
                data_dir: config.data_dir.clone(),
                shutdown_timeout: config.shutdown_timeout,
                tls: source.tls.clone(),
            })
            .await
            .with_context(|| format!("source '{}'", source.id))?;
        sources_built.push(running);
    }

    let mut transforms_built: Vec<BoxFuture<'static, ()>> = Vec::new();
    for (transform, metrics, input) in transform_inputs {
        let fanout = Fanout::new(
            downstream.remove(transform.id.as_str()).unwrap_or_default(),
            metrics.clone(),
        )
        .with_budget(budget.clone());
        let task = transform
            .config
            .component()
            .build(TransformContext {
                metrics,
                input,
                fanout,
            })
            .with_context(|| format!("transform '{}'", transform.id))?;
        transforms_built.push(task);
    }
    drop(downstream);

    let mut sinks = Vec::new();
    for (id, built, input) in sinks_built {
        sinks.push((id.clone(), spawn_sink(&id, built, input)?));
    }
    // A disk buffer's reader ends after its sink has taken (and acknowledged) what it could.
    sinks.extend(buffer_tasks);
    let transforms = transforms_built.into_iter().map(tokio::spawn).collect();
    let sources = sources_built.into_iter().map(tokio::spawn).collect();

    Ok(Topology {
        trigger,
        signal,
        sources,
        transforms,
        sinks,
        spills,
    })
}

/// Starts a sink where it asked to run; the receiver resolves when it has finished.
fn spawn_sink(
    id: &str,
    built: BuiltSink,
    input: Input,
) -> anyhow::Result<tokio::sync::oneshot::Receiver<()>> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let run = (built.run)(input);
    match built.thread {
        SinkThread::Shared => {
            tokio::spawn(async move {
                run.await;
                let _ = done_tx.send(());
            });
        }
        SinkThread::Own => {
            crate::pipeline::spawn_on_own_thread(format!("sink-{id}"), id.to_owned(), run, done_tx)
                .with_context(|| format!("sink '{id}': cannot start its thread"))?;
        }
    }
    Ok(done_rx)
}

impl Topology {
    /// A signal that fires when shutdown starts (for the API server and friends).
    pub fn shutdown_signal(&self) -> ShutdownSignal {
        self.signal.clone()
    }

    /// Stops everything in data order. Returns false if `timeout` passed before every sink
    /// flushed (the caller exits non-zero: some data may not have been written).
    ///
    /// When the last quarter of `timeout` (at most [`SPILL_RESERVE`]) begins with sinks still
    /// draining, their memory buffers are taken from them and written to disk
    /// ([`crate::pipeline::spill`]), to be delivered at the next start.
    pub async fn stop(mut self, timeout: Duration) -> bool {
        self.trigger.trigger();
        let deadline = tokio::time::Instant::now() + timeout;
        let spill_at = deadline - (timeout / 4).min(SPILL_RESERVE);
        if tokio::time::timeout_at(spill_at, self.drain())
            .await
            .is_ok()
        {
            return true;
        }
        // Forget the sinks that have finished (a finished receiver must not be awaited again).
        self.sinks.retain_mut(|(id, done)| match done.try_recv() {
            Ok(()) => false,
            Err(tokio::sync::oneshot::error::TryRecvError::Closed) => {
                tracing::error!(component = %id, "Sink stopped abnormally.");
                false
            }
            Err(tokio::sync::oneshot::error::TryRecvError::Empty) => true,
        });
        let unfinished: Vec<String> = self.sinks.iter().map(|(id, _)| id.clone()).collect();
        for plan in std::mem::take(&mut self.spills) {
            if !unfinished.contains(&plan.id) {
                continue;
            }
            let id = format!("{} (spill)", plan.id);
            match plan.start() {
                Ok(done) => self.sinks.push((id, done)),
                Err(error) => {
                    tracing::error!(%error, component = %id, "Cannot start writing the memory buffer to disk.")
                }
            }
        }
        tokio::time::timeout_at(deadline, self.drain())
            .await
            .is_ok()
    }

    /// Waits for every task in data order; cancel-safe (what finished is forgotten, so a
    /// second call waits only for the rest).
    async fn drain(&mut self) {
        while let Some(task) = self.sources.last_mut() {
            let _ = task.await;
            self.sources.pop();
        }
        while let Some(task) = self.transforms.last_mut() {
            let _ = task.await;
            self.transforms.pop();
        }
        while let Some((id, done)) = self.sinks.last_mut() {
            if done.await.is_err() {
                tracing::error!(component = %id, "Sink stopped abnormally.");
            }
            self.sinks.pop();
        }
    }
}
