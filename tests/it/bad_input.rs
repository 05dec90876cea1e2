//! Hostile and broken syslog input, one regression test each. Every test asserts three things:
//! (a) a well-behaved client sending during or after the bad one is still served (its event
//! arrives), (b) the matching metric counted the bad input, and (c) the server did not crash:
//! `/health` is 200 at the end and SIGTERM ends it with exit 0.
//!
//! The two config items of the list (unknown key, dangling input) are in `validate.rs`.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;

use crate::harness::*;

const ERRORS: &str = "loghaul_component_errors_total";
const HEADER: &str = "<13>Oct 11 22:14:15 host app: ";

/// (a): a good client on its own connection is served; returns the lines read so far.
fn good_client_is_served(server: &Server, tag: &str) -> Vec<serde_json::Value> {
    let msg = format!("good client {tag}");
    send_tcp(server.ports.tcp, line3164(&msg).as_bytes());
    let lines = wait_for_line(&server.out(), &format!("message {msg:?}"), |v| {
        v["message"] == json!(msg)
    });
    let e = find_message(&lines, &msg);
    assert!(
        flags(e).is_empty(),
        "the good client's event has flags: {e}"
    );
    assert_eq!(e["appname"], json!("app"), "the good client's event: {e}");
    lines
}

/// An octet-counted frame (RFC 6587 §3.4.1).
fn octet(msg: &str) -> String {
    format!("{} {msg}", msg.len())
}

#[test]
fn bad_input_binary_garbage() {
    let server = Server::start(&syslog_config(""));
    let garbage = pseudo_random_bytes(0x5eed_1234, 256 * 1024);
    assert!(garbage.contains(&0), "the garbage should contain NULs");
    let mut bad = connect(server.ports.tcp);
    bad.write_all(&garbage[..128 * 1024])
        .expect("write garbage");
    good_client_is_served(&server, "while garbage is open");
    bad.write_all(&garbage[128 * 1024..])
        .expect("write garbage");
    drop(bad);
    let lines = good_client_is_served(&server, "after garbage");

    // Every line is a JSON object (wait_for_line parsed them all); garbage became flagged events.
    assert!(
        lines.iter().any(|e| !flags(e).is_empty()),
        "no flagged event from 256KiB of garbage; lines:\n{}",
        lines
            .iter()
            .map(|v| truncate_json(v, 200))
            .collect::<Vec<_>>()
            .join("\n")
    );
    for e in &lines {
        assert_no_nulls(e);
        assert_eq!(
            e["source_type"],
            json!("syslog"),
            "{}",
            truncate_json(e, 300)
        );
    }
    server.wait_metric(ERRORS, "tcp_in", Some("kind=\"invalid_utf8\""), 1);
    server.finish();
}

#[test]
fn bad_input_10mb_line_without_newline() {
    let server = Server::start(&syslog_config(", max_length: 100KiB"));
    good_client_is_served(&server, "before the long line");
    let base_kib = server.peak_rss_kib();

    let mut s = connect(server.ports.tcp);
    s.write_all(HEADER.as_bytes()).expect("write header");
    let chunk = vec![b'x'; 64 * 1024];
    for i in 0..160 {
        s.write_all(&chunk).expect("write the long line");
        if i == 80 {
            good_client_is_served(&server, "while the 10MB line is being sent");
        }
    }
    s.write_all(b"\n").expect("end the long line");
    s.write_all(line3164("good after the 10MB line").as_bytes())
        .expect("write good line");
    drop(s);

    let lines = wait_for_line(&server.out(), "the line after the 10MB line", |v| {
        v["message"] == json!("good after the 10MB line")
    });
    let cut: Vec<&serde_json::Value> = lines.iter().filter(|e| !flags(e).is_empty()).collect();
    assert_eq!(
        cut.len(),
        1,
        "exactly one flagged (truncated) event expected, got {}",
        cut.len()
    );
    let e = cut[0];
    assert_eq!(
        flags(e),
        vec!["truncated"],
        "flags of the cut line: {}",
        truncate_json(e, 300)
    );
    let msg = message(e);
    assert!(
        msg.bytes().all(|b| b == b'x'),
        "the cut message holds more than the x's sent"
    );
    assert_eq!(
        msg.len(),
        100 * 1024 - HEADER.len(),
        "the frame must be cut at max_length (102400 bytes including the {}-byte header)",
        HEADER.len()
    );
    assert_eq!(
        e["appname"],
        json!("app"),
        "the cut line keeps its header: {}",
        truncate_json(e, 300)
    );
    assert_eq!(lines.len(), 4, "events: before, while, cut line, after");

    server.wait_metric(ERRORS, "tcp_in", Some("kind=\"oversized\""), 1);
    assert_eq!(
        server.metric(ERRORS, "tcp_in", Some("kind=\"oversized\"")),
        1
    );
    // Memory stays bounded: the server never held the 10MB line.
    let grown_kib = server.peak_rss_kib().saturating_sub(base_kib);
    assert!(
        grown_kib < 8 * 1024,
        "peak RSS grew by {grown_kib} KiB while a 10MB line arrived (max_length is 100KiB)"
    );
    server.finish();
}

