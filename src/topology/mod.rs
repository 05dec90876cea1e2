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

/// A running graph.
pub struct Topology {
    trigger: ShutdownTrigger,
    signal: ShutdownSignal,
    sources: Vec<JoinHandle<()>>,
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
    Disk {
        reader: tokio::sync::oneshot::Receiver<()>,
    },
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
    registry.set_memory_budget(budget.clone());
    let mut plans: HashMap<String, StopPlan> = HashMap::new();

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
                let resumed = crate::pipeline::disk::resume(
                    &sink.id,
                    &dir,
                    &metrics,
                    tx.clone(),
                    signal.clone(),
                )
                .with_context(|| format!("sink '{}': memory buffer's log", sink.id))?;
                let (writer, resumed) = match resumed {
                    Some((writer, done)) => (Some(writer), Some(done)),
                    None => (None, None),
                };
                let spill = SpillPlan {
                    id: sink.id.clone(),
                    dir,
                    writer,
                    handover: rx.handover(),
                    metrics,
                };
                let spill = Box::new(spill);
                plans.insert(sink.id.clone(), StopPlan::Memory { spill, resumed });
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
                    stop: signal.clone(),
                })
                .with_context(|| format!("sink '{}': disk buffer", sink.id))?;
                plans.insert(sink.id.clone(), StopPlan::Disk { reader: done });
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
    let mut downstream = readers(config, &senders);
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
        let task = build_transform(transform, metrics, input, &mut downstream, Some(&budget))?;
        transforms_built.push(task);
    }
    drop(downstream);

    let mut sinks = Vec::new();
    for (id, built, input) in sinks_built {
        let (done, abort) = spawn_sink(&id, built, input)?;
        let buffer = plans
            .remove(&id)
            .with_context(|| format!("sink '{id}': no buffer"))?;
        sinks.push(RunningSink {
            id,
            done,
            abort,
            buffer,
        });
    }
    let transforms = transforms_built.into_iter().map(tokio::spawn).collect();
    let sources = sources_built.into_iter().map(tokio::spawn).collect();

    Ok(Topology {
        trigger,
        signal,
        sources,
        transforms,
        sinks,
    })
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
/// output to their readers, taken out of `downstream` (see [`readers`]), charged to `budget`.
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
) -> anyhow::Result<BoxFuture<'static, ()>> {
    let charged = |fanout: Fanout| match budget {
        Some(budget) => fanout.with_budget(budget.clone()),
        None => fanout,
    };
    let mut fanout = charged(Fanout::new(
        downstream.remove(transform.id.as_str()).unwrap_or_default(),
        metrics.clone(),
    ));
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
            let out = charged(Fanout::new(readers, metrics.clone())).for_output(&name);
            (name, out)
        })
        .collect();
    transform
        .config
        .component()
        .build(TransformContext {
            metrics,
            input,
            fanout,
            outputs,
        })
        .with_context(|| format!("transform '{}'", transform.id))
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

impl Topology {
    /// A signal that fires when shutdown starts (for the API server and friends).
    pub fn shutdown_signal(&self) -> ShutdownSignal {
        self.signal.clone()
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
        let deadline = tokio::time::Instant::now() + timeout;
        let spill_at = deadline - (timeout / 4).min(SPILL_RESERVE);
        let mut sinks = tokio::task::JoinSet::new();
        for sink in std::mem::take(&mut self.sinks) {
            sinks.spawn(stop_sink(sink, spill_at));
        }
        let stopped = tokio::time::timeout_at(deadline, async {
            for task in self.sources.drain(..) {
                let _ = task.await;
            }
            for task in self.transforms.drain(..) {
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
        StopPlan::Disk { reader } => {
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
        let topology = start(&config, &registry, Default::default()).await?;
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
        let Err(error) = start(&config, &Registry::default(), Default::default()).await else {
            anyhow::bail!("the start must fail");
        };
        let text = format!("{error:#}");
        assert!(text.starts_with("sink 'k': "), "{text}");
        // Nothing was bound: the source's port is still free.
        assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_gives_up_at_its_deadline_when_a_source_does_not_end() {
        let (trigger, signal) = shutdown_pair();
        let topology = Topology {
            trigger,
            signal,
            sources: vec![tokio::spawn(std::future::pending::<()>())],
            transforms: Vec::new(),
            sinks: Vec::new(),
        };
        let started = tokio::time::Instant::now();
        assert!(!topology.stop(Duration::from_secs(30)).await);
        assert_eq!(started.elapsed(), Duration::from_secs(30));
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
            buffer: StopPlan::Disk { reader },
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
