//! The subjects of an experiment: loghaul and its peers, each given an equivalent private config.
//!
//! Every subject runs as an ordinary foreground child process of the bench, on free loopback ports,
//! with its files in the run's own folder; none is ever a system service. Peers are found through
//! environment variables (written by `scripts/install-peers.sh` into `/opt/loghaul-peers/env.sh`)
//! or at the fixed paths that script installs to. Fluentd is not installed by that script: the
//! `fluentd` subject runs only when `LOGHAUL_FLUENTD` names a `fluentd` command.
//!
//! In `tail` there is no port: the subject reads a file the lab wrote before starting it
//! ([`prepare_tail`]), and its clock starts when the process does.
//!
//! A subject may be several processes: in `forward_relay`, loghaul is a pair (A relays to B, B
//! writes the file); B is a [`Companion`] started and made ready before A, stopped after it, and
//! charged with A for CPU and memory.
//!
//! A subject may be a variant of another one's server, differing only in its config
//! ([`SubjectKind::base`]): `loghaul-disk-50ms` and `loghaul-disk-batch` put loghaul's sink behind
//! a disk buffer, `rsyslog-da` gives rsyslog's action a disk-assisted queue, `loghaul-tls` and
//! `rsyslog-tls` listen with TLS. Each keeps its config under its own name beside the figures.
//!
//! A TLS subject gets a throwaway PKI in its run's folder ([`make_pki`]: a CA and a server
//! certificate for `localhost` and 127.0.0.1 it issued), and its [`Launch`] tells the generator
//! to speak TLS and trust that CA. rsyslog has TLS only in `imtcp` (`imptcp` has none), so
//! `rsyslog-tls` reads with `imtcp` and a stream driver ([`TlsDriver`]: GnuTLS or OpenSSL) where
//! `rsyslog` reads with `imptcp`.
//!
//! "Equivalent" means: the same input (protocol, framing, format) and the same output shape, a JSON
//! line per event with the fields loghaul writes (or the raw line for `basic`). Each peer gets the
//! modest tuning its own documentation recommends for throughput (bigger queues and write buffers),
//! nothing exotic; the exact configs are written into the results folder next to the figures.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use serde::Serialize;

use crate::connect::TlsClientOptions;

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
    /// Fluentd (in_forward → out_file JSON), from `LOGHAUL_FLUENTD`: the forward scenarios' peer.
    Fluentd,
    /// `http_echo`: Node.js's `http` module echo server (bench/peers/http/echo/node_echo.js).
    Node,
    /// `http_echo`: a Tornado echo server (PyPI tornado).
    Tornado,
    /// `http_echo`: a Finagle echo server (Maven com.twitter:finagle-http, a small Java program).
    Finagle,
    /// `http_echo`: the lab's own hand-written server (`bench httpd`), the least work per request:
    /// where the load tool itself saturates.
    Ceiling,
    /// `http_client`: the curl command line (libcurl).
    Curl,
    /// `http_client`: Ruby's standard Net::HTTP.
    #[value(name = "net-http")]
    NetHttp,
    /// `http_client`: Ruby curb (libcurl bindings).
    Curb,
    /// `http_client`: Ruby em-http-request (EventMachine).
    #[value(name = "em-http")]
    EmHttp,
    /// `http_client`: Python requests.
    Requests,
    /// `http_client`: Python urllib3.
    Urllib3,
}

impl SubjectKind {
    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Loghaul => "loghaul",
            Self::LoghaulDisk50ms => "loghaul-disk-50ms",
            Self::LoghaulDiskBatch => "loghaul-disk-batch",
            Self::LoghaulTls => "loghaul-tls",
            Self::Rsyslog => "rsyslog",
            Self::RsyslogTls => "rsyslog-tls",
            Self::RsyslogDa => "rsyslog-da",
            Self::SyslogNg => "syslog-ng",
            Self::Eventmachine => "eventmachine",
            Self::Bare => "bare",
            Self::Fluentd => "fluentd",
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

    /// The server a subject runs: loghaul for its disk-buffered and TLS variants, rsyslog for
    /// `rsyslog-da` and `rsyslog-tls`, the subject itself otherwise. Variants differ from their
    /// server only in their config.
    pub fn base(self) -> SubjectKind {
        match self {
            Self::LoghaulDisk50ms | Self::LoghaulDiskBatch | Self::LoghaulTls => Self::Loghaul,
            Self::RsyslogDa | Self::RsyslogTls => Self::Rsyslog,
            k => k,
        }
    }

    /// Whether the subject listens with TLS (and the generator must speak it).
    pub fn tls(self) -> bool {
        matches!(self, Self::LoghaulTls | Self::RsyslogTls)
    }

    /// The `sync` of a loghaul variant's disk buffer (`None`: no disk buffer).
    pub fn disk_sync(self) -> Option<&'static str> {
        match self {
            Self::LoghaulDisk50ms => Some("50ms"),
            Self::LoghaulDiskBatch => Some("every_batch"),
            _ => None,
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

/// An experiment, as far as a subject's configuration is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// Raw newline lines over TCP, counted, no parsing.
    Basic,
    /// RFC3164 over TCP, parsed (timestamps included) into a JSON-lines file.
    Syslog,
    /// Raw lines with receive time and client address into a JSON-lines file.
    Raw,
    /// RFC5424 with structured data, octet-counted, into a JSON-lines file.
    Rfc5424,
    /// Fluentd forward protocol (PackedForward) into a JSON-lines file.
    Forward,
    /// Forward protocol through a relay (A: fluent source → fluent sink with acks) into a
    /// receiver (B: fluent source → JSON-lines file); the subject is the pair.
    #[value(name = "forward_relay", alias = "forward-relay")]
    #[serde(rename = "forward_relay")]
    ForwardRelay,
    /// Fluentd's peer-deliver tree: tailing agents (file source → fluent sink) → delivers
    /// (fluent → fluent) → receivers (fluent → JSON-lines file), driven by rate steps
    /// ([`crate::deliver`]); the subject is the whole tree.
    #[value(name = "forward_deliver", alias = "forward-deliver")]
    #[serde(rename = "forward_deliver")]
    ForwardDeliver,
    /// One file of numbered lines, written before the subject starts, tailed from its beginning
    /// into a JSON-lines file: what reading costs ([`crate::tail`]).
    Tail,
    /// The seed's HTTP echo-server experiment: `ab` and `wrk` against loghaul's `http_server` in
    /// echo mode and Node.js, Tornado, EventMachine and Finagle ([`crate::http_echo`]).
    #[value(name = "http_echo", alias = "http-echo")]
    #[serde(rename = "http_echo")]
    HttpEcho,
    /// The seed's HTTP-client experiment: the same download and NDJSON upload by loghaul's `http`
    /// sink and by curl, Ruby and Python clients, in wall and CPU seconds ([`crate::http_client`]).
    #[value(name = "http_client", alias = "http-client")]
    #[serde(rename = "http_client")]
    HttpClient,
    /// New connections per second: every message on a connection of its own (connect, TLS
    /// handshake for the TLS subjects, one RFC3164 line, close), parsed into a JSON-lines file as
    /// in `syslog`; the rate is handshakes per second.
    #[value(name = "tls_handshake", alias = "tls-handshake")]
    #[serde(rename = "tls_handshake")]
    TlsHandshake,
    /// RFC3164 over TCP into loghaul A (`kafka` sink) → a real Kafka broker → two loghaul
    /// consumers (`kafka` source, one group) → JSON-lines files; each side on its own too, one
    /// consumer killed mid-run, and Kafka's own perf tools on the same broker
    /// ([`crate::kafka_pipeline`]).
    #[value(name = "kafka_pipeline", alias = "kafka-pipeline")]
    #[serde(rename = "kafka_pipeline")]
    KafkaPipeline,
}

impl Scenario {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Basic => "basic",
            Self::Syslog => "syslog",
            Self::Raw => "raw",
            Self::Rfc5424 => "rfc5424",
            Self::Forward => "forward",
            Self::ForwardRelay => "forward_relay",
            Self::ForwardDeliver => "forward_deliver",
            Self::Tail => "tail",
            Self::HttpEcho => "http_echo",
            Self::HttpClient => "http_client",
            Self::TlsHandshake => "tls_handshake",
            Self::KafkaPipeline => "kafka_pipeline",
        }
    }

    /// Whether the load is the forward protocol (the generator's fluent:// target). Not for
    /// `forward_deliver`, whose load is lines appended to files.
    pub fn is_forward(self) -> bool {
        matches!(self, Self::Forward | Self::ForwardRelay)
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
    /// The subject only counts lines and writes the count (ASCII) into this file now and then.
    CountFile(PathBuf),
    /// loghaul with a `blackhole` sink named `out`: the count is that sink's
    /// `loghaul_component_sent_events_total` on the API port (the `basic` scenario: lines are
    /// counted, as EventMachine counts them, not written).
    Metrics(u16),
}

