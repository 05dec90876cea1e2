//! The configuration schema as written: serde types, one per component, nothing validated yet.
//!
//! These types are the schema; validation turns them into the runtime types. Values that
//! need parsing (sizes, durations, addresses, time zones, names) are kept as written so validation
//! can report *all* bad values with positions, instead of serde stopping at the first.
//!
//! The component enums carry `#[serde(tag = "type")]` and derive `Deserialize`, so they can be read
//! with any serde deserializer. The loader itself dispatches on `type` by hand (see
//! `Component`): serde's internally tagged enums buffer their content, which loses the position
//! of every error inside a component.

use serde::{Deserialize, Deserializer};

use crate::node::{DeError, Extra, Node, NodeDe};
use crate::runtime::{Encoding, Framing, SyslogFormat, SyslogMode};

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// The HTTP API (health, metrics). Omitted: enabled on 127.0.0.1:8686.
    #[serde(default)]
    pub api: Option<RawApi>,
    /// How long shutdown waits for in-flight events to be delivered. Default `30s`.
    #[serde(default)]
    pub shutdown_timeout: Option<RawDuration>,
    /// Sources by id, in file order.
    #[serde(default)]
    pub sources: ComponentMap<RawSource>,
    /// Transforms by id, in file order.
    #[serde(default)]
    pub transforms: ComponentMap<RawTransform>,
    /// Sinks by id, in file order.
    #[serde(default)]
    pub sinks: ComponentMap<RawSink>,
}

/// Components by id, keeping the file's order (a `HashMap` would not).
#[derive(Clone, Debug, PartialEq)]
pub struct ComponentMap<T>(pub Vec<(String, T)>);

impl<T> Default for ComponentMap<T> {
    fn default() -> Self {
        ComponentMap(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ComponentMap<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for V<T> {
            type Value = ComponentMap<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of component ids to components")
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(ComponentMap(Vec::new()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, T>()? {
                    out.push((k, v));
                }
                Ok(ComponentMap(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// The `api:` section.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApi {
    /// `HOST:PORT` to listen on. Default `127.0.0.1:8686`.
    #[serde(default)]
    pub address: Option<String>,
    /// Whether to serve the API at all. Default `true`.
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// A size as written: an integer (bytes) or a string such as `64KiB`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawSize(pub String);

/// A duration as written, such as `500ms` or `1m30s`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawDuration(pub String);

/// A facility or severity, by name (`warning`, `local0`) or by numeric code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawName(pub String);

/// Reads any scalar as its text; the validator decides what the text means.
fn scalar_text<'de, D: Deserializer<'de>>(
    d: D,
    expecting: &'static str,
) -> Result<String, D::Error> {
    struct V(&'static str);
    impl serde::de::Visitor<'_> for V {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_owned())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    d.deserialize_any(V(expecting))
}

impl<'de> Deserialize<'de> for RawSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        scalar_text(d, "a size such as 512, 64KiB or 1MiB").map(RawSize)
    }
}

impl<'de> Deserialize<'de> for RawDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        scalar_text(d, "a duration such as 500ms, 30s or 1m30s").map(RawDuration)
    }
}

impl<'de> Deserialize<'de> for RawName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        scalar_text(d, "a name such as `warning` or `local0`, or a numeric code").map(RawName)
    }
}

/// A source, selected by its `type`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RawSource {
    /// Syslog over TCP or UDP.
    Syslog(RawSyslogSource),
}

/// `type: syslog`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSyslogSource {
    /// `tcp` or `udp`. Required.
    pub mode: SyslogMode,
    /// `HOST:PORT` to listen on, HOST an IP literal or `localhost`. Required.
    pub address: String,
    /// Message format: `auto`, `rfc3164`, `rfc5424` or `raw`. Default `auto`.
    #[serde(default)]
    pub format: Option<SyslogFormat>,
    /// TCP framing: `auto`, `newline` or `octet_counting`. Default `auto`; TCP only.
    #[serde(default)]
    pub framing: Option<Framing>,
    /// Longest accepted message; longer ones are truncated (and flagged `truncated`). Default `100KiB`.
    #[serde(default)]
    pub max_length: Option<RawSize>,
    /// Most concurrent TCP connections. Default `10000`; TCP only.
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Socket receive buffer (`SO_RCVBUF`). Default: 4MiB requested for UDP (the kernel caps it
    /// at `net.core.rmem_max`), the OS default for TCP.
    #[serde(default)]
    pub receive_buffer: Option<RawSize>,
    /// Parse exactly as the RFCs say instead of leniently; messages that fail are still kept, as raw
    /// text flagged `parse_error`.
    #[serde(default)]
    pub strict: Option<bool>,
    /// Zone for timestamps that carry none: `UTC`, `local`, `+HH:MM` or `-HH:MM`. Default `UTC`.
    #[serde(default)]
    pub timezone: Option<String>,
}

/// A transform, selected by its `type`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RawTransform {
    /// Keeps the events that match every given condition.
    Filter(RawFilter),
}

/// `type: filter`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFilter {
    /// Ids of the sources or transforms to read from. Required, not empty.
    pub inputs: Vec<String>,
    /// Keep events at least this severe (`emerg` .. `debug`, aliases such as `warn` accepted).
    #[serde(default)]
    pub min_severity: Option<RawName>,
    /// Keep only events from these facilities.
    #[serde(default)]
    pub facilities: Option<Vec<RawName>>,
    /// Keep only events from these app names.
    #[serde(default)]
    pub appnames: Option<Vec<String>>,
    /// Keep only events whose message contains this text.
    #[serde(default)]
    pub contains: Option<String>,
}

