//! The stateful transforms end to end: `sample`, `throttle` and `dedupe` counting exactly on a
//! seeded stream of syslog over TCP, and `reduce` joining a Java stack trace that util-linux
//! `logger` sends one line per message.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::process::Stdio;

use serde_json::Value;

use crate::harness::*;

const RECEIVED: &str = "loghaul_component_received_events_total";
const SENT: &str = "loghaul_component_sent_events_total";
const DISCARDED: &str = "loghaul_component_discarded_events_total";
const ERRORS: &str = "loghaul_component_errors_total";

/// A seeded stream: event `i` comes from one of five apps and says one of 300 things.
fn seeded(n: usize) -> Vec<(String, String)> {
    let mut seed = 0x5eed_u64;
    (0..n)
        .map(|_| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let app = format!("app{}", (seed >> 33) % 5);
            let what = format!("said {}", (seed >> 40) % 300);
            (app, what)
        })
        .collect()
}

/// 2,000 seeded events over one TCP connection, read by six transforms at once. Each count is
/// the one the transform's rule gives for this input, exactly, in the files and the metrics:
/// `sample` keeps the 1st, 11th, 21st... event (a counter across batches), and with
/// `key_field` the apps whose SeaHash is a multiple of the rate (Vector's choice); `throttle`
/// lets `threshold` events of each app through in a window far longer than the test (the rest
/// to `ID.dropped`, or discarded and counted); `dedupe` keeps the first of each message.
#[test]
fn sample_throttle_and_dedupe_count_exactly() {
    const N: usize = 2000;
    let server = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}" }
transforms:
  sampled: { type: sample, inputs: [tcp_in], rate: 10 }
  by_app: { type: sample, inputs: [tcp_in], rate: 3, key_field: appname, sample_rate_key: "" }
  per_app: { type: throttle, inputs: [tcp_in], threshold: 7, window_secs: 3600, key_field: "{{ appname }}" }
  rerouted:
    type: throttle
    inputs: [tcp_in]
    threshold: 7
    window_secs: 3600
    key_field: appname
    exclude: '.appname == "app0"'
    reroute_dropped: true
  once: { type: dedupe, inputs: [tcp_in], fields: { match: [message] } }
sinks:
  sampled_out: { type: file, inputs: [sampled], path: "{DIR}/sampled.jsonl", flush_interval: 50ms }
  by_app_out: { type: file, inputs: [by_app], path: "{DIR}/by_app.jsonl", flush_interval: 50ms }
  per_app_out: { type: file, inputs: [per_app], path: "{DIR}/per_app.jsonl", flush_interval: 50ms }
  kept: { type: file, inputs: [rerouted], path: "{DIR}/kept.jsonl", flush_interval: 50ms }
  over: { type: file, inputs: [rerouted.dropped], path: "{DIR}/over.jsonl", flush_interval: 50ms }
  once_out: { type: file, inputs: [once], path: "{DIR}/once.jsonl", flush_interval: 50ms }
