//! `http_echo`: the published HTTP echo-server experiment. Each server answers every request with
//! its path and the time; `ab -c 2000 -n 8000` (no keep-alive, as the published experiment ran
//! it) hits it five times, then `wrk` (keep-alive, two threads) at 2,000 and 10,000 connections,
//! because single-threaded `ab` saturates before a fast server does. The `ceiling` subject, the
//! lab's own hand-written server, shows where that is in the same run.
//!
//! ```text
//! for each subject:  start ─► check the echo ─► warm-up ab run(s) ─► ab × runs ─► wrk × each -c ─► stop
//!                                 (server CPU and RSS sampled around every run)
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use crate::http_peers;
use crate::procstat;
use crate::progress::human;
use crate::runner::{self, ChildGuard, Plan};
use crate::subjects::{self, Peers, Ready, SubjectKind};

/// The HTTP experiments' load (from `bench run`'s `--ab-*`, `--wrk-*`, `--download-size` and
/// `--upload-*` options).
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// `ab -c`.
    pub ab_concurrency: usize,
    /// `ab -n`.
    pub ab_requests: usize,
    /// One `wrk` run per entry, at this many connections.
    pub wrk_connections: Vec<usize>,
    /// `wrk -d`.
    pub wrk_duration: Duration,
    /// `wrk -t`.
    pub wrk_threads: usize,
    /// `http_client`: bytes of the downloaded file.
    pub download_bytes: usize,
    /// `http_client`: events uploaded as NDJSON.
    pub upload_events: u64,
    /// `http_client`: events per uploaded batch (one POST each).
    pub upload_batch: usize,
}

/// What `ab` reported for one run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AbRun {
    /// Requests per second (ab's mean).
    pub requests_per_sec: f64,
    /// Completed requests.
    pub complete: u64,
    /// Failed requests (connect, receive, length and exception errors together).
    pub failed: u64,
    /// Responses that were not 2xx.
    pub non_2xx: u64,
    /// ab's percentile table: time to serve 50% / 99% of the requests, ms.
    pub p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub p99_ms: Option<f64>,
    /// Server CPU seconds during the run.
    pub server_cpu_secs: f64,
}

/// What `wrk` reported for one run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WrkRun {
    /// Connections (`-c`).
    pub connections: usize,
    /// Requests per second.
    pub requests_per_sec: f64,
    /// Requests completed.
    pub requests: u64,
    /// Latency percentiles, ms.
    pub p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub p99_ms: Option<f64>,
    /// Socket errors (connect + read + write + timeout).
    pub socket_errors: u64,
    /// Responses that were not 2xx or 3xx.
    pub non_2xx: u64,
    /// Server CPU seconds per 10,000 requests.
    pub server_cpu_per_10k: Option<f64>,
}

/// One subject's results.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EchoRecord {
    /// Subject name.
    pub subject: String,
    /// Implementation.
    pub platform: String,
    /// `None` when it ran; why not otherwise.
    pub status: Option<String>,
    /// The measured ab runs.
    pub ab: Vec<AbRun>,
    /// The wrk runs, one per connection count.
    pub wrk: Vec<WrkRun>,
    /// Peak RSS of the server during the runs, bytes.
    pub peak_rss_bytes: u64,
}

impl EchoRecord {
    fn ab_mean(&self) -> Option<f64> {
        (!self.ab.is_empty())
            .then(|| self.ab.iter().map(|r| r.requests_per_sec).sum::<f64>() / self.ab.len() as f64)
    }
}

/// Runs `sh -c 'ulimit -n <hard>; exec PROGRAM ARGS'`: the load tools and servers hold thousands
/// of sockets, more than a default soft limit of 1024.
fn with_fd_limit(program: &Path, args: &[String]) -> (PathBuf, Vec<String>) {
    let mut a = vec![
        "-c".to_string(),
        "ulimit -n \"$(ulimit -Hn)\" 2>/dev/null; exec \"$0\" \"$@\"".to_string(),
        program.display().to_string(),
    ];
    a.extend(args.iter().cloned());
    (PathBuf::from("/bin/sh"), a)
}

