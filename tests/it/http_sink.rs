//! The `http` sink against loghaul's own `http_server` source: a chain A (syslog → http sink) →
//! B (http_server → file) that delivers a million numbered events with acknowledgements on;
//! a receiver that cannot write (it answers 503) until it recovers, with nothing lost; a server
//! that refuses for good (404): its events go to the dead-letter file while the sink keeps
//! going, and `loghaul dlq replay` sends them once the cause is fixed, exactly once; a URI and a
//! header templated over a field, routing events to paths (and tags) of the receiver; and
//! `concurrency: adaptive` rising, falling while the receiver is gone and then answering 503,
//! and rising again once it recovers, with nothing lost.

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

#[test]
fn http_sink_to_http_server_delivers_a_million_events() {
    const N: u64 = 1_000_000;
    let b = Server::start(&receiver("{DIR}/out.jsonl"));
    let a = Server::start(&sender(b.ports.tcp, "/in", ", compression: gzip"));
    send_tcp(a.ports.tcp, &numbered("http chain", 0..N));
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
    send_tcp(a.ports.tcp, &numbered("http chain", 0..1000));
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
        let got: Vec<u64> = written_text(&out).lines().map(trailing_number).collect();
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

/// Runs a `loghaul` tool command in `dir` (where the server's relative `data_dir` lives) and
/// returns its stdout, asserting it succeeded.
fn tool(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("LOGHAUL_CONFIG")
        .output()
        .expect("run loghaul");
    assert!(
        out.status.success(),
        "loghaul {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn http_sink_dead_letters_what_the_server_refuses_and_replay_sends_them_once() {
    let b = Server::start(&receiver("{DIR}/out.jsonl"));
    // `/nowhere` is not one of B's paths: 404, which no retry can fix.
    let a = Server::start(&sender(b.ports.tcp, "/nowhere", ", max_events: 10"));
    send_tcp(a.ports.tcp, &numbered("http chain", 0..50));
    a.wait_metric("loghaul_dead_letter_events_total", "up", None, 50);
    assert!(
        a.stderr().contains("404"),
        "the status is logged: {}",
        tail(&a.stderr(), 2000)
    );
    // The sink keeps going.
    send_tcp(a.ports.tcp, &numbered("http chain", 50..60));
    a.wait_metric("loghaul_dead_letter_events_total", "up", None, 60);
    let dlq = a.path("loghaul-data/dlq/up.jsonl");
    let letters: Vec<serde_json::Value> = fs::read_to_string(&dlq)
        .expect("the dead-letter file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(letters.len(), 60);
    for letter in &letters {
        assert_eq!(letter["sink"], "up");
        assert!(
            letter["reason"].as_str().is_some_and(|r| r.contains("404")),
            "{letter}"
        );
        assert!(letter["event"]["message"].is_string(), "{letter}");
        assert!(
            letter["time"].is_string() && letter["attempts"] == 1,
            "{letter}"
        );
    }
    assert_eq!(
        a.metric(
            "loghaul_component_discarded_events_total",
            "up",
            Some("reason=\"write_failed\"")
        ),
        0,
        "nothing was dropped"
    );
    let config = a.config_path.to_string_lossy().into_owned();
    let stats = tool(a.dir.path(), &["dlq", "stats", "-c", &config]);
    assert!(
        stats.contains("60 events") && stats.contains("404"),
        "{stats}"
    );

    // Replayed before the cause is fixed: they fail again, stay, and the command says so.
    let failed = std::process::Command::new(BIN)
        .args(["dlq", "replay", "--sink", "up", "-c", &config])
        .current_dir(a.dir.path())
        .env_remove("LOGHAUL_CONFIG")
        .output()
        .expect("run loghaul");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("replayed 0 of 60") && stderr.contains("60 failed again"),
        "{stderr}"
    );

    // The cause is fixed (here: the right path), and the dead letters are replayed, once.
    let fixed = a.dir.path().join("fixed.yaml");
    fs::write(
        &fixed,
        fs::read_to_string(&a.config_path)
            .expect("config")
            .replace("/nowhere", "/in"),
    )
    .expect("write the fixed config");
    let fixed = fixed.to_string_lossy().into_owned();
    let summary = tool(
        a.dir.path(),
        &["dlq", "replay", "--sink", "up", "-c", &fixed],
    );
    assert!(summary.contains("replayed 60 of 60"), "{summary}");
    let got: Vec<u64> = wait_raw_lines(&b.out(), 60, ARRIVE_TIMEOUT)
        .iter()
        .map(|l| trailing_number(&String::from_utf8_lossy(l)))
        .collect();
    assert_each_once(&got, 60, "replayed events");
    let again = tool(
        a.dir.path(),
        &["dlq", "replay", "--sink", "up", "-c", &fixed],
    );
    assert!(again.contains("no dead letters"), "{again}");
    // No wait needed: B answers a request only once its file sink has written the events, and
    // both replays have exited, so every line they caused is in the file already.
    assert_eq!(read_lines_raw(&b.out()), 60, "nothing was replayed twice");
    a.finish();
    b.finish();
}

fn read_lines_raw(path: &std::path::Path) -> usize {
    written_text(path).lines().count()
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
    send_tcp(a.ports.tcp, &numbered("http chain", 0..20));
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
    send_tcp(c.ports.tcp, &numbered("http chain", 100..105));
    c.wait_metric("loghaul_dead_letter_events_total", "up", None, 5);
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

/// RFC 5424 lines numbered `range`, whose app name cycles through `alpha`, `beta` and none (`-`).
fn numbered_apps(range: std::ops::Range<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    for i in range {
        let app = ["alpha", "beta", "-"][(i % 3) as usize];
        out.extend_from_slice(
            format!("<13>1 2024-05-01T10:00:00Z host {app} - - - routed {i}\n").as_bytes(),
        );
    }
    out
}

#[test]
fn http_sink_templated_uri_and_headers_route_events_by_field() {
    const N: u64 = 300;
    let b = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  web: { type: http_server, address: "127.0.0.1:{TCP}", paths: ["/logs"], tag_from_path: true, headers: ["x-app"] }
sinks:
  out: { type: file, inputs: [web], path: "{DIR}/out.jsonl", encoding: json, flush_interval: 50ms }
"#,
    );
    let a = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}", format: rfc5424 }}
sinks:
  up:
    type: http
    inputs: [in]
    uri: "http://127.0.0.1:{port}/logs/{{{{ appname }}}}"
    headers: {{ X-App: "app-{{{{ appname }}}}", Content-Type: "application/x-ndjson; charset=utf-8" }}
    max_events: 7
"#,
        port = b.ports.tcp
    ));
    send_tcp(a.ports.tcp, &numbered_apps(0..N));
    let events = wait_lines(&b.out(), N as usize, ARRIVE_TIMEOUT);
    let mut numbers = Vec::new();
    for e in &events {
        let i = trailing_number(message(e));
        numbers.push(i);
        // A missing app name renders `-`, as in file paths and fluent tags.
        let app = ["alpha", "beta", "-"][(i % 3) as usize];
        assert_eq!(e["tag"], app, "the path carried the app name: {e}");
        assert_eq!(e["x-app"], format!("app-{app}"), "the header too: {e}");
    }
    assert_each_once(&numbers, N, "routed events");
    // Every third event had no app name: counted, and sent all the same.
    assert_eq!(
        a.metric(
            "loghaul_http_sink_template_missing_events_total",
            "up",
            None
        ),
        N / 3
    );
    a.finish();
    b.finish();
}

