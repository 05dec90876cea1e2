//! The VRL programs of Vector's and VRL's documentation (`tests/data/vrl-docs/`, its README
//! says where each comes from) run through loghaul's own path, each compared with its
//! documented outcome.
//!
//! The path is a real one: the input event is decoded from its JSON by the decoder the
//! `http_server` source uses (so the batch holds records as a source makes them, `message`
//! lifted into the event), the program is compiled by loading a whole configuration (the
//! `remap` transform's validation), and it runs through [`Runner::run`] (returned values,
//! runtime errors) or [`remap_batch`] (events out, encoded by the JSON encoder every sink's
//! `encoding: json` uses). Every program is checked before the test fails, so one run lists
//! every failing file with a diff.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use loghaul_codec::http_body::{self, Format};
use loghaul_core::EventBatch;
use serde_json::{Map, Value as Json};
use vrl::value::Value as Vrl;

use super::{Outcome, Runner, convert};
use crate::config::testing::{load, transform};
use crate::metrics::{ComponentKind, ComponentMetrics, DiscardReason, ErrorKind};
use crate::transforms::TransformConfig;
use crate::transforms::remap::{RemapConfig, remap_batch};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/vrl-docs");

/// The source id the batches claim to come from (it shows in `%source_id`).
const SOURCE_ID: &str = "web";

/// Fewer programs than this means the corpus was not found or not read, not that it is small.
const AT_LEAST: usize = 130;

/// The keys a corpus file may have; anything else is a typo that would silently skip a check.
const KEYS: [&str; 12] = [
    "title",
    "source",
    "input",
    "output",
    "result",
    "error",
    "error_kind",
    "aborted",
    "emits_multiple_events",
    "timestamp_paths",
    "result_is_timestamp",
    "credit",
];

/// What a program is documented to do.
enum Documented<'a> {
    /// The event(s) after it ran (or after it aborted).
    Output(&'a Json),
    /// What it returned.
    Result(&'a Json),
    /// An error at run time, with VRL's text of it.
    Runtime(&'a str),
    /// An error at compile time, with VRL's rendering of it.
    Compile(&'a str),
}

/// One corpus file.
struct Example<'a> {
    source: &'a str,
    input: &'a Json,
    documented: Documented<'a>,
    aborted: bool,
    multiple: bool,
    timestamp_paths: Vec<&'a str>,
    result_is_timestamp: bool,
}

impl<'a> Example<'a> {
    fn parse(doc: &'a Json) -> Result<Example<'a>, String> {
        let obj = doc.as_object().ok_or("the file is not a JSON object")?;
        if let Some(k) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(format!("unknown key `{k}`"));
        }
        let source = obj
            .get("source")
            .and_then(Json::as_str)
            .ok_or("no `source` string")?;
        let input = obj.get("input").ok_or("no `input`")?;
        if !input.is_object() {
            return Err("`input` is not an object".to_owned());
        }
        let flag = |k: &str| obj.get(k).and_then(Json::as_bool).unwrap_or(false);
        // `result: null` is a documented outcome (`del(...)` of nothing): the key counts.
        let outcomes: Vec<&str> = ["output", "result", "error"]
            .into_iter()
            .filter(|k| obj.contains_key(*k))
            .collect();
        let documented = match (outcomes.as_slice(), obj.get("error_kind")) {
            (["output"], None) => Documented::Output(&obj["output"]),
            (["result"], None) => Documented::Result(&obj["result"]),
            (["error"], Some(kind)) => {
                let text = obj["error"].as_str().ok_or("`error` is not a string")?;
                match kind.as_str() {
                    Some("runtime") => Documented::Runtime(text),
                    Some("compile") => Documented::Compile(text),
                    _ => return Err(format!("unknown error_kind {kind}")),
                }
            }
            _ => {
                return Err(format!(
                    "needs exactly one of output/result/error (error with error_kind), \
                     has {outcomes:?}"
                ));
            }
        };
        let timestamp_paths = match obj.get("timestamp_paths") {
            None => Vec::new(),
            Some(Json::Array(paths)) => paths
                .iter()
                .map(|p| p.as_str().ok_or("a timestamp path is not a string"))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("`timestamp_paths` is not an array".to_owned()),
        };
        Ok(Example {
            source,
            input,
            documented,
            aborted: flag("aborted"),
            multiple: flag("emits_multiple_events"),
            timestamp_paths,
            result_is_timestamp: flag("result_is_timestamp"),
        })
    }
}

/// Every corpus file, `(file name, parsed JSON)`, sorted by name.
fn corpus() -> Vec<(String, Json)> {
    let mut files: Vec<_> = std::fs::read_dir(CORPUS)
        .unwrap_or_else(|e| panic!("read {CORPUS}: {e}"))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            let doc =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} is not JSON: {e}"));
            (name, doc)
        })
        .collect()
}

