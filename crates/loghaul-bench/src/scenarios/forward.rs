//! `forward`: the Fluentd forward protocol (PackedForward) into a JSON-lines file.

use anyhow::{Result, bail};

use super::{Scenario, one_process_reason};
use crate::payload::{Format, Framing};
use crate::runner::{Driver, Plan};
use crate::subjects::{Input, SubjectKind};

/// The forward protocol into JSON lines.
pub struct Forward;

/// What the forward scenarios say to `--generator loggen`.
pub(crate) fn check_generator(plan: &Plan) -> Result<()> {
    if plan.driver == Driver::Loggen {
        bail!("loggen speaks syslog only: the forward scenarios take the built-in generator");
    }
    Ok(())
}

impl Scenario for Forward {
    fn name(&self) -> &'static str {
        "forward"
    }

    fn about(&self) -> &'static str {
        "Fluentd forward protocol (PackedForward) into a JSON-lines file"
    }

    /// Forward lines are ~225 bytes of JSON: 5M is about 1.1GB, and 0.7–1s of `forward` (5–7M/s
    /// at 2M events).
    fn default_events(&self) -> u64 {
        5_000_000
    }

    /// The message text of a forward record: a typical application log line.
    fn default_message_size(&self) -> usize {
        100
    }

    fn payload(&self) -> (Format, Framing) {
        (Format::Raw, Framing::Newline)
    }

    fn input(&self) -> Option<Input> {
        Some(Input::Forward)
    }

    fn subjects(&self) -> &'static [SubjectKind] {
        &[
            SubjectKind::Loghaul,
            SubjectKind::LoghaulDisk50ms,
            SubjectKind::LoghaulDiskBatch,
            SubjectKind::LoghaulTls,
            SubjectKind::Bare,
            SubjectKind::Fluentd,
            SubjectKind::Otelcol,
        ]
    }

    fn unsupported(&self, kind: SubjectKind) -> &'static str {
        one_process_reason(kind, true)
    }

    fn check(&self, plan: &Plan) -> Result<()> {
        check_generator(plan)
    }
}
