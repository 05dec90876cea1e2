//! The subjects of an experiment: loghaul and its peers, each given an equivalent private config.
//!
//! Every subject runs as an ordinary foreground child process of the bench, on free loopback ports,
//! with its files in the run's own folder; none is ever a system service. Peers are found through
//! environment variables (written by `scripts/install-peers.sh` into `/opt/loghaul-peers/env.sh`)
//! or at the fixed paths that script installs to. Fluentd is not installed by that script: the
//! `fluentd` subject runs only when `LOGHAUL_FLUENTD` names a `fluentd` command. A peer whose
//! program is missing keeps its row, `n/a` with the path it looked at and how to install it.
//!
//! This module knows subjects, not scenarios: a scenario describes what its subjects read and
//! write as a [`Setup`] (its name, for the configs' first line, and its [`Input`]), and says
//! itself which subjects it runs (`crate::scenarios`). Each server's config is rendered by its own
//! module: [`loghaul`] in Rust, the peers' ([`rsyslog`], [`syslog_ng`], [`fluentd`],
//! [`eventmachine`], [`otelcol`]) from the templates in `bench/peers/<peer>/`, embedded in the
//! binary.
//!
//! A subject may be several processes: a [`Launch`] may have [`Companion`]s, started and made
//! ready before the main process, stopped after it, and charged with it for CPU and memory.
//!
//! A subject may be a variant of another one's server, differing only in its config
//! ([`SubjectKind::base`]): `loghaul-disk-50ms` and `loghaul-disk-batch` put loghaul's sink behind
//! a disk buffer, `rsyslog-da` gives rsyslog's action a disk-assisted queue, `loghaul-tls` and
//! `rsyslog-tls` listen with TLS, `loghaul-vrl` runs its `remap` on the VRL runtime. Each keeps its config under its own name beside the figures.
//!
//! A TLS subject gets a throwaway PKI in its run's folder ([`crate::pki`]), and its [`Launch`]
//! tells the generator to speak TLS and trust that CA. rsyslog has TLS only in `imtcp` (`imptcp`
//! has none), so `rsyslog-tls` reads with `imtcp` and a stream driver ([`TlsDriver`]: GnuTLS or
//! OpenSSL) where `rsyslog` reads with `imptcp`.
//!
//! "Equivalent" means: the same input (protocol, framing, format) and the same output shape, a JSON
//! line per event with the fields loghaul writes (or the raw line when lines are only counted).
//! Each peer gets the modest tuning its own documentation recommends for throughput (bigger queues
//! and write buffers), nothing exotic; the exact configs are written into the results folder next
//! to the figures.

pub mod eventmachine;
pub mod fluentd;
pub mod loghaul;
pub mod otelcol;
pub mod rsyslog;
pub mod syslog_ng;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use serde::Serialize;

use crate::connect::TlsClientOptions;
use crate::pki::{ServerPki, make_pki};
pub use loghaul::DiskBuffer;
pub use rsyslog::{ActionQueue, RsyslogTls, TlsDriver};

