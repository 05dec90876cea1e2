//! `bench run SCENARIO`: the rounds of the connection scenarios. Start each subject, drive the
//! generator, meter what arrives, stop the subject.
//!
//! One run of one subject:
//!
//! ```text
//! prepare config ──> spawn subject ──> ready? ──> CPU₀ ──> generator (4 conns, max rate)
//!                                                           │
//!   watcher: stat + newest 16 KiB of the output every 1 ms ◄┘  (arrival time, latency samples)
//!   books: every (gen, seq) read exactly whenever the output goes quiet for 100 ms
//!   until every event is in the books, or no progress for --idle-timeout (reported as loss)
//!   ──> CPU₁, peak RSS ──> SIGTERM ──> final read of the output (late duplicates) ──> record
//! ```
//!
//! Duration is from the generator's start to the arrival of the last event (the output's last
//! growth), so a subject that buffers is charged for it. The exact books are read only while the
//! subject is idle, so checking every event never competes with the subject for CPU. CPU is the
//! subject's tree only (the generator and the meter run in this process and compete for the same
//! cores: that is stated beside the results). Runs interleave the subjects (A B C A B C …) so that
//! drift of the machine is spread over everyone, after an uncounted warm-up round (`--warmup`):
//! what the machine did before the lab is then nobody's first measured run.
//!
//! A loghaul subject with a disk buffer also has its buffer's fsyncs read from its API, before the
//! load and after the last event; the record gives them per second of the run's duration.
//!
//! A scenario may run through the same rounds with its own run of one subject ([`run_rounds`]),
//! as `tail` does with a file written once before the first round.

use std::io::{IsTerminal, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::fluent::FluentOptions;
use crate::generator::{self, GenConfig};
use crate::meter::{self, FileFollower, SharedTracker};
use crate::payload::now_micros;
use crate::procstat;
use crate::progress::human;
use crate::report::{self, RunRecord, Status};
use crate::scenarios::Scenario;
use crate::scenarios::forward_deliver::run::TreeOptions;
use crate::subjects::loghaul::REMAP_ID;
use crate::subjects::{
    self, Companion, Input, Launch, Operation, Output, Peers, Ready, SubjectKind,
};
use crate::target::{TargetOptions, TargetUrl};
use crate::watch::{Sampling, WatchState, Watcher};

/// Everything `bench run` was asked to do.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The experiment.
    pub scenario: &'static dyn Scenario,
    /// Subjects, in interleaving order.
    pub subjects: Vec<SubjectKind>,
    /// Runs per subject.
    pub runs: usize,
    /// Uncounted rounds (each subject once, same load) before the measured runs.
    pub warmup: usize,
    /// Events per run.
    pub events: u64,
    /// Generator connections.
    pub connections: usize,
    /// Message body size in bytes.
    pub message_size: usize,
    /// Payload seed.
    pub seed: u64,
    /// Results folder.
    pub out: PathBuf,
    /// The loghaul binary to start as a subject.
    pub loghaul: PathBuf,
    /// A run without progress for this long ends as a timeout.
    pub idle_timeout: Duration,
    /// Keep the subjects' output files (they are deleted after each run otherwise: they are big).
    pub keep: bool,
    /// Which load generator drives the subjects.
    pub driver: Driver,
    /// The command line, recorded with the results.
    pub command: String,
    /// How the generator sends the forward scenarios' load (mode, batch, acks).
    pub fluent: FluentOptions,
    /// `forward_deliver`'s tree and rate steps.
    pub tree: TreeOptions,
    /// The HTTP experiments' load.
    pub http: crate::scenarios::http_echo::run::HttpOptions,
    /// The stream driver `rsyslog-tls` reads with.
    pub rsyslog_tls_driver: subjects::TlsDriver,
}

/// The load generator of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Driver {
    /// The lab's generator (in this process).
    Builtin,
    /// syslog-ng's `loggen` (a separate process), for a cross-check with an independent tool.
    Loggen,
}

/// Per-run events actually sent: loggen sends the same count on every connection.
pub fn effective_events(plan: &Plan) -> u64 {
    match plan.driver {
        Driver::Builtin => plan.events,
        Driver::Loggen => {
            let c = plan.connections.max(1) as u64;
            (plan.events / c).max(1) * c
        }
    }
}

/// A one-line description of this machine: CPU model, cores, kernel.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|s| s.trim_start_matches([' ', '\t', ':']).trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cores} cores, {model}, Linux {}", kernel.trim())
}

/// Runs the plan and writes the results; returns the Markdown table.
///
/// # Errors
/// The results cannot be written or the work folder cannot be created. A subject that fails is a
/// row in the table, not an error.
pub fn run(plan: &Plan) -> Result<String> {
    let mut peers = Peers::locate();
    peers.rsyslog_tls_driver = plan.rsyslog_tls_driver;
    // A subject that cannot even start is no row to wait for at the end of a long set: say how
    // to provide it before anything runs.
    let wants_fluentd = plan
        .subjects
        .iter()
        .any(|&k| k == SubjectKind::Fluentd && plan.scenario.why_not(k).is_none());
    if wants_fluentd && peers.fluentd.is_none() {
        bail!("{}", subjects::FLUENTD_MISSING);
    }
    plan.scenario.check(plan)?;
    if plan.driver == Driver::Loggen && plan.subjects.iter().any(|k| k.tls()) {
        bail!(
            "the TLS subjects and `tls_handshake` take the built-in generator (tls://, a \
             connection per message)"
        );
    }
    plan.scenario.run(plan, &peers)
}

