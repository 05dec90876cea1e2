//! The `filter` transform: keeps events that match every configured condition.
//!
//! The output batch shares the input's arena and finalizer; dropped events count as
//! `component_discarded_events_total{reason="filtered"}` and are acknowledged as delivered (a
//! filter dropping an event is the user's intent, not a failure).

use std::sync::Arc;

use loghaul_config::FilterConfig;
use loghaul_core::{Event, EventBatch};

use crate::metrics::{ComponentMetrics, DiscardReason, Health};
use crate::topology::{Fanout, Input};

/// Whether `event` passes `config`.
pub fn matches(config: &FilterConfig, batch: &EventBatch, event: &Event) -> bool {
    if let Some(min) = config.min_severity {
        // Lower codes are more severe; events without a severity do not pass a severity filter.
        match event.severity {
            Some(s) if s <= min => {}
            _ => return false,
        }
    }
    if let Some(facilities) = &config.facilities {
        match event.facility {
            Some(f) if facilities.contains(&f) => {}
            _ => return false,
        }
    }
    if let Some(appnames) = &config.appnames {
        let Some(app) = event.appname.get().map(|s| batch.str(s)) else {
            return false;
        };
        if !appnames.iter().any(|a| a.as_bytes() == app) {
            return false;
        }
    }
    if let Some(needle) = &config.contains
        && memchr::memmem::find(batch.str(event.message.or_empty()), needle.as_bytes()).is_none()
    {
        return false;
    }
    true
}

pub async fn run(
    config: FilterConfig,
    metrics: Arc<ComponentMetrics>,
    mut input: Input,
    fanout: Fanout,
) {
    metrics.set_health(Health::Running, None);
    while let Some(batch) = input.recv().await {
        let kept = batch.retain_view(|b, e| matches(&config, b, e));
        metrics.discarded(DiscardReason::Filtered, (batch.len() - kept.len()) as u64);
        drop(batch);
        fanout.send(kept).await;
    }
    metrics.set_health(Health::Stopped, None);
}
