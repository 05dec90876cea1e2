//! Validated runtime configuration: what the server consumes.
//!
//! Everything here has been checked: addresses parsed, sizes and durations converted, ids unique,
//! inputs resolved, the transform graph acyclic and no two sources fighting over a port. Building
//! the topology from a [`Config`] should not need to fail for configuration reasons.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use crate::diagnostic::Diagnostic;
use crate::template::PathTemplate;

/// A validated configuration. Components keep the file's order.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The HTTP API, or `None` when disabled.
    pub api: Option<ApiConfig>,
    /// How long shutdown waits for in-flight events.
    pub shutdown_timeout: Duration,
    /// Sources by id.
    pub sources: Vec<(String, SourceConfig)>,
    /// Transforms by id.
    pub transforms: Vec<(String, TransformConfig)>,
    /// Sinks by id.
    pub sinks: Vec<(String, SinkConfig)>,
    /// Things that work but are probably mistakes (a source nobody reads...).
    pub warnings: Vec<Diagnostic>,
}

/// The HTTP API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiConfig {
    /// Where it listens.
    pub address: SocketAddr,
}

/// A source.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceConfig {
    /// Syslog over TCP or UDP.
    Syslog(SyslogSourceConfig),
}

/// A syslog source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyslogSourceConfig {
    /// Transport.
    pub mode: SyslogMode,
    /// Where it listens.
    pub address: SocketAddr,
    /// Message format.
    pub format: SyslogFormat,
    /// TCP framing (always `Auto` for UDP).
    pub framing: Framing,
    /// Longest accepted message, in bytes (> 0).
    pub max_length: usize,
    /// Most concurrent TCP connections (> 0).
    pub max_connections: usize,
    /// `SO_RCVBUF`, when set.
    pub receive_buffer: Option<usize>,
    /// Reject what does not parse instead of keeping it raw.
    pub strict: bool,
    /// Zone for timestamps without one.
    pub timezone: TimeZoneSetting,
}

/// Syslog transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyslogMode {
    /// Stream sockets; see [`Framing`].
    Tcp,
    /// One message per datagram.
    Udp,
}

/// Syslog message format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyslogFormat {
    /// RFC 5424 when the message says so, else RFC 3164, else raw.
    #[default]
    Auto,
    /// BSD syslog.
    Rfc3164,
    /// IETF syslog.
    Rfc5424,
    /// No parsing: the whole message is the body.
    Raw,
}

/// How messages are delimited on a TCP stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Framing {
    /// Octet counting when a frame starts with a digit, newline otherwise (RFC 6587).
    #[default]
    Auto,
    /// One message per line.
    Newline,
    /// `LEN SP MSG` frames (RFC 6587 §3.4.1).
    OctetCounting,
}

/// How events are written by a sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// One JSON object per line.
    #[default]
    Json,
    /// The message text, one per line.
    Text,
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

/// A transform.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransformConfig {
    /// Keeps the events that match every given condition.
    Filter(FilterConfig),
}

/// A filter transform. Unset conditions match everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterConfig {
    /// Ids read from.
    pub inputs: Vec<String>,
    /// Keep events whose severity code is at most this (0 = emerg is the most severe).
    pub min_severity: Option<u8>,
    /// Keep events whose facility code is one of these.
    pub facilities: Option<Vec<u8>>,
    /// Keep events whose app name is one of these.
    pub appnames: Option<Vec<String>>,
    /// Keep events whose message contains this.
    pub contains: Option<String>,
}

/// A sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkConfig {
    /// Files named by a path template.
    File(FileSinkConfig),
    /// Standard output.
    Console(ConsoleSinkConfig),
    /// Counts events and discards them: measures sources without a sink's cost.
    Blackhole(BlackholeSinkConfig),
}

/// A blackhole sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlackholeSinkConfig {
    /// Ids read from.
    pub inputs: Vec<String>,
}

/// A file sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSinkConfig {
    /// Ids read from.
    pub inputs: Vec<String>,
    /// The parsed path template.
    pub path: PathTemplate,
    /// The template as written, for messages.
    pub path_raw: String,
    /// Output encoding.
    pub encoding: Encoding,
    /// How often writes are flushed (> 0).
    pub flush_interval: Duration,
    /// Close files idle this long (> 0).
    pub idle_timeout: Duration,
    /// Most files open at once (> 0).
    pub max_open_files: usize,
}

/// A console sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsoleSinkConfig {
    /// Ids read from.
    pub inputs: Vec<String>,
    /// Output encoding.
    pub encoding: Encoding,
}

impl SourceConfig {
    /// The `type` name.
    pub fn type_name(&self) -> &'static str {
        match self {
            SourceConfig::Syslog(_) => "syslog",
        }
    }
}

impl TransformConfig {
    /// Ids this transform reads from.
    pub fn inputs(&self) -> &[String] {
        match self {
            TransformConfig::Filter(f) => &f.inputs,
        }
    }

    /// The `type` name.
    pub fn type_name(&self) -> &'static str {
        match self {
            TransformConfig::Filter(_) => "filter",
        }
    }
}

impl SinkConfig {
    /// Ids this sink reads from.
    pub fn inputs(&self) -> &[String] {
        match self {
            SinkConfig::File(f) => &f.inputs,
            SinkConfig::Console(c) => &c.inputs,
            SinkConfig::Blackhole(b) => &b.inputs,
        }
    }

    /// The `type` name.
    pub fn type_name(&self) -> &'static str {
        match self {
            SinkConfig::File(_) => "file",
            SinkConfig::Console(_) => "console",
            SinkConfig::Blackhole(_) => "blackhole",
        }
    }
}
