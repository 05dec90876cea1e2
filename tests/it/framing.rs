//! Framing and `format: raw` end to end: several messages per UDP datagram, raw lines kept as
//! they are (even when they start with digits), octet counting with trailing newlines.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;

const RECEIVED: &str = "loghaul_component_received_events_total";
const ERRORS: &str = "loghaul_component_errors_total";

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
