//! `http_client`: the published HTTP-client experiment. Every client moves the same bytes to and
//! from the same local server (the lab's `bench httpd`, started once): a download of one file,
//! and an upload of NDJSON events in batches (one POST per batch over one keep-alive
//! connection). What counts is the client's own wall seconds, CPU seconds and CPU/wall, as in
//! the published experiment's three charts.
//!
//! ```text
//! events.ndjson (N events) ─► batch files (B events each) ─► list file
//!                                   │
//!   curl, Net::HTTP, curb, em-http, requests, urllib3:  CLIENT upload URL LIST
//!   loghaul: file source (events.ndjson from its start) ─► http sink (text = the lines as sent)
//!                                   ▼
//!                      bench httpd (discards, counts bytes)  ─► checked against the file's size
//! ```
//!
//! loghaul has no download side (its sink only sends), so it appears in the upload table only; its
//! CPU includes reading and splitting the file into events, work the other clients skip.

use std::fmt::Write as _;
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use crate::http_peers;
use crate::procstat;
use crate::runner::{self, Plan};
use crate::scenarios::http_echo::run::HttpOptions;
use crate::subjects::{self, Peers, Ready, SubjectKind};

/// One client moving one payload once.
#[derive(Clone, Debug, Serialize)]
pub struct Transfer {
    /// Client name.
    pub subject: String,
    /// `download`, `upload`, or `startup` (an empty download: the runtime's start-up and one
    /// request, which the other two include).
    pub part: &'static str,
    /// Round (0 for warm-up rounds, which the tables leave out).
    pub run: usize,
    /// Whether this was a warm-up.
    pub warmup: bool,
    /// Bytes moved (body bytes).
    pub bytes: u64,
    /// Wall seconds, from start to the client's exit (loghaul: to the last byte received).
    pub wall_secs: f64,
    /// CPU seconds (user + system) of the client process and its children.
    pub cpu_secs: f64,
    /// `None` when it worked; what went wrong otherwise.
    pub error: Option<String>,
}

/// Writes the upload: one events file, the batch files, and the list of batch files. Returns the
/// events file, the list and the total bytes.
fn write_upload(dir: &Path, events: u64, batch: usize) -> Result<(PathBuf, PathBuf, u64)> {
    let all = dir.join("events.ndjson");
    let batches = dir.join("batches");
    std::fs::create_dir_all(&batches).with_context(|| format!("creating {}", batches.display()))?;
    let mut out = BufWriter::new(
        std::fs::File::create(&all).with_context(|| format!("creating {}", all.display()))?,
    );
    let list_path = dir.join("batches.txt");
    let mut list = BufWriter::new(
        std::fs::File::create(&list_path)
            .with_context(|| format!("creating {}", list_path.display()))?,
    );
    let batch = batch.max(1) as u64;
    let mut total = 0u64;
    let mut current: Option<BufWriter<std::fs::File>> = None;
    let mut line = String::with_capacity(256);
    for i in 0..events {
        if i % batch == 0 {
            if let Some(mut f) = current.take() {
                f.flush().context("writing a batch file")?;
            }
            let p = batches.join(format!("batch-{:06}.ndjson", i / batch));
            writeln!(list, "{}", p.display()).context("writing the batch list")?;
            current = Some(BufWriter::new(
                std::fs::File::create(&p).with_context(|| format!("creating {}", p.display()))?,
            ));
        }
        // About 200 bytes of a typical access-log event.
        line.clear();
        let _ = writeln!(
            line,
            "{{\"seq\":{i},\"time\":\"2026-11-25T10:{:02}:{:02}.{:03}Z\",\"host\":\"web-{:02}\",\
             \"level\":\"info\",\"method\":\"GET\",\"path\":\"/api/v1/items/{}\",\"status\":200,\
             \"bytes\":{},\"message\":\"served item {} to client {} in {} ms\"}}",
            (i / 60_000) % 60,
            (i / 1000) % 60,
            i % 1000,
            i % 16,
            i % 100_000,
            (i * 7919) % 65_536,
            i % 100_000,
            (i * 31) % 10_000,
            i % 250
        );
        out.write_all(line.as_bytes()).context("writing events")?;
        if let Some(f) = current.as_mut() {
            f.write_all(line.as_bytes())
                .context("writing a batch file")?;
        }
        total += line.len() as u64;
    }
    if let Some(mut f) = current.take() {
        f.flush().context("writing a batch file")?;
    }
    out.flush().context("writing events")?;
    list.flush().context("writing the batch list")?;
    Ok((all, list_path, total))
}

