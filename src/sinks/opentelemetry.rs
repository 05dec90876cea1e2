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
use super::http::config::{Compression, Encoding, RawConcurrency, RawHttpSink, UriSpec};
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
    /// `http` (the default: OTLP/HTTP) or `grpc` (OTLP/gRPC over HTTP/2: cleartext for an
    /// `http://` uri, TLS agreeing on `h2` for `https://`).
    #[serde(default)]
    pub protocol: Option<OtlpProtocol>,
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

/// How requests are carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OtlpProtocol {
    Http,
    Grpc,
}

/// An OTLP/gRPC receiver on this machine, at OTLP/gRPC's default port.
pub const DEFAULT_GRPC_URI: &str = "http://127.0.0.1:4317";

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
        let grpc = s.protocol == Some(OtlpProtocol::Grpc);
        let mut ok = true;
        if grpc {
            // gRPC compresses messages with gzip only, and carries protobuf only.
            if s.compression == Some(Compression::Zstd) {
                cx.error(
                    &["compression"],
                    "OTLP/gRPC compresses with `gzip` or `none`",
                    None,
                );
                ok = false;
            }
            if s_encoding == OtlpEncoding::Json {
                cx.error(
                    &["encoding"],
                    "OTLP/gRPC carries protobuf; `encoding: json` is OTLP/HTTP's",
                    Some("protocol: http".to_owned()),
                );
                ok = false;
            }
        }
        let default_uri = if grpc { DEFAULT_GRPC_URI } else { DEFAULT_URI };
        let raw = RawHttpSink {
            uri: s.uri.unwrap_or_else(|| default_uri.to_owned()),
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
        if grpc {
            config.encoding = Encoding::OtlpGrpc;
            // The call's path is the service's, whatever path the URI names.
            let uri = match &config.uri {
                UriSpec::Static(u) => u.authority().and_then(|a| {
                    let scheme = if config.https { "https" } else { "http" };
                    format!("{scheme}://{a}{}", loghaul_codec::otlp::grpc::LOGS_EXPORT)
                        .parse::<hyper::Uri>()
                        .ok()
                }),
                _ => None,
            };
            match uri {
                Some(u) => config.uri = UriSpec::Static(u),
                None => {
                    cx.error(
                        &["uri"],
                        "OTLP/gRPC needs a fixed `http://HOST:PORT` (cleartext HTTP/2) or `https://HOST:PORT` (TLS), without templates",
                        None,
                    );
                    return None;
                }
            }
        }
        ok.then_some(OpentelemetrySinkConfig(config))
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::config::testing::{error_at, ok, sink};
    use crate::sinks::SinkConfig;

    fn config_of(body: &str) -> HttpSinkConfig {
        let config = ok(&sink(body));
        match &config.sink("x").unwrap().config {
            SinkConfig::Opentelemetry(c) => c.0.clone(),
            _ => panic!("not an opentelemetry sink"),
        }
    }

    #[test]
    fn protocols_encodings_and_what_grpc_refuses() {
        let c = config_of("type: opentelemetry\n");
        assert_eq!(c.encoding, Encoding::Otlp);
        assert_eq!(c.compression, Compression::Gzip);
        let c = config_of("type: opentelemetry\nencoding: json\n");
        assert_eq!(c.encoding, Encoding::OtlpJson);
        let c = config_of("type: opentelemetry\nprotocol: grpc\n");
        assert_eq!(c.encoding, Encoding::OtlpGrpc);
        let UriSpec::Static(uri) = &c.uri else {
            panic!("a fixed uri")
        };
        assert_eq!(
            uri.to_string(),
            "http://127.0.0.1:4317/opentelemetry.proto.collector.logs.v1.LogsService/Export"
        );
        error_at(
            &sink("type: opentelemetry\nprotocol: grpc\ncompression: zstd\n"),
            "compression",
            "gzip",
        );
        error_at(
            &sink("type: opentelemetry\nprotocol: grpc\nencoding: json\n"),
            "encoding",
            "protobuf",
        );
        let c = config_of(
            "type: opentelemetry\nprotocol: grpc\nuri: \"https://collector:4317/ignored\"\n",
        );
        let UriSpec::Static(uri) = &c.uri else {
            panic!("a fixed uri")
        };
        assert_eq!(
            uri.to_string(),
            "https://collector:4317/opentelemetry.proto.collector.logs.v1.LogsService/Export"
        );
        error_at(
            &sink("type: opentelemetry\nprotocol: grpc\nuri: \"http://{{ host }}:4317\"\n"),
            "uri",
            "templates",
        );
    }
}
