//! Events cross forward hops unchanged: syslog events sent to an agent are written by the agent
//! itself (the direct path) and forwarded agent → deliver → receiver (three loghaul processes);
//! the receiver's JSON must equal the direct JSON field by field, origin (`source_type`,
//! `source_ip`) and timestamp precision included, with the hop's own `tag` as the one addition.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::harness::*;

fn fluent_to(port: u16) -> String {
    format!(
        "type: fluent, servers: [{{ address: \"127.0.0.1:{port}\" }}], ack_timeout: 3s, connect_timeout: 1s, reconnect_max_interval: 500ms"
    )
}

/// What each process writes or forwards: a receiver into `{DIR}/out.jsonl`, a deliver on to the
/// receiver, and an agent into `{DIR}/out.jsonl` (direct) and on to the deliver.
fn receiver() -> String {
    r#"api: { address: "127.0.0.1:{API}" }
sources:
  fwd: { type: fluent, address: "127.0.0.1:{TCP}" }
sinks:
  out: { type: file, inputs: [fwd], path: "{DIR}/out.jsonl", encoding: json, flush_interval: 50ms }
"#
    .to_string()
}

fn deliver(receiver: u16) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  fwd: {{ type: fluent, address: "127.0.0.1:{{TCP}}" }}
sinks:
  next: {{ inputs: [fwd], {} }}
"#,
        fluent_to(receiver)
    )
}

/// A deliver that also writes what it forwards into `{DIR}/out.jsonl`: its file sink reads the
/// records, so none pass through undecoded.
fn deliver_writing(receiver: u16) -> String {
    format!(
        "{}  copy: {{ type: file, inputs: [fwd], path: \"{{DIR}}/out.jsonl\", encoding: json, flush_interval: 50ms }}\n",
        deliver(receiver)
    )
}

fn agent(deliver: u16) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  tcp_in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}" }}
  udp_in: {{ type: syslog, mode: udp, address: "127.0.0.1:{{UDP}}" }}
sinks:
  out: {{ type: file, inputs: [tcp_in, udp_in], path: "{{DIR}}/out.jsonl", encoding: json, flush_interval: 50ms }}
  up: {{ inputs: [tcp_in, udp_in], {} }}
"#,
        fluent_to(deliver)
    )
}

fn logger(port: u16, args: &[&str]) {
    let mut cmd = logger_tcp(port);
    cmd.env("TZ", "UTC").args(args);
    let out = run_bounded(&mut cmd, Duration::from_secs(20));
    assert!(out.status.success(), "logger failed: {}", output_text(&out));
}

/// Events by their `message` (every test event has its own).
fn by_message(events: &[Value]) -> BTreeMap<String, &serde_json::Map<String, Value>> {
    let mut map = BTreeMap::new();
    for e in events {
        let obj = e.as_object().expect("an event is a JSON object");
        let prev = map.insert(message(e).to_string(), obj);
        assert!(
            prev.is_none(),
            "two events carry the message {:?}",
            message(e)
        );
    }
    map
}

#[test]
fn a_syslog_event_arrives_through_agent_deliver_receiver_as_it_left() {
    let receiver = Server::start(&receiver());
    let deliver = Server::start(&deliver(receiver.ports.tcp));
    let agent = Server::start(&agent(deliver.ports.tcp));

    // Real clients: util-linux logger in both formats, with structured data and a sender's
    // microsecond time.
    logger(
        agent.ports.tcp,
        &[
            "--rfc5424",
            "-t",
            "APP",
            "--id=1234",
            "-p",
            "local3.warning",
            "--msgid",
            "ID47",
            "--sd-id",
            "exampleSDID@32473",
            "--sd-param",
            r#"iut="3""#,
            "--sd-param",
            r#"quoted="a \"b\" c""#,
            "logger rfc5424 héllo wörld",
        ],
    );
    logger(
        agent.ports.tcp,
        &[
            "--rfc3164",
            "-t",
            "cron",
            "-p",
            "cron.info",
            "logger rfc3164 job done",
        ],
    );
    send_tcp(agent.ports.tcp, &raw_frames());
    const N: usize = 7;

    let direct = wait_lines(&agent.out(), N, ARRIVE_TIMEOUT);
    let through = wait_lines(&receiver.out(), N, ARRIVE_TIMEOUT);
    assert_eq!(direct.len(), N, "direct: {direct:?}");
    assert_eq!(through.len(), N, "through the tree: {through:?}");
    let direct = by_message(&direct);
    let through = by_message(&through);
    assert_same(&direct, &through);
    // The deliver passed the records on as they came, and the receiver still read them whole.
    assert_eq!(
        deliver.metric(
            "loghaul_fluent_sink_passed_through_events_total",
            "next",
            None
        ),
        N as u64
    );
    // Precision kept: what the sender wrote, not nine digits.
    let ts = |m: &str| {
        direct[m]["timestamp"]
            .as_str()
            .expect("timestamp")
            .to_string()
    };
    assert_eq!(ts("raw rfc5424 millis"), "2003-10-12T05:14:15.003Z");
    assert_eq!(ts("raw rfc5424 micros"), "2026-11-27T10:00:00.123450Z");
    assert!(
        !ts("raw bsd  doubled  spaces").contains('.'),
        "a BSD time has no fraction: {}",
        ts("raw bsd  doubled  spaces")
    );
    // The BSD form with a space after the PRI keeps its hostname and tag.
    let bsd = direct["raw bsd  doubled  spaces"];
    assert_eq!(bsd["hostname"], "router01", "{bsd:?}");
    assert_eq!(bsd["appname"], "sshd", "{bsd:?}");
    assert_eq!(bsd["procid"], "42", "{bsd:?}");

    agent.finish();
    deliver.finish();
    receiver.finish();
}

