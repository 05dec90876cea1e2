//! The `route` transform: named routes, each an output `ID.NAME`, taken by the events that
//! match its VRL condition and/or its Fluentd tag patterns; `ID._unmatched` takes the events
//! no route matched.
//!
//! Every route an event matches gets it (Vector's `route`), unless `first_match` says the
//! first matching route in the order written takes it alone (Fluentd's `<match>` order). A
//! route's batch is a view of the input batch (no event data copied), carrying its finalizer.
//! A route nobody reads drops its events on purpose (`discarded{reason="unrouted"}`).

use std::sync::Arc;

use indexmap::IndexMap;
use loghaul_config::{ComponentConfig, Validator};
use loghaul_core::{BatchStatus, EventBatch};
use serde::Deserialize;

use super::tag_glob::TagPattern;
use super::vrl::{Expect, Program, Runner};
use super::{BuildTransform, TransformContext, send_on, view};
use crate::metrics::{ComponentMetrics, ErrorKind, Health};
use crate::pipeline::{BoxFuture, Fanout, Input};

/// The output of events no route matched.
pub const UNMATCHED: &str = "_unmatched";

/// `type: route`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// Route name → a VRL condition, or `{ condition, tag }`.
    pub route: IndexMap<String, RawRule>,
    /// Send an event only to the first route it matches, in the order written.
    #[serde(default)]
    pub first_match: Option<bool>,
    /// Whether events no route matched go to `ID._unmatched` (default) or are dropped.
    #[serde(default)]
    pub reroute_unmatched: Option<bool>,
}

/// One route as written: a VRL condition, or a map of conditions that must all hold.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum RawRule {
    Condition(String),
    Rule(RawRuleMap),
}

/// `{ condition: VRL, tag: "app.** nginx.*" }`: every condition given must hold.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRuleMap {
    /// A VRL boolean expression.
    #[serde(default)]
    pub condition: Option<String>,
    /// Fluentd match patterns for the event's tag (`*`, `**`, `{a,b}`, several separated by
    /// spaces, or a list).
    #[serde(default)]
    pub tag: Option<Tags>,
}

/// One pattern string or a list of them.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Tags {
    One(String),
    Many(Vec<String>),
}

/// One route.
#[derive(Clone, Debug)]
pub struct Rule {
    pub name: String,
    pub condition: Option<Program>,
    pub tags: Vec<TagPattern>,
}

impl PartialEq for Rule {
    fn eq(&self, other: &Rule) -> bool {
        self.name == other.name
            && self.condition == other.condition
            && self
                .tags
                .iter()
                .map(TagPattern::as_str)
                .eq(other.tags.iter().map(TagPattern::as_str))
    }
}

/// A route transform.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteConfig {
    pub rules: Vec<Rule>,
    pub first_match: bool,
    pub reroute_unmatched: bool,
}

impl ComponentConfig for RouteConfig {
    const TYPE: &'static str = "route";
    type Raw = RawRoute;

