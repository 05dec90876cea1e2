//! `syslog`: RFC3164 over TCP, parsed (timestamps included) into a JSON-lines file.

use super::{SYSLOG_LIVE_SUBJECTS, Scenario, one_process_reason};
use crate::payload::{Format, Framing};
use crate::report::RunRecord;
use crate::subjects::{Input, SubjectKind};

/// RFC3164 over TCP into JSON lines.
pub struct Syslog;

impl Scenario for Syslog {
    fn name(&self) -> &'static str {
        "syslog"
    }

    fn about(&self) -> &'static str {
        "RFC3164 over TCP, parsed (timestamps included) into a JSON-lines file"
    }

    /// 5M lines: a second or two on the fastest subject, about 1GB of JSON. Larger files measure
    /// the machine more than the subject (the kernel's background writeback, fresh page-cache
    /// pages).
    fn default_events(&self) -> u64 {
        5_000_000
    }

    fn default_message_size(&self) -> usize {
        128
    }

    fn payload(&self) -> (Format, Framing) {
        (Format::Rfc3164, Framing::Newline)
    }

    fn input(&self) -> Option<Input> {
        Some(Input::Rfc3164)
    }

    fn subjects(&self) -> &'static [SubjectKind] {
        SYSLOG_LIVE_SUBJECTS
    }

    fn unsupported(&self, kind: SubjectKind) -> &'static str {
        one_process_reason(kind, false)
    }

    fn report(&self, plan: &crate::runner::Plan, records: &[RunRecord], subjects: &[String]) -> String {
        let mut s = super::tls::notes(false, plan.events, records, subjects);
        s.push_str(&live_notes(records, subjects));
        s
    }
}

/// What the live-operation variants measured, against the same run's `loghaul`: the reload's
/// flow and delay around it, and what a tap cost.
pub fn live_notes(records: &[RunRecord], subjects: &[String]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let measured = |name: &str| -> Vec<&RunRecord> {
        records
            .iter()
            .filter(|r| r.subject == name && !r.warmup)
            .collect()
    };
    let num = |r: &RunRecord, key: &str| r.extra.get(key).and_then(serde_json::Value::as_f64);
    let median = |mut v: Vec<f64>| -> Option<f64> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(v[v.len() / 2])
    };
    if subjects.iter().any(|n| n == "loghaul-reload") {
        let runs = measured("loghaul-reload");
        let ratio = median(runs.iter().filter_map(|r| num(r, "reload_flow_ratio")).collect());
        let p99 = median(runs.iter().filter_map(|r| num(r, "reload_p99_ms")).collect());
        let before = median(runs.iter().filter_map(|r| num(r, "before_reload_p99_ms")).collect());
        let at = median(runs.iter().filter_map(|r| num(r, "reload_at_secs")).collect());
        if let (Some(ratio), Some(p99)) = (ratio, p99) {
            let _ = writeln!(
                s,
                "loghaul-reload: under a steady {}k events/s, a reload (SIGHUP; the source \
                 changed, its socket handed over with the 4 connections open, and the sink \
                 rebuilt) at {:.1}s of the run: the flow over the second around it was \
                 **{ratio:.3}** of the 3 seconds before it, and the p99 delay of what arrived \
                 in that second **{p99:.1} ms** (the seconds before: {} ms). Medians of {} runs.\n",
                crate::subjects::RELOAD_RATE / 1000,
                at.unwrap_or(0.0),
                before.map_or("n/a".to_owned(), |b| format!("{b:.1}")),
                runs.len(),
            );
        }
    }
    if subjects.iter().any(|n| n == "loghaul-tap") {
        let rate = |name: &str| median(measured(name).iter().map(|r| r.events_per_sec).collect());
        let runs = measured("loghaul-tap");
        let tapped = median(runs.iter().filter_map(|r| num(r, "tapped_events")).collect());
        let skipped = median(runs.iter().filter_map(|r| num(r, "tap_skipped_events")).collect());
        if let (Some(tap), Some(plain)) = (rate("loghaul-tap"), rate("loghaul")) {
            let _ = writeln!(
                s,
                "loghaul-tap: `loghaul tap` of every output at 100 events/s for the whole run: \
                 rate **{:.3}** of `loghaul`'s in the same run ({} events printed, {} skipped \
                 and counted; medians).\n",
                tap / plain,
                tapped.unwrap_or(0.0),
                skipped.unwrap_or(0.0),
            );
        }
    }
    s
}
