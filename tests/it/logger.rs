//! util-linux `logger` (a real client) sends RFC 3164 and RFC 5424 over TCP (newline
//! and octet-counted framing) and UDP; the file holds exactly the expected fields.
//!
//! What logger 2.38 puts on the wire (captured with a raw listener on this machine):
//!
//! ```text
//! --rfc3164 --tcp              <156>Nov 22 03:23:03 vm APP[1234]: hello world\n
//! --rfc3164 --tcp --octet-count 46 <156>Nov 22 03:23:04 vm APP[1234]: hello world
//! --rfc5424=notq --tcp         <156>1 2026-11-22T03:23:04.830001+00:00 vm APP 1234 ID47 [exampleSDID@32473 iut="3"] hello world\n
//! --rfc5424 --octet-count      134 <156>1 2026-...+00:00 vm APP 1234 ID47 [timeQuality tzKnown="1" isSynced="0"][exampleSDID@32473 iut="3"] hello world
//! --udp                        the same without framing, one datagram
//! ```
//!
//! RFC 3164 carries neither msgid nor structured data (logger silently drops `--msgid` and
//! `--sd-*` there), so those fields must be absent, not null.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;

#[derive(Clone, Copy, PartialEq)]
enum Rfc {
    R3164,
    R5424,
    /// Plain `--rfc5424`: logger adds `[timeQuality ...]`.
    R5424Tq,
}

