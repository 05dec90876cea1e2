//! The `opentelemetry` source: OTLP logs from OpenTelemetry SDKs, the OpenTelemetry Collector,
//! Fluent Bit or Vector, over OTLP/HTTP (`POST /v1/logs`, binary protobuf or JSON, gzip) and
//! OTLP/gRPC (`LogsService/Export`), both on one port: the `http_server` listener, serving
//! [`Protocol::Otlp`] (see `http_server/otlp.rs` for the requests, `docs/specs/otlp.md` for
//! how a log record becomes an event).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use loghaul_config::raw::{RawDuration, RawSize};
use loghaul_config::{ComponentConfig, Resource, TlsRole, Validator};
use serde::Deserialize;

use super::http_server::config::{HttpServerConfig, Protocol, RawAuth, RawHttpServer};
use super::{BuildSource, RunningSource, SourceContext};
use crate::pipeline::BoxFuture;

/// OTLP/HTTP's default port, on the loopback interface.
pub const DEFAULT_ADDRESS: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4318);
/// The specification's recommended limit, before and after decompression: 20 MiB.
pub const DEFAULT_MAX_BODY_SIZE: usize = 20 << 20;

/// `type: opentelemetry`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOpentelemetry {
    /// `HOST:PORT` to listen on, for HTTP and gRPC alike. Default `127.0.0.1:4318`.
    #[serde(default)]
    pub address: Option<String>,
    /// Largest request body as sent. Default `20MiB`.
    #[serde(default)]
    pub max_body_size: Option<RawSize>,
    /// Largest request body once inflated. Default `20MiB`.
    #[serde(default)]
    pub max_decompressed_size: Option<RawSize>,
    /// Most log records one request may carry; more is refused (413, RESOURCE_EXHAUSTED).
    /// Default `500000`.
    #[serde(default)]
    pub max_events_per_request: Option<usize>,
    #[serde(default)]
    pub max_connections: Option<usize>,
    #[serde(default)]
    pub max_connections_per_client: Option<usize>,
    /// A request must arrive whole within this. Default `30s`.
    #[serde(default)]
    pub request_timeout: Option<RawDuration>,
    /// With acknowledgements, the longest wait for the sinks before answering 503
    /// (UNAVAILABLE), which exporters retry. Default `30s`.
    #[serde(default)]
    pub ack_timeout: Option<RawDuration>,
    /// Require `Authorization: Bearer TOKEN` or basic auth (the exporters' `headers`).
    #[serde(default)]
    pub auth: Option<RawAuth>,
}

/// An `opentelemetry` source, validated: the HTTP listener's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpentelemetryConfig(pub HttpServerConfig);

impl ComponentConfig for OpentelemetryConfig {
    const TYPE: &'static str = "opentelemetry";
    type Raw = RawOpentelemetry;

    fn validate(s: RawOpentelemetry, cx: &mut Validator<'_, '_>) -> Option<OpentelemetryConfig> {
        // The listener's settings are `http_server`'s, checked by its validation (the same
        // keys, so its errors point at this config's lines); only the defaults differ.
        let (body_given, inflated_given) =
            (s.max_body_size.is_some(), s.max_decompressed_size.is_some());
        let raw = RawHttpServer {
            address: Some(s.address.unwrap_or_else(|| DEFAULT_ADDRESS.to_string())),
            paths: None,
            tag_from_path: None,
            headers: None,
            query_parameters: None,
            response: None,
            max_body_size: s.max_body_size,
            max_decompressed_size: s.max_decompressed_size,
            max_events_per_request: s.max_events_per_request,
            max_connections: s.max_connections,
            max_connections_per_client: s.max_connections_per_client,
            request_timeout: s.request_timeout,
            ack_timeout: s.ack_timeout,
            auth: s.auth,
        };
        let mut config = HttpServerConfig::validate(raw, cx)?;
        if !body_given {
            config.max_body_size = DEFAULT_MAX_BODY_SIZE;
        }
        if !inflated_given {
            config.max_decompressed_size = DEFAULT_MAX_BODY_SIZE;
        }
        config.paths = vec!["/v1/logs".to_owned()];
        config.protocol = Protocol::Otlp;
        Some(OpentelemetryConfig(config))
    }

    fn resources(&self) -> Vec<Resource> {
        vec![Resource::tcp(self.0.address, "address")]
    }

    fn tls_role(&self) -> Result<TlsRole, String> {
        Ok(TlsRole::Server)
    }
}

impl BuildSource for OpentelemetryConfig {
    fn build(&self, cx: SourceContext) -> BoxFuture<'_, anyhow::Result<RunningSource>> {
        self.0.build(cx)
    }

    fn hands_over(&self) -> bool {
        true
    }

    /// An OTLP/JSON `ExportLogsServiceRequest` (the form `loghaul test` inputs are written in).
    fn decode_raw(&self, id: Arc<str>, bytes: &[u8]) -> Option<loghaul_core::EventBatch> {
        use loghaul_codec::otlp::{json, logs};
        let proto = bytes::Bytes::from(json::logs_request(bytes).ok()?);
        logs::measure(&proto).ok()?;
        logs::decode(&proto, id).ok().map(|d| d.batch)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::config::testing::{error_at, ok, source};
    use crate::sources::SourceConfig;

    fn config_of(body: &str) -> HttpServerConfig {
        let config = ok(&source(body));
        match &config.source("x").unwrap().config {
            SourceConfig::Opentelemetry(c) => c.0.clone(),
            _ => panic!("not an opentelemetry source"),
        }
    }

    #[test]
    fn defaults_are_otlps_and_the_listeners_keys_are_checked_as_http_servers() {
        let c = config_of("type: opentelemetry\n");
        assert_eq!(c.address, DEFAULT_ADDRESS);
        assert_eq!(c.max_body_size, DEFAULT_MAX_BODY_SIZE);
        assert_eq!(c.max_decompressed_size, DEFAULT_MAX_BODY_SIZE);
        assert_eq!(c.protocol, Protocol::Otlp);
        let c = config_of("type: opentelemetry\nmax_body_size: 1MiB\naddress: \"0.0.0.0:4317\"\n");
        assert_eq!(c.max_body_size, 1 << 20);
        assert_eq!(c.address.port(), 4317);
        error_at(
            &source("type: opentelemetry\nmax_body_size: 0\n"),
            "max_body_size",
            "",
        );
        error_at(
            &source("type: opentelemetry\nauth: { username: u }\n"),
            "auth",
            "`auth` takes either",
        );
        error_at(
            &source("type: opentelemetry\npaths: [\"/x\"]\n"),
            "paths",
            "unknown key `paths`",
        );
    }
}
