//! Results of `bench run`: raw runs (JSON, CSV), a Markdown table of medians with min–max, and an SVG
//! bar chart.
//!
//! The table keeps the published experiments' shape, `implementation | platform | duration |
//! rate`, and adds what a comparison needs: CPU-seconds per million events, CPU/wall, peak RSS,
//! loss, duplicates and latency. A subject that cannot run a scenario, or failed, still gets its
//! row, saying so.
//!
//! This module knows no scenario: what a scenario measures beyond the common columns goes into a
//! record's [`RunRecord::extra`] and into the notes under the table (`Context::notes`), both
//! written by the scenario (`crate::scenarios::Scenario::report`). A scenario whose results are
//! not runs of subjects at all writes its own report beside this one's helpers.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Serialize;

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every event was seen.
    Complete,
    /// The subject stopped making progress before every event was seen: counted as loss.
    Timeout,
    /// The subject does not do this scenario.
    Unsupported(String),
    /// The run could not be carried out.
    Failed(String),
}

/// One run of one subject.
#[derive(Clone, Debug, Serialize)]
pub struct RunRecord {
    /// Scenario name.
    pub scenario: String,
    /// Subject name.
    pub subject: String,
    /// Implementation description (name, version, language).
    pub platform: String,
    /// 1-based run number (of the warm-up rounds, for a warm-up run).
    pub run: usize,
    /// An uncounted warm-up run: kept in the raw runs, left out of every median.
    pub warmup: bool,
    /// Outcome.
    pub status: Status,
    /// Events the generator sent.
    pub events_sent: u64,
    /// Distinct events the meter saw.
    pub events_seen: u64,
    /// Seconds from the generator's start to the last event seen.
    pub duration_secs: f64,
    /// events_seen / duration.
    pub events_per_sec: f64,
    /// Seconds the generator took to hand everything to the kernel.
    pub gen_secs: f64,
    /// CPU the generator used over the run's duration, in cores (`None`: not measurable; for
    /// loggen, its whole process's CPU from /proc): on a small machine, what the subject could not
    /// have.
    pub gen_cores: Option<f64>,
    /// CPU seconds (user + system) of the subject's process tree during the run.
    pub cpu_secs: f64,
    /// cpu_secs per million events seen.
    pub cpu_secs_per_million: f64,
    /// cpu_secs / duration (1.0 = one core busy).
    pub cpu_per_wall: f64,
    /// Peak resident memory of the tree, bytes.
    pub peak_rss_bytes: u64,
    /// Events sent and never seen.
    pub loss: u64,
    /// Extra copies seen (`None`: the subject cannot tell).
    pub duplicates: Option<u64>,
    /// Latency percentiles in ms (`None`: not measurable for this subject).
    pub latency_p50_ms: Option<f64>,
    /// 99th percentile.
    pub latency_p99_ms: Option<f64>,
    /// 99.9th percentile.
    pub latency_p999_ms: Option<f64>,
    /// Events seen per second of the run.
    pub flow_per_sec: Vec<u64>,
    /// fsyncs of the subject's disk buffer during the run (`None`: it has none, or they could
    /// not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fsyncs: Option<u64>,
    /// fsyncs / duration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fsyncs_per_sec: Option<f64>,
    /// The TLS protocol version and cipher suite the generator and the subject agreed to
    /// (`None`: plain TCP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<String>,
    /// With a connection per message: connections the subject refused or broke off, each a
    /// message lost (`None`: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_connections: Option<u64>,
    /// The first of those failures' errors, as the generator saw it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<String>,
    /// What the scenario measured beyond the common fields, each under a key of its own, written
    /// into the record's JSON beside them (`None` of a scenario: nothing).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl RunRecord {
    /// A record with no measurement, for runs that did not happen.
    pub fn empty(
        scenario: &str,
        subject: &str,
        platform: &str,
        run: usize,
        status: Status,
    ) -> Self {
        Self {
            scenario: scenario.into(),
            subject: subject.into(),
            platform: platform.into(),
            run,
            warmup: false,
            status,
            events_sent: 0,
            events_seen: 0,
            duration_secs: 0.0,
            events_per_sec: 0.0,
            gen_secs: 0.0,
            gen_cores: None,
            cpu_secs: 0.0,
            cpu_secs_per_million: 0.0,
            cpu_per_wall: 0.0,
            peak_rss_bytes: 0,
            loss: 0,
            duplicates: None,
            latency_p50_ms: None,
            latency_p99_ms: None,
            latency_p999_ms: None,
            flow_per_sec: Vec::new(),
            fsyncs: None,
            fsyncs_per_sec: None,
            tls: None,
            failed_connections: None,
            first_failure: None,
            extra: serde_json::Map::new(),
        }
    }

