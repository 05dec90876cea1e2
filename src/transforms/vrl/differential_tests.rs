//! The fast path against the VRL runtime: random events (syslog lines through the syslog
//! decoder, JSON records through the HTTP decoder) through a corpus of programs on both paths
//! must give byte-identical output, dropped events included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use bytes::Bytes;
use loghaul_codec::http_body::{self, Format as BodyFormat};
use loghaul_codec::{DecodeOptions, DecodeStats, Decoder, Frame};
use loghaul_core::{EventBatch, Timestamp};
use proptest::prelude::*;

use crate::config::testing::{ok, transform};
use crate::metrics::ComponentMetrics;
use crate::transforms::TransformConfig;
use crate::transforms::remap::{RemapConfig, remap_batch};
use crate::transforms::vrl::Runner;

/// Programs whose every expression is in the fast path's subset.
const FAST: &[&str] = &[
    "true",
    ". |= parse_key_value!(.message)",
    ". |= parse_key_value!(.message)\n.user_name = del(.user)\ndel(.password)\n.env = \"prod\"",
    "pairs, err = parse_key_value(.message)\nif err == null { . |= pairs }\n.n = length!(.message)",
    // A parsed object nested, read by name, and merged into an event already changed.
    ".kv = parse_key_value!(.message)\n.first = .kv.user\n.z = 1\n. |= parse_key_value!(.message)",
    ".x = 1\ndel(.x)",
    ".a = del(.hostname)",
    ".appname = upcase!(.appname)",
    ".hostname = downcase(string!(.hostname))",
    ".severity = \"err\"",
    ".severity = 3",
    ".facility = \"local7\"",
    ".message = strip_whitespace!(.message)",
    ".message = \"prefix: \" + string!(.message)",
    "if .severity == \"err\" || .severity == \"crit\" { .urgent = true } else { .urgent = false }",
    "if contains(string!(.message), \"=\") { .kv = true }",
    "if starts_with(string!(.message), \"a\", case_sensitive: false) { abort }",
    "if ends_with(string!(.message), \"z\") { .z = \"yes\" }",
    ".m = match(string!(.message), r'^[a-z]+=')",
    ". |= parse_regex!(.message, r'^(?P<first>\\S+)\\s*(?P<rest>.*)$')",
    ".len = length!(.message)\n.len_s = to_string(.len)",
    ".n = to_int!(.count)",
    ".b = to_bool(.flag_int) ?? false",
    ".e = exists(.user)\n.f = exists(.nested.k)",
    ".tag = \"app.\" + string!(.appname)",
    ".msgid = \"ID\" + to_string!(.version)",
    "x = .message\n.copy = x\n.same = x == .message",
    "del(.message)",
    "del(.timestamp)",
    ".source_type = \"other\"",
    "del(.source_ip)",
    ".nested_copy = .nested",
    ".count_s = to_string!(.count)",
    "if is_integer(.count) && int!(.count) > 10 { .big = true }",
    "if (to_int(.count) ?? 0) > 10 { .big = true }",
    "if !exists(.user) { abort }",
    ".hostname = .user",
    ". |= parse_key_value!(.message)\nif .level == \"error\" { .severity = \"err\" }",
    ". |= object!(parse_json!(.message))",
    ".parsed = parse_json!(.message, max_depth: 2)",
    ".inner = parse_syslog!(.message)",
    "p, err = parse_syslog(.message)\nif err == null { .app2 = p.appname }",
    ".t = parse_timestamp!(.ts_text, format: \"%Y-%m-%d %H:%M:%S\")",
];

/// Plain key=value lines stay on the fast path: the agreement above is not won by bailing.
#[test]
fn plain_events_do_not_leave_the_fast_path() {
    let lines: Vec<String> = (0..50)
        .map(|i| {
            format!("<13>May  6 07:08:09 host app[1]: user=u{i} password=p status={i} note=\"a b\" standalone")
        })
        .collect();
    let batch = syslog_batch(&lines);
    let c = config(FAST[2], true, false);
    let metrics =
        ComponentMetrics::detached("x", loghaul_config::ComponentKind::Transform, "remap");
    let mut runner = Runner::new(vrl::compiler::TimeZone::parse("UTC").unwrap());
    let done = remap_batch(&c, "x", &mut runner, &batch, &metrics);
    assert_eq!((runner.fast_runs, runner.bails), (50, 0));
    assert_eq!(done.out.len(), 50);
}

