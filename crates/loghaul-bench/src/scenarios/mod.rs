//! The scenarios of `bench run`: each is a module implementing [`Scenario`], listed once in
//! [`REGISTRY`].
//!
//! A scenario owns everything that is its own: its defaults (events per run, message size, the
//! subjects run when none are named), the generator's payload, which subjects it runs (listed,
//! and why the others do not), how a subject is prepared for it, how it runs, and the section
//! its report has beside the common table. The rest of the lab knows scenarios only through the
//! trait: the runner ([`crate::runner`]), the report ([`crate::report`]), the subjects
//! ([`crate::subjects`], which see a scenario as a [`Setup`]).
//!
//! Most scenarios are connections into one subject at the highest rate, run by the runner's
//! rounds (`run` keeps its default); those with a load of their own (a file to tail, a tree of
//! processes, a broker, HTTP tools) have their own runner in their folder.
//!
//! Adding a scenario: a module here implementing [`Scenario`], and its line in the `scenarios!`
//! list below, which declares the module and registers it (bench/README.md, "Adding a
//! scenario").

mod configs;
pub mod tls;

use std::path::Path;

use anyhow::{Result, bail};

use crate::payload::{Content, Format, Framing, PayloadSpec};
use crate::report::RunRecord;
use crate::runner::Plan;
use crate::subjects::{self, Input, Launch, Peers, Setup, SubjectKind};

/// Declares each scenario's module and lists its type in [`REGISTRY`], so that a scenario is
/// registered by one line: `module::Type`.
macro_rules! scenarios {
    ($($module:ident::$scenario:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// Every scenario `bench run` knows, in the order `--help` lists them.
        pub static REGISTRY: &[&dyn Scenario] = &[$(&$module::$scenario),*];
    };
}

scenarios! {
    basic::Basic,
    syslog::Syslog,
    raw::Raw,
    rfc5424::Rfc5424,
    forward::Forward,
    forward_relay::ForwardRelay,
    forward_deliver::ForwardDeliver,
    tail::Tail,
    http_echo::HttpEcho,
    http_client::HttpClient,
    tls_handshake::TlsHandshake,
    kafka_pipeline::KafkaPipeline,
    transform::Transform,
    api_viewers::ApiViewers,
    otlp::Otlp,
}

/// The subjects run when `--subjects` is not given, unless a scenario says otherwise.
pub const DEFAULT_SUBJECTS: &[SubjectKind] = &[
    SubjectKind::Loghaul,
    SubjectKind::Rsyslog,
    SubjectKind::SyslogNg,
    SubjectKind::Eventmachine,
];

/// An experiment of `bench run`.
///
/// The contract: [`name`](Scenario::name) is unique in [`REGISTRY`] and is what the command line,
/// the results' file names and the records' `scenario` field say; a subject runs the scenario if
/// and only if it is in [`subjects`](Scenario::subjects) (every other one keeps its row, with
/// [`unsupported`](Scenario::unsupported)'s reason); [`run`](Scenario::run) writes the results
/// into `plan.out` and returns the Markdown printed at the end.
pub trait Scenario: Sync {
    /// Its name on the command line (`forward_relay`; `forward-relay` is accepted too).
    fn name(&self) -> &'static str;

    /// One line for `--help`.
    fn about(&self) -> &'static str;

    /// Events per run when `--events` is not given.
    fn default_events(&self) -> u64;

    /// Message size in bytes when `--message-size` is not given.
    fn default_message_size(&self) -> usize;

    /// The generator's format and framing (for the forward protocol, those of each record's
    /// message text: the protocol frames the records, see [`crate::fluent`]).
    fn payload(&self) -> (Format, Framing);

    /// What the generator's messages hold after their marker: filler words unless a scenario
    /// parses them.
    fn content(&self) -> Content {
        Content::Words
    }

    /// What a one-process subject reads on its port and writes (`None`: the scenario starts its
    /// subjects itself, with no input port the runner's rounds could send to).
    fn input(&self) -> Option<Input>;

    /// The subjects it runs. Listed one by one: a new subject runs nowhere until a scenario
    /// lists it.
    fn subjects(&self) -> &'static [SubjectKind];

    /// Why `kind`, not in [`subjects`](Scenario::subjects), does not run it (`n/a: ...`).
    fn unsupported(&self, kind: SubjectKind) -> &'static str;

    /// The subjects run when `--subjects` is not given.
    fn default_subjects(&self) -> &'static [SubjectKind] {
        DEFAULT_SUBJECTS
    }

    /// Measured runs and warm-up rounds, from `--runs` and `--warmup` (and `--events`, for a
    /// scenario that ignores them and says so).
    fn rounds(
        &self,
        runs: Option<usize>,
        warmup: Option<usize>,
        events: Option<u64>,
    ) -> (usize, usize) {
        let _ = events;
        (runs.unwrap_or(3), warmup.unwrap_or(1))
    }

    /// Refuses a plan the scenario cannot carry out (a generator it cannot take, ...).
    ///
    /// # Errors
    /// What the plan asks that the scenario cannot do.
    fn check(&self, plan: &Plan) -> Result<()> {
        let _ = plan;
        Ok(())
    }

    /// Whether it always runs the loghaul binary, whatever the subjects (its own servers are
    /// `loghaul bench` subcommands).
    fn needs_loghaul(&self) -> bool {
        false
    }

    /// Whether the generator opens a connection for every message.
    fn connect_per_message(&self) -> bool {
        false
    }

    /// Writes `kind`'s config into `dir` and returns how to start it, for the runner's rounds.
    /// By default, the one-process subject reading [`input`](Scenario::input).
    ///
    /// # Errors
    /// The config cannot be written, the program is missing, or the scenario has no input.
    fn prepare(
        &self,
        kind: SubjectKind,
        dir: &Path,
        peers: &Peers,
        loghaul: &Path,
    ) -> Result<Launch> {
        match self.input() {
            Some(input) => {
                subjects::prepare(kind, &Setup::new(self.name(), input), dir, peers, loghaul)
            }
            None => bail!("`{}` starts its subjects itself", self.name()),
        }
    }

    /// The platform column of `kind`'s row.
    fn platform(&self, kind: SubjectKind, peers: &Peers, loghaul: &Path) -> String {
        peers.platform(kind, loghaul)
    }

    /// Runs the plan and writes its results; returns the Markdown table (and notes). By
    /// default the runner's rounds: every subject once per round, the generator into its input.
    ///
    /// # Errors
    /// The results cannot be written or the work folder cannot be created. A subject that fails
    /// is a row in the table, not an error.
    fn run(&self, plan: &Plan, peers: &Peers) -> Result<String> {
        crate::runner::run_connections(plan, peers)
    }

    /// The scenario's own section of the report, under the common table (Markdown; empty for
    /// none), from the runs of the runner's rounds. By default what TLS subjects need said.
    fn report(&self, plan: &Plan, records: &[RunRecord], subjects: &[String]) -> String {
        tls::notes(false, plan.events, records, subjects)
    }
}