impl Output {
    /// The count a counting subject has published so far (`None` for file outputs).
    pub fn count(&self) -> Option<u64> {
        match self {
            Output::File(_) => None,
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
    /// How the generator speaks TLS to a TLS subject (`None`: plain TCP).
    pub tls: Option<TlsClientOptions>,
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

/// Why a subject cannot run a scenario, if it cannot.
pub fn unsupported(kind: SubjectKind, scenario: Scenario) -> Option<&'static str> {
    match (kind, scenario) {
        (SubjectKind::Loghaul, Scenario::KafkaPipeline) => None,
        (_, Scenario::KafkaPipeline) => Some(
            "n/a: `kafka_pipeline` runs loghaul, with Kafka's own producer and consumer perf \
             tools as its peers in every round",
        ),
        // A disk buffer sits in front of the one sink of a one-process config; the relay, the
        // tree, `tail` and the HTTP experiments configure theirs elsewhere.
        (
            SubjectKind::LoghaulDisk50ms | SubjectKind::LoghaulDiskBatch,
            Scenario::Basic
            | Scenario::Syslog
            | Scenario::Raw
            | Scenario::Rfc5424
            | Scenario::Forward,
        ) => None,
        (SubjectKind::LoghaulDisk50ms | SubjectKind::LoghaulDiskBatch, _) => Some(
            "n/a: the disk-buffer variants run the one-process scenarios (basic, syslog, raw, \
             rfc5424, forward)",
        ),
        (
            SubjectKind::LoghaulTls,
            Scenario::Basic
            | Scenario::Syslog
            | Scenario::Raw
            | Scenario::Rfc5424
            | Scenario::Forward
            | Scenario::TlsHandshake,
        ) => None,
        (SubjectKind::LoghaulTls, _) => Some(
            "n/a: the TLS variant runs the one-process scenarios (basic, syslog, raw, rfc5424, \
             forward) and tls_handshake",
        ),
        (SubjectKind::RsyslogDa | SubjectKind::RsyslogTls, s) => {
            unsupported(SubjectKind::Rsyslog, s)
        }
        (SubjectKind::Bare, Scenario::TlsHandshake) => {
            Some("n/a: the bare loop reads long-lived connections; `loghaul` is the plain-TCP row")
        }
        (
            SubjectKind::Loghaul
            | SubjectKind::Node
            | SubjectKind::Tornado
            | SubjectKind::Eventmachine
            | SubjectKind::Finagle
            | SubjectKind::Ceiling,
            Scenario::HttpEcho,
        ) => None,
        (_, Scenario::HttpEcho) => Some("n/a: not an HTTP server of the echo experiment"),
        (
            SubjectKind::Loghaul
            | SubjectKind::Curl
            | SubjectKind::NetHttp
            | SubjectKind::Curb
            | SubjectKind::EmHttp
            | SubjectKind::Requests
            | SubjectKind::Urllib3,
            Scenario::HttpClient,
        ) => None,
        (_, Scenario::HttpClient) => Some("n/a: not an HTTP client of the client experiment"),
        (k, _) if k.is_http_peer() => Some("n/a: a peer of the HTTP experiments only"),
        (SubjectKind::Loghaul | SubjectKind::Bare, Scenario::Tail) => None,
        (_, Scenario::Tail) => {
            Some("n/a: not configured to tail a file (yet): loghaul and the bare loop only")
        }
        (SubjectKind::Loghaul | SubjectKind::Fluentd, Scenario::ForwardDeliver) => None,
        (SubjectKind::Bare, Scenario::ForwardDeliver) => {
            Some("n/a: no bare tree: the bare loop is one receiving process")
        }
        (_, Scenario::ForwardDeliver) => Some(
            "n/a: no file-tailing agent speaking the forward protocol (loghaul and fluentd only)",
        ),
        (SubjectKind::Eventmachine, Scenario::Basic) => None,
        (SubjectKind::Eventmachine, s) if s.is_forward() => {
            Some("n/a: a line counter, it speaks no forward protocol")
        }
        (SubjectKind::Eventmachine, _) => Some("n/a: a line counter, it parses no syslog"),
        (SubjectKind::Rsyslog | SubjectKind::SyslogNg, s) if s.is_forward() => {
            Some("n/a: no Fluentd forward-protocol input")
        }
        (SubjectKind::Fluentd, Scenario::Forward) => None,
        (SubjectKind::Fluentd, Scenario::ForwardRelay) => {
            Some("n/a: not configured as a relay pair (yet): see bench/README.md")
        }
        (SubjectKind::Fluentd, _) => Some("n/a: configured for the forward scenarios only"),
        (SubjectKind::Bare, Scenario::ForwardRelay) => {
            Some("n/a: no bare relay loop; compare with `forward`'s bare row")
        }
        _ => None,
    }
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
    /// The stream driver `rsyslog-tls` reads with (`--rsyslog-tls-driver`).
    pub rsyslog_tls_driver: TlsDriver,
}

impl Peers {
    /// From `LOGHAUL_RSYSLOGD`, `LOGHAUL_SYSLOG_NG`, `LOGHAUL_SYSLOG_NG_MODULES`, `LOGHAUL_RUBY`, `LOGHAUL_LOGGEN`, or
    /// the paths `scripts/install-peers.sh` installs to; `LOGHAUL_FLUENTD` (a command, words
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
            rsyslog_tls_driver: TlsDriver::default(),
        }
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
            k => bail!(
                "{} is a peer of the HTTP experiments, started by their own runners",
                k.name()
            ),
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
            k => crate::http_peers::platform(k, &self.ruby),
        }
    }
}

/// Asks the kernel for a free loopback port. The port is released before the subject binds it; on a
/// machine where nothing else races for ephemeral ports that window is harmless.
///
/// # Errors
/// No port could be bound.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr().context("reading a bound port")?.port())
}

/// Writes `kind`'s config for `scenario` into `dir` and returns how to start it.
///
/// # Errors
/// The config cannot be written or the program is missing.
pub fn prepare(
    kind: SubjectKind,
    scenario: Scenario,
    dir: &Path,
    peers: &Peers,
    loghaul: &Path,
) -> Result<Launch> {
    if scenario == Scenario::Tail {
        bail!("`tail` has no input port: its subjects are prepared by `prepare_tail`");
    }
    let program = peers.program(kind, loghaul)?;
    let port = free_port()?;
    let out = dir.join("out.log");
    let s = |p: &Path| p.display().to_string();
    let write = |name: &str, text: &str| -> Result<PathBuf> {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
        Ok(p)
    };
    match kind {
        SubjectKind::Loghaul if scenario == Scenario::ForwardRelay => {
            // B first: it must be listening before A's sink connects to it.
            let (api_a, port_b, api_b) = (free_port()?, free_port()?, free_port()?);
            let conf_b = write(
                "loghaul-b.yaml",
                &loghaul_config(scenario, port_b, api_b, &s(&out)),
            )?;
            let conf_a = write("loghaul-a.yaml", &relay_config(port, api_a, port_b))?;
            Ok(Launch {
                program: program.clone(),
                args: vec!["run".into(), "-c".into(), s(&conf_a)],
                env: vec![],
                input_port: port,
                ready: Ready::Health(api_a),
                output: Output::File(out),
                companions: vec![Companion {
                    name: "b".into(),
                    program,
                    args: vec!["run".into(), "-c".into(), s(&conf_b)],
                    port: port_b,
                    ready: Ready::Health(api_b),
                }],
                disk_buffer_api: None,
                tls: None,
            })
        }
        SubjectKind::Fluentd => {
            let words = peers.fluentd.clone().unwrap_or_default();
            let conf = write("fluentd.conf", &fluentd_config(port, &s(dir)))?;
            let mut args: Vec<String> = words.into_iter().skip(1).collect();
            // One process: the supervisor would only add a second Ruby process to the figures.
            args.extend(["-c".into(), s(&conf), "--no-supervisor".into()]);
            Ok(Launch {
                program,
                args,
                env: vec![],
                input_port: port,
                ready: Ready::Connect,
                output: Output::File(dir.join(format!("out.{}.log", crate::fluent::DEFAULT_TAG))),
                companions: vec![],
                disk_buffer_api: None,
                tls: None,
            })
        }
        SubjectKind::Loghaul
        | SubjectKind::LoghaulDisk50ms
        | SubjectKind::LoghaulDiskBatch
        | SubjectKind::LoghaulTls => {
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
                &loghaul_subject_config(scenario, port, api, &s(&out), disk.as_ref(), pki.as_ref()),
            )?;
            Ok(Launch {
                program,
                args: vec!["run".into(), "-c".into(), s(&conf)],
                env: vec![],
                input_port: port,
                ready: Ready::Health(api),
                output: if scenario == Scenario::Basic {
                    Output::Metrics(api)
                } else {
                    Output::File(out)
                },
                companions: vec![],
                disk_buffer_api: disk.map(|_| api),
                tls: pki.map(|p| p.client()),
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
                &rsyslog_config_with(scenario, port, &s(&work), &s(&out), queue, tls.as_ref()),
            )?;
            Ok(Launch {
                program,
                args: vec![
                    "-n".into(),
                    "-f".into(),
                    s(&conf),
                    "-i".into(),
                    s(&dir.join("rsyslog.pid")),
                ],
                env: vec![],
                input_port: port,
                ready: Ready::Connect,
                output: Output::File(out),
                companions: vec![],
                disk_buffer_api: None,
                tls: pki.as_ref().map(ServerPki::client),
            })
        }
        SubjectKind::SyslogNg => {
            let conf = write(
                "syslog-ng.conf",
                &syslog_ng_config(scenario, port, &s(&out)),
            )?;
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
            Ok(Launch {
                program,
                args,
                env: vec![],
                input_port: port,
                ready: Ready::Connect,
                output: Output::File(out),
                companions: vec![],
                disk_buffer_api: None,
                tls: None,
            })
        }
        SubjectKind::Eventmachine => {
            let count = dir.join("count");
            let script = write("basic.rb", EM_BASIC)?;
            Ok(Launch {
                program,
                args: vec![s(&script), port.to_string(), s(&count)],
                env: vec![],
                input_port: port,
                ready: Ready::Connect,
                output: Output::CountFile(count),
                companions: vec![],
                disk_buffer_api: None,
                tls: None,
            })
        }
        SubjectKind::Bare => {
            let basic = scenario == Scenario::Basic;
            let target = if basic { dir.join("count") } else { out };
            let args: Vec<String> = vec![
                "bench".into(),
                "bare".into(),
                "--scenario".into(),
                scenario.name().into(),
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--out".into(),
                s(&target),
            ];
            // It has no config: its command line goes with the other subjects' configs.
            write(
                "bare.conf",
                &format!(
                    "# loghaul bench: the bare loop (crates/loghaul-bench/src/bare.rs) takes no \
                     config; it ran as\nloghaul {}\n",
                    args.join(" ")
                ),
            )?;
            Ok(Launch {
                program,
                args,
                env: vec![],
                input_port: port,
                ready: Ready::Connect,
                output: if basic {
                    Output::CountFile(target)
                } else {
                    Output::File(target)
                },
                companions: vec![],
                disk_buffer_api: None,
                tls: None,
            })
        }
        k => bail!(
            "{} is a peer of the HTTP experiments, started by their own runners",
            k.name()
        ),
    }
}

