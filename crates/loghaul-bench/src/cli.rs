//! The clap surface of `loghaul bench`: `gen`, `meter`, `run` (and the hidden `discard` and `bare`).
//!
//! [`run`] is called from a plain, non-async `main`; everything here uses OS threads, so no runtime is
//! needed.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

use crate::connect::TlsClientOptions;
use crate::fluent::{self, FluentMode, FluentOptions};
use crate::generator::{self, GenConfig};
use crate::meter::{self, MeterSource, StopRule};
use crate::payload::{Content, Format, Framing, PayloadSpec};
use crate::progress::{Progress, human};
use crate::runner::{self, Plan};
use crate::scenarios::forward_deliver::TreeShape;
use crate::scenarios::forward_deliver::run::{DEFAULT_RATES, TreeOptions};
use crate::scenarios::{self, Scenario};
use crate::subjects::{SubjectKind, TlsDriver};
use crate::target::{TargetOptions, TargetUrl};

/// `loghaul bench ...`
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Generate load: seeded syslog/raw/JSON messages to tcp://, tls://, udp://, file://,
    /// fluent:// or fluent+tls://.
    #[command(after_help = "Examples:\n  \
        loghaul bench gen --target tcp://127.0.0.1:5514 --count 1000000 --connections 4\n  \
        loghaul bench gen --target tls://127.0.0.1:6514 --tls-ca ca.crt --count 1000000\n  \
        loghaul bench gen --target tls://127.0.0.1:6514 --tls-ca ca.crt --tls-cert client.crt --tls-key client.key --tls-server-name localhost --count 1000000\n  \
        loghaul bench gen --target tls://127.0.0.1:6514 --tls-ca ca.crt --connect-per-message --count 2000\n  \
        loghaul bench gen --target fluent+tls://127.0.0.1:24224 --tls-ca ca.crt --format raw --count 1000000\n  \
        loghaul bench gen --target udp://127.0.0.1:5514 --rate 10000 --duration 10s --format rfc5424\n  \
        loghaul bench gen --target file:///tmp/app.log --rate 1000 --duration 1m --rotate-lines 10000\n  \
        loghaul bench gen --target fluent://127.0.0.1:24224 --format raw --count 1000000 --fluent-mode packed --batch 1000 --ack\n  \
        loghaul bench gen --target fluent://127.0.0.1:24224 --format raw --count 1000000 --connections 1 --ack --reconnect 30s --acked-log /tmp/acked.log\n  \
        loghaul bench gen --target otlp://127.0.0.1:4318 --format raw --count 1000000")]
    Gen(GenArgs),
    /// Meter what a subject wrote (a file being appended to) or sent (as its TCP destination).
    #[command(after_help = "Examples:\n  \
        loghaul bench meter --file /tmp/out.jsonl --expect 1000000 --generators 4\n  \
        loghaul bench meter --listen 127.0.0.1:6000 --idle 5s --json")]
    Meter(MeterArgs),
    /// Run an experiment: loghaul and its peers, same load, table + chart + raw runs.
    #[command(after_help = "Examples:\n  \
        loghaul bench run syslog --subjects loghaul,rsyslog,syslog-ng --runs 3\n  \
        loghaul bench run syslog --subjects loghaul,loghaul-disk-50ms,loghaul-disk-batch,rsyslog,rsyslog-da\n  \
        loghaul bench run syslog --subjects loghaul,loghaul-tls,rsyslog,rsyslog-tls --runs 5\n  \
        loghaul bench run tls_handshake --subjects loghaul-tls,rsyslog-tls --runs 5\n  \
        loghaul bench run basic --subjects loghaul,eventmachine --events 5000000\n  \
        loghaul bench run forward --subjects loghaul,bare,fluentd --runs 3\n  \
        loghaul bench run forward_relay --subjects loghaul --ack\n  \
        loghaul bench run forward_deliver --subjects loghaul --agents 10 --delivers 2 --receivers 2\n  \
        loghaul bench run forward_deliver --subjects loghaul --rates 1000,10000,50000 --step-duration 20s\n  \
        loghaul bench run tail --subjects loghaul,bare --runs 3\n  \
        loghaul bench run kafka_pipeline --runs 3 --events 2000000\n  \
        loghaul bench run http_echo --subjects loghaul,node,tornado,eventmachine,finagle,ceiling\n  \
        loghaul bench run http_client --subjects loghaul,curl,net-http,curb,em-http,requests,urllib3")]
    Run(Box<RunArgs>),
    /// A discarding TCP listener, to measure the generator alone.
    #[command(hide = true)]
    Discard(DiscardArgs),
    /// loghaul's codec in a bare thread-per-connection loop (for `tail`, one thread reading a
    /// file): the `bare` subject of `bench run`.
    #[command(hide = true)]
    Bare(BareArgs),
    /// The lab's small HTTP server: `http_echo`'s `ceiling` subject and `http_client`'s receiver.
    #[command(hide = true)]
    Httpd(HttpdArgs),
}

