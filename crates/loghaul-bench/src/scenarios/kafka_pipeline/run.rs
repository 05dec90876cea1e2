//! `bench run kafka_pipeline`: loghaul on both sides of a real Kafka broker, beside Kafka's own
//! perf tools on the same broker, in the same rounds.
//!
//! ```text
//!  generator ─TCP syslog─► A: syslog → kafka sink ─► broker (one KRaft node) ─► topic, 4 partitions
//!                                                                               │
//!       out-1.jsonl ◄─ file sink ◄─ kafka source: consumer 1 ┐ one consumer ◄──┘
//!       out-2.jsonl ◄─ file sink ◄─ kafka source: consumer 2 ┘ group
//!          ▲ watchers (arrival, latency samples), books when quiet; lag from their APIs
//! ```
//!
//! One broker serves the whole `bench run` ([`Broker`]), so that the warm-up round warms its JIT
//! as well, and every round runs six phases on topics of its own, deleted after the round:
//!
//! 1. `sink`: A alone produces the N numbered events into the round's topic; the clock runs from
//!    the generator's start to A's `loghaul_component_sent_events_total` reaching N (the sink
//!    counts a batch once the broker acknowledged all of it, with `acks: all`).
//! 2. `ProducerPerformance`: Kafka's producer perf tool appends N records of the sink's average
//!    event size to the same topic, with the sink's producer settings ([`KAFKA_PRODUCER`]); its
//!    rate is its own report's. It runs after the consumers below, which read the first N.
//! 3. `source`: consumers 1 and 2, started together in a new group, read the N events already in
//!    the topic into their files; the clock runs from the first event written to the last, and
//!    the group's join (start to first event) is reported beside it.
//! 4. `ConsumerPerformance`: Kafka's consumer perf tool (one consumer) reads the same N events;
//!    its rate is its fetch rate, which leaves its join out as well.
//! 5. `end-to-end`: both consumers start on a fresh topic and are assigned its partitions (their
//!    logs say so) before A starts and the load begins; the clock runs from the generator's start
//!    to the last event written.
//! 6. `consumer-killed`: as 5 on another fresh topic, the load paced to last at least 2 s
//!    ([`KILL_LOAD`]), and consumer 1 killed (SIGKILL) once the files hold about a third of the
//!    events. Consumer 2 takes its partitions over when its session times out (6 s), and reads
//!    again what consumer 1 had written but not yet committed: duplicates, reported (the
//!    pipeline is at least once); a loss is a failure of loghaul.
//!
//! Loss and duplicates are the lab's exact books of every numbered event in both files
//! ([`Books`]), read only while the files are quiet. The consumers' lag
//! (`loghaul_kafka_consumer_lag`: librdkafka's statistics, refreshed every second and counted
//! from the committed offsets) is sampled from their APIs every 500 ms. CPU is that of loghaul's
//! processes in the phase; the broker's is read separately (CPU per second of the phase), and a
//! tool's is its whole JVM, start-up included. Everything, the generator included, shares the
//! machine's cores.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::KAFKA_PRODUCER;
use crate::generator::{self, GenConfig, GenStats};
use crate::kafka::{self, Broker};
use crate::meter::{Books, Tracker};
use crate::payload::now_micros;
use crate::procstat;
use crate::progress::human;
use crate::report::{self, RunRecord, Status};
use crate::runner::{self, ChildGuard, Plan};
use crate::subjects::{self, Companion, Peers, Ready, SubjectKind};
use crate::target::{TargetOptions, TargetUrl};
use crate::watch::Watcher;

/// Partitions of every topic the scenario makes: two per consumer.
pub const PARTITIONS: u32 = 4;
/// The table's rows, one per phase, in the table's order.
pub const SINK: &str = "sink";
/// Kafka's producer perf tool.
pub const PRODUCER_PERF: &str = "ProducerPerformance";
/// Two loghaul consumers reading a full topic.
pub const SOURCE: &str = "source";
/// Kafka's consumer perf tool.
pub const CONSUMER_PERF: &str = "ConsumerPerformance";
/// syslog → A → broker → consumers → files, all running.
pub const END_TO_END: &str = "end-to-end";
/// As `end-to-end`, with consumer 1 killed mid-run.
pub const KILLED: &str = "consumer-killed";
const ROWS: [&str; 6] = [
    SINK,
    PRODUCER_PERF,
    SOURCE,
    CONSUMER_PERF,
    END_TO_END,
    KILLED,
];

/// How often the consumers' lag is read.
const LAG_EVERY: Duration = Duration::from_millis(500);
/// How long the files must have been quiet before the books are read.
const QUIET: Duration = Duration::from_millis(100);
/// The broker's wait before a new group's first rebalance: two consumers started together join
/// in one, instead of the first reading alone until the second's arrival takes half of its
/// partitions away (Kafka's default is 3 s; the tests' broker has none).
const INITIAL_REBALANCE_DELAY: &str = "group.initial.rebalance.delay.ms=1000";
/// After the last event is written, how long the consumers' lag may take to read 0: they
/// commit every second, and librdkafka's statistics come every second.
const SETTLE_WITHIN: Duration = Duration::from_secs(3);
/// How long a group may take to hand out the topic's partitions.
const ASSIGNED_WITHIN: Duration = Duration::from_secs(30);
/// `consumer-killed`'s load lasts at least this long (it is paced to N ÷ this per second), so
/// that a small run has a middle to kill a consumer in; a full-size one, whose pipeline runs
/// below that pace, is not held back by it.
const KILL_LOAD: Duration = Duration::from_secs(2);
/// The scenario's name (its results' file names, its records).
const NAME: &str = "kafka_pipeline";
/// loghaul's goal on each side of the broker, events per second.
const GOAL_RATE: f64 = 1_000_000.0;
const SENT: &str = "loghaul_component_sent_events_total";
const SENT_BYTES: &str = "loghaul_component_sent_bytes_total";
const LAG: &str = "loghaul_kafka_consumer_lag";

/// What a `kafka_pipeline` run records beside the common columns.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct KafkaRecord {
    /// The broker's CPU seconds per second of the phase's clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker_cpu_per_wall: Option<f64>,
    /// `sink`: bytes per message the sink produced (its sent bytes ÷ events); the record size
    /// given to `ProducerPerformance`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_event: Option<f64>,
    /// `source`: from the consumers' start to their first event written; `ConsumerPerformance`:
    /// its own rebalance time. Left out of the rate in both.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join_secs: Option<f64>,
    /// `ProducerPerformance`: its send-to-acknowledgement latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_latency_ms: Option<Percentiles>,
    /// The consumers' lag, every 500 ms of the phase.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lag: Vec<LagSample>,
    /// `consumer-killed`: when and how consumer 1 was killed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kill: Option<Kill>,
}

/// Latency percentiles, in milliseconds.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// One reading of the consumers' lag.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LagSample {
    /// Seconds since the phase's clock started.
    pub t_secs: f64,
    /// Messages not yet committed, per consumer (`None`: no answer, as from a killed one).
    pub lag: Vec<Option<u64>>,
}

/// A consumer killed mid-run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Kill {
    /// Seconds after the generator's start.
    pub at_secs: f64,
    /// About how many events the files held then (the watchers' estimate).
    pub written_before: u64,
    /// Distinct events in the killed consumer's file.
    pub killed_wrote: u64,
    /// From the kill to the other consumer's next assignment (its log), in seconds.
    pub takeover_secs: Option<f64>,
}

/// The key of a record's [`KafkaRecord`] in its `extra` (and so in the raw runs' JSON).
const KEY: &str = "kafka";