/// loghaul: one syslog TCP source into one file sink, on its defaults (like the peers, the file
/// sink writes whenever its queue runs empty). For `basic` the sink is a `blackhole` that only
/// counts, the equivalent of EventMachine's line counter.
///
/// For the forward scenarios the source is `fluent` (on its defaults: acknowledgements on, so a
/// generator that asks for acks gets them once the file sink wrote the events); in
/// `forward_relay` this is B, the receiving end (A is [`relay_config`]).
pub fn loghaul_config(scenario: Scenario, port: u16, api: u16, out: &str) -> String {
    loghaul_config_with_buffer(scenario, port, api, out, None)
}

/// A disk buffer in front of a loghaul subject's sink (see docs/durability.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskBuffer {
    /// Its `sync`: `every_batch`, an interval such as `50ms`, or `never`.
    pub sync: &'static str,
    /// loghaul's `data_dir`, a folder of the run: the buffer is `DATA_DIR/buffers/out/`.
    pub data_dir: String,
}

/// [`loghaul_config`], with the sink `out` behind `disk` when given. The buffer takes the
/// documented defaults but `sync` (1GiB, `when_full: block`), written out so the saved config
/// shows them; blocking keeps the run lossless, as the memory buffer's backpressure does.
pub fn loghaul_config_with_buffer(
    scenario: Scenario,
    port: u16,
    api: u16,
    out: &str,
    disk: Option<&DiskBuffer>,
) -> String {
    loghaul_subject_config(scenario, port, api, out, disk, None)
}

/// [`loghaul_config_with_buffer`], with TLS on the source's listener when `tls` is given: its
/// certificate and key, everything else on the defaults (no client certificates asked for, as
/// rsyslog's anonymous mode).
pub fn loghaul_subject_config(
    scenario: Scenario,
    port: u16,
    api: u16,
    out: &str,
    disk: Option<&DiskBuffer>,
    tls: Option<&ServerPki>,
) -> String {
    let tls = tls.map_or(String::new(), |p| {
        format!(
            ", tls: {{ cert: \"{}\", key: \"{}\" }}",
            p.cert.display(),
            p.key.display()
        )
    });
    let (data_dir, buffer) = match disk {
        Some(d) => (
            format!("data_dir: \"{}\"\n", d.data_dir),
            format!(
                ", buffer: {{ type: disk, max_size: 1GiB, sync: {}, when_full: block }}",
                d.sync
            ),
        ),
        None => (String::new(), String::new()),
    };
    let (format, framing, encoding) = match scenario {
        Scenario::Forward | Scenario::ForwardRelay | Scenario::ForwardDeliver => {
            return format!(
                "# loghaul bench: scenario {name}{role}\n\
                 api: {{ address: \"127.0.0.1:{api}\" }}\n\
                 {data_dir}\
                 sources:\n  \
                   in: {{ type: fluent, address: \"127.0.0.1:{port}\"{tls} }}\n\
                 sinks:\n  \
                   out: {{ type: file, inputs: [in], path: \"{out}\", encoding: json{buffer} }}\n",
                name = scenario.name(),
                role = match scenario {
                    Scenario::ForwardRelay => {
                        "; B, the receiver: A's requests in, a JSON-lines file out"
                    }
                    Scenario::ForwardDeliver => {
                        "; a receiver: the delivers' requests in, a JSON-lines file out"
                    }
                    _ => "",
                },
            );
        }
        Scenario::Basic => ("raw", "newline", "text"),
        // `kafka_pipeline`'s processes are configured by `kafka_producer_config` and
        // `kafka_consumer_config`; its input is `syslog`'s.
        Scenario::Syslog | Scenario::TlsHandshake | Scenario::KafkaPipeline => {
            ("rfc3164", "newline", "json")
        }
        // `tail` reads a file, not a port: its config is `tail_config`; it would get `raw`'s
        // if it got here (`prepare` refuses it first).
        // The HTTP experiments configure their own subjects (`crate::http_echo`).
        Scenario::Raw | Scenario::Tail | Scenario::HttpEcho | Scenario::HttpClient => {
            ("raw", "newline", "json")
        }
        Scenario::Rfc5424 => ("rfc5424", "octet_counting", "json"),
    };
    format!(
        "# loghaul bench: scenario {name}\n\
         api: {{ address: \"127.0.0.1:{api}\" }}\n\
         {data_dir}\
         sources:\n  \
           in: {{ type: syslog, mode: tcp, address: \"127.0.0.1:{port}\", format: {format}, framing: {framing}{tls} }}\n\
         sinks:\n  \
           out: {sink}\n",
        name = scenario.name(),
        sink = if scenario == Scenario::Basic {
            format!("{{ type: blackhole, inputs: [in]{buffer} }}")
        } else {
            format!("{{ type: file, inputs: [in], path: \"{out}\", encoding: {encoding}{buffer} }}")
        }
    )
}

/// How to start one subject of `tail` (see [`crate::tail`]). There is no port and no readiness
/// probe: the subject starts reading as soon as it runs, and its clock starts with the process.
#[derive(Clone, Debug)]
pub struct TailLaunch {
    /// Program to execute.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// The JSON-lines file it writes.
    pub output: PathBuf,
}

/// Writes `kind`'s config for `tail` into `dir`: the subject reads `input` from its beginning
/// and writes JSON lines to `dir/out.log`. Returns how to start it.
///
/// # Errors
/// The subject does not do `tail`, its config cannot be written, or its program is missing.
pub fn prepare_tail(
    kind: SubjectKind,
    dir: &Path,
    input: &Path,
    peers: &Peers,
    loghaul: &Path,
) -> Result<TailLaunch> {
    let s = |p: &Path| p.display().to_string();
    let out = dir.join("out.log");
    let write = |name: &str, text: &str| -> Result<PathBuf> {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
        Ok(p)
    };
    match kind {
        SubjectKind::Loghaul => {
            let program = peers.program(kind, loghaul)?;
            let api = free_port()?;
            let conf = write(
                "loghaul.yaml",
                &tail_config(&s(input), &s(&dir.join("state")), api, &s(&out)),
            )?;
            Ok(TailLaunch {
                program,
                args: vec!["run".into(), "-c".into(), s(&conf)],
                output: out,
            })
        }
        SubjectKind::Bare => {
            let program = peers.program(kind, loghaul)?;
            let args: Vec<String> = vec![
                "bench".into(),
                "bare".into(),
                "--scenario".into(),
                Scenario::Tail.name().into(),
                "--input".into(),
                s(input),
                "--out".into(),
                s(&out),
            ];
            // It has no config: its command line goes with loghaul's config.
            write(
                "bare.conf",
                &format!(
                    "# loghaul bench: the bare loop (crates/loghaul-bench/src/bare.rs) takes no \
                     config; it ran as\nloghaul {}\n",
                    args.join(" ")
                ),
            )?;
            Ok(TailLaunch {
                program,
                args,
                output: out,
            })
        }
        other => bail!("{}", unsupported(other, Scenario::Tail).unwrap_or("n/a")),
    }
}

/// loghaul in `tail`: a `file` source reading `input` from its beginning into a `file` sink
/// writing JSON lines, both on their defaults (acknowledgements on: the source's checkpoint
/// moves once the sink wrote). Its checkpoints go to `state`, a folder of the run, so every run
/// starts without one and reads the whole file.
pub fn tail_config(input: &str, state: &str, api: u16, out: &str) -> String {
    format!(
        "# loghaul bench: scenario tail: one file read from its beginning, a JSON-lines file out\n\
         api: {{ address: \"127.0.0.1:{api}\" }}\n\
         sources:\n  \
           in:\n    \
             type: file\n    \
             include: [\"{input}\"]\n    \
             read_from: beginning\n    \
             data_dir: \"{state}\"\n\
         sinks:\n  \
           out: {{ type: file, inputs: [in], path: \"{out}\", encoding: json }}\n"
    )
}

