//! `rfc5424`: RFC5424 with structured data, octet-counted, into a JSON-lines file.

use super::{SYSLOG_SUBJECTS, Scenario, one_process_reason};
use crate::payload::{Format, Framing};
use crate::subjects::{Input, SubjectKind};

/// RFC5424 over TCP into JSON lines.
pub struct Rfc5424;

impl Scenario for Rfc5424 {
    fn name(&self) -> &'static str {
        "rfc5424"
    }

    fn about(&self) -> &'static str {
        "RFC5424 with structured data, octet-counted, into a JSON-lines file"
    }

    /// 5M events would be 2.3GB of JSON, the kernel's background writeback threshold here: they
    /// ran 1.2–1.5M/s at 1.1–1.2 CPU-s/1M where 2M ran 2M/s at 0.8 (writeback, and fresh
    /// page-cache pages, which this VM backs lazily).
    fn default_events(&self) -> u64 {
        2_000_000
    }

    /// Header and structured data take ~130 bytes: room for a message text.
    fn default_message_size(&self) -> usize {
        256
    }

    fn payload(&self) -> (Format, Framing) {
        (Format::Rfc5424, Framing::OctetCounting)
    }

    fn input(&self) -> Option<Input> {
        Some(Input::Rfc5424)
    }

    fn subjects(&self) -> &'static [SubjectKind] {
        SYSLOG_SUBJECTS
    }

    fn unsupported(&self, kind: SubjectKind) -> &'static str {
        one_process_reason(kind, false)
    }
}
