//! The `http_server` source's configuration: its schema as written, its validation and what it
//! claims.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use loghaul_config::raw::{RawDuration, RawSize};
use loghaul_config::{ComponentConfig, Resource, TlsRole, Validator};
use serde::Deserialize;

use crate::net::http::authorization;

pub const DEFAULT_ADDRESS: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8080);
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default `max_body_size`: 10MiB as sent (compressed or not).
pub const DEFAULT_MAX_BODY_SIZE: usize = 10 << 20;
/// Default `max_decompressed_size`: 100MiB, so a gzip bomb costs at most that.
pub const DEFAULT_MAX_DECOMPRESSED_SIZE: usize = 100 << 20;
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `max_events_per_request`: a body of more events is refused (413). Half a million
/// small events decode to about 50 MiB; real shippers send a few thousand per request.
pub const DEFAULT_MAX_EVENTS_PER_REQUEST: usize = 500_000;
/// Default `ack_timeout`: how long a request waits for its events to be committed before it is
/// answered 503 (the client retries; the events may still be written: at least once).
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(30);

/// `type: http_server`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttpServer {
    /// `HOST:PORT` to listen on. Default `127.0.0.1:8080`.
    #[serde(default)]
    pub address: Option<String>,
    /// Path prefixes that accept events. Default `["/"]`.
    #[serde(default)]
    pub paths: Option<Vec<String>>,
    /// The rest of the path after the prefix becomes the event's tag (Fluentd's in_http
    /// `POST /TAG`). Default `false`.
    #[serde(default)]
    pub tag_from_path: Option<bool>,
    /// Request headers copied into every event of the request, as fields named after them.
    #[serde(default)]
    pub headers: Option<Vec<String>>,
    /// Query parameters copied into every event of the request.
    #[serde(default)]
    pub query_parameters: Option<Vec<String>>,
    /// `ack` (the default: `{"accepted": N}`) or `echo` (the path and the time, for the lab).
    #[serde(default)]
    pub response: Option<ResponseMode>,
    #[serde(default)]
    pub max_body_size: Option<RawSize>,
    #[serde(default)]
    pub max_decompressed_size: Option<RawSize>,
    /// Most events one request may carry; more is answered 413. Default `500000`.
    #[serde(default)]
    pub max_events_per_request: Option<usize>,
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Most concurrent connections from one client address. Default: no limit of its own.
    #[serde(default)]
    pub max_connections_per_client: Option<usize>,
    /// A request (headers and body) must arrive within this. Default `30s`.
    #[serde(default)]
    pub request_timeout: Option<RawDuration>,
    /// With acknowledgements, the longest wait for the sinks before answering 503. Default `30s`.
    #[serde(default)]
    pub ack_timeout: Option<RawDuration>,
    /// Require `Authorization: Bearer TOKEN` or basic auth.
    #[serde(default)]
    pub auth: Option<RawAuth>,
}

/// `auth:`, as written: a bearer token, or a user and password.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    #[serde(default)]
    pub bearer: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseMode {
    Ack,
    Echo,
}

/// What a request must carry to be let in.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// The whole `Authorization` header value expected (`Bearer t` or `Basic base64`).
    Header(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets never reach logs or `config` output.
        f.write_str("Auth(<redacted>)")
    }
}

/// An `http_server` source, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpServerConfig {
    pub address: SocketAddr,
    pub paths: Vec<String>,
    pub tag_from_path: bool,
    /// Lower-cased header names.
    pub headers: Vec<String>,
    pub query_parameters: Vec<String>,
    pub response: ResponseMode,
    pub max_body_size: usize,
    pub max_decompressed_size: usize,
    pub max_events_per_request: usize,
    pub max_connections: usize,
    /// Most concurrent connections from one address, if limited.
    pub max_connections_per_client: Option<usize>,
    pub request_timeout: Duration,
    pub ack_timeout: Duration,
    pub auth: Option<Auth>,
    /// What the requests carry: set by the source type, never written in a config.
    pub protocol: Protocol,
}

