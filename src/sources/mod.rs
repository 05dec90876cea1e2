//! Sources: components that accept events from the outside world and push batches downstream.
//!
//! A source type is a module here whose config implements [`loghaul_config::ComponentConfig`]
//! (schema and validation) and [`BuildSource`] (bind, then run), registered by one line in
//! [`SourceConfig`] (see `docs/adding-a-component.md`).

pub mod file;
pub mod fluent;
pub mod http_server;
#[cfg(feature = "kafka")]
pub mod kafka;
// Without librdkafka the kafka source keeps its config (schema, validation) but cannot run.
#[cfg(not(feature = "kafka"))]
#[path = "kafka/unsupported.rs"]
pub mod kafka;
pub mod opentelemetry;
pub mod syslog;

use std::sync::Arc;

use crate::metrics::ComponentMetrics;
use crate::pipeline::{BoxFuture, Fanout, ShutdownSignal};

loghaul_config::component_set! {
    /// Every source type.
    pub enum SourceConfig: Source as dyn BuildSource {
        Syslog(syslog::SyslogSourceConfig),
        Fluent(fluent::FluentSourceConfig),
        File(file::FileSourceConfig),
        HttpServer(http_server::HttpServerConfig),
        Kafka(kafka::KafkaSourceConfig),
        Opentelemetry(opentelemetry::OpentelemetryConfig),
    }
}

/// What a source is built with.
pub struct SourceContext {
    pub id: Arc<str>,
    pub metrics: Arc<ComponentMetrics>,
    /// Where its batches go.
    pub fanout: Fanout,
    /// Fires when the server stops, or a reload removes the source: stop accepting, drain,
    /// return.
    pub shutdown: ShutdownSignal,
    /// Fires when a reload hands the source's sockets to its successor (see
    /// [`BuildSource::hands_over`]): stop accepting, keep serving open connections until they
    /// end or `shutdown` fires. Never fires for a source that does not hand over.
    pub retire: ShutdownSignal,
    /// Where listening sockets come from, so a reload can hand them over: use
    /// [`SourceContext::listen`] and [`SourceContext::bind_udp`], never a bind of one's own.
    pub sockets: Arc<crate::net::sockets::SocketPool>,
    /// Whether to answer clients only once every sink fed by this source has committed their
    /// events (forward acks, HTTP responses); sources whose protocol has no answer ignore it.
    pub acknowledgements: bool,
    /// How long the whole stop may take: a source still waiting for acknowledgements at
    /// shutdown gives up before it.
    pub shutdown_timeout: std::time::Duration,
    /// The top-level `data_dir`: sources that keep state use `<data_dir>/<id>`.
    pub data_dir: std::path::PathBuf,
    /// `tls`, for sources that listen (validated: the type said it takes it, the files load).
    pub tls: Option<loghaul_config::TlsConfig>,
}

impl SourceContext {
    /// How the source's listener limits and secures its connections: `tls` started (and its
    /// files watched), offering `alpn`.
    ///
    /// # Errors
    ///
    /// The TLS files no longer make a server config (they changed since validation).
    pub fn serve_options(
        &self,
        limits: crate::net::listener::Limits,
        alpn: &'static [&'static [u8]],
    ) -> anyhow::Result<crate::net::listener::ServeOptions> {
        let tls = match &self.tls {
            Some(config) => Some(crate::net::tls::TlsServer::start(
                config,
                alpn,
                self.metrics.clone(),
                self.shutdown.clone(),
            )?),
            None => None,
        };
        Ok(crate::net::listener::ServeOptions {
            max_connections: limits.max_connections,
            max_per_client: limits.max_per_client,
            tls,
            idle_timeout: limits.idle_timeout,
            retire: Some(self.retire.clone()),
        })
    }

    /// The source's TCP listener on `addr` (its predecessor's socket after a reload).
    ///
    /// # Errors
    ///
    /// The address is in use by another program or not available, with the address in the
    /// message.
    pub async fn listen(
        &self,
        addr: std::net::SocketAddr,
        receive_buffer: Option<usize>,
    ) -> anyhow::Result<tokio::net::TcpListener> {
        use anyhow::Context as _;
        let listener = self
            .sockets
            .tcp(&self.id, addr, receive_buffer)
            .await
            .with_context(|| format!("cannot listen on tcp {addr}"))?;
        let tls = if self.tls.is_some() { "yes" } else { "no" };
        tracing::info!("{} listening on tcp://{addr} (tls: {tls})", self.id);
        Ok(listener)
    }

    /// The source's UDP socket on `addr`, as [`SourceContext::listen`].
    ///
    /// # Errors
    ///
    /// As [`SourceContext::listen`].
    pub fn bind_udp(
        &self,
        addr: std::net::SocketAddr,
        receive_buffer: Option<usize>,
    ) -> anyhow::Result<tokio::net::UdpSocket> {
        use anyhow::Context as _;
        let socket = self
            .sockets
            .udp(&self.id, addr, receive_buffer)
            .with_context(|| format!("cannot bind udp {addr}"))?;
        tracing::info!("{} listening on udp://{addr}", self.id);
        Ok(socket)
    }

    /// Fires on `shutdown` or `retire`, for what stops on either (a UDP reader: its successor
    /// reads the same socket).
    pub fn shutdown_or_retire(&self) -> ShutdownSignal {
        self.shutdown.or(&self.retire)
    }
}

/// A built source: runs until shutdown and its drain are over.
pub type RunningSource = BoxFuture<'static, ()>;

/// How a source config becomes a running source.
pub trait BuildSource: Send + Sync {
    /// Binds everything the source listens on (the topology builds every source before any
    /// runs, so a busy port fails the start cleanly) and returns the task that runs it.
    ///
    /// # Errors
    ///
    /// A socket cannot be bound, with the address in the message.
    fn build(&self, cx: SourceContext) -> BoxFuture<'_, anyhow::Result<RunningSource>>;

    /// Whether a reload may run the changed source beside its predecessor: its sockets are
    /// handed over and the predecessor, retired, serves its open connections to their end.
    /// A source that keeps state of its own (file positions, a consumer group) says no: its
    /// predecessor stops first and the new one is built after.
    fn hands_over(&self) -> bool {
        false
    }

    /// The batch this source would send for `bytes` read from a client (framed and decoded as
    /// configured), for the raw inputs of `loghaul test`; `None` when the type takes none.
    fn decode_raw(&self, id: Arc<str>, bytes: &[u8]) -> Option<loghaul_core::EventBatch> {
        let _ = (id, bytes);
        None
    }
}