/// Options of the hidden `bench httpd`.
#[derive(Debug, Args)]
pub struct HttpdArgs {
    /// Port on 127.0.0.1.
    #[arg(long)]
    pub port: u16,
    /// Size of the body `GET /download` answers with.
    #[arg(long, default_value_t = 10_000_000)]
    pub download_bytes: usize,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

/// Options of `bench gen`.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// tcp://HOST:PORT, tls://HOST:PORT (syslog over TLS, framed as over TCP), udp://HOST:PORT,
    /// file://PATH, fluent://HOST:PORT (Fluentd forward), fluent+tls://HOST:PORT (forward over
    /// TLS) or otlp://HOST:PORT (OTLP/HTTP protobuf, POST /v1/logs, 100 records a request).
    #[arg(long, short = 't')]
    pub target: String,
    /// Message format.
    #[arg(long, value_enum, default_value = "rfc3164")]
    pub format: Format,
    /// Stream framing (TCP and file targets).
    #[arg(long, value_enum, default_value = "newline")]
    pub framing: Framing,
    /// What follows each message's marker: filler words, or key=value pairs whose status sets
    /// the severity (`user=u4821 action=login status=503 ... note="cache miss"`, as in the
    /// `transform` scenario).
    #[arg(long, value_enum, default_value = "words")]
    pub content: Content,
    /// Messages to send in total (over all connections).
    #[arg(long, short = 'n')]
    pub count: Option<u64>,
    /// Stop after this long (e.g. 10s, 500ms, 2m).
    #[arg(long, short = 'd', value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Messages per second over all connections; 0 = as fast as possible.
    #[arg(long, short = 'r', default_value_t = 0)]
    pub rate: u64,
    /// Parallel connections, each its own generator id [default: 4; 1 for file://, which
    /// takes one].
    #[arg(long, short = 'c')]
    pub connections: Option<usize>,
    /// Message size in bytes (header and marker included; filler pads up to it).
    #[arg(long, short = 's', default_value_t = 128)]
    pub message_size: usize,
    /// Seed of the payload content.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Generator id of the first connection (give distinct bases to concurrent generators).
    #[arg(long, default_value_t = 0)]
    pub gen_id_base: u32,
    /// file:// target: every this many lines rename PATH to PATH.1 (replacing the older PATH.1)
    /// and go on in a new PATH, like logrotate; 0 = never.
    #[arg(long, default_value_t = 0)]
    pub rotate_lines: u64,
    #[command(flatten)]
    pub fluent: FluentArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// tcp:// and tls://: a new connection for every message (connect, TLS handshake, the
    /// message, close, wait for the server to close): counts connections (handshakes) per
    /// second. No session resumption: every handshake is a full one.
    #[arg(long)]
    pub connect_per_message: bool,
    /// fluent:// with --ack: when the connection fails (refused, reset, closed, no ack in time),
    /// connect again, trying for up to this long per outage (e.g. 30s), and send every request
    /// not yet acknowledged again, oldest first. The summary counts reconnections and resent
    /// requests and events. [default: a failed connection ends the run]
    #[arg(long, value_parser = parse_duration, requires = "ack", value_name = "DURATION")]
    pub reconnect: Option<Duration>,
    /// fluent:// with --ack: append a line `GEN FIRST LAST` (generator id, first and last
    /// sequence number of its events) to this file for every request the server acknowledged.
    #[arg(long, requires = "ack", value_name = "PATH")]
    pub acked_log: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The client side of TLS, for tls:// and fluent+tls:// targets.
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// tls://, fluent+tls://: the PEM CA certificate(s) the server's certificate must chain to
    /// [default: the system's trust store].
    #[arg(long, value_name = "PATH")]
    pub tls_ca: Option<PathBuf>,
    /// tls://, fluent+tls://: a PEM client certificate (chain) to present, for mutual TLS.
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// tls://, fluent+tls://: the PEM private key of --tls-cert.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// tls://, fluent+tls://: the name the server's certificate must carry [default: the
    /// target's host].
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
}

