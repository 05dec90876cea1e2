//! `tests:` as the loader reads it (each error at the line of its cause), side files of tests,
//! and tests run in-process on the real transforms: what passes, what fails and how a failure
//! reads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use loghaul_config::ConfigFormat;

use super::*;
use crate::config::testing::{error_at, load, ok};

/// A syslog source `in`, a remap `parse` that reads `status=N` into `.status`, a route `r`
/// with route `errors`, a filter `keep` that drops status 200, and a sink; then `tests`.
fn with_tests(tests: &str) -> String {
    format!(
        r#"sources:
  in: {{ type: syslog, mode: udp, address: "127.0.0.1:5514", format: rfc3164 }}
  fwd: {{ type: fluent, address: "127.0.0.1:24224" }}
transforms:
  parse:
    type: remap
    inputs: [in]
    source: |
      kv = parse_key_value(.message) ?? {{}}
      .status = to_int(kv.status) ?? 0
  r:
    type: route
    inputs: [parse]
    route:
      errors: '(to_int(.status) ?? 0) >= 500'
  keep:
    type: filter
    inputs: [parse]
    condition: '(to_int(.status) ?? 0) != 200'
sinks:
  out: {{ type: blackhole, inputs: [r.errors, r._unmatched, keep, fwd] }}
tests:
{tests}"#
    )
}

/// One test of `body` (indented under `- `), inserting `status=404` at `parse`.
fn one(body: &str) -> String {
    let mut test = String::from("  - name: t\n");
    for line in body.lines() {
        test.push_str("    ");
        test.push_str(line);
        test.push('\n');
    }
    with_tests(&test)
}

const INPUT: &str = "inputs:\n  - insert_at: parse\n    log_fields: { message: status=404 }";

#[test]
fn a_valid_test_loads_and_run_ignores_nothing_else() {
    let config = ok(&one(&format!(
        "{INPUT}\noutputs:\n  - extract_from: parse\n    conditions:\n      - type: vrl\n        source: 'assert_eq!(.status, 404)'\nno_outputs_from: [r.errors]"
    )));
    assert_eq!(config.tests.len(), 1);
    let test = &config.tests[0];
    assert_eq!(test.name, "t");
    assert_eq!(test.origin, "t.yaml");
    assert_eq!(test.inputs[0].at_kind, ComponentKind::Transform);
    assert_eq!(
        test.inputs[0].event,
        TestEvent::Log(vec![(
            "message".to_owned(),
            FieldValue::Str("status=404".to_owned())
        )])
    );
    assert_eq!(test.outputs[0].extract_from, "parse");
    assert_eq!(test.outputs[0].conditions.len(), 1);
    assert_eq!(test.no_outputs_from, ["r.errors"]);
}

#[test]
fn schema_errors_are_at_their_keys() {
    let t = one(&format!(
        "{INPUT}\n    insert_a: x\noutputs: [{{ extract_from: parse }}]"
    ));
    error_at(&t, "insert_a:", "unknown key `insert_a`");
    let t = one(&format!("{INPUT}\noutput: [{{ extract_from: parse }}]"));
    error_at(&t, "output:", "unknown key `output`");
    let t = one(
        "inputs:\n  - insert_at: parse\n    type: lgo\n    log_fields: {}\nno_outputs_from: [parse]",
    );
    error_at(&t, "type: lgo", "unknown value `lgo`");
    let t = with_tests("  name: t\n");
    error_at(&t, "name: t", "`tests` must be a list of tests");
    let t = one(&format!(
        "{INPUT}\noutputs:\n  - extract_from: parse\n    conditions:\n      - type: lua\n        source: 'true'"
    ));
    error_at(&t, "type: lua", "unknown value `lua`");
}

#[test]
fn names_must_be_given_and_unique() {
    let test = |name: &str| {
        format!(
            "  - name: {name}\n    inputs: [{{ insert_at: parse, log_fields: {{ message: x }} }}]\n    no_outputs_from: [keep]\n"
        )
    };
    let t = with_tests(&format!("{}{}", test("same"), test("same")));
    let errors = load(&t).unwrap_err();
    let second = t
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("name: same"))
        .nth(1)
        .unwrap()
        .0
        + 1;
    assert!(
        errors.iter().any(|d| d.line == Some(second)
            && d.message.contains("a test named `same` is already defined")),
        "{errors}"
    );
    error_at(
        &with_tests(&test("''")),
        "name: ''",
        "a test's `name` is empty",
    );
    let t = with_tests(
        "  - inputs: [{ insert_at: parse, log_fields: {} }]\n    no_outputs_from: [keep]\n",
    );
    error_at(&t, "- inputs", "missing required field `name`");
}