    fn measured(&self) -> bool {
        matches!(self.status, Status::Complete | Status::Timeout)
    }
}

/// Median, min and max of a sample.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Spread {
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

/// Median with min–max of `values`; `None` when empty.
pub fn spread(values: &[f64]) -> Option<Spread> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some(Spread {
        median,
        min: v[0],
        max: v[n - 1],
    })
}

/// One subject's medians over its runs.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Subject name.
    pub subject: String,
    /// Implementation description.
    pub platform: String,
    /// Runs measured.
    pub runs: usize,
    /// Why there is no measurement, if there is none.
    pub note: Option<String>,
    /// Duration, seconds.
    pub duration_secs: Option<Spread>,
    /// Events per second.
    pub events_per_sec: Option<Spread>,
    /// CPU seconds per million events.
    pub cpu_secs_per_million: Option<Spread>,
    /// CPU / wall.
    pub cpu_per_wall: Option<Spread>,
    /// The generator's CPU / wall.
    pub gen_cores: Option<Spread>,
    /// Peak RSS, MiB.
    pub peak_rss_mib: Option<Spread>,
    /// Total events lost over all runs.
    pub loss: u64,
    /// Total duplicates over all runs (`None`: not measurable).
    pub duplicates: Option<u64>,
    /// Median p50 latency, ms.
    pub latency_p50_ms: Option<f64>,
    /// Median p99 latency, ms.
    pub latency_p99_ms: Option<f64>,
    /// Median p99.9 latency, ms.
    pub latency_p999_ms: Option<f64>,
    /// fsyncs per second of a disk buffer (`None`: the subject has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fsyncs_per_sec: Option<Spread>,
}

/// Summarises `records` per subject, in the order of `subjects`.
pub fn summarize(records: &[RunRecord], subjects: &[String]) -> Vec<Summary> {
    subjects
        .iter()
        .map(|name| {
            // Warm-up runs count for nothing here: no figure, no loss, no note.
            let mine: Vec<&RunRecord> = records
                .iter()
                .filter(|r| &r.subject == name && !r.warmup)
                .collect();
            let ok: Vec<&RunRecord> = mine.iter().copied().filter(|r| r.measured()).collect();
            let platform = mine.first().map(|r| r.platform.clone()).unwrap_or_default();
            let note = if ok.is_empty() {
                mine.iter().find_map(|r| match &r.status {
                    Status::Unsupported(why) | Status::Failed(why) => Some(why.clone()),
                    _ => None,
                })
            } else if let Some(n) = ok
                .iter()
                .filter_map(|r| r.failed_connections)
                .reduce(|a, b| a + b)
            {
                Some(format!("{n} connections failed"))
            } else if ok.iter().any(|r| r.status == Status::Timeout) {
                Some("timed out: events missing".into())
            } else {
                None
            };
            let col = |f: &dyn Fn(&RunRecord) -> f64| {
                spread(&ok.iter().map(|r| f(r)).collect::<Vec<_>>())
            };
            let med = |f: &dyn Fn(&RunRecord) -> Option<f64>| {
                spread(&ok.iter().filter_map(|r| f(r)).collect::<Vec<_>>()).map(|s| s.median)
            };
            Summary {
                subject: name.clone(),
                platform,
                runs: ok.len(),
                note,
                duration_secs: col(&|r| r.duration_secs),
                events_per_sec: col(&|r| r.events_per_sec),
                cpu_secs_per_million: col(&|r| r.cpu_secs_per_million),
                cpu_per_wall: col(&|r| r.cpu_per_wall),
                gen_cores: spread(&ok.iter().filter_map(|r| r.gen_cores).collect::<Vec<_>>()),
                peak_rss_mib: col(&|r| r.peak_rss_bytes as f64 / (1024.0 * 1024.0)),
                loss: ok.iter().map(|r| r.loss).sum(),
                duplicates: if ok.iter().all(|r| r.duplicates.is_some()) && !ok.is_empty() {
                    Some(ok.iter().filter_map(|r| r.duplicates).sum())
                } else {
                    None
                },
                latency_p50_ms: med(&|r| r.latency_p50_ms),
                latency_p99_ms: med(&|r| r.latency_p99_ms),
                latency_p999_ms: med(&|r| r.latency_p999_ms),
                fsyncs_per_sec: spread(
                    &ok.iter()
                        .filter_map(|r| r.fsyncs_per_sec)
                        .collect::<Vec<_>>(),
                ),
            }
        })
        .collect()
}

