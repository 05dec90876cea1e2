//! `basic`: raw newline lines over TCP, only counted, no parsing (the published experiments'
//! `basic.rb`, whose EventMachine counter is one of its subjects).

use super::{Scenario, one_process_reason};
use crate::payload::{Format, Framing};
use crate::subjects::{Input, SubjectKind};

/// Raw newline lines over TCP, counted.
pub struct Basic;

impl Scenario for Basic {
    fn name(&self) -> &'static str {
        "basic"
    }

    fn about(&self) -> &'static str {
        "Raw newline lines over TCP, counted, no parsing"
    }

    /// Short lines go fast: 40M take one to two seconds on the fastest subject. Sub-second runs
    /// measure start-up as much as throughput: at 10M events `basic` ran 0.5s and came out 7%
    /// slower than at 40M.
    fn default_events(&self) -> u64 {
        40_000_000
    }

    fn default_message_size(&self) -> usize {
        64
    }

    fn payload(&self) -> (Format, Framing) {
        (Format::Raw, Framing::Newline)
    }

    fn input(&self) -> Option<Input> {
        Some(Input::CountedLines)
    }

    fn subjects(&self) -> &'static [SubjectKind] {
        &[
            SubjectKind::Loghaul,
            SubjectKind::LoghaulDisk50ms,
            SubjectKind::LoghaulDiskBatch,
            SubjectKind::LoghaulTls,
            SubjectKind::Rsyslog,
            SubjectKind::RsyslogDa,
            SubjectKind::RsyslogTls,
            SubjectKind::SyslogNg,
            SubjectKind::Eventmachine,
            SubjectKind::Bare,
        ]
    }

    fn unsupported(&self, kind: SubjectKind) -> &'static str {
        one_process_reason(kind, false)
    }
}