/// A configuration whose `remap` transform runs `source`, with the extra keys `options`. The
/// program is written as a JSON string, which is a YAML double-quoted scalar: its text arrives
/// byte for byte, tabs and line ends included.
fn remap_yaml(source: &str, options: &str) -> String {
    let quoted = serde_json::to_string(source).unwrap();
    transform(&format!("type: remap\nsource: {quoted}\n{options}"))
}

/// The `remap` transform `x` of a configuration that must load.
fn remap_config(yaml: &str) -> Result<RemapConfig, String> {
    let config = load(yaml).map_err(|e| format!("the configuration does not load:\n{e}"))?;
    match &config.transform("x").ok_or("no transform `x`")?.config {
        TransformConfig::Remap(r) => Ok(r.clone()),
        other => Err(format!("transform `x` is not a remap: {other:?}")),
    }
}

/// The batch the `http_server` source makes of a request whose body is `input`.
fn batch_of(input: &Json) -> Result<EventBatch, String> {
    let body = Bytes::from(serde_json::to_vec(input).unwrap());
    let batch = http_body::decode(body, Format::Json, None, &[], Arc::from(SOURCE_ID))
        .map_err(|e| format!("the HTTP source's decoder refuses the input: {e}"))?;
    match batch.len() {
        1 => Ok(batch),
        n => Err(format!("the input decodes to {n} events, not 1")),
    }
}

fn runner(config: &RemapConfig) -> Runner {
    Runner::new(super::timezone(config.timezone.as_deref()).unwrap())
}

fn metrics() -> Arc<ComponentMetrics> {
    ComponentMetrics::detached("x", ComponentKind::Transform, "remap")
}

fn timestamp(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("`{text}` is not an RFC 3339 timestamp: {e}"))
}

/// The documented value as VRL has it: JSON as serde maps it to a VRL value (integers stay
/// integers, floats floats), timestamps where the file says.
fn expected_vrl(ex: &Example<'_>, json: &Json) -> Result<Vrl, String> {
    if ex.result_is_timestamp {
        let text = json
            .as_str()
            .ok_or("the timestamp result is not a string")?;
        return Ok(Vrl::Timestamp(timestamp(text)?));
    }
    let mut value: Vrl = serde_json::from_value(json.clone()).map_err(|e| e.to_string())?;
    for path in &ex.timestamp_paths {
        let mut at = &mut value;
        for segment in path.split('.') {
            at = match at {
                Vrl::Object(obj) => obj
                    .get_mut(segment)
                    .ok_or_else(|| format!("no timestamp path {path}"))?,
                _ => return Err(format!("timestamp path {path} is not in an object")),
            };
        }
        let text = at
            .to_str_lossy()
            .ok_or_else(|| format!("{path} is not a string"))?
            .into_owned();
        *at = Vrl::Timestamp(timestamp(&text)?);
    }
    Ok(value)
}

/// loghaul's fields of an event that Vector's docs do not show, and the value each must have:
/// a `timestamp` (the batch's receive time, for events whose sender gave none) and
/// `source_type` (the source's type). Removed from loghaul's event only where the documented
/// event has no such key, and only when they have exactly that value; every other key must
/// match.
fn own_fields(batch: &EventBatch) -> [(&'static str, Vrl); 2] {
    [
        (
            "timestamp",
            Vrl::Timestamp(convert::datetime(batch.received)),
        ),
        ("source_type", Vrl::from(batch.source_type)),
    ]
}

/// The returned value, compared with the documented one. A program that returns its event
/// (`.`) returns loghaul's own fields with it ([`own_fields`]); one that returns its metadata
/// (`%`) returns what loghaul puts there (`source_id`, `source_type`, `received_at`: see
/// [`convert::metadata`] and docs/vrl.md), which Vector's docs show as `{}`. Both are
/// allowed for, each only with exactly loghaul's value and only for keys the documented
/// value does not have.
fn check_result(
    ex: &Example<'_>,
    want: &Json,
    batch: &EventBatch,
    event: &Vrl,
    result: Vrl,
) -> Result<(), String> {
    let want = expected_vrl(ex, want)?;
    let mut got = result;
    let metadata = convert::metadata(batch, &batch.events[0]);
    let allowed: Vec<(String, Vrl)> = if got == *event {
        own_fields(batch)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
    } else if let Vrl::Object(obj) = metadata
        && got == Vrl::Object(obj.clone())
    {
        obj.into_iter().map(|(k, v)| (k.into(), v)).collect()
    } else {
        Vec::new()
    };
    if let (Vrl::Object(got), Vrl::Object(want)) = (&mut got, &want) {
        for (key, value) in allowed {
            if !want.contains_key(key.as_str()) && got.get(key.as_str()) == Some(&value) {
                got.remove(key.as_str());
            }
        }
    }
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "returned value differs:\n{}",
            diff_vrl(&want, &got)
        ))
    }
}