    fn validate(r: RawRoute, cx: &mut Validator<'_, '_>) -> Option<RouteConfig> {
        if r.route.is_empty() {
            cx.error(
                &["route"],
                "`route` names no route",
                Some("e.g. route: { errors: '.severity == \"err\"' }".to_owned()),
            );
            return None;
        }
        let mut rules = Vec::new();
        let mut ok = true;
        for (name, rule) in &r.route {
            if name == UNMATCHED || name.is_empty() || name.contains('.') {
                cx.error_at_key(
                    &["route", name],
                    format!("invalid route name `{name}`"),
                    Some(format!(
                        "route names may not be empty, hold `.`, or be `{UNMATCHED}` (the output of events no route matched)"
                    )),
                );
                ok = false;
                continue;
            }
            let (condition, tags) = match rule {
                RawRule::Condition(c) => (Some(c.as_str()), Vec::new()),
                RawRule::Rule(m) => {
                    let tags = match &m.tag {
                        None => Vec::new(),
                        Some(Tags::One(t)) => vec![(t.as_str(), None)],
                        Some(Tags::Many(list)) => list
                            .iter()
                            .enumerate()
                            .map(|(i, t)| (t.as_str(), Some(i)))
                            .collect(),
                    };
                    if m.condition.is_none() && tags.is_empty() {
                        cx.error(
                            &["route", name],
                            format!("route `{name}` has neither `condition` nor `tag`"),
                            Some("give a VRL condition, Fluentd tag patterns, or both".to_owned()),
                        );
                        ok = false;
                        continue;
                    }
                    (m.condition.as_deref(), tags)
                }
            };
            let condition = match (condition, rule) {
                (None, _) => None,
                (Some(c), RawRule::Condition(_)) => {
                    let Some(p) = super::vrl::compile(c, Expect::Boolean, cx, &["route", name])
                    else {
                        ok = false;
                        continue;
                    };
                    Some(p)
                }
                (Some(c), RawRule::Rule(_)) => {
                    let key = ["route", name.as_str(), "condition"];
                    let Some(p) = super::vrl::compile(c, Expect::Boolean, cx, &key) else {
                        ok = false;
                        continue;
                    };
                    Some(p)
                }
            };
            let mut patterns = Vec::new();
            for (text, index) in tags {
                match TagPattern::parse(text) {
                    Ok(p) => patterns.push(p),
                    Err(e) => {
                        let i = index.map(|i| i.to_string());
                        let mut key = vec!["route", name.as_str(), "tag"];
                        if let Some(i) = &i {
                            key.push(i);
                        }
                        cx.error(&key, format!("tag pattern `{text}`: {e}"), None);
                        ok = false;
                    }
                }
            }
            rules.push(Rule {
                name: name.clone(),
                condition,
                tags: patterns,
            });
        }
        ok.then_some(RouteConfig {
            rules,
            first_match: r.first_match.unwrap_or(false),
            reroute_unmatched: r.reroute_unmatched.unwrap_or(true),
        })
    }

    fn has_default_output(&self) -> bool {
        false
    }

    fn outputs(&self) -> Vec<String> {
        let mut outputs: Vec<String> = self.rules.iter().map(|r| r.name.clone()).collect();
        if self.reroute_unmatched {
            outputs.push(UNMATCHED.to_owned());
        }
        outputs
    }
}

impl BuildTransform for RouteConfig {
    fn notes(&self) -> Vec<String> {
        self.rules
            .iter()
            .filter_map(|r| {
                let c = r.condition.as_ref()?;
                Some(format!("route `{}`: {}", r.name, c.path_note()))
            })
            .collect()
    }

    fn build(&self, cx: TransformContext) -> anyhow::Result<BoxFuture<'static, ()>> {
        let mut named = cx.outputs;
        let mut outputs = Vec::new();
        for rule in &self.rules {
            let out = named
                .remove(&rule.name)
                .ok_or_else(|| anyhow::anyhow!("route `{}` has no output", rule.name))?;
            outputs.push(out);
        }
        let unmatched = named.remove(UNMATCHED);
        Ok(Box::pin(run(
            self.clone(),
            cx.metrics,
            cx.input,
            outputs,
            unmatched,
        )))
    }
}

/// Which routes each event of `batch` takes: `routes[r][i]` for route `r`, event `i`; the last
/// row is `_unmatched`.
pub fn decide(
    config: &RouteConfig,
    runner: &mut Runner,
    batch: &EventBatch,
    metrics: &ComponentMetrics,
) -> Vec<Vec<bool>> {
    let n = batch.len();
    let mut routes = vec![vec![false; n]; config.rules.len() + 1];
    for (i, event) in batch.events.iter().enumerate() {
        let tag = event.tag.get().map(|t| batch.str(t));
        let mut target = None;
        let mut any = false;
        for (r, rule) in config.rules.iter().enumerate() {
            let tag_ok =
                rule.tags.is_empty() || tag.is_some_and(|t| rule.tags.iter().any(|p| p.matches(t)));
            let matched = tag_ok
                && match &rule.condition {
                    None => true,
                    Some(program) => match runner.condition(program, batch, event, &mut target) {
                        Ok(m) => m,
                        Err(e) => {
                            metrics.error(ErrorKind::Program, 1);
                            crate::warn_limited!(metrics, route = %rule.name, error = %e, "route condition failed on an event");
                            false
                        }
                    },
                };
            if matched {
                routes[r][i] = true;
                any = true;
                if config.first_match {
                    break;
                }
            }
        }
        if !any {
            routes[config.rules.len()][i] = true;
        }
    }
    routes
}

