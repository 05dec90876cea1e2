//! The `filter` transform: keeps events that match every configured condition (the syslog
//! shorthands, and a VRL `condition`).
//!
//! The output batch shares the input's arena and finalizer; dropped events count as
//! `component_discarded_events_total{reason="filtered"}` and are acknowledged as delivered (a
//! filter dropping an event is the user's intent, not a failure).

use std::sync::Arc;

use loghaul_config::raw::RawName;
use loghaul_config::{ComponentConfig, Validator, facility_hint, severity_hint};
use loghaul_core::{BatchStatus, Event, EventBatch, names};
use serde::Deserialize;

use super::vrl::{Expect, Program, Runner};
use super::{BuildTransform, TransformContext};
use crate::metrics::{ComponentMetrics, DiscardReason, ErrorKind, Health};
use crate::pipeline::{BoxFuture, Fanout, Input};

/// `type: filter`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFilter {
    /// Keep events at least this severe (`emerg` .. `debug`, aliases such as `warn` accepted).
    #[serde(default)]
    pub min_severity: Option<RawName>,
    /// Keep only events from these facilities.
    #[serde(default)]
    pub facilities: Option<Vec<RawName>>,
    /// Keep only events from these app names.
    #[serde(default)]
    pub appnames: Option<Vec<String>>,
    /// Keep only events whose message contains this text.
    #[serde(default)]
    pub contains: Option<String>,
    /// Keep only events for which this VRL expression returns `true`.
    #[serde(default)]
    pub condition: Option<String>,
}

/// A filter transform. Unset conditions match everything.
#[derive(Clone, Debug, PartialEq)]
pub struct FilterConfig {
    /// Keep events whose severity code is at most this (0 = emerg is the most severe).
    pub min_severity: Option<u8>,
    /// Keep events whose facility code is one of these.
    pub facilities: Option<Vec<u8>>,
    /// Keep events whose app name is one of these.
    pub appnames: Option<Vec<String>>,
    /// Keep events whose message contains this.
    pub contains: Option<String>,
    /// Keep events for which it returns `true` (one that fails on an event drops it).
    pub condition: Option<Program>,
}

impl ComponentConfig for FilterConfig {
    const TYPE: &'static str = "filter";
    type Raw = RawFilter;

    fn validate(f: RawFilter, cx: &mut Validator<'_, '_>) -> Option<FilterConfig> {
        let min_severity = match &f.min_severity {
            None => Some(None),
            Some(RawName(name)) => match name
                .parse::<u8>()
                .ok()
                .filter(|c| *c < 8)
                .or_else(|| names::severity_code(name))
            {
                Some(c) => Some(Some(c)),
                None => {
                    cx.error(
                        &["min_severity"],
                        format!("unknown severity `{name}`"),
                        Some(severity_hint(name)),
                    );
                    None
                }
            },
        };
        let facilities = match &f.facilities {
            None => Some(None),
            Some(list) => {
                let mut codes = Some(Vec::new());
                if list.is_empty() {
                    cx.error(
                        &["facilities"],
                        "`facilities: []` matches no event",
                        Some("remove `facilities` to keep every facility".to_owned()),
                    );
                    codes = None;
                }
                for (i, RawName(name)) in list.iter().enumerate() {
                    let idx = i.to_string();
                    match name
                        .parse::<u8>()
                        .ok()
                        .filter(|c| *c < 24)
                        .or_else(|| names::facility_code(name))
                    {
                        Some(c) => {
                            if let Some(v) = codes.as_mut() {
                                v.push(c);
                            }
                        }
                        None => {
                            cx.error(
                                &["facilities", &idx],
                                format!("unknown facility `{name}`"),
                                Some(facility_hint(name)),
                            );
                            codes = None;
                        }
                    }
                }
                codes.map(Some)
            }
        };
        let appnames_ok = if f.appnames.as_ref().is_some_and(Vec::is_empty) {
            cx.error(
                &["appnames"],
                "`appnames: []` matches no event",
                Some("remove `appnames` to keep every app".to_owned()),
            );
            false
        } else {
            true
        };
        let condition = match &f.condition {
            None => Some(None),
            Some(c) => super::vrl::compile(c, Expect::Boolean, cx, &["condition"]).map(Some),
        };
        Some(FilterConfig {
            condition: condition?,
            min_severity: min_severity?,
            facilities: facilities?,
            appnames: appnames_ok.then_some(f.appnames)?,
            contains: f.contains,
        })
    }
}

