//! Per-component metrics and health, rendered as Prometheus text by the API.
//!
//! Every component gets one [`ComponentMetrics`] from the [`Registry`]. Counters are plain atomics
//! updated once per batch (never per event), so metrics cost nothing measurable on the hot path.
//! The names are specified in docs/specs/component.md; keep the two in step.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use loghaul_config::ComponentKind;

/// What went wrong, for `component_errors_total{kind}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A frame that did not parse in the configured format (kept as raw text).
    Parse,
    /// Bytes that are not UTF-8 (kept, replaced lossily on output).
    InvalidUtf8,
    /// A frame longer than `max_length` (truncated).
    Oversized,
    /// Broken framing: a bad octet count, an empty frame.
    Framing,
    /// A socket or file operation failed.
    Io,
    /// A connection refused because `max_connections` was reached.
    ConnectionLimit,
    /// A request that breaks its protocol (the wrong shape, broken msgpack); the connection is
    /// closed.
    Protocol,
    /// Compressed data that does not decompress, or names an unknown compression.
    Decompression,
    /// A handshake refused (wrong shared key or password, a malformed PING) or broken off.
    Auth,
    /// A peer did not acknowledge in time, or refused what was sent.
    Ack,
    /// A source's checkpoints could not be written (the disk holding `data_dir` is full or
    /// read-only): reading goes on, and a restart would read again what the last written
    /// checkpoint does not cover.
    Checkpoint,
    /// A TLS handshake that failed (garbage, a refused or missing client certificate) or did
    /// not finish within `tls.handshake_timeout`; or new TLS files that could not be loaded.
    Tls,
    /// A request refused for the memory budget (`limits.memory`): it could never fit (HTTP
    /// 413, a forward connection closed), or the budget stayed spent past its deadline (HTTP
    /// 503 with `Retry-After`).
    MemoryLimit,
    /// A connection cut off because its client sent nothing, or not a whole request head,
    /// within the source's bound (`idle_timeout`, the `http_server`'s `request_timeout`): a
    /// slow or stalled client (slowloris) holds a connection no longer than that.
    Timeout,
    /// A transform's program failed on an event (a fallible call that failed at run time, an
    /// `abort`); the event went where the transform's options say.
    Program,
    /// A value a `reduce` merge strategy cannot take (`concat` of a number): the value is left
    /// out of the merged event, the rest of the event merged.
    Merge,
}

impl ErrorKind {
    const ALL: [ErrorKind; 16] = [
        ErrorKind::Parse,
        ErrorKind::InvalidUtf8,
        ErrorKind::Oversized,
        ErrorKind::Framing,
        ErrorKind::Io,
        ErrorKind::ConnectionLimit,
        ErrorKind::Protocol,
        ErrorKind::Decompression,
        ErrorKind::Auth,
        ErrorKind::Ack,
        ErrorKind::Checkpoint,
        ErrorKind::Tls,
        ErrorKind::MemoryLimit,
        ErrorKind::Timeout,
        ErrorKind::Program,
        ErrorKind::Merge,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Parse => "parse",
            ErrorKind::InvalidUtf8 => "invalid_utf8",
            ErrorKind::Oversized => "oversized",
            ErrorKind::Framing => "framing",
            ErrorKind::Io => "io",
            ErrorKind::ConnectionLimit => "connection_limit",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Decompression => "decompression",
            ErrorKind::Auth => "auth",
            ErrorKind::Ack => "ack",
            ErrorKind::Checkpoint => "checkpoint",
            ErrorKind::Tls => "tls",
            ErrorKind::MemoryLimit => "memory_limit",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Program => "program",
            ErrorKind::Merge => "merge",
        }
    }
}

/// Why events were dropped on purpose, for `component_discarded_events_total{reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscardReason {
    /// A downstream queue was full and the source cannot push back (UDP).
    QueueFull,
    /// A filter did not match.
    Filtered,
    /// A downstream component is gone (it failed), so the events had nowhere to go.
    DownstreamClosed,
    /// A sink failed to write them.
    WriteFailed,
    /// Well-formed input that is no valid event (a forward entry whose time is a float).
    Invalid,
    /// Input of a kind the source does not handle (forward metrics and traces signals).
    Unsupported,
    /// A sink's buffer was full and its `when_full` is `drop_newest`.
    BufferFull,
    /// The memory budget (`limits.memory`) stayed spent longer than a source that cannot push
    /// back (UDP) may wait.
    MemoryLimit,
    /// A transform's output that no component reads (a route no sink takes).
    Unrouted,
    /// A transform's program failed or aborted on them and its options say drop them
    /// (`drop_on_error`, `drop_on_abort`).
    ProgramDropped,
    /// Over a `throttle` transform's `threshold` (and not rerouted).
    Throttled,
    /// A `dedupe` transform saw the same fields in its cache.
    Duplicate,
    /// Not among the events a `sample` transform keeps.
    Sampled,
}

