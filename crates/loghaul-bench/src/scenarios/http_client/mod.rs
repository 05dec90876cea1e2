//! `http_client`: the published HTTP-client experiment, the same download and NDJSON upload by
//! loghaul's `http` sink and by curl, Ruby and Python clients, in wall and CPU seconds ([`run`]).

pub mod run;

use anyhow::Result;

use super::{Scenario, variant_reason};
use crate::payload::{Format, Framing};
use crate::runner::Plan;
use crate::subjects::{Input, Peers, SubjectKind};

/// HTTP clients moving the same bytes.
pub struct HttpClient;

impl Scenario for HttpClient {
    fn name(&self) -> &'static str {
        "http_client"
    }

    fn about(&self) -> &'static str {
        "The published HTTP-client experiment: the same download and NDJSON upload by loghaul's \
         `http` sink and by curl, Ruby and Python clients, in wall and CPU seconds"
    }

    /// It counts requests and bytes (`--upload-*`), not events.
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
            SubjectKind::Curl,
            SubjectKind::NetHttp,
            SubjectKind::Curb,
            SubjectKind::EmHttp,
            SubjectKind::Requests,
            SubjectKind::Urllib3,
        ]
    }

    fn unsupported(&self, kind: SubjectKind) -> &'static str {
        variant_reason(kind).unwrap_or("n/a: not an HTTP client of the client experiment")
    }

    /// Its own servers (`ceiling`, the upload receiver) are `loghaul bench httpd`.
    fn needs_loghaul(&self) -> bool {
        true
    }

    fn default_subjects(&self) -> &'static [SubjectKind] {
        self.subjects()
    }

    fn run(&self, plan: &Plan, peers: &Peers) -> Result<String> {
        run::run(plan, &plan.http, peers)
    }
}