/// The output's new keys are sorted once for a run of alike events and the order reused: runs
/// of alike lines, the same keys in another order, and keys alike in their first eight bytes
/// (whose order the reuse must not assume) give the runtime's output, on the fast path.
#[test]
fn alike_events_keep_their_keys_in_order() {
    let bodies = [
        "b=1 a=2 c=3",
        "b=4 a=5 c=6",
        "a=7 b=8 c=9",
        "latency_a=1 latency_b=2 x=3",
        "latency_b=4 latency_a=5 x=6",
        "latency_ms=7 latency_s=8 x=9",
        "b=1 a=2 c=3",
        "b=1 a=2",
    ];
    let lines: Vec<String> = bodies
        .iter()
        .cycle()
        .take(40)
        .map(|b| format!("<13>May  6 07:08:09 host app[1]: {b}"))
        .collect();
    let batch = syslog_batch(&lines);
    let program = ". |= parse_key_value!(.message)\n.added = 1";
    let fast = run(&config(program, true, false), &batch);
    let slow = run(&config(program, false, false), &batch);
    assert_eq!(
        String::from_utf8_lossy(&fast.0),
        String::from_utf8_lossy(&slow.0)
    );
    assert!(
        String::from_utf8_lossy(&fast.0).contains(r#""latency_a":"5","latency_b":"4""#),
        "sorted by their bytes"
    );
    let metrics =
        ComponentMetrics::detached("x", loghaul_config::ComponentKind::Transform, "remap");
    let mut runner = Runner::new(vrl::compiler::TimeZone::parse("UTC").unwrap());
    remap_batch(
        &config(program, true, false),
        "x",
        &mut runner,
        &batch,
        &metrics,
    );
    assert_eq!((runner.fast_runs, runner.bails), (40, 0));
}

/// A program with one expression outside the subset: it runs whole on the runtime.
const SLOW: &str = ". |= parse_key_value!(.message)\n.h = sha1(string!(.message))";

fn config(source: &str, fast_path: bool, reroute: bool) -> RemapConfig {
    let body = format!(
        "type: remap\nfast_path: {fast_path}\nreroute_dropped: {reroute}\ndrop_on_error: {reroute}\nsource: {}",
        serde_json::to_string(source).unwrap()
    );
    let c = ok(&transform(&body));
    match &c.transform("x").unwrap().config {
        TransformConfig::Remap(r) => r.clone(),
        _ => panic!("x is a remap"),
    }
}

/// A batch of syslog lines, decoded as the syslog source decodes them.
fn syslog_batch(lines: &[String]) -> EventBatch {
    let mut arena = Vec::new();
    let mut frames = Vec::new();
    for l in lines {
        let start = arena.len() as u32;
        arena.extend_from_slice(l.as_bytes());
        frames.push(Frame {
            start,
            end: arena.len() as u32,
            truncated: false,
        });
    }
    let mut batch = EventBatch::new(Bytes::from(arena), "in".into(), "syslog");
    let mut decoder = Decoder::new(DecodeOptions::default());
    decoder.decode_batch(
        &mut batch,
        &frames,
        Timestamp::from_nanos(1_700_000_000_123_456_000, 6),
        Some("10.1.2.3".parse().unwrap()),
        &mut DecodeStats::default(),
    );
    batch
}

/// A batch of JSON records, decoded as the HTTP source decodes them.
fn json_batch(records: &[String]) -> EventBatch {
    let body = format!("[{}]", records.join(","));
    http_body::decode(
        Bytes::from(body),
        BodyFormat::Json,
        None,
        &[],
        Arc::from("in"),
    )
    .expect("valid JSON")
}

/// Every output line of both outputs of one remap over `batch`.
fn run(config: &RemapConfig, batch: &EventBatch) -> (Vec<u8>, Vec<u8>) {
    let metrics =
        ComponentMetrics::detached("x", loghaul_config::ComponentKind::Transform, "remap");
    let mut runner = Runner::new(vrl::compiler::TimeZone::parse("UTC").unwrap());
    let done = remap_batch(config, "x", &mut runner, batch, &metrics);
    let encode = |b: &EventBatch| {
        let mut out = Vec::new();
        for e in &b.events {
            loghaul_codec::encode_json(b, e, &mut out);
        }
        out
    };
    (
        encode(&done.out),
        done.dropped.as_ref().map(encode).unwrap_or_default(),
    )
}

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,6}",
        "[A-Za-z0-9_.-]{1,8}",
        Just("user".to_owned()),
        Just("password".to_owned()),
        Just("level".to_owned()),
        Just("error".to_owned()),
        Just("h\u{e9}llo".to_owned()),
    ]
}