/// A server under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SubjectKind {
    /// This project's server.
    Loghaul,
    /// loghaul with its sink behind a disk buffer fsynced every 50ms (`sync: 50ms`).
    #[value(name = "loghaul-disk-50ms")]
    #[serde(rename = "loghaul-disk-50ms")]
    LoghaulDisk50ms,
    /// loghaul with its sink behind a disk buffer fsynced for every batch (`sync: every_batch`,
    /// concurrent batches grouped under one fsync).
    #[value(name = "loghaul-disk-batch")]
    #[serde(rename = "loghaul-disk-batch")]
    LoghaulDiskBatch,
    /// loghaul with TLS on its listener (`tls: { cert, key }`; the generator speaks tls:// or
    /// fluent+tls://).
    #[value(name = "loghaul-tls")]
    #[serde(rename = "loghaul-tls")]
    LoghaulTls,
    /// loghaul with its `remap` program on the VRL runtime (`fast_path: false`) instead of the
    /// fast path (`transform` only): what the fast path saves. Its `route` conditions keep the
    /// fast path: the route has no such switch.
    #[value(name = "loghaul-vrl")]
    #[serde(rename = "loghaul-vrl")]
    LoghaulVrl,
    /// loghaul reloading its configuration (SIGHUP) halfway through the run, under a steady load
    /// of [`RELOAD_RATE`] events a second: its source changed (the listening socket handed over
    /// while the connections stay open on its predecessor) and its sink rebuilt (`syslog` only).
    #[value(name = "loghaul-reload")]
    #[serde(rename = "loghaul-reload")]
    LoghaulReload,
    /// loghaul with `loghaul tap` watching every output (100 events a second) for the whole run
    /// (`syslog` only): what tapping costs the pipeline.
    #[value(name = "loghaul-tap")]
    #[serde(rename = "loghaul-tap")]
    LoghaulTap,
    /// rsyslog (imptcp → omfile).
    Rsyslog,
    /// rsyslog with TLS: imtcp with a stream driver (gtls or ossl, `--rsyslog-tls-driver`) in
    /// anonymous mode (the server authenticates itself, clients need no certificate) → omfile.
    #[value(name = "rsyslog-tls")]
    #[serde(rename = "rsyslog-tls")]
    RsyslogTls,
    /// rsyslog whose omfile action has a disk-assisted queue, configured as rsyslog's docs
    /// configure reliable forwarding: `rsyslog`'s peer for loghaul's disk buffer.
    #[value(name = "rsyslog-da")]
    #[serde(rename = "rsyslog-da")]
    RsyslogDa,
    /// syslog-ng (network/syslog source → file).
    #[value(name = "syslog-ng")]
    SyslogNg,
    /// Ruby EventMachine line counter (the 2011 `basic.rb` experiment).
    Eventmachine,
    /// loghaul's codec in a bare thread-per-connection loop (`loghaul bench bare`): the yardstick
    /// for what loghaul's pipeline costs on top of parsing and writing.
    Bare,
    /// Fluentd (in_forward → out_file JSON), from `LOGHAUL_FLUENTD`: the forward protocol's peer.
    Fluentd,
    /// The OpenTelemetry Collector (contrib receivers → fileexporter), `otelcol-loghaul` from
    /// `LOGHAUL_OTELCOL`: OTLP's peer, and a syslog one.
    Otelcol,
    /// HTTP echo server: Node.js's `http` module echo server (bench/peers/http/echo/node_echo.js).
    Node,
    /// HTTP echo server: a Tornado echo server (PyPI tornado).
    Tornado,
    /// HTTP echo server: a Finagle echo server (Maven com.twitter:finagle-http, a small Java program).
    Finagle,
    /// HTTP echo server: the lab's own hand-written server (`bench httpd`), the least work per request:
    /// where the load tool itself saturates.
    Ceiling,
    /// HTTP client: the curl command line (libcurl).
    Curl,
    /// HTTP client: Ruby's standard Net::HTTP.
    #[value(name = "net-http")]
    NetHttp,
    /// HTTP client: Ruby curb (libcurl bindings).
    Curb,
    /// HTTP client: Ruby em-http-request (EventMachine).
    #[value(name = "em-http")]
    EmHttp,
    /// HTTP client: Python requests.
    Requests,
    /// HTTP client: Python urllib3.
    Urllib3,
}

/// What a live-operation variant does while it runs (see [`SubjectKind::operation`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A reload halfway through the run.
    Reload,
    /// A `loghaul tap` of every output for the whole run.
    Tap,
}

/// The steady load (events a second over all connections) under which `loghaul-reload` runs:
/// the rate around the reload is compared with this rate before it.
pub const RELOAD_RATE: u64 = 600_000;

impl SubjectKind {
    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Loghaul => "loghaul",
            Self::LoghaulDisk50ms => "loghaul-disk-50ms",
            Self::LoghaulDiskBatch => "loghaul-disk-batch",
            Self::LoghaulTls => "loghaul-tls",
            Self::LoghaulVrl => "loghaul-vrl",
            Self::LoghaulReload => "loghaul-reload",
            Self::LoghaulTap => "loghaul-tap",
            Self::Rsyslog => "rsyslog",
            Self::RsyslogTls => "rsyslog-tls",
            Self::RsyslogDa => "rsyslog-da",
            Self::SyslogNg => "syslog-ng",
            Self::Eventmachine => "eventmachine",
            Self::Bare => "bare",
            Self::Fluentd => "fluentd",
            Self::Otelcol => "otelcol",
            Self::Node => "node",
            Self::Tornado => "tornado",
            Self::Finagle => "finagle",
            Self::Ceiling => "ceiling",
            Self::Curl => "curl",
            Self::NetHttp => "net-http",
            Self::Curb => "curb",
            Self::EmHttp => "em-http",
            Self::Requests => "requests",
            Self::Urllib3 => "urllib3",
        }
    }

    /// The server a subject runs: loghaul for its disk-buffered, TLS and VRL-runtime variants, rsyslog for
    /// `rsyslog-da` and `rsyslog-tls`, the subject itself otherwise. Variants differ from their
    /// server only in their config.
    pub fn base(self) -> SubjectKind {
        match self {
            Self::LoghaulDisk50ms
            | Self::LoghaulDiskBatch
            | Self::LoghaulTls
            | Self::LoghaulVrl
            | Self::LoghaulReload
            | Self::LoghaulTap => Self::Loghaul,
            Self::RsyslogDa | Self::RsyslogTls => Self::Rsyslog,
            k @ (Self::Loghaul
            | Self::Rsyslog
            | Self::SyslogNg
            | Self::Eventmachine
            | Self::Bare
            | Self::Fluentd
            | Self::Otelcol
            | Self::Node
            | Self::Tornado
            | Self::Finagle
            | Self::Ceiling
            | Self::Curl
            | Self::NetHttp
            | Self::Curb
            | Self::EmHttp
            | Self::Requests
            | Self::Urllib3) => k,
        }
    }

    /// Whether the subject listens with TLS (and the generator must speak it).
    pub fn tls(self) -> bool {
        matches!(self, Self::LoghaulTls | Self::RsyslogTls)
    }

    /// Whether the subject is loghaul with its `remap` forced onto the VRL runtime.
    pub fn vrl_runtime(self) -> bool {
        self == Self::LoghaulVrl
    }

    /// What the variant does while it runs, beside taking the load.
    pub fn operation(self) -> Option<Operation> {
        match self {
            Self::LoghaulReload => Some(Operation::Reload),
            Self::LoghaulTap => Some(Operation::Tap),
            _ => None,
        }
    }

    /// The `sync` of a loghaul variant's disk buffer (`None`: no disk buffer).
    pub fn disk_sync(self) -> Option<&'static str> {
        match self {
            Self::LoghaulDisk50ms => Some("50ms"),
            Self::LoghaulDiskBatch => Some("every_batch"),
            Self::Loghaul
            | Self::LoghaulTls
            | Self::LoghaulVrl
            | Self::LoghaulReload
            | Self::LoghaulTap
            | Self::Rsyslog
            | Self::RsyslogTls
            | Self::RsyslogDa
            | Self::SyslogNg
            | Self::Eventmachine
            | Self::Bare
            | Self::Fluentd
            | Self::Otelcol
            | Self::Node
            | Self::Tornado
            | Self::Finagle
            | Self::Ceiling
            | Self::Curl
            | Self::NetHttp
            | Self::Curb
            | Self::EmHttp
            | Self::Requests
            | Self::Urllib3 => None,
        }
    }

    /// Whether this is one of the HTTP experiments' own peers (servers or clients).
    pub fn is_http_peer(self) -> bool {
        matches!(
            self,
            Self::Node
                | Self::Tornado
                | Self::Finagle
                | Self::Ceiling
                | Self::Curl
                | Self::NetHttp
                | Self::Curb
                | Self::EmHttp
                | Self::Requests
                | Self::Urllib3
        )
    }
}

