//! The `kafka` source in a build without the `kafka` feature (no librdkafka): its configuration
//! is read and validated like in a full build (what librdkafka itself would check in
//! `librdkafka_options` aside), so `loghaul validate` and the fuzz targets see every component,
//! but building one fails with a clear error instead of a missing type.

#[path = "config.rs"]
pub mod config;

pub use config::KafkaSourceConfig;

use super::{BuildSource, RunningSource, SourceContext};
use crate::pipeline::BoxFuture;

impl BuildSource for KafkaSourceConfig {
    fn build(&self, _: SourceContext) -> BoxFuture<'_, anyhow::Result<RunningSource>> {
        Box::pin(async { Err(anyhow::anyhow!(crate::config::NO_KAFKA)) })
    }
}
