//! `remap` and `route` end to end with real clients: util-linux `logger` and rsyslog sending
//! RFC 3164 and 5424 messages that are parsed, reshaped and routed into files; Fluentd logger
//! libraries whose tags are routed by Fluentd's patterns; a program that changes nothing changes
//! no byte; a program that fails on some events counts them and sends them where its options say.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::{Value, json};

use crate::forward_clients::{go_sender, python_sender};
use crate::harness::*;
use crate::rsyslog::Rsyslog;

const SENT: &str = "loghaul_component_sent_events_total";
const ERRORS: &str = "loghaul_component_errors_total";
const DISCARDED: &str = "loghaul_component_discarded_events_total";

/// Sends one message with util-linux `logger` over TCP.
fn logger(port: u16, rfc: &str, priority: &str, tag: &str, message: &str) {
    let status = logger_tcp(port)
        .env("TZ", "UTC")
        .args([rfc, "-p", priority, "-t", tag, message])
        .status()
        .expect("run logger (scripts/install-peers.sh installs it)");
    assert!(
        status.success(),
        "logger {rfc} {priority} {tag} {message}: {status}"
    );
}

/// The files of one routing run, by name, each line parsed.
fn read_all(server: &Server, names: &[&str], total: usize) -> BTreeMap<String, Vec<Value>> {
    let deadline = std::time::Instant::now() + ARRIVE_TIMEOUT;
    loop {
        let files: BTreeMap<String, Vec<Value>> = names
            .iter()
            .map(|n| {
                let text = written_text(&server.path(&format!("{n}.jsonl")));
                let lines = text
                    .lines()
                    .map(|l| serde_json::from_str(l).expect("a JSON line"))
                    .collect();
                ((*n).to_owned(), lines)
            })
            .collect();
        let n: usize = files.values().map(Vec::len).sum();
        if n >= total || std::time::Instant::now() > deadline {
            return files;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Syslog from `logger` (RFC 3164 and 5424) and from rsyslog (its omfwd relay): key=value
/// pairs parsed out of the message, one key renamed, one deleted, one added; then routed by
/// severity and app name into three files, and what matched no route into a fourth. Every event
/// lands in exactly the file its fields say, with exactly the fields the program gives it.
#[test]
fn syslog_is_parsed_reshaped_and_routed_into_the_right_files() {
    let server = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}" }
transforms:
  parse:
    type: remap
    inputs: [tcp_in]
    source: |
      pairs, err = parse_key_value(.message)
      if err == null { . = merge(., pairs) }
      .user = del(.usr)
      del(.password)
      .pipeline = "it"
  by:
    type: route
    inputs: [parse]
    route:
      errors: '.severity == "err" || .severity == "crit"'
      auth: '.appname == "sshd" && .severity != "err" && .severity != "crit"'
      web: '.appname == "nginx" && .severity != "err" && .severity != "crit"'
sinks:
  errors: { type: file, inputs: [by.errors], path: "{DIR}/errors.jsonl", flush_interval: 50ms }
  auth: { type: file, inputs: [by.auth], path: "{DIR}/auth.jsonl", flush_interval: 50ms }
  web: { type: file, inputs: [by.web], path: "{DIR}/web.jsonl", flush_interval: 50ms }
  rest: { type: file, inputs: [by._unmatched], path: "{DIR}/rest.jsonl", flush_interval: 50ms }
"#,
    );
    let port = server.ports.tcp;
    let rsyslog_port = free_tcp_port();
    let rsyslog = Rsyslog::relay(rsyslog_port, port, "", "");
    // (sender, rfc, priority, app, id) → the file it must land in.
    let cases = [
        (port, "--rfc3164", "auth.info", "sshd", 1, "auth"),
        (port, "--rfc5424", "auth.err", "sshd", 2, "errors"),
        (port, "--rfc3164", "local0.notice", "nginx", 3, "web"),
        (port, "--rfc5424", "local0.crit", "nginx", 4, "errors"),
        (port, "--rfc5424", "user.info", "cron", 5, "rest"),
        (port, "--rfc3164", "user.warning", "cron", 6, "rest"),
        (rsyslog_port, "--rfc3164", "auth.notice", "sshd", 7, "auth"),
        (
            rsyslog_port,
            "--rfc5424",
            "local0.err",
            "nginx",
            8,
            "errors",
        ),
        (rsyslog_port, "--rfc3164", "local0.info", "nginx", 9, "web"),
        (rsyslog_port, "--rfc5424", "daemon.info", "ntpd", 10, "rest"),
    ];
    for (to, rfc, priority, app, id, _) in cases {
        logger(
            to,
            rfc,
            priority,
            app,
            &format!("id={id} usr=u{id} password=secret{id} status=200 note=\"two words\""),
        );
    }
    let files = read_all(&server, &["errors", "auth", "web", "rest"], cases.len());
    drop(rsyslog);
    let total: usize = files.values().map(Vec::len).sum();
    assert_eq!(total, cases.len(), "every event once: {files:#?}");
    for (_, _, priority, app, id, file) in cases {
        let found: Vec<(&String, &Value)> = files
            .iter()
            .flat_map(|(name, lines)| lines.iter().map(move |l| (name, l)))
            .filter(|(_, l)| l["id"] == json!(id.to_string()))
            .collect();
        assert_eq!(found.len(), 1, "event {id} once: {found:?}");
        let (name, event) = found[0];
        assert_eq!(
            name, file,
            "event {id} ({priority}, {app}) went to {name}: {event}"
        );
        assert_eq!(event["appname"], json!(app), "{event}");
        assert_eq!(
            event["severity"],
            json!(priority.split('.').nth(1)),
            "{event}"
        );
        assert_eq!(event["user"], json!(format!("u{id}")), "renamed: {event}");
        assert_eq!(event["status"], json!("200"), "{event}");
        assert_eq!(event["note"], json!("two words"), "quoted value: {event}");
        assert_eq!(event["pipeline"], json!("it"), "added: {event}");
        for gone in ["usr", "password"] {
            assert!(event.get(gone).is_none(), "`{gone}` is gone: {event}");
        }
        let message = event["message"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("id={id} ")), "{event}");
    }
    assert_eq!(server.metric(SENT, "by", Some("output=\"errors\"")), 3);
    assert_eq!(server.metric(SENT, "by", Some("output=\"auth\"")), 2);
    assert_eq!(server.metric(SENT, "by", Some("output=\"web\"")), 2);
    assert_eq!(server.metric(SENT, "by", Some("output=\"_unmatched\"")), 3);
    assert_eq!(server.metric(ERRORS, "parse", Some("kind=\"program\"")), 0);
    server.finish();
}