/// What a one-process subject reads on its port, and what it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Raw newline lines over TCP, only counted (loghaul's `blackhole`, a line counter), or
    /// written back as they came where the subject cannot only count.
    CountedLines,
    /// Raw newline lines over TCP, into JSON lines with receive time and client address.
    RawLines,
    /// RFC3164 over TCP, parsed (timestamps included) into JSON lines.
    Rfc3164,
    /// RFC5424 with structured data, octet-counted, into JSON lines.
    Rfc5424,
    /// The Fluentd forward protocol into JSON lines.
    Forward,
    /// OTLP/HTTP (`POST /v1/logs`, binary protobuf) into JSON lines (the Collector: an OTLP/JSON
    /// request per line).
    Otlp,
    /// RFC3164 over TCP whose messages are key=value pairs (`transform`): the pairs parsed into
    /// fields, `user` renamed `user_name`, `session` deleted, `pipeline: "lab"` added, and each
    /// event written as a JSON line into one of two files by its severity ([`routed_outputs`]).
    KeyValue,
}

/// The two files a [`Input::KeyValue`] subject writes instead of `out` (`DIR/out.log`): events
/// of severity `err` or more severe into `DIR/out-errors.log`, the rest into
/// `DIR/out-other.log`.
pub fn routed_outputs(out: &str) -> [String; 2] {
    let stem = out.strip_suffix(".log").unwrap_or(out);
    [format!("{stem}-errors.log"), format!("{stem}-other.log")]
}

/// A scenario as a subject's config sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup<'a> {
    /// The scenario's name, for the first line of every config (`# loghaul bench: scenario X`).
    pub name: &'a str,
    /// What the subject reads and writes.
    pub input: Input,
    /// What the process is in its scenario, after the name in loghaul's configs (`; B, the
    /// receiver: ...`); empty for a subject of one process.
    pub role: &'a str,
}

impl<'a> Setup<'a> {
    /// A one-process subject of scenario `name` reading `input`.
    pub fn new(name: &'a str, input: Input) -> Self {
        Self {
            name,
            input,
            role: "",
        }
    }
}

/// How to tell that a subject accepts connections.
#[derive(Clone, Debug)]
pub enum Ready {
    /// `GET /health` on this port answers 200.
    Health(u16),
    /// A TCP connect to the input port succeeds.
    Connect,
}

/// Where the bench learns what the subject received.
#[derive(Clone, Debug)]
pub enum Output {
    /// The subject writes lines carrying the markers into this file; the meter tails it.
    File(PathBuf),
    /// The subject writes each event into one of these files (routed); the meter tails them
    /// all into one set of books, where an event in two files is a duplicate.
    Files(Vec<PathBuf>),
    /// The subject writes many events to a line into this file (the Collector's file exporter:
    /// an OTLP/JSON request per line, each record's marker in its body). The books are kept as
    /// for [`Output::File`] (the meter counts every marker, not lines); the watcher samples
    /// markers in the newest bytes instead of whole lines, which a batch of records outgrows.
    Records(PathBuf),
    /// The subject only counts lines and writes the count (ASCII) into this file now and then.
    CountFile(PathBuf),
    /// loghaul with a `blackhole` sink named `out`: the count is that sink's
    /// `loghaul_component_sent_events_total` on the API port (lines that are only counted,
    /// as EventMachine counts them, not written).
    Metrics(u16),
}

