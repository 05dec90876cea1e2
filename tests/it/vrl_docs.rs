//! The documented VRL programs whose outcome is an event (`tests/data/vrl-docs/`, the files
//! with an `output`), run by the real binary: one server holds a pipeline per program
//! (`http_server` on a port of its own → `remap` → `file`, `encoding: json`), `curl` POSTs
//! each program's input, and each file must hold the documented event(s), or nothing for the
//! program that aborts (`drop_on_abort` is on by default).
//!
//! What loghaul writes beyond Vector's event, and is allowed for only where the documented
//! event lacks the key: `source_type` (`"http_server"`, on every line) and `timestamp`
//! (events whose sender gave none carry the batch's receive time, so it must lie between the
//! first request and the last answer). The `http_server` source adds nothing else here: no
//! `tag` (`tag_from_path` is off), no header or query fields (none configured), no TLS
//! subject (plain HTTP); every other key must be the documented one, with its value.

use std::fs;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::harness::*;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/vrl-docs");
const DISCARDED: &str = "loghaul_component_discarded_events_total";
const ERRORS: &str = "loghaul_component_errors_total";

/// A corpus program whose documented outcome is an event.
struct Program {
    file: String,
    /// Its pipeline's component id (the file name, as an id).
    id: String,
    source: String,
    input: Value,
    /// The documented events; none reach the file when it aborts.
    output: Vec<Value>,
    aborted: bool,
    timestamp_paths: Vec<String>,
    port: u16,
}

fn programs() -> Vec<Program> {
    let mut files: Vec<_> = fs::read_dir(CORPUS)
        .unwrap_or_else(|e| panic!("read {CORPUS}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let doc: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{file} is not JSON: {e}"));
        let Some(output) = doc.get("output") else {
            continue;
        };
        let flag = |k: &str| doc.get(k).and_then(Value::as_bool).unwrap_or(false);
        let aborted = flag("aborted");
        let output = match output {
            _ if aborted => Vec::new(),
            Value::Array(items) if flag("emits_multiple_events") => items.clone(),
            one => vec![one.clone()],
        };
        out.push(Program {
            id: file.trim_end_matches(".json").replace('-', "_"),
            file,
            source: doc["source"].as_str().unwrap().to_owned(),
            input: doc["input"].clone(),
            output,
            aborted,
            timestamp_paths: doc
                .get("timestamp_paths")
                .map(|p| serde_json::from_value(p.clone()).unwrap())
                .unwrap_or_default(),
            port: free_tcp_port(),
        });
    }
    out
}

/// One pipeline per program. A program is written as a JSON string, which YAML reads as a
/// double-quoted scalar: its text arrives byte for byte, tabs and line ends included.
fn config(programs: &[Program]) -> String {
    let mut sources = String::new();
    let mut transforms = String::new();
    let mut sinks = String::new();
    for p in programs {
        let id = &p.id;
        sources += &format!(
            "  in_{id}: {{ type: http_server, address: \"127.0.0.1:{}\" }}\n",
            p.port
        );
        transforms += &format!(
            "  {id}:\n    type: remap\n    inputs: [in_{id}]\n    source: {}\n",
            serde_json::to_string(&p.source).unwrap()
        );
        sinks += &format!(
            "  out_{id}: {{ type: file, inputs: [{id}], path: \"{{DIR}}/{id}.jsonl\", \
             encoding: json, flush_interval: 50ms }}\n"
        );
    }
    format!(
        "api: {{ address: \"127.0.0.1:{{API}}\" }}\n\
         sources:\n{sources}transforms:\n{transforms}sinks:\n{sinks}"
    )
}

/// POSTs `body` as `application/json` with `curl`; returns (status, response body).
fn post_json(port: u16, body: &std::path::Path) -> (u16, String) {
    let out = run_bounded(
        Command::new("curl")
            .args([
                "-s",
                "-S",
                "--max-time",
                "30",
                "-o",
                "-",
                "-w",
                "\n%{http_code}",
            ])
            .args(["-H", "Content-Type: application/json", "--data-binary"])
            .arg(format!("@{}", body.display()))
            .arg(format!("http://127.0.0.1:{port}/")),
        Duration::from_secs(40),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (answer, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), answer.to_owned())
}