/// The events of `batch` as the JSON lines `encoding: json` writes.
fn encoded(batch: &EventBatch) -> Result<Vec<Json>, String> {
    batch
        .events
        .iter()
        .map(|event| {
            let mut line = Vec::new();
            loghaul_codec::encode::encode_json(batch, event, &mut line);
            serde_json::from_slice(&line).map_err(|e| {
                format!(
                    "the encoder wrote no JSON ({e}): {}",
                    String::from_utf8_lossy(&line)
                )
            })
        })
        .collect()
}

/// One encoded event compared with its documented form: documented timestamps compared as
/// instants (the text may differ in its fractional digits), and [`own_fields`] allowed for in
/// their JSON form.
fn check_event(
    ex: &Example<'_>,
    want: &Json,
    mut got: Json,
    batch: &EventBatch,
) -> Result<(), String> {
    let Some(want_obj) = want.as_object() else {
        return Err(format!("the documented event is no object: {want}"));
    };
    let mut want_obj = want_obj.clone();
    let Json::Object(got_obj) = &mut got else {
        return Err(format!("the encoded event is no object: {got}"));
    };
    // The receive time as the encoder writes it (with the digits the receive time carries).
    let mut received = Vec::new();
    loghaul_codec::write_rfc3339(batch.received, &mut received);
    let received = String::from_utf8_lossy(&received);
    if !want_obj.contains_key("timestamp")
        && got_obj.get("timestamp").and_then(Json::as_str) == Some(&*received)
    {
        got_obj.remove("timestamp");
    }
    if !want_obj.contains_key("source_type")
        && got_obj.get("source_type") == Some(&Json::from(batch.source_type))
    {
        got_obj.remove("source_type");
    }
    for path in &ex.timestamp_paths {
        // Top-level keys only (the corpus has no other); a nested path stays text.
        canonical_timestamp(&mut want_obj, path);
        canonical_timestamp(got_obj, path);
    }
    if want_obj == *got_obj {
        Ok(())
    } else {
        Err(format!(
            "encoded event differs:\n{}",
            diff_json(&want_obj, got_obj)
        ))
    }
}

/// Rewrites an RFC 3339 string at `key` to one spelling of its instant.
fn canonical_timestamp(obj: &mut Map<String, Json>, key: &str) {
    if let Some(Json::String(text)) = obj.get(key)
        && let Ok(t) = timestamp(text)
    {
        let text = t.to_rfc3339_opts(SecondsFormat::Nanos, true);
        obj.insert(key.to_owned(), Json::String(text));
    }
}

/// `key: want ≠ got` for each key that differs.
fn diff_json(want: &Map<String, Json>, got: &Map<String, Json>) -> String {
    let keys: BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    let show = |v: Option<&Json>| v.map_or("(absent)".to_owned(), Json::to_string);
    keys.into_iter()
        .filter(|k| want.get(*k) != got.get(*k))
        .map(|k| {
            format!(
                "  {k}:\n    documented {}\n    loghaul    {}\n",
                show(want.get(k)),
                show(got.get(k))
            )
        })
        .collect()
}

