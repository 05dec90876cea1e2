//! The `console` sink: events to stdout as JSON lines or message text.

use std::io::Write;
use std::sync::Arc;

use loghaul_codec::encode::{encode_json, encode_text};
use loghaul_config::{ConsoleSinkConfig, Encoding};
use loghaul_core::BatchStatus;

use crate::metrics::{ComponentMetrics, DiscardReason, ErrorKind, Health};
use crate::topology::Input;

pub async fn run(config: ConsoleSinkConfig, metrics: Arc<ComponentMetrics>, mut input: Input) {
    metrics.set_health(Health::Running, None);
    let mut buf = Vec::with_capacity(64 * 1024);
    while let Some(batch) = input.recv().await {
        let ack = batch.finalizer.ack();
        for event in &batch.events {
            match config.encoding {
                Encoding::Json => encode_json(&batch, event, &mut buf),
                Encoding::Text => encode_text(&batch, event, &mut buf),
            }
        }
        let events = batch.len();
        drop(batch);
        let mut out = std::io::stdout().lock();
        match out.write_all(&buf).and_then(|()| out.flush()) {
            Ok(()) => {
                metrics.sent(events, buf.len());
                ack.commit(BatchStatus::Delivered);
            }
            Err(error) => {
                metrics.error(ErrorKind::Io, 1);
                metrics.discarded(DiscardReason::WriteFailed, events as u64);
                crate::warn_limited!(metrics, %error, "Failed to write to stdout.");
                ack.commit(BatchStatus::Errored);
            }
        }
        buf.clear();
    }
    metrics.set_health(Health::Stopped, None);
}