pub(crate) fn fmt_spread(s: Option<Spread>, f: &dyn Fn(f64) -> String) -> String {
    match s {
        Some(s) if s.min != s.max => format!("{} ({}–{})", f(s.median), f(s.min), f(s.max)),
        Some(s) => f(s.median),
        None => "–".into(),
    }
}

fn rate(v: f64) -> String {
    // 999,600/s would print as "1000k/s" in the k branch; below 10k/s (handshakes) a k would
    // round away most of the figure.
    if v >= 999_500.0 {
        format!("{:.2}M/s", v / 1e6)
    } else if v >= 9_999.5 {
        format!("{:.0}k/s", v / 1e3)
    } else {
        format!("{v:.0}/s")
    }
}

/// The Markdown table.
pub fn markdown(
    scenario: &str,
    events: u64,
    runs: usize,
    warmup: usize,
    summaries: &[Summary],
) -> String {
    let mut s = String::new();
    let warm = match warmup {
        0 => String::new(),
        1 => " after a warm-up round".into(),
        n => format!(" after {n} warm-up rounds"),
    };
    let _ = writeln!(
        s,
        "### `{scenario}`: {events} events per run, {runs} runs per subject{warm}, interleaved; \
         median (min–max)\n"
    );
    // Only a run with a disk buffer has fsyncs to count: the column is there when one has.
    let fsyncs = summaries.iter().any(|m| m.fsyncs_per_sec.is_some());
    let (fsync_head, fsync_rule) = if fsyncs {
        (" fsyncs/s |", "---|")
    } else {
        ("", "")
    };
    let _ = writeln!(
        s,
        "| implementation | platform | duration | rate | CPU-s / 1M events | CPU/wall | peak RSS | \
         loss | dups | p50 | p99 | p99.9 | generator CPU/wall |{fsync_head}"
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|{fsync_rule}"
    );
    for m in summaries {
        if m.runs == 0 {
            let _ = writeln!(
                s,
                "| {} | {} | {} | – | – | – | – | – | – | – | – | – | – |{}",
                m.subject,
                m.platform,
                m.note.clone().unwrap_or_else(|| "not run".into()),
                if fsyncs { " – |" } else { "" }
            );
            continue;
        }
        let fsync_cell = if fsyncs {
            format!(
                " {} |",
                fmt_spread(m.fsyncs_per_sec, &|v| format!("{v:.0}"))
            )
        } else {
            String::new()
        };
        let ms = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.1}ms"));
        let loss = match &m.note {
            Some(n) => format!("{} ({n})", m.loss),
            None => m.loss.to_string(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |{}",
            m.subject,
            m.platform,
            fmt_spread(m.duration_secs, &|v| format!("{v:.2}s")),
            fmt_spread(m.events_per_sec, &rate),
            fmt_spread(m.cpu_secs_per_million, &|v| format!("{v:.2}")),
            fmt_spread(m.cpu_per_wall, &|v| format!("{v:.2}")),
            fmt_spread(m.peak_rss_mib, &|v| format!("{v:.0}MiB")),
            loss,
            m.duplicates.map_or("n/a".into(), |d| d.to_string()),
            ms(m.latency_p50_ms),
            ms(m.latency_p99_ms),
            ms(m.latency_p999_ms),
            fmt_spread(m.gen_cores, &|v| format!("{v:.2}")),
            fsync_cell,
        );
    }
    s
}

