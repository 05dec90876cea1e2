//! The `blackhole` sink: counts what arrives and discards it. It measures sources and the
//! pipeline without any sink cost (Vector has the same component), and acknowledges at once.

use std::sync::Arc;

use loghaul_core::BatchStatus;

use crate::metrics::{ComponentMetrics, Health};
use crate::topology::Input;

pub async fn run(metrics: Arc<ComponentMetrics>, mut input: Input) {
    metrics.set_health(Health::Running, None);
    while let Some(batch) = input.recv().await {
        metrics.sent(batch.len(), 0);
        batch.finalizer.ack().commit(BatchStatus::Delivered);
    }
    metrics.set_health(Health::Stopped, None);
}
