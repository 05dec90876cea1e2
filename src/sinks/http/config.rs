//! The `http` sink's configuration: its schema as written and its validation.
//!
//! `uri` and header values may hold `{{ field }}` references; they are parsed here once, and
//! checked by rendering them with a stand-in value, so a template that could never make a valid
//! request is a config error rather than a stream of refused events.

use std::time::Duration;

use hyper::header::{self, HeaderName, HeaderValue};
use loghaul_config::raw::{RawDuration, RawSize};
use loghaul_config::{ComponentConfig, PathTemplate, TemplatePart, Validator};
use serde::{Deserialize, Deserializer};

use super::target::Target;

pub const DEFAULT_MAX_EVENTS: usize = 1000;
pub const DEFAULT_MAX_BYTES: usize = 1 << 20;
pub const DEFAULT_BATCH_TIMEOUT: Duration = Duration::from_secs(1);
pub const DEFAULT_CONCURRENCY: usize = 4;
/// Default `max_concurrency` for `concurrency: adaptive`.
pub const DEFAULT_MAX_CONCURRENCY: usize = 64;
/// The largest `max_concurrency`: every slot is a task holding up to one request.
pub const MAX_MAX_CONCURRENCY: usize = 1024;
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// `type: http`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttpSink {
    /// `http://HOST:PORT/PATH` to POST to, maybe with `{{ field }}` references. Required.
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
    /// Requests in flight at once (one keep-alive connection each): a number, or `adaptive`.
    /// Default `4`.
    #[serde(default)]
    pub concurrency: Option<RawConcurrency>,
    /// With `concurrency: adaptive`, the highest limit it may reach. Default `64`.
    #[serde(default)]
    pub max_concurrency: Option<usize>,
    /// How long a request may take before it is retried. Default `30s`.
    #[serde(default)]
    pub request_timeout: Option<RawDuration>,
    /// Extra request headers (values may hold `{{ field }}` references); they replace the
    /// sink's own of the same name (`Content-Type`).
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
}

/// `concurrency` as written: a count or `adaptive`, kept as text so validation can say which
/// (serde's untagged enums only say that nothing matched).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawConcurrency(pub String);