impl Output {
    /// The files the meter reads (none for a count).
    pub fn files(&self) -> Vec<PathBuf> {
        match self {
            Output::File(path) | Output::Records(path) => vec![path.clone()],
            Output::Files(paths) => paths.clone(),
            Output::CountFile(_) | Output::Metrics(_) => Vec::new(),
        }
    }

    /// The count a counting subject has published so far (`None` for file outputs).
    pub fn count(&self) -> Option<u64> {
        match self {
            Output::File(_) | Output::Files(_) | Output::Records(_) => None,
            Output::CountFile(path) => Some(
                std::fs::read_to_string(path)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(0),
            ),
            Output::Metrics(api) => {
                Some(sink_metric(*api, "loghaul_component_sent_events_total").unwrap_or(0))
            }
        }
    }
}

/// The series `name` of the sink `out` (a counter), read from loghaul's /metrics on `api`
/// (`None`: no answer, or no such series).
pub fn sink_metric(api: u16, name: &str) -> Option<u64> {
    component_metric(api, name, "out")
}

/// The series `name` of the component `component` (a counter or a gauge that is never
/// negative), read from loghaul's /metrics on `api` (`None`: no answer, or no such series).
pub fn component_metric(api: u16, name: &str, component: &str) -> Option<u64> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", api)).ok()?;
    conn.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .ok()?;
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    conn.read_to_string(&mut body).ok()?;
    let series = format!("{name}{{component_id=\"{component}\",");
    body.lines()
        .find(|l| l.starts_with(&series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.trim().parse().ok())
}

/// Everything needed to start one subject for one run.
#[derive(Clone, Debug)]
pub struct Launch {
    /// Program to execute.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// The loopback port the generator sends to.
    pub input_port: u16,
    /// Readiness probe.
    pub ready: Ready,
    /// What to meter.
    pub output: Output,
    /// Processes of the same subject started (and ready) before this one and stopped after it,
    /// in that order: the receiving end of a relay.
    pub companions: Vec<Companion>,
    /// loghaul's API port when its sink `out` has a disk buffer: the run reads the buffer's
    /// `loghaul_disk_buffer_fsyncs_total` there before and after the load.
    pub disk_buffer_api: Option<u16>,
    /// loghaul's API port when it runs a `remap` ([`loghaul::REMAP_ID`]): the run reads how many
    /// events its fast path left to the VRL runtime after the load.
    pub remap_api: Option<u16>,
    /// How the generator speaks TLS to a TLS subject (`None`: plain TCP).
    pub tls: Option<TlsClientOptions>,
    /// A loghaul subject's API port and configuration file, for the operations a variant does
    /// while it runs (a reload, a tap).
    pub live: Option<(u16, PathBuf)>,
}

/// A further process of a subject (see the module doc).
#[derive(Clone, Debug)]
pub struct Companion {
    /// Short name, for its log files and messages (`b`: `stderr-b.log`).
    pub name: String,
    /// Program to execute.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// The port that must accept connections before the subject's main process starts.
    pub port: u16,
    /// Readiness probe.
    pub ready: Ready,
}

/// The message for a `fluentd` subject without `LOGHAUL_FLUENTD`.
pub const FLUENTD_MISSING: &str = "the fluentd subject needs LOGHAUL_FLUENTD, the fluentd command \
     to run (Fluentd is not installed by scripts/install-peers.sh): e.g. \
     LOGHAUL_FLUENTD=/usr/local/bin/fluentd after `gem install fluentd`, or \
     LOGHAUL_FLUENTD='bundle exec fluentd' in a Gemfile's folder";

/// Paths of the installed peers.
#[derive(Clone, Debug)]
pub struct Peers {
    /// rsyslogd.
    pub rsyslogd: PathBuf,
    /// syslog-ng (the wrapper that sets its library path).
    pub syslog_ng: PathBuf,
    /// syslog-ng's module folder, if it must be given explicitly.
    pub syslog_ng_modules: Option<PathBuf>,
    /// ruby.
    pub ruby: PathBuf,
    /// syslog-ng's loggen (the cross-check generator).
    pub loggen: PathBuf,
    /// The `fluentd` command, split into words (`None`: `LOGHAUL_FLUENTD` is not set).
    pub fluentd: Option<Vec<String>>,
    /// The OpenTelemetry Collector (`otelcol-loghaul`).
    pub otelcol: PathBuf,
    /// The stream driver `rsyslog-tls` reads with (`--rsyslog-tls-driver`).
    pub rsyslog_tls_driver: TlsDriver,
}

