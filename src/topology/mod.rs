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
//! A sink is not waited for once everything it holds is safe on disk: a disk buffer's reader
//! feeds its sink nothing more at the stop and ends after the writer's last fsync (and at most
//! a short grace for what the sink holds), and the sink is then stopped where it is, what it
//! did not acknowledge staying in the log for the next start; a memory buffer not drained when
//! the last part of `shutdown_timeout` begins is written to disk (`pipeline::spill`), settled
//! for its sources, and its sink stopped. Every fan-out charges the global memory budget
//! (`limits.memory`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use loghaul_config::{BufferKind, Component, ComponentKind, ComponentSet as _};
use loghaul_core::MemoryBudget;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::metrics::ComponentMetrics;
use crate::metrics::Registry;
use crate::net::sockets::SocketPool;
use crate::pipeline::fanout::Readers;
use crate::pipeline::spill::SpillPlan;
use crate::pipeline::{
    Abort, BoxFuture, Fanout, Input, InputSender, QUEUE_BATCHES, QueueLimits, ShutdownSignal,
    ShutdownTrigger, abortable, bounded_queue, input_queue, shutdown_pair,
};
use crate::sinks::{BuiltSink, ReopenGeneration, SinkContext, SinkThread};
use crate::sources::{RunningSource, SourceContext};
use crate::transforms::{TransformConfig, TransformContext};

/// The most batches a memory buffer's queue holds, whatever its `max_events`.
const MAX_QUEUE_BATCHES: usize = 1 << 16;

/// The lists of readers of a component's outputs, by `ID` or `ID.NAME`.
pub(crate) type OutputLists = Vec<(String, Arc<Readers>)>;

/// A running graph.
pub struct Topology {
    /// The stop of everything that is not a source (disk buffers' readers, TLS file watchers).
    trigger: ShutdownTrigger,
    signal: ShutdownSignal,
    registry: Arc<Registry>,
    reopen: ReopenGeneration,
    budget: Arc<MemoryBudget>,
    sockets: Arc<SocketPool>,
    /// The configuration running now.
    config: Config,
    /// Every transform's and sink's input queue, by id: what a rewired upstream sends to. Only
    /// the topology and fan-outs hold senders, so these are dropped at the stop (or when the
    /// component goes), or its queue would never close.
    inputs: HashMap<String, InputSender>,
    /// Every output of every source and transform, by `ID` or `ID.NAME`: the lists a reload
    /// rewires. A key has several while a retired instance runs beside its successor.
    outputs: HashMap<String, Vec<Arc<Readers>>>,
    sources: HashMap<String, SourceTask>,
    transforms: HashMap<String, JoinHandle<()>>,
    sinks: HashMap<String, RunningSink>,
    /// Instances a reload replaced or removed, still finishing what they hold.
    retiring: Retiring,
}

/// A running source and its two stops.
struct SourceTask {
    /// Stop accepting, drain, end (a stop, or a reload that removes it).
    shutdown: ShutdownTrigger,
    /// Stop accepting, serve open connections to their end (a reload that replaced it). Kept
    /// for as long as the task runs: a dropped trigger fires its signal.
    retire: ShutdownTrigger,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct Retiring {
    sources: Vec<SourceTask>,
    transforms: Vec<JoinHandle<()>>,
    sinks: Vec<RunningSink>,
}

/// A running sink, and how a stop ends it.
struct RunningSink {
    id: String,
    /// Resolves when the sink has finished.
    done: tokio::sync::oneshot::Receiver<()>,
    /// Stops the sink where it is, once everything it holds is safe on disk.
    abort: Abort,
    buffer: StopPlan,
}

/// What a stop does with a sink that has not finished, by the kind of its buffer.
enum StopPlan {
    /// Its queue is written to disk when the spill reserve of `shutdown_timeout` begins;
    /// `resumed`: the task feeding it what an earlier stop wrote, if there was any.
    Memory {
        spill: Box<SpillPlan>,
        resumed: Option<tokio::sync::oneshot::Receiver<()>>,
    },
    /// Its disk buffer's reader: once that has finished, what the sink holds is in the log.
    /// `target` is the queue the reader feeds (a reload points it at a replacing sink).
    Disk {
        reader: tokio::sync::oneshot::Receiver<()>,
        target: Arc<Readers>,
    },
    /// A sink a reload replaced: its queue is closed and it finishes what it held; its
    /// buffer (on disk, or the memory buffer's spill folder) is its successor's now.
    Replaced,
}

/// How long a sink a reload replaced, its disk buffer taken over, may take to finish what it
/// holds before it is stopped where it is.
const REPLACED_GRACE: Duration = Duration::from_secs(5);

/// The part of `shutdown_timeout` kept for writing undrained memory buffers to disk: a quarter
/// of it, at most this.
const SPILL_RESERVE: Duration = Duration::from_secs(5);

/// What a reload changed, by component id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub added: Vec<String>,
    /// Rebuilt: their settings (or a file they name) changed.
    pub changed: Vec<String>,
    pub removed: Vec<String>,
    /// Only their `inputs` changed: rewired, not rebuilt.
    pub rewired: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.changed.is_empty()
            && self.removed.is_empty()
            && self.rewired.is_empty()
    }
}