/// `GET /stats` of the lab server: (POSTs, body bytes) so far.
fn stats(port: u16) -> Result<(u64, u64)> {
    let body = crate::httpd::get(port, "/stats")?;
    let v: serde_json::Value = serde_json::from_str(body.trim())
        .with_context(|| format!("the lab server's stats: {body:?}"))?;
    Ok((
        v["requests"].as_u64().unwrap_or(0),
        v["bytes"].as_u64().unwrap_or(0),
    ))
}

fn run_client(
    kind: SubjectKind,
    part: &'static str,
    args: &[String],
    dir: &Path,
    tag: &str,
) -> Result<(f64, f64)> {
    let (program, mut full) = http_peers::client(kind)?;
    full.extend(args.iter().cloned());
    let err_path = dir.join(format!("{}-{part}-{tag}.stderr", kind.name()));
    let err = std::fs::File::create(&err_path)
        .with_context(|| format!("creating {}", err_path.display()))?;
    let start = Instant::now();
    let mut child = Command::new(&program)
        .args(&full)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    let (status, cpu) = procstat::wait_with_cpu(&mut child, Duration::from_secs(900))?;
    let wall = start.elapsed().as_secs_f64();
    if !status.success() {
        bail!(
            "{} {part} exited with {status}: {}",
            kind.name(),
            runner::tail_of(&err_path)
        );
    }
    Ok((wall, cpu))
}

fn loghaul_upload_config(events: &Path, data: &Path, api: u16, port: u16, batch: usize) -> String {
    format!(
        "# http_client: loghaul's http sink uploading the events file, one POST per {batch} events,\n\
         # over one keep-alive connection like the other clients.\n\
         data_dir: \"{data}\"\n\
         api:\n  address: \"127.0.0.1:{api}\"\n\
         sources:\n  events:\n    type: file\n    include: [\"{events}\"]\n    read_from: beginning\n\
         sinks:\n  upload:\n    type: http\n    inputs: [events]\n    uri: \"http://127.0.0.1:{port}/upload\"\n    \
         encoding: text\n    compression: none\n    max_events: {batch}\n    max_bytes: 64MiB\n    \
         timeout: 100ms\n    concurrency: 1\n    headers:\n      Content-Type: application/x-ndjson\n",
        data = data.display(),
        events = events.display(),
    )
}