/// Raw runs as CSV (one row per run), with `fsyncs` and `fsyncs_per_sec` at the end when a run
/// had a disk buffer.
pub fn csv(records: &[RunRecord]) -> String {
    let fsyncs = records.iter().any(|r| r.fsyncs.is_some());
    let mut s = String::from(
        "scenario,subject,platform,run,status,events_sent,events_seen,duration_secs,events_per_sec,\
         gen_secs,gen_cores,cpu_secs,cpu_secs_per_million,cpu_per_wall,peak_rss_bytes,loss,\
         duplicates,latency_p50_ms,latency_p99_ms,latency_p999_ms,warmup",
    );
    s.push_str(if fsyncs {
        ",fsyncs,fsyncs_per_sec\n"
    } else {
        "\n"
    });
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
    for r in records {
        let status = match &r.status {
            Status::Complete => "complete".to_string(),
            Status::Timeout => "timeout".to_string(),
            Status::Unsupported(_) => "unsupported".to_string(),
            Status::Failed(_) => "failed".to_string(),
        };
        let _ = write!(
            s,
            "{},{},\"{}\",{},{},{},{},{:.4},{:.0},{:.4},{},{:.3},{:.4},{:.3},{},{},{},{},{},{},{}",
            r.scenario,
            r.subject,
            r.platform.replace('"', "'"),
            r.run,
            status,
            r.events_sent,
            r.events_seen,
            r.duration_secs,
            r.events_per_sec,
            r.gen_secs,
            opt(r.gen_cores),
            r.cpu_secs,
            r.cpu_secs_per_million,
            r.cpu_per_wall,
            r.peak_rss_bytes,
            r.loss,
            r.duplicates.map_or(String::new(), |d| d.to_string()),
            opt(r.latency_p50_ms),
            opt(r.latency_p99_ms),
            opt(r.latency_p999_ms),
            r.warmup,
        );
        if fsyncs {
            let _ = write!(
                s,
                ",{},{}",
                r.fsyncs.map_or(String::new(), |n| n.to_string()),
                opt(r.fsyncs_per_sec)
            );
        }
        s.push('\n');
    }
    s
}

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A hand-written SVG: two panels of horizontal bars (events/s, CPU-s per 1M events), medians with
/// min–max whiskers. Hand-written because it is 100 lines and keeps the build small.
pub fn svg(title: &str, summaries: &[Summary]) -> String {
    let rows = summaries.len().max(1);
    let bar_h = 26.0;
    let label_w = 130.0;
    let panel_w = 330.0;
    let gap = 60.0;
    let top = 60.0;
    let height = top + rows as f64 * (bar_h + 12.0) + 50.0;
    let width = label_w + 2.0 * panel_w + gap + 40.0;
    let colors = [
        "#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b7791f", "#4a5568",
    ];
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(
        s,
        "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"22\" \
         font-size=\"15\" font-weight=\"bold\">{}</text>",
        esc(title)
    );
    type Getter = fn(&Summary) -> Option<Spread>;
    type Panel<'a> = (&'a str, Getter, fn(f64) -> String);
    let panels: [Panel; 2] = [
        (
            "events/s (higher is better)",
            |m: &Summary| m.events_per_sec,
            |v: f64| rate(v),
        ),
        (
            "CPU-seconds per 1M events (lower is better)",
            |m: &Summary| m.cpu_secs_per_million,
            |v: f64| format!("{v:.2}"),
        ),
    ];
    for (p, (name, get, fmt)) in panels.iter().enumerate() {
        let x0 = label_w + p as f64 * (panel_w + gap);
        let max = summaries
            .iter()
            .filter_map(|m| get(m).map(|s| s.max))
            .fold(0.0f64, f64::max)
            .max(f64::MIN_POSITIVE);
        let _ = writeln!(
            s,
            "<text x=\"{x0}\" y=\"{}\" font-weight=\"bold\">{}</text>",
            top - 14.0,
            esc(name)
        );
        let _ = writeln!(
            s,
            "<line x1=\"{x0}\" y1=\"{}\" x2=\"{x0}\" y2=\"{}\" stroke=\"#333\"/>",
            top - 4.0,
            height - 40.0
        );
        for (i, m) in summaries.iter().enumerate() {
            let y = top + i as f64 * (bar_h + 12.0);
            if p == 0 {
                let _ = writeln!(
                    s,
                    "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
                    label_w - 8.0,
                    y + bar_h / 2.0 + 4.0,
                    esc(&m.subject)
                );
            }
            match get(m) {
                Some(sp) => {
                    let w = sp.median / max * panel_w;
                    let color = colors[i % colors.len()];
                    let _ = writeln!(
                        s,
                        "<rect x=\"{x0}\" y=\"{y}\" width=\"{w:.1}\" height=\"{bar_h}\" fill=\"{color}\"/>"
                    );
                    let (a, b) = (x0 + sp.min / max * panel_w, x0 + sp.max / max * panel_w);
                    let yc = y + bar_h / 2.0;
                    let _ = writeln!(
                        s,
                        "<path d=\"M{a:.1} {yc} H{b:.1} M{a:.1} {} V{} M{b:.1} {} V{}\" \
                         stroke=\"black\" stroke-width=\"1.2\"/>",
                        yc - 6.0,
                        yc + 6.0,
                        yc - 6.0,
                        yc + 6.0
                    );
                    let _ = writeln!(
                        s,
                        "<text x=\"{:.1}\" y=\"{}\">{}</text>",
                        (x0 + w.max(b - x0) + 6.0).min(x0 + panel_w + gap - 4.0),
                        yc + 4.0,
                        esc(&fmt(sp.median))
                    );
                }
                None => {
                    let _ = writeln!(
                        s,
                        "<text x=\"{}\" y=\"{}\" fill=\"#777\">{}</text>",
                        x0 + 6.0,
                        y + bar_h / 2.0 + 4.0,
                        esc(m.note.as_deref().unwrap_or("n/a"))
                    );
                }
            }
        }
    }
    let _ = writeln!(
        s,
        "<text x=\"10\" y=\"{}\" fill=\"#555\">bars: median; whiskers: min–max over runs</text>",
        height - 14.0
    );
    s.push_str("</svg>\n");
    s
}