#[test]
fn a_test_must_insert_something_and_check_something() {
    error_at(&one(INPUT), "- name: t", "test `t` checks nothing");
    let t = one("inputs: []\nno_outputs_from: [keep]");
    error_at(&t, "inputs: []", "test `t` has no inputs");
    let t = one("no_outputs_from: [keep]");
    error_at(&t, "- name: t", "test `t` has no inputs");
}

#[test]
fn inputs_go_to_sources_and_transforms() {
    let t = one(
        "inputs:\n  - insert_at: prase\n    log_fields: { message: x }\nno_outputs_from: [keep]",
    );
    error_at(&t, "insert_at: prase", "unknown component `prase`");
    assert!(
        load(&t)
            .unwrap_err()
            .to_string()
            .contains("did you mean 'parse'?")
    );
    let t =
        one("inputs:\n  - insert_at: out\n    log_fields: { message: x }\nno_outputs_from: [keep]");
    error_at(&t, "insert_at: out", "`out` is a sink");
    // An event by its fields may go to a source too: to whatever reads it.
    ok(&one(
        "inputs:\n  - insert_at: in\n    log_fields: { message: x }\nno_outputs_from: [keep]",
    ));
}

#[test]
fn log_and_raw_inputs_need_their_fields() {
    let t = one(
        "inputs:\n  - insert_at: parse\n    type: raw\n    value: '<13>x'\nno_outputs_from: [keep]",
    );
    error_at(
        &t,
        "insert_at: parse",
        "`parse` is a transform; raw input is read by a source's decoder",
    );
    let t = one("inputs:\n  - insert_at: in\n    type: raw\nno_outputs_from: [keep]");
    error_at(&t, "type: raw", "a `type: raw` input needs `value`");
    let t = one("inputs:\n  - insert_at: parse\n    type: log\nno_outputs_from: [keep]");
    error_at(&t, "type: log", "a `type: log` input needs `log_fields`");
    let t = one("inputs:\n  - insert_at: parse\n    log_fields: [a, b]\nno_outputs_from: [keep]");
    error_at(&t, "log_fields: [a, b]", "`log_fields` must be a map");
    let t = one("inputs:\n  - insert_at: parse\nno_outputs_from: [keep]");
    error_at(
        &t,
        "insert_at: parse",
        "an input needs `log_fields` (type: log) or `value` (type: raw)",
    );
    let t = one(
        "inputs:\n  - insert_at: in\n    log_fields: { message: x }\n    value: y\nno_outputs_from: [keep]",
    );
    error_at(&t, "value: y", "not both");
    let t = one(
        "inputs:\n  - insert_at: in\n    type: raw\n    log_fields: { message: x }\n    value: y\nno_outputs_from: [keep]",
    );
    error_at(
        &t,
        "log_fields: { message",
        "`log_fields` does not go with `type: raw`",
    );
}

#[test]
fn outputs_name_components_or_named_outputs_that_exist() {
    let t = one(&format!("{INPUT}\noutputs: [{{ extract_from: r.erorrs }}]"));
    error_at(&t, "extract_from: r.erorrs", "`r` has no output `erorrs`");
    assert!(
        load(&t)
            .unwrap_err()
            .to_string()
            .contains("did you mean 'errors'?")
    );
    let t = one(&format!("{INPUT}\noutputs: [{{ extract_from: out }}]"));
    error_at(&t, "extract_from: out", "`out` is a sink");
    let t = one(&format!("{INPUT}\nno_outputs_from:\n  - keep\n  - kepe"));
    error_at(&t, "- kepe", "unknown component `kepe`");
    let t = one(&format!("{INPUT}\nno_outputs_from: [parse.dropped]"));
    error_at(&t, "no_outputs_from", "`parse` has no output `dropped`");
    ok(&one(&format!(
        "{INPUT}\noutputs: [{{ extract_from: r._unmatched }}, {{ extract_from: in }}]"
    )));
}

#[test]
fn conditions_are_vrl_placed_in_the_file() {
    let t = one(&format!(
        "{INPUT}\noutputs:\n  - extract_from: parse\n    conditions:\n      - source: |\n          assert!(exists(.status))\n          assert_eq!(nope(.status), 404)"
    ));
    error_at(
        &t,
        "assert_eq!(nope",
        "VRL error[E105]: call to undefined function",
    );
    let line = t
        .lines()
        .position(|l| l.contains("assert_eq!(nope"))
        .unwrap()
        + 1;
    let column = t.lines().nth(line - 1).unwrap().find("nope").unwrap() + 1;
    let errors = load(&t).unwrap_err().to_string();
    assert!(
        errors.contains(&format!("t.yaml:{line}:{column}:")),
        "{errors}"
    );
    let t = one(&format!(
        "{INPUT}\noutputs:\n  - extract_from: parse\n    conditions:\n      - source: '.status'"
    ));
    error_at(&t, "source: '.status'", "a condition must return a boolean");
    let t = one(&format!(
        "{INPUT}\noutputs:\n  - extract_from: parse\n    conditions:\n      - source: '.a = 1; true'"
    ));
    error_at(&t, "source: '.a = 1", "a condition cannot change the event");
}

