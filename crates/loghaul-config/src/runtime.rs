//! Validated runtime configuration: what the server consumes.
//!
//! Everything here has been checked: addresses parsed, sizes and durations converted, ids unique,
//! inputs resolved, the transform graph acyclic and no two components fighting over a port.
//! Building the topology from a [`Config`] should not need to fail for configuration reasons.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::component::{Component, Registry};
use crate::diagnostic::Diagnostic;

/// A validated configuration over the component sets of `R`. Components keep the file's order.
#[derive(Clone, Debug, PartialEq)]
pub struct Config<R: Registry> {
    /// The HTTP API, or `None` when disabled.
    pub api: Option<ApiConfig>,
    /// How long shutdown waits for in-flight events.
    pub shutdown_timeout: Duration,
    /// Where sources keep their state (the file source's checkpoints, a folder per source).
    pub data_dir: PathBuf,
    /// Global limits.
    pub limits: Limits,
    pub sources: Vec<Component<R::Source>>,
    pub transforms: Vec<Component<R::Transform>>,
    pub sinks: Vec<Component<R::Sink>>,
    /// The unit tests written in the configuration (`loghaul test`; `loghaul run` ignores them).
    pub tests: Vec<crate::unit_tests::UnitTest<R::Condition>>,
    /// Things that work but are probably mistakes (a source nobody reads...).
    pub warnings: Vec<Diagnostic>,
}

/// Limits that hold across every component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The memory budget, in bytes, for batches in flight: in queues, memory buffers and sinks'
    /// hands. Above it sources wait (and so push back on their senders).
    pub memory: usize,
}

/// The HTTP API.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiConfig {
    /// Where it listens.
    pub address: SocketAddr,
    /// The bearer token requests must carry, if any.
    pub token: Option<String>,
    /// TLS on its listener.
    pub tls: Option<loghaul_tls::TlsConfig>,
}

impl std::fmt::Debug for ApiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token never reaches logs or output.
        f.debug_struct("ApiConfig")
            .field("address", &self.address)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .finish()
    }
}

/// The zone assumed for timestamps that carry none (RFC 3164 has no zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TimeZoneSetting {
    /// UTC.
    #[default]
    Utc,
    /// The server's local zone.
    Local,
    /// A fixed offset, in seconds east of UTC.
    Fixed(i32),
}

impl<R: Registry> Config<R> {
    /// Warnings found while loading (the configuration works, but maybe not as meant).
    pub fn warnings(&self) -> &[Diagnostic] {
        &self.warnings
    }

    /// The source with this id.
    pub fn source(&self, id: &str) -> Option<&Component<R::Source>> {
        self.sources.iter().find(|c| c.id == id)
    }

    /// The transform with this id.
    pub fn transform(&self, id: &str) -> Option<&Component<R::Transform>> {
        self.transforms.iter().find(|c| c.id == id)
    }

    /// The sink with this id.
    pub fn sink(&self, id: &str) -> Option<&Component<R::Sink>> {
        self.sinks.iter().find(|c| c.id == id)
    }
}
