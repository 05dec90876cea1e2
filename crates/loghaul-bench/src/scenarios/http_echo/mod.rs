//! `http_echo`: the published HTTP echo-server experiment, `ab` and `wrk` against loghaul's
//! `http_server` in echo mode and Node.js, Tornado, EventMachine and Finagle ([`run`]).

pub mod run;

use anyhow::Result;

use super::{Scenario, variant_reason};
use crate::payload::{Format, Framing};
use crate::runner::Plan;
use crate::subjects::{Input, Peers, SubjectKind};

/// Echo servers under `ab` and `wrk`.
pub struct HttpEcho;

impl Scenario for HttpEcho {
    fn name(&self) -> &'static str {
        "http_echo"
    }

    fn about(&self) -> &'static str {
        "The published HTTP echo-server experiment: `ab` and `wrk` against loghaul's `http_server` in \
         echo mode and Node.js, Tornado, EventMachine and Finagle"
    }

    /// It counts requests and bytes (`--ab-*`), not events.
    fn default_events(&self) -> u64 {
        0
    }

    fn default_message_size(&self) -> usize {
        128
    }

    fn payload(&self) -> (Format, Framing) {
        (Format::Raw, Framing::Newline)
    }

    fn input(&self) -> Option<Input> {
        None
    }

    fn subjects(&self) -> &'static [SubjectKind] {
        &[
            SubjectKind::Loghaul,
            SubjectKind::Node,
            SubjectKind::Tornado,
            SubjectKind::Eventmachine,
            SubjectKind::Finagle,
            SubjectKind::Ceiling,
        ]
    }

    fn unsupported(&self, kind: SubjectKind) -> &'static str {
        variant_reason(kind).unwrap_or("n/a: not an HTTP server of the echo experiment")
    }

    /// Its own servers (`ceiling`, the upload receiver) are `loghaul bench httpd`.
    fn needs_loghaul(&self) -> bool {
        true
    }

    fn default_subjects(&self) -> &'static [SubjectKind] {
        self.subjects()
    }

    /// Five runs, as the published experiment.
    fn rounds(&self, runs: Option<usize>, warmup: Option<usize>, _: Option<u64>) -> (usize, usize) {
        (runs.unwrap_or(5), warmup.unwrap_or(1))
    }

    fn run(&self, plan: &Plan, peers: &Peers) -> Result<String> {
        run::run(plan, &plan.http, peers)
    }
}