impl ErrorKind {
    /// Whether a component of `kind` and type `ty` can count this kind of error: `/metrics`
    /// exports a zero series only for those (any count above zero is exported whatever this
    /// says).
    fn applies(self, kind: ComponentKind, ty: &str) -> bool {
        use ErrorKind as E;
        let listens = matches!(ty, "syslog" | "fluent" | "http_server");
        match kind {
            ComponentKind::Source => match self {
                E::Parse | E::InvalidUtf8 | E::Oversized | E::Io | E::MemoryLimit => true,
                E::Framing => ty == "syslog" || ty == "fluent",
                E::ConnectionLimit | E::Tls | E::Timeout => listens,
                E::Protocol | E::Decompression => matches!(ty, "fluent" | "http_server" | "kafka"),
                E::Auth => matches!(ty, "fluent" | "http_server" | "kafka"),
                E::Ack => matches!(ty, "fluent" | "http_server" | "file" | "kafka"),
                E::Checkpoint => matches!(ty, "file" | "kafka"),
                E::Program | E::Merge => false,
            },
            ComponentKind::Transform => match self {
                // Every transform that runs a VRL program or condition.
                E::Program => matches!(
                    ty,
                    "remap" | "route" | "filter" | "reduce" | "sample" | "throttle"
                ),
                E::Merge => ty == "reduce",
                _ => false,
            },
            ComponentKind::Sink => match self {
                E::Io => true,
                E::Protocol | E::Auth | E::Tls | E::Timeout => {
                    matches!(ty, "fluent" | "http" | "kafka")
                }
                E::Ack => matches!(ty, "fluent" | "http"),
                _ => false,
            },
        }
    }
}

impl DiscardReason {
    /// As [`ErrorKind::applies`], for discards.
    fn applies(self, kind: ComponentKind, ty: &str) -> bool {
        use DiscardReason as D;
        match kind {
            ComponentKind::Source => match self {
                D::QueueFull => ty == "syslog",
                D::DownstreamClosed | D::Invalid | D::Unsupported | D::MemoryLimit => true,
                _ => false,
            },
            ComponentKind::Transform => match self {
                D::DownstreamClosed => true,
                D::Filtered => ty == "filter",
                // A named output nobody reads: route's routes, remap's and throttle's `dropped`.
                D::Unrouted => matches!(ty, "route" | "remap" | "throttle"),
                D::ProgramDropped => ty == "remap",
                D::Throttled => ty == "throttle",
                D::Duplicate => ty == "dedupe",
                D::Sampled => ty == "sample",
                _ => false,
            },
            ComponentKind::Sink => matches!(self, D::WriteFailed | D::BufferFull | D::Invalid),
        }
    }

    const ALL: [DiscardReason; 13] = [
        DiscardReason::QueueFull,
        DiscardReason::Filtered,
        DiscardReason::DownstreamClosed,
        DiscardReason::WriteFailed,
        DiscardReason::Invalid,
        DiscardReason::Unsupported,
        DiscardReason::BufferFull,
        DiscardReason::MemoryLimit,
        DiscardReason::Unrouted,
        DiscardReason::ProgramDropped,
        DiscardReason::Throttled,
        DiscardReason::Duplicate,
        DiscardReason::Sampled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DiscardReason::QueueFull => "queue_full",
            DiscardReason::Filtered => "filtered",
            DiscardReason::DownstreamClosed => "downstream_closed",
            DiscardReason::WriteFailed => "write_failed",
            DiscardReason::Invalid => "invalid",
            DiscardReason::Unsupported => "unsupported",
            DiscardReason::BufferFull => "buffer_full",
            DiscardReason::MemoryLimit => "memory_limit",
            DiscardReason::Unrouted => "unrouted",
            DiscardReason::ProgramDropped => "program_dropped",
            DiscardReason::Throttled => "throttled",
            DiscardReason::Duplicate => "duplicate",
            DiscardReason::Sampled => "sampled",
        }
    }
}

/// A component's health, as `/health` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Starting = 0,
    Running = 1,
    /// Running, but its last operation failed (a sink that cannot write).
    Degraded = 2,
    Stopped = 3,
}

impl Health {
    /// How `/health` names the state when there is no reason to give.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Starting => "starting",
            Health::Running => "running",
            Health::Degraded => "degraded",
            Health::Stopped => "stopped",
        }
    }
}

/// The metrics and health of one component.
pub struct ComponentMetrics {
    pub id: String,
    /// Where it sits in the graph.
    pub kind: ComponentKind,
    /// The component's `type` (`syslog`, `file`...).
    pub component_type: &'static str,
    pub received_events: AtomicU64,
    pub received_bytes: AtomicU64,
    pub sent_events: AtomicU64,
    pub sent_bytes: AtomicU64,
    errors: [AtomicU64; ErrorKind::ALL.len()],
    discarded: [AtomicU64; DiscardReason::ALL.len()],
    pub open_connections: AtomicI64,
    /// Events waiting in this component's input queue.
    pub buffer_events: AtomicI64,
    /// Batches waiting in this component's input queue, and its capacity.
    pub buffer_batches: AtomicI64,
    pub buffer_max_batches: AtomicI64,
    /// Datagrams the kernel dropped before a UDP source read them, and whether this component
    /// counts them at all (only then is the series rendered).
    kernel_dropped: AtomicU64,
    kernel_drops_tracked: AtomicBool,
    health: AtomicU8,
    reason: Mutex<Option<String>>,
    /// Why the component's buffer fails, while it does: reported beside the component's own
    /// health, so that a sink whose server is down and whose disk buffer cannot write shows
    /// both, and neither clears the other when it recovers.
    buffer_failure: Mutex<Option<String>>,
    log_limiter: Mutex<Option<Instant>>,
    suppressed: AtomicU64,
    /// Series of the component's own (the file source's per-pattern counters), rendered after
    /// the common ones.
    extra: Mutex<Vec<Series>>,
    /// A transform's events out per named output (`_default` for its default one), when it
    /// has named outputs: `component_sent_events_total` is then rendered per output.
    outputs: Mutex<Vec<(String, Arc<AtomicU64>)>>,
}