/// What an HTTP listener's requests carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `http_server`: JSON, NDJSON or text events.
    Events,
    /// `opentelemetry`: OTLP logs over HTTP (protobuf, JSON) and gRPC.
    Otlp,
}

impl ComponentConfig for HttpServerConfig {
    const TYPE: &'static str = "http_server";
    type Raw = RawHttpServer;

    fn validate(s: RawHttpServer, cx: &mut Validator<'_, '_>) -> Option<HttpServerConfig> {
        let address = match &s.address {
            Some(a) => cx.address(a, &["address"]),
            None => Some(DEFAULT_ADDRESS),
        };
        let mut ok = true;
        let paths = s.paths.unwrap_or_else(|| vec!["/".to_owned()]);
        for (i, p) in paths.iter().enumerate() {
            if !p.starts_with('/') {
                cx.error(
                    &["paths", &i.to_string()],
                    format!("path `{p}` does not start with `/`"),
                    None,
                );
                ok = false;
            }
            if p == "/health" {
                cx.error(
                    &["paths", &i.to_string()],
                    "`/health` is the load balancers' check on every http_server listener",
                    None,
                );
                ok = false;
            }
        }
        let max_body_size = cx.size(
            s.max_body_size.as_ref(),
            "max_body_size",
            DEFAULT_MAX_BODY_SIZE,
            true,
        );
        let max_decompressed_size = cx.size(
            s.max_decompressed_size.as_ref(),
            "max_decompressed_size",
            DEFAULT_MAX_DECOMPRESSED_SIZE,
            true,
        );
        let max_events_per_request = cx.positive(
            s.max_events_per_request,
            "max_events_per_request",
            DEFAULT_MAX_EVENTS_PER_REQUEST,
        );
        let max_connections = cx.positive(
            s.max_connections,
            "max_connections",
            DEFAULT_MAX_CONNECTIONS,
        );
        let per_client =
            cx.optional_positive(s.max_connections_per_client, "max_connections_per_client");
        let request_timeout = cx.duration(
            s.request_timeout.as_ref(),
            "request_timeout",
            DEFAULT_REQUEST_TIMEOUT,
            true,
        );
        let ack_timeout = cx.duration(
            s.ack_timeout.as_ref(),
            "ack_timeout",
            DEFAULT_ACK_TIMEOUT,
            true,
        );
        let auth = match s
            .auth
            .map(|a| authorization(a.bearer, a.username, a.password))
        {
            None => None,
            Some(Some(Some(header))) => Some(Auth::Header(header)),
            // `auth:` given but empty or mixed.
            Some(_) => {
                cx.error(
                    &["auth"],
                    "`auth` takes either a non-empty `bearer` token, or `username` and `password`",
                    Some("auth: { bearer: ${HTTP_TOKEN} }".to_owned()),
                );
                ok = false;
                None
            }
        };
        let config = HttpServerConfig {
            address: address?,
            paths,
            tag_from_path: s.tag_from_path.unwrap_or(false),
            headers: s
                .headers
                .unwrap_or_default()
                .into_iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            query_parameters: s.query_parameters.unwrap_or_default(),
            response: s.response.unwrap_or(ResponseMode::Ack),
            max_body_size: max_body_size?,
            max_decompressed_size: max_decompressed_size?,
            max_events_per_request: max_events_per_request?,
            max_connections: max_connections?,
            max_connections_per_client: per_client?,
            request_timeout: request_timeout?,
            ack_timeout: ack_timeout?,
            auth,
            protocol: Protocol::Events,
        };
        ok.then_some(config)
    }

    fn resources(&self) -> Vec<Resource> {
        vec![Resource::tcp(self.address, "address")]
    }

    fn tls_role(&self) -> Result<TlsRole, String> {
        Ok(TlsRole::Server)
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
