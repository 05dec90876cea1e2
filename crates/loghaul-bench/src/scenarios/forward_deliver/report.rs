//! `forward_deliver`'s report: its steps climb rates instead of repeating runs, so its table is
//! the published peer-deliver run's (`rate of writing | receiving per process | remarks`) with a
//! row per step ([`StepRecord`], [`write_tree`]), beside the raw steps (JSON, CSV) and a chart.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Serialize;

use crate::report::{Status, count, esc};

/// One rate step of `forward_deliver` (see [`super::run`]).
#[derive(Clone, Debug, Serialize)]
pub struct StepRecord {
    /// Subject name.
    pub subject: String,
    /// Implementation and tree description.
    pub platform: String,
    /// 1-based step number.
    pub step: usize,
    /// Lines per second written to each agent's file.
    pub rate_per_agent: u64,
    /// Processes per tier.
    pub shape: super::TreeShape,
    /// How long the generators wrote.
    pub step_secs: f64,
    /// Complete (every line arrived) or timed out.
    pub status: Status,
    /// Lines written, over all agents.
    pub written: u64,
    /// Lines written to each agent's file.
    pub written_per_agent: Vec<u64>,
    /// Lines per second written, over all agents, as the generators achieved it.
    pub written_per_sec: f64,
    /// Lines of the step each receiver wrote (duplicates included), by receiver.
    pub received_per_receiver: Vec<u64>,
    /// Each receiver's lines ÷ the span, by receiver: the published run's "receiving
    /// (lines/sec/process)".
    pub receiving_per_sec: Vec<f64>,
    /// Seconds from the generators' start to the step's last arrival.
    pub span_secs: f64,
    /// Lines written and never received.
    pub loss: u64,
    /// Extra copies received, over all receivers.
    pub duplicates: u64,
    /// Delay (arrival − send time) percentiles, ms, from the watchers' samples.
    pub delay_p50_ms: Option<f64>,
    /// 99th percentile.
    pub delay_p99_ms: Option<f64>,
    /// 99.9th percentile.
    pub delay_p999_ms: Option<f64>,
    /// Largest delay sampled.
    pub delay_max_ms: Option<f64>,
    /// CPU seconds of the agents, from the step's start to the end of its drain.
    pub cpu_agents_secs: f64,
    /// CPU seconds of the delivers.
    pub cpu_delivers_secs: f64,
    /// CPU seconds of the receivers.
    pub cpu_receivers_secs: f64,
    /// CPU seconds of the generator's writing threads (`None`: not measurable).
    pub gen_cpu_secs: Option<f64>,
    /// The whole machine over the same interval, in cores (busy CPU-s ÷ wall): the tree, the
    /// lab, the kernel's threads, interrupts (`None`: /proc/stat unreadable).
    pub machine_busy_cores: Option<f64>,
    /// Cores' worth of time the hypervisor took over the interval.
    pub machine_steal_cores: Option<f64>,
    /// Wall seconds from the step's start to the end of its drain.
    pub wall_secs: f64,
    /// CPU seconds of the lab's own process over the interval: the generator's threads, the
    /// watchers and the books.
    pub lab_cpu_secs: Option<f64>,
    /// The machine's busy CPU seconds that were neither the tree's nor the lab's: kernel threads
    /// (writeback of the files), interrupts, and anything else running on the machine. On a
    /// shared machine, what this step competed with.
    pub others_cpu_secs: Option<f64>,
    /// Peak resident memory of the agents so far, summed, bytes.
    pub peak_rss_agents_bytes: u64,
    /// Of the delivers.
    pub peak_rss_delivers_bytes: u64,
    /// Of the receivers.
    pub peak_rss_receivers_bytes: u64,
    /// Lines arrived in each second of the step, by receiver.
    pub flow_per_sec: Vec<Vec<u64>>,
    /// Complete, no loss, and a p99 delay under a second.
    pub sustained: bool,
}

impl StepRecord {
    /// Lines per second per receiver process, averaged over the receivers.
    pub fn receiving_mean(&self) -> f64 {
        if self.receiving_per_sec.is_empty() {
            return 0.0;
        }
        self.receiving_per_sec.iter().sum::<f64>() / self.receiving_per_sec.len() as f64
    }