/// The producer settings of `kafka_pipeline`: written out in loghaul's sink config, and given to
/// Kafka's `ProducerPerformance` in the same run in the Java producer's names, so that both
/// producers batch alike. They are the sink's defaults (docs/configuration.md) but the
/// compression, which is off (the sink's default too): the perf tool's random payload would not
/// compress as JSON does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KafkaProducer {
    /// `compression` (`compression.type`).
    pub compression: &'static str,
    /// `linger` (`linger.ms`), in milliseconds.
    pub linger_ms: u64,
    /// `batch_max_bytes` (`batch.size`).
    pub batch_max_bytes: u64,
    /// `queue_max_bytes` (`buffer.memory`): what the producer may hold unsent.
    pub queue_max_bytes: u64,
}

/// `kafka_pipeline`'s producer settings.
pub const KAFKA_PRODUCER: KafkaProducer = KafkaProducer {
    compression: "none",
    linger_ms: 5,
    batch_max_bytes: 1 << 20,
    queue_max_bytes: 64 << 20,
};

impl KafkaProducer {
    /// The settings as `ProducerPerformance --producer-props` takes them: `acks=all` with the
    /// idempotent producer, as the sink produces.
    pub fn java_props(&self, bootstrap: &str) -> Vec<String> {
        vec![
            format!("bootstrap.servers={bootstrap}"),
            "acks=all".into(),
            "enable.idempotence=true".into(),
            format!("compression.type={}", self.compression),
            format!("linger.ms={}", self.linger_ms),
            format!("batch.size={}", self.batch_max_bytes),
            format!("buffer.memory={}", self.queue_max_bytes),
        ]
    }
}

/// loghaul A of `kafka_pipeline`: RFC3164 over TCP on `port`, as in `syslog`, into a `kafka`
/// sink `out` producing JSON events to `topic` with [`KAFKA_PRODUCER`]'s settings (acks from
/// every replica, the idempotent producer: the sink's defaults, written out).
pub fn kafka_producer_config(port: u16, api: u16, bootstrap: &str, topic: &str) -> String {
    let p = KAFKA_PRODUCER;
    format!(
        "# loghaul bench: scenario kafka_pipeline; A, the producer: syslog in, a Kafka topic out\n\
         api: {{ address: \"127.0.0.1:{api}\" }}\n\
         sources:\n  \
           in: {{ type: syslog, mode: tcp, address: \"127.0.0.1:{port}\", format: rfc3164, framing: newline }}\n\
         sinks:\n  \
           out: {{ type: kafka, inputs: [in], bootstrap_servers: \"{bootstrap}\", topic: \"{topic}\", \
         encoding: json, acks: all, idempotence: true, compression: {}, linger: {}ms, \
         batch_max_bytes: {}, queue_max_bytes: {} }}\n",
        p.compression, p.linger_ms, p.batch_max_bytes, p.queue_max_bytes,
    )
}

/// A consumer of `kafka_pipeline`: a member of the consumer group `group` reading `topic` with
/// the `kafka` source (JSON decoding, from the earliest offset: its defaults) into a file sink
/// writing JSON lines to `out`. Its session times out after 6 s instead of librdkafka's 45 s, so
/// that the group takes a killed member's partitions over before the lab's idle timeout.
pub fn kafka_consumer_config(
    i: usize,
    api: u16,
    bootstrap: &str,
    group: &str,
    topic: &str,
    out: &str,
) -> String {
    format!(
        "# loghaul bench: scenario kafka_pipeline; consumer {i}: a member of the group {group}, \
         a JSON-lines file out\n\
         # A member that dies is given up after 6 s (librdkafka's default: 45 s), so the round \
         with a consumer killed does not\n\
         # wait 45 s for the group to hand its partitions to the other.\n\
         api: {{ address: \"127.0.0.1:{api}\" }}\n\
         sources:\n  \
           in: {{ type: kafka, bootstrap_servers: \"{bootstrap}\", group_id: \"{group}\", topics: [\"{topic}\"], \
         librdkafka_options: {{ session.timeout.ms: \"6000\", heartbeat.interval.ms: \"1000\" }} }}\n\
         sinks:\n  \
           out: {{ type: file, inputs: [in], path: \"{out}\", encoding: json }}\n"
    )
}

/// loghaul A of `forward_relay`: the generator's requests in, relayed to B on `next` with the
/// `fluent` sink on its defaults (acks required: a batch counts as delivered only once B acked it,
/// and the source acks its own clients only then).
pub fn relay_config(port: u16, api: u16, next: u16) -> String {
    format!(
        "# loghaul bench: scenario forward_relay; A, the relay: forward in, forward out to B\n\
         api: {{ address: \"127.0.0.1:{api}\" }}\n\
         sources:\n  \
           in: {{ type: fluent, address: \"127.0.0.1:{port}\" }}\n\
         sinks:\n  \
           out: {{ type: fluent, inputs: [in], servers: [{{ address: \"127.0.0.1:{next}\" }}], require_ack: true }}\n"
    )
}

/// Fluentd: in_forward → out_file with JSON lines, into `DIR/out.TAG.log`. The buffer is in
/// memory (as loghaul's queues are), flushed every second as fluentd's docs suggest for
/// throughput, and blocks the input when full instead of dropping (`overflow_action block`).
/// Time and tag are injected and the client address kept as `source_ip`, so a line carries what
/// loghaul's does (but `source_type`).
pub fn fluentd_config(port: u16, dir: &str) -> String {
    fluentd_file_receiver(
        "scenario forward",
        port,
        dir,
        "flush_mode interval\n    flush_interval 1s",
    )
}

/// [`fluentd_config`]'s receiver with `flush` as its buffer's flush settings.
fn fluentd_file_receiver(what: &str, port: u16, dir: &str, flush: &str) -> String {
    format!(
        "# loghaul bench: {what}; a private fluentd, run in the foreground\n\
         <system>\n  log_level warn\n</system>\n\
         <source>\n  \
           @type forward\n  \
           bind 127.0.0.1\n  \
           port {port}\n  \
           source_address_key source_ip\n\
         </source>\n\
         <match **>\n  \
           @type file\n  \
           path {dir}/out.${{tag}}\n  \
           append true\n  \
           <inject>\n    \
             time_key timestamp\n    \
             time_type string\n    \
             time_format %Y-%m-%dT%H:%M:%S.%NZ\n    \
             utc true\n    \
             tag_key tag\n  \
           </inject>\n  \
           <format>\n    @type json\n  </format>\n  \
           <buffer tag>\n    \
             @type memory\n    \
             {flush}\n    \
             chunk_limit_size 8m\n    \
             total_limit_size 512m\n    \
             overflow_action block\n  \
           </buffer>\n\
         </match>\n"
    )
}

/// The shape of `forward_deliver`'s tree: processes per tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TreeShape {
    /// Tailing agents, each with its own log file.
    pub agents: usize,
    /// Delivers (aggregators) between the agents and the receivers.
    pub delivers: usize,
    /// Receivers, each writing its own output file.
    pub receivers: usize,
}

impl std::fmt::Display for TreeShape {
    /// `10 agents → 2 delivers → 1 receiver`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |count: usize, what: &str| {
            format!("{count} {what}{}", if count == 1 { "" } else { "s" })
        };
        write!(
            f,
            "{} → {} → {}",
            n(self.agents, "agent"),
            n(self.delivers, "deliver"),
            n(self.receivers, "receiver")
        )
    }
}

/// How to start `forward_deliver`'s tree (see [`crate::deliver`]): the processes of each tier,
/// to be started receivers first (each tier connects to the one after it) and stopped agents
/// first (each drains into the one after it).
#[derive(Clone, Debug)]
pub struct TreeLaunch {
    /// Receivers: forward in, a JSON-lines file out. Their `port` is the forward port.
    pub receivers: Vec<Companion>,
    /// Delivers: forward in, forward out to every receiver.
    pub delivers: Vec<Companion>,
    /// Agents: a file tailed, forward out to every deliver. They listen on no input: their
    /// `port` is the one their readiness is probed on (loghaul's API, fluentd's monitor_agent).
    pub agents: Vec<Companion>,
    /// The file each agent tails and its generator appends to, by agent.
    pub agent_files: Vec<PathBuf>,
    /// The file each receiver writes, by receiver.
    pub outputs: Vec<PathBuf>,
}

/// `ports` starting at the `i`-th (modulo its length): the order one process of a tier lists the
/// next tier's servers in, so that whatever a sink does with the first server of its list, the
/// processes of a tier do not all do it to the same one.
fn rotated(ports: &[u16], i: usize) -> Vec<u16> {
    let k = i % ports.len().max(1);
    ports[k..].iter().chain(&ports[..k]).copied().collect()
}