fn config() -> Config {
    ok(&with_tests(
        "  - name: t\n    inputs: [{ insert_at: parse, log_fields: { message: x } }]\n    no_outputs_from: [keep]\n",
    ))
}

#[test]
fn side_files_hold_tests_only_and_report_their_own_positions() {
    let config = config();
    let side = "tests:\n  - name: more\n    inputs: [{ insert_at: parse, log_fields: { message: x } }]\n    outputs: [{ extract_from: nope }]\nsources: {}\n";
    let errors = config
        .tests_from_str(side, ConfigFormat::Yaml, "more.yaml")
        .unwrap_err();
    let text = errors.to_string();
    assert!(
        text.contains("more.yaml:4:31: error: unknown component `nope`"),
        "{text}"
    );
    assert!(
        text.contains("more.yaml:5:1: error: unexpected key `sources` in a tests file"),
        "{text}"
    );
    assert!(
        text.contains("belongs in the configuration given with -c"),
        "{text}"
    );
    let tests = config
        .tests_from_str(
            "tests:\n  - name: more\n    inputs: [{ insert_at: parse, log_fields: { message: x } }]\n    outputs: [{ extract_from: parse }]\n",
            ConfigFormat::Yaml,
            "more.yaml",
        )
        .unwrap();
    assert_eq!(tests[0].origin, "more.yaml");
    let errors = config
        .tests_from_str("- a\n", ConfigFormat::Yaml, "more.yaml")
        .unwrap_err();
    assert!(
        errors
            .to_string()
            .contains("must be a map with a `tests` key")
    );
}

#[test]
fn a_name_repeated_in_a_side_file_and_raw_input_at_a_source_without_a_decoder_are_refused() {
    let config = config();
    let mut tests = config.tests.clone();
    tests.extend(
        config
            .tests_from_str(
                "tests:\n  - name: t\n    inputs: [{ insert_at: fwd, type: raw, value: x }]\n    outputs: [{ extract_from: fwd }]\n",
                ConfigFormat::Yaml,
                "more.yaml",
            )
            .unwrap(),
    );
    let errors = ConfigErrors(check(&config, &tests)).to_string();
    assert!(
        errors.contains("more.yaml:2:5: error: a test named `t` is already defined"),
        "{errors}"
    );
    assert!(errors.contains("in t.yaml:"), "{errors}");
    assert!(
        errors.contains(
            "more.yaml:3:27: error: source `fwd` (type `fluent`) takes no raw input in tests"
        ),
        "{errors}"
    );
}

/// Runs the first test of `tests` on the configuration of [`with_tests`].
fn run_one(tests: &str) -> Vec<String> {
    let config = ok(&with_tests(tests));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(&config, &config.tests[0]))
}

