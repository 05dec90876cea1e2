//! `tls_handshake`: new connections per second. Every message on a connection of its own
//! (connect, TLS handshake for the TLS subjects, one RFC3164 line, close), parsed into a
//! JSON-lines file as in `syslog`; the rate is handshakes per second.

use anyhow::{Result, bail};

use super::{Scenario, one_process_reason, tls};
use crate::payload::{Format, Framing};
use crate::report::RunRecord;
use crate::runner::{Driver, Plan};
use crate::subjects::{Input, SubjectKind};

/// A connection (and handshake) per message.
pub struct TlsHandshake;

impl Scenario for TlsHandshake {
    fn name(&self) -> &'static str {
        "tls_handshake"
    }

    fn about(&self) -> &'static str {
        "New connections per second: every message on a connection of its own (connect, TLS \
         handshake for the TLS subjects, one RFC3164 line, close), parsed into a JSON-lines file \
         as in `syslog`; the rate is handshakes per second"
    }

    /// Connections, not events: each message on its own connection (and TLS handshake).
    fn default_events(&self) -> u64 {
        2_000
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
        &[
            SubjectKind::Loghaul,
            SubjectKind::LoghaulTls,
            SubjectKind::Rsyslog,
            SubjectKind::RsyslogDa,
            SubjectKind::RsyslogTls,
            SubjectKind::SyslogNg,
        ]
    }

    fn unsupported(&self, kind: SubjectKind) -> &'static str {
        match kind {
            SubjectKind::Bare => {
                "n/a: the bare loop reads long-lived connections; `loghaul` is the plain-TCP row"
            }
            other => one_process_reason(other, false),
        }
    }

    fn default_subjects(&self) -> &'static [SubjectKind] {
        &[SubjectKind::LoghaulTls, SubjectKind::RsyslogTls]
    }

    fn check(&self, plan: &Plan) -> Result<()> {
        if plan.driver == Driver::Loggen {
            bail!(
                "the TLS subjects and `tls_handshake` take the built-in generator (tls://, a \
                 connection per message)"
            );
        }
        Ok(())
    }

    fn connect_per_message(&self) -> bool {
        true
    }

    fn report(&self, plan: &Plan, records: &[RunRecord], subjects: &[String]) -> String {
        tls::notes(true, plan.events, records, subjects)
    }
}
