//! Where a request goes: its URI, the `HOST:PORT` to connect to, and every header it carries.
//! Built once for the whole sink when nothing is templated, else once per partition key.
//!
//! A partition key is the rendered templates joined by [`KEY_SEPARATOR`], the URI's first when
//! it is templated, then each templated header value in the configured order:
//!
//! ```text
//! uri: http://h:8080/{{ service }}   headers: { X-Tag: "{{ tag }}", X-Env: prod }
//! key: "http://h:8080/billing\napp.web"
//! ```
//!
//! Rendered fields hold only `[A-Za-z0-9._-]` and a valid URI or header value holds no line
//! feed, so the key splits back into its parts unambiguously.

use hyper::header::{self, HeaderMap, HeaderValue};
use loghaul_config::PathTemplate;
use loghaul_core::{Event, EventBatch};

use super::config::{self, Compression, Encoding, HeaderSpec, HttpSinkConfig, UriSpec};

/// Between the rendered templates of a partition key.
pub const KEY_SEPARATOR: char = '\n';

/// One destination, with the headers of its requests.
#[derive(Debug)]
pub struct Target {
    pub uri: hyper::Uri,
    /// `HOST:PORT` to connect to (and the pool's key).
    pub authority: String,
    /// Every header a request to it carries; the body's length is added by hyper.
    pub headers: HeaderMap,
    /// The partition key it was built from (empty when nothing is templated): dead letters
    /// keep it, so a replay goes to the same place.
    pub key: String,
}

impl Target {
    /// The target for partition `key` (ignored when nothing is templated).
    ///
    /// # Errors
    ///
    /// A rendered URI that is not a URI of the sink's scheme with a host, or a header value that is not a
    /// valid one: said in words, for the log.
    pub fn build(config: &HttpSinkConfig, key: &str) -> Result<Target, String> {
        let mut rendered = key.split(KEY_SEPARATOR);
        let uri = match &config.uri {
            UriSpec::Static(uri) => uri.clone(),
            UriSpec::Template(_) => {
                let text = rendered.next().unwrap_or_default();
                text.parse::<hyper::Uri>()
                    .map_err(|e| format!("`{text}` is not a valid URI ({e})"))?
            }
        };
        let scheme = if config.https { "https" } else { "http" };
        if uri.scheme_str() != Some(scheme) {
            return Err(format!("`{uri}` is not an {scheme}:// URI"));
        }
        let authority = config::authority(&uri).ok_or_else(|| format!("`{uri}` names no host"))?;
        let mut headers = HeaderMap::with_capacity(4 + config.headers.len());
        headers.insert(
            header::HOST,
            HeaderValue::from_str(&authority)
                .map_err(|_| format!("`{authority}` is not a valid Host"))?,
        );
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(match config.encoding {
                Encoding::Ndjson => "application/x-ndjson",
                Encoding::JsonArray => "application/json",
                Encoding::Text => "text/plain",
                Encoding::Otlp => "application/x-protobuf",
                Encoding::OtlpJson => "application/json",
                Encoding::OtlpGrpc => "application/grpc",
            }),
        );
        if config.encoding == Encoding::OtlpGrpc {
            // gRPC compresses each message (flagged in its frame), never the body.
            headers.insert(header::TE, HeaderValue::from_static("trailers"));
            if config.compression == Compression::Gzip {
                headers.insert("grpc-encoding", HeaderValue::from_static("gzip"));
            }
        } else {
            match config.compression {
                Compression::None => {}
                Compression::Gzip => {
                    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                }
                Compression::Zstd => {
                    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("zstd"));
                }
            }
        }
        // Inserted, not appended: a configured header replaces the sink's own (Content-Type).
        for (name, spec) in &config.headers {
            let value = match spec {
                HeaderSpec::Static(value) => value.clone(),
                HeaderSpec::Template(_) => {
                    let text = rendered.next().unwrap_or_default();
                    HeaderValue::from_str(text)
                        .map_err(|_| format!("`{text}` is not a valid value for {name}"))?
                }
            };
            headers.insert(name.clone(), value);
        }
        if let Some(auth) = &config.authorization {
            let mut value = HeaderValue::from_str(auth)
                .map_err(|_| "the credentials do not make a valid Authorization".to_owned())?;
            value.set_sensitive(true);
            headers.insert(header::AUTHORIZATION, value);
        }
        Ok(Target {
            uri,
            authority,
            headers,
            key: key.to_owned(),
        })
    }
}

/// The templates a partition key is rendered from, in key order.
pub fn key_templates(config: &HttpSinkConfig) -> Vec<PathTemplate> {
    config.templates().cloned().collect()
}

/// Renders `event`'s partition key into `out` (replacing what it held); returns false when a
/// field had nothing to render and became `-`.
pub fn render_key(
    templates: &[PathTemplate],
    batch: &EventBatch,
    event: &Event,
    out: &mut String,
) -> bool {
    out.clear();
    let mut complete = true;
    for (i, template) in templates.iter().enumerate() {
        if i > 0 {
            out.push(KEY_SEPARATOR);
        }
        complete &= super::super::template::append_checked(template, batch, event, out);
    }
    complete
}