/// One written line against its documented event; `Err` lists the keys that differ.
fn compare(p: &Program, want: &Value, got: &Value, received: (f64, f64)) -> Result<(), String> {
    let want = want
        .as_object()
        .ok_or("the documented event is no object")?;
    let mut got = got.as_object().ok_or("the line is no object")?.clone();
    let mut problems = Vec::new();
    if !want.contains_key("source_type") {
        match got.remove("source_type") {
            Some(t) if t == "http_server" => {}
            other => problems.push(format!("  source_type: {other:?}, not \"http_server\"")),
        }
    }
    if !want.contains_key("timestamp") {
        match got.remove("timestamp") {
            Some(Value::String(t)) => {
                let (at, _) = parse_rfc3339_utc(&t);
                // Whole seconds of slack: the clock's reading and the text's digits.
                if at < received.0 - 1.0 || at > received.1 + 1.0 {
                    problems.push(format!(
                        "  timestamp: {t} is not the receive time ({:.3} ..= {:.3})",
                        received.0, received.1
                    ));
                }
            }
            other => problems.push(format!("  timestamp: {other:?}, not the receive time")),
        }
    }
    let keys: std::collections::BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    for key in keys {
        let (w, g) = (want.get(key), got.get(key));
        // Documented timestamps are instants: the text may differ in its fractional digits.
        let same = match (w, g) {
            (Some(Value::String(w)), Some(Value::String(g)))
                if p.timestamp_paths.iter().any(|t| t == key) =>
            {
                parse_rfc3339_utc(w).0 == parse_rfc3339_utc(g).0
            }
            _ => w == g,
        };
        if !same {
            let show = |v: Option<&Value>| v.map_or("(absent)".to_owned(), Value::to_string);
            problems.push(format!(
                "  {key}:\n    documented {}\n    loghaul    {}",
                show(w),
                show(g)
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

#[test]
fn vrl_docs_programs_write_their_documented_events() {
    let programs = programs();
    // 14 in the corpus: 11 with one event, 2 that emit several, 1 that aborts.
    assert!(
        programs.len() >= 14,
        "only {} programs with an `output` in {CORPUS}",
        programs.len()
    );
    assert!(
        programs.iter().any(|p| p.aborted) && programs.iter().any(|p| p.output.len() > 1),
        "the corpus lost its aborting or its multi-event program"
    );
    let server = Server::start(&config(&programs));

    let first_request = now_unix();
    for p in &programs {
        let body = server.path(&format!("{}.body.json", p.id));
        fs::write(&body, serde_json::to_vec(&p.input).unwrap()).unwrap();
        let (code, answer) = post_json(p.port, &body);
        // Acknowledged: answered once the file sink committed (or the remap dropped) it.
        assert_eq!(code, 200, "{}: POST answered {code}: {answer}", p.file);
        let accepted: Value = serde_json::from_str(&answer)
            .unwrap_or_else(|e| panic!("{}: the answer is not JSON ({e}): {answer}", p.file));
        assert_eq!(accepted, serde_json::json!({"accepted": 1}), "{}", p.file);
    }
    let last_answer = now_unix();

    let mut failures = Vec::new();
    for p in &programs {
        let path = server.path(&format!("{}.jsonl", p.id));
        if p.aborted {
            server.wait_metric(DISCARDED, &p.id, Some("reason=\"program_dropped\""), 1);
            assert_eq!(server.metric(ERRORS, &p.id, Some("kind=\"program\"")), 1);
            let lines = read_lines(&path);
            if !lines.is_empty() {
                failures.push(format!("FAIL {}: aborted, yet written: {lines:?}", p.file));
            }
            continue;
        }
        let lines = wait_lines(&path, p.output.len(), ARRIVE_TIMEOUT);
        if lines.len() != p.output.len() {
            failures.push(format!(
                "FAIL {}: {} lines, documented {} events: {lines:?}",
                p.file,
                lines.len(),
                p.output.len()
            ));
            continue;
        }
        for (i, (want, got)) in p.output.iter().zip(&lines).enumerate() {
            if let Err(diff) = compare(p, want, got, (first_request, last_answer)) {
                failures.push(format!("FAIL {} (event {i}): {got}\n{diff}", p.file));
            }
        }
        assert_eq!(server.metric(ERRORS, &p.id, None), 0, "{}: errors", p.file);
    }
    assert!(
        failures.is_empty(),
        "{} of {} documented VRL programs write other events:\n\n{}",
        failures.len(),
        programs.len(),
        failures.join("\n\n")
    );
    server.finish();
}
