//! The raw schema of what every configuration has, as written: the `api` section, and the value
//! types components share (sizes, durations, names), kept as text so validation can report
//! *all* bad values with positions instead of serde stopping at the first.
//!
//! Each component's own raw schema lives beside the component (see [`crate::ComponentConfig`]).

use serde::{Deserialize, Deserializer};

/// The top-level keys other than the component sections.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawTop {
    pub api: Option<RawApi>,
    pub shutdown_timeout: Option<RawDuration>,
    /// Where sources keep their state. Default `./loghaul-data`.
    pub data_dir: Option<String>,
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
    /// A bearer token every request must carry (`Authorization: Bearer TOKEN`). Required when
    /// the API listens beyond loopback, unless `tls.verify_client` is set.
    #[serde(default)]
    pub token: Option<String>,
    /// TLS on the API's listener.
    #[serde(default)]
    pub tls: Option<crate::tls::RawTls>,
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
pub(crate) fn scalar_text<'de, D: Deserializer<'de>>(
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

/// The `limits:` section.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    /// The memory budget for events in flight (queues, memory buffers, batches being written).
    /// Default `256MiB`.
    #[serde(default)]
    pub memory: Option<RawSize>,
}
