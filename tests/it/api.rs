//! The API: `/health` and `/metrics` count what was received, sent, dropped and failed.

use crate::harness::*;

const RECEIVED: &str = "loghaul_component_received_events_total";
const SENT: &str = "loghaul_component_sent_events_total";
const DISCARDED: &str = "loghaul_component_discarded_events_total";
const ERRORS: &str = "loghaul_component_errors_total";

#[test]
fn health_and_metrics_count_what_was_sent() {
    let server = Server::start(&syslog_config(""));
    server.assert_healthy();
    let mut wire = String::new();
    for i in 0..10 {
        wire.push_str(&line3164(&format!("tcp {i}")));
    }
    send_tcp(server.ports.tcp, wire.as_bytes());
    for i in 0..5 {
        send_udp(server.ports.udp, line3164(&format!("udp {i}")).as_bytes());
    }
    let lines = wait_lines(&server.out(), 15, ARRIVE_TIMEOUT);
    assert_eq!(lines.len(), 15);
    server.wait_metric(SENT, "out", None, 15);

    assert_eq!(
        server.metric(RECEIVED, "tcp_in", None),
        10,
        "tcp_in received"
    );
    assert_eq!(
        server.metric(RECEIVED, "udp_in", None),
        5,
        "udp_in received"
    );
    assert_eq!(server.metric(SENT, "tcp_in", None), 10, "tcp_in sent");
    assert_eq!(server.metric(SENT, "udp_in", None), 5, "udp_in sent");
    assert_eq!(
        server.metric(RECEIVED, "out", None),
        15,
        "file sink received"
    );
    assert_eq!(server.metric(SENT, "out", None), 15, "file sink sent");
    assert_eq!(
        server.metric("loghaul_component_received_bytes_total", "tcp_in", None),
        wire.len() as u64,
        "tcp_in received bytes = wire bytes"
    );
    let file_bytes = std::fs::metadata(server.out())
        .expect("stat out.jsonl")
        .len();
    assert_eq!(
        server.metric("loghaul_component_sent_bytes_total", "out", None),
        file_bytes,
        "file sink sent bytes = file size"
    );
    for c in ["tcp_in", "udp_in", "out"] {
        assert_eq!(server.metric(ERRORS, c, None), 0, "{c} errors");
        assert_eq!(server.metric(DISCARDED, c, None), 0, "{c} discarded");
    }
    let text = server.metrics_text();
    assert!(
        text.contains("# TYPE loghaul_component_received_events_total counter"),
        "Prometheus TYPE line missing:\n{text}"
    );
    assert!(
        text.contains(
            "loghaul_component_received_events_total{component_id=\"tcp_in\",component_kind=\"source\",component_type=\"syslog\"} 10"
        ),
        "exact series missing:\n{text}"
    );
    let (code, _) = http_get(server.ports.api, "/nope").expect("GET /nope");
    assert_eq!(code, 404, "unknown API path");
    server.finish();
}