impl TlsArgs {
    fn options(&self) -> TlsClientOptions {
        TlsClientOptions {
            ca: self.tls_ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            server_name: self.tls_server_name.clone(),
        }
    }

    fn any(&self) -> bool {
        self.options() != TlsClientOptions::default()
    }
}

/// How the fluent:// target (and the forward scenarios' generator) packs its requests.
#[derive(Debug, Args)]
pub struct FluentArgs {
    /// fluent://: request mode (message: one event per request; forward: an array of entries;
    /// packed: the entries as one blob; compressed: packed and gzipped).
    #[arg(long, value_enum, default_value = "packed")]
    pub fluent_mode: FluentMode,
    /// fluent://: events per request (ignored in message mode: one event each).
    #[arg(long, default_value_t = fluent::DEFAULT_BATCH)]
    pub batch: usize,
    /// fluent://: ask for an ack of every request (a `chunk` option) and wait for them, with up
    /// to 16 requests per connection in flight.
    #[arg(long)]
    pub ack: bool,
}

impl FluentArgs {
    fn options(&self) -> Result<FluentOptions> {
        if self.batch == 0 {
            bail!("--batch must be at least 1");
        }
        Ok(FluentOptions {
            mode: self.fluent_mode,
            batch: self.batch,
            ack: self.ack,
            tag: fluent::DEFAULT_TAG.to_string(),
            reconnect: None,
            acked_log: None,
        })
    }
}

