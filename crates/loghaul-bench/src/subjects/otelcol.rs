//! The OpenTelemetry Collector's config (`otelcol-loghaul`, built by `scripts/install-peers.sh`):
//! one contrib or core receiver → the `file` exporter, from the templates in
//! `bench/peers/otelcol/configs/`. `collector.yaml` is the pipeline and the exporter; the
//! `receiver-*.yaml` fragments beside it are what differs between inputs.
//!
//! The exporter writes one OTLP/JSON `ExportLogsServiceRequest` per line, many records to a line
//! (every record's marker is in its body), so the lab meters it as [`super::Output::Records`].
//! No `batch` processor: the receivers hand over batches of their own (the syslog receiver's
//! stanza emitter up to 100 entries or 100ms, the OTLP receiver each request), and loghaul's file
//! sink too writes what its queue holds, on no timer.

use super::{Input, Setup};
use crate::template::{fragment, render};

const COLLECTOR: &str = include_str!("../../../../bench/peers/otelcol/configs/collector.yaml");
const RECEIVER_SYSLOG: &str =
    include_str!("../../../../bench/peers/otelcol/configs/receiver-syslog.yaml");
const RECEIVER_OTLP: &str =
    include_str!("../../../../bench/peers/otelcol/configs/receiver-otlp.yaml");
const RECEIVER_FLUENT_FORWARD: &str =
    include_str!("../../../../bench/peers/otelcol/configs/receiver-fluent_forward.yaml");
const RECEIVER_FILE_LOG: &str =
    include_str!("../../../../bench/peers/otelcol/configs/receiver-file_log.yaml");

/// The Collector reading `setup`'s input on `port` into `out`; `None` for an input it is not
/// configured for (the scenarios that do not list it).
pub fn config(setup: &Setup<'_>, port: u16, out: &str) -> Option<String> {
    let (id, receiver) = match setup.input {
        Input::Rfc3164 => ("syslog", RECEIVER_SYSLOG),
        Input::Otlp => ("otlp", RECEIVER_OTLP),
        Input::Forward => ("fluent_forward", RECEIVER_FLUENT_FORWARD),
        Input::CountedLines | Input::RawLines | Input::Rfc5424 | Input::KeyValue => return None,
    };
    let receiver = render(fragment(receiver), &[("port", &port.to_string())]);
    Some(collector(setup.name, &receiver, id, out))
}

/// The Collector in `tail`: the `file_log` receiver reading `input` from its beginning into `out`.
pub fn tail_config(scenario: &str, input: &str, out: &str) -> String {
    let receiver = render(fragment(RECEIVER_FILE_LOG), &[("input", input)]);
    collector(scenario, &receiver, "file_log", out)
}

/// The whole config around `receiver` (its YAML, indented under `receivers:`), called `id`.
fn collector(scenario: &str, receiver: &str, id: &str, out: &str) -> String {
    render(
        COLLECTOR,
        &[
            ("scenario", scenario),
            ("receiver", receiver),
            ("receiver_id", id),
            ("out", out),
        ],
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Every placeholder is filled, and the inputs it is not configured for have no config.
    #[test]
    fn renders_its_inputs_only() {
        for input in [Input::Rfc3164, Input::Otlp, Input::Forward] {
            let c = config(&Setup::new("x", input), 5514, "/run/out.log").unwrap();
            assert!(!c.contains("{{"), "{c}");
            assert!(c.contains("127.0.0.1:5514") && c.contains("path: \"/run/out.log\""));
            assert!(c.contains("level: none"), "no metrics server on 8888");
        }
        assert!(config(&Setup::new("x", Input::Rfc5424), 1, "/o").is_none());
        let tail = tail_config("tail", "/run/in.log", "/run/out.log");
        assert!(!tail.contains("{{") && tail.contains("include: [\"/run/in.log\"]"));
    }
}