#[test]
fn bad_input_octet_count_above_max_length() {
    let server = Server::start(&syslog_config(", max_length: 1KiB"));
    let big = format!("{HEADER}{}", "y".repeat(3000));
    let mut s = connect(server.ports.tcp);
    s.write_all(octet(&big).as_bytes())
        .expect("write oversized frame");
    good_client_is_served(&server, "while the oversized frame is open");
    s.write_all(octet(&format!("{HEADER}good after the oversized frame")).as_bytes())
        .expect("write good frame");
    drop(s);

    let lines = wait_for_line(&server.out(), "the frame after the oversized one", |v| {
        v["message"] == json!("good after the oversized frame")
    });
    let cut: Vec<&serde_json::Value> = lines.iter().filter(|e| !flags(e).is_empty()).collect();
    assert_eq!(cut.len(), 1, "exactly one truncated event expected");
    assert_eq!(
        flags(cut[0]),
        vec!["truncated"],
        "{}",
        truncate_json(cut[0], 300)
    );
    assert_eq!(
        message(cut[0]),
        "y".repeat(1024 - HEADER.len()),
        "the oversized frame is cut at max_length (1024 bytes including the header)"
    );
    assert!(flags(find_message(&lines, "good after the oversized frame")).is_empty());
    assert_eq!(lines.len(), 3, "events: good client, cut frame, good frame");
    server.wait_metric(ERRORS, "tcp_in", Some("kind=\"oversized\""), 1);
    assert_eq!(
        server.metric(ERRORS, "tcp_in", Some("kind=\"oversized\"")),
        1
    );
    server.finish();
}

#[test]
fn bad_input_octet_count_with_non_digits() {
    let server = Server::start(&syslog_config(""));
    let mut s = connect(server.ports.tcp);
    s.write_all(format!("12a {HEADER}weird count\n").as_bytes())
        .expect("write bad count");
    s.write_all(line3164("good after the bad count").as_bytes())
        .expect("write good line");
    good_client_is_served(&server, "beside the bad count");
    drop(s);
    let lines = wait_for_line(&server.out(), "the line after the bad count", |v| {
        v["message"] == json!("good after the bad count")
    });
    assert!(flags(find_message(&lines, "good after the bad count")).is_empty());
    // Not lost: the malformed frame is kept as an event holding its text.
    assert!(
        lines.iter().any(|e| e["message"]
            .as_str()
            .is_some_and(|m| m.contains("weird count"))),
        "the frame with the bad count was lost; events:\n{}",
        lines
            .iter()
            .map(|v| truncate_json(v, 200))
            .collect::<Vec<_>>()
            .join("\n")
    );
    server.wait_metric(ERRORS, "tcp_in", Some("kind=\"framing\""), 1);
    assert_eq!(server.metric(ERRORS, "tcp_in", Some("kind=\"framing\"")), 1);
    server.finish();
}

#[test]
fn bad_input_zero_length_frame() {
    let server = Server::start(&syslog_config(""));
    let mut s = connect(server.ports.tcp);
    let wire = format!(
        "0 {}0 {}",
        octet(&format!("{HEADER}first after an empty frame")),
        line3164("second after an empty frame")
    );
    s.write_all(wire.as_bytes()).expect("write frames");
    good_client_is_served(&server, "beside empty frames");
    drop(s);
    let lines = wait_for_line(&server.out(), "the second frame", |v| {
        v["message"] == json!("second after an empty frame")
    });
    assert!(flags(find_message(&lines, "first after an empty frame")).is_empty());
    assert!(flags(find_message(&lines, "second after an empty frame")).is_empty());
    assert_eq!(lines.len(), 3, "empty frames must produce no events");
    server.wait_metric(ERRORS, "tcp_in", Some("kind=\"framing\""), 2);
    assert_eq!(server.metric(ERRORS, "tcp_in", Some("kind=\"framing\"")), 2);
    server.finish();
}

