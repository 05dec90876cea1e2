//! CPU time and memory of a subject's process tree, read from /proc.
//!
//! CPU is `utime + stime` of every live process in the tree plus `cutime + cstime` (children that
//! already exited and were reaped), so a subject that forks workers is charged for them. Threads are
//! included because /proc/PID/stat sums them. Peak RSS is the larger of the highest sampled sum of
//! `VmRSS` and the sum of each process's own high-water mark `VmHWM`.

use std::collections::HashMap;
use std::process::{Child, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

/// Clock ticks per second of /proc's CPU times. `USER_HZ` is fixed at 100 in the Linux ABI on every
/// architecture we run on, so no `sysconf` call (and no unsafe code) is needed.
const USER_HZ: f64 = 100.0;

/// One reading of a process tree.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TreeSample {
    /// CPU seconds (user + system) consumed so far.
    pub cpu_secs: f64,
    /// Current resident set size, bytes.
    pub rss_bytes: u64,
    /// Sum of the processes' resident high-water marks, bytes.
    pub hwm_bytes: u64,
    /// Number of processes in the tree.
    pub processes: usize,
}

fn parent_map() -> HashMap<u32, Vec<u32>> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return children;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(fields) = stat_fields(pid)
            && let Some(ppid) = fields.get(1).and_then(|s| s.parse::<u32>().ok())
        {
            children.entry(ppid).or_default().push(pid);
        }
    }
    children
}

/// The fields of /proc/PID/stat after the command name (which may contain spaces and parentheses):
/// index 0 is the state (field 3 in proc(5)).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 1..];
    Some(after.split_whitespace().map(str::to_string).collect())
}

/// The pids of `root` and all its descendants.
pub fn tree(root: u32) -> Vec<u32> {
    let children = parent_map();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        if let Some(kids) = children.get(&out[i]) {
            out.extend(kids);
        }
        i += 1;
    }
    out
}

fn status_kib(pid: u32, key: &str) -> u64 {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return 0;
    };
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Reads the tree rooted at `root` now.
pub fn sample(root: u32) -> TreeSample {
    let mut s = TreeSample::default();
    for pid in tree(root) {
        let Some(cpu) = process_cpu_secs(pid) else {
            continue;
        };
        s.cpu_secs += cpu;
        s.rss_bytes += status_kib(pid, "VmRSS:") * 1024;
        s.hwm_bytes += status_kib(pid, "VmHWM:") * 1024;
        s.processes += 1;
    }
    s
}

/// On-CPU seconds of a process's live threads, from /proc/PID/task/*/schedstat (nanoseconds,
/// where /proc/PID/stat counts 10ms ticks). Threads that have exited are not in it; a zombie
/// keeps only its main thread's. `None` once the pid is gone.
pub fn threads_cpu_secs(pid: u32) -> Option<f64> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut ns: u64 = 0;
    for task in dir.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        ns += text
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Some(ns as f64 / 1e9)
}

/// The larger of a process's two CPU readings: [`process_cpu_secs`] (10ms ticks, exited threads
/// and reaped children included) and [`threads_cpu_secs`] (nanoseconds, live threads only).
pub fn precise_cpu_secs(pid: u32) -> Option<f64> {
    match (process_cpu_secs(pid), threads_cpu_secs(pid)) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The state letter of a process (`R`, `S`, `Z` for an exited one not yet reaped…), `None` once
/// the pid is gone.
pub fn process_state(pid: u32) -> Option<char> {
    stat_fields(pid)?.first()?.chars().next()
}

/// CPU seconds (user + system, reaped children included) of one process, from its own
/// /proc/PID/stat only (cheap enough to read before every poll of a child). An exited child that
/// is not yet reaped (a zombie) still reports its whole thread group's times there, so a reading
/// taken just before reaping is its total. `None` once the pid is gone.
pub fn process_cpu_secs(pid: u32) -> Option<f64> {
    let f = stat_fields(pid)?;
    // proc(5) fields 14..=17 (utime stime cutime cstime) are indices 11..=14 here.
    let ticks: u64 = (11..=14)
        .filter_map(|i| f.get(i).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    Some(ticks as f64 / USER_HZ)
}

/// The whole machine's CPU time so far, from the first line of /proc/stat, in seconds summed over
/// all cores: what a run left idle, and what the hypervisor took.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MachineCpu {
    /// user + nice + system + irq + softirq: every process (the subject's, the lab's, the
    /// kernel's own threads) and interrupt handling.
    pub busy_secs: f64,
    /// idle + iowait.
    pub idle_secs: f64,
    /// Time the hypervisor ran something else while a virtual CPU wanted to run.
    pub steal_secs: f64,
}

/// Reads [`MachineCpu`] now (`None` where /proc/stat is unreadable).
pub fn machine_cpu() -> Option<MachineCpu> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0) as f64 / USER_HZ;
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    Some(MachineCpu {
        busy_secs: at(0) + at(1) + at(2) + at(5) + at(6),
        idle_secs: at(3) + at(4),
        steal_secs: at(7),
    })
}

/// Samples the RSS of one or more trees (a subject of several processes) every 50ms in the
/// background, keeping the peak of their sum.
#[derive(Debug)]
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    /// Starts sampling the trees of `roots`.
    pub fn start(roots: Vec<u32>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let handle = {
            let stop = Arc::clone(&stop);
            let peak = Arc::clone(&peak);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let (rss, hwm) = roots
                        .iter()
                        .map(|&r| sample(r))
                        .fold((0, 0), |acc, s| (acc.0 + s.rss_bytes, acc.1 + s.hwm_bytes));
                    peak.fetch_max(rss.max(hwm), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        Self {
            stop,
            peak,
            handle: Some(handle),
        }
    }

    /// Stops sampling and returns the peak, in bytes.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for RssSampler {
    /// A run that ends in an error never calls `finish`: its sampler stops all the same.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Waits for `child` to exit (within `limit`), reading its CPU time from /proc just before it is
/// reaped: the zombie still reports its own and its reaped children's times. Ticks are 10ms, too
/// coarse for a 10MB download, so the threads' nanosecond counters (sampled while it runs, and the
/// main thread's at the end) are read too, and the larger reading counts.
///
/// # Errors
/// It did not exit within `limit` (it is killed), or it cannot be reaped.
pub fn wait_with_cpu(child: &mut Child, limit: Duration) -> Result<(ExitStatus, f64)> {
    let pid = child.id();
    let deadline = Instant::now() + limit;
    let mut cpu: f64 = 0.0;
    loop {
        // The state first: a zombie's reading, taken after it, is the whole run.
        let exited = matches!(process_state(pid), Some('Z') | None);
        if let Some(c) = precise_cpu_secs(pid) {
            cpu = cpu.max(c);
        }
        if exited {
            let status = child.wait().context("reaping the process")?;
            return Ok((status, cpu));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn machine_cpu_moves_forward() {
        let a = machine_cpu().unwrap();
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_millis(50) {
            std::hint::black_box(0u64);
        }
        let b = machine_cpu().unwrap();
        assert!(b.busy_secs >= a.busy_secs && b.idle_secs >= a.idle_secs);
        assert!(b.busy_secs + b.idle_secs > a.busy_secs + a.idle_secs);
    }

    #[test]
    fn samples_own_process() {
        let s = sample(std::process::id());
        assert!(s.processes >= 1);
        assert!(s.rss_bytes > 0);
        assert!(s.hwm_bytes >= s.rss_bytes / 2);
    }
}
