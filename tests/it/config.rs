//! Configuration files that run: `${VAR}` interpolation, and TOML and JSON as well as YAML.

use crate::harness::*;

#[test]
fn config_env_interpolation() {
    let server = Server::start_with_env(
        r#"api: { address: "${LH_IT_HOST}:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "${LH_IT_HOST}:{TCP}", max_length: "${LH_IT_MAXLEN:-64}" }
sinks:
  out: { type: file, inputs: [tcp_in], path: "${LH_IT_UNSET_DIR:-{DIR}}/out.jsonl", flush_interval: 100ms }
"#,
        &[("LH_IT_HOST", "127.0.0.1")],
    );
    send_tcp(server.ports.tcp, line3164(&"z".repeat(100)).as_bytes());
    let lines = wait_lines(&server.out(), 1, ARRIVE_TIMEOUT);
    assert_eq!(
        flags(&lines[0]),
        vec!["truncated"],
        "max_length from the ${{VAR:-default}} default (64)"
    );
    assert_eq!(
        message(&lines[0]).len(),
        64 - "<13>Oct 11 22:14:15 host app: ".len()
    );
    server.finish();
}

#[test]
fn toml_and_json_configs_run() {
    let toml = r#"[api]
address = "127.0.0.1:{API}"

[sources.tcp_in]
type = "syslog"
mode = "tcp"
address = "127.0.0.1:{TCP}"

[sinks.out]
type = "file"
inputs = ["tcp_in"]
path = "{DIR}/out.jsonl"
flush_interval = "100ms"
"#;
    let json = r#"{
  "api": { "address": "127.0.0.1:{API}" },
  "sources": { "tcp_in": { "type": "syslog", "mode": "tcp", "address": "127.0.0.1:{TCP}" } },
  "sinks": { "out": { "type": "file", "inputs": ["tcp_in"], "path": "{DIR}/out.jsonl", "flush_interval": "100ms" } }
}
"#;
    for (name, template) in [("loghaul.toml", toml), ("loghaul.json", json)] {
        let server = Server::start_full(template, name, &[]);
        send_tcp(server.ports.tcp, line3164(name).as_bytes());
        let lines = wait_lines(&server.out(), 1, ARRIVE_TIMEOUT);
        assert_eq!(message(&lines[0]), name);
        server.finish();
    }
}