"#,
    );
    let events = seeded(N);
    let wire: String = events
        .iter()
        .enumerate()
        .map(|(i, (app, what))| format!("<14>Oct 11 22:14:15 host {app}: {what} #{i}\n"))
        .collect();
    // The message of dedupe's copy is the same for repeats: a second pass without the number.
    let dedupe_wire: String = events
        .iter()
        .map(|(app, what)| format!("<14>Oct 11 22:14:15 host {app}: {what}\n"))
        .collect();
    send_tcp(server.ports.tcp, format!("{wire}{dedupe_wire}").as_bytes());

    let mut per_app: BTreeMap<&str, usize> = BTreeMap::new();
    for (app, _) in &events {
        *per_app.entry(app.as_str()).or_default() += 1;
    }
    // Each app's count appears twice (both passes); the rules below count over both.
    let total = 2 * N;
    let sampled = total.div_ceil(10);
    let by_app: usize = per_app
        .iter()
        .filter(|(app, _)| seahash::hash(app.as_bytes()).is_multiple_of(3))
        .map(|(_, n)| 2 * n)
        .sum();
    let throttled_kept = 7 * per_app.len();
    let app0 = 2 * per_app["app0"];
    let rerouted_kept = app0 + 7 * (per_app.len() - 1);
    let distinct: BTreeSet<&str> = events.iter().map(|(_, w)| w.as_str()).collect();
    // First pass: every message is distinct (numbered); second pass: one per distinct text.
    let once = N + distinct.len();

    for id in ["sampled", "by_app", "per_app", "rerouted", "once"] {
        server.wait_metric_eq(RECEIVED, id, None, total as u64);
    }
    server.wait_metric_eq(SENT, "sampled", None, sampled as u64);
    server.wait_metric_eq(SENT, "by_app", None, by_app as u64);
    server.wait_metric_eq(SENT, "per_app", None, throttled_kept as u64);
    server.wait_metric_eq(
        SENT,
        "rerouted",
        Some("output=\"_default\""),
        rerouted_kept as u64,
    );
    server.wait_metric_eq(
        SENT,
        "rerouted",
        Some("output=\"dropped\""),
        (total - rerouted_kept) as u64,
    );
    server.wait_metric_eq(SENT, "once", None, once as u64);
    // Counted as they are dropped: waited for, like the sent counts.
    let discarded = |id: &str, reason: &str, want: usize| {
        let reason = format!("reason=\"{reason}\"");
        server.wait_metric_eq(DISCARDED, id, Some(&reason), want as u64);
    };
    discarded("sampled", "sampled", total - sampled);
    discarded("by_app", "sampled", total - by_app);
    discarded("per_app", "throttled", total - throttled_kept);
    discarded("once", "duplicate", total - once);
    assert_eq!(
        server.metric(DISCARDED, "rerouted", Some("reason=\"throttled\"")),
        0,
        "rerouted, not discarded"
    );

    let sampled_lines = wait_lines(&server.path("sampled.jsonl"), sampled, ARRIVE_TIMEOUT);
    assert_eq!(sampled_lines.len(), sampled);
    let all: Vec<String> = wire
        .lines()
        .chain(dedupe_wire.lines())
        .map(|l| {
            l.split_once(": ")
                .map(|(_, m)| m.to_owned())
                .unwrap_or_default()
        })
        .collect();
    for (k, line) in sampled_lines.iter().enumerate() {
        assert_eq!(message(line), all[10 * k], "the {}th event", 10 * k + 1);
        assert_eq!(line["sample_rate"], Value::from("10"), "{line}");
    }
    let by_app_lines = wait_lines(&server.path("by_app.jsonl"), by_app, ARRIVE_TIMEOUT);
    assert!(by_app_lines.iter().all(|l| l.get("sample_rate").is_none()));
    assert_eq!(by_app_lines.len(), by_app);
    let kept = wait_lines(
        &server.path("per_app.jsonl"),
        throttled_kept,
        ARRIVE_TIMEOUT,
    );
    let mut kept_per_app: BTreeMap<String, usize> = BTreeMap::new();
    for l in &kept {
        *kept_per_app
            .entry(l["appname"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    assert!(kept_per_app.values().all(|n| *n == 7), "{kept_per_app:?}");
    let over = wait_lines(
        &server.path("over.jsonl"),
        total - rerouted_kept,
        ARRIVE_TIMEOUT,
    );
    assert!(over.iter().all(|l| l["appname"] != "app0"));
    let once_lines = wait_lines(&server.path("once.jsonl"), once, ARRIVE_TIMEOUT);
    let unique: BTreeSet<&str> = once_lines.iter().map(message).collect();
    assert_eq!(unique.len(), once_lines.len(), "no message twice");
    server.finish();
}

/// A Java stack trace: the exception line, then 39 `\tat` lines.
fn stack_trace() -> Vec<String> {
    let mut trace =
        vec!["Exception in thread \"main\" java.lang.IllegalStateException: boom".to_owned()];
    for i in 1..40 {
        trace.push(format!(
            "\tat com.example.layer{i}.Service.call(Service.java:{})",
            100 + i
        ));
    }
    trace
}

/// Sends `lines` with util-linux `logger` over TCP, one message per line of its standard input.
fn logger_lines(port: u16, priority: &str, lines: &[String]) {
    let mut child = logger_tcp(port)
        .args(["-t", "shop", "-p", priority])
        .stdin(Stdio::piped())
        .spawn()
        .expect("run logger (scripts/install-peers.sh installs it)");
    let mut stdin = child.stdin.take().expect("logger's stdin");
    for line in lines {
        writeln!(stdin, "{line}").expect("write to logger");
    }
    drop(stdin);
    let status = child.wait().expect("wait for logger");
    assert!(status.success(), "logger: {status}");
}

fn reduce_config(expire_after_ms: u64) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  tcp_in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}" }}
transforms:
  traces:
    type: reduce
    inputs: [tcp_in]
    group_by: [hostname, appname]
    starts_when: 'match(string!(.message), r''^[^\s]'')'
    merge_strategies:
      message: concat_newline
    expire_after_ms: {expire_after_ms}
    flush_period_ms: 100
sinks:
  out: {{ type: file, inputs: [traces], path: "{{DIR}}/out.jsonl", flush_interval: 50ms }}
"#
    )
}