/// loghaul's upload: start it, wait until the lab server has every byte, read its CPU, stop it.
fn loghaul_upload(
    plan: &Plan,
    events: &Path,
    total: u64,
    port: u16,
    o: &HttpOptions,
    dir: &Path,
    tag: &str,
) -> Result<(f64, f64)> {
    let run_dir = dir.join(format!("loghaul-{tag}"));
    let _ = std::fs::remove_dir_all(&run_dir);
    std::fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
    let api = subjects::free_port()?;
    let conf = run_dir.join("loghaul.yaml");
    std::fs::write(
        &conf,
        loghaul_upload_config(events, &run_dir.join("data"), api, port, o.upload_batch),
    )
    .with_context(|| format!("writing {}", conf.display()))?;
    let (_, before) = stats(port)?;
    let stderr = run_dir.join("stderr.log");
    let start = Instant::now();
    let mut guard = runner::spawn(
        &plan.loghaul,
        &["run".into(), "-c".into(), conf.display().to_string()],
        &[],
        &run_dir,
        &run_dir.join("stdout.log"),
        &stderr,
    )?;
    let pid = guard.child()?.id();
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut last = (Instant::now(), 0u64);
    loop {
        let (_, now) = stats(port)?;
        if now - before >= total {
            break;
        }
        if let Some(s) = runner::exited(&mut guard, &stderr)? {
            bail!("{s:?}");
        }
        if now != last.1 {
            last = (Instant::now(), now);
        } else if last.0.elapsed() > plan.idle_timeout || Instant::now() >= deadline {
            bail!(
                "stalled at {} of {total} bytes; stderr: {}",
                now - before,
                runner::tail_of(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let wall = start.elapsed().as_secs_f64();
    // Every thread is alive here, so their nanosecond counters are the whole process.
    let cpu = procstat::precise_cpu_secs(pid).unwrap_or(0.0);
    guard.terminate(Duration::from_secs(10))?;
    // The clock runs from the process's start, as for the other clients: start-up is theirs too.
    Ok((wall, cpu))
}

/// Runs the experiment and writes `http_client.md`, `.json` and `.svg`.
///
/// # Errors
/// The payload or the results cannot be written, or the lab server does not start.
pub fn run(plan: &Plan, o: &HttpOptions, peers: &Peers) -> Result<String> {
    let work =
        std::env::temp_dir().join(format!("loghaul-bench-http_client-{}", std::process::id()));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let machine = runner::machine();
    eprintln!(
        "bench http_client: {} subjects × {} runs (+{} warm-up): download {} bytes, upload {} \
         events in batches of {} ({machine})",
        plan.subjects.len(),
        plan.runs,
        plan.warmup,
        o.download_bytes,
        o.upload_events,
        o.upload_batch
    );
    let result = run_in(plan, o, peers, &work, &machine);
    if !plan.keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    result
}

fn run_in(
    plan: &Plan,
    o: &HttpOptions,
    peers: &Peers,
    work: &Path,
    machine: &str,
) -> Result<String> {
    let (events, list, total) = write_upload(work, o.upload_events, o.upload_batch)?;
    eprintln!(
        "http_client: {total} bytes of NDJSON in {}",
        events.display()
    );
    let port = subjects::free_port()?;
    let server = subjects::Companion {
        name: "httpd".into(),
        program: plan.loghaul.clone(),
        args: vec![
            "bench".into(),
            "httpd".into(),
            "--port".into(),
            port.to_string(),
            "--download-bytes".into(),
            o.download_bytes.to_string(),
        ],
        port,
        ready: Ready::Connect,
    };
    let (mut server_guard, _) = runner::start_companion(&server, work)?;
    let url_down = format!("http://127.0.0.1:{port}/download");
    let url_empty = format!("http://127.0.0.1:{port}/empty");
    let url_up = format!("http://127.0.0.1:{port}/upload");
    let mut transfers: Vec<Transfer> = Vec::new();
    let rounds: Vec<(usize, bool)> = (1..=plan.warmup)
        .map(|w| (w, true))
        .chain((1..=plan.runs).map(|r| (r, false)))
        .collect();
    let mut unsupported: Vec<(SubjectKind, &'static str)> = Vec::new();
    for &kind in &plan.subjects {
        if let Some(why) = plan.scenario.why_not(kind) {
            unsupported.push((kind, why));
        }
    }
    for &(run, warmup) in &rounds {
        for &kind in &plan.subjects {
            if plan.scenario.why_not(kind).is_some() {
                continue;
            }
            let tag = if warmup {
                format!("warmup{run}")
            } else {
                format!("{run}")
            };
            for part in ["startup", "download", "upload"] {
                if part != "upload" && kind == SubjectKind::Loghaul {
                    continue;
                }
                let outcome: Result<(f64, f64, u64)> = (|| {
                    if part == "startup" {
                        let out = work.join(format!("{}-empty.bin", kind.name()));
                        let (wall, cpu) = run_client(
                            kind,
                            "download",
                            &[
                                "download".into(),
                                url_empty.clone(),
                                out.display().to_string(),
                            ],
                            work,
                            &tag,
                        )?;
                        let _ = std::fs::remove_file(&out);
                        Ok((wall, cpu, 0))
                    } else if part == "download" {
                        let out = work.join(format!("{}-download.bin", kind.name()));
                        let _ = std::fs::remove_file(&out);
                        let (wall, cpu) = run_client(
                            kind,
                            part,
                            &[
                                "download".into(),
                                url_down.clone(),
                                out.display().to_string(),
                            ],
                            work,
                            &tag,
                        )?;
                        let got = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
                        let _ = std::fs::remove_file(&out);
                        if got != o.download_bytes as u64 {
                            bail!("downloaded {got} bytes of {}", o.download_bytes);
                        }
                        Ok((wall, cpu, got))
                    } else {
                        let (_, before) = stats(port)?;
                        let (wall, cpu) = if kind == SubjectKind::Loghaul {
                            loghaul_upload(plan, &events, total, port, o, work, &tag)?
                        } else {
                            run_client(
                                kind,
                                part,
                                &["upload".into(), url_up.clone(), list.display().to_string()],
                                work,
                                &tag,
                            )?
                        };
                        let (_, after) = stats(port)?;
                        if after - before != total {
                            bail!("the server received {} bytes of {total}", after - before);
                        }
                        Ok((wall, cpu, total))
                    }
                })();
                let t = match outcome {
                    Ok((wall, cpu, bytes)) => Transfer {
                        subject: kind.name().into(),
                        part,
                        run,
                        warmup,
                        bytes,
                        wall_secs: wall,
                        cpu_secs: cpu,
                        error: None,
                    },
                    Err(e) => Transfer {
                        subject: kind.name().into(),
                        part,
                        run,
                        warmup,
                        bytes: 0,
                        wall_secs: 0.0,
                        cpu_secs: 0.0,
                        error: Some(format!("{e:#}")),
                    },
                };
                eprintln!(
                    "http_client {} {part} {}{run}: {}",
                    kind.name(),
                    if warmup { "warm-up " } else { "run " },
                    match &t.error {
                        Some(e) => format!("FAILED: {e}"),
                        None => format!(
                            "{:.3}s wall, {:.3}s CPU ({:.2} CPU/wall)",
                            t.wall_secs,
                            t.cpu_secs,
                            t.cpu_secs / t.wall_secs.max(1e-9)
                        ),
                    }
                );
                transfers.push(t);
            }
        }
    }
    server_guard.terminate(Duration::from_secs(5))?;
    let platforms: Vec<(SubjectKind, String)> = plan
        .subjects
        .iter()
        .map(|&k| {
            let p = if k == SubjectKind::Loghaul {
                format!("{} http sink", peers.platform(k, &plan.loghaul))
            } else {
                http_peers::platform(k, &peers.ruby)
            };
            (k, p)
        })
        .collect();
    let md = markdown(
        plan,
        o,
        total,
        &transfers,
        &platforms,
        &unsupported,
        machine,
    );
    std::fs::create_dir_all(&plan.out)
        .with_context(|| format!("creating {}", plan.out.display()))?;
    let json = serde_json::json!({
        "scenario": "http_client",
        "machine": machine,
        "command": plan.command,
        "download_bytes": o.download_bytes,
        "upload_events": o.upload_events,
        "upload_batch": o.upload_batch,
        "upload_bytes": total,
        "runs": plan.runs,
        "warmup": plan.warmup,
        "transfers": transfers,
    });
    std::fs::write(plan.out.join("http_client.md"), &md).context("writing http_client.md")?;
    std::fs::write(
        plan.out.join("http_client.json"),
        serde_json::to_string_pretty(&json).context("encoding the results")?,
    )
    .context("writing http_client.json")?;
    std::fs::write(
        plan.out.join("http_client.svg"),
        svg(
            &transfers,
            &format!("loghaul bench: http_client ({machine})"),
        ),
    )
    .context("writing http_client.svg")?;
    Ok(md)
}

/// Means over the measured runs of one client and part: (wall, cpu, bytes, failures, runs).
fn means(transfers: &[Transfer], subject: &str, part: &str) -> Option<(f64, f64, u64, usize)> {
    let ok: Vec<&Transfer> = transfers
        .iter()
        .filter(|t| !t.warmup && t.subject == subject && t.part == part && t.error.is_none())
        .collect();
    let failed = transfers
        .iter()
        .filter(|t| !t.warmup && t.subject == subject && t.part == part && t.error.is_some())
        .count();
    if ok.is_empty() {
        return None;
    }
    let n = ok.len() as f64;
    Some((
        ok.iter().map(|t| t.wall_secs).sum::<f64>() / n,
        ok.iter().map(|t| t.cpu_secs).sum::<f64>() / n,
        ok[0].bytes,
        failed,
    ))
}

#[allow(clippy::too_many_arguments)]
fn markdown(
    plan: &Plan,
    o: &HttpOptions,
    upload_bytes: u64,
    transfers: &[Transfer],
    platforms: &[(SubjectKind, String)],
    unsupported: &[(SubjectKind, &'static str)],
    machine: &str,
) -> String {
    let mut s = String::new();
    for (part, what) in [
        (
            "download",
            format!("download of a {:.1} MB file", o.download_bytes as f64 / 1e6),
        ),
        (
            "upload",
            format!(
                "upload of {} events ({:.1} MB of NDJSON) in POSTs of {} events",
                o.upload_events,
                upload_bytes as f64 / 1e6,
                o.upload_batch
            ),
        ),
    ] {
        let _ = writeln!(
            s,
            "### http_client: {what}, mean of {} runs\n\n| client | platform | wall s | CPU s | \
             CPU/wall | CPU-s per GB | CPU × curl's | start-up CPU s | CPU-s per GB net of \
             start-up |\n|---|---|---:|---:|---:|---:|---:|---:|---:|",
            plan.runs
        );
        let curl = means(transfers, "curl", part);
        for (kind, platform) in platforms {
            let name = kind.name();
            if let Some((_, why)) = unsupported.iter().find(|(k, _)| k == kind) {
                let _ = writeln!(s, "| {name} | {platform} | {why} | | | | | | |");
                continue;
            }
            if part == "download" && *kind == SubjectKind::Loghaul {
                let _ = writeln!(
                    s,
                    "| {name} | {platform} | n/a: the sink only sends | | | | | | |"
                );
                continue;
            }
            match means(transfers, name, part) {
                Some((wall, cpu, bytes, failed)) => {
                    let gb = (bytes as f64 / 1e9).max(1e-12);
                    let startup = means(transfers, name, "startup").map(|m| m.1);
                    let _ = writeln!(
                        s,
                        "| {name} | {platform} | {wall:.3} | **{cpu:.3}** | {:.2} | {:.2} | {} | {} | {} |{}",
                        cpu / wall.max(1e-9),
                        cpu / gb,
                        curl.filter(|c| c.1 >= 0.01)
                            .map_or("-".into(), |c| format!("{:.2}", cpu / c.1)),
                        startup.map_or("-".into(), |v| format!("{v:.3}")),
                        startup.map_or("-".into(), |v| format!("{:.2}", (cpu - v).max(0.0) / gb)),
                        if failed > 0 {
                            format!(" {failed} run(s) failed")
                        } else {
                            String::new()
                        }
                    );
                }
                None => {
                    let why = transfers
                        .iter()
                        .find(|t| t.subject == name && t.part == part)
                        .and_then(|t| t.error.clone())
                        .unwrap_or_else(|| "no run".into());
                    let _ = writeln!(s, "| {name} | {platform} | failed: {why} | | | | | | |");
                }
            }
        }
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "CPU: user + system seconds of the client process and its children, from /proc: the larger \
         of its 10ms ticks and its threads' nanosecond counters, start-up included; `start-up CPU` is the same client fetching an empty body (the \
         runtime starting, one connection, one request), subtracted in the last column. loghaul's upload includes reading the events file and splitting it into events; \
         its sink sends them with `encoding: text`, one connection (`concurrency: 1`), so the \
         bytes on the wire are the same as the others'.\n\nMachine: {machine}\n\nCommand: `{}`",
        plan.command
    );
    s
}

/// Three panels per part (wall, CPU, CPU/wall), as the published experiment's three charts.
fn svg(transfers: &[Transfer], title: &str) -> String {
    let mut subjects: Vec<&str> = Vec::new();
    for t in transfers {
        if !subjects.contains(&t.subject.as_str()) {
            subjects.push(&t.subject);
        }
    }
    let bar_h = 18.0;
    let label_w = 90.0;
    let panel_w = 230.0;
    let gap = 40.0;
    let block_h = 40.0 + subjects.len() as f64 * (bar_h + 6.0);
    let width = label_w + 3.0 * (panel_w + gap);
    let height = 40.0 + 2.0 * block_h + 20.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>",
        title.replace('&', "&amp;").replace('<', "&lt;")
    );
    type Metric = fn(f64, f64) -> f64;
    let panels: [(&str, Metric); 3] = [
        ("wall s", |w, _| w),
        ("CPU s", |_, c| c),
        ("CPU/wall", |w, c| c / w.max(1e-9)),
    ];
    for (b, part) in ["download", "upload"].iter().enumerate() {
        let part: &str = part;
        let y0 = 40.0 + b as f64 * block_h;
        let rows: Vec<(&str, Option<(f64, f64)>)> = subjects
            .iter()
            .map(|&n| (n, means(transfers, n, part).map(|(w, c, ..)| (w, c))))
            .collect();
        for (p, (name, f)) in panels.iter().enumerate() {
            let x0 = label_w + p as f64 * (panel_w + gap);
            let max = rows
                .iter()
                .filter_map(|(_, v)| v.map(|(w, c)| f(w, c)))
                .fold(f64::MIN_POSITIVE, f64::max);
            let _ = writeln!(
                s,
                "<text x=\"{x0}\" y=\"{}\" font-weight=\"bold\">{part}: {name}</text>",
                y0 + 14.0
            );
            for (i, (subject, v)) in rows.iter().enumerate() {
                let y = y0 + 24.0 + i as f64 * (bar_h + 6.0);
                if p == 0 {
                    let _ = writeln!(
                        s,
                        "<text x=\"8\" y=\"{}\">{subject}</text>",
                        y + bar_h * 0.7
                    );
                }
                if let Some((w, c)) = v {
                    let val = f(*w, *c);
                    let len = (val / max * (panel_w - 50.0)).max(1.0);
                    let _ = writeln!(
                        s,
                        "<rect x=\"{x0}\" y=\"{y}\" width=\"{len:.1}\" height=\"{bar_h}\" \
                         fill=\"{}\"/><text x=\"{:.1}\" y=\"{}\">{val:.2}</text>",
                        if *subject == "loghaul" {
                            "#c05621"
                        } else {
                            "#2b6cb0"
                        },
                        x0 + len + 4.0,
                        y + bar_h * 0.7
                    );
                }
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_upload_is_split_into_batches_that_add_up() {
        let dir = tempfile::tempdir().unwrap();
        let (all, list, total) = write_upload(dir.path(), 2_500, 1_000).unwrap();
        let whole = std::fs::read(&all).unwrap();
        assert_eq!(whole.len() as u64, total);
        let files: Vec<String> = std::fs::read_to_string(&list)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(files.len(), 3);
        let joined: Vec<u8> = files
            .iter()
            .flat_map(|f| std::fs::read(f).unwrap())
            .collect();
        assert_eq!(joined, whole);
        let first: serde_json::Value =
            serde_json::from_slice(whole.split(|&b| b == b'\n').next().unwrap()).unwrap();
        assert_eq!(first["seq"], 0);
        let per_event = total / 2_500;
        assert!(
            (150..=260).contains(&per_event),
            "{per_event} bytes per event"
        );
    }
}