/// Whether two entries of one id differ in more than their `inputs` (which a rewire applies).
fn rebuilt<C: PartialEq>(old: &Component<C>, new: &Component<C>) -> bool {
    old.acknowledgements != new.acknowledgements
        || old.buffer != new.buffer
        || old.retry != new.retry
        || old.tls != new.tls
        || old.config != new.config
}

/// Sorts `new` against `old` into `changes`; returns the ids to build.
fn diff<'c, C: PartialEq>(
    old: &[Component<C>],
    new: &'c [Component<C>],
    changes: &mut Changes,
) -> Vec<&'c Component<C>> {
    let mut build = Vec::new();
    for n in new {
        match old.iter().find(|o| o.id == n.id) {
            None => {
                changes.added.push(n.id.clone());
                build.push(n);
            }
            Some(o) if rebuilt(o, n) => {
                changes.changed.push(n.id.clone());
                build.push(n);
            }
            Some(o) if o.inputs != n.inputs => changes.rewired.push(n.id.clone()),
            Some(_) => {}
        }
    }
    for o in old {
        if !new.iter().any(|n| n.id == o.id) {
            changes.removed.push(o.id.clone());
        }
    }
    build
}

/// A sink built by a reload, not yet running.
struct NewSink {
    id: String,
    built: BuiltSink,
    input: Input,
    /// `None`: it takes over its predecessor's disk buffer (whose reader is pointed at
    /// `carried`).
    plan: Option<StopPlan>,
    carried: Option<InputSender>,
}

/// A source built by a reload, not yet running.
struct NewSource {
    id: String,
    run: RunningSource,
    /// Its fan-out's readers, for later reloads to rewire.
    list: Arc<Readers>,
    shutdown: ShutdownTrigger,
    retire: ShutdownTrigger,
}

/// Starts every component of `config`.
///
/// # Errors
///
/// A component could not be built (a port in use, a sink's thread that would not start); no
/// component has started running then.
pub async fn start(
    config: &Config,
    registry: &Arc<Registry>,
    reopen: ReopenGeneration,
) -> anyhow::Result<Topology> {
    let mut topology = empty(config, registry, reopen);
    topology.reload(config.clone()).await?;
    Ok(topology)
}

/// A graph with `config`'s global settings and no component.
fn empty(config: &Config, registry: &Arc<Registry>, reopen: ReopenGeneration) -> Topology {
    let (trigger, signal) = shutdown_pair();
    let budget = MemoryBudget::new(config.limits.memory);
    registry.set_memory_budget(budget.clone());
    let mut empty = config.clone();
    empty.sources.clear();
    empty.transforms.clear();
    empty.sinks.clear();
    Topology {
        trigger,
        signal,
        registry: registry.clone(),
        reopen,
        budget,
        sockets: Arc::default(),
        config: empty,
        inputs: HashMap::new(),
        outputs: HashMap::new(),
        sources: HashMap::new(),
        transforms: HashMap::new(),
        sinks: HashMap::new(),
        retiring: Retiring::default(),
    }
}

impl Topology {
    /// A signal that fires when shutdown starts (for the API server and friends).
    pub fn shutdown_signal(&self) -> ShutdownSignal {
        self.signal.clone()
    }