    /// What went wrong in the step, if anything: the published run's "Remarks".
    pub fn remarks(&self) -> String {
        let mut r = Vec::new();
        if self.status == Status::Timeout {
            r.push("timed out: lines missing".to_string());
        } else if self.loss > 0 {
            r.push("lines lost".to_string());
        }
        if self
            .delay_p99_ms
            .is_some_and(|p| p >= super::run::DELAY_LIMIT_MS)
        {
            r.push("delay occurred (p99 ≥ 1s)".to_string());
        }
        if self.duplicates > 0 {
            r.push(format!("{} duplicates", count(self.duplicates as f64)));
        }
        r.join("; ")
    }
}

/// A subject of `forward_deliver` without steps, or that stopped climbing early, and why.
#[derive(Clone, Debug, Serialize)]
pub struct TreeNote {
    /// Subject name.
    pub subject: String,
    /// Implementation and tree description.
    pub platform: String,
    /// Why.
    pub note: String,
}

/// What a `forward_deliver` results folder describes besides the steps.
#[derive(Clone, Debug)]
pub struct TreeContext<'a> {
    /// Processes per tier.
    pub shape: super::TreeShape,
    /// Seconds each step writes.
    pub step_secs: f64,
    /// Rotation of the agents' files (lines; 0 = none).
    pub rotate_lines: u64,
    /// Bytes per line (without the newline).
    pub message_size: usize,
    /// Machine description.
    pub machine: &'a str,
    /// The command that produced the results.
    pub command: &'a str,
}

/// The published experiment's figures: Fluentd's peer-deliver benchmark (fluent/fluentd-benchmark,
/// `peer_deliver/README.md`; 2014, 2 × Xeon E5-2670, 32 cores, 10 agents → 2 delivers → 2
/// receivers), rate of writing per agent and lines per second per receiver process.
pub const SEED_DELIVER: &[(u64, u64, &str)] = &[
    (10, 50, ""),
    (100, 500, ""),
    (1_000, 5_000, ""),
    (10_000, 50_000, ""),
    (20_000, 100_000, ""),
    (50_000, 250_000, ""),
    (60_000, 269_636, "Delay occured"),
];

/// What one Fluentd receiver took alone in the same benchmark suite, lines per second.
pub const SEED_RECEIVER_ALONE: u64 = 467_393;