/// The [`KafkaRecord`] of a record, if it has one.
fn kafka_of(r: &RunRecord) -> Option<KafkaRecord> {
    r.extra
        .get(KEY)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// Gives `r` its [`KafkaRecord`].
fn set_kafka(r: &mut RunRecord, k: KafkaRecord) {
    if let Ok(v) = serde_json::to_value(k) {
        r.extra.insert(KEY.into(), v);
    }
}

/// Runs the rounds of `kafka_pipeline` and writes the results; returns the Markdown.
///
/// # Errors
/// Another subject than loghaul was asked for, the broker cannot be installed or started, or the
/// results cannot be written. A phase that fails is a row saying so.
pub fn run(plan: &Plan, peers: &Peers) -> Result<String> {
    if plan.subjects.iter().any(|&k| k != SubjectKind::Loghaul) {
        bail!(
            "`kafka_pipeline` runs the subject loghaul only (--subjects loghaul): its peers are \
             Kafka's own perf tools, run in every round"
        );
    }
    if plan.events == 0 {
        bail!("--events must be at least 1");
    }
    if !kafka::installed() {
        bail!(
            "`kafka_pipeline` needs the Kafka broker in {} (sudo scripts/install-kafka.sh, or \
             set LOGHAUL_KAFKA_LIB)",
            kafka::lib_dir().display()
        );
    }
    let work = std::env::temp_dir().join(format!("loghaul-bench-{}-{}", NAME, std::process::id()));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let machine = runner::machine();
    eprintln!(
        "bench kafka_pipeline: {} runs after {} warm-up round(s), {} events per phase, {} \
         connections, topics of {PARTITIONS} partitions ({machine})",
        plan.runs, plan.warmup, plan.events, plan.connections,
    );
    let records = rounds(plan, peers, &work);
    if !plan.keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    let records = records?;
    let names: Vec<String> = ROWS.iter().map(|s| (*s).to_string()).collect();
    let notes = notes(&records);
    let cx = report::Context {
        scenario: NAME,
        events: plan.events,
        runs: plan.runs,
        warmup: plan.warmup,
        machine: &machine,
        command: &plan.command,
        notes: &notes,
    };
    report::write_all(&plan.out, &cx, &records, &names)
}

/// The platform column of each row.
fn platforms(peers: &Peers, loghaul: &Path) -> [String; 6] {
    let me = peers.platform(SubjectKind::Loghaul, loghaul);
    let java = java_version().unwrap_or_else(|| "?".into());
    let tool = |name: &str| format!("Apache Kafka {} {name} (Java {java})", kafka::VERSION);
    [
        format!("{me}: syslog → kafka sink (librdkafka), acks all, idempotent"),
        format!(
            "{}, acks all, idempotent, the sink's batching",
            tool("ProducerPerformance")
        ),
        format!("{me}: 2 kafka sources, one group → 2 JSON-lines files"),
        format!(
            "{}: 1 consumer, nothing written",
            tool("ConsumerPerformance")
        ),
        format!("{me}: A → broker → 2 consumers → files"),
        format!("{me}: as end-to-end, consumer 1 killed (SIGKILL) at about 1/3"),
    ]
}

/// `17.0.15` from `java -version`.
fn java_version() -> Option<String> {
    let out = Command::new("java").arg("-version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stderr);
    let line = text.lines().next()?;
    Some(line.split('"').nth(1)?.to_string())
}

/// Starts the broker, runs every round, stops the broker.
fn rounds(plan: &Plan, peers: &Peers, work: &Path) -> Result<Vec<RunRecord>> {
    let started = Instant::now();
    let mut broker = Broker::start(
        &work.join("broker"),
        &["auto.create.topics.enable=false", INITIAL_REBALANCE_DELAY],
    )
    .context("starting the Kafka broker")?;
    eprintln!(
        "kafka_pipeline: broker {} up on {} in {:.1}s",
        kafka::VERSION,
        broker.address(),
        started.elapsed().as_secs_f64()
    );
    let platforms = platforms(peers, &plan.loghaul);
    let rounds: Vec<(usize, bool)> = (1..=plan.warmup)
        .map(|w| (w, true))
        .chain((1..=plan.runs).map(|r| (r, false)))
        .collect();
    let mut records = Vec::new();
    let mut configs_saved = false;
    for (i, &(run, warmup)) in rounds.iter().enumerate() {
        let (what, of, dir_name) = if warmup {
            ("warm-up", plan.warmup, format!("warmup{run}"))
        } else {
            ("run", plan.runs, format!("run{run}"))
        };
        let label = format!(
            "[{}/{}] kafka_pipeline {what} {run}/{of}",
            i + 1,
            rounds.len()
        );
        let prefix = format!("r{}", i + 1);
        let dir = work.join(&dir_name);
        let mut round = one_round(plan, &broker, &prefix, &dir, &label);
        for (r, platform) in round.iter_mut().zip(&platforms) {
            r.run = run;
            r.warmup = warmup;
            r.platform = platform.clone();
            eprintln!("{label} {}: {}", r.subject, describe(r));
        }
        if !warmup && !configs_saved {
            configs_saved = true;
            save_configs(&broker, &dir, &plan.out);
        }
        // The round's gigabytes go with it: the next round's broker writes into the same page
        // cache and disk as this one's did.
        if let Err(e) = broker.delete_topics(&format!("{prefix}-.*")) {
            eprintln!("kafka_pipeline: cannot delete the round's topics: {e:#}");
        }
        if !plan.keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
        records.extend(round);
    }
    broker.stop();
    Ok(records)
}

/// Every process's config and every tool's command line, and the broker's properties, beside
/// the figures.
fn save_configs(broker: &Broker, round: &Path, out: &Path) {
    let dest = out.join("configs").join(NAME);
    for phase in [SINK, SOURCE, PRODUCER_PERF, CONSUMER_PERF] {
        runner::save_configs(&round.join(phase), &dest);
    }
    if let Some(props) = broker
        .data_dir()
        .parent()
        .map(|d| d.join("server.properties"))
    {
        let _ = std::fs::copy(props, dest.join("kafka-server.properties"));
    }
}

fn describe(r: &RunRecord) -> String {
    let mut s = runner::describe(r);
    if let Some(k) = &kafka_of(r) {
        if let Some(b) = k.broker_cpu_per_wall {
            s.push_str(&format!(", broker {b:.2} cores"));
        }
        if let Some(j) = k.join_secs {
            s.push_str(&format!(", join {j:.2}s"));
        }
        if let Some(max) = max_lag(&k.lag) {
            s.push_str(&format!(", lag max {}", human(max as f64)));
        }
        if let Some(kill) = &k.kill {
            s.push_str(&format!(
                ", consumer 1 killed at {:.2}s (it wrote {}), taken over after {}",
                kill.at_secs,
                kill.killed_wrote,
                kill.takeover_secs
                    .map_or("?".into(), |t| format!("{t:.2}s"))
            ));
        }
    }
    s
}

/// A round's six records, in [`ROWS`]' order; a phase that fails is a failed record.
fn one_round(
    plan: &Plan,
    broker: &Broker,
    prefix: &str,
    dir: &Path,
    label: &str,
) -> Vec<RunRecord> {
    let topics = [
        format!("{prefix}-pipeline"),
        format!("{prefix}-e2e"),
        format!("{prefix}-kill"),
    ];
    let made = std::fs::create_dir_all(dir)
        .with_context(|| format!("creating {}", dir.display()))
        .and_then(|()| {
            let names: Vec<&str> = topics.iter().map(String::as_str).collect();
            broker.create_topics(&names, PARTITIONS)
        });
    if let Err(e) = made {
        return ROWS
            .iter()
            .map(|row| record(plan, row, Status::Failed(format!("failed: {e:#}"))))
            .collect();
    }
    let ph = Phases {
        plan,
        broker,
        dir,
        label,
    };
    let or_failed = |row: &str, r: Result<RunRecord>| {
        r.unwrap_or_else(|e| record(plan, row, Status::Failed(format!("failed: {e:#}"))))
    };
    let sink = or_failed(SINK, ph.sink(&topics[0]));
    // Read before the perf tool appends its records to the same topic.
    let source = or_failed(SOURCE, ph.source(&topics[0], &format!("{prefix}-source")));
    let consumer_perf = or_failed(
        CONSUMER_PERF,
        ph.consumer_perf(&topics[0], &format!("{prefix}-perf")),
    );
    let record_size = kafka_of(&sink).and_then(|k| k.bytes_per_event);
    let producer_perf = or_failed(PRODUCER_PERF, ph.producer_perf(&topics[0], record_size));
    let e2e = or_failed(
        END_TO_END,
        ph.pipeline(&topics[1], &format!("{prefix}-e2e"), false),
    );
    let killed = or_failed(
        KILLED,
        ph.pipeline(&topics[2], &format!("{prefix}-kill"), true),
    );
    vec![sink, producer_perf, source, consumer_perf, e2e, killed]
}

fn record(plan: &Plan, row: &str, status: Status) -> RunRecord {
    let mut r = RunRecord::empty(NAME, row, "", 0, status);
    r.events_sent = plan.events;
    r
}

/// The phases of one round.
struct Phases<'a> {
    plan: &'a Plan,
    broker: &'a Broker,
    /// The round's folder: a folder per phase in it.
    dir: &'a Path,
    label: &'a str,
}

/// A loghaul process of a phase, started and ready.
struct Process {
    guard: ChildGuard,
    stderr: PathBuf,
    pid: u32,
    api: u16,
    /// The syslog port (A), or the API's (a consumer).
    port: u16,
}

impl Process {
    /// Starts `c` and waits until it is ready.
    fn start(c: &Companion, api: u16, dir: &Path) -> Result<Self> {
        let mut p = Self::spawn(c, api, dir)?;
        p.ready(c)?;
        Ok(p)
    }

    /// Starts `c` (its output in `stdout-NAME.log` and `stderr-NAME.log` in `dir`) without
    /// waiting for it.
    fn spawn(c: &Companion, api: u16, dir: &Path) -> Result<Self> {
        let stderr = dir.join(format!("stderr-{}.log", c.name));
        let stdout = dir.join(format!("stdout-{}.log", c.name));
        let mut guard = runner::spawn(&c.program, &c.args, &[], dir, &stdout, &stderr)
            .with_context(|| format!("starting {}", c.name))?;
        let pid = guard.child()?.id();
        Ok(Self {
            guard,
            stderr,
            pid,
            api,
            port: c.port,
        })
    }

    /// Waits until the process started from `c` is ready.
    fn ready(&mut self, c: &Companion) -> Result<()> {
        runner::wait_ready(
            &mut self.guard,
            &c.ready,
            self.port,
            &self.stderr,
            Duration::from_secs(30),
        )
        .with_context(|| format!("starting {}", c.name))
    }

    fn cpu_secs(&self) -> f64 {
        procstat::sample(self.pid).cpu_secs
    }
}

/// The broker's CPU seconds so far (0 where it cannot be read).
fn broker_cpu(broker: &Broker) -> f64 {
    broker
        .pid()
        .map_or(0.0, |pid| procstat::sample(pid).cpu_secs)
}

impl Phases<'_> {
    fn phase_dir(&self, row: &str) -> Result<PathBuf> {
        let dir = self.dir.join(row);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(dir)
    }

    /// Writes A's config into `dir` and starts it, producing into `topic`.
    fn start_producer(&self, dir: &Path, topic: &str) -> Result<Process> {
        let (port, api) = (subjects::free_port()?, subjects::free_port()?);
        let conf = dir.join("loghaul-a.yaml");
        std::fs::write(
            &conf,
            super::kafka_producer_config(port, api, &self.broker.address(), topic),
        )
        .with_context(|| format!("writing {}", conf.display()))?;
        let c = Companion {
            name: "a".into(),
            program: self.plan.loghaul.clone(),
            args: vec!["run".into(), "-c".into(), conf.display().to_string()],
            port,
            ready: Ready::Health(api),
        };
        Process::start(&c, api, dir)
    }

    /// Writes both consumers' configs into `dir` and starts them, members of `group` reading
    /// `topic`; returns them and their output files.
    fn start_consumers(
        &self,
        dir: &Path,
        topic: &str,
        group: &str,
    ) -> Result<(Vec<Process>, Vec<PathBuf>)> {
        let mut companions = Vec::new();
        let mut outs = Vec::new();
        for i in 1..=2 {
            let api = subjects::free_port()?;
            let out = dir.join(format!("out-{i}.jsonl"));
            let conf = dir.join(format!("consumer-{i}.yaml"));
            std::fs::write(
                &conf,
                super::kafka_consumer_config(
                    i,
                    api,
                    &self.broker.address(),
                    group,
                    topic,
                    &out.display().to_string(),
                ),
            )
            .with_context(|| format!("writing {}", conf.display()))?;
            companions.push((
                Companion {
                    name: format!("consumer-{i}"),
                    program: self.plan.loghaul.clone(),
                    args: vec!["run".into(), "-c".into(), conf.display().to_string()],
                    // A consumer listens on nothing but its API.
                    port: api,
                    ready: Ready::Health(api),
                },
                api,
            ));
            outs.push(out);
        }
        // Both at once, as a group's members come up together: they join the group in the
        // same round of the broker's initial rebalance delay.
        let mut procs = companions
            .iter()
            .map(|(c, api)| Process::spawn(c, *api, dir))
            .collect::<Result<Vec<_>>>()?;
        for (p, (c, _)) in procs.iter_mut().zip(&companions) {
            p.ready(c)?;
        }
        Ok((procs, outs))
    }

    /// The lab's generator: N numbered RFC3164 lines to `port`, as in `syslog`.
    fn start_generator(
        &self,
        port: u16,
        rate: u64,
        stop: &Arc<AtomicBool>,
    ) -> std::thread::JoinHandle<Result<GenStats>> {
        let plan = self.plan;
        let cfg = GenConfig {
            target: TargetUrl::Tcp(format!("127.0.0.1:{port}")),
            target_options: TargetOptions::default(),
            payload: plan.scenario.payload_spec(plan.message_size, plan.seed),
            count: Some(plan.events),
            duration: None,
            rate,
            connections: plan.connections,
            gen_id_base: 0,
        };
        let stop = Arc::clone(stop);
        std::thread::spawn(move || generator::run(&cfg, None, &stop))
    }

    /// `sink`: A alone, until its sent count reaches N.
    fn sink(&self, topic: &str) -> Result<RunRecord> {
        let plan = self.plan;
        let events = plan.events;
        let dir = self.phase_dir(SINK)?;
        let mut a = self.start_producer(&dir, topic)?;
        let rss = procstat::RssSampler::start(vec![a.pid]);
        let (cpu0, broker0) = (a.cpu_secs(), broker_cpu(self.broker));
        let stop = Arc::new(AtomicBool::new(false));
        let gen_thread = self.start_generator(a.port, 0, &stop);
        let label = format!("{} {SINK}", self.label);
        let tty = std::io::stderr().is_terminal();
        let mut sent = 0u64;
        let mut last_change = Instant::now();
        let mut last_us = now_micros();
        let mut last_draw = Instant::now();
        let mut status = Status::Timeout;
        loop {
            // A scrape costs A a little CPU: every 10 ms is enough.
            std::thread::sleep(Duration::from_millis(10));
            let now = subjects::component_metric(a.api, SENT, "out").unwrap_or(sent);
            if now != sent {
                sent = now;
                last_change = Instant::now();
                last_us = now_micros();
            }
            if sent >= events {
                status = Status::Complete;
                break;
            }
            if let Some(exited) = runner::exited(&mut a.guard, &a.stderr)? {
                status = exited;
                break;
            }
            let idle = last_change.elapsed();
            if (gen_thread.is_finished() && idle >= plan.idle_timeout)
                || idle >= plan.idle_timeout * 3
            {
                break;
            }
            if tty && last_draw.elapsed() >= Duration::from_millis(250) {
                last_draw = Instant::now();
                progress(&label, sent, events);
            }
        }
        clear_progress(tty, &label);
        let (cpu1, broker1) = (a.cpu_secs(), broker_cpu(self.broker));
        let peak = rss.finish();
        let bytes = subjects::component_metric(a.api, SENT_BYTES, "out");
        a.guard.terminate(Duration::from_secs(20))?;
        stop.store(true, Ordering::Relaxed);
        let gen_stats = join_generator(gen_thread)?;
        if let Status::Failed(_) = status {
            return Ok(record(plan, SINK, status));
        }
        let duration = secs_between(gen_stats.start_unix_us, last_us);
        let mut r = record(plan, SINK, status);
        r.events_sent = gen_stats.sent;
        r.events_seen = sent.min(events);
        r.loss = events.saturating_sub(sent);
        r.duration_secs = duration;
        r.events_per_sec = r.events_seen as f64 / duration;
        set_cpu(&mut r, cpu1 - cpu0, peak);
        r.gen_secs = gen_stats.elapsed_secs;
        r.gen_cores = gen_stats.cpu_secs.map(|c| c / duration);
        set_kafka(
            &mut r,
            KafkaRecord {
                broker_cpu_per_wall: Some((broker1 - broker0) / duration),
                bytes_per_event: bytes.filter(|_| sent > 0).map(|b| b as f64 / sent as f64),
                ..KafkaRecord::default()
            },
        );
        Ok(r)
    }

    /// `source`: both consumers read the N events already in `topic`.
    fn source(&self, topic: &str, group: &str) -> Result<RunRecord> {
        let plan = self.plan;
        let dir = self.phase_dir(SOURCE)?;
        let start_us = now_micros();
        let broker0 = broker_cpu(self.broker);
        let (mut consumers, outs) = self.start_consumers(&dir, topic, group)?;
        let watchers = watch(&outs, start_us);
        let mut books = Books::new(&outs);
        let lag = LagSampler::start(consumers.iter().map(|c| c.api).collect(), start_us);
        let rss = procstat::RssSampler::start(consumers.iter().map(|c| c.pid).collect());
        let outcome = Drain {
            label: format!("{} {SOURCE}", self.label),
            plan,
            watchers: &watchers,
            generator: None,
            kill_at: None,
        }
        .run(&mut books, &mut consumers, None)?;
        let cpu: f64 = consumers.iter().map(Process::cpu_secs).sum();
        let broker1 = broker_cpu(self.broker);
        let peak = rss.finish();
        if outcome.status == Status::Complete {
            settle(&consumers, false);
        }
        let lag = lag.finish();
        stop_all(&mut consumers)?;
        books.finish()?;
        let watched: Vec<_> = watchers.into_iter().map(Watcher::finish).collect();
        let mut r = books_record(plan, SOURCE, outcome.status.clone(), &books);
        if let Status::Failed(_) = r.status {
            return Ok(r);
        }
        let (first, last) = (
            outcome.first_us.unwrap_or(start_us),
            outcome.last_us.unwrap_or(start_us),
        );
        let duration = secs_between(first, last);
        r.duration_secs = duration;
        r.events_per_sec = r.events_seen as f64 / duration;
        set_cpu(&mut r, cpu, peak);
        r.flow_per_sec = flow(&watched, &books);
        set_kafka(
            &mut r,
            KafkaRecord {
                broker_cpu_per_wall: Some((broker1 - broker0) / secs_between(start_us, last)),
                join_secs: Some(secs_between(start_us, first)),
                lag,
                ..KafkaRecord::default()
            },
        );
        Ok(r)
    }

    /// `end-to-end` (and, with `kill`, `consumer-killed`): consumers first, assigned; then A
    /// and the load.
    fn pipeline(&self, topic: &str, group: &str, kill: bool) -> Result<RunRecord> {
        let plan = self.plan;
        let events = plan.events;
        let row = if kill { KILLED } else { END_TO_END };
        let dir = self.phase_dir(row)?;
        let (mut consumers, outs) = self.start_consumers(&dir, topic, group)?;
        wait_assigned(&mut consumers)?;
        let mut a = self.start_producer(&dir, topic)?;
        let start_us = now_micros();
        let watchers = watch(&outs, start_us);
        let mut books = Books::new(&outs);
        let lag = LagSampler::start(consumers.iter().map(|c| c.api).collect(), start_us);
        let mut pids = vec![a.pid];
        pids.extend(consumers.iter().map(|c| c.pid));
        let rss = procstat::RssSampler::start(pids);
        let cpu_now = |a: &Process, consumers: &[Process]| {
            a.cpu_secs() + consumers.iter().map(Process::cpu_secs).sum::<f64>()
        };
        let (cpu0, broker0) = (cpu_now(&a, &consumers), broker_cpu(self.broker));
        let stop = Arc::new(AtomicBool::new(false));
        let pace = if kill {
            events.div_ceil(KILL_LOAD.as_secs().max(1)).max(1)
        } else {
            0
        };
        let gen_thread = self.start_generator(a.port, pace, &stop);
        let outcome = Drain {
            label: format!("{} {row}", self.label),
            plan,
            watchers: &watchers,
            generator: Some(&gen_thread),
            kill_at: kill.then(|| (events / 3).max(1)),
        }
        .run(&mut books, &mut consumers, Some(&mut a));
        // The killed consumer's CPU was read just before it died.
        let killed_cpu = outcome
            .as_ref()
            .ok()
            .and_then(|o| o.killed.as_ref())
            .map(|k| k.cpu_secs);
        let cpu1 = a.cpu_secs()
            + consumers
                .iter()
                .enumerate()
                .map(|(i, c)| match killed_cpu {
                    Some(cpu) if i == 0 => cpu,
                    _ => c.cpu_secs(),
                })
                .sum::<f64>();
        let broker1 = broker_cpu(self.broker);
        let peak = rss.finish();
        if let Ok(o) = &outcome
            && o.status == Status::Complete
        {
            settle(&consumers, o.killed.is_some());
        }
        let lag = lag.finish();
        // Front to back: A delivers what it holds before the consumers stop.
        a.guard.terminate(Duration::from_secs(20))?;
        stop_all(&mut consumers)?;
        stop.store(true, Ordering::Relaxed);
        let gen_result = join_generator(gen_thread);
        let outcome = outcome?;
        let gen_stats = gen_result?;
        books.finish()?;
        let watched: Vec<_> = watchers.into_iter().map(Watcher::finish).collect();
        let mut r = books_record(plan, row, outcome.status.clone(), &books);
        if let Status::Failed(_) = r.status {
            return Ok(r);
        }
        let last = outcome.last_us.unwrap_or(gen_stats.start_unix_us);
        let duration = secs_between(gen_stats.start_unix_us, last);
        r.events_sent = gen_stats.sent;
        r.duration_secs = duration;
        r.events_per_sec = r.events_seen as f64 / duration;
        set_cpu(&mut r, cpu1 - cpu0, peak);
        r.gen_secs = gen_stats.elapsed_secs;
        r.gen_cores = gen_stats.cpu_secs.map(|c| c / duration);
        let mut samples = Tracker::new(start_us);
        for w in &watched {
            samples.merge(&w.samples);
        }
        let ms = |q| samples.latency().quantile(q).map(|v| v as f64 / 1000.0);
        r.latency_p50_ms = ms(0.5);
        r.latency_p99_ms = ms(0.99);
        r.latency_p999_ms = ms(0.999);
        r.flow_per_sec = flow(&watched, &books);
        let kill = outcome.killed.map(|k| {
            let (each, _) = books.snapshot();
            Kill {
                at_secs: secs_between(gen_stats.start_unix_us, k.at_us),
                written_before: k.written_before,
                killed_wrote: each.first().map_or(0, Tracker::unique),
                takeover_secs: consumers.get(1).and_then(|c| {
                    assignments(&c.stderr)
                        .into_iter()
                        .find(|e| e.at_us > k.at_us && e.partitions > 0)
                        .map(|e| secs_between(k.at_us, e.at_us))
                }),
            }
        });
        if kill.is_none() && row == KILLED {
            r.status = Status::Failed(
                "the files never held a third of the events: no consumer was killed".into(),
            );
        }
        set_kafka(
            &mut r,
            KafkaRecord {
                broker_cpu_per_wall: Some((broker1 - broker0) / duration),
                lag,
                kill,
                ..KafkaRecord::default()
            },
        );
        Ok(r)
    }

    /// Runs one of Kafka's perf tools in `dir` (its command line kept as `NAME.conf`, its
    /// output in `NAME.log`); returns its output, its CPU, its peak RSS and the broker's CPU
    /// meanwhile. It may take a minute more than a rate of 10k events/s would.
    fn tool(&self, dir: &Path, name: &str, class: &str, args: &[String]) -> Result<ToolRun> {
        std::fs::write(
            dir.join(format!("{name}.conf")),
            format!(
                "# loghaul bench: scenario kafka_pipeline; Kafka's {class}, from the broker's \
                 jars, ran as\njava -cp '{}/*' {class} {}\n",
                kafka::lib_dir().display(),
                args.join(" ")
            ),
        )
        .with_context(|| format!("writing {name}.conf"))?;
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).with_context(|| format!("creating {name}.log"))?;
        let limit = Duration::from_secs(60 + self.plan.events / 10_000);
        let broker0 = broker_cpu(self.broker);
        let started = Instant::now();
        let mut child = Broker::tool(class)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().context("cloning a log file")?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {class} (is Java installed?)"))?;
        let rss = procstat::RssSampler::start(vec![child.id()]);
        let waited = procstat::wait_with_cpu(&mut child, limit);
        let peak = rss.finish();
        let wall_secs = started.elapsed().as_secs_f64();
        let broker_cpu_secs = broker_cpu(self.broker) - broker0;
        let (status, cpu_secs) = waited.with_context(|| format!("running {class}"))?;
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if !status.success() {
            bail!("{class} exited with {status}: {}", tail(&text));
        }
        Ok(ToolRun {
            text,
            cpu_secs,
            wall_secs,
            peak,
            broker_cpu_secs,
        })
    }

    /// `ProducerPerformance`: N records of `record_size` bytes into `topic`, the sink's settings.
    fn producer_perf(&self, topic: &str, record_size: Option<f64>) -> Result<RunRecord> {
        let plan = self.plan;
        let Some(size) = record_size else {
            bail!("the sink produced nothing to size its records by");
        };
        let dir = self.phase_dir(PRODUCER_PERF)?;
        let mut args: Vec<String> = [
            "--topic",
            topic,
            "--num-records",
            &plan.events.to_string(),
            "--record-size",
            &format!("{:.0}", size.round().max(1.0)),
            "--throughput",
            "-1",
            "--producer-props",
        ]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
        args.extend(KAFKA_PRODUCER.java_props(&self.broker.address()));
        let run = self.tool(
            &dir,
            "producer-perf",
            "org.apache.kafka.tools.ProducerPerformance",
            &args,
        )?;
        let summary = parse_producer_perf(&run.text)
            .with_context(|| format!("reading its summary: {}", tail(&run.text)))?;
        let mut r = record(plan, PRODUCER_PERF, Status::Complete);
        r.events_seen = summary.records.min(plan.events);
        r.loss = plan.events.saturating_sub(summary.records);
        if r.loss > 0 {
            r.status = Status::Timeout;
        }
        let duration = summary.records as f64 / summary.rate.max(1e-9);
        r.duration_secs = duration;
        r.events_per_sec = summary.rate;
        run.set_cpu(&mut r);
        set_kafka(
            &mut r,
            KafkaRecord {
                broker_cpu_per_wall: Some(run.broker_cpu_secs / duration),
                ack_latency_ms: Some(summary.latency),
                ..KafkaRecord::default()
            },
        );
        Ok(r)
    }

    /// `ConsumerPerformance`: N records of `topic`, one consumer of group `group`.
    fn consumer_perf(&self, topic: &str, group: &str) -> Result<RunRecord> {
        let plan = self.plan;
        let dir = self.phase_dir(CONSUMER_PERF)?;
        let args: Vec<String> = [
            "--bootstrap-server",
            &self.broker.address(),
            "--topic",
            topic,
            "--group",
            group,
            "--num-records",
            &plan.events.to_string(),
        ]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
        let run = self.tool(
            &dir,
            "consumer-perf",
            "org.apache.kafka.tools.ConsumerPerformance",
            &args,
        )?;
        let summary = parse_consumer_perf(&run.text)
            .with_context(|| format!("reading its summary: {}", tail(&run.text)))?;
        let mut r = record(plan, CONSUMER_PERF, Status::Complete);
        r.events_seen = summary.records.min(plan.events);
        r.loss = plan.events.saturating_sub(summary.records);
        if r.loss > 0 {
            r.status = Status::Timeout;
        }
        let duration = summary.fetch_secs.max(1e-6);
        r.duration_secs = duration;
        r.events_per_sec = summary.rate;
        run.set_cpu(&mut r);
        set_kafka(
            &mut r,
            KafkaRecord {
                broker_cpu_per_wall: Some(run.broker_cpu_secs / duration),
                join_secs: Some(summary.rebalance_secs),
                ..KafkaRecord::default()
            },
        );
        Ok(r)
    }
}

