//! The forward protocol against real third-party implementations: loghaul's `fluent` source
//! fed by PyPI fluent-logger, npm @fluent-org/logger and fluent-logger-golang, and loghaul's
//! `fluent` sink delivering to npm @fluent-org/logger's FluentServer, each as a child process.
//!
//! ```text
//! python / node / go sender ──TCP──▶ Tap (keeps a copy) ──▶ loghaul (fluent ─▶ file) ──▶ out.jsonl
//! test ──syslog──▶ loghaul (syslog ─▶ fluent sink) ──forward+auth+ack──▶ receive.mjs ──▶ file
//! generator ──▶ loghaul A (fluent sink, round robin) ──▶ loghaul B, loghaul C (killed, restarted)
//! ```
//!
//! The clients are installed by `scripts/install-clients.sh` (see `tests/clients/README.md` for
//! their command lines and what each sends); a test whose client is missing fails with that hint.
//!
//! What a client sent is not guessed: a [`Tap`] relays its connection to loghaul and keeps every
//! byte it wrote, and a small msgpack reader written here ([`Mp`], independent of loghaul's
//! codec, so a decoding bug cannot hide itself) turns those bytes back into events. Every output
//! line is then compared with the event as sent: its tag, every field of its record, and its time
//! to the nanosecond.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::*;

/// A fluent source on `{TCP}` writing JSON lines to `{DIR}/out.jsonl`.
const FLUENT_TO_FILE: &str = r#"api: { address: "127.0.0.1:{API}" }
sources:
  fin: { type: fluent, address: "127.0.0.1:{TCP}" }
sinks:
  out: { type: file, inputs: [fin], path: "{DIR}/out.jsonl", encoding: json, flush_interval: 100ms }
"#;

/// How long one client run may take (they take well under a second on an idle machine).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// The keys loghaul writes beside a forward record's own.
const LOGHAUL_KEYS: [&str; 4] = ["timestamp", "source_ip", "source_type", "tag"];

// ---------------------------------------------------------------------------------------------
// 1. PyPI fluent-logger
// ---------------------------------------------------------------------------------------------

/// PyPI fluent-logger (Message mode, `--nanosecond`) sends 10,000 numbered events: each is in
/// the file exactly once, with its tag, its record (the nested map and list exactly) and its
/// EventTime to the nanosecond.
#[test]
fn python_fluent_logger_10k_events_once_with_nanoseconds() {
    const COUNT: u64 = 10_000;
    let server = Server::start(FLUENT_TO_FILE);
    let tap = Tap::start(server.ports.tcp);
    let run = run_id("python");
    let tag = "it.python";
    let mut client = Client::spawn(
        "python fluent-logger",
        python_sender()
            .args(["--port", &tap.port.to_string(), "--tag", tag])
            .args(["--count", &COUNT.to_string(), "--run", &run])
            .arg("--nanosecond"),
    );
    client.wait_success(CLIENT_TIMEOUT, COUNT);

    let lines = wait_lines(&server.out(), COUNT as usize, Duration::from_secs(60));
    let sent = tap.sent_events();
    check_exactly_once(
        &lines,
        &sent,
        "python fluent-logger --nanosecond",
        &run,
        tag,
        COUNT,
    );
    // Nanoseconds, not microseconds: a real clock's nanoseconds end in 000 once in a thousand.
    let whole_micros = lines
        .iter()
        .filter(|l| exact_time(l).1.is_multiple_of(1000))
        .count();
    assert!(
        whole_micros < (COUNT / 10) as usize,
        "{whole_micros} of {COUNT} times are whole microseconds: were the nanoseconds cut?"
    );
    server.wait_metric_eq(
        "loghaul_component_received_events_total",
        "fin",
        None,
        COUNT,
    );
    server.finish();
}

// ---------------------------------------------------------------------------------------------
// 2. npm @fluent-org/logger
// ---------------------------------------------------------------------------------------------

const NODE_MODES: [&str; 4] = [
    "Message",
    "Forward",
    "PackedForward",
    "CompressedPackedForward",
];

