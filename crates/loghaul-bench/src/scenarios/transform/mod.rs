//! `transform`: RFC3164 over TCP whose messages are key=value pairs, parsed into fields, one
//! renamed (`user` → `user_name`), one deleted (`session`), one added (`pipeline: "lab"`), and
//! each event written as a JSON line into one of two files by its severity (`err` or more
//! severe → errors, the rest → other).
//!
//! ```text
//! generator ─► subject: parse pairs ─► rename, delete, add ─► severity ≤ err? ─► out-errors.log
//!  (4 conns, RFC3164, status=… sets the severity)                        else ─► out-other.log
//! ```
//!
//! The subjects, each configured by its own renderer in [`crate::subjects`]: `loghaul` (`remap`
//! on its fast path, `route`, two file sinks), `loghaul-vrl` (the same with `fast_path: false`
//! on the remap: the VRL runtime; the route's conditions keep the fast path, the route has no
//! such switch), `syslog-ng` (`kv-parser()`, rewrite rules, `if (level(...))`), `rsyslog`
//! (mmnormalize with a liblognorm rule that spells out the layout, RainerScript, `if
//! $syslogseverity`). The runner's rounds run them; the meter reads both files as one set of
//! books, and after each run [`check`] holds the files to the same fields for the same input:
//! a run whose files fail it is a failed run, saying why.

pub mod check;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use super::{Scenario, variant_reason};
use crate::payload::{Content, Format, Framing};
use crate::report::{self, RunRecord, Status};
use crate::runner::{self, Driver, Plan};
use crate::subjects::{Input, Peers, SubjectKind, routed_outputs};

/// Key=value messages parsed, reshaped and routed by severity into two files.
pub struct Transform;

/// The subjects, and the order they run in.
const SUBJECTS: &[SubjectKind] = &[
    SubjectKind::Loghaul,
    SubjectKind::LoghaulVrl,
    SubjectKind::Rsyslog,
    SubjectKind::SyslogNg,
];

impl Scenario for Transform {
    fn name(&self) -> &'static str {
        "transform"
    }

    fn about(&self) -> &'static str {
        "RFC3164 key=value messages over TCP: pairs parsed, a field renamed, one deleted, one \
         added, routed by severity into two JSON-lines files"
    }

    /// A JSON line here is about 650 bytes (the message, its pairs again as fields, the syslog
    /// fields): 2M events make 1.3GB, under the kernel's background writeback threshold on
    /// these VMs, as in `rfc5424`.
    fn default_events(&self) -> u64 {
        2_000_000
    }

    /// The header, the marker and the pairs take about 180 bytes: the note's words pad the rest.
    fn default_message_size(&self) -> usize {
        256
    }

    fn payload(&self) -> (Format, Framing) {
        (Format::Rfc3164, Framing::Newline)
    }

    fn content(&self) -> Content {
        Content::KeyValue
    }

    fn input(&self) -> Option<Input> {
        Some(Input::KeyValue)
    }

    fn subjects(&self) -> &'static [SubjectKind] {
        SUBJECTS
    }

    fn default_subjects(&self) -> &'static [SubjectKind] {
        SUBJECTS
    }

    fn unsupported(&self, kind: SubjectKind) -> &'static str {
        match kind {
            SubjectKind::Bare => "n/a: the bare loop has no transforms",
            SubjectKind::RsyslogDa | SubjectKind::RsyslogTls => {
                "n/a: the rsyslog variants run the one-process scenarios; transform runs rsyslog"
            }
            SubjectKind::Eventmachine => "n/a: a line counter, it parses no syslog",
            SubjectKind::Fluentd => "n/a: configured for the forward scenarios only",
            k if k.is_http_peer() => "n/a: a peer of the HTTP experiments only",
            k => variant_reason(k).unwrap_or("n/a: not configured for this scenario"),
        }
    }

    fn check(&self, plan: &Plan) -> Result<()> {
        if plan.driver == Driver::Loggen {
            bail!("`transform` sends key=value messages: only the built-in generator makes them");
        }
        Ok(())
    }

    /// The runner's rounds, each run followed by the check of its two files.
    fn run(&self, plan: &Plan, peers: &Peers) -> Result<String> {
        let work = runner::work_dir(plan)?;
        runner::announce(
            plan,
            &format!(
                "{} key=value events per run, {} connections",
                plan.events, plan.connections
            ),
        );
        runner::run_rounds(
            plan,
            peers,
            &work,
            &|kind, dir, label| {
                let mut record = runner::run_one(plan, kind, peers, dir, label)?;
                check_outputs(&mut record, dir)?;
                Ok(record)
            },
            &|records: &[RunRecord], names: &[String]| notes(records, names),
        )
    }

    fn report(&self, _plan: &Plan, records: &[RunRecord], subjects: &[String]) -> String {
        notes(records, subjects)
    }
}

