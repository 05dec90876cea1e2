//! `syslog`: RFC3164 over TCP, parsed (timestamps included) into a JSON-lines file.

use super::{SYSLOG_SUBJECTS, Scenario, one_process_reason};
use crate::payload::{Format, Framing};
use crate::subjects::{Input, SubjectKind};

/// RFC3164 over TCP into JSON lines.
pub struct Syslog;

impl Scenario for Syslog {
    fn name(&self) -> &'static str {
        "syslog"
    }

    fn about(&self) -> &'static str {
        "RFC3164 over TCP, parsed (timestamps included) into a JSON-lines file"
    }

    /// 5M lines: a second or two on the fastest subject, about 1GB of JSON. Larger files measure
    /// the machine more than the subject (the kernel's background writeback, fresh page-cache
    /// pages).
    fn default_events(&self) -> u64 {
        5_000_000
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
        SYSLOG_SUBJECTS
    }

    fn unsupported(&self, kind: SubjectKind) -> &'static str {
        one_process_reason(kind, false)
    }
}
