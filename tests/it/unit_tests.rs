//! `loghaul test`: the real binary runs a configuration's unit tests. A passing test says
//! `passed` and a failing one shows what was expected against what came out; the exit code is
//! 0 when all pass, 1 when one fails, 2 when the configuration or a tests file is invalid.
//! Nothing binds a port: the tests run the transforms, not the sources' sockets.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::harness::*;

/// A syslog source whose lines a remap parses (`status=N`), a route by status and a filter that
/// drops the 200s; the sinks never run in a test.
const CONFIG: &str = r#"sources:
  syslog_in: { type: syslog, mode: tcp, address: "127.0.0.1:5514", format: rfc3164 }
transforms:
  parse:
    type: remap
    inputs: [syslog_in]
    source: |
      kv = parse_key_value(.message) ?? {}
      .status = to_int(kv.status) ?? 0
  by_status:
    type: route
    inputs: [parse]
    route:
      errors: '(to_int(.status) ?? 0) >= 500'
  not_ok:
    type: filter
    inputs: [parse]
    condition: '(to_int(.status) ?? 0) != 200'
sinks:
  out: { type: blackhole, inputs: [by_status.errors, by_status._unmatched, not_ok] }
"#;

const PASS_AND_FAIL: &str = r#"tests:
  - name: reads the status
    inputs:
      - insert_at: parse
        type: log
        log_fields: { message: "status=404", hostname: web1 }
    outputs:
      - extract_from: parse
        conditions:
          - type: vrl
            source: |
              assert!(exists(.status))
              assert_eq!(.status, 404)
  - name: expects the wrong status
    inputs:
      - insert_at: parse
        type: log
        log_fields: { message: "status=404", hostname: web1 }
    outputs:
      - extract_from: parse
        conditions:
          - type: vrl
            source: 'assert_eq!(.status, 200)'
"#;

/// Raw syslog through the source's decoder, out of the route's named output.
const RAW_THROUGH_ROUTE: &str = r#"tests:
  - name: a 503 over syslog is routed to errors
    inputs:
      - insert_at: syslog_in
        type: raw
        value: "<11>Oct 11 22:14:15 host app[42]: status=503"
    outputs:
      - extract_from: by_status.errors
        conditions:
          - type: vrl
            source: |
              assert_eq!(.appname, "app")
              assert_eq!(.procid, "42")
              assert_eq!(.severity, "err")
              assert_eq!(.status, 503)
    no_outputs_from: [by_status._unmatched]
  - name: a 200 is filtered out
    inputs:
      - insert_at: syslog_in
        type: raw
        value: "<14>Oct 11 22:14:15 host app: status=200"
    outputs:
      - extract_from: by_status._unmatched
    no_outputs_from: [not_ok, by_status.errors]
"#;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write file");
    path
}

fn loghaul(dir: &Path, args: &[&str]) -> Output {
    run_bounded(
        std::process::Command::new(BIN).args(args).current_dir(dir),
        Duration::from_secs(60),
    )
}