impl Peers {
    /// From `LOGHAUL_RSYSLOGD`, `LOGHAUL_SYSLOG_NG`, `LOGHAUL_SYSLOG_NG_MODULES`, `LOGHAUL_RUBY`,
    /// `LOGHAUL_LOGGEN`, `LOGHAUL_OTELCOL`, or the paths `scripts/install-peers.sh` installs to; `LOGHAUL_FLUENTD` (a command, words
    /// split on whitespace) has no default.
    pub fn locate() -> Self {
        let env = |k: &str, d: &str| PathBuf::from(std::env::var(k).unwrap_or_else(|_| d.into()));
        Self {
            rsyslogd: env("LOGHAUL_RSYSLOGD", "/usr/sbin/rsyslogd"),
            syslog_ng: env("LOGHAUL_SYSLOG_NG", "/opt/loghaul-peers/bin/syslog-ng"),
            syslog_ng_modules: std::env::var("LOGHAUL_SYSLOG_NG_MODULES")
                .ok()
                .map(PathBuf::from),
            ruby: env("LOGHAUL_RUBY", "/usr/bin/ruby"),
            loggen: env("LOGHAUL_LOGGEN", "/opt/loghaul-peers/bin/loggen"),
            fluentd: std::env::var("LOGHAUL_FLUENTD")
                .ok()
                .map(|c| c.split_whitespace().map(str::to_string).collect::<Vec<_>>())
                .filter(|words| !words.is_empty()),
            otelcol: env(
                "LOGHAUL_OTELCOL",
                "/opt/loghaul-peers/otelcol/otelcol-loghaul",
            ),
            rsyslog_tls_driver: TlsDriver::default(),
        }
    }

    /// Why `kind` cannot run on this machine, for a peer whose absence is a row of its own
    /// (`n/a: ...`) rather than a failed run: the OpenTelemetry Collector, which the installer
    /// builds from source with a Go newer than Debian's, so a machine may well lack it.
    pub fn unavailable(&self, kind: SubjectKind) -> Option<String> {
        (kind == SubjectKind::Otelcol && !self.otelcol.is_file()).then(|| {
            format!(
                "n/a: the OpenTelemetry Collector is not installed: no {} (scripts/install-peers.sh \
                 builds it, with Go 1.26 or newer; or set LOGHAUL_OTELCOL)",
                self.otelcol.display()
            )
        })
    }

    /// The program of `kind`, failing with a hint when it is not installed.
    ///
    /// # Errors
    /// The program does not exist.
    pub fn program(&self, kind: SubjectKind, loghaul: &Path) -> Result<PathBuf> {
        let p = match kind.base() {
            SubjectKind::Loghaul | SubjectKind::Bare => loghaul.to_path_buf(),
            SubjectKind::Rsyslog => self.rsyslogd.clone(),
            SubjectKind::SyslogNg => self.syslog_ng.clone(),
            SubjectKind::Eventmachine => self.ruby.clone(),
            SubjectKind::Fluentd => match self.fluentd.as_ref().and_then(|w| w.first()) {
                Some(program) => which(program),
                None => bail!("{FLUENTD_MISSING}"),
            },
            SubjectKind::Otelcol => self.otelcol.clone(),
            k @ (SubjectKind::Node
            | SubjectKind::Tornado
            | SubjectKind::Finagle
            | SubjectKind::Ceiling
            | SubjectKind::Curl
            | SubjectKind::NetHttp
            | SubjectKind::Curb
            | SubjectKind::EmHttp
            | SubjectKind::Requests
            | SubjectKind::Urllib3) => bail!(
                "{} is a peer of the HTTP experiments, started by their own runners",
                k.name()
            ),
            // `base` maps every variant to its server.
            k @ (SubjectKind::LoghaulDisk50ms
            | SubjectKind::LoghaulDiskBatch
            | SubjectKind::LoghaulTls
            | SubjectKind::LoghaulVrl
            | SubjectKind::LoghaulReload
            | SubjectKind::LoghaulTap
            | SubjectKind::RsyslogDa
            | SubjectKind::RsyslogTls) => bail!("{} is a variant, not a server", k.name()),
        };
        if !p.exists() {
            bail!(
                "{} not found at {} (run scripts/install-peers.sh as root, or set its LOGHAUL_* \
                 path variable)",
                kind.name(),
                p.display()
            );
        }
        Ok(p)
    }