/// What a results folder describes besides the runs themselves.
#[derive(Clone, Debug)]
pub struct Context<'a> {
    /// Scenario name.
    pub scenario: &'a str,
    /// Events per run.
    pub events: u64,
    /// Runs per subject.
    pub runs: usize,
    /// Warm-up rounds before them.
    pub warmup: usize,
    /// Machine description.
    pub machine: &'a str,
    /// The command that produced the results.
    pub command: &'a str,
    /// Markdown that goes under the table (what the scenario's figures need said beside them,
    /// its ratios and targets); empty for most scenarios.
    pub notes: &'a str,
}

/// Writes `<scenario>.md`, `.json`, `.csv` and `.svg` into `dir`; returns the Markdown table
/// (with the notes, if any).
///
/// # Errors
/// A file cannot be written.
pub fn write_all(
    dir: &Path,
    cx: &Context<'_>,
    records: &[RunRecord],
    subjects: &[String],
) -> Result<String> {
    let Context {
        scenario,
        events,
        runs,
        warmup,
        machine,
        command,
        notes,
    } = *cx;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let summaries = summarize(records, subjects);
    let mut table = markdown(scenario, events, runs, warmup, &summaries);
    if !notes.is_empty() {
        table = format!("{table}\n{notes}");
    }
    let md = format!(
        "{table}\nMachine: {machine}\n\nCommand: `{command}`\n\nChart: [{scenario}.svg]({scenario}.svg); \
         raw runs: [{scenario}.json]({scenario}.json), [{scenario}.csv]({scenario}.csv)\n"
    );
    let write = |name: String, text: &str| -> Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    };
    write(format!("{scenario}.md"), &md)?;
    write(format!("{scenario}.csv"), &csv(records))?;
    let json = serde_json::json!({
        "scenario": scenario,
        "events_per_run": events,
        "runs": runs,
        "warmup_rounds": warmup,
        "machine": machine,
        "command": command,
        "notes": notes,
        "summary": summaries,
        "records": records,
    });
    write(
        format!("{scenario}.json"),
        &serde_json::to_string_pretty(&json).context("encoding the results")?,
    )?;
    write(
        format!("{scenario}.svg"),
        &svg(
            &format!("loghaul bench: {scenario} ({machine})"),
            &summaries,
        ),
    )?;
    Ok(table)
}