#[test]
fn bad_input_invalid_utf8() {
    let server = Server::start(&syslog_config(""));
    let mut wire: Vec<u8> = Vec::new();
    wire.extend_from_slice(b"<13>Oct 11 22:14:15 host app: bad \xff\xfe utf8 \xc3\x28 end\n");
    wire.extend_from_slice(
        b"<13>1 2026-01-02T03:04:05Z ho\xffst app5424 - - [id k=\"v\xff\"] msg \xe2\x82\n",
    );
    wire.extend_from_slice(line3164("good after invalid utf8").as_bytes());
    send_tcp(server.ports.tcp, &wire);
    let lines = wait_for_line(&server.out(), "the line after invalid UTF-8", |v| {
        v["message"] == json!("good after invalid utf8")
    });
    assert_eq!(lines.len(), 3, "three events expected");
    let e = find_message(&lines, "bad \u{FFFD}\u{FFFD} utf8 \u{FFFD}( end");
    assert_eq!(flags(e), vec!["invalid_utf8"], "{e}");
    assert_eq!(e["appname"], json!("app"), "{e}");
    let e = find_message(&lines, "msg \u{FFFD}");
    assert_eq!(flags(e), vec!["invalid_utf8"], "{e}");
    assert_eq!(e["hostname"], json!("ho\u{FFFD}st"), "{e}");
    assert_eq!(e["appname"], json!("app5424"), "{e}");
    assert_eq!(
        e["structured_data"],
        json!({"id": {"k": "v\u{FFFD}"}}),
        "{e}"
    );
    assert!(flags(find_message(&lines, "good after invalid utf8")).is_empty());
    good_client_is_served(&server, "after invalid utf8");
    server.wait_metric(ERRORS, "tcp_in", Some("kind=\"invalid_utf8\""), 2);
    assert_eq!(
        server.metric(ERRORS, "tcp_in", Some("kind=\"invalid_utf8\"")),
        2,
        "one invalid_utf8 error per event"
    );
    assert_eq!(
        server.metric(ERRORS, "tcp_in", Some("kind=\"parse\"")),
        0,
        "invalid UTF-8 is not a parse error"
    );
    server.finish();
}

#[test]
fn bad_input_client_connects_and_sends_nothing() {
    let mut server = Server::start(&syslog_config(""));
    let silent = connect(server.ports.tcp);
    server.wait_metric_eq("loghaul_open_connections", "tcp_in", None, 1);
    good_client_is_served(&server, "beside a silent client");
    server.wait_metric_eq("loghaul_open_connections", "tcp_in", None, 1);
    server.assert_healthy();
    // The silent client must not hold shutdown up until shutdown_timeout (30s by default).
    server.stop_within(Duration::from_secs(10));
    drop(silent);
}

#[test]
fn bad_input_client_disconnects_mid_frame() {
    let server = Server::start(&syslog_config(""));
    send_tcp(
        server.ports.tcp,
        format!("{HEADER}partial line without newline").as_bytes(),
    );
    send_tcp(
        server.ports.tcp,
        format!("200 {HEADER}cut short").as_bytes(),
    );
    let lines = good_client_is_served(&server, "after partial frames");
    let lines = if lines.len() < 3 {
        wait_lines(&server.out(), 3, ARRIVE_TIMEOUT)
    } else {
        lines
    };
    let e = find_message(&lines, "partial line without newline");
    assert!(
        flags(e).is_empty(),
        "a newline-framed line cut by EOF is complete: {e}"
    );
    assert_eq!(e["appname"], json!("app"), "{e}");
    let e = find_message(&lines, "cut short");
    assert_eq!(
        flags(e),
        vec!["truncated"],
        "an octet-counted frame cut by EOF is truncated: {e}"
    );
    assert_eq!(lines.len(), 3);
    server.wait_metric(ERRORS, "tcp_in", None, 1);
    server.finish();
}

#[test]
fn bad_input_2000_simultaneous_connections() {
    const N: usize = 2000;
    let (soft, hard) = raise_nofile_limit();
    assert!(
        soft >= 4500,
        "this test opens {N} sockets and needs RLIMIT_NOFILE >= 4500 (soft {soft}, hard {hard}); run the tests under `ulimit -n 65536` as .ci/run does"
    );
    let server = Server::start(&syslog_config(", max_connections: 10000"));
    let mut conns: Vec<TcpStream> = (0..N).map(|_| connect(server.ports.tcp)).collect();
    server.wait_metric_eq("loghaul_open_connections", "tcp_in", None, N as u64);
    for (i, s) in conns.iter_mut().enumerate() {
        s.write_all(line3164(&format!("connection {i}")).as_bytes())
            .expect("write");
    }
    drop(conns);
    let lines = wait_raw_lines(&server.out(), N, Duration::from_secs(60));
    let numbers: Vec<u64> = lines
        .iter()
        .map(|l| trailing_number(message(&parse_line(l))))
        .collect();
    assert_each_once(&numbers, N as u64, "2000 connections");
    assert_eq!(
        server.metric(ERRORS, "tcp_in", Some("kind=\"connection_limit\"")),
        0
    );
    server.wait_metric_eq("loghaul_open_connections", "tcp_in", None, 0);
    good_client_is_served(&server, "after 2000 connections");
    server.finish();
}
