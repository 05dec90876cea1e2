//! `bench run tail`: a subject reads one log file from its beginning into a JSON-lines file.
//!
//! ```text
//! once, before the first round:  generator ──► input.log   N numbered lines (gen=0), fsync'd
//! every run:  read input.log once, untimed (so it is in the page cache)
//!             clock₀ ──► spawn subject ──► it reads input.log ──► out.log ◄── watcher: stat every
//!                                                                  1 ms (last growth = arrival)
//!             books: every line of out.log read whenever it has been quiet 100 ms, until all N
//!             are in them, or no growth for --idle-timeout (the rest is loss)
//!             CPU of the subject's process tree, peak RSS ──► SIGTERM ──► final read (duplicates)
//! ```
//!
//! The clock starts just before the subject is spawned and stops at the output's last growth: a
//! tailer started on a large file is charged for its start-up (config, runtime, finding the file)
//! as well. Its CPU is that of its whole life up to the end of the run, so nothing before the
//! start needs subtracting. The input is written once per `bench run`, by the lab's generator
//! (the `file://` target, one `write` per block), and fsync'd before any subject starts, so its
//! writeback never competes with a run. Before each run the lab reads it once, untimed: whatever
//! the machine's memory reclaim did since the last run (these VMs reclaim page cache as they go),
//! every subject then reads it from the page cache, and what is measured is reading and writing
//! lines, not the disk.
//!
//! There is no latency (the lines were written before the subject started: arrival minus write
//! time would measure the lab) and no generator during the run; the table leaves those columns
//! empty.

use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::generator::{self, GenConfig};
use crate::meter::{FileFollower, SharedTracker, Tracker};
use crate::payload::now_micros;
use crate::procstat;
use crate::progress::human;
use crate::report::{self, RunRecord, Status};
use crate::runner::{self, Plan};
use crate::subjects::{Peers, SubjectKind};
use crate::target::{TargetOptions, TargetUrl};
use crate::watch::{Sampling, Watcher};

/// How long the output must have been quiet before the books are read.
const QUIET: Duration = Duration::from_millis(100);
/// loghaul's goals in `tail`: lines per second, and CPU-seconds per million lines.
const GOAL_RATE: f64 = 2_000_000.0;
const GOAL_CPU_PER_MILLION: f64 = 0.4;

/// `tail`'s input file, as written.
#[derive(Clone, Debug)]
pub(crate) struct Input {
    /// Where it is.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// The filesystem holding it and the runs' folders (`ext4 on /dev/vda`), if known.
    pub filesystem: Option<String>,
}

/// Writes `tail`'s input, `work/input.log`: `plan.events` numbered lines of `plan.message_size`
/// bytes, on disk before this returns.
///
/// # Errors
/// No lines asked for, or the file cannot be written or synced.
pub(crate) fn write_input(plan: &Plan, work: &Path) -> Result<Input> {
    if plan.events == 0 {
        bail!("--events must be at least 1: the number of lines in the tailed file");
    }
    let input = work.join("input.log");
    let _ = std::fs::remove_file(&input);
    let cfg = GenConfig {
        target: TargetUrl::File(input.clone()),
        target_options: TargetOptions::default(),
        payload: plan.scenario.payload_spec(plan.message_size, plan.seed),
        count: Some(plan.events),
        duration: None,
        rate: 0,
        connections: 1,
        gen_id_base: 0,
    };
    let started = Instant::now();
    let stats = generator::run(&cfg, None, &AtomicBool::new(false))
        .with_context(|| format!("writing {}", input.display()))?;
    // On disk before any clock starts: no run shares the machine with this file's writeback.
    File::open(&input)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("syncing {}", input.display()))?;
    eprintln!(
        "tail: wrote {} lines ({:.0}MB) to {} in {:.1}s",
        report::count(stats.sent as f64),
        stats.bytes as f64 / 1e6,
        input.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(Input {
        filesystem: filesystem_of(work),
        bytes: stats.bytes,
        path: input,
    })
}