/// Fluentd's logger libraries (PyPI fluent-logger, fluent-logger-golang) send events tagged
/// `app.web`, `app.db.slow` and `nginx.access`; routes with Fluentd's patterns send each where
/// Fluentd's rules would: `app.*` takes only `app.web` (one part), `app.**` both `app` tags,
/// `{nginx,apache}.*` the nginx one, `*.db.*` the slow query; with `first_match` (Fluentd's
/// `<match>` order) `app.db.slow` goes to the first of `app.db.**` and `app.**` only.
#[test]
fn fluentd_tag_patterns_route_as_fluentd_does() {
    let server = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  fin: { type: fluent, address: "127.0.0.1:{TCP}" }
transforms:
  tags:
    type: route
    inputs: [fin]
    route:
      one_part: { tag: "app.*" }
      any_parts: { tag: "app.**" }
      either: { tag: "{nginx,apache}.*" }
      middle: { tag: "*.db.*" }
  ordered:
    type: route
    inputs: [fin]
    first_match: true
    route:
      db: { tag: ["app.db.**"] }
      app: { tag: "app.**" }
sinks:
  one_part: { type: file, inputs: [tags.one_part], path: "{DIR}/one_part.jsonl", flush_interval: 50ms }
  any_parts: { type: file, inputs: [tags.any_parts], path: "{DIR}/any_parts.jsonl", flush_interval: 50ms }
  either: { type: file, inputs: [tags.either], path: "{DIR}/either.jsonl", flush_interval: 50ms }
  middle: { type: file, inputs: [tags.middle], path: "{DIR}/middle.jsonl", flush_interval: 50ms }
  none: { type: file, inputs: [tags._unmatched], path: "{DIR}/none.jsonl", flush_interval: 50ms }
  db: { type: file, inputs: [ordered.db], path: "{DIR}/db.jsonl", flush_interval: 50ms }
  app: { type: file, inputs: [ordered.app], path: "{DIR}/app.jsonl", flush_interval: 50ms }
  rest: { type: file, inputs: [ordered._unmatched], path: "{DIR}/rest.jsonl", flush_interval: 50ms }
"#,
    );
    const EACH: usize = 20;
    let port = server.ports.tcp.to_string();
    let sends = [
        ("app.web", python_sender()),
        ("app.db.slow", go_sender()),
        ("nginx.access", python_sender()),
        ("other", go_sender()),
    ];
    for (tag, mut cmd) in sends {
        let out = cmd
            .args(["--port", &port, "--tag", tag, "--count", &EACH.to_string()])
            .args(["--run", "routing"])
            .output()
            .expect("run a fluent logger client");
        assert!(
            out.status.success(),
            "{tag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let names = [
        "one_part",
        "any_parts",
        "either",
        "middle",
        "none",
        "db",
        "app",
        "rest",
    ];
    // Each file's tags, and how many events of each.
    let expect: [(&str, &[&str]); 8] = [
        ("one_part", &["app.web"]),
        ("any_parts", &["app.db.slow", "app.web"]),
        ("either", &["nginx.access"]),
        ("middle", &["app.db.slow"]),
        ("none", &["other"]),
        ("db", &["app.db.slow"]),
        ("app", &["app.web"]),
        ("rest", &["nginx.access", "other"]),
    ];
    let total: usize = expect.iter().map(|(_, t)| t.len() * EACH).sum();
    let files = read_all(&server, &names, total);
    for (file, tags) in expect {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for line in &files[file] {
            *counts
                .entry(line["tag"].as_str().unwrap_or("?"))
                .or_default() += 1;
        }
        let want: BTreeMap<&str, usize> = tags.iter().map(|t| (*t, EACH)).collect();
        assert_eq!(counts, want, "{file}");
    }
    server.finish();
}