/// Two lines, a 40-line stack trace sent as 40 syslog messages by `logger`, two more lines:
/// five events come out, the trace one event whose message is its 40 lines joined by
/// newlines, with its first line's header and both its times; the last line goes out when
/// `expire_after_ms` passes without another.
#[test]
fn reduce_joins_a_java_stack_trace_sent_line_by_line_by_logger() {
    let server = Server::start(&reduce_config(500));
    let port = server.ports.tcp;
    let trace = stack_trace();
    // Each `logger` is a connection of its own, and connections are read side by side: each
    // waits until the one before it has reached the transform, so that the order is known.
    let mut sent = 0;
    let mut send = |priority: &str, lines: &[String]| {
        logger_lines(port, priority, lines);
        sent += lines.len() as u64;
        server.wait_metric_eq(RECEIVED, "traces", None, sent);
    };
    send("user.info", &["service started".to_owned()]);
    send("user.info", &["handling request 1".to_owned()]);
    send("user.err", &trace);
    send(
        "user.info",
        &[
            "handling request 2".to_owned(),
            "service stopping".to_owned(),
        ],
    );
    let lines = wait_lines(&server.out(), 5, ARRIVE_TIMEOUT);
    let messages: Vec<&str> = lines.iter().map(message).collect();
    let joined = trace.join("\n");
    assert_eq!(
        messages,
        [
            "service started",
            "handling request 1",
            joined.as_str(),
            "handling request 2",
            "service stopping"
        ]
    );
    let merged = &lines[2];
    assert_eq!(merged["severity"], Value::from("err"), "{merged}");
    assert_eq!(merged["appname"], Value::from("shop"));
    let (start, end) = (
        merged["timestamp"].as_str().unwrap_or_default(),
        merged["timestamp_end"].as_str().unwrap_or_default(),
    );
    assert!(start <= end && !start.is_empty(), "{merged}");
    server.wait_metric_eq(RECEIVED, "traces", None, 44);
    server.wait_metric_eq(SENT, "traces", None, 5);
    assert_eq!(server.metric(ERRORS, "traces", Some("kind=\"program\"")), 0);
    server.finish();
}

/// A stop flushes every open group: with an expiry longer than the test, the trace still
/// open when loghaul is told to stop is written, whole, before it exits.
#[test]
fn reduce_flushes_open_groups_when_it_stops() {
    let mut server = Server::start(&reduce_config(600_000));
    let trace = stack_trace();
    logger_lines(server.ports.tcp, "user.err", &trace);
    server.wait_metric_eq(RECEIVED, "traces", None, 40);
    assert!(
        read_lines(&server.out()).is_empty(),
        "the group is still open"
    );
    server.stop();
    let lines = read_lines(&server.out());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(message(&lines[0]), trace.join("\n"));
}