/// One series a component registered for itself.
struct Series {
    name: &'static str,
    help: &'static str,
    kind: SeriesKind,
    /// Labels after the component's, already formatted (`pattern="*.log",reason="x"`); may be
    /// empty.
    labels: String,
    value: SeriesValue,
}

/// Where a series' value comes from.
enum SeriesValue {
    /// An atomic the component updates.
    Stored(Arc<AtomicI64>),
    /// Read when the series is rendered, from state the component keeps anyway (a disk
    /// buffer's statistics): always current, whatever the component is doing meanwhile.
    Read(Arc<dyn Fn() -> i64 + Send + Sync>),
}

impl SeriesValue {
    fn get(&self) -> i64 {
        match self {
            SeriesValue::Stored(value) => value.load(Ordering::Relaxed),
            SeriesValue::Read(read) => read(),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SeriesKind {
    Counter,
    Gauge,
}

impl ComponentMetrics {
    /// Metrics that no registry renders: for internal stages (a disk buffer's reader) that use
    /// the pipeline's parts but must not count as a component of their own.
    pub fn detached(
        id: &str,
        kind: ComponentKind,
        component_type: &'static str,
    ) -> Arc<ComponentMetrics> {
        Arc::new(ComponentMetrics::new(id, kind, component_type))
    }

    fn new(id: &str, kind: ComponentKind, component_type: &'static str) -> ComponentMetrics {
        ComponentMetrics {
            id: id.to_string(),
            kind,
            component_type,
            received_events: AtomicU64::new(0),
            received_bytes: AtomicU64::new(0),
            sent_events: AtomicU64::new(0),
            sent_bytes: AtomicU64::new(0),
            errors: Default::default(),
            discarded: Default::default(),
            open_connections: AtomicI64::new(0),
            buffer_events: AtomicI64::new(0),
            buffer_batches: AtomicI64::new(0),
            buffer_max_batches: AtomicI64::new(0),
            kernel_dropped: AtomicU64::new(0),
            kernel_drops_tracked: AtomicBool::new(false),
            health: AtomicU8::new(Health::Starting as u8),
            reason: Mutex::new(None),
            buffer_failure: Mutex::new(None),
            log_limiter: Mutex::new(None),
            suppressed: AtomicU64::new(0),
            extra: Mutex::new(Vec::new()),
            outputs: Mutex::new(Vec::new()),
        }
    }

    /// The counter of events sent on output `name` (see [`crate::pipeline::Fanout::for_output`]);
    /// registering one renders the component's `component_sent_events_total` per output.
    pub fn output_counter(&self, name: &str) -> Arc<AtomicU64> {
        let Ok(mut outputs) = self.outputs.lock() else {
            return Arc::new(AtomicU64::new(0));
        };
        if let Some((_, c)) = outputs.iter().find(|(n, _)| n == name) {
            return c.clone();
        }
        let counter = Arc::new(AtomicU64::new(0));
        outputs.push((name.to_owned(), counter.clone()));
        counter
    }

    /// A counter of the component's own, `name{component labels, labels}`; `labels` are
    /// `(name, value)` pairs. Counters only go up (add to the returned atomic).
    pub fn counter(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
    ) -> Arc<AtomicI64> {
        self.series(name, help, SeriesKind::Counter, labels)
    }

    /// A gauge of the component's own, as [`ComponentMetrics::counter`].
    pub fn gauge(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
    ) -> Arc<AtomicI64> {
        self.series(name, help, SeriesKind::Gauge, labels)
    }

    /// A counter of the component's own whose value `read` gives when the metrics are rendered
    /// (see [`ComponentMetrics::gauge_read`]).
    pub fn counter_read(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        read: impl Fn() -> i64 + Send + Sync + 'static,
    ) {
        self.series_read(name, help, SeriesKind::Counter, labels, Arc::new(read));
    }

    /// A gauge of the component's own whose value `read` gives when the metrics are rendered,
    /// for values the component keeps anyway: the series is never stale, even while the
    /// component waits. Asked for again, the series reads from the new `read`.
    pub fn gauge_read(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        read: impl Fn() -> i64 + Send + Sync + 'static,
    ) {
        self.series_read(name, help, SeriesKind::Gauge, labels, Arc::new(read));
    }

    fn series(
        &self,
        name: &'static str,
        help: &'static str,
        kind: SeriesKind,
        labels: &[(&str, &str)],
    ) -> Arc<AtomicI64> {
        let labels = format_labels(labels);
        let value = Arc::new(AtomicI64::new(0));
        if let Ok(mut extra) = self.extra.lock() {
            // The same series asked for twice is one series.
            if let Some(s) = extra.iter().find(|s| s.name == name && s.labels == labels)
                && let SeriesValue::Stored(existing) = &s.value
            {
                return existing.clone();
            }
            extra.retain(|s| !(s.name == name && s.labels == labels));
            extra.push(Series {
                name,
                help,
                kind,
                labels,
                value: SeriesValue::Stored(value.clone()),
            });
        }
        value
    }

    fn series_read(
        &self,
        name: &'static str,
        help: &'static str,
        kind: SeriesKind,
        labels: &[(&str, &str)],
        read: Arc<dyn Fn() -> i64 + Send + Sync>,
    ) {
        let labels = format_labels(labels);
        if let Ok(mut extra) = self.extra.lock() {
            // A log opened again (a restart of the buffer) replaces what the series reads.
            extra.retain(|s| !(s.name == name && s.labels == labels));
            extra.push(Series {
                name,
                help,
                kind,
                labels,
                value: SeriesValue::Read(read),
            });
        }
    }

    #[inline]
    pub fn received(&self, events: usize, bytes: usize) {
        self.received_events
            .fetch_add(events as u64, Ordering::Relaxed);
        self.received_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    #[inline]
    pub fn sent(&self, events: usize, bytes: usize) {
        self.sent_events.fetch_add(events as u64, Ordering::Relaxed);
        self.sent_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    #[inline]
    pub fn error(&self, kind: ErrorKind, count: u64) {
        if count > 0 {
            self.errors[kind as usize].fetch_add(count, Ordering::Relaxed);
        }
    }

    #[inline]
    pub fn discarded(&self, reason: DiscardReason, count: u64) {
        if count > 0 {
            self.discarded[reason as usize].fetch_add(count, Ordering::Relaxed);
        }
    }

    /// From now on `kernel_dropped_datagrams_total` is rendered for this component.
    pub fn track_kernel_drops(&self) {
        self.kernel_drops_tracked.store(true, Ordering::Relaxed);
    }

    pub fn kernel_dropped(&self, datagrams: u64) {
        if datagrams > 0 {
            self.kernel_dropped.fetch_add(datagrams, Ordering::Relaxed);
        }
    }

    pub fn errors(&self, kind: ErrorKind) -> u64 {
        self.errors[kind as usize].load(Ordering::Relaxed)
    }

    pub fn discarded_count(&self, reason: DiscardReason) -> u64 {
        self.discarded[reason as usize].load(Ordering::Relaxed)
    }

    pub fn set_health(&self, health: Health, reason: Option<String>) {
        self.health.store(health as u8, Ordering::Release);
        if let Ok(mut r) = self.reason.lock() {
            *r = reason;
        }
    }

    pub fn health(&self) -> (Health, Option<String>) {
        let h = match self.health.load(Ordering::Acquire) {
            0 => Health::Starting,
            1 => Health::Running,
            2 => Health::Degraded,
            _ => Health::Stopped,
        };
        let reason = self.reason.lock().ok().and_then(|r| r.clone());
        (h, reason)
    }

    /// Reports that the component's buffer fails (`Some(reason)`) or works again (`None`).
    /// The component's own health ([`ComponentMetrics::set_health`]) is left as it is.
    pub fn set_buffer_failure(&self, reason: Option<String>) {
        if let Ok(mut failure) = self.buffer_failure.lock() {
            *failure = reason;
        }
    }

    /// The health `/health` and `loghaul_component_up` report: the component's own, and its
    /// buffer's failure beside it. A running component whose buffer fails is degraded with the
    /// buffer's reason; one that is not running reports both reasons, its own first.
    pub fn reported_health(&self) -> (Health, Option<String>) {
        let (health, reason) = self.health();
        let Some(failure) = self.buffer_failure.lock().ok().and_then(|f| f.clone()) else {
            return (health, reason);
        };
        match health {
            Health::Running => (Health::Degraded, Some(failure)),
            _ => {
                let own = reason.unwrap_or_else(|| health.as_str().to_owned());
                (health, Some(format!("{own}; {failure}")))
            }
        }
    }

    /// Whether a warning about bad input may be logged now: at most one every 5 seconds per
    /// component, so a flood of garbage cannot flood the log. Returns how many were suppressed
    /// since the last one that was allowed.
    pub fn log_allowed(&self) -> Option<u64> {
        const EVERY: Duration = Duration::from_secs(5);
        let now = Instant::now();
        let Ok(mut last) = self.log_limiter.lock() else {
            return None;
        };
        match *last {
            Some(t) if now.duration_since(t) < EVERY => {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
                None
            }
            _ => {
                *last = Some(now);
                Some(self.suppressed.swap(0, Ordering::Relaxed))
            }
        }
    }
}

/// Logs a warning about one component through its rate limiter.
#[macro_export]
macro_rules! warn_limited {
    ($metrics:expr, $($arg:tt)+) => {
        if let Some(suppressed) = $metrics.log_allowed() {
            tracing::warn!(component = %$metrics.id, suppressed, $($arg)+);
        }
    };
}

/// All components' metrics.
#[derive(Default)]
pub struct Registry {
    components: Mutex<Vec<Arc<ComponentMetrics>>>,
    /// The global memory budget (`limits.memory`), rendered as two gauges.
    budget: Mutex<Option<Arc<loghaul_core::MemoryBudget>>>,
    /// Configuration reloads that took effect, and those refused.
    reloads_applied: AtomicU64,
    reloads_failed: AtomicU64,
    /// The last reload's outcome, for `/health`.
    last_reload: Mutex<Option<ReloadOutcome>>,
    /// Every output's tap point, for `loghaul tap` through the API.
    pub taps: crate::tap::TapHub,
    /// What each running transform and sink reads (`inputs`), for the graph of `GET /graph`.
    wiring: Mutex<Vec<(String, Vec<String>)>>,
    started: std::sync::OnceLock<Instant>,
}

/// One component as `GET /graph` (and so `loghaul top` and the console) shows it.
#[derive(Debug, serde::Serialize)]
pub struct ComponentSnapshot {
    pub id: String,
    pub kind: &'static str,
    #[serde(rename = "type")]
    pub component_type: &'static str,
    pub inputs: Vec<String>,
    pub health: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub received_events: u64,
    pub received_bytes: u64,
    pub sent_events: u64,
    pub sent_bytes: u64,
    /// Per named output (components with several).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<(String, u64)>,
    pub errors: u64,
    pub discarded: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_connections: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buffer_events: Option<i64>,
    /// Batches queued, and the most the queue holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buffer_batches: Option<(i64, i64)>,
}

/// What a configuration reload did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReloadOutcome {
    /// When it finished, RFC 3339 in UTC.
    pub time: String,
    /// `applied`, `unchanged` or `failed`.
    pub result: &'static str,
    /// What set it off: `signal`, `api` or `watch`.
    pub trigger: &'static str,
    /// Why it failed (every problem, one per line), when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The components added, rebuilt and removed.
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
}

impl Registry {
    /// Renders `budget`'s use and limit with the components' metrics.
    pub fn set_memory_budget(&self, budget: Arc<loghaul_core::MemoryBudget>) {
        if let Ok(mut b) = self.budget.lock() {
            *b = Some(budget);
        }
    }

    /// The metrics of component `id`. A component rebuilt by a reload as the same kind and
    /// type keeps its series (counters go on from where they were); otherwise it starts anew,
    /// replacing what the id had.
    pub fn register(
        &self,
        id: &str,
        kind: ComponentKind,
        component_type: &'static str,
    ) -> Arc<ComponentMetrics> {
        let Ok(mut c) = self.components.lock() else {
            return Arc::new(ComponentMetrics::new(id, kind, component_type));
        };
        if let Some(at) = c.iter().position(|m| m.id == id) {
            if c[at].kind == kind && c[at].component_type == component_type {
                return c[at].clone();
            }
            c.remove(at);
        }
        let m = Arc::new(ComponentMetrics::new(id, kind, component_type));
        c.push(m.clone());
        m
    }

    /// Records what each transform and sink reads (the running configuration's `inputs`).
    pub fn set_wiring(&self, wiring: Vec<(String, Vec<String>)>) {
        let _ = self.started.set(Instant::now());
        if let Ok(mut w) = self.wiring.lock() {
            *w = wiring;
        }
    }

    /// Every component with its counters now, in the configuration's order by kind, as JSON
    /// for `GET /graph`: `{"uptime_ms":..,"components":[..],"memory":{..},"last_reload":..}`.
    pub fn graph(&self) -> serde_json::Value {
        let wiring = self.wiring.lock().map(|w| w.clone()).unwrap_or_default();
        let mut components: Vec<ComponentSnapshot> = self
            .components()
            .iter()
            .map(|c| {
                let (health, reason) = c.reported_health();
                let listens = c.kind == ComponentKind::Source;
                let queued = c.kind != ComponentKind::Source;
                ComponentSnapshot {
                    id: c.id.clone(),
                    kind: c.kind.as_str(),
                    component_type: c.component_type,
                    inputs: wiring
                        .iter()
                        .find(|(id, _)| *id == c.id)
                        .map(|(_, i)| i.clone())
                        .unwrap_or_default(),
                    health: health.as_str(),
                    reason,
                    received_events: c.received_events.load(Ordering::Relaxed),
                    received_bytes: c.received_bytes.load(Ordering::Relaxed),
                    sent_events: c.sent_events.load(Ordering::Relaxed),
                    sent_bytes: c.sent_bytes.load(Ordering::Relaxed),
                    outputs: c
                        .outputs
                        .lock()
                        .map(|o| {
                            o.iter()
                                .map(|(n, v)| (n.clone(), v.load(Ordering::Relaxed)))
                                .collect()
                        })
                        .unwrap_or_default(),
                    errors: c.errors.iter().map(|e| e.load(Ordering::Relaxed)).sum(),
                    discarded: c.discarded.iter().map(|d| d.load(Ordering::Relaxed)).sum(),
                    open_connections: listens.then(|| c.open_connections.load(Ordering::Relaxed)),
                    buffer_events: queued.then(|| c.buffer_events.load(Ordering::Relaxed)),
                    buffer_batches: queued.then(|| {
                        (
                            c.buffer_batches.load(Ordering::Relaxed),
                            c.buffer_max_batches.load(Ordering::Relaxed),
                        )
                    }),
                }
            })
            .collect();
        let order = |k: &str| match k {
            "source" => 0,
            "transform" => 1,
            _ => 2,
        };
        components.sort_by_key(|c| order(c.kind));
        let budget = self.budget.lock().ok().and_then(|b| b.clone());
        serde_json::json!({
            "uptime_ms": self.started.get().map_or(0, |s| s.elapsed().as_millis() as u64),
            "components": components,
            "memory": budget.map(|b| serde_json::json!({"used": b.used(), "limit": b.limit()})),
            "last_reload": self.last_reload(),
        })
    }

    /// Puts back the components as [`Registry::components`] listed them (a reload that failed
    /// registers nothing).
    pub fn restore(&self, components: Vec<Arc<ComponentMetrics>>) {
        if let Ok(mut c) = self.components.lock() {
            *c = components;
        }
    }

    /// Forgets the components a reload removed: their series leave `/metrics`.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        if let Ok(mut c) = self.components.lock() {
            c.retain(|m| keep(&m.id));
        }
    }

    /// Records a reload's outcome: counted by result, and the last one shown in `/health`.
    pub fn reloaded(&self, outcome: ReloadOutcome) {
        let counter = if outcome.result == "failed" {
            &self.reloads_failed
        } else {
            &self.reloads_applied
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last_reload.lock() {
            *last = Some(outcome);
        }
    }

    /// The last reload's outcome, if there was one.
    pub fn last_reload(&self) -> Option<ReloadOutcome> {
        self.last_reload.lock().ok().and_then(|l| l.clone())
    }

    pub fn components(&self) -> Vec<Arc<ComponentMetrics>> {
        self.components
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
    }

    /// `Ok` when every component runs; otherwise the components that do not, with reasons.
    pub fn health(&self) -> Result<(), Vec<(String, String)>> {
        let bad: Vec<(String, String)> = self
            .components()
            .iter()
            .filter_map(|c| match c.reported_health() {
                (Health::Running, _) => None,
                (h, reason) => Some((c.id.clone(), reason.unwrap_or_else(|| h.as_str().into()))),
            })
            .collect();
        if bad.is_empty() { Ok(()) } else { Err(bad) }
    }

    /// Prometheus text exposition format 0.0.4.
    pub fn render(&self) -> String {
        let comps = self.components();
        let mut out = String::with_capacity(4096);
        let labels = |c: &ComponentMetrics| {
            format!(
                "component_id=\"{}\",component_kind=\"{}\",component_type=\"{}\"",
                escape_label(&c.id),
                c.kind.as_str(),
                c.component_type
            )
        };
        // `None`: the metric does not apply to the component (no series): connections exist only
        // on sources, input queues only on transforms and sinks.
        type Getter = fn(&ComponentMetrics) -> Option<i64>;
        let simple: [(&str, &str, &str, Getter); 8] = [
            (
                "loghaul_component_received_events_total",
                "counter",
                "Events the component accepted.",
                |c| Some(c.received_events.load(Ordering::Relaxed) as i64),
            ),
            (
                "loghaul_component_received_bytes_total",
                "counter",
                "Bytes the component accepted (wire bytes for sources).",
                |c| Some(c.received_bytes.load(Ordering::Relaxed) as i64),
            ),
            (
                "loghaul_component_sent_events_total",
                "counter",
                "Events the component passed on (sources, transforms) or wrote (sinks).",
                |c| Some(c.sent_events.load(Ordering::Relaxed) as i64),
            ),
            (
                "loghaul_component_sent_bytes_total",
                "counter",
                "Bytes the component wrote (sinks: encoded bytes).",
                |c| Some(c.sent_bytes.load(Ordering::Relaxed) as i64),
            ),
            (
                "loghaul_open_connections",
                "gauge",
                "Client connections open now.",
                |c| {
                    (c.kind == ComponentKind::Source)
                        .then(|| c.open_connections.load(Ordering::Relaxed))
                },
            ),
            (
                "loghaul_buffer_events",
                "gauge",
                "Events waiting in the component's input queue.",
                |c| {
                    (c.kind != ComponentKind::Source)
                        .then(|| c.buffer_events.load(Ordering::Relaxed))
                },
            ),
            (
                "loghaul_buffer_batches",
                "gauge",
                "Batches waiting in the component's input queue.",
                |c| {
                    (c.kind != ComponentKind::Source)
                        .then(|| c.buffer_batches.load(Ordering::Relaxed))
                },
            ),
            (
                "loghaul_buffer_max_batches",
                "gauge",
                "Capacity of the component's input queue, in batches.",
                |c| {
                    (c.kind != ComponentKind::Source)
                        .then(|| c.buffer_max_batches.load(Ordering::Relaxed))
                },
            ),
        ];
        for (name, ty, help, get) in simple {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {ty}");
            for c in &comps {
                if name == "loghaul_component_sent_events_total"
                    && let Ok(outputs) = c.outputs.lock()
                    && !outputs.is_empty()
                {
                    for (output, n) in outputs.iter() {
                        let n = n.load(Ordering::Relaxed);
                        let _ = writeln!(out, "{name}{{{},output=\"{output}\"}} {n}", labels(c));
                    }
                    continue;
                }
                if let Some(v) = get(c) {
                    let _ = writeln!(out, "{name}{{{}}} {v}", labels(c));
                }
            }
        }
        // Counter families with one extra label, one series per (component, label value).
        type Series = fn(&ComponentMetrics) -> Vec<(&'static str, u64)>;
        let families: [(&str, &str, &str, Series); 2] = [
            (
                "loghaul_component_errors_total",
                "Errors by kind (bad input, I/O).",
                "kind",
                |c| {
                    ErrorKind::ALL
                        .iter()
                        .map(|&k| (k, c.errors(k)))
                        .filter(|&(k, n)| n > 0 || k.applies(c.kind, c.component_type))
                        .map(|(k, n)| (k.as_str(), n))
                        .collect()
                },
            ),
            (
                "loghaul_component_discarded_events_total",
                "Events dropped on purpose, by reason.",
                "reason",
                |c| {
                    DiscardReason::ALL
                        .iter()
                        .map(|&r| (r, c.discarded_count(r)))
                        .filter(|&(r, n)| n > 0 || r.applies(c.kind, c.component_type))
                        .map(|(r, n)| (r.as_str(), n))
                        .collect()
                },
            ),
        ];
        for (name, help, label, series) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for c in &comps {
                for (value, count) in series(c) {
                    let _ = writeln!(out, "{name}{{{},{label}=\"{value}\"}} {count}", labels(c));
                }
            }
        }
        let name = "loghaul_component_kernel_dropped_datagrams_total";
        let _ = writeln!(
            out,
            "# HELP {name} Datagrams the kernel dropped before the source read them (socket \
             receive buffer full).\n# TYPE {name} counter"
        );
        for c in comps
            .iter()
            .filter(|c| c.kernel_drops_tracked.load(Ordering::Relaxed))
        {
            let n = c.kernel_dropped.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}{{{}}} {n}", labels(c));
        }
        // Components' own series, each name's HELP and TYPE once, in name order.
        let mut extra: std::collections::BTreeMap<&str, (&str, SeriesKind, String)> =
            std::collections::BTreeMap::new();
        for c in &comps {
            let Ok(series) = c.extra.lock() else { continue };
            for s in series.iter() {
                let entry = extra
                    .entry(s.name)
                    .or_insert_with(|| (s.help, s.kind, String::new()));
                let _ = writeln!(
                    entry.2,
                    "{}{{{}{}}} {}",
                    s.name,
                    labels(c),
                    s.labels,
                    s.value.get()
                );
            }
        }
        for (name, (help, kind, lines)) in extra {
            let kind = match kind {
                SeriesKind::Counter => "counter",
                SeriesKind::Gauge => "gauge",
            };
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            out.push_str(&lines);
        }
        let name = "loghaul_component_up";
        let _ = writeln!(
            out,
            "# HELP {name} 1 when the component runs healthily.\n# TYPE {name} gauge"
        );
        for c in &comps {
            let up = matches!(c.reported_health().0, Health::Running) as u8;
            let _ = writeln!(out, "{name}{{{}}} {up}", labels(c));
        }
        let budget = self.budget.lock().ok().and_then(|b| b.clone());
        if let Some(budget) = budget {
            for (name, help, value) in [
                (
                    "loghaul_memory_used_bytes",
                    "Bytes of the memory budget (limits.memory) that batches in flight hold now.",
                    budget.used(),
                ),
                (
                    "loghaul_memory_limit_bytes",
                    "The memory budget (limits.memory).",
                    budget.limit(),
                ),
            ] {
                let _ = writeln!(
                    out,
                    "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
                );
            }
        }
        render_process(&mut out);
        let name = "loghaul_config_reloads_total";
        let _ = writeln!(
            out,
            "# HELP {name} Configuration reloads, by result (applied: the running graph took it; failed: refused, the graph unchanged).\n# TYPE {name} counter\n{name}{{result=\"applied\"}} {}\n{name}{{result=\"failed\"}} {}",
            self.reloads_applied.load(Ordering::Relaxed),
            self.reloads_failed.load(Ordering::Relaxed),
        );
        out
    }
}

/// The `process_*` series Prometheus clients export (CPU, memory, descriptors, start time), read
/// from `/proc/self`, and `loghaul_build_info`.
fn render_process(out: &mut String) {
    let name = "loghaul_build_info";
    let _ = writeln!(
        out,
        "# HELP {name} The running binary: version, commit and target.\n# TYPE {name} gauge\n{name}{{version=\"{}\",build=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        escape_label(env!("LOGHAUL_BUILD")),
    );
    let mut gauge = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    let ticks = clock_ticks();
    let page = page_size();
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
        // The fields after the command name (which may hold spaces) are space-separated.
        && let Some((_, rest)) = stat.rsplit_once(')')
    {
        let f: Vec<&str> = rest.split_whitespace().collect();
        // Fields 14 and 15 (utime, stime) and 22 (starttime) of proc(5), counted from the state
        // (field 3) at index 0.
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let cpu = (num(11) + num(12)) / ticks;
        gauge(
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            cpu,
        );
        if let Some(boot) = boot_time() {
            gauge(
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since unix epoch in seconds.",
                boot + num(19) / ticks,
            );
        }
        gauge(
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            num(20),
        );
        gauge(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            num(21) * page,
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        gauge(
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            fds.count() as f64,
        );
    }
    if let Ok((soft, _)) = rlimit::getrlimit(rlimit::Resource::NOFILE) {
        gauge(
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            soft as f64,
        );
    }
}

#[allow(unsafe_code)]
fn clock_ticks() -> f64 {
    // SAFETY: sysconf reads a configuration value; it has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

#[allow(unsafe_code)]
fn page_size() -> f64 {
    // SAFETY: as in `clock_ticks`.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as f64 } else { 4096.0 }
}

/// The machine's boot time (`btime` of /proc/stat), in seconds since the epoch.
fn boot_time() -> Option<f64> {
    std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Labels after the component's: `,name="value"` each.
fn format_labels(labels: &[(&str, &str)]) -> String {
    labels
        .iter()
        .map(|(k, v)| format!(",{k}=\"{}\"", escape_label(v)))
        .collect()
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Series that can happen, and the process's: a file sink has no `decompression` errors nor
    /// `filtered` discards; a syslog source has `framing` errors; any count above zero shows.
    #[test]
    fn exports_the_series_that_can_happen_and_the_process() {
        let reg = Registry::default();
        let sink = reg.register("out", ComponentKind::Sink, "file");
        reg.register("in", ComponentKind::Source, "syslog");
        sink.error(ErrorKind::Parse, 2);
        let text = reg.render();
        assert!(!text.contains(
            r#"component_id="out",component_kind="sink",component_type="file",kind="decompression""#
        ));
        assert!(!text.contains(r#"component_type="file",reason="filtered""#));
        assert!(
            text.contains(r#"component_type="file",kind="io"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"component_type="file",kind="parse"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"component_type="syslog",kind="framing"} 0"#),
            "{text}"
        );
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
            "loghaul_build_info{",
        ] {
            assert!(text.contains(name), "{name} in:\n{text}");
        }
    }

    #[test]
    fn renders_the_memory_budget() {
        let reg = Registry::default();
        assert!(!reg.render().contains("loghaul_memory_used_bytes"));
        let budget = loghaul_core::MemoryBudget::new(1000);
        reg.set_memory_budget(budget.clone());
        let held = budget.try_charge(300);
        let text = reg.render();
        assert!(text.contains("\nloghaul_memory_used_bytes 300\n"), "{text}");
        assert!(
            text.contains("\nloghaul_memory_limit_bytes 1000\n"),
            "{text}"
        );
        drop(held);
        assert!(reg.render().contains("\nloghaul_memory_used_bytes 0\n"));
    }

    #[test]
    fn renders_counters_and_health() {
        let reg = Registry::default();
        let m = reg.register("in", ComponentKind::Source, "syslog");
        m.received(3, 30);
        m.error(ErrorKind::Parse, 2);
        m.discarded(DiscardReason::QueueFull, 5);
        assert!(reg.health().is_err(), "starting is not healthy yet");
        m.set_health(Health::Running, None);
        assert!(reg.health().is_ok());
        let text = reg.render();
        let labels = r#"component_id="in",component_kind="source",component_type="syslog""#;
        assert!(text.contains(&format!(
            "loghaul_component_received_events_total{{{labels}}} 3"
        )));
        assert!(text.contains(&format!(
            "loghaul_component_errors_total{{{labels},kind=\"parse\"}} 2"
        )));
        assert!(text.contains(&format!(
            "loghaul_component_discarded_events_total{{{labels},reason=\"queue_full\"}} 5"
        )));
        // Connections are a source's, queues a sink's or transform's.
        let sink = reg.register("out", ComponentKind::Sink, "file");
        let text = reg.render();
        assert!(text.contains(&format!("loghaul_open_connections{{{labels}}} 0")));
        assert!(!text.contains("loghaul_open_connections{component_id=\"out\""));
        assert!(!text.contains(&format!("loghaul_buffer_events{{{labels}}}")));
        sink.buffer_events.store(4, Ordering::Relaxed);
        assert!(reg.render().contains(
            "loghaul_buffer_events{component_id=\"out\",component_kind=\"sink\",component_type=\"file\"} 4"
        ));
        // Only components that count kernel drops (UDP sources) have the series.
        let drops = "loghaul_component_kernel_dropped_datagrams_total{";
        assert!(!text.contains(drops));
        m.track_kernel_drops();
        m.kernel_dropped(7);
        assert!(reg.render().contains(&format!("{drops}{labels}}} 7")));
    }

    #[test]
    fn read_series_are_current_at_every_render() {
        let reg = Registry::default();
        let m = reg.register("out", ComponentKind::Sink, "http");
        let state = Arc::new(AtomicU64::new(3));
        let read = state.clone();
        m.gauge_read("x_records", "Records.", &[], move || {
            read.load(Ordering::Relaxed) as i64
        });
        let series =
            "x_records{component_id=\"out\",component_kind=\"sink\",component_type=\"http\"}";
        assert!(reg.render().contains(&format!("{series} 3\n")));
        // Nothing refreshes it: the value is read when rendered.
        state.store(120, Ordering::Relaxed);
        assert!(reg.render().contains(&format!("{series} 120\n")));
        // Registered again (the log opened again), it reads from the new source, once.
        m.gauge_read("x_records", "Records.", &[], || 7);
        let text = reg.render();
        assert!(text.contains(&format!("{series} 7\n")), "{text}");
        assert_eq!(text.matches("x_records{").count(), 1, "{text}");
        assert_eq!(text.matches("# TYPE x_records gauge").count(), 1, "{text}");
    }

    #[test]
    fn a_buffer_failure_shows_beside_the_components_own_health() {
        let reg = Registry::default();
        let m = reg.register("out", ComponentKind::Sink, "http");
        m.set_health(Health::Running, None);
        let up = "loghaul_component_up{component_id=\"out\",component_kind=\"sink\",component_type=\"http\"}";
        let buffer = "disk buffer: cannot write: No space left on device";
        m.set_buffer_failure(Some(buffer.into()));
        assert_eq!(reg.health(), Err(vec![("out".into(), buffer.into())]));
        assert!(reg.render().contains(&format!("{up} 0\n")));
        // The sink fails too: both reasons, neither hiding the other.
        m.set_health(Health::Degraded, Some("connection refused".into()));
        assert_eq!(
            reg.health(),
            Err(vec![(
                "out".into(),
                format!("connection refused; {buffer}")
            )])
        );
        // The sink recovering leaves the buffer's failure...
        m.set_health(Health::Running, None);
        assert_eq!(reg.health(), Err(vec![("out".into(), buffer.into())]));
        // ...and the buffer recovering leaves the sink's.
        m.set_health(Health::Degraded, Some("connection refused".into()));
        m.set_buffer_failure(None);
        assert_eq!(
            reg.health(),
            Err(vec![("out".into(), "connection refused".into())])
        );
        m.set_health(Health::Running, None);
        assert_eq!(reg.health(), Ok(()));
        assert!(reg.render().contains(&format!("{up} 1\n")));
        // The component's own view is its own.
        m.set_buffer_failure(Some(buffer.into()));
        assert_eq!(m.health(), (Health::Running, None));
    }

    #[test]
    fn log_limiter_suppresses_floods() {
        let reg = Registry::default();
        let m = reg.register("in", ComponentKind::Source, "syslog");
        assert_eq!(m.log_allowed(), Some(0));
        assert_eq!(m.log_allowed(), None);
        assert_eq!(m.log_allowed(), None);
        assert_eq!(m.suppressed.load(Ordering::Relaxed), 2);
    }
}