/// A sink, selected by its `type`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RawSink {
    /// Files named by a path template.
    File(RawFileSink),
    /// Standard output.
    Console(RawConsoleSink),
    /// Counts and discards (for measuring sources).
    Blackhole(RawBlackholeSink),
}

/// `type: file`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFileSink {
    /// Ids of the sources or transforms to read from. Required, not empty.
    pub inputs: Vec<String>,
    /// Path template: strftime specifiers and `{{ field }}` references. Required.
    pub path: String,
    /// `json` (one object per line) or `text`. Default `json`.
    #[serde(default)]
    pub encoding: Option<Encoding>,
    /// How often buffered writes are flushed. Default `1s`.
    #[serde(default)]
    pub flush_interval: Option<RawDuration>,
    /// Close a file not written to for this long. Default `30s`.
    #[serde(default)]
    pub idle_timeout: Option<RawDuration>,
    /// Most files held open at once; the least recently written is closed first. Default `256`.
    #[serde(default)]
    pub max_open_files: Option<usize>,
}

/// `type: console`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConsoleSink {
    /// Ids of the sources or transforms to read from. Required, not empty.
    pub inputs: Vec<String>,
    /// `json` (one object per line) or `text`. Default `json`.
    #[serde(default)]
    pub encoding: Option<Encoding>,
}

/// `type: blackhole`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBlackholeSink {
    /// Ids of the sources or transforms to read from. Required, not empty.
    pub inputs: Vec<String>,
}

/// A component enum the loader can build from a node once it has read the `type` key.
pub(crate) trait Component: Sized {
    /// The section name, for messages: `source`, `transform`, `sink`.
    const KIND: &'static str;
    /// The accepted `type` values.
    const TYPES: &'static [&'static str];
    /// Deserializes the variant named `ty` from `de` (which skips the `type` key).
    fn from_type(ty: &str, de: NodeDe<'_>) -> Option<Result<Self, DeError>>;
}

impl Component for RawSource {
    const KIND: &'static str = "source";
    const TYPES: &'static [&'static str] = &["syslog"];
    fn from_type(ty: &str, de: NodeDe<'_>) -> Option<Result<Self, DeError>> {
        match ty {
            "syslog" => Some(RawSyslogSource::deserialize(de).map(RawSource::Syslog)),
            _ => None,
        }
    }
}

impl Component for RawTransform {
    const KIND: &'static str = "transform";
    const TYPES: &'static [&'static str] = &["filter"];
    fn from_type(ty: &str, de: NodeDe<'_>) -> Option<Result<Self, DeError>> {
        match ty {
            "filter" => Some(RawFilter::deserialize(de).map(RawTransform::Filter)),
            _ => None,
        }
    }
}

impl Component for RawSink {
    const KIND: &'static str = "sink";
    const TYPES: &'static [&'static str] = &["file", "console", "blackhole"];
    fn from_type(ty: &str, de: NodeDe<'_>) -> Option<Result<Self, DeError>> {
        match ty {
            "file" => Some(RawFileSink::deserialize(de).map(RawSink::File)),
            "console" => Some(RawConsoleSink::deserialize(de).map(RawSink::Console)),
            "blackhole" => Some(RawBlackholeSink::deserialize(de).map(RawSink::Blackhole)),
            _ => None,
        }
    }
}

/// Deserializes a whole [`RawConfig`] from a node the plain serde way (first error wins). The
/// loader does not use it; tests use it to check the hand-written dispatch agrees with the derive.
pub fn raw_from_node_serde(node: &Node) -> Result<RawConfig, DeError> {
    let extra = Extra::default();
    let raw = RawConfig::deserialize(NodeDe::new(node, None, &[], &extra))?;
    match extra.into_inner().into_iter().next() {
        Some(e) => Err(e),
        None => Ok(raw),
    }
}