/// The scenario's own folder for the runs' work, created.
///
/// # Errors
/// It cannot be created.
pub fn work_dir(plan: &Plan) -> Result<PathBuf> {
    let work = std::env::temp_dir().join(format!(
        "loghaul-bench-{}-{}",
        plan.scenario.name(),
        std::process::id()
    ));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    Ok(work)
}

/// Says on stderr what is about to run: subjects, rounds, `load` and the machine.
pub fn announce(plan: &Plan, load: &str) {
    eprintln!(
        "bench {}: {} subjects × {} runs after {} warm-up round(s), {load} ({})",
        plan.scenario.name(),
        plan.subjects.len(),
        plan.runs,
        plan.warmup,
        machine()
    );
}

/// The runner's rounds for a scenario whose subjects read connections from the generator (the
/// default [`Scenario::run`]).
///
/// # Errors
/// The results cannot be written or the work folder cannot be created.
pub fn run_connections(plan: &Plan, peers: &Peers) -> Result<String> {
    let work = work_dir(plan)?;
    announce(
        plan,
        &format!(
            "{} events per run, {} connections",
            plan.events, plan.connections
        ),
    );
    run_rounds(
        plan,
        peers,
        &work,
        &|kind, dir, label| run_one(plan, kind, peers, dir, label),
        &|records, names| plan.scenario.report(plan, records, names),
    )
}

/// One run of one subject: its record, or why it failed.
pub type RunOne<'a> = dyn Fn(SubjectKind, &Path, &str) -> Result<RunRecord> + 'a;

/// The notes under a results table, from the runs and the subjects' names.
pub type Notes<'a> = dyn Fn(&[RunRecord], &[String]) -> String + 'a;

/// Runs every subject once per round (warm-up rounds first, then the measured ones), each run
/// by `one` in its own folder under `work`, and writes the results with `notes` under the table;
/// removes `work` at the end unless the plan keeps it.
///
/// # Errors
/// The results cannot be written.
pub fn run_rounds(
    plan: &Plan,
    peers: &Peers,
    work: &Path,
    one: &RunOne<'_>,
    notes: &Notes<'_>,
) -> Result<String> {
    let platforms: Vec<String> = plan
        .subjects
        .iter()
        .map(|&k| plan.scenario.platform(k, peers, &plan.loghaul))
        .collect();
    // Warm-up rounds first, then the measured ones; every round runs each subject once, in order.
    let rounds: Vec<(usize, bool)> = (1..=plan.warmup)
        .map(|w| (w, true))
        .chain((1..=plan.runs).map(|r| (r, false)))
        .collect();
    let total = rounds.len() * plan.subjects.len();
    let mut records = Vec::new();
    let mut step = 0;
    for &(run, warmup) in &rounds {
        for (i, &kind) in plan.subjects.iter().enumerate() {
            step += 1;
            let (what, of, dir_name) = if warmup {
                (
                    "warm-up",
                    plan.warmup,
                    format!("{}-warmup{run}", kind.name()),
                )
            } else {
                ("run", plan.runs, format!("{}-{run}", kind.name()))
            };
            let label = format!(
                "[{step}/{total}] {} {} {what} {run}/{of}",
                plan.scenario.name(),
                kind.name(),
            );
            let why_not = plan
                .scenario
                .why_not(kind)
                .map(str::to_string)
                .or_else(|| peers.unavailable(kind));
            let mut record = if let Some(why) = why_not {
                RunRecord::empty(
                    plan.scenario.name(),
                    kind.name(),
                    &platforms[i],
                    run,
                    Status::Unsupported(why),
                )
            } else {
                let dir = work.join(&dir_name);
                match one(kind, &dir, &label) {
                    Ok(mut r) => {
                        r.run = run;
                        r.platform = platforms[i].clone();
                        if run == 1 && !warmup {
                            save_configs(
                                &dir,
                                &plan.out.join("configs").join(plan.scenario.name()),
                            );
                        }
                        r
                    }
                    Err(e) => RunRecord::empty(
                        plan.scenario.name(),
                        kind.name(),
                        &platforms[i],
                        run,
                        Status::Failed(format!("failed: {e:#}")),
                    ),
                }
            };
            record.warmup = warmup;
            eprintln!("{label}: {}", describe(&record));
            if !plan.keep {
                let _ = std::fs::remove_dir_all(work.join(&dir_name));
            }
            records.push(record);
        }
    }
    if !plan.keep {
        let _ = std::fs::remove_dir_all(work);
    }
    let names: Vec<String> = plan.subjects.iter().map(|k| k.name().to_string()).collect();
    let machine = machine();
    let mut notes = notes(&records, &names);
    if let Some(warning) = too_short(&records, plan.runs) {
        eprintln!("note: {warning}");
        if !notes.is_empty() {
            notes.push_str("\n\n");
        }
        notes.push_str(&warning);
    }
    let cx = report::Context {
        scenario: plan.scenario.name(),
        events: plan.events,
        runs: plan.runs,
        warmup: plan.warmup,
        machine: &machine,
        command: &plan.command,
        notes: &notes,
    };
    report::write_all(&plan.out, &cx, &records, &names)
}

