//! The console sink: JSON lines on stdout.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;

#[test]
fn console_sink_prints_json_to_stdout() {
    let mut server = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}" }
sinks:
  c: { type: console, inputs: [tcp_in], encoding: json }
"#,
    );
    send_tcp(server.ports.tcp, line3164("to the console").as_bytes());
    let deadline = Instant::now() + ARRIVE_TIMEOUT;
    for _ in 0..1000 {
        if server.stdout().contains("to the console") || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    server.assert_healthy();
    server.stop();
    let stdout = server.stdout();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "stdout must hold exactly the one event:\n{stdout}"
    );
    let e = parse_line(lines[0].as_bytes());
    assert_eq!(e["message"], json!("to the console"));
    assert_eq!(e["appname"], json!("app"));
    assert_eq!(e["hostname"], json!("host"));
    assert_eq!(e["facility"], json!("user"));
    assert_eq!(e["severity"], json!("notice"));
    assert_eq!(e["source_type"], json!("syslog"));
}
