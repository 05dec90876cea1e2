//! What an operator sees of a running server beside its data: its own log lines (text or JSON,
//! one line per listener at start), `--version`, and the process series in `/metrics`.

use std::process::Command;

use serde_json::Value;

use crate::harness::*;

#[test]
fn the_start_names_every_listener_and_the_api_and_logs_can_be_json() {
    let mut server = Server::start_with_env(&syslog_config(""), &[("LOGHAUL_LOG_FORMAT", "json")]);
    server.stop();
    let log = server.stderr();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let messages: Vec<&str> = lines.iter().filter_map(|l| l["message"].as_str()).collect();
    let tcp = format!(
        "tcp_in listening on tcp://127.0.0.1:{} (tls: no)",
        server.ports.tcp
    );
    let udp = format!("udp_in listening on udp://127.0.0.1:{}", server.ports.udp);
    assert!(messages.contains(&tcp.as_str()), "{messages:?}");
    assert!(messages.contains(&udp.as_str()), "{messages:?}");
    let started = lines
        .iter()
        .find(|l| l["message"] == "loghaul started.")
        .expect("the start line");
    assert_eq!(
        started["api"],
        format!("http://127.0.0.1:{}", server.ports.api),
        "{started}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string())
    );
}

#[test]
fn version_names_the_commit_and_target() {
    let out = Command::new(BIN)
        .arg("--version")
        .output()
        .expect("run loghaul");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.starts_with("loghaul ") && text.contains("commit ") && text.contains("-linux-"),
        "{text}"
    );
}

#[test]
fn metrics_carry_the_process_and_build_series() {
    let server = Server::start(&syslog_config(""));
    let text = server.metrics_text();
    for name in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_start_time_seconds ",
        "loghaul_build_info{",
        "loghaul_memory_used_bytes ",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics");
    }
    // A file sink cannot fail to decompress: no such series.
    assert!(!text.contains(r#"component_type="file",kind="decompression""#));
    server.finish();
}