/// Runs logger against the server with the issue's standard options and returns the one event
/// it produced, after checking every field.
fn logger_roundtrip(rfc: Rfc, transport: &str, octet_count: bool) {
    assert!(
        std::path::Path::new(LOGGER).exists(),
        "{LOGGER} is missing: run scripts/install-peers.sh (util-linux logger, Debian package bsdutils)"
    );
    let server = Server::start(&syslog_config(""));
    let port = if transport == "--udp" {
        server.ports.udp
    } else {
        server.ports.tcp
    };
    let msg = format!(
        "logger {} {transport}{} héllo wörld",
        match rfc {
            Rfc::R3164 => "rfc3164",
            Rfc::R5424 => "rfc5424-notq",
            Rfc::R5424Tq => "rfc5424",
        },
        if octet_count { " octet-count" } else { "" }
    );
    let mut cmd = Command::new(LOGGER);
    cmd.env("TZ", "UTC")
        .arg("--server")
        .arg("127.0.0.1")
        .arg("--port")
        .arg(port.to_string())
        .arg(transport)
        .arg(match rfc {
            Rfc::R3164 => "--rfc3164",
            Rfc::R5424 => "--rfc5424=notq",
            Rfc::R5424Tq => "--rfc5424",
        });
    if octet_count {
        cmd.arg("--octet-count");
    }
    cmd.args([
        "-t",
        "APP",
        "--id=1234",
        "-p",
        "local3.warning",
        "--msgid",
        "ID47",
    ]);
    if rfc != Rfc::R3164 {
        cmd.args(["--sd-id", "exampleSDID@32473", "--sd-param", "iut=\"3\""]);
    }
    cmd.arg(&msg);
    let before = now_unix();
    let out = run_bounded(&mut cmd, Duration::from_secs(20));
    let after = now_unix();
    assert!(out.status.success(), "logger failed: {}", output_text(&out));

    let events = wait_lines(&server.out(), 1, ARRIVE_TIMEOUT);
    assert_eq!(
        events.len(),
        1,
        "expected exactly one event, got {events:?}"
    );
    let e = &events[0];
    assert_no_nulls(e);
    assert_eq!(flags(e), Vec::<String>::new(), "no flags expected: {e}");

    let host = kernel_hostname();
    // logger sends the short name in RFC 3164 and the full name in RFC 5424.
    let short = host.split('.').next().unwrap_or(&host).to_string();
    let sd_expected = json!({"exampleSDID@32473": {"iut": "3"}});
    match rfc {
        Rfc::R3164 => {
            assert_keys(
                e,
                &[
                    "timestamp",
                    "hostname",
                    "appname",
                    "procid",
                    "facility",
                    "severity",
                    "message",
                    "source_ip",
                    "source_type",
                ],
            );
            assert_eq!(e["hostname"], json!(short), "hostname: {e}");
        }
        Rfc::R5424 | Rfc::R5424Tq => {
            assert_keys(
                e,
                &[
                    "timestamp",
                    "hostname",
                    "appname",
                    "procid",
                    "msgid",
                    "facility",
                    "severity",
                    "version",
                    "structured_data",
                    "message",
                    "source_ip",
                    "source_type",
                ],
            );
            assert_eq!(e["hostname"], json!(host), "hostname: {e}");
            assert_eq!(e["msgid"], json!("ID47"), "msgid: {e}");
            assert_eq!(e["version"], json!(1), "version: {e}");
            if rfc == Rfc::R5424 {
                assert_eq!(e["structured_data"], sd_expected, "structured_data: {e}");
            } else {
                let sd = e["structured_data"]
                    .as_object()
                    .unwrap_or_else(|| panic!("structured_data not an object: {e}"));
                assert_eq!(sd.len(), 2, "two SD elements expected: {e}");
                assert_eq!(
                    sd["exampleSDID@32473"], sd_expected["exampleSDID@32473"],
                    "structured_data: {e}"
                );
                let tq = sd["timeQuality"]
                    .as_object()
                    .unwrap_or_else(|| panic!("timeQuality missing: {e}"));
                assert_eq!(
                    tq.get("tzKnown"),
                    Some(&json!("1")),
                    "timeQuality.tzKnown: {e}"
                );
                let synced = tq.get("isSynced").and_then(Value::as_str);
                assert!(
                    matches!(synced, Some("0" | "1")),
                    "timeQuality.isSynced: {e}"
                );
                for k in tq.keys() {
                    assert!(
                        ["tzKnown", "isSynced", "syncAccuracy"].contains(&k.as_str()),
                        "unexpected timeQuality param {k}: {e}"
                    );
                }
            }
        }
    }
    assert_eq!(e["appname"], json!("APP"), "appname: {e}");
    assert_eq!(e["procid"], json!("1234"), "procid: {e}");
    assert_eq!(e["facility"], json!("local3"), "facility: {e}");
    assert_eq!(e["severity"], json!("warning"), "severity: {e}");
    assert_eq!(e["message"], json!(msg), "message: {e}");
    assert_eq!(e["source_ip"], json!("127.0.0.1"), "source_ip: {e}");
    assert_eq!(e["source_type"], json!("syslog"), "source_type: {e}");

    // logger stamps the time it sends: RFC 3164 in whole seconds (TZ=UTC so the zone-less
    // stamp means UTC), RFC 5424 with microseconds, which must be kept as sent.
    let ts = e["timestamp"]
        .as_str()
        .unwrap_or_else(|| panic!("timestamp not a string: {e}"));
    let (secs, digits) = parse_rfc3339_utc(ts);
    let want_digits = if rfc == Rfc::R3164 { 0 } else { 6 };
    assert_eq!(digits, want_digits, "sub-second digits of timestamp {ts}");
    assert!(
        secs >= before.floor() - 1.0 && secs <= after + 1.0,
        "timestamp {ts} ({secs}) is not the time logger ran ({before}..{after})"
    );

    let source = if transport == "--udp" {
        "udp_in"
    } else {
        "tcp_in"
    };
    server.wait_metric("loghaul_component_received_events_total", source, None, 1);
    assert_eq!(
        server.metric("loghaul_component_received_events_total", source, None),
        1
    );
    assert_eq!(
        server.metric("loghaul_component_errors_total", source, None),
        0,
        "no errors expected"
    );
    server.finish();
}

#[test]
fn logger_rfc3164_tcp() {
    logger_roundtrip(Rfc::R3164, "--tcp", false);
}

#[test]
fn logger_rfc3164_tcp_octet_count() {
    logger_roundtrip(Rfc::R3164, "--tcp", true);
}

#[test]
fn logger_rfc5424_tcp() {
    logger_roundtrip(Rfc::R5424, "--tcp", false);
}

#[test]
fn logger_rfc5424_tcp_octet_count() {
    logger_roundtrip(Rfc::R5424, "--tcp", true);
}

#[test]
fn logger_rfc5424_time_quality_tcp_octet_count() {
    logger_roundtrip(Rfc::R5424Tq, "--tcp", true);
}

#[test]
fn logger_rfc5424_time_quality_tcp() {
    logger_roundtrip(Rfc::R5424Tq, "--tcp", false);
}

#[test]
fn logger_rfc3164_udp() {
    logger_roundtrip(Rfc::R3164, "--udp", false);
}

#[test]
fn logger_rfc5424_udp() {
    logger_roundtrip(Rfc::R5424, "--udp", false);
}