/// The headline of a subject's steps: the highest sustained step, as (rate per agent, lines per
/// second per receiver process).
pub fn best_sustained(steps: &[&StepRecord]) -> Option<(u64, f64)> {
    steps
        .iter()
        .filter(|r| r.sustained)
        .map(|r| (r.rate_per_agent, r.receiving_mean()))
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// The Markdown of `forward_deliver`: per subject, a row per step, its headline and notes; then
/// the published experiment's figures.
pub fn tree_markdown(cx: &TreeContext<'_>, records: &[StepRecord], notes: &[TreeNote]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "### `forward_deliver`: {}, {}s per step, {}-byte lines{}; acks end to end\n",
        cx.shape,
        cx.step_secs,
        cx.message_size,
        if cx.rotate_lines > 0 {
            format!(
                ", agents' files rotated every {} lines",
                count(cx.rotate_lines as f64)
            )
        } else {
            String::new()
        }
    );
    let mut subjects: Vec<(&str, &str)> = Vec::new();
    for r in records {
        if !subjects.iter().any(|(n, _)| *n == r.subject) {
            subjects.push((&r.subject, &r.platform));
        }
    }
    for n in notes {
        if !subjects.iter().any(|(name, _)| *name == n.subject) {
            subjects.push((&n.subject, &n.platform));
        }
    }
    let ms = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.1}ms"));
    for (name, platform) in subjects {
        let _ = writeln!(s, "**{name}** ({platform})\n");
        let mine: Vec<&StepRecord> = records.iter().filter(|r| r.subject == name).collect();
        if !mine.is_empty() {
            s.push_str(
                "| rate of writing (lines/s per agent) | written (lines/s, all agents) | \
                 receiving (lines/s per receiver process) | delay p50 | delay p99 | delay max | \
                 loss | dups | CPU-s agents | CPU-s delivers | CPU-s receivers | generator CPU-s | \
                 others CPU-s | remarks |\n",
            );
            s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
            for r in &mine {
                let (lo, hi) = r
                    .receiving_per_sec
                    .iter()
                    .fold((f64::MAX, 0.0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
                let receiving = if r.receiving_per_sec.len() > 1 && count(lo) != count(hi) {
                    format!(
                        "{} ({}–{})",
                        count(r.receiving_mean()),
                        count(lo),
                        count(hi)
                    )
                } else {
                    count(r.receiving_mean())
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
                    count(r.rate_per_agent as f64),
                    count(r.written_per_sec),
                    receiving,
                    ms(r.delay_p50_ms),
                    ms(r.delay_p99_ms),
                    ms(r.delay_max_ms),
                    count(r.loss as f64),
                    count(r.duplicates as f64),
                    r.cpu_agents_secs,
                    r.cpu_delivers_secs,
                    r.cpu_receivers_secs,
                    r.gen_cpu_secs.map_or("–".into(), |c| format!("{c:.2}")),
                    r.others_cpu_secs.map_or("–".into(), |c| format!("{c:.2}")),
                    r.remarks(),
                );
            }
            s.push_str(
                "\nCPU-s: from the step's start to the end of its drain. Generator: the lab's \
                 writing threads. Others: the machine's busy time that was neither the tree's \
                 nor the lab's (kernel threads such as writeback, interrupts, other processes).\n\n",
            );
            match best_sustained(&mine) {
                Some((rate, per)) => {
                    let _ = writeln!(
                        s,
                        "Highest sustained step (every line arrived, no loss, p99 delay < 1s): \
                         **{} lines/s per receiver process** at {} lines/s per agent.\n",
                        count(per),
                        count(rate as f64)
                    );
                }
                None => s.push_str("No step was sustained.\n\n"),
            }
        }
        for n in notes.iter().filter(|n| n.subject == name) {
            let _ = writeln!(s, "{name}: {}\n", n.note);
        }
    }
    s.push_str(
        "Fluentd's published run (peer_deliver, 2014, 2 × Xeon E5-2670, 32 cores; every agent \
         tails the same file, so a receiver gets 10 × rate ÷ 2):\n\n\
         | rate of writing (lines/s per agent) | receiving (lines/s per receiver process) | remarks |\n\
         |---|---|---|\n",
    );
    for &(rate, per, remark) in SEED_DELIVER {
        let _ = writeln!(
            s,
            "| {} | {} | {remark} |",
            count(rate as f64),
            count(per as f64)
        );
    }
    let _ = writeln!(
        s,
        "\nA receiver alone took {} lines/s there; the deliver tier held it to {}.",
        count(SEED_RECEIVER_ALONE as f64),
        count(269_636.0)
    );
    s
}

/// The steps as CSV, one row per step.
pub fn tree_csv(records: &[StepRecord]) -> String {
    let mut s = String::from(
        "scenario,subject,platform,step,rate_per_agent,agents,delivers,receivers,step_secs,status,\
         written,written_per_sec,received_per_receiver,receiving_per_sec_mean,span_secs,loss,\
         duplicates,delay_p50_ms,delay_p99_ms,delay_p999_ms,delay_max_ms,cpu_agents_secs,\
         cpu_delivers_secs,cpu_receivers_secs,gen_cpu_secs,wall_secs,machine_busy_cores,\
         machine_steal_cores,lab_cpu_secs,others_cpu_secs,sustained\n",
    );
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
    for r in records {
        let received: Vec<String> = r.received_per_receiver.iter().map(u64::to_string).collect();
        let _ = writeln!(
            s,
            "forward_deliver,{},\"{}\",{},{},{},{},{},{:.3},{},{},{:.0},{},{:.0},{:.4},{},{},{},{},{},{},{:.3},{:.3},{:.3},{},{:.3},{},{},{},{},{}",
            r.subject,
            r.platform.replace('"', "'"),
            r.step,
            r.rate_per_agent,
            r.shape.agents,
            r.shape.delivers,
            r.shape.receivers,
            r.step_secs,
            if r.status == Status::Complete {
                "complete"
            } else {
                "timeout"
            },
            r.written,
            r.written_per_sec,
            received.join(";"),
            r.receiving_mean(),
            r.span_secs,
            r.loss,
            r.duplicates,
            opt(r.delay_p50_ms),
            opt(r.delay_p99_ms),
            opt(r.delay_p999_ms),
            opt(r.delay_max_ms),
            r.cpu_agents_secs,
            r.cpu_delivers_secs,
            r.cpu_receivers_secs,
            opt(r.gen_cpu_secs),
            r.wall_secs,
            opt(r.machine_busy_cores),
            opt(r.machine_steal_cores),
            opt(r.lab_cpu_secs),
            opt(r.others_cpu_secs),
            r.sustained,
        );
    }
    s
}

/// A hand-written SVG of the climb: a bar per step, lines per second per receiver process, blue
/// where the step was sustained and red where it was not, labelled with the p99 delay.
pub fn tree_svg(title: &str, records: &[StepRecord]) -> String {
    let bar_h = 18.0;
    let label_w = 200.0;
    let panel_w = 420.0;
    let top = 50.0;
    let rows = records.len().max(1) as f64;
    let height = top + rows * (bar_h + 8.0) + 40.0;
    let width = label_w + panel_w + 190.0;
    let max = records
        .iter()
        .map(StepRecord::receiving_mean)
        .fold(0.0f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n\
         <text x=\"{label_w}\" y=\"{}\" font-weight=\"bold\">lines/s per receiver process \
         (blue: sustained; red: not)</text>",
        esc(title),
        top - 10.0
    );
    for (i, r) in records.iter().enumerate() {
        let y = top + i as f64 * (bar_h + 8.0);
        let w = r.receiving_mean() / max * panel_w;
        let color = if r.sustained { "#2b6cb0" } else { "#c53030" };
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{} {}/s per agent</text>\n\
             <rect x=\"{label_w}\" y=\"{y}\" width=\"{w:.1}\" height=\"{bar_h}\" fill=\"{color}\"/>\n\
             <text x=\"{:.1}\" y=\"{}\">{} (p99 {})</text>",
            label_w - 8.0,
            y + bar_h - 4.0,
            esc(&r.subject),
            count(r.rate_per_agent as f64),
            label_w + w + 6.0,
            y + bar_h - 4.0,
            count(r.receiving_mean()),
            r.delay_p99_ms.map_or("–".into(), |v| format!("{v:.0}ms"))
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Writes `forward_deliver.md`, `.json`, `.csv` and `.svg` into `dir`; returns the Markdown.
///
/// # Errors
/// A file cannot be written.
pub fn write_tree(
    dir: &Path,
    cx: &TreeContext<'_>,
    records: &[StepRecord],
    notes: &[TreeNote],
) -> Result<String> {
    const NAME: &str = "forward_deliver";
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let table = tree_markdown(cx, records, notes);
    let md = format!(
        "{table}\nMachine: {}\n\nCommand: `{}`\n\nChart: [{NAME}.svg]({NAME}.svg); raw steps: \
         [{NAME}.json]({NAME}.json), [{NAME}.csv]({NAME}.csv)\n",
        cx.machine, cx.command
    );
    let write = |name: String, text: &str| -> Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    };
    write(format!("{NAME}.md"), &md)?;
    write(format!("{NAME}.csv"), &tree_csv(records))?;
    let seed: Vec<serde_json::Value> = SEED_DELIVER
        .iter()
        .map(|&(rate, per, remark)| {
            serde_json::json!({
                "rate_per_agent": rate,
                "receiving_per_sec": per,
                "remarks": remark,
            })
        })
        .collect();
    let json = serde_json::json!({
        "scenario": NAME,
        "shape": cx.shape,
        "step_secs": cx.step_secs,
        "rotate_lines": cx.rotate_lines,
        "message_size": cx.message_size,
        "machine": cx.machine,
        "command": cx.command,
        "steps": records,
        "notes": notes,
        "seed": { "steps": seed, "receiver_alone_per_sec": SEED_RECEIVER_ALONE },
    });
    write(
        format!("{NAME}.json"),
        &serde_json::to_string_pretty(&json).context("encoding the results")?,
    )?;
    write(
        format!("{NAME}.svg"),
        &tree_svg(&format!("loghaul bench: {NAME} ({})", cx.machine), records),
    )?;
    Ok(table)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn step(rate: u64, per: [f64; 2], p99: f64, loss: u64) -> StepRecord {
        StepRecord {
            subject: "loghaul".into(),
            platform: "loghaul 0.1.0 (Rust), tree".into(),
            step: 1,
            rate_per_agent: rate,
            shape: super::super::TreeShape {
                agents: 10,
                delivers: 2,
                receivers: 2,
            },
            step_secs: 10.0,
            status: Status::Complete,
            written: rate * 100,
            written_per_agent: vec![rate * 10; 10],
            written_per_sec: rate as f64 * 10.0,
            received_per_receiver: vec![rate * 50; 2],
            receiving_per_sec: per.to_vec(),
            span_secs: 10.0,
            loss,
            duplicates: 0,
            delay_p50_ms: Some(p99 / 2.0),
            delay_p99_ms: Some(p99),
            delay_p999_ms: Some(p99),
            delay_max_ms: Some(p99),
            cpu_agents_secs: 1.0,
            cpu_delivers_secs: 2.0,
            cpu_receivers_secs: 3.0,
            gen_cpu_secs: Some(0.5),
            machine_busy_cores: Some(1.5),
            machine_steal_cores: Some(0.0),
            wall_secs: 10.5,
            lab_cpu_secs: Some(0.7),
            others_cpu_secs: Some(0.1),
            peak_rss_agents_bytes: 1,
            peak_rss_delivers_bytes: 1,
            peak_rss_receivers_bytes: 1,
            flow_per_sec: vec![vec![]; 2],
            sustained: loss == 0 && p99 < crate::scenarios::forward_deliver::run::DELAY_LIMIT_MS,
        }
    }

    #[test]
    fn tree_table_has_a_row_per_step_and_the_headline() {
        let records = vec![
            step(1_000, [5_000.0, 5_000.0], 20.0, 0),
            step(50_000, [249_000.0, 251_000.0], 300.0, 0),
            step(60_000, [260_000.0, 262_000.0], 4_000.0, 0),
        ];
        let notes = vec![
            TreeNote {
                subject: "loghaul".into(),
                platform: "loghaul 0.1.0 (Rust), tree".into(),
                note: "stopped after 60,000 lines/s per agent: delay occurred (p99 ≥ 1s)".into(),
            },
            TreeNote {
                subject: "rsyslog".into(),
                platform: "rsyslog".into(),
                note: "n/a: no agent".into(),
            },
        ];
        let cx = TreeContext {
            shape: records[0].shape,
            step_secs: 10.0,
            rotate_lines: 0,
            message_size: 128,
            machine: "m",
            command: "c",
        };
        let md = tree_markdown(&cx, &records, &notes);
        let rows: Vec<&str> = md
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| rate"))
            .collect();
        // Three steps, then the published experiment's seven.
        assert_eq!(rows.len(), 3 + SEED_DELIVER.len(), "{md}");
        assert!(
            rows[1].starts_with(
                "| 50,000 | 500,000 | 250,000 (249,000–251,000) | 150.0ms | 300.0ms |"
            ),
            "{md}"
        );
        assert!(rows[2].ends_with("| delay occurred (p99 ≥ 1s) |"), "{md}");
        assert!(
            md.contains("**250,000 lines/s per receiver process** at 50,000 lines/s per agent"),
            "{md}"
        );
        assert!(md.contains("loghaul: stopped after 60,000"), "{md}");
        assert!(md.contains("rsyslog: n/a: no agent"), "{md}");
        assert!(md.contains("| 60,000 | 269,636 | Delay occured |"), "{md}");
        let header: Vec<&str> = md.lines().filter(|l| l.starts_with("| rate")).collect();
        assert_eq!(header[0].matches('|').count(), rows[0].matches('|').count());
        let csv = tree_csv(&records);
        // The platform is one quoted field, commas and all.
        let csv = csv.replace("\"loghaul 0.1.0 (Rust), tree\"", "p");
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(
            lines[0].split(',').count(),
            lines[1].split(',').count(),
            "{csv}"
        );
        let svg = tree_svg("t", &records);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("#c53030").count(), 1);
    }
}