/// Writes the configs of `kind`'s `forward_deliver` tree into `dir` and returns how to start it.
///
/// # Errors
/// A config cannot be written, a tier is empty, or the program is missing.
pub fn prepare_tree(
    kind: SubjectKind,
    shape: TreeShape,
    dir: &Path,
    peers: &Peers,
    loghaul: &Path,
) -> Result<TreeLaunch> {
    if shape.agents == 0 || shape.delivers == 0 || shape.receivers == 0 {
        bail!("every tier needs at least one process: {shape:?}");
    }
    let program = peers.program(kind, loghaul)?;
    let s = |p: &Path| p.display().to_string();
    let write = |name: &str, text: &str| -> Result<PathBuf> {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
        Ok(p)
    };
    let state = dir.join("state");
    std::fs::create_dir_all(&state).context("creating the agents' state folder")?;
    let ports = |n: usize| (0..n).map(|_| free_port()).collect::<Result<Vec<u16>>>();
    let (receiver_ports, deliver_ports, agent_ports) = (
        ports(shape.receivers)?,
        ports(shape.delivers)?,
        ports(shape.agents)?,
    );
    let agent_files: Vec<PathBuf> = (0..shape.agents)
        .map(|i| dir.join(format!("agent-{i}.log")))
        .collect();
    let mut launch = TreeLaunch {
        receivers: Vec::new(),
        delivers: Vec::new(),
        agents: Vec::new(),
        agent_files: agent_files.clone(),
        outputs: Vec::new(),
    };
    let process = |name: String, conf: &Path, port: u16, ready: Ready| -> Companion {
        let args = match kind {
            SubjectKind::Fluentd => {
                let words = peers.fluentd.clone().unwrap_or_default();
                let mut args: Vec<String> = words.into_iter().skip(1).collect();
                args.extend(["-c".into(), s(conf), "--no-supervisor".into()]);
                args
            }
            _ => vec!["run".into(), "-c".into(), s(conf)],
        };
        Companion {
            name,
            program: program.clone(),
            args,
            port,
            ready,
        }
    };
    match kind {
        SubjectKind::Loghaul => {
            for (r, &port) in receiver_ports.iter().enumerate() {
                let (api, out) = (free_port()?, dir.join(format!("out-{r}.log")));
                let conf = write(
                    &format!("receiver-{r}.yaml"),
                    &loghaul_config(Scenario::ForwardDeliver, port, api, &s(&out)),
                )?;
                launch.receivers.push(process(
                    format!("receiver-{r}"),
                    &conf,
                    port,
                    Ready::Health(api),
                ));
                launch.outputs.push(out);
            }
            for (d, &port) in deliver_ports.iter().enumerate() {
                let api = free_port()?;
                let conf = write(
                    &format!("deliver-{d}.yaml"),
                    &deliver_config(d, port, api, &rotated(&receiver_ports, d)),
                )?;
                launch.delivers.push(process(
                    format!("deliver-{d}"),
                    &conf,
                    port,
                    Ready::Health(api),
                ));
            }
            for (i, &api) in agent_ports.iter().enumerate() {
                let conf = write(
                    &format!("agent-{i}.yaml"),
                    &agent_config(
                        i,
                        &s(&agent_files[i]),
                        &s(&state.join(format!("agent-{i}"))),
                        api,
                        &rotated(&deliver_ports, i),
                    ),
                )?;
                launch.agents.push(process(
                    format!("agent-{i}"),
                    &conf,
                    api,
                    Ready::Health(api),
                ));
            }
        }
        SubjectKind::Fluentd => {
            for (r, &port) in receiver_ports.iter().enumerate() {
                let out_dir = dir.join(format!("receiver-{r}"));
                std::fs::create_dir_all(&out_dir).context("creating a receiver's folder")?;
                let conf = write(
                    &format!("receiver-{r}.conf"),
                    &fluentd_file_receiver(
                        &format!("scenario forward_deliver; receiver {r}"),
                        port,
                        &s(&out_dir),
                        // A line waits for no timer: the tree's delay is what is measured.
                        "flush_mode immediate",
                    ),
                )?;
                launch.receivers.push(process(
                    format!("receiver-{r}"),
                    &conf,
                    port,
                    Ready::Connect,
                ));
                launch
                    .outputs
                    .push(out_dir.join(format!("out.{}.log", crate::fluent::DEFAULT_TAG)));
            }
            for (d, &port) in deliver_ports.iter().enumerate() {
                let conf = write(
                    &format!("deliver-{d}.conf"),
                    &fluentd_deliver_config(d, port, &rotated(&receiver_ports, d)),
                )?;
                launch
                    .delivers
                    .push(process(format!("deliver-{d}"), &conf, port, Ready::Connect));
            }
            for (i, &monitor) in agent_ports.iter().enumerate() {
                let conf = write(
                    &format!("agent-{i}.conf"),
                    &fluentd_agent_config(
                        i,
                        &s(&agent_files[i]),
                        &s(&state.join(format!("agent-{i}.pos"))),
                        monitor,
                        &rotated(&deliver_ports, i),
                    ),
                )?;
                launch.agents.push(process(
                    format!("agent-{i}"),
                    &conf,
                    monitor,
                    Ready::Connect,
                ));
            }
        }
        other => bail!(
            "{}",
            unsupported(other, Scenario::ForwardDeliver).unwrap_or("n/a")
        ),
    }
    Ok(launch)
}

/// `[{ address: "127.0.0.1:P" }, ...]`: a `fluent` sink's `servers`.
fn loghaul_servers(ports: &[u16]) -> String {
    let servers: Vec<String> = ports
        .iter()
        .map(|p| format!("{{ address: \"127.0.0.1:{p}\" }}"))
        .collect();
    format!("[{}]", servers.join(", "))
}

/// loghaul agent `i` of `forward_deliver`: a `file` source tailing `file` (and what it is rotated
/// to, `file.1`) from the beginning, its checkpoints in `state`, into a `fluent` sink to every
/// deliver (round robin, acks required: the defaults). The file source's timing options are its
/// defaults, written out so the config shows them.
pub fn agent_config(i: usize, file: &str, state: &str, api: u16, delivers: &[u16]) -> String {
    format!(
        "# loghaul bench: scenario forward_deliver; agent {i}: tails its own file, forwards to \
         the delivers\n\
         api: {{ address: \"127.0.0.1:{api}\" }}\n\
         sources:\n  \
           tail:\n    \
             type: file\n    \
             include: [\"{file}*\"]\n    \
             read_from: beginning\n    \
             data_dir: \"{state}\"\n    \
             checkpoint_interval: 1s\n    \
             glob_interval: 1s\n    \
             rotate_wait: 5s\n\
         sinks:\n  \
           out: {{ type: fluent, inputs: [tail], servers: {servers} }}\n",
        servers = loghaul_servers(delivers),
    )
}

/// loghaul deliver `d` of `forward_deliver`: a `fluent` source into a `fluent` sink to every
/// receiver (round robin, acks required), on their defaults: as `forward_relay`'s A.
pub fn deliver_config(d: usize, port: u16, api: u16, receivers: &[u16]) -> String {
    format!(
        "# loghaul bench: scenario forward_deliver; deliver {d}: the agents' requests in, \
         forwarded to the receivers\n\
         api: {{ address: \"127.0.0.1:{api}\" }}\n\
         sources:\n  \
           in: {{ type: fluent, address: \"127.0.0.1:{port}\" }}\n\
         sinks:\n  \
           out: {{ type: fluent, inputs: [in], servers: {servers} }}\n",
        servers = loghaul_servers(receivers),
    )
}

/// out_forward to `ports` with acks, buffered as the published peer-deliver run's agents and
/// delivers were (`flush_interval 0`, 1MB chunks, 64 queued, 32 flush threads), blocking when
/// full.
fn fluentd_forward_out(ports: &[u16]) -> String {
    let servers: String = ports
        .iter()
        .map(|p| format!("  <server>\n    host 127.0.0.1\n    port {p}\n  </server>\n"))
        .collect();
    format!(
        "  @type forward\n  \
           require_ack_response true\n\
         {servers}  \
           <buffer>\n    \
             @type memory\n    \
             flush_mode immediate\n    \
             chunk_limit_size 1m\n    \
             queued_chunks_limit_size 64\n    \
             flush_thread_count 32\n    \
             overflow_action block\n  \
           </buffer>\n"
    )
}

/// Fluentd agent `i` of `forward_deliver`: in_tail (`format none`: the line as `message`, as in
/// the published peer-deliver run) → out_forward to every deliver; a monitor_agent on `monitor`
/// tells it is up.
/// Fluentd follows a file renamed away by itself, so the path names the live file only.
pub fn fluentd_agent_config(
    i: usize,
    file: &str,
    pos: &str,
    monitor: u16,
    delivers: &[u16],
) -> String {
    format!(
        "# loghaul bench: scenario forward_deliver; fluentd agent {i}, run in the foreground\n\
         <system>\n  log_level warn\n</system>\n\
         <source>\n  \
           @type tail\n  \
           path {file}\n  \
           pos_file {pos}\n  \
           read_from_head true\n  \
           refresh_interval 1s\n  \
           rotate_wait 5s\n  \
           tag {tag}\n  \
           <parse>\n    @type none\n  </parse>\n\
         </source>\n\
         <source>\n  \
           @type monitor_agent\n  \
           bind 127.0.0.1\n  \
           port {monitor}\n\
         </source>\n\
         <match **>\n\
         {out}\
         </match>\n",
        tag = crate::fluent::DEFAULT_TAG,
        out = fluentd_forward_out(delivers),
    )
}

