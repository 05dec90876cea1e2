//! `bench run forward_deliver`: Fluentd's peer-deliver benchmark tree on one machine, climbed one
//! rate step at a time.
//!
//! ```text
//!  generator thread i ──► agent-i.log            (one file per agent)
//!                              │
//!  agent i:     file source → fluent sink ──► every deliver (round robin)
//!  deliver d:   fluent source → fluent sink ──► every receiver (round robin)
//!  receiver r:  fluent source → file sink ──► out-r.log ──► watcher (delay samples, last
//!                                                            arrival); books between steps
//! ```
//!
//! Every agent lists every deliver and every deliver every receiver (round robin, acks required:
//! the components' defaults), each list starting at a different server. A step appends `rate`
//! lines per second to every agent's file for `--step-duration`; each line is numbered and carries
//! its send time (generator id = step × agents + agent, so no two steps share a generator). The
//! lab then waits until every line of the step is in the receivers' files, or until nothing has
//! arrived for `--idle-timeout` (what is still missing is loss).
//!
//! Measuring, as the other scenarios do for one process: during a step a [`Watcher`] per receiver
//! file samples the newest lines for the delay (arrival − send time) and notes the last arrival;
//! the exact books (every sequence number of every generator, over all receivers, so a line that
//! two receivers wrote is a duplicate) are read only once the files have gone quiet, so reading
//! them never competes with the tree. CPU per tier is read from /proc before the step and after
//! its drain, so what a tier still owed at the end of the step is charged to it.
//!
//! The climb stops after the first step the tree did not sustain: lines lost, or still missing
//! at the idle timeout, or a p99 delay of a second or more (the published peer-deliver run's
//! "delay occurred": the tree fell behind and its backlog grew through the step). Higher steps
//! would only pile up backlog (`--all-steps` climbs them anyway: the lab's test, which must not
//! depend on speed, does).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::report::{StepRecord, TreeContext, TreeNote, write_tree};
use super::{TreeLaunch, TreeShape};
use crate::generator::{self, GenConfig, GenStats};
use crate::meter::{Books, Tracker};
use crate::payload::now_micros;
use crate::procstat;
use crate::report::{self, Status};
use crate::runner::{self, ChildGuard, Plan};
use crate::subjects::{Companion, Peers, SubjectKind};
use crate::target::{TargetOptions, TargetUrl};
use crate::watch::Watcher;

/// Lines per second written to each agent's file, step by step: the published peer-deliver
/// run's steps, then higher until the tree cannot keep up, in steps of 10% past 100,000 (where a
/// two-core machine runs out) so the highest sustained rate is found within 10%.
pub const DEFAULT_RATES: &[u64] = &[
    10, 100, 1_000, 10_000, 20_000, 50_000, 60_000, 100_000, 110_000, 120_000, 130_000, 140_000,
    150_000, 200_000, 300_000, 400_000, 500_000,
];

/// A step whose p99 delay reaches this did not keep up.
pub const DELAY_LIMIT_MS: f64 = 1000.0;

/// How long the files must have been quiet before the books are read.
const QUIET: Duration = Duration::from_millis(100);

/// The tree and its rate steps.
#[derive(Clone, Debug)]
pub struct TreeOptions {
    /// Processes per tier.
    pub shape: TreeShape,
    /// Lines per second written to each agent's file, one step each, in order.
    pub rates: Vec<u64>,
    /// How long each step writes.
    pub step: Duration,
    /// Rotate every agent's file every this many lines of a step (0 = never).
    pub rotate_lines: u64,
    /// Climb every step, even past one not sustained.
    pub all_steps: bool,
}

impl Default for TreeOptions {
    fn default() -> Self {
        Self {
            shape: TreeShape {
                agents: 10,
                delivers: 2,
                receivers: 2,
            },
            rates: DEFAULT_RATES.to_vec(),
            step: Duration::from_secs(10),
            rotate_lines: 0,
            all_steps: false,
        }
    }
}

