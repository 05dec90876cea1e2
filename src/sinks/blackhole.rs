//! The `blackhole` sink: counts what arrives and discards it. It measures sources and the
//! pipeline without any sink cost (Vector has the same component), and acknowledges at once.

use std::sync::Arc;

use loghaul_config::{ComponentConfig, Validator};
use loghaul_core::BatchStatus;
use serde::Deserialize;

use super::{BuildSink, BuiltSink, SinkContext, SinkThread};
use crate::metrics::{ComponentMetrics, Health};
use crate::pipeline::{Input, QUEUE_BATCHES};

/// `type: blackhole`, as written: nothing beyond `inputs`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBlackholeSink {}

/// A blackhole sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlackholeSinkConfig;

impl ComponentConfig for BlackholeSinkConfig {
    const TYPE: &'static str = "blackhole";
    type Raw = RawBlackholeSink;

    fn validate(_: RawBlackholeSink, _: &mut Validator<'_, '_>) -> Option<BlackholeSinkConfig> {
        Some(BlackholeSinkConfig)
    }
}

impl BuildSink for BlackholeSinkConfig {
    fn build(&self, cx: SinkContext) -> anyhow::Result<BuiltSink> {
        let metrics = cx.metrics;
        Ok(BuiltSink {
            prepare: None,
            queue_batches: QUEUE_BATCHES,
            thread: SinkThread::Own,
            run: Box::new(move |input| Box::pin(run(metrics, input))),
        })
    }
}

pub async fn run(metrics: Arc<ComponentMetrics>, mut input: Input) {
    metrics.set_health(Health::Running, None);
    while let Some(delivery) = input.recv().await {
        metrics.sent(delivery.len(), 0);
        delivery.ack.commit(BatchStatus::Delivered);
    }
    metrics.set_health(Health::Stopped, None);
}

#[cfg(test)]
mod config_tests {
    //! The configuration errors, each at the line of the key that causes it.

    use crate::config::testing::{error_at, sink};

    #[test]
    fn errors() {
        error_at(
            &sink("type: blackhole\nencoding: json"),
            "encoding",
            "unknown key `encoding`",
        );
        let t = sink("type: blackhole\ntls: { enabled: true }");
        error_at(&t, "tls:", "`type: blackhole` does not use TLS");
    }
}