#[test]
fn a_passing_and_a_failing_test_exit_1_and_show_expected_against_actual() {
    let dir = tempfile::tempdir().expect("temp dir");
    write(
        dir.path(),
        "loghaul.yaml",
        &format!("{CONFIG}{PASS_AND_FAIL}"),
    );
    let out = loghaul(dir.path(), &["test", "-c", "loghaul.yaml"]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("running 2 tests\n"), "{text}");
    assert!(
        stdout.contains("test reads the status ... passed\n"),
        "{text}"
    );
    assert!(
        stdout.contains("test expects the wrong status ... failed\n"),
        "{text}"
    );
    // The diff: the assertion expected, both sides' values, and the event that came out.
    for want in [
        "  output `parse`: 1 event came out; none passed its conditions\n",
        "      expected: assert_eq!(.status, 200)\n",
        "      error:    assertion failed: 404 == 200\n",
        "      left:     404   (.status)\n",
        "      right:    200   (200)\n",
        "      actual event out of `parse`:\n        {\n",
        "          \"hostname\": \"web1\",\n",
        "          \"message\": \"status=404\",\n",
        "          \"status\": 404\n        }\n",
        "test result: FAILED. 1 passed; 1 failed\n",
    ] {
        assert!(stdout.contains(want), "no {want:?} in:\n{text}");
    }
    // The failure is shown under its own test, not the passing one.
    let passed = stdout
        .find("reads the status ... passed")
        .expect("passed line");
    let failed = stdout.find("wrong status ... failed").expect("failed line");
    let diff = stdout.find("expected: assert_eq!").expect("diff");
    assert!(passed < failed && failed < diff, "{text}");

    // `validate` takes the tests too, and `run` would ignore them.
    let out = loghaul(dir.path(), &["validate", "-c", "loghaul.yaml"]);
    assert!(out.status.success(), "{}", output_text(&out));
}

#[test]
fn raw_input_through_a_syslog_decoder_and_a_route_output_in_a_side_file_exit_0() {
    let dir = tempfile::tempdir().expect("temp dir");
    write(dir.path(), "loghaul.yaml", CONFIG);
    std::fs::create_dir(dir.path().join("tests")).expect("mkdir");
    write(&dir.path().join("tests"), "route.yaml", RAW_THROUGH_ROUTE);
    let out = loghaul(
        dir.path(),
        &["test", "-c", "loghaul.yaml", "tests/route.yaml"],
    );
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("test a 503 over syslog is routed to errors ... passed\n"),
        "{text}"
    );
    assert!(
        text.contains("test a 200 is filtered out ... passed\n"),
        "{text}"
    );
    assert!(
        text.contains("test result: ok. 2 passed; 0 failed\n"),
        "{text}"
    );
}

#[test]
fn events_out_of_a_no_outputs_from_component_are_shown() {
    let dir = tempfile::tempdir().expect("temp dir");
    write(
        dir.path(),
        "loghaul.yaml",
        &format!(
            "{CONFIG}tests:\n  - name: nothing is an error\n    inputs:\n      - insert_at: syslog_in\n        type: raw\n        value: \"<11>Oct 11 22:14:15 host app: status=500\"\n    no_outputs_from: [by_status.errors]\n"
        ),
    );
    let out = loghaul(dir.path(), &["test", "-c", "loghaul.yaml"]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("  no_outputs_from `by_status.errors`: expected no event, 1 came out\n"),
        "{text}"
    );
    assert!(text.contains("\"appname\": \"app\""), "{text}");
}

#[test]
fn an_invalid_tests_file_exits_2_with_positioned_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    write(dir.path(), "loghaul.yaml", CONFIG);
    write(
        dir.path(),
        "bad.yaml",
        "tests:\n  - name: typo\n    inputs:\n      - insert_at: prase\n        log_fields: { message: x }\n    outputs:\n      - extract_from: by_status.erorrs\n        conditions:\n          - source: 'assert_eq!(.status 1)'\n",
    );
    let out = loghaul(dir.path(), &["test", "-c", "loghaul.yaml", "bad.yaml"]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.yaml:4:20: error: unknown component `prase`"),
        "{text}"
    );
    assert!(stderr.contains("did you mean 'parse'?"), "{text}");
    assert!(
        stderr.contains("bad.yaml:7:23: error: `by_status` has no output `erorrs`"),
        "{text}"
    );
    assert!(
        stderr.contains("bad.yaml:9:41: error: VRL error[E203]: syntax error"),
        "{text}"
    );
    assert!(!text.contains("running"), "nothing ran: {text}");

    // A configuration without tests, and no file: nothing to run.
    let out = loghaul(dir.path(), &["test", "-c", "loghaul.yaml"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(output_text(&out).contains("no tests"));
}
