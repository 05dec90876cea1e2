//! `raw`: raw lines with receive time and client address into a JSON-lines file.

use super::{SYSLOG_SUBJECTS, Scenario, one_process_reason};
use crate::payload::{Format, Framing};
use crate::subjects::{Input, SubjectKind};

/// Raw lines over TCP into JSON lines.
pub struct Raw;

impl Scenario for Raw {
    fn name(&self) -> &'static str {
        "raw"
    }

    fn about(&self) -> &'static str {
        "Raw lines with receive time and client address into a JSON-lines file"
    }

    fn default_events(&self) -> u64 {
        5_000_000
    }

    fn default_message_size(&self) -> usize {
        128
    }

    fn payload(&self) -> (Format, Framing) {
        (Format::Raw, Framing::Newline)
    }

    fn input(&self) -> Option<Input> {
        Some(Input::RawLines)
    }

    fn subjects(&self) -> &'static [SubjectKind] {
        SYSLOG_SUBJECTS
    }

    fn unsupported(&self, kind: SubjectKind) -> &'static str {
        one_process_reason(kind, false)
    }
}
