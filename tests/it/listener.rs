//! The shared TCP listener: `max_connections` refuses and counts extra clients, and a busy port
//! fails the start clearly.

use std::io::Write;
use std::time::Duration;

use crate::harness::*;

#[test]
fn max_connections_refuses_extra_clients_and_counts_them() {
    let server = Server::start(&syslog_config(", max_connections: 2"));
    let mut a = connect(server.ports.tcp);
    let mut b = connect(server.ports.tcp);
    server.wait_metric_eq("loghaul_open_connections", "tcp_in", None, 2);

    // The third is accepted by the kernel, then closed by loghaul without being served.
    let mut c = connect(server.ports.tcp);
    server.wait_metric(
        "loghaul_component_errors_total",
        "tcp_in",
        Some("kind=\"connection_limit\""),
        1,
    );
    let _ = c.write_all(line3164("over the limit").as_bytes());
    let mut buf = [0u8; 16];
    let closed = matches!(std::io::Read::read(&mut c, &mut buf), Ok(0) | Err(_));
    assert!(
        closed,
        "loghaul must close a connection over max_connections"
    );
    drop(c);

    a.write_all(line3164("from a").as_bytes()).expect("write a");
    b.write_all(line3164("from b").as_bytes()).expect("write b");
    drop(a);
    server.wait_metric_eq("loghaul_open_connections", "tcp_in", None, 1);
    // A slot is free again.
    send_tcp(server.ports.tcp, line3164("from d").as_bytes());
    drop(b);
    let lines = wait_lines(&server.out(), 3, ARRIVE_TIMEOUT);
    let mut got: Vec<&str> = lines.iter().map(message).collect();
    got.sort_unstable();
    assert_eq!(
        got,
        ["from a", "from b", "from d"],
        "the refused client's line must not arrive"
    );
    assert_eq!(
        server.metric(
            "loghaul_component_errors_total",
            "tcp_in",
            Some("kind=\"connection_limit\"")
        ),
        1
    );
    server.finish();
}

#[test]
fn run_with_a_busy_port_fails_clearly() {
    let template = syslog_config("");
    let mut server = Server::spawn(&template);
    // Too late to take the port before the spawn; so take it now and start a second server on it.
    let busy = server.ports;
    assert!(
        server.wait_healthy(START_TIMEOUT).is_ok(),
        "first server: {}",
        server.stderr()
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("second.yaml");
    let second_api = free_tcp_port();
    let text = render(
        &template,
        &Ports {
            api: second_api,
            ..busy
        },
        dir.path(),
    );
    std::fs::write(&path, text).expect("write config");
    let out = run_bounded(
        std::process::Command::new(BIN)
            .args(["run", "-c", &path.display().to_string()])
            .current_dir(dir.path()),
        Duration::from_secs(30),
    );
    let text = output_text(&out);
    assert!(
        !out.status.success(),
        "a second server on a busy port must fail:\n{text}"
    );
    assert!(
        text.contains(&format!("127.0.0.1:{}", busy.tcp)),
        "the error must name the busy address:\n{text}"
    );
    server.finish();
}
