//! The `console` sink: events to stdout as JSON lines or message text.
//!
//! Like the file sink it gets batches already encoded by their senders ([`LineEncoder`]), and
//! writes each batch's buffer in one call.

use std::io::Write;
use std::sync::Arc;

use loghaul_config::{ComponentConfig, Validator};
use loghaul_core::BatchStatus;
use serde::Deserialize;

use super::encoder::{Encoding, LineEncoder};
use super::{BuildSink, BuiltSink, Retry, SinkContext, SinkError};
use crate::metrics::{ComponentMetrics, DiscardReason, ErrorKind, Health};
use crate::pipeline::{Input, Prepare};

/// `type: console`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConsoleSink {
    /// `json` (one object per line) or `text`. Default `json`.
    #[serde(default)]
    pub encoding: Option<Encoding>,
}

/// A console sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsoleSinkConfig {
    /// Output encoding.
    pub encoding: Encoding,
}

impl ComponentConfig for ConsoleSinkConfig {
    const TYPE: &'static str = "console";
    type Raw = RawConsoleSink;

    fn validate(raw: RawConsoleSink, _: &mut Validator<'_, '_>) -> Option<ConsoleSinkConfig> {
        Some(ConsoleSinkConfig {
            encoding: raw.encoding.unwrap_or_default(),
        })
    }
}

impl BuildSink for ConsoleSinkConfig {
    fn build(&self, cx: SinkContext) -> anyhow::Result<BuiltSink> {
        // Senders encode (see `Prepare`); stdout writes block, so the sink gets its own thread.
        let encoder = Arc::new(LineEncoder::new(self.encoding, false));
        let prepare: Arc<dyn Prepare> = encoder.clone();
        let metrics = cx.metrics;
        Ok(BuiltSink::on_own_thread(
            Some(prepare),
            Box::new(move |input| Box::pin(run(encoder, metrics, input))),
        ))
    }
}

pub async fn run(encoder: Arc<LineEncoder>, metrics: Arc<ComponentMetrics>, mut input: Input) {
    metrics.set_health(Health::Running, None);
    while let Some(delivery) = input.recv().await {
        let events = delivery.len();
        let ack = delivery.ack;
        let buf = match delivery.prepared {
            Some(prepared) => prepared.bytes,
            None => encoder.prepare(&delivery.batch).bytes,
        };
        drop(delivery.batch);
        let mut out = std::io::stdout().lock();
        match out.write_all(&buf).and_then(|()| out.flush()) {
            Ok(()) => {
                metrics.sent(events, buf.len());
                ack.commit(BatchStatus::Delivered);
            }
            Err(error) => {
                // Whether or not the failure may pass, these events are lost to this sink: it
                // has no dead letters (a console is for watching), and an acknowledging source
                // sends them again on the error.
                let error = SinkError::from_cause(Retry::Permanent, error);
                metrics.error(ErrorKind::Io, 1);
                metrics.discarded(DiscardReason::WriteFailed, events as u64);
                crate::warn_limited!(metrics, %error, "Failed to write to stdout.");
                ack.commit(BatchStatus::Errored);
            }
        }
        encoder.pool.put(buf);
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
            &sink("type: console\nencoding: yaml"),
            "encoding",
            "unknown value `yaml`",
        );
        error_at(&sink("type: console\nencoding: [json]"), "encoding", "");
        error_at(
            &sink("type: console\nstream: stderr"),
            "stream",
            "unknown key `stream`",
        );
        let t = sink("type: console\ntls: { enabled: true }");
        error_at(&t, "tls:", "`type: console` does not use TLS");
    }
}
