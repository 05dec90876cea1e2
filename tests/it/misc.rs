//! The rest of the issue's surface: the filter transform, file path templates, SIGHUP and rename
//! reopening, UDP datagrams with several messages, `format: raw`, the console sink, and the API.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::*;

const RECEIVED: &str = "loghaul_component_received_events_total";
const SENT: &str = "loghaul_component_sent_events_total";
const DISCARDED: &str = "loghaul_component_discarded_events_total";
const ERRORS: &str = "loghaul_component_errors_total";

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

#[test]
fn file_path_template_one_file_per_appname_and_date_sanitised() {
    let server = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}" }
sinks:
  out: { type: file, inputs: [tcp_in], path: "{DIR}/apps/%Y-%m-%d/{{ appname }}.jsonl", flush_interval: 100ms }
"#,
    );
    let wire = [
        "<13>1 2026-01-02T03:04:05Z host alpha - - - first alpha",
        "<13>1 2026-01-02T03:04:06Z host beta - - - first beta",
        "<13>1 2026-01-02T03:04:07Z host ../x - - - climbing out",
        "<13>1 2025-12-31T23:59:59Z host alpha - - - alpha last year",
        "<13>1 2026-01-02T03:04:08Z host alpha - - - second alpha",
    ]
    .map(|l| format!("{l}\n"))
    .concat();
    send_tcp(server.ports.tcp, wire.as_bytes());

    let day = server.path("apps/2026-01-02");
    let alpha = wait_lines(&day.join("alpha.jsonl"), 2, ARRIVE_TIMEOUT);
    assert_eq!(
        alpha.iter().map(message).collect::<Vec<_>>(),
        ["first alpha", "second alpha"]
    );
    let beta = wait_lines(&day.join("beta.jsonl"), 1, ARRIVE_TIMEOUT);
    assert_eq!(beta.iter().map(message).collect::<Vec<_>>(), ["first beta"]);
    let last_year = wait_lines(
        &server.path("apps/2025-12-31/alpha.jsonl"),
        1,
        ARRIVE_TIMEOUT,
    );
    assert_eq!(
        message(&last_year[0]),
        "alpha last year",
        "strftime uses the event's timestamp (UTC)"
    );

    // `../x` stays inside the day directory under a sanitised name.
    let names: BTreeSet<String> = std::fs::read_dir(&day)
        .expect("read day dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.len(),
        3,
        "three files expected in {}: {names:?}",
        day.display()
    );
    let other = names
        .iter()
        .find(|n| *n != "alpha.jsonl" && *n != "beta.jsonl")
        .expect("the ../x file");
    assert!(
        !other.contains('/') && other.ends_with(".jsonl"),
        "sanitised name {other:?}"
    );
    let climbed = wait_lines(&day.join(other), 1, ARRIVE_TIMEOUT);
    assert_eq!(message(&climbed[0]), "climbing out");
    assert_eq!(
        climbed[0]["appname"],
        json!("../x"),
        "the field itself is written as sent"
    );
    let top: BTreeSet<String> = std::fs::read_dir(server.dir.path())
        .expect("read temp dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let expected: BTreeSet<String> = ["apps", "loghaul.yaml", "loghaul.stderr", "loghaul.stdout"]
        .map(String::from)
        .into();
    assert_eq!(top, expected, "nothing may be written outside apps/");
    assert!(
        !server.path("apps/x.jsonl").exists(),
        "../x climbed out of the day directory"
    );
    server.finish();
}