/// Runs shorter than this are dominated by start-up and scheduling: their rate is no figure.
const STABLE_RUN_SECS: f64 = 3.0;

/// What makes a set's figures unstable, said in its report: runs too short, or too few to show
/// a spread.
fn too_short(records: &[RunRecord], runs: usize) -> Option<String> {
    let shortest = records
        .iter()
        .filter(|r| !r.warmup && r.status == Status::Complete && r.duration_secs > 0.0)
        .map(|r| r.duration_secs)
        .fold(f64::INFINITY, f64::min);
    let mut said = Vec::new();
    if shortest < STABLE_RUN_SECS {
        said.push(format!(
            "The shortest run lasted {shortest:.2}s: runs under {STABLE_RUN_SECS:.0}s measure \
             start-up and scheduling as much as the subject, and their rates are not stable \
             figures. Give --events so that each run lasts 10s or more."
        ));
    }
    if runs < 3 {
        said.push(format!(
            "{runs} run(s) per subject: too few to show how much the figures vary; use --runs 3 \
             or more before comparing."
        ));
    }
    (!said.is_empty()).then(|| said.join(" "))
}

/// One run's figures on a line, for the progress log.
pub(crate) fn describe(r: &RunRecord) -> String {
    match &r.status {
        Status::Unsupported(why) => why.clone(),
        Status::Failed(why) => why.clone(),
        status => format!(
            "{}{} events in {:.2}s = {}/s, CPU {:.2}s ({:.2} s/1M, {:.2} cores), RSS {:.0}MiB, loss {}, \
             dups {}, p99 {}, generator {} cores{}{}",
            if *status == Status::Timeout {
                "TIMEOUT: "
            } else {
                ""
            },
            r.events_seen,
            r.duration_secs,
            human(r.events_per_sec),
            r.cpu_secs,
            r.cpu_secs_per_million,
            r.cpu_per_wall,
            r.peak_rss_bytes as f64 / 1048576.0,
            r.loss,
            r.duplicates.map_or("n/a".into(), |d| d.to_string()),
            r.latency_p99_ms
                .map_or("n/a".into(), |v| format!("{v:.1}ms")),
            r.gen_cores.map_or("n/a".into(), |v| format!("{v:.2}")),
            r.fsyncs_per_sec
                .map_or(String::new(), |v| format!(", {v:.0} fsyncs/s")),
            match (r.failed_connections, &r.first_failure) {
                (Some(n), Some(first)) => format!(", {n} connections failed (the first: {first})"),
                _ => String::new(),
            },
        ),
    }
}

/// Copies the subject's config files next to the results, so every figure has its exact config.
pub(crate) fn save_configs(run_dir: &Path, dest: &Path) {
    let Ok(entries) = std::fs::read_dir(run_dir) else {
        return;
    };
    if std::fs::create_dir_all(dest).is_err() {
        return;
    }
    for e in entries.flatten() {
        let p = e.path();
        let keep = p
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| matches!(x, "conf" | "yaml" | "rb"));
        if keep && let Some(name) = p.file_name() {
            let _ = std::fs::copy(&p, dest.join(name));
        }
    }
}

/// Kills the child on drop, so an error path never leaves a subject running.
pub(crate) struct ChildGuard(Option<Child>);

impl ChildGuard {
    pub(crate) fn child(&mut self) -> Result<&mut Child> {
        self.0.as_mut().context("the subject was already reaped")
    }

    /// SIGTERM, then up to `grace` for a clean exit, then SIGKILL.
    pub(crate) fn terminate(&mut self, grace: Duration) -> Result<()> {
        terminate_all(std::slice::from_mut(self), grace)
    }

    /// Sends SIGTERM if the process still runs; returns whether it does.
    fn ask_to_stop(&mut self) -> Result<bool> {
        let Some(child) = self.0.as_mut() else {
            return Ok(false);
        };
        if child.try_wait().context("polling the subject")?.is_some() {
            self.0 = None;
            return Ok(false);
        }
        // std has no SIGTERM and the workspace forbids unsafe code, so ask kill(1).
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        Ok(true)
    }
}