async fn run(
    config: RouteConfig,
    metrics: Arc<ComponentMetrics>,
    mut input: Input,
    outputs: Vec<Fanout>,
    unmatched: Option<Fanout>,
) {
    metrics.set_health(Health::Running, None);
    let mut runner = Runner::new(vrl::compiler::TimeZone::Local);
    // Conditions on the fast path take a fraction of a microsecond an event: they run where the
    // batch is (handing the worker's other tasks on, as `cpu_heavy` does, costs more than
    // that). On the VRL runtime they take several, and the worker's other tasks go on first.
    let inline = config
        .rules
        .iter()
        .all(|r| r.condition.as_ref().is_none_or(|c| c.fast.is_ok()));
    while let Some(delivery) = input.recv().await {
        let routes = if inline {
            decide(&config, &mut runner, &delivery.batch, &metrics)
        } else {
            crate::pipeline::cpu_heavy(|| decide(&config, &mut runner, &delivery.batch, &metrics))
        };
        for (keep, output) in routes.iter().zip(&outputs) {
            send_on(output, view(&delivery.batch, keep), &metrics).await;
        }
        if let (Some(keep), Some(output)) = (routes.last(), &unmatched) {
            send_on(output, view(&delivery.batch, keep), &metrics).await;
        } else if let Some(keep) = routes.last() {
            let n = keep.iter().filter(|k| **k).count();
            metrics.discarded(crate::metrics::DiscardReason::Unrouted, n as u64);
        }
        delivery.ack.commit(BatchStatus::Delivered);
    }
    metrics.set_health(Health::Stopped, None);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Configuration errors, and which routes events take.

    use crate::config::testing::{error_at, ok, transform};

    fn routed(routes: &str, reader: &str) -> String {
        format!(
            "sources:\n  in: {{ type: syslog, mode: udp, address: \"127.0.0.1:5514\" }}\n\
             transforms:\n  r:\n    type: route\n    inputs: [in]\n    route:\n{routes}\
             sinks:\n  out: {{ type: blackhole, inputs: [{reader}] }}\n"
        )
    }

    #[test]
    fn outputs_are_named_routes_and_unmatched() {
        let routes = "      errors: '.severity == \"err\"'\n      b: { tag: 'app.**' }\n";
        ok(&routed(routes, "r.errors, r.b, r._unmatched"));
        error_at(&routed(routes, "r.c"), "r.c", "`r` has no output `c`");
        error_at(
            &routed(routes, "r"),
            "inputs: [r]",
            "`r` has only named outputs",
        );
        let t = routed(routes, "r.erors");
        error_at(&t, "r.erors", "`r` has no output `erors`");
        assert!(
            crate::config::testing::load(&t)
                .unwrap_err()
                .to_string()
                .contains("did you mean 'errors'?")
        );
    }

    #[test]
    fn routes_must_say_something_valid() {
        let t = transform("type: route\nroute: {}");
        error_at(&t, "route:", "`route` names no route");
        let t = transform("type: route\nroute:\n  x: { }");
        error_at(&t, "x: { }", "route `x` has neither `condition` nor `tag`");
        let t = transform("type: route\nroute:\n  _unmatched: 'true'");
        error_at(&t, "_unmatched:", "invalid route name `_unmatched`");
        let t = transform("type: route\nroute:\n  a.b: 'true'");
        error_at(&t, "a.b:", "invalid route name `a.b`");
        let t = transform("type: route\nroute:\n  x: '.severity'");
        error_at(&t, "x: '.severity'", "a condition must return a boolean");
        let t = transform("type: route\nroute:\n  x: '.a = true'");
        error_at(&t, "x: '.a", "a condition cannot change the event");
        let t = transform("type: route\nroute:\n  x: { condition: 'nope()' }");
        error_at(&t, "condition:", "VRL error[E105]");
        let t = transform("type: route\nroute:\n  x: { tag: 'a.{b' }");
        error_at(&t, "tag:", "tag pattern `a.{b`: unclosed `{` at 2");
        let t = transform("type: route\nroute:\n  x:\n    tag: [ok.*, '/re/']");
        error_at(&t, "'/re/'", "not supported");
        let t = transform("type: route\nroute:\n  x: { tags: 'a' }");
        error_at(&t, "x: { tags", "");
    }
}