impl<'a> std::fmt::Debug for dyn Scenario + 'a {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl<'a> dyn Scenario + 'a {
    /// Why `kind` does not run this scenario (`None`: it does).
    pub fn why_not(&self, kind: SubjectKind) -> Option<&'static str> {
        if self.subjects().contains(&kind) {
            None
        } else {
            Some(self.unsupported(kind))
        }
    }

    /// The generator's payload: [`Scenario::payload`] at `message_size`, seeded.
    pub fn payload_spec(&self, message_size: usize, seed: u64) -> PayloadSpec {
        let (format, framing) = self.payload();
        PayloadSpec {
            format,
            framing,
            message_size,
            seed,
            content: self.content(),
            ..PayloadSpec::default()
        }
    }

    /// Whether the load is the forward protocol into the subject's port (the generator's
    /// fluent:// target).
    pub fn is_forward(&self) -> bool {
        self.input() == Some(Input::Forward)
    }
}

/// The scenario called `name` (or its alias, with `-` for `_`).
pub fn by_name(name: &str) -> Option<&'static dyn Scenario> {
    let name = name.replace('-', "_");
    REGISTRY.iter().copied().find(|s| s.name() == name)
}

/// The command line's parser of a scenario name: the registry's names as its possible values,
/// each with `-` for `_` accepted too.
pub fn parser() -> ScenarioParser {
    ScenarioParser
}

/// See [`parser`].
#[derive(Clone, Copy, Debug)]
pub struct ScenarioParser;