/// What a perf tool's run left.
struct ToolRun {
    text: String,
    /// Its JVM's CPU over its whole life.
    cpu_secs: f64,
    /// Its whole life, JVM start-up included.
    wall_secs: f64,
    peak: u64,
    broker_cpu_secs: f64,
}

impl ToolRun {
    /// A tool's CPU columns: its whole JVM's CPU, over its whole life for CPU/wall (over the
    /// measured seconds alone, the start-up would make it more cores than the machine has).
    fn set_cpu(&self, r: &mut RunRecord) {
        set_cpu(r, self.cpu_secs, self.peak);
        r.cpu_per_wall = self.cpu_secs / self.wall_secs.max(1e-6);
    }
}

/// The last lines of a tool's output, for an error message.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

fn set_cpu(r: &mut RunRecord, cpu: f64, peak: u64) {
    let cpu = cpu.max(0.0);
    r.cpu_secs = cpu;
    r.cpu_per_wall = cpu / r.duration_secs.max(1e-6);
    r.cpu_secs_per_million = if r.events_seen > 0 {
        cpu / (r.events_seen as f64 / 1e6)
    } else {
        0.0
    };
    r.peak_rss_bytes = peak;
}

/// Seconds from `a` to `b` (µs since the epoch), at least a microsecond.
fn secs_between(a: u64, b: u64) -> f64 {
    (b.saturating_sub(a) as f64 / 1e6).max(1e-6)
}