/// npm @fluent-org/logger in each of its four event modes, once with acks and millisecond
/// EventTimes and once with neither (integer seconds); then with shared key and user against a
/// source that requires both; then with a wrong shared key and a wrong password, which loghaul
/// refuses with fluentd's reasons, counted as `auth` errors.
#[test]
fn node_fluent_logger_every_mode_acks_milliseconds_and_auth() {
    const COUNT: u64 = 1000;
    let sec_port = free_port_pair();
    let server = Server::start(
        &r#"api: { address: "127.0.0.1:{API}" }
sources:
  fin: { type: fluent, address: "127.0.0.1:{TCP}" }
  fsec:
    type: fluent
    address: "127.0.0.1:{SEC}"
    shared_key: "it-shared-key"
    self_hostname: loghaul-it-server
    users: [{ username: alice, password: "pw-alice" }, { username: bob, password: "pw-bob" }]
sinks:
  out: { type: file, inputs: [fin, fsec], path: "{DIR}/out.jsonl", encoding: json, flush_interval: 100ms }
"#
        .replace("{SEC}", &sec_port.to_string()),
    );

    // Eight runs at once, each through its own tap: 4 modes x (acks + milliseconds | neither).
    struct NodeRun {
        what: String,
        run: String,
        tag: String,
        tap: Tap,
        client: Client,
    }
    let mut runs = Vec::new();
    for mode in NODE_MODES {
        for acked in [true, false] {
            let flavour = if acked { "ack-ms" } else { "plain" };
            let what = format!("node {mode} {flavour}");
            let run = run_id(&format!("node-{mode}-{flavour}"));
            let tag = format!("it.node.{mode}.{flavour}");
            let tap = Tap::start(server.ports.tcp);
            let mut cmd = node_sender();
            cmd.args(["--port", &tap.port.to_string(), "--tag", &tag])
                .args(["--count", &COUNT.to_string(), "--run", &run])
                .args(["--mode", mode, "--batch", "100"]);
            if acked {
                cmd.args(["--ack", "--milliseconds"]);
            }
            let client = Client::spawn(&what, &mut cmd);
            runs.push(NodeRun {
                what,
                run,
                tag,
                tap,
                client,
            });
        }
    }
    for r in &mut runs {
        let summary = r.client.wait_success(CLIENT_TIMEOUT, COUNT);
        assert_eq!(
            summary["mode"],
            json!(r.what.split(' ').nth(1)),
            "{summary}"
        );
    }
    let total = COUNT as usize * runs.len();
    let lines = wait_lines(&server.out(), total, Duration::from_secs(60));
    for r in &runs {
        let sent = r.tap.sent_events();
        check_exactly_once(&lines, &sent, &r.what, &r.run, &r.tag, COUNT);
        let acked = r.what.ends_with("ack-ms");
        // --milliseconds: EventTimes in whole milliseconds; otherwise integer seconds.
        assert!(
            sent.iter()
                .all(|s| s.event_time == acked && s.time.1.is_multiple_of(1_000_000)),
            "{}: the client sent other times than expected, e.g. {:?}",
            r.what,
            sent.first().map(|s| (s.event_time, s.time))
        );
        if acked {
            // The client got an ack for every request, so loghaul saw a chunk in each.
            let (requests, chunked) = r.tap.request_counts();
            assert!(
                requests > 0 && requests == chunked,
                "{}: {chunked} of {requests} requests carried a chunk",
                r.what
            );
        }
    }

    // Shared key and user (bob), acknowledged, through a tap.
    let auth_run = run_id("node-auth");
    let auth_tag = "it.node.auth";
    let tap = Tap::start(sec_port);
    let mut client = Client::spawn(
        "node with shared key and user",
        node_sender()
            .args(["--port", &tap.port.to_string(), "--tag", auth_tag])
            .args(["--count", &COUNT.to_string(), "--run", &auth_run])
            .args(["--mode", "CompressedPackedForward", "--batch", "100"])
            .args(["--ack", "--milliseconds"])
            .args([
                "--shared-key",
                "it-shared-key",
                "--hostname",
                "node-it-client",
            ])
            .args(["--username", "bob", "--password", "pw-bob"]),
    );
    let summary = client.wait_success(CLIENT_TIMEOUT, COUNT);
    assert_eq!(summary["user_auth"], json!(true), "{summary}");
    let lines = wait_lines(
        &server.out(),
        total + COUNT as usize,
        Duration::from_secs(60),
    );
    check_exactly_once(
        &lines,
        &tap.sent_events(),
        "node with shared key and user",
        &auth_run,
        auth_tag,
        COUNT,
    );

    // Refused: a wrong shared key, then a wrong password. The client must fail with the reason
    // loghaul put in its PONG.
    let mut refused_runs = Vec::new();
    for (what, key, password, reason) in [
        (
            "wrong shared key",
            "not-the-key",
            "pw-bob",
            "shared_key mismatch",
        ),
        (
            "wrong password",
            "it-shared-key",
            "not-the-password",
            "username/password mismatch",
        ),
    ] {
        let run = run_id("node-refused");
        let mut client = Client::spawn(
            &format!("node with a {what}"),
            node_sender()
                .args(["--port", &sec_port.to_string(), "--tag", "it.node.refused"])
                .args(["--count", "10", "--run", &run, "--ack"])
                .args(["--shared-key", key, "--hostname", "node-it-client"])
                .args(["--username", "bob", "--password", password]),
        );
        let stderr = client.wait_failure(CLIENT_TIMEOUT);
        assert!(
            stderr.contains(reason),
            "node with a {what}: its error should carry loghaul's reason {reason:?}; stderr:\n{}",
            tail(&stderr, 2000)
        );
        refused_runs.push(run);
    }
    server.wait_metric_eq(
        "loghaul_component_errors_total",
        "fsec",
        Some("kind=\"auth\""),
        2,
    );
    assert_eq!(
        server.metric(
            "loghaul_component_errors_total",
            "fin",
            Some("kind=\"auth\"")
        ),
        0,
        "the open source counted auth errors"
    );
    let lines = read_lines(&server.out());
    let leaked = lines
        .iter()
        .filter(|l| refused_runs.iter().any(|r| l["run"] == json!(r)))
        .count();
    assert_eq!(leaked, 0, "events of refused clients reached the file");
    assert_eq!(lines.len(), total + COUNT as usize, "lines in the file");
    server.finish();
}

// ---------------------------------------------------------------------------------------------
// 3. fluent-logger-golang
// ---------------------------------------------------------------------------------------------

/// fluent-logger-golang with acks and sub-second EventTimes: every event once with its time to
/// the nanosecond; and without either (integer seconds as a signed int32).
#[test]
fn go_fluent_logger_acks_and_subsecond_times() {
    const COUNT: u64 = 5000;
    const PLAIN: u64 = 1000;
    let server = Server::start(FLUENT_TO_FILE);

    let tap = Tap::start(server.ports.tcp);
    let run = run_id("go-ack");
    let tag = "it.go.ack";
    let mut client = Client::spawn(
        "go fluent-logger --ack --subsecond",
        go_sender()
            .args(["--port", &tap.port.to_string(), "--tag", tag])
            .args(["--count", &COUNT.to_string(), "--run", &run])
            .args(["--ack", "--subsecond"]),
    );
    let summary = client.wait_success(CLIENT_TIMEOUT, COUNT);
    assert_eq!(summary["ack"], json!(true), "{summary}");
    let (requests, chunked) = tap.request_counts();
    assert_eq!(
        (requests, chunked),
        (COUNT, COUNT),
        "go --ack: one request with a chunk per event"
    );

    let plain_tap = Tap::start(server.ports.tcp);
    let plain_run = run_id("go-plain");
    let plain_tag = "it.go.plain";
    let mut plain = Client::spawn(
        "go fluent-logger (integer seconds, no ack)",
        go_sender()
            .args(["--port", &plain_tap.port.to_string(), "--tag", plain_tag])
            .args(["--count", &PLAIN.to_string(), "--run", &plain_run]),
    );
    plain.wait_success(CLIENT_TIMEOUT, PLAIN);

    let lines = wait_lines(
        &server.out(),
        (COUNT + PLAIN) as usize,
        Duration::from_secs(60),
    );
    let sent = tap.sent_events();
    check_exactly_once(&lines, &sent, "go --ack --subsecond", &run, tag, COUNT);
    assert!(
        sent.iter().all(|s| s.event_time),
        "go --subsecond sent a time that is no EventTime"
    );
    let sent_plain = plain_tap.sent_events();
    check_exactly_once(
        &lines,
        &sent_plain,
        "go integer seconds",
        &plain_run,
        plain_tag,
        PLAIN,
    );
    server.finish();
}

// ---------------------------------------------------------------------------------------------
// 4. A sink that cannot write gets no ack sent
// ---------------------------------------------------------------------------------------------