fn loghaul_echo_config(port: u16, api: u16) -> String {
    format!(
        "# http_echo: loghaul's http_server answering every request with its path and the time.\n\
         api:\n  address: \"127.0.0.1:{api}\"\n\
         sources:\n  web:\n    type: http_server\n    address: \"127.0.0.1:{port}\"\n    response: echo\n    max_connections: 100000\n\
         sinks:\n  out:\n    type: blackhole\n    inputs: [web]\n"
    )
}

/// GET `/check` and return the body, to see that the server echoes as the others do.
fn echo_check(port: u16) -> Result<String> {
    let body = crate::httpd::get(port, "/check")?;
    if !body.starts_with("/check ") {
        bail!("the body is not `<path> <time>`: {body:?}");
    }
    Ok(body.trim().to_string())
}

fn number_after<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
}

/// Parses ab's report.
pub fn parse_ab(text: &str) -> Result<AbRun> {
    let rps = number_after(text, "Requests per second:")
        .and_then(|v| v.parse().ok())
        .context("no `Requests per second` in ab's output")?;
    let pct = |p: &str| {
        text.lines()
            .find_map(|l| l.trim_start().strip_prefix(p))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    Ok(AbRun {
        requests_per_sec: rps,
        complete: number_after(text, "Complete requests:")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        failed: number_after(text, "Failed requests:")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        non_2xx: number_after(text, "Non-2xx responses:")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        p50_ms: pct("50%"),
        p99_ms: pct("99%"),
        server_cpu_secs: 0.0,
    })
}

/// A wrk duration (`1.23ms`, `456.00us`, `1.02s`, `2.00m`) in ms.
fn wrk_ms(v: &str) -> Option<f64> {
    let (num, scale) = if let Some(n) = v.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = v.strip_suffix('m') {
        (n, 60_000.0)
    } else {
        (v, 1.0)
    };
    num.parse::<f64>().ok().map(|x| x * scale)
}

/// Parses wrk's report (run with `--latency`).
pub fn parse_wrk(text: &str, connections: usize) -> Result<WrkRun> {
    let rps = number_after(text, "Requests/sec:")
        .and_then(|v| v.parse().ok())
        .context("no `Requests/sec` in wrk's output")?;
    let requests = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let pct = |p: &str| number_after(text, p).and_then(wrk_ms);
    let socket_errors = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("Socket errors:"))
        .map_or(0, |rest| {
            rest.split(',')
                .filter_map(|part| part.split_whitespace().last()?.parse::<u64>().ok())
                .sum()
        });
    Ok(WrkRun {
        connections,
        requests_per_sec: rps,
        requests,
        p50_ms: pct("50%"),
        p99_ms: pct("99%"),
        socket_errors,
        non_2xx: number_after(text, "Non-2xx or 3xx responses:")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        server_cpu_per_10k: None,
    })
}