/// Sends numbered lines over one connection, one every 50ms, until `new` holds a line (at most
/// 200 lines); then checks that `old` holds a prefix and `new` the rest, each number once.
fn rotation_keeps_order_and_loses_nothing(
    server: &Server,
    mut s: std::net::TcpStream,
    first: u64,
    old: &Path,
) {
    let new = server.out();
    let mut next = first;
    let mut reader = LineReader::new(&new);
    let mut new_lines = 0;
    for _ in 0..200 {
        s.write_all(line3164(&format!("seq {next}")).as_bytes())
            .expect("write");
        next += 1;
        new_lines += reader.read_new().len();
        if new_lines > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        new_lines > 0,
        "no line reached a fresh {} after 200 lines: the file was not reopened",
        new.display()
    );
    // Three more after the switch.
    for _ in 0..3 {
        s.write_all(line3164(&format!("seq {next}")).as_bytes())
            .expect("write");
        next += 1;
    }
    drop(s);
    let deadline = Instant::now() + ARRIVE_TIMEOUT;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..1000 {
        a = read_lines(old)
            .iter()
            .map(|e| trailing_number(message(e)))
            .collect::<Vec<u64>>();
        b = read_lines(&new)
            .iter()
            .map(|e| trailing_number(message(e)))
            .collect::<Vec<u64>>();
        if (a.len() + b.len()) as u64 >= next || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let all: Vec<u64> = a.iter().chain(&b).copied().collect();
    assert_each_once(&all, next, "events across the rotated and the fresh file");
    assert!(!a.is_empty() && !b.is_empty(), "old {a:?}, new {b:?}");
    assert!(
        a.iter().max() < b.iter().min(),
        "the rotated file must hold the older events and the fresh one the newer: old {a:?}, new {b:?}"
    );
}

#[test]
fn sighup_reopens_output_file_after_rename() {
    let server = Server::start(&syslog_config(""));
    let mut s = connect(server.ports.tcp);
    s.write_all(line3164("seq 0").as_bytes()).expect("write");
    wait_lines(&server.out(), 1, ARRIVE_TIMEOUT);
    let rotated = server.path("out.jsonl.1");
    std::fs::rename(server.out(), &rotated).expect("mv out.jsonl out.jsonl.1");
    server.signal("HUP");
    rotation_keeps_order_and_loses_nothing(&server, s, 1, &rotated);
    server.finish();
}

#[test]
fn renamed_output_file_is_reopened_without_sighup() {
    let server = Server::start(&syslog_config(""));
    let mut s = connect(server.ports.tcp);
    s.write_all(line3164("seq 0").as_bytes()).expect("write");
    wait_lines(&server.out(), 1, ARRIVE_TIMEOUT);
    let rotated = server.path("out.jsonl.1");
    std::fs::rename(server.out(), &rotated).expect("mv out.jsonl out.jsonl.1");
    rotation_keeps_order_and_loses_nothing(&server, s, 1, &rotated);
    server.finish();
}

#[test]
fn udp_datagram_with_three_messages_gives_three_events() {
    let server = Server::start(&syslog_config(""));
    send_udp(
        server.ports.udp,
        b"<13>Oct 11 22:14:15 host app: one\n<14>Oct 11 22:14:15 host app: two\n<1>1 2026-01-02T03:04:05.5Z host app - - - three",
    );
    let lines = wait_lines(&server.out(), 3, ARRIVE_TIMEOUT);
    assert_eq!(
        lines.iter().map(message).collect::<Vec<_>>(),
        ["one", "two", "three"]
    );
    assert_eq!(lines[1]["severity"], json!("info"));
    assert_eq!(lines[2]["facility"], json!("kern"));
    assert_eq!(lines[2]["severity"], json!("alert"));
    assert_eq!(
        lines[2]["timestamp"],
        json!("2026-01-02T03:04:05.5Z"),
        "sub-second digits as sent"
    );
    for e in &lines {
        assert_eq!(e["source_ip"], json!("127.0.0.1"));
        assert!(flags(e).is_empty(), "{e}");
    }
    // A trailing newline ends the last message; it does not add an empty one.
    send_udp(
        server.ports.udp,
        b"<13>Oct 11 22:14:15 host app: four\n<13>Oct 11 22:14:15 host app: five\n",
    );
    let lines = wait_lines(&server.out(), 5, ARRIVE_TIMEOUT);
    assert_eq!(
        lines.iter().map(message).collect::<Vec<_>>(),
        ["one", "two", "three", "four", "five"]
    );
    assert_eq!(server.metric(RECEIVED, "udp_in", None), 5);
    server.finish();
}

#[test]
fn raw_format_keeps_the_line_as_message() {
    let server = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}", format: raw }
  udp_in: { type: syslog, mode: udp, address: "127.0.0.1:{UDP}", format: raw }
sinks:
  out: { type: file, inputs: [tcp_in, udp_in], path: "{DIR}/out.jsonl", flush_interval: 100ms }
"#,
    );
    let before = now_unix();
    send_tcp(
        server.ports.tcp,
        b"just a raw line\n<13>Oct 11 22:14:15 host app: not parsed\n",
    );
    let lines = wait_lines(&server.out(), 2, ARRIVE_TIMEOUT);
    send_udp(server.ports.udp, b"raw over udp");
    let lines = if lines.len() < 3 {
        wait_lines(&server.out(), 3, ARRIVE_TIMEOUT)
    } else {
        lines
    };
    let after = now_unix();
    assert_eq!(lines.len(), 3);
    for (e, want) in lines.iter().zip([
        "just a raw line",
        "<13>Oct 11 22:14:15 host app: not parsed",
        "raw over udp",
    ]) {
        assert_keys(e, &["timestamp", "message", "source_ip", "source_type"]);
        assert_eq!(e["message"], json!(want));
        assert_eq!(e["source_ip"], json!("127.0.0.1"));
        assert_eq!(e["source_type"], json!("syslog"));
        let (t, _) = parse_rfc3339_utc(e["timestamp"].as_str().expect("timestamp string"));
        assert!(
            t >= before - 1.0 && t <= after + 1.0,
            "raw timestamp must be the receive time: {e}"
        );
    }
    assert_eq!(
        server.metric(ERRORS, "tcp_in", Some("kind=\"parse\"")),
        0,
        "raw never fails to parse"
    );
    server.finish();
}

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