/// The file sink's directory cannot be created (a regular file has its name; root ignores
/// permissions, so chmod would not do). While it cannot write: a raw PackedForward request with
/// a chunk gets no ack before its connection is closed, and fluent-logger-golang with `--ack`
/// keeps resending its first event without success. Once the blocking file is removed, its
/// retries get every event written, and a request sent again is acknowledged.
#[test]
fn unwritable_file_sink_withholds_acks_until_it_recovers() {
    const COUNT: u64 = 200;
    const NODE_COUNT: u64 = 100;
    let blocked = BlockedOutput::new();
    let out = blocked.out.clone();
    let server = Server::start(&FLUENT_TO_FILE.replace("{DIR}/out.jsonl", &out.to_string_lossy()));
    let raw_run = run_id("raw");

    // A raw client: one PackedForward request with a chunk. No ack may come back.
    let blocked_chunk = "Ymxva2VkLWNodW5rLTAwMDA=";
    let mut s = connect(server.ports.tcp);
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("read timeout");
    s.write_all(&packed_forward_request(
        "it.raw",
        &raw_run,
        0..1,
        blocked_chunk,
    ))
    .expect("send the raw request");
    let mut got = Vec::new();
    let read = s.read_to_end(&mut got);
    assert!(
        read.is_ok(),
        "loghaul neither acked nor closed the connection of a request it could not write within 20s: {read:?}"
    );
    assert!(
        got.is_empty(),
        "loghaul answered a request whose events were not written: {} bytes {:?}",
        got.len(),
        Rd::new(&got).next()
    );
    server.wait_metric(
        "loghaul_component_errors_total",
        "fin",
        Some("kind=\"ack\""),
        1,
    );

    // The Go client retries (reconnecting, resending the same request) until it gets an ack.
    let run = run_id("go-blocked");
    let mut client = Client::spawn(
        "go fluent-logger --ack (retrying)",
        go_sender()
            .args([
                "--port",
                &server.ports.tcp.to_string(),
                "--tag",
                "it.go.blocked",
            ])
            .args(["--count", &COUNT.to_string(), "--run", &run])
            .args(["--ack", "--subsecond", "--max-retry", "1000000"]),
    );
    // Several attempts refused, and the client still trying.
    let withheld = server.wait_metric(
        "loghaul_component_errors_total",
        "fin",
        Some("kind=\"ack\""),
        6,
    );
    // Three more refusals: the client kept trying through them.
    server.wait_metric(
        "loghaul_component_errors_total",
        "fin",
        Some("kind=\"ack\""),
        withheld + 3,
    );
    assert_eq!(
        client.poll(),
        None,
        "the go client finished while the sink could not write (after {withheld} withheld acks); stdout:\n{}",
        client.stdout()
    );
    assert!(
        !out.exists(),
        "{} exists while its directory is blocked",
        out.display()
    );
    let discarded = server.metric(
        "loghaul_component_discarded_events_total",
        "out",
        Some("reason=\"write_failed\""),
    );
    assert!(discarded >= 2, "the file sink discarded {discarded} events");

    // The node client, PackedForward in requests of 50 events with acks, fails while blocked:
    // its acks never come.
    let node_run = run_id("node-blocked");
    let node_attempt = || {
        let mut cmd = node_sender();
        cmd.args([
            "--port",
            &server.ports.tcp.to_string(),
            "--tag",
            "it.node.blocked",
        ])
        .args(["--count", &NODE_COUNT.to_string(), "--run", &node_run])
        .args(["--mode", "PackedForward", "--batch", "50", "--ack"])
        .args(["--timeout-ms", "1000"]);
        Client::spawn("node --ack (an attempt driven by the test)", &mut cmd)
    };
    let stderr = node_attempt().wait_failure(CLIENT_TIMEOUT);
    assert!(
        stderr.contains("AckTimeoutError"),
        "node while the sink could not write: expected an ack timeout; stderr:\n{}",
        tail(&stderr, 2000)
    );
    assert_eq!(
        client.poll(),
        None,
        "the go client finished while the sink could not write"
    );

    // Unblock: the sink creates the directory on its next write.
    blocked.unblock();
    let recovered = Instant::now();
    client.wait_success(CLIENT_TIMEOUT, COUNT);
    // The test retries the node client until one run succeeds (the first should).
    let mut node_failures = Vec::new();
    for _ in 0..5 {
        let mut attempt = node_attempt();
        let status = attempt.wait(CLIENT_TIMEOUT);
        if status.success() {
            break;
        }
        node_failures.push(tail(&attempt.stderr(), 500).to_owned());
    }
    assert!(
        node_failures.len() < 5,
        "node --ack never succeeded after the sink recovered: {node_failures:#?}"
    );
    eprintln!(
        "go client finished {:?} after the sink recovered; {} acks withheld in all",
        recovered.elapsed(),
        server.metric(
            "loghaul_component_errors_total",
            "fin",
            Some("kind=\"ack\"")
        )
    );

    // Now the same kind of request is written and acknowledged.
    let chunk = "d3JpdHRlbi1jaHVuay0wMDA=";
    let mut s = connect(server.ports.tcp);
    s.write_all(&packed_forward_request("it.raw", &raw_run, 1..3, chunk))
        .expect("send the raw request again");
    let ack = read_one_message(&mut s, Duration::from_secs(20));
    assert_eq!(
        ack,
        Mp::Map(vec![(Mp::str("ack"), Mp::str(chunk))]),
        "the ack of a written request"
    );
    drop(s);

    let lines = wait_lines(
        &out,
        (COUNT + NODE_COUNT) as usize + 2,
        Duration::from_secs(30),
    );
    let numbers: Vec<u64> = lines
        .iter()
        .filter(|l| l["run"] == json!(run))
        .map(number)
        .collect();
    let dups = assert_each_at_least_once(&numbers, COUNT, "go --ack after the sink recovered");
    eprintln!(
        "go client events: {} lines, {dups} duplicates",
        numbers.len()
    );
    let node_numbers: Vec<u64> = lines
        .iter()
        .filter(|l| l["run"] == json!(node_run))
        .map(number)
        .collect();
    let node_dups = assert_each_at_least_once(
        &node_numbers,
        NODE_COUNT,
        "node --ack after the sink recovered",
    );
    eprintln!(
        "node client events: {} lines, {node_dups} duplicates, {} failed attempts after recovery",
        node_numbers.len(),
        node_failures.len()
    );
    let raw: Vec<u64> = lines
        .iter()
        .filter(|l| l["run"] == json!(raw_run))
        .map(number)
        .collect();
    assert_eq!(
        raw,
        vec![1, 2],
        "raw events in the file: only those of the acknowledged request"
    );
    server.finish();
}

// ---------------------------------------------------------------------------------------------
// 5. loghaul's fluent sink into FluentServer
// ---------------------------------------------------------------------------------------------