/// A deliver with a reader of records beside its forward sink decodes them for that reader
/// only: its own file holds the same events as the receiver's, and as the agent's.
#[test]
fn a_deliver_that_also_writes_decodes_the_records_for_its_file() {
    let receiver = Server::start(&receiver());
    let deliver = Server::start(&deliver_writing(receiver.ports.tcp));
    let agent = Server::start(&agent(deliver.ports.tcp));
    send_tcp(agent.ports.tcp, &raw_frames());
    const N: usize = 5;
    let direct = wait_lines(&agent.out(), N, ARRIVE_TIMEOUT);
    let through = wait_lines(&receiver.out(), N, ARRIVE_TIMEOUT);
    let copy = wait_lines(&deliver.out(), N, ARRIVE_TIMEOUT);
    assert_eq!(
        (direct.len(), through.len(), copy.len()),
        (N, N, N),
        "{direct:?} {through:?} {copy:?}"
    );
    let direct = by_message(&direct);
    assert_same(&direct, &by_message(&through));
    assert_same(&direct, &by_message(&copy));
    assert_eq!(
        deliver.metric(
            "loghaul_fluent_sink_passed_through_events_total",
            "next",
            None
        ),
        0
    );
    agent.finish();
    deliver.finish();
    receiver.finish();
}

/// Raw frames for what logger cannot send: a time with three digits and an offset, one with a
/// trailing zero in its six, a BSD line as network devices write it (a space after the PRI,
/// doubled spaces), a line that is not syslog, and bytes that are not UTF-8.
fn raw_frames() -> Vec<u8> {
    let mut raw = Vec::new();
    raw.extend_from_slice(
        b"<165>1 2003-10-11T22:14:15.003-07:00 mymachine.example.com evntslog - ID47 \
          [exampleSDID@32473 iut=\"3\" eventSource=\"Application\"][examplePriority@32473 class=\"high\"] \
          raw rfc5424 millis\n",
    );
    raw.extend_from_slice(
        b"<14>1 2026-11-27T10:00:00.123450Z web01 nginx 77 - - raw rfc5424 micros\n",
    );
    raw.extend_from_slice(b"<132> Apr  4 12:00:00 router01 sshd[42]: raw bsd  doubled  spaces\n");
    raw.extend_from_slice(b"raw not syslog at all\n");
    raw.extend_from_slice(b"<13>Nov 27 10:00:00 host app: raw invalid \xff\xfe utf8\n");
    raw
}

/// The tree's events against the direct ones, field by field: the same, but for the forward
/// tag each hop adds, and with the origin written as a direct receiver writes it.
fn assert_same(
    direct: &BTreeMap<String, &serde_json::Map<String, Value>>,
    through: &BTreeMap<String, &serde_json::Map<String, Value>>,
) {
    assert_eq!(
        direct.keys().collect::<Vec<_>>(),
        through.keys().collect::<Vec<_>>()
    );
    for (msg, d) in direct {
        let mut t = (*through.get(msg).expect("same messages")).clone();
        // The hop's own metadata, under its own name: the forward tag.
        assert_eq!(
            t.remove("tag"),
            Some(Value::from("loghaul.syslog")),
            "the tree's event carries the first hop's tag: {t:?}"
        );
        assert_eq!(&t, *d, "{msg:?} changed on its way through the tree");
        // The origin, written as a direct receiver would.
        assert_eq!(t["source_type"], "syslog", "{t:?}");
        assert_eq!(t["source_ip"], "127.0.0.1", "{t:?}");
    }
}