/// Stops processes together: SIGTERM to each, then up to `grace` for all of them to exit, then
/// SIGKILL for the rest. A tier of a tree stops in the time of its slowest process, not their sum.
pub(crate) fn terminate_all(guards: &mut [ChildGuard], grace: Duration) -> Result<()> {
    for g in guards.iter_mut() {
        g.ask_to_stop()?;
    }
    let deadline = Instant::now() + grace;
    loop {
        let mut running = false;
        for g in guards.iter_mut() {
            if let Some(child) = g.0.as_mut() {
                if child.try_wait().context("polling the subject")?.is_some() {
                    g.0 = None;
                } else if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    g.0 = None;
                } else {
                    running = true;
                }
            }
        }
        if !running {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The last lines of a process's log, for an error message.
pub(crate) fn tail_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// Waits until the process in `guard` passes `ready` and accepts connections on `port`.
pub(crate) fn wait_ready(
    guard: &mut ChildGuard,
    ready: &Ready,
    port: u16,
    stderr: &Path,
    limit: Duration,
) -> Result<()> {
    let deadline = Instant::now() + limit;
    let input: SocketAddr = ([127, 0, 0, 1], port).into();
    loop {
        if let Some(status) = guard.child()?.try_wait().context("polling the subject")? {
            bail!(
                "exited with {status} before it was ready; stderr: {}",
                tail_of(stderr)
            );
        }
        let ok = match *ready {
            Ready::Health(api) => health_ok(([127, 0, 0, 1], api).into()),
            Ready::Connect => {
                TcpStream::connect_timeout(&input, Duration::from_millis(200)).is_ok()
            }
        };
        // loghaul's health says every component runs; still make sure the input port is bound.
        if ok && TcpStream::connect_timeout(&input, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("not ready after {:?}; stderr: {}", limit, tail_of(stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `GET /health` answered with a 200 status line.
fn health_ok(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}

/// Starts one process of a subject, its output into log files in `dir`.
pub(crate) fn spawn(
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    dir: &Path,
    stdout: &Path,
    stderr: &Path,
) -> Result<ChildGuard> {
    let out =
        std::fs::File::create(stdout).with_context(|| format!("creating {}", stdout.display()))?;
    let err =
        std::fs::File::create(stderr).with_context(|| format!("creating {}", stderr.display()))?;
    let child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    Ok(ChildGuard(Some(child)))
}

/// `Failed` with the end of its stderr if the subject has exited while it should be running.
pub(crate) fn exited(guard: &mut ChildGuard, stderr_log: &Path) -> Result<Option<Status>> {
    if guard
        .child()?
        .try_wait()
        .context("polling the subject")?
        .is_none()
    {
        return Ok(None);
    }
    Ok(Some(Status::Failed(format!(
        "the subject exited during the run; stderr: {}",
        tail_of(stderr_log)
    ))))
}

/// Starts a companion process (a relay's receiver, a tier of a tree) with its output in `dir`,
/// and waits until it is ready. Returns its guard and the file its stderr goes to.
pub(crate) fn start_companion(c: &Companion, dir: &Path) -> Result<(ChildGuard, PathBuf)> {
    let stderr = dir.join(format!("stderr-{}.log", c.name));
    let mut g = spawn(
        &c.program,
        &c.args,
        &[],
        dir,
        &dir.join(format!("stdout-{}.log", c.name)),
        &stderr,
    )?;
    wait_ready(&mut g, &c.ready, c.port, &stderr, Duration::from_secs(30))?;
    Ok((g, stderr))
}

/// One run of one subject.
pub(crate) fn run_one(
    plan: &Plan,
    kind: SubjectKind,
    peers: &Peers,
    dir: &Path,
    label: &str,
) -> Result<RunRecord> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let launch = plan.scenario.prepare(kind, dir, peers, &plan.loghaul)?;
    // A relay's receiver first: the process in front of it connects to it.
    let mut companions: Vec<(ChildGuard, PathBuf, &Companion)> = Vec::new();
    for c in &launch.companions {
        let (g, stderr) =
            start_companion(c, dir).with_context(|| format!("its process {}", c.name))?;
        companions.push((g, stderr, c));
    }
    let stderr_log = dir.join("stderr.log");
    let mut guard = spawn(
        &launch.program,
        &launch.args,
        &launch.env,
        dir,
        &dir.join("stdout.log"),
        &stderr_log,
    )?;
    wait_ready(
        &mut guard,
        &launch.ready,
        launch.input_port,
        &stderr_log,
        Duration::from_secs(30),
    )?;
    // Every process of the subject is charged: CPU and memory are sums over them.
    let mut pids = vec![guard.child()?.id()];
    for (g, ..) in &mut companions {
        pids.push(g.child()?.id());
    }
    let cpu_of = |pids: &[u32]| -> f64 { pids.iter().map(|&p| procstat::sample(p).cpu_secs).sum() };

    // The meter starts before the first event can arrive. For a file it is split in two (see
    // `watch`): a cheap watcher during the run, the exact books when the file has gone quiet.
    let events = effective_events(plan);
    let operation = kind.operation();
    let fresh = || match plan.driver {
        Driver::Builtin => meter::Tracker::new(now_micros()),
        Driver::Loggen => meter::Tracker::for_loggen(now_micros()),
    };
    // A reload's figures need each latency sample's arrival time.
    let fresh_watched = || match operation {
        Some(Operation::Reload) => fresh().keeping_samples(),
        _ => fresh(),
    };
    // `loghaul-tap`: a viewer of every output for the whole run, in its own process (its CPU
    // is not the subject's: what it costs the subject is the question).
    let mut tap = match (operation, &launch.live) {
        (Some(Operation::Tap), Some((api, _))) => Some(
            spawn(
                &launch.program,
                &[
                    "tap".into(),
                    "--api".into(),
                    format!("http://127.0.0.1:{api}"),
                    "--rate".into(),
                    "100/s".into(),
                ],
                &[],
                dir,
                &dir.join("tap.jsonl"),
                &dir.join("tap-stderr.log"),
            )
            .context("starting loghaul tap")?,
        ),
        _ => None,
    };
    let mut reloaded_us: Option<u64> = None;
    let books = SharedTracker::from_tracker(fresh());
    // A subject that routes its events writes several files: one set of books over them all
    // (an event in two files is a duplicate), a watcher on each.
    let files = launch.output.files();
    let mut followers: Vec<FileFollower> = files.iter().map(|p| FileFollower::new(p)).collect();
    let watch_start = now_micros();
    // Lines of many records outgrow the watcher's window: it samples markers instead.
    let sampling = match launch.output {
        Output::Records(_) => Sampling::Markers,
        Output::File(_) | Output::Files(_) | Output::CountFile(_) | Output::Metrics(_) => {
            Sampling::Lines
        }
    };
    let watchers: Vec<Watcher> = files
        .iter()
        .map(|p| Watcher::start_sampling(p, fresh_watched(), watch_start, 0, sampling))
        .collect();
    let sampler = procstat::RssSampler::start(pids.clone());
    let cpu0 = cpu_of(&pids);
    // A disk buffer's fsyncs are counted from here: what it did at start is not the load's.
    let fsyncs0 = launch
        .disk_buffer_api
        .map(|api| subjects::sink_metric(api, FSYNCS).unwrap_or(0));

    let stop_gen = Arc::new(AtomicBool::new(false));
    let mut driver = match plan.driver {
        Driver::Builtin => {
            let input = format!("127.0.0.1:{}", launch.input_port);
            let (target, target_options) = target_for(plan, &launch, input);
            let gen_cfg = GenConfig {
                target,
                target_options,
                payload: plan.scenario.payload_spec(plan.message_size, plan.seed),
                count: Some(events),
                duration: None,
                // A reload is measured under a steady load: the rate around it is compared
                // with the rate before it.
                rate: if operation == Some(Operation::Reload) {
                    subjects::RELOAD_RATE
                } else {
                    0
                },
                connections: plan.connections,
                gen_id_base: 0,
            };
            let stop_gen = Arc::clone(&stop_gen);
            Running::Builtin(std::thread::spawn(move || {
                generator::run(&gen_cfg, None, &stop_gen)
            }))
        }
        Driver::Loggen => Running::Loggen(spawn_loggen(plan, peers, &launch, dir, events)?),
    };
    let tty = std::io::stderr().is_terminal();
    let mut last_mark: Option<u64> = None;
    let mut last_change = Instant::now();
    let mut last_arrival_us = None;
    let mut verified_mark: Option<u64> = None;
    let mut last_draw = Instant::now();
    let mut status = Status::Timeout;
    // The last count a counting subject published while it ran (loghaul's /metrics is gone once
    // it stops, so the final figure must come from here).
    let mut counted = 0u64;
    let mut polls = 0u64;
    loop {
        std::thread::sleep(Duration::from_millis(2));
        polls += 1;
        // A mark that changes whenever the subject makes progress, and the time of that progress.
        let (mark, seen_estimate) = match (&launch.output, watchers.is_empty()) {
            (Output::File(_) | Output::Files(_) | Output::Records(_), false) => (
                watchers.iter().filter_map(Watcher::last_growth_us).max(),
                watchers.iter().map(Watcher::frontier).max().unwrap_or(0),
            ),
            // An HTTP scrape costs the subject a little CPU: every 5th poll (10ms) is enough.
            (Output::Metrics(_), _) if !polls.is_multiple_of(5) => (last_mark, counted),
            (counter @ (Output::CountFile(_) | Output::Metrics(_)), _) => {
                counted = counted.max(counter.count().unwrap_or(0));
                (Some(counted), counted)
            }
            _ => (None, 0),
        };
        if operation == Some(Operation::Reload)
            && reloaded_us.is_none()
            && seen_estimate >= events / 2
            && let Some((_, config)) = &launch.live
        {
            reloaded_us = Some(reload(config, guard.child()?.id())?);
        }
        if mark != last_mark {
            last_mark = mark;
            last_change = Instant::now();
            last_arrival_us = match &launch.output {
                Output::File(_) | Output::Files(_) | Output::Records(_) => mark,
                Output::CountFile(_) | Output::Metrics(_) => Some(now_micros()),
            };
        }
        let complete = match &launch.output {
            Output::CountFile(_) | Output::Metrics(_) => seen_estimate >= events,
            Output::File(_) | Output::Files(_) | Output::Records(_) => {
                // Check the books only once the files have gone quiet, so that reading them
                // never competes with the subject writing them.
                let quiet = last_change.elapsed() >= Duration::from_millis(100);
                if quiet && mark.is_some() && verified_mark != mark && driver.is_finished() {
                    verified_mark = mark;
                    for f in &mut followers {
                        f.read_available(&books)?;
                    }
                }
                books.unique.load(Ordering::Relaxed) >= events
            }
        };
        if complete {
            status = Status::Complete;
            break;
        }
        if let Some(failed) = exited(&mut guard, &stderr_log)? {
            status = failed;
            break;
        }
        let mut exited = None;
        for (g, stderr, c) in &mut companions {
            if g.child()?
                .try_wait()
                .context("polling the subject")?
                .is_some()
            {
                exited = Some(format!(
                    "the subject's process {} exited during the run; stderr: {}",
                    c.name,
                    tail_of(stderr)
                ));
                break;
            }
        }
        if let Some(why) = exited {
            status = Status::Failed(why);
            break;
        }
        if driver.is_finished() && last_change.elapsed() >= plan.idle_timeout {
            break;
        }
        if last_change.elapsed() >= plan.idle_timeout * 3 {
            // Even the generator is stuck (the subject stopped reading): give up.
            break;
        }
        if tty && last_draw.elapsed() >= Duration::from_millis(250) {
            last_draw = Instant::now();
            eprint!(
                "\r{label}: ~{}/{} written   ",
                human(seen_estimate as f64),
                human(events as f64)
            );
            let _ = std::io::stderr().flush();
        }
    }
    if tty {
        eprint!("\r{}\r", " ".repeat(label.len() + 40));
    }
    let cpu1 = cpu_of(&pids);
    let hwm: u64 = pids.iter().map(|&p| procstat::sample(p).hwm_bytes).sum();
    let peak = sampler.finish().max(hwm);
    let fsyncs = match (launch.disk_buffer_api, fsyncs0) {
        (Some(api), Some(before)) => {
            // The buffer publishes its counters every 250ms: one more refresh covers every fsync
            // of the load. It does not fsync while idle, so the wait adds none.
            std::thread::sleep(Duration::from_millis(300));
            subjects::sink_metric(api, FSYNCS).map(|after| after.saturating_sub(before))
        }
        _ => None,
    };
    // Read while the subject still serves its API (the counter is published as it counts).
    let fallbacks = launch
        .remap_api
        .and_then(|api| subjects::component_metric(api, REMAP_FALLBACKS, REMAP_ID));
    if let Some(mut t) = tap.take() {
        t.terminate(Duration::from_secs(5))?;
    }
    // Front to back: a relay drains what it still holds into its receiver before that stops.
    guard.terminate(Duration::from_secs(20))?;
    for (g, ..) in &mut companions {
        g.terminate(Duration::from_secs(20))?;
    }
    stop_gen.store(true, Ordering::Relaxed);
    let gen_result = driver.finish();
    let watched: Vec<WatchState> = watchers.into_iter().map(Watcher::finish).collect();
    for f in &mut followers {
        // Everything the subject wrote, up to its exit: late duplicates and, after a timeout, the
        // exact loss.
        f.read_available(&books)?;
        f.flush_partial(&books);
    }
    let gen_stats = match gen_result {
        Ok(s) => s,
        Err(e) if status == Status::Complete => return Err(e.context("the generator failed")),
        Err(e) => {
            if let Status::Failed(_) = status {
                return Ok(failed(plan, kind, status));
            }
            return Ok(failed(
                plan,
                kind,
                Status::Failed(format!("the generator failed: {e:#}")),
            ));
        }
    };
    if let Status::Failed(_) = status {
        return Ok(failed(plan, kind, status));
    }

    let duration = last_arrival_us
        .map_or(0.0, |t| {
            t.saturating_sub(gen_stats.start_unix_us) as f64 / 1e6
        })
        .max(1e-6);
    let cpu = (cpu1 - cpu0).max(0.0);
    let mut rec = RunRecord::empty(plan.scenario.name(), kind.name(), "", 0, status);
    rec.events_sent = gen_stats.sent;
    rec.duration_secs = duration;
    rec.gen_secs = gen_stats.elapsed_secs;
    rec.gen_cores = gen_stats.cpu_secs.map(|c| c / duration);
    rec.cpu_secs = cpu;
    rec.cpu_per_wall = cpu / duration;
    rec.peak_rss_bytes = peak;
    rec.fsyncs = fsyncs;
    rec.fsyncs_per_sec = fsyncs.map(|n| n as f64 / duration);
    rec.tls = gen_stats.tls.clone();
    rec.failed_connections = gen_stats.failed_connections;
    rec.first_failure = gen_stats.first_failure.clone();
    if let Some(n) = fallbacks {
        rec.extra.insert(REMAP_FALLBACKS_KEY.into(), n.into());
    }
    match &launch.output {
        Output::File(_) | Output::Files(_) | Output::Records(_) => {
            let rep = books
                .snapshot()
                .report(Some(events), Some(plan.connections));
            rec.events_seen = rep.unique;
            rec.loss = rep.missing;
            rec.duplicates = Some(rep.duplicates);
            if let Some((first, rest)) = watched.split_first() {
                let mut samples = first.samples.clone();
                for w in rest {
                    samples.merge(&w.samples);
                }
                let lat = samples.latency();
                let ms = |q| lat.quantile(q).map(|v| v as f64 / 1000.0);
                rec.latency_p50_ms = ms(0.5);
                rec.latency_p99_ms = ms(0.99);
                rec.latency_p999_ms = ms(0.999);
                rec.flow_per_sec = crate::watch::flow_per_sec(&watched, rep.unique);
                if let (Some(at), Some(first)) = (reloaded_us, watched.first()) {
                    reload_figures(&mut rec, at, gen_stats.start_unix_us, first, &samples);
                }
            }
        }
        counter @ (Output::CountFile(_) | Output::Metrics(_)) => {
            // A line counter cannot tell duplicates from originals.
            let n = counted.max(counter.count().unwrap_or(0));
            rec.events_seen = n.min(events);
            rec.loss = events.saturating_sub(n);
            rec.duplicates = None;
        }
    }
    if operation == Some(Operation::Tap) {
        tap_figures(&mut rec, dir);
    }
    if operation == Some(Operation::Reload) && reloaded_us.is_none() {
        rec.extra.insert(
            "reload".into(),
            "not done: the run ended before its half".into(),
        );
    }
    rec.events_per_sec = rec.events_seen as f64 / duration;
    rec.cpu_secs_per_million = if rec.events_seen > 0 {
        cpu / (rec.events_seen as f64 / 1e6)
    } else {
        0.0
    };
    Ok(rec)
}

/// `loghaul-reload`'s reload: the configuration rewritten with its source and its sink
/// changed (a `max_connections` on the source, a `flush_interval` on the sink: both rebuilt,
/// the source's socket handed over), then SIGHUP. Returns when it was sent (µs since the epoch).
fn reload(config: &Path, pid: u32) -> Result<u64> {
    let text = std::fs::read_to_string(config).context("reading the subject's configuration")?;
    let changed = text
        .replacen("type: syslog,", "type: syslog, max_connections: 9999,", 1)
        .replacen("type: file,", "type: file, flush_interval: 50ms,", 1);
    if changed == text {
        bail!("the subject's configuration has no syslog source or file sink to change");
    }
    std::fs::write(config, changed).context("writing the changed configuration")?;
    let at = now_micros();
    let status = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("kill -HUP {pid} failed");
    }
    Ok(at)
}

/// The figures of a run with a reload at `at` (µs since the epoch): the flow in the second
/// around it against the flow in the three seconds before it (from the watcher's size samples),
/// and the delay's p99 of what arrived in that second against the second before it.
fn reload_figures(
    rec: &mut RunRecord,
    at: u64,
    start: u64,
    watched: &WatchState,
    samples: &meter::Tracker,
) {
    // Bytes written by time `t`, interpolated between the 100ms samples.
    let size_at = |t: u64| -> Option<f64> {
        let p = &watched.progress;
        let i = p.iter().position(|&(pt, _)| pt >= t)?;
        if i == 0 {
            return Some(p[0].1 as f64);
        }
        let ((t0, s0), (t1, s1)) = (p[i - 1], p[i]);
        let f = (t - t0) as f64 / (t1 - t0).max(1) as f64;
        Some(s0 as f64 + f * (s1 as f64 - s0 as f64))
    };
    // The second around the reload, and the three seconds before it (from the load's start
    // at the earliest).
    let half = 500_000;
    let (around_from, around_to) = (at.saturating_sub(half), at + half);
    let before_from = at.saturating_sub(3 * 1_000_000 + half).max(start);
    rec.extra.insert(
        "reload_at_secs".into(),
        (((at.saturating_sub(start)) as f64 / 1e6 * 100.0).round() / 100.0).into(),
    );
    if let (Some(a1), Some(a0), Some(b0)) = (
        size_at(around_to),
        size_at(around_from),
        size_at(before_from),
    ) {
        let before_secs = (around_from.saturating_sub(before_from)) as f64 / 1e6;
        let around_rate = a1 - a0;
        let before_rate = (a0 - b0) / before_secs.max(1e-3);
        if before_rate > 0.0 {
            rec.extra.insert(
                "reload_flow_ratio".into(),
                ((around_rate / before_rate * 1000.0).round() / 1000.0).into(),
            );
        }
    }
    let ms = |v: Option<u64>| v.map(|us| (us as f64 / 10.0).round() / 100.0);
    if let Some(p99) = ms(samples.latency_between(around_from, around_to, 0.99)) {
        rec.extra.insert("reload_p99_ms".into(), p99.into());
    }
    if let Some(p99) = ms(samples.latency_between(before_from, around_from, 0.99)) {
        rec.extra.insert("before_reload_p99_ms".into(), p99.into());
    }
}

/// What `loghaul-tap`'s viewer got: the events printed, and the last count of events it was
/// told were skipped.
fn tap_figures(rec: &mut RunRecord, dir: &Path) {
    let printed = std::fs::read_to_string(dir.join("tap.jsonl"))
        .map(|t| t.lines().count())
        .unwrap_or(0);
    let skipped = std::fs::read_to_string(dir.join("tap-stderr.log"))
        .ok()
        .and_then(|t| {
            t.lines()
                .filter_map(|l| l.strip_prefix("(skipped "))
                .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
                .next_back()
        })
        .unwrap_or(0);
    rec.extra.insert("tapped_events".into(), printed.into());
    rec.extra
        .insert("tap_skipped_events".into(), skipped.into());
}

/// Where and how the built-in generator sends to a subject listening on `input`: the forward
/// protocol, OTLP/HTTP requests (`otlp`) or syslog frames, over TLS when the subject listens with
/// it (trusting its PKI's CA), and in `tls_handshake` on a new connection per message.
fn target_for(plan: &Plan, launch: &Launch, input: String) -> (TargetUrl, TargetOptions) {
    let target = match (plan.scenario.is_forward(), launch.tls.is_some()) {
        _ if plan.scenario.input() == Some(subjects::Input::Otlp) => TargetUrl::Otlp(input),
        (true, false) => TargetUrl::Fluent(input),
        (true, true) => TargetUrl::FluentTls(input),
        (false, false) => TargetUrl::Tcp(input),
        (false, true) => TargetUrl::Tls(input),
    };
    let options = TargetOptions {
        fluent: plan.fluent.clone(),
        tls: launch.tls.clone().unwrap_or_default(),
        connect_per_message: plan.scenario.connect_per_message(),
        ..TargetOptions::default()
    };
    (target, options)
}

/// loghaul's counter of a disk buffer's fsyncs (segments and their folder), on the sink it serves.
const FSYNCS: &str = "loghaul_disk_buffer_fsyncs_total";

/// loghaul's counter of the events a `remap` on the fast path ran on the VRL runtime instead.
const REMAP_FALLBACKS: &str = "loghaul_remap_runtime_fallbacks_total";

/// The record's field for [`REMAP_FALLBACKS`] over the run (only where the subject has a remap).
pub const REMAP_FALLBACKS_KEY: &str = "remap_runtime_fallbacks";

fn failed(plan: &Plan, kind: SubjectKind, status: Status) -> RunRecord {
    let mut r = RunRecord::empty(plan.scenario.name(), kind.name(), "", 0, status);
    r.events_sent = plan.events;
    r
}

/// A load generator in flight.
enum Running {
    Builtin(std::thread::JoinHandle<Result<generator::GenStats>>),
    Loggen(LoggenRun),
}

/// syslog-ng's loggen in flight.
struct LoggenRun {
    guard: ChildGuard,
    start_us: u64,
    started: Instant,
    events: u64,
    /// Its exit status, once reaped.
    status: Option<std::process::ExitStatus>,
    /// Its CPU seconds as last read, before each poll; exact once read from the zombie.
    cpu_secs: Option<f64>,
}

impl LoggenRun {
    /// Polls loggen once, reading its CPU time just before: if it has exited, that reading is of
    /// the unreaped zombie and so is its total (to /proc's 10ms ticks).
    fn poll(&mut self) -> Result<Option<std::process::ExitStatus>> {
        if let Some(c) = self.guard.0.as_mut() {
            if let Some(cpu) = procstat::process_cpu_secs(c.id()) {
                self.cpu_secs = Some(cpu);
            }
            if let Some(st) = c.try_wait().context("polling loggen")? {
                self.status = Some(st);
                self.guard.0 = None;
            }
        }
        Ok(self.status)
    }
}

impl Running {
    fn is_finished(&mut self) -> bool {
        match self {
            Self::Builtin(h) => h.is_finished(),
            Self::Loggen(l) => !matches!(l.poll(), Ok(None)),
        }
    }

    /// Waits for the generator (the subject is already stopped, so a blocked sender fails fast).
    fn finish(self) -> Result<generator::GenStats> {
        match self {
            Self::Builtin(h) => h
                .join()
                .map_err(|_| anyhow::anyhow!("the generator thread panicked"))?,
            Self::Loggen(mut l) => {
                let deadline = Instant::now() + Duration::from_secs(5);
                while l.poll()?.is_none() {
                    if Instant::now() >= deadline {
                        // Dropping `l` kills and reaps it (`ChildGuard`).
                        bail!("loggen did not finish");
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                if let Some(st) = l.status
                    && !st.success()
                {
                    bail!("loggen exited with {st}");
                }
                Ok(generator::GenStats {
                    sent: l.events,
                    bytes: 0,
                    elapsed_secs: l.started.elapsed().as_secs_f64(),
                    per_connection: Vec::new(),
                    start_unix_us: l.start_us,
                    cpu_secs: l.cpu_secs,
                    recovery: None,
                    tls: None,
                    failed_connections: None,
                    first_failure: None,
                })
            }
        }
    }
}

/// Starts syslog-ng's loggen against the subject: the same connections, `events / connections`
/// messages on each, as fast as it goes (its default is 1000 msg/s per connection).
fn spawn_loggen(
    plan: &Plan,
    peers: &Peers,
    launch: &Launch,
    dir: &Path,
    events: u64,
) -> Result<LoggenRun> {
    if !peers.loggen.exists() {
        bail!(
            "loggen not found at {} (run scripts/install-peers.sh or set LOGHAUL_LOGGEN)",
            peers.loggen.display()
        );
    }
    let per_conn = events / plan.connections.max(1) as u64;
    let mut cmd = Command::new(&peers.loggen);
    cmd.args(["-i", "-S", "-r", "1000000000"])
        .arg(format!("--active-connections={}", plan.connections))
        .arg(format!("--number={per_conn}"))
        // loggen refuses messages shorter than 127 bytes.
        .arg(format!("--size={}", plan.message_size.max(127)));
    if plan.scenario.input() == Some(Input::Rfc5424) {
        // RFC5424 with structured data, octet-counted (loggen's default framing with -P).
        cmd.args([
            "-P",
            "-p",
            "[exampleSDID@32473 iut=\"3\" eventSource=\"Application\"]",
        ]);
    }
    cmd.args(["127.0.0.1", &launch.input_port.to_string()]);
    let log = std::fs::File::create(dir.join("loggen.log")).context("creating loggen.log")?;
    let log2 = log.try_clone().context("cloning loggen.log")?;
    let start_us = now_micros();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .with_context(|| format!("starting {}", peers.loggen.display()))?;
    Ok(LoggenRun {
        guard: ChildGuard(Some(child)),
        start_us,
        started: Instant::now(),
        events,
        status: None,
        cpu_secs: None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn record(secs: f64) -> RunRecord {
        let mut r = RunRecord::empty("syslog", "loghaul", "x", 1, Status::Complete);
        r.duration_secs = secs;
        r
    }

    #[test]
    fn a_set_too_small_for_stable_figures_says_so() {
        let said = too_short(&[record(12.0), record(0.8)], 3).expect("a note");
        assert!(
            said.contains("0.80s") && said.contains("--events"),
            "{said}"
        );
        let said = too_short(&[record(12.0)], 1).expect("a note");
        assert!(said.contains("--runs 3"), "{said}");
        assert_eq!(too_short(&[record(12.0), record(11.0)], 3), None);
    }
}