#[test]
fn a_log_input_runs_through_the_remap_and_its_assertions_pass() {
    let failures = run_one(
        r#"  - name: t
    inputs:
      - insert_at: parse
        log_fields: { message: "status=404", hostname: web1, severity: err, user: { name: bob } }
    outputs:
      - extract_from: parse
        conditions:
          - source: |
              assert_eq!(.status, 404)
              assert_eq!(.hostname, "web1")
              assert_eq!(.severity, "err")
              assert_eq!(.user.name, "bob")
      - extract_from: keep
      - extract_from: r._unmatched
    no_outputs_from: [r.errors]
"#,
    );
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn raw_input_is_decoded_by_the_source_and_routed_by_named_output() {
    let failures = run_one(
        r#"  - name: t
    inputs:
      - insert_at: in
        type: raw
        value: "<11>Oct 11 22:14:15 host app[42]: status=503"
    outputs:
      - extract_from: in
        conditions:
          - source: 'assert_eq!(.procid, "42") && .source_type == "syslog"'
      - extract_from: r.errors
        conditions:
          - source: |
              assert_eq!(.appname, "app")
              assert_eq!(.hostname, "host")
              assert_eq!(.severity, "err")
              assert_eq!(.status, 503)
    no_outputs_from: [r._unmatched]
"#,
    );
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn a_failed_assert_eq_shows_both_sides_and_the_event() {
    let failures = run_one(
        r#"  - name: t
    inputs:
      - insert_at: parse
        log_fields: { message: "status=404" }
    outputs:
      - extract_from: parse
        conditions:
          - source: |
              assert!(exists(.status))
              assert_eq!(.status, 200)
"#,
    );
    assert_eq!(failures.len(), 1, "{failures:?}");
    let text = &failures[0];
    assert!(
        text.contains("output `parse`: 1 event came out; none passed its conditions"),
        "{text}"
    );
    assert!(text.contains("event 1 of 1, condition 1:"), "{text}");
    assert!(
        text.contains("expected: assert_eq!(.status, 200)\n"),
        "{text}"
    );
    assert!(
        text.contains("error:    assertion failed: 404 == 200\n"),
        "{text}"
    );
    assert!(text.contains("left:     404   (.status)\n"), "{text}");
    assert!(text.contains("right:    200   (200)\n"), "{text}");
    assert!(
        text.contains("actual event out of `parse`:\n        {\n"),
        "{text}"
    );
    assert!(
        text.contains("\n          \"message\": \"status=404\",\n"),
        "{text}"
    );
    assert!(
        text.contains("\n          \"status\": 404\n        }\n"),
        "{text}"
    );
}

#[test]
fn an_assertion_message_a_false_condition_and_silence_each_fail_saying_so() {
    let failures = run_one(
        r#"  - name: t
    inputs:
      - insert_at: parse
        log_fields: { message: "status=200" }
    outputs:
      - extract_from: parse
        conditions:
          - source: 'true'
          - source: 'assert!(.status == 500, "not an error")'
      - extract_from: parse
        conditions:
          - source: '.status == 500'
      - extract_from: keep
    no_outputs_from: [parse]
"#,
    );
    assert_eq!(failures.len(), 4, "{failures:?}");
    assert!(
        failures[0].contains("event 1 of 1, condition 2:"),
        "{}",
        failures[0]
    );
    assert!(
        failures[0].contains("expected: assert!(.status == 500, \"not an error\")"),
        "{}",
        failures[0]
    );
    assert!(
        failures[0].contains("error:    not an error"),
        "{}",
        failures[0]
    );
    assert!(!failures[0].contains("left:"), "{}", failures[0]);
    assert!(
        failures[1].contains("expected: .status == 500"),
        "{}",
        failures[1]
    );
    assert!(
        failures[1].contains("error:    the condition is not true"),
        "{}",
        failures[1]
    );
    assert_eq!(failures[2], "  output `keep`: no event came out\n");
    assert!(
        failures[3].starts_with(
            "  no_outputs_from `parse`: expected no event, 1 came out\n    event 1 of 1:\n      {\n"
        ),
        "{}",
        failures[3]
    );
}

#[test]
fn an_output_passes_when_one_of_its_events_passes() {
    let failures = run_one(
        r#"  - name: t
    inputs:
      - insert_at: parse
        log_fields: { message: "status=200" }
      - insert_at: parse
        log_fields: { message: "status=503" }
    outputs:
      - extract_from: parse
        conditions:
          - source: 'assert_eq!(.status, 503)'
      - extract_from: parse
        conditions:
          - source: 'assert_eq!(.status, 1)'
"#,
    );
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].contains("2 events came out"), "{}", failures[0]);
    assert!(failures[0].contains("event 2 of 2"), "{}", failures[0]);
}

#[test]
fn log_fields_make_the_event_remap_would_make() {
    let batch = log_batch(
        &[
            (
                "timestamp".into(),
                FieldValue::Str("2024-05-01T10:00:00.5Z".into()),
            ),
            ("severity".into(), FieldValue::Str("warning".into())),
            ("message".into(), FieldValue::Str("hi".into())),
            ("n".into(), FieldValue::Int(3)),
            ("severity_typo".into(), FieldValue::Null),
        ],
        TEST_SOURCE.into(),
        TEST_SOURCE,
    );
    let event = &batch.events[0];
    assert_eq!(event.severity, Some(4));
    let json = report::pretty_event(&batch, event);
    assert_eq!(
        json,
        "{\n  \"timestamp\": \"2024-05-01T10:00:00.500Z\",\n  \"severity\": \"warning\",\n  \"message\": \"hi\",\n  \"source_type\": \"unit_test\",\n  \"n\": 3,\n  \"severity_typo\": null\n}"
    );
}

#[test]
fn pretty_json_keeps_order_and_strings() {
    assert_eq!(
        report::pretty_json(r#"{"b":1,"a":{"x":[1,2],"e":{},"l":[]},"s":"a,b:{\"c\"}"}"#),
        "{\n  \"b\": 1,\n  \"a\": {\n    \"x\": [\n      1,\n      2\n    ],\n    \"e\": {},\n    \"l\": []\n  },\n  \"s\": \"a,b:{\\\"c\\\"}\"\n}"
    );
}