/// Reads `input` to its end and drops the bytes: afterwards it is in the page cache.
fn warm(input: &Path) -> Result<()> {
    let mut f = File::open(input).with_context(|| format!("opening {}", input.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("reading {}", input.display())),
        }
    }
}

/// The `bare` subject's description in `tail`'s table.
pub(crate) fn bare_platform(peers: &Peers, loghaul: &Path) -> String {
    let loghaul = peers.platform(SubjectKind::Loghaul, loghaul);
    format!(
        "{} codec, one thread: read 1MiB, split, encode, write; no pipeline (Rust)",
        loghaul.trim_end_matches(" (Rust)")
    )
}

/// One run of `kind` on `input`, in the (fresh) folder `dir`.
///
/// # Errors
/// The subject cannot be prepared or started, or the output cannot be read. A subject that
/// exits during the run is a failed record, not an error.
pub(crate) fn run_one(
    plan: &Plan,
    kind: SubjectKind,
    peers: &Peers,
    dir: &Path,
    input: &Path,
    label: &str,
) -> Result<RunRecord> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let launch = super::prepare_tail(kind, dir, input, peers, &plan.loghaul)?;
    warm(input)?;
    let events = plan.events;
    let books = SharedTracker::from_tracker(Tracker::new(now_micros()));
    let mut follower = FileFollower::new(&launch.output);
    let start_us = now_micros();
    let sampling = if launch.records {
        Sampling::Markers
    } else {
        Sampling::Lines
    };
    let watcher =
        Watcher::start_sampling(&launch.output, Tracker::new(start_us), start_us, 0, sampling);
    let stderr_log = dir.join("stderr.log");
    let mut guard = runner::spawn(
        &launch.program,
        &launch.args,
        &[],
        dir,
        &dir.join("stdout.log"),
        &stderr_log,
    )?;
    let pid = guard.child()?.id();
    let sampler = procstat::RssSampler::start(vec![pid]);

    let tty = std::io::stderr().is_terminal();
    let mut last_mark: Option<u64> = None;
    let mut last_change = Instant::now();
    let mut verified: Option<u64> = None;
    let mut last_draw = Instant::now();
    let mut status = Status::Timeout;
    loop {
        std::thread::sleep(Duration::from_millis(2));
        let mark = watcher.last_growth_us();
        if mark != last_mark {
            last_mark = mark;
            last_change = Instant::now();
        }
        // The books only once the output has gone quiet, so that reading it never competes
        // with the subject writing it.
        if mark.is_some() && verified != mark && last_change.elapsed() >= QUIET {
            verified = mark;
            follower.read_available(&books)?;
            if books.unique.load(Ordering::Relaxed) >= events {
                status = Status::Complete;
                break;
            }
        }
        if let Some(failed) = runner::exited(&mut guard, &stderr_log)? {
            status = failed;
            break;
        }
        if last_change.elapsed() >= plan.idle_timeout {
            break;
        }
        if tty && last_draw.elapsed() >= Duration::from_millis(250) {
            last_draw = Instant::now();
            eprint!(
                "\r{label}: ~{}/{} written   ",
                human(watcher.frontier() as f64),
                human(events as f64)
            );
            let _ = std::io::stderr().flush();
        }
    }
    if tty {
        eprint!("\r{}\r", " ".repeat(label.len() + 40));
    }
    // The process's whole life so far: it started after the clock did.
    let end = procstat::sample(pid);
    let peak = sampler.finish().max(end.hwm_bytes);
    guard.terminate(Duration::from_secs(20))?;
    let watched = watcher.finish();
    // Everything the subject wrote up to its exit: late duplicates and, after a timeout, the
    // exact loss.
    follower.read_available(&books)?;
    follower.flush_partial(&books);
    if let Status::Failed(_) = status {
        let mut r = RunRecord::empty(super::NAME, kind.name(), "", 0, status);
        r.events_sent = events;
        return Ok(r);
    }
    let rep = books.snapshot().report(Some(events), Some(1));
    let duration = watched
        .last_growth_us
        .map_or(0.0, |t| t.saturating_sub(start_us) as f64 / 1e6)
        .max(1e-6);
    let mut rec = RunRecord::empty(super::NAME, kind.name(), "", 0, status);
    rec.events_sent = events;
    rec.events_seen = rep.unique;
    rec.loss = rep.missing;
    rec.duplicates = Some(rep.duplicates);
    rec.duration_secs = duration;
    rec.events_per_sec = rep.unique as f64 / duration;
    rec.cpu_secs = end.cpu_secs;
    rec.cpu_per_wall = end.cpu_secs / duration;
    rec.cpu_secs_per_million = if rep.unique > 0 {
        end.cpu_secs / (rep.unique as f64 / 1e6)
    } else {
        0.0
    };
    rec.peak_rss_bytes = peak;
    rec.flow_per_sec = watched.flow_per_sec(rep.unique);
    Ok(rec)
}