impl BuildTransform for FilterConfig {
    fn notes(&self) -> Vec<String> {
        self.condition
            .iter()
            .map(|c| format!("condition: {}", c.path_note()))
            .collect()
    }

    fn build(&self, cx: TransformContext) -> anyhow::Result<BoxFuture<'static, ()>> {
        Ok(Box::pin(run(self.clone(), cx.metrics, cx.input, cx.fanout)))
    }
}

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
    let mut runner = Runner::new(vrl::compiler::TimeZone::Local);
    while let Some(delivery) = input.recv().await {
        let kept = crate::pipeline::cpu_heavy(|| {
            delivery.retain_view(|b, e| {
                matches(&config, b, e)
                    && config.condition.as_ref().is_none_or(|c| {
                        runner.condition(c, b, e, &mut None).unwrap_or_else(|error| {
                            metrics.error(ErrorKind::Program, 1);
                            crate::warn_limited!(metrics, %error, "filter condition failed on an event");
                            false
                        })
                    })
            })
        });
        metrics.discarded(
            DiscardReason::Filtered,
            (delivery.len() - kept.len()) as u64,
        );
        // The kept view carries the batch's finalizer on to the sinks; this transform's part
        // is done once it is handed on (or was, for a view with no event left, filtered away).
        fanout.send(kept).await;
        delivery.ack.commit(BatchStatus::Delivered);
    }
    metrics.set_health(Health::Stopped, None);
}

#[cfg(test)]
mod tests {
    //! The configuration errors, each at the line of the key that causes it.

    use crate::config::testing::{error_at, ok, transform};

    #[test]
    fn severities() {
        let t = transform("type: filter\nmin_severity: loud");
        error_at(&t, "min_severity", "unknown severity `loud`");
        let t = transform("type: filter\nmin_severity: 8");
        error_at(&t, "min_severity", "unknown severity `8`");
        let t = transform("type: filter\nmin_severity: [warning]");
        error_at(&t, "min_severity", "expected");
        ok(&transform("type: filter\nmin_severity: 7"));
    }

    #[test]
    fn facilities() {
        let t = transform("type: filter\nfacilities:\n  - auth\n  - kernal");
        error_at(&t, "- kernal", "unknown facility `kernal`");
        let t = transform("type: filter\nfacilities:\n  - 24");
        error_at(&t, "- 24", "unknown facility `24`");
        let t = transform("type: filter\nfacilities: []");
        error_at(&t, "facilities", "`facilities: []` matches no event");
        let t = transform("type: filter\nfacilities: auth");
        error_at(&t, "facilities", "expected");
    }

    #[test]
    fn conditions_are_boolean_vrl() {
        ok(&transform(
            "type: filter\ncondition: '.severity == \"err\"'",
        ));
        let t = transform("type: filter\ncondition: '.message'");
        error_at(&t, "condition:", "a condition must return a boolean");
        let t = transform("type: filter\ncondition: 'starts_with(.message, \"x\")'");
        error_at(&t, "condition:", "VRL error[E110]");
    }

    #[test]
    fn appnames_contains_and_unknown_keys() {
        let t = transform("type: filter\nappnames: []");
        error_at(&t, "appnames", "`appnames: []` matches no event");
        let t = transform("type: filter\ncontains: [a, b]");
        error_at(&t, "contains", "expected");
        let t = transform("type: filter\nseverity: warning");
        error_at(&t, "severity:", "unknown key `severity`");
        let t = transform("type: filter\ntls: { enabled: false }");
        error_at(&t, "tls:", "unknown key `tls`");
    }
}