impl<'de> Deserialize<'de> for RawConcurrency {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = RawConcurrency;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number of requests such as 4, or `adaptive`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawConcurrency, E> {
                Ok(RawConcurrency(v.to_owned()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RawConcurrency, E> {
                Ok(RawConcurrency(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RawConcurrency, E> {
                Ok(RawConcurrency(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// How many requests may be in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Concurrency {
    /// Always this many.
    Fixed(usize),
    /// Found by the adaptive controller (see `concurrency.rs`), between 1 and `max`.
    Adaptive { max: usize },
}

impl Concurrency {
    /// The most requests ever in flight: one worker (and at most one held request) each.
    pub fn slots(self) -> usize {
        match self {
            Concurrency::Fixed(n) => n,
            Concurrency::Adaptive { max } => max,
        }
    }
}

/// Where requests go: one URI, or a template rendered per event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UriSpec {
    Static(hyper::Uri),
    Template(PathTemplate),
}

/// A configured header value: as written, or a template rendered per event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderSpec {
    Static(HeaderValue),
    Template(PathTemplate),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    Ndjson,
    JsonArray,
    Text,
    /// OTLP `ExportLogsServiceRequest`s (binary protobuf): the `opentelemetry` sink's, never
    /// written in an `http` sink's config.
    #[serde(skip)]
    Otlp,
    /// The same requests in OTLP/JSON (the `opentelemetry` sink's `encoding: json`).
    #[serde(skip)]
    OtlpJson,
    /// The same requests as OTLP/gRPC calls (`LogsService/Export` over HTTP/2, one framed
    /// message each; the `opentelemetry` sink's `protocol: grpc`).
    #[serde(skip)]
    OtlpGrpc,
}

impl Encoding {
    /// Whether requests are OTLP's (retried as its specification says).
    pub fn is_otlp(self) -> bool {
        matches!(
            self,
            Encoding::Otlp | Encoding::OtlpJson | Encoding::OtlpGrpc
        )
    }
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
    pub uri: UriSpec,
    pub encoding: Encoding,
    pub compression: Compression,
    pub max_events: usize,
    pub max_bytes: usize,
    pub timeout: Duration,
    pub concurrency: Concurrency,
    pub request_timeout: Duration,
    /// The configured headers, in the order written (lower-cased names, no two alike).
    pub headers: Vec<(HeaderName, HeaderSpec)>,
    /// The whole `Authorization` value to send, if any.
    pub authorization: Option<String>,
    pub healthcheck_uri: Option<hyper::Uri>,
    /// The sink's `retry` (read by the loader for every sink; set at build).
    pub retry: loghaul_config::RetryConfig,
    /// Whether the URI is `https://`: requests go over TLS (`tls` configures it).
    pub https: bool,
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
            // Header values may hold secrets (API keys): names only.
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .finish_non_exhaustive()
    }
}

impl HttpSinkConfig {
    /// Whether requests' URIs or headers depend on the events in them.
    pub fn is_templated(&self) -> bool {
        matches!(self.uri, UriSpec::Template(_))
            || self
                .headers
                .iter()
                .any(|(_, v)| matches!(v, HeaderSpec::Template(_)))
    }

    /// The templates a partition key is rendered from, in key order: the URI's (when templated),
    /// then the templated header values'.
    pub fn templates(&self) -> impl Iterator<Item = &PathTemplate> {
        let uri = match &self.uri {
            UriSpec::Template(t) => Some(t),
            UriSpec::Static(_) => None,
        };
        uri.into_iter()
            .chain(self.headers.iter().filter_map(|(_, v)| match v {
                HeaderSpec::Template(t) => Some(t),
                HeaderSpec::Static(_) => None,
            }))
    }
}

/// `HOST:PORT` to connect to for an http:// or https:// URI (port 80 or 443 when it names
/// none); `None` without a host, or with a port that is not a number (which the URI parser lets
/// through).
pub fn authority(uri: &hyper::Uri) -> Option<String> {
    let a = uri.authority()?;
    let default = if uri.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    match a.port_u16() {
        Some(port) => Some(format!("{}:{port}", a.host())),
        None if a.as_str().ends_with(a.host()) => Some(format!("{}:{default}", a.host())),
        None => None,
    }
}

/// Whether `uri` is one the sink can POST to: http:// or https://, with a host.
fn is_web_uri(u: &hyper::Uri) -> bool {
    matches!(u.scheme_str(), Some("http" | "https")) && u.authority().is_some()
}

impl ComponentConfig for HttpSinkConfig {
    const TYPE: &'static str = "http";
    type Raw = RawHttpSink;

    fn validate(s: RawHttpSink, cx: &mut Validator<'_, '_>) -> Option<HttpSinkConfig> {
        let uri = validate_uri(&s.uri, cx);
        let max_events = cx.positive(s.max_events, "max_events", DEFAULT_MAX_EVENTS);
        let max_bytes = cx.size(s.max_bytes.as_ref(), "max_bytes", DEFAULT_MAX_BYTES, true);
        let timeout = cx.duration(s.timeout.as_ref(), "timeout", DEFAULT_BATCH_TIMEOUT, true);
        let concurrency = validate_concurrency(s.concurrency.as_ref(), s.max_concurrency, cx);
        let request_timeout = cx.duration(
            s.request_timeout.as_ref(),
            "request_timeout",
            DEFAULT_REQUEST_TIMEOUT,
            true,
        );
        let authorization = crate::net::http::authorization(s.bearer, s.username, s.password);
        if authorization.is_none() {
            // At the first credential given (with only `username`, `bearer` is not there).
            let at = ["bearer", "username", "password"]
                .into_iter()
                .find(|k| cx.has(&[k]))
                .unwrap_or("bearer");
            cx.error(
                &[at],
                "give either a non-empty `bearer` token, or `username` and `password`",
                None,
            );
        }
        let headers = validate_headers(
            s.headers.unwrap_or_default(),
            matches!(authorization, Some(Some(_))),
            cx,
        );
        let https = match &uri {
            Some(UriSpec::Static(u)) => u.scheme_str() == Some("https"),
            Some(UriSpec::Template(t)) => matches!(
                t.parts.first(),
                Some(TemplatePart::Literal(l)) if l.starts_with("https://")
            ),
            None => false,
        };
        let healthcheck_uri = match s.healthcheck_uri.as_deref().map(str::parse::<hyper::Uri>) {
            None => Some(None),
            Some(Ok(u)) if is_web_uri(&u) && (u.scheme_str() == Some("https")) == https => {
                Some(Some(u))
            }
            Some(_) => {
                cx.error(
                    &["healthcheck_uri"],
                    format!(
                        "`healthcheck_uri` is not an {} URI with a host",
                        if https { "https://" } else { "http://" }
                    ),
                    Some("it is checked over the same kind of connection as `uri`".to_owned()),
                );
                None
            }
        };
        let config = HttpSinkConfig {
            uri: uri?,
            encoding: s.encoding.unwrap_or(Encoding::Ndjson),
            compression: s.compression.unwrap_or(Compression::None),
            max_events: max_events?,
            max_bytes: max_bytes?,
            timeout: timeout?,
            concurrency: concurrency?,
            request_timeout: request_timeout?,
            headers: headers?,
            authorization: authorization?,
            healthcheck_uri: healthcheck_uri?,
            retry: loghaul_config::RetryConfig::default(),
            https,
        };
        // The whole request, built once with a stand-in for every field: what no event could
        // fix is reported now.
        if let Err(why) = Target::build(&config, &stand_in_key(&config)) {
            cx.error(
                &["uri"],
                format!("no valid request can be made: {why}"),
                None,
            );
            return None;
        }
        Some(config)
    }

    fn tls_role(&self) -> Result<loghaul_config::TlsRole, String> {
        if self.https {
            Ok(loghaul_config::TlsRole::Client)
        } else {
            Err("`tls` needs an https:// `uri`".to_owned())
        }
    }
}

/// What a field renders as when templates are checked: a digit, so that a field in the port
/// still makes a number, and one in the host a name.
const STAND_IN: &str = "0";

/// The partition key of an event whose every field renders as [`STAND_IN`].
fn stand_in_key(config: &HttpSinkConfig) -> String {
    let mut key = String::new();
    for (i, template) in config.templates().enumerate() {
        if i > 0 {
            key.push(super::target::KEY_SEPARATOR);
        }
        for part in &template.parts {
            match part {
                TemplatePart::Literal(s) | TemplatePart::Strftime(s) => key.push_str(s),
                TemplatePart::Field(_) | TemplatePart::FieldOr(..) => key.push_str(STAND_IN),
            }
        }
    }
    key
}

fn validate_uri(text: &str, cx: &mut Validator<'_, '_>) -> Option<UriSpec> {
    let hint = Some("e.g. uri: http://127.0.0.1:8080/logs/{{ appname }}".to_owned());
    if text.contains("{{") {
        return match super::super::template::parse_fields(text) {
            Ok((template, warnings)) => {
                for w in warnings {
                    cx.warn(&["uri"], w, None);
                }
                let literal_scheme = matches!(
                    template.parts.first(),
                    Some(TemplatePart::Literal(l))
                        if l.starts_with("http://") || l.starts_with("https://")
                );
                if !literal_scheme {
                    // Fields render to `[A-Za-z0-9._-]` only, so with the scheme written out a
                    // field can pick a host, a port or a path, but never add `@`, `/` or `?`.
                    cx.error(
                        &["uri"],
                        format!(
                            "`{text}`: a templated URI must start with a literal http:// or https://"
                        ),
                        hint,
                    );
                    return None;
                }
                Some(UriSpec::Template(template))
            }
            Err(e) => {
                cx.error(
                    &["uri"],
                    format!("{} (at character {})", e.message, e.offset + 1),
                    Some(e.hint),
                );
                None
            }
        };
    }
    match text.parse::<hyper::Uri>() {
        Ok(u) if is_web_uri(&u) => Some(UriSpec::Static(u)),
        _ => {
            cx.error(
                &["uri"],
                format!("`{text}` is not an http:// or https:// URI with a host"),
                hint,
            );
            None
        }
    }
}

fn validate_concurrency(
    raw: Option<&RawConcurrency>,
    max: Option<usize>,
    cx: &mut Validator<'_, '_>,
) -> Option<Concurrency> {
    let hint = || {
        Some(format!(
            "a number of requests (the default is {DEFAULT_CONCURRENCY}), or `adaptive`"
        ))
    };
    match raw.map(|r| r.0.trim()) {
        Some("adaptive") => {
            let max = cx.positive(max, "max_concurrency", DEFAULT_MAX_CONCURRENCY)?;
            if max > MAX_MAX_CONCURRENCY {
                cx.error(
                    &["max_concurrency"],
                    format!("`max_concurrency` must be at most {MAX_MAX_CONCURRENCY}"),
                    None,
                );
                return None;
            }
            Some(Concurrency::Adaptive { max })
        }
        other => {
            if max.is_some() {
                cx.warn(
                    &["max_concurrency"],
                    "`max_concurrency` only applies with `concurrency: adaptive`; it is ignored",
                    None,
                );
            }
            let n = match other {
                None => None,
                Some(text) => match text.parse::<usize>() {
                    Ok(n) => Some(n),
                    Err(_) => {
                        cx.error(
                            &["concurrency"],
                            format!("`{text}` is neither a number of requests nor `adaptive`"),
                            hint(),
                        );
                        return None;
                    }
                },
            };
            cx.positive(n, "concurrency", DEFAULT_CONCURRENCY)
                .map(Concurrency::Fixed)
        }
    }
}

/// Headers the sink must own: the body's framing and its encoding follow from `compression`
/// and the body itself, so a configured value could only corrupt the request.
const OWN_HEADERS: [&str; 3] = ["content-length", "transfer-encoding", "content-encoding"];

fn validate_headers(
    raw: std::collections::BTreeMap<String, String>,
    has_auth: bool,
    cx: &mut Validator<'_, '_>,
) -> Option<Vec<(HeaderName, HeaderSpec)>> {
    let mut out: Vec<(HeaderName, HeaderSpec)> = Vec::with_capacity(raw.len());
    let mut ok = true;
    for (name, value) in raw {
        let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
            cx.error_at_key(
                &["headers", &name],
                format!("`{name}` is not a valid header name"),
                None,
            );
            ok = false;
            continue;
        };
        if OWN_HEADERS.contains(&header.as_str()) {
            cx.error_at_key(
                &["headers", &name],
                format!("`{name}` is set by the sink itself"),
                Some("set `compression` to choose Content-Encoding".to_owned()),
            );
            ok = false;
            continue;
        }
        if header == header::AUTHORIZATION && has_auth {
            cx.error_at_key(
                &["headers", &name],
                "`Authorization` is given both here and by `bearer` or `username`",
                Some("keep one of them".to_owned()),
            );
            ok = false;
            continue;
        }
        if out.iter().any(|(n, _)| *n == header) {
            cx.error_at_key(
                &["headers", &name],
                format!("header `{name}` is given twice (names ignore case)"),
                None,
            );
            ok = false;
            continue;
        }
        let spec = if value.contains("{{") {
            match super::super::template::parse_fields(&value) {
                Ok((template, warnings)) => {
                    for w in warnings {
                        cx.warn(&["headers", &name], w, None);
                    }
                    HeaderSpec::Template(template)
                }
                Err(e) => {
                    cx.error(
                        &["headers", &name],
                        format!("{} (at character {})", e.message, e.offset + 1),
                        Some(e.hint),
                    );
                    ok = false;
                    continue;
                }
            }
        } else {
            match HeaderValue::from_str(&value) {
                Ok(v) => HeaderSpec::Static(v),
                Err(_) => {
                    cx.error(
                        &["headers", &name],
                        format!("`{value}` is not a valid header value (control characters?)"),
                        None,
                    );
                    ok = false;
                    continue;
                }
            }
        };
        out.push((header, spec));
    }
    ok.then_some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use loghaul_config::{ConfigErrors, ConfigFormat};

    use super::*;
    use crate::config::Config;
    use crate::sinks::SinkConfig;

    fn text(options: &str) -> String {
        format!(
            "sources:\n  in: {{ type: syslog, mode: tcp, address: \"127.0.0.1:5514\" }}\nsinks:\n  up: {{ type: http, inputs: [in], {options} }}\n"
        )
    }

    fn load(options: &str) -> Result<Config, ConfigErrors> {
        Config::from_str_with_vars(&text(options), ConfigFormat::Yaml, "t.yaml", &|_| None)
    }

    fn ok(options: &str) -> HttpSinkConfig {
        let config = load(options).unwrap_or_else(|e| panic!("{options}: {e}"));
        match &config.sink("up").unwrap().config {
            SinkConfig::Http(c) => c.clone(),
            _ => panic!("not an http sink"),
        }
    }

    /// The text of every diagnostic for a config that must not load.
    fn errs(options: &str) -> String {
        match load(options) {
            Ok(_) => panic!("expected errors for {options}"),
            Err(e) => e.to_string(),
        }
    }

    const URI: &str = r#"uri: "http://127.0.0.1:9/in""#;

    #[test]
    fn concurrency_is_a_count_or_adaptive() {
        assert_eq!(ok(URI).concurrency, Concurrency::Fixed(DEFAULT_CONCURRENCY));
        assert_eq!(
            ok(&format!("{URI}, concurrency: 9")).concurrency,
            Concurrency::Fixed(9)
        );
        assert_eq!(
            ok(&format!("{URI}, concurrency: adaptive")).concurrency,
            Concurrency::Adaptive {
                max: DEFAULT_MAX_CONCURRENCY
            }
        );
        assert_eq!(
            ok(&format!("{URI}, concurrency: adaptive, max_concurrency: 8")).concurrency,
            Concurrency::Adaptive { max: 8 }
        );
        let e = errs(&format!("{URI}, concurrency: lots"));
        assert!(
            e.contains("neither a number of requests nor `adaptive`"),
            "{e}"
        );
        let e = errs(&format!("{URI}, concurrency: 0"));
        assert!(e.contains("`concurrency` must be greater than 0"), "{e}");
        let e = errs(&format!(
            "{URI}, concurrency: adaptive, max_concurrency: 100000"
        ));
        assert!(e.contains("at most 1024"), "{e}");
        let warned = load(&format!("{URI}, concurrency: 3, max_concurrency: 8")).unwrap();
        assert!(
            warned.warnings().iter().any(|w| w
                .message
                .contains("only applies with `concurrency: adaptive`")),
            "{:?}",
            warned.warnings()
        );
    }

    #[test]
    fn templated_uris_keep_percent_signs_and_need_a_literal_scheme() {
        let c = ok(r#"uri: "http://127.0.0.1:9/a%20b/{{ appname }}""#);
        assert!(c.is_templated());
        let UriSpec::Template(t) = &c.uri else {
            panic!("not a template")
        };
        assert_eq!(
            t.parts,
            [
                TemplatePart::Literal("http://127.0.0.1:9/a%20b/".into()),
                TemplatePart::Field("appname".into())
            ]
        );
        // A field may name the host (connections are pooled per host).
        assert!(ok(r#"uri: "http://{{ hostname }}:9/in""#).is_templated());
        let e = errs(r#"uri: "{{ scheme }}://h/in""#);
        assert!(e.contains("must start with a literal http://"), "{e}");
        let e = errs(r#"uri: "http://h/{{ app-name }}""#);
        assert!(e.contains("appname"), "the hint names the field: {e}");
        let e = errs(r#"uri: "http://h/{{ appname""#);
        assert!(e.contains("unterminated"), "{e}");
        let e = errs(r#"uri: "http://h:{{ appname }}x/in""#);
        assert!(e.contains("no valid request can be made"), "{e}");
        assert!(!ok(URI).is_templated());
    }

    #[test]
    fn headers_replace_defaults_but_not_what_the_sink_owns() {
        let c = ok(&format!(
            r#"{URI}, headers: {{ Content-Type: "application/json", X-Tag: "{{{{ tag }}}}" }}"#
        ));
        assert!(c.is_templated());
        assert_eq!(c.headers.len(), 2);
        for own in ["Content-Length", "transfer-encoding", "Content-Encoding"] {
            let e = errs(&format!("{URI}, headers: {{ {own}: x }}"));
            assert!(e.contains("is set by the sink itself"), "{own}: {e}");
        }
        let e = errs(&format!("{URI}, headers: {{ X-A: a, x-a: b }}"));
        assert!(e.contains("given twice"), "{e}");
        let e = errs(&format!(
            "{URI}, bearer: t, headers: {{ Authorization: \"Bearer u\" }}"
        ));
        assert!(e.contains("both here and by `bearer`"), "{e}");
        let e = errs(&format!("{URI}, headers: {{ \"bad name\": x }}"));
        assert!(e.contains("not a valid header name"), "{e}");
        // Without `bearer`, an Authorization header is just a header (an API key scheme).
        assert_eq!(
            ok(&format!("{URI}, headers: {{ Authorization: \"Key k\" }}"))
                .headers
                .len(),
            1
        );
    }

    #[test]
    fn header_values_stay_out_of_debug_output() {
        let c = ok(&format!("{URI}, headers: {{ X-Api-Key: s3cret }}"));
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("s3cret") && shown.contains("x-api-key"),
            "{shown}"
        );
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod positioned_tests;