/// As [`diff_json`], each value with its VRL type (`5` is an integer or a float).
fn diff_vrl(want: &Vrl, got: &Vrl) -> String {
    let show =
        |v: Option<&Vrl>| v.map_or("(absent)".to_owned(), |v| format!("{v} ({})", v.kind_str()));
    let (Vrl::Object(w), Vrl::Object(g)) = (want, got) else {
        return format!(
            "    documented {}\n    loghaul    {}\n",
            show(Some(want)),
            show(Some(got))
        );
    };
    let keys: BTreeSet<_> = w.keys().chain(g.keys()).collect();
    keys.into_iter()
        .filter(|k| w.get(*k) != g.get(*k))
        .map(|k| {
            format!(
                "  {k}:\n    documented {}\n    loghaul    {}\n",
                show(w.get(k)),
                show(g.get(k))
            )
        })
        .collect()
}

/// A compile error: the configuration must not load, and its error must be VRL's: the
/// message `VRL error[E…]: <VRL's message>…` (the documented rendering's first line) and,
/// as the hint, VRL's whole rendering of it, which is the documented text.
fn check_compile_error(ex: &Example<'_>, documented: &str) -> Result<(), String> {
    let yaml = remap_yaml(ex.source, "");
    let errors = match load(&yaml) {
        Ok(_) => return Err("the program compiles; VRL refuses it".to_owned()),
        Err(e) => e,
    };
    let documented = documented.trim();
    let headline = format!("VRL {}", documented.lines().next().unwrap_or_default());
    let Some(d) = errors
        .iter()
        .find(|d| d.is_error() && d.message.starts_with(&headline))
    else {
        return Err(format!("no error starting `{headline}`; got:\n{errors}"));
    };
    // The one line the configuration holds the program on, as `    source: "…"`: the program's
    // character C (1-based) is at column 13 + C while nothing before it is escaped.
    let line = yaml
        .lines()
        .position(|l| l.starts_with("    source: "))
        .unwrap()
        + 1;
    let column = documented_column(documented)
        .filter(|c| {
            let before: String = ex.source.chars().take(c.saturating_sub(1)).collect();
            serde_json::to_string(&before).unwrap().len() == before.len() + 2
        })
        .map(|c| 13 + c);
    if d.line != Some(line) || (column.is_some() && d.column != column) {
        let show = |n: Option<usize>| n.map_or("?".to_owned(), |n| n.to_string());
        return Err(format!(
            "the error is at {}:{}, not at the program's {line}:{}",
            show(d.line),
            show(d.column),
            show(column)
        ));
    }
    match d.hint.as_deref().map(str::trim) {
        Some(hint) if hint == documented => Ok(()),
        hint => Err(format!(
            "the hint is not VRL's rendering:\n--- documented ---\n{documented}\n\
             --- loghaul ---\n{}",
            hint.unwrap_or("(none)")
        )),
    }
}

/// The column of a rendering's `┌─ :1:C` (a diagnostic on the program's first line).
fn documented_column(rendering: &str) -> Option<usize> {
    let at = rendering.lines().nth(1)?.trim().strip_prefix("┌─ :1:")?;
    at.parse().ok()
}

/// Runs one program; `Err` says how it differs from its documentation.
fn check(ex: &Example<'_>) -> Result<(), String> {
    if let Documented::Compile(text) = ex.documented {
        return check_compile_error(ex, text);
    }
    let config = remap_config(&remap_yaml(ex.source, ""))?;
    let batch = batch_of(ex.input)?;
    let event = &batch.events[0];
    match ex.documented {
        Documented::Compile(_) => unreachable!("checked above"),
        Documented::Result(want) => match runner(&config).run(&config.program, &batch, event) {
            Outcome::Done { event, result } => check_result(ex, want, &batch, &event, result),
            Outcome::Aborted(e) => Err(format!("aborted ({e}); it returns {want}")),
            Outcome::Failed(e) => Err(format!("failed ({e}); it returns {want}")),
        },
        Documented::Runtime(want) => match runner(&config).run(&config.program, &batch, event) {
            Outcome::Failed(got) if got.trim() == want.trim() => Ok(()),
            Outcome::Failed(got) => Err(format!(
                "failed with another error:\n    documented {want}\n    loghaul    {got}"
            )),
            Outcome::Aborted(e) => Err(format!("aborted ({e}); it fails with {want}")),
            Outcome::Done { result, .. } => Err(format!("returned {result}; it fails with {want}")),
        },
        Documented::Output(want) if ex.aborted => check_aborted(ex, want, &config, &batch),
        Documented::Output(want) => {
            let metrics = metrics();
            let done = remap_batch(&config, "x", &mut runner(&config), &batch, &metrics);
            if metrics.errors(ErrorKind::Program) != 0 || done.discarded != 0 {
                return Err(format!(
                    "{} program errors, {} events discarded; expected none",
                    metrics.errors(ErrorKind::Program),
                    done.discarded
                ));
            }
            let wants: Vec<&Json> = match want {
                Json::Array(items) if ex.multiple => items.iter().collect(),
                _ if ex.multiple => return Err("emits_multiple_events without an array".into()),
                one => vec![one],
            };
            let got = encoded(&done.out)?;
            if got.len() != wants.len() {
                return Err(format!(
                    "{} events out, documented {}: {got:?}",
                    got.len(),
                    wants.len()
                ));
            }
            let mut errors = Vec::new();
            for (i, (want, got)) in wants.into_iter().zip(got).enumerate() {
                if let Err(e) = check_event(ex, want, got, &done.out) {
                    errors.push(format!("event {i}: {e}"));
                }
            }
            if errors.is_empty() {
                Ok(())
            } else {
                Err(errors.join("\n"))
            }
        }
    }
}

