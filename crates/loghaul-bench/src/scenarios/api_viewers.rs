//! `api_viewers`: what watching a running loghaul costs it. loghaul (a syslog source into a
//! file, no load) is measured for a window alone, then for a window with 10 viewers each asking
//! `GET /graph` once a second (what `loghaul top` and the browser console ask), and the CPU the
//! viewers added is reported as a share of one core.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use super::{Scenario, one_process_reason};
use crate::payload::{Format, Framing};
use crate::runner::{self, Plan};
use crate::subjects::{Input, Peers, SubjectKind};

/// Viewers at once, each asking once a second.
pub const VIEWERS: usize = 10;
/// How long each window (alone, watched) is measured.
const WINDOW: Duration = Duration::from_secs(15);

/// 10 viewers of one loghaul.
pub struct ApiViewers;

impl Scenario for ApiViewers {
    fn name(&self) -> &'static str {
        "api_viewers"
    }

    fn about(&self) -> &'static str {
        "What 10 viewers of the API (`GET /graph` once a second each, as `loghaul top` and the \
         console ask) cost an idle loghaul, as a share of one core"
    }

    /// No events: the load is the viewers.
    fn default_events(&self) -> u64 {
        0
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
        &[SubjectKind::Loghaul]
    }

    fn default_subjects(&self) -> &'static [SubjectKind] {
        &[SubjectKind::Loghaul]
    }

    fn unsupported(&self, kind: SubjectKind) -> &'static str {
        one_process_reason(kind, false)
    }

    fn run(&self, plan: &Plan, peers: &Peers) -> Result<String> {
        let work = runner::work_dir(plan)?;
        let dir = work.join("loghaul");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let launch = self.prepare(SubjectKind::Loghaul, &dir, peers, &plan.loghaul)?;
        let Some((api, _)) = launch.live else {
            anyhow::bail!("the loghaul subject has no API");
        };
        let stderr = dir.join("stderr.log");
        let mut guard = runner::spawn(
            &launch.program,
            &launch.args,
            &launch.env,
            &dir,
            &dir.join("stdout.log"),
            &stderr,
        )?;
        runner::wait_ready(
            &mut guard,
            &launch.ready,
            launch.input_port,
            &stderr,
            Duration::from_secs(30),
        )?;
        let pid = guard.child()?.id();
        // Let start-up work (page faults, the first flushes) settle.
        std::thread::sleep(Duration::from_secs(2));
        let cpu = || crate::procstat::sample(pid).cpu_secs;
        let mut rows = Vec::new();
        for run in 1..=plan.runs {
            let t0 = Instant::now();
            let c0 = cpu();
            std::thread::sleep(WINDOW);
            let alone = (cpu() - c0) / t0.elapsed().as_secs_f64();
            let stop = Arc::new(AtomicBool::new(false));
            let answered = Arc::new(AtomicU64::new(0));
            let viewers: Vec<_> = (0..VIEWERS)
                .map(|i| {
                    let (stop, answered) = (stop.clone(), answered.clone());
                    std::thread::spawn(move || {
                        // Spread over the second, as independent viewers would be.
                        std::thread::sleep(Duration::from_millis(100 * i as u64));
                        while !stop.load(Ordering::Relaxed) {
                            if graph(api) {
                                answered.fetch_add(1, Ordering::Relaxed);
                            }
                            std::thread::sleep(Duration::from_secs(1));
                        }
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_secs(1));
            let t0 = Instant::now();
            let c0 = cpu();
            let a0 = answered.load(Ordering::Relaxed);
            std::thread::sleep(WINDOW);
            let watched = (cpu() - c0) / t0.elapsed().as_secs_f64();
            let requests = answered.load(Ordering::Relaxed) - a0;
            stop.store(true, Ordering::Relaxed);
            for v in viewers {
                let _ = v.join();
            }
            eprintln!(
                "[{run}/{}] api_viewers: alone {:.3}% of a core, with {VIEWERS} viewers {:.3}% ({requests} requests answered)",
                plan.runs,
                alone * 100.0,
                watched * 100.0
            );
            rows.push((alone, watched, requests));
        }
        guard.terminate(Duration::from_secs(20))?;
        if !plan.keep {
            let _ = std::fs::remove_dir_all(&work);
        }
        let mut md = String::new();
        let _ = writeln!(
            md,
            "### `api_viewers`: {VIEWERS} viewers asking `GET /graph` once a second, {}s \
             windows, {} runs\n\n| run | loghaul alone (% of a core) | with the viewers | \
             added by the viewers | requests answered |\n|---|---:|---:|---:|---:|",
            WINDOW.as_secs(),
            plan.runs
        );
        for (i, (alone, watched, requests)) in rows.iter().enumerate() {
            let _ = writeln!(
                md,
                "| {} | {:.3} | {:.3} | **{:.3}** | {requests} |",
                i + 1,
                alone * 100.0,
                watched * 100.0,
                (watched - alone) * 100.0
            );
        }
        let json = serde_json::json!({
            "scenario": "api_viewers",
            "viewers": VIEWERS,
            "window_secs": WINDOW.as_secs(),
            "command": plan.command,
            "runs": rows.iter().map(|(a, w, r)| serde_json::json!({
                "alone_core_share": a, "watched_core_share": w, "requests": r
            })).collect::<Vec<_>>(),
        });
        std::fs::create_dir_all(&plan.out)
            .with_context(|| format!("creating {}", plan.out.display()))?;
        std::fs::write(plan.out.join("api_viewers.md"), &md).context("writing the report")?;
        std::fs::write(
            plan.out.join("api_viewers.json"),
            serde_json::to_string_pretty(&json)?,
        )
        .context("writing the report")?;
        Ok(md)
    }
}

/// One viewer's request: `GET /graph`, read to the end; whether it was answered with 200.
fn graph(api: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", api)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET /graph HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    answer.starts_with(b"HTTP/1.1 200")
}