/// Fluentd deliver `d` of `forward_deliver`: in_forward → out_forward to every receiver.
pub fn fluentd_deliver_config(d: usize, port: u16, receivers: &[u16]) -> String {
    format!(
        "# loghaul bench: scenario forward_deliver; fluentd deliver {d}, run in the foreground\n\
         <system>\n  log_level warn\n</system>\n\
         <source>\n  \
           @type forward\n  \
           bind 127.0.0.1\n  \
           port {port}\n\
         </source>\n\
         <match **>\n\
         {out}\
         </match>\n",
        out = fluentd_forward_out(receivers),
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

/// The queue of rsyslog's omfile action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionQueue {
    /// rsyslog's default: none, the action runs on the main queue's worker.
    Direct,
    /// A LinkedList queue with a file name, which makes it disk-assisted: in memory until its
    /// high watermark (90% of `queue.size`, 1,000 messages by default for an action), then
    /// spooled to files in the work directory, and saved there at shutdown. The parameters are
    /// those rsyslog's docs give for reliable forwarding (infinite retries, a 1g disk limit),
    /// the rest rsyslog's defaults: among them `queue.syncQueueFiles="off"`, so the spool is
    /// written but not fsynced.
    DiskAssisted,
}

/// rsyslog: imptcp → omfile with a JSON string template carrying loghaul's field names, with the
/// action's `queue`.
///
/// Tuning, measured on a 2-core machine: one imptcp thread (two input threads only contend with the
/// main queue worker), a string template with `:::json` escaping (cheaper than a `list` template with
/// `jsonf`), a 64KiB write buffer; the main queue keeps rsyslog's defaults.
pub fn rsyslog_config(
    scenario: Scenario,
    port: u16,
    work: &str,
    out: &str,
    queue: ActionQueue,
) -> String {
    rsyslog_config_with(scenario, port, work, out, queue, None)
}

/// The stream driver (TLS library) `rsyslog-tls`'s imtcp reads with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TlsDriver {
    /// GnuTLS (`lmnsd_gtls`, Debian's rsyslog-gnutls): the faster of the two on the lab's
    /// machines (BENCHMARKS.md).
    #[default]
    Gtls,
    /// OpenSSL (`lmnsd_ossl`, Debian's rsyslog-openssl).
    Ossl,
}

impl TlsDriver {
    /// rsyslog's name for the driver (`StreamDriver.Name`).
    pub fn name(self) -> &'static str {
        match self {
            TlsDriver::Gtls => "gtls",
            TlsDriver::Ossl => "ossl",
        }
    }

    /// The driver and its library, for the platform column.
    pub fn describe(self) -> &'static str {
        match self {
            TlsDriver::Gtls => "gtls (GnuTLS)",
            TlsDriver::Ossl => "ossl (OpenSSL)",
        }
    }
}

/// A throwaway PKI of a TLS subject: the CA's certificate, and the server certificate (for
/// `localhost` and 127.0.0.1) and key the CA issued, as PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerPki {
    /// The CA certificate: what the generator trusts.
    pub ca: PathBuf,
    /// The server's certificate.
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
}

impl ServerPki {
    /// How the generator connects to a server holding this PKI's certificate: trusting its CA,
    /// checking the name the generator connects to (127.0.0.1), with no client certificate.
    pub fn client(&self) -> TlsClientOptions {
        TlsClientOptions {
            ca: Some(self.ca.clone()),
            ..TlsClientOptions::default()
        }
    }
}

/// Makes a new CA in `dir/pki/` and has it issue a server certificate for `localhost` and
/// 127.0.0.1 (ECDSA P-256 keys, as `loghaul_tls::pki` makes them). A new one per run: nothing
/// carries over between runs, and no file outside the run's folder is touched.
///
/// # Errors
/// The folder or a file cannot be written.
pub fn make_pki(dir: &Path) -> Result<ServerPki> {
    use loghaul_tls::pki::{Ca, Leaf};
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki).with_context(|| format!("creating {}", pki.display()))?;
    let ca = Ca::new("loghaul bench CA").context("making the lab's CA")?;
    let ca_path = pki.join("ca.crt");
    ca.write(&ca_path).context("writing the lab's CA")?;
    let (cert, key) = ca
        .issue(&Leaf::new("localhost"))
        .and_then(|issued| issued.write(&pki, "server"))
        .context("issuing the server certificate")?;
    Ok(ServerPki {
        ca: ca_path,
        cert,
        key,
    })
}

/// TLS for `rsyslog-tls`: the driver, and the PKI whose server certificate it presents.
#[derive(Clone, Copy, Debug)]
pub struct RsyslogTls<'a> {
    /// GnuTLS or OpenSSL.
    pub driver: TlsDriver,
    /// Its CA, certificate and key.
    pub pki: &'a ServerPki,
}

/// [`rsyslog_config`], reading with `imtcp` over TLS when `tls` is given: the driver set on the
/// module in anonymous mode (`StreamDriver.Mode="1"`, `StreamDriver.AuthMode="anon"`: the server
/// shows its certificate and asks clients for none, as `loghaul-tls` does) and the files given as
/// the global defaults. imtcp takes rsyslog's defaults otherwise; `imptcp` has no TLS.
pub fn rsyslog_config_with(
    scenario: Scenario,
    port: u16,
    work: &str,
    out: &str,
    queue: ActionQueue,
    tls: Option<&RsyslogTls<'_>>,
) -> String {
    let fields = match scenario {
        Scenario::Basic => None,
        // rsyslog has no forward input and no `tail` config (`unsupported`): those scenarios
        // never get here, and would get the `raw` config if they did.
        Scenario::Raw
        | Scenario::Forward
        | Scenario::ForwardRelay
        | Scenario::ForwardDeliver
        | Scenario::Tail
        | Scenario::HttpEcho
        | Scenario::HttpClient => Some(
            r#"{\"timestamp\":\"%timegenerated:::date-rfc3339%\",\"message\":\"%rawmsg:::json%\",\"source_ip\":\"%fromhost-ip%\",\"source_type\":\"syslog\"}"#
                .to_string(),
        ),
        Scenario::Syslog | Scenario::Rfc5424 | Scenario::TlsHandshake | Scenario::KafkaPipeline => {
            let extra = if scenario == Scenario::Rfc5424 {
                r#"\"msgid\":\"%msgid:::json%\",\"structured_data\":\"%structured-data:::json%\","#
            } else {
                ""
            };
            Some(format!(
                r#"{{\"timestamp\":\"%timereported:::date-rfc3339%\",\"hostname\":\"%hostname:::json%\",\"appname\":\"%app-name:::json%\",\"procid\":\"%procid:::json%\",\"facility\":\"%syslogfacility-text%\",\"severity\":\"%syslogseverity-text%\",{extra}\"message\":\"%msg:::json%\",\"source_ip\":\"%fromhost-ip%\",\"source_type\":\"syslog\"}}"#
            ))
        }
    };
    let template = match fields {
        None => "template(name=\"out\" type=\"string\" string=\"%rawmsg%\\n\")".to_string(),
        Some(f) => format!("template(name=\"out\" type=\"string\" string=\"{f}\\n\")"),
    };
    let queue = match queue {
        ActionQueue::Direct => String::new(),
        ActionQueue::DiskAssisted => {
            "\n           queue.type=\"LinkedList\" queue.filename=\"out\" \
             queue.maxDiskSpace=\"1g\" queue.saveOnShutdown=\"on\"\n           \
             action.resumeRetryCount=\"-1\""
                .to_string()
        }
    };
    let (files, module, input) = match tls {
        None => (
            String::new(),
            "module(load=\"imptcp\" threads=\"1\")".to_string(),
            "imptcp",
        ),
        Some(t) => (
            format!(
                "\n       DefaultNetstreamDriverCAFile=\"{}\"\n       \
                 DefaultNetstreamDriverCertFile=\"{}\"\n       \
                 DefaultNetstreamDriverKeyFile=\"{}\"",
                t.pki.ca.display(),
                t.pki.cert.display(),
                t.pki.key.display()
            ),
            format!(
                "module(load=\"imtcp\" StreamDriver.Name=\"{}\" StreamDriver.Mode=\"1\" \
                 StreamDriver.AuthMode=\"anon\")",
                t.driver.name()
            ),
            "imtcp",
        ),
    };
    format!(
        "# loghaul bench: scenario {name}; a private rsyslog, run in the foreground with -n\n\
         global(workDirectory=\"{work}\" maxMessageSize=\"64k\"{files})\n\
         {module}\n\
         {template}\n\
         ruleset(name=\"bench\") {{\n  \
           action(type=\"omfile\" file=\"{out}\" template=\"out\" ioBufferSize=\"64k\"{queue})\n\
         }}\n\
         input(type=\"{input}\" address=\"127.0.0.1\" port=\"{port}\" ruleset=\"bench\")\n",
        name = scenario.name()
    )
}

/// syslog-ng: network() (or syslog() for octet counting) → file() with format-json.
pub fn syslog_ng_config(scenario: Scenario, port: u16, out: &str) -> String {
    let common =
        "max-connections(100) log-iw-size(100000) log-fetch-limit(1000) keep-hostname(yes)";
    let (driver, flags, template) = match scenario {
        Scenario::Basic => ("network", "flags(no-parse)", "\"${MSG}\\n\"".to_string()),
        // No forward input in syslog-ng either, and no `tail` config (`unsupported`): `raw`'s
        // config, never run.
        Scenario::Raw
        | Scenario::Forward
        | Scenario::ForwardRelay
        | Scenario::ForwardDeliver
        | Scenario::Tail
        | Scenario::HttpEcho
        | Scenario::HttpClient => (
            "network",
            "flags(no-parse)",
            "\"$(format-json timestamp=${R_ISODATE} message=${MSG} source_ip=${SOURCEIP} \
             source_type=syslog)\\n\""
                .to_string(),
        ),
        Scenario::Syslog | Scenario::TlsHandshake | Scenario::KafkaPipeline => (
            "network",
            "",
            "\"$(format-json timestamp=${ISODATE} hostname=${HOST} appname=${PROGRAM} procid=${PID} \
             facility=${FACILITY} severity=${LEVEL} message=${MSG} source_ip=${SOURCEIP} \
             source_type=syslog)\\n\""
                .to_string(),
        ),
        Scenario::Rfc5424 => (
            "syslog",
            "",
            "\"$(format-json timestamp=${ISODATE} hostname=${HOST} appname=${PROGRAM} procid=${PID} \
             msgid=${MSGID} facility=${FACILITY} severity=${LEVEL} structured_data=${SDATA} \
             message=${MSG} source_ip=${SOURCEIP} source_type=syslog)\\n\""
                .to_string(),
        ),
    };
    format!(
        "@version: 3.38\n\
         # loghaul bench: scenario {name}; a private syslog-ng, run in the foreground with -F\n\
         options {{ stats-freq(0); threaded(yes); use-dns(no); use-fqdn(no); chain-hostnames(no);\n  \
           log-fifo-size(200000); }};\n\
         source s_in {{ {driver}(ip(\"127.0.0.1\") port({port}) transport(\"tcp\") {common} {flags}); }};\n\
         destination d_out {{ file(\"{out}\" template({template})); }};\n\
         log {{ source(s_in); destination(d_out); }};\n",
        name = scenario.name()
    )
}