/// A program that changes nothing writes every event byte for byte as without it: syslog
/// events of every RFC and a forward record with nested values, `bin`, an unsigned integer
/// past i64::MAX and a repeated-looking but distinct key order.
#[test]
fn a_program_that_changes_nothing_changes_no_byte() {
    let server = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}" }
transforms:
  same: { type: remap, inputs: [tcp_in], source: "true" }
  touched: { type: remap, inputs: [tcp_in], source: ".x = 1\ndel(.x)" }
sinks:
  direct: { type: file, inputs: [tcp_in], path: "{DIR}/direct.jsonl", flush_interval: 50ms }
  through: { type: file, inputs: [same], path: "{DIR}/through.jsonl", flush_interval: 50ms }
  touched_out: { type: file, inputs: [touched], path: "{DIR}/touched.jsonl", flush_interval: 50ms }
"#,
    );
    let wire = [
        "<34>Oct 11 22:14:15 mymachine su: 'su root' failed for lonvick on /dev/pts/8",
        "<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"1011\"][ex@1 a=\"q\\\"uote\\]\"] An application event",
        "<13>1 2026-01-01T00:00:00.123456789+02:00 h app 123 - - nanos and an offset",
        "<14>Oct 11 22:14:15 host app: tab\there \u{e9}t\u{e9}",
        "garbage without a header",
    ]
    .map(|l| format!("{l}\n"))
    .concat();
    send_tcp(server.ports.tcp, wire.as_bytes());
    let direct = wait_raw_lines(&server.path("direct.jsonl"), 5, ARRIVE_TIMEOUT);
    let through = wait_raw_lines(&server.path("through.jsonl"), 5, ARRIVE_TIMEOUT);
    let touched = wait_raw_lines(&server.path("touched.jsonl"), 5, ARRIVE_TIMEOUT);
    assert_eq!(through, direct, "remap `true` changed bytes");
    assert_eq!(
        touched, direct,
        "a program that sets and deletes a key changed bytes"
    );
    server.finish();
}

/// Forward records (nested maps and arrays, the sender's key order) come out of an empty
/// program as they went in.
#[test]
fn a_program_that_changes_nothing_keeps_records_whole() {
    let server = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  fin: { type: fluent, address: "127.0.0.1:{TCP}" }
transforms:
  same: { type: remap, inputs: [fin], source: "true" }
sinks:
  direct: { type: file, inputs: [fin], path: "{DIR}/direct.jsonl", flush_interval: 50ms }
  through: { type: file, inputs: [same], path: "{DIR}/through.jsonl", flush_interval: 50ms }
"#,
    );
    let out = python_sender()
        .args([
            "--port",
            &server.ports.tcp.to_string(),
            "--tag",
            "rt.python",
        ])
        .args(["--count", "50", "--run", "rt", "--nanosecond"])
        .output()
        .expect("run python fluent-logger");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let direct = wait_raw_lines(&server.path("direct.jsonl"), 50, ARRIVE_TIMEOUT);
    let through = wait_raw_lines(&server.path("through.jsonl"), 50, ARRIVE_TIMEOUT);
    assert_eq!(through, direct);
    server.finish();
}