/// A record with what the books of both files say: events seen, loss and duplicates.
fn books_record(plan: &Plan, row: &str, status: Status, books: &Books) -> RunRecord {
    let mut r = record(plan, row, status);
    if let Status::Failed(_) = r.status {
        return r;
    }
    let (_, all) = books.snapshot();
    let rep = all.report(Some(plan.events), Some(plan.connections));
    r.events_seen = rep.unique;
    r.loss = rep.missing;
    r.duplicates = Some(rep.duplicates);
    r
}

/// Events per second of the files together.
fn flow(watched: &[crate::watch::WatchState], books: &Books) -> Vec<u64> {
    let (each, _) = books.snapshot();
    let mut total: Vec<u64> = Vec::new();
    for (w, t) in watched.iter().zip(&each) {
        let f = w.flow_per_sec(t.events());
        if total.len() < f.len() {
            total.resize(f.len(), 0);
        }
        for (a, b) in total.iter_mut().zip(f) {
            *a += b;
        }
    }
    total
}

fn watch(outs: &[PathBuf], start_us: u64) -> Vec<Watcher> {
    outs.iter()
        .map(|p| Watcher::start(p, Tracker::new(start_us), start_us))
        .collect()
}

fn join_generator(h: std::thread::JoinHandle<Result<GenStats>>) -> Result<GenStats> {
    h.join()
        .map_err(|_| anyhow::anyhow!("the generator thread panicked"))?
        .context("the generator failed")
}