/// A burst larger than the UDP socket's receive buffer, sent by logger while loghaul is stopped:
/// the kernel drops most of it, and loghaul reports exactly those drops. Every datagram is either
/// written or counted in `kernel_dropped_datagrams_total`, and the operator is told why.
#[test]
fn kernel_udp_drops_are_counted_exactly() {
    const SENT: u64 = 2000;
    let server = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  udp_in: { type: syslog, mode: udp, address: "127.0.0.1:{UDP}", receive_buffer: 4KiB }
sinks:
  out: { type: file, inputs: [udp_in], path: "{DIR}/out.jsonl", encoding: json, flush_interval: 100ms }
"#,
    );
    let drops = "loghaul_component_kernel_dropped_datagrams_total";
    assert_eq!(server.metric(drops, "udp_in", None), 0);
    let lines: String = (0..SENT)
        .map(|i| format!("kernel drop seq {i}\n"))
        .collect();
    let file = server.path("burst.txt");
    std::fs::write(&file, lines).expect("writing the burst file");

    server.signal("STOP");
    let mut cmd = Command::new(LOGGER);
    cmd.args(["--server", "127.0.0.1", "--port"])
        .arg(server.ports.udp.to_string())
        .args(["--udp", "--rfc3164", "-t", "APP", "-f"])
        .arg(&file);
    let out = run_bounded(&mut cmd, Duration::from_secs(20));
    assert!(out.status.success(), "logger failed: {}", output_text(&out));
    wait_udp_queue_settled(server.ports.udp);
    server.signal("CONT");

    // Drops are read once a second: wait until every datagram is accounted for.
    let deadline = std::time::Instant::now() + ARRIVE_TIMEOUT;
    let (mut received, mut dropped) = (0, 0);
    while std::time::Instant::now() < deadline {
        received = server.metric("loghaul_component_received_events_total", "udp_in", None);
        dropped = server.metric(drops, "udp_in", None);
        if received + dropped >= SENT {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        (received + dropped, dropped > 0),
        (SENT, true),
        "received {received} + kernel-dropped {dropped} must be the {SENT} sent, with drops \
         (a 4KiB buffer holds a few datagrams)"
    );
    let events = wait_lines(&server.out(), received as usize, ARRIVE_TIMEOUT);
    let mut seqs: Vec<u64> = events.iter().map(|e| trailing_number(message(e))).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(
        (events.len() as u64, seqs.len() as u64),
        (received, received),
        "every received datagram is written, once"
    );
    assert!(
        seqs.iter().all(|&s| s < SENT),
        "unexpected sequence numbers: {seqs:?}"
    );
    let stderr = server.stderr();
    assert!(
        stderr.contains("The kernel dropped datagrams")
            && stderr.contains(&format!("dropped={dropped}")),
        "no warning with the drop count in stderr:\n{}",
        tail(&stderr, 2000)
    );
}

/// `timezone: local` end to end: logger writes its local time (RFC 3164 carries no zone), and
/// loghaul, in the same zone from `TZ`, turns it back into the right UTC instant. Five hours
/// east of UTC, so a source that ignored the zone would be five hours off.
#[test]
fn logger_local_time_with_timezone_local() {
    const TZ: &str = "XYZ-5";
    let server = Server::start_with_env(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  udp_in: { type: syslog, mode: udp, address: "127.0.0.1:{UDP}", timezone: local }
sinks:
  out: { type: file, inputs: [udp_in], path: "{DIR}/out.jsonl", encoding: json, flush_interval: 100ms }
"#,
        &[("TZ", TZ)],
    );
    let mut cmd = Command::new(LOGGER);
    cmd.env("TZ", TZ)
        .args(["--server", "127.0.0.1", "--port"])
        .arg(server.ports.udp.to_string())
        .args(["--udp", "--rfc3164", "-t", "APP", "local zone"]);
    let before = now_unix();
    let out = run_bounded(&mut cmd, Duration::from_secs(20));
    assert!(out.status.success(), "logger failed: {}", output_text(&out));
    let events = wait_lines(&server.out(), 1, ARRIVE_TIMEOUT);
    let ts = events[0]["timestamp"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (secs, _) = parse_rfc3339_utc(&ts);
    // RFC 3164 has whole seconds: the instant is within a few seconds of the send.
    assert!(
        (secs - before).abs() < 10.0,
        "timestamp {ts} is {:.0}s from the send time (expected the same instant)",
        secs - before
    );
}