    /// The configuration running now.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Moves the running graph to `next`, changing only what differs: a component whose
    /// settings are the same keeps running untouched (its connections, buffer, positions); one
    /// whose `inputs` alone changed is rewired between two batches; a changed or new one is
    /// built, and every build (sockets bound or handed over, sinks' clients, programs) happens
    /// before anything running is touched, so a failure leaves the graph as it was. Then:
    ///
    /// - new and changed sinks and transforms start; every running output is pointed at its
    ///   readers in `next`; a replaced or removed transform or sink, no longer fed, finishes
    ///   what its queue holds (acknowledgements settle as usual) and ends. A changed sink with
    ///   the same disk buffer takes the buffer over: its reader feeds the new sink.
    /// - a changed source that listens starts on its predecessor's sockets (handed over, never
    ///   bound again), and the predecessor stops accepting but serves its open connections to
    ///   their end; a changed source with state of its own (file positions, a consumer group)
    ///   stops first, and its successor is built after; a removed source drains and stops.
    ///
    /// # Errors
    ///
    /// A setting that only a restart can change, or a component that could not be built; the
    /// running graph is unchanged then.
    pub async fn reload(&mut self, next: Config) -> anyhow::Result<Changes> {
        let old = &self.config;
        if next.data_dir != old.data_dir {
            anyhow::bail!(
                "`data_dir` changed ({} to {}): only a restart can move it",
                old.data_dir.display(),
                next.data_dir.display()
            );
        }
        if next.limits != old.limits {
            anyhow::bail!("`limits` changed: only a restart applies them");
        }
        if next.api != old.api {
            anyhow::bail!("`api` changed: only a restart applies it");
        }
        let mut changes = Changes::default();
        let sources = diff(&old.sources, &next.sources, &mut changes);
        let transforms = diff(&old.transforms, &next.transforms, &mut changes);
        let sinks = diff(&old.sinks, &next.sinks, &mut changes);
        for sink in &sinks {
            if let Some(before) = old.sinks.iter().find(|s| s.id == sink.id)
                && before.buffer != sink.buffer
                && (matches!(before.buffer.kind, BufferKind::Disk { .. })
                    || matches!(sink.buffer.kind, BufferKind::Disk { .. }))
            {
                anyhow::bail!(
                    "sink '{}': its disk buffer's settings changed; only a restart applies that \
                     (a disk buffer carries over to a changed sink when its own settings stay)",
                    sink.id
                );
            }
        }

        // Build everything, touching nothing that runs.
        let saved = self.registry.components();
        let built = self
            .build(&next, &changes, &sources, &transforms, &sinks)
            .await;
        let (new_sinks, new_transforms, new_sources, inputs, downstream, handles, later) =
            match built {
                Ok(built) => built,
                Err(error) => {
                    self.sockets.abort();
                    self.registry.restore(saved);
                    return Err(error);
                }
            };

        // Sinks and transforms first, so every queue a rewired output may send to is read.
        for sink in new_sinks {
            let NewSink {
                id,
                built,
                input,
                plan,
                carried,
            } = sink;
            let (done, abort) = spawn_sink(&id, built, input)?;
            let previous = self.sinks.remove(&id);
            let buffer = match (plan, previous) {
                (Some(plan), previous) => {
                    if let Some(mut previous) = previous {
                        // Its memory buffer's spill folder is the new sink's now.
                        previous.buffer = StopPlan::Replaced;
                        self.retiring.sinks.push(previous);
                    }
                    plan
                }
                (None, Some(mut previous)) => {
                    let plan = std::mem::replace(&mut previous.buffer, StopPlan::Replaced);
                    if let (StopPlan::Disk { target, .. }, Some(tx)) = (&plan, carried) {
                        target.replace(vec![tx]);
                    }
                    // Its queue is closed: a sink that works finishes what it holds at once.
                    // One that cannot (its server down, the reason of many a reload) is
                    // stopped where it is: what it held is in the buffer, and the reader
                    // sends it to the new sink.
                    let abort = previous.abort.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(REPLACED_GRACE).await;
                        abort.abort();
                    });
                    self.retiring.sinks.push(previous);
                    plan
                }
                (None, None) => anyhow::bail!("sink '{id}': no buffer to carry over"),
            };
            self.sinks.insert(
                id.clone(),
                RunningSink {
                    id,
                    done,
                    abort,
                    buffer,
                },
            );
        }
        for (id, task) in new_transforms {
            if let Some(previous) = self.transforms.insert(id, tokio::spawn(task)) {
                self.retiring.transforms.push(previous);
            }
        }
        for id in &changes.removed {
            if let Some(t) = self.transforms.remove(id) {
                self.retiring.transforms.push(t);
            }
            if let Some(s) = self.sinks.remove(id) {
                self.retiring.sinks.push(s);
            }
        }
        // Rewire every output whose component stays; a removed one keeps its readers until it
        // has sent what it holds.
        let producers: std::collections::HashSet<&str> = next
            .sources
            .iter()
            .map(|s| s.id.as_str())
            .chain(next.transforms.iter().map(|t| t.id.as_str()))
            .collect();
        for (key, lists) in &self.outputs {
            let producer = key.split_once('.').map_or(key.as_str(), |(p, _)| p);
            if producers.contains(producer) {
                let readers = downstream.get(key.as_str()).cloned().unwrap_or_default();
                for list in lists {
                    list.replace(readers.clone());
                }
            }
        }
        for (key, list) in handles {
            self.outputs.entry(key).or_default().push(list);
        }
        // The queues of replaced and removed components close once no output feeds them.
        self.inputs = inputs;

        // Sources last: new ones start on the sockets handed over, then their predecessors
        // retire.
        for source in new_sources {
            let previous = self.sources.remove(&source.id);
            self.spawn_source(source);
            if let Some(previous) = previous {
                previous.retire.trigger();
                self.retiring.sources.push(previous);
            }
        }
        for id in &changes.removed {
            if let Some(source) = self.sources.remove(id) {
                source.shutdown.trigger();
                self.retiring.sources.push(source);
            }
        }
        let mut failed = Vec::new();
        for source in later {
            // Its predecessor keeps state the new one reads: it stops first.
            if let Some(previous) = self.sources.remove(&source.id) {
                previous.shutdown.trigger();
                if tokio::time::timeout(next.shutdown_timeout, previous.task)
                    .await
                    .is_err()
                {
                    tracing::warn!(component = %source.id, "The replaced source did not stop within shutdown_timeout; starting its successor anyway.");
                }
            }
            match self.build_source(source, &downstream, &next).await {
                Ok(new) => self.spawn_source(new),
                Err(error) => failed.push(format!("{error:#}")),
            }
        }
        let running: std::collections::HashSet<String> =
            next.sources.iter().map(|s| s.id.clone()).collect();
        let rebuilt: std::collections::HashSet<String> = changes.changed.iter().cloned().collect();
        self.sockets.commit(&running, &rebuilt);
        let ids: std::collections::HashSet<&str> = next
            .sources
            .iter()
            .map(|s| s.id.as_str())
            .chain(next.transforms.iter().map(|t| t.id.as_str()))
            .chain(next.sinks.iter().map(|s| s.id.as_str()))
            .collect();
        self.registry.retain(|id| ids.contains(id));
        self.registry.set_wiring(
            next.transforms
                .iter()
                .map(|t| (t.id.clone(), t.inputs.clone()))
                .chain(next.sinks.iter().map(|s| (s.id.clone(), s.inputs.clone())))
                .collect(),
        );
        self.prune();
        self.config = next;
        if !failed.is_empty() {
            anyhow::bail!(
                "the reload was applied, but these sources could not start again: {}",
                failed.join("; ")
            );
        }
        Ok(changes)
    }

    /// Forgets what retired instances no longer need: lists of outputs nobody sends on, tasks
    /// that have ended.
    fn prune(&mut self) {
        self.outputs.retain(|_, lists| {
            // Only the topology holds a list whose fan-out is gone.
            lists.retain(|l| Arc::strong_count(l) > 1);
            !lists.is_empty()
        });
        self.retiring.sources.retain(|s| !s.task.is_finished());
        self.retiring.transforms.retain(|t| !t.is_finished());
        self.retiring
            .sinks
            .retain_mut(|s| s.done.try_recv().is_err());
    }

    fn spawn_source(&mut self, source: NewSource) {
        let NewSource {
            id,
            run,
            list,
            shutdown,
            retire,
        } = source;
        self.outputs.entry(id.clone()).or_default().push(list);
        let task = tokio::spawn(run);
        self.sources.insert(
            id,
            SourceTask {
                shutdown,
                retire,
                task,
            },
        );
    }

    /// Builds what a reload adds or changes (see [`Topology::reload`]); sources that must wait
    /// for their predecessor to stop are returned unbuilt.
    #[allow(clippy::type_complexity)]
    async fn build<'c>(
        &self,
        next: &'c Config,
        changes: &Changes,
        sources: &[&'c Component<crate::sources::SourceConfig>],
        transforms: &[&'c Component<TransformConfig>],
        sinks: &[&'c Component<crate::sinks::SinkConfig>],
    ) -> anyhow::Result<(
        Vec<NewSink>,
        Vec<(String, BoxFuture<'static, ()>)>,
        Vec<NewSource>,
        HashMap<String, InputSender>,
        HashMap<String, Vec<InputSender>>,
        OutputLists,
        Vec<&'c Component<crate::sources::SourceConfig>>,
    )> {
        let old = &self.config;
        let mut inputs = self.inputs.clone();
        for id in changes.removed.iter().chain(&changes.changed) {
            inputs.remove(id);
        }
        let mut new_sinks = Vec::new();
        for sink in sinks {
            let metrics =
                self.registry
                    .register(&sink.id, ComponentKind::Sink, sink.config.type_name());
            let built = sink
                .config
                .component()
                .build(SinkContext {
                    id: sink.id.as_str().into(),
                    metrics: metrics.clone(),
                    reopen: self.reopen.clone(),
                    retry: sink.retry,
                    data_dir: next.data_dir.clone(),
                    tls: sink.tls.clone(),
                })
                .with_context(|| format!("sink '{}'", sink.id))?;
            let replacing = old.sinks.iter().any(|s| s.id == sink.id);
            let dir = next.data_dir.join("buffers").join(&sink.id);
            match &sink.buffer.kind {
                BufferKind::Memory { max_events } => {
                    let limits = QueueLimits {
                        // The cap in events binds, not the one in batches: small batches (one
                        // HTTP request each) would otherwise fill the queue long before it.
                        batches: max_events.map_or(built.queue_batches, |m| {
                            m.min(MAX_QUEUE_BATCHES).max(built.queue_batches)
                        }),
                        max_events: *max_events,
                        when_full: sink.buffer.when_full,
                    };
                    let (tx, mut rx) =
                        bounded_queue(metrics.clone(), built.prepare.clone(), limits);
                    // What an earlier stop wrote to disk for this sink goes first (a sink a
                    // reload replaces had it at its own start).
                    let resumed = if replacing {
                        None
                    } else {
                        crate::pipeline::disk::resume(
                            &sink.id,
                            &dir,
                            &metrics,
                            tx.clone(),
                            self.signal.clone(),
                        )
                        .with_context(|| format!("sink '{}': memory buffer's log", sink.id))?
                    };
                    let (writer, resumed) = match resumed {
                        Some((writer, done)) => (Some(writer), Some(done)),
                        None => (None, None),
                    };
                    let spill = Box::new(SpillPlan {
                        id: sink.id.clone(),
                        dir,
                        writer,
                        handover: rx.handover(),
                        metrics,
                    });
                    inputs.insert(sink.id.clone(), tx);
                    new_sinks.push(NewSink {
                        id: sink.id.clone(),
                        built,
                        input: rx,
                        plan: Some(StopPlan::Memory { spill, resumed }),
                        carried: None,
                    });
                }
                BufferKind::Disk { .. } if replacing => {
                    // The buffer stays: its writer keeps taking the upstreams' batches, its
                    // reader will feed this sink's queue.
                    let (tx, rx) =
                        input_queue(metrics.clone(), built.prepare.clone(), built.queue_batches);
                    let writer = self
                        .inputs
                        .get(&sink.id)
                        .with_context(|| format!("sink '{}': its disk buffer is gone", sink.id))?;
                    inputs.insert(sink.id.clone(), writer.clone());
                    new_sinks.push(NewSink {
                        id: sink.id.clone(),
                        built,
                        input: rx,
                        plan: None,
                        carried: Some(tx),
                    });
                }
                BufferKind::Disk { max_size, sync } => {
                    let (sink_tx, rx) =
                        input_queue(metrics.clone(), built.prepare.clone(), built.queue_batches);
                    let started =
                        crate::pipeline::disk::start(crate::pipeline::disk::DiskOptions {
                            id: sink.id.clone(),
                            dir,
                            max_size: *max_size,
                            sync: *sync,
                            when_full: sink.buffer.when_full,
                            metrics,
                            sink: sink_tx,
                            stop: self.signal.clone(),
                        })
                        .with_context(|| format!("sink '{}': disk buffer", sink.id))?;
                    inputs.insert(sink.id.clone(), started.sender);
                    new_sinks.push(NewSink {
                        id: sink.id.clone(),
                        built,
                        input: rx,
                        plan: Some(StopPlan::Disk {
                            reader: started.done,
                            target: started.target,
                        }),
                        carried: None,
                    });
                }
            }
        }
        let mut transform_inputs = Vec::new();
        for transform in transforms {
            let metrics = self.registry.register(
                &transform.id,
                ComponentKind::Transform,
                transform.config.type_name(),
            );
            let (tx, rx) = input_queue(metrics.clone(), None, QUEUE_BATCHES);
            inputs.insert(transform.id.clone(), tx);
            transform_inputs.push((*transform, metrics, rx));
        }
        let downstream: HashMap<String, Vec<InputSender>> = {
            let by_id: HashMap<&str, InputSender> = inputs
                .iter()
                .map(|(k, v)| (k.as_str(), v.clone()))
                .collect();
            readers(next, &by_id)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect()
        };
        let mut handles = Vec::new();
        let mut new_transforms = Vec::new();
        for (transform, metrics, input) in transform_inputs {
            let mut readers: HashMap<&str, Vec<InputSender>> = downstream
                .iter()
                .map(|(k, v)| (k.as_str(), v.clone()))
                .collect();
            let (task, lists) = build_transform(
                transform,
                metrics,
                input,
                &mut readers,
                Some(&self.budget),
                Some(&self.registry.taps),
            )?;
            handles.extend(lists);
            new_transforms.push((transform.id.clone(), task));
        }
        let mut new_sources = Vec::new();
        let mut later = Vec::new();
        for source in sources {
            if !source.config.component().hands_over()
                && old.sources.iter().any(|s| s.id == source.id)
            {
                later.push(*source);
                continue;
            }
            let new = self.build_source(source, &downstream, next).await?;
            new_sources.push(new);
        }
        Ok((
            new_sinks,
            new_transforms,
            new_sources,
            inputs,
            downstream,
            handles,
            later,
        ))
    }

    /// Builds (binds) one source, its fan-out feeding `downstream`'s readers of its id.
    async fn build_source(
        &self,
        source: &Component<crate::sources::SourceConfig>,
        downstream: &HashMap<String, Vec<InputSender>>,
        next: &Config,
    ) -> anyhow::Result<NewSource> {
        let metrics =
            self.registry
                .register(&source.id, ComponentKind::Source, source.config.type_name());
        let fanout = Fanout::new(
            downstream.get(&source.id).cloned().unwrap_or_default(),
            metrics.clone(),
        )
        .with_budget(self.budget.clone())
        .tapped(self.registry.taps.point(&source.id));
        let list = fanout.readers();
        let (shutdown_trigger, shutdown) = shutdown_pair();
        let (retire_trigger, retire) = shutdown_pair();
        let run = source
            .config
            .component()
            .build(SourceContext {
                id: source.id.as_str().into(),
                metrics,
                fanout,
                shutdown,
                retire,
                sockets: self.sockets.clone(),
                acknowledgements: source.acknowledgements,
                data_dir: next.data_dir.clone(),
                shutdown_timeout: next.shutdown_timeout,
                tls: source.tls.clone(),
            })
            .await
            .with_context(|| format!("source '{}'", source.id))?;
        Ok(NewSource {
            id: source.id.clone(),
            run,
            list,
            shutdown: shutdown_trigger,
            retire: retire_trigger,
        })
    }

    /// Stops everything in data order. Returns whether the stop was clean: every sink finished,
    /// or was stopped once everything it held was safe on disk (its disk buffer, or its memory
    /// buffer written there); false when `timeout` passed first or a spill could not write
    /// everything (the caller exits non-zero: some events may be lost).
    ///
    /// Sinks are stopped side by side: a disk-buffered sink as soon as its buffer's reader has
    /// finished (see `pipeline::disk`); a memory-buffered one that has not drained by the time
    /// the last quarter of `timeout` (at most [`SPILL_RESERVE`]) begins has its buffer written to
    /// disk ([`crate::pipeline::spill`]), and is stopped then.
    pub async fn stop(mut self, timeout: Duration) -> bool {
        self.trigger.trigger();
        let mut sources: Vec<SourceTask> = self.sources.drain().map(|(_, s)| s).collect();
        sources.append(&mut self.retiring.sources);
        for source in &sources {
            source.shutdown.trigger();
        }
        // Only fan-outs may hold senders now, so queues close as their upstreams end.
        self.inputs.clear();
        self.outputs.clear();
        self.sockets.clear();
        let deadline = tokio::time::Instant::now() + timeout;
        let spill_at = deadline - (timeout / 4).min(SPILL_RESERVE);
        let mut sinks = tokio::task::JoinSet::new();
        for sink in self
            .sinks
            .drain()
            .map(|(_, s)| s)
            .chain(self.retiring.sinks.drain(..))
        {
            sinks.spawn(stop_sink(sink, spill_at));
        }
        let mut transforms: Vec<JoinHandle<()>> = self.transforms.drain().map(|(_, t)| t).collect();
        transforms.append(&mut self.retiring.transforms);
        let stopped = tokio::time::timeout_at(deadline, async {
            for source in sources {
                let _ = source.task.await;
            }
            for task in transforms {
                let _ = task.await;
            }
            let mut clean = true;
            while let Some(result) = sinks.join_next().await {
                clean &= result.unwrap_or(false);
            }
            clean
        })
        .await;
        stopped.unwrap_or(false)
    }
}

/// Who reads from whom: for every `inputs` entry (`ID`, or `ID.NAME` for a named output), the
/// input queues (in `senders`, by component id) of the transforms and sinks that list it.
pub(crate) fn readers<'c>(
    config: &'c Config,
    senders: &HashMap<&str, InputSender>,
) -> HashMap<&'c str, Vec<InputSender>> {
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
    downstream
}

