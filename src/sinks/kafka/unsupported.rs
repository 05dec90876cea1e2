//! The `kafka` sink in a build without the `kafka` feature (no librdkafka): its configuration
//! is read and validated like in a full build (what librdkafka itself would check in
//! `librdkafka_options` aside), so `loghaul validate` and the fuzz targets see every component,
//! but building one fails with a clear error instead of a missing type.

#[path = "config.rs"]
pub mod config;

pub use config::KafkaSinkConfig;

use super::{BuildSink, BuiltSink, SinkContext};

impl BuildSink for KafkaSinkConfig {
    fn build(&self, _: SinkContext) -> anyhow::Result<BuiltSink> {
        Err(anyhow::anyhow!(crate::config::NO_KAFKA))
    }
}