    /// A short description of the implementation: name, version, language.
    pub fn platform(&self, kind: SubjectKind, loghaul: &Path) -> String {
        let first_line = |prog: &Path, args: &[&str]| -> Option<String> {
            let out = std::process::Command::new(prog).args(args).output().ok()?;
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            text.lines().next().map(str::trim).map(str::to_string)
        };
        if let Some(sync) = kind.disk_sync() {
            let base = self.platform(kind.base(), loghaul);
            return format!("{base}, disk buffer, sync: {sync}");
        }
        if kind == SubjectKind::RsyslogDa {
            let base = self.platform(kind.base(), loghaul);
            return format!("{base}, disk-assisted action queue");
        }
        if kind == SubjectKind::RsyslogTls {
            let base = self.platform(kind.base(), loghaul);
            return format!("{base}, imtcp + {}", self.rsyslog_tls_driver.describe());
        }
        if kind == SubjectKind::LoghaulTls {
            let base = self.platform(kind.base(), loghaul);
            return format!("{base}, TLS (rustls)");
        }
        if kind.vrl_runtime() {
            let base = self.platform(kind.base(), loghaul);
            return format!("{base}, remap on the VRL runtime");
        }
        match kind {
            SubjectKind::Loghaul => {
                let v =
                    first_line(loghaul, &["--version"]).unwrap_or_else(|| "loghaul".to_string());
                format!("{v} (Rust)")
            }
            SubjectKind::Bare => {
                let v =
                    first_line(loghaul, &["--version"]).unwrap_or_else(|| "loghaul".to_string());
                format!("{v} codec, thread per connection, no pipeline (Rust)")
            }
            SubjectKind::Rsyslog => {
                let v = first_line(&self.rsyslogd, &["-v"])
                    .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
                    .unwrap_or_default();
                format!("rsyslog {v} (C)")
            }
            SubjectKind::SyslogNg => {
                let v = first_line(&self.syslog_ng, &["--version"])
                    .and_then(|l| {
                        l.split('(')
                            .nth(1)
                            .map(|s| s.trim_end_matches(')').to_string())
                    })
                    .unwrap_or_default();
                format!("syslog-ng {v} (C)")
            }
            SubjectKind::Fluentd => {
                let v = self
                    .fluentd
                    .as_ref()
                    .and_then(|w| {
                        let (program, rest) = w.split_first()?;
                        let mut args: Vec<&str> = rest.iter().map(String::as_str).collect();
                        args.push("--version");
                        first_line(Path::new(program), &args)
                    })
                    .unwrap_or_else(|| "fluentd".to_string());
                format!("{v} (Ruby)")
            }
            SubjectKind::Otelcol => {
                // `otelcol-loghaul version 0.165.0-loghaul`: the Collector's core release.
                let v = first_line(&self.otelcol, &["--version"])
                    .and_then(|l| l.rsplit(' ').next().map(|v| format!(" {v}")))
                    .unwrap_or_default();
                format!("OpenTelemetry Collector{v} (Go)")
            }
            SubjectKind::Eventmachine => {
                let v = first_line(
                    &self.ruby,
                    &[
                        "-reventmachine",
                        "-e",
                        "print RUBY_VERSION, ' ', EM::VERSION",
                    ],
                )
                .unwrap_or_default();
                let mut parts = v.split_whitespace();
                format!(
                    "Ruby {} + EventMachine {}",
                    parts.next().unwrap_or("?"),
                    parts.next().unwrap_or("?")
                )
            }
            k @ (SubjectKind::Node
            | SubjectKind::Tornado
            | SubjectKind::Finagle
            | SubjectKind::Ceiling
            | SubjectKind::Curl
            | SubjectKind::NetHttp
            | SubjectKind::Curb
            | SubjectKind::EmHttp
            | SubjectKind::Requests
            | SubjectKind::Urllib3) => crate::http_peers::platform(k, &self.ruby),
            // The variants returned above.
            k @ (SubjectKind::LoghaulDisk50ms
            | SubjectKind::LoghaulDiskBatch
            | SubjectKind::LoghaulTls
            | SubjectKind::LoghaulVrl
            | SubjectKind::LoghaulReload
            | SubjectKind::LoghaulTap
            | SubjectKind::RsyslogDa
            | SubjectKind::RsyslogTls) => self.platform(k.base(), loghaul),
        }
    }
}

/// A loopback port nothing listens on, for a subject or companion to bind a moment later: the
/// first of [`port_candidates`] that binds.
///
/// # Errors
/// No port could be bound.
pub fn free_port() -> Result<u16> {
    port_candidates()
        .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .context("finding a free port: none of the candidate ports could be bound")
}

/// Loopback ports to try for a listener: first ones below the kernel's range of ephemeral
/// ports (`ip_local_port_range`), when there is room, then ones `bind(:0)` returns.
///
/// A port from the ephemeral range can become the local port of some process's outgoing
/// connection (the Kafka broker and its clients open many) between a check and the listener's
/// own `bind`, which then fails with "address already in use". Below the range only listeners
/// compete, and a check sees those. The walk starts at a place that differs per process, so
/// labs and test runs at once rarely try the same ports. The test harness uses it too.
pub fn port_candidates() -> impl Iterator<Item = u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FLOOR: u32 = 10_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let span = low.saturating_sub(FLOOR);
    let start = std::process::id().wrapping_mul(2_654_435_761) % span.max(1);
    let below = (0..if span > 1_000 { 200 } else { 0 }).filter_map(move |_| {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        u16::try_from(FLOOR + (start + step.wrapping_mul(7_919)) % span).ok()
    });
    let any = (0..200).filter_map(|_| {
        let l = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
        Some(l.local_addr().ok()?.port())
    });
    below.chain(any)
}

