//! Sinks: components that write batches out.
//!
//! A sink type is a module here whose config implements [`loghaul_config::ComponentConfig`]
//! (schema and validation) and [`BuildSink`] (what its input queue needs, and the task that
//! consumes it), registered by one line in [`SinkConfig`] (see `docs/adding-a-component.md`).
//!
//! Sinks whose writes block (files, stdout) ask for their own OS thread with a single-threaded
//! runtime, so a slow disk never stalls the source tasks on the main runtime's workers; sinks
//! that only do async network I/O run as tasks on the main runtime.
//!
//! Every sink judges its failures into one [`SinkError`], which says whether a retry can help:
//! retryable failures are retried and drop nothing; permanent ones go to the dead letters.

pub mod blackhole;
pub mod console;
pub mod encoder;
pub mod error;
pub mod file;
pub mod fluent;
pub mod http;
#[cfg(feature = "kafka")]
pub mod kafka;
// Without librdkafka the kafka sink keeps its config (schema, validation) but cannot run.
#[cfg(not(feature = "kafka"))]
#[path = "kafka/unsupported.rs"]
pub mod kafka;
pub mod opentelemetry;
pub mod template;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

pub use error::{Retry, SinkError};

use crate::metrics::ComponentMetrics;
use crate::pipeline::{BoxFuture, Input, Prepare, QUEUE_BATCHES};

loghaul_config::component_set! {
    /// Every sink type.
    pub enum SinkConfig: Sink as dyn BuildSink {
        File(file::FileSinkConfig),
        Console(console::ConsoleSinkConfig),
        Blackhole(blackhole::BlackholeSinkConfig),
        Fluent(fluent::FluentSinkConfig),
        Http(http::HttpSinkConfig),
        Kafka(kafka::KafkaSinkConfig),
        Opentelemetry(opentelemetry::OpentelemetrySinkConfig),
    }
}

/// Bumped on SIGHUP; file sinks compare it to the generation they opened their files under and
/// reopen everything when it moved (logrotate's `postrotate` sends SIGHUP).
pub type ReopenGeneration = Arc<AtomicU64>;

/// What a sink is built with.
pub struct SinkContext {
    pub id: Arc<str>,
    pub metrics: Arc<ComponentMetrics>,
    /// Moves on SIGHUP (see [`ReopenGeneration`]).
    pub reopen: ReopenGeneration,
    /// How failures that may pass are retried, and when to give up (dead letters); `None`:
    /// the sink type's default.
    pub retry: Option<loghaul_config::RetryConfig>,
    /// The top-level `data_dir` (dead-letter files live under `<data_dir>/dlq/`).
    pub data_dir: std::path::PathBuf,
    /// `tls`, for sinks that connect (validated: the type said it takes it, the files load).
    pub tls: Option<loghaul_config::TlsConfig>,
}

impl SinkContext {
    /// The client end of TLS from `tls` (or, with `default` and no `tls`, from the system's
    /// trust store), its files watched for as long as the sink holds it (or read once, when
    /// `watch` is false: a one-shot job); `None` for plain connections.
    ///
    /// # Errors
    ///
    /// The TLS files no longer make a client config, or no CA is to be found.
    pub fn tls_client(
        &self,
        default: bool,
        watch: bool,
    ) -> anyhow::Result<Option<Arc<crate::net::tls::TlsClient>>> {
        let config = match (&self.tls, default) {
            (Some(config), _) => config.clone(),
            (None, true) => loghaul_config::TlsConfig::default(),
            (None, false) => return Ok(None),
        };
        if watch {
            crate::net::tls::TlsClient::start(&config, self.metrics.clone()).map(Some)
        } else {
            crate::net::tls::TlsClient::load(&config).map(Some)
        }
    }
}

/// Where a sink runs (also the `file` sink's `thread` option, as `own` or `shared`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkThread {
    /// Its own OS thread with a single-threaded runtime: for writes that may block for long
    /// (a hung network mount), which then hold up only this sink, whose sources push back as
    /// its queue fills.
    Own,
    /// A task on the main runtime: async I/O, or blocking writes that take microseconds (the
    /// page cache), which then need no hand-over between threads per batch.
    Shared,
}

/// The task that consumes a sink's input queue until every upstream is gone, flushing and
/// committing what it holds before it returns.
pub type RunSink = Box<dyn FnOnce(Input) -> BoxFuture<'static, ()> + Send>;

/// A sink ready to be wired: what its input queue needs, and the task that consumes it.
pub struct BuiltSink {
    /// Per-batch work the senders run before queueing (see [`Prepare`]).
    pub prepare: Option<Arc<dyn Prepare>>,
    /// Capacity of the sink's input queue, in batches.
    pub queue_batches: usize,
    pub thread: SinkThread,
    pub run: RunSink,
}

impl BuiltSink {
    /// A sink on its own thread with the default queue.
    pub fn on_own_thread(prepare: Option<Arc<dyn Prepare>>, run: RunSink) -> BuiltSink {
        BuiltSink {
            prepare,
            queue_batches: QUEUE_BATCHES,
            thread: SinkThread::Own,
            run,
        }
    }
}

/// How a sink config becomes a running sink.
pub trait BuildSink: Send + Sync {
    /// Builds the sink. Nothing may block here: the topology builds every component before any
    /// runs.
    ///
    /// # Errors
    ///
    /// Something the sink needs at start is missing, with what and why in the message.
    fn build(&self, cx: SinkContext) -> anyhow::Result<BuiltSink>;

    /// `loghaul validate --check`: tries what the sink will need, as far as it can without
    /// sending anything (its directory writable, its servers reachable). Each entry is a
    /// problem; none means nothing was found wrong.
    fn check(&self) -> Vec<String> {
        Vec::new()
    }

    /// Sends dead letters again (`loghaul dlq replay`); `None` when the sink type cannot.
    fn replay(
        &self,
        cx: SinkContext,
        letters: Vec<crate::pipeline::dlq::DeadLetter>,
    ) -> Option<BoxFuture<'static, Replayed>> {
        let _ = (cx, letters);
        None
    }
}

/// Whether a TCP connection to `address` (`host:port`) opens within a few seconds; the problem
/// otherwise, for [`BuildSink::check`].
pub fn reachable(address: &str) -> Result<(), String> {
    use std::net::ToSocketAddrs as _;
    let addrs: Vec<std::net::SocketAddr> = address
        .to_socket_addrs()
        .map_err(|e| format!("{address}: cannot resolve it: {e}"))?
        .collect();
    let mut last = format!("{address}: no address");
    for addr in addrs {
        match std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(3)) {
            Ok(_) => return Ok(()),
            Err(e) => last = format!("{address}: cannot connect to {addr}: {e}"),
        }
    }
    Err(last)
}

/// What a replay of dead letters achieved.
#[derive(Debug, Default)]
pub struct Replayed {
    /// Events the destination accepted this time.
    pub delivered: usize,
    /// Dead letters that failed again, with the new reason.
    pub failed: Vec<(crate::pipeline::dlq::DeadLetter, SinkError)>,
}