/// A count as the published experiments' tables print it: whole, with thousands separators
/// (`269,636`).
pub fn count(v: f64) -> String {
    let digits = format!("{:.0}", v.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn spread_median_min_max() {
        let s = spread(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(spread(&[1.0, 2.0, 3.0, 4.0]).unwrap().median, 2.5);
    }

    #[test]
    fn unsupported_subject_keeps_its_row() {
        let records = vec![RunRecord::empty(
            "a_scenario",
            "eventmachine",
            "Ruby",
            1,
            Status::Unsupported("n/a: a line counter".into()),
        )];
        let m = summarize(&records, &["eventmachine".into()]);
        let t = markdown("a_scenario", 10, 1, 0, &m);
        assert!(t.contains("| eventmachine | Ruby | n/a: a line counter |"));
        let svg = svg("t", &m);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn generator_share_is_reported_per_run_and_as_a_median() {
        let run = |n: usize, gen_cores: Option<f64>| {
            let mut r = RunRecord::empty("a_scenario", "loghaul", "Rust", n, Status::Complete);
            r.events_seen = 100;
            r.gen_cores = gen_cores;
            r
        };
        let records = vec![run(1, Some(0.25)), run(2, Some(0.75)), run(3, Some(0.5))];
        let m = summarize(&records, &["loghaul".into(), "loggen-driven".into()]);
        let t = markdown("a_scenario", 100, 3, 0, &m);
        let rows: Vec<&str> = t.lines().filter(|l| l.starts_with('|')).collect();
        assert!(rows[0].ends_with("| generator CPU/wall |"), "{t}");
        // Every row, measured or not, has the header's columns.
        for row in &rows {
            assert_eq!(
                row.matches('|').count(),
                rows[0].matches('|').count(),
                "{row}"
            );
        }
        assert!(rows[2].ends_with("| 0.50 (0.25–0.75) |"), "{t}");
        let c = csv(&records);
        let header: Vec<&str> = c.lines().next().unwrap().split(',').collect();
        let at = header.iter().position(|h| *h == "gen_cores").unwrap();
        let first: Vec<&str> = c.lines().nth(1).unwrap().split(',').collect();
        assert_eq!(first.len(), header.len());
        assert_eq!(first[at], "0.250");
    }

    #[test]
    fn warm_up_runs_are_kept_but_never_counted() {
        let run = |n: usize, warmup: bool, rate: f64, loss: u64| {
            let mut r = RunRecord::empty("a_scenario", "loghaul", "Rust", n, Status::Complete);
            r.events_seen = 100;
            r.events_per_sec = rate;
            r.loss = loss;
            r.warmup = warmup;
            r
        };
        // A slow, lossy warm-up: none of it may reach the medians, the min–max or the loss.
        let records = vec![
            run(1, true, 1.0, 7),
            run(1, false, 300.0, 0),
            run(2, false, 100.0, 0),
            run(3, false, 200.0, 0),
        ];
        let m = summarize(&records, &["loghaul".into()]);
        assert_eq!(m[0].runs, 3);
        let rate = m[0].events_per_sec.unwrap();
        assert_eq!((rate.median, rate.min, rate.max), (200.0, 100.0, 300.0));
        assert_eq!(m[0].loss, 0);
        let t = markdown("a_scenario", 100, 3, 1, &m);
        assert!(
            t.contains("3 runs per subject after a warm-up round"),
            "{t}"
        );
        // Only a warm-up that failed: the subject shows as not measured, with no note from it.
        let mut failed = run(1, true, 0.0, 0);
        failed.status = Status::Failed("warm-up failed".into());
        let m = summarize(&[failed], &["loghaul".into()]);
        assert_eq!((m[0].runs, m[0].note.clone()), (0, None));
        // The raw runs keep it, marked.
        let c = csv(&records);
        let header: Vec<&str> = c.lines().next().unwrap().split(',').collect();
        assert_eq!(header.last(), Some(&"warmup"));
        let marks: Vec<&str> = c
            .lines()
            .skip(1)
            .map(|l| l.rsplit(',').next().unwrap())
            .collect();
        assert_eq!(marks, ["true", "false", "false", "false"]);
    }

    #[test]
    fn fsyncs_have_a_column_only_when_a_subject_has_a_disk_buffer() {
        let run = |subject: &str, n: usize, fsyncs: Option<u64>| {
            let mut r = RunRecord::empty("a_scenario", subject, "Rust", n, Status::Complete);
            r.events_seen = 100;
            r.duration_secs = 0.5;
            r.fsyncs = fsyncs;
            r.fsyncs_per_sec = fsyncs.map(|f| f as f64 / 0.5);
            r
        };
        let memory = vec![run("loghaul", 1, None), run("loghaul", 2, None)];
        let m = summarize(&memory, &["loghaul".into()]);
        let t = markdown("a_scenario", 100, 2, 0, &m);
        assert!(!t.contains("fsyncs"), "{t}");
        assert!(!csv(&memory).contains("fsyncs"));
        let json = serde_json::to_string(&(&memory, &m)).unwrap();
        assert!(!json.contains("fsyncs"), "{json}");

        let mut both = memory.clone();
        both.extend([run("disk", 1, Some(10)), run("disk", 2, Some(30))]);
        let m = summarize(&both, &["loghaul".into(), "disk".into(), "gone".into()]);
        let t = markdown("a_scenario", 100, 2, 0, &m);
        let rows: Vec<&str> = t.lines().filter(|l| l.starts_with('|')).collect();
        assert!(
            rows[0].ends_with("| generator CPU/wall | fsyncs/s |"),
            "{t}"
        );
        for row in &rows {
            assert_eq!(
                row.matches('|').count(),
                rows[0].matches('|').count(),
                "{row}"
            );
        }
        assert!(rows[2].ends_with("| – |"), "memory buffer: {t}");
        assert!(rows[3].ends_with("| 40 (20–60) |"), "{t}");
        assert!(rows[4].ends_with("| – |"), "not run: {t}");
        let c = csv(&both);
        let header: Vec<&str> = c.lines().next().unwrap().split(',').collect();
        assert_eq!(header[header.len() - 2..], ["fsyncs", "fsyncs_per_sec"]);
        let rows: Vec<Vec<&str>> = c.lines().skip(1).map(|l| l.split(',').collect()).collect();
        assert_eq!(rows[0][rows[0].len() - 2..], ["", ""]);
        assert_eq!(rows[3][rows[3].len() - 2..], ["30", "60.000"]);
    }

    #[test]
    fn counts_read_like_the_seed() {
        assert_eq!(count(0.0), "0");
        assert_eq!(count(50.0), "50");
        assert_eq!(count(269_636.4), "269,636");
        assert_eq!(count(1_234_567.0), "1,234,567");
    }
}