/// Messages made of key=value pairs, quoted values, standalone keys and the characters that
/// make key=value parsing subtle.
fn message() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        (word(), word()).prop_map(|(k, v)| format!("{k}={v}")),
        (word(), word(), word()).prop_map(|(k, a, b)| format!("{k}=\"{a} {b}\"")),
        word(),
        (word(), word()).prop_map(|(k, v)| format!("{k} = {v}")),
        (word(), word()).prop_map(|(k, v)| format!("{k}='{v}'")),
        Just("x=".to_owned()),
        Just("a\\b=c".to_owned()),
        Just("\t".to_owned()),
        Just("=".to_owned()),
        Just("\"".to_owned()),
        (word()).prop_map(|k| format!("{k}={k}={k}")),
        Just("count=12".to_owned()),
    ];
    prop_oneof![
        4 => prop::collection::vec(token, 0..6).prop_map(|t| t.join(" ")),
        1 => (word(), -3i64..3, word()).prop_map(|(k, n, v)| {
            format!("{{\"{k}\":{n},\"s\":\"{v}\",\"list\":[1,\"x\",null],\"o\":{{\"in\":{{\"deep\":true}}}}}}")
        }),
        1 => (word(), word()).prop_map(|(h, m)| format!("<13>May  6 07:08:09 {h} app[7]: {m}")),
    ]
}

fn syslog_line() -> impl Strategy<Value = String> {
    // PRI values past 191 are invalid: the event has no facility.
    (0u8..200, word(), word(), message(), any::<bool>()).prop_map(|(pri, host, app, msg, v5424)| {
        if v5424 && pri < 192 {
            format!(
                "<{pri}>1 2024-05-06T07:08:09.123Z {host} {app} 42 ID7 [ex@1 a=\"b\\\"c\"] {msg}"
            )
        } else {
            format!("<{pri}>May  6 07:08:09 {host} {app}[42]: {msg}")
        }
    })
}

fn json_record() -> impl Strategy<Value = String> {
    (
        message(),
        prop::option::of(word()),
        prop::option::of(-5i64..50),
        prop::option::of(0i64..3),
        any::<bool>(),
        prop::option::of(prop_oneof![
            Just(serde_json::json!("err")),
            Just(serde_json::json!("local0")),
            Just(serde_json::json!(3)),
        ]),
        prop_oneof![
            Just("2024-05-06 07:08:09".to_owned()),
            Just("2024-13-06 07:08:09".to_owned()),
            Just("not a time".to_owned()),
        ],
    )
        .prop_map(|(msg, user, count, flag, nested, shadow, ts)| {
            let mut r = serde_json::Map::new();
            r.insert("message".into(), msg.into());
            if let Some(u) = user {
                r.insert("user".into(), u.into());
            }
            if let Some(c) = count {
                r.insert("count".into(), c.into());
            }
            if let Some(f) = flag {
                r.insert("flag_int".into(), f.into());
            }
            if nested {
                r.insert(
                    "nested".into(),
                    serde_json::json!({"k": "v", "list": [1, "two", null]}),
                );
            }
            if let Some(v) = shadow {
                // A record key named like loghaul's own fields shadows them.
                r.insert("severity".into(), v.clone());
                r.insert("facility".into(), v);
            }
            r.insert("hostname".into(), "rec-host".into());
            r.insert("ts_text".into(), ts.into());
            serde_json::Value::Object(r).to_string()
        })
}

#[test]
fn every_corpus_program_is_on_the_fast_path() {
    for source in FAST {
        let c = config(source, true, false);
        assert!(
            c.program.fast.is_ok(),
            "{source:?}: {}",
            c.program.path_note()
        );
    }
    let slow = config(SLOW, true, false);
    let note = slow.program.path_note();
    assert!(
        note.contains("sha1"),
        "the note names the expression: {note}"
    );
}

/// Conditions (a route's, a filter's) on the fast path, which reads a field once per event.
const CONDITIONS: &[&str] = &[
    ".severity == \"err\" || .severity == \"crit\" || .severity == \"alert\"",
    ".severity != \"err\" && .severity != \"crit\"",
    "exists(.hostname) && .hostname == \"h1\" || .appname == \"app\"",
    "starts_with(string(.message) ?? \"\", \"a\") || .severity == \"info\" || .message == \"x\"",
    ".status == 200 || .status == \"200\" || .level == \"error\"",
    "x = .severity\nx == \"warning\" || .severity == \"notice\"",
    // Names of one length, read in turn (each read is its own).
    ".hostname == .severity || .appname == .message || .severity == \"info\"",
    "length(string(.hostname) ?? \"\") > 1 && .severity != \"err\" && .hostname != .facility",
    // Compared by code when nothing shadows the field; a literal that names no code.
    "\"local0\" == .facility || .facility != \"kern\" && .severity == \"error\"",
    ".severity != \"warning\" && \"notice\" != .severity",
    ".facility == \"none\" || .facility == \"kern\"",
];

