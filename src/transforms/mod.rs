//! Transforms: functions over a batch, run as tasks between their inputs and outputs.
//!
//! A transform type is a module here whose config implements
//! [`loghaul_config::ComponentConfig`] and [`BuildTransform`], registered by one line in
//! [`TransformConfig`].

pub mod dedupe;
pub mod filter;
pub mod reduce;
pub mod remap;
pub mod route;
pub mod sample;
pub mod state;
pub mod tag_glob;
#[cfg(test)]
pub mod testing;
pub mod throttle;
pub mod vrl;

use std::sync::Arc;

use crate::metrics::ComponentMetrics;
use crate::pipeline::{BoxFuture, Fanout, Input};

loghaul_config::component_set! {
    /// Every transform type.
    pub enum TransformConfig: Transform as dyn BuildTransform {
        Dedupe(dedupe::DedupeConfig),
        Filter(filter::FilterConfig),
        Reduce(reduce::ReduceConfig),
        Remap(remap::RemapConfig),
        Route(route::RouteConfig),
        Sample(sample::SampleConfig),
        Throttle(throttle::ThrottleConfig),
    }
}

/// What a transform is built with.
pub struct TransformContext {
    pub metrics: Arc<ComponentMetrics>,
    /// Its input queue; it ends when every upstream has.
    pub input: Input,
    /// Where its batches go (its default output).
    pub fanout: Fanout,
    /// Its named outputs (see [`loghaul_config::ComponentConfig::outputs`]), each with the
    /// components that read `ID.NAME`.
    pub outputs: std::collections::HashMap<String, Fanout>,
}

/// How a transform config becomes a running transform.
pub trait BuildTransform: Send + Sync {
    /// The task that runs the transform until its input is closed and drained.
    ///
    /// # Errors
    ///
    /// Something the transform needs at start is missing.
    fn build(&self, cx: TransformContext) -> anyhow::Result<BoxFuture<'static, ()>>;

    /// What `loghaul validate` says of the transform beyond "ok" (which path its VRL programs
    /// run on).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// The files the transform's settings were read from besides the configuration (VRL
    /// programs): `--watch-config` reloads when one changes.
    fn files(&self) -> Vec<std::path::PathBuf> {
        Vec::new()
    }
}

/// Sends `batch` on a transform's `output`, or counts it dropped on purpose when nobody reads
/// that output (a route no sink takes): sending to no reader would report it failed.
pub async fn send_on(output: &Fanout, batch: loghaul_core::EventBatch, metrics: &ComponentMetrics) {
    if batch.is_empty() {
        return;
    }
    if output.is_connected() {
        output.send(batch).await;
    } else {
        metrics.discarded(crate::metrics::DiscardReason::Unrouted, batch.len() as u64);
    }
}

/// The view of `batch` holding the events `keep` marks (one flag per event, in order).
pub fn view(batch: &loghaul_core::EventBatch, keep: &[bool]) -> loghaul_core::EventBatch {
    let mut i = 0;
    batch.retain_view(|_, _| {
        let k = keep.get(i).copied().unwrap_or(false);
        i += 1;
        k
    })
}
