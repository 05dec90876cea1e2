//! `otlp`: OTLP/HTTP log export (`POST /v1/logs`, binary protobuf, 100 records a request) into
//! a JSON-lines file, as an OpenTelemetry SDK's or a Collector's `otlp_http` exporter sends it.

use anyhow::{Result, bail};

use super::{Scenario, one_process_reason};
use crate::payload::{Format, Framing};
use crate::runner::{Driver, Plan};
use crate::subjects::{Input, SubjectKind};

/// OTLP/HTTP protobuf into JSON lines.
pub struct Otlp;

impl Scenario for Otlp {
    fn name(&self) -> &'static str {
        "otlp"
    }

    fn about(&self) -> &'static str {
        "OTLP/HTTP protobuf (POST /v1/logs, 100 records a request) into a JSON-lines file"
    }

    /// A record is written as about 400 bytes of JSON by loghaul and 500 by the Collector: 2M
    /// make about 1GB, as the other file scenarios' defaults do.
    fn default_events(&self) -> u64 {
        2_000_000
    }

    /// The body of a log record: a typical application log line.
    fn default_message_size(&self) -> usize {
        128
    }

    /// The bodies are raw text lines (the marker, then words); the target wraps them into log
    /// records (see [`crate::otlp`]).
    fn payload(&self) -> (Format, Framing) {
        (Format::Raw, Framing::Newline)
    }

    fn input(&self) -> Option<Input> {
        Some(Input::Otlp)
    }

    fn subjects(&self) -> &'static [SubjectKind] {
        &[SubjectKind::Loghaul, SubjectKind::Otelcol]
    }

    fn default_subjects(&self) -> &'static [SubjectKind] {
        &[SubjectKind::Loghaul, SubjectKind::Otelcol]
    }

    fn unsupported(&self, kind: SubjectKind) -> &'static str {
        match kind {
            SubjectKind::Rsyslog
            | SubjectKind::RsyslogDa
            | SubjectKind::RsyslogTls
            | SubjectKind::SyslogNg
            | SubjectKind::Fluentd
            | SubjectKind::Eventmachine => "n/a: no OTLP input",
            SubjectKind::Bare => "n/a: the bare loop has no HTTP server",
            _ => one_process_reason(kind, false),
        }
    }

    fn check(&self, plan: &Plan) -> Result<()> {
        if plan.driver == Driver::Loggen {
            bail!("loggen speaks syslog only: `otlp` takes the built-in generator (otlp://)");
        }
        Ok(())
    }
}