/// SIGTERM to every live consumer, then up to 20 s for them to commit and exit.
fn stop_all(consumers: &mut [Process]) -> Result<()> {
    for c in consumers.iter_mut() {
        c.guard.terminate(Duration::from_secs(20))?;
    }
    Ok(())
}

fn progress(label: &str, seen: u64, events: u64) {
    eprint!(
        "\r{label}: ~{}/{}   ",
        human(seen as f64),
        human(events as f64)
    );
    let _ = std::io::stderr().flush();
}

fn clear_progress(tty: bool, label: &str) {
    if tty {
        eprint!("\r{}\r", " ".repeat(label.len() + 40));
    }
}

/// Following the consumers' files until every event is in them.
struct Drain<'a> {
    label: String,
    plan: &'a Plan,
    watchers: &'a [Watcher],
    /// The load, while it runs (`None`: the events are already in the topic).
    generator: Option<&'a std::thread::JoinHandle<Result<GenStats>>>,
    /// Kill consumer 1 once the files hold about this many events.
    kill_at: Option<u64>,
}

/// How following the files ended.
struct Drained {
    status: Status,
    /// The first and the last growth of either file (µs since the epoch).
    first_us: Option<u64>,
    last_us: Option<u64>,
    killed: Option<Killed>,
}

/// Consumer 1's last moment.
struct Killed {
    at_us: u64,
    written_before: u64,
    cpu_secs: f64,
}

