//! `forward_relay`: the forward protocol through a relay (A: fluent source → fluent sink with
//! acks) into a receiver (B: fluent source → JSON-lines file); the subject is the pair, B a
//! [`Companion`] started and made ready before A, stopped after it, and charged with A for CPU
//! and memory.

use std::path::Path;

use anyhow::Result;

use super::{Scenario, forward, one_process_reason};
use crate::payload::{Format, Framing};
use crate::runner::Plan;
use crate::subjects::{
    self, Companion, Input, Launch, Output, Peers, Ready, Setup, SubjectKind, free_port,
    write_config,
};

/// loghaul A relaying to loghaul B.
pub struct ForwardRelay;

impl Scenario for ForwardRelay {
    fn name(&self) -> &'static str {
        "forward_relay"
    }

    fn about(&self) -> &'static str {
        "Forward protocol through a relay (A: fluent source → fluent sink with acks) into a \
         receiver (B: fluent source → JSON-lines file); the subject is the pair"
    }

    /// 5M forward lines: about 1.5s of `forward_relay` (about 3.2M/s).
    fn default_events(&self) -> u64 {
        5_000_000
    }

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
        &[SubjectKind::Loghaul]
    }

    fn unsupported(&self, kind: SubjectKind) -> &'static str {
        match kind {
            SubjectKind::Fluentd => {
                "n/a: not configured as a relay pair (yet): see bench/README.md"
            }
            SubjectKind::Bare => "n/a: no bare relay loop; compare with `forward`'s bare row",
            other => one_process_reason(other, true),
        }
    }

    fn check(&self, plan: &Plan) -> Result<()> {
        forward::check_generator(plan)
    }

    fn prepare(
        &self,
        kind: SubjectKind,
        dir: &Path,
        peers: &Peers,
        loghaul: &Path,
    ) -> Result<Launch> {
        let program = peers.program(kind, loghaul)?;
        let s = |p: &Path| p.display().to_string();
        let out = dir.join("out.log");
        let (port, api_a, port_b, api_b) = (free_port()?, free_port()?, free_port()?, free_port()?);
        // B first: it must be listening before A's sink connects to it.
        let setup = Setup {
            role: "; B, the receiver: A's requests in, a JSON-lines file out",
            ..Setup::new(self.name(), Input::Forward)
        };
        let conf_b = write_config(
            dir,
            "loghaul-b.yaml",
            &subjects::loghaul::config(&setup, port_b, api_b, &s(&out)),
        )?;
        let conf_a = write_config(dir, "loghaul-a.yaml", &relay_config(port, api_a, port_b))?;
        Ok(Launch {
            program: program.clone(),
            args: vec!["run".into(), "-c".into(), s(&conf_a)],
            env: vec![],
            input_port: port,
            ready: Ready::Health(api_a),
            output: Output::File(out),
            companions: vec![Companion {
                name: "b".into(),
                program,
                args: vec!["run".into(), "-c".into(), s(&conf_b)],
                port: port_b,
                ready: Ready::Health(api_b),
            }],
            disk_buffer_api: None,
            remap_api: None,
            tls: None,
            live: None,
        })
    }

    fn platform(&self, kind: SubjectKind, peers: &Peers, loghaul: &Path) -> String {
        match kind {
            SubjectKind::Loghaul => format!(
                "{}, two processes: relay A → receiver B",
                peers.platform(kind, loghaul)
            ),
            other => peers.platform(other, loghaul),
        }
    }
}

/// loghaul A: the generator's requests in, relayed to B on `next` with the `fluent` sink on its
/// defaults (acks required: a batch counts as delivered only once B acked it, and the source
/// acks its own clients only then).
pub fn relay_config(port: u16, api: u16, next: u16) -> String {
    format!(
        "# loghaul bench: scenario forward_relay; A, the relay: forward in, forward out to B\n\
         api: {{ address: \"127.0.0.1:{api}\" }}\n\
         sources:\n  \
           in: {{ type: fluent, address: \"127.0.0.1:{port}\" }}\n\
         sinks:\n  \
           out: {{ type: fluent, inputs: [in], servers: [{{ address: \"127.0.0.1:{next}\" }}], require_ack: true }}\n"
    )
}