/// Climbs the rate steps with every subject and writes the results; returns the Markdown.
///
/// # Errors
/// Invalid options, or the results cannot be written. A subject that fails keeps the steps it
/// did, and a note saying why it stopped.
pub fn run(plan: &Plan, peers: &Peers) -> Result<String> {
    let opts = &plan.tree;
    let shape = opts.shape;
    if shape.agents == 0 || shape.delivers == 0 || shape.receivers == 0 {
        bail!("--agents, --delivers and --receivers must be at least 1");
    }
    if opts.rates.is_empty() || opts.rates.contains(&0) {
        bail!("--rates must list lines per second above 0");
    }
    if opts.step.is_zero() {
        bail!("--step-duration must be above 0");
    }
    let work = std::env::temp_dir().join(format!(
        "loghaul-bench-{}-{}",
        super::NAME,
        std::process::id()
    ));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let machine = runner::machine();
    eprintln!(
        "bench forward_deliver: {shape}, {} step(s) of {:?} at most ({machine})",
        opts.rates.len(),
        opts.step,
    );
    let mut records = Vec::new();
    let mut notes = Vec::new();
    for &kind in &plan.subjects {
        let platform = format!("{}, {shape}", peers.platform(kind, &plan.loghaul));
        let note = |text: String| TreeNote {
            subject: kind.name().to_string(),
            platform: platform.clone(),
            note: text,
        };
        if let Some(why) = plan.scenario.why_not(kind) {
            notes.push(note(why.to_string()));
            continue;
        }
        let dir = work.join(kind.name());
        let outcome = climb(plan, kind, peers, &dir, &platform, &mut records);
        // Whatever came of it, every process's config goes with the figures (or the failure).
        runner::save_configs(&dir, &plan.out.join("configs").join(super::NAME));
        match outcome {
            Ok(Some(stop)) => notes.push(note(stop)),
            Ok(None) => {}
            Err(e) => {
                eprintln!("forward_deliver {}: failed: {e:#}", kind.name());
                notes.push(note(format!("failed: {e:#}")));
            }
        }
        if !plan.keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    if !plan.keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    let cx = TreeContext {
        shape,
        step_secs: opts.step.as_secs_f64(),
        rotate_lines: opts.rotate_lines,
        message_size: plan.message_size,
        machine: &machine,
        command: &plan.command,
    };
    write_tree(&plan.out, &cx, &records, &notes)
}

/// The processes of one tier, in start order.
struct Tier {
    name: &'static str,
    guards: Vec<ChildGuard>,
    /// Name, stderr log and pid of each process.
    procs: Vec<(String, PathBuf, u32)>,
}

impl Tier {
    /// Starts `list` one after the other, each ready before the next starts.
    fn start(name: &'static str, list: &[Companion], dir: &Path) -> Result<Self> {
        let mut tier = Self {
            name,
            guards: Vec::new(),
            procs: Vec::new(),
        };
        for c in list {
            let (mut g, stderr) =
                runner::start_companion(c, dir).with_context(|| format!("starting {}", c.name))?;
            let pid = g.child()?.id();
            tier.guards.push(g);
            tier.procs.push((c.name.clone(), stderr, pid));
        }
        Ok(tier)
    }

    fn cpu_secs(&self) -> f64 {
        self.procs
            .iter()
            .map(|&(_, _, pid)| procstat::sample(pid).cpu_secs)
            .sum()
    }

    fn peak_rss_bytes(&self) -> u64 {
        self.procs
            .iter()
            .map(|&(_, _, pid)| {
                let s = procstat::sample(pid);
                s.hwm_bytes.max(s.rss_bytes)
            })
            .sum()
    }

    /// Fails if a process of the tier has exited.
    fn check(&mut self) -> Result<()> {
        for (g, (name, stderr, _)) in self.guards.iter_mut().zip(&self.procs) {
            if let Some(status) = g.child()?.try_wait().context("polling the tree")? {
                bail!(
                    "{name} ({}) exited with {status} during the run; stderr: {}",
                    self.name,
                    runner::tail_of(stderr)
                );
            }
        }
        Ok(())
    }
}

/// The running tree: tiers in start order (receivers, delivers, agents).
struct Tree {
    tiers: [Tier; 3],
}

impl Tree {
    fn start(launch: &TreeLaunch, dir: &Path) -> Result<Self> {
        let receivers = Tier::start("receiver", &launch.receivers, dir)?;
        let delivers = Tier::start("deliver", &launch.delivers, dir)?;
        let agents = Tier::start("agent", &launch.agents, dir)?;
        Ok(Self {
            tiers: [receivers, delivers, agents],
        })
    }

    /// CPU seconds so far of (agents, delivers, receivers).
    fn cpu(&self) -> [f64; 3] {
        let [r, d, a] = &self.tiers;
        [a.cpu_secs(), d.cpu_secs(), r.cpu_secs()]
    }

    /// Peak RSS of (agents, delivers, receivers), summed over each tier's processes.
    fn peak_rss(&self) -> [u64; 3] {
        let [r, d, a] = &self.tiers;
        [a.peak_rss_bytes(), d.peak_rss_bytes(), r.peak_rss_bytes()]
    }

    fn check(&mut self) -> Result<()> {
        self.tiers.iter_mut().try_for_each(Tier::check)
    }

    /// Front to back: agents drain into the delivers, which drain into the receivers.
    fn stop(mut self) -> Result<()> {
        for tier in self.tiers.iter_mut().rev() {
            runner::terminate_all(&mut tier.guards, Duration::from_secs(20))?;
        }
        Ok(())
    }
}

/// Starts `kind`'s tree in `dir` and climbs the steps, appending a record per step; returns why
/// it stopped early (a step not sustained), if it did.
fn climb(
    plan: &Plan,
    kind: SubjectKind,
    peers: &Peers,
    dir: &Path,
    platform: &str,
    records: &mut Vec<StepRecord>,
) -> Result<Option<String>> {
    let opts = &plan.tree;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let launch = super::prepare_tree(kind, opts.shape, dir, peers, &plan.loghaul)?;
    // The files exist before the agents start, so the first glob finds them.
    for f in &launch.agent_files {
        std::fs::File::create(f).with_context(|| format!("creating {}", f.display()))?;
    }
    let mut tree = Tree::start(&launch, dir)?;
    let mut books = Books::new(&launch.outputs);
    let mut stopped = None;
    for (k, &rate) in opts.rates.iter().enumerate() {
        let label = format!(
            "[{}/{}] forward_deliver {} {} lines/s per agent",
            k + 1,
            opts.rates.len(),
            kind.name(),
            report::count(rate as f64)
        );
        let mut rec = step(plan, &mut tree, &launch, &mut books, k, rate, &label)?;
        rec.subject = kind.name().to_string();
        rec.platform = platform.to_string();
        eprintln!("{label}: {}", describe(&rec));
        let sustained = rec.sustained;
        let remark = rec.remarks();
        records.push(rec);
        if !sustained && !opts.all_steps {
            stopped = Some(format!(
                "stopped after {} lines/s per agent: {remark}",
                report::count(rate as f64)
            ));
            break;
        }
        if k + 1 < opts.rates.len() {
            truncate_between_steps(&launch)?;
            // The followers see their files shorter than what they read, and start over at 0
            // now, before the next step's lines could grow past their old positions.
            books.read()?;
        }
    }
    tree.stop()?;
    Ok(stopped)
}

/// Between steps, once a step's lines are all in the books: the agents' files and the
/// receivers' outputs are truncated, as copytruncate would, so that each step starts with the
/// page cache as the machine had it rather than full of the earlier steps' gigabytes (writing
/// into a full page cache makes this VM's reclaim stall every writer for a second or more). The
/// agents read their files again from 0 (the file source's truncation handling), the receivers'
/// file sinks append at the new end (O_APPEND), and the books' followers start over at 0.
fn truncate_between_steps(launch: &TreeLaunch) -> Result<()> {
    for path in launch.agent_files.iter().chain(&launch.outputs) {
        match std::fs::OpenOptions::new().write(true).open(path) {
            Ok(f) => f
                .set_len(0)
                .with_context(|| format!("truncating {}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
        }
    }
    // The agents notice at their next turn (milliseconds); the receivers have nothing to write.
    std::thread::sleep(Duration::from_millis(500));
    Ok(())
}

/// One rate step: write, drain, measure.
fn step(
    plan: &Plan,
    tree: &mut Tree,
    launch: &TreeLaunch,
    books: &mut Books,
    k: usize,
    rate: u64,
    label: &str,
) -> Result<StepRecord> {
    let opts = &plan.tree;
    let agents = opts.shape.agents;
    let base = k * agents;
    let gens = base..base + agents;
    tree.check()?;
    let start_us = now_micros();
    let watchers: Vec<Watcher> = launch
        .outputs
        .iter()
        .map(|p| {
            let from = std::fs::metadata(p).map_or(0, |m| m.len());
            let samples = Tracker::new(start_us).only_generators(gens.clone());
            Watcher::start_at(p, samples, start_us, from)
        })
        .collect();
    let cpu0 = tree.cpu();
    let machine0 = procstat::machine_cpu();
    let lab0 = procstat::process_cpu_secs(std::process::id());
    let wall0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::with_capacity(agents);
    for (i, file) in launch.agent_files.iter().enumerate() {
        let cfg = GenConfig {
            target: TargetUrl::File(file.clone()),
            target_options: TargetOptions {
                rotate_lines: opts.rotate_lines,
                ..TargetOptions::default()
            },
            payload: plan.scenario.payload_spec(plan.message_size, plan.seed),
            count: None,
            duration: Some(opts.step),
            rate,
            connections: 1,
            gen_id_base: u32::try_from(base + i).context("too many generators")?,
        };
        let stop = Arc::clone(&stop);
        writers.push(std::thread::spawn(move || {
            generator::run(&cfg, None, &stop)
        }));
    }
    let tty = std::io::stderr().is_terminal();
    let expected_total = (rate as f64 * opts.step.as_secs_f64() * agents as f64) as u64;
    let mut last_check = Instant::now();
    let mut last_draw = Instant::now();
    // While the generators write: watch that every process lives, and show progress.
    while !writers.iter().all(std::thread::JoinHandle::is_finished) {
        std::thread::sleep(Duration::from_millis(10));
        if last_check.elapsed() >= Duration::from_millis(100) {
            last_check = Instant::now();
            if let Err(e) = tree.check() {
                stop.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        if tty && last_draw.elapsed() >= Duration::from_millis(250) {
            last_draw = Instant::now();
            let seen: u64 = watchers.iter().map(Watcher::frontier).sum();
            eprint!(
                "\r{label}: ~{}/{} arrived   ",
                report::count(seen as f64),
                report::count(expected_total as f64)
            );
            let _ = std::io::stderr().flush();
        }
    }
    let mut stats: Vec<GenStats> = Vec::with_capacity(agents);
    for w in writers {
        let s = w
            .join()
            .map_err(|_| anyhow::anyhow!("a generator thread panicked"))?
            .context("the generator failed")?;
        stats.push(s);
    }
    let sent: Vec<u64> = stats.iter().map(|s| s.sent).collect();
    let written: u64 = sent.iter().sum();

    // Drain: until every line of the step is in the books, or nothing arrives for the idle
    // timeout. The books are read only when the files have been quiet a moment.
    let mut status = Status::Timeout;
    let mut last_mark: Option<u64> = None;
    let mut last_change = Instant::now();
    let mut verified: Option<Option<u64>> = None;
    loop {
        let mark = watchers.iter().filter_map(Watcher::last_growth_us).max();
        if mark != last_mark {
            last_mark = mark;
            last_change = Instant::now();
        }
        if last_change.elapsed() >= QUIET && verified != Some(mark) {
            verified = Some(mark);
            books.read()?;
            let (_, all) = books.snapshot();
            let unique: u64 = gens.clone().map(|g| all.counts(g).unique).sum();
            if unique >= written {
                status = Status::Complete;
                break;
            }
        }
        if last_change.elapsed() >= plan.idle_timeout {
            break;
        }
        if last_check.elapsed() >= Duration::from_millis(100) {
            last_check = Instant::now();
            tree.check()?;
        }
        if tty && last_draw.elapsed() >= Duration::from_millis(250) {
            last_draw = Instant::now();
            let seen: u64 = watchers.iter().map(Watcher::frontier).sum();
            eprint!(
                "\r{label}: draining, ~{}/{} arrived   ",
                report::count(seen as f64),
                report::count(written as f64)
            );
            let _ = std::io::stderr().flush();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if tty {
        eprint!("\r{}\r", " ".repeat(label.len() + 50));
    }
    let cpu1 = tree.cpu();
    let machine1 = procstat::machine_cpu();
    let lab1 = procstat::process_cpu_secs(std::process::id());
    let wall = wall0.elapsed().as_secs_f64();
    let rss = tree.peak_rss();
    if status == Status::Timeout {
        // What did arrive, to the last byte: the loss is then exact.
        books.read()?;
    }
    let watched: Vec<_> = watchers.into_iter().map(Watcher::finish).collect();
    let (each, all) = books.snapshot();

    let received: Vec<u64> = each
        .iter()
        .map(|t| {
            gens.clone()
                .map(|g| {
                    let c = t.counts(g);
                    c.unique + c.duplicates
                })
                .sum()
        })
        .collect();
    let mut loss = 0;
    let mut duplicates = 0;
    for (g, &n) in gens.clone().zip(&sent) {
        let c = all.counts(g);
        loss += n.saturating_sub(c.unique);
        duplicates += c.duplicates;
    }
    let gen_start = stats
        .iter()
        .map(|s| s.start_unix_us)
        .min()
        .unwrap_or(start_us);
    let last_arrival = watched.iter().filter_map(|w| w.last_growth_us).max();
    let span = last_arrival.map_or(0.0, |t| t.saturating_sub(gen_start) as f64 / 1e6);
    let mut samples = Tracker::new(start_us);
    for w in &watched {
        samples.merge(&w.samples);
    }
    let ms = |q| samples.latency().quantile(q).map(|v| v as f64 / 1000.0);
    let gen_secs = stats.iter().map(|s| s.elapsed_secs).fold(0.0, f64::max);
    let mut rec = StepRecord {
        subject: String::new(),
        platform: String::new(),
        step: k + 1,
        rate_per_agent: rate,
        shape: opts.shape,
        step_secs: opts.step.as_secs_f64(),
        status,
        written,
        written_per_agent: sent,
        written_per_sec: written as f64 / gen_secs.max(1e-6),
        received_per_receiver: received.clone(),
        receiving_per_sec: received
            .iter()
            .map(|&n| if span > 0.0 { n as f64 / span } else { 0.0 })
            .collect(),
        span_secs: span,
        loss,
        duplicates,
        delay_p50_ms: ms(0.5),
        delay_p99_ms: ms(0.99),
        delay_p999_ms: ms(0.999),
        delay_max_ms: ms(1.0),
        cpu_agents_secs: (cpu1[0] - cpu0[0]).max(0.0),
        cpu_delivers_secs: (cpu1[1] - cpu0[1]).max(0.0),
        cpu_receivers_secs: (cpu1[2] - cpu0[2]).max(0.0),
        gen_cpu_secs: stats.iter().map(|s| s.cpu_secs).sum::<Option<f64>>(),
        machine_busy_cores: machine0
            .zip(machine1)
            .map(|(a, b)| (b.busy_secs - a.busy_secs).max(0.0) / wall.max(1e-6)),
        machine_steal_cores: machine0
            .zip(machine1)
            .map(|(a, b)| (b.steal_secs - a.steal_secs).max(0.0) / wall.max(1e-6)),
        wall_secs: wall,
        lab_cpu_secs: lab0.zip(lab1).map(|(a, b)| (b - a).max(0.0)),
        others_cpu_secs: None,
        peak_rss_agents_bytes: rss[0],
        peak_rss_delivers_bytes: rss[1],
        peak_rss_receivers_bytes: rss[2],
        flow_per_sec: watched
            .iter()
            .zip(&received)
            .map(|(w, &n)| w.flow_per_sec(n))
            .collect(),
        sustained: false,
    };
    let tree_cpu = rec.cpu_agents_secs + rec.cpu_delivers_secs + rec.cpu_receivers_secs;
    rec.others_cpu_secs = machine0
        .zip(machine1)
        .zip(rec.lab_cpu_secs)
        .map(|((a, b), lab)| ((b.busy_secs - a.busy_secs) - tree_cpu - lab).max(0.0));
    rec.sustained = rec.status == Status::Complete
        && rec.loss == 0
        && rec.delay_p99_ms.is_some_and(|p| p < DELAY_LIMIT_MS);
    Ok(rec)
}

fn describe(r: &StepRecord) -> String {
    let ms = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:.1}ms"));
    format!(
        "{} lines written, {}/s per receiver, delay p50 {} p99 {} max {}, loss {}, dups {}, \
         CPU-s agents {:.2} delivers {:.2} receivers {:.2} generator {:.2} others {} in {:.1}s, \
         machine busy {} cores{}",
        report::count(r.written as f64),
        report::count(r.receiving_mean()),
        ms(r.delay_p50_ms),
        ms(r.delay_p99_ms),
        ms(r.delay_max_ms),
        r.loss,
        r.duplicates,
        r.cpu_agents_secs,
        r.cpu_delivers_secs,
        r.cpu_receivers_secs,
        r.gen_cpu_secs.unwrap_or(0.0),
        r.others_cpu_secs
            .map_or("n/a".into(), |c| format!("{c:.2}")),
        r.wall_secs,
        r.machine_busy_cores
            .map_or("n/a".into(), |c| format!("{c:.2}")),
        match r.remarks() {
            m if m.is_empty() => String::new(),
            m => format!(" ({m})"),
        }
    )
}