impl Drain<'_> {
    /// Polls every 2 ms: the watchers for arrivals (and for when to kill), the books whenever
    /// the files have been quiet for 100 ms, the processes for an unexpected exit; ends when the
    /// books hold every event, or nothing arrived for the idle timeout.
    fn run(
        &self,
        books: &mut Books,
        consumers: &mut [Process],
        mut producer: Option<&mut Process>,
    ) -> Result<Drained> {
        let events = self.plan.events;
        let tty = std::io::stderr().is_terminal();
        let mut out = Drained {
            status: Status::Timeout,
            first_us: None,
            last_us: None,
            killed: None,
        };
        let mut last_change = Instant::now();
        let mut verified = None;
        let mut last_draw = Instant::now();
        let loaded = || {
            self.generator
                .is_none_or(std::thread::JoinHandle::is_finished)
        };
        loop {
            std::thread::sleep(Duration::from_millis(2));
            let mark = self
                .watchers
                .iter()
                .filter_map(Watcher::last_growth_us)
                .max();
            if mark.is_some() && out.first_us.is_none() {
                out.first_us = mark;
            }
            if mark != out.last_us {
                out.last_us = mark;
                last_change = Instant::now();
            }
            // Both files see every generator: how far the slower stream got is the larger of
            // their frontiers, not their sum.
            let frontier = self
                .watchers
                .iter()
                .map(Watcher::frontier)
                .max()
                .unwrap_or(0);
            if let Some(at) = self.kill_at
                && out.killed.is_none()
                && frontier >= at
                && self.watchers.first().is_some_and(|w| w.frontier() > 0)
                && let Some(victim) = consumers.first_mut()
            {
                let cpu_secs = victim.cpu_secs();
                let child = victim.guard.child()?;
                child.kill().context("killing consumer 1")?;
                child.wait().context("reaping consumer 1")?;
                out.killed = Some(Killed {
                    at_us: now_micros(),
                    written_before: frontier,
                    cpu_secs,
                });
            }
            if mark.is_some() && verified != mark && last_change.elapsed() >= QUIET && loaded() {
                verified = mark;
                books.read()?;
                if books.snapshot().1.unique() >= events {
                    out.status = Status::Complete;
                    break;
                }
            }
            if let Some(p) = producer.as_mut()
                && let Some(failed) = runner::exited(&mut p.guard, &p.stderr)?
            {
                out.status = failed;
                break;
            }
            let dead = usize::from(out.killed.is_some());
            if let Some(failed) = consumers
                .iter_mut()
                .skip(dead)
                .find_map(|c| runner::exited(&mut c.guard, &c.stderr).transpose())
            {
                out.status = failed?;
                break;
            }
            let idle = last_change.elapsed();
            if (loaded() && idle >= self.plan.idle_timeout) || idle >= self.plan.idle_timeout * 3 {
                break;
            }
            if tty && last_draw.elapsed() >= Duration::from_millis(250) {
                last_draw = Instant::now();
                progress(&self.label, frontier, events);
            }
        }
        clear_progress(tty, &self.label);
        Ok(out)
    }
}

/// One change of a consumer's partitions, from its log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Assignment {
    /// When (µs since the epoch).
    at_us: u64,
    /// Partitions assigned (positive) or revoked (negative).
    partitions: i64,
}

/// The partition changes a loghaul kafka source logged (`Kafka partitions assigned.` and
/// `Kafka partitions revoked; …`, each with `partitions=N`), in order.
fn assignments(stderr: &Path) -> Vec<Assignment> {
    let text = std::fs::read_to_string(stderr).unwrap_or_default();
    parse_assignments(&text)
}

fn parse_assignments(text: &str) -> Vec<Assignment> {
    text.lines()
        .filter_map(|line| {
            let sign = if line.contains("Kafka partitions assigned.") {
                1
            } else if line.contains("Kafka partitions revoked") {
                -1
            } else {
                return None;
            };
            let at = line.split_whitespace().next()?;
            let at_us = chrono::DateTime::parse_from_rfc3339(at)
                .ok()?
                .timestamp_micros();
            let n: i64 = line
                .split("partitions=")
                .nth(1)?
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()?;
            Some(Assignment {
                at_us: u64::try_from(at_us).ok()?,
                partitions: sign * n,
            })
        })
        .collect()
}

/// Partitions held now, by consumer, from their logs.
fn held(consumers: &[Process]) -> Vec<i64> {
    consumers
        .iter()
        .map(|c| {
            assignments(&c.stderr)
                .iter()
                .map(|a| a.partitions)
                .sum::<i64>()
        })
        .collect()
}

