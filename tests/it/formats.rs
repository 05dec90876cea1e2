//! Wire formats end to end (socket in, JSON line out): the RFC 5424 section 6.5 examples,
//! structured-data escapes, BOM, numeric offsets, RFC 3164 variants, `strict`, `timezone`, and the
//! file sink's `encoding: text`. The parsers' own unit tests cover the edge cases in depth; these
//! check that what the parser gets right survives the pipeline and the JSON encoder.

use serde_json::{Value, json};

use crate::harness::*;

/// Sends `lines` (each newline-terminated) over one TCP connection and returns the `n` events.
fn roundtrip(server: &Server, wire: &[u8], n: usize) -> Vec<Value> {
    send_tcp(server.ports.tcp, wire);
    let lines = wait_lines(&server.out(), n, ARRIVE_TIMEOUT);
    assert_eq!(lines.len(), n, "events: {lines:?}");
    for e in &lines {
        assert_no_nulls(e);
    }
    lines
}

/// The year an RFC 3164 timestamp `MM-DDTHH:MM:SS` (no year, UTC) gets: this year, or the
/// previous one when this year would put it more than a day in the future.
fn year_3164(rest: &str) -> i64 {
    let now = now_unix();
    let this_year: i64 = {
        // Find the current UTC year: the largest y with Jan 1 y <= now.
        let mut y = 1970;
        for cand in 1970..3000 {
            if parse_rfc3339_utc(&format!("{cand}-01-01T00:00:00Z")).0 <= now {
                y = cand;
            } else {
                break;
            }
        }
        y
    };
    let t = parse_rfc3339_utc(&format!("{this_year}-{rest}Z")).0;
    if t > now + 86_400.0 {
        this_year - 1
    } else {
        this_year
    }
}

#[test]
fn rfc5424_section_6_5_examples() {
    let server = Server::start(&syslog_config(""));
    let mut wire: Vec<u8> = Vec::new();
    // Example 1 (with the BOM the RFC shows before MSG).
    wire.extend_from_slice(
        b"<34>1 2003-10-11T22:14:15.003Z mymachine.example.com su - ID47 - \xEF\xBB\xBF'su root' failed for lonvick on /dev/pts/8\n",
    );
    // Example 2.
    wire.extend_from_slice(
        b"<165>1 2003-08-24T05:14:15.000003-07:00 192.0.2.1 myproc 8710 - - %% It's time to make the do-nuts.\n",
    );
    // Example 3.
    wire.extend_from_slice(
        b"<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"1011\"] \xEF\xBB\xBFAn application event log entry...\n",
    );
    // Example 4: structured data only, no MSG.
    wire.extend_from_slice(
        b"<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"1011\"][examplePriority@32473 class=\"high\"]\n",
    );
    let ev = roundtrip(&server, &wire, 4);

    let e = &ev[0];
    assert_eq!(e["facility"], json!("auth"), "{e}");
    assert_eq!(e["severity"], json!("crit"), "{e}");
    assert_eq!(e["version"], json!(1), "{e}");
    assert_eq!(e["timestamp"], json!("2003-10-11T22:14:15.003Z"), "{e}");
    assert_eq!(e["hostname"], json!("mymachine.example.com"), "{e}");
    assert_eq!(e["appname"], json!("su"), "{e}");
    assert_eq!(e["msgid"], json!("ID47"), "{e}");
    assert_eq!(
        e["message"],
        json!("'su root' failed for lonvick on /dev/pts/8"),
        "BOM must be stripped: {e}"
    );
    assert!(
        e.get("procid").is_none() && e.get("structured_data").is_none(),
        "NILVALUE fields are absent: {e}"
    );
    assert!(flags(e).is_empty(), "{e}");

    let e = &ev[1];
    assert_eq!(e["facility"], json!("local4"), "{e}");
    assert_eq!(e["severity"], json!("notice"), "{e}");
    assert_eq!(
        e["timestamp"],
        json!("2003-08-24T12:14:15.000003Z"),
        "numeric offset converted to UTC: {e}"
    );
    assert_eq!(e["hostname"], json!("192.0.2.1"), "{e}");
    assert_eq!(e["appname"], json!("myproc"), "{e}");
    assert_eq!(e["procid"], json!("8710"), "{e}");
    assert!(e.get("msgid").is_none(), "{e}");
    assert_eq!(
        e["message"],
        json!("%% It's time to make the do-nuts."),
        "{e}"
    );

    let e = &ev[2];
    assert_eq!(
        e["structured_data"],
        json!({"exampleSDID@32473": {"iut": "3", "eventSource": "Application", "eventID": "1011"}}),
        "{e}"
    );
    assert_eq!(
        e["message"],
        json!("An application event log entry..."),
        "{e}"
    );

    let e = &ev[3];
    assert_eq!(
        e["structured_data"],
        json!({
            "exampleSDID@32473": {"iut": "3", "eventSource": "Application", "eventID": "1011"},
            "examplePriority@32473": {"class": "high"}
        }),
        "{e}"
    );
    assert_eq!(
        e["message"],
        json!(""),
        "no MSG: message present and empty: {e}"
    );
    assert_eq!(
        server.metric("loghaul_component_errors_total", "tcp_in", None),
        0
    );
    server.finish();
}