/// Runs a load tool to completion (bounded by `limit`), returning its stdout.
fn run_tool(program: &Path, args: &[String], limit: Duration, log: &Path) -> Result<String> {
    let (sh, sh_args) = with_fd_limit(program, args);
    let out_path = log.with_extension("out");
    let out = std::fs::File::create(&out_path)
        .with_context(|| format!("creating {}", out_path.display()))?;
    let err = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut child = Command::new(&sh)
        .args(&sh_args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    let (status, _) = procstat::wait_with_cpu(&mut child, limit)
        .with_context(|| program.display().to_string())?;
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    if !status.success() && !text.contains("Requests") {
        bail!(
            "{} failed ({status}): {}",
            program.display(),
            runner::tail_of(log)
        );
    }
    Ok(text)
}

fn ab_args(concurrency: usize, requests: usize, port: u16) -> Vec<String> {
    vec![
        // Keep going past receive errors (count them) and wait up to 30 s for a slow answer.
        "-r".into(),
        "-s".into(),
        "30".into(),
        "-c".into(),
        concurrency.min(requests).max(1).to_string(),
        "-n".into(),
        requests.to_string(),
        format!("http://127.0.0.1:{port}/"),
    ]
}

fn wrk_args(o: &HttpOptions, connections: usize, port: u16) -> Vec<String> {
    vec![
        format!("-t{}", o.wrk_threads.min(connections).max(1)),
        format!("-c{connections}"),
        format!("-d{}s", o.wrk_duration.as_secs().max(1)),
        "--latency".into(),
        "--timeout".into(),
        "10s".into(),
        format!("http://127.0.0.1:{port}/"),
    ]
}

/// Starts one subject's server; returns its guard, its stderr log and its pid.
fn start(
    plan: &Plan,
    kind: SubjectKind,
    dir: &Path,
    port: u16,
) -> Result<(ChildGuard, PathBuf, u32)> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (program, args, ready) = if kind == SubjectKind::Loghaul {
        let api = subjects::free_port()?;
        let conf = dir.join("loghaul.yaml");
        std::fs::write(&conf, loghaul_echo_config(port, api))
            .with_context(|| format!("writing {}", conf.display()))?;
        (
            plan.loghaul.clone(),
            vec!["run".into(), "-c".into(), conf.display().to_string()],
            Ready::Health(api),
        )
    } else {
        let (p, a) = http_peers::echo_server(kind, port, &plan.loghaul)?;
        (p, a, Ready::Connect)
    };
    let (sh, sh_args) = with_fd_limit(&program, &args);
    let stderr = dir.join("stderr.log");
    let mut guard = runner::spawn(&sh, &sh_args, &[], dir, &dir.join("stdout.log"), &stderr)?;
    // The JVM and Python start slowly on a busy machine.
    runner::wait_ready(&mut guard, &ready, port, &stderr, Duration::from_secs(60))?;
    let pid = guard.child()?.id();
    Ok((guard, stderr, pid))
}