/// Waits until the group has handed every partition out, each consumer some.
fn wait_assigned(consumers: &mut [Process]) -> Result<()> {
    let deadline = Instant::now() + ASSIGNED_WITHIN;
    loop {
        let held = held(consumers);
        if held.iter().all(|&n| n > 0) && held.iter().sum::<i64>() == i64::from(PARTITIONS) {
            return Ok(());
        }
        for c in consumers.iter_mut() {
            if let Some(Status::Failed(why)) = runner::exited(&mut c.guard, &c.stderr)? {
                bail!("{why}");
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "the consumers were not assigned the topic's {PARTITIONS} partitions within \
                 {ASSIGNED_WITHIN:?}: their logs say they hold {held:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (up to [`SETTLE_WITHIN`]) until every consumer still alive says its lag is 0: the
/// series then ends with what the group committed, not with a reading a second old.
fn settle(consumers: &[Process], first_killed: bool) {
    let deadline = Instant::now() + SETTLE_WITHIN;
    while Instant::now() < deadline {
        let mut live = consumers.iter().skip(usize::from(first_killed));
        if live.all(|c| subjects::component_metric(c.api, LAG, "in") == Some(0)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Reads the consumers' lag every [`LAG_EVERY`] in the background.
struct LagSampler {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<LagSample>>>,
}

impl LagSampler {
    fn start(apis: Vec<u16>, start_us: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let handle = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let read = || LagSample {
                    lag: apis
                        .iter()
                        .map(|&api| subjects::component_metric(api, LAG, "in"))
                        .collect(),
                    t_secs: secs_between(start_us, now_micros()),
                };
                let mut samples = Vec::new();
                let mut next = Instant::now() + LAG_EVERY;
                while !stop.load(Ordering::Relaxed) {
                    if Instant::now() < next {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    next += LAG_EVERY;
                    samples.push(read());
                }
                // One more at the end: the last sample is what the group had when the phase
                // was over.
                samples.push(read());
                samples
            })
        };
        Self {
            stop,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> Vec<LagSample> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for LagSampler {
    /// A phase that ends in an error never calls `finish`: the sampler stops all the same.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The largest lag of the consumers together.
fn max_lag(samples: &[LagSample]) -> Option<u64> {
    samples
        .iter()
        .map(|s| s.lag.iter().flatten().sum::<u64>())
        .max()
}

/// What `ProducerPerformance` says at its end.
#[derive(Clone, Copy, Debug)]
struct ProducerSummary {
    records: u64,
    rate: f64,
    latency: Percentiles,
}

/// Its last line: `1000000 records sent, 170852.55 records/sec (48.88 MB/sec), 361.27 ms avg
/// latency, 856.00 ms max latency, 354 ms 50th, 646 ms 95th, 767 ms 99th, 851 ms 99.9th.`
fn parse_producer_perf(text: &str) -> Option<ProducerSummary> {
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains("records sent") && l.contains("99.9th"))?;
    let parts: Vec<&str> = line.split(", ").collect();
    let records = parts.first()?.split_whitespace().next()?.parse().ok()?;
    let rate = parts.get(1)?.split_whitespace().next()?.parse().ok()?;
    let ms = |suffix: &str| -> Option<f64> {
        parts
            .iter()
            .find(|p| p.trim_end_matches('.').ends_with(suffix))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some(ProducerSummary {
        records,
        rate,
        latency: Percentiles {
            p50: ms(" 50th")?,
            p99: ms(" 99th")?,
            p999: ms(" 99.9th")?,
        },
    })
}

/// What `ConsumerPerformance` says at its end.
#[derive(Clone, Copy, Debug)]
struct ConsumerSummary {
    records: u64,
    rebalance_secs: f64,
    fetch_secs: f64,
    rate: f64,
}

/// The line under its header `start.time, end.time, data.consumed.in.MB, MB.sec,
/// data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec,
/// fetch.nMsg.sec`.
fn parse_consumer_perf(text: &str) -> Option<ConsumerSummary> {
    let mut lines = text.lines();
    lines.by_ref().find(|l| l.starts_with("start.time, "))?;
    let fields: Vec<&str> = lines.next()?.split(',').map(str::trim).collect();
    let num = |i: usize| -> Option<f64> { fields.get(i)?.parse().ok() };
    Some(ConsumerSummary {
        records: fields.get(4)?.parse().ok()?,
        rebalance_secs: num(6)? / 1000.0,
        fetch_secs: num(7)? / 1000.0,
        rate: num(9)?,
    })
}

/// What goes under the table: the broker, each side beside Kafka's own tool, the lag, the
/// killed consumer, and loghaul's goals.
fn notes(records: &[RunRecord]) -> String {
    use std::fmt::Write as _;
    let names: Vec<String> = ROWS.iter().map(|s| (*s).to_string()).collect();
    let summaries = report::summarize(records, &names);
    let median = |row: &str| {
        summaries
            .iter()
            .find(|m| m.subject == row)
            .and_then(|m| m.events_per_sec)
            .map(|s| s.median)
    };
    let measured = |row: &'static str| {
        records
            .iter()
            .filter(move |r| r.subject == row && !r.warmup && r.extra.contains_key(KEY))
    };
    let kafka_median = |row: &'static str, f: &dyn Fn(&KafkaRecord) -> Option<f64>| {
        let v: Vec<f64> = measured(row)
            .filter_map(|r| kafka_of(r).as_ref().and_then(f))
            .collect();
        report::spread(&v).map(|s| s.median)
    };
    let fmt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("–".into(), f);
    let rate = |v: Option<f64>| fmt(v, &|v| format!("{}/s", report::count(v)));
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Broker: Apache Kafka {}, one KRaft node (broker and controller) on this machine, its JVM \
         on defaults; every topic {PARTITIONS} partitions, replication 1, made for the round and \
         deleted after it. The generator (4 threads), loghaul's processes, the broker and Kafka's \
         tools share the same cores. Producers: acks from all replicas, idempotent, linger {} ms, \
         batches up to {} bytes, compression {} (loghaul's sink and ProducerPerformance alike).\n",
        kafka::VERSION,
        KAFKA_PRODUCER.linger_ms,
        report::count(KAFKA_PRODUCER.batch_max_bytes as f64),
        KAFKA_PRODUCER.compression,
    );
    let size = kafka_median(SINK, &|k| k.bytes_per_event);
    let _ = writeln!(
        s,
        "| side | loghaul | Kafka's own tool | loghaul ÷ tool | broker CPU/wall (loghaul, tool) |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---|");
    for (side, mine, theirs) in [
        ("produce into the topic", SINK, PRODUCER_PERF),
        ("consume the topic", SOURCE, CONSUMER_PERF),
    ] {
        let (a, b) = (median(mine), median(theirs));
        let ratio = match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("**{:.2}**", a / b),
            _ => "–".into(),
        };
        let cores = |row| {
            fmt(kafka_median(row, &|k| k.broker_cpu_per_wall), &|v| {
                format!("{v:.2}")
            })
        };
        let _ = writeln!(
            s,
            "| {side} | {} | {} ({theirs}) | {ratio} | {}, {} |",
            rate(a),
            rate(b),
            cores(mine),
            cores(theirs),
        );
    }
    let _ = writeln!(
        s,
        "\nProducing: the sink's rate is N ÷ (generator start → the sink's count of events the \
         broker acknowledged reaching N); ProducerPerformance's is its own report, with \
         `--record-size {}` (the sink's bytes per event, median) and the sink's settings as \
         `--producer-props {}`. Consuming: loghaul's two consumers read the N events the sink \
         produced, from the first event written to the last (their join, median {}, left \
         out); ConsumerPerformance is one consumer reading the same events without writing \
         them, its fetch rate (its join, median {}, left out too). The tools' CPU columns \
         are their whole JVM, start-up included (CPU/wall over its whole life). \
         `consumer-killed`'s load is paced to last at least {} s, so that a small run has a \
         middle to kill in.\n",
        fmt(size, &|v| format!("{v:.0}")),
        KAFKA_PRODUCER.java_props("…").join(" "),
        fmt(kafka_median(SOURCE, &|k| k.join_secs), &|v| format!(
            "{v:.2}s"
        )),
        fmt(kafka_median(CONSUMER_PERF, &|k| k.join_secs), &|v| format!(
            "{v:.2}s"
        )),
        KILL_LOAD.as_secs(),
    );
    // The lag: one series in full (the last measured run), the peaks of every run.
    let _ = writeln!(
        s,
        "Consumer lag (`loghaul_kafka_consumer_lag`, messages not yet committed, read from each \
         consumer's API every 0.5 s; librdkafka refreshes it every second, so it reads 0 until \
         a consumer's first statistics; the last reading is taken once it settled, at most {} s \
         after the last event was written):\n",
        SETTLE_WITHIN.as_secs()
    );
    let _ = writeln!(
        s,
        "| phase | peak, both consumers (per run) | at the end | last run, every 0.5 s: consumer 1 / consumer 2 |"
    );
    let _ = writeln!(s, "|---|---|---|---|");
    for row in [SOURCE, END_TO_END, KILLED] {
        let runs: Vec<KafkaRecord> = measured(row).filter_map(kafka_of).collect();
        let Some(last) = runs.last() else {
            continue;
        };
        let peaks: Vec<String> = runs
            .iter()
            .map(|k| max_lag(&k.lag).map_or("–".into(), |m| report::count(m as f64)))
            .collect();
        let end = last.lag.last().map_or("–".into(), |x| lag_pair(&x.lag));
        let _ = writeln!(
            s,
            "| {row} | {} | {end} | {} |",
            peaks.join(", "),
            lag_series(&last.lag)
        );
    }
    s.push('\n');
    let kills: Vec<(&RunRecord, Kill)> = measured(KILLED)
        .filter_map(|r| Some((r, kafka_of(r)?.kill?)))
        .collect();
    if !kills.is_empty() {
        let _ = writeln!(
            s,
            "Consumer killed: consumer 1 got SIGKILL once the files held about a third of the \
             events; consumer 2 took its partitions over when its session timed out (6 s) and \
             read again what consumer 1 had written but not committed. Per run:\n"
        );
        let _ = writeln!(
            s,
            "| run | killed at | files held then | consumer 1 had written | taken over after | loss | duplicates | rate |"
        );
        let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (r, k) in kills {
            let _ = writeln!(
                s,
                "| {} | {:.2}s | ~{} | {} | {} | {} | {} | {}/s |",
                r.run,
                k.at_secs,
                report::count(k.written_before as f64),
                report::count(k.killed_wrote as f64),
                k.takeover_secs.map_or("–".into(), |t| format!("{t:.2}s")),
                r.loss,
                r.duplicates.map_or("–".into(), |d| report::count(d as f64)),
                report::count(r.events_per_sec),
            );
        }
        s.push('\n');
    }
    let _ = writeln!(s, "Goals for loghaul (medians of this run):\n");
    let (sink, perf) = (median(SINK), median(PRODUCER_PERF));
    let sink_goal = match (sink, perf) {
        (Some(v), _) if v >= GOAL_RATE => "met".to_string(),
        (Some(v), Some(p)) if v >= p => format!(
            "met by the broker clause: below {}/s, but Kafka's own producer gets less out of \
             this broker in the same runs ({}; the sink {:.2}× that)",
            report::count(GOAL_RATE),
            rate(Some(p)),
            v / p
        ),
        (Some(_), Some(p)) => format!(
            "not met: below {}/s, and Kafka's own producer reaches more on this broker ({})",
            report::count(GOAL_RATE),
            rate(Some(p))
        ),
        _ => "not measured".into(),
    };
    let _ = writeln!(
        s,
        "- sink ≥ {}/s, or the broker shown to be the limit by Kafka's producer perf tool in the \
         same run: {} ({sink_goal}).",
        report::count(GOAL_RATE),
        rate(sink),
    );
    let source = median(SOURCE);
    let _ = writeln!(
        s,
        "- source ≥ {}/s topic → files: {} ({}; ConsumerPerformance, which writes nothing, {}).",
        report::count(GOAL_RATE),
        rate(source),
        match source {
            Some(v) if v >= GOAL_RATE => "met",
            Some(_) => "not met",
            None => "not measured",
        },
        rate(median(CONSUMER_PERF)),
    );
    s
}

fn lag_pair(lag: &[Option<u64>]) -> String {
    lag.iter()
        .map(|v| v.map_or("–".into(), |n| human(n as f64)))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// A series in one cell, at most 40 points (every k-th sample of a long one).
fn lag_series(samples: &[LagSample]) -> String {
    let step = samples.len().div_ceil(40).max(1);
    samples
        .iter()
        .step_by(step)
        .map(|x| lag_pair(&x.lag))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_producer_perf_summary() {
        let text = "198017 records sent, 39603.4 records/sec (11.33 MB/sec), 1650.5 ms avg \
                    latency, 2255.0 ms max latency.\n1000000 records sent, 170852.554246 \
                    records/sec (48.88 MB/sec), 361.27 ms avg latency, 856.00 ms max latency, \
                    354 ms 50th, 646 ms 95th, 767 ms 99th, 851 ms 99.9th.\n";
        let s = parse_producer_perf(text).unwrap();
        assert_eq!(s.records, 1_000_000);
        assert!((s.rate - 170_852.554_246).abs() < 1e-6);
        assert_eq!(
            (s.latency.p50, s.latency.p99, s.latency.p999),
            (354.0, 767.0, 851.0)
        );
        assert!(parse_producer_perf("1000 records sent, 10 records/sec").is_none());
    }

    #[test]
    fn reads_the_consumer_perf_summary() {
        let text = "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, \
                    nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n\
                    2026-11-26 12:09:52:260, 2026-11-26 12:09:55:054, 286.2339, 102.4459, \
                    1000460, 358074.4452, 528, 2266, 126.3168, 441509.2674\n";
        let s = parse_consumer_perf(text).unwrap();
        assert_eq!(s.records, 1_000_460);
        assert_eq!((s.rebalance_secs, s.fetch_secs), (0.528, 2.266));
        assert!((s.rate - 441_509.267_4).abs() < 1e-6);
    }

    #[test]
    fn follows_assignments_in_a_consumers_log() {
        let log = "2026-11-26T12:10:22.637184Z  INFO loghaul started. config=c1.yaml\n\
                   2026-11-26T12:10:22.710708Z  INFO Kafka partitions assigned. component=in partitions=4\n\
                   2026-11-26T12:10:23.000000Z  INFO Kafka partitions revoked; what was not committed is read again by their next owner. component=in partitions=4 all_committed=true\n\
                   2026-11-26T12:10:23.500000Z  INFO Kafka partitions assigned. component=in partitions=2\n";
        let a = parse_assignments(log);
        assert_eq!(
            a.iter().map(|x| x.partitions).collect::<Vec<_>>(),
            [4, -4, 2]
        );
        assert_eq!(a[2].at_us - a[1].at_us, 500_000);
    }

    #[test]
    fn lag_series_stay_short() {
        let samples: Vec<LagSample> = (0..100)
            .map(|i| LagSample {
                t_secs: f64::from(i) / 2.0,
                lag: vec![Some(1000 * u64::from(i as u32)), None],
            })
            .collect();
        let series = lag_series(&samples);
        assert_eq!(series.split(", ").count(), 34);
        assert!(series.starts_with("0 / –, 3.0k / –"), "{series}");
        assert_eq!(max_lag(&samples), Some(99_000));
    }
}