impl clap::builder::TypedValueParser for ScenarioParser {
    type Value = &'static dyn Scenario;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        if let Some(s) = value.to_str().and_then(by_name) {
            return Ok(s);
        }
        // clap's own message, which lists the names.
        let names = clap::builder::PossibleValuesParser::new(REGISTRY.iter().map(|s| s.name()));
        names.parse_ref(cmd, arg, value)?;
        Err(clap::Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(cmd))
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(REGISTRY.iter().map(|s| {
            clap::builder::PossibleValue::new(s.name()).help(s.about())
        })))
    }
}

/// Why a loghaul or rsyslog variant does not run a scenario of others than the one-process
/// ones, if `kind` is such a variant: its reason comes before the scenario's own.
pub fn variant_reason(kind: SubjectKind) -> Option<&'static str> {
    match kind {
        SubjectKind::LoghaulDisk50ms | SubjectKind::LoghaulDiskBatch => Some(
            "n/a: the disk-buffer variants run the one-process scenarios (basic, syslog, raw, \
             rfc5424, forward)",
        ),
        SubjectKind::LoghaulTls => Some(
            "n/a: the TLS variant runs the one-process scenarios (basic, syslog, raw, rfc5424, \
             forward) and tls_handshake",
        ),
        SubjectKind::LoghaulVrl => {
            Some("n/a: the VRL-runtime variant runs transform, the scenario with a remap")
        }
        SubjectKind::LoghaulReload | SubjectKind::LoghaulTap => {
            Some("n/a: the live-operation variants run syslog")
        }
        SubjectKind::Loghaul
        | SubjectKind::Rsyslog
        | SubjectKind::RsyslogTls
        | SubjectKind::RsyslogDa
        | SubjectKind::SyslogNg
        | SubjectKind::Eventmachine
        | SubjectKind::Bare
        | SubjectKind::Fluentd
        | SubjectKind::Otelcol
        | SubjectKind::Node
        | SubjectKind::Tornado
        | SubjectKind::Finagle
        | SubjectKind::Ceiling
        | SubjectKind::Curl
        | SubjectKind::NetHttp
        | SubjectKind::Curb
        | SubjectKind::EmHttp
        | SubjectKind::Requests
        | SubjectKind::Urllib3 => None,
    }
}

/// Why the OpenTelemetry Collector does not run a scenario: it is configured for those that list
/// it.
pub const OTELCOL_REASON: &str =
    "n/a: the Collector is configured for syslog, otlp, forward and tail only";

/// Why `kind` does not run a one-process scenario reading syslog or raw lines (`forward`:
/// the forward protocol), as the subjects say it themselves.
pub fn one_process_reason(kind: SubjectKind, forward: bool) -> &'static str {
    if let Some(why) = variant_reason(kind) {
        return why;
    }
    match kind {
        SubjectKind::Eventmachine if forward => {
            "n/a: a line counter, it speaks no forward protocol"
        }
        SubjectKind::Eventmachine => "n/a: a line counter, it parses no syslog",
        SubjectKind::Rsyslog
        | SubjectKind::RsyslogDa
        | SubjectKind::RsyslogTls
        | SubjectKind::SyslogNg => "n/a: no Fluentd forward-protocol input",
        SubjectKind::Fluentd => "n/a: configured for the forward scenarios only",
        SubjectKind::Otelcol => OTELCOL_REASON,
        SubjectKind::Node
        | SubjectKind::Tornado
        | SubjectKind::Finagle
        | SubjectKind::Ceiling
        | SubjectKind::Curl
        | SubjectKind::NetHttp
        | SubjectKind::Curb
        | SubjectKind::EmHttp
        | SubjectKind::Requests
        | SubjectKind::Urllib3 => "n/a: a peer of the HTTP experiments only",
        SubjectKind::Loghaul
        | SubjectKind::LoghaulDisk50ms
        | SubjectKind::LoghaulDiskBatch
        | SubjectKind::LoghaulTls
        | SubjectKind::LoghaulVrl
        | SubjectKind::LoghaulReload
        | SubjectKind::LoghaulTap
        | SubjectKind::Bare => "n/a: not configured for this scenario",
    }
}

/// The subjects of `syslog`: those of [`SYSLOG_SUBJECTS`], loghaul's live-operation variants (a
/// reload during the run, a tap of every output) and the OpenTelemetry Collector.
pub const SYSLOG_LIVE_SUBJECTS: &[SubjectKind] = &[
    SubjectKind::Loghaul,
    SubjectKind::LoghaulDisk50ms,
    SubjectKind::LoghaulDiskBatch,
    SubjectKind::LoghaulTls,
    SubjectKind::LoghaulReload,
    SubjectKind::LoghaulTap,
    SubjectKind::Rsyslog,
    SubjectKind::RsyslogDa,
    SubjectKind::RsyslogTls,
    SubjectKind::SyslogNg,
    SubjectKind::Bare,
    SubjectKind::Otelcol,
];

