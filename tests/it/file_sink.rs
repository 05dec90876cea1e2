//! The file sink: path templates (one file per field value and date, sanitised), reopening
//! after rotation (SIGUSR1 or SIGHUP, or a rename noticed by itself), a path that cannot be written, a full
//! disk, and a file left ending inside a line, which is cut back before anything is appended.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::acking_client::{AckingClient, Load, Output};
use crate::harness::*;

const TORN_TAILS: &str = "loghaul_file_sink_torn_tails_repaired_total";

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

fn signal_reopens_output_file_after_rename(signal: &str) {
    let server = Server::start(&syslog_config(""));
    let mut s = connect(server.ports.tcp);
    s.write_all(line3164("seq 0").as_bytes()).expect("write");
    wait_lines(&server.out(), 1, ARRIVE_TIMEOUT);
    let rotated = server.path("out.jsonl.1");
    std::fs::rename(server.out(), &rotated).expect("mv out.jsonl out.jsonl.1");
    server.signal(signal);
    rotation_keeps_order_and_loses_nothing(&server, s, 1, &rotated);
    server.finish();
}

#[test]
fn sigusr1_reopens_output_file_after_rename() {
    signal_reopens_output_file_after_rename("USR1");
}

/// SIGHUP reloads (here: an unchanged configuration) and reopens files as well.
#[test]
fn sighup_reopens_output_file_after_rename() {
    signal_reopens_output_file_after_rename("HUP");
}

/// `thread: own`: the sink on a thread of its own writes, reopens on SIGUSR1 after a rename
/// and loses nothing, as it does on the server's workers (the default, every other test here).
#[test]
fn a_file_sink_on_a_thread_of_its_own_writes_and_reopens() {
    let config = syslog_config("").replace(
        "flush_interval: 100ms",
        "flush_interval: 100ms, thread: own",
    );
    assert!(config.contains("thread: own"), "{config}");
    let server = Server::start(&config);
    let mut s = connect(server.ports.tcp);
    s.write_all(line3164("seq 0").as_bytes()).expect("write");
    wait_lines(&server.out(), 1, ARRIVE_TIMEOUT);
    assert!(
        server.thread_names().iter().any(|t| t == "sink-out"),
        "a thread named sink-out: {:?}",
        server.thread_names()
    );
    let rotated = server.path("out.jsonl.1");
    std::fs::rename(server.out(), &rotated).expect("mv out.jsonl out.jsonl.1");
    server.signal("USR1");
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
fn unopenable_file_sink_dead_letters_and_makes_health_503() {
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
    // A path that can never be opened: the event is a dead letter, not a loss.
    server.wait_metric("loghaul_dead_letter_events_total", "out", None, 1);
    let letters = std::fs::read_to_string(server.path("loghaul-data/dlq/out.jsonl"))
        .unwrap_or_else(|e| panic!("the dead-letter file: {e}"));
    let letter: Value = serde_json::from_str(letters.trim())
        .unwrap_or_else(|e| panic!("a dead letter is JSON ({e}): {letters}"));
    assert_eq!(
        letter["event"]["message"],
        json!("nowhere to go"),
        "{letters}"
    );
    assert!(
        letter["reason"]
            .as_str()
            .is_some_and(|r| r.contains("cannot open")),
        "{letters}"
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

/// The file sink's disk fills up mid-stream: it keeps the events, retries, is degraded while
/// full, and once space is freed writes every event exactly once with no torn line.
#[test]
fn file_sink_disk_full_keeps_retrying_and_loses_nothing() {
    let Some(disk) = Tmpfs::mount("4m") else {
        // Mounting needs root (CI runs as root); say so instead of passing silently.
        panic!("file_sink_disk_full: cannot mount a tmpfs (the tests run as root in CI)");
    };
    // Most of the disk taken by a file that is removed later: "space is freed".
    let filler = disk.0.join("filler");
    std::fs::write(&filler, vec![0u8; 3 * 1024 * 1024 + 512 * 1024]).unwrap();
    let out = disk.0.join("out.jsonl");
    let server = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  tcp_in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}", format: raw }}
sinks:
  out: {{ type: file, inputs: [tcp_in], path: "{}", encoding: json, flush_interval: 50ms }}
"#,
        out.display()
    ));
    // About 1.6MB of JSON: three times what is left on the disk.
    const N: u64 = 12_000;
    let port = server.ports.tcp;
    let sender = std::thread::spawn(move || {
        let mut s = connect(port);
        let mut text = String::new();
        for i in 0..N {
            text.push_str(&format!(
                "disk full test line with some padding to fill {i}\n"
            ));
        }
        s.write_all(text.as_bytes()).unwrap();
    });
    // The disk fills: the sink says so and keeps trying.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, body) = server.health();
        if code != 200 && body.contains("retrying") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sink never reported the full disk: {code} {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        server.metric(
            "loghaul_component_discarded_events_total",
            "out",
            Some("reason=\"write_failed\"")
        ),
        0,
        "nothing is discarded for a full disk"
    );
    // Free the space: everything arrives, once, and every line is whole JSON.
    std::fs::remove_file(&filler).unwrap();
    sender.join().unwrap();
    let lines = wait_raw_lines(&out, N as usize, Duration::from_secs(30));
    let numbers: Vec<u64> = lines
        .iter()
        .map(|l| trailing_number(message(&parse_line(l))))
        .collect();
    assert_each_once(&numbers, N, "events written after the disk filled up");
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.health().0 != 200 {
        assert!(Instant::now() < deadline, "healthy again after the retry");
        std::thread::sleep(Duration::from_millis(50));
    }
    server.finish();
    drop(disk);
}