/// Writes `kind`'s config for `setup` into `dir` and returns how to start it: one process
/// listening on a free port.
///
/// # Errors
/// The config cannot be written, the program is missing, or `kind` is a peer of the HTTP
/// experiments (their runners start those).
pub fn prepare(
    kind: SubjectKind,
    setup: &Setup<'_>,
    dir: &Path,
    peers: &Peers,
    loghaul: &Path,
) -> Result<Launch> {
    let program = peers.program(kind, loghaul)?;
    let port = free_port()?;
    let out = dir.join("out.log");
    let s = |p: &Path| p.display().to_string();
    let write = |name: &str, text: &str| write_config(dir, name, text);
    let counted = setup.input == Input::CountedLines;
    // What the meter reads: the one output, or the two a routing subject writes instead.
    let written = match setup.input {
        Input::KeyValue => Output::Files(routed_outputs(&s(&out)).map(PathBuf::from).to_vec()),
        Input::CountedLines
        | Input::RawLines
        | Input::Rfc3164
        | Input::Rfc5424
        | Input::Forward
        | Input::Otlp => Output::File(out.clone()),
    };
    let launch = |program, args, ready, output| Launch {
        program,
        args,
        env: vec![],
        input_port: port,
        ready,
        output,
        companions: vec![],
        disk_buffer_api: None,
        remap_api: None,
        tls: None,
        live: None,
    };
    match kind {
        SubjectKind::Fluentd => {
            let words = peers.fluentd.clone().unwrap_or_default();
            let conf = write(
                "fluentd.conf",
                &fluentd::receiver(
                    &format!("scenario {}", setup.name),
                    port,
                    &s(dir),
                    fluentd::Flush::Interval,
                ),
            )?;
            let mut args: Vec<String> = words.into_iter().skip(1).collect();
            // One process: the supervisor would only add a second Ruby process to the figures.
            args.extend(["-c".into(), s(&conf), "--no-supervisor".into()]);
            Ok(launch(
                program,
                args,
                Ready::Connect,
                Output::File(dir.join(format!("out.{}.log", crate::fluent::DEFAULT_TAG))),
            ))
        }
        SubjectKind::Loghaul
        | SubjectKind::LoghaulDisk50ms
        | SubjectKind::LoghaulDiskBatch
        | SubjectKind::LoghaulTls
        | SubjectKind::LoghaulVrl
        | SubjectKind::LoghaulReload
        | SubjectKind::LoghaulTap => {
            let api = free_port()?;
            let data_dir = dir.join("data");
            let disk = kind.disk_sync().map(|sync| DiskBuffer {
                sync,
                data_dir: s(&data_dir),
            });
            let pki = if kind.tls() {
                Some(make_pki(dir)?)
            } else {
                None
            };
            // Named after the subject: the variants' configs are kept side by side.
            let conf = write(
                &format!("{}.yaml", kind.name()),
                &loghaul::subject_config(
                    setup,
                    port,
                    api,
                    &s(&out),
                    &loghaul::Variant {
                        disk: disk.as_ref(),
                        tls: pki.as_ref(),
                        vrl_runtime: kind.vrl_runtime(),
                    },
                ),
            )?;
            let output = if counted {
                Output::Metrics(api)
            } else {
                written
            };
            Ok(Launch {
                disk_buffer_api: disk.map(|_| api),
                remap_api: (setup.input == Input::KeyValue).then_some(api),
                live: Some((api, conf.clone())),
                tls: pki.map(|p| p.client()),
                ..launch(
                    program,
                    vec!["run".into(), "-c".into(), s(&conf)],
                    Ready::Health(api),
                    output,
                )
            })
        }
        SubjectKind::Rsyslog | SubjectKind::RsyslogDa | SubjectKind::RsyslogTls => {
            // Its spool (and the DA queue's files) stay in the run's folder.
            let work = dir.join("rsyslog-work");
            std::fs::create_dir_all(&work).context("creating rsyslog's work folder")?;
            let queue = if kind == SubjectKind::RsyslogDa {
                ActionQueue::DiskAssisted
            } else {
                ActionQueue::Direct
            };
            let pki = if kind.tls() {
                Some(make_pki(dir)?)
            } else {
                None
            };
            let tls = pki.as_ref().map(|p| RsyslogTls {
                driver: peers.rsyslog_tls_driver,
                pki: p,
            });
            let conf = write(
                &format!("{}.conf", kind.name()),
                &rsyslog::config_with(setup, port, &s(&work), &s(&out), queue, tls.as_ref()),
            )?;
            let args = vec![
                "-n".into(),
                "-f".into(),
                s(&conf),
                "-i".into(),
                s(&dir.join("rsyslog.pid")),
            ];
            Ok(Launch {
                tls: pki.as_ref().map(ServerPki::client),
                ..launch(program, args, Ready::Connect, written)
            })
        }
        SubjectKind::SyslogNg => {
            let conf = write("syslog-ng.conf", &syslog_ng::config(setup, port, &s(&out)))?;
            let mut args = vec![
                "-F".into(),
                "--no-caps".into(),
                "-f".into(),
                s(&conf),
                "--pidfile".into(),
                s(&dir.join("syslog-ng.pid")),
                "--control".into(),
                s(&dir.join("syslog-ng.ctl")),
                "--persist-file".into(),
                s(&dir.join("syslog-ng.persist")),
            ];
            if let Some(m) = &peers.syslog_ng_modules {
                args.push(format!("--module-path={}", m.display()));
            }
            Ok(launch(program, args, Ready::Connect, written))
        }
        SubjectKind::Otelcol => {
            let Some(text) = otelcol::config(setup, port, &s(&out)) else {
                bail!("otelcol is not configured for scenario {}", setup.name);
            };
            let conf = write("otelcol.yaml", &text)?;
            Ok(launch(
                program,
                vec!["--config".into(), s(&conf)],
                Ready::Connect,
                Output::Records(out),
            ))
        }
        SubjectKind::Eventmachine => {
            let count = dir.join("count");
            let script = write("basic.rb", eventmachine::SCRIPT)?;
            Ok(launch(
                program,
                vec![s(&script), port.to_string(), s(&count)],
                Ready::Connect,
                Output::CountFile(count),
            ))
        }
        SubjectKind::Bare => {
            let target = if counted { dir.join("count") } else { out };
            let args: Vec<String> = vec![
                "bench".into(),
                "bare".into(),
                "--scenario".into(),
                setup.name.into(),
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--out".into(),
                s(&target),
            ];
            write_bare_conf(dir, &args)?;
            let output = if counted {
                Output::CountFile(target)
            } else {
                Output::File(target)
            };
            Ok(launch(program, args, Ready::Connect, output))
        }
        SubjectKind::Node
        | SubjectKind::Tornado
        | SubjectKind::Finagle
        | SubjectKind::Ceiling
        | SubjectKind::Curl
        | SubjectKind::NetHttp
        | SubjectKind::Curb
        | SubjectKind::EmHttp
        | SubjectKind::Requests
        | SubjectKind::Urllib3 => bail!(
            "{} is a peer of the HTTP experiments, started by their own runners",
            kind.name()
        ),
    }
}