#[test]
fn http_sink_adaptive_concurrency_falls_under_503_and_rises_again_losing_nothing() {
    const LIMIT: &str = "loghaul_http_sink_concurrency_limit";
    let out1 = tempfile::Builder::new()
        .prefix("loghaul-it-arc-")
        .tempdir()
        .expect("temp dir");
    let out1_path = out1.path().join("out.jsonl");
    let b1 = Server::start(&receiver(&out1_path.to_string_lossy()));
    let port = b1.ports.tcp;
    let a = Server::start(&sender(
        port,
        "/in",
        ", max_events: 20, concurrency: adaptive, max_concurrency: 16",
    ));
    assert_eq!(a.metric(LIMIT, "up", None), 1, "adaptive starts at one");

    // 1. A receiver that keeps up: with requests queueing for a slot, the limit climbs.
    let mut next = 0;
    let mut peak = 1;
    for _ in 0..40 {
        send_tcp(a.ports.tcp, &numbered("http chain", next..next + 5000));
        next += 5000;
        std::thread::sleep(Duration::from_millis(200));
        peak = peak.max(a.metric(LIMIT, "up", None));
        if peak >= 3 {
            break;
        }
    }
    assert!(peak >= 3, "the limit never rose past {peak}");

    // 2. The receiver goes away (connection errors), then comes back on the same port unable to
    // write (503): the limit is cut to 1 while events pile up upstream.
    b1.finish();
    let phase2 = next..next + 20_000;
    next = phase2.end;
    let a_port = a.ports.tcp;
    let feeder = std::thread::spawn(move || send_tcp(a_port, &numbered("http chain", phase2)));
    a.wait_metric_eq(LIMIT, "up", None, 1);
    let blocked = BlockedOutput::new();
    // Spawned, not started: it is unhealthy (its file will not open) as soon as A's retries
    // reach it, which may be before a health check would see it up.
    let b2 = Server::spawn(
        &receiver(&blocked.out.to_string_lossy())
            .replace("127.0.0.1:{TCP}", &format!("127.0.0.1:{port}")),
    );
    b2.wait_api(START_TIMEOUT);
    b2.wait_metric(
        "loghaul_component_errors_total",
        "web",
        Some("kind=\"ack\""),
        2,
    );
    assert_eq!(a.metric(LIMIT, "up", None), 1, "503s keep the limit down");

    // 3. It recovers: the backlog drains, the limit rises again, and every event arrived at one
    // receiver or the other (at least once).
    blocked.unblock();
    feeder.join().expect("the feeding thread");
    a.wait_metric(LIMIT, "up", None, 2);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got: Vec<u64> = [&out1_path, &blocked.out]
            .iter()
            .flat_map(|p| {
                written_text(p)
                    .lines()
                    .map(trailing_number)
                    .collect::<Vec<_>>()
            })
            .collect();
        let (counts, out_of_range) = tally(&got, next);
        assert!(out_of_range.is_empty(), "{out_of_range:?}");
        let missing = counts.iter().filter(|&&c| c == 0).count();
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {next} events never arrived"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        a.metric("loghaul_component_discarded_events_total", "up", None),
        0
    );
    a.finish();
    b2.finish();
}

/// With a finite `retry.max_attempts`, a request that still fails after the last attempt goes to
/// the dead-letter file with its reason and attempt count, and the sink goes on.
#[test]
fn http_sink_dead_letters_what_outlives_its_retries() {
    let dead = free_tcp_port();
    let a = Server::start(&sender(dead, "/in", ", max_events: 10").replace(
        "retry: { initial: 50ms, max: 500ms }",
        "retry: { initial: 20ms, max: 50ms, max_attempts: 3 }",
    ));
    send_tcp(a.ports.tcp, &numbered("http chain", 0..30));
    a.wait_metric("loghaul_dead_letter_events_total", "up", None, 30);
    let text = fs::read_to_string(a.path("loghaul-data/dlq/up.jsonl")).expect("dead letters");
    let letters: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(letters.len(), 30);
    for letter in &letters {
        assert_eq!(letter["attempts"], 3, "{letter}");
        assert!(
            letter["reason"]
                .as_str()
                .is_some_and(|r| r.contains("cannot connect") && r.contains("after 3 attempts")),
            "{letter}"
        );
    }
    // Still degraded (its server is still gone); it stops cleanly.
    let mut a = a;
    a.stop();
}