/// A file whose last line a crash tore (the state `kill -9` in the middle of a write leaves):
/// the sink cuts the torn line before its first append, so every line is JSON, the torn one is
/// gone, the new events follow the last whole line, and the repair is logged and counted.
#[test]
fn file_sink_cuts_a_torn_last_line_before_appending() {
    let server = Server::start(&syslog_config(""));
    let whole = r#"{"timestamp":"2026-11-26T19:33:38Z","message":"whole before the crash"}"#;
    let torn = r#"{"timestamp":"2026-11-26T19:33:39Z","message":"torn by the cr"#;
    // The sink opens its file at its first event, so the file can be laid down now.
    std::fs::write(server.out(), format!("{whole}\n{torn}")).unwrap();
    send_tcp(
        server.ports.tcp,
        [line3164("after 1"), line3164("after 2")]
            .concat()
            .as_bytes(),
    );
    // The whole file is read again each time: a reader that kept its offset would read past
    // the cut (the file shrinks before it grows again).
    let deadline = Instant::now() + ARRIVE_TIMEOUT;
    let mut text = String::new();
    while !text.contains("after 2") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        text = std::fs::read_to_string(server.out()).unwrap();
    }
    assert!(text.ends_with('\n'), "the file ends inside a line: {text}");
    let lines: Vec<&[u8]> = text.lines().map(str::as_bytes).collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0], whole.as_bytes(), "{text}");
    let after: Vec<Value> = lines[1..].iter().map(|l| parse_line(l)).collect();
    assert_eq!(
        after.iter().map(message).collect::<Vec<_>>(),
        ["after 1", "after 2"],
        "{text}"
    );
    assert!(!text.contains("torn by the cr"), "{text}");
    assert_eq!(server.metric(TORN_TAILS, "out", None), 1);
    let stderr = server.stderr();
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("Cut a torn last line")
                && l.contains(&format!("bytes={}", torn.len()))),
        "no warning with the bytes cut:\n{}",
        tail(&stderr, 4000)
    );
    server.finish();
}

/// SIGTERM while the file sink's disk is full: the stop runs out of time with the sink still
/// retrying, and the file it leaves ends with a whole line, because a failed write's torn line
/// is cut back out at once. With space freed, a new start appends whole lines (it finds no
/// torn tail to repair), and every event the server acknowledged to a client that sends again
/// what was not acknowledged is in the file.
#[test]
fn file_sink_sigterm_on_a_full_disk_leaves_no_torn_line_and_loses_no_acknowledged_event() {
    let Some(disk) = Tmpfs::mount("4m") else {
        panic!(
            "file_sink_sigterm_on_a_full_disk: cannot mount a tmpfs (the tests run as root in CI)"
        );
    };
    let filler = disk.0.join("filler");
    std::fs::write(&filler, vec![0u8; 3 * 1024 * 1024 + 512 * 1024]).unwrap();
    let out = disk.0.join("out.jsonl");
    let mut server = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
shutdown_timeout: 2s
sources:
  fin: {{ type: fluent, address: "127.0.0.1:{{TCP}}" }}
sinks:
  out: {{ type: file, inputs: [fin], path: "{}", encoding: json, flush_interval: 50ms }}
"#,
        out.display()
    ));
    // About 2.4MB of JSON: far more than the 0.5MB left, and within the 4MB once it is freed.
    const N: u64 = 12_000;
    let client = AckingClient::spawn(
        server.ports.tcp,
        Load {
            per_request: 200,
            total: Some(N),
            pad: 80,
            pause: Duration::ZERO,
        },
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, body) = server.health();
        if code != 200 && body.contains("retrying") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sink never reported the full disk: {code} {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let acked_at_stop = client.acked_events();
    assert!(
        acked_at_stop < N,
        "everything was acknowledged on a full disk"
    );
    // The stop cannot finish the sink's writes; loghaul exits (non-zero) after
    // shutdown_timeout with the file as the retries left it.
    server.signal("TERM");
    assert!(
        server.wait_exit(STOP_TIMEOUT).is_some(),
        "loghaul did not exit within {STOP_TIMEOUT:?} of SIGTERM"
    );
    Output::read(&out, N).assert_every_line_whole("the file a stop on a full disk left");

    let held = server.hold_ports();
    std::fs::remove_file(&filler).unwrap();
    server.restart();
    drop(held);
    let all_acked = client.wait_acked(N, Duration::from_secs(60));
    let report = client.finish(Duration::from_secs(10));
    assert!(
        all_acked && report.error.is_none(),
        "not every event was acknowledged after space was freed: {} of {N}; {:?}",
        report.acked_seqs().len(),
        report.error
    );
    assert_eq!(
        server.metric(TORN_TAILS, "out", None),
        0,
        "the restart found a torn line to repair"
    );
    server.finish();
    let output = Output::read(&out, report.sent);
    output.assert_every_line_whole("after the restart");
    let missing = output.missing(&report.acked_seqs());
    assert!(
        missing.is_empty(),
        "{} acknowledged events are not in the output (first {:?})",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    eprintln!(
        "SIGTERM on a full disk: {acked_at_stop} of {N} events acknowledged at the stop; {} \
         reconnection(s), {} request(s) sent again; {} lines in the output",
        report.reconnects, report.resent_requests, output.lines
    );
    drop(disk);
}