/// The EventMachine line counter of the 2011 `basic.rb` experiment: BufferedTokenizer splits lines,
/// a counter counts them; a timer publishes the count (atomically, by rename) for the bench to poll.
pub const EM_BASIC: &str = r#"# loghaul bench: EventMachine line counter (the 2011 basic.rb experiment).
# usage: ruby basic.rb PORT COUNT_FILE
require 'eventmachine'

port = Integer(ARGV[0])
count_file = ARGV[1]
$count = 0

module Counter
  def post_init
    @tok = BufferedTokenizer.new("\n")
  end

  def receive_data(data)
    $count += @tok.extract(data).size
  end
end

def publish(path)
  tmp = path + '.tmp'
  File.write(tmp, $count.to_s)
  File.rename(tmp, path)
end

EM.run do
  EM.start_server('127.0.0.1', port, Counter)
  EM.add_periodic_timer(0.01) { publish(count_file) }
  Signal.trap('TERM') { EM.stop }
  Signal.trap('INT') { EM.stop }
end
publish(count_file)
"#;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn peers() -> Peers {
        let me = std::env::current_exe().unwrap().display().to_string();
        Peers {
            fluentd: Some(vec![me, "wrapped".into()]),
            ..Peers::locate()
        }
    }

    fn port_of(c: &Companion) -> String {
        format!("127.0.0.1:{}", c.port)
    }

    #[test]
    fn loghaul_tree_chains_the_tiers() {
        let dir = tempfile::tempdir().unwrap();
        let shape = TreeShape {
            agents: 3,
            delivers: 2,
            receivers: 2,
        };
        let me = std::env::current_exe().unwrap();
        let t = prepare_tree(SubjectKind::Loghaul, shape, dir.path(), &peers(), &me).unwrap();
        assert_eq!(
            (t.agents.len(), t.delivers.len(), t.receivers.len()),
            (3, 2, 2)
        );
        assert_eq!((t.agent_files.len(), t.outputs.len()), (3, 2));
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        // Receivers write their own files; delivers list every receiver, each from another one.
        for r in 0..2 {
            let conf = read(&format!("receiver-{r}.yaml"));
            assert!(conf.contains("type: fluent"), "{conf}");
            assert!(conf.contains(&port_of(&t.receivers[r])), "{conf}");
            assert!(
                conf.contains(&format!("path: \"{}\"", t.outputs[r].display())),
                "{conf}"
            );
        }
        // Every address of a config, in order: the API's first.
        let addresses = |conf: &str| -> Vec<String> {
            conf.split("address: \"")
                .skip(1)
                .map(|s| s.split('"').next().unwrap().to_string())
                .collect()
        };
        let d1 = read("deliver-1.yaml");
        assert_eq!(
            addresses(&d1)[1..],
            [
                port_of(&t.delivers[1]),
                port_of(&t.receivers[1]),
                port_of(&t.receivers[0])
            ]
        );
        for (i, first) in [(0, 0), (1, 1), (2, 0)] {
            let conf = read(&format!("agent-{i}.yaml"));
            assert!(conf.contains("type: file"), "{conf}");
            assert!(
                conf.contains(&format!("include: [\"{}*\"]", t.agent_files[i].display())),
                "{conf}"
            );
            assert!(conf.contains(&format!("state/agent-{i}\"")), "{conf}");
            assert!(conf.contains("read_from: beginning"), "{conf}");
            // The API's address comes first, then the delivers, starting at agent i's share.
            let all = addresses(&conf);
            assert_eq!(
                all[0],
                port_of(&t.agents[i]),
                "readiness is probed on the API"
            );
            assert_eq!(all[1], port_of(&t.delivers[first]), "{conf}");
            assert_eq!(all.len(), 3, "{conf}");
        }
        assert!(matches!(t.agents[0].ready, Ready::Health(p) if p == t.agents[0].port));
        assert_eq!(
            t.agents[2].args,
            [
                "run",
                "-c",
                &*dir.path().join("agent-2.yaml").display().to_string()
            ]
        );
    }

    #[test]
    fn fluentd_tree_chains_the_tiers() {
        let dir = tempfile::tempdir().unwrap();
        let shape = TreeShape {
            agents: 2,
            delivers: 1,
            receivers: 2,
        };
        let me = std::env::current_exe().unwrap();
        let t = prepare_tree(SubjectKind::Fluentd, shape, dir.path(), &peers(), &me).unwrap();
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        let agent = read("agent-1.conf");
        for want in [
            "@type tail".to_string(),
            format!("path {}\n", t.agent_files[1].display()),
            "read_from_head true".into(),
            "@type none".into(),
            "@type monitor_agent".into(),
            format!("port {}\n", t.agents[1].port),
            "require_ack_response true".into(),
            format!("port {}\n", t.delivers[0].port),
            "overflow_action block".into(),
        ] {
            assert!(agent.contains(&want), "{want:?} in {agent}");
        }
        let deliver = read("deliver-0.conf");
        assert!(deliver.contains(&format!("port {}\n", t.delivers[0].port)));
        let first = deliver
            .find(&format!("port {}\n", t.receivers[0].port))
            .unwrap();
        let second = deliver
            .find(&format!("port {}\n", t.receivers[1].port))
            .unwrap();
        assert!(first < second, "{deliver}");
        let receiver = read("receiver-1.conf");
        assert!(receiver.contains("@type file") && receiver.contains("@type json"));
        assert!(receiver.contains("flush_mode immediate"), "{receiver}");
        assert_eq!(
            t.outputs[1],
            dir.path().join("receiver-1").join("out.bench.gen.log")
        );
        assert_eq!(t.agents[0].args[0], "wrapped");
        assert_eq!(
            &t.agents[0].args[2..],
            [
                &*dir.path().join("agent-0.conf").display().to_string(),
                "--no-supervisor"
            ]
        );
        assert!(matches!(t.receivers[0].ready, Ready::Connect));
    }

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
        for s in [Scenario::Basic, Scenario::Syslog, Scenario::Forward] {
            assert!(unsupported(SubjectKind::LoghaulDiskBatch, s).is_none());
        }
        for s in [Scenario::ForwardRelay, Scenario::Tail, Scenario::HttpEcho] {
            assert!(unsupported(SubjectKind::LoghaulDisk50ms, s).is_some());
        }
        // rsyslog-da goes wherever rsyslog goes.
        assert!(unsupported(SubjectKind::RsyslogDa, Scenario::Syslog).is_none());
        assert!(unsupported(SubjectKind::RsyslogDa, Scenario::Forward).is_some());
    }

    #[test]
    fn disk_buffer_goes_on_the_sink_with_a_data_dir_of_the_run() {
        let disk = DiskBuffer {
            sync: "50ms",
            data_dir: "/run/x/data".into(),
        };
        let want = ", buffer: { type: disk, max_size: 1GiB, sync: 50ms, when_full: block } }";
        for scenario in [Scenario::Syslog, Scenario::Basic, Scenario::Forward] {
            let conf = loghaul_config_with_buffer(scenario, 1, 2, "/o", Some(&disk));
            assert!(conf.contains("\ndata_dir: \"/run/x/data\"\n"), "{conf}");
            let sink = conf.lines().find(|l| l.contains("out: {")).unwrap();
            assert!(sink.ends_with(want), "{conf}");
            // Without one, the config is the memory-buffered subject's, unchanged.
            let plain = loghaul_config_with_buffer(scenario, 1, 2, "/o", None);
            assert_eq!(plain, loghaul_config(scenario, 1, 2, "/o"));
            assert!(
                !plain.contains("buffer") && !plain.contains("data_dir"),
                "{plain}"
            );
        }
    }

    #[test]
    fn rsyslog_da_queues_its_action_on_disk() {
        let direct = rsyslog_config(Scenario::Syslog, 1, "/w", "/o", ActionQueue::Direct);
        assert!(!direct.contains("queue."), "{direct}");
        let da = rsyslog_config(Scenario::Syslog, 1, "/w", "/o", ActionQueue::DiskAssisted);
        let action = &da[da.find("action(").unwrap()..];
        let action = &action[..action.find(')').unwrap()];
        for want in [
            "queue.type=\"LinkedList\"",
            "queue.filename=\"out\"",
            "queue.saveOnShutdown=\"on\"",
            "action.resumeRetryCount=\"-1\"",
        ] {
            assert!(action.contains(want), "{want} in {action}");
        }
        assert!(
            da.contains("workDirectory=\"/w\""),
            "the spool is the run's: {da}"
        );
    }

    #[test]
    fn tls_variants_parse_map_to_their_server_and_run_where_they_can() {
        for (name, kind, base) in [
            ("loghaul-tls", SubjectKind::LoghaulTls, SubjectKind::Loghaul),
            ("rsyslog-tls", SubjectKind::RsyslogTls, SubjectKind::Rsyslog),
        ] {
            assert_eq!(SubjectKind::from_str(name, false).unwrap(), kind);
            assert_eq!(kind.name(), name);
            assert_eq!(serde_json::to_value(kind).unwrap(), name);
            assert_eq!(kind.base(), base);
            assert!(kind.tls() && !base.tls());
            for s in [Scenario::Syslog, Scenario::Rfc5424, Scenario::TlsHandshake] {
                assert!(unsupported(kind, s).is_none(), "{name} {s:?}");
            }
            for s in [Scenario::ForwardRelay, Scenario::Tail, Scenario::HttpEcho] {
                assert!(unsupported(kind, s).is_some(), "{name} {s:?}");
            }
        }
        // loghaul speaks the forward protocol over TLS too; rsyslog has no forward input.
        assert!(unsupported(SubjectKind::LoghaulTls, Scenario::Forward).is_none());
        assert!(unsupported(SubjectKind::RsyslogTls, Scenario::Forward).is_some());
        assert!(unsupported(SubjectKind::Bare, Scenario::TlsHandshake).is_some());
        assert_eq!(
            Scenario::from_str("tls_handshake", false).unwrap(),
            Scenario::TlsHandshake
        );
        assert_eq!(Scenario::TlsHandshake.name(), "tls_handshake");
    }

    /// The lab's PKI makes a server config loghaul accepts, and the TLS subjects' configs point
    /// at its files: loghaul's listener (syslog and fluent sources), rsyslog's imtcp with the
    /// chosen driver in anonymous mode.
    #[test]
    fn tls_subjects_listen_with_the_runs_pki() {
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
        let tls = format!(
            ", tls: {{ cert: \"{}\", key: \"{}\" }} }}",
            pki.cert.display(),
            pki.key.display()
        );
        for scenario in [Scenario::Syslog, Scenario::Forward, Scenario::TlsHandshake] {
            let conf = loghaul_subject_config(scenario, 1, 2, "/o", None, Some(&pki));
            let source = conf.lines().find(|l| l.contains("in: {")).unwrap();
            assert!(source.ends_with(&tls), "{conf}");
            // Without TLS, the plain subject's config, unchanged.
            let plain = loghaul_subject_config(scenario, 1, 2, "/o", None, None);
            assert_eq!(plain, loghaul_config(scenario, 1, 2, "/o"));
        }
        let handshake = loghaul_config(Scenario::TlsHandshake, 1, 2, "/o");
        assert!(handshake.contains("format: rfc3164"), "{handshake}");
        for driver in [TlsDriver::Gtls, TlsDriver::Ossl] {
            let conf = rsyslog_config_with(
                Scenario::Syslog,
                7,
                "/w",
                "/o",
                ActionQueue::Direct,
                Some(&RsyslogTls { driver, pki: &pki }),
            );
            for want in [
                format!(
                    "module(load=\"imtcp\" StreamDriver.Name=\"{}\" StreamDriver.Mode=\"1\" \
                     StreamDriver.AuthMode=\"anon\")",
                    driver.name()
                ),
                format!("DefaultNetstreamDriverCAFile=\"{}\"", pki.ca.display()),
                format!("DefaultNetstreamDriverCertFile=\"{}\"", pki.cert.display()),
                format!("DefaultNetstreamDriverKeyFile=\"{}\"", pki.key.display()),
                "input(type=\"imtcp\" address=\"127.0.0.1\" port=\"7\"".into(),
            ] {
                assert!(conf.contains(&want), "{want} in {conf}");
            }
            assert!(!conf.contains("imptcp"), "{conf}");
            // The same template and action as the plain subject's.
            let plain = rsyslog_config(Scenario::Syslog, 7, "/w", "/o", ActionQueue::Direct);
            let tail =
                |c: &str| c[c.find("template(").unwrap()..c.find("input(").unwrap()].to_string();
            assert_eq!(tail(&conf), tail(&plain));
        }
    }

    /// Every config the lab writes for a subject, rendered for fixed ports and paths.
    fn rendered_configs() -> Vec<(String, String)> {
        let pki = ServerPki {
            ca: "/run/pki/ca.crt".into(),
            cert: "/run/pki/server.crt".into(),
            key: "/run/pki/server.key".into(),
        };
        let disk = DiskBuffer {
            sync: "50ms",
            data_dir: "/run/data".into(),
        };
        let mut out = Vec::new();
        for s in [
            Scenario::Basic,
            Scenario::Syslog,
            Scenario::Raw,
            Scenario::Rfc5424,
            Scenario::Forward,
            Scenario::ForwardRelay,
            Scenario::ForwardDeliver,
            Scenario::TlsHandshake,
        ] {
            let n = s.name();
            let c = |d, t| loghaul_subject_config(s, 5514, 8686, "/run/out.log", d, t);
            out.push((format!("loghaul-{n}.yaml"), c(None, None)));
            out.push((format!("loghaul-{n}-disk.yaml"), c(Some(&disk), None)));
            out.push((format!("loghaul-{n}-tls.yaml"), c(None, Some(&pki))));
        }
        for s in [
            Scenario::Basic,
            Scenario::Syslog,
            Scenario::Raw,
            Scenario::Rfc5424,
            Scenario::TlsHandshake,
        ] {
            let n = s.name();
            let r = |q, t: Option<&RsyslogTls<'_>>| {
                rsyslog_config_with(s, 5514, "/run/work", "/run/out.log", q, t)
            };
            out.push((format!("rsyslog-{n}.conf"), r(ActionQueue::Direct, None)));
            out.push((
                format!("rsyslog-da-{n}.conf"),
                r(ActionQueue::DiskAssisted, None),
            ));
            for driver in [TlsDriver::Gtls, TlsDriver::Ossl] {
                let tls = RsyslogTls { driver, pki: &pki };
                out.push((
                    format!("rsyslog-tls-{}-{n}.conf", driver.name()),
                    r(ActionQueue::Direct, Some(&tls)),
                ));
            }
            out.push((
                format!("syslog-ng-{n}.conf"),
                syslog_ng_config(s, 5514, "/run/out.log"),
            ));
        }
        out.push((
            "loghaul-relay-a.yaml".into(),
            relay_config(5514, 8686, 5515),
        ));
        out.push((
            "loghaul-tail.yaml".into(),
            tail_config("/run/in.log", "/run/state", 8686, "/run/out.log"),
        ));
        out.push((
            "loghaul-kafka-producer.yaml".into(),
            kafka_producer_config(5514, 8686, "127.0.0.1:9092", "bench"),
        ));
        out.push((
            "loghaul-kafka-consumer.yaml".into(),
            kafka_consumer_config(1, 8686, "127.0.0.1:9092", "g", "bench", "/run/out.log"),
        ));
        out.push((
            "loghaul-agent.yaml".into(),
            agent_config(
                3,
                "/run/agent-3.log",
                "/run/state/agent-3",
                8686,
                &[5514, 5515],
            ),
        ));
        out.push((
            "loghaul-deliver.yaml".into(),
            deliver_config(1, 5514, 8686, &[5515, 5516]),
        ));
        out.push(("fluentd.conf".into(), fluentd_config(5514, "/run")));
        out.push((
            "fluentd-receiver.conf".into(),
            fluentd_file_receiver(
                "scenario forward_deliver; receiver 1",
                5514,
                "/run/receiver-1",
                "flush_mode immediate",
            ),
        ));
        out.push((
            "fluentd-agent.conf".into(),
            fluentd_agent_config(
                2,
                "/run/agent-2.log",
                "/run/state/agent-2.pos",
                8686,
                &[5514, 5515],
            ),
        ));
        out.push((
            "fluentd-deliver.conf".into(),
            fluentd_deliver_config(0, 5514, &[5515, 5516]),
        ));
        out.push(("basic.rb".into(), EM_BASIC.to_string()));
        out
    }

    /// The configs are byte for byte those in `testdata/configs/` (rewritten with
    /// `LOGHAUL_BLESS=1` when a change to a config is meant).
    #[test]
    fn configs_are_unchanged() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/configs");
        let bless = std::env::var_os("LOGHAUL_BLESS").is_some();
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
        }
        for (name, text) in rendered_configs() {
            let path = dir.join(&name);
            if bless {
                std::fs::write(&path, &text).unwrap();
            } else {
                let want = std::fs::read_to_string(&path).unwrap();
                assert!(want == text, "{name} differs:\n{text}");
            }
        }
    }

    #[test]
    fn only_loghaul_and_fluentd_make_a_tree() {
        for kind in [
            SubjectKind::Rsyslog,
            SubjectKind::SyslogNg,
            SubjectKind::Eventmachine,
            SubjectKind::Bare,
        ] {
            assert!(unsupported(kind, Scenario::ForwardDeliver).is_some());
        }
        assert!(unsupported(SubjectKind::Loghaul, Scenario::ForwardDeliver).is_none());
        assert!(unsupported(SubjectKind::Fluentd, Scenario::ForwardDeliver).is_none());
    }
}