/// Options of `bench meter`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["file", "listen"])))]
pub struct MeterArgs {
    /// Tail this JSON-lines or text file (it may not exist yet).
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Listen on this TCP address and meter what arrives.
    #[arg(long)]
    pub listen: Option<String>,
    /// Total events the generators sent (enables exact loss, and stopping when all arrived).
    #[arg(long)]
    pub expect: Option<u64>,
    /// Connections the generator used (how --expect is split into per-generator ranges).
    #[arg(long, default_value_t = 4)]
    pub generators: usize,
    /// Stop after this long without a new event.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub idle: Duration,
    /// Stop after this long in any case.
    #[arg(long, value_parser = parse_duration)]
    pub max_time: Option<Duration>,
    /// Keep reading this long after every expected event arrived, to catch late duplicates.
    #[arg(long, value_parser = parse_duration, default_value = "300ms")]
    pub grace: Duration,
    /// Read syslog-ng loggen's markers (`seq: S, thread: T,`) instead of the lab generator's.
    #[arg(long)]
    pub loggen: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Options of `bench run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The experiment.
    #[arg(value_parser = scenarios::parser())]
    pub scenario: &'static dyn Scenario,
    /// Subjects, comma-separated, run interleaved in this order.
    /// [default: loghaul,rsyslog,syslog-ng,eventmachine; http_echo:
    /// loghaul,node,tornado,eventmachine,finagle,ceiling; http_client:
    /// loghaul,curl,net-http,curb,em-http,requests,urllib3; tls_handshake:
    /// loghaul-tls,rsyslog-tls; kafka_pipeline: loghaul, the only one it runs]
    #[arg(long, value_enum, value_delimiter = ',')]
    pub subjects: Option<Vec<SubjectKind>>,
    /// Runs per subject [default: 3; http_echo: 5, as the published experiment; forward_deliver climbs its steps
    /// once].
    #[arg(long)]
    pub runs: Option<usize>,
    /// Uncounted warm-up rounds before the measured runs: each subject once per round, same
    /// load. The first run after a build or an idle spell is often slow (page cache, writeback,
    /// caches), and it would always be the first subject's. Kept in the raw runs as `warmup`.
    /// [default: 1; forward_deliver: none, its first steps are a few lines per second]
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Events per run; for tail, lines in its file; for tls_handshake, connections; for
    /// kafka_pipeline, events per phase (default: 40M for basic, 2M for rfc5424, 2,000 for
    /// tls_handshake, 1M for kafka_pipeline, 5M otherwise).
    #[arg(long)]
    pub events: Option<u64>,
    /// Generator connections.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Message size in bytes (default: 64 for basic, 256 for rfc5424, 100 for the forward
    /// scenarios' message texts and tail's lines, 128 otherwise).
    #[arg(long)]
    pub message_size: Option<usize>,
    /// Payload seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Results folder (default: bench/results/YYYY-MM-DD/SCENARIO-HHMMSS, a new one per run, so
    /// no run replaces another's results).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The loghaul binary to measure (default: this executable).
    #[arg(long, env = "LOGHAUL_BIN")]
    pub loghaul_bin: Option<PathBuf>,
    /// A run without progress for this long ends as a timeout (counted as loss).
    #[arg(long, value_parser = parse_duration, default_value = "15s")]
    pub idle_timeout: Duration,
    /// Keep the subjects' work folders (outputs, logs) instead of deleting them after each run.
    #[arg(long)]
    pub keep: bool,
    /// The load generator: the lab's own, or syslog-ng's loggen as an independent cross-check (no
    /// latency then: loggen stamps whole seconds).
    #[arg(long, value_enum, default_value = "builtin")]
    pub generator: runner::Driver,
    /// The forward scenarios' requests (`--fluent-mode`, `--batch`, `--ack`; ignored elsewhere).
    #[command(flatten)]
    pub fluent: FluentArgs,
    /// forward_deliver's tree and rate steps.
    #[command(flatten)]
    pub tree: TreeArgs,
    /// The HTTP experiments' load.
    #[command(flatten)]
    pub http: HttpArgs,
    /// rsyslog-tls: the TLS library rsyslog's imtcp reads with (gtls: GnuTLS; ossl: OpenSSL).
    #[arg(long, value_enum, default_value = "gtls")]
    pub rsyslog_tls_driver: TlsDriver,
}

/// The load of `http_echo` and `http_client` (ignored by the other scenarios).
#[derive(Debug, Args)]
#[command(next_help_heading = "http_echo and http_client")]
pub struct HttpArgs {
    /// http_echo: `ab -c` (concurrent requests).
    #[arg(long, default_value_t = 2000)]
    pub ab_concurrency: usize,
    /// http_echo: `ab -n` (requests per run).
    #[arg(long, default_value_t = 8000)]
    pub ab_requests: usize,
    /// http_echo: one `wrk` run at each of these connection counts (empty: no wrk).
    #[arg(long, value_delimiter = ',', default_value = "2000,10000")]
    pub wrk_connections: Vec<usize>,
    /// http_echo: `wrk -d`.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub wrk_duration: Duration,
    /// http_echo: `wrk -t`.
    #[arg(long, default_value_t = 2)]
    pub wrk_threads: usize,
    /// http_client: bytes of the downloaded file.
    #[arg(long, default_value_t = 10_000_000)]
    pub download_bytes: usize,
    /// http_client: events uploaded as NDJSON (about 200 bytes each).
    #[arg(long, default_value_t = 1_000_000)]
    pub upload_events: u64,
    /// http_client: events per POST.
    #[arg(long, default_value_t = 1000)]
    pub upload_batch: usize,
}

impl HttpArgs {
    fn options(&self) -> crate::scenarios::http_echo::run::HttpOptions {
        crate::scenarios::http_echo::run::HttpOptions {
            ab_concurrency: self.ab_concurrency,
            ab_requests: self.ab_requests,
            wrk_connections: self
                .wrk_connections
                .iter()
                .copied()
                .filter(|&c| c > 0)
                .collect(),
            wrk_duration: self.wrk_duration,
            wrk_threads: self.wrk_threads,
            download_bytes: self.download_bytes,
            upload_events: self.upload_events,
            upload_batch: self.upload_batch,
        }
    }
}

/// The tree and the rate steps of `forward_deliver` (ignored by the other scenarios).
#[derive(Debug, Args)]
#[command(next_help_heading = "forward_deliver")]
pub struct TreeArgs {
    /// Tailing agents, each with its own log file (file source → fluent sink).
    #[arg(long, default_value_t = 10)]
    pub agents: usize,
    /// Delivers between agents and receivers (fluent source → fluent sink).
    #[arg(long, default_value_t = 2)]
    pub delivers: usize,
    /// Receivers (fluent source → JSON-lines file, read by the meter).
    #[arg(long, default_value_t = 2)]
    pub receivers: usize,
    /// Lines per second written to each agent's file, one step each, comma-separated; the climb
    /// stops after the first step not sustained (see --all-steps) [default: 10,100,1000,10000,
    /// 20000,50000,60000,100000,110000,120000,130000,140000,150000,200000,300000,400000,500000].
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<u64>,
    /// How long each step writes.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub step_duration: Duration,
    /// Rotate each agent's file (PATH → PATH.1) every this many lines of a step; 0 = never.
    #[arg(long, default_value_t = 0)]
    pub rotate_lines: u64,
    /// Climb every step of --rates, even past one the tree did not sustain.
    #[arg(long)]
    pub all_steps: bool,
}

impl TreeArgs {
    fn options(&self) -> TreeOptions {
        TreeOptions {
            shape: TreeShape {
                agents: self.agents,
                delivers: self.delivers,
                receivers: self.receivers,
            },
            rates: if self.rates.is_empty() {
                DEFAULT_RATES.to_vec()
            } else {
                self.rates.clone()
            },
            step: self.step_duration,
            rotate_lines: self.rotate_lines,
            all_steps: self.all_steps,
        }
    }
}

/// Options of the hidden `bench discard`.
#[derive(Debug, Args)]
pub struct DiscardArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9999")]
    pub listen: String,
}

/// Options of the hidden `bench bare`.
#[derive(Debug, Args)]
pub struct BareArgs {
    /// The experiment whose wire and output to use.
    #[arg(long, value_parser = scenarios::parser())]
    pub scenario: &'static dyn Scenario,
    /// Address to listen on (every scenario but `tail`).
    #[arg(long, required_unless_present = "input")]
    pub listen: Option<String>,
    /// `tail`: the file to read from its beginning and follow.
    #[arg(long, conflicts_with = "listen")]
    pub input: Option<PathBuf>,
    /// The JSON-lines file to append to (for `basic`: the file the count is published to).
    #[arg(long)]
    pub out: PathBuf,
}

/// Parses `250ms`, `10s`, `2m`, `1h` or a plain number of seconds.
///
/// # Errors
/// Anything else.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?} (e.g. 500ms, 10s, 2m)"))?;
    let secs = match unit.trim() {
        "ms" => v / 1000.0,
        "s" | "" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("invalid duration unit in {s:?} (ms, s, m, h)")),
    };
    Ok(Duration::from_secs_f64(secs))
}

/// Runs a bench subcommand to completion.
///
/// # Errors
/// Invalid options, or I/O errors of the generator, meter or scenario runner.
pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Gen(a) => gen_cmd(a),
        BenchCommand::Meter(a) => meter_cmd(a),
        BenchCommand::Run(a) => run_cmd(*a),
        BenchCommand::Discard(a) => {
            let l =
                TcpListener::bind(&a.listen).with_context(|| format!("binding {}", a.listen))?;
            eprintln!("discard: listening on {}", a.listen);
            crate::discard::serve_forever(l, Duration::from_secs(1))
        }
        BenchCommand::Httpd(a) => crate::httpd::run(a.port, a.download_bytes, a.threads),
        BenchCommand::Bare(a) => match (a.scenario.input(), a.listen, a.input) {
            // A scenario with no input port reads a file: `tail`'s.
            (None, _, Some(input)) => crate::bare::tail(&input, &a.out),
            (None, ..) => bail!(
                "the bare loop of `{}` reads a file: give --input",
                a.scenario.name()
            ),
            (Some(_), Some(listen), None) => {
                let l = TcpListener::bind(&listen).with_context(|| format!("binding {listen}"))?;
                crate::bare::serve(&l, a.scenario, &a.out)
            }
            (Some(_), ..) => bail!("the bare loop of `{}` serves --listen", a.scenario.name()),
        },
    }
}

fn gen_cmd(a: GenArgs) -> Result<()> {
    let target = TargetUrl::parse(&a.target)?;
    if (a.reconnect.is_some() || a.acked_log.is_some())
        && !matches!(target, TargetUrl::Fluent(_) | TargetUrl::FluentTls(_))
    {
        bail!("--reconnect and --acked-log apply to a fluent:// or fluent+tls:// target");
    }
    if a.tls.any() && !target.is_tls() {
        bail!("the --tls-* options apply to tls:// and fluent+tls:// targets");
    }
    let connections = a
        .connections
        .unwrap_or(if target.allows_connections() { 4 } else { 1 });
    let fluent = FluentOptions {
        reconnect: a.reconnect,
        acked_log: a.acked_log.clone(),
        ..a.fluent.options()?
    };
    let cfg = GenConfig {
        target,
        target_options: TargetOptions {
            rotate_lines: a.rotate_lines,
            fluent,
            tls: a.tls.options(),
            connect_per_message: a.connect_per_message,
        },
        payload: PayloadSpec {
            format: a.format,
            framing: a.framing,
            message_size: a.message_size,
            seed: a.seed,
            content: a.content,
            ..PayloadSpec::default()
        },
        count: a.count,
        duration: a.duration,
        rate: a.rate,
        connections,
        gen_id_base: a.gen_id_base,
    };
    let progress = Progress::new("gen");
    let stats = generator::run(&cfg, Some(&progress), &AtomicBool::new(false))?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&stats).context("encoding the summary")?
        );
    } else {
        println!(
            "gen: sent {} events ({} bytes) in {:.3}s: {} events/s, {:.1} MB/s over {} connection(s) to {}{}{}{}",
            stats.sent,
            stats.bytes,
            stats.elapsed_secs,
            human(stats.rate()),
            stats.bytes as f64 / stats.elapsed_secs.max(1e-9) / 1e6,
            connections,
            a.target,
            stats.cpu_secs.map_or(String::new(), |c| format!(
                "; generator CPU {c:.2}s ({:.2} cores)",
                c / stats.elapsed_secs.max(1e-9)
            )),
            stats.recovery.map_or(String::new(), |r| format!(
                "; {} reconnection(s), {} request(s) ({} events) sent again",
                r.reconnects, r.resent_requests, r.resent_events
            )),
            stats
                .tls
                .as_ref()
                .map_or(String::new(), |t| format!("; {t}")),
        );
    }
    // After the summary, so what did go out is said too.
    if let (Some(n), Some(first)) = (stats.failed_connections, &stats.first_failure) {
        bail!(
            "{n} of {} connection(s) failed, each losing its message; the first: {first}",
            stats.sent
        );
    }
    Ok(())
}

fn meter_cmd(a: MeterArgs) -> Result<()> {
    let source = match (a.file, a.listen) {
        (Some(f), _) => MeterSource::File(f),
        (None, Some(l)) => MeterSource::Tcp(l),
        (None, None) => bail!("give --file or --listen"),
    };
    let rule = StopRule {
        expected: a.expect,
        idle: a.idle,
        max: a.max_time,
        grace: a.grace,
    };
    let live = !a.json;
    let tracker = meter::run_meter(&source, &rule, live, a.loggen)?;
    let report = tracker.report(a.expect, a.expect.map(|_| a.generators));
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).context("encoding the report")?
        );
    } else {
        print!("{}", report.to_text());
    }
    Ok(())
}

/// The command line as a user would type it: the program by its name, not its build path.
fn command_line() -> String {
    let mut args: Vec<String> = std::env::args().collect();
    if let Some(first) = args.first_mut()
        && let Some(name) = std::path::Path::new(first.as_str())
            .file_name()
            .and_then(|n| n.to_str())
    {
        *first = name.to_string();
    }
    args.join(" ")
}

fn run_cmd(a: RunArgs) -> Result<()> {
    let subjects = a
        .subjects
        .clone()
        .unwrap_or_else(|| a.scenario.default_subjects().to_vec());
    let loghaul = match a.loghaul_bin {
        Some(p) => p,
        None => {
            let exe = std::env::current_exe().context("locating this executable")?;
            let standalone = exe
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("loghaul-bench"));
            // The bare loop is `loghaul bench bare`, so it needs the real binary too.
            if standalone
                && (a.scenario.needs_loghaul()
                    || subjects
                        .iter()
                        .any(|k| matches!(k.base(), SubjectKind::Loghaul | SubjectKind::Bare)))
            {
                bail!(
                    "this is the standalone lab binary: give --loghaul-bin PATH (or LOGHAUL_BIN)"
                );
            }
            exe
        }
    };
    let (runs, warmup) = a.scenario.rounds(a.runs, a.warmup, a.events);
    if runs == 0 || subjects.is_empty() {
        bail!("--runs and --subjects must not be empty");
    }
    let out = a.out.unwrap_or_else(|| {
        let now = chrono::Local::now();
        PathBuf::from("bench/results")
            .join(now.format("%Y-%m-%d").to_string())
            .join(format!("{}-{}", a.scenario.name(), now.format("%H%M%S")))
    });
    let plan = Plan {
        scenario: a.scenario,
        subjects,
        runs,
        warmup,
        events: a.events.unwrap_or_else(|| a.scenario.default_events()),
        connections: a.connections,
        message_size: a
            .message_size
            .unwrap_or_else(|| a.scenario.default_message_size()),
        seed: a.seed,
        out: out.clone(),
        loghaul,
        idle_timeout: a.idle_timeout,
        keep: a.keep,
        driver: a.generator,
        command: command_line(),
        fluent: a.fluent.options()?,
        tree: a.tree.options(),
        http: a.http.options(),
        rsyslog_tls_driver: a.rsyslog_tls_driver,
    };
    let table = runner::run(&plan)?;
    println!("{table}");
    eprintln!("results: {}", out.display());
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("3x").is_err());
    }
}
