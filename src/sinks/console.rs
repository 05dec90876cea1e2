//! The `console` sink: events to stdout as JSON lines or message text.
//!
//! Like the file sink it gets batches already encoded by their senders ([`LineEncoder`]), and
//! writes each batch's buffer in one call.

use std::io::Write;
use std::sync::Arc;

use loghaul_config::ConsoleSinkConfig;
use loghaul_core::BatchStatus;

use super::encoder::LineEncoder;
use crate::metrics::{ComponentMetrics, DiscardReason, ErrorKind, Health};
use crate::topology::Input;
use crate::topology::fanout::Prepare;

/// The encoder to give the console sink's input queue.
pub fn encoder(config: &ConsoleSinkConfig) -> Arc<LineEncoder> {
    Arc::new(LineEncoder::new(config.encoding, false))
}

pub async fn run(encoder: Arc<LineEncoder>, metrics: Arc<ComponentMetrics>, mut input: Input) {
    metrics.set_health(Health::Running, None);
    while let Some(delivery) = input.recv().await {
        let ack = delivery.finalizer.ack();
        let events = delivery.len();
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