/// Writes `text` into `dir/name` and returns its path.
///
/// # Errors
/// The file cannot be written.
pub fn write_config(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    let p = dir.join(name);
    std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
    Ok(p)
}

/// The bare loop has no config: its command line `args` goes with the other subjects' configs,
/// as `dir/bare.conf`.
///
/// # Errors
/// The file cannot be written.
pub fn write_bare_conf(dir: &Path, args: &[String]) -> Result<PathBuf> {
    write_config(
        dir,
        "bare.conf",
        &format!(
            "# loghaul bench: the bare loop (crates/loghaul-bench/src/bare.rs) takes no config; it \
             ran as\nloghaul {}\n",
            args.join(" ")
        ),
    )
}

/// `program` as a path: as given when it names a path, else the first match on `PATH`.
fn which(program: &str) -> PathBuf {
    if program.contains('/') {
        return PathBuf::from(program);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(program))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| PathBuf::from(program))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    #[test]
    fn disk_variants_parse_and_map_to_their_server() {
        for (name, kind, base, sync) in [
            (
                "loghaul-disk-50ms",
                SubjectKind::LoghaulDisk50ms,
                SubjectKind::Loghaul,
                Some("50ms"),
            ),
            (
                "loghaul-disk-batch",
                SubjectKind::LoghaulDiskBatch,
                SubjectKind::Loghaul,
                Some("every_batch"),
            ),
            (
                "rsyslog-da",
                SubjectKind::RsyslogDa,
                SubjectKind::Rsyslog,
                None,
            ),
            ("loghaul", SubjectKind::Loghaul, SubjectKind::Loghaul, None),
        ] {
            assert_eq!(SubjectKind::from_str(name, false).unwrap(), kind);
            assert_eq!(kind.name(), name);
            assert_eq!(serde_json::to_value(kind).unwrap(), name);
            assert_eq!((kind.base(), kind.disk_sync()), (base, sync));
        }
    }

    /// A missing Collector is a row of its own, saying how to get it; the other peers are not
    /// asked.
    #[test]
    fn a_missing_collector_is_unavailable_with_its_reason() {
        let mut peers = Peers::locate();
        peers.otelcol = PathBuf::from("/nonexistent/otelcol-loghaul");
        let why = peers.unavailable(SubjectKind::Otelcol).unwrap();
        assert!(why.starts_with("n/a: ") && why.contains("/nonexistent/otelcol-loghaul"));
        assert!(why.contains("LOGHAUL_OTELCOL") && why.contains("install-peers.sh"));
        assert!(peers.unavailable(SubjectKind::Rsyslog).is_none());
        assert_eq!(
            SubjectKind::from_str("otelcol", false).unwrap(),
            SubjectKind::Otelcol
        );
    }

    /// The lab's PKI makes a server config loghaul accepts.
    #[test]
    fn the_runs_pki_makes_a_server_config_loghaul_accepts() {
        let dir = tempfile::tempdir().unwrap();
        let pki = make_pki(dir.path()).unwrap();
        assert!(pki.cert.starts_with(dir.path().join("pki")));
        let server = loghaul_tls::TlsConfig {
            cert: Some(pki.cert.clone()),
            key: Some(pki.key.clone()),
            ..loghaul_tls::TlsConfig::default()
        };
        loghaul_tls::check(&server, loghaul_tls::Role::Server).unwrap();
        let client = pki.client();
        assert_eq!(client.ca.as_ref(), Some(&pki.ca));
        assert!(client.cert.is_none() && client.key.is_none());
    }
}
