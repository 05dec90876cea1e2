//! The `opentelemetry` sink: events as OTLP log records, POSTed to an OTLP/HTTP receiver (the
//! OpenTelemetry Collector, a vendor's endpoint, another loghaul) as `ExportLogsServiceRequest`s
//! in binary protobuf or OTLP/JSON. It is the `http` sink with the OTLP encoding: the same batching,
//! keep-alive pool, concurrency, retries with backoff and dead letters, with what is retried
//! narrowed to what the OTLP specification says (429, 502, 503, 504, honouring `Retry-After`).
//! How an event becomes a record: `docs/specs/otlp.md`.

use loghaul_config::raw::{RawDuration, RawSize};
use loghaul_config::{ComponentConfig, Validator};
use serde::Deserialize;

use super::http::HttpSinkConfig;
use super::http::config::{Compression, Encoding, RawConcurrency, RawHttpSink};
use super::{BuildSink, BuiltSink, SinkContext};

/// An OTLP/HTTP receiver on this machine, at OTLP's default port and path.
pub const DEFAULT_URI: &str = "http://127.0.0.1:4318/v1/logs";

/// `type: opentelemetry`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOpentelemetrySink {
    /// The receiver's logs endpoint. Default `http://127.0.0.1:4318/v1/logs`.
    #[serde(default)]
    pub uri: Option<String>,
    /// `protobuf` (the default) or `json`: OTLP/HTTP's two encodings.
    #[serde(default)]
    pub encoding: Option<OtlpEncoding>,
    /// `gzip` (the default, as the Collector's exporters send), `zstd` or `none`.
    #[serde(default)]
    pub compression: Option<Compression>,
    /// Most log records in one request. Default `1000`.
    #[serde(default)]
    pub max_events: Option<usize>,
    #[serde(default)]
    pub max_bytes: Option<RawSize>,
    /// How long a request waits to fill before it is sent. Default `1s`.
    #[serde(default)]
    pub timeout: Option<RawDuration>,
    #[serde(default)]
    pub concurrency: Option<RawConcurrency>,
    #[serde(default)]
    pub max_concurrency: Option<usize>,
    #[serde(default)]
    pub request_timeout: Option<RawDuration>,
    /// Extra request headers (an API key); values may be templates.
    #[serde(default)]
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default)]
    pub bearer: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
}

/// How requests are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OtlpEncoding {
    Protobuf,
    Json,
}

/// An `opentelemetry` sink, validated: the HTTP sink's settings with the OTLP encoding.
#[derive(Clone, Debug, PartialEq)]
pub struct OpentelemetrySinkConfig(pub HttpSinkConfig);

impl ComponentConfig for OpentelemetrySinkConfig {
    const TYPE: &'static str = "opentelemetry";
    type Raw = RawOpentelemetrySink;

    fn validate(
        s: RawOpentelemetrySink,
        cx: &mut Validator<'_, '_>,
    ) -> Option<OpentelemetrySinkConfig> {
        let s_encoding = s.encoding.unwrap_or(OtlpEncoding::Protobuf);
        let raw = RawHttpSink {
            uri: s.uri.unwrap_or_else(|| DEFAULT_URI.to_owned()),
            encoding: None,
            compression: Some(s.compression.unwrap_or(Compression::Gzip)),
            max_events: s.max_events,
            max_bytes: s.max_bytes,
            timeout: s.timeout,
            concurrency: s.concurrency,
            max_concurrency: s.max_concurrency,
            request_timeout: s.request_timeout,
            headers: s.headers,
            bearer: s.bearer,
            username: s.username,
            password: s.password,
            healthcheck_uri: None,
        };
        let mut config = HttpSinkConfig::validate(raw, cx)?;
        config.encoding = match s_encoding {
            OtlpEncoding::Protobuf => Encoding::Otlp,
            OtlpEncoding::Json => Encoding::OtlpJson,
        };
        Some(OpentelemetrySinkConfig(config))
    }

    fn tls_role(&self) -> Result<loghaul_config::TlsRole, String> {
        self.0.tls_role()
    }
}

impl BuildSink for OpentelemetrySinkConfig {
    fn check(&self) -> Vec<String> {
        self.0.check()
    }

    fn build(&self, cx: SinkContext) -> anyhow::Result<BuiltSink> {
        self.0.build(cx)
    }

    fn replay(
        &self,
        cx: SinkContext,
        letters: Vec<crate::pipeline::dlq::DeadLetter>,
    ) -> Option<crate::pipeline::BoxFuture<'static, crate::sinks::Replayed>> {
        self.0.replay(cx, letters)
    }
}