/// Builds a transform's task: reading `input`, sending its default output and each named
/// output to their readers, taken out of `downstream` (see [`readers`]), charged to `budget`;
/// and the lists of readers of its outputs, by `ID` or `ID.NAME`, for a reload to rewire.
/// `loghaul test` builds transforms through this too, so a test runs what `loghaul run` does.
///
/// # Errors
///
/// The transform could not be built; the message names it.
pub(crate) fn build_transform(
    transform: &Component<TransformConfig>,
    metrics: Arc<ComponentMetrics>,
    input: Input,
    downstream: &mut HashMap<&str, Vec<InputSender>>,
    budget: Option<&Arc<MemoryBudget>>,
    taps: Option<&crate::tap::TapHub>,
) -> anyhow::Result<(BoxFuture<'static, ()>, OutputLists)> {
    let charged = |fanout: Fanout, key: &str| {
        let fanout = match budget {
            Some(budget) => fanout.with_budget(budget.clone()),
            None => fanout,
        };
        match taps {
            Some(taps) => fanout.tapped(taps.point(key)),
            None => fanout,
        }
    };
    let mut fanout = charged(
        Fanout::new(
            downstream.remove(transform.id.as_str()).unwrap_or_default(),
            metrics.clone(),
        ),
        &transform.id,
    );
    let mut lists = vec![(transform.id.clone(), fanout.readers())];
    let named = transform.config.outputs();
    if !named.is_empty() && transform.config.has_default_output() {
        fanout = fanout.for_output("_default");
    }
    let outputs = named
        .into_iter()
        .map(|name| {
            let readers = downstream
                .remove(format!("{}.{name}", transform.id).as_str())
                .unwrap_or_default();
            let key = format!("{}.{name}", transform.id);
            let out = charged(Fanout::new(readers, metrics.clone()), &key).for_output(&name);
            lists.push((key, out.readers()));
            (name, out)
        })
        .collect();
    let task = transform
        .config
        .component()
        .build(TransformContext {
            metrics,
            input,
            fanout,
            outputs,
        })
        .with_context(|| format!("transform '{}'", transform.id))?;
    Ok((task, lists))
}