/// The two files a subject of the run in `dir` wrote (where `subjects::prepare` puts them).
pub fn outputs(dir: &Path) -> [PathBuf; 2] {
    routed_outputs(&dir.join("out.log").display().to_string()).map(PathBuf::from)
}

/// Checks the files of a measured run in `dir` ([`check`]) and records what it found under
/// `outputs`; files that fail make the run a failed one, saying why (its figures stay in the
/// raw record).
///
/// # Errors
/// A file cannot be read.
fn check_outputs(record: &mut RunRecord, dir: &Path) -> Result<()> {
    if !matches!(record.status, Status::Complete | Status::Timeout) {
        return Ok(());
    }
    let [errors, other] = outputs(dir);
    let lines = record.events_seen + record.duplicates.unwrap_or(0);
    let found = check::check(&errors, &other, lines)?;
    if !found.ok() {
        record.status = Status::Failed(format!(
            "the outputs check failed on {} lines: {}",
            found.problems,
            found.first_problems.join("; ")
        ));
    }
    record.extra.insert(
        "outputs".into(),
        serde_json::to_value(&found).unwrap_or_default(),
    );
    Ok(())
}

/// What goes under the table: what every subject does, the check's findings, and the ratios.
fn notes(records: &[RunRecord], names: &[String]) -> String {
    let mut s = String::from(
        "Every subject parses the message's key=value pairs into fields, renames `user` to \
         `user_name`, deletes `session`, adds `pipeline: \"lab\"`, and writes each event as a \
         JSON line into `out-errors.log` (severity `err` or more severe) or `out-other.log`. \
         loghaul: `remap` (`. |= parse_key_value!(.message)`, `.user_name = del(.user)`, \
         `del(.session)`, `.pipeline = \"lab\"`) on its fast path, then `route`; loghaul-vrl: \
         the same with `fast_path: false` on the remap (the VRL runtime; the route's \
         conditions still take the fast path: the route has no such switch); syslog-ng: \
         `kv-parser()`, `rename()`, `unset()`, `set()`, `if (level(emerg..err))`; rsyslog: \
         mmnormalize with a liblognorm rule naming the keys in their order (liblognorm 2.0.6 \
         has no parser for pairs with quoted values: a layout parser, less general than the \
         others' key=value parsers), RainerScript `set`/`unset`, `if $syslogseverity <= 3`.\n",
    );
    // The check's findings, per subject over its measured runs; and the split of every
    // subject's runs, which the same load makes the same for everyone.
    let mut rows = String::new();
    let mut splits: Vec<(u64, u64)> = Vec::new();
    for name in names {
        let checked: Vec<check::OutputCheck> = records
            .iter()
            .filter(|r| &r.subject == name && !r.warmup)
            .filter_map(|r| serde_json::from_value(r.extra.get("outputs")?.clone()).ok())
            .collect();
        if checked.is_empty() {
            continue;
        }
        let sum = |f: &dyn Fn(&check::OutputCheck) -> u64| checked.iter().map(f).sum::<u64>();
        let (errors, other) = (sum(&|c| c.errors_lines), sum(&|c| c.other_lines));
        splits.extend(checked.iter().map(|c| (c.errors_lines, c.other_lines)));
        let _ = writeln!(
            rows,
            "| {name} | {} | {} ({:.1}%) | {} | {} | {} |",
            checked.len(),
            report::count(errors as f64),
            100.0 * errors as f64 / (errors + other).max(1) as f64,
            report::count(other as f64),
            report::count(sum(&|c| c.decoded) as f64),
            match sum(&|c| c.problems) {
                0 => "passed".to_string(),
                n => format!("**{n} lines failed**"),
            },
        );
    }
    if !rows.is_empty() {
        let _ = write!(
            s,
            "\nThe outputs check, after every measured run (outside its timing): every line's \
             severity in its file, a sample of lines decoded in full with exactly the same \
             fields for every subject ({}), the pairs equal to the message's own, the severity \
             the status's; loss and duplicates over both files are the table's.\n\n\
             | subject | runs | errors file | other file | decoded | check |\n\
             |---|---:|---:|---:|---:|---|\n{rows}",
            check::FIELDS.join(", ")
        );
        splits.sort_unstable();
        splits.dedup();
        let _ = writeln!(
            s,
            "\n{}",
            if splits.len() == 1 {
                "Every run of every subject split the events alike (the same load, the same \
                 files)."
            } else {
                "**The runs split the events differently** (the same load should make the same \
                 files): see the raw records' `outputs`."
            }
        );
    }
    // Whether loghaul's program stayed on the fast path (its events that fell back to the VRL
    // runtime, as loghaul counts them).
    let fallbacks: Vec<u64> = records
        .iter()
        .filter(|r| r.subject == SubjectKind::Loghaul.name() && !r.warmup)
        .filter_map(|r| r.extra.get(runner::REMAP_FALLBACKS_KEY)?.as_u64())
        .collect();
    if !fallbacks.is_empty() {
        let n: u64 = fallbacks.iter().sum();
        let _ = writeln!(
            s,
            "\nloghaul's remap left {} events of its measured runs to the VRL runtime \
             (`loghaul_remap_runtime_fallbacks_total`){}.",
            report::count(n as f64),
            if n == 0 {
                ": every event ran on the fast path"
            } else {
                ": those ran as in loghaul-vrl"
            }
        );
    }
    let summaries = report::summarize(records, names);
    let median = |name: &str| {
        summaries
            .iter()
            .find(|m| m.subject == name && m.runs > 0)
            .and_then(|m| Some((m.events_per_sec?.median, m.cpu_secs_per_million?.median)))
    };
    let mut ratios = Vec::new();
    let loghaul = median(SubjectKind::Loghaul.name());
    if let (Some((rate, cpu)), Some((vrl_rate, vrl_cpu))) =
        (loghaul, median(SubjectKind::LoghaulVrl.name()))
        && vrl_rate > 0.0
        && vrl_cpu > 0.0
    {
        ratios.push(format!(
            "loghaul ÷ loghaul-vrl: rate **{:.2}**, CPU-s per 1M events **{:.2}**",
            rate / vrl_rate,
            cpu / vrl_cpu
        ));
    }
    let best_peer = [SubjectKind::SyslogNg, SubjectKind::Rsyslog]
        .into_iter()
        .filter_map(|k| Some((k.name(), median(k.name())?)))
        .max_by(|a, b| a.1.0.total_cmp(&b.1.0));
    if let (Some((rate, cpu)), Some((peer, (peer_rate, peer_cpu)))) = (loghaul, best_peer)
        && peer_rate > 0.0
        && peer_cpu > 0.0
    {
        ratios.push(format!(
            "loghaul ÷ max(syslog-ng, rsyslog) = loghaul ÷ {peer}: rate **{:.2}×**, CPU-s per \
             1M events **{:.2}**",
            rate / peer_rate,
            cpu / peer_cpu
        ));
    }
    if !ratios.is_empty() {
        let _ = writeln!(
            s,
            "\nRatios of the medians (same run): {}. loghaul against its own pass-through \
             (the same messages without the transforms) is the `syslog` scenario's, run \
             separately.",
            ratios.join("; ")
        );
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn run(subject: &str, rate: f64, cpu: f64, outputs: Option<check::OutputCheck>) -> RunRecord {
        let mut r = RunRecord::empty("transform", subject, "p", 1, Status::Complete);
        r.events_seen = 3000;
        r.events_per_sec = rate;
        r.cpu_secs_per_million = cpu;
        if let Some(o) = outputs {
            r.extra
                .insert("outputs".into(), serde_json::to_value(o).unwrap());
        }
        if subject == "loghaul" {
            r.extra
                .insert(runner::REMAP_FALLBACKS_KEY.into(), 0.into());
        }
        r
    }

    #[test]
    fn notes_give_the_check_and_the_ratios() {
        let passed = check::OutputCheck {
            errors_lines: 1000,
            other_lines: 2000,
            decoded: 3000,
            ..check::OutputCheck::default()
        };
        let records = vec![
            run("loghaul", 2e6, 0.5, Some(passed.clone())),
            run("loghaul-vrl", 1e6, 1.0, Some(passed.clone())),
            run("rsyslog", 2e5, 5.0, Some(passed.clone())),
            run("syslog-ng", 4e5, 4.0, Some(passed)),
        ];
        let names: Vec<String> = records.iter().map(|r| r.subject.clone()).collect();
        let said = notes(&records, &names);
        for want in [
            "| loghaul | 1 | 1,000 (33.3%) | 2,000 | 3,000 | passed |",
            "Every run of every subject split the events alike",
            "loghaul's remap left 0 events of its measured runs to the VRL runtime",
            "loghaul ÷ loghaul-vrl: rate **2.00**, CPU-s per 1M events **0.50**",
            "loghaul ÷ max(syslog-ng, rsyslog) = loghaul ÷ syslog-ng: rate **5.00×**, CPU-s \
             per 1M events **0.12**",
        ] {
            assert!(said.contains(want), "{want:?} in {said}");
        }
        // Without its peers' runs, no ratio to them.
        let alone = notes(&records[..1], &names[..1]);
        assert!(!alone.contains("Ratios"), "{alone}");
    }

    #[test]
    fn runs_four_subjects_and_says_why_not_the_others() {
        let t = super::super::by_name("transform").unwrap();
        for k in SUBJECTS {
            assert!(t.why_not(*k).is_none(), "{k:?}");
        }
        assert_eq!(
            t.why_not(SubjectKind::Bare),
            Some("n/a: the bare loop has no transforms")
        );
        // The VRL-runtime variant runs nowhere else.
        for s in super::super::REGISTRY {
            if s.name() != "transform" {
                assert!(s.why_not(SubjectKind::LoghaulVrl).is_some(), "{}", s.name());
            }
        }
        let spec = t.payload_spec(256, 1);
        assert_eq!(spec.content, Content::KeyValue);
    }
}