/// loghaul's fluent sink, with acks and shared key + user, delivers 100,000 numbered syslog
/// events to npm @fluent-org/logger's FluentServer: each exactly once, with the tag from the
/// sink's template and the event's time to the microsecond it had.
#[test]
fn fluent_sink_delivers_100k_to_fluent_server_with_auth_and_acks() {
    const COUNT: u64 = 100_000;
    let recv_dir = tempfile::Builder::new()
        .prefix("loghaul-it-recv-")
        .tempdir()
        .expect("temp dir");
    let recv_out = recv_dir.path().join("received.jsonl");
    let (receiver, recv_port) = start_receiver(
        &recv_out,
        &[
            "--shared-key",
            "sink-key",
            "--hostname",
            "fluent-node-receiver",
            "--user",
            "loghaul:pw-sink",
        ],
    );
    let server = Server::start(
        &r#"api: { address: "127.0.0.1:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}" }
sinks:
  fwd:
    type: fluent
    inputs: [tcp_in]
    servers: [{ address: "127.0.0.1:{RECV}" }]
    require_ack: true
    shared_key: sink-key
    username: loghaul
    password: pw-sink
    self_hostname: loghaul-it-sink
    tag: "it.sink.{{ appname }}"
"#
        .replace("{RECV}", &recv_port.to_string()),
    );
    let mut wire = String::with_capacity(COUNT as usize * 80);
    for i in 0..COUNT {
        wire.push_str(&format!(
            "<134>1 2026-01-02T03:04:05.{:06}Z host-it app5 42 ID7 - seq {i}\n",
            i % 1_000_000
        ));
    }
    send_tcp(server.ports.tcp, wire.as_bytes());

    let acked = || server.metric("loghaul_component_sent_events_total", "fwd", None) >= COUNT;
    let count = wait_line_count(
        &recv_out,
        COUNT as usize,
        Duration::from_secs(90),
        acked,
        || {
            format!(
                "loghaul's sink sent {} events; receive.mjs stderr:\n{}",
                server.metric("loghaul_component_sent_events_total", "fwd", None),
                tail(&receiver.stderr(), 2000)
            )
        },
    );
    let mut numbers = Vec::with_capacity(count);
    let mut bad = Vec::new();
    let (base, _) = parse_rfc3339_utc("2026-01-02T03:04:05Z");
    for_each_line(&recv_out, |v| {
        let msg = v["record"]["message"].as_str().unwrap_or_default();
        let n = trailing_number(msg);
        numbers.push(n);
        let want_time = json!([base as i64, (n % 1_000_000) * 1000]);
        let problems = [
            (v["tag"] != json!("it.sink.app5")).then_some("tag"),
            (v["event_time"] != want_time).then_some("event_time"),
            (v["record"]["hostname"] != json!("host-it")).then_some("hostname"),
            (v["record"]["appname"] != json!("app5")).then_some("appname"),
        ];
        if let Some(p) = problems.iter().flatten().next()
            && bad.len() < 5
        {
            bad.push(format!(
                "{p} differs (want time {want_time}): {}",
                truncate_json(&v, 400)
            ));
        }
    });
    assert!(
        bad.is_empty(),
        "received events differ:\n{}",
        bad.join("\n")
    );
    assert_each_once(&numbers, COUNT, "events received by FluentServer");
    server.wait_metric_eq("loghaul_component_sent_events_total", "fwd", None, COUNT);
    for kind in ["auth", "ack", "io"] {
        assert_eq!(
            server.metric(
                "loghaul_component_errors_total",
                "fwd",
                Some(&format!("kind=\"{kind}\""))
            ),
            0,
            "fluent sink errors of kind {kind}"
        );
    }
    server.finish();
    drop(receiver);
}

// ---------------------------------------------------------------------------------------------
// 6. A chain with a server killed and restarted
// ---------------------------------------------------------------------------------------------