/// Starts a sink where it asked to run; the receiver resolves when it has finished (or was
/// stopped with its [`Abort`]).
fn spawn_sink(
    id: &str,
    built: BuiltSink,
    input: Input,
) -> anyhow::Result<(tokio::sync::oneshot::Receiver<()>, Abort)> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let (run, abort) = abortable((built.run)(input));
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
    Ok((done_rx, abort))
}

/// Waits for one sink to finish, or stops it once what it holds is safe on disk (see
/// [`Topology::stop`]). Returns false when some of its events could not be kept.
async fn stop_sink(sink: RunningSink, spill_at: tokio::time::Instant) -> bool {
    let RunningSink {
        id,
        mut done,
        abort,
        buffer,
    } = sink;
    match buffer {
        StopPlan::Replaced => {
            if tokio::time::timeout_at(spill_at, &mut done).await.is_err() {
                abort.abort();
                let _ = done.await;
                return false;
            }
            true
        }
        StopPlan::Disk { reader, .. } => {
            let _ = reader.await;
            if done.try_recv().is_err() {
                tracing::info!(component = %id, "Stopped the sink where it was: what it still held is in its disk buffer, for the next start.");
                abort.abort();
                let _ = done.await;
            }
            true
        }
        StopPlan::Memory { spill, resumed } => {
            let drained = tokio::select! {
                _ = &mut done => true,
                () = tokio::time::sleep_until(spill_at) => false,
            };
            if let Some(resumed) = resumed {
                let _ = resumed.await;
            }
            if drained {
                return true;
            }
            let (held, written) = match spill.start() {
                Ok(receivers) => receivers,
                Err(error) => {
                    tracing::error!(%error, component = %id, "Cannot start writing the memory buffer to disk.");
                    let _ = done.await;
                    return false;
                }
            };
            if held.await.unwrap_or(false) {
                // Everything the sink holds is on disk and settled for its sources (which may
                // be waiting for it to stop): nothing is left to wait for. What its upstreams
                // still send goes to the disk too.
                abort.abort();
            }
            let written = written.await.unwrap_or(false);
            let _ = done.await;
            written
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use loghaul_config::ConfigFormat;
    use loghaul_core::{BatchNotifier, BatchStatus, Event, EventBatch, Span};

    use super::*;
    use crate::metrics::ComponentMetrics;

    fn metrics(id: &str) -> std::sync::Arc<ComponentMetrics> {
        Registry::default().register(id, ComponentKind::Sink, "test")
    }

    fn config(text: &str) -> anyhow::Result<Config> {
        Config::from_str_with_vars(text, ConfigFormat::Yaml, "t.yaml", &|_| None)
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// A free TCP port on 127.0.0.1 (free when asked: the listener is closed again).
    fn free_port() -> anyhow::Result<u16> {
        Ok(std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port())
    }

    /// A sink that takes one batch and holds it, never finishing, until aborted; `taken`
    /// resolves once it holds the batch.
    fn stuck_sink(
        mut input: Input,
    ) -> (BoxFuture<'static, ()>, tokio::sync::oneshot::Receiver<()>) {
        let (taken_tx, taken) = tokio::sync::oneshot::channel();
        let run = Box::pin(async move {
            let held = input.recv().await;
            let _ = taken_tx.send(());
            std::future::pending::<()>().await;
            drop(held);
        });
        (run, taken)
    }

    fn tracked(text: &'static str) -> (EventBatch, loghaul_core::BatchStatusReceiver) {
        let (finalizer, status) = BatchNotifier::new_with_receiver();
        let mut b = EventBatch::new(bytes::Bytes::from_static(text.as_bytes()), "s".into(), "t");
        b.events.push(Event {
            message: Span::new(0, text.len()).into(),
            ..Event::default()
        });
        b.finalizer = finalizer;
        (b, status)
    }

    #[tokio::test]
    async fn lines_flow_from_a_source_through_a_transform_to_a_sink_and_a_stop_flushes_them()
    -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let port = free_port()?;
        let out = dir.path().join("out.log");
        let config = config(&format!(
            r#"
data_dir: "{data}"
sources:
  in:
    type: syslog
    mode: tcp
    address: "127.0.0.1:{port}"
transforms:
  keep:
    type: filter
    inputs: [in]
    contains: "keep"
sinks:
  out:
    type: file
    inputs: [keep]
    path: "{out}"
    encoding: text
"#,
            data = dir.path().display(),
            out = out.display(),
        ))?;
        let registry = Registry::default();
        let topology = start(&config, &Arc::new(registry), Default::default()).await?;
        let mut client = std::net::TcpStream::connect(("127.0.0.1", port))?;
        for (i, word) in ["keep", "drop", "keep", "keep"].iter().enumerate() {
            writeln!(client, "<13>Nov 27 02:00:00 host app: {word} {i}")?;
        }
        client.flush()?;
        drop(client);
        // The source ends at the stop, after its connection drained; the sink after flushing.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(topology.stop(Duration::from_secs(10)).await, "a clean stop");
        let text = std::fs::read_to_string(&out)?;
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines, ["keep 0", "keep 2", "keep 3"], "{text}");
        Ok(())
    }

    #[tokio::test]
    async fn a_sink_that_cannot_be_built_fails_the_start_and_names_it() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let port = free_port()?;
        let config = config(&format!(
            r#"
data_dir: "{data}"
sources:
  in:
    type: syslog
    mode: tcp
    address: "127.0.0.1:{port}"
sinks:
  k:
    type: kafka
    inputs: [in]
    bootstrap_servers: "127.0.0.1:1"
    topic: t
    retry:
      max_attempts: 3
"#,
            data = dir.path().display(),
        ))?;
        let Err(error) = start(&config, &Arc::default(), Default::default()).await else {
            anyhow::bail!("the start must fail");
        };
        let text = format!("{error:#}");
        assert!(text.starts_with("sink 'k': "), "{text}");
        // Nothing was bound: the source's port is still free.
        assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_gives_up_at_its_deadline_when_a_source_does_not_end() -> anyhow::Result<()> {
        let mut topology = empty(
            &config(
                "sources:\n  in:\n    type: syslog\n    mode: udp\n    address: 127.0.0.1:1\nsinks:\n  out:\n    type: blackhole\n    inputs: [in]\n",
            )?,
            &Arc::default(),
            Default::default(),
        );
        let (shutdown, _) = shutdown_pair();
        let (retire, _) = shutdown_pair();
        topology.sources.insert(
            "stuck".into(),
            SourceTask {
                shutdown,
                retire,
                task: tokio::spawn(std::future::pending::<()>()),
            },
        );
        let started = tokio::time::Instant::now();
        assert!(!topology.stop(Duration::from_secs(30)).await);
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_memory_buffered_sink_that_drains_in_time_is_waited_for() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let metrics = metrics("out");
        let (tx, mut input) = bounded_queue(metrics.clone(), None, QueueLimits::batches(4));
        let spill = Box::new(SpillPlan {
            id: "out".into(),
            dir: dir.path().join("buffers/out"),
            writer: None,
            handover: input.handover(),
            metrics,
        });
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let (run, abort) = abortable(async move {
            while input.recv().await.is_some() {}
            // A slow final flush, well before the spill reserve.
            tokio::time::sleep(Duration::from_secs(1)).await;
        });
        tokio::spawn(async move {
            run.await;
            let _ = done_tx.send(());
        });
        drop(tx);
        let sink = RunningSink {
            id: "out".into(),
            done,
            abort,
            buffer: StopPlan::Memory {
                spill,
                resumed: None,
            },
        };
        let started = tokio::time::Instant::now();
        let spill_at = started + Duration::from_secs(5);
        assert!(stop_sink(sink, spill_at).await);
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert!(!dir.path().join("buffers/out").exists(), "nothing spilled");
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_stuck_memory_buffered_sink_is_spilled_at_the_reserve_and_stopped()
    -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let metrics = metrics("out");
        let (tx, mut input) = bounded_queue(metrics.clone(), None, QueueLimits::batches(4));
        let spill = Box::new(SpillPlan {
            id: "out".into(),
            dir: dir.path().join("buffers/out"),
            writer: None,
            handover: input.handover(),
            metrics: metrics.clone(),
        });
        let fanout = Fanout::new(vec![tx], metrics.clone());
        let (a, a_status) = tracked("held");
        let (b, b_status) = tracked("queued");
        fanout.send(a).await;
        fanout.send(b).await;
        let (run, taken) = stuck_sink(input);
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let (run, abort) = abortable(run);
        tokio::spawn(async move {
            run.await;
            let _ = done_tx.send(());
        });
        taken.await?;
        let sink = RunningSink {
            id: "out".into(),
            done,
            abort,
            buffer: StopPlan::Memory {
                spill,
                resumed: None,
            },
        };
        let started = tokio::time::Instant::now();
        let spill_at = started + Duration::from_secs(5);
        let stop = tokio::spawn(stop_sink(sink, spill_at));
        tokio::time::sleep(Duration::from_millis(4999)).await;
        assert!(
            !dir.path().join("buffers/out").exists(),
            "no spill before the reserve begins"
        );
        // The upstreams end, so the spill can finish once it has the queue.
        drop(fanout);
        assert!(stop.await?, "everything is on disk");
        assert!(started.elapsed() >= Duration::from_secs(5));
        assert_eq!(a_status.await, BatchStatus::Delivered, "saved by the spill");
        assert_eq!(b_status.await, BatchStatus::Delivered);
        assert!(dir.path().join("buffers/out").exists());
        Ok(())
    }

    #[tokio::test]
    async fn a_disk_buffered_sink_is_stopped_where_it_is_once_its_reader_ends() {
        let (reader_tx, reader) = tokio::sync::oneshot::channel();
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let (run, abort) = abortable(std::future::pending::<()>());
        tokio::spawn(async move {
            run.await;
            let _ = done_tx.send(());
        });
        let sink = RunningSink {
            id: "out".into(),
            done,
            abort,
            buffer: StopPlan::Disk {
                reader,
                target: Arc::default(),
            },
        };
        let _ = reader_tx.send(());
        let stopped = tokio::time::timeout(
            Duration::from_secs(10),
            stop_sink(sink, tokio::time::Instant::now()),
        )
        .await;
        assert_eq!(stopped.ok(), Some(true), "aborted, not waited for");
    }
}
