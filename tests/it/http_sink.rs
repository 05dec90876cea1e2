//! The `http` sink against loghaul's own `http_server` source: a chain A (syslog → http sink) →
//! B (http_server → file) that delivers a million numbered events with acknowledgements on;
//! a receiver that cannot write (it answers 503) until it recovers, with nothing lost; and a
//! server that refuses for good (404), counted as rejected while the sink keeps going.

use std::fs;
use std::time::{Duration, Instant};

use crate::harness::*;

fn receiver(out: &str) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  web: {{ type: http_server, address: "127.0.0.1:{{TCP}}", paths: ["/in"], ack_timeout: 1s }}
sinks:
  out: {{ type: file, inputs: [web], path: "{out}", encoding: text, flush_interval: 50ms }}
"#
    )
}

fn sender(port: u16, path: &str, options: &str) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}", format: raw }}
sinks:
  up: {{ type: http, inputs: [in], uri: "http://127.0.0.1:{port}{path}", encoding: ndjson, retry: {{ initial: 50ms, max: 500ms }}{options} }}
"#
    )
}

fn numbered(range: std::ops::Range<u64>) -> Vec<u8> {
    let mut out = Vec::with_capacity((range.end - range.start) as usize * 24);
    for i in range {
        out.extend_from_slice(format!("http chain {i}\n").as_bytes());
    }
    out
}

#[test]
fn http_sink_to_http_server_delivers_a_million_events() {
    const N: u64 = 1_000_000;
    let b = Server::start(&receiver("{DIR}/out.jsonl"));
    let a = Server::start(&sender(b.ports.tcp, "/in", ", compression: gzip"));
    send_tcp(a.ports.tcp, &numbered(0..N));
    let numbers: Vec<u64> = wait_raw_lines(&b.out(), N as usize, Duration::from_secs(120))
        .iter()
        .map(|l| trailing_number(&String::from_utf8_lossy(l)))
        .collect();
    // At least once: a request retried after a timeout may come twice; none may be missing.
    let (counts, out_of_range) = tally(&numbers, N);
    let missing: Vec<u64> = (0..N).filter(|&i| counts[i as usize] == 0).collect();
    assert!(
        missing.is_empty() && out_of_range.is_empty(),
        "missing {} (first {:?})",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    a.finish();
    b.finish();
}

#[test]
fn http_sink_retries_while_the_server_cannot_write_and_loses_nothing() {
    let blocked = BlockedOutput::new();
    let out = blocked.out.clone();
    let b = Server::start(&receiver(&out.to_string_lossy()));
    let a = Server::start(&sender(b.ports.tcp, "/in", ", max_events: 100"));
    send_tcp(a.ports.tcp, &numbered(0..1000));
    // B answers 503 while its file sink cannot write: A counts and retries.
    a.wait_metric(
        "loghaul_component_errors_total",
        "up",
        Some("kind=\"io\""),
        2,
    );
    assert_eq!(
        a.metric("loghaul_component_sent_events_total", "up", None),
        0
    );
    blocked.unblock();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got: Vec<u64> = fs::read_to_string(&out)
            .unwrap_or_default()
            .lines()
            .map(trailing_number)
            .collect();
        let (counts, _) = tally(&got, 1000);
        if counts.iter().all(|&c| c > 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of 1000 arrived after recovery",
            counts.iter().filter(|&&c| c > 0).count()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    a.finish();
    b.finish();
}

#[test]
fn http_sink_counts_what_the_server_refuses_for_good_and_keeps_going() {
    let b = Server::start(&receiver("{DIR}/out.jsonl"));
    // `/nowhere` is not one of B's paths: 404, which no retry can fix.
    let a = Server::start(&sender(b.ports.tcp, "/nowhere", ", max_events: 10"));
    send_tcp(a.ports.tcp, &numbered(0..50));
    a.wait_metric(
        "loghaul_component_discarded_events_total",
        "up",
        Some("reason=\"write_failed\""),
        50,
    );
    assert!(
        a.stderr().contains("404"),
        "the status is logged: {}",
        tail(&a.stderr(), 2000)
    );
    send_tcp(a.ports.tcp, &numbered(50..60));
    a.wait_metric(
        "loghaul_component_discarded_events_total",
        "up",
        Some("reason=\"write_failed\""),
        60,
    );
    a.finish();
    b.finish();
}

#[test]
fn http_sink_basic_auth_and_the_start_up_health_check() {
    let b = Server::start(&receiver("{DIR}/out.jsonl").replace(
        "ack_timeout: 1s",
        "ack_timeout: 1s, auth: { username: agent, password: \"pa:ss\" }",
    ));
    let port = b.ports.tcp;
    let a = Server::start(&sender(
        port,
        "/in",
        &format!(
            ", username: agent, password: \"pa:ss\", healthcheck_uri: \"http://127.0.0.1:{port}/health\""
        ),
    ));
    send_tcp(a.ports.tcp, &numbered(0..20));
    assert_eq!(wait_raw_lines(&b.out(), 20, ARRIVE_TIMEOUT).len(), 20);
    assert!(
        !a.stderr().contains("health check failed"),
        "{}",
        tail(&a.stderr(), 2000)
    );
    a.finish();

    // A wrong password is permanent (401); a health check against nothing only warns.
    let dead = free_tcp_port();
    let c = Server::start(&sender(
        port,
        "/in",
        &format!(
            ", username: agent, password: wrong, healthcheck_uri: \"http://127.0.0.1:{dead}/health\""
        ),
    ));
    send_tcp(c.ports.tcp, &numbered(100..105));
    c.wait_metric(
        "loghaul_component_discarded_events_total",
        "up",
        Some("reason=\"write_failed\""),
        5,
    );
    let deadline = Instant::now() + ARRIVE_TIMEOUT;
    while !c.stderr().contains("health check failed") {
        assert!(
            Instant::now() < deadline,
            "no health-check warning: {}",
            tail(&c.stderr(), 2000)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    c.finish();
    b.finish();
}
