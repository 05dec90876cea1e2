//! The filter transform: what it keeps, what it drops, and how it counts them.

use serde_json::{Value, json};

use crate::harness::*;

const RECEIVED: &str = "loghaul_component_received_events_total";
const SENT: &str = "loghaul_component_sent_events_total";
const DISCARDED: &str = "loghaul_component_discarded_events_total";

#[test]
fn filter_transform_drops_and_counts_filtered_events() {
    let server = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}" }
transforms:
  f: { type: filter, inputs: [tcp_in], min_severity: warning }
  g: { type: filter, inputs: [tcp_in], contains: "needle" }
sinks:
  out: { type: file, inputs: [f], path: "{DIR}/out.jsonl", flush_interval: 100ms }
  out2: { type: file, inputs: [g], path: "{DIR}/out2.jsonl", flush_interval: 100ms }
"#,
    );
    // user.info, user.debug are dropped by f; user.err, user.warning, user.emerg pass.
    let wire = [
        "<14>Oct 11 22:14:15 host app: drop info",
        "<15>Oct 11 22:14:15 host app: drop debug needle",
        "<11>Oct 11 22:14:15 host app: keep err",
        "<12>Oct 11 22:14:15 host app: keep warning",
        "<8>Oct 11 22:14:15 host app: keep emerg",
    ]
    .map(|l| format!("{l}\n"))
    .concat();
    send_tcp(server.ports.tcp, wire.as_bytes());
    let lines = wait_lines(&server.out(), 3, ARRIVE_TIMEOUT);
    let got: Vec<&str> = lines.iter().map(message).collect();
    assert_eq!(
        got,
        ["keep err", "keep warning", "keep emerg"],
        "events past min_severity: warning"
    );
    let sev: Vec<&Value> = lines.iter().map(|e| &e["severity"]).collect();
    assert_eq!(sev, [&json!("err"), &json!("warning"), &json!("emerg")]);

    let lines2 = wait_lines(&server.path("out2.jsonl"), 1, ARRIVE_TIMEOUT);
    assert_eq!(
        lines2.len(),
        1,
        "only one event contains \"needle\": {lines2:?}"
    );
    assert_eq!(message(&lines2[0]), "drop debug needle");

    server.wait_metric(DISCARDED, "f", Some("reason=\"filtered\""), 2);
    assert_eq!(
        server.metric(DISCARDED, "f", Some("reason=\"filtered\"")),
        2
    );
    assert_eq!(
        server.metric(DISCARDED, "g", Some("reason=\"filtered\"")),
        4
    );
    assert_eq!(server.metric(RECEIVED, "f", None), 5, "filter f received");
    assert_eq!(server.metric(SENT, "f", None), 3, "filter f sent");
    assert_eq!(server.metric(SENT, "g", None), 1, "filter g sent");
    server.wait_metric(SENT, "out", None, 3);
    assert_eq!(server.metric(SENT, "out", None), 3, "file sink sent");
    server.finish();
}