/// What goes under `tail`'s table: where its files were, how it was timed, loghaul ÷ bare, and
/// loghaul's goals.
pub(crate) fn notes(plan: &Plan, input: &Input, records: &[RunRecord], names: &[String]) -> String {
    let fs = input
        .filesystem
        .clone()
        .unwrap_or_else(|| "filesystem unknown".into());
    let mut s = format!(
        "Input: `{}`, {} lines of about {} bytes ({:.0}MB), written and fsync'd before the \
         first run and read once (untimed) before each run, so every subject reads it from the \
         page cache. Output: each run's `out.log` in a folder beside it ({fs}: the temporary \
         folder, where every scenario's subjects write). Clock: from just before the subject's \
         process starts to the last growth of its output; CPU: that process over its whole \
         life up to then. No latency or generator columns: the lines were written before the \
         subject started.\n",
        input.path.display(),
        report::count(plan.events as f64),
        plan.message_size,
        input.bytes as f64 / 1e6,
    );
    let summaries = report::summarize(records, names);
    let median = |name: &str| {
        summaries
            .iter()
            .find(|m| m.subject == name && m.runs > 0)
            .and_then(|m| Some((m.events_per_sec?.median, m.cpu_secs_per_million?.median)))
    };
    let loghaul = median(SubjectKind::Loghaul.name());
    if let (Some((rate, cpu)), Some((bare_rate, bare_cpu))) =
        (loghaul, median(SubjectKind::Bare.name()))
        && bare_rate > 0.0
        && bare_cpu > 0.0
    {
        s.push_str(&format!(
            "\nloghaul ÷ bare (medians): rate **{:.2}**, CPU-s per 1M lines **{:.2}**.\n",
            rate / bare_rate,
            cpu / bare_cpu
        ));
    }
    if let Some((rate, cpu)) = loghaul {
        let verdict = |ok: bool| if ok { "met" } else { "not met" };
        s.push_str(&format!(
            "\nGoals for loghaul: ≥ {} lines/s: {} lines/s ({}); ≤ {GOAL_CPU_PER_MILLION} CPU-s \
             per 1M lines: {cpu:.2} ({}). For scale, Fluent Bit's published figure for tail → \
             file is 1M records/s at 46% of one core (0.46 CPU-s per 1M records), on other \
             hardware.\n",
            report::count(GOAL_RATE),
            report::count(rate),
            verdict(rate >= GOAL_RATE),
            verdict(cpu <= GOAL_CPU_PER_MILLION),
        ));
    }
    s
}

/// `FSTYPE on DEVICE` of the mount holding `path`, from /proc/self/mounts.
fn filesystem_of(path: &Path) -> Option<String> {
    let path = path.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (dev, at, fstype) = (f.next()?, f.next()?, f.next()?);
            path.starts_with(at)
                .then(|| (at.len(), format!("{fstype} on {dev}")))
        })
        .max_by_key(|&(len, _)| len)
        .map(|(_, what)| what)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_temporary_folder_is_on_some_filesystem() {
        let fs = filesystem_of(&std::env::temp_dir()).unwrap();
        assert!(fs.contains(" on "), "{fs}");
    }
}
