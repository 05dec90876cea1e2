//! Builds the running graph from a validated [`Config`] and stops it cleanly.
//!
//! Start order: register metrics, create every input queue, wire each source's and transform's
//! fan-out to the components that name it in `inputs`, bind every socket (so a busy port fails
//! the start before anything runs), then spawn sinks, transforms and sources.
//!
//! Stop order is the data's order: sources stop accepting and drain their connections; when a
//! source ends, its fan-out's senders drop; a transform ends when all its inputs have; a sink
//! ends when its queue is closed and empty, after a final flush. Nothing is cut off mid-batch.

pub mod fanout;
pub mod shutdown;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use loghaul_config::{Config, SinkConfig, SourceConfig, SyslogMode, TransformConfig};
use tokio::task::JoinHandle;

pub use fanout::{Fanout, Input, InputSender};
pub use shutdown::{ShutdownSignal, ShutdownTrigger, shutdown_pair};

use crate::metrics::Registry;
use crate::sinks::ReopenGeneration;
use crate::sources::syslog::{SourceContext, tcp, udp};

/// A running graph.
pub struct Topology {
    trigger: ShutdownTrigger,
    signal: ShutdownSignal,
    sources: Vec<JoinHandle<()>>,
    transforms: Vec<JoinHandle<()>>,
    sinks: Vec<(String, tokio::sync::oneshot::Receiver<()>)>,
}

/// A sink built before its thread starts (a file sink's encoder must be handed to its queue).
enum SinkPlan {
    File(Box<crate::sinks::file::FileSink>),
    Console(Arc<crate::sinks::encoder::LineEncoder>),
    Blackhole,
}

enum Bound {
    Tcp(tokio::net::TcpListener),
    Udp(tokio::net::UdpSocket),
}

/// Starts every component of `config`.
pub async fn start(
    config: &Config,
    registry: &Registry,
    reopen: ReopenGeneration,
) -> anyhow::Result<Topology> {
    let (trigger, signal) = shutdown_pair();

    // Input queues for everything that has inputs.
    let mut senders: HashMap<String, InputSender> = HashMap::new();
    let mut transform_inputs = Vec::new();
    for (id, t) in &config.transforms {
        let TransformConfig::Filter(_) = t;
        let metrics = registry.register(id, "transform", "filter");
        let (tx, rx) = fanout::input_queue(metrics.clone(), None);
        senders.insert(id.clone(), tx);
        transform_inputs.push((id.clone(), t.clone(), metrics, rx));
    }
    let mut sink_inputs = Vec::new();
    for (id, s) in &config.sinks {
        let ty = match s {
            SinkConfig::File(_) => "file",
            SinkConfig::Console(_) => "console",
            SinkConfig::Blackhole(_) => "blackhole",
        };
        let metrics = registry.register(id, "sink", ty);
        let plan =
            match s {
                SinkConfig::File(cfg) => SinkPlan::File(Box::new(
                    crate::sinks::file::FileSink::new(cfg.clone(), metrics.clone(), reopen.clone()),
                )),
                SinkConfig::Console(cfg) => SinkPlan::Console(crate::sinks::console::encoder(cfg)),
                SinkConfig::Blackhole(_) => SinkPlan::Blackhole,
            };
        let prepare: Option<Arc<dyn fanout::Prepare>> = match &plan {
            SinkPlan::File(sink) => Some(sink.encoder()),
            SinkPlan::Console(encoder) => Some(encoder.clone()),
            SinkPlan::Blackhole => None,
        };
        let (tx, rx) = fanout::input_queue(metrics.clone(), prepare);
        senders.insert(id.clone(), tx);
        sink_inputs.push((id.clone(), plan, metrics, rx));
    }
    // Who reads from whom.
    let mut downstream: HashMap<&str, Vec<InputSender>> = HashMap::new();
    let consumers = config
        .transforms
        .iter()
        .map(|(id, t)| (id, t.inputs()))
        .chain(config.sinks.iter().map(|(id, s)| (id, s.inputs())));
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

    // Bind every source before anything starts.
    let mut bound = Vec::new();
    for (id, s) in &config.sources {
        let SourceConfig::Syslog(cfg) = s;
        let socket = match cfg.mode {
            SyslogMode::Tcp => Bound::Tcp(
                tcp::bind(cfg.address, cfg.receive_buffer)
                    .await
                    .with_context(|| {
                        format!("source '{id}': cannot listen on tcp {}", cfg.address)
                    })?,
            ),
            SyslogMode::Udp => Bound::Udp(
                udp::bind(cfg.address, cfg.receive_buffer)
                    .with_context(|| format!("source '{id}': cannot bind udp {}", cfg.address))?,
            ),
        };
        bound.push((id.clone(), cfg.clone(), socket));
    }

    let mut sinks = Vec::new();
    for (id, plan, metrics, input) in sink_inputs {
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let name = id.clone();
        std::thread::Builder::new()
            .name(format!("sink-{id}"))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(error) => {
                        tracing::error!(%error, component = %name, "Failed to start the sink's runtime.");
                        return;
                    }
                };
                rt.block_on(async move {
                    match plan {
                        SinkPlan::File(sink) => sink.run(input).await,
                        SinkPlan::Console(encoder) => {
                            crate::sinks::console::run(encoder, metrics, input).await
                        }
                        SinkPlan::Blackhole => crate::sinks::blackhole::run(metrics, input).await,
                    }
                });
                let _ = done_tx.send(());
            })
            .with_context(|| format!("sink '{id}': cannot start its thread"))?;
        sinks.push((id, done_rx));
    }

    let mut transforms = Vec::new();
    for (id, cfg, metrics, input) in transform_inputs {
        let fanout = Fanout::new(
            downstream.remove(id.as_str()).unwrap_or_default(),
            metrics.clone(),
        );
        let TransformConfig::Filter(cfg) = cfg;
        transforms.push(tokio::spawn(crate::transforms::filter::run(
            cfg, metrics, input, fanout,
        )));
    }

    let mut sources = Vec::new();
    for (id, cfg, socket) in bound {
        let metrics = registry.register(&id, "source", "syslog");
        let fanout = Fanout::new(
            downstream.remove(id.as_str()).unwrap_or_default(),
            metrics.clone(),
        );
        let ctx = Arc::new(SourceContext::new(id.as_str().into(), cfg, metrics, fanout));
        let task = match socket {
            Bound::Tcp(l) => tokio::spawn(tcp::run(l, ctx, signal.clone())),
            Bound::Udp(s) => tokio::spawn(udp::run(s, ctx, signal.clone())),
        };
        sources.push(task);
    }
    drop(downstream);

    Ok(Topology {
        trigger,
        signal,
        sources,
        transforms,
        sinks,
    })
}

impl Topology {
    /// A signal that fires when shutdown starts (for the API server and friends).
    pub fn shutdown_signal(&self) -> ShutdownSignal {
        self.signal.clone()
    }

    /// Stops everything in data order. Returns false if `timeout` passed before every sink
    /// flushed (the caller exits non-zero: some data may not have been written).
    pub async fn stop(self, timeout: Duration) -> bool {
        self.trigger.trigger();
        let drain = async {
            for task in self.sources {
                let _ = task.await;
            }
            for task in self.transforms {
                let _ = task.await;
            }
            for (id, done) in self.sinks {
                if done.await.is_err() {
                    tracing::error!(component = %id, "Sink stopped abnormally.");
                }
            }
        };
        tokio::time::timeout(timeout, drain).await.is_ok()
    }
}