fn run_subject(plan: &Plan, o: &HttpOptions, kind: SubjectKind, dir: &Path) -> Result<EchoRecord> {
    let port = subjects::free_port()?;
    let (mut guard, stderr, pid) = start(plan, kind, dir, port)?;
    let sample = echo_check(port).with_context(|| format!("{} does not echo", kind.name()))?;
    eprintln!("http_echo {}: echoes {sample:?}", kind.name());
    let mut rec = EchoRecord {
        subject: kind.name().into(),
        ..EchoRecord::default()
    };
    let ab = http_peers::ab();
    let wrk = http_peers::wrk();
    let limit = Duration::from_secs(300);
    let mut peak_rss = 0u64;
    let note_rss = |peak: &mut u64| {
        *peak = (*peak).max(procstat::sample(pid).hwm_bytes);
    };
    // Warm-up: the JIT (Finagle is at a third of its speed cold), caches and the accept backlog
    // settle before anything counts. Every subject gets the same: an ab run and a wrk run.
    for w in 0..plan.warmup {
        let args = ab_args(o.ab_concurrency, o.ab_requests, port);
        run_tool(&ab, &args, limit, &dir.join(format!("ab-warmup-{w}.log")))?;
        if wrk.is_file()
            && let Some(&c) = o.wrk_connections.first()
        {
            let args = wrk_args(o, c, port);
            run_tool(&wrk, &args, limit, &dir.join(format!("wrk-warmup-{w}.log")))?;
        }
    }
    for r in 1..=plan.runs {
        let args = ab_args(o.ab_concurrency, o.ab_requests, port);
        let cpu0 = procstat::sample(pid).cpu_secs;
        let text = run_tool(&ab, &args, limit, &dir.join(format!("ab-{r}.log")))?;
        let mut run = parse_ab(&text)?;
        run.server_cpu_secs = procstat::sample(pid).cpu_secs - cpu0;
        note_rss(&mut peak_rss);
        eprintln!(
            "http_echo {} ab run {r}/{}: {:.0} requests/s, {} failed, p99 {}",
            kind.name(),
            plan.runs,
            run.requests_per_sec,
            run.failed,
            run.p99_ms.map_or("-".into(), |v| format!("{v:.0} ms"))
        );
        if let Some(s) = runner::exited(&mut guard, &stderr)? {
            bail!("{s:?}");
        }
        rec.ab.push(run);
    }
    if wrk.is_file() {
        for &c in &o.wrk_connections {
            let args = wrk_args(o, c, port);
            let cpu0 = procstat::sample(pid).cpu_secs;
            let text = run_tool(&wrk, &args, limit, &dir.join(format!("wrk-{c}.log")))?;
            let cpu = procstat::sample(pid).cpu_secs - cpu0;
            let mut run = parse_wrk(&text, c)?;
            if run.requests > 0 {
                run.server_cpu_per_10k = Some(cpu / run.requests as f64 * 10_000.0);
            }
            note_rss(&mut peak_rss);
            eprintln!(
                "http_echo {} wrk -c{c}: {:.0} requests/s, {} socket errors, p99 {}",
                kind.name(),
                run.requests_per_sec,
                run.socket_errors,
                run.p99_ms.map_or("-".into(), |v| format!("{v:.1} ms"))
            );
            if let Some(s) = runner::exited(&mut guard, &stderr)? {
                bail!("{s:?}");
            }
            rec.wrk.push(run);
            // Let the sockets of 10,000 connections close before the next run.
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    rec.peak_rss_bytes = peak_rss;
    guard.terminate(Duration::from_secs(5))?;
    Ok(rec)
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| {
        if v < 10.0 {
            format!("{v:.1}")
        } else {
            format!("{v:.0}")
        }
    })
}

/// The report: ab in the published experiment's table shape, then wrk.
pub fn markdown(plan: &Plan, o: &HttpOptions, records: &[EchoRecord], machine: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "### http_echo: `ab -c {} -n {}` × {} runs (no keep-alive), then `wrk -t{} -d{}s` at -c {}\n",
        o.ab_concurrency,
        o.ab_requests,
        plan.runs,
        o.wrk_threads,
        o.wrk_duration.as_secs(),
        o.wrk_connections
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let node = records
        .iter()
        .find(|r| r.subject == "node" && r.status.is_none());
    let node_ab = node.and_then(EchoRecord::ab_mean);
    let _ = write!(s, "| server | platform |");
    for r in 1..=plan.runs {
        let _ = write!(s, " run {r} |");
    }
    let _ = writeln!(
        s,
        " average req/s | × Node.js | failed | p50 ms | p99 ms | server CPU-s per 10k |"
    );
    let _ = write!(s, "|---|---|");
    for _ in 1..=plan.runs {
        let _ = write!(s, "---:|");
    }
    let _ = writeln!(s, "---:|---:|---:|---:|---:|---:|");
    for r in records {
        let _ = write!(s, "| {} | {} |", r.subject, r.platform);
        if let Some(why) = &r.status {
            for _ in 1..=plan.runs {
                let _ = write!(s, " |");
            }
            let _ = writeln!(s, " {why} | | | | | |");
            continue;
        }
        for a in &r.ab {
            let _ = write!(s, " {} |", human(a.requests_per_sec));
        }
        for _ in r.ab.len()..plan.runs {
            let _ = write!(s, " |");
        }
        let mean = r.ab_mean().unwrap_or(0.0);
        let worst = |f: fn(&AbRun) -> Option<f64>| {
            r.ab.iter()
                .filter_map(f)
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
        };
        let failed: u64 = r.ab.iter().map(|a| a.failed + a.non_2xx).sum();
        let cpu: f64 = r.ab.iter().map(|a| a.server_cpu_secs).sum();
        let done: u64 = r.ab.iter().map(|a| a.complete).sum();
        let _ = writeln!(
            s,
            " **{}** | {} | {} | {} | {} | {} |",
            human(mean),
            node_ab.map_or("-".into(), |n| format!("{:.2}", mean / n)),
            failed,
            ms(worst(|a| a.p50_ms)),
            ms(worst(|a| a.p99_ms)),
            if done > 0 {
                format!("{:.2}", cpu / done as f64 * 10_000.0)
            } else {
                "-".into()
            }
        );
    }
    let _ = writeln!(
        s,
        "\np50/p99: the worst run's, from ab's percentile table (it counts connect time). `failed` \
         adds ab's failed and non-2xx requests over all runs.\n"
    );
    if records.iter().any(|r| !r.wrk.is_empty()) {
        let _ = write!(s, "| server |");
        for c in &o.wrk_connections {
            let _ = write!(
                s,
                " -c {c} req/s | × Node.js | p99 ms | errors | CPU-s/10k |"
            );
        }
        let _ = writeln!(s, " peak RSS |");
        let _ = write!(s, "|---|");
        for _ in &o.wrk_connections {
            let _ = write!(s, "---:|---:|---:|---:|---:|");
        }
        let _ = writeln!(s, "---:|");
        for r in records.iter().filter(|r| r.status.is_none()) {
            let _ = write!(s, "| {} |", r.subject);
            for (i, c) in o.wrk_connections.iter().enumerate() {
                match r.wrk.iter().find(|w| w.connections == *c) {
                    Some(w) => {
                        let node_w = node.and_then(|n| n.wrk.get(i)).map(|n| n.requests_per_sec);
                        let _ = write!(
                            s,
                            " **{}** | {} | {} | {} | {} |",
                            human(w.requests_per_sec),
                            node_w.map_or("-".into(), |n| format!("{:.2}", w.requests_per_sec / n)),
                            ms(w.p99_ms),
                            w.socket_errors + w.non_2xx,
                            w.server_cpu_per_10k
                                .map_or("-".into(), |v| format!("{v:.2}"))
                        );
                    }
                    None => {
                        let _ = write!(s, " - | - | - | - | - |");
                    }
                }
            }
            let _ = writeln!(s, " {:.0} MiB |", r.peak_rss_bytes as f64 / 1_048_576.0);
        }
        let _ = writeln!(
            s,
            "\nerrors: wrk's socket errors (connect, read, write, timeout) plus non-2xx answers.\n"
        );
    }
    let _ = writeln!(s, "Machine: {machine}\n\nCommand: `{}`", plan.command);
    s
}

/// Runs the experiment for every subject in turn and writes `http_echo.md` and `.json`.
///
/// # Errors
/// The results cannot be written, or `ab` is missing.
pub fn run(plan: &Plan, o: &HttpOptions, peers: &Peers) -> Result<String> {
    if !http_peers::ab().is_file() {
        bail!(
            "ab not found at {} (Debian apache2-utils: run scripts/install-peers.sh as root, or \
             set LOGHAUL_AB)",
            http_peers::ab().display()
        );
    }
    let work = std::env::temp_dir().join(format!("loghaul-bench-http_echo-{}", std::process::id()));
    let machine = runner::machine();
    eprintln!(
        "bench http_echo: {} subjects, ab -c {} -n {} × {} (+{} warm-up), wrk at {:?} ({machine})",
        plan.subjects.len(),
        o.ab_concurrency,
        o.ab_requests,
        plan.runs,
        plan.warmup,
        o.wrk_connections
    );
    let mut records = Vec::new();
    for &kind in &plan.subjects {
        let platform = if kind == SubjectKind::Loghaul {
            format!("{} http_server", peers.platform(kind, &plan.loghaul))
        } else if kind == SubjectKind::Eventmachine {
            format!("{}, plain reactor", peers.platform(kind, &plan.loghaul))
        } else {
            http_peers::platform(kind, &peers.ruby)
        };
        let rec = if let Some(why) = plan.scenario.why_not(kind) {
            EchoRecord {
                subject: kind.name().into(),
                platform,
                status: Some(why.into()),
                ..EchoRecord::default()
            }
        } else {
            let dir = work.join(kind.name());
            match run_subject(plan, o, kind, &dir) {
                Ok(mut r) => {
                    r.platform = platform;
                    r
                }
                Err(e) => {
                    eprintln!("http_echo {}: {e:#}", kind.name());
                    EchoRecord {
                        subject: kind.name().into(),
                        platform,
                        status: Some(format!("failed: {e:#}")),
                        ..EchoRecord::default()
                    }
                }
            }
        };
        records.push(rec);
    }
    if !plan.keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    let md = markdown(plan, o, &records, &machine);
    std::fs::create_dir_all(&plan.out)
        .with_context(|| format!("creating {}", plan.out.display()))?;
    let json = serde_json::json!({
        "scenario": "http_echo",
        "machine": machine,
        "command": plan.command,
        "ab_concurrency": o.ab_concurrency,
        "ab_requests": o.ab_requests,
        "runs": plan.runs,
        "warmup": plan.warmup,
        "wrk_connections": o.wrk_connections,
        "wrk_duration_secs": o.wrk_duration.as_secs(),
        "records": records,
    });
    std::fs::write(plan.out.join("http_echo.md"), &md).context("writing http_echo.md")?;
    std::fs::write(
        plan.out.join("http_echo.json"),
        serde_json::to_string_pretty(&json).context("encoding the results")?,
    )
    .context("writing http_echo.json")?;
    Ok(md)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const AB: &str = "Concurrency Level:      2000
Time taken for tests:   0.612 seconds
Complete requests:      8000
Failed requests:        3
   (Connect: 0, Receive: 0, Length: 3, Exceptions: 0)
Non-2xx responses:      2
Requests per second:    13071.90 [#/sec] (mean)
Percentage of the requests served within a certain time (ms)
  50%     45
  66%     52
  99%    151
 100%    210 (longest request)
";

    const WRK: &str = "Running 5s test @ http://127.0.0.1:8080/
  2 threads and 2000 connections
  Latency Distribution
     50%   24.05ms
     75%   30.12ms
     90%   41.00ms
     99%    1.02s
  375000 requests in 5.01s, 50.00MB read
  Socket errors: connect 0, read 12, write 0, timeout 3
  Non-2xx or 3xx responses: 4
Requests/sec:  74850.30
Transfer/sec:      9.98MB
";

    #[test]
    fn ab_report() {
        let r = parse_ab(AB).unwrap();
        assert!((r.requests_per_sec - 13071.90).abs() < 1e-6);
        assert_eq!((r.complete, r.failed, r.non_2xx), (8000, 3, 2));
        assert_eq!((r.p50_ms, r.p99_ms), (Some(45.0), Some(151.0)));
        assert!(parse_ab("apr_socket_recv: Connection reset").is_err());
    }

    #[test]
    fn wrk_report() {
        let r = parse_wrk(WRK, 2000).unwrap();
        assert!((r.requests_per_sec - 74850.30).abs() < 1e-6);
        assert_eq!(r.requests, 375_000);
        assert_eq!(r.socket_errors, 15);
        assert_eq!(r.non_2xx, 4);
        assert!((r.p50_ms.unwrap() - 24.05).abs() < 1e-9);
        assert!((r.p99_ms.unwrap() - 1020.0).abs() < 1e-9);
        assert_eq!(wrk_ms("512.00us"), Some(0.512));
    }
}