/// `abort`: the program aborts; by default (`drop_on_abort: true`) the event is dropped and
/// counted, and with `drop_on_abort: false` it goes on as it came, which is the documented
/// event.
fn check_aborted(
    ex: &Example<'_>,
    want: &Json,
    config: &RemapConfig,
    batch: &EventBatch,
) -> Result<(), String> {
    let event = &batch.events[0];
    if let outcome @ (Outcome::Done { .. } | Outcome::Failed(_)) =
        runner(config).run(&config.program, batch, event)
    {
        let what = match outcome {
            Outcome::Failed(e) => format!("failed ({e})"),
            _ => "ran to its end".to_owned(),
        };
        return Err(format!("{what}; it aborts"));
    }
    if !config.drop_on_abort {
        return Err("`drop_on_abort` is not on by default".to_owned());
    }
    let metrics = metrics();
    let done = remap_batch(config, "x", &mut runner(config), batch, &metrics);
    if !done.out.is_empty() || done.discarded != 1 {
        return Err(format!(
            "by default: {} events out and {} discarded; expected the event dropped",
            done.out.len(),
            done.discarded
        ));
    }
    if metrics.discarded_count(DiscardReason::ProgramDropped) != 0 {
        // remap_batch reports `discarded` for its caller to count; it counts nothing itself.
        return Err("remap_batch counted the drop itself".to_owned());
    }
    let kept = remap_config(&remap_yaml(ex.source, "drop_on_abort: false"))?;
    let done = remap_batch(&kept, "x", &mut runner(&kept), batch, &metrics);
    let got = encoded(&done.out)?;
    match got.as_slice() {
        [one] => check_event(ex, want, one.clone(), &done.out)
            .map_err(|e| format!("with drop_on_abort: false, {e}")),
        _ => Err(format!(
            "with drop_on_abort: false, {} events out; expected the event unchanged",
            got.len()
        )),
    }
}

#[test]
fn every_documented_vrl_program_has_its_documented_outcome() {
    let corpus = corpus();
    let mut failures = Vec::new();
    let mut kinds = BTreeSet::new();
    for (name, doc) in &corpus {
        let outcome = Example::parse(doc).and_then(|ex| {
            kinds.insert(match ex.documented {
                Documented::Output(_) if ex.aborted => "aborted",
                Documented::Output(_) if ex.multiple => "multiple events",
                Documented::Output(_) => "output",
                Documented::Result(_) => "result",
                Documented::Runtime(_) => "runtime error",
                Documented::Compile(_) => "compile error",
            });
            check(&ex)
        });
        if let Err(why) = outcome {
            failures.push(format!("FAIL {name}: {why}"));
        }
    }
    assert!(
        corpus.len() >= AT_LEAST,
        "only {} programs in {CORPUS}; the corpus has 134",
        corpus.len()
    );
    // Each way of checking ran at least once, so none of them can be lost without notice.
    assert_eq!(
        kinds.len(),
        6,
        "outcome kinds seen: {kinds:?} (expected output, aborted, multiple events, result, \
         runtime error, compile error)"
    );
    assert!(
        failures.is_empty(),
        "{} of {} documented VRL programs differ in loghaul:\n\n{}",
        failures.len(),
        corpus.len(),
        failures.join("\n\n")
    );
}
