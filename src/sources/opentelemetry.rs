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

use super::http_server::config::{
    self as http, Auth, HttpServerConfig, Protocol, RawAuth, ResponseMode,
};
use super::{BuildSource, RunningSource, SourceContext};
use crate::net::http::authorization;
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
        let address = match &s.address {
            Some(a) => cx.address(a, &["address"]),
            None => Some(DEFAULT_ADDRESS),
        };
        let max_body_size = cx.size(
            s.max_body_size.as_ref(),
            "max_body_size",
            DEFAULT_MAX_BODY_SIZE,
            true,
        );
        let max_decompressed_size = cx.size(
            s.max_decompressed_size.as_ref(),
            "max_decompressed_size",
            DEFAULT_MAX_BODY_SIZE,
            true,
        );
        let max_events_per_request = cx.positive(
            s.max_events_per_request,
            "max_events_per_request",
            http::DEFAULT_MAX_EVENTS_PER_REQUEST,
        );
        let max_connections = cx.positive(
            s.max_connections,
            "max_connections",
            http::DEFAULT_MAX_CONNECTIONS,
        );
        let per_client =
            cx.optional_positive(s.max_connections_per_client, "max_connections_per_client");
        let request_timeout = cx.duration(
            s.request_timeout.as_ref(),
            "request_timeout",
            http::DEFAULT_REQUEST_TIMEOUT,
            true,
        );
        let ack_timeout = cx.duration(
            s.ack_timeout.as_ref(),
            "ack_timeout",
            http::DEFAULT_ACK_TIMEOUT,
            true,
        );
        let mut ok = true;
        let auth = match s
            .auth
            .map(|a| authorization(a.bearer, a.username, a.password))
        {
            None => None,
            Some(Some(Some(header))) => Some(Auth::Header(header)),
            Some(_) => {
                cx.error(
                    &["auth"],
                    "`auth` takes either a non-empty `bearer` token, or `username` and `password`",
                    Some("auth: { bearer: ${OTLP_TOKEN} }".to_owned()),
                );
                ok = false;
                None
            }
        };
        let config = HttpServerConfig {
            address: address?,
            paths: vec!["/v1/logs".to_owned()],
            tag_from_path: false,
            headers: Vec::new(),
            query_parameters: Vec::new(),
            response: ResponseMode::Ack,
            max_body_size: max_body_size?,
            max_decompressed_size: max_decompressed_size?,
            max_events_per_request: max_events_per_request?,
            max_connections: max_connections?,
            max_connections_per_client: per_client?,
            request_timeout: request_timeout?,
            ack_timeout: ack_timeout?,
            auth,
            protocol: Protocol::Otlp,
        };
        ok.then_some(OpentelemetryConfig(config))
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