/// generator ─▶ loghaul A (fluent sink: B and C, round robin, acks) ─▶ loghaul B and C. C is
/// killed with SIGKILL mid-stream and started again on the same port: every event arrives at
/// least once across B and C, the load moves to B while C is down and comes back to C.
#[test]
fn chain_survives_a_killed_downstream_server() {
    let b = Server::start(FLUENT_TO_FILE);
    let c_port = free_port_pair();
    let c_template = FLUENT_TO_FILE.replace("{TCP}", &c_port.to_string());
    let mut c1 = Server::start(&c_template);
    let a = Server::start(
        &r#"api: { address: "127.0.0.1:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}" }
sinks:
  fwd:
    type: fluent
    inputs: [tcp_in]
    servers: [{ address: "127.0.0.1:{B}" }, { address: "127.0.0.1:{C}" }]
    load_balance: round_robin
    require_ack: true
    ack_timeout: 2s
    connect_timeout: 1s
    reconnect_max_interval: 500ms
"#
        .replace("{B}", &b.ports.tcp.to_string())
        .replace("{C}", &c_port.to_string()),
    );

    // About 2,000 events a second, 20 every 10 ms, numbered from 0.
    let next = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let generator = {
        let (next, stop) = (next.clone(), stop.clone());
        let mut s = connect(a.ports.tcp);
        std::thread::spawn(move || {
            for _ in 0..6000 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let mut lines = String::new();
                for _ in 0..20 {
                    let n = next.load(Ordering::SeqCst);
                    lines.push_str(&line3164(&format!("chain seq {n}")));
                    next.store(n + 1, Ordering::SeqCst);
                }
                s.write_all(lines.as_bytes())
                    .expect("generator: write to A");
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = s.shutdown(Shutdown::Write);
        })
    };

    // The phases are counted in events the generator has sent, not in time, so a slow machine
    // stretches them instead of emptying them.
    let sent_at_least = |n: u64| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while next.load(Ordering::SeqCst) < n {
            assert!(
                Instant::now() < deadline,
                "the generator sent {} of {n} events in 60s",
                next.load(Ordering::SeqCst)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    sent_at_least(3_000);
    let killed_at = next.load(Ordering::SeqCst);
    c1.signal("KILL");
    assert!(
        c1.wait_exit(Duration::from_secs(10)).is_some(),
        "C did not die of SIGKILL"
    );
    sent_at_least(killed_at + 4_000);
    let restart_at = next.load(Ordering::SeqCst);
    let c2 = Server::start(&c_template);
    let restarted_at = next.load(Ordering::SeqCst);
    sent_at_least(restarted_at + 4_000);
    stop.store(true, Ordering::SeqCst);
    generator.join().expect("generator thread");
    let total = next.load(Ordering::SeqCst);

    // Everything acknowledged by B or C.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut acked = 0;
    for _ in 0..3000 {
        acked = a.metric("loghaul_component_sent_events_total", "fwd", None);
        if acked >= total || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        acked >= total,
        "A's fluent sink has {acked} of {total} events acknowledged after 30s"
    );

    let numbers_in = |s: &Server| -> Vec<u64> {
        read_lines(&s.out())
            .iter()
            .map(|l| trailing_number(message(l)))
            .collect()
    };
    let (in_b, in_c1, in_c2) = (numbers_in(&b), numbers_in(&c1), numbers_in(&c2));
    let all: Vec<u64> = [&in_b[..], &in_c1[..], &in_c2[..]].concat();
    let in_range = |v: &[u64], r: std::ops::Range<u64>| v.iter().filter(|n| r.contains(n)).count();
    let phase2 = restart_at - killed_at;
    let b_phase2 = in_range(&in_b, killed_at..restart_at);
    let dups = assert_each_at_least_once(&all, total, "events across B and C");
    eprintln!(
        "chain: {total} events sent; C killed at #{killed_at}, restarted at #{restart_at}..#{restarted_at}; \
         B holds {} ({b_phase2} of the {phase2} sent while C was down), C before the kill {}, C after the restart {}; \
         {dups} duplicates",
        in_b.len(),
        in_c1.len(),
        in_c2.len()
    );
    assert!(
        in_range(&in_c1, 0..killed_at) > 0 && in_range(&in_b, 0..killed_at) > 0,
        "before the kill both servers should receive events (round robin)"
    );
    assert!(
        b_phase2 as u64 * 2 >= phase2,
        "the load did not move to B while C was down: B has {b_phase2} of the {phase2} events sent then"
    );
    assert!(
        in_range(&in_c2, restarted_at..total) > 0,
        "C received no event sent after it came back ({} events in its file)",
        in_c2.len()
    );
    for s in [&a, &b, &c2] {
        s.assert_healthy();
    }
    a.finish();
    b.finish();
    c2.finish();
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// Regression: a server that accepts and then stops reading held the sink's write, and every
/// request behind it, for ever (the ack deadline was not watched during a write). Now the
/// deadline covers the write: the server is marked down and its requests go to the standby,
/// with nothing lost.
#[test]
fn a_server_that_stops_reading_is_failed_over() {
    const COUNT: u64 = 150_000;
    let hung = TcpListener::bind("127.0.0.1:0").expect("bind the hung server");
    let hung_port = hung.local_addr().expect("hung server address").port();
    let held: Arc<Mutex<Vec<TcpStream>>> = Arc::new(Mutex::new(Vec::new()));
    {
        let held = held.clone();
        std::thread::spawn(move || {
            // Accepts and keeps every connection open, and never reads a byte.
            for stream in hung.incoming().flatten() {
                if let Ok(mut h) = held.lock() {
                    h.push(stream);
                }
            }
        });
    }
    let b = Server::start(FLUENT_TO_FILE);
    let a = Server::start(
        &r#"api: { address: "127.0.0.1:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}" }
sinks:
  fwd:
    type: fluent
    inputs: [tcp_in]
    servers: [{ address: "127.0.0.1:{HUNG}" }, { address: "127.0.0.1:{B}", standby: true }]
    require_ack: true
    ack_timeout: 1s
    reconnect_max_interval: 30s
    # Room for more requests than the hung server's socket buffers take, so a write blocks.
    max_in_flight: 64
"#
        .replace("{HUNG}", &hung_port.to_string())
        .replace("{B}", &b.ports.tcp.to_string()),
    );
    // Long lines, so that the requests for the hung server outgrow its socket buffers.
    let filler = "x".repeat(150);
    let mut wire = String::with_capacity(COUNT as usize * 200);
    for i in 0..COUNT {
        wire.push_str(&line3164(&format!("{filler} hung seq {i}")));
    }
    send_tcp(a.ports.tcp, wire.as_bytes());
    let out = b.path("out.jsonl");
    let acked = || a.metric("loghaul_component_sent_events_total", "fwd", None) >= COUNT;
    let count = wait_line_count(&out, COUNT as usize, Duration::from_secs(60), acked, || {
        format!(
            "A sent {} events; A's stderr:\n{}",
            a.metric("loghaul_component_sent_events_total", "fwd", None),
            tail(&a.stderr(), 2000)
        )
    });
    let numbers = sequence_numbers(&out);
    let dups = assert_each_at_least_once(
        &numbers,
        COUNT,
        "events behind a server that stopped reading",
    );
    println!("{count} lines for {COUNT} events, {dups} duplicates");
    assert!(
        a.metric(
            "loghaul_component_errors_total",
            "fwd",
            Some("kind=\"ack\"")
        ) >= 1,
        "the stalled server was not counted as an ack failure"
    );
    drop(held);
    a.finish();
    b.finish();
}

/// Checks the output lines of `run` against what the tap saw its client send: each of the
/// `count` events exactly once, with `tag`, every field of its record as sent, and its time to
/// the nanosecond. The panic names the first differences.
fn check_exactly_once(
    lines: &[Value],
    sent: &[Sent],
    what: &str,
    run: &str,
    tag: &str,
    count: u64,
) {
    let mut by_n: BTreeMap<u64, &Sent> = BTreeMap::new();
    let mut sent_numbers = Vec::new();
    for s in sent {
        let n =
            s.json.get("n").and_then(Value::as_u64).unwrap_or_else(|| {
                panic!("{what}: the client sent a record without n: {}", s.json)
            });
        sent_numbers.push(n);
        by_n.insert(n, s);
    }
    assert_each_once(
        &sent_numbers,
        count,
        &format!("{what}: events the client sent"),
    );

    let mine: Vec<&Value> = lines.iter().filter(|l| l["run"] == json!(run)).collect();
    let numbers: Vec<u64> = mine.iter().map(|l| number(l)).collect();
    assert_each_once(&numbers, count, &format!("{what}: events in the file"));

    let mut problems = Vec::new();
    for line in mine {
        let n = number(line);
        let s = by_n[&n];
        let mut wrong = Vec::new();
        if s.tag != tag {
            wrong.push(format!("the client sent tag {:?}, not {tag:?}", s.tag));
        }
        if line["tag"] != json!(tag) {
            wrong.push(format!("tag {} (want {tag:?})", line["tag"]));
        }
        let record = s.json.as_object().expect("a record is a map");
        for (k, v) in record {
            if &line[k] != v {
                wrong.push(format!("field {k:?} is {} (sent {v})", line[k]));
            }
        }
        let extra: Vec<&String> = line
            .as_object()
            .expect("object")
            .keys()
            .filter(|k| !record.contains_key(*k) && !LOGHAUL_KEYS.contains(&k.as_str()))
            .collect();
        if !extra.is_empty() {
            wrong.push(format!("unexpected keys {extra:?}"));
        }
        if line["source_type"] != json!("fluent") {
            wrong.push(format!("source_type {}", line["source_type"]));
        }
        let got = exact_time(line);
        if got != s.time {
            wrong.push(format!(
                "time {:?} = {got:?}, sent {:?}",
                line["timestamp"], s.time
            ));
        }
        if !wrong.is_empty() {
            problems.push(format!(
                "#{n}: {}\n    {}",
                wrong.join("; "),
                truncate_json(line, 400)
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{what}: {} of {count} events differ from what was sent; the first:\n{}",
        problems.len(),
        problems
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Asserts every number in `0..n` is in `numbers` (and nothing else is); returns how many
/// lines are duplicates. The panic lists the first missing numbers.
fn assert_each_at_least_once(numbers: &[u64], n: u64, what: &str) -> usize {
    let (counts, out_of_range) = tally(numbers, n);
    let missing: Vec<u64> = (0..n).filter(|&i| counts[i as usize] == 0).collect();
    let dup_lines: usize = counts.iter().map(|&c| c.saturating_sub(1) as usize).sum();
    assert!(
        missing.is_empty() && out_of_range.is_empty(),
        "{what}: {} lines for {n} numbers; {} missing (first {:?}), {} out of range (first {:?}), {dup_lines} duplicate lines",
        numbers.len(),
        missing.len(),
        &missing[..missing.len().min(10)],
        out_of_range.len(),
        &out_of_range[..out_of_range.len().min(10)],
    );
    dup_lines
}

/// The line's `n` field.
fn number(line: &Value) -> u64 {
    line["n"]
        .as_u64()
        .unwrap_or_else(|| panic!("line without a numeric n: {}", truncate_json(line, 400)))
}

/// The line's `timestamp` as exact (unix seconds, nanoseconds).
fn exact_time(line: &Value) -> (i64, u32) {
    let ts = line["timestamp"]
        .as_str()
        .unwrap_or_else(|| panic!("line without a timestamp: {}", truncate_json(line, 400)));
    let (whole, frac) = match ts.strip_suffix('Z').and_then(|t| t.split_once('.')) {
        Some((w, f)) => (format!("{w}Z"), f),
        None => (ts.to_owned(), ""),
    };
    assert!(
        frac.len() <= 9 && frac.bytes().all(|b| b.is_ascii_digit()),
        "timestamp {ts:?}: more than nanoseconds"
    );
    let (secs, _) = parse_rfc3339_utc(&whole);
    let nanos = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().expect("digits")
    };
    (secs as i64, nanos)
}

/// A run id no other client run shares.
fn run_id(what: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// Waits until `path` holds at least `n` lines (counting newlines only), then until `settled`
/// holds (the sender has every event acknowledged, so nothing can be sent again); returns the
/// count. `context` says what to print beside a timeout.
fn wait_line_count(
    path: &Path,
    n: usize,
    timeout: Duration,
    settled: impl Fn() -> bool,
    context: impl Fn() -> String,
) -> usize {
    let deadline = Instant::now() + timeout;
    let mut count = 0;
    for _ in 0..100_000 {
        count = fs::read(path)
            .map(|b| b.iter().filter(|&&c| c == b'\n').count())
            .unwrap_or(0);
        if count >= n || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        count >= n,
        "{} holds {count} lines after {timeout:?}, expected {n}; {}",
        path.display(),
        context()
    );
    // A duplicate comes from a chunk sent again for want of its ack: once every event is
    // acknowledged, whatever was sent twice has been written.
    while !settled() {
        assert!(
            Instant::now() < deadline,
            "the sender has not settled within {timeout:?}; {}",
            context()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    fs::read(path)
        .map(|b| b.iter().filter(|&&c| c == b'\n').count())
        .unwrap_or(count)
}

// ---------------------------------------------------------------------------------------------
// The clients
// ---------------------------------------------------------------------------------------------

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// `path`, or a panic saying how to install it.
fn installed(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is not installed ({} is missing): run scripts/install-clients.sh (see tests/clients/README.md)",
        path.display()
    );
    path
}

pub(crate) fn python_sender() -> Command {
    let dir = clients_dir().join("python");
    let python = installed(dir.join(".venv/bin/python"), "PyPI fluent-logger");
    let mut cmd = Command::new(python);
    cmd.arg(dir.join("send.py"));
    cmd
}

pub(crate) fn node_script(script: &str) -> Command {
    let dir = clients_dir().join("node");
    installed(
        dir.join("node_modules/@fluent-org/logger/package.json"),
        "npm @fluent-org/logger",
    );
    let mut cmd = Command::new("node");
    cmd.arg(dir.join(script));
    cmd
}

fn node_sender() -> Command {
    node_script("send.mjs")
}

pub(crate) fn go_sender() -> Command {
    Command::new(installed(
        clients_dir().join("go/bin/fluent-go-send"),
        "fluent-logger-golang (fluent-go-send)",
    ))
}

/// Starts receive.mjs writing to `out`; waits for its `listening PORT` line.
fn start_receiver(out: &Path, extra: &[&str]) -> (Client, u16) {
    let mut last = String::new();
    for _attempt in 0..3 {
        let port = free_tcp_port();
        let mut client = Client::spawn(
            "receive.mjs (FluentServer)",
            node_script("receive.mjs")
                .args(["--port", &port.to_string(), "--out"])
                .arg(out)
                .args(extra),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        for _ in 0..2000 {
            if client.stdout().contains(&format!("listening {port}")) {
                return (client, port);
            }
            if client.poll().is_some() || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        last = client.stderr();
        if !last.contains("EADDRINUSE") {
            break;
        }
    }
    panic!(
        "receive.mjs did not start listening; stderr:\n{}",
        tail(&last, 2000)
    );
}

/// A client program running as a child process. Killed on drop; when the test is failing, its
/// stderr and stdout are printed.
struct Client {
    name: String,
    child: Option<Child>,
    status: Option<ExitStatus>,
    dir: tempfile::TempDir,
}

impl Client {
    fn spawn(name: &str, cmd: &mut Command) -> Client {
        let dir = tempfile::Builder::new()
            .prefix("loghaul-it-client-")
            .tempdir()
            .expect("temp dir");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(fs::File::create(dir.path().join("stdout")).expect("stdout file"))
            .stderr(fs::File::create(dir.path().join("stderr")).expect("stderr file"))
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {name} ({cmd:?}): {e}; run scripts/install-clients.sh")
            });
        Client {
            name: name.to_owned(),
            child: Some(child),
            status: None,
            dir,
        }
    }

    fn stdout(&self) -> String {
        fs::read_to_string(self.dir.path().join("stdout")).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// The exit status if it has exited.
    fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none()
            && let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            self.status = Some(status);
            self.child = None;
        }
        self.status
    }

    /// Waits (at most `timeout`) for the exit.
    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        for _ in 0..1_000_000 {
            if let Some(status) = self.poll() {
                return status;
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "{} did not finish within {timeout:?}; stderr:\n{}",
            self.name,
            tail(&self.stderr(), 3000)
        );
    }

    /// Waits for a successful exit; returns the JSON summary (its last stdout line), which
    /// must say `count` events were sent.
    fn wait_success(&mut self, timeout: Duration, count: u64) -> Value {
        let status = self.wait(timeout);
        assert!(
            status.success(),
            "{} exited with {status}; stderr:\n{}",
            self.name,
            tail(&self.stderr(), 3000)
        );
        let stdout = self.stdout();
        let last = stdout.lines().last().unwrap_or_default();
        let summary: Value = serde_json::from_str(last).unwrap_or_else(|e| {
            panic!(
                "{}: last stdout line is no JSON summary ({e}): {last:?}",
                self.name
            )
        });
        assert_eq!(summary["sent"], json!(count), "{}: {summary}", self.name);
        summary
    }

    /// Waits for a failed exit; returns its stderr.
    fn wait_failure(&mut self, timeout: Duration) -> String {
        let status = self.wait(timeout);
        assert!(
            !status.success(),
            "{} should have failed but exited 0; stdout:\n{}",
            self.name,
            self.stdout()
        );
        self.stderr()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- {} ({}) stderr ---\n{}\n--- stdout (tail) ---\n{}",
                self.name,
                self.status
                    .map_or("killed".to_owned(), |s| format!("exited with {s}")),
                tail(&self.stderr(), 4000),
                tail(&self.stdout(), 2000)
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The tap: a TCP relay that keeps what clients send
// ---------------------------------------------------------------------------------------------

/// The bytes one connection's client sent.
type Recording = Arc<Mutex<Vec<u8>>>;

/// Relays every connection to 127.0.0.1:`port` to loghaul's port, both ways, and keeps a copy
/// of the bytes each client sent. A close on either side is passed on.
struct Tap {
    port: u16,
    sent: Arc<Mutex<Vec<Recording>>>,
    sockets: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl Tap {
    fn start(upstream: u16) -> Tap {
        let listener = TcpListener::bind("127.0.0.1:0").expect("tap: bind");
        listener.set_nonblocking(true).expect("tap: nonblocking");
        let port = listener.local_addr().expect("tap: local_addr").port();
        let sent: Arc<Mutex<Vec<Recording>>> = Arc::default();
        let sockets: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (sent, sockets, stop) = (sent.clone(), sockets.clone(), stop.clone());
            std::thread::spawn(move || {
                // At most ten minutes.
                for _ in 0..120_000 {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    match listener.accept() {
                        Ok((client, _)) => {
                            let record = Arc::new(Mutex::new(Vec::new()));
                            sent.lock().unwrap().push(record.clone());
                            relay(client, upstream, record, &sockets);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        Tap {
            port,
            sent,
            sockets,
            stop,
            accept: Some(accept),
        }
    }

    /// The bytes each connection's client sent so far.
    fn streams(&self) -> Vec<Vec<u8>> {
        self.sent
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.lock().unwrap().clone())
            .collect()
    }

    /// Every event the clients sent, decoded.
    fn sent_events(&self) -> Vec<Sent> {
        self.streams()
            .iter()
            .flat_map(|s| requests(s))
            .flat_map(|r| r.events)
            .collect()
    }

    /// (requests, requests with a `chunk` option) the clients sent.
    fn request_counts(&self) -> (u64, u64) {
        let all: Vec<Request> = self.streams().iter().flat_map(|s| requests(s)).collect();
        let chunked = all.iter().filter(|r| r.chunk.is_some()).count();
        (all.len() as u64, chunked as u64)
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for s in self
            .sockets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = s.shutdown(Shutdown::Both);
        }
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// Copies `client` to loghaul and back on two threads, appending the client's bytes to `record`.
fn relay(client: TcpStream, upstream: u16, record: Recording, sockets: &Mutex<Vec<TcpStream>>) {
    let _ = client.set_nonblocking(false);
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return; // dropping `client` closes it, as a refused connection would
    };
    let _ = server.set_nodelay(true);
    let _ = client.set_nodelay(true);
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    {
        let mut list = sockets.lock().unwrap();
        for s in [&client, &server] {
            if let Ok(s) = s.try_clone() {
                list.push(s);
            }
        }
    }
    std::thread::spawn(move || pump(client, server, Some(record)));
    std::thread::spawn(move || pump(s2, c2, None));
}

/// Copies `from` to `to` until `from` ends; then ends `to`'s write side.
fn pump(mut from: TcpStream, mut to: TcpStream, record: Option<Recording>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                if let Some(r) = &record {
                    r.lock().unwrap().extend_from_slice(&buf[..n]);
                }
                if to.write_all(&buf[..n]).is_err() {
                    let _ = from.shutdown(Shutdown::Both);
                    return;
                }
            }
            Err(_) => {
                let _ = to.shutdown(Shutdown::Both);
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A small msgpack reader and writer, independent of loghaul's codec
// ---------------------------------------------------------------------------------------------

/// A msgpack value.
#[derive(Debug, Clone, PartialEq)]
enum Mp {
    Nil,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(Vec<u8>),
    Bin(Vec<u8>),
    Array(Vec<Mp>),
    Map(Vec<(Mp, Mp)>),
    Ext(i8, Vec<u8>),
}

impl Mp {
    fn str(s: &str) -> Mp {
        Mp::Str(s.as_bytes().to_vec())
    }

    fn get(&self, key: &str) -> Option<&Mp> {
        match self {
            Mp::Map(entries) => entries
                .iter()
                .find(|(k, _)| *k == Mp::str(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// As JSON, the way loghaul writes a record (str and bin as strings).
    fn to_json(&self) -> Value {
        match self {
            Mp::Nil => Value::Null,
            Mp::Bool(b) => json!(b),
            Mp::Int(i) if *i >= 0 => json!(*i as u64),
            Mp::Int(i) => json!(*i as i64),
            Mp::Float(f) => json!(f),
            Mp::Str(s) | Mp::Bin(s) => json!(String::from_utf8_lossy(s)),
            Mp::Array(a) => Value::Array(a.iter().map(Mp::to_json).collect()),
            Mp::Map(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| {
                        let key = match k {
                            Mp::Str(s) => String::from_utf8_lossy(s).into_owned(),
                            other => panic!("a record key that is no str: {other:?}"),
                        };
                        (key, v.to_json())
                    })
                    .collect(),
            ),
            Mp::Ext(t, b) => panic!("an ext value (type {t}, {} bytes) in a record", b.len()),
        }
    }
}

/// Reads msgpack values one after the other.
struct Rd<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Rd<'a> {
    fn new(buf: &'a [u8]) -> Rd<'a> {
        Rd { buf, pos: 0 }
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }

    fn uint(&mut self, n: usize) -> Option<u64> {
        Some(
            self.take(n)?
                .iter()
                .fold(0u64, |a, &b| a << 8 | u64::from(b)),
        )
    }

    fn items(&mut self, n: usize) -> Option<Vec<Mp>> {
        (0..n).map(|_| self.value()).collect()
    }

    fn pairs(&mut self, n: usize) -> Option<Vec<(Mp, Mp)>> {
        (0..n)
            .map(|_| Some((self.value()?, self.value()?)))
            .collect()
    }

    /// The next complete value; `None` at the end (or inside an incomplete value). The position
    /// moves only past complete values.
    fn next(&mut self) -> Option<Mp> {
        let start = self.pos;
        let v = self.value();
        if v.is_none() {
            self.pos = start;
        }
        v
    }

    fn value(&mut self) -> Option<Mp> {
        let b = self.take(1)?[0];
        Some(match b {
            0x00..=0x7f => Mp::Int(b.into()),
            0x80..=0x8f => Mp::Map(self.pairs(usize::from(b & 0x0f))?),
            0x90..=0x9f => Mp::Array(self.items(usize::from(b & 0x0f))?),
            0xa0..=0xbf => Mp::Str(self.take(usize::from(b & 0x1f))?.to_vec()),
            0xc0 => Mp::Nil,
            0xc1 => panic!("msgpack byte 0xc1 (never used) at offset {}", self.pos - 1),
            0xc2 => Mp::Bool(false),
            0xc3 => Mp::Bool(true),
            0xc4..=0xc6 => {
                let n = self.uint(1 << (b - 0xc4))? as usize;
                Mp::Bin(self.take(n)?.to_vec())
            }
            0xc7..=0xc9 => {
                let n = self.uint(1 << (b - 0xc7))? as usize;
                let t = self.take(1)?[0] as i8;
                Mp::Ext(t, self.take(n)?.to_vec())
            }
            0xca => Mp::Float(f64::from(f32::from_bits(self.uint(4)? as u32))),
            0xcb => Mp::Float(f64::from_bits(self.uint(8)?)),
            0xcc..=0xcf => Mp::Int(self.uint(1 << (b - 0xcc))?.into()),
            0xd0..=0xd3 => {
                let n = 1usize << (b - 0xd0);
                let shift = 64 - 8 * n as u32;
                Mp::Int((((self.uint(n)? << shift) as i64) >> shift).into())
            }
            0xd4..=0xd8 => {
                let t = self.take(1)?[0] as i8;
                Mp::Ext(t, self.take(1 << (b - 0xd4))?.to_vec())
            }
            0xd9..=0xdb => {
                let n = self.uint(1 << (b - 0xd9))? as usize;
                Mp::Str(self.take(n)?.to_vec())
            }
            0xdc | 0xdd => {
                let n = self.uint(if b == 0xdc { 2 } else { 4 })? as usize;
                Mp::Array(self.items(n)?)
            }
            0xde | 0xdf => {
                let n = self.uint(if b == 0xde { 2 } else { 4 })? as usize;
                Mp::Map(self.pairs(n)?)
            }
            0xe0..=0xff => Mp::Int((b as i8).into()),
        })
    }
}

/// One event a client sent.
#[derive(Debug)]
struct Sent {
    tag: String,
    /// (unix seconds, nanoseconds)
    time: (i64, u32),
    /// Whether the time was an EventTime (else an integer).
    event_time: bool,
    json: Value,
}

/// One request a client sent.
struct Request {
    chunk: Option<Mp>,
    events: Vec<Sent>,
}

/// The forward requests in one connection's client bytes (a PING is skipped), in every mode.
fn requests(stream: &[u8]) -> Vec<Request> {
    let mut rd = Rd::new(stream);
    let mut out = Vec::new();
    for _ in 0..10_000_000 {
        let Some(value) = rd.next() else { break };
        let Mp::Array(parts) = value else {
            continue; // a heartbeat (nil)
        };
        let tag = match parts.first() {
            Some(Mp::Str(t)) if t == b"PING" => continue,
            Some(Mp::Str(t)) => String::from_utf8_lossy(t).into_owned(),
            other => panic!("the tap saw a request whose tag is no str: {other:?}"),
        };
        let event = |time: &Mp, record: &Mp| -> Sent {
            let (time, event_time) = match time {
                Mp::Int(s) => ((i64::try_from(*s).expect("time fits i64"), 0), false),
                Mp::Ext(0, b) if b.len() == 8 => {
                    let secs = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                    let nanos = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
                    ((i64::from(secs), nanos), true)
                }
                other => panic!("the tap saw a time that is no integer or EventTime: {other:?}"),
            };
            Sent {
                tag: tag.clone(),
                time,
                event_time,
                json: record.to_json(),
            }
        };
        let (events, option) = match &parts[1..] {
            [Mp::Array(entries), option @ ..] => (
                entries
                    .iter()
                    .map(|e| match e {
                        Mp::Array(tr) if tr.len() == 2 => event(&tr[0], &tr[1]),
                        other => panic!(
                            "the tap saw a Forward entry that is no [time, record]: {other:?}"
                        ),
                    })
                    .collect::<Vec<_>>(),
                option.first(),
            ),
            [Mp::Str(blob) | Mp::Bin(blob), option @ ..] => {
                let option = option.first();
                let gzip = option.and_then(|o| o.get("compressed")) == Some(&Mp::str("gzip"));
                let raw = if gzip {
                    let mut raw = Vec::new();
                    flate2::read::MultiGzDecoder::new(&blob[..])
                        .read_to_end(&mut raw)
                        .expect("the tap saw a CompressedPackedForward blob that is no gzip");
                    raw
                } else {
                    blob.clone()
                };
                let mut entries = Rd::new(&raw);
                let mut events = Vec::new();
                while let Some(e) = entries.next() {
                    match e {
                        Mp::Array(tr) if tr.len() == 2 => events.push(event(&tr[0], &tr[1])),
                        other => panic!(
                            "the tap saw a packed entry that is no [time, record]: {other:?}"
                        ),
                    }
                }
                assert_eq!(
                    entries.pos,
                    raw.len(),
                    "the tap saw a packed blob with a partial entry"
                );
                (events, option)
            }
            [time, record, option @ ..] => (vec![event(time, record)], option.first()),
            other => panic!("the tap saw a request it cannot read: {other:?}"),
        };
        out.push(Request {
            chunk: option.and_then(|o| o.get("chunk")).cloned(),
            events,
        });
    }
    out
}

/// Reads one msgpack message from `s` (at most `timeout`).
fn read_one_message(s: &mut TcpStream, timeout: Duration) -> Mp {
    s.set_read_timeout(Some(timeout)).expect("read timeout");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    for _ in 0..10_000 {
        if let Some(v) = Rd::new(&buf).next() {
            return v;
        }
        match s.read(&mut chunk) {
            Ok(0) => panic!("the connection closed before a whole message: {buf:?}"),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => panic!("no whole message within {timeout:?} ({e}): {buf:?}"),
        }
    }
    panic!("no whole message in {} bytes", buf.len());
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    assert!(s.len() < 256, "a short string");
    if s.len() < 32 {
        out.push(0xa0 | s.len() as u8);
    } else {
        out.extend_from_slice(&[0xd9, s.len() as u8]);
    }
    out.extend_from_slice(s.as_bytes());
}

fn write_u32(out: &mut Vec<u8>, v: u32) {
    out.push(0xce);
    out.extend_from_slice(&v.to_be_bytes());
}

/// `[tag, bin(entries), {"size": N, "chunk": chunk}]`, one entry
/// `[now, {"n": i, "message": "raw i", "run": run}]` for each `i` in `numbers`.
fn packed_forward_request(
    tag: &str,
    run: &str,
    numbers: std::ops::Range<u32>,
    chunk: &str,
) -> Vec<u8> {
    let now = now_unix() as u32;
    let mut entries = Vec::new();
    for i in numbers.clone() {
        entries.extend_from_slice(&[0x92]);
        write_u32(&mut entries, now);
        entries.push(0x83);
        write_str(&mut entries, "n");
        write_u32(&mut entries, i);
        write_str(&mut entries, "message");
        write_str(&mut entries, &format!("raw {i}"));
        write_str(&mut entries, "run");
        write_str(&mut entries, run);
    }
    let mut out = vec![0x93];
    write_str(&mut out, tag);
    out.push(0xc6);
    out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    out.extend_from_slice(&entries);
    out.push(0x82);
    write_str(&mut out, "size");
    write_u32(&mut out, numbers.len() as u32);
    write_str(&mut out, "chunk");
    write_str(&mut out, chunk);
    out
}