/// The subjects of the one-process syslog scenarios (`syslog`, `raw`, `rfc5424`).
pub const SYSLOG_SUBJECTS: &[SubjectKind] = &[
    SubjectKind::Loghaul,
    SubjectKind::LoghaulDisk50ms,
    SubjectKind::LoghaulDiskBatch,
    SubjectKind::LoghaulTls,
    SubjectKind::Rsyslog,
    SubjectKind::RsyslogDa,
    SubjectKind::RsyslogTls,
    SubjectKind::SyslogNg,
    SubjectKind::Bare,
];

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found_by_name_or_alias() {
        for s in REGISTRY {
            assert!(std::ptr::eq(
                by_name(s.name())
                    .map_or(std::ptr::null(), |f| f as *const dyn Scenario as *const ()),
                *s as *const dyn Scenario as *const ()
            ));
            assert_eq!(REGISTRY.iter().filter(|o| o.name() == s.name()).count(), 1);
        }
        assert_eq!(
            by_name("forward-relay").map(|s| s.name()),
            Some("forward_relay")
        );
        assert!(by_name("nope").is_none());
    }

    /// Who runs what, as the lab's tables have always said it.
    #[test]
    fn subjects_run_where_their_scenarios_list_them() {
        let runs = |name: &str, kind: SubjectKind| by_name(name).unwrap().why_not(kind).is_none();
        // The disk variants run the one-process scenarios only.
        for n in ["basic", "syslog", "forward"] {
            assert!(runs(n, SubjectKind::LoghaulDiskBatch), "{n}");
        }
        for n in ["forward_relay", "tail", "http_echo", "tls_handshake"] {
            assert!(!runs(n, SubjectKind::LoghaulDisk50ms), "{n}");
        }
        // rsyslog-da goes wherever rsyslog goes, but to `transform`, where no disk variant of
        // loghaul goes either.
        for s in REGISTRY.iter().filter(|s| s.name() != "transform") {
            assert_eq!(
                s.why_not(SubjectKind::RsyslogDa).is_none(),
                s.why_not(SubjectKind::Rsyslog).is_none(),
                "{}",
                s.name()
            );
        }
        // The TLS variants: the one-process scenarios and tls_handshake; loghaul speaks the
        // forward protocol over TLS too, rsyslog has no forward input.
        for kind in [SubjectKind::LoghaulTls, SubjectKind::RsyslogTls] {
            for n in ["syslog", "rfc5424", "tls_handshake"] {
                assert!(runs(n, kind), "{n} {kind:?}");
            }
            for n in ["forward_relay", "tail", "http_echo"] {
                assert!(!runs(n, kind), "{n} {kind:?}");
            }
        }
        assert!(runs("forward", SubjectKind::LoghaulTls));
        assert!(!runs("forward", SubjectKind::RsyslogTls));
        assert!(!runs("tls_handshake", SubjectKind::Bare));
        // Only loghaul and fluentd make a tree.
        for kind in [
            SubjectKind::Rsyslog,
            SubjectKind::SyslogNg,
            SubjectKind::Eventmachine,
            SubjectKind::Bare,
        ] {
            assert!(!runs("forward_deliver", kind), "{kind:?}");
        }
        assert!(runs("forward_deliver", SubjectKind::Loghaul));
        assert!(runs("forward_deliver", SubjectKind::Fluentd));
        assert_eq!(
            by_name("eventmachine_nope").map(|s| s.name()),
            None,
            "no scenario by a subject's name"
        );
        assert_eq!(
            by_name("syslog").and_then(|s| s.why_not(SubjectKind::Eventmachine)),
            Some("n/a: a line counter, it parses no syslog")
        );
    }

    #[test]
    fn every_default_subject_is_supported_or_says_why() {
        for s in REGISTRY {
            for &k in s.default_subjects() {
                let _ = s.why_not(k);
            }
            for &k in s.subjects() {
                assert!(s.why_not(k).is_none(), "{} {k:?}", s.name());
            }
        }
    }
}
