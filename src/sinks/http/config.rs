//! The `http` sink's configuration: its schema as written and its validation.

use std::time::Duration;

use loghaul_config::raw::{RawDuration, RawSize};
use loghaul_config::{ComponentConfig, Validator};
use serde::Deserialize;

pub const DEFAULT_MAX_EVENTS: usize = 1000;
pub const DEFAULT_MAX_BYTES: usize = 1 << 20;
pub const DEFAULT_BATCH_TIMEOUT: Duration = Duration::from_secs(1);
pub const DEFAULT_CONCURRENCY: usize = 4;
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_RETRY_INITIAL: Duration = Duration::from_millis(100);
pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(30);

/// `type: http`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttpSink {
    /// `http://HOST:PORT/PATH` to POST to. Required.
    pub uri: String,
    /// `ndjson` (default), `json_array` or `text`.
    #[serde(default)]
    pub encoding: Option<Encoding>,
    /// `none` (default), `gzip` or `zstd`.
    #[serde(default)]
    pub compression: Option<Compression>,
    #[serde(default)]
    pub max_events: Option<usize>,
    #[serde(default)]
    pub max_bytes: Option<RawSize>,
    /// How long a request may wait to fill. Default `1s`.
    #[serde(default)]
    pub timeout: Option<RawDuration>,
    /// Requests in flight at once (one keep-alive connection each). Default `4`.
    #[serde(default)]
    pub concurrency: Option<usize>,
    /// How long a request may take before it is retried. Default `30s`.
    #[serde(default)]
    pub request_timeout: Option<RawDuration>,
    /// Extra request headers.
    #[serde(default)]
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    /// `Authorization: Bearer TOKEN`.
    #[serde(default)]
    pub bearer: Option<String>,
    /// Basic auth, with `password`.
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
    /// A URL checked with GET at start; anything but 2xx is a warning, not an error.
    #[serde(default)]
    pub healthcheck_uri: Option<String>,
    #[serde(default)]
    pub retry: Option<RawRetry>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetry {
    #[serde(default)]
    pub initial: Option<RawDuration>,
    #[serde(default)]
    pub max: Option<RawDuration>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    Ndjson,
    JsonArray,
    Text,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// An `http` sink, validated.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpSinkConfig {
    pub uri: hyper::Uri,
    /// `HOST:PORT` to connect to.
    pub authority: String,
    pub encoding: Encoding,
    pub compression: Compression,
    pub max_events: usize,
    pub max_bytes: usize,
    pub timeout: Duration,
    pub concurrency: usize,
    pub request_timeout: Duration,
    pub headers: Vec<(String, String)>,
    /// The whole `Authorization` value to send, if any.
    pub authorization: Option<String>,
    pub healthcheck_uri: Option<hyper::Uri>,
    pub retry_initial: Duration,
    pub retry_max: Duration,
}

impl std::fmt::Debug for HttpSinkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token never reaches logs or `config` output.
        f.debug_struct("HttpSinkConfig")
            .field("uri", &self.uri)
            .field("encoding", &self.encoding)
            .field("compression", &self.compression)
            .field("max_events", &self.max_events)
            .field("concurrency", &self.concurrency)
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .finish_non_exhaustive()
    }
}

/// `HOST:PORT` to connect to for an http:// URI (port 80 when it names none).
pub fn authority(uri: &hyper::Uri) -> Option<String> {
    uri.authority().map(|a| {
        if a.port().is_some() {
            a.to_string()
        } else {
            format!("{}:80", a.host())
        }
    })
}

impl ComponentConfig for HttpSinkConfig {
    const TYPE: &'static str = "http";
    type Raw = RawHttpSink;

    fn validate(s: RawHttpSink, cx: &mut Validator<'_, '_>) -> Option<HttpSinkConfig> {
        let uri = match s.uri.parse::<hyper::Uri>() {
            Ok(u) if u.scheme_str() == Some("http") && u.authority().is_some() => Some(u),
            Ok(u) if u.scheme_str() == Some("https") => {
                cx.error(
                    &["uri"],
                    format!("`{u}`: https is not supported yet; use http://"),
                    None,
                );
                None
            }
            _ => {
                cx.error(
                    &["uri"],
                    format!("`{}` is not an http:// URI with a host", s.uri),
                    Some("e.g. uri: http://127.0.0.1:8080/logs".to_owned()),
                );
                None
            }
        };
        let max_events = cx.positive(s.max_events, "max_events", DEFAULT_MAX_EVENTS);
        let max_bytes = cx.size(s.max_bytes.as_ref(), "max_bytes", DEFAULT_MAX_BYTES, true);
        let timeout = cx.duration(s.timeout.as_ref(), "timeout", DEFAULT_BATCH_TIMEOUT, true);
        let concurrency = cx.positive(s.concurrency, "concurrency", DEFAULT_CONCURRENCY);
        let request_timeout = cx.duration(
            s.request_timeout.as_ref(),
            "request_timeout",
            DEFAULT_REQUEST_TIMEOUT,
            true,
        );
        let retry = s.retry.unwrap_or(RawRetry {
            initial: None,
            max: None,
        });
        let retry_initial = cx.duration_at(
            retry.initial.as_ref(),
            &["retry", "initial"],
            DEFAULT_RETRY_INITIAL,
            true,
        );
        let retry_max = cx.duration_at(
            retry.max.as_ref(),
            &["retry", "max"],
            DEFAULT_RETRY_MAX,
            true,
        );
        let authorization = crate::net::http::authorization(s.bearer, s.username, s.password);
        if authorization.is_none() {
            cx.error(
                &["bearer"],
                "give either a non-empty `bearer` token, or `username` and `password`",
                None,
            );
        }
        let healthcheck_uri = match s.healthcheck_uri.as_deref().map(str::parse::<hyper::Uri>) {
            None => Some(None),
            Some(Ok(u)) if u.scheme_str() == Some("http") && u.authority().is_some() => {
                Some(Some(u))
            }
            Some(_) => {
                cx.error(
                    &["healthcheck_uri"],
                    "`healthcheck_uri` is not an http:// URI with a host",
                    None,
                );
                None
            }
        };
        let uri = uri?;
        let authority = authority(&uri)?;
        Some(HttpSinkConfig {
            uri,
            authority,
            encoding: s.encoding.unwrap_or(Encoding::Ndjson),
            compression: s.compression.unwrap_or(Compression::None),
            max_events: max_events?,
            max_bytes: max_bytes?,
            timeout: timeout?,
            concurrency: concurrency?,
            request_timeout: request_timeout?,
            headers: s.headers.unwrap_or_default().into_iter().collect(),
            authorization: authorization?,
            healthcheck_uri: healthcheck_uri?,
            retry_initial: retry_initial?,
            retry_max: retry_max?,
        })
    }
}