#[test]
fn rfc5424_structured_data_escapes() {
    let server = Server::start(&syslog_config(""));
    let wire = br#"<13>1 2026-01-02T03:04:05Z host app - - [esc@1 q="a\"b" br="x\]y" bs="c\\d" u="h\u00e9"][two@1 k="v"] escaped
"#;
    let ev = roundtrip(&server, wire, 1);
    let e = &ev[0];
    assert_eq!(
        e["structured_data"],
        json!({"esc@1": {"q": "a\"b", "br": "x]y", "bs": "c\\d", "u": "h\\u00e9"}, "two@1": {"k": "v"}}),
        "{e}"
    );
    assert_eq!(e["message"], json!("escaped"), "{e}");
    assert!(flags(e).is_empty(), "{e}");
    server.finish();
}

#[test]
fn rfc3164_variants() {
    let server = Server::start(&syslog_config(""));
    let wire = b"<13>Oct  1 02:03:04 host app[42]: single-digit day\n\
<30>2026-01-02T03:04:05.123+01:00 host daemon: iso timestamp in 3164\n\
<14>Oct 11 22:14:15 host app: colon: in the message\n";
    let ev = roundtrip(&server, wire, 3);
    let e = &ev[0];
    assert_eq!(
        e["timestamp"],
        json!(format!("{}-10-01T02:03:04Z", year_3164("10-01T02:03:04"))),
        "{e}"
    );
    assert_eq!(e["hostname"], json!("host"), "{e}");
    assert_eq!(e["appname"], json!("app"), "{e}");
    assert_eq!(e["procid"], json!("42"), "{e}");
    assert_eq!(e["message"], json!("single-digit day"), "{e}");
    let e = &ev[1];
    assert_eq!(e["timestamp"], json!("2026-01-02T02:04:05.123Z"), "{e}");
    assert_eq!(e["facility"], json!("daemon"), "{e}");
    assert_eq!(e["severity"], json!("info"), "{e}");
    assert_eq!(e["appname"], json!("daemon"), "{e}");
    assert_eq!(e["message"], json!("iso timestamp in 3164"), "{e}");
    let e = &ev[2];
    assert_eq!(e["message"], json!("colon: in the message"), "{e}");
    for e in &ev {
        assert!(flags(e).is_empty(), "{e}");
        assert!(
            e.get("version").is_none() && e.get("msgid").is_none(),
            "{e}"
        );
    }
    server.finish();
}

#[test]
fn strict_rfc5424_keeps_a_bsd_line_as_raw_text_flagged() {
    let server = Server::start(&syslog_config(", format: rfc5424, strict: true"));
    let line = "<13>Oct 11 22:14:15 host app: not rfc 5424";
    let ev = roundtrip(
        &server,
        format!("{line}\n<13>1 2026-01-02T03:04:05Z host app - - - fine\n").as_bytes(),
        2,
    );
    let e = find_message(&ev, line);
    assert_eq!(flags(e), vec!["parse_error"], "{e}");
    assert_eq!(e["source_ip"], json!("127.0.0.1"), "{e}");
    assert!(flags(find_message(&ev, "fine")).is_empty());
    server.wait_metric(
        "loghaul_component_errors_total",
        "tcp_in",
        Some("kind=\"parse\""),
        1,
    );
    assert_eq!(
        server.metric(
            "loghaul_component_errors_total",
            "tcp_in",
            Some("kind=\"parse\"")
        ),
        1
    );
    server.finish();
}

#[test]
fn timezone_applies_to_zoneless_timestamps() {
    let server = Server::start(&syslog_config(", timezone: \"+02:00\""));
    let wire = b"<13>Oct 11 22:14:15 host app: zoneless\n<13>1 2026-01-02T03:04:05+05:00 host app - - - zoned\n";
    let ev = roundtrip(&server, wire, 2);
    let year = year_3164("10-11T20:14:15");
    assert_eq!(
        find_message(&ev, "zoneless")["timestamp"],
        json!(format!("{year}-10-11T20:14:15Z")),
        "22:14:15 at +02:00 is 20:14:15 UTC"
    );
    assert_eq!(
        find_message(&ev, "zoned")["timestamp"],
        json!("2026-01-01T22:04:05Z"),
        "an explicit offset wins over the configured zone"
    );
    server.finish();
}

#[test]
fn file_sink_text_encoding_writes_the_message_only() {
    let server = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}" }
sinks:
  out: { type: file, inputs: [tcp_in], path: "{DIR}/out.txt", encoding: text, flush_interval: 100ms }
"#,
    );
    send_tcp(
        server.ports.tcp,
        format!(
            "{}{}",
            line3164("first text line"),
            line3164("second {\"json\": no}")
        )
        .as_bytes(),
    );
    let lines = wait_raw_lines(&server.path("out.txt"), 2, ARRIVE_TIMEOUT);
    let lines: Vec<String> = lines
        .iter()
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    assert_eq!(lines, ["first text line", "second {\"json\": no}"]);
    server.finish();
}