/// A program that fails on some events: each failure is counted; with the defaults the event
/// goes on unchanged, with `drop_on_error` it is dropped (counted), with `reroute_dropped` it
/// reaches `ID.dropped` carrying why. The other events of the batch are transformed.
#[test]
fn failing_events_are_counted_and_follow_the_options() {
    let program = r#"source: |
      .n = to_int!(.message)
      .double = .n * 2
"#;
    let server = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  tcp_in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}", format: raw }}
transforms:
  keep:
    type: remap
    inputs: [tcp_in]
    {program}
  drop:
    type: remap
    inputs: [tcp_in]
    drop_on_error: true
    {program}
  reroute:
    type: remap
    inputs: [tcp_in]
    drop_on_error: true
    reroute_dropped: true
    {program}
sinks:
  keep_out: {{ type: file, inputs: [keep], path: "{{DIR}}/keep.jsonl", flush_interval: 50ms }}
  drop_out: {{ type: file, inputs: [drop], path: "{{DIR}}/drop.jsonl", flush_interval: 50ms }}
  good: {{ type: file, inputs: [reroute], path: "{{DIR}}/good.jsonl", flush_interval: 50ms }}
  bad: {{ type: file, inputs: [reroute.dropped], path: "{{DIR}}/bad.jsonl", flush_interval: 50ms }}
"#
    ));
    send_tcp(server.ports.tcp, b"1\nx\n3\ny\n5\n");
    let keep = wait_lines(&server.path("keep.jsonl"), 5, ARRIVE_TIMEOUT);
    let doubled: Vec<&Value> = keep.iter().map(|l| &l["double"]).collect();
    assert_eq!(
        doubled,
        [&json!(2), &Value::Null, &json!(6), &Value::Null, &json!(10)],
        "failed events pass unchanged: {keep:?}"
    );
    let drop = wait_lines(&server.path("drop.jsonl"), 3, ARRIVE_TIMEOUT);
    assert_eq!(drop.len(), 3);
    let good = wait_lines(&server.path("good.jsonl"), 3, ARRIVE_TIMEOUT);
    assert_eq!(good.len(), 3);
    let bad = wait_lines(&server.path("bad.jsonl"), 2, ARRIVE_TIMEOUT);
    let messages: Vec<&str> = bad.iter().map(message).collect();
    assert_eq!(messages, ["x", "y"]);
    for b in &bad {
        assert_eq!(b["dropped"]["reason"], json!("error"), "{b}");
        assert_eq!(b["dropped"]["component_id"], json!("reroute"), "{b}");
        let why = b["dropped"]["message"].as_str().unwrap_or_default();
        assert!(why.contains("to_int"), "the error names the function: {b}");
    }
    for id in ["keep", "drop", "reroute"] {
        server.wait_metric_eq(ERRORS, id, Some("kind=\"program\""), 2);
    }
    server.wait_metric_eq(DISCARDED, "drop", Some("reason=\"program_dropped\""), 2);
    assert_eq!(
        server.metric(SENT, "reroute", Some("output=\"dropped\"")),
        2
    );
    assert_eq!(
        server.metric(SENT, "reroute", Some("output=\"_default\"")),
        3
    );
    let log = server.stderr();
    assert!(
        log.contains("remap program failed on an event"),
        "the failure is logged: {}",
        tail(&log, 2000)
    );
    server.finish();
}

/// `loghaul validate` says which path each program runs on, and for the VRL runtime which
/// expression kept it there.
#[test]
fn validate_names_each_programs_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("c.yaml");
    std::fs::write(
        &path,
        r#"sources:
  in: { type: syslog, mode: udp, address: "127.0.0.1:5514" }
transforms:
  fast: { type: remap, inputs: [in], source: ". |= parse_key_value!(.message)" }
  slow:
    type: remap
    inputs: [in]
    source: |
      .a = 1
      .h = sha1(string!(.message))
  r: { type: route, inputs: [fast, slow], route: { e: '.severity == "err"' } }
sinks:
  out: { type: blackhole, inputs: [r.e, r._unmatched] }
"#,
    )
    .expect("write config");
    let out = Command::new(BIN)
        .args(["validate", "-c"])
        .arg(&path)
        .output()
        .expect("run loghaul validate");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("transform `fast`: fast path"), "{stdout}");
    assert!(
        stdout.contains("transform `slow`: VRL runtime: `sha1(string!(.message))`")
            && stdout.contains("line 2, column 6"),
        "{stdout}"
    );
    assert!(
        stdout.contains("transform `r`: route `e`: fast path"),
        "{stdout}"
    );
}