/// Each condition on each event, on the fast path and on the VRL runtime.
fn conditions_agree(batch: &EventBatch) -> Result<(), TestCaseError> {
    let mut runner = Runner::new(vrl::compiler::TimeZone::Local);
    for source in CONDITIONS {
        let program = super::compile_condition(source).unwrap();
        prop_assert!(program.fast.is_ok(), "{source} is on the fast path");
        for event in &batch.events {
            let fast = runner.condition(&program, batch, event, &mut None);
            let mut target = super::target(batch, event);
            let slow = runner.test(&program, &mut target);
            prop_assert_eq!(
                fast.is_ok(),
                slow.is_ok(),
                "{}: {:?} {:?}",
                source,
                fast,
                slow
            );
            prop_assert_eq!(fast.unwrap_or(false), slow.unwrap_or(false), "{}", source);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn conditions_agree_on_syslog(lines in prop::collection::vec(syslog_line(), 1..12)) {
        conditions_agree(&syslog_batch(&lines))?;
    }

    #[test]
    fn conditions_agree_on_records(records in prop::collection::vec(json_record(), 1..8)) {
        conditions_agree(&json_batch(&records))?;
    }

    #[test]
    fn fast_path_and_runtime_agree_on_syslog(lines in prop::collection::vec(syslog_line(), 1..12)) {
        let batch = syslog_batch(&lines);
        for source in FAST {
            for reroute in [false, true] {
                let fast = run(&config(source, true, reroute), &batch);
                let slow = run(&config(source, false, reroute), &batch);
                prop_assert_eq!(
                    String::from_utf8_lossy(&fast.0), String::from_utf8_lossy(&slow.0),
                    "program {:?} on {:?}", source, lines
                );
                prop_assert_eq!(fast.1, slow.1, "dropped, program {:?}", source);
            }
        }
    }

    #[test]
    fn fast_path_and_runtime_agree_on_records(records in prop::collection::vec(json_record(), 1..8)) {
        let batch = json_batch(&records);
        for source in FAST {
            let fast = run(&config(source, true, true), &batch);
            let slow = run(&config(source, false, true), &batch);
            prop_assert_eq!(
                String::from_utf8_lossy(&fast.0), String::from_utf8_lossy(&slow.0),
                "program {:?} on {:?}", source, records
            );
            prop_assert_eq!(fast.1, slow.1, "dropped, program {:?}", source);
        }
    }
}

/// A program with one expression outside the subset gives, whole on the runtime, what it gave
/// before the fast path existed: the same as with the fast path turned off.
#[test]
fn a_program_outside_the_subset_runs_whole_on_the_runtime() {
    let batch = syslog_batch(&[
        "<13>May  6 07:08:09 h app: a=1 b=\"x y\"".to_owned(),
        "<11>1 2024-05-06T07:08:09Z h app - - - k=v".to_owned(),
    ]);
    let with = run(&config(SLOW, true, false), &batch);
    let without = run(&config(SLOW, false, false), &batch);
    assert_eq!(with, without);
    let text = String::from_utf8_lossy(&with.0);
    assert!(text.contains("\"h\":\""), "{text}");
    assert!(text.contains("\"b\":\"x y\""), "{text}");
}

/// `now()` is on the fast path and gives a time written as the runtime writes it.
#[test]
fn now_is_on_the_fast_path() {
    let c = config(".timestamp = now()\n.at = now()", true, false);
    assert!(c.program.fast.is_ok(), "{}", c.program.path_note());
    let batch = syslog_batch(&["<13>May  6 07:08:09 h app: hi".to_owned()]);
    let (out, _) = run(&c, &batch);
    let line: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let at = line["at"].as_str().unwrap();
    assert!(at.ends_with('Z') && at.starts_with("20"), "{line}");
}

/// A 1 MiB message through `parse_key_value` and a regex, on both paths: they finish (the
/// parsers here are linear; VRL's own `parse_key_value` scans ahead for `=` from every
/// standalone key, so the fast path takes such lines itself).
#[test]
fn a_mebibyte_message_finishes() {
    let mut msg = String::with_capacity(1 << 20);
    let mut i = 0;
    while msg.len() < (1 << 20) {
        msg.push_str(&format!("word{i} "));
        i += 1;
    }
    msg.push_str("k=v");
    let line = format!("<13>May  6 07:08:09 h app: {msg}");
    let batch = syslog_batch(&[line]);
    let c = config(
        ". |= parse_key_value!(.message)\n.m = match(string!(.message), r'k=v$')",
        true,
        false,
    );
    let (out, _) = run(&c, &batch);
    let event: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(event["k"], "v");
    assert_eq!(event["m"], true);
    assert_eq!(event["word0"], true);
}
