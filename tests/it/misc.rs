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
        a = sequence_numbers(old);
        b = sequence_numbers(&new);
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

#[test]
fn unwritable_file_sink_makes_health_503_and_counts() {
    // The path's directory is a regular file, so the sink cannot open its file.
    let server = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}" }
sinks:
  out: { type: file, inputs: [tcp_in], path: "{DIR}/loghaul.yaml/out.jsonl", flush_interval: 100ms }
"#,
    );
    send_tcp(server.ports.tcp, line3164("nowhere to go").as_bytes());
    server.wait_metric(
        "loghaul_component_errors_total",
        "out",
        Some("kind=\"io\""),
        1,
    );
    server.wait_metric(
        "loghaul_component_discarded_events_total",
        "out",
        Some("reason=\"write_failed\""),
        1,
    );
    let (code, body) = server.health();
    assert_eq!(code, 503, "/health with a failing sink: {body}");
    let v: Value = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("/health body is not JSON ({e}): {body}"));
    assert_eq!(v["status"], json!("unhealthy"), "{body}");
    assert!(
        v["components"]["out"].is_string(),
        "the failing component and its reason: {body}"
    );
}

/// Raw logs often start with a number (a date, an HTTP status). With `format: raw` and the
/// default `framing: auto`, such a line must still be one line, not an RFC 6587 octet count
/// that swallows the next lines.
#[test]
fn raw_format_lines_starting_with_digits_are_not_octet_counts() {
    let server = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}", format: raw }
sinks:
  out: { type: file, inputs: [tcp_in], path: "{DIR}/out.jsonl", flush_interval: 100ms }
"#,
    );
    let sent = [
        "200 OK GET /index.html",
        "2026-11-22 12:00:00 started",
        "12 apples",
        "plain",
    ];
    let wire: String = sent.iter().map(|l| format!("{l}\n")).collect();
    send_tcp(server.ports.tcp, wire.as_bytes());
    let lines = wait_lines(&server.out(), 1, ARRIVE_TIMEOUT);
    let lines = if lines.len() < sent.len() {
        // Give the rest a fair chance before reporting what arrived.
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut l = lines;
        while l.len() < sent.len() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            l = read_lines(&server.out());
        }
        l
    } else {
        lines
    };
    let got: Vec<&str> = lines.iter().map(message).collect();
    assert_eq!(
        got, sent,
        "each raw line is one event, whatever its first characters"
    );
    for e in &lines {
        assert!(flags(e).is_empty(), "{e}");
    }
    assert_eq!(
        server.metric(ERRORS, "tcp_in", None),
        0,
        "plain raw lines are not framing errors"
    );
    server.finish();
}

#[test]
fn octet_counting_framing_tolerates_a_newline_after_each_frame() {
    let server = Server::start(&syslog_config(", framing: octet_counting"));
    let frame = |m: &str| {
        let msg = format!("<13>Oct 11 22:14:15 host app: {m}");
        format!("{} {msg}\n", msg.len())
    };
    send_tcp(
        server.ports.tcp,
        format!("{}{}{}", frame("one"), frame("two"), frame("three")).as_bytes(),
    );
    let lines = wait_lines(&server.out(), 3, ARRIVE_TIMEOUT);
    assert_eq!(
        lines.iter().map(message).collect::<Vec<_>>(),
        ["one", "two", "three"]
    );
    assert_eq!(server.metric(ERRORS, "tcp_in", None), 0);
    server.finish();
}

#[test]
fn newline_framing_keeps_lines_that_start_with_digits() {
    let server = Server::start(&syslog_config(", framing: newline, format: raw"));
    send_tcp(server.ports.tcp, b"5 little\n10 green bottles\n");
    let lines = wait_lines(&server.out(), 2, ARRIVE_TIMEOUT);
    assert_eq!(
        lines.iter().map(message).collect::<Vec<_>>(),
        ["5 little", "10 green bottles"]
    );
    server.finish();
}

#[test]
fn sigint_stops_cleanly_too() {
    let mut server = Server::start(&syslog_config(""));
    let mut wire = String::new();
    for i in 0..1000 {
        wire.push_str(&line3164(&format!("seq {i}")));
    }
    let mut s = connect(server.ports.tcp);
    s.write_all(wire.as_bytes()).expect("write");
    server.signal("INT");
    let status = server
        .wait_exit(STOP_TIMEOUT)
        .expect("loghaul did not exit after SIGINT");
    drop(s);
    assert!(
        status.success(),
        "exit after SIGINT: {status}\n{}",
        server.stderr()
    );
    let numbers: Vec<u64> = sequence_numbers(&server.out());
    assert_each_once(&numbers, 1000, "events after SIGINT");
}

/// Datagrams already in the socket's receive buffer at SIGTERM are read and written.
#[test]
fn shutdown_drains_the_udp_socket() {
    let mut server = Server::start(&syslog_config(""));
    let kernel_drops_before = udp_rcvbuf_errors();
    for i in 0..100 {
        send_udp(
            server.ports.udp,
            line3164(&format!("udp seq {i}")).as_bytes(),
        );
    }
    server.stop();
    let kernel_drops = udp_rcvbuf_errors().saturating_sub(kernel_drops_before);
    let numbers: Vec<u64> = sequence_numbers(&server.out());
    // Loopback puts a datagram into the receiver's buffer before send_to returns, so every
    // datagram was in loghaul's socket when SIGTERM came, unless the kernel dropped it for a
    // full receive buffer (RcvbufErrors, machine-wide, reported for diagnosis).
    assert_each_once(
        &numbers,
        100,
        &format!(
            "datagrams sent before SIGTERM (kernel UDP RcvbufErrors meanwhile: {kernel_drops})"
        ),
    );
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

/// The machine-wide UDP `RcvbufErrors` counter (datagrams the kernel dropped for a full buffer).
fn udp_rcvbuf_errors() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (udp.next(), udp.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "RcvbufErrors")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}
